#!/usr/bin/env bash
# tools/device/kernel_times.sh: the GPU time of every kernel one prism
# command launches, summed by kernel name, from ncu's kernel durations. The
# per-kernel table of ops/recurrence/NOTES.md (v25) came from this: which
# kernel to work on next, before an A/B says whether the work paid.
usage() {
    cat <<'USAGE'
usage: tools/device/kernel_times.sh [--prism PATH] [--grep REGEX] [--stalls] [--csv FILE] -- prism-args...
  --prism PATH   the prism binary (default build-device/prism)
  --grep REGEX   only kernels whose name matches (Python regex; default: all)
  --stalls       also each kernel's instructions a warp and its top stall
                 reasons (warps stalled per issued instruction, ncu's warp
                 states; e.g. no_instruction is instruction-cache misses)
  --csv FILE     also keep ncu's raw CSV there
  --help         this text
Runs `ncu --clock-control none --metrics gpu__time_duration.sum --csv PRISM ARGS`
(ncu replays each kernel, so keep the command small: --reps 1 --warmup 0)
and prints, per kernel name (template arguments dropped) in order of first
launch: launches, total ms, and each launch's ms, e.g.
  tools/device/kernel_times.sh --grep chunk_ -- bench recurrence --size 1 \
      --no-token --rules gdn --dtype f32 --reps 1 --warmup 0
Needs ncu and python3 (the GPU machine has both) and a build-device/ that
tools/device/run_tests.sh has built; the libraries come from .deps/ as there.
USAGE
}
set -uo pipefail
cd "$(dirname "$0")/../.."
prism=build-device/prism pattern="" keep="" stalls=0
while [ $# -gt 0 ]; do
    case "$1" in
    --prism) prism="$2"; shift 2 ;;
    --grep) pattern="$2"; shift 2 ;;
    --csv) keep="$2"; shift 2 ;;
    --stalls) stalls=1; shift ;;
    --help | -h) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "kernel_times.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "kernel_times.sh: nothing to run: give prism's arguments after --" >&2; exit 2; }
[ -x "$prism" ] || { echo "kernel_times.sh: $prism is not an executable (build it, or give --prism)" >&2; exit 2; }
command -v ncu >/dev/null || { echo "kernel_times.sh: ncu not found (it comes with the CUDA toolkit)" >&2; exit 2; }
. tools/device/deps.sh
# the libraries from .deps/ where the binary lacks some (sitting.sh's carried
# ones are on LD_LIBRARY_PATH already)
if ldd "$prism" 2>/dev/null | grep -q 'not found'; then prism_deps kernel_times.sh || exit 2; fi
csv=$(mktemp)
trap 'rm -f "$csv" "$csv.err"' EXIT
metrics=gpu__time_duration.sum
[ $stalls = 1 ] && metrics="$metrics,smsp__inst_executed.sum,sm__warps_launched.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
ncu --clock-control none --metrics "$metrics" --csv "$prism" "$@" >"$csv" 2>"$csv.err"
rc=$?
[ -n "$keep" ] && cp "$csv" "$keep"
if [ $rc -ne 0 ]; then
    echo "kernel_times.sh: ncu exited with $rc:" >&2; tail -20 "$csv.err" >&2; exit 1
fi
# ncu can exit 0 having profiled nothing (e.g. no permission for the
# counters): then its own words in $csv.err say why
python3 - "$csv" "$pattern" "$stalls" <<'PY'
import csv, re, sys
# prism's own output shares the stream: the table starts at ncu's header row
# and its rows are those with the header's width
rows = list(csv.reader(open(sys.argv[1])))
start = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r), None)
if start is None:
    sys.stderr.write(open(sys.argv[1] + ".err").read()[-3000:] + "".join(open(sys.argv[1]).readlines()[-20:]))
    sys.exit("kernel_times.sh: no kernel rows in ncu's output (did the command launch any?)")
head = rows[start]
rows = [head] + [r for r in rows[start + 1:] if len(r) == len(head)]
name_i, value_i, unit_i = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
metric_i, id_i = head.index("Metric Name"), head.index("ID")
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}
pat = re.compile(sys.argv[2]) if sys.argv[2] else None
times, other = {}, {}   # name -> [ms per launch]; name -> metric -> [value per launch]
for r in rows[1:]:
    name = re.sub(r"^void ", "", r[name_i].split("(")[0].split("<")[0])
    if pat and not pat.search(name):
        continue
    value = float(r[value_i].replace(",", "") or "nan")
    if r[metric_i] == "gpu__time_duration.sum":
        times.setdefault(name, []).append(value * scale.get(r[unit_i], 1e-6))
    else:
        other.setdefault(name, {}).setdefault(r[metric_i], []).append(value)
if not times:
    sys.exit("kernel_times.sh: no kernel matched")
print("%-40s %8s %10s  %s" % ("kernel", "launches", "total ms", "each ms"))
for name, t in times.items():
    each = " ".join("%.3f" % x for x in t[:12]) + (" ..." if len(t) > 12 else "")
    print("%-40s %8d %10.3f  %s" % (name[:40], len(t), sum(t), each))
if sys.argv[3] == "1":
    print("\n%-40s %10s  %s" % ("kernel", "inst/warp", "top stalls (warps stalled per issued instruction, mean of launches)"))
    for name, m in other.items():
        mean = lambda k: sum(m[k]) / len(m[k])
        warps = sum(m.get("sm__warps_launched.sum", [0]))
        inst = sum(m.get("smsp__inst_executed.sum", [0]))
        st = sorted(((mean(k), re.sub(r"^smsp__average_warps_issue_stalled_|_per_issue_active\.ratio$", "", k))
                     for k in m if "issue_stalled" in k), reverse=True)
        top = ", ".join("%s %.2f" % (k, v) for v, k in st[:5] if v >= 0.05)
        print("%-40s %10.0f  %s" % (name[:40], inst / warps if warps else float("nan"), top))
PY
