# tasks/trace.mk: trace outputs of a run (FxT -> starpu_fxt_tool, Chrome/Perfetto
# JSON and measured SVG timelines from StarPU's profiling); docs/tracing.md.
# The StarPU bin directory is recorded at build time so an installed
# bsipipe-train finds starpu_fxt_tool without STARPU_BINDIR.
libbsipipe_la_SOURCES += tasks/engine_trace.c tasks/trace_starpu.c tasks/trace_names.c tasks/trace_dag.c
noinst_HEADERS += tasks/trace_internal.h
tasks/trace_starpu.lo: AM_CPPFLAGS += -DBSIPIPE_STARPU_BINDIR='"$(STARPU_BINDIR)"'
TESTS += tests/test_trace.sh
EXTRA_DIST += tests/test_trace.sh docs/tracing.md scripts/vite-screenshot.sh docs/vite-screenshot.png
