# tasks/checkpoint.mk: checkpoint and resume of the engine (bsipipe_engine_save /
# bsipipe_engine_load, declared in tasks/bsipipe_engine.h; format in docs/checkpoint.md).
libbsipipe_la_SOURCES += tasks/engine_checkpoint.c tasks/checkpoint_format.c
# The file format without StarPU (also built into fuzz/fuzz_checkpoint).
noinst_HEADERS += tasks/checkpoint_format.h
EXTRA_DIST += docs/checkpoint.md
check_PROGRAMS += tests/test_checkpoint
TESTS += tests/test_checkpoint
tests_test_checkpoint_LDADD = libbsipipe.la $(STARPU_LIBS)
