# tools/device/deps.sh: sourced by the GPU-machine scripts (run_tests.sh,
# ab_bench.sh, kernel_times.sh) from the repository root. prism_deps NAME
# unpacks .deps/*.deb (tools/device/fetch_deps.sh fetches them) into
# /tmp/prism-deps once, without root or dpkg installs, sets deps (that
# folder) and libdir, and puts the libraries on LD_LIBRARY_PATH. Returns 2,
# saying why under NAME, when there is nothing to unpack.
prism_deps() {
    deps=/tmp/prism-deps
    if [ ! -d "$deps/usr" ]; then
        ls .deps/*.deb >/dev/null 2>&1 || {
            echo "$1: no .deps/*.deb: run tools/device/fetch_deps.sh on a machine with network and copy .deps/ here" >&2
            return 2
        }
        for f in .deps/*.deb; do dpkg -x "$f" "$deps"; done
    fi
    libdir=$deps/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$libdir:$libdir/openblas-pthread:${LD_LIBRARY_PATH:-}
}
