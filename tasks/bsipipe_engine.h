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
    double emulate_flops;     /* > 0: emulated device time — F, B and W tasks sleep for
                                 their FLOPs / emulate_flops seconds instead of computing
                                 (so many devices fit on few cores); loss and gradients
                                 are then meaningless. 0: real compute */
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

/* Peak live activation bytes of each device in the last iteration (stash of a
 * piece from its forward's start to its backward's end — W's when split —,
 * KV cache and its gradient per micro-batch and chunk), the quantities the
 * planner's simulator predicts. bytes has one entry per device. */
int bsipipe_engine_peak_memory(const bsipipe_engine_t *e, double *bytes);

/* The schedule the engine runs (owned by the engine). */
const bsipipe_schedule_t *bsipipe_engine_schedule(const bsipipe_engine_t *e);

/* ---- Checkpoint and resume (tasks/engine_checkpoint.c, docs/checkpoint.md) ----
 *
 * A checkpoint is one file, DIR/checkpoint.bin: the model dimensions, the
 * parallel config (schedule, w, p, k, m, tp, partition), the AdamW
 * hyper-parameters, the seed, the engine's optimizer step count, the caller's
 * iteration counter, then every (pipe, chunk) replica's parameters and AdamW
 * moments m and v, and a CRC-32 of all that. Resuming from it continues the
 * run bit for bit: the iterations after a load give the same losses and
 * parameters as an uninterrupted run (same data, same config, same policy and
 * transfer order).
 *
 * Ownership: the engine is borrowed; `dir` is the caller's and is only read
 * during the call. Both functions call starpu_data_acquire on the replicas,
 * so call them between iterations from the thread that runs the engine,
 * never from a StarPU task or callback. */

/* Writes the engine's state and `iteration` (>= 0, a counter of the caller's,
 * returned as is by bsipipe_engine_load) to DIR/checkpoint.bin, atomically:
 * the data goes to a temporary file in DIR (".checkpoint.bin.<pid>.tmp"),
 * which is fsync'ed and renamed over the previous checkpoint, then DIR is
 * fsync'ed. A failure or a crash at any point leaves the previous checkpoint
 * (if any) intact; on failure the temporary file is removed. DIR must exist
 * (it is not created).
 * Errors: -EINVAL (NULL engine or dir, negative iteration, or the engine's
 * last iteration failed, so its state is not worth saving), -ENOENT /
 * -ENOTDIR / -EACCES ... (DIR unusable; detail names it), -ENOSPC, -EIO ...
 * (write, fsync, rename failed: the negated errno; detail names the file),
 * -ENOMEM. The detail sentence is in bsipipe_error_detail(). */
int bsipipe_engine_save(bsipipe_engine_t *e, const char *dir, long iteration);

/* Reads DIR/checkpoint.bin into an engine created with the same model, the
 * same parallel config (schedule, w, p, k, m, tp, partition), the same
 * optimizer hyper-parameters and the same seed: replaces every replica's
 * parameters and AdamW moments and the step count, and stores the saved
 * iteration counter in *iteration (may be NULL). The policy, transfer order,
 * watchdog and device placement may differ (results are then a valid
 * continuation, bitwise equal only when the op order is the same).
 * The whole file is read and checked before anything is written: on any
 * error the engine is unchanged and *iteration is not written.
 * Errors: -EINVAL (NULL engine or dir); -ENOENT (no DIR or no checkpoint in
 * it; the detail names the path); another negated errno when the file cannot
 * be read; -ENOMEM; BSIPIPE_EFORMAT when the content is wrong, the detail
 * saying which: "truncated: expected N bytes, found M", "bad magic", format
 * version, "corrupted: CRC-32 mismatch", or a checkpoint of another model or
 * config naming the first field that differs ("checkpoint has w=4, this run
 * has w=8"). */
int bsipipe_engine_load(bsipipe_engine_t *e, const char *dir, long *iteration);

#ifdef __cplusplus
}
#endif
#endif
