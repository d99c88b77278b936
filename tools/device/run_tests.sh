#!/usr/bin/env bash
# tools/device/run_tests.sh: run ON THE GPU MACHINE (the `run` tool), from the repo root.
#
#   here:   tools/device/fetch_deps.sh            (once; fills .deps/)
#   device: run(command="tools/device/run_tests.sh [options] [-- extra command]", carry=[".deps"])
#
# Unpacks .deps/*.deb into /tmp/deps, configures build-device/ with CUDA on
# (sm_90), builds with all cores, runs ctest and writes logs under $OUT.
# Options:
#   --tests REGEX   ctest -R REGEX (default: every test)
#   --label L       ctest -L L (cpu or cuda)
#   --no-tests      build only
#   --target T      build only target T (repeatable; default: all)
# After `--`, the rest runs as a shell command once the build is done, with
# LD_LIBRARY_PATH set (e.g. -- build-device/prism golden-check ... ).
# The build and test logs land in $OUT/build.log and $OUT/ctest.log. PRISM_GOLDEN
# points at .deps/golden/recurrences.safetensors (fetch_deps.sh copies it there).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
tests_regex="" label="" run_tests=1 targets=() extra=()
while [ $# -gt 0 ]; do
    case "$1" in
    --tests) tests_regex="$2"; shift 2 ;;
    --label) label="$2"; shift 2 ;;
    --no-tests) run_tests=0; shift ;;
    --target) targets+=("--target" "$2"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run_tests.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

deps=/tmp/deps
if [ ! -d "$deps/usr" ]; then
    ls .deps/*.deb >/dev/null 2>&1 || { echo "run_tests.sh: no .deps/*.deb: run tools/device/fetch_deps.sh here and carry .deps" >&2; exit 2; }
    for f in .deps/*.deb; do dpkg -x "$f" "$deps"; done
fi
libdir=$deps/usr/lib/x86_64-linux-gnu
[ -f .deps/golden/recurrences.safetensors ] && export PRISM_GOLDEN=$PWD/.deps/golden/recurrences.safetensors
export LD_LIBRARY_PATH=$libdir:$libdir/openblas-pthread:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"

cmake -S . -B build-device -DPRISM_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INCLUDE_PATH="$deps/usr/include" \
    -DCMAKE_LIBRARY_PATH="$libdir;$libdir/openblas-pthread" \
    ${PRISM_GOLDEN:+-DPRISM_GOLDEN_FILE="$PRISM_GOLDEN"} >"$OUT/build.log" 2>&1 \
    && cmake --build build-device -j"$(nproc)" "${targets[@]}" >>"$OUT/build.log" 2>&1
rc=$?
grep -E "error|warning" "$OUT/build.log" | head -40
if [ $rc -ne 0 ]; then echo "run_tests.sh: build failed (rc $rc)"; tail -40 "$OUT/build.log"; exit $rc; fi
echo "run_tests.sh: build ok"

if [ $run_tests -eq 1 ]; then
    args=(--test-dir build-device --output-on-failure --timeout 600)
    [ -n "$tests_regex" ] && args+=(-R "$tests_regex")
    [ -n "$label" ] && args+=(-L "$label")
    ctest "${args[@]}" >"$OUT/ctest.log" 2>&1
    rc=$?
    grep -E "Passed|Failed|Skipped|tests passed|tests failed|\*\*\*" "$OUT/ctest.log" | tail -60
fi
if [ ${#extra[@]} -gt 0 ]; then
    bash -c "${extra[*]}"
    rc2=$?
    [ $rc -eq 0 ] && rc=$rc2
fi
exit $rc
