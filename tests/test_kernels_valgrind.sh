#!/bin/sh
# test_kernels_valgrind.sh: the kernel tests under valgrind memcheck (no
# invalid read/write, no use of uninitialised values, no leak). Skips (77)
# only when valgrind is absent. The finite-difference test checks every 5th
# parameter here (BSIPIPE_TEST_QUICK=1) to stay fast.
top_builddir=${top_builddir:-.}
srcdir=${srcdir:-.}
if ! command -v valgrind >/dev/null 2>&1; then
    echo "SKIP: valgrind not found (apt-get install valgrind)"
    exit 77
fi
# the tests are libtool wrappers around the real binaries
if [ -x "$top_builddir/libtool" ]; then
    run="$top_builddir/libtool --mode=execute"
else
    run=
fi
export srcdir BSIPIPE_TEST_QUICK=1
# one BLAS thread: OpenBLAS's thread server only adds noise and time here
export OPENBLAS_NUM_THREADS=1
# valgrind emulates no AVX-512: let OpenBLAS pick its kernels from the
# (virtual) CPU valgrind reports rather than a forced core type
unset OPENBLAS_CORETYPE
status=0
for t in test_kernel_errors test_kernel_grad test_kernel_split test_kernel_torch; do
    echo "== valgrind $t"
    $run valgrind -q --error-exitcode=42 --leak-check=full --errors-for-leak-kinds=definite \
        --suppressions="$srcdir/tests/valgrind.supp" \
        "$top_builddir/tests/$t" || { echo "FAIL: $t under valgrind (exit $?)"; status=1; }
done
exit $status
