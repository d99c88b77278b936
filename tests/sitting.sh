#!/usr/bin/env bash
# tests/sitting.sh: tools/device/sitting.sh's bookkeeping, on a stub prism (no
# GPU, seconds): each mixers run's cells into mixers.csv, a run past its cap
# recorded as timed out with the next one going on, a note that lands inside
# a table row kept out of the numbers, the probe phase's ms a step, the golden
# checks' tally, table4's grid packed for the next call and taken back (its
# slow CUDA calls counted), and a model the deadline leaves out listed as not
# run.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "sitting test: $*" >&2; [ -f "$tmp/out/summary.txt" ] && cat "$tmp/out/summary.txt" >&2; exit 1; }

# the stub: bench throughput's table for --models M (a row a model; slow
# sleeps past any cap; skipme has its skip note on stderr inside the row)
cat >"$tmp/prism" <<'STUB'
#!/usr/bin/env bash
echo "$*" >>"${0%/*}/args.log"
[ "$2" = recurrence ] && { echo "gdn         chunk64/bf16      1.255     4.262"; exit 0; }
if [ "$1" = golden-check ]; then   # a failing check says so; one with no GPU exits 77
    echo "golden-check with $# arguments" >>"${0%/*}/args.log"
    case "$*" in *bad*) echo "max |err| 1e-2 over tolerance"; exit 1 ;; *nogpu*) exit 77 ;; esac
    exit 0
fi
if [ "$1" = ablate ]; then   # a grid of two cells: s1 finishes, s2 stops with its checkpoint
    out="" dry=0
    while [ $# -gt 0 ]; do case "$1" in --out) out=$2; shift ;; --dry-run) dry=1 ;; esac; shift; done
    [ $dry = 1 ] && { echo "ablate table4: $(ls "$out"/m/t/*/result.json 2>/dev/null | wc -l)/3 cells done"; exit 0; }
    mkdir -p "$out/m/t/s1" "$out/m/t/s2" "$out/m/t/s3"
    for c in s1 s2; do echo w >"$out/m/t/$c/ckpt-1.weights.safetensors"; echo 1 >"$out/m/t/$c/latest"; done
    echo '{"steps": 10}' >"$out/m/t/s1/result.json"
    # s3: further on than s2 and a checkpoint of 2 MiB (a --table4-pack-mib 2 grid holds s2's alone)
    head -c 2097152 /dev/urandom >"$out/m/t/s3/ckpt-5.weights.safetensors"; echo 5 >"$out/m/t/s3/latest"
    echo m >"$out/m/t/s3/metrics.jsonl"
    echo "ablate table4: 1/3 cells done, 2 running"
    [ -n "${PRISM_CUDA_SLOW_MS:-}" ] && echo "prism cuda: 1.000 s: cudaMalloc took ${PRISM_CUDA_SLOW_MS}.5 ms (stream 0x1)" >&2
    exit 0
fi
models="" lens=""
while [ $# -gt 0 ]; do
    case "$1" in --models) models=$2; shift ;; --seq-lens) lens=$2; shift ;; esac
    shift
done
[ "$models" = slow ] && sleep 30
IFS=, read -ra L <<<"$lens"
printf 'precision bf16, cuda graph on\n\n| model | params |'
for t in "${L[@]}"; do printf ' T=%s | MiB |' "$t"; done
printf '\n|---|---|---|---|\n'
if [ "$models" = skipme ]; then
    printf '| skipme | - | - | - |'
    echo "prism bench throughput: skipme at T=${L[0]} skipped: ~99 GiB for the backward" >&2
    printf ' - |\n'
    exit 1
fi
printf '| %s | 1000 |' "$models"
for t in "${L[@]}"; do printf ' %d | 512.5 |' $((4096000 / t)); done
printf '\n'
STUB
chmod +x "$tmp/prism"

cd "$root"
bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/none" --out "$tmp/out" --phases mixers,probe \
    --models fast,slow,skipme --precisions bf16 --per-run 3 --deadline 60 --probe-models fast >"$tmp/log" 2>&1 ||
    fail "exited $? ($(tail -n 3 "$tmp/log"))"
