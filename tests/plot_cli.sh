#!/bin/sh
# tests/plot_cli.sh: `prism plot` on hand-written run directories: the SVG
# it writes (a line per run, dots at evaluations, legend names, log y where
# the values span decades, whole-number step ticks), and the error for each
# bad input (no metrics.jsonl, an unknown metric, a malformed line, NUL
# bytes, --x tokens on a run that never logged tokens); and `inspect --plot`
# (32 series, none alike; no tick between two steps).
#
#   sh tests/plot_cli.sh PRISM
prism=${1:?usage: plot_cli.sh PRISM}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect STATUS TEXT ARG...: run prism ARG... in $tmp
expect() {
    want=$1 text=$2
    shift 2
    out=$(cd "$tmp" && "$prism" "$@" 2>&1)
    rc=$?
    case $out in
    *"$text"*) [ $rc = "$want" ] && { echo "ok    prism $*"; return; } ;;
    esac
    echo "FAIL  prism $*"
    echo "      exit $rc (expected $want); the output should contain: $text"
    echo "$out" | head -n 8 | sed 's/^/      | /'
    failed=$((failed + 1))
}

# has FILE TEXT: FILE contains TEXT (fixed string)
has() {
    if grep -qF -- "$2" "$1"; then echo "ok    $(basename "$1") has $2"; return; fi
    echo "FAIL  $1 lacks: $2"
    failed=$((failed + 1))
}
lacks() {
    if ! grep -qF -- "$2" "$1"; then echo "ok    $(basename "$1") lacks $2"; return; fi
    echo "FAIL  $1 should not contain: $2"
    failed=$((failed + 1))
}

# run DIR RATE: 50 logged steps of a loss falling by exp(-RATE*step), an eval every 100 steps
run() {
    mkdir -p "$tmp/runs/$1"
    awk -v r="$2" 'BEGIN {
        for (s = 10; s <= 500; s += 10) {
            printf "{\"step\":%d,\"loss\":%.6g,\"lr\":0.001,\"grad_norm\":0.5,\"tokens\":%d,\"tokens_per_s\":1000,\"time_s\":%.2f}\n",
                   s, 2 * exp(-r * s) + 0.001, s * 512, s * 0.05
            if (s % 100 == 0) printf "{\"step\":%d,\"eval\":{\"acc\":%.4f,\"loss\":%.6g}}\n", s, 0.5 + s / 1000, 2 * exp(-r * s)
        }
    }' >"$tmp/runs/$1/metrics.jsonl"
}
run a 0.01
run b 0.02

expect 0 "usage: prism plot RUN..." plot --help
expect 2 "prism plot: name at least one run directory" plot
expect 2 "prism plot: unknown option '--bogus'" plot runs/a --bogus
expect 2 "prism plot: --x wants step, tokens or time, not 'epochs'" plot runs/a --x epochs

expect 0 "wrote loss.svg: loss of 2 runs against step (log scale)" plot runs/a runs/b --out loss.svg
svg=$tmp/loss.svg
has "$svg" '<?xml version="1.0"'
has "$svg" '<text x="'
has "$svg" '>a</text>'          # legend names without the shared runs/
has "$svg" '>b</text>'
lacks "$svg" '>runs/a</text>'
has "$svg" ">0.001</text>"     # log y: powers of ten
[ "$(grep -c '<circle class="mark"' "$svg")" = 10 ] && echo "ok    10 eval dots" ||
    { echo "FAIL  expected 10 eval dots, got $(grep -c '<circle class="mark"' "$svg")"; failed=$((failed + 1)); }
[ "$(grep -c '<g class="series"' "$svg")" = 2 ] && echo "ok    2 series" ||
    { echo "FAIL  expected 2 series"; failed=$((failed + 1)); }
if command -v xmllint >/dev/null 2>&1; then
    xmllint --noout "$svg" && echo "ok    xmllint: well-formed" || { echo "FAIL  xmllint"; failed=$((failed + 1)); }
fi

expect 0 "wrote acc.svg: acc of 2 runs against step" plot runs/a runs/b --metric acc --out acc.svg
lacks "$tmp/acc.svg" "log scale"
has "$tmp/acc.svg" '(evaluation)</text>'
expect 0 "against tokens" plot runs/a runs/b --x tokens --smooth 5 --out tok.svg
has "$tmp/tok.svg" '>250k</text>'
has "$tmp/tok.svg" 'mean of 5 points'
expect 0 "against seconds" plot runs/a --x time --y linear --title "my <run>" --out time.svg
has "$tmp/time.svg" 'my &lt;run&gt;'

