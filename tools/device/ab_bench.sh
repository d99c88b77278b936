#!/usr/bin/env bash
# tools/device/ab_bench.sh: time one prism command on two builds in one
# invocation, alternating, so that a kernel change is measured against the
# code before it on the same GPU (runs of the same code differ by up to
# ~0.3 ms between machine starts; NOTES.md v22).
usage() {
    cat <<'USAGE'
usage: tools/device/ab_bench.sh --old DIR [--rounds N] [--grep REGEX] -- prism-args...
  --old DIR      the source tree to compare against ("old"), e.g. made with
                   mkdir -p .deps/old && git archive HEAD | tar -x -C .deps/old
                 (.deps/ travels with the repository, git ignores it)
  --rounds N     old, new, old, new, ... N times each (default 2)
  --grep REGEX   print only the output lines that match (default: all)
  --help         this text
Builds prism_cli from DIR into build-old/ and from this tree into
build-device/ (both CUDA, Release, side by side with half the cores each),
with the packages of .deps/ unpacked as tools/device/run_tests.sh does, then
runs `build-old/prism ARGS` and `build-device/prism ARGS` in turn, e.g.
  tools/device/ab_bench.sh --old .deps/old --grep '^ *gdn ' -- \
      bench recurrence --size 1 --no-token --rules gdn
USAGE
}
set -uo pipefail
cd "$(dirname "$0")/../.."
old="" rounds=2 pattern=""
while [ $# -gt 0 ]; do
    case "$1" in
    --old) old="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --grep) pattern="$2"; shift 2 ;;
    --help | -h) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "ab_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$old" ] || { echo "ab_bench.sh: --old DIR is required (see --help)" >&2; exit 2; }
[ -f "$old/CMakeLists.txt" ] || { echo "ab_bench.sh: $old has no CMakeLists.txt: not a source tree" >&2; exit 2; }
[ $# -gt 0 ] || { echo "ab_bench.sh: nothing to run: give prism's arguments after --" >&2; exit 2; }
case "$rounds" in '' | *[!0-9]* | 0) echo "ab_bench.sh: --rounds must be a whole number >= 1, got '$rounds'" >&2; exit 2 ;; esac

. tools/device/deps.sh
prism_deps ab_bench.sh || exit 2
jobs=$(( ($(nproc) + 1) / 2 ))
build() { # source dir, build dir
    cmake -S "$1" -B "$2" -DPRISM_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_INCLUDE_PATH="$deps/usr/include" \
        -DCMAKE_LIBRARY_PATH="$libdir;$libdir/openblas-pthread" >"$2/ab_build.log" 2>&1 &&
        cmake --build "$2" -j"$jobs" --target prism_cli >>"$2/ab_build.log" 2>&1
}
mkdir -p build-old build-device
build "$old" build-old & pid_old=$!
build . build-device & pid_new=$!
wait $pid_old || { echo "ab_bench.sh: the old build failed (build-old/ab_build.log):"; tail -20 build-old/ab_build.log; exit 1; }
wait $pid_new || { echo "ab_bench.sh: the new build failed (build-device/ab_build.log):"; tail -20 build-device/ab_build.log; exit 1; }
for ((i = 1; i <= rounds; i++)); do
    for b in build-old build-device; do
        echo "== round $i: $b"
        if [ -n "$pattern" ]; then "$b/prism" "$@" 2>&1 | grep -E "$pattern"; else "$b/prism" "$@" 2>&1; fi
    done
done
