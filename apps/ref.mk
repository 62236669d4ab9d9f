# apps/ref.mk: bsipipe-ref (the sequential reference trainer on synthetic data)
# and bsipipe-kbench (one block's forward+backward GFLOP/s vs OpenBLAS sgemm
# and PyTorch; a benchmark program, not a test).
bin_PROGRAMS += apps/bsipipe-ref apps/bsipipe-kbench
apps_bsipipe_ref_SOURCES = apps/bsipipe-ref.c apps/cli.c apps/cli.h
apps_bsipipe_ref_LDADD = libbsipipe.la -lm
apps_bsipipe_kbench_SOURCES = apps/bsipipe-kbench.c apps/cli.c apps/cli.h
apps_bsipipe_kbench_LDADD = libbsipipe.la $(BLAS_LIBS) -ldl -lm
# where bsipipe-kbench finds its PyTorch companion script when not installed
apps_bsipipe_kbench_CPPFLAGS = $(AM_CPPFLAGS) \
	-DBSIPIPE_KBENCH_TORCH_SCRIPT='"$(abs_top_srcdir)/apps/bsipipe-kbench-torch.py"'
EXTRA_DIST += apps/bsipipe-kbench-torch.py
