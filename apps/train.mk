# apps/train.mk: bsipipe-train, the main job (training on the engine).
bin_PROGRAMS += apps/bsipipe-train
apps_bsipipe_train_SOURCES = apps/bsipipe-train.c apps/cli.c apps/cli_policies.c apps/cli.h apps/train_log.c apps/train_log.h apps/train_ckpt.c apps/train_ckpt.h apps/train_memory.c apps/train_memory.h
apps_bsipipe_train_LDADD = libbsipipe.la $(STARPU_LIBS) -lm
TESTS += tests/test_train_cli.sh
EXTRA_DIST += tests/test_train_cli.sh
TESTS += tests/test_train_robust.sh
EXTRA_DIST += tests/test_train_robust.sh
TESTS += tests/test_devices_cli.sh
EXTRA_DIST += tests/test_devices_cli.sh
