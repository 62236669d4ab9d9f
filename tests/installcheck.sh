#!/bin/sh
# installcheck.sh EXAMPLE LABEL PCDIR LIBDIR INCLUDEDIR OUTDIR
# Run by `make installcheck` (Makefile.am's installcheck-local, so also by
# distcheck) on an installed bsipipe tree whose bsipipe.pc is in PCDIR:
#  1. pkg-config finds bsipipe there, its version is $BSIPIPE_VERSION, and
#     `pkg-config --cflags --libs bsipipe` points at INCLUDEDIR/bsipipe and
#     LIBDIR (compared after resolving symlinks and '..': for a moved tree,
#     the moved copy, never the place it was installed to);
#  2. every installed header is included by one of the umbrella headers,
#     bsipipe.h and the opt-in bsipipe_kernels.h and bsipipe_starpu.h (but
#     the ones bsipipe.h names as left out);
#  3. EXAMPLE (examples/plan_and_run.c, custom_schedule.c: one call each) compiles with only `$CC $CFLAGS EXAMPLE $(pkg-config --cflags
#     --libs bsipipe)` into OUTDIR, links to LIBDIR's libbsipipe, and runs
#     (exit 0, prints the measured bubble).
# Environment: CC, CFLAGS, PKG_CONFIG (default pkg-config),
# BSIPIPE_IC_PKG_CONFIG_PATH (StarPU's pkgconfig directory and the
# configure-time PKG_CONFIG_PATH: bsipipe.pc requires starpu-1.3), BSIPIPE_VERSION.
set -u
[ $# -eq 6 ] || { echo "usage: installcheck.sh EXAMPLE LABEL PCDIR LIBDIR INCLUDEDIR OUTDIR" >&2; exit 2; }
example=$1 label=$2 pcdir=$3 libdir=$4 incdir=$5 out=$6
pc=${PKG_CONFIG:-pkg-config}
me="installcheck ($label: $(basename "$example"))"
fail() { echo "$me: FAIL: $*" >&2; exit 1; }
real() { (cd "$1" 2>/dev/null && pwd -P); }

[ -f "$pcdir/bsipipe.pc" ] || fail "no bsipipe.pc in $pcdir"
mkdir -p "$out" || fail "cannot create $out"
PKG_CONFIG_PATH="$pcdir${BSIPIPE_IC_PKG_CONFIG_PATH:+:$BSIPIPE_IC_PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR 2>/dev/null || true

# 1. what pkg-config says
v=$($pc --modversion bsipipe) || fail "pkg-config --modversion bsipipe failed (PKG_CONFIG_PATH=$PKG_CONFIG_PATH)"
[ -z "${BSIPIPE_VERSION:-}" ] || [ "$v" = "$BSIPIPE_VERSION" ] || fail "pkg-config says version $v, expected $BSIPIPE_VERSION"
flags=$($pc --cflags --libs bsipipe) || fail "pkg-config --cflags --libs bsipipe failed"
echo "$me: pkg-config --cflags --libs bsipipe: $flags"
want_inc=$(real "$incdir/bsipipe") || fail "no $incdir/bsipipe"
want_lib=$(real "$libdir") || fail "no $libdir"
got_inc= got_lib=
for f in $flags; do
    case "$f" in
    -I*) d=$(real "${f#-I}") && [ "$d" = "$want_inc" ] && got_inc=${f#-I} ;;
    -L*) d=$(real "${f#-L}") && [ "$d" = "$want_lib" ] && got_lib=${f#-L} ;;
    esac
done
[ -n "$got_inc" ] || fail "no -I flag resolves to $want_inc"
[ -n "$got_lib" ] || fail "no -L flag resolves to $want_lib"
[ -f "$got_inc/bsipipe.h" ] && [ -f "$got_inc/bsipipe_version.h" ] || fail "bsipipe.h or bsipipe_version.h missing in $got_inc"

# 2. the umbrella headers include every installed header (bar the per-precision declaration
#    files, included twice by their own headers, and the CUDA ones)
missing=
for h in $(cd "$want_inc" && find . -name '*.h' | sed 's|^\./||' | sort); do
    case "$h" in
    bsipipe.h|bsipipe_kernels.h|bsipipe_starpu.h|kernels/bsipipe_kernels_decl.h|kernels/bsipipe_tp_decl.h|kernels/cuda/bsipipe_cuda_kernels.h|kernels/cuda/bsipipe_cuda_ops.h|\
    kernels/cuda/bsipipe_cuda_tp.h) continue ;;
    esac
    cat "$want_inc/bsipipe.h" "$want_inc/bsipipe_kernels.h" "$want_inc/bsipipe_starpu.h" 2>/dev/null |
        grep -q "^#include \"$h\"" || missing="$missing $h"
done
[ -z "$missing" ] || fail "no umbrella header (bsipipe.h, bsipipe_kernels.h, bsipipe_starpu.h) includes:$missing"

# 3. the example, built against this tree only, and run
bin="$out/$(basename "$example" .c)"
# shellcheck disable=SC2086
${CC:-cc} ${CFLAGS:-} "$example" $flags -o "$bin" || fail "cannot build $example against the installed library"
lib=$(LD_LIBRARY_PATH="$want_lib" ldd "$bin" 2>/dev/null | awk '$1 ~ /^libbsipipe\.so/ { print $3 }')
[ -n "$lib" ] || fail "$bin does not load libbsipipe"
lib_dir=$(real "$(dirname "$lib")")
[ "$lib_dir" = "$want_lib" ] || fail "$bin loads $lib, not the one in $want_lib"
LD_LIBRARY_PATH="$want_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" STARPU_WORKERS_NOBIND=1 "$bin" > "$bin.log" 2>&1
rc=$?
cat "$bin.log"
[ $rc -eq 0 ] || fail "$bin exited $rc"
grep -q "measured bubble" "$bin.log" || fail "$bin printed no measured bubble"
echo "$me: PASS: built with pkg-config against $want_lib and run"