csv=$tmp/out/mixers.csv
grep -qx 'fast,bf16,1024,4000,512.5,1000,ok,[0-9]*' "$csv" || fail "no fast row at T=1024 in mixers.csv"
grep -qx 'fast,bf16,16384,250,512.5,1000,ok,[0-9]*' "$csv" || fail "no fast row at T=16384 in mixers.csv"
grep -q '^slow,bf16,.*,timed out at 3s,' "$csv" || fail "the slow run is not recorded as timed out"
grep -q '^skipme,bf16,1024,-,-,' "$csv" || fail "skipme's cell is not '-'"
grep -q 'skipped\|GiB' "$csv" && fail "a note landed in mixers.csv's cells"
grep -q 'skipme at T=1024 skipped' "$tmp/out/summary.txt" || fail "skipme's note is not in the summary"
grep -qE 'fast +bf16 +32000 tokens/s +128.000 ms a step' "$tmp/out/summary.txt" || fail "no probe step in ms"
[ -f "$tmp/out/logs.tar.xz" ] || fail "no logs.tar.xz"

# --set reaches every bench run; --recurrence-force runs the bench once per forcing
rm -f "$tmp/args.log"
bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/none" --out "$tmp/out3" --phases recurrence,mixers \
    --models fast --precisions bf16 --set mom.route=padded --recurrence-force "grad_pieces=3;grad_pieces=2" \
    --shares recurrence=3,mixers=1 --deadline 60 >"$tmp/log3" 2>&1 || fail "third run exited $?"
grep -q -- '--models fast .*--set mom.route=padded' "$tmp/args.log" || fail "--set did not reach bench throughput"
[ "$(grep -c -- 'bench recurrence .*--force grad_pieces=[32]' "$tmp/args.log")" = 2 ] || fail "not one recurrence run per forcing"
grep -q 'recurrence grad_pieces=2: ok' "$tmp/out3/summary.txt" || fail "no summary line for the second forcing"

# the kernels phase: ncu's rows per kernel (a stub ncu), prism's own kernels
# only (rand_fill is the benchmark's), one table a rule and dtype
mkdir -p "$tmp/bin"
cat >"$tmp/bin/ncu" <<'NCU'
#!/usr/bin/env bash
echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
echo '"0","void chunk_grad_kernel<64, true, 4, true, 1>(rec_prob)","gpu__time_duration.sum","msecond","1.447"'
echo '"1","void rand_fill_kernel(float *)","gpu__time_duration.sum","usecond","700.0"'
echo '"2","void gla_state_kt_kernel<64>(rec_prob)","gpu__time_duration.sum","usecond","762.0"'
NCU
chmod +x "$tmp/bin/ncu"
PATH=$tmp/bin:$PATH bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/none" --out "$tmp/out4" \
    --phases kernels --kernel-rules delta,gla --deadline 60 >"$tmp/log4" 2>&1 || fail "kernels run exited $?"
[ "$(grep -cE '^ +chunk_grad_kernel +1 x +1.447 ms' "$tmp/out4/summary.txt")" = 4 ] ||
    fail "not one chunk_grad_kernel line for each of delta, gla in bf16 and f32"
grep -q 'gla f32: ok' "$tmp/out4/summary.txt" || fail "no status line for gla f32"
grep -q rand_fill "$tmp/out4/summary.txt" && fail "the benchmark's own kernels are listed"

# golden: the carried list run with ctest's quoting; a failure named, a skip not counted as a pass
mkdir -p "$tmp/gcarry"
printf '%s\n' 'prism "golden-check" "a file.safetensors" "--dtype" "f32"' 'prism "golden-check" "bad"' \
    'prism "golden-check" "nogpu"' >"$tmp/gcarry/golden.txt"
bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/gcarry" --out "$tmp/outg" --phases golden \
    --deadline 60 >"$tmp/logg" 2>&1 || fail "golden run exited $?"
grep -q 'golden: 1 passed, 1 failed, 1 skipped (no usable GPU) of the 3 listed' "$tmp/outg/summary.txt" ||
    fail "the golden phase's tally is wrong"
