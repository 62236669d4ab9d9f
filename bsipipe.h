/* bsipipe.h: libbsipipe's API for planning and training in one include:
 * errors, models, configs, partitions, schedules, plans built op by op or
 * imported from JSON, the simulator and validator, drawings, cluster
 * topology, and the training engine (create, iterate, statistics,
 * checkpoints, traces).
 *
 *     #include <bsipipe.h>
 *     cc app.c $(pkg-config --cflags --libs bsipipe)
 *
 * Opt-in, for what fewer programs need:
 *   <bsipipe_kernels.h>  the CPU kernels (a chunk's forward and backward,
 *                        AdamW, tensor-parallel slices) and the sequential
 *                        reference trainer: for a runtime of your own;
 *   <bsipipe_starpu.h>   the StarPU scheduling policy and the in-process
 *                        rendezvous channel: for StarPU programs of your own.
 *
 * Installed as $(includedir)/bsipipe/bsipipe.h next to the headers it
 * includes (graph/, kernels/, policies/, tasks/), and bsipipe.pc puts
 * $(includedir)/bsipipe on the include path. Each header says who owns and
 * who frees every pointer; library functions return 0 or a negative error
 * code, with a sentence in bsipipe_error_detail() (base/bsipipe_error.h).
 * Not included by any of the three: kernels/cuda/bsipipe_cuda_kernels.h,
 * kernels/cuda/bsipipe_cuda_tp.h and kernels/cuda/bsipipe_cuda_ops.h (they
 * need the CUDA headers; include them yourself in a CUDA build), and
 * kernels/bsipipe_kernels_decl.h (an implementation detail of
 * kernels/bsipipe_kernels.h).
 *
 * No header here includes StarPU's, so a program including it compiles in
 * any C mode, -std=c11 included; a program that calls StarPU itself
 * includes <starpu.h> (`pkg-config --cflags bsipipe` gives its path:
 * Requires.private starpu-1.3) with the POSIX its headers need (-std=gnu11,
 * or _POSIX_C_SOURCE 200809L). */
#ifndef BSIPIPE_H
#define BSIPIPE_H

#include "bsipipe_version.h"

/* planner (plain C): errors, configs, partition, schedules, simulator and
 * validator, plans built op by op or imported from JSON, drawings, cluster
 * topology */
#include "base/bsipipe_error.h"
#include "graph/bsipipe_config.h"
#include "graph/bsipipe_layout.h"
#include "graph/bsipipe_partition.h"
#include "graph/bsipipe_schedule.h"
#include "graph/bsipipe_builder.h"
#include "graph/bsipipe_sim.h"
#include "graph/bsipipe_draw.h"
#include "graph/bsipipe_topology.h"

/* the model's shapes and parameter layout, AdamW's hyper-parameters; which
 * CUDA devices this machine has */
#include "kernels/bsipipe_model.h"
#include "kernels/cuda/bsipipe_cuda_probe.h"

/* the training engine (StarPU tasks; its header names none of StarPU's) */
#include "tasks/bsipipe_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library the program runs with, "MAJOR.MINOR.PATCH"
 * (a static string, not to be freed). BSIPIPE_VERSION_STRING is the version
 * of the headers it was compiled with; they differ when the program runs
 * with another libbsipipe than it was built against. */
const char *bsipipe_version(void);

#ifdef __cplusplus
}
#endif
#endif