# errors: each names the file, the line or the metrics there are
expect 2 "prism plot: --metric nope: no run has it; the runs have: loss, lr, grad_norm, tokens_per_s, acc (eval), loss (eval)" \
    plot runs/a runs/b --metric nope
mkdir -p "$tmp/runs/none"
expect 1 "prism plot: runs/none: no metrics.jsonl (not a run directory?)" plot runs/a runs/none
mkdir -p "$tmp/runs/bad"
printf '{"step":1,"loss":1}\n{"step":2,"loss":\n' >"$tmp/runs/bad/metrics.jsonl"
expect 1 "prism plot: runs/bad/metrics.jsonl:2: not JSON" plot runs/bad
printf '{"step":1,"loss":1}\n[1,2]\n' >"$tmp/runs/bad/metrics.jsonl"
expect 1 "runs/bad/metrics.jsonl:2: not a metrics object" plot runs/bad
printf '{"step":1,"loss":1}\n\0\0\0{"step":2,"loss":1}\n' >"$tmp/runs/bad/metrics.jsonl"
expect 1 "runs/bad/metrics.jsonl:2: NUL bytes" plot runs/bad
# a last line still being written is left out, not an error
printf '{"step":1,"loss":1}\n{"step":2,"loss":0.5}\n{"step":3,"lo' >"$tmp/runs/bad/metrics.jsonl"
expect 0 "wrote plot.svg: loss of 1 run" plot runs/bad
# a non-finite value, written as null, breaks the line in two
printf '{"step":1,"loss":1}\n{"step":2,"loss":0.5}\n{"step":3,"loss":null}\n{"step":4,"loss":0.4}\n{"step":5,"loss":0.3}\n' \
    >"$tmp/runs/bad/metrics.jsonl"
expect 0 "wrote plot.svg: loss of 1 run" plot runs/bad
[ "$(grep -c '<polyline' "$tmp/plot.svg")" = 2 ] && echo "ok    null breaks the line" ||
    { echo "FAIL  a null should break the line in two"; failed=$((failed + 1)); }
# a resumed run's clock starts again at 0: the plot continues it (1, 2, then 1, 2 more: 4 s in all)
printf '{"step":1,"loss":1,"time_s":1}\n{"step":2,"loss":0.9,"time_s":2}\n{"step":3,"loss":0.8,"time_s":1}\n{"step":4,"loss":0.7,"time_s":2}\n' \
    >"$tmp/runs/bad/metrics.jsonl"
expect 0 "against seconds" plot runs/bad --x time --out resumed.svg
last=$(sed -n '/class="xticks"/,/<\/g>/s/.*>\([^<]*\)<\/text>/\1/p' "$tmp/resumed.svg" | tail -n 1)
[ "$last" = 4 ] && echo "ok    --x time continues a resumed run's clock (axis to 4 s)" ||
    { echo "FAIL  --x time: the axis ends at $last s, expected 4"; failed=$((failed + 1)); }
# a run from before tokens were logged
printf '{"step":1,"loss":1}\n' >"$tmp/runs/bad/metrics.jsonl"
expect 1 "runs/bad: its metrics.jsonl has no tokens" plot runs/bad --x tokens
# a run without the metric is left out when another has it
expect 0 "runs/bad has no metric 'acc'; left out" plot runs/a runs/bad --metric acc
expect 1 "cannot write the plot" plot runs/a --out /nonexistent/dir/p.svg

# inspect --plot over 3 steps of PRISM in its augmented form: its 32
# parameter groups (more than ten colours times three dashes, where looks
# used to repeat) each keep a look of their own, and the step axis has
# whole steps only (it had ticks at 0.5, 1.5)
expect 0 "" inspect --model prism --set prism.form=augmented --steps 3 --plot grads.svg
looks=$(grep -o '<g class="series" stroke="[^"]*" stroke-dasharray="[^"]*"' "$tmp/grads.svg" | sort)
[ "$(echo "$looks" | wc -l)" -ge 32 ] && [ "$(echo "$looks" | uniq -d | wc -l)" = 0 ] &&
    echo "ok    inspect --plot: $(echo "$looks" | wc -l) series, no two alike" ||
    { echo "FAIL  inspect --plot: series share a colour and dash"; failed=$((failed + 1)); }
xticks=$(sed -n '/class="xticks"/,/<\/g>/s/.*>\([^<]*\)<\/text>/\1/p' "$tmp/grads.svg" | tr '\n' ' ')
case $xticks in
*.*) echo "FAIL  inspect --plot: x ticks between steps: $xticks"; failed=$((failed + 1)) ;;
*) echo "ok    inspect --plot: x ticks at whole steps: $xticks" ;;
esac

if [ $failed -gt 0 ]; then
    echo "$failed case(s) failed"
    exit 1
fi
echo "all cases passed"
