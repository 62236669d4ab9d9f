#!/usr/bin/env bash
# scripts/setup.sh — bring a fresh Debian 12 (bookworm) machine to a built bsipipe tree.
#
#   1. apt: install the missing system packages (toolchain, hwloc, Open MPI, OpenBLAS, FxT, ...)
#   2. StarPU 1.3.10 from Debian's source package, built with FxT + MPI + 64 CPU workers,
#      installed into .deps/starpu (private; nothing is written to /etc/apt)
#   3. bsipipe: autoreconf (if stale), configure --with-starpu=.deps/starpu (if stale), make
#
# Idempotent: a second run only checks stamps and runs `make` (seconds).
# Must run as root (apt). Non-interactive.
#
# Environment knobs:
#   BSIPIPE_WERROR=1 or CI=true  configure bsipipe with --enable-werror
#   BSIPIPE_CONFIGURE_FLAGS      extra flags for bsipipe's ./configure
#   BSIPIPE_SKIP_APT=1           skip step 1 (packages known to be present)
#   BSIPIPE_SKIP_BUILD=1         skip step 3 (only prepare dependencies)
#   STARPU_CUDA=auto|1|0         StarPU with CUDA: auto (default) = when nvcc is found (see below)
#   JOBS                         parallel make jobs (default: nproc)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS="$ROOT/.deps"
LOGS="$DEPS/logs"
JOBS=${JOBS:-$(nproc)}
mkdir -p "$LOGS"

STEP="init"
STEP_T0=$SECONDS
T_START=$SECONDS

