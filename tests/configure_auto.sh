#!/bin/sh
# tests/configure_auto.sh: the default configure (PRISM_CUDA=AUTO) builds the
# CUDA backend only where a GPU can run it; with nvcc but no GPU it is
# CPU-only, so the README's first command does not spend ~20 minutes on
# kernels it cannot run. PRISM_CUDA=ON still builds them (tools/test.sh).
#
#   sh tests/configure_auto.sh SOURCE_DIR [CMAKE_ARG]...   (the outer build's search paths)
src=${1:?usage: configure_auto.sh SOURCE_DIR [CMAKE_ARG]...}
shift
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
gpu=0
if [ -e /dev/nvidia0 ] || { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "GPU [0-9]"; }; then
    gpu=1
fi
nvcc=0
# where CMakeLists.txt looks for it
for n in "$(command -v nvcc 2>/dev/null)" "${CUDACXX:-}" "${CUDA_PATH:+$CUDA_PATH/bin/nvcc}" \
    "${CUDAToolkit_ROOT:+$CUDAToolkit_ROOT/bin/nvcc}" /usr/local/cuda/bin/nvcc; do
    if [ -n "$n" ] && [ -x "$n" ]; then nvcc=1; fi
done
out=$(cmake -S "$src" -B "$tmp/b" -DPRISM_TESTS=OFF "$@" 2>&1) || { echo "$out" | tail -n 20; echo "FAIL  configure"; exit 1; }
want="prism: CUDA backend OFF"
[ $gpu = 1 ] && [ $nvcc = 1 ] && want="prism: CUDA backend ON"
case $out in
*"$want"*) echo "ok    nvcc $nvcc, GPU $gpu: $want" ;;
*) echo "FAIL  nvcc $nvcc, GPU $gpu: the configure should say: $want"; echo "$out" | grep "prism:"; exit 1 ;;
esac
if [ $gpu = 0 ] && [ $nvcc = 1 ]; then
    case $out in
    *"no GPU found"*"-DPRISM_CUDA=ON builds the CUDA backend anyway"*) echo "ok    it says why and how to build CUDA anyway" ;;
    *) echo "FAIL  the configure should say why CUDA is left out"; exit 1 ;;
    esac
fi
