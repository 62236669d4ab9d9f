# bsipipe_deps.m4 — hwloc, OpenBLAS (CBLAS), Open MPI, libm.

# BSIPIPE_CHECK_HWLOC: HWLOC_CFLAGS / HWLOC_LIBS (required).
AC_DEFUN([BSIPIPE_CHECK_HWLOC], [
PKG_CHECK_MODULES([HWLOC], [hwloc], [],
  [AC_MSG_ERROR([hwloc not found (pkg-config module hwloc): install libhwloc-dev, or run ./scripts/setup.sh])])
HWLOC_VERSION=`$PKG_CONFIG --modversion hwloc`
AC_SUBST([HWLOC_VERSION])
])

# BSIPIPE_CHECK_BLAS: the CBLAS -> BLAS_CFLAGS / BLAS_LIBS (required).
#   --with-blas=openblas (default) or blis. OpenBLAS is the default because it
#   measured fastest on the block's GEMM shapes (docs/kernels.md, "BLAS").
#   BLAS_CFLAGS / BLAS_LIBS given on the command line win over both.
AC_DEFUN([BSIPIPE_CHECK_BLAS], [
AC_ARG_VAR([BLAS_CFLAGS], [C compiler flags for CBLAS (default: from --with-blas)])
AC_ARG_VAR([BLAS_LIBS], [linker flags for CBLAS (default: from --with-blas)])
AC_ARG_WITH([blas], [AS_HELP_STRING([--with-blas=openblas|blis],
  [the CBLAS for every matrix product (default: openblas, measured fastest here; see docs/kernels.md)])],
  [], [with_blas=openblas])
AS_CASE([$with_blas],
  [openblas|blis], [],
  [AC_MSG_ERROR([--with-blas expects 'openblas' or 'blis', got '$with_blas' (or set BLAS_CFLAGS and BLAS_LIBS for another CBLAS)])])
bsipipe_blas_pc=
AS_IF([test -z "$BLAS_LIBS" && test "$with_blas" = openblas], [
  PKG_CHECK_EXISTS([openblas], [
    BLAS_CFLAGS=`$PKG_CONFIG --cflags openblas`
    BLAS_LIBS=`$PKG_CONFIG --libs openblas`
    bsipipe_blas_pc=openblas
  ], [BLAS_LIBS=-lopenblas])
])
AS_IF([test -z "$BLAS_LIBS" && test "$with_blas" = blis], [
  PKG_CHECK_EXISTS([blis], [
    BLAS_CFLAGS=`$PKG_CONFIG --cflags blis`
    BLAS_LIBS=`$PKG_CONFIG --libs blis`
    bsipipe_blas_pc=blis
  ], [
    dnl Debian's libblis-*-dev ship no .pc: headers and library live in
    dnl per-threading-model directories of the multiarch tree.
    BLAS_LIBS=-lblis
    bsipipe_ma=`$CC -print-multiarch 2>/dev/null`
    for bsipipe_t in pthread openmp serial; do
      AS_IF([test -n "$bsipipe_ma" && test -r "/usr/include/$bsipipe_ma/blis-$bsipipe_t/cblas.h" &&
             test -r "/usr/lib/$bsipipe_ma/blis-$bsipipe_t/libblis.so"], [
        BLAS_CFLAGS="-I/usr/include/$bsipipe_ma/blis-$bsipipe_t"
        BLAS_LIBS="-L/usr/lib/$bsipipe_ma/blis-$bsipipe_t -lblis"
        break])
    done
  ])
])
AC_MSG_CHECKING([for the CBLAS])
AC_MSG_RESULT([$with_blas: $BLAS_LIBS])
BLAS_CFLAGS=`AS_ECHO([" $BLAS_CFLAGS"]) | sed -e 's/ -I */ -isystem /g' -e 's/^ //'`
bsipipe_save_CPPFLAGS=$CPPFLAGS; bsipipe_save_LIBS=$LIBS
CPPFLAGS="$CPPFLAGS $BLAS_CFLAGS"
AC_CHECK_HEADER([cblas.h], [],
  [AC_MSG_ERROR([cblas.h not found (BLAS_CFLAGS='$BLAS_CFLAGS'): install libopenblas-dev (--with-blas=blis: libblis-dev), or run ./scripts/setup.sh])])
LIBS="$BLAS_LIBS $LIBS"
AC_MSG_CHECKING([for cblas_sgemm in $BLAS_LIBS])
AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
  [[float a = 1, b = 1, c = 0; cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1); return c != 1.0f;]])],
  [AC_MSG_RESULT([yes])],
  [AC_MSG_RESULT([no]); AC_MSG_ERROR([cblas_sgemm does not link with BLAS_LIBS='$BLAS_LIBS'])])
CPPFLAGS=$bsipipe_save_CPPFLAGS; LIBS=$bsipipe_save_LIBS
AC_SUBST([bsipipe_blas_pc])
])

# BSIPIPE_CHECK_MPI: Open MPI -> MPI_CFLAGS / MPI_LIBS, conditional HAVE_MPI.
#   --without-mpi disables; default: use it when found (pkg-config ompi-c, else mpicc --showme).
AC_DEFUN([BSIPIPE_CHECK_MPI], [
AC_ARG_WITH([mpi], [AS_HELP_STRING([--without-mpi], [do not use MPI (default: use Open MPI when found)])],
  [], [with_mpi=check])
bsipipe_mpi=no
AS_IF([test "$with_mpi" != no], [
  PKG_CHECK_MODULES([MPI], [ompi-c], [bsipipe_mpi=yes], [
    AC_PATH_PROG([MPICC], [mpicc])
    AS_IF([test -n "$MPICC"], [
      MPI_CFLAGS=`$MPICC --showme:compile 2>/dev/null`
      MPI_LIBS=`$MPICC --showme:link 2>/dev/null`
      AS_IF([test -n "$MPI_LIBS"], [bsipipe_mpi=yes])
    ])
  ])
  AS_IF([test "$bsipipe_mpi" = no && test "$with_mpi" = yes],
        [AC_MSG_ERROR([--with-mpi given but Open MPI not found: install libopenmpi-dev])])
])
AS_IF([test "$bsipipe_mpi" = yes], [
  MPI_CFLAGS=`AS_ECHO([" $MPI_CFLAGS"]) | sed -e 's/ -I */ -isystem /g' -e 's/^ //'`
  AC_DEFINE([BSIPIPE_HAVE_MPI], [1], [MPI is available])
  AC_PATH_PROG([MPIEXEC], [mpiexec])
])
AC_SUBST([MPI_CFLAGS])
AC_SUBST([MPI_LIBS])
AM_CONDITIONAL([HAVE_MPI], [test "$bsipipe_mpi" = yes])
])
