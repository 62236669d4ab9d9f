# tasks/checkpoint.mk: checkpoint and resume of the engine (bsipipe_engine_save /
# bsipipe_engine_load, declared in tasks/bsipipe_engine.h; format in docs/checkpoint.md).
# tasks/checkpoint_format.c: the file format and every check of a file read back, without
# StarPU (fuzz/fuzz_checkpoint.c builds it alone).
libbsipipe_la_SOURCES += tasks/engine_checkpoint.c tasks/checkpoint_values.c tasks/checkpoint_dir.c tasks/checkpoint_keep.c tasks/checkpoint_format.c
noinst_HEADERS += tasks/checkpoint_format.h
EXTRA_DIST += docs/checkpoint.md
check_PROGRAMS += tests/test_checkpoint
TESTS += tests/test_checkpoint
tests_test_checkpoint_LDADD = libbsipipe.la $(STARPU_LIBS) $(ZLIB_LIBS)
# The format's checks alone, no StarPU (its sources built in: the library exports only bsipipe_*).
check_PROGRAMS += tests/test_checkpoint_format
TESTS += tests/test_checkpoint_format
tests_test_checkpoint_format_SOURCES = tests/test_checkpoint_format.c tasks/checkpoint_format.c \
	base/bsipipe_error.c graph/bsipipe_config.c graph/bsipipe_layout.c kernels/cpu/model_dims.c
tests_test_checkpoint_format_CFLAGS = $(AM_CFLAGS)
tests_test_checkpoint_format_LDADD = $(ZLIB_LIBS) -lm
