/* bsipipe.h: the whole public API of libbsipipe in one include.
 *
 *     #include <bsipipe.h>
 *     cc app.c $(pkg-config --cflags --libs bsipipe)
 *
 * Installed as $(includedir)/bsipipe/bsipipe.h next to the headers it
 * includes (graph/, kernels/, policies/, tasks/), and bsipipe.pc puts
 * $(includedir)/bsipipe on the include path. Each header says who owns and
 * who frees every pointer; library functions return 0 or a negative error
 * code, with a sentence in bsipipe_error_detail() (base/bsipipe_error.h).
 * Not included here: kernels/cuda/bsipipe_cuda_kernels.h,
 * kernels/cuda/bsipipe_cuda_tp.h and kernels/cuda/bsipipe_cuda_ops.h (they
 * need the CUDA headers; include them
 * yourself in a CUDA build), and kernels/bsipipe_kernels_decl.h (an
 * implementation detail of kernels/bsipipe_kernels.h).
 *
 * No header here includes StarPU's (policies/bsipipe_policy.h and
 * tasks/bsipipe_transport.h name StarPU's structs only), so a program
 * including it compiles in any C mode, -std=c11 included; a program that
 * calls StarPU itself includes <starpu.h> (`pkg-config --cflags bsipipe`
 * gives its path: Requires.private starpu-1.3) with the POSIX its headers
 * need (-std=gnu11, or _POSIX_C_SOURCE 200809L). */
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

/* kernels (plain C): model shapes, CPU kernels, the sequential reference trainer */
#include "kernels/bsipipe_model.h"
#include "kernels/bsipipe_kernels.h"
#include "kernels/bsipipe_tp.h"
#include "kernels/reference_trainer.h"
#include "kernels/cuda/bsipipe_cuda_probe.h"

/* StarPU layer: the scheduling policy, the transport, the training engine */
#include "policies/bsipipe_policy.h"
#include "tasks/bsipipe_transport.h"
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
