#!/usr/bin/env bash
# tests/standalone.sh: the repository stands alone and speaks to any user.
#  - no file refers to ../shared (a folder beside one particular checkout);
#  - every relative link of the Markdown pages resolves to a file or folder
#    inside the repository;
#  - the README and the headers of the scripts use no words that only make
#    sense in one workplace (its job runner's output folder or options).
# Exits 1 naming every offence.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bad=0
say() { echo "standalone: $*" >&2; bad=1; }

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files --cached --others --exclude-standard)
else
    # no git (a copied tree): the files as they lie, less build folders
    mapfile -t files < <(find . -path ./.git -prune -o -path './build*' -prune -o -type f -print | sed 's|^\./||')
fi
# hidden folders other than .ci hold fetched packages and sources, not the project
mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -v '^\.' ; printf '%s\n' "${files[@]}" | grep '^\.ci/')
self=tests/standalone.sh
for f in "${files[@]}"; do
    [ "$f" = "$self" ] && continue
    case "$f" in *.safetensors) continue ;; esac
    [ -f "$f" ] || continue
    grep -Hn '\.\./shared' "$f" >&2 && say "$f refers to ../shared"
done

for f in "${files[@]}"; do
    case "$f" in *.md) ;; *) continue ;; esac
    [ -f "$f" ] || continue
    dir=$(dirname "$f")
    # markdown links [text](target); drop anchors, skip web and mail links
    while IFS= read -r target; do
        target=${target%%#*}
        case "$target" in '' | http://* | https://* | mailto:*) continue ;; esac
        path=$(realpath -m "$dir/$target")
        case "$path" in "$root" | "$root"/*) ;; *) say "$f links outside the repository: $target"; continue ;; esac
        [ -e "$path" ] || say "$f links to a missing file: $target"
    done < <(grep -o '](\([^)]*\))' "$f" | sed 's/^](\(.*\))$/\1/')
done

# the README and every script's opening comment block
for f in README.md $(printf '%s\n' "${files[@]}" | grep '\.sh$'); do
    [ "$f" = "$self" ] && continue
    [ -f "$f" ] || continue
    if [ "$f" = README.md ]; then text=$(cat "$f"); else text=$(sed -n '1,/^[^#]/p' "$f"); fi
    for word in '$OUT' 'carry=' 'carry:' 'lease' 'the run tool' 'run(' 'device call'; do
        grep -qiwF -- "$word" <<<"$text" && say "$f: '$word' only makes sense in one workplace"
    done
done
exit $bad
