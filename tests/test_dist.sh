#!/bin/sh
# tests/test_dist.sh: data-parallel training through the command, on the CPU
# (--procs N: N processes, the shm communicator). A tiny probe model, 6 steps.
#
#   - 2 processes match 1 process with the same global batch: every logged
#     loss and grad norm within rtol 1e-4 (float reduction order: each rank
#     sums half the rows, then the halves are averaged), the same final eval
#     accuracy;
#   - two 2-process runs give bit-identical metrics; ZeRO-1 gives the same
#     bits as plain data parallel (on the CPU the update is the same code);
#   - a run stopped at step 3 and resumed with the same N (and with ZeRO-1)
#     logs the same bits as the uninterrupted run; rank 0 alone wrote the
#     run directory (each step logged once, no stray files);
#   - a rank that exits at step 2 makes the launcher stop the other and exit
#     non-zero naming it, within seconds (no hang).
#
#   sh tests/test_dist.sh PRISM
prism=${1:?usage: test_dist.sh PRISM}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; failed=$((failed + 1)); }

args="--model prism --task parity --set d_model=16 --set seq_len=16 --set chunk=8 --set train.batch=8
      --set train.log_every=1 --set train.eval_batches=2 --seed 3"
train() {   # train OUT ARGS...: a run in $tmp/OUT; its output in $tmp/OUT.log
    out=$1
    shift
    # shellcheck disable=SC2086
    "$prism" train $args --out "$tmp/$out" "$@" >"$tmp/$out.log" 2>&1
}
# the step lines of a run without the timing column
steps() { grep '"loss"' "$tmp/$1/metrics.jsonl" | grep -v eval | sed 's/,"tokens_per_s":[0-9.e+]*//'; }

train one --steps 6 --device cpu || bad "1 process: $(tail -n 3 "$tmp/one.log")"
train two --steps 6 --procs 2 || bad "2 processes: $(tail -n 3 "$tmp/two.log")"
train two_again --steps 6 --procs 2 || bad "2 processes again"
train zero --steps 6 --procs 2 --zero 1 --bucket-mb 0.001 || bad "2 processes, ZeRO-1: $(tail -n 3 "$tmp/zero.log")"

[ "$(steps one | wc -l)" = 6 ] && [ "$(steps two | wc -l)" = 6 ] && ok "each run logged 6 steps once" ||
    bad "runs should log 6 steps once each: $(steps two | wc -l)"
# 1 vs 2 processes: loss and grad_norm within rtol 1e-4 at every step
steps one | tr ',:}' '   ' | awk '{print $4, $8}' >"$tmp/a"
steps two | tr ',:}' '   ' | awk '{print $4, $8}' >"$tmp/b"
if paste -d ' ' "$tmp/a" "$tmp/b" | awk '
    { for (k = 1; k <= 2; k++) { x = $k; y = $(k + 2); d = x - y; if (d < 0) d = -d; s = x < 0 ? -x : x;
          if (d > 1e-4 * s) { print "  step " NR ": " x " vs " y; bad = 1 } } }
    END { exit bad }'; then ok "2 processes match 1 within rtol 1e-4 (loss, grad norm, 6 steps)"
else bad "2 processes differ from 1 beyond rtol 1e-4"; fi
acc() { tail -n 1 "$tmp/$1.log" | sed 's/.*"acc":\([0-9.e-]*\).*/\1/'; }
[ "$(acc one)" = "$(acc two)" ] && ok "final accuracy the same ($(acc one))" || bad "final accuracy $(acc one) vs $(acc two)"
[ "$(steps two)" = "$(steps two_again)" ] && ok "2-process reruns are bit-identical" || bad "2-process reruns differ"
[ "$(steps two)" = "$(steps zero)" ] && ok "ZeRO-1 (tiny buckets) gives the same bits" || bad "ZeRO-1 differs"
stray=$(ls -a "$tmp/two" | grep -v -e '^\.\{1,2\}$' -e '^ckpt-00000006\.' -e '^config.json$' -e '^manifest.json$' \
        -e '^metrics.jsonl$' -e '^latest$')
[ -z "$stray" ] && ok "the run directory holds rank 0's files only" || bad "stray files: $stray"

# resume with the same N: the same bits as the uninterrupted run
for z in 0 1; do
    train "cut$z" --steps 3 --procs 2 --zero $z || bad "cut$z: $(tail -n 3 "$tmp/cut$z.log")"
    "$prism" train --resume --out "$tmp/cut$z" --steps 6 --procs 2 >"$tmp/res$z.log" 2>&1 || bad "resume$z: $(tail -n 3 "$tmp/res$z.log")"
    [ "$(steps two)" = "$(steps "cut$z")" ] && ok "stop at 3, resume with 2 processes (zero $z): same bits" ||
        bad "resumed run (zero $z) differs from the uninterrupted one"
done

# a rank that dies stops the run
start=$(date +%s)
PRISM_TEST_EXIT_AT=1:2 train dies --steps 50 --procs 2 --dist-timeout 60
rc=$?
took=$(($(date +%s) - start))
if [ $rc != 0 ] && grep -q "rank 1 exited with status 3" "$tmp/dies.log" && [ $took -lt 30 ]; then
    ok "rank 1 exiting at step 2: launcher exit $rc in ${took}s, naming it"
else
    bad "rank 1 exiting: exit $rc after ${took}s; log: $(tail -n 3 "$tmp/dies.log")"
fi
exit $((failed > 0))
