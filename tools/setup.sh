#!/usr/bin/env bash
# tools/setup.sh: install what building and testing prism needs.
# On Debian/Ubuntu: installs the missing packages with apt-get (through sudo
# when not root). Elsewhere: prints what to install. Safe to run again.
set -euo pipefail
# clang and libclang-rt-dev (libclang_rt.fuzzer: libFuzzer) for tools/fuzz.sh; zlib for the
# report pages' browser test (it decodes Chromium's screenshots)
pkgs=(cmake gcc make pkg-config libcmocka-dev libopenblas-dev libcjson-dev clang libclang-rt-dev zlib1g-dev)

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
    echo "setup: not a Debian-like system. Install: CMake >= 3.25, a C11 compiler, make, pkg-config,"
    echo "       cmocka (dev), OpenBLAS (dev, optional), cJSON (dev), zlib (dev); optionally the CUDA"
    echo "       toolkit (nvcc), clang with its libFuzzer runtime (tools/fuzz.sh) and Chromium (the"
    echo "       report pages' browser test)."
    for t in cmake cc pkg-config; do command -v $t >/dev/null 2>&1 || echo "setup: missing: $t"; done
    exit 0
fi

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present (${pkgs[*]})"
else
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# the report pages' browser test (tests/test_report.c) renders them in headless
# Chromium where the distribution packages it as `chromium` (Debian: about a
# minute to download and install); elsewhere that test skips, saying so
if ! command -v chromium >/dev/null 2>&1; then
    ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || $sudo apt-get update -qq
    if apt-cache show chromium >/dev/null 2>&1; then
        echo "setup: installing chromium (the report pages' browser test)"
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium
    else
        echo "setup: no chromium package here: the report pages' browser test will skip"
    fi
fi
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: CUDA toolkit found: the build includes the CUDA backend"
else
    echo "setup: no CUDA toolkit found: CPU-only build (install the CUDA toolkit, or set CUDACXX to its nvcc)"
fi
