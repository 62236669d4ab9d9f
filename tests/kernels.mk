# tests/kernels.mk: tests of the CPU kernels and the reference trainer.
#  test_kernel_grad   every backward vs central finite differences (fp64 build)
#  test_kernel_torch  against the committed PyTorch reference states
#                     (regenerate: python3 tests/torch/gen_reference.py)
#  test_kernel_split  splitting invariance, k = 1..4, even and balanced
#  test_kernel_errors bad shapes and sizes return -EINVAL
#  test_kernel_tp     tensor-parallel shards (D_t = 1, 2, 4) equal the unsharded
#                     kernels; bad degrees are config errors naming the rule
#  test_kernels_valgrind.sh  the five above under valgrind memcheck
check_PROGRAMS += tests/test_kernel_grad tests/test_kernel_torch tests/test_kernel_split \
	tests/test_kernel_errors tests/test_kernel_tp
TESTS += tests/test_kernel_grad tests/test_kernel_torch tests/test_kernel_split \
	tests/test_kernel_errors tests/test_kernel_tp tests/test_kernels_valgrind.sh
tests_test_kernel_grad_LDADD = libbsipipe.la -lm
tests_test_kernel_torch_LDADD = libbsipipe.la -lm
tests_test_kernel_split_LDADD = libbsipipe.la -lm
tests_test_kernel_errors_LDADD = libbsipipe.la -lm
tests_test_kernel_tp_LDADD = libbsipipe.la -lm -lpthread
noinst_HEADERS += tests/kernels/kt_util.h tests/kernels/tp_run_tmpl.h
EXTRA_DIST += tests/test_kernels_valgrind.sh tests/torch/gen_reference.py \
	tests/torch/ref_gpt.bin tests/torch/ref_llama.bin
