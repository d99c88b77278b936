#!/usr/bin/env bash
# tools/device/sitting.sh: one GPU sitting of issue 44's measurements, run on
# the GPU machine from the repository root on the binaries tools/device/pack.sh
# carried (nothing is built there). A call to that machine lasts 10 minutes at
# most and returns 8 files, so the sitting keeps to a wall-clock deadline,
# gives each phase a share of it and each model a cap, and leaves three
# files: summary.txt, mixers.csv and logs.tar.xz (every run's whole log).
usage() {
    cat <<'USAGE'
usage: tools/device/sitting.sh [options]
  --phases LIST     comma-separated, run in this order (default
                    gpu,tests,recurrence,python,mixers: the mixers last, so
                    they get the time the others leave):
                      gpu         nvidia-smi's name, driver, memory, clocks
                      tests       each carried test_* binary, from this root
                      recurrence  prism bench recurrence --size 1 --no-token
                                  --rules linattn,ssd,delta,gdn,prism_core,gla
                      python      tools/device/lm_baselines.py: sdpa-attn, and
                                  fla-gdn (--lift-triton-guard) when fla came
                      mixers      prism bench throughput, one run per model
                                  and precision, each under --per-run
                    and three more, named to run (not in the default):
                      probe       the probe preset's step (D 16, 2 blocks, B 32,
                                  T 128) for --probe-models in each precision:
                                  tokens/s and ms a step (graphs on)
                      golden      the CUDA golden checks ctest holds (golden.txt,
                                  written by pack.sh): every rule of the
                                  reference files in each precision and form
                      kernels     each recurrence kernel's GPU time (ncu, through
                                  tools/device/kernel_times.sh) for --kernel-rules,
                                  one forward and backward at size 1, bf16 data then
                                  f32 data with TF32: which pass bf16 wins or loses
                      breakdown   bench throughput --breakdown of --breakdown-models
                                  at lm-130m, T = 1024, bf16: where a step's time
                                  goes (the tables go into logs.tar.xz, the top
                                  rows into the summary)
                      table4      prism ablate --grid table4 (the paper's protocol
                                  unless --table4-args says otherwise) in
                                  runs/sitting-table4, resumed from what an earlier
                                  call left there (the same machine) or sent back
                                  (--table4-from); the cells done and the seconds
                                  spent so far, summed over calls (wall.txt in the
                                  grid's folder); the folder packed into
                                  OUT/table4-grid.tar.xz (finished cells without
                                  their checkpoints) for the next call; the
                                  slow-call trace on (PRISM_CUDA_SLOW_MS, 1000
                                  unless set): the count in the summary
  --deadline S      seconds for the whole sitting, unpacking included (default 540)
  --shares LIST     phase=weight,...: each phase gets the time left times its
                    weight over the weights of the phases still to run, so time
                    one leaves goes to the next (default
                    tests=1,recurrence=1,python=3,mixers=6,probe=1,
                    golden=1,kernels=1,breakdown=1,table4=6; gpu: 20 s at most)
  --models LIST     mixers (default prism,gdn,mamba2,attn,gla,linattn,deltanet,
                    ttt_linear,gsa,mom,mamba,titans,ttt_mlp,hstu,atlas)
  --precisions LIST mixers and probe: f32, tf32, bf16 (default bf16,tf32)
  --seq-lens LIST   mixers and python (default 1024,16384; 16384 tokens a step)
  --steps N         timed steps a figure (default 3)
  --per-run S       the cap on one mixers run (default 60)
  --probe-models L  probe (default prism,gdn,linattn)
  --kernel-rules L  kernels (default delta,gdn,gla)
  --breakdown-models L  breakdown (default prism,gdn)
  --table4-args "A" table4: more ablate options, e.g. "--steps 1000 --seeds 1"
                    for a rate (a different grid folder then: runs/sitting-table4-rate)
  --table4-from F   table4: a table4-grid.tar.xz an earlier call wrote (carry it):
                    unpacked where this machine holds no grid yet, so a grid that
                    outlasts one machine (held 30 minutes at most) goes on
  --table4-dir D    table4: the grid's folder (default runs/sitting-table4, or
                    runs/sitting-table4-rate with --table4-args)
  --table4-pack-mib N  table4: the packed grid's size limit (default 15, under the
                    16 MiB a call sends back): unfinished cells' checkpoints go in,
                    the furthest on first, while they fit; the others start afresh
  --set KEY=VALUE   a model key for mixers, probe, breakdown and table4 (repeatable),
                    e.g. --set mom.route=padded
  --recurrence-force "A;B"  recurrence: one run per plan forcing, ';' between them,
                    e.g. "grad_pieces=4;grad_pieces=3" (an A/B in one call)
  --out DIR         where the files go (default $OUT if set, else runs/sitting)
  --carry DIR       the folder pack.sh filled (default .carry)
  --prism PATH      this prism instead of the carried one (test binaries: its folder's test_*)
  --help            this text
A phase whose share is under 10 s is skipped with a line saying so; a model
not reached in time is listed as not run, so the next call can take it.
One call, with .carry carried:
  tools/device/sitting.sh --deadline 540
USAGE
}
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
phases=gpu,tests,recurrence,python,mixers deadline=540 shares_arg="" per_run=60 steps=3
models=prism,gdn,mamba2,attn,gla,linattn,deltanet,ttt_linear,gsa,mom,mamba,titans,ttt_mlp,hstu,atlas
precisions=bf16,tf32 seq_lens=1024,16384 out=${OUT:-runs/sitting} carry=.carry prism=""
probe_models=prism,gdn,linattn kernel_rules=delta,gdn,gla breakdown_models=prism,gdn table4_args="" sets=() rec_forces=""
table4_from="" table4_dir="" table4_pack_mib=15
while [ $# -gt 0 ]; do
    case "$1" in
    --phases) phases="$2"; shift 2 ;;
    --deadline) deadline="$2"; shift 2 ;;
    --shares) shares_arg="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --precisions) precisions="$2"; shift 2 ;;
    --seq-lens) seq_lens="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --per-run) per_run="$2"; shift 2 ;;
    --probe-models) probe_models="$2"; shift 2 ;;
    --kernel-rules) kernel_rules="$2"; shift 2 ;;
    --breakdown-models) breakdown_models="$2"; shift 2 ;;
    --table4-args) table4_args="$2"; shift 2 ;;
    --table4-from) table4_from="$2"; shift 2 ;;
    --table4-dir) table4_dir="$2"; shift 2 ;;
    --table4-pack-mib) table4_pack_mib="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --recurrence-force) rec_forces="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --carry) carry="$2"; shift 2 ;;
    --prism) prism="$2"; shift 2 ;;
    --help | -h) usage; exit 0 ;;
    *) echo "sitting.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
