# apps/plan.mk: bsipipe-plan, the planner's command line.
bin_PROGRAMS += apps/bsipipe-plan
apps_bsipipe_plan_SOURCES = apps/bsipipe-plan.c apps/cli.c apps/cli.h
apps_bsipipe_plan_LDADD = libbsipipe.la
