# kernels/cuda/local.mk — CUDA kernels (owner: build). Included from the top Makefile.am.
# .cu files are compiled by nvcc through the `.cu.lo` rule of the top Makefile.am whenever
# configure found CUDA (HAVE_CUDA); each .cu needs a CPU stub (or an `else` branch) so that
# libbsipipe links without CUDA.
nobase_pkginclude_HEADERS += kernels/cuda/bsipipe_cuda_probe.h kernels/cuda/bsipipe_cuda_kernels.h \
	kernels/cuda/bsipipe_cuda_ops.h kernels/cuda/bsipipe_cuda_tp.h
# internal: shared by the .cu files (and the CPU emulation build of tests/test_cuda_emu.sh)
noinst_HEADERS += kernels/cuda/bsipipe_cuda_internal.h kernels/cuda/bsipipe_cuda_attention_tc.h \
	kernels/cuda/bsipipe_cuda_tp.cuh
if HAVE_CUDA
# fp32 CUDA twins of the CPU kernels (docs/cuda.md). They have no CPU stub: their header
# needs the CUDA headers, so callers use them only under BSIPIPE_HAVE_CUDA.
libbsipipe_la_SOURCES += kernels/cuda/bsipipe_cuda_probe.cu kernels/cuda/bsipipe_cuda_kernels.cu
# attention on the tensor cores (wmma, bf16) for the bf16 product modes
libbsipipe_la_SOURCES += kernels/cuda/bsipipe_cuda_attention_tc.cu
# small device operations of the CUDA codelets (clear, add, copy, SYNC sum, scratch)
libbsipipe_la_SOURCES += kernels/cuda/bsipipe_cuda_ops.cu
else
libbsipipe_la_SOURCES += kernels/cuda/bsipipe_cuda_probe_stub.c
endif
# nvcc runs without automake's dependency tracking: list the headers each .cu includes.
kernels/cuda/bsipipe_cuda_probe.lo: kernels/cuda/bsipipe_cuda_probe.h
kernels/cuda/bsipipe_cuda_kernels.lo: kernels/cuda/bsipipe_cuda_kernels.h kernels/bsipipe_kernels.h \
	kernels/bsipipe_kernels_decl.h kernels/bsipipe_model.h kernels/cpu/internal.h \
	kernels/cuda/bsipipe_cuda_internal.h kernels/cuda/bsipipe_cuda_attention_tc.h \
	kernels/cuda/bsipipe_cuda_tp.h kernels/cuda/bsipipe_cuda_tp.cuh kernels/bsipipe_tp.h \
	kernels/bsipipe_tp_decl.h base/bsipipe_error.h
kernels/cuda/bsipipe_cuda_attention_tc.lo: kernels/cuda/bsipipe_cuda_attention_tc.h \
	kernels/cuda/bsipipe_cuda_internal.h
kernels/cuda/bsipipe_cuda_ops.lo: kernels/cuda/bsipipe_cuda_ops.h base/bsipipe_error.h

check_PROGRAMS += tests/test_cuda_probe
TESTS += tests/test_cuda_probe
tests_test_cuda_probe_SOURCES = tests/test_cuda_probe.c
tests_test_cuda_probe_LDADD = libbsipipe.la
