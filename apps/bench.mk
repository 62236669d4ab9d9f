# apps/bench.mk: bsipipe-bench, every schedule side by side (docs/benchmarks.md);
# its smoke test runs a tiny configuration and checks the flag errors.
bin_PROGRAMS += apps/bsipipe-bench
apps_bsipipe_bench_SOURCES = apps/bsipipe-bench.c apps/cli.c apps/cli_policies.c apps/cli.h
apps_bsipipe_bench_LDADD = libbsipipe.la $(STARPU_LIBS) -lm
TESTS += tests/test_bench_cli.sh
EXTRA_DIST += tests/test_bench_cli.sh docs/benchmarks.md
