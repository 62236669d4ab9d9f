# graph/local.mk: the planner (plain C, no StarPU): configs, partition, the
# schedule IR (schedule_ir.c) and its passes (bsipipe_schedule.c drives the
# generators gen_*.c, the transfers comm.c and the optimising pass
# opt_justify.c), validator, simulator, drawing; plans built by a driver
# (builder) or read from JSON (Jansson) or torch's CSV.
# GRAPH_SOURCES is also what the fuzz targets link (fuzz/local.mk).
GRAPH_SOURCES = \
	graph/bsipipe_config.c graph/bsipipe_layout.c graph/bsipipe_partition.c \
	graph/schedule_ir.c graph/bsipipe_schedule.c graph/gen_fixed.c graph/gen_greedy.c graph/gen_bitpipe.c \
	graph/gen_zb.c graph/gen_bsipipe.c graph/opt_justify.c graph/comm.c \
	graph/bsipipe_sim.c graph/sim_links.c graph/sim_noise.c graph/choose_k.c graph/critical_path.c \
	graph/bsipipe_validate.c graph/bsipipe_draw.c graph/bsipipe_topology.c \
	graph/bsipipe_builder.c graph/plan_file.c graph/bsipipe_import.c graph/torch_csv.c graph/plan_lower.c
libbsipipe_la_SOURCES += $(GRAPH_SOURCES)
nobase_pkginclude_HEADERS += \
	graph/bsipipe_config.h graph/bsipipe_layout.h graph/bsipipe_partition.h \
	graph/bsipipe_schedule.h graph/bsipipe_sim.h graph/bsipipe_draw.h graph/bsipipe_topology.h \
	graph/bsipipe_builder.h
noinst_HEADERS += graph/schedule_internal.h graph/plan_lower.h
