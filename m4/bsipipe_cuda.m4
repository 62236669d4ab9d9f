# bsipipe_cuda.m4 — CUDA toolkit (nvcc, cudart, cuBLAS) and NCCL.
#
# BSIPIPE_CHECK_CUDA
#   --with-cuda=DIR | --without-cuda   (default: nvcc from PATH, else /usr/local/cuda/bin)
#   --with-nccl=DIR | --without-nccl   (default: look next to CUDA, then /usr/local, /usr)
#   Sets and substitutes: NVCC, NVCC_ARCH_FLAGS, NVCCFLAGS, CUDA_HOME, CUDA_CFLAGS, CUDA_LIBS
#   (cudart + cuBLAS, with rpath), NCCL_CFLAGS, NCCL_LIBS; conditionals HAVE_CUDA, HAVE_NCCL;
#   defines BSIPIPE_HAVE_CUDA / BSIPIPE_HAVE_NCCL. Shell vars bsipipe_cuda, bsipipe_nccl.
AC_DEFUN([BSIPIPE_CHECK_CUDA], [
AC_ARG_WITH([cuda],
  [AS_HELP_STRING([--with-cuda=DIR], [CUDA toolkit directory (default: auto-detect nvcc); --without-cuda disables CUDA])],
  [], [with_cuda=check])
AC_ARG_VAR([NVCC], [CUDA compiler])
AC_ARG_VAR([NVCC_ARCH_FLAGS], [nvcc code generation flags (default: sm_90 SASS + compute_80 PTX)])
AC_ARG_VAR([NVCCFLAGS], [extra nvcc flags (default: -O2)])

bsipipe_cuda=no
CUDA_HOME=
AS_IF([test "$with_cuda" != no], [
  AS_CASE([$with_cuda],
    [check|yes], [
      AS_IF([test -z "$NVCC"], [AC_PATH_PROG([NVCC], [nvcc], [], [$PATH$PATH_SEPARATOR/usr/local/cuda/bin])])
    ], [
      AS_IF([test -z "$NVCC"], [AC_PATH_PROG([NVCC], [nvcc], [], [$with_cuda/bin])])
    ])
  AS_IF([test -n "$NVCC"], [
    dnl resolve symlinks (/usr/bin/nvcc -> /usr/local/cuda-X/bin/nvcc)
    bsipipe_nvcc_real=`readlink -f "$NVCC" 2>/dev/null || echo "$NVCC"`
    AS_IF([test "$with_cuda" != check && test "$with_cuda" != yes],
          [CUDA_HOME=`cd "$with_cuda" && pwd`],
          [CUDA_HOME=`dirname "$bsipipe_nvcc_real"`; CUDA_HOME=`dirname "$CUDA_HOME"`])
    bsipipe_cuda_libdir=
    for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do
      AS_IF([test -z "$bsipipe_cuda_libdir" && test -f "$d/libcudart.so"], [bsipipe_cuda_libdir=$d])
    done
    CUDA_CFLAGS="-isystem $CUDA_HOME/include"
    CUDA_LIBS="-L$bsipipe_cuda_libdir -Wl,-rpath,$bsipipe_cuda_libdir -lcublas -lcudart -lstdc++"
    bsipipe_save_CPPFLAGS=$CPPFLAGS; bsipipe_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"; LIBS="$CUDA_LIBS $LIBS"
    AC_MSG_CHECKING([for CUDA runtime and cuBLAS in $CUDA_HOME])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime.h>
#include <cublas_v2.h>]],
      [[int n = 0; cublasHandle_t h; (void)h; if (0) cublasCreate(&h); return (int)cudaGetDeviceCount(&n) < 0;]])],
      [bsipipe_cuda=yes], [bsipipe_cuda=no])
    AC_MSG_RESULT([$bsipipe_cuda])
    CPPFLAGS=$bsipipe_save_CPPFLAGS; LIBS=$bsipipe_save_LIBS
    AS_IF([test "$bsipipe_cuda" = yes], [
      bsipipe_nvcc_version=`"$NVCC" --version | sed -n 's/.*release \([[0-9.]]*\).*/\1/p'`
    ])
  ])
  AS_IF([test "$bsipipe_cuda" = no && test "$with_cuda" != check],
        [AC_MSG_ERROR([--with-cuda given but a usable CUDA toolkit (nvcc, cudart, cuBLAS) was not found; see config.log])])
])
AS_IF([test "$bsipipe_cuda" = no], [CUDA_CFLAGS=; CUDA_LIBS=])
AS_IF([test "$bsipipe_cuda" = yes], [AC_DEFINE([BSIPIPE_HAVE_CUDA], [1], [CUDA is available])])
: ${NVCC_ARCH_FLAGS="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80"}
: ${NVCCFLAGS="-O2"}
AC_SUBST([CUDA_HOME])
AC_SUBST([CUDA_CFLAGS])
AC_SUBST([CUDA_LIBS])
AM_CONDITIONAL([HAVE_CUDA], [test "$bsipipe_cuda" = yes])

dnl ---- NCCL ----
AC_ARG_WITH([nccl],
  [AS_HELP_STRING([--with-nccl=DIR], [NCCL installation (default: auto-detect; needs CUDA)])],
  [], [with_nccl=check])
bsipipe_nccl=no
NCCL_CFLAGS=; NCCL_LIBS=
AS_IF([test "$bsipipe_cuda" = yes && test "$with_nccl" != no], [
  AS_CASE([$with_nccl],
    [check|yes], [bsipipe_nccl_dirs="$CUDA_HOME /usr/local /usr"],
    [bsipipe_nccl_dirs="$with_nccl"])
  AC_MSG_CHECKING([for NCCL])
  for d in $bsipipe_nccl_dirs; do
    test -f "$d/include/nccl.h" || continue
    for l in "$d/lib" "$d/lib64" "$d/lib/x86_64-linux-gnu"; do
      AS_IF([test -f "$l/libnccl.so"], [
        bsipipe_save_CPPFLAGS=$CPPFLAGS; bsipipe_save_LIBS=$LIBS
        CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS -isystem $d/include"
        LIBS="-L$l -lnccl $CUDA_LIBS $LIBS"
        AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <nccl.h>]], [[int v = 0; return (int)ncclGetVersion(&v);]])],
          [bsipipe_nccl=yes; NCCL_CFLAGS="-isystem $d/include"; NCCL_LIBS="-L$l -Wl,-rpath,$l -lnccl"])
        CPPFLAGS=$bsipipe_save_CPPFLAGS; LIBS=$bsipipe_save_LIBS
      ])
      test "$bsipipe_nccl" = yes && break
    done
    test "$bsipipe_nccl" = yes && break
  done
  AC_MSG_RESULT([$bsipipe_nccl${NCCL_LIBS:+ ($NCCL_LIBS)}])
  AS_IF([test "$bsipipe_nccl" = no && test "$with_nccl" != check],
        [AC_MSG_ERROR([--with-nccl given but NCCL (nccl.h, libnccl.so) not found])])
])
AS_IF([test "$bsipipe_nccl" = yes], [AC_DEFINE([BSIPIPE_HAVE_NCCL], [1], [NCCL is available])])
AC_SUBST([NCCL_CFLAGS])
AC_SUBST([NCCL_LIBS])
AM_CONDITIONAL([HAVE_NCCL], [test "$bsipipe_nccl" = yes])
])
