#!/bin/sh
# tests/model_cli.sh PRISM SOURCE_DIR: `prism model` as a user runs it: the
# table, the total, the JSON last line; --help lists every config key; errors
# name the key and exit non-zero; models/README.md's key table is current.
set -eu
prism=$1
src=$2
fail() { echo "model_cli: $*" >&2; exit 1; }

out=$("$prism" model --model prism --preset probe --set prism.L=1)
last=$(printf '%s\n' "$out" | tail -n 1)
total=$(printf '%s\n' "$out" | sed -n 's/^total \([0-9]*\) parameters.*/\1/p')
[ -n "$total" ] || fail "no total line"
case $last in
  "{\"model\":\"prism\",\"preset\":\"probe\",\"params\":$total,"*) ;;
  *) fail "last line is not the JSON object: $last" ;;
esac
printf '%s\n' "$out" | grep -q '^layers.1.mixer.w_k.0 ' || fail "no layers.1.mixer.w_k.0 row"
printf '%s\n' "$out" | grep -q '^layers.1.mixer.w_k.1 ' && fail "prism.L=1 still has w_k.1"
# the sum of the table's sizes is the total
sum=$(printf '%s\n' "$out" | awk 'NF == 3 && $3 ~ /^[0-9]+$/ { s += $3 } END { print s }')
[ "$sum" = "$total" ] || fail "table sums to $sum, total says $total"

"$prism" model --help | grep -q 'prism.shortconv' || fail "--help does not list prism.shortconv"

if err=$("$prism" model --model gdn --set prism.LL=3 2>&1); then fail "an unknown key exited 0"; fi
printf '%s' "$err" | grep -q "unknown key 'prism.LL'" || fail "unknown key error: $err"
if err=$("$prism" model --model rwkv 2>&1); then fail "an unknown mixer exited 0"; fi
printf '%s' "$err" | grep -q "allowed: prism|gdn" || fail "unknown mixer error: $err"
readme_keys=$(sed -n '/^<!-- keys -->$/,/^<!-- \/keys -->$/p' "$src/models/README.md" | sed '1d;$d')
[ "$readme_keys" = "$("$prism" model --keys-markdown)" ] ||
  fail "models/README.md's key table is stale: regenerate it with prism model --keys-markdown"
# the block benchmark runs every mixer and ends with its JSON line
last=$("$prism" bench block --preset probe --B 1 --T 5 --iters 1 --device cpu | tail -n 1)
case $last in
  '{"prism":{"fwd_ms":'*'"ttt_linear":{'*'}}') ;;
  *) fail "bench block's last line: $last" ;;
esac
echo "model_cli: ok"
