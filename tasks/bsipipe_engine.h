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
    int unchecked_plan;       /* 1: run the plan even if the validator finds a deadlock
                                 (to watch the watchdog catch it at run time) */
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

/* What StarPU's profiling recorded for one op of the last iteration. */
typedef struct bsipipe_engine_op_record {
    double start_us, end_us; /* StarPU clock (starpu_timing_now), microseconds */
    int worker;              /* StarPU worker that ran it */
    long seq;                /* completion order over the iteration (0 = first) */
} bsipipe_engine_op_record_t;

/* Records of device d's ops in plan order (n = that device's op count), owned
 * by the engine, valid until the next iteration. -EINVAL for a bad device. */
int bsipipe_engine_records(const bsipipe_engine_t *e, int device, const bsipipe_engine_op_record_t **rec, int *n);

/* Measured statistics of the last iteration. */
typedef struct bsipipe_engine_stats {
    double wall_s;          /* submission to completion */
    double makespan_s;      /* first task start to last compute end */
    double bubble_ratio;    /* 1 - sum(F/B/W busy) / (devices * makespan) */
    double tokens_per_s;    /* m * S / wall_s */
    double loss;            /* mean cross-entropy */
    double gnorm;           /* gradient norm before clipping (after a step) */
} bsipipe_engine_stats_t;
int bsipipe_engine_last_stats(const bsipipe_engine_t *e, bsipipe_engine_stats_t *out);

/* The schedule the engine runs (owned by the engine). */
const bsipipe_schedule_t *bsipipe_engine_schedule(const bsipipe_engine_t *e);

#ifdef __cplusplus
}
#endif
#endif
