#!/usr/bin/env bash
# tools/device/pack.sh: run on the machine WITH network (and nvcc), before a
# sitting on a GPU machine that has none (README, "On a GPU machine without
# network"). Building every CUDA kernel there costs most of a sitting; so
# build here once, and carry the stripped, xz'd binaries, the runtime .debs
# and, if asked, flash-linear-attention's package in one git-ignored folder.
# tools/device/carried.sh unpacks it there; tools/device/sitting.sh runs the
# measurements on it.
usage() {
    cat <<'USAGE'
usage: tools/device/pack.sh [options]
  --build DIR     a configured CUDA build folder (default build/, configured
                  with -DPRISM_CUDA=ON, and best -DPRISM_LINK_SHARED=ON: then
                  the programs share one libprism.so); its targets are built first
  --target T      a target to build and carry (repeatable; default prism_cli
                  alone), e.g. --target prism_cli --target test_cuda_bf16
  --tests GLOB    also every test program tests/GLOB.c names, e.g. --tests
                  'test_cuda_*' (repeatable)
  --no-build      carry what DIR already holds (no cmake --build)
  --jobs N        cmake --build -jN (default: every core)
  --into DIR      the carry folder (default .carry/; git should ignore it)
  --fla           also carry flash-linear-attention's fla/ package, from
  --fla-src DIR   DIR/fla (default .deps/fla-src; implies --fla): a checkout,
                  or a folder holding only fla/, e.g. from a bare mirror
                    mkdir -p .deps/fla-src && git --git-dir=MIRROR archive HEAD fla |
                        tar -x -C .deps/fla-src && git --git-dir=MIRROR rev-parse HEAD >.deps/fla-src/COMMIT
  --max-mib N     fail when the folder is over N MiB (default 60)
  --help          this text
Writes DIR/bin/NAME.xz (each binary stripped, xz -6), DIR/lib/NAME.xz (the
libraries of the build they load: libprism.so.0 in a -DPRISM_LINK_SHARED=ON
build, where the kernels are in it once for every program), DIR/debs/ (the runtime
packages libopenblas0-pthread, libcjson1, libcmocka0 from .deps/, which
tools/device/fetch_deps.sh downloads), DIR/fla-pkg/fla.tar.xz with --fla, and
DIR/manifest.txt (the commit, the build's source path, the binaries' needs),
DIR/golden.txt with prism (the build's CUDA golden-check commands, as ctest
runs them, for sitting.sh --phases golden), then prints the sizes. On the GPU machine, with DIR carried:
  tools/device/sitting.sh            # or, in a script: . tools/device/carried.sh; prism_carried NAME
USAGE
}
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=build into=.carry jobs=$(nproc) do_build=1 fla=0 fla_src=.deps/fla-src max_mib=60 targets=() globs=()
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build="$2"; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    --tests) globs+=("$2"); shift 2 ;;
    --no-build) do_build=0; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --into) into="$2"; shift 2 ;;
    --fla) fla=1; shift ;;
    --fla-src) fla=1; fla_src="$2"; shift 2 ;;
    --max-mib) max_mib="$2"; shift 2 ;;
    --help | -h) usage; exit 0 ;;
    *) echo "pack.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
die() { echo "pack.sh: $*" >&2; exit 1; }
for n in "$jobs" "$max_mib"; do
    case "$n" in '' | *[!0-9]* | 0) echo "pack.sh: --jobs and --max-mib take a whole number >= 1, got '$n'" >&2; exit 2 ;; esac