bad() { echo "sitting.sh: $*" >&2; exit 2; }
for v in "deadline=$deadline" "per-run=$per_run" "steps=$steps" "table4-pack-mib=$table4_pack_mib"; do
    case "${v#*=}" in '' | *[!0-9]* | 0) bad "--${v%%=*} takes a whole number >= 1, got '${v#*=}'" ;; esac
done
[ "$deadline" -ge 30 ] || bad "--deadline $deadline: 30 s at least (the logs are packed in the last 10)"
declare -A weight=([gpu]=0 [tests]=1 [recurrence]=1 [python]=3 [mixers]=6 [probe]=1 [golden]=1 [kernels]=1 [breakdown]=1 [table4]=6)
IFS=, read -ra phase_list <<<"$phases"
for p in "${phase_list[@]}"; do
    [ -n "${weight[$p]+x}" ] || bad "--phases: unknown phase '$p' (gpu, tests, recurrence, python, mixers, probe, golden, kernels, breakdown, table4)"
done
if [ -n "$shares_arg" ]; then
    IFS=, read -ra kvs <<<"$shares_arg"
    for kv in "${kvs[@]}"; do
        k=${kv%%=*} w=${kv#*=}
        { [ -n "${weight[$k]+x}" ] && [ "$k" != gpu ]; } || bad "--shares: unknown phase '$k' (tests, recurrence, python, mixers, probe, golden, kernels, breakdown, table4)"
        case "$w" in '' | *[!0-9]*) bad "--shares: $k's weight must be a whole number, got '$w'" ;; esac
        weight[$k]=$w
    done
