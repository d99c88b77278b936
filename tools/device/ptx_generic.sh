#!/usr/bin/env bash
# tools/device/ptx_generic.sh: lists the CUDA functions whose PTX loads or
# stores through generic pointers, and fails if there are any. Needs nvcc,
# not a GPU.
#
# Why: a kernel's shared-memory buffers are only read with shared loads
# while the compiler can prove that the pointers point there. One pointer it
# cannot place (a helper that may return NULL, say) turns the loads behind it
# into generic ones, and a non-inlined device function is compiled once for
# all its callers, so one kernel's generic pointer slows every kernel that
# calls the function (ops/recurrence/NOTES.md v15: TTT-Linear's forward +8%,
# its backward +15%). Global data goes through ld.global: generic loads have
# no business in these kernels.
usage() {
    cat <<'USAGE'
usage: tools/device/ptx_generic.sh [--help] [FILE.cu ...]
Compiles each file (default: every ops/**/*.cu) to PTX for sm_90a with the
project's include path ($NVCC, else nvcc) and prints, per function, the generic loads and stores
(ld./st. without a state space). Exit status 1 when any function has one.
USAGE
}
set -uo pipefail
cd "$(dirname "$0")/../.."
[ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && { usage; exit 0; }
nvcc=${NVCC:-nvcc}
command -v "$nvcc" >/dev/null || { echo "ptx_generic.sh: $nvcc not found (set NVCC)" >&2; exit 2; }
files=("$@")
[ ${#files[@]} -eq 0 ] && mapfile -t files < <(find ops -name '*.cu' | sort)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the compiles run side by side, as many as there are cores (the CI machine has two)
jobs=$(nproc 2>/dev/null || echo 2)
for i in "${!files[@]}"; do
    ("$nvcc" -O3 -DNDEBUG -arch=compute_90a --expt-relaxed-constexpr -DPRISM_HAVE_CUDA -DPRISM_WGMMA -I. -ptx \
        "${files[$i]}" -o "$tmp/$i.ptx" 2>"$tmp/$i.err"; echo $? >"$tmp/$i.rc") &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait
found=0
for i in "${!files[@]}"; do
    f=${files[$i]}
    if [ "$(cat "$tmp/$i.rc")" != 0 ]; then
        echo "ptx_generic.sh: $f does not compile:" >&2; cat "$tmp/$i.err" >&2; exit 2
    fi
    # a function starts at .entry/.func; a generic access is ld./st. followed by
    # a type, a vector width or a memory-order qualifier, not by a state space
    awk -v file="$f" '
        /^\.(visible |weak )?\.?(entry|func)/ { fn = $NF; sub(/\($/, "", fn) }
        /[ \t](ld|st)\.((volatile|relaxed\.[a-z]+|acquire\.[a-z]+|release\.[a-z]+)\.)?(v[248]\.)?[bfsu][0-9]+[ \t]/ {
            n[fn]++
        }
        END { for (k in n) { printf "%s: %s: %d generic loads/stores\n", file, k, n[k]; bad = 1 } exit bad }
    ' "$tmp/$i.ptx" || found=1
done
[ $found -eq 0 ] && echo "ptx_generic.sh: no generic loads or stores in ${#files[@]} files"
exit $found
