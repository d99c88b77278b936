#!/bin/sh
# tests/test_dist.sh: data-parallel training through the command, on the CPU
# (--procs N: N processes, the shm communicator). A tiny probe model, 6 steps.
#
#   - 2 processes match 1 process with the same global batch: every logged
#     loss and grad norm within rtol 1e-4 (float reduction order: each rank
#     sums half the rows, then the halves are averaged), the final eval loss
#     too;
#   - two 2-process runs give bit-identical metrics; ZeRO-1 gives the same
#     bits as plain data parallel (on the CPU the update is the same code);
#   - a run stopped at step 3 and resumed with the same N (and with ZeRO-1)
#     logs the same bits as the uninterrupted run; rank 0 alone wrote the
#     run directory (each step logged once, no stray files);
#   - a rank that exits at step 2 makes the launcher stop the other and exit
#     non-zero naming it, within seconds (no hang).
#
# With --cuda the same checks run on 2 GPUs (--gpus 2, NCCL) against one GPU
# (--device cuda), with rtol 1e-3 for 2 vs 1 (cuBLAS and the kernels' sums
# split at other places; reruns and ZeRO-1 must still match bit for bit).
# It exits 77 (skipped) when fewer than 2 GPUs are visible or NCCL is absent.
#
#   sh tests/test_dist.sh [--cuda] PRISM
cuda=0
if [ "$1" = "--cuda" ]; then cuda=1; shift; fi
prism=${1:?usage: test_dist.sh [--cuda] PRISM}
if [ $cuda = 1 ]; then one_dev="--device cuda" two="--gpus 2" rtol=1e-3; else one_dev="--device cpu" two="--procs 2" rtol=1e-4; fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; failed=$((failed + 1)); }

# the CUDA kernels run chunks of 32 or 64: there T = 40 is one whole chunk and a part
if [ $cuda = 1 ]; then shape="--set seq_len=40 --set chunk=32"; else shape="--set seq_len=16 --set chunk=8"; fi
args="--model prism --task parity --set d_model=16 $shape --set train.batch=8
      --set train.log_every=1 --set train.eval_batches=2 --seed 3"
train() {   # train OUT ARGS...: a run in $tmp/OUT; its output in $tmp/OUT.log
    out=$1
    shift
    # shellcheck disable=SC2086
    "$prism" train $args --out "$tmp/$out" "$@" >"$tmp/$out.log" 2>&1
}
# the step lines of a run without the timing columns (tokens_per_s, time_s)
steps() { grep '"loss"' "$tmp/$1/metrics.jsonl" 2>/dev/null | grep -v eval | sed 's/,"tokens_per_s":.*}/}/'; }
# two runs logged the same 6 steps, bit for bit (nothing logged is no match)
same_steps() { [ "$(steps "$1" | wc -l)" = 6 ] && [ "$(steps "$1")" = "$(steps "$2")" ]; }

# shellcheck disable=SC2086
train two --steps 6 $two
rc=$?
if [ $cuda = 1 ] && { [ $rc = 77 ] || grep -q "NCCL: libnccl.so.2 not found" "$tmp/two.log"; }; then
    echo "skipped: $(tail -n 1 "$tmp/two.log")"
    exit 77
fi
[ $rc = 0 ] || bad "2 processes: $(tail -n 3 "$tmp/two.log")"
# shellcheck disable=SC2086
train one --steps 6 $one_dev || bad "1 process: $(tail -n 3 "$tmp/one.log")"
# shellcheck disable=SC2086
train two_again --steps 6 $two || bad "2 processes again"
# shellcheck disable=SC2086
train zero --steps 6 $two --zero 1 --bucket-mb 0.001 || bad "2 processes, ZeRO-1: $(tail -n 3 "$tmp/zero.log")"

[ "$(steps one | wc -l)" = 6 ] && [ "$(steps two | wc -l)" = 6 ] && ok "each run logged 6 steps once" ||
    bad "runs should log 6 steps once each: $(steps two | wc -l)"