fi
IFS=, read -ra model_list <<<"$models"
IFS=, read -ra prec_list <<<"$precisions"
for p in "${prec_list[@]}"; do
    case "$p" in f32 | tf32 | bf16) ;; *) bad "--precisions: '$p' is not f32, tf32 or bf16" ;; esac
done

# ---- the clock, the files -----------------------------------------------------------
reserve=10                       # the end: the logs packed, the summary closed
end=$((deadline - reserve))      # $SECONDS counts from this script's start
left() { echo $((end - SECONDS)); }
mkdir -p "$out" || bad "cannot create $out"
logs=$out/logs summary=$out/summary.txt csv=$out/mixers.csv
rm -rf "$logs" "$summary" "$csv" "$out/logs.tar.xz"
mkdir -p "$logs"
say() { echo "$*" | tee -a "$summary"; }
# a run under a cap: timeout signals the whole process group (Triton's
# compilers too), then kills it 5 s later if it is still there. It waits in
# the background so that a signal to this script is handled at once.
child=""
capped() { # seconds, log, command...
    local cap=$1 log=$2 rc
    shift 2
    timeout --kill-after=5 "$cap" "$@" </dev/null >"$log" 2>&1 &
    child=$!
    wait "$child"
    rc=$?
    child=""
    return $rc
}
# an exit status in words
status_of() { # rc, cap
    case "$1" in
    0) echo ok ;;
    124 | 137) echo "timed out at ${2}s" ;;
    77) echo "no usable GPU (exit 77)" ;;
    *) echo "exit $1" ;;
    esac
}
pack_logs() {
    [ -d "$logs" ] || return 0
    tar -C "$out" -cJf "$out/logs.tar.xz" logs && rm -rf "$logs"
}
# stopped from outside: end the run in hand, keep what was measured
on_signal() {
    [ -z "$child" ] || kill -TERM "$child" 2>/dev/null
    say "sitting.sh: stopped by a signal at ${SECONDS}s"
    pack_logs
    exit 1
}
trap on_signal INT TERM

say "# sitting $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), deadline ${deadline}s, phases $phases"
. tools/device/carried.sh
prism_carried sitting.sh "$carry" >"$logs/carried.log" 2>&1
carried_rc=$?
sed 's/^/# /' "$logs/carried.log" | tee -a "$summary"
[ -f "$carry/manifest.txt" ] && sed -n 's/^\(commit\|dirty\|built\|fla\|binaries\)=/# carried \1: /p' "$carry/manifest.txt" | tee -a "$summary"
[ $carried_rc -eq 1 ] && say "# warning: the carried pack is not whole (above): runs that need what is missing will fail"
if [ -n "$prism" ]; then
    bindir=$(dirname "$prism")
else
    prism=$prism_bin/prism bindir=$prism_bin
fi
has_prism=1
[ -x "$prism" ] || has_prism=0

# ---- the phases ---------------------------------------------------------------------
phase_gpu() {
    local q
    if ! command -v nvidia-smi >/dev/null; then say "gpu: no nvidia-smi"; return; fi
    q=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
        --format=csv,noheader 2>&1)
    say "gpu: name, driver, memory, SM clock, max SM clock: $q"
}

