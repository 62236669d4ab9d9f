/* bsipipe_tp.h: tensor-parallel (TP) kernels on raw pointers (no StarPU).
 *
 * Megatron-LM 1D tensor parallelism with sequence parallelism, degree D_t
 * (`size` below), seen from ONE rank. See docs/tensor-parallel.md.
 *  - column-parallel: wqkv (the rank's heads' q, k and v rows), the first MLP
 *    matrix (wfc; LLaMA's gate and up rows) -- the rank holds F/D_t columns of
 *    the MLP and H/D_t heads;
 *  - row-parallel: wo and the second MLP matrix (wproj / wdown): the rank holds
 *    their input columns and produces a partial sum of the output;
 *  - sequence-parallel: norms, residual adds and the chunk's input/output live
 *    on the rank's slice of the piece's tokens, rows
 *    [rank*len/D_t, (rank+1)*len/D_t) of the piece. An all-gather along the
 *    sequence precedes every column-parallel block and a reduce-scatter follows
 *    every row-parallel one (backward: the duals);
 *  - the KV cache is sharded by heads: [2][S][d/D_t] per rank and layer;
 *  - vocabulary-parallel embedding (rows V/D_t of wte) and LM head (rows of
 *    wlm), with a parallel cross-entropy: the ranks combine per-token max,
 *    sum of exp and target logit; no rank holds the full logits.
 * Replicated on every rank: norm weights and biases (n1w n1b n2w n2b nfw nfb)
 * and GPT's wpe. The model has no linear biases, so row-parallel layers have
 * none to replicate. With sequence parallelism each rank's replicated
 * gradient covers only its tokens: the full gradient is the SUM over the TP
 * ranks (bsipipe_tp_reduce_replicated).
 *
 * The kernels never communicate. Each layer's forward and backward is a
 * sequence of compute segments (bsipipe_tp_decl.h) separated by collectives;
 * the chunk/embed/head drivers run the segments of one rank and call the
 * collectives through a caller-supplied bsipipe_tp_comm_t (SPMD: every rank
 * calls the same collectives in the same order). bsipipe_tp_local_* is an
 * in-process implementation over shared buffers for D_t threads.
 *
 * Errors: 0, -EINVAL (NULL, bad range), -ENOMEM, BSIPIPE_ECONFIG (the degree
 * does not divide heads, FFN, vocabulary or the piece length; the sentence in
 * bsipipe_error_detail() names the rule and the valid degrees), -ECANCELED
 * (the in-process communicator was aborted because another rank failed).
 */
#ifndef BSIPIPE_TP_H
#define BSIPIPE_TP_H

#include "kernels/bsipipe_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One rank of a TP group. */
typedef struct bsipipe_tp {
    int size; /* D_t >= 1 */
    int rank; /* 0 <= rank < size */
} bsipipe_tp_t;

typedef enum { BSIPIPE_TP_F32 = 0, BSIPIPE_TP_F64 = 1 } bsipipe_tp_dtype_t;
typedef enum { BSIPIPE_TP_SUM = 0, BSIPIPE_TP_MAX = 1 } bsipipe_tp_op_t;

/* The collectives, called by every rank of the group in the same order
 * (MPI/NCCL semantics; `rank` is the caller's). count is in elements. Buffers
 * never alias. A reduction must be deterministic and the same on every rank
 * (the in-process one sums in rank order 0..size-1).
 *  all_gather    : recv[size*count] = send of rank 0 | rank 1 | ...
 *  reduce_scatter: recv[count] = sum over ranks q of send_q[rank*count ..]
 *                  (send has size*count elements)
 *  all_reduce    : buf[count] = op over ranks of buf_q, in place
 * Return 0 or a negative error code (the drivers return it as is). */
typedef struct bsipipe_tp_comm {
    void *ctx;
    int (*all_gather)(void *ctx, int rank, const void *send, void *recv, long count,
                      bsipipe_tp_dtype_t t);
    int (*reduce_scatter)(void *ctx, int rank, const void *send, void *recv, long count,
                          bsipipe_tp_dtype_t t);
    int (*all_reduce)(void *ctx, int rank, void *buf, long count, bsipipe_tp_dtype_t t,
                      bsipipe_tp_op_t op);
} bsipipe_tp_comm_t;

/* Checks that size divides the heads, the FFN width, the vocabulary and (if
 * len > 0) the piece length, and that rank is in range. 0, -EINVAL (NULL,
 * size < 1, rank out of range, bad dims) or BSIPIPE_ECONFIG with a sentence
 * naming the rule and the valid degrees in bsipipe_error_detail(). */
int bsipipe_tp_check(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len);

/* ---- sizes (elements, per rank; negative = error code) ----------------- */
long bsipipe_tp_embed_params(const bsipipe_model_dims_t *d, int size);
long bsipipe_tp_layer_params(const bsipipe_model_dims_t *d, int size);
long bsipipe_tp_head_params(const bsipipe_model_dims_t *d, int size);
/* whole-model shard: embed | layer 0 | ... | layer L-1 | head */
long bsipipe_tp_model_params(const bsipipe_model_dims_t *d, int size);
long bsipipe_tp_layer_offset(const bsipipe_model_dims_t *d, int size, int l);
/* KV cache of one layer: [2][S][d/size] (the rank's heads). dKV the same. */
long bsipipe_tp_kv_size(const bsipipe_model_dims_t *d, int size);
/* Stash of one layer for a piece of len tokens (len % size == 0):
 * x n1 x2 n2 [len/size, d], norm stats 2 x [2, len/size], q att [len, d/size],
 * lse [H/size, len], a1 [len, A1/size], a2 [len, F/size]. */
