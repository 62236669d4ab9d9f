# graph/local.mk: the planner (plain C, no StarPU): configs, partition,
# schedule IR and generators, transfers, validator, simulator, drawing;
# plans built by a driver (builder) or read from JSON (Jansson).
libbsipipe_la_SOURCES += \
	graph/bsipipe_error.c graph/bsipipe_config.c graph/bsipipe_layout.c graph/bsipipe_partition.c \
	graph/bsipipe_schedule.c graph/gen_fixed.c graph/gen_greedy.c graph/gen_bitpipe.c graph/gen_zb.c graph/opt_justify.c graph/comm.c \
	graph/bsipipe_sim.c graph/sim_links.c graph/sim_noise.c graph/choose_k.c graph/critical_path.c graph/bsipipe_validate.c graph/bsipipe_draw.c graph/torch_csv.c graph/bsipipe_topology.c \
	graph/bsipipe_builder.c graph/bsipipe_import.c
nobase_pkginclude_HEADERS += \
	graph/bsipipe_error.h graph/bsipipe_config.h graph/bsipipe_layout.h graph/bsipipe_partition.h \
	graph/bsipipe_schedule.h graph/bsipipe_sim.h graph/bsipipe_draw.h graph/bsipipe_topology.h \
	graph/bsipipe_builder.h
noinst_HEADERS += graph/schedule_internal.h