phase_tests() {
    local b n rc t
    local found=0
    for b in "$bindir"/test_*; do
        [ -x "$b" ] || continue
        found=1
        n=$(basename "$b")
        if [ $((phase_end - SECONDS)) -lt 10 ]; then say "$n: not run (the phase's time is spent)"; continue; fi
        t=$SECONDS
        # as ctest runs them: from the source root, one thread each
        OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 capped $((phase_end - SECONDS)) "$logs/$n.log" "$b"
        rc=$?
        say "$n: $(status_of $rc $((phase_end - t))), $((SECONDS - t))s"
        # cmocka's totals, and each failure's assertion (bounded: a broken kernel can fail every case)
        grep -aE '^\[ *(PASSED|FAILED|SKIPPED|ERROR|LINE) *\]|^\[=+\] .*test\(s\) run' "$logs/$n.log" | head -n 30 |
            sed 's/^/  /' | tee -a "$summary"
        # no totals: it crashed or was stopped; its last words say where
        if [ $rc -ne 0 ] && [ $rc -ne 77 ] && ! grep -aq 'test(s) run' "$logs/$n.log"; then
            tail -n 5 "$logs/$n.log" | sed 's/^/  | /' | tee -a "$summary"
        fi
    done
    [ $found -eq 1 ] || say "tests: none carried (pack.sh --target test_cuda_bf16 ...)"
}