done
[ ${#targets[@]} -gt 0 ] || [ ${#globs[@]} -gt 0 ] || targets=(prism_cli)
# the test programs are named after their sources (CMakeLists.txt: tests/test_*.c)
for g in "${globs[@]}"; do
    n0=${#targets[@]}
    for src in tests/test_*.c; do
        name=$(basename "$src" .c)
        # shellcheck disable=SC2053 # the glob is meant to match
        [[ $name == $g ]] && targets+=("$name")
    done
    [ ${#targets[@]} -gt "$n0" ] || { echo "pack.sh: --tests '$g' names no tests/test_*.c" >&2; exit 2; }
done
[ -f "$build/CMakeCache.txt" ] || { echo "pack.sh: $build is not a configured build folder (cmake -S . -B $build -DPRISM_CUDA=ON -DCMAKE_BUILD_TYPE=Release)" >&2; exit 2; }
if [ $fla -eq 1 ] && [ ! -f "$fla_src/fla/__init__.py" ]; then
    echo "pack.sh: no $fla_src/fla/__init__.py: give --fla-src the folder that holds flash-linear-attention's fla/ (see --help)" >&2
    exit 2
fi
# the runtime packages only: the -dev ones are for building, which the GPU machine no longer does
debs=()
for p in libopenblas0-pthread libcjson1 libcmocka0; do
    f=$(ls .deps/"${p}"_*.deb 2>/dev/null | head -1)
    [ -n "$f" ] || die "no .deps/${p}_*.deb: run tools/device/fetch_deps.sh first (it needs network)"
    debs+=("$f")
done
# the folder is emptied before packing, so make sure it is one of ours
if [ -d "$into" ] && [ -n "$(ls -A "$into")" ] && [ ! -f "$into/manifest.txt" ]; then
    die "$into exists, is not empty and has no manifest.txt: not a folder pack.sh made; give another --into"
fi
git check-ignore -q "$into" 2>/dev/null ||
    echo "pack.sh: warning: git does not ignore $into: it will travel as untracked files, not as a carried path"

if [ $do_build -eq 1 ]; then
    echo "pack.sh: building ${targets[*]} in $build (-j$jobs; log $build/pack-build.log)"
    cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$build/pack-build.log" 2>&1 ||
        { tail -30 "$build/pack-build.log"; die "the build failed ($build/pack-build.log)"; }
fi

for d in bin lib debs fla-pkg manifest.txt golden.txt; do rm -rf "${into:?}/$d"; done
mkdir -p "$into/bin" "$into/lib" "$into/debs" || die "cannot create $into"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
manifest=$into/manifest.txt
{
    echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
    # a build of uncommitted changes: say so, the commit alone would not
    echo "dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "build_dir=$build"
    # the tests read their data from the source path compiled into them (tests/pr_test.h)
    echo "source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
} >"$manifest"
needs() { readelf -d "$1" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'; }
pack_one() { # file, output.xz, strip options
    local f=$1 o=$2
    shift 2
    strip "$@" -o "$tmp" "$f" || die "strip $f failed"
    xz -T2 -6 -c "$tmp" >"$o" || die "xz $f failed"
}
names=() libs=() cuda=0
for t in "${targets[@]}"; do
    name=$t
    [ "$t" = prism_cli ] && name=prism   # the command's file is named prism (CMakeLists.txt)
    bin=$build/$name
    [ -x "$bin" ] || die "no $bin: build target $t first (or drop --no-build)"
    pack_one "$bin" "$into/bin/$name.xz"
    echo "needs_$name=$(needs "$bin" | tr '\n' ' ')" >>"$manifest"
    needs "$bin" | grep -q '^libcudart' && cuda=1
    # a library the build made (libprism.so.0 when linked shared) travels with it, once
    for l in $(needs "$bin"); do
        if [ -e "$build/$l" ] && [[ " ${libs[*]} " != *" $l "* ]]; then libs+=("$l"); fi
    done
    names+=("$name")
done
for l in "${libs[@]}"; do
    pack_one "$(readlink -f "$build/$l")" "$into/lib/$l.xz" --strip-unneeded
    needs "$build/$l" | grep -q '^libcudart' && cuda=1
done
[ $cuda -eq 1 ] || echo "pack.sh: warning: nothing here loads libcudart: a CPU-only build (configure $build with -DPRISM_CUDA=ON)"
echo "binaries=${names[*]}" >>"$manifest"
# the CUDA golden checks ctest holds (CMakeLists.txt), for sitting.sh's golden
# phase: the prism binary named `prism`, paths from the source root
if [[ " ${names[*]} " == *" prism "* ]]; then
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
    ctest --test-dir "$build" -N -V -L cuda -R '^prism_golden' 2>/dev/null |
        sed -n 's/^[0-9]*: Test command: //p' | sed "s#^[^ ]* #prism #; s#\"$src/#\"#g" >"$into/golden.txt"
    echo "golden_checks=$(wc -l <"$into/golden.txt")" >>"$manifest"
fi
echo "libraries=${libs[*]}" >>"$manifest"
cp "${debs[@]}" "$into/debs/" || die "cannot copy the .debs"
if [ $fla -eq 1 ]; then
    mkdir -p "$into/fla-pkg"
    # only the package: fla's tests, benchmarks and examples stay behind; xz'd,
    # it is ~0.7 MiB where the plain folder is ~6 MiB of the copy's 64
    tar -C "$fla_src" --exclude=__pycache__ --exclude='*.pyc' -cf - fla | xz -T2 -6 >"$into/fla-pkg/fla.tar.xz" ||
        die "cannot pack $fla_src/fla"
    rev=unknown
    if [ -f "$fla_src/COMMIT" ]; then rev=$(head -c 40 "$fla_src/COMMIT")
    elif [ -e "$fla_src/.git" ]; then rev=$(git -C "$fla_src" rev-parse HEAD 2>/dev/null || echo unknown)
    fi
    echo "fla=$rev" >>"$manifest"
fi

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
find "$into" -type f -printf '%s\t%p\n' | sort -k2 | while IFS=$'\t' read -r size path; do
    printf '%8s MiB  %s\n' "$(mib "$size")" "$path"
done
total=$(find "$into" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
# what else travels with it: the tracked files and the untracked ones git does not ignore
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) 2>/dev/null | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "pack.sh: $into holds $(mib "$total") MiB (limit $max_mib); with the working tree's $(mib "${tree:-0}") MiB the copy is $(mib $((total + ${tree:-0}))) MiB"
if [ "$total" -gt $((max_mib * 1048576)) ]; then
    die "$into is $(mib "$total") MiB, over --max-mib $max_mib: carry fewer targets (each binary holds every kernel)"
fi
echo "pack.sh: carry '$into' and run tools/device/sitting.sh there"
