#!/bin/sh
# tests/train_parity.sh: a real training run through the command: PRISM on
# the parity probe (8-token sequences, 250 steps: seconds on a CPU) must
# reach 95% accuracy on the held-out split. The README's run is the same
# with 16 tokens and 1000 steps.
prism=${1:?usage: train_parity.sh PRISM}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
out=$("$prism" train --model prism --task parity --set seq_len=8 --steps 250 --device cpu --out "$tmp/run" 2>/dev/null)
rc=$?
last=$(echo "$out" | tail -n 1)
acc=$(echo "$last" | sed -n 's/.*"acc":\([0-9.e-]*\).*/\1/p')
if [ $rc != 0 ] || [ -z "$acc" ]; then
    echo "prism train exited $rc; last line: $last"
    exit 1
fi
if awk "BEGIN { exit !($acc >= 0.95) }"; then
    echo "parity accuracy $acc >= 0.95"
    exit 0
fi
echo "parity accuracy $acc < 0.95: $last"
exit 1
