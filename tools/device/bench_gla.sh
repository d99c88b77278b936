#!/usr/bin/env bash
# tools/device/bench_gla.sh: prism's gla rows of `bench recurrence` beside
# flash-linear-attention's chunk_gla, both timed on this GPU in one run
# (issue 43's target: gla's chunk64/bf16 f+b <= 1.0x fla).
#   PYTHONPATH=/path/to/flash-linear-attention tools/device/bench_gla.sh [--lift-triton-guard] PRISM [bench args...]
# (--lift-triton-guard: time_fla.py's, for a Triton that fla's check refuses)
# e.g. tools/device/bench_gla.sh build-device/prism --size 1 --no-token
set -euo pipefail
fla_args=()
if [ "${1:-}" = "--lift-triton-guard" ]; then fla_args=("$1"); shift; fi
prism=${1:?usage: bench_gla.sh PRISM [prism bench recurrence args...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
ms=$(python3 "$here/time_fla.py" --rule gla "${fla_args[@]}" | tee /dev/stderr | tail -n 1)
"$prism" bench recurrence --rules gla --fla-gla "$ms" "$@"
