#!/bin/sh
# tests/test_cli.sh: every subcommand of `prism`, good and bad options, run
# as a user runs them. Each case names the exit status the command must end
# with and a text its output (stdout and stderr) must contain. Sizes are tiny.
#
#   sh tests/test_cli.sh PRISM          the CPU cases
#   sh tests/test_cli.sh --cuda PRISM   the GPU cases; exits 77 (ctest's skip
#                                       code) when the first one finds no GPU
cuda=0
if [ "$1" = "--cuda" ]; then cuda=1; shift; fi
prism=${1:?usage: test_cli.sh [--cuda] PRISM}
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

ref=$tmp/ref.safetensors
if [ $cuda = 1 ]; then
    expect 0 "no target judged" bench ops --device cuda --quick
    expect 0 "wrote" golden-check --make "$ref" --size 1,5,1,4,3,2
    expect 0 "5 passed, 0 failed" golden-check "$ref" --device cuda --tf32
    expect 0 "5 passed, 0 failed" golden-check "$ref" --device cuda --dtype f32 --form chunked --chunk 32
    expect 0 "linattn" bench recurrence --device cuda --dtype f32 --size 1 --rules linattn --reps 1 --warmup 0 \
        --no-token
    expect 2 "--dtype f64 needs --device cpu" bench recurrence --device cuda --dtype f64
    expect 0 '"task":"parity"' train --model prism --task parity --device cuda --steps 4 --set d_model=8 \
        --set seq_len=16 --set train.batch=4 --set train.ckpt_every=2 --out "$tmp/cuda-run"
    expect 0 '"steps":6' train --out "$tmp/cuda-run" --resume --steps 6 --device cuda
    expect 0 '"run_dir"' eval --run "$tmp/cuda-run" --device cuda
    [ $failed = 0 ] || { echo "$failed CLI case(s) failed"; exit 1; }
    exit 0
fi

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
expect 0 "5 passed, 0 failed" golden-check "$ref" --tol 1e-8 --device cpu --dtype f64 --form both
expect 0 "rel_err=" golden-check "$ref" --dtype f32 --form chunked --chunk 2 --verbose
expect 1 "nothing.safetensors" golden-check "$tmp/nothing.safetensors"
expect 2 "prism golden-check: --tol wants a number > 0, not 'abc'" golden-check "$ref" --tol abc
expect 2 "prism golden-check: --tol wants a number > 0, not '-1'" golden-check "$ref" --tol -1
expect 2 "prism golden-check: --tol wants a number > 0, not 'nan'" golden-check "$ref" --tol nan
expect 2 "prism golden-check: --chunk wants an integer from 1 to 4096, not '0'" golden-check "$ref" --chunk 0
expect 2 "prism golden-check: --form wants recurrent, chunked or both, not 'x'" golden-check "$ref" --form x
expect 2 "prism golden-check: --device wants cpu or cuda, not 'gpu'" golden-check "$ref" --device gpu
expect 2 "prism golden-check: --dtype wants f64 or f32, not 'f16'" golden-check "$ref" --dtype f16
expect 2 "prism golden-check: --tf32 applies to --device cuda only" golden-check "$ref" --tf32
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

expect 0 "usage: prism bench recurrence" bench recurrence --help
expect 0 "chunk 16; seconds, best of 1" bench recurrence --device cpu --dtype f32 --rules linattn --reps 1 \
    --warmup 0 --chunks 16 --no-token
# --device cuda and --dtype f32 are accepted: what stops this one is --bogus
expect 2 "prism bench recurrence: unknown option '--bogus' (prism bench recurrence --help lists the options)" \
    bench recurrence --device cuda --dtype f32 --bogus
expect 2 "prism bench recurrence: --dtype f64 needs --device cpu" bench recurrence --dtype f64
expect 2 "prism bench recurrence: --size picks a GPU size" bench recurrence --device cpu --size 1
expect 2 "prism bench recurrence: --fp32 applies to --device cuda only" bench recurrence --device cpu --fp32
expect 2 "prism bench recurrence: --rules: ttt_linear has no CPU timing" bench recurrence --device cpu --rules ttt_linear
expect 2 "prism bench recurrence: --rules wants a comma-separated list of linattn" bench recurrence --rules gdn,foo
expect 2 "prism bench recurrence: --chunks takes one chunk size with --device cpu" \
    bench recurrence --device cpu --chunks 32,64
expect 2 "prism bench recurrence: --chunks wants up to 4 comma-separated integers" bench recurrence --chunks 64,
expect 2 "prism bench recurrence: --reps wants an integer from 1 to 100000, not 'abc'" bench recurrence --reps abc
expect 2 "prism bench recurrence: --warmup wants an integer from 0 to 100000, not '-1'" bench recurrence --warmup -1
expect 2 "prism bench recurrence: option --size needs a value" bench recurrence --size

# train, eval, generate (tiny models, a few steps)
tiny="--set d_model=8 --set seq_len=16 --set train.batch=4 --set train.eval_batches=1"
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
expect 1 "nothing/config.json: cannot open" eval --run "$tmp/nothing"
expect 2 "prism eval: --run DIR is required" eval
i=0; while [ $i -lt 40 ]; do echo "the quick brown fox jumps over the lazy dog"; i=$((i + 1)); done > "$tmp/text.txt"
# shellcheck disable=SC2086
expect 0 '"bpb"' train --model gdn --task lm --data "$tmp/text.txt" $tiny --steps 3 --out "$tmp/lm"
expect 0 "the quick" generate --run "$tmp/lm" --prompt "the quick" --tokens 8 --top-k 5 --seed 2
expect 0 "the" generate --run "$tmp/lm" --prompt "the" --tokens 4 --temperature 0
expect 1 "generate needs a byte-level lm run" generate --run "$run" --prompt "x"
expect 2 "prism generate: --run DIR and a non-empty --prompt TEXT are required" generate --run "$tmp/lm"
expect 2 "prism generate: --temperature wants a number >= 0, not '-1'" generate --run "$tmp/lm" --prompt a \
    --temperature -1

[ $failed = 0 ] || { echo "$failed CLI case(s) failed"; exit 1; }
echo "every CLI case passed"
