/* bsipipe_schedule.h: the schedule IR — a placement plus one ordered op list
 * per device (DESIGN.md §4).
 *
 * A bsipipe_schedule_t is an opaque handle created by bsipipe_schedule_create()
 * and freed by bsipipe_schedule_destroy(). Everything read from it (op arrays,
 * names) belongs to the schedule and lives as long as it does.
 */
#ifndef BSIPIPE_SCHEDULE_H
#define BSIPIPE_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "graph/bsipipe_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bsipipe_op_kind {
    BSIPIPE_OP_F = 0, /* forward of one subsequence through one chunk */
    BSIPIPE_OP_B,     /* backward (input gradient; with weight gradient unless split) */
    BSIPIPE_OP_W,     /* weight-gradient half of a split backward (ZeroBubble) */
    BSIPIPE_OP_SEND,  /* send a tensor to `peer` (rendezvous with its RECV) */
    BSIPIPE_OP_RECV,  /* post a receive from `peer`; completes when the data lands */
    BSIPIPE_OP_SYNC,  /* gradient all-reduce of a chunk's replicas (peer = other replica) */
    BSIPIPE_OP_STEP,  /* optimizer step of every chunk on the device */
    BSIPIPE_OP_KIND_COUNT
} bsipipe_op_kind_t;

typedef enum bsipipe_pipe { BSIPIPE_PIPE_DOWN = 0, BSIPIPE_PIPE_UP = 1 } bsipipe_pipe_t;

typedef enum bsipipe_tensor {
    BSIPIPE_TENSOR_NONE = 0,
    BSIPIPE_TENSOR_ACT,  /* forward activation leaving `chunk` for chunk+1 */
    BSIPIPE_TENSOR_GRAD  /* gradient leaving `chunk` (backward) for chunk-1 */
} bsipipe_tensor_t;

/* Flags of a compute op: DualPipe's overlapped forward-backward pair (its
 * F, then the backward after it on the device, B and W). The engine runs
 * the halves back to back; the simulator runs them in sequence (each when
 * its own input is there) unless the cost model's overlap_fb says the two
 * share the device (bsipipe_sim.h). */
enum {
    BSIPIPE_OP_PAIR_F = 1, /* the forward half of a pair */
    BSIPIPE_OP_PAIR_B = 2  /* the backward half (its B and, split, its W) */
};

/* One op. For F/B/W: (pipe, mb, sub, chunk) name the work. For SEND/RECV:
 * they name the producing op (F for ACT, B for GRAD), `peer` is the other
 * device, `channel` pairs the SEND with its RECV. For SYNC: chunk and peer
 * (-1 when the chunk has a single replica). STEP: only device. */
typedef struct bsipipe_op {
    uint8_t kind;    /* bsipipe_op_kind_t */
    uint8_t pipe;    /* bsipipe_pipe_t */
    uint8_t tensor;  /* bsipipe_tensor_t */
    uint8_t flags;   /* BSIPIPE_OP_PAIR_F, BSIPIPE_OP_PAIR_B or 0 */
    int32_t device;
    int32_t mb;      /* micro-batch 0..m-1 (global numbering over both pipes) */
    int32_t sub;     /* subsequence 0..k-1 */
    int32_t chunk;   /* 0..p*w-1 */
    int32_t peer;    /* other device of a transfer or sync, else -1 */
    int32_t channel; /* transfer id, else -1 */
} bsipipe_op_t;

const char *bsipipe_op_kind_name(bsipipe_op_kind_t kind); /* "F", "B", ..., "STEP" */
const char *bsipipe_pipe_name(bsipipe_pipe_t pipe);       /* "down", "up" */

/* Writes a short label such as "F down mb3 s1 c5" into buf; returns buf. */
char *bsipipe_op_format(const bsipipe_op_t *op, char *buf, size_t len);

typedef struct bsipipe_schedule bsipipe_schedule_t;

/* Builds the schedule of pc for a model (dims may be NULL: then L = p·w and
 * the partition is even over a nominal length). Validates the config first.
 * Returns 0 and *out, or a negative code with bsipipe_error_detail(). */
