# tasks/engine.mk: the engine and its tests. engine_core.c is what every task file shares
# (reports, buffers as tasks list them), engine.c the lifecycle and the iteration loop, and
# tasks/ops/ one file per op kind: its CPU and CUDA functions, codelet and insert function;
# tasks/transport/ how SEND, RECV and SYNC move (local, nccl, mpi: one interface, transport.h).
libbsipipe_la_SOURCES += tasks/engine_core.c tasks/engine_create.c tasks/engine.c tasks/engine_floor.c tasks/engine_stats.c tasks/engine_tp.c tasks/tp_submit.c tasks/tp_codelets.c tasks/engine_devices.c tasks/engine_emulate.c tasks/engine_buffers.c tasks/engine_watchdog.c tasks/engine_policy.c tasks/engine_perfmodel.c \
	tasks/ops/forward.c tasks/ops/backward.c tasks/ops/wgrad.c tasks/ops/transfer.c tasks/ops/sync.c tasks/ops/step.c \
	tasks/transport/transport.c tasks/transport/local.c tasks/transport/nccl.c tasks/transport/mpi.c
nobase_pkginclude_HEADERS += tasks/bsipipe_engine.h
noinst_HEADERS += tasks/engine_internal.h tasks/engine_cuda.h tasks/tp_internal.h tasks/transport/transport.h
libbsipipe_la_LIBADD += -ldl
check_PROGRAMS += tests/test_engine_equiv
TESTS += tests/test_engine_equiv
tests_test_engine_equiv_LDADD = libbsipipe.la $(STARPU_LIBS)
check_PROGRAMS += tests/test_engine_run
TESTS += tests/test_engine_run
tests_test_engine_run_LDADD = libbsipipe.la $(STARPU_LIBS)
check_PROGRAMS += tests/test_blas_threads tests/test_emulate_links
TESTS += tests/test_emulate_links
tests_test_emulate_links_LDADD = libbsipipe.la $(STARPU_LIBS)
TESTS += tests/test_blas_threads
tests_test_blas_threads_LDADD = libbsipipe.la $(STARPU_LIBS) -ldl
# test_engine_starpu_running: StarPU already initialised by the application ->
# bsipipe_engine_create refuses with a sentence naming the problem and the fix.
check_PROGRAMS += tests/test_engine_starpu_running
TESTS += tests/test_engine_starpu_running
tests_test_engine_starpu_running_LDADD = libbsipipe.la $(STARPU_LIBS)
# test_plan_engine: plans built op by op or imported from JSON give the
# reference trainer's loss and gradients on the engine.
check_PROGRAMS += tests/test_plan_engine
TESTS += tests/test_plan_engine
tests_test_plan_engine_LDADD = libbsipipe.la $(STARPU_LIBS)
# test_policy_equiv: a short equivalence run (w = 2) under every policy the
# engine accepts, each in a child with a time limit; StarPU's others refused up
# front. `tests/test_policy_equiv --probe` re-checks every StarPU policy.
check_PROGRAMS += tests/test_policy_equiv
TESTS += tests/test_policy_equiv
tests_test_policy_equiv_LDADD = libbsipipe.la $(STARPU_LIBS)
# test_perfmodel.sh: STARPU_CALIBRATE=1 runs (STARPU_HOME a temporary
# directory) leave the codelets' performance models, which
# starpu_perfmodel_display lists and shows.
TESTS += tests/test_perfmodel.sh
EXTRA_DIST += tests/test_perfmodel.sh
# test_engine_tp: tensor parallelism in the engine (D_t = 2, 4 equal the
# D_t = 1 run: loss, gradients, parameters after a few steps; bad degrees).
check_PROGRAMS += tests/test_engine_tp
TESTS += tests/test_engine_tp
tests_test_engine_tp_LDADD = libbsipipe.la $(STARPU_LIBS) $(ZLIB_LIBS)
