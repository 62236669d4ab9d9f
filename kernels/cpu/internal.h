/* kernels/cpu/internal.h: layouts and helpers shared by the kernel sources
 * (not installed). Offsets are in elements. */
#ifndef BSIPIPE_KERNELS_INTERNAL_H
#define BSIPIPE_KERNELS_INTERNAL_H

#include "kernels/bsipipe_model.h"

/* One layer's parameters; -1 marks a tensor the family lacks. */
struct bsipipe_layer_off {
    long n1w, n1b, wqkv, wo, n2w, n2b, w1, w2, total;
};
/* Embedding and head parts. */
struct bsipipe_embed_off { long wte, wpe, total; };
struct bsipipe_head_off { long nfw, nfb, wlm, total; };
/* Stash of one layer for a piece of len tokens:
 * x[len,d] n1[len,d] s1[2,len] q[len,d] att[len,d] lse[H,len] x2[len,d]
 * n2[len,d] s2[2,len] a1[len,A1] a2[len,F] with A1 = F (GPT fc pre-act) or
 * 2F (LLaMA gate|up), a2 = GeLU(a1) or SiLU(gate)*up. s = (mean, rstd). */
struct bsipipe_stash_off {
    long x, n1, s1, q, att, lse, x2, n2, s2, a1, a2, total;
};
/* Chunk-backward scratch: dy dx dn datt [len,d], dqkv[len,3d], da1[len,A1],
 * da2[len,F]. */
struct bsipipe_work_off {
    long dy, dx, dn, datt, dqkv, da1, da2, total;
};

int kern_a1_width(const bsipipe_model_dims_t *d);
void kern_layer_off(const bsipipe_model_dims_t *d, struct bsipipe_layer_off *o);
void kern_embed_off(const bsipipe_model_dims_t *d, struct bsipipe_embed_off *o);
void kern_head_off(const bsipipe_model_dims_t *d, struct bsipipe_head_off *o);
void kern_stash_off(const bsipipe_model_dims_t *d, int len, struct bsipipe_stash_off *o);
void kern_work_off(const bsipipe_model_dims_t *d, int len, struct bsipipe_work_off *o);

extern int kern_tile_q, kern_tile_k, kern_threads;

/* Threads of the BLAS (OpenBLAS's count when it is OpenBLAS, else 1). */
int kern_blas_threads(void);
/* Puts the BLAS on one thread (OpenBLAS; a no-op for another BLAS) and
 * returns the count to hand back to kern_blas_restore: the kernels'
 * own threads split the matrix products and call it single-threaded. */
int kern_blas_single(void);
void kern_blas_restore(int n);
/* The attention tile sizes to use for head_dim (the knobs, shrunk when both
 * we and OpenBLAS run threads; see config.c). */
void kern_attention_tiles(int head_dim, int *bq, int *bk);

/* Runs fn(ctx, i) for i in [0, n) on up to kern_threads threads of a
 * persistent pool, indices claimed dynamically: fn(ctx, i) must compute
 * index i on its own (its own outputs), so results do not depend on which
 * thread ran it. Returns the first nonzero value returned by fn (in index
 * order), else 0. */
int kern_parallel_for(int n, int (*fn)(void *ctx, int i), void *ctx);

/* Tensor parallelism (tp_common.c): the same layouts for one rank's shard of
 * degree `size` (see bsipipe_tp.h; the stash's x n1 x2 n2 s1 s2 are the
 * rank's token slice, the rest its heads / FFN columns). */
struct bsipipe_tp_work_off { long gath, gdy, part, red, dx2, dy, seg, total; };
struct bsipipe_tp_head_work_off { long ce, gath, logits, part, xn, red, st, total; };
struct bsipipe_tp_tensor_info;
void kern_tp_layer_off(const bsipipe_model_dims_t *d, int size, struct bsipipe_layer_off *o);
void kern_tp_embed_off(const bsipipe_model_dims_t *d, int size, struct bsipipe_embed_off *o);
void kern_tp_head_off(const bsipipe_model_dims_t *d, int size, struct bsipipe_head_off *o);
void kern_tp_stash_off(const bsipipe_model_dims_t *d, int size, int len,
                           struct bsipipe_stash_off *o);
long kern_tp_seg_work(const bsipipe_model_dims_t *d, int size, int len);
void kern_tp_work_off(const bsipipe_model_dims_t *d, int size, int len,
                          struct bsipipe_tp_work_off *o);
void kern_tp_head_work_off(const bsipipe_model_dims_t *d, int size, int len,
                               struct bsipipe_tp_head_work_off *o);
/* Tensors of one part (-1 embed, a layer, L head), offsets relative to the
 * part (shard and full); t has room for 8. Returns the count. */
int kern_tp_part_tensors(const bsipipe_model_dims_t *d, int size, int part,
                             struct bsipipe_tp_tensor_info *t);

#endif
