# apps/plan.mk: bsipipe-plan, the planner's command line.
bin_PROGRAMS += apps/bsipipe-plan
apps_bsipipe_plan_SOURCES = apps/bsipipe-plan.c apps/cli.c apps/cli.h
apps_bsipipe_plan_LDADD = libbsipipe.la
# Every app's --version and its usage errors (all five apps).
TESTS += tests/test_version_cli.sh
EXTRA_DIST += tests/test_version_cli.sh
