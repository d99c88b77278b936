#!/usr/bin/env bash
# tools/device/fetch_deps.sh: run HERE (a Debian machine with apt) before a GPU run.
# The GPU machine has no network and lacks cmocka, cJSON and OpenBLAS; this
# downloads their .deb files into .deps/ (git ignores it), which the device
# call carries (carry: [".deps"]) and tools/device/run_tests.sh unpacks there.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .deps/golden
# the shared reference vectors do not travel with the checkout: carry a copy
cp ../shared/golden/recurrences.safetensors .deps/golden/ 2>/dev/null || echo "fetch_deps: no ../shared/golden"
cd .deps
if ls *.deb >/dev/null 2>&1; then echo "fetch_deps: .deps/ already has $(ls *.deb | wc -l) packages"; exit 0; fi
apt-get download libcjson1 libcjson-dev libcmocka0 libcmocka-dev \
    libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev
ls -la
