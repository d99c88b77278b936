#!/usr/bin/env bash
# tools/device/fetch_deps.sh: run on a machine WITH network, before building
# on a GPU machine without it (README, "On a GPU machine without network").
# Downloads the .deb files of cJSON, cmocka and OpenBLAS into .deps/ (git
# ignores it) without installing them; copy the repository with .deps/ to the
# GPU machine and run tools/device/run_tests.sh there. Both machines should
# run the same Debian release and architecture.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps
cd .deps
if ls ./*.deb >/dev/null 2>&1; then echo "fetch_deps.sh: .deps/ already has $(ls ./*.deb | wc -l) packages"; exit 0; fi
apt-get download libcjson1 libcjson-dev libcmocka0 libcmocka-dev \
    libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev
ls -la
