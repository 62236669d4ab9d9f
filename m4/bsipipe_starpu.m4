# bsipipe_starpu.m4 — locate StarPU 1.3 (and StarPU-MPI) through pkg-config.
#
# BSIPIPE_CHECK_STARPU
#   --with-starpu=PREFIX   use the installation in PREFIX (its lib/pkgconfig is searched first)
#   Sets and substitutes: STARPU_CFLAGS (with -isystem, so -Werror holds), STARPU_LIBS (with an
#   rpath to StarPU's libdir), STARPU_VERSION, STARPU_PREFIX, STARPU_BINDIR, STARPU_LIBDIR,
#   STARPU_FXT_TOOL (path or empty), STARPU_MAXCPUS; shell variable bsipipe_starpu_fxt=yes/no.
AC_DEFUN([BSIPIPE_CHECK_STARPU], [
AC_REQUIRE([PKG_PROG_PKG_CONFIG])
AC_ARG_WITH([starpu],
  [AS_HELP_STRING([--with-starpu=PREFIX],
    [StarPU 1.3 installation prefix (default: search pkg-config's path; scripts/setup.sh builds one in .deps/starpu)])],
  [], [with_starpu=])

AS_CASE([$with_starpu],
  [no], [AC_MSG_ERROR([bsipipe cannot be built without StarPU (--without-starpu given)])],
  [yes|""], [],
  [
    AS_IF([test -d "$with_starpu"], [],
          [AC_MSG_ERROR([--with-starpu=$with_starpu: no such directory. Run scripts/setup.sh to build StarPU into .deps/starpu])])
    with_starpu=`cd "$with_starpu" && pwd`
    PKG_CONFIG_PATH="$with_starpu/lib/pkgconfig:$with_starpu/lib64/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export PKG_CONFIG_PATH
  ])

PKG_CHECK_MODULES([STARPU], [starpu-1.3], [],
  [AC_MSG_ERROR([StarPU 1.3 not found (pkg-config module starpu-1.3).
  $STARPU_PKG_ERRORS
  Either run ./scripts/setup.sh (builds StarPU 1.3.10 into .deps/starpu and configures bsipipe),
  or point configure at an existing installation with --with-starpu=PREFIX
  (the directory that contains lib/pkgconfig/starpu-1.3.pc).])])

STARPU_VERSION=`$PKG_CONFIG --modversion starpu-1.3`
STARPU_PREFIX=`$PKG_CONFIG --variable=prefix starpu-1.3`
STARPU_LIBDIR=`$PKG_CONFIG --variable=libdir starpu-1.3`
STARPU_BINDIR="$STARPU_PREFIX/bin"
AS_IF([test -n "$with_starpu" && test "$with_starpu" != yes], [
  dnl the .pc may carry a relocated prefix; prefer what the user gave us
  AS_IF([test -d "$with_starpu/bin"], [STARPU_BINDIR="$with_starpu/bin"])
  STARPU_PREFIX="$with_starpu"
])

dnl Include StarPU's headers as system headers: its starpu.h pulls in CUDA headers with
dnl deprecation warnings, which must not break -Werror builds.
STARPU_CFLAGS=`AS_ECHO([" $STARPU_CFLAGS"]) | sed -e 's/ -I */ -isystem /g' -e 's/^ //'`
dnl Non-system prefix: record an rpath so tests and apps run without LD_LIBRARY_PATH.
AS_CASE([$STARPU_LIBDIR],
  [/usr/lib|/usr/lib64|/usr/lib/*-linux-gnu|""], [],
  [STARPU_LIBS="-Wl,-rpath,$STARPU_LIBDIR $STARPU_LIBS"])

dnl Sanity: headers and library really usable.
bsipipe_save_CPPFLAGS=$CPPFLAGS; bsipipe_save_LIBS=$LIBS
CPPFLAGS="$CPPFLAGS $STARPU_CFLAGS"; LIBS="$STARPU_LIBS $LIBS"
AC_MSG_CHECKING([whether StarPU $STARPU_VERSION links])
AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <starpu.h>]],
                                [[struct starpu_conf c; starpu_conf_init(&c); return starpu_init(&c);]])],
  [AC_MSG_RESULT([yes])],
  [AC_MSG_RESULT([no])
   AC_MSG_ERROR([StarPU found by pkg-config ($STARPU_PREFIX) but a test program does not link; see config.log])])

AC_MSG_CHECKING([whether StarPU was built with FxT])
AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <starpu_config.h>
#ifndef STARPU_USE_FXT
#error no fxt
#endif]], [])],
  [bsipipe_starpu_fxt=yes], [bsipipe_starpu_fxt=no])
AC_MSG_RESULT([$bsipipe_starpu_fxt])

AC_COMPUTE_INT([STARPU_MAXCPUS], [STARPU_MAXCPUS], [[#include <starpu_config.h>]],
               [STARPU_MAXCPUS=unknown])
CPPFLAGS=$bsipipe_save_CPPFLAGS; LIBS=$bsipipe_save_LIBS

STARPU_FXT_TOOL=
AS_IF([test -x "$STARPU_BINDIR/starpu_fxt_tool"], [STARPU_FXT_TOOL="$STARPU_BINDIR/starpu_fxt_tool"])

AS_IF([test "$bsipipe_starpu_fxt" = yes],
      [AC_DEFINE([BSIPIPE_STARPU_HAVE_FXT], [1], [StarPU was built with FxT tracing])])

AC_SUBST([STARPU_VERSION])
AC_SUBST([STARPU_PREFIX])
AC_SUBST([STARPU_LIBDIR])
AC_SUBST([STARPU_BINDIR])
AC_SUBST([STARPU_FXT_TOOL])
AC_SUBST([STARPU_MAXCPUS])
])

# BSIPIPE_CHECK_STARPUMPI — needs BSIPIPE_CHECK_STARPU first. Sets HAVE_STARPUMPI conditional
# and STARPUMPI_CFLAGS/STARPUMPI_LIBS; shell variable bsipipe_starpumpi=yes/no.
AC_DEFUN([BSIPIPE_CHECK_STARPUMPI], [
PKG_CHECK_MODULES([STARPUMPI], [starpumpi-1.3], [bsipipe_starpumpi=yes], [bsipipe_starpumpi=no])
AS_IF([test "$bsipipe_starpumpi" = yes], [
  STARPUMPI_CFLAGS=`AS_ECHO([" $STARPUMPI_CFLAGS"]) | sed -e 's/ -I */ -isystem /g' -e 's/^ //'`
  AC_DEFINE([BSIPIPE_HAVE_STARPUMPI], [1], [StarPU-MPI is available])
])
AM_CONDITIONAL([HAVE_STARPUMPI], [test "$bsipipe_starpumpi" = yes])
])
