#!/usr/bin/env bash
# tests/tutorial.sh TUTORIAL.md BUILD_DIR: runs every ```sh block of the
# tutorial, in order, in a scratch directory where `build` is BUILD_DIR, and
# checks that every line of a ```text block appears in the output of the
# shell block before it. Lines starting with `cmake` are the build itself,
# which made BUILD_DIR: they are shown, not run again. With FIRST-LAST only
# the shell blocks numbered FIRST to LAST (counting every ```sh block from 1)
# run, with the text blocks that follow them, so ctest can run parts side by
# side; a part must not need the files of a block outside it.
set -u
usage="usage: tutorial.sh TUTORIAL.md BUILD_DIR [FIRST-LAST]"
md=${1:?$usage}
build=$(cd "${2:?$usage}" && pwd)
range=${3:-1-1000000}
first=${range%-*} last=${range#*-}
case $first$last in '' | *[!0-9]*) echo "$usage"; exit 2 ;; esac
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
ln -s "$build" "$work/build"
failed=0 blocks=0 kind="" out="" sh_seen=0 in_range=0

run_block() {   # the lines of one sh block, as one script
    local script=$1
    script=$(printf '%s\n' "$script" | grep -v '^cmake ')
    [ -z "$script" ] && return
    blocks=$((blocks + 1))
    out=$(cd "$work" && bash -e -c "$script" 2>&1)
    local rc=$?
    if [ $rc != 0 ]; then
        echo "FAIL  exit $rc:"; printf '%s\n' "$script" | sed 's/^/      $ /'
        printf '%s\n' "$out" | tail -n 8 | sed 's/^/      | /'
        failed=$((failed + 1))
    else
        printf '%s\n' "$script" | sed 's/^/ok    $ /'
    fi
}

check_text() {   # every line of a text block in the last output
    local line
    while IFS= read -r line; do
        [ -z "$line" ] && continue
        case $out in
        *"$line"*) ;;
        *) echo "FAIL  the output should contain: $line"; failed=$((failed + 1)) ;;
        esac
    done <<<"$1"
}

block=""
while IFS= read -r line; do
    if [ -z "$kind" ]; then
        case $line in
        '```sh')
            kind=sh block="" sh_seen=$((sh_seen + 1))
            in_range=0
            [ $sh_seen -ge "$first" ] && [ $sh_seen -le "$last" ] && in_range=1
            ;;
        '```text') kind=text block="" ;;
        '```'*) kind=other ;;
        esac
    elif [ "$line" = '```' ]; then
        [ "$kind" = sh ] && [ $in_range = 1 ] && run_block "$block"
        [ "$kind" = text ] && [ $in_range = 1 ] && check_text "$block"
        kind=""
    else
        block+="$line"$'\n'
    fi
done <"$md"

[ $blocks -gt 0 ] || { echo "FAIL  no shell block found in $md"; exit 1; }
[ $failed = 0 ] || { echo "$failed tutorial check(s) failed"; exit 1; }
echo "every tutorial block ran ($blocks shell blocks)"