grep -q 'golden: exit 1: prism golden-check bad' "$tmp/outg/summary.txt" || fail "the failing check is not named"
grep -q 'golden-check with 4 arguments' "$tmp/args.log" || fail "ctest's quoting was not kept"

# table4: the grid packed for the next call without the finished cell's
# checkpoint, and unpacked by a call on a machine that holds no grid
bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/none" --out "$tmp/out5" --phases table4 \
    --table4-dir "$tmp/m1/sitting-table4" --deadline 60 >"$tmp/log5" 2>&1 || fail "table4 run exited $?"
tar -tJf "$tmp/out5/table4-grid.tar.xz" >"$tmp/t5" || fail "no table4-grid.tar.xz"
grep -qx 'sitting-table4/m/t/s1/result.json' "$tmp/t5" || fail "the finished cell's result is not packed"
grep -q 's1/ckpt\|s1/latest' "$tmp/t5" && fail "the finished cell's checkpoint is packed"
grep -qx 'sitting-table4/m/t/s2/ckpt-1.weights.safetensors' "$tmp/t5" || fail "the unfinished cell's checkpoint is not packed"
grep -qx 'sitting-table4/wall.txt' "$tmp/t5" || fail "wall.txt is not packed"
grep -qx 'sitting-table4/m/t/s3/ckpt-5.weights.safetensors' "$tmp/t5" || fail "the furthest cell's checkpoint is not packed"
grep -q '1 CUDA calls took 1000 ms or more' "$tmp/out5/summary.txt" || fail "the grid's slow calls are not counted"
# a limit the furthest cell's checkpoint does not fit: that cell is left out whole, the other kept
bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/none" --out "$tmp/out8" --phases table4 \
    --table4-dir "$tmp/m4/sitting-table4" --table4-pack-mib 2 --deadline 60 >"$tmp/log8" 2>&1 || fail "table4 run exited $?"
tar -tJf "$tmp/out8/table4-grid.tar.xz" >"$tmp/t8" || fail "no table4-grid.tar.xz under a limit"
grep -q 'm/t/s3/' "$tmp/t8" && fail "the cell whose checkpoint is over the limit is packed"
grep -qx 'sitting-table4/m/t/s2/ckpt-1.weights.safetensors' "$tmp/t8" || fail "the cell that fits is not packed"
grep -q '1 unfinished cells. checkpoints; 1 left out' "$tmp/out8/summary.txt" || fail "the summary does not say what was left out"
echo 100 >"$tmp/m1/sitting-table4/wall.txt"
(cd "$tmp/m1" && tar -cJf "$tmp/grid.tar.xz" sitting-table4)
bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/none" --out "$tmp/out6" --phases table4 \
    --table4-dir "$tmp/m2/sitting-table4" --table4-from "$tmp/grid.tar.xz" --deadline 60 >"$tmp/log6" 2>&1 ||
    fail "second table4 run exited $?"
grep -q 'sent back in .*100s spent before' "$tmp/out6/summary.txt" || fail "the grid sent back was not unpacked"
[ "$(cat "$tmp/m2/sitting-table4/wall.txt")" -ge 100 ] || fail "wall.txt did not go on from the grid sent back"
bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/none" --out "$tmp/out7" --phases table4 \
    --table4-dir "$tmp/m3/other" --table4-from "$tmp/grid.tar.xz" --deadline 60 >"$tmp/log7" 2>&1
grep -q "holds 'sitting-table4', not the grid folder other" "$tmp/out7/summary.txt" || fail "a mismatched grid was unpacked"

# a deadline too short for the second model: it is listed as not run
bash tools/device/sitting.sh --prism "$tmp/prism" --carry "$tmp/none" --out "$tmp/out2" --phases mixers \
    --models slow,fast --precisions bf16 --per-run 25 --deadline 31 >"$tmp/log2" 2>&1 || fail "second run exited $?"
grep -q '^fast,bf16,-,-,-,-,not run,0' "$tmp/out2/mixers.csv" || fail "fast is not listed as not run"
echo "sitting test: ok"
