# examples/local.mk: drivers written against the installed public API only
# (#include <bsipipe.h>): plan_and_run.c runs a preset schedule, custom_schedule.c
# one written op by op. make check builds and runs them from the source tree;
# make installcheck (tests/installcheck.sh) builds them against the installed
# library through pkg-config and runs them.
check_PROGRAMS += examples/plan_and_run
TESTS += examples/plan_and_run
examples_plan_and_run_SOURCES = examples/plan_and_run.c
examples_plan_and_run_LDADD = libbsipipe.la
check_PROGRAMS += examples/custom_schedule
TESTS += examples/custom_schedule
examples_custom_schedule_SOURCES = examples/custom_schedule.c
examples_custom_schedule_LDADD = libbsipipe.la