msg()  { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
die()  { printf '\033[1;31m[setup] ERROR in step "%s":\033[0m %s\n' "$STEP" "$*" >&2; exit 1; }
step() { STEP="$1"; STEP_T0=$SECONDS; msg "== step: $1"; }
done_step() { msg "   done: $STEP ($((SECONDS - STEP_T0)) s)"; }

on_err() {
    local rc=$?
    printf '\033[1;31m[setup] FAILED in step "%s" (exit %d, after %d s)\033[0m\n' \
        "$STEP" "$rc" "$((SECONDS - T_START))" >&2
    exit "$rc"
}
trap on_err ERR

# run_logged NAME CMD...: run CMD with output to $LOGS/NAME.log; on failure print the tail.
run_logged() {
    local name=$1; shift
    local log="$LOGS/$name.log"
    msg "   $* (log: ${log#$ROOT/})"
    if ! "$@" >"$log" 2>&1; then
        printf '\033[1;31m[setup] command failed: %s\033[0m\n--- last 40 lines of %s ---\n' "$*" "$log" >&2
        tail -n 40 "$log" >&2
        printf -- '--- end of log ---\n' >&2
        return 1
    fi
}

# ---------------------------------------------------------------------------------------------
# Step 1: system packages
# ---------------------------------------------------------------------------------------------
PACKAGES=(
    build-essential autoconf automake libtool pkg-config
    libhwloc-dev hwloc
    libjansson-dev  # JSON plans (bsipipe_schedule_import_json)
    zlib1g-dev  # crc32 of checkpoints (tasks/engine_checkpoint.c)
    libopenmpi-dev openmpi-bin
    libopenblas-dev
    libfxt-dev
    dpkg-dev
    python3 valgrind
    iproute2 util-linux  # ip, tc, unshare: scripts/netns-cluster.sh (tests/test_netns.sh)
    pajeng  # pj_dump: tests/test_trace.sh reads every traced run's paje.trace with it
    graphviz  # dot: tests/test_trace.sh renders a traced run's dag.dot
    vite xvfb xauth librsvg2-bin  # scripts/vite-screenshot.sh (ViTE headless), run by tests/test_trace.sh
    # StarPU's analysis scripts, which tests/test_trace.sh runs on a traced run: gnuplot for
    # starpu_codelet_profile's plot, R for starpu_codelet_histo_profile, R with knitr, ggplot2,
    # plyr, data.table, RColorBrewer and markdown for starpu_paje_summary
    gnuplot-nox r-base-core r-cran-knitr r-cran-ggplot2 r-cran-plyr r-cran-data.table r-cran-rcolorbrewer
    r-cran-markdown
    clang libclang-rt-dev  # -fsanitize=fuzzer: the fuzz targets of make check (docs/fuzzing.md)
    # StarPU build dependencies (the subset our configuration uses)
    libnuma-dev
    ca-certificates
)
OPTIONAL_PACKAGES=(fxt-tools)

is_installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

if [ "${BSIPIPE_SKIP_APT:-0}" = 1 ]; then
    msg "== step: apt packages (skipped: BSIPIPE_SKIP_APT=1)"
else
    step "apt packages"
    [ "$(id -u)" = 0 ] || die "must run as root to install packages (or set BSIPIPE_SKIP_APT=1)"
    command -v dpkg-query >/dev/null || die "dpkg-query not found: this script targets Debian 12"
    missing=()
    for p in "${PACKAGES[@]}"; do is_installed "$p" || missing+=("$p"); done
    opt_missing=()
    for p in "${OPTIONAL_PACKAGES[@]}"; do is_installed "$p" || opt_missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ] || [ ${#opt_missing[@]} -gt 0 ]; then
        msg "   missing: ${missing[*]:-} ${opt_missing[*]:-}"
        run_logged apt-update apt-get -o DPkg::Lock::Timeout=900 update
        for p in "${opt_missing[@]}"; do
            if apt-cache show "$p" >/dev/null 2>&1; then missing+=("$p")
            else msg "   optional package $p not available, skipping"; fi
        done
        if [ ${#missing[@]} -gt 0 ]; then
            run_logged apt-install apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}"
        fi
    else
        msg "   all packages present"
    fi
    done_step
fi

# ---------------------------------------------------------------------------------------------
# Step 2: StarPU 1.3.10 from Debian's source package, into .deps/starpu
# ---------------------------------------------------------------------------------------------
STARPU_VERSION=1.3.10
STARPU_PREFIX="$DEPS/starpu"
STARPU_SRC_ROOT="$DEPS/src"
STARPU_BUILD="$DEPS/build/starpu-$STARPU_VERSION"
STARPU_STAMP="$STARPU_PREFIX/.bsipipe-starpu.stamp"

# Private apt configuration: a deb-src entry for bookworm that never touches /etc/apt.
APT_DIR="$DEPS/apt"
APT_OPTS=(
    -o "Dir::Etc::SourceList=$APT_DIR/sources.list"
    -o "Dir::Etc::SourceParts=$APT_DIR/sources.list.d"
    -o "Dir::State::Lists=$APT_DIR/lists"
    -o "Dir::Cache=$APT_DIR/cache"
    -o "APT::Sandbox::User=root"
)
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Blocking drivers: an idle worker sleeps instead of polling. Devices are
# often more numerous than cores here (emulated runs put 16 on 2), and polling
# workers starve the ones that have work.
STARPU_CONFIGURE_OPTS=(
    --enable-blocking-drivers
    --enable-maxcpus=64
    --with-fxt
    --enable-mpi
    --disable-opencl
    --disable-build-doc
    --disable-build-examples
    --disable-build-tests
    --disable-fortran
    --disable-socl
    --disable-starpufft
    --disable-opengl-render
    --disable-hdf5
    --disable-leveldb
)

# ---- CUDA-enabled StarPU (issue 7; docs/cuda.md) ---------------------------------------------
# StarPU 1.3.10 builds against CUDA 13 after three source fixes (DESIGN.md §7: computeMode
# guard, cublas_v2.h in driver_cuda.h, no legacy cublasInit/Shutdown/SetKernelStream in
# starpu_cublas.c), kept as scripts/starpu-patches/*.patch and applied after unpacking.
#   STARPU_CUDA=auto (default)  CUDA when nvcc is found (PATH, $STARPU_CUDA_DIR/bin or
#                               /usr/local/cuda/bin), else CPU-only. Such a build links only
#                               the CUDA runtime libraries, so it also runs on machines without
#                               a GPU (0 CUDA workers): one build serves both.
#   STARPU_CUDA=1 / 0           force with / without CUDA.
#   STARPU_CUDA_DIR=DIR         the CUDA toolkit (passed as --with-cuda-dir when nvcc is not
#                               in PATH or when set explicitly).
# The stamp includes the options and the patches' checksum, so a change rebuilds StarPU.
STARPU_CUDA=${STARPU_CUDA:-auto}
STARPU_PATCH_DIR="$ROOT/scripts/starpu-patches"
starpu_nvcc=$(command -v nvcc 2>/dev/null || true)
starpu_cuda_dir=${STARPU_CUDA_DIR:-}
if [ -z "$starpu_nvcc" ]; then
    for c in ${STARPU_CUDA_DIR:-} /usr/local/cuda; do
        if [ -x "$c/bin/nvcc" ]; then starpu_nvcc="$c/bin/nvcc"; starpu_cuda_dir=$c; break; fi
    done
fi
case "$STARPU_CUDA" in
    auto) if [ -n "$starpu_nvcc" ]; then STARPU_CUDA=1; else STARPU_CUDA=0; fi ;;
    1) [ -n "$starpu_nvcc" ] || { echo "[setup] STARPU_CUDA=1 but no nvcc found (set STARPU_CUDA_DIR)" >&2; exit 1; } ;;
    0) ;;
    *) echo "[setup] STARPU_CUDA must be auto, 1 or 0 (got '$STARPU_CUDA')" >&2; exit 1 ;;
