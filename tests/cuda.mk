# tests/cuda.mk: CUDA kernel tests (docs/cuda.md). Both skip (exit 77) without a CUDA GPU or
# when libbsipipe was built without CUDA.
#  test_cuda_kernels  every CUDA kernel vs its CPU twin (fp32 < 1e-5, bf16 < 1e-2, no NaN)
#  test_cuda_bench    one block forward+backward on the GPU; `--full` is the device-check
#                     size (hidden 1280, 32 heads, 8K tokens, k = 2); never asserts on time
#  test_cuda_emu.sh   test_cuda_kernels against the CUDA kernels built for the CPU emulation
#                     of kernels/cuda/emu/ (runs without a GPU; needs g++)
#  test_cuda_tp       every tensor-parallel segment on CUDA vs its CPU twin, rank by rank
#                     (GPT, LLaMA, D_t = 2 and 4, fused and split backward)
check_PROGRAMS += tests/test_cuda_kernels tests/test_cuda_bench tests/test_cuda_engine tests/test_cuda_tp
TESTS += tests/test_cuda_kernels tests/test_cuda_bench tests/test_cuda_emu.sh tests/test_cuda_engine \
	tests/test_cuda_tp
# test_cuda_engine   one engine iteration on CUDA workers vs CPU workers (loss, gradients,
#                    gnorm; fp32 < 1e-5); exit 77 without a GPU
tests_test_cuda_engine_SOURCES = tests/test_cuda_engine.c
tests_test_cuda_engine_LDADD = libbsipipe.la $(STARPU_LIBS) -lm
tests_test_cuda_kernels_SOURCES = tests/test_cuda_kernels.c
tests_test_cuda_bench_SOURCES = tests/test_cuda_bench.c
tests_test_cuda_kernels_LDADD = libbsipipe.la -lm
tests_test_cuda_bench_LDADD = libbsipipe.la -lm
tests_test_cuda_tp_SOURCES = tests/test_cuda_tp.c
tests_test_cuda_tp_LDADD = libbsipipe.la -lm
if HAVE_CUDA
tests_test_cuda_kernels_LDADD += $(CUDA_LIBS)
tests_test_cuda_bench_LDADD += $(CUDA_LIBS)
tests_test_cuda_tp_LDADD += $(CUDA_LIBS)
endif
EXTRA_DIST += tests/test_cuda_emu.sh \
	kernels/cuda/emu/cuda_runtime_api.h kernels/cuda/emu/cuda_runtime.h \
	kernels/cuda/emu/cublas_v2.h kernels/cuda/emu/cuda_emu_device.h kernels/cuda/emu/cuda_bf16.h \
	kernels/cuda/emu/mma.h \
	kernels/cuda/emu/cuda_emu.cc kernels/cuda/emu/probe_emu.c kernels/cuda/emu/bf16_selftest.cc \
	kernels/cuda/devcheck/cblas.h kernels/cuda/devcheck/cblas_naive.c
EXTRA_DIST += scripts/device-bundle.sh
EXTRA_DIST += scripts/device-check.sh docs/cuda.md scripts/starpu-patches/0001-computemode.patch \
	scripts/starpu-patches/0002-cublas-v2-header.patch \
	scripts/starpu-patches/0003-no-legacy-cublas.patch \
	scripts/starpu-patches/0004-nworker-per-cuda-blocking.patch \
	scripts/starpu-patches/0005-no-last-worker-poll.patch
noinst_HEADERS += tests/cuda_check.h
