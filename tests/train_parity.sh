#!/bin/sh
# tests/train_parity.sh: a real training run through the command: PRISM on
# the parity probe (8-token sequences, 250 steps: seconds on a CPU) must
# reach 95% accuracy on the held-out split, in both of its forms (paper, the
# default, and augmented). The README's run is the same with 64 tokens and
# 1500 steps.
prism=${1:?usage: train_parity.sh PRISM}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
for form in paper augmented; do
    out=$("$prism" train --model prism --task parity --set seq_len=8 --set prism.form=$form --steps 250 \
          --device cpu --out "$tmp/$form" 2>/dev/null)
    rc=$?
    last=$(echo "$out" | tail -n 1)
    acc=$(echo "$last" | sed -n 's/.*"acc":\([0-9.e-]*\).*/\1/p')
    if [ $rc != 0 ] || [ -z "$acc" ]; then
        echo "prism train (form $form) exited $rc; last line: $last"
        exit 1
    fi
    if ! awk "BEGIN { exit !($acc >= 0.95) }"; then
        echo "form $form: parity accuracy $acc < 0.95: $last"
        exit 1
    fi
    echo "form $form: parity accuracy $acc >= 0.95"
done
exit 0