int bsipipe_schedule_create(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                            bsipipe_schedule_t **out);
void bsipipe_schedule_destroy(bsipipe_schedule_t *s);

/* A copy of s (op lists, placement, config and model) that the caller frees
 * with bsipipe_schedule_destroy(). 0, -EINVAL (s NULL) or -ENOMEM. A plan
 * built op by op (graph/bsipipe_builder.h) is made with the builder or
 * imported from JSON; bsipipe_schedule_create() only plans the presets. */
int bsipipe_schedule_copy(const bsipipe_schedule_t *s, bsipipe_schedule_t **out);

const bsipipe_parallel_config_t *bsipipe_schedule_config(const bsipipe_schedule_t *s);
const bsipipe_model_dims_t *bsipipe_schedule_model(const bsipipe_schedule_t *s);
int bsipipe_schedule_n_devices(const bsipipe_schedule_t *s);
int bsipipe_schedule_n_pipes(const bsipipe_schedule_t *s);   /* 1 or 2 */
int bsipipe_schedule_n_chunks(const bsipipe_schedule_t *s);  /* p·w */
int bsipipe_schedule_n_channels(const bsipipe_schedule_t *s);
/* Pipe that micro-batch mb runs in. */
bsipipe_pipe_t bsipipe_schedule_mb_pipe(const bsipipe_schedule_t *s, int mb);
/* Device holding (pipe, chunk). */
int bsipipe_schedule_chunk_device(const bsipipe_schedule_t *s, bsipipe_pipe_t pipe, int chunk);
/* The compute ops whose outputs compute op `op` reads (the F, B or W of
 * the same micro-batch before it in its pipe, or of an earlier piece):
 * up to 3, written to out with their devices; returns how many (0 for a
 * transfer, SYNC or STEP). */
int bsipipe_schedule_op_inputs(const bsipipe_schedule_t *s, const bsipipe_op_t *op, bsipipe_op_t out[3]);
/* Layers [*first, *last) of a chunk. */
void bsipipe_schedule_chunk_layers(const bsipipe_schedule_t *s, int chunk, int *first, int *last);
/* Token boundaries of the k subsequences: k+1 entries. */
const int *bsipipe_schedule_sub_starts(const bsipipe_schedule_t *s);
/* Ops of one device, in execution order. */
const bsipipe_op_t *bsipipe_schedule_device_ops(const bsipipe_schedule_t *s, int device, int *n_ops);
/* Total ops over all devices. */
long bsipipe_schedule_n_ops(const bsipipe_schedule_t *s);

/* Replaces the SEND/RECV order of a schedule with another comm order (the
 * compute order stays). Used to compare orders on one plan. */
int bsipipe_schedule_reorder_comm(bsipipe_schedule_t *s, bsipipe_comm_order_t order);

/* The same, with receive positions computed from the compute timeline under
 * `cost` (a bsipipe_cost_model_t, bsipipe_sim.h; NULL = unit costs), so that
 * no send waits when the plan runs with those costs. */
struct bsipipe_cost_model;
int bsipipe_schedule_reorder_comm_for(bsipipe_schedule_t *s, bsipipe_comm_order_t order,
                                      const struct bsipipe_cost_model *cost);

/* The optimising pass (docs/schedules.md): reorders the compute ops of a
 * built plan so that its makespan under `cost` (NULL: unit costs; compute
 * costs only, transfers free) can only fall, no device holding more than
 * max(budget, its peak in the plan) subsequence-chunk activations at once
 * (budget 0: never more than the plan held, in activations and in bytes).
 * After justification rounds, a local search with a fixed seed (so the
 * same plan comes out everywhere) and a bounded effort. Transfers are ordered again
 * (pc.comm) and SYNC/STEP appended. report may be NULL. */
typedef struct bsipipe_optimise_report {
    double makespan_before, makespan_after; /* compute makespan under the cost model */
    int passes;                             /* justification rounds run */
    int peak_units_before, peak_units_after; /* most activations on one device */
} bsipipe_optimise_report_t;
int bsipipe_schedule_optimise(bsipipe_schedule_t *s, const struct bsipipe_cost_model *cost, int budget,
                              bsipipe_optimise_report_t *report);

#ifdef __cplusplus
}
#endif
#endif
