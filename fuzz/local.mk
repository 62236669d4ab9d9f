# fuzz/local.mk: the libFuzzer targets (docs/fuzzing.md). Each fuzz/fuzz_X.c is built with
# FUZZ_CC (clang) -fsanitize=fuzzer,address,undefined against the library's own sources
# (not libbsipipe.la: the sanitizers and the coverage must see the code under test), the
# plain C part only: no StarPU. configure --enable-fuzzers (default auto) decides
# (m4/bsipipe_fuzz.m4).
#
#   make fuzzers                   build them
#   make check                     tests/test_fuzz.sh: each over its seed corpus plus a fixed
#                                  number of mutations (skips, exit 77, without clang)
#   make fuzz [FUZZ_TIME=600] [FUZZ_TARGETS='config cli']
#                                  fuzz for real, FUZZ_TIME seconds per target, one at a
#                                  time, nice'd; new inputs go to fuzz/work/X (build tree)
#
# A new target: fuzz/fuzz_X.c with
# LLVMFuzzerTestOneInput, its library sources in FUZZ_LIBSRC, X in FUZZ_ALL, seeds in
# fuzz/corpus/X/ listed in EXTRA_DIST; tests/test_fuzz.sh runs every target of FUZZ_ALL.
FUZZ_ALL = config cli topology checkpoint import
FUZZ_TARGETS = $(FUZZ_ALL)
FUZZ_TIME = 600
FUZZ_LIBSRC = base/bsipipe_error.c $(GRAPH_SOURCES) \
	kernels/cpu/model_dims.c kernels/cpu/tp_common.c api/bsipipe_version.c apps/cli.c \
	tasks/checkpoint_format.c
FUZZ_LIBS = $(HWLOC_LIBS) $(JANSSON_LIBS) $(ZLIB_LIBS) -lm
# Checkpoint seeds: byte 0 picks fuzz_checkpoint's mode, then files bsipipe-train wrote
# (docs/fuzzing.md); import seeds: bsipipe-plan --format json output and hand-written plans.
FUZZ_SEEDS_CHECKPOINT = \
	fuzz/corpus/checkpoint/v1-1f1b fuzz/corpus/checkpoint/v1-bad-crc fuzz/corpus/checkpoint/v1-bsipipe \
	fuzz/corpus/checkpoint/v1-truncated fuzz/corpus/checkpoint/v2-bsipipe-part1 \
	fuzz/corpus/checkpoint/v2-manifest fuzz/corpus/checkpoint/v2-manifest-bsipipe \
	fuzz/corpus/checkpoint/v2-part-of-another-save fuzz/corpus/checkpoint/v2-part-swapped \
	fuzz/corpus/checkpoint/v2-part-table-disagrees fuzz/corpus/checkpoint/v2-part0 \
	fuzz/corpus/checkpoint/v2-part1
FUZZ_SEEDS_IMPORT = \
	fuzz/corpus/import/1f1b.json fuzz/corpus/import/bsipipe.json fuzz/corpus/import/chimera.json \
	fuzz/corpus/import/gpipe.json fuzz/corpus/import/hand-seq1f1b-w2.json \
	fuzz/corpus/import/huge-config.json fuzz/corpus/import/index-order.json fuzz/corpus/import/layout.json \
	fuzz/corpus/import/seq1f1b-i.json fuzz/corpus/import/truncated.json \
	fuzz/corpus/import/unknown-field.json fuzz/corpus/import/zb-h1.json
FUZZ_SEEDS = \
	fuzz/corpus/config/bsipipe-w4 fuzz/corpus/config/seq1f1b-i-k3-w1 fuzz/corpus/config/1f1b-i-dims \
	fuzz/corpus/config/int-limits fuzz/corpus/config/chimera-nodes fuzz/corpus/config/map-huge-cluster \
	fuzz/corpus/config/no-reversal-odd-w \
	fuzz/corpus/cli/int fuzz/corpus/cli/float fuzz/corpus/cli/bytes fuzz/corpus/cli/ull \
	fuzz/corpus/cli/schedule fuzz/corpus/cli/comm \
	fuzz/corpus/topology/nxg fuzz/corpus/topology/synthetic fuzz/corpus/topology/synthetic-attrs \
	fuzz/corpus/topology/this fuzz/corpus/topology/too-big fuzz/corpus/topology/hwloc-numa-leak \
	fuzz/corpus/topology/hex-arity fuzz/corpus/topology/octal-arity \
	fuzz/corpus/topology/one-device-nodes fuzz/corpus/topology/many-nodes \
	fuzz/corpus/topology/unspaced-levels \
	$(FUZZ_SEEDS_CHECKPOINT) $(FUZZ_SEEDS_IMPORT)
