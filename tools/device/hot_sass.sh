#!/usr/bin/env bash
# tools/device/hot_sass.sh: where one kernel's warps stall, instruction by
# instruction: ncu's warp-state samples per SASS instruction for the first
# launch of the kernels matching a name, the hottest instructions printed
# with their stall reasons. The per-kernel totals of kernel_times.sh
# --stalls say that a kernel waits; this says on what.
usage() {
    cat <<'USAGE'
usage: tools/device/hot_sass.sh --kernel REGEX [--top N] [--prism PATH] [--out DIR] -- prism-args...
  --kernel REGEX  the kernel (ncu's regex on the function name), e.g. dstate_wg
  --top N         the N instructions with the most samples (default 40)
  --prism PATH    the prism binary (default build-device/prism)
  --out DIR       keep the report (hot.ncu-rep) and the per-instruction CSV there
                  (default: a temporary folder)
  --help          this text
Runs `ncu --section SourceCounters --section WarpStateStats -k regex:REGEX -c 1`
on `PRISM ARGS`, then prints, hottest first: the instruction's address, its
share of all samples, its top stall reasons and its SASS, e.g.
  tools/device/hot_sass.sh --kernel dstate_wg -- bench recurrence --size 1 \
      --no-token --rules gdn --dtype f32 --reps 1 --warmup 0
Needs ncu and python3 (the GPU machine has both) and a build-device/ that
tools/device/run_tests.sh has built.
USAGE
}
set -uo pipefail
cd "$(dirname "$0")/../.."
kernel="" top=40 prism=build-device/prism out=""
while [ $# -gt 0 ]; do
    case "$1" in
    --kernel) kernel="$2"; shift 2 ;;
    --top) top="$2"; shift 2 ;;
    --prism) prism="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --help | -h) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "hot_sass.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$kernel" ] || { echo "hot_sass.sh: --kernel is required (see --help)" >&2; exit 2; }
[ $# -gt 0 ] || { echo "hot_sass.sh: no prism arguments after -- (see --help)" >&2; exit 2; }
[ -x "$prism" ] || { echo "hot_sass.sh: no $prism: build it first (tools/device/run_tests.sh)" >&2; exit 2; }
. tools/device/deps.sh
prism_deps hot_sass.sh || exit 2
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
ncu --clock-control none --section SourceCounters --section WarpStateStats -k "regex:$kernel" -c 1 \
    -f -o "$out/hot" "$prism" "$@" >"$out/ncu.log" 2>&1 || { echo "hot_sass.sh: ncu failed:"; tail -20 "$out/ncu.log"; exit 1; }
ncu -i "$out/hot.ncu-rep" --page source --print-source sass --csv >"$out/sass.csv" 2>"$out/sass.err" ||
    { echo "hot_sass.sh: ncu could not print the source page:"; cat "$out/sass.err"; exit 1; }
python3 - "$out/sass.csv" "$top" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
top = int(sys.argv[2])
# the header is the first row that names a Source column
h = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
head, body = rows[h], [r for r in rows[h + 1:] if len(r) == len(rows[h])]
col = {c.strip(): i for i, c in enumerate(head)}
samp = next((i for c, i in col.items() if c.startswith("Warp Stall Sampling (All")), None)
if samp is None:
    sys.exit("hot_sass.sh: no 'Warp Stall Sampling (All Samples)' column; columns: " + ", ".join(col))
num = lambda s: float(s.replace(",", "") or 0)
reasons = [(c, i) for c, i in col.items() if c.startswith("stall_") or c.endswith("Stall Reason")]
total = sum(num(r[samp]) for r in body) or 1
print(f"{len(body)} instructions, {total:.0f} samples; stall columns: {len(reasons)}")
addr = col.get("Address", 0)
for r in sorted(body, key=lambda r: -num(r[samp]))[:top]:
    why = sorted(((num(r[i]), c) for c, i in reasons), reverse=True)[:3]
    why = ", ".join(f"{c.replace('stall_', '')} {v:.0f}" for v, c in why if v > 0)
    print(f"{r[addr]:>8} {100 * num(r[samp]) / total:5.1f}%  {r[col['Source']].strip()[:70]:70}  {why}")
PY
