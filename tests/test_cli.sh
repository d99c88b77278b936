#!/bin/sh
# tests/test_cli.sh: every subcommand of `prism`, good and bad options, run
# as a user runs them. Each case names the exit status the command must end
# with and a text its output (stdout and stderr) must contain. Sizes are tiny.
#
#   sh tests/test_cli.sh PRISM          the CPU cases
#   sh tests/test_cli.sh --part NAME PRISM   one part of them: commands,
#                                       inspect, runs or grids
#   sh tests/test_cli.sh --cuda PRISM   the GPU cases; exits 77 (ctest's skip
#                                       code) when the first one finds no GPU
cuda=0 part=all
if [ "$1" = "--cuda" ]; then cuda=1; shift; fi
if [ "$1" = "--part" ]; then part=$2; shift 2; fi
prism=${1:?usage: test_cli.sh [--cuda] [--part NAME] PRISM}
case $prism in /*) ;; *) prism=$PWD/$prism ;; esac   # some cases run in another folder
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect STATUS TEXT ARG...: run prism ARG...
expect() {
    want=$1 text=$2
    shift 2
    out=$("$prism" "$@" 2>&1)
    rc=$?
    if [ $cuda = 1 ] && [ $rc = 77 ]; then
        echo "skipped: prism $* found no usable GPU"
        exit 77
    fi
    case $out in
    *"$text"*) [ $rc = "$want" ] && { echo "ok    prism $*"; return; } ;;
    esac
    echo "FAIL  prism $*"
    echo "      exit $rc (expected $want); the output should contain: $text"
    echo "$out" | head -n 8 | sed 's/^/      | /'
    failed=$((failed + 1))
}

# out_has_line REGEX: a line of the last expect's output matches REGEX (extended)
out_has_line() {
    if echo "$out" | grep -Eq -- "$1"; then echo "ok    a line matches $1"; return; fi
    echo "FAIL  no line of the output matches: $1"
    echo "$out" | head -n 8 | sed 's/^/      | /'
    failed=$((failed + 1))
}

# file_has TEXT FILE: a file a command wrote holds TEXT
file_has() {
    if grep -qF -- "$1" "$2" 2>/dev/null; then echo "ok    $2 holds $1"; return; fi
    echo "FAIL  $2 should hold: $1"
    failed=$((failed + 1))
}

# svg_doc FILE: a whole SVG document, from the XML declaration and <svg to </svg>
svg_doc() {
    if [ "$(head -c 5 "$1" 2>/dev/null)" = "<?xml" ] && sed -n 2p "$1" | grep -q '^<svg ' &&
        [ "$(tail -n 1 "$1")" = "</svg>" ]; then
        echo "ok    $1 is an SVG document"
        return
    fi
    echo "FAIL  $1 should be an SVG document (<?xml, then <svg ..., ending in </svg>)"
    failed=$((failed + 1))
}

# same_file A B: two files a command wrote are byte for byte the same
same_file() {
    if cmp -s "$1" "$2"; then echo "ok    $2 is the same as $1"; return; fi
    echo "FAIL  $2 should be the same as $1"
    diff "$1" "$2" | head -n 8 | sed 's/^/      | /'
    failed=$((failed + 1))
}

ref=$tmp/ref.safetensors
if [ $cuda = 1 ]; then
    expect 0 "no target judged" bench ops --device cuda --quick
    expect 0 "wrote" golden-check --make "$ref" --size 1,5,1,4,3,2
    expect 0 "6 passed, 0 failed" golden-check "$ref" --device cuda --tf32
    expect 0 "6 passed, 0 failed" golden-check "$ref" --device cuda --dtype f32 --form chunked --chunk 32   # gla has a chunked CUDA form now
    expect 0 "6 passed, 0 failed" golden-check "$ref" --device cuda --dtype bf16 --form both
    expect 0 "linattn" bench recurrence --device cuda --dtype f32 --size 1 --rules linattn --reps 1 --warmup 0 \
        --no-token
    expect 0 "chunk64/bf16" bench recurrence --device cuda --dtype bf16 --size 1 --rules gdn --reps 1 --warmup 0 \
        --no-token
    expect 2 "--dtype f64 needs --device cpu" bench recurrence --device cuda --dtype f64
    # force.bf16_mma: bf16 wgmma in the output and dlocal on bf16 data; the f32 row's plan refuses it
    expect 0 "output bf16 dlocal bf16" bench recurrence --device cuda --dtype bf16 --shape 1,256,2,64,64 \
        --rules gdn --reps 1 --warmup 0 --no-token --force bf16_mma=on
    expect 0 "bf16_mma refused: f32 data" bench recurrence --device cuda --dtype f32 --shape 1,256,2,64,64 \
        --rules gdn --reps 1 --warmup 0 --no-token --force bf16_mma=on
    expect 0 "gla_state(bk 64, bv 32) gla_out" bench recurrence --device cuda --dtype f32 --shape 1,256,2,32,32 \
        --rules gla --reps 1 --warmup 0
    expect 0 "target <= 1.00x fla (2.000 ms, this run)" bench recurrence --device cuda --size 1 --rules gla \
        --reps 1 --warmup 0 --no-token --fla-gla 2
    expect 0 "segments" bench recurrence --device cuda --dtype f32 --shape 1,2048,2,32,32 --rules gdn --reps 1 \
        --warmup 0 --no-token
    expect 0 "state(bv 32) scores" bench recurrence --device cuda --dtype f32 --shape 1,2048,2,32,32 --rules gdn \
        --reps 1 --warmup 0 --no-token --force segments=1,state=mma
    expect 0 "backward split (forced" bench recurrence --device cuda --dtype f32 --size 1 --rules ttt_linear \
        --reps 1 --warmup 0 --ttt-bwd split
    expect 0 '"task":"parity"' train --model prism --task parity --device cuda --steps 4 --set d_model=8 \
        --set seq_len=16 --set train.batch=4 --set train.ckpt_every=2 --out "$tmp/cuda-run"
    out_has_line 'precision tf32, in '   # train.precision auto: TF32 on CUDA for a probe task (bf16 for lm, rec)
    expect 0 '"steps":6' train --out "$tmp/cuda-run" --resume --steps 6 --device cuda
    # CUDA graphs: the step captured after two eager steps and replayed; the header says so, and
    # no capture was refused (that line would say 'off from step')
    expect 0 "prism train: cuda graph on (captured after 2 eager steps" train --model prism --task parity \
        --device cuda --steps 6 --set d_model=8 --set seq_len=16 --set train.batch=4 --set train.cuda_graph=on \
        --out "$tmp/cuda-graph"
    if echo "$out" | grep -q "off from step"; then echo "FAIL  the capture was refused: $out"; failed=$((failed + 1)); fi
    expect 0 "precision bf16, cuda graph on" bench throughput --models prism,gdn --seq-lens 128 \
        --tokens-per-batch 4096 --preset probe --steps 3 --device cuda --set train.cuda_graph=on --out "$tmp/tp-graph"
    out_has_line '^[|] prism [|] [0-9]+ [|] [0-9]+ [|] [0-9]+[.][0-9] [|]$'
    expect 0 "precision tf32" bench throughput --models gdn --seq-lens 64 --tokens-per-batch 128 --preset probe \
        --steps 1 --device cuda --precision tf32 --out "$tmp/tp-tf32"
    expect 0 '"run_dir"' eval --run "$tmp/cuda-run" --device cuda
    printf '{"models":["prism","gdn"],"tasks":["parity"],"steps":4,"set":{"d_model":8,"seq_len":16,"train.batch":4}}' \
        >"$tmp/grid.json"
    expect 0 "2 cells: 2 run, 0 reused, 0 failed" ablate --grid "$tmp/grid.json" --device cuda --out "$tmp/abl"
    expect 0 "2 cells: 0 run, 2 reused, 0 failed" ablate --grid "$tmp/grid.json" --device cuda --out "$tmp/abl"
    expect 0 "2 cells: 2 run, 0 reused, 0 failed" ablate --grid "$tmp/grid.json" --device cuda --jobs 2 \
        --out "$tmp/abl-jobs"
    # worker threads, each on its own stream: the same table, bit for bit
    expect 0 "2 cells: 2 run, 0 reused, 0 failed" ablate --grid "$tmp/grid.json" --device cuda --jobs 2 \
        --workers threads --out "$tmp/abl-threads"
    same_file "$tmp/abl/results.json" "$tmp/abl-threads/results.json"
    # at 4 steps every cell's acc may be 0: the final losses are compared as well
    expect 0 "2 cells: 0 run, 2 reused, 0 failed" ablate --grid "$tmp/grid.json" --device cuda --metric loss \
        --out "$tmp/abl"
    expect 0 "2 cells: 0 run, 2 reused, 0 failed" ablate --grid "$tmp/grid.json" --device cuda --metric loss \
        --out "$tmp/abl-threads"
    same_file "$tmp/abl/results-loss.json" "$tmp/abl-threads/results-loss.json"
    expect 0 "device peak MiB" compare --models prism,gdn --task parity --steps 3 --set d_model=8 --set seq_len=16 \
        --device cuda --out "$tmp/cmp"
    expect 0 "| attn |" bench throughput --models prism,gdn,mamba2,ttt_linear,attn --seq-lens 64,128 \
        --tokens-per-batch 256 --preset probe --steps 1 --device cuda --out "$tmp/tp"
    expect 0 '"test_auc"' train --model gdn --task rec --device cuda --steps 4 --set d_model=8 \
        --set seq_len=16 --set train.batch=4 --set train.ckpt_every=2 --out "$tmp/cuda-rec"
    expect 0 '"steps":6' train --out "$tmp/cuda-rec" --resume --steps 6 --device cuda
    expect 0 '"model":"sasrec","task":"rec"' train --model sasrec --task rec --device cuda --steps 2 \
        --set seq_len=16 --set rec.negatives=8 --out "$tmp/cuda-sasrec"
    [ $failed = 0 ] || { echo "$failed CLI case(s) failed"; exit 1; }
    exit 0
fi

# shared by the parts below: the tiny training sizes and a small text for lm
tiny="--set d_model=8 --set seq_len=16 --set train.batch=4 --set train.eval_batches=1"
i=0; while [ $i -lt 40 ]; do echo "the quick brown fox jumps over the lazy dog"; i=$((i + 1)); done > "$tmp/text.txt"

# The CPU cases come in four parts, each standing alone, so ctest can run them
# side by side (--part NAME); without --part all four run in order.
part_commands() {
# the command itself
expect 2 "usage: prism <command>"
expect 0 "commands:" --help
expect 2 "prism: unknown command 'nosuch'" nosuch

# gradcheck
expect 0 "usage: prism gradcheck" gradcheck --help
expect 2 "usage: prism gradcheck" gradcheck
expect 0 "1 passed, 0 failed" gradcheck --op exp --seed 7
expect 0 "rmsnorm_gated" gradcheck --list
expect 2 "prism gradcheck: --seed wants a non-negative integer, not 'abc'" gradcheck --op exp --seed abc
expect 2 "prism gradcheck: --seed wants a non-negative integer, not '-1'" gradcheck --op exp --seed -1
expect 2 "prism gradcheck: --seed wants a non-negative integer, not '7x'" gradcheck --op exp --seed 7x
expect 2 "prism gradcheck: option --op needs a value" gradcheck --op
expect 2 "prism gradcheck: --op wants an op's name, not 'nosuch'" gradcheck --op nosuch
expect 2 "prism gradcheck: --all and --op exclude each other" gradcheck --all --op exp
expect 2 "prism gradcheck: unknown option '--bogus' (prism gradcheck --help lists the options)" gradcheck --bogus

# golden-check, on a reference file it writes itself
expect 0 "usage: prism golden-check" golden-check --help
expect 2 "usage: prism golden-check" golden-check
expect 0 "wrote" golden-check --make "$ref" --size 1,5,1,4,3,2
expect 0 "6 passed, 0 failed" golden-check "$ref" --tol 1e-8 --device cpu --dtype f64 --form both
expect 0 "rel_err=" golden-check "$ref" --dtype f32 --form chunked --chunk 2 --verbose
expect 0 "units of bf16 rounding" golden-check "$ref" --dtype bf16 --form both
expect 1 "nothing.safetensors" golden-check "$tmp/nothing.safetensors"
expect 2 "prism golden-check: --tol wants a number > 0, not 'abc'" golden-check "$ref" --tol abc
expect 2 "prism golden-check: --tol wants a number > 0, not '-1'" golden-check "$ref" --tol -1
expect 2 "prism golden-check: --tol wants a number > 0, not 'nan'" golden-check "$ref" --tol nan
expect 2 "prism golden-check: --chunk wants an integer from 1 to 4096, not '0'" golden-check "$ref" --chunk 0
expect 2 "prism golden-check: --form wants recurrent, chunked or both, not 'x'" golden-check "$ref" --form x
expect 2 "prism golden-check: --device wants cpu or cuda, not 'gpu'" golden-check "$ref" --device gpu
expect 2 "prism golden-check: --dtype wants f64, f32 or bf16, not 'f16'" golden-check "$ref" --dtype f16
expect 2 "prism golden-check: --tf32 applies to --device cuda only" golden-check "$ref" --tf32
expect 2 "prism golden-check: --force applies to --device cuda only" golden-check "$ref" --force gla_fast=on
expect 2 "prism golden-check: --force: bf16_mma needs =on or off, got 'bf16_mma=1'" golden-check "$ref" --device cuda \
    --force bf16_mma=1
expect 2 "prism golden-check: unknown option '--bogus' (prism golden-check --help lists the options)" \
    golden-check "$ref" --bogus
expect 2 "prism golden-check: unknown argument 'again'" golden-check "$ref" again
expect 2 "prism golden-check: --make writes a reference file" golden-check --make "$tmp/x" --tol 1
expect 2 "prism golden-check: --size wants B,T,H,K,V,L" golden-check --make "$tmp/x" --size 1,2
expect 2 "prism golden-check: --size wants up to 6 comma-separated integers" golden-check --make "$tmp/x" --size 1,x
expect 2 "prism golden-check: --size sets the sizes of --make OUT" golden-check "$ref" --size 1,5,1,4,3,2
expect 2 "prism golden-check: unknown option '--reps'" golden-check "$ref" --device cuda --reps 1

# bench
expect 2 "usage: prism bench" bench
expect 2 "prism bench: unknown benchmark 'nosuch'" bench nosuch
expect 0 "usage: prism bench ops" bench ops --help
expect 0 "no target judged" bench ops --device cpu --quick --reps 2
expect 2 "prism bench ops: --reps wants an integer from 1 to 100000, not '0'" bench ops --device cpu --reps 0
expect 2 "prism bench ops: --reps wants an integer from 1 to 100000, not '2x'" bench ops --device cpu --reps 2x
expect 2 "prism bench ops: --device wants cpu or cuda, not 'tpu'" bench ops --device tpu
expect 2 "prism bench ops: unknown option '--bogus' (prism bench ops --help lists the options)" bench ops --bogus
expect 0 "usage: prism bench fused" bench fused --help
expect 2 "prism bench fused: --reps wants an integer from 1 to 100000, not '0'" bench fused --device cpu --reps 0
expect 2 "prism bench fused: unknown option '--bogus' (prism bench fused --help lists the options)" bench fused --bogus
expect 2 "prism bench fused: --sdpa-ms" bench fused --device cpu --sdpa-ms -1
expect 2 "prism bench fused: --sdpa96-ms" bench fused --device cpu --sdpa96-ms 0

expect 0 "usage: prism bench recurrence" bench recurrence --help
expect 0 "cpu chunked C=16: fwd pr_rec_gla_forward_chunked" bench recurrence --device cpu --rules gla --reps 1 \
    --no-token --chunks 16
expect 0 "cpu bf16, chunk 16" bench recurrence --device cpu --dtype bf16 --rules gdn --reps 1 --no-token --chunks 16
expect 0 "chunk 16; seconds, best of 1" bench recurrence --device cpu --dtype f32 --rules linattn --reps 1 \
    --warmup 0 --chunks 16 --no-token
expect 2 "prism bench recurrence: --fla-gla applies to --device cuda only" bench recurrence --device cpu --fla-gla 1.5
expect 2 "prism bench recurrence: --fla-gla wants up to 2 comma-separated numbers > 0, not '1,0'" \
    bench recurrence --device cuda --fla-gla 1,0
# --device cuda and --dtype f32 are accepted: what stops this one is --bogus
expect 2 "prism bench recurrence: unknown option '--bogus' (prism bench recurrence --help lists the options)" \
    bench recurrence --device cuda --dtype f32 --bogus
expect 2 "prism bench recurrence: --dtype f64 needs --device cpu" bench recurrence --dtype f64
expect 2 "prism bench recurrence: --size picks a GPU size" bench recurrence --device cpu --size 1
expect 2 "prism bench recurrence: --shape picks a GPU size" bench recurrence --device cpu --shape 1,64,2,8,8
expect 2 "prism bench recurrence: --shape wants five sizes B,T,H,K,V" bench recurrence --device cuda --shape 1,64
expect 2 "prism bench recurrence: --fp32 applies to --device cuda only" bench recurrence --device cpu --fp32
expect 2 "prism bench recurrence: --force applies to --device cuda only" bench recurrence --device cpu \
    --force segments=1
expect 2 "prism bench recurrence: --ttt-bwd applies to --device cuda only" bench recurrence --device cpu \
    --ttt-bwd split
expect 2 "prism bench recurrence: --force: unknown field in 'segs=2'" bench recurrence --force segs=2
expect 2 "prism bench recurrence: --force: state needs =mma or wgmma, got 'state=tf32'" bench recurrence \
    --force bv_state=32,state=tf32
expect 2 "prism bench recurrence: --ttt-bwd wants" bench recurrence --ttt-bwd sideways
expect 2 "prism bench recurrence: --rules: the TTT ops have no CPU timing" bench recurrence --device cpu --rules ttt_linear
expect 2 "prism bench recurrence: --rules wants a comma-separated list of linattn" bench recurrence --rules gdn,foo
expect 2 "prism bench recurrence: --chunks takes one chunk size with --device cpu" \
    bench recurrence --device cpu --chunks 32,64
expect 2 "prism bench recurrence: --chunks wants up to 4 comma-separated integers" bench recurrence --chunks 64,
expect 2 "prism bench recurrence: --reps wants an integer from 1 to 100000, not 'abc'" bench recurrence --reps abc
expect 2 "prism bench recurrence: --warmup wants an integer from 0 to 100000, not '-1'" bench recurrence --warmup -1
expect 2 "prism bench recurrence: option --size needs a value" bench recurrence --size
}

part_inspect() {
# data rec: the synthetic set, and small files written here
expect 0 "usage: prism data rec" data rec --help
expect 2 "usage: prism data rec" data
expect 2 "prism data: unknown dataset 'nosuch'" data nosuch
expect 0 '"dataset":"synthetic","seed":1,"users":1869,"items":33135' data rec
expect 0 '{"dataset":"synthetic","seed":18446744073709551615,"users":20,"items":300,' \
    data rec --synthetic --users 20 --items 300 --seed 18446744073709551615
csv=$tmp/ratings.csv
printf 'u1,a,5.0,3\nu1,b,4.0,1\nu1,c,3.0,2\nu2,a,5.0,1\nu2,b,1.0,2\nu2,c,2.0,3\nu3,a,1.0,1\n' >"$csv"
expect 0 '"users":2,"items":3,"interactions":6,"avg_len":3,' data rec --file "amazon2014:$csv" --min-item 1 --min-user 3
expect 0 "items >= 3, users >= 3, repeated until both hold" data rec --file "amazon2014:$csv" --min-item 3 \
    --min-user 3 --iterate
# ids that do not say which column holds the users: refused unless the format is named
expect 1 "prism data rec: $csv: cannot tell the format from the first lines" data rec --amazon "$csv"
expect 1 "amazon2014:FILE (CSV user,item,rating,timestamp), amazon2018:FILE (CSV item,user,rating,timestamp)" \
    data rec --file "amazon:$csv"
# the 2018 CSV (item first) detected by its ids, and by a header; swapped, it is the 2014 one
printf '0132793040,AKM1MP6P0OYPR,5.0,1365811200\n0132793040,A2CX7LUOHB2NDG,5.0,1341100800\nB00004ZCJE,AKM1MP6P0OYPR,4.0,1365811300\n' \
    >"$tmp/r2018.csv"
expect 0 '"format":"amazon2018","file":' data rec --amazon "$tmp/r2018.csv" --min-item 1 --min-user 1
expect 0 '"users":2,"items":2,"interactions":3' data rec --amazon "$tmp/r2018.csv" --min-item 1 --min-user 1
expect 0 "amazon2018 (detected)" data rec --amazon "$tmp/r2018.csv" --min-item 1 --min-user 1
awk -F, '{ print $2 "," $1 "," $3 "," $4 }' "$tmp/r2018.csv" >"$tmp/r2014.csv"
expect 0 '"format":"amazon2014","file":' data rec --amazon "$tmp/r2014.csv" --min-item 1 --min-user 1
{ echo "item,user,rating,timestamp"; cat "$csv"; } >"$tmp/h2018.csv"
expect 0 '"format":"amazon2018"' data rec --amazon "$tmp/h2018.csv" --min-item 1 --min-user 1
expect 1 "$tmp/h2018.csv:1: the header names item,user: that is the amazon2018 (item,user,...) layout" \
    data rec --file "amazon2014:$tmp/h2018.csv"
printf 'u1,a,5.0,3\nu1,b,4.0,x\nu1,c,3.0,2\n' >"$tmp/bad.csv"
expect 1 "prism data rec: $tmp/bad.csv:2: field timestamp: not an integer ('x')" data rec --file "amazon2014:$tmp/bad.csv"
expect 0 '"bad_lines":1,"users":1,"items":2' data rec --file "amazon2014:$tmp/bad.csv" --skip-bad --min-item 1 \
    --min-user 1
json=$tmp/review.json
printf '{"user_id":"U1","business_id":"B1","date":"2018-01-02 10:00:00"}\n{"user_id":"U1","business_id":"B2","date":"2018-01-01 10:00:00"}\n' >"$json"
expect 0 '"users":1,"items":2,"interactions":2' data rec --yelp "$json" --min-item 1 --min-user 2
printf '{"user_id":"U1","business_id":"B1","date":"2018-01-02 10:00:00"}\n{"user_id":"U1",\n' >"$tmp/bad.json"
expect 1 "prism data rec: $tmp/bad.json:2: not a JSON object" data rec --yelp "$tmp/bad.json"
expect 1 "prism data rec: $tmp/nothing.csv: cannot open" data rec --amazon "$tmp/nothing.csv"
expect 2 "prism data rec: --synthetic, --file, --amazon and --yelp exclude each other" data rec --synthetic --amazon "$csv"
expect 2 "prism data rec: --file 'movielens:x' is not FORMAT:FILE" data rec --file movielens:x
expect 2 "prism data rec: --seed, --users and --items apply to --synthetic only" data rec --yelp "$json" --seed 2
expect 2 "prism data rec: --min-item, --min-user, --iterate and --skip-bad apply to files only" \
    data rec --min-user 3
expect 2 "prism data rec: --users wants an integer from 1 to 10000000, not '0'" data rec --users 0
expect 2 "prism data rec: --seed wants a non-negative integer, not 'x'" data rec --seed x
expect 2 "prism data rec: option --amazon needs a value" data rec --amazon
expect 2 "prism data rec: unknown option '--bogus' (prism data rec --help lists the options)" data rec --bogus

# inspect: gradient norms, the tape, write ranks (B=2 T=32 H=4, 2 layers: 512 writes), dumps
expect 0 "usage: prism inspect" inspect --help
expect 2 "prism inspect: --model NAME or --run DIR is required" inspect
expect 0 '"rank_layers":2,"rank_max_possible":1,"rank_hist":[0,512]}' inspect --model gdn --rank
# form paper: the write is the L refinement steps (rank L); form augmented adds them to gdn's write (L + 1)
expect 0 '"rank_max_possible":2,"rank_hist":[0,0,512]}' inspect --model prism --set prism.L=2 --rank
expect 0 '"rank_max_possible":1,"rank_hist":[0,512]}' inspect --model prism --set prism.L=1 --rank
expect 0 '"rank_max_possible":3,"rank_hist":[0,0,0,512]}' inspect --model prism --set prism.form=augmented --set prism.L=2 --rank
# without gain and GELU the second refinement is r - r = 0: one rank less in either form
expect 0 '"rank_hist":[0,512,0]}' inspect --model prism --set prism.gain=false --set prism.gelu=false --rank
expect 0 '"rank_hist":[0,0,512,0]}' inspect --model prism --set prism.form=augmented --set prism.gain=false --set prism.gelu=false --rank
expect 0 '"rank_max_possible":2,"rank_hist":[0,0,512]}' inspect --model prism --set prism.form=augmented --set prism.L=1 --rank
# mamba2's write k v^T has rank 1 whatever its state size: N = 16 keeps the SVDs cheap (N = 128 took 20 s under ASan)
expect 0 '"rank_hist":[0,256]}' inspect --model mamba2 --set mamba2.d_state=16 --rank
expect 0 "ttt_linear has no linear recurrence" inspect --model ttt_linear --rank
expect 0 "layers.1.mixer.w_k.1" inspect --model prism --steps 3 --csv "$tmp/g.csv" --plot "$tmp/g.svg"
file_has "</svg>" "$tmp/g.svg"
file_has "step,loss,embed," "$tmp/g.csv"
expect 0 "recurrence" inspect --model gdn --tape - --dot "$tmp/t.dot"
# the same tape, the same file: node ids are tape positions, not addresses
expect 0 "recurrence" inspect --model gdn --tape - --dot "$tmp/t2.dot"
same_file "$tmp/t.dot" "$tmp/t2.dot"
file_has "digraph tape" "$tmp/t.dot"
expect 0 "dumped " inspect --model linattn --steps 2 --dump 1 --dump-file "$tmp/d.safetensors"
printf 'the quick brown fox jumps over the lazy dog, again and again and again.\n' >"$tmp/text"
expect 0 '"loss_first":' inspect --model gdn --text "$tmp/text" --batch 1 --seq-len 16
expect 1 "prism inspect: $tmp/text: 72 bytes, the batch needs B*(T+1) = 130" inspect --model gdn --text "$tmp/text" \
    --seq-len 64
expect 1 "prism inspect: $tmp/nothing: cannot open" inspect --model gdn --text "$tmp/nothing"
expect 2 "prism inspect: --text needs an LM with vocab >= 256" inspect --model gdn --set vocab=64 --text "$tmp/text"
expect 2 "prism inspect: --dump 3 is past the last step (--steps 2 runs steps 0 to 1)" inspect --model gdn \
    --steps 2 --dump 3
expect 2 "prism inspect: --dump-file needs --dump STEP" inspect --model gdn --dump-file "$tmp/x"
expect 2 "prism inspect: --steps wants an integer from 1 to 100000, not '0'" inspect --model gdn --steps 0
expect 2 "prism inspect: --lr wants a number > 0, not '-1'" inspect --model gdn --lr -1
expect 2 "prism inspect: --seed wants an integer from 0 to 2147483647" inspect --model gdn --seed 4294967296
expect 2 "prism.L" inspect --model prism --set prism.L=99
expect 2 "mixer" inspect --model nosuch
expect 2 "prism inspect: unknown option '--bogus' (prism inspect --help lists the options)" inspect --model gdn --bogus
expect 1 "prism inspect: $tmp/no/dir/t.txt: cannot write" inspect --model gdn --tape "$tmp/no/dir/t.txt"
# inspect --run continues a run with its own task, batches and optimizer: its losses are the
# run's (both on the CPU: inspect runs there, and a GPU machine would train on CUDA)
# shellcheck disable=SC2086
"$prism" train --model prism --task parity --steps 3 --device cpu --out "$tmp/ra" $tiny >/dev/null 2>&1
# shellcheck disable=SC2086
"$prism" train --model prism --task parity --steps 5 --device cpu --out "$tmp/rb" $tiny --set train.log_every=1 \
    >/dev/null 2>&1
expect 0 "run $tmp/ra: prism on parity, from the checkpoint of step 3" inspect --run "$tmp/ra" --steps 2 \
    --csv "$tmp/ra.csv"
loss=$(sed -n 3p "$tmp/ra.csv" | cut -d, -f2)   # step 4 (0-based): the run's line "step":5
file_has "{\"step\":5,\"loss\":$loss," "$tmp/rb/metrics.jsonl"
expect 0 '"rank_max_possible":2,' inspect --run "$tmp/ra" --rank
expect 2 "prism inspect: --run DIR takes the run's model, data and optimizer" inspect --run "$tmp/ra" --model gdn
expect 2 "prism inspect: --run DIR takes the run's model, data and optimizer" inspect --run "$tmp/ra" --lr 1
expect 1 "prism inspect: $tmp/nowhere/config.json: cannot open" inspect --run "$tmp/nowhere"
# model
expect 0 "usage: prism model" model --help
expect 2 "prism model: --model NAME or --config FILE is required" model
expect 0 "total " model --model attn --preset probe --set attn.kv_heads=1
expect 2 "prism model: unknown option '--bogus' (prism model --help lists the options)" model --model gdn --bogus
expect 2 "prism model: option --set needs a value" model --model gdn --set
expect 2 "prism model: --logits wants" model --model gdn --logits 1,x
expect 2 "--logits token 300 is not below vocab 256" model --model gdn --logits 1,300
expect 0 '{"model":"mamba","tokens":3,"vocab":256}' model --model mamba --logits 1,2,3
expect 2 "config: attn.kv_heads 3 does not divide n_heads 4" model --model attn --set attn.kv_heads=3

# bench block
expect 0 "usage: prism bench block" bench block --help
expect 2 "prism bench block: unknown option '--bogus' (prism bench block --help lists the options)" bench block --bogus
expect 2 "prism bench block: --T wants an integer from 1" bench block --T 0
expect 2 "prism bench block: --device wants" bench block --device tpu
expect 2 "prism bench block: unknown mixer 'rwkv'" bench block --mixer rwkv
expect 0 '{"mamba":{' bench block --mixer mamba --preset probe --B 1 --T 3 --iters 1 --device cpu
expect 0 "cpu bf16; median of 1" bench block --mixer gdn --preset probe --B 1 --T 3 --iters 1 --device cpu \
    --precision bf16
expect 2 "prism bench block: --precision wants f32, tf32 or bf16, not 'auto'" bench block --precision auto
}

part_runs() {
# convert
expect 0 "usage: prism convert" convert --help
expect 2 "prism convert: give exactly one of --from-fla DIR and --to-fla DIR" convert --checkpoint a --config b
expect 2 "prism convert: --checkpoint FILE and --config FILE are required" convert --from-fla "$tmp"
expect 2 "prism convert: unknown option '--bogus' (prism convert --help lists the options)" convert --bogus
expect 1 "prism convert: $tmp/nofla/config.json: cannot open" convert --from-fla "$tmp/nofla" --checkpoint \
    "$tmp/c.safetensors" --config "$tmp/c.json"
printf '{"mixer":"attn","d_model":16,"n_heads":2,"vocab":30,"attn":{"bias":true}}' >"$tmp/attnb.json"
expect 0 "" model --config "$tmp/attnb.json" --save "$tmp/attnb.safetensors"
expect 1 "prism convert: fla export: attn.rope=true attn.bias=true: fla's attention has RoPE and no biases" \
    convert --to-fla "$tmp/fla_attn" --checkpoint "$tmp/attnb.safetensors" --config "$tmp/attnb.json"
# a prism model out to fla's layout and back gives the same logits
printf '{"mixer":"gdn","d_model":16,"n_heads":2,"vocab":30,"mlp_mult":2,"tie_embeddings":false,"gdn":{"expand_v":2}}' \
    >"$tmp/gdn.json"
expect 0 "" model --config "$tmp/gdn.json" --save "$tmp/gdn.safetensors"
expect 0 "" convert --to-fla "$tmp/fla" --checkpoint "$tmp/gdn.safetensors" --config "$tmp/gdn.json"
grep -q '"expand_v":[[:space:]]*2' "$tmp/fla/config.json" || { echo "FAIL  fla config.json lacks expand_v 2"; failed=$((failed + 1)); }
expect 0 "" convert --from-fla "$tmp/fla" --checkpoint "$tmp/back.safetensors" --config "$tmp/back.json"
a=$("$prism" model --config "$tmp/gdn.json" --checkpoint "$tmp/gdn.safetensors" --logits 3,1,4,1,5)
b=$("$prism" model --config "$tmp/back.json" --checkpoint "$tmp/back.safetensors" --logits 3,1,4,1,5)
if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "ok    logits after fla and back"; else
    echo "FAIL  logits differ after converting to fla and back"; failed=$((failed + 1)); fi
# train, eval, generate (tiny models, a few steps)
run=$tmp/run
expect 0 "usage: prism train" train --help
expect 0 "train.lr" train --help
expect 0 "usage: prism eval" eval --help
expect 0 "usage: prism generate" generate --help
# shellcheck disable=SC2086
expect 0 '"model":"prism","task":"parity","seed":3,"steps":4' train --model prism --task parity --steps 4 \
    --seed 3 $tiny --set train.ckpt_every=2 --device cpu --out "$run"
last=$(tail -n 1 "$run/metrics.jsonl")
case $last in *'"eval":{"acc":'*) ;; *) echo "FAIL  metrics.jsonl ends with $last"; failed=$((failed + 1)) ;; esac
out=$("$prism" eval --run "$run" 2>/dev/null | tail -n 1)
case $out in '{"model":"prism","task":"parity","seed":3,"steps":4,"metrics":{"acc":'*'"run_dir":'*'}') echo "ok    eval's last line is the JSON summary" ;;
*) echo "FAIL  eval's last line: $out"; failed=$((failed + 1)) ;; esac
expect 0 '"steps":6' train --out "$run" --resume --steps 6
expect 2 "prism train: --resume takes the run's own config" train --out "$run" --resume --model gdn
expect 2 "prism train: --resume needs --out DIR" train --resume
# a run is never replaced by accident: a folder holding one needs --resume or --overwrite
# shellcheck disable=SC2086
expect 2 "prism train: --out $run holds a run: give --resume to continue it, --overwrite to replace it" train \
    --model prism --task parity --steps 1 $tiny --out "$run"
expect 2 "prism train: --resume continues the run in --out, --overwrite replaces it: give one" train --out "$run" \
    --resume --overwrite
expect 2 "prism train: --steps 2: the run in $run is at step 6 already; give a larger total" train --out "$run" \
    --resume --steps 2
expect 0 "the run in $run is at step 6, its total: nothing to train" train --out "$run" --resume
# shellcheck disable=SC2086
expect 0 '"steps":1' train --model prism --task parity --steps 1 $tiny --out "$run" --overwrite
if [ -e "$run/ckpt-00000006.weights.safetensors" ]; then
    echo "FAIL  --overwrite left the old run's checkpoint"; failed=$((failed + 1))
fi
# one train at a time in a folder; a lock left by a dead process is taken over
if command -v flock >/dev/null; then
    sh -c 'flock -n 9 && echo $$ >&9 && exec sleep 60' 9>"$run/.train.lock" &
    holder=$!
    until grep -q "$holder" "$run/.train.lock" 2>/dev/null; do sleep 0.1; done
    expect 1 "prism train: $run is in use by another prism train (pid $holder)" train --out "$run" --resume --steps 2
    kill "$holder"
    wait "$holder" 2>/dev/null || true
    sh -c 'exit 0' &
    dead=$!
    wait "$dead"
    echo "$dead" >"$run/.train.lock"
    expect 0 "taking over the lock of pid $dead, which is no longer running" train --out "$run" --resume --steps 2
fi
# the default folder is named after the model given, and a taken one is never reused
mkdir -p "$tmp/home"
cd "$tmp/home" || exit 1
# shellcheck disable=SC2086
expect 0 '"run_dir":"runs/sasrec-rec-s1"' train --model sasrec --task rec --steps 1 $tiny --set rec.negatives=4
# shellcheck disable=SC2086
expect 0 "runs/sasrec-rec-s1 holds a run; this one goes to runs/sasrec-rec-s1-2" train --model sasrec --task rec \
    --steps 1 $tiny --set rec.negatives=4
# shellcheck disable=SC2086
expect 0 '"run_dir":"runs/attn-rec-s1"' train --model attn --task rec --steps 1 $tiny --set rec.negatives=4
cd - >/dev/null || exit 1
# exit codes: a file that cannot be read 1, a bad command line (option or value) 2
expect 1 "prism train: $tmp/none.json: cannot open" train --config "$tmp/none.json"
expect 2 "prism train: config: d_model 15 is not a multiple of n_heads 2" train --task parity --set d_model=15
expect 2 "prism train: --out wants a value, not ''" train --task parity --out ""
expect 2 "prism train: --data is the lm task's text file; task parity does not read it" train --task parity \
    --data "$tmp/none.txt"
# shellcheck disable=SC2086
expect 0 '"steps":1' train --model gdn --task parity --steps 1 $tiny --device cpu --out "$tmp/nested/runs/gdn"
# the authors' probe protocol: its style, vocab and the memory tasks' own width
expect 0 '"task":"mqar"' train --model linattn --task mqar --preset probe-authors --steps 1 \
    --set train.eval_batches=1 --set train.batch=2 --set n_layers=1 --device cpu \
    --out "$tmp/authors"
file_has '"probe.style":	"authors"' "$tmp/authors/config.json"
file_has '"d_model":	128' "$tmp/authors/config.json"
file_has '"vocab":	32' "$tmp/authors/config.json"
expect 2 "preset probe-authors: the probes' protocol; task rec is not a probe" train --task rec --preset probe-authors
expect 2 "unknown preset 'nosuch'" train --task parity --preset nosuch
expect 2 "train.probe.style: 'both' is not allowed (allowed: paper|authors)" train --set probe.style=both
expect 2 "prism train: unknown task 'nosuch'" train --task nosuch
expect 2 "mixer" train --model nosuch --task parity
expect 2 "prism train: train.lr: 'abc' is not a number" train --set train.lr=abc
expect 2 "prism train: unknown training key 'train.bogus'" train --set train.bogus=1
expect 2 "unknown key 'bogus'" train --set bogus=1
expect 2 "prism train: --steps wants an integer from 0 to 2000000000, not '-1'" train --steps -1
expect 2 "prism train: --device wants auto, cpu or cuda, not 'tpu'" train --device tpu
expect 2 "prism train: unknown option '--bogus' (prism train --help lists the options)" train --bogus
# shellcheck disable=SC2086
expect 1 "task lm: no text file" train --task lm $tiny --steps 1 --out "$tmp/nolm"
# data parallel: the options, and what the launcher checks before it starts ranks
expect 2 "prism train: --gpus wants an integer from 1 to 1024, not '0'" train --gpus 0
expect 2 "prism train: --gpus and --procs: give one" train --gpus 2 --procs 2
expect 2 "prism train: --gpus N runs on CUDA; --procs N trains on the CPU" train --gpus 2 --device cpu
expect 2 "prism train: --procs N trains on the CPU; --gpus N runs on CUDA" train --procs 2 --device cuda
expect 2 "prism train: --zero wants an integer from 0 to 1, not '2'" train --zero 2
expect 2 "prism train: --bucket-mb wants a number > 0, not '-1'" train --bucket-mb -1
expect 2 "prism train: --dist-timeout wants a number > 0, not '0'" train --dist-timeout 0
expect 2 "prism train: option --dist-file needs a value" train --dist-file
# shellcheck disable=SC2086
expect 2 "prism train: train.batch=4 does not split evenly over 3 ranks" train --task parity $tiny --procs 3
export PRISM_NCCL_LIB="$tmp/no-such-libnccl.so.2"
# shellcheck disable=SC2086
expect 1 "PRISM_NCCL_LIB=$tmp/no-such-libnccl.so.2 cannot be used" train --task parity $tiny --gpus 2
unset PRISM_NCCL_LIB
# shellcheck disable=SC2086
expect 0 '"steps":2' train --model prism --task parity $tiny --steps 2 --procs 2 --out "$tmp/dp"
expect 1 "nothing/config.json: cannot open" eval --run "$tmp/nothing"
expect 2 "prism eval: --run DIR is required" eval
# shellcheck disable=SC2086
expect 0 '"bpb"' train --model gdn --task lm --data "$tmp/text.txt" $tiny --steps 3 --out "$tmp/lm"
expect 0 "the quick" generate --run "$tmp/lm" --prompt "the quick" --tokens 8 --top-k 5 --seed 2
expect 0 "the" generate --run "$tmp/lm" --prompt "the" --tokens 4 --temperature 0
expect 1 "generate needs a byte-level lm run" generate --run "$run" --prompt "x"
expect 2 "prism generate: --run DIR and a non-empty --prompt TEXT are required" generate --run "$tmp/lm"
expect 2 "prism generate: --temperature wants a number >= 0, not '-1'" generate --run "$tmp/lm" --prompt a \
    --temperature -1
# rec: 12 users of 45 items over 30, so the paper's filter keeps them all
rcsv=$tmp/rec.csv
awk 'BEGIN { for (u = 0; u < 12; u++) for (t = 0; t < 45; t++) printf "u%d,i%d,5.0,%d\n", u, (u * 7 + t) % 30, t }' >"$rcsv"
rec="--task rec --set rec.data=amazon2014:$rcsv $tiny"
# shellcheck disable=SC2086
expect 0 '"task":"rec","seed":1,"steps":3,"metrics":{"val_hit@10":' train --model gdn $rec --steps 3 \
    --set train.ckpt_every=2 --out "$tmp/rec"
expect 0 '"steps":4' train --out "$tmp/rec" --resume --steps 4
expect 0 '"test_auc"' eval --run "$tmp/rec"
printf '{"models":["gdn"],"tasks":["rec"],"steps":2,"set":{"rec.data":"amazon2014:%s","d_model":8,"seq_len":16}}' \
    "$rcsv" >"$tmp/recgrid.json"
expect 0 "| gdn | 0." ablate --grid "$tmp/recgrid.json" --out "$tmp/recabl"
file_has "gdn,rec,test_ndcg@10," "$tmp/recabl/results.csv"
file_has "<title>gdn, rec: 0." "$tmp/recabl/results.svg"
# --metric: another column of each cell's result.json, nothing retrained; a name no cell reports fails
expect 0 "| model | rec (test_auc) |" ablate --grid "$tmp/recgrid.json" --out "$tmp/recabl" --metric test_auc
expect 0 "1 cells: 0 run, 1 reused, 0 failed" ablate --grid "$tmp/recgrid.json" --out "$tmp/recabl" --metric test_hit@200
file_has "gdn,rec,test_hit@200," "$tmp/recabl/results-test_hit@200.csv"
file_has "gdn,rec,test_ndcg@10," "$tmp/recabl/results.csv"
expect 1 "prism ablate: --metric test_bogus: no finished cell reports it" ablate --grid "$tmp/recgrid.json" \
    --out "$tmp/recabl" --metric test_bogus
# a result.json damaged to "steps": 1e30 is run again, not cast to an integer (UBSan stopped ablate there)
sed -i 's/"steps":[[:space:]]*[0-9]*/"steps": 1e30/' "$tmp/recabl/gdn/rec/s1/result.json"
file_has '"steps": 1e30' "$tmp/recabl/gdn/rec/s1/result.json"
expect 0 "1 cells: 1 run, 0 reused, 0 failed" ablate --grid "$tmp/recgrid.json" --out "$tmp/recabl" --metric test_auc
# shellcheck disable=SC2086
expect 0 '"model":"sasrec","task":"rec"' train --model sasrec $rec --steps 2 --set rec.negatives=4 --out "$tmp/sasrec"
expect 2 "prism train: --model sasrec: a rec model; give --task rec" train --model sasrec --task parity
expect 2 "prism train: train.rec.data: 'movielens' is not synthetic, synthetic:full, amazon:FILE (detected), amazon2014:FILE" \
    train --task rec --set rec.data=movielens