phase_recurrence() {
    local rc t cap f i=0 forces=()
    [ $has_prism -eq 1 ] || { say "recurrence: no prism binary ($prism)"; return; }
    IFS=';' read -ra forces <<<"${rec_forces:-}"
    [ ${#forces[@]} -gt 0 ] || forces=("")
    for f in "${forces[@]}"; do
        i=$((i + 1)) t=$SECONDS cap=$(((phase_end - SECONDS) / (${#forces[@]} - i + 1)))
        [ $cap -ge 10 ] || { say "recurrence ${f:-as planned}: not run (the phase's time is spent)"; continue; }
        capped $cap "$logs/recurrence-$i.log" "$prism" bench recurrence --size 1 --no-token \
            --rules linattn,ssd,delta,gdn,prism_core,gla ${f:+--force "$f"}
        rc=$?
        say "recurrence ${f:-as planned}: $(status_of $rc $cap), $((SECONDS - t))s"
        # the timing rows and targets; the plans and step memories stay in the log
        grep -avE '^ +(plan:|forward step memory)|^$' "$logs/recurrence-$i.log" | sed 's/^/  /' | tee -a "$summary"
    done
}

phase_python() {
    local rc t cap py=tools/device/lm_baselines.py
    local pypath=$PWD/tools/device${PYTHONPATH:+:$PYTHONPATH}
    export PYTHONUNBUFFERED=1
    # torch's SDPA first and capped at a third: fla's Triton compiles can
    # take whatever is left without costing the Transformer's figure
    for m in sdpa-attn fla-gdn; do
        local args=(--models "$m" --seq-lens "$seq_lens" --steps "$steps")
        if [ $m = fla-gdn ]; then
            [ -n "$prism_fla" ] || { say "python: fla-gdn not run: fla was not carried (pack.sh --fla)"; continue; }
            args+=(--lift-triton-guard)
            cap=$((phase_end - SECONDS))
        else
            cap=$((phase_budget / 3 > 30 ? phase_budget / 3 : 30))
            [ $cap -le $((phase_end - SECONDS)) ] || cap=$((phase_end - SECONDS))
        fi
        if [ "$cap" -lt 10 ]; then say "python: $m not run (the phase's time is spent)"; continue; fi
        t=$SECONDS
        PYTHONPATH=$pypath capped $cap "$logs/python-$m.log" python3 "$py" "${args[@]}"
        rc=$?
        say "python $m: $(status_of $rc $cap), $((SECONDS - t))s"
        grep -aE '^(# |fla-gdn|sdpa-attn)' "$logs/python-$m.log" | sed 's/^/  /' | tee -a "$summary"
        [ $rc -eq 0 ] || tail -n 3 "$logs/python-$m.log" | sed 's/^/  | /' | tee -a "$summary"
    done
}

# the table row bench throughput prints, cell by cell as each length ends
# (so a run stopped at 16K still has its 1K figure): "params P", then one
# "T tokens/s MiB" line a length, '-' for a cell it did not fill
throughput_cells() { # log, model
    awk -F'|' -v m="$2" '
        /^\| model \| params \|/ {
            n = 0
            for (i = 2; i <= NF; i++) { c = $i; gsub(/^ +| +$/, "", c); if (c ~ /^T=[0-9]+$/) { n++; col[n] = i; len[n] = substr(c, 3) } }
            next
        }
        { c = $2; gsub(/^ +| +$/, "", c); if (c == m) row = $0 }
        END {
            split(row, f, "|")
            p = f[3]; gsub(/ /, "", p); print "params", (p == "" ? "-" : p)
            for (k = 1; k <= n; k++) {
                t = f[col[k]]; b = f[col[k] + 1]; gsub(/ /, "", t); gsub(/ /, "", b)
                # a note on stderr can land inside the row (hstu, atlas skipped): numbers only
                print len[k], (t ~ /^[0-9.]+$/ ? t : "-"), (b ~ /^[0-9.]+$/ ? b : "-")
            }
        }' "$1"
}

phase_mixers() {
    local m p rc t cap log params line st a b c cells
    echo "model,precision,seq_len,tokens_per_s,peak_mib,params,status,seconds" >"$csv"
    [ $has_prism -eq 1 ] || { say "mixers: no prism binary ($prism)"; return; }
    mkdir -p "$logs/mixers"
    say "mixers: lm-130m, 16384 tokens a step, --steps $steps; per run: tokens/s and peak MiB at each T, params"
    for m in "${model_list[@]}"; do
        for p in "${prec_list[@]}"; do
            if [ $((phase_end - SECONDS)) -lt 10 ]; then
                say "$(printf '  %-10s %-4s' "$m" "$p") not run (the phase's time is spent)"
                echo "$m,$p,-,-,-,-,not run,0" >>"$csv"
                continue
            fi
            cap=$per_run
            [ "$cap" -le $((phase_end - SECONDS)) ] || cap=$((phase_end - SECONDS))
            log=$logs/mixers/$m-$p.log t=$SECONDS
            capped "$cap" "$log" "$prism" bench throughput --models "$m" --seq-lens "$seq_lens" \
                --tokens-per-batch 16384 --preset lm-130m --device cuda --precision "$p" --steps "$steps" \
                --out "$logs/mixers/$m-$p" "${sets[@]}"
            rc=$?
            st=$(status_of $rc "$cap")
            params=- cells=0
            line=$(printf '  %-10s %-4s' "$m" "$p")
            while read -r a b c; do
                if [ "$a" = params ]; then params=$b; continue; fi
                cells=$((cells + 1))
                line="$line $(awk -v t="$a" -v s="$b" -v mb="$c" 'BEGIN {
                    printf "T=%s %s %s", t, (s == "-" ? "-" : sprintf("%.1fK", s / 1000)), (mb == "-" ? "-" : sprintf("%.0fMiB", mb)) }')"
                echo "$m,$p,$a,$b,$c,$params,$st,$((SECONDS - t))" >>"$csv"
            done < <(throughput_cells "$log" "$m")
            [ $cells -gt 0 ] || echo "$m,$p,-,-,-,$params,$st,$((SECONDS - t))" >>"$csv"
            say "$line $(awk -v n="$params" 'BEGIN { print (n == "-" ? "-" : sprintf("%.1fM", n / 1e6)) }'): $st, $((SECONDS - t))s"
            # its own notes (skipped at a length, eager steps, not timed), and the end of a failure
            # (a note on stderr can land after a row's first cells: taken from anywhere in a line)
            grep -ao 'prism bench throughput: .*' "$log" | sed 's/^prism bench throughput: /    /' | tee -a "$summary"
            [ $rc -eq 0 ] || grep -avE 'prism bench throughput: |^\||^precision |^$' "$log" | tail -n 3 |
                sed 's/^/    | /' | tee -a "$summary"
        done
    done
}

phase_probe() {
    local p rc t cap
    [ $has_prism -eq 1 ] || { say "probe: no prism binary ($prism)"; return; }
    say "probe: the probe preset, 4096 tokens a step (B 32, T 128), --steps 20 after 3; tokens/s and ms a step"
    for p in "${prec_list[@]}"; do
        cap=$((phase_end - SECONDS))
        [ $cap -ge 10 ] || { say "  $p: not run (the phase's time is spent)"; continue; }
        t=$SECONDS
        capped $cap "$logs/probe-$p.log" "$prism" bench throughput --models "$probe_models" --preset probe \
            --seq-lens 128 --tokens-per-batch 4096 --device cuda --precision "$p" --steps 20 --warmup 3 \
            --out "$logs/probe-$p" "${sets[@]}"
        rc=$?
        say "  $p: $(status_of $rc $cap), $((SECONDS - t))s"
        awk -F'|' -v p="$p" '/^\| [a-z_0-9]+ \| [0-9]+ \|/ {
            m = $2; tps = $4; gsub(/ /, "", m); gsub(/ /, "", tps)
            if (tps ~ /^[0-9.]+$/ && tps > 0) printf "    %-10s %s %9.0f tokens/s  %.3f ms a step\n", m, p, tps, 4096e3 / tps
        }' "$logs/probe-$p.log" | tee -a "$summary"
    done
}

phase_golden() {
    local line n=0 bad=0 skipped=0 rc t=$SECONDS args=()
    [ $has_prism -eq 1 ] || { say "golden: no prism binary ($prism)"; return; }
    [ -s "$carry/golden.txt" ] || { say "golden: not run: no checks in $carry/golden.txt (pack.sh writes it with prism)"; return; }
    while IFS= read -r line; do
        [ $((phase_end - SECONDS)) -ge 5 ] || { say "  golden: the phase's time is spent after $n checks"; break; }
        eval "args=($line)"   # ctest's quoting, from pack.sh
        n=$((n + 1))
        capped $((phase_end - SECONDS)) "$logs/golden-$n.log" "$prism" "${args[@]:1}"
        rc=$?
        [ $rc -eq 0 ] && continue
        if [ $rc -eq 77 ]; then skipped=$((skipped + 1)); continue; fi
        bad=$((bad + 1))
        say "  golden: $(status_of $rc 0): prism ${args[*]:1}"
        tail -n 3 "$logs/golden-$n.log" | sed 's/^/    | /' | tee -a "$summary"
    done <"$carry/golden.txt"
    say "golden: $((n - bad - skipped)) passed, $bad failed, $skipped skipped (no usable GPU) of the" \
        "$(wc -l <"$carry/golden.txt") listed, $((SECONDS - t))s"
}

phase_kernels() {
    local r d cap t rc rules=()
    [ $has_prism -eq 1 ] || { say "kernels: no prism binary ($prism)"; return; }
    command -v ncu >/dev/null || { say "kernels: not run: no ncu on this machine"; return; }
    IFS=, read -ra rules <<<"$kernel_rules"
    local n=$((${#rules[@]} * 2)) i=0
    say "kernels: ms a kernel, size 1 (B 8, T 2048, H 16, K = V = 128), one forward and backward, by ncu"
    for r in "${rules[@]}"; do
        for d in bf16 f32; do
            i=$((i + 1)) t=$SECONDS cap=$(((phase_end - SECONDS) / (n - i + 1)))
            [ $cap -ge 10 ] || { say "  $r $d: not run (the phase's time is spent)"; continue; }
            capped $cap "$logs/kernels-$r-$d.log" tools/device/kernel_times.sh --prism "$prism" \
                --grep '^(chunk_|gla_)' -- bench recurrence --size 1 --no-token --rules "$r" --dtype "$d" \
                --reps 1 --warmup 0
            rc=$?
            say "  $r $d: $(status_of $rc $cap), $((SECONDS - t))s"
            # a kernel's line: name, launches, total ms, each launch's ms
            awk 'NR > 1 && NF >= 4 { printf "    %-28s %2d x  %s ms\n", $1, $2, $4 }' \
                "$logs/kernels-$r-$d.log" | tee -a "$summary"
        done
    done
}

phase_breakdown() {
    local rc t=$SECONDS cap=$((phase_end - SECONDS)) f
    [ $has_prism -eq 1 ] || { say "breakdown: no prism binary ($prism)"; return; }
    capped $cap "$logs/breakdown.log" "$prism" bench throughput --models "$breakdown_models" --seq-lens 1024 \
        --tokens-per-batch 16384 --preset lm-130m --device cuda --precision bf16 --steps 3 --breakdown \
        --out "$logs/breakdown" "${sets[@]}"
    rc=$?
    say "breakdown: lm-130m, T=1024, bf16: $(status_of $rc $cap), $((SECONDS - t))s"
    for f in "$logs"/breakdown/breakdown-*.md; do
        [ -f "$f" ] || continue
        say "  $(head -n 1 "$f" | sed 's/^# //')"
        grep -aE '^\| [a-z_0-9]+ \| [a-z_0-9]+ \| (fwd|bwd) \|' "$f" | head -n 12 | sed 's/^/    /' | tee -a "$summary"
    done
}

# the grid's folder into $out/table4-grid.tar.xz, under --table4-pack-mib (a
# call sends back no file over 16 MiB): every file but the checkpoints, which
# a finished cell no longer needs (ablate reads its result.json); then each
# unfinished cell's checkpoints, the furthest on first, while they fit. A cell
# whose checkpoint does not fit is left out whole, to start afresh.
pack_table4() { # dir
    local dir=$1 parent base d size left kept=0 dropped=0 at archive files cells
    parent=$(dirname "$dir") base=$(basename "$dir") at=$(cd "$out" && pwd)
    archive=$at/table4-grid.tar.xz files=$at/.table4-files cells=$at/.table4-cells
    (
        cd "$parent" || exit 1
        # unfinished: a checkpoint ('latest' names its step) and no result.json
        find "$base" -name latest -type f | while read -r f; do
            d=$(dirname "$f")
            [ -f "$d/result.json" ] || echo "$(cat "$f" 2>/dev/null | tr -cd 0-9) $d"
        done | sort -k1,1nr -k2 >"$cells"
        find "$base" -type f ! -name 'ckpt-*' ! -name latest | sort >"$files"
        XZ_OPT="-3 -T0" tar -cJf "$archive" -T "$files" || exit 1
        left=$(( table4_pack_mib * 1048576 - $(stat -c %s "$archive") - 262144 ))
        while read -r _ d; do
            size=$(du -sb "$d" | cut -f1)
            if [ "$size" -le "$left" ]; then
                left=$((left - size)) kept=$((kept + 1))
                find "$d" -type f \( -name 'ckpt-*' -o -name latest \) >>"$files"
            else
                grep -vF "$d/" "$files" >"$files.new"; mv "$files.new" "$files"
                dropped=$((dropped + 1))
            fi
        done <"$cells"
        XZ_OPT="-3 -T0" tar -cJf "$archive" -T "$files" || exit 1
        echo "table4: packed with $kept unfinished cells' checkpoints; $dropped left out to start afresh"
    ) | tee -a "$summary"
    [ "${PIPESTATUS[0]}" = 0 ] || say "table4: could not pack $dir"
    rm -f "$files" "$cells"
}

phase_table4() {
    local rc t=$SECONDS cap=$((phase_end - SECONDS)) dir=runs/sitting-table4 spent=0 args=()
    [ $has_prism -eq 1 ] || { say "table4: no prism binary ($prism)"; return; }
    if [ -n "$table4_args" ]; then read -ra args <<<"$table4_args"; dir=runs/sitting-table4-rate; fi
    [ -n "$table4_dir" ] && dir=$table4_dir
    if [ -n "$table4_from" ] && [ ! -f "$dir/wall.txt" ]; then
        [ -f "$table4_from" ] || { say "table4: --table4-from $table4_from: no such file"; return; }
        mkdir -p "$(dirname "$dir")"
        local got
        got=$(tar -tJf "$table4_from" 2>/dev/null | head -n 1 | cut -d/ -f1)
        [ "$got" = "$(basename "$dir")" ] ||
            { say "table4: $table4_from holds '${got:-nothing}', not the grid folder $(basename "$dir")"; return; }
        tar -xJf "$table4_from" -C "$(dirname "$dir")" || { say "table4: could not unpack $table4_from"; return; }
        say "table4: the grid sent back in $table4_from, $(cat "$dir/wall.txt" 2>/dev/null || echo 0)s spent before"
    fi
    mkdir -p "$dir"
    [ -f "$dir/wall.txt" ] && spent=$(cat "$dir/wall.txt")
    # the slow-call trace on: a context call or capture that holds a cell is named in the log
    local slow_ms=${PRISM_CUDA_SLOW_MS:-1000}
    capped $cap "$logs/table4.log" env PRISM_CUDA_SLOW_MS="$slow_ms" "$prism" ablate --grid table4 --device cuda \
        --workers threads --jobs 16 --out "$dir" "${args[@]}" "${sets[@]}"
    rc=$?
    spent=$((spent + SECONDS - t))
    echo "$spent" >"$dir/wall.txt"
    "$prism" ablate --grid table4 --out "$dir" "${args[@]}" "${sets[@]}" --dry-run >"$logs/table4-state.log" 2>&1
    local what="the paper's protocol"
    [ -z "$table4_args" ] || what=$table4_args
    say "table4: $(status_of $rc $cap) after $((SECONDS - t))s this call, ${spent}s in all over the calls ($what)"
    say "  $(tail -n 1 "$logs/table4-state.log")"
    grep -a 'cells done' "$logs/table4.log" | tail -n 1 | sed 's/^/  /' | tee -a "$summary"
    say "  $(grep -ac '^prism cuda: ' "$logs/table4.log") CUDA calls took ${slow_ms} ms or more (PRISM_CUDA_SLOW_MS; named in logs/table4.log)"
    pack_table4 "$dir"
    say "  the grid packed: $out/table4-grid.tar.xz ($(du -k "$out/table4-grid.tar.xz" 2>/dev/null | cut -f1) KiB;" \
        "carry it and pass --table4-from to go on elsewhere)"
}

# ---- the sitting ------------------------------------------------------------------------
timing=""
for ((i = 0; i < ${#phase_list[@]}; i++)); do
    ph=${phase_list[i]}
    if [ "$ph" = gpu ]; then
        phase_budget=$(( $(left) < 20 ? $(left) : 20 ))
    else
        sum=0
        for ((j = i; j < ${#phase_list[@]}; j++)); do sum=$((sum + weight[${phase_list[j]}])); done
        phase_budget=$(( sum > 0 ? $(left) * weight[$ph] / sum : 0 ))
    fi
    if [ $phase_budget -lt 10 ]; then
        say "== $ph: skipped: its share of the deadline is spent (${phase_budget}s of $(left)s left)"
        timing="$timing $ph=skipped"
        continue
    fi
    say "== $ph: ${phase_budget}s of the $(left)s left"
    phase_end=$((SECONDS + phase_budget)) t=$SECONDS
    "phase_$ph"
    timing="$timing $ph=$((SECONDS - t))s"
done
say "== done at ${SECONDS}s of ${deadline}s:$timing"
pack_logs
ls -l "$out" | tail -n +2