long bsipipe_tp_stash_size(const bsipipe_model_dims_t *d, int size, int len);
/* Split backward: what one layer's B saves for its W (len % size == 0):
 * the gathered output gradients of the MLP and the attention [len, d],
 * da1 [len, A1/size], dqkv [len, 3 d/size]. */
long bsipipe_tp_wstash_size(const bsipipe_model_dims_t *d, int size, int len);
/* Scratch of one chunk driver call (forward or backward), comm buffers
 * included. */
long bsipipe_tp_work_size(const bsipipe_model_dims_t *d, int size, int len);
/* Scratch of a segment alone (bsipipe_tp_layer_bwd_mlp / _attn). */
long bsipipe_tp_seg_work_size(const bsipipe_model_dims_t *d, int size, int len);
/* Scratch of the embedding drivers: [len, d]. */
long bsipipe_tp_embed_work_size(const bsipipe_model_dims_t *d, int size, int len);
/* Scratch of the head driver: the cross-entropy statistics, the gathered
 * normed x [len, d], the rank's logits [len, V/size], partial and slice
 * buffers, norm statistics. Must be aligned for double (malloc is). */
long bsipipe_tp_head_work_size(const bsipipe_model_dims_t *d, int size, int len);

/* Offset of stash.n1 / stash.n2 ([ls, d], the all-gather sources) in a
 * layer's stash: which = 1 or 2. */
long bsipipe_tp_stash_norm_offset(const bsipipe_model_dims_t *d, int size, int len, int which);
/* The head's cross-entropy combines ce = 3 * len doubles per piece (per
 * token: max, sum of exp, target logit; see bsipipe_tp_head_fwd_logits). */
/* *loss = sum over the len tokens of max + log(sum exp) - target logit (the
 * same on every rank, from the reduced ce). */
double bsipipe_tp_ce_loss(int len, const double *ce);

/* ---- shard table -------------------------------------------------------- */
typedef enum {
    BSIPIPE_TP_REPLICATED = 0, /* whole tensor on every rank; grads summed */
    BSIPIPE_TP_SPLIT_ROWS = 1, /* each of `groups` row blocks split in size parts */
    BSIPIPE_TP_SPLIT_COLS = 2  /* columns split in size parts */
} bsipipe_tp_split_t;

/* One tensor of a rank's shard vector. */
typedef struct bsipipe_tp_tensor_info {
    char name[32];     /* as bsipipe_model_tensors */
    int part;          /* -1 embed, 0..L-1 layer, L head */
    long offset;       /* in the rank's whole-model shard vector */
    long full_offset;  /* of the whole tensor in the whole-model vector */
    int rows, cols;    /* shape of the shard (cols == 1 for vectors) */
    int full_rows, full_cols;
    int split;         /* bsipipe_tp_split_t */
    int groups;        /* SPLIT_ROWS: wqkv 3 (q, k, v), wgu 2 (gate, up), else 1 */
    int decay;         /* as bsipipe_model_tensors */
} bsipipe_tp_tensor_info_t;

/* Fills out[0..n) (out NULL to query n) in shard layout order; returns n,
 * -EINVAL, BSIPIPE_ECONFIG (size does not divide H, F or V), -ENOSPC. */
int bsipipe_tp_tensors(const bsipipe_model_dims_t *d, int size, bsipipe_tp_tensor_info_t *out,
                       int max);

/* ---- in-process collectives -------------------------------------------- */
/* Rank `rank`'s output of a collective given every rank's input (what a
 * one-process collective task that holds all size buffers computes, rank by
 * rank; the local communicator below calls these). Deterministic: sums in
 * rank order. send[q] is rank q's input. */
int bsipipe_tp_all_gather_rank(int size, int rank, const void *const *send, void *recv,
                               long count, bsipipe_tp_dtype_t t);
int bsipipe_tp_reduce_scatter_rank(int size, int rank, const void *const *send, void *recv,
                                   long count, bsipipe_tp_dtype_t t);
int bsipipe_tp_all_reduce_rank(int size, const void *const *in, void *out, long count,
                               bsipipe_tp_dtype_t t, bsipipe_tp_op_t op);

/* A communicator for `size` threads of one process (a barrier and a table of
 * the ranks' buffers). Owned by the caller: create, use, destroy. */
typedef struct bsipipe_tp_local bsipipe_tp_local_t;
int bsipipe_tp_local_create(int size, bsipipe_tp_local_t **out);
void bsipipe_tp_local_destroy(bsipipe_tp_local_t *l);
/* The callbacks (ctx = l); valid while l lives. */
bsipipe_tp_comm_t bsipipe_tp_local_comm(bsipipe_tp_local_t *l);
/* Wakes every rank waiting in a collective with -ECANCELED, and makes later
 * collectives fail the same way (a rank that fails must call it, or the others
 * wait for it forever). bsipipe_tp_local_run does it for its ranks. */
void bsipipe_tp_local_abort(bsipipe_tp_local_t *l);
/* Runs fn(arg, rank) for rank 0..size-1 on size threads (rank 0 on the
 * caller's) and joins them; a rank returning nonzero aborts the others.
 * Returns the first nonzero return value in rank order that is not
 * -ECANCELED (else -ECANCELED, else 0). Resets the abort flag first. */
int bsipipe_tp_local_run(bsipipe_tp_local_t *l, int (*fn)(void *arg, int rank), void *arg);

#define BSIPIPE_R float
#define BSIPIPE_FN(n) n
#include "kernels/bsipipe_tp_decl.h"
#undef BSIPIPE_R
#undef BSIPIPE_FN

#define BSIPIPE_R double
#define BSIPIPE_FN(n) n##_f64
#include "kernels/bsipipe_tp_decl.h"
#undef BSIPIPE_R
#undef BSIPIPE_FN

#ifdef __cplusplus
}
#endif
#endif
