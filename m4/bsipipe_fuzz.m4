# bsipipe_fuzz.m4 — --enable-fuzzers: the libFuzzer targets of fuzz/ (docs/fuzzing.md).
# They need a compiler with -fsanitize=fuzzer (clang; Debian: clang and libclang-rt-dev),
# which need not be $CC: FUZZ_CC (default: clang) is checked on its own.
#   --enable-fuzzers=auto (default): built when FUZZ_CC links a fuzzer, else skipped
#   --enable-fuzzers / =yes: an error when it does not
#   --disable-fuzzers: never
# Sets FUZZ_CC, FUZZ_CFLAGS, FUZZ_LDFLAGS and the conditional BSIPIPE_FUZZERS.
AC_DEFUN([BSIPIPE_CHECK_FUZZ], [
AC_ARG_ENABLE([fuzzers],
  [AS_HELP_STRING([--enable-fuzzers@<:@=auto|yes|no@:>@],
    [build the libFuzzer targets of fuzz/ with FUZZ_CC (default clang; auto: when it supports
     -fsanitize=fuzzer) and run them briefly in make check (default: auto)])],
  [], [enable_fuzzers=auto])
AC_ARG_VAR([FUZZ_CC], [compiler of the fuzz targets, with -fsanitize=fuzzer (default: clang)])
AS_CASE([$enable_fuzzers], [yes|no|auto], [],
  [AC_MSG_ERROR([--enable-fuzzers=$enable_fuzzers: use yes, no or auto])])
FUZZ_CFLAGS="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
FUZZ_LDFLAGS="-fsanitize=fuzzer,address,undefined"
bsipipe_fuzzers=no
AS_IF([test "$enable_fuzzers" != no], [
  AS_IF([test -z "$FUZZ_CC"], [AC_PATH_PROGS([FUZZ_CC], [clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14])])
  AC_MSG_CHECKING([whether ${FUZZ_CC:-clang} links a libFuzzer target (-fsanitize=fuzzer,address,undefined)])
  AS_IF([test -n "$FUZZ_CC"], [
    cat > conftest-fuzz.c <<_BSIPIPE_EOF
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return size > 0 && *data == 1; }
_BSIPIPE_EOF
    AS_IF([$FUZZ_CC $FUZZ_CFLAGS $FUZZ_LDFLAGS conftest-fuzz.c -o conftest-fuzz$EXEEXT >&AS_MESSAGE_LOG_FD 2>&1 &&
           ./conftest-fuzz$EXEEXT -runs=10 >&AS_MESSAGE_LOG_FD 2>&1],
          [bsipipe_fuzzers=yes])
    rm -f conftest-fuzz.c conftest-fuzz$EXEEXT
  ])
  AC_MSG_RESULT([$bsipipe_fuzzers])
  AS_IF([test "$enable_fuzzers" = yes && test "$bsipipe_fuzzers" = no],
    [AC_MSG_ERROR([--enable-fuzzers: ${FUZZ_CC:-clang} cannot build a libFuzzer target with -fsanitize=fuzzer,address,undefined; install clang and its runtime (Debian: apt-get install clang libclang-rt-dev) or set FUZZ_CC])])
])
AC_SUBST([FUZZ_CFLAGS])
AC_SUBST([FUZZ_LDFLAGS])
AC_SUBST([bsipipe_fuzzers])
AM_CONDITIONAL([BSIPIPE_FUZZERS], [test "$bsipipe_fuzzers" = yes])
])
