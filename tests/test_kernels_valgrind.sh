#!/bin/sh
# test_kernels_valgrind.sh: the kernel tests under valgrind memcheck (no
# invalid read/write, no use of uninitialised values, no leak). Skips (77)
# only when valgrind is absent. The finite-difference test checks every 5th
# parameter here (BSIPIPE_TEST_QUICK=1) to stay fast.
. "${srcdir:-.}/tests/valgrind_util.sh"
export srcdir BSIPIPE_TEST_QUICK=1
# one BLAS thread: OpenBLAS's thread server only adds noise and time here
export OPENBLAS_NUM_THREADS=1
# valgrind emulates no AVX-512: let OpenBLAS pick its kernels from the
# (virtual) CPU valgrind reports rather than a forced core type
unset OPENBLAS_CORETYPE
valgrind_tests test_kernel_errors test_kernel_grad test_kernel_split test_kernel_torch test_kernel_tp
