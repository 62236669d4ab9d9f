# tasks/mpi.mk: the engine across StarPU-MPI ranks (docs/scaleout.md) and its
# multi-rank tests (run under mpirun by tests/test_mpi.sh).
libbsipipe_la_SOURCES += tasks/engine_mpi.c tasks/engine_mpi_liveness.c
noinst_HEADERS += tasks/mpi_internal.h
if HAVE_STARPUMPI
check_PROGRAMS += tests/test_mpi_equiv tests/test_mpi_tp
tests_test_mpi_equiv_LDADD = libbsipipe.la $(STARPUMPI_LIBS) $(STARPU_LIBS) $(MPI_LIBS)
tests_test_mpi_tp_LDADD = libbsipipe.la $(STARPUMPI_LIBS) $(STARPU_LIBS) $(MPI_LIBS)
TESTS += tests/test_netns.sh
TESTS += tests/test_mpi.sh tests/test_mpi_checkpoint.sh tests/test_mpi_deadline.sh tests/test_mpi_stop.sh tests/test_mpi_tp.sh
endif
EXTRA_DIST += tests/test_mpi.sh tests/mpi_util.sh tests/test_mpi_checkpoint.sh tests/test_mpi_deadline.sh tests/test_mpi_stop.sh \
	tests/test_mpi_tp.sh
EXTRA_DIST += docs/scaleout.md tests/test_netns.sh scripts/netns-cluster.sh