# match_rtol ONE TWO WHAT: loss and grad_norm within rtol at each of 6 steps
match_rtol() {
    steps "$1" | tr ',:}' '   ' | awk '{print $4, $8}' >"$tmp/a"
    steps "$2" | tr ',:}' '   ' | awk '{print $4, $8}' >"$tmp/b"
    if [ "$(wc -l <"$tmp/a")" = 6 ] && [ "$(wc -l <"$tmp/b")" = 6 ] && paste -d ' ' "$tmp/a" "$tmp/b" | awk -v rtol=$rtol '
        { for (k = 1; k <= 2; k++) { x = $k; y = $(k + 2); d = x - y; if (d < 0) d = -d; s = x < 0 ? -x : x;
              if (d > rtol * s) { print "  step " NR ": " x " vs " y; bad = 1 } } }
        END { exit bad }'; then ok "$3: 2 processes match 1 within rtol $rtol (loss, grad norm, 6 steps)"
    else bad "$3: 2 processes differ from 1 beyond rtol $rtol"; fi
}
match_rtol one two "parity"
evloss() { grep '"eval"' "$tmp/$1/metrics.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/'; }
if awk -v x="$(evloss one)" -v y="$(evloss two)" -v rtol=$rtol 'BEGIN { d = x - y; if (d < 0) d = -d;
       exit !(x != "" && d <= rtol * x) }'; then ok "final eval loss within rtol ($(evloss one), $(evloss two))"
else bad "final eval loss $(evloss one) vs $(evloss two)"; fi
same_steps two two_again && ok "2-process reruns are bit-identical" || bad "2-process reruns differ"
same_steps two zero && ok "ZeRO-1 (tiny buckets) gives the same bits" || bad "ZeRO-1 differs"
stray=$(ls -a "$tmp/two" | grep -v -e '^\.\{1,2\}$' -e '^ckpt-00000006\.' -e '^config.json$' -e '^manifest.json$' \
        -e '^metrics.jsonl$' -e '^latest$')
[ -z "$stray" ] && ok "the run directory holds rank 0's files only" || bad "stray files: $stray"

# resume with the same N: the same bits as the uninterrupted run
for z in 0 1; do
    # shellcheck disable=SC2086
    train "cut$z" --steps 3 $two --zero $z || bad "cut$z: $(tail -n 3 "$tmp/cut$z.log")"
    # shellcheck disable=SC2086
    "$prism" train --resume --out "$tmp/cut$z" --steps 6 $two >"$tmp/res$z.log" 2>&1 || bad "resume$z: $(tail -n 3 "$tmp/res$z.log")"
    same_steps two "cut$z" && ok "stop at 3, resume with 2 processes (zero $z): same bits" ||
        bad "resumed run (zero $z) differs from the uninterrupted one"
done

# a rank that dies stops the run
start=$(date +%s)
# shellcheck disable=SC2086
PRISM_TEST_EXIT_AT=1:2 train dies --steps 50 $two --dist-timeout 60
rc=$?
took=$(($(date +%s) - start))
if [ $rc != 0 ] && grep -q "rank 1 exited with status 3" "$tmp/dies.log" && [ $took -lt 60 ]; then
    ok "rank 1 exiting at step 2: launcher exit $rc in ${took}s, naming it"
else
    bad "rank 1 exiting: exit $rc after ${took}s; log: $(tail -n 3 "$tmp/dies.log")"
fi
# rec: ragged sequences (users have 38 or more training items, so with 64
# positions padding, which the loss leaves out, gives the ranks' rows
# different numbers of positions) and the sampled loss
for neg in 0 5; do
    args="--model gdn --task rec --set d_model=8 $shape --set seq_len=64 --set train.batch=8 --set train.log_every=1
          --set train.rec.negatives=$neg --set train.eval_every=1000 --seed 3"
    # shellcheck disable=SC2086
    train "rec$neg-one" --steps 6 $one_dev || bad "rec (negatives $neg), 1 process: $(tail -n 3 "$tmp/rec$neg-one.log")"
    # shellcheck disable=SC2086
    train "rec$neg-two" --steps 6 $two || bad "rec (negatives $neg), 2 processes: $(tail -n 3 "$tmp/rec$neg-two.log")"
    match_rtol "rec$neg-one" "rec$neg-two" "rec, negatives $neg"
done
exit $((failed > 0))
