# apps/ref.mk: bsipipe-ref (the sequential reference trainer on synthetic data)
# and bsipipe-kbench (one block's forward+backward GFLOP/s vs OpenBLAS sgemm
# and PyTorch; a benchmark program, not a test).
bin_PROGRAMS += apps/bsipipe-ref apps/bsipipe-kbench
apps_bsipipe_ref_SOURCES = apps/bsipipe-ref.c apps/cli.c apps/cli.h
apps_bsipipe_ref_LDADD = libbsipipe.la -lm
apps_bsipipe_kbench_SOURCES = apps/bsipipe-kbench.c apps/cli.c apps/cli.h
apps_bsipipe_kbench_LDADD = libbsipipe.la $(BLAS_LIBS) -ldl -lm
# Its PyTorch companion script is installed into pkgdatadir; bsipipe-kbench
# looks for it there (relative to its own bindir first, so a moved install
# finds its own copy) and, run from the build tree, in the source tree.
dist_pkgdata_DATA = apps/bsipipe-kbench-torch.py
apps_bsipipe_kbench_CPPFLAGS = $(AM_CPPFLAGS) \
	-DBSIPIPE_KBENCH_TORCH_SCRIPT='"$(abs_top_srcdir)/apps/bsipipe-kbench-torch.py"' \
	-DBSIPIPE_BUILDDIR='"$(abs_top_builddir)"' -DBSIPIPE_PREFIX='"$(prefix)"' \
	-DBSIPIPE_BINDIR='"$(bindir)"' -DBSIPIPE_PKGDATADIR='"$(pkgdatadir)"'