EXTRA_DIST += fuzz/fuzz_util.h fuzz/fuzz_config.c fuzz/fuzz_cli.c fuzz/fuzz_topology.c \
	fuzz/fuzz_checkpoint.c fuzz/fuzz_import.c \
	$(FUZZ_SEEDS) docs/fuzzing.md tests/test_fuzz.sh
TESTS += tests/test_fuzz.sh
AM_TESTS_ENVIRONMENT += BSIPIPE_FUZZERS='$(bsipipe_fuzzers)' FUZZ_ALL='$(FUZZ_ALL)'; export BSIPIPE_FUZZERS FUZZ_ALL;

FUZZ_PROGS = fuzz/fuzz_config fuzz/fuzz_cli fuzz/fuzz_topology fuzz/fuzz_checkpoint fuzz/fuzz_import
FUZZ_OBJS = $(FUZZ_LIBSRC:%.c=fuzz/obj/%.o)
FUZZ_CPPFLAGS = $(DEFS) $(AM_CPPFLAGS)
FUZZ_COMPILE = $(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) $(WARN_CFLAGS) $(WERROR_CFLAGS)
AM_V_FUZZ = $(am__v_FUZZ_@AM_V@)
am__v_FUZZ_ = $(am__v_FUZZ_@AM_DEFAULT_V@)
am__v_FUZZ_0 = @echo "  FUZZCC  " $@;
am__v_FUZZ_1 =
# Any header may change what the sources compile to: all of them are prerequisites.
FUZZ_HDRS = $(nobase_pkginclude_HEADERS) $(noinst_HEADERS) fuzz/fuzz_util.h bsipipe_version.h

if BSIPIPE_FUZZERS
check_SCRIPTS += $(FUZZ_PROGS)
fuzzers: $(FUZZ_PROGS)
fuzz/obj/%.o: %.c $(FUZZ_HDRS)
	@$(MKDIR_P) $(@D)
	$(AM_V_FUZZ)$(FUZZ_COMPILE) -c -o $@ $<
$(FUZZ_PROGS): fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_OBJS) $(FUZZ_HDRS)
	$(AM_V_FUZZ)$(FUZZ_COMPILE) $(FUZZ_LDFLAGS) -o $@ $< $(FUZZ_OBJS) $(FUZZ_LIBS)
fuzz: $(FUZZ_PROGS)
	@for t in $(FUZZ_TARGETS); do \
	  $(MKDIR_P) fuzz/work/$$t fuzz/artifacts || exit 1; \
	  echo "== fuzz/fuzz_$$t for $(FUZZ_TIME) s (new inputs: fuzz/work/$$t, findings: fuzz/artifacts)"; \
	  nice -n 19 fuzz/fuzz_$$t -max_total_time=$(FUZZ_TIME) -timeout=30 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=fuzz/artifacts/$$t- fuzz/work/$$t $(srcdir)/fuzz/corpus/$$t \
	    || exit 1; \
	done
else
fuzzers fuzz:
	@echo "the fuzzers are not configured: FUZZ_CC='$(FUZZ_CC)' (clang) with -fsanitize=fuzzer was not found or" \
	  "--disable-fuzzers was given; install clang (Debian: clang libclang-rt-dev) and configure --enable-fuzzers" >&2; \
	exit 1
endif
.PHONY: fuzzers fuzz
clean-fuzz:
	rm -rf fuzz/obj fuzz/work fuzz/artifacts
	rm -f $(FUZZ_PROGS)
.PHONY: clean-fuzz
