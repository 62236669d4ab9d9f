# bsipipe_warnings.m4 — WARN_CFLAGS (-Wall -Wextra, always) and --enable-werror.
AC_DEFUN([BSIPIPE_WARNINGS], [
AC_ARG_ENABLE([werror],
  [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors (CI does this)])],
  [], [enable_werror=no])
WARN_CFLAGS="-Wall -Wextra"
WERROR_CFLAGS=
AS_IF([test "$enable_werror" = yes], [WERROR_CFLAGS="-Werror"])
AC_SUBST([WARN_CFLAGS])
AC_SUBST([WERROR_CFLAGS])
AC_SUBST([enable_werror])
AM_CONDITIONAL([BSIPIPE_WERROR], [test "$enable_werror" = yes])
])
