/* tp_internal.h: the tensor-parallel task builder's shared insides
 * (engine_tp.c: setup, buffers, records, whole-model vectors; tp_submit.c:
 * an op as its group's segment and collective tasks; tp_codelets.c: the
 * codelets that run them). See engine_tp.c for the design. */
#ifndef BSIPIPE_TP_INTERNAL_H
#define BSIPIPE_TP_INTERNAL_H

#include "tasks/engine_internal.h"
#include "kernels/bsipipe_tp.h"

#include <pthread.h>

enum { TP_MAX = 16, TP_DESCR = 2 * TP_MAX + 8, STEP_DESCR = 512 };

/* Roles of a task's buffers (index in buffers[] per role, -1: absent). */
enum {
    R_P, R_G, R_X, R_Y, R_ST, R_KV, R_DKV, R_GA, R_PA, R_RE, R_GD, R_D2, R_GB, R_SC, R_HX, R_HL, R_HC, R_TOK,
    R_TGT, R_LOSS, R_DY, R_WS, R_N
};

/* Segment and collective kinds. */
enum {
    S_EMB_VOCAB, S_EMB_POS, S_NORM1, S_ATTN, S_NORM2, S_MLP, S_OUT, S_HNORM, S_HLOGITS, S_HSUMS, S_HBWD, S_HBNORM,
    S_BMLP, S_BNORM2, S_BATTN, S_BNORM1, S_EBPOS, S_EBVOCAB, S_BMLPX, S_BATTNX, S_WMLP, S_WATTN,
    C_AG, C_RS, C_ARMAX, C_ARSUM, C_AREP
};

/* Printable names of the kinds above (tp_codelets.c). */
extern const char *const tp_kind_names[];

/* Where the T per-rank tasks of one collective meet (per-rank collectives
 * in one memory): each stores its buffers and arrives; the last to arrive
 * runs the collective over all of them and releases every task's end
 * dependency. Owned by rank 0's tp_task. */
typedef struct tp_meet {
    int arrived;                      /* atomic */
    int aborted;                      /* submission failed: release without running */
    void *send[TP_MAX], *recv[TP_MAX];
    struct starpu_task *task[TP_MAX]; /* NULL: that rank's task was never submitted */
} tp_meet_t;

/* One task of the TP group (engine-owned until the next iteration). */
typedef struct tp_task {
    op_args_t *a;             /* the rank copy of the op's arguments (NULL: a norm task, outside the plan) */
    struct bsipipe_engine *e;
    bsipipe_plan_pos_t pos;   /* its place in the worker's order (bsipipe policy) */
    struct starpu_task *task;
    int kind, rank, layer, recv;
    int rep;                  /* C_AREP: replica index (pipe * C + chunk) */
    long off, count;          /* collectives: source offset, elements per rank */
    int clear;                /* S_BATTN: zero the K/V gradient first */
    double emu_s;             /* --emulate: seconds the task holds its worker instead of running */
    signed char ix[R_N];
    signed char src[TP_MAX], dst[TP_MAX]; /* collectives: buffers of each rank ([0]: its own, per rank) */
    tp_meet_t *meet;          /* per-rank collective: its meeting point (NULL: one task, or NCCL) */
    int ran;                  /* per-rank, meeting: this rank arrived last and ran the collective */
    int own_meet;             /* frees meet */
} tp_task_t;

typedef struct tp_rep {
    float *params, *grads, *m, *v;
    starpu_data_handle_t h_params, h_grads, h_m, h_v;
    long base, n; /* in the rank's whole-model shard vector */
} tp_rep_t;

struct engine_tp {
    int T;
    int per_rank;                 /* collectives as one task per rank (tp_collectives) */
    long shard_n;                 /* bsipipe_tp_model_params */
    tp_rep_t *rep;                /* [(pipe * C + chunk) * T + rank] */
    int *worker;                  /* [device * T + rank] */
    uint32_t **wmask;             /* [device * T + rank] */
    /* communication buffers per (device, rank), registered once */
    long lmax, lsmax;
    float **mem;                  /* [B * W * T] */
    starpu_data_handle_t *h;      /* [B * W * T]: buffer kind b of (d, r) at (b * W + d) * T + r */
    starpu_data_handle_t scratch; /* segment scratch (STARPU_SCRATCH) */
    op_args_t **args;             /* [device][op * T + rank] */
    bsipipe_engine_op_record_t **rec; /* [device][op * T + rank] */
    long *next_slot;              /* [device * T + rank]: the worker's next slot (over iterations) */
    long *slot0;                  /* [device]: rank 0's first slot this iteration */
    long **first_slot;            /* [device][op * T + rank]: the slot of the op's first task on the
                                     rank's worker this iteration (a RECV is posted ahead of it) */
    int **slot_op;                /* [device]: op index of each of rank 0's slots this iteration */
    long *slot_n, *slot_cap;
    tp_task_t **tasks;            /* this iteration's (freed at the next) */
    long n_tasks, cap_tasks;
    bsipipe_tp_tensor_info_t *ti;
    int nti;
    pthread_mutex_t mem_lock;     /* the T workers of a device share its live-bytes counter and busy */
    double *busy;                 /* [device * T + rank]: µs of F/B segments and collectives this iteration */
};

/* The communication buffers of a (device, rank). */
enum { B_GA, B_PA, B_RE, B_GD, B_D2, B_GB, B_HX, B_HL, B_HC, B_N };

/* Index of a piece's per-rank activation buffers, of a (micro-batch,
 * chunk)'s per-rank K/V, and the handle of buffer kind b of (device, rank). */
static inline long act_i(const struct bsipipe_engine *e, int mb, int sub, int chunk, int r)
{
    return (((long)mb * e->k + sub) * e->C + chunk) * e->T + r;
}

static inline long kv_i(const struct bsipipe_engine *e, int mb, int chunk, int r)
{
    return ((long)mb * e->C + chunk) * e->T + r;
}

static inline starpu_data_handle_t comm_h(const struct bsipipe_engine *e, int b, int d, int r)
{
    return e->tp->h[((long)b * e->W + d) * e->T + r];
}

/* A task of the group (engine_tp.c): made (kind, layer), kept until the
 * next iteration frees it (room reserved for n more first, or one kept:
 * freed on failure), freed with its meeting point if it owns it. */
tp_task_t *tp_task_new(int kind, int layer);
int tp_tasks_reserve(struct engine_tp *t, long n);
int tp_tasks_keep(struct engine_tp *t, tp_task_t *tt);
void tp_task_free(tp_task_t *tt);
/* Releases every task of a meeting (the last rank ran the collective). */
void tp_meet_release(tp_meet_t *m, int T);
/* The codelets (tp_codelets.c): a compute segment per rank, a collective
 * over the T ranks' buffers as one task or per rank, the optimizer step. */
extern struct starpu_codelet engine_cl_tp_seg, engine_cl_tp_coll, engine_cl_tp_coll_rank, engine_cl_tp_step;

#endif
