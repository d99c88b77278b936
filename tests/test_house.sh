#!/bin/sh
# Folder and file lists are split on spaces on purpose (source paths hold none);
# the backquotes in the sed pattern are Markdown's, not the shell's.
# shellcheck disable=SC2086,SC2046,SC2013,SC2016
# tests/test_house.sh: the rules of docs/ARCHITECTURE.md and docs/STYLE.md
# that a script can check, on the sources as they are:
#   length   no library source (.c .cu .cuh .h in the library folders and
#            lab/) over 1000 lines, and train/train.c (the loop) under 300;
#   getenv   no getenv in the library folders or lab/: the command (tools/)
#            reads the environment and hands values in;
#   include  a folder includes only itself and the folders above it in
#            ARCHITECTURE.md's folder table (read from the page, so the page
#            and this check cannot disagree), tasks/ only tensor/, and no
#            folder includes tests/.
#
# usage: sh tests/test_house.sh [REPO]   (default: the repository holding this script)
#
# A rule broken in a file listed under "pending" below (work under way
# elsewhere) is reported by name and the test exits 77, which ctest shows
# as skipped, never as passed; any other break fails (exit 1). A pending
# entry whose file now keeps the rule is named so it can be deleted. Exit 0
# only when every rule holds everywhere.
set -u
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$repo" || exit 1
library="tensor autograd ops models optim dist tasks train lab"

# rule file: broken now, being fixed where named (the list only shrinks)
pending="
"

failed=0 skipped=0 seen=""
is_pending() { printf '%s\n' "$pending" | grep -qxF "$1 $2"; }
# break RULE FILE WHY
broken() {
    seen="$seen
$1 $2"
    if is_pending "$1" "$2"; then
        echo "PENDING $1: $2: $3"
        skipped=$((skipped + 1))
    else
        echo "FAIL    $1: $2: $3"
        failed=$((failed + 1))
    fi
}

sources() { find "$@" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort; }

# ---- length --------------------------------------------------------------------------
checked=0
for f in $(sources $library); do
    n=$(wc -l <"$f")
    checked=$((checked + 1))
    [ "$n" -gt 1000 ] && broken length "$f" "$n lines (at most 1000)"
done
n=$(wc -l <train/train.c)
[ "$n" -ge 300 ] && broken length train/train.c "$n lines (the loop stays under 300)"
[ "$checked" -gt 50 ] || { echo "FAIL    found only $checked library sources in $repo"; exit 1; }

# ---- getenv --------------------------------------------------------------------------
for f in $(grep -lE '\b(secure_)?getenv[[:space:]]*\(' $(sources $library)); do
    broken getenv "$f" "reads the environment (line $(grep -nE '\b(secure_)?getenv[[:space:]]*\(' "$f" | head -n 1 | cut -d: -f1))"
done

# ---- include -------------------------------------------------------------------------
# the folders in the order of ARCHITECTURE.md's table, from tensor/ down to tools/
order=$(sed -n '/^## Folders/,/^## /p' docs/ARCHITECTURE.md | sed -n 's/^| `\([a-z_]*\)\/` |.*/\1/p' | tr '\n' ' ')
want="tensor autograd ops models optim dist tasks train lab tools tests cmake docs "
if [ "$order" != "$want" ]; then
    echo "FAIL    include: docs/ARCHITECTURE.md's folder table reads '$order', this check knows '$want'"
    failed=$((failed + 1))
fi
# the folders a folder may include: itself and those above it (tasks/: tensor/ only)
allowed() {
    case $1 in tasks) echo "tasks tensor"; return ;; esac
    above=""
    for d in tensor autograd ops models optim dist tasks train lab tools; do
        above="$above $d"
        [ "$d" = "$1" ] && break
    done
    echo "$above"
}
for dir in $library tools; do
    ok=" $(allowed "$dir") "
    for f in $(sources "$dir"); do
        for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\)\/.*/\1/p' "$f" | sort -u); do
            case "$ok" in *" $inc "*) continue ;; esac
            broken include "$f" "includes $inc/ (from $dir/ only:$ok)"
        done
    done
done

# ---- pending entries that no longer apply --------------------------------------------
printf '%s\n' "$pending" | while read -r rule file; do
    [ -n "$rule" ] || continue
    printf '%s\n' "$seen" | grep -qxF "$rule $file" ||
        echo "note    $rule: $file keeps the rule now: delete its pending line in tests/test_house.sh"
done

echo "house: $checked library sources; $failed broken, $skipped pending"
[ "$failed" -gt 0 ] && exit 1
[ "$skipped" -gt 0 ] && { echo "SKIP: the pending breaks above are not fixed yet"; exit 77; }
exit 0
