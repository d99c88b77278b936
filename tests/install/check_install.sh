#!/usr/bin/env bash
# tests/install/check_install.sh BUILD_DIR APP_C README: the README's "Use it
# from C" commands, verbatim, against BUILD_DIR: install into a fresh $HOME
# (the commands install into $HOME/.local), build APP_C (the README's C
# example) with pkg-config and with find_package, run both; then a project of
# its own links the installed libprism.a and gradchecks every op. Also checks
# that nothing links cuRAND, which prism does not use.
set -euo pipefail
build=$(cd "$1" && pwd) app=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
readme=$(cd "$(dirname "$3")" && pwd)/$(basename "$3") here=$(cd "$(dirname "$0")" && pwd)
# 77: ctest reports the test as skipped, not passed
for tool in cc pkg-config readelf; do
    command -v $tool >/dev/null || { echo "check_install: skipped: $tool not found (tools/setup.sh installs it)" >&2; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HOME=$work/home
mkdir -p "$HOME" "$work/app"
cd "$work/app"
ln -s "$build" build
cp "$app" app.c

# the fenced blocks of the README section, in order: block1.sh, block2.sh, block3.cmake, ...
awk '/^## /{insec = ($0 == "## Use it from C")} insec && /^```/ { if (inblk) { inblk = 0 } else { inblk = 1; n++; lang = substr($0, 4); f = "block" n "." lang }; next } insec && inblk { print > f }' "$readme"
[ -f block1.sh ] && [ -f block2.sh ] && [ -f block3.cmake ] && [ -f block4.sh ] ||
    { echo "check_install: $readme: 'Use it from C' needs sh, sh, cmake and sh blocks" >&2; ls >&2; exit 1; }

echo "== install"; bash -euo pipefail block1.sh >install.log || { cat install.log; exit 1; }
prefix=$HOME/.local
for f in bin/prism include/prism/ops/ops.h lib/libprism.a lib/libprism.so lib/pkgconfig/prism.pc \
         lib/cmake/prism/prismConfig.cmake; do
    [ -e "$prefix/$f" ] || { echo "check_install: $f was not installed" >&2; exit 1; }
done
if grep -rli curand "$prefix/lib/pkgconfig" "$prefix/lib/cmake" || readelf -d "$prefix/lib/libprism.so" | grep -i curand; then
    echo "check_install: cuRAND is linked but prism does not use it" >&2; exit 1
fi
"$prefix/bin/prism" gradcheck --op silu

echo "== pkg-config"; bash -euo pipefail block2.sh
echo "== find_package"; cp block3.cmake CMakeLists.txt; bash -euo pipefail block4.sh
echo "== find_package, static library, every op"
cmake -S "$here" -B static -DCMAKE_PREFIX_PATH="$prefix" -DAPP_SOURCE="$work/app/app.c" >static.log 2>&1 &&
    cmake --build static >>static.log 2>&1 || { cat static.log; exit 1; }
static/app_static >/dev/null
static/all_ops
