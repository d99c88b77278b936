#!/usr/bin/env bash
# tools/setup.sh: install what building and testing prism needs.
# On Debian/Ubuntu: installs the missing packages with apt-get (through sudo
# when not root). Elsewhere: prints what to install. Safe to run again.
set -euo pipefail
# clang and libclang-rt-dev (libclang_rt.fuzzer: libFuzzer) for tools/fuzz.sh
pkgs=(cmake gcc make pkg-config libcmocka-dev libopenblas-dev libcjson-dev clang libclang-rt-dev)

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
    echo "setup: not a Debian-like system. Install: CMake >= 3.25, a C11 compiler, make, pkg-config,"
    echo "       cmocka (dev), OpenBLAS (dev, optional), cJSON (dev); optionally the CUDA toolkit (nvcc)"
    echo "       and clang with its libFuzzer runtime (tools/fuzz.sh)."
    for t in cmake cc pkg-config; do command -v $t >/dev/null 2>&1 || echo "setup: missing: $t"; done
    exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present (${pkgs[*]})"
else
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: CUDA toolkit found: the build includes the CUDA backend"
else
    echo "setup: no CUDA toolkit found: CPU-only build (install the CUDA toolkit, or set CUDACXX to its nvcc)"
fi
