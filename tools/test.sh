#!/usr/bin/env bash
# tools/test.sh: build and run every test.
#  1. build-asan/: CPU-only, AddressSanitizer + UBSan + LeakSanitizer, every CPU test.
#  2. build-fuzz/: every libFuzzer target of tests/fuzz for PRISM_FUZZ_SECONDS
#     (default 24: with the clang build, about 4 minutes on 2 cores) each under
#     ASan + UBSan; skipped, saying so, without clang's libFuzzer
#     (tools/setup.sh installs it).
#  3. build/: the CUDA backend wherever nvcc is (PRISM_CUDA=ON: its compile and
#     PTX checks need no GPU, though the default configure leaves CUDA out on a
#     machine without one), the CUDA tests (each skips, saying so, when no GPU
#     is present) and the install test.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

cmake -S . -B build-asan -DPRISM_CUDA=OFF -DPRISM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure -L cpu -j"$jobs"   # the tests are sized for -j2 on two cores

fuzz_rc=0
PRISM_FUZZ_JOBS=$jobs tools/fuzz.sh all "${PRISM_FUZZ_SECONDS:-24}" || fuzz_rc=$?
if [ "$fuzz_rc" -eq 77 ]; then echo "test.sh: fuzzing skipped (see the line above)"
elif [ "$fuzz_rc" -ne 0 ]; then exit "$fuzz_rc"; fi

cuda=AUTO
if [ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_PATH:-/nonexistent}/bin/nvcc" ] ||
    [ -x /usr/local/cuda/bin/nvcc ]; then
    cuda=ON
fi
cmake -S . -B build -DPRISM_CUDA=$cuda >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -L "cuda|install"