expect 1 "prism train: $tmp/none.csv: cannot open" train --task rec --set "rec.data=amazon:$tmp/none.csv" \
    --out "$tmp/norec"
# shellcheck disable=SC2086
expect 1 "prism train: rec.n_items: set to 5, but the data (train.rec.data) has 30 items" train $rec \
    --set rec.n_items=5 --steps 1 --out "$tmp/rec5"
}

part_grids() {
# ablate: a tiny grid, resumed cell by cell; compare; bench throughput
g=$tmp/grid.json
printf '{"models":["prism","gdn"],"tasks":["parity"],"seeds":2,"steps":4,"set":{"d_model":8,"seq_len":16,"train.batch":4,"train.eval_batches":1}}' >"$g"
expect 0 "usage: prism ablate" ablate --help
expect 0 "DIR/results.svg" ablate --help
expect 2 "prism ablate: --grid NAME|FILE is required" ablate
expect 2 "prism ablate: unknown grid 'nosuch'" ablate --grid nosuch
printf '{"models":["prism"],"tasks":["parity"],"seedz":2}' >"$tmp/badgrid.json"
expect 2 "prism ablate: $tmp/badgrid.json: unknown key 'seedz'" ablate --grid "$tmp/badgrid.json"
expect 2 "prism ablate: --set: config: unknown key 'bogus'" ablate --grid "$g" --set bogus=1
expect 2 "prism ablate: --seeds wants an integer from 1 to 64, not '0'" ablate --grid "$g" --seeds 0
expect 0 "4 cells: 4 run, 0 reused, 0 failed" ablate --grid "$g" --device cpu --out "$tmp/abl"
expect 0 "| model | parity (acc) |" ablate --grid "$g" --out "$tmp/abl"
expect 0 "4 cells: 0 run, 4 reused, 0 failed" ablate --grid "$g" --out "$tmp/abl"
rm "$tmp/abl/gdn/parity/s2/result.json"
expect 0 "4 cells: 1 run, 3 reused, 0 failed" ablate --grid "$g" --out "$tmp/abl"
file_has "gdn,parity,acc," "$tmp/abl/results.csv"
file_has '"grid":	"grid"' "$tmp/abl/results.json"
svg_doc "$tmp/abl/results.svg"
file_has "<title>gdn, parity: 0." "$tmp/abl/results.svg"
file_has "<th>parity (acc)</th>" "$tmp/abl/report.html"   # the report page (tests/test_report.c renders one)
# --dry-run: what a run would do with each cell, touching nothing
expect 0 "4 cells: 4 done, 0 to resume, 0 new; nothing was run" ablate --grid "$g" --out "$tmp/abl" --dry-run
# table4: both probe styles, the paper's figure beside ours
expect 0 "324 cells: 0 done, 0 to resume, 324 new; nothing was run" ablate --grid table4 --dry-run --out "$tmp/t4"
expect 0 "| linattn authors-style | 0." ablate --grid table4 --only "linattn authors-style" --tasks parity \
    --seeds 1 --steps 2 --set train.eval_batches=1 --set train.batch=4 --device cpu --out "$tmp/t4"
file_has "(paper 0.49)" "$tmp/t4/results.md"
file_has '<span class="ref">paper 0.49</span>' "$tmp/t4/report.html"
file_has '"probe.style":	"authors"' "$tmp/t4/linattn-authors-style/parity/s1/config.json"
file_has '"shortconv":	5' "$tmp/t4/linattn-authors-style/parity/s1/config.json"
file_has '"d_model":	16' "$tmp/t4/linattn-authors-style/parity/s1/config.json"
file_has '"seq_len":	128' "$tmp/t4/linattn-authors-style/parity/s1/config.json"
file_has '"norm":	"layernorm"' "$tmp/t4/linattn-authors-style/parity/s1/config.json"
file_has '"lr":	0.001' "$tmp/t4/linattn-authors-style/parity/s1/config.json"
expect 0 "resumes from step" ablate --grid "$g" --out "$tmp/abl" --dry-run --steps 1000
expect 0 "4 cells: 0 done, 0 to resume, 4 new; nothing was run" ablate --grid "$g" --out "$tmp/abl-none" --dry-run
if [ -e "$tmp/abl-none" ]; then echo "FAIL  ablate --dry-run created $tmp/abl-none"; failed=$((failed + 1)); fi
# --jobs: worker processes, the same tables as one job; a rerun trains only the cell that has no result
expect 0 "4 cells: 4 run, 0 reused, 0 failed" ablate --grid "$g" --jobs 2 --out "$tmp/abl2"
same_file "$tmp/abl/results.csv" "$tmp/abl2/results.csv"
same_file "$tmp/abl/results.json" "$tmp/abl2/results.json"
same_file "$tmp/abl/results.svg" "$tmp/abl2/results.svg"
rm "$tmp/abl2/prism/parity/s2/result.json"
expect 0 "4 cells: 1 run, 3 reused, 0 failed" ablate --grid "$g" --jobs 3 --out "$tmp/abl2"
same_file "$tmp/abl/results.csv" "$tmp/abl2/results.csv"
expect 0 "ablate grid: 4/4 cells done, 0 running  (0 run, 4 reused, 0 failed)" ablate --grid "$g" --jobs 2 \
    --out "$tmp/abl2"
expect 2 "prism ablate: --jobs wants an integer from 1 to 64, not '0'" ablate --grid "$g" --jobs 0
# --workers threads: the cells as threads of one process, the same tables
expect 0 "4 cells: 4 run, 0 reused, 0 failed" ablate --grid "$g" --jobs 2 --workers threads --out "$tmp/abl3"
same_file "$tmp/abl/results.csv" "$tmp/abl3/results.csv"
same_file "$tmp/abl/results.json" "$tmp/abl3/results.json"
expect 0 "4 cells: 0 run, 4 reused, 0 failed" ablate --grid "$g" --metric loss --out "$tmp/abl"
expect 0 "4 cells: 0 run, 4 reused, 0 failed" ablate --grid "$g" --metric loss --out "$tmp/abl3"
same_file "$tmp/abl/results-loss.json" "$tmp/abl3/results-loss.json"
expect 0 "--workers W" ablate --help
expect 2 "prism ablate: --workers wants processes or threads, not 'fibers'" ablate --grid "$g" --workers fibers
# two ablates in one folder: the second is refused, naming the first's pid
if command -v flock >/dev/null; then
    sh -c 'flock -n 9 && echo $$ >&9 && exec sleep 60' 9>"$tmp/abl2/.ablate.lock" &
    holder=$!
    until grep -q "$holder" "$tmp/abl2/.ablate.lock" 2>/dev/null; do sleep 0.1; done
    expect 1 "prism ablate: $tmp/abl2 is in use by another prism ablate (pid $holder)" ablate --grid "$g" \
        --out "$tmp/abl2"
    kill "$holder"
    wait "$holder" 2>/dev/null || true
    # held by processes whose parent is gone: said
    sh -c 'flock -n 9 && echo 4194304 >&9 && exec sleep 60' 9>"$tmp/abl2/.ablate.lock" &
    holder=$!
    until grep -q 4194304 "$tmp/abl2/.ablate.lock" 2>/dev/null; do sleep 0.1; done
    expect 1 "(pid 4194304, no longer running: processes it started still hold the lock)" ablate --grid "$g" \
        --out "$tmp/abl2"
    kill "$holder"
    wait "$holder" 2>/dev/null || true
fi
# no --jobs on the CPU: a worker per core; --jobs 1: cells in this process (no workers' line)
if [ "$(nproc)" -ge 2 ]; then
    expect 0 "ablate grid: 4/4 cells done, 0 running" ablate --grid "$g" --device cpu --out "$tmp/abl2"
fi
expect 0 "ablate grid: 4/4 cells done  (0 run, 4 reused, 0 failed)" ablate --grid "$g" --jobs 1 --out "$tmp/abl2"
# a slice of a grid; names not in it; variants that would share a run folder
expect 0 "1 cells: 0 run, 1 reused, 0 failed" ablate --grid "$g" --only gdn --tasks parity --seeds 1 \
    --out "$tmp/abl2"
file_has "gdn,parity,acc," "$tmp/abl2/results.csv"
expect 2 "prism ablate: --only: 'mamba2' is not a model or variant of grid grid" ablate --grid "$g" --only mamba2
expect 2 "prism ablate: --tasks: 'mux' is not a task of grid grid" ablate --grid "$g" --tasks parity,mux
printf '{"variants":[{"name":"prism L=1","set":{"prism.L":1}},{"name":"prism-L-1"}],"tasks":["parity"]}' \
    >"$tmp/clash.json"
expect 2 "the variants 'prism L=1' and 'prism-L-1' would share the run folder 'prism-L-1'" ablate \
    --grid "$tmp/clash.json"
# a larger budget continues each cell from its checkpoint at step 4 (whose log line a fresh run lacks)
expect 0 "4 cells: 4 run, 0 reused, 0 failed" ablate --grid "$g" --steps 6 --seeds 2 --out "$tmp/abl"
file_has '"steps":	6' "$tmp/abl/prism/parity/s1/result.json"
file_has '{"step":4,"loss"' "$tmp/abl/prism/parity/s1/metrics.jsonl"
expect 1 "its checkpoint is at step 6, past the run's 5 steps" ablate --grid "$g" --steps 5 --out "$tmp/abl"
# a cell whose config changed is stale: listed by --dry-run, and a run trains nothing until --stale says what to do
one="--grid $g --only gdn --seeds 1 --jobs 1 --out $tmp/abl-stale"
# shellcheck disable=SC2086
expect 0 "1 cells: 1 run, 0 reused, 0 failed" ablate $one
# shellcheck disable=SC2086
expect 0 "stale: train.lr 0.003 -> 0.002 (1 key differs)" ablate $one --set train.lr=0.002 --dry-run
# shellcheck disable=SC2086
expect 0 "1 cells: 0 done, 0 to resume, 0 new, 1 stale; nothing was run" ablate $one --set train.lr=0.002 --dry-run
# shellcheck disable=SC2086
expect 1 "$tmp/abl-stale/gdn/parity/s1: train.lr 0.003 -> 0.002 (1 key differs)" ablate $one --set train.lr=0.002
out_has_line "^  --stale rerun   to move each folder aside"
file_has "$(printf '"lr":\t0.003')" "$tmp/abl-stale/gdn/parity/s1/config.json"
# shellcheck disable=SC2086
expect 0 "1 cells: 0 run, 1 reused, 0 failed" ablate $one --set train.lr=0.002 --stale keep
file_has "stale config" "$tmp/abl-stale/results.md"
# shellcheck disable=SC2086
expect 0 "moved to $tmp/abl-stale/gdn/parity/s1.stale-1, trained afresh" ablate $one --set train.lr=0.002 --stale rerun
file_has "$(printf '"lr":\t0.003')" "$tmp/abl-stale/gdn/parity/s1.stale-1/config.json"
file_has "$(printf '"lr":\t0.002')" "$tmp/abl-stale/gdn/parity/s1/config.json"
# shellcheck disable=SC2086
expect 0 "1 cells: 0 run, 1 reused, 0 failed" ablate $one --set train.lr=0.002
if grep -q "stale config" "$tmp/abl-stale/results.md"; then
    echo "FAIL  a rerun cell is still marked stale"; failed=$((failed + 1))
fi
expect 0 "--stale keep" ablate --help
expect 2 "prism ablate: --stale wants refuse, rerun or keep, not 'drop'" ablate --grid "$g" --stale drop
# killing ablate ends its workers: no cell trains on without a table, and the folder is free again
if command -v pgrep >/dev/null && [ "$(uname)" = Linux ]; then
    "$prism" ablate --grid "$g" --steps 100000 --jobs 2 --out "$tmp/abl-kill" >/dev/null 2>&1 &
    parent=$!
    i=0; until [ "$(pgrep -P "$parent" | wc -l)" -ge 2 ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
    workers=$(pgrep -P "$parent")
    kill -9 "$parent"
    wait "$parent" 2>/dev/null
    i=0; while [ $i -lt 50 ]; do
        alive=0
        for w in $workers; do kill -0 "$w" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1; i=$((i + 1))
    done
    if [ -n "$workers" ] && [ $alive = 0 ]; then echo "ok    ablate's workers end with it"
    else echo "FAIL  ablate's workers ($workers) outlived it"; failed=$((failed + 1)); fi
fi
expect 0 "usage: prism compare" compare --help
expect 2 "prism compare: --models: 'nosuch' is not a mixer" compare --models prism,nosuch --task parity
expect 2 "prism compare: --models a,b,... and --task TASK are required" compare --models prism
# shellcheck disable=SC2086
expect 0 "| gdn | " compare --models prism,gdn --task parity --steps 3 $tiny --device cpu --out "$tmp/cmp"
file_has "model,acc,tokens_per_s,params,step arena peak MiB" "$tmp/cmp/compare.csv"
file_has "<th>tokens/s</th>" "$tmp/cmp/report.html"
# lm is judged by bits per byte in compare and ablate, as --help says (it reports acc too)
# shellcheck disable=SC2086
expect 0 "| model | bpb |" compare --models gdn --task lm --data "$tmp/text.txt" --steps 2 $tiny --out "$tmp/cmp-lm"
printf '{"models":["gdn"],"tasks":["lm"],"seeds":1,"steps":2,"set":{"d_model":8,"seq_len":16,"train.batch":4,"train.eval_batches":1,"train.data":"%s"}}' \
    "$tmp/text.txt" >"$tmp/lmgrid.json"
expect 0 "| model | lm (bpb) |" ablate --grid "$tmp/lmgrid.json" --jobs 1 --out "$tmp/abl-lm"
# sasrec: compare takes it as train does (on rec only)
expect 2 "prism compare: --models sasrec: a rec model; give --task rec" compare --models sasrec --task parity
# shellcheck disable=SC2086
expect 0 "| sasrec | " compare --models sasrec,attn --task rec --steps 1 $tiny --set rec.negatives=4 --out "$tmp/cmp-rec"
file_has "model,test_ndcg@10," "$tmp/cmp-rec/compare.csv"
expect 2 "prism compare: --data is the lm task's text file; task parity does not read it" compare --models gdn \
    --task parity --data "$tmp/text.txt"
expect 0 "usage: prism bench throughput" bench throughput --help
expect 0 "| gdn |" bench throughput --models prism,gdn --seq-lens 8,16 --tokens-per-batch 32 --preset probe \
    --set d_model=8 --steps 1 --warmup 0 --device cpu --out "$tmp/tp"
# the flatness column: T=16's tokens/s over T=8's on each row ($out: the run above)
# and each length's peak memory in MiB beside its tokens/s
out_has_line '^[|] model [|] params [|] T=8 [|] MiB [|] T=16 [|] MiB [|] T=16 / T=8 [|]$'
out_has_line '^[|] prism [|] [0-9]+ [|] [0-9]+ [|] [0-9]+[.][0-9] [|] [0-9]+ [|] [0-9]+[.][0-9] [|] [0-9]+[.][0-9]{3} [|]$'
file_has "prism,16,2," "$tmp/tp/throughput.csv"
file_has "tokens_per_s,peak_bytes,params" "$tmp/tp/throughput.csv"
file_has "<svg" "$tmp/tp/throughput.svg"
expect 0 "precision bf16" bench throughput --models gdn --seq-lens 8 --tokens-per-batch 16 --preset probe \
    --set d_model=8 --steps 1 --warmup 0 --device cpu --precision bf16 --out "$tmp/tp16"
out_has_line '^[|] gdn [|] [0-9]+ [|] [0-9]+ [|] [0-9]+[.][0-9] [|]$'
expect 2 "prism bench throughput: --precision wants auto, f32, tf32 or bf16, not 'fp8'" bench throughput \
    --models gdn --seq-lens 8 --precision fp8
# shellcheck disable=SC2086
expect 0 "prism train: gdn on parity, cpu, precision bf16, in $tmp/bf16" train --model gdn --task parity --steps 2 \
    $tiny --set train.precision=bf16 --device cpu --out "$tmp/bf16"
file_has "$(printf '"precision":\t"bf16"')" "$tmp/bf16/manifest.json"
# the manifest names the commit the binary was built from, not the checkout it runs in
if head=$(git -C "$(dirname "$0")/.." rev-parse HEAD 2>/dev/null); then
    # shellcheck disable=SC2086
    (cd "$tmp" && "$prism" train --model gdn --task parity --steps 1 $tiny --device cpu --out "$tmp/away" >/dev/null 2>&1)
    file_has "$(printf '"git_commit":\t"%s' "$head")" "$tmp/away/manifest.json"
fi
expect 2 "train.precision: 'fp16' is not allowed (allowed: auto|f32|tf32|bf16)" train --model gdn --task parity \
    --set train.precision=fp16
expect 0 "| recurrence | mixer | bwd | 2 |" bench throughput --models prism --seq-lens 16 --tokens-per-batch 32 \
    --preset probe --breakdown --out "$tmp/tpb"
file_has "| adamw | optimizer | fwd | 1 |" "$tmp/tpb/breakdown-prism-T16.md"
expect 2 "prism bench throughput: --seq-lens 64 is longer than --tokens-per-batch 32" bench throughput \
    --models gdn --seq-lens 64 --tokens-per-batch 32
expect 2 "prism bench throughput: --seq-lens wants up to 32 comma-separated integers" bench throughput \
    --models gdn --seq-lens 8,x
expect 0 "| prism |" bench throughput --models prism --seq-lens 8 --tokens-per-batch 32 --preset probe \
    --set d_model=8 --steps 1 --warmup 0 --procs 2 --out "$tmp/tp2"
file_has "ranks,tokens_per_s_1,efficiency" "$tmp/tp2/throughput.csv"
expect 2 "prism bench throughput: --seq-lens 16: a batch of 2 sequences does not split over 4 ranks" bench \
    throughput --models gdn --seq-lens 16 --tokens-per-batch 32 --procs 4
expect 2 "prism bench throughput: --gpus N runs on CUDA" bench throughput --models gdn --seq-lens 16 --gpus 2 \
    --device cpu

# the README's exit codes across subcommands: 1 a file that cannot be read, 2 a bad command line
# (an option, or a value, a --set included, that no run can take); an empty value is a bad one
none=$tmp/no-such-file
expect 1 "prism model: $none.json: cannot open" model --model prism --config "$none.json"
expect 1 "prism model: $none.safetensors: cannot open" model --model prism --checkpoint "$none.safetensors"
expect 1 "prism inspect: $none.json: cannot open" inspect --model prism --config "$none.json"
expect 1 "prism ablate: $none.json: cannot open" ablate --grid "$none.json"
expect 1 "prism golden-check: $none.safetensors: cannot open" golden-check "$none.safetensors"
expect 1 "prism eval: $none/config.json: cannot open" eval --run "$none"
expect 1 "prism generate: $none/config.json: cannot open" generate --run "$none" --prompt a
expect 1 "prism data rec: $none.csv: cannot open" data rec --amazon "$none.csv"
expect 2 "prism model: config: d_model 15 is not a multiple" model --model prism --set d_model=15
expect 2 "prism inspect: config: d_model 15 is not a multiple" inspect --model prism --set d_model=15
expect 2 "prism ablate: config: d_model 15 is not a multiple" ablate --grid quick --set d_model=15
expect 2 "prism compare: config: d_model 15 is not a multiple" compare --models prism --task parity \
    --set d_model=15
expect 2 "prism bench throughput: prism: config: d_model 15 is not a multiple" bench throughput --models prism \
    --seq-lens 16 --set d_model=15 --device cpu
expect 2 "prism bench block: config: d_model 15 is not a multiple" bench block --mixer prism --set d_model=15 \
    --device cpu
expect 2 "prism compare: --out wants a value, not ''" compare --models prism --task parity --out ""
expect 2 "prism ablate: --out wants a value, not ''" ablate --grid quick --out ""
expect 2 "prism bench throughput: --out wants a value, not ''" bench throughput --models prism --seq-lens 16 --out ""
expect 2 "prism inspect: --plot wants a value, not ''" inspect --model prism --plot ""
expect 2 "prism golden-check: --make wants a value, not ''" golden-check --make ""
# a loss that went non-finite is null in the JSON line, never nan
expect 0 '"loss_last":null}' inspect --model prism --steps 3 --lr 1e30
# a config too big for the machine stops before allocating, with the estimate and the limit
expect 2 "prism train: this config needs about" train --task parity --set d_model=65536 --out "$tmp/big"
out_has_line "needs about [0-9.]+ TB for a training step, more than the [0-9.]+ [KMG]?B the host has available: \
[0-9]{12} parameters [0-9.]+ GB, their grads [0-9.]+ GB, optimizer state [0-9.]+ TB, activations [0-9.]+ GB"
if [ -e "$tmp/big" ]; then echo "FAIL  the refused run created its folder"; failed=$((failed + 1)); fi
expect 0 "total" model --model prism --set d_model=65536
out_has_line "^training step \(f32, AdamW, batch 32 x seq_len 128\): parameters [0-9.]+ GB, .* total about [0-9.]+ TB$"
expect 2 "prism model: the" model --model prism --set d_model=65536 --save "$tmp/big.safetensors"
out_has_line "parameters need [0-9.]+ GB, more than the [0-9.]+ [KMG]?B the host has available"
}

case $part in
all) part_commands; part_inspect; part_runs; part_grids ;;
commands | inspect | runs | grids) "part_$part" ;;
*) echo "test_cli.sh: --part wants commands, inspect, runs or grids, not '$part'"; exit 2 ;;
esac

[ $failed = 0 ] || { echo "$failed CLI case(s) failed"; exit 1; }
echo "every CLI case passed"
