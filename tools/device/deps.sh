# tools/device/deps.sh: sourced by the GPU-machine scripts (run_tests.sh,
# ab_bench.sh, kernel_times.sh, carried.sh) from the repository root.
# prism_deps NAME [DIR] unpacks DIR/*.deb (default .deps/, which
# tools/device/fetch_deps.sh fills; carried.sh passes the pack's debs/) into
# /tmp/prism-deps once, without root or dpkg installs, sets deps (that
# folder) and libdir, and puts the libraries on LD_LIBRARY_PATH. Returns 2,
# saying why under NAME, when there is nothing to unpack.
prism_deps() {
    local from=${2:-.deps} f
    deps=/tmp/prism-deps
    if [ ! -d "$deps/usr" ]; then
        ls "$from"/*.deb >/dev/null 2>&1 || {
            echo "$1: no $from/*.deb: run tools/device/fetch_deps.sh (or pack.sh) on a machine with network and copy it here" >&2
            return 2
        }
        for f in "$from"/*.deb; do dpkg -x "$f" "$deps"; done
    fi
    libdir=$deps/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$libdir:$libdir/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
