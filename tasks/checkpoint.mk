# tasks/checkpoint.mk: checkpoint and resume of the engine (bsipipe_engine_save /
# bsipipe_engine_load, declared in tasks/bsipipe_engine.h; format in docs/checkpoint.md).
libbsipipe_la_SOURCES += tasks/engine_checkpoint.c
EXTRA_DIST += docs/checkpoint.md
check_PROGRAMS += tests/test_checkpoint
TESTS += tests/test_checkpoint
tests_test_checkpoint_LDADD = libbsipipe.la $(STARPU_LIBS)
