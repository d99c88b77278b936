#!/usr/bin/env bash
# tools/device/bench_attention.sh: torch SDPA's bf16 causal attention (B=8
# T=2048 H=16, D=128 and D=96) and prism's `bench fused` rows, both timed on
# this GPU in one run; prism's output ends each of its B=8 T=2048 blocks with
# bf16 fwd+bwd over torch's time
# at that head dim and whether issue 44's target (at most 2x) is met.
#   tools/device/bench_attention.sh PRISM [prism bench fused args...]
# e.g. tools/device/bench_attention.sh build-device/prism --reps 20
set -euo pipefail
prism=${1:?usage: bench_attention.sh PRISM [prism bench fused args...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
ms=$(python3 "$here/time_sdpa.py" | tee /dev/stderr | tail -n 1)
ms96=$(python3 "$here/time_sdpa.py" --head-dim 96 | tee /dev/stderr | tail -n 1)
"$prism" bench fused --device cuda --sdpa-ms "$ms" --sdpa96-ms "$ms96" "$@"
