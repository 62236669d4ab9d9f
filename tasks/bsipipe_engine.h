/* bsipipe_engine.h: the training engine — every op of a plan a StarPU task.
 *
 * An engine owns a StarPU session (starpu_init at create, starpu_shutdown at
 * destroy: one engine per process at a time), the model's parameters as one
 * replica per (pipe, chunk) on the device that holds it, and the plan. Each
 * iteration submits the plan's ops as tasks with their data handles; StarPU's
 * sequential data consistency turns the handles into the dependencies, and
 * the chosen scheduling policy decides when each ready task runs.
 *
 * Ownership: the caller owns the options and every array it passes; arrays
 * returned through out-parameters are filled into caller memory.
 */
#ifndef BSIPIPE_ENGINE_H
#define BSIPIPE_ENGINE_H

#include "graph/bsipipe_schedule.h"
#include "kernels/bsipipe_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_engine bsipipe_engine_t;

typedef struct bsipipe_engine_options {
    bsipipe_model_dims_t dims;
    bsipipe_parallel_config_t pc;
    bsipipe_adamw_t opt;
    unsigned long long seed;  /* parameter initialisation (bsipipe_model_init) */
    const char *policy;       /* "bsipipe" (default when NULL) or a StarPU policy name */
    double watchdog_s;        /* a send waiting longer fails the run (default 30 s when 0) */
} bsipipe_engine_options_t;

/* Defaults: the given model and config, AdamW lr 1e-3 (0.9, 0.95), eps 1e-8,
 * weight decay 0.1, clip 1.0, seed 1, policy "bsipipe". */
bsipipe_engine_options_t bsipipe_engine_options_default(const bsipipe_model_dims_t *dims,
                                                        const bsipipe_parallel_config_t *pc);

/* Plans the schedule, starts StarPU with one CPU worker per device, places
 * the initial parameters. Errors: the planner's (BSIPIPE_ECONFIG ...),
 * -EINVAL (bad options, unknown policy), -ENOMEM, -EIO (StarPU failed). */
int bsipipe_engine_create(const bsipipe_engine_options_t *o, bsipipe_engine_t **out);
void bsipipe_engine_destroy(bsipipe_engine_t *e); /* NULL is fine */

/* One iteration without the optimizer step: zero the gradients, run every
 * F, B, transfer and SYNC of the plan on tokens[m][S] -> targets[m][S].
 * *loss = mean cross-entropy over the m*S tokens. Then the gradients (of that
 * mean) can be read with bsipipe_engine_grads(). BSIPIPE_EDEADLOCK when the
 * watchdog fired (detail names the waiting devices and ops). */
int bsipipe_engine_forward_backward(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss);

/* forward_backward plus the optimizer step (global-norm clipping, AdamW);
 * *gnorm (may be NULL) gets the gradient norm before clipping. */
int bsipipe_engine_iteration(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss,
                             double *gnorm);

/* Whole-model vectors (bsipipe_model_params(dims) floats, the layout of
 * bsipipe_model.h), read from the down pipe's replicas. */
long bsipipe_engine_n_params(const bsipipe_engine_t *e);
int bsipipe_engine_params(bsipipe_engine_t *e, float *out);
int bsipipe_engine_grads(bsipipe_engine_t *e, float *out);

/* The schedule the engine runs (owned by the engine). */
const bsipipe_schedule_t *bsipipe_engine_schedule(const bsipipe_engine_t *e);

#ifdef __cplusplus
}
#endif
#endif
