# examples/local.mk: drivers written against the installed public API only
# (#include <bsipipe.h>). make check builds and runs them from the source tree;
# make installcheck (tests/installcheck.sh) builds them against the installed
# library through pkg-config and runs them.
check_PROGRAMS += examples/plan_and_run
TESTS += examples/plan_and_run
examples_plan_and_run_SOURCES = examples/plan_and_run.c
examples_plan_and_run_LDADD = libbsipipe.la