esac
if [ "$STARPU_CUDA" = 1 ]; then
    STARPU_CUDA_OPTS=(--enable-cuda ${starpu_cuda_dir:+--with-cuda-dir="$starpu_cuda_dir"})
else
    STARPU_CUDA_OPTS=(--disable-cuda)
fi
# ---- end of CUDA part ------------------------------------------------------------------------

starpu_patches_sig() {
    if [ -d "$STARPU_PATCH_DIR" ]; then
        cat "$STARPU_PATCH_DIR"/*.patch 2>/dev/null | md5sum | cut -d' ' -f1
    else
        echo none
    fi
}

STAMP_CONTENT="starpu=$STARPU_VERSION
options=${STARPU_CONFIGURE_OPTS[*]} ${STARPU_CUDA_OPTS[*]}
patches=$(starpu_patches_sig)"

step "StarPU $STARPU_VERSION"
if [ -f "$STARPU_STAMP" ] && [ "$(cat "$STARPU_STAMP")" = "$STAMP_CONTENT" ] \
   && [ -x "$STARPU_PREFIX/bin/starpu_machine_display" ] \
   && [ -f "$STARPU_PREFIX/lib/pkgconfig/starpu-1.3.pc" ]; then
    msg "   up to date in ${STARPU_PREFIX#$ROOT/} (stamp matches)"
else
    [ "$(id -u)" = 0 ] || msg "   warning: not root; apt-get source may fail"
    mkdir -p "$APT_DIR/sources.list.d" "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" \
             "$STARPU_SRC_ROOT"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR bookworm main" \
        > "$APT_DIR/sources.list"
    run_logged starpu-apt-update apt-get "${APT_OPTS[@]}" update
    src_ver=$(apt-cache "${APT_OPTS[@]}" showsrc starpu | sed -n 's/^Version: //p' | head -n1)
    msg "   Debian source package starpu: $src_ver"
    case "$src_ver" in
        "$STARPU_VERSION"|"$STARPU_VERSION"+*|"$STARPU_VERSION"-*) ;;
        *) die "bookworm's starpu source is '$src_ver', expected $STARPU_VERSION" ;;
    esac
    srcdir="$STARPU_SRC_ROOT/starpu-$STARPU_VERSION+dfsg"
    # Patches (scripts/starpu-patches: CUDA 13 fixes, several CUDA workers per GPU, an idle
    # worker that may sleep) go onto a freshly unpacked tree every build.
    if [ ! -f "$srcdir/configure" ] || [ -d "$STARPU_PATCH_DIR" ]; then
        rm -rf "$STARPU_SRC_ROOT"/starpu-* "$STARPU_SRC_ROOT"/starpu_*
        (cd "$STARPU_SRC_ROOT" && run_logged starpu-source \
            apt-get "${APT_OPTS[@]}" source "starpu=$src_ver")
        srcdir=$(find "$STARPU_SRC_ROOT" -mindepth 1 -maxdepth 1 -type d -name 'starpu-*' | head -n1)
        [ -n "$srcdir" ] && [ -f "$srcdir/configure" ] || die "unpacked StarPU source has no configure"
        if [ -d "$STARPU_PATCH_DIR" ]; then
            for p in "$STARPU_PATCH_DIR"/*.patch; do
                [ -e "$p" ] || continue
                msg "   applying ${p#$ROOT/}"
                patch -d "$srcdir" -p1 --forward < "$p" >>"$LOGS/starpu-patch.log" 2>&1 \
                    || die "patch $p failed (see .deps/logs/starpu-patch.log)"
            done
        fi
    fi
    rm -rf "$STARPU_BUILD" "$STARPU_PREFIX"
    mkdir -p "$STARPU_BUILD"
    # Debian's 1.3.10+dfsg tarball keeps a generated configure; use it as is.
    (cd "$STARPU_BUILD" && run_logged starpu-configure \
        "$srcdir/configure" --prefix="$STARPU_PREFIX" \
        "${STARPU_CONFIGURE_OPTS[@]}" "${STARPU_CUDA_OPTS[@]}")
    # Verify that the features we rely on were really enabled (configure may silently drop them).
    grep -q '^#define STARPU_USE_FXT 1' "$STARPU_BUILD/src/common/config.h" \
        || die "StarPU configure did not enable FxT (see .deps/logs/starpu-configure.log)"
    grep -q '^#define STARPU_USE_MPI 1' "$STARPU_BUILD/src/common/config.h" \
        || die "StarPU configure did not enable MPI (see .deps/logs/starpu-configure.log)"
    grep -q '^#define STARPU_MAXCPUS 64' "$STARPU_BUILD/src/common/config.h" \
        || die "StarPU configure did not set STARPU_MAXCPUS=64"
    if [ "$STARPU_CUDA" = 1 ]; then
        grep -q '^#define STARPU_USE_CUDA 1' "$STARPU_BUILD/src/common/config.h" \
            || die "StarPU configure did not enable CUDA (see .deps/logs/starpu-configure.log)"
        msg "   StarPU with CUDA ($starpu_nvcc); patches: $(ls "$STARPU_PATCH_DIR"/*.patch | wc -l)"
    fi
    (cd "$STARPU_BUILD" && run_logged starpu-make make -j"$JOBS")
    (cd "$STARPU_BUILD" && run_logged starpu-install make install)
    for t in starpu_machine_display starpu_fxt_tool; do
        [ -x "$STARPU_PREFIX/bin/$t" ] || die "$t missing from ${STARPU_PREFIX#$ROOT/}/bin after install"
    done
    printf '%s\n' "$STAMP_CONTENT" > "$STARPU_STAMP"
    msg "   installed into ${STARPU_PREFIX#$ROOT/}"
fi
done_step

# ---------------------------------------------------------------------------------------------
# Step 3: build bsipipe
# ---------------------------------------------------------------------------------------------
if [ "${BSIPIPE_SKIP_BUILD:-0}" = 1 ]; then
    msg "== step: build bsipipe (skipped: BSIPIPE_SKIP_BUILD=1)"
    msg "all done in $((SECONDS - T_START)) s"
    exit 0
fi

cd "$ROOT"

step "autoreconf"
need_autoreconf=0
if [ ! -x configure ]; then
    need_autoreconf=1
else
    for f in configure.ac Makefile.am m4/*.m4 $(find . -name '*.mk' -not -path './.deps/*' -not -path './bsipipe-*/*'); do
        if [ -e "$f" ] && [ "$f" -nt configure ]; then need_autoreconf=1; break; fi
    done
fi
if [ $need_autoreconf = 1 ]; then
    run_logged autoreconf autoreconf -fi
else
    msg "   configure is up to date"
fi
done_step

step "configure"
CONF_ARGS=(--with-starpu="$STARPU_PREFIX")
if [ "${BSIPIPE_WERROR:-0}" = 1 ] || [ "${CI:-}" = true ]; then
    CONF_ARGS+=(--enable-werror)
fi
# shellcheck disable=SC2206
CONF_ARGS+=(${BSIPIPE_CONFIGURE_FLAGS:-})
want_sig="${CONF_ARGS[*]}"
sig_file="$ROOT/.deps/bsipipe-configure.args"
need_configure=0
if [ ! -f config.status ] || [ ! -f Makefile ] || [ configure -nt config.status ]; then
    need_configure=1
elif [ ! -f "$sig_file" ] || [ "$(cat "$sig_file")" != "$want_sig" ]; then
    need_configure=1
elif [ "$STARPU_STAMP" -nt config.status ] || [ config.status -nt "$sig_file" ]; then
    # StarPU was rebuilt, or someone re-ran ./configure by hand (maybe with other options)
    need_configure=1
fi
if [ $need_configure = 1 ]; then
    rm -f "$sig_file"
    run_logged configure ./configure "${CONF_ARGS[@]}"
    printf '%s\n' "$want_sig" > "$sig_file"
    # show the configure summary
    sed -n '/^bsipipe .* configuration summary/,$p' "$LOGS/configure.log"
else
    msg "   config.status is up to date (${want_sig})"
fi
done_step

step "make"
msg "   make -j$JOBS (log: .deps/logs/make.log)"
if ! make -j"$JOBS" 2>&1 | tee "$LOGS/make.log"; then
    die "make failed (full output in .deps/logs/make.log)"
fi
done_step

msg "all done in $((SECONDS - T_START)) s"
