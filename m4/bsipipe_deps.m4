# bsipipe_deps.m4 — hwloc, OpenBLAS (CBLAS), Open MPI, libm.

# BSIPIPE_CHECK_HWLOC: HWLOC_CFLAGS / HWLOC_LIBS (required).
AC_DEFUN([BSIPIPE_CHECK_HWLOC], [
PKG_CHECK_MODULES([HWLOC], [hwloc], [],
  [AC_MSG_ERROR([hwloc not found (pkg-config module hwloc): install libhwloc-dev, or run ./scripts/setup.sh])])
HWLOC_VERSION=`$PKG_CONFIG --modversion hwloc`
AC_SUBST([HWLOC_VERSION])
])

# BSIPIPE_CHECK_BLAS: OpenBLAS with CBLAS -> BLAS_CFLAGS / BLAS_LIBS (required).
AC_DEFUN([BSIPIPE_CHECK_BLAS], [
AC_ARG_VAR([BLAS_CFLAGS], [C compiler flags for CBLAS (default: pkg-config openblas)])
AC_ARG_VAR([BLAS_LIBS], [linker flags for CBLAS (default: pkg-config openblas, else -lopenblas)])
bsipipe_blas_pc=
AS_IF([test -z "$BLAS_LIBS"], [
  PKG_CHECK_EXISTS([openblas], [
    BLAS_CFLAGS=`$PKG_CONFIG --cflags openblas`
    BLAS_LIBS=`$PKG_CONFIG --libs openblas`
    bsipipe_blas_pc=openblas
  ], [BLAS_LIBS=-lopenblas])
])
BLAS_CFLAGS=`AS_ECHO([" $BLAS_CFLAGS"]) | sed -e 's/ -I */ -isystem /g' -e 's/^ //'`
bsipipe_save_CPPFLAGS=$CPPFLAGS; bsipipe_save_LIBS=$LIBS
CPPFLAGS="$CPPFLAGS $BLAS_CFLAGS"
AC_CHECK_HEADER([cblas.h], [],
  [AC_MSG_ERROR([cblas.h not found (BLAS_CFLAGS='$BLAS_CFLAGS'): install libopenblas-dev, or run ./scripts/setup.sh])])
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
