#!/bin/sh
# tools/fuzz.sh: coverage-guided fuzzing of prism's readers with libFuzzer
# (clang, -fsanitize=fuzzer,address,undefined). See tests/fuzz/README.md.
set -eu

TARGETS="safetensors config fla data rundir"

usage() {
    cat <<USAGE
usage: tools/fuzz.sh TARGET|all SECONDS [libFuzzer options...]

Builds the libFuzzer programs in build-fuzz/ (clang, ASan + UBSan, CPU only)
and runs TARGET (or every target in turn) for SECONDS each, starting from
the seed corpus in tests/fuzz/corpus/TARGET. Targets:
  safetensors  the safetensors reader (any bytes as a file)
  config       model and run config JSON, and key=value lines (--set)
  fla          fla's config.json as convert --from-fla reads it
  data         the Amazon / Yelp loaders (first byte: format) and the lm text loader
  rundir       a run folder read back: latest, state and weights files, config.json
New inputs go to build-fuzz/corpus/TARGET (not the repository); a crash is
written to build-fuzz/crashes/TARGET/ and the script exits 1 naming it. To
keep it as a regression test, fix the bug, then copy the file into
tests/fuzz/corpus/TARGET/ (ctest's fuzz_TARGET_replay replays that folder).
Prints the executions each target ran. Exit 0: nothing found; 1: a crash;
2: a bad command line; 77: clang or its libFuzzer runtime is missing.
USAGE
}

case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
target=$1 seconds=$2
shift 2
case "$seconds" in ''|*[!0-9]*) echo "tools/fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;; esac
if [ "$target" = all ]; then list=$TARGETS; else
    case " $TARGETS " in *" $target "*) list=$target ;;
    *) echo "tools/fuzz.sh: unknown target '$target' (allowed: all $TARGETS)" >&2; exit 2 ;; esac
fi

root=$(cd "$(dirname "$0")/.." && pwd)
build=${PRISM_FUZZ_BUILD:-$root/build-fuzz}
cc=${CC_FUZZ:-clang}
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "tools/fuzz.sh: skipped: no $cc (tools/setup.sh installs clang and libclang-rt-dev)" >&2
    exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
    echo "tools/fuzz.sh: skipped: $cc cannot link libFuzzer (libclang_rt.fuzzer missing; on Debian:" \
         "apt-get install libclang-rt-dev, or libclang-rt-14-dev with clang 14)" >&2
    exit 77
fi

jobs=${PRISM_FUZZ_JOBS:-2}
mkdir -p "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
    CC=$cc cmake -S "$root" -B "$build" -DPRISM_CUDA=OFF -DPRISM_TESTS=OFF -DPRISM_SANITIZE=ON -DPRISM_FUZZ=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/build.log" 2>&1 || { cat "$build/build.log" >&2; exit 1; }
fi
for t in $list; do
    cmake --build "$build" --target "fuzz_$t" -j "$jobs" >"$build/build.log" 2>&1 ||
        { cat "$build/build.log" >&2; exit 1; }
done

found=0
for t in $list; do
    mkdir -p "$build/corpus/$t" "$build/crashes/$t"
    log=$build/fuzz_$t.log
    # leaks are reported too (LeakSanitizer); 2 GB and 10 s per input are the limits of a sane reader
    shm=/tmp
    [ -d /dev/shm ] && [ -w /dev/shm ] && shm=/dev/shm
    scratch=$(mktemp -d "$shm/prism_fuzz_$t.XXXXXX")   # the target's files (tests/fuzz/fuzz.h)
    dict=$root/tests/fuzz/$t.dict   # the format's words, which random bytes rarely spell
    dictopt=
    [ -f "$dict" ] && dictopt=-dict=$dict
    set +e
    (cd "$build" && PRISM_FUZZ_TMP=$scratch UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "./fuzz_$t" -max_total_time="$seconds" \
        -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
        -artifact_prefix="$build/crashes/$t/" ${dictopt:+"$dictopt"} "$@" "$build/corpus/$t" "$root/tests/fuzz/corpus/$t") >"$log" 2>&1
    rc=$?
    set -e
    rm -rf "$scratch"
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ $rc -eq 0 ]; then
        echo "fuzz $t: ${runs:-?} executions in ${seconds} s, ${cov:-cov: ?}, nothing found"
    else
        found=1
        crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        echo "fuzz $t: FOUND a failure after ${runs:-?} executions: ${crash:-see $log}"
        grep -m1 -E 'ERROR: |runtime error|SUMMARY' "$log" || tail -20 "$log"
    fi
done
exit $found
