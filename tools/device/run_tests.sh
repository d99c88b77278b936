#!/usr/bin/env bash
# tools/device/run_tests.sh: build with CUDA and run the tests on a GPU machine
# that has no network (README, "On a GPU machine without network").
#
# Needs .deps/*.deb, fetched by tools/device/fetch_deps.sh on a connected
# machine and copied here with the repository. Unpacks them into a private
# folder (no root, nothing installed), configures build-device/ with CUDA on,
# builds with every core, runs ctest and keeps the full logs.
usage() {
    cat <<'USAGE'
usage: tools/device/run_tests.sh [options] [-- command]
  --tests REGEX    run only the tests matching REGEX (ctest -R)
  --label L        run only the tests labelled L: cpu or cuda (ctest -L)
  --no-tests       build only
  --target T       build only target T (repeatable; default: everything)
  --log-dir DIR    where build.log, ctest.log and gpu.txt go
                   (default: $PRISM_LOG_DIR, else build-device/logs)
  --help           this text
After `--`, the rest runs as a shell command once the build is done, with the
unpacked libraries on LD_LIBRARY_PATH, e.g.
  tools/device/run_tests.sh --no-tests -- build-device/prism bench recurrence
USAGE
}
set -uo pipefail
cd "$(dirname "$0")/../.."
log_dir=${PRISM_LOG_DIR:-build-device/logs}
tests_regex="" label="" run_tests=1 targets=() extra=()
while [ $# -gt 0 ]; do
    case "$1" in
    --tests) tests_regex="$2"; shift 2 ;;
    --label) label="$2"; shift 2 ;;
    --no-tests) run_tests=0; shift ;;
    --target) targets+=("--target" "$2"); shift 2 ;;
    --log-dir) log_dir="$2"; shift 2 ;;
    --help | -h) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run_tests.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done

mkdir -p "$log_dir"
. tools/device/deps.sh
prism_deps run_tests.sh || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$log_dir/gpu.txt"

cmake -S . -B build-device -DPRISM_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INCLUDE_PATH="$deps/usr/include" \
    -DCMAKE_LIBRARY_PATH="$libdir;$libdir/openblas-pthread" \
    >"$log_dir/build.log" 2>&1 \
    && cmake --build build-device -j"$(nproc)" "${targets[@]}" >>"$log_dir/build.log" 2>&1
rc=$?
grep -E "error|warning" "$log_dir/build.log" | head -40
if [ $rc -ne 0 ]; then echo "run_tests.sh: build failed (rc $rc)"; tail -40 "$log_dir/build.log"; exit $rc; fi
echo "run_tests.sh: build ok"

if [ $run_tests -eq 1 ]; then
    args=(--test-dir build-device --output-on-failure --timeout 600)
    [ -n "$tests_regex" ] && args+=(-R "$tests_regex")
    [ -n "$label" ] && args+=(-L "$label")
    ctest "${args[@]}" >"$log_dir/ctest.log" 2>&1
    rc=$?
    grep -E "Passed|Failed|Skipped|tests passed|tests failed|\*\*\*" "$log_dir/ctest.log" | tail -60
fi
if [ ${#extra[@]} -gt 0 ]; then
    bash -c "${extra[*]}"
    rc2=$?
    [ $rc -eq 0 ] && rc=$rc2
fi
exit $rc
