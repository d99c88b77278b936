# shellcheck shell=bash
# tools/device/carried.sh: sourced on the GPU machine, from the repository
# root, when the folder tools/device/pack.sh filled (.carry/) came with the
# tree: nothing is built there. prism_carried NAME [DIR]
#   - unpacks DIR/debs/*.deb into /tmp/prism-deps once with deps.sh's prism_deps, as for
#     .deps/ (the same folder, deps and libdir set alike), and puts the
#     libraries on LD_LIBRARY_PATH, with the CUDA toolkit's after them;
#   - un-xz's DIR/lib/*.xz into /tmp/prism-lib (libprism.so.0 of a shared
#     build) and DIR/bin/*.xz into /tmp/prism-bin (prism_bin), afresh each
#     time, so a warm machine never keeps the binaries of an earlier call;
#     /tmp/prism-lib goes first on LD_LIBRARY_PATH: it wins over the build
#     folder's path that the binaries were linked with;
#   - unpacks DIR/fla-pkg/fla.tar.xz into /tmp/prism-fla and puts it on
#     PYTHONPATH (prism_fla, empty when fla was not carried);
#   - links the source path compiled into the test binaries to this tree
#     when it differs (they read tests/data from there);
#   - says, under NAME, what it found and any library the binaries lack.
# Returns 2 when DIR holds no pack, 1 when a binary lacks a library.
. "$(dirname "${BASH_SOURCE[0]}")/deps.sh"   # prism_deps
prism_unxz() { # file.xz, output
    if command -v xz >/dev/null; then xz -dc "$1" >"$2"
    else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
    fi
}
prism_carried() {
    local who=$1 carry=${2:-.carry} f n d missing rc=0
    prism_bin=/tmp/prism-bin prism_fla=""
    if [ ! -f "$carry/manifest.txt" ]; then
        echo "$who: no $carry/manifest.txt: run tools/device/pack.sh where there is network and carry $carry" >&2
        return 2
    fi
    prism_deps "$who" "$carry/debs" || rc=1   # sets deps, libdir, LD_LIBRARY_PATH
    # cudart and cublas come from the toolkit there; its folders go last so the carried libraries win
    local cuda="" top
    top=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
    for d in "$top/lib64" "$top/lib" "$top/targets/x86_64-linux/lib" /usr/local/cuda/lib64 /usr/local/cuda/lib; do
        [ -d "$d" ] && [[ "$cuda:" != *":$d:"* ]] && cuda=$cuda:$d
    done
    export LD_LIBRARY_PATH=/tmp/prism-lib:$LD_LIBRARY_PATH$cuda
    rm -rf "$prism_bin" /tmp/prism-lib && mkdir -p "$prism_bin" /tmp/prism-lib
    for f in "$carry"/lib/*.xz "$carry"/bin/*.xz; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .xz) d=$prism_bin
        [ "$(basename "$(dirname "$f")")" = lib ] && d=/tmp/prism-lib
        if ! prism_unxz "$f" "$d/$n" || ! chmod +x "$d/$n"; then
            echo "$who: cannot unpack $f" >&2; rc=1; continue
        fi
        missing=$(ldd "$d/$n" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u | tr '\n' ' ')
        [ -z "$missing" ] || { echo "$who: $n lacks ${missing% } (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)" >&2; rc=1; }
    done
    if [ -f "$carry/fla-pkg/fla.tar.xz" ]; then
        prism_fla=/tmp/prism-fla
        rm -rf "$prism_fla" && mkdir -p "$prism_fla"
        if prism_unxz "$carry/fla-pkg/fla.tar.xz" "$prism_fla/fla.tar" && tar -xf "$prism_fla/fla.tar" -C "$prism_fla"; then
            rm -f "$prism_fla/fla.tar"
            export PYTHONPATH=$prism_fla${PYTHONPATH:+:$PYTHONPATH}
        else
            echo "$who: cannot unpack $carry/fla-pkg/fla.tar.xz" >&2; prism_fla=""; rc=1
        fi
    fi
    # the tests open PRISM_SOURCE_DIR/tests/data, the path of the tree they were built from
    local src
    src=$(sed -n 's/^source_dir=//p' "$carry/manifest.txt")
    if ls "$prism_bin"/test_* >/dev/null 2>&1 && [ -n "$src" ] && [ "$src" != "$PWD" ]; then
        if [ ! -e "$src" ]; then
            if ! mkdir -p "$(dirname "$src")" || ! ln -s "$PWD" "$src"; then
                echo "$who: cannot link $src to $PWD: the tests will miss tests/data" >&2; rc=1
            fi
        elif [ ! -f "$src/tests/data/recurrences.safetensors" ]; then
            echo "$who: $src exists here but holds no tests/data: the tests will miss their data" >&2; rc=1
        fi
    fi
    local m=$carry/manifest.txt fla_note="not carried"
    [ -n "$prism_fla" ] && fla_note="$(sed -n 's/^fla=//p' "$m" | head -c 12) in $prism_fla"
    echo "$who: carried $(sed -n 's/^commit=//p' "$m" | head -c 12) ($(sed -n 's/^dirty=//p' "$m") files changed," \
        "built $(sed -n 's/^built=//p' "$m")): $(ls "$prism_bin" | wc -l) programs in $prism_bin" \
        "($(ls "$prism_bin" | tr '\n' ' ' | cut -c1-200)), libraries: $(ls /tmp/prism-lib | tr '\n' ' '); fla $fla_note"
    return $rc
}
