/* engine_internal.h: the engine's insides, shared by tasks/ files. */
#ifndef BSIPIPE_ENGINE_INTERNAL_H
#define BSIPIPE_ENGINE_INTERNAL_H

#include <starpu.h>

#include "tasks/bsipipe_engine.h"
#include "tasks/bsipipe_transport.h"
#include "policies/bsipipe_policy.h"

/* Per-op arguments of a task (engine-owned, alive for the iteration). */
typedef struct op_args {
    struct bsipipe_engine *e;
    bsipipe_op_t op;
    int start, len;      /* piece tokens */
    int l0, l1;          /* layers of the chunk */
    int in_channel;      /* F/B: channel of the RECV bringing the input, -1 = local producer */
    int do_step;         /* STEP: 0 = keep its slot but change nothing */
    int n_own, *own_rep; /* STEP: replicas (pipe * C + chunk) held by the device */
    char name[64];       /* for reports */
    struct starpu_task *task; /* while submitted: its profiling info feeds the record */
    bsipipe_engine_op_record_t *rec;
} op_args_t;

/* One (pipe, chunk) replica: a slice of the whole-model vector. */
typedef struct replica {
    int device;
    long base, n;        /* offset and length in the whole-model vector */
    float *params, *grads, *m, *v;
    starpu_data_handle_t h_params, h_grads, h_m, h_v;
} replica_t;

struct bsipipe_engine {
    bsipipe_engine_options_t o;
    bsipipe_model_dims_t dims;
    bsipipe_schedule_t *sched;
    int W, C, k, m, S, d;
    int inorder;                       /* bsipipe policy */
    int started;                       /* starpu_init succeeded */
    int *workerid;                     /* StarPU worker of each device */
    uint32_t **wmask;                  /* per device: worker bitmap (built-in policies) */
    unsigned wmask_len;
    replica_t *rep;                    /* [pipe * C + chunk] (pipe 1 only if bidirectional) */
    /* Per-iteration buffers, allocated by StarPU at their first write and
     * freed after their last use (starpu_data_unregister_submit): sizes in
     * floats (0 = no such buffer) and handles. Activations per (mb, sub,
     * chunk); KV cache and its gradient per (mb, chunk); receives per channel. */
    uint32_t *n_x_out, *n_stash, *n_dx, *n_dy, *n_wstash, *n_kv, *n_recv;
    starpu_data_handle_t *h_x_out, *h_stash, *h_dx, *h_dy, *h_wstash, *h_kv, *h_dkv, *h_recv;
    int split;                         /* backward split into B and W (ZB-H1) */
    struct buffer_use {                /* user data of each per-iteration handle */
        long left;                     /* uses not yet submitted */
        starpu_data_handle_t *slot;    /* where the handle is kept; NULL once unregistered */
    } *uses;
    long n_uses;
    /* Live activation bytes per device, as the planner counts them (stash from
     * forward start to backward end, KV cache and its gradient per micro-batch
     * and chunk), and their peak over the iteration. */
    double *live_bytes, *peak_bytes;
    /* Tokens and targets per micro-batch. */
    int *tokens, *targets;
    starpu_data_handle_t *h_tokens, *h_targets;
    /* Per-device loss sums (double). */
    double *loss;
    starpu_data_handle_t *h_loss;
    starpu_data_handle_t h_work;       /* per-worker scratch */
    long work_elems;
    op_args_t **args;                  /* [device][op index] */
    bsipipe_engine_op_record_t **rec;  /* [device][op index], last iteration */
    long rec_seq;                      /* completion counter */
    bsipipe_engine_stats_t stats;
    bsipipe_plan_pos_t **pos;          /* [device][op index] */
    long *slot_base;                   /* per device, slots used by earlier iterations */
    bsipipe_transport_t *transport;
    int *order_device, *order_index;   /* submission order (from the simulator) */
    long n_order;
    long steps;
    double gnorm;
    int failed;                        /* first error of the iteration; compute is skipped once set */
};

/* Records the first failure of the iteration (codelets run concurrently). */
static inline void engine_fail(struct bsipipe_engine *e, int rc)
{
    int none = 0;
    __atomic_compare_exchange_n(&e->failed, &none, rc, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* A codelet's error: say which op failed and why, then fail the iteration. */
void engine_report(struct bsipipe_engine *e, const op_args_t *a, int rc);

static inline int engine_failed(struct bsipipe_engine *e)
{
    return __atomic_load_n(&e->failed, __ATOMIC_SEQ_CST);
}

/* Live activation bytes of a device: only the device's own worker runs its
 * ops (placement is kept under every policy), so no two threads update one
 * device's counter at once. */
static inline void engine_mem(struct bsipipe_engine *e, int device, double bytes)
{
    e->live_bytes[device] += bytes;
    if (e->live_bytes[device] > e->peak_bytes[device])
        e->peak_bytes[device] = e->live_bytes[device];
}

static inline long act_index(const struct bsipipe_engine *e, int mb, int sub, int chunk)
{
    return ((long)mb * e->k + sub) * e->C + chunk;
}

extern struct starpu_codelet bsipipe_cl_forward, bsipipe_cl_backward, bsipipe_cl_send, bsipipe_cl_recv,
    bsipipe_cl_sync, bsipipe_cl_sync_peer, bsipipe_cl_step, bsipipe_cl_wgrad;

/* Emulated device time (engine_emulate.c): holds the worker for the op's
 * cost-model duration. Returns 1 when the engine emulates (the caller then
 * skips its compute). */
int engine_emulate(struct bsipipe_engine *e, const bsipipe_op_t *op);

/* Offset of layer l (l = L: the head part) inside the replica that op a
 * works on: where its parameters and gradients start in the replica's
 * buffers. */
long engine_replica_offset(const struct bsipipe_engine *e, const op_args_t *a, int l);

/* Whole-model offset of the head part and of layer l. */
long engine_layer_offset(const struct bsipipe_engine *e, int l);

#endif
