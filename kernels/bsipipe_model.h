/* bsipipe_model.h: model dimensions, flat parameter layout and buffer sizes.
 *
 * Plain C, no StarPU; the planner (graph/) and the task layer include it.
 * All sizes are counts of elements (floats for the fp32 kernels, doubles for
 * the _f64 build); negative return values are error codes (-EINVAL).
 *
 * Parameter layout (one flat vector, row-major matrices [out, in] like
 * torch.nn.Linear.weight):
 *   embed part : wte [V, d]; GPT also wpe [S, d] (learned positions)
 *   layer l    : GPT   n1w[d] n1b[d] wqkv[3d, d] wo[d, d] n2w[d] n2b[d]
 *                      wfc[F, d] wproj[d, F]
 *                LLaMA n1w[d] wqkv[3d, d] wo[d, d] n2w[d]
 *                      wgu[2F, d] (rows 0..F-1 gate, F..2F-1 up) wdown[d, F]
 *   head part  : GPT nfw[d] nfb[d] wlm[V, d]; LLaMA nfw[d] wlm[V, d]
 *   whole model: embed | layer 0 | ... | layer L-1 | head
 * Linear layers have no bias in either family (nanoGPT bias=False style; a key
 * bias would get an identically-zero gradient anyway, softmax being
 * shift-invariant). GPT LayerNorms have weight and bias. The LM head is
 * UNTIED from the token embedding, so every parameter belongs to exactly one
 * pipeline stage (the first chunk owns the embedding, the last the head).
 */
#ifndef BSIPIPE_MODEL_H
#define BSIPIPE_MODEL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { BSIPIPE_MODEL_GPT = 0, BSIPIPE_MODEL_LLAMA = 1 } bsipipe_model_family_t;

typedef struct bsipipe_model_dims {
    bsipipe_model_family_t family;
    int n_layers;   /* L */
    int hidden;     /* d_model */
    int n_heads;    /* head_dim = hidden / n_heads */
    int ffn_hidden; /* MLP inner width (GPT: 4*hidden; LLaMA SwiGLU: user-chosen) */
    int vocab;
    int seq_len;    /* S, tokens per sequence (micro-batch size 1) */
} bsipipe_model_dims_t;

/* Fixed numerical constants of both families (PyTorch's defaults). */
#define BSIPIPE_NORM_EPS 1e-5   /* LayerNorm / RMSNorm epsilon */
#define BSIPIPE_ROPE_BASE 10000.0 /* RoPE theta base, interleaved pairs (2i, 2i+1) */

/* 0, or -EINVAL when a dimension is < 1, hidden % n_heads != 0, the family is
 * unknown, or (LLaMA) head_dim is odd (RoPE rotates pairs). */
int bsipipe_model_dims_check(const bsipipe_model_dims_t *d);

/* Parameter counts (elements). */
long bsipipe_model_embed_params(const bsipipe_model_dims_t *d);
long bsipipe_model_layer_params(const bsipipe_model_dims_t *d); /* one layer */
long bsipipe_model_head_params(const bsipipe_model_dims_t *d);
long bsipipe_model_params(const bsipipe_model_dims_t *d);       /* whole model */
/* Offset of layer l in the whole-model vector, 0 <= l <= L (l == L gives the
 * head part's offset). */
long bsipipe_model_layer_offset(const bsipipe_model_dims_t *d, int l);

/* Per-layer buffer sizes for one piece of `len` tokens (1 <= len <= S). A chunk
 * of layers [l0, l1) needs (l1 - l0) times the per-layer size, laid out layer
 * after layer.
 *  kv    : K and V of the whole sequence, [2][S][d] (K post-RoPE for LLaMA).
 *          One per (micro-batch, chunk); a piece writes its rows, later
 *          pieces read the prefix. Same size for the dKV gradient buffer.
 *  stash : what a layer's forward keeps for its backward, per
 *          (micro-batch, piece, chunk).
 *  work  : scratch of one chunk backward call (not per layer: one per call).
 *  wstash: see bsipipe_model_wstash_size (split backward only).
 *  head_work : scratch of the head calls. */
long bsipipe_model_kv_size(const bsipipe_model_dims_t *d);
long bsipipe_model_stash_size(const bsipipe_model_dims_t *d, int len);
long bsipipe_model_work_size(const bsipipe_model_dims_t *d, int len);
/* Per layer: output gradients saved by a split backward's input half for its
 * weight half (bsipipe_chunk_backward_input/_weight), per (micro-batch, piece,
 * chunk): len * (5 d + A1), A1 = F (GPT) or 2F (LLaMA). */
long bsipipe_model_wstash_size(const bsipipe_model_dims_t *d, int len);
long bsipipe_model_head_work_size(const bsipipe_model_dims_t *d, int len);

/* Forward FLOPs of one layer for the piece [start, start+len) (matrix
 * products only, 2 per multiply-add; causal attention counts the keys each
 * query really visits). A forward+backward costs 3x this (model FLOPs, not
 * counting the backward's recomputation of attention scores). */
double bsipipe_model_layer_flops(const bsipipe_model_dims_t *d, int start, int len);
/* Forward FLOPs of the LM head for len tokens. */
double bsipipe_model_head_flops(const bsipipe_model_dims_t *d, int len);

/* One named tensor of the flat parameter vector. */
typedef struct bsipipe_tensor_info {
    char name[32]; /* e.g. "wte", "layer1.wqkv", "wlm" (static-size copy) */
    int part;      /* -1 embed, 0..L-1 layer index, L head */
    long offset;   /* in the whole-model vector */
    int rows, cols;/* cols == 1 for vectors */
    int decay;     /* 1: AdamW weight decay applies (matrices), 0: norms */
} bsipipe_tensor_info_t;

/* Fills out[0..n) (out may be NULL to query n) and returns n, the number of
 * tensors, in layout order; -EINVAL on bad dims, -ENOSPC if max < n. Caller
 * owns out. */
int bsipipe_model_tensors(const bsipipe_model_dims_t *d, bsipipe_tensor_info_t *out, int max);

/* AdamW hyper-parameters (PyTorch torch.optim.AdamW semantics). Weight decay
 * is applied to tensors whose bsipipe_tensor_info_t.decay is 1. grad_clip > 0
 * scales all gradients by min(1, grad_clip / (global_norm + 1e-6)) before the
 * update (torch.nn.utils.clip_grad_norm_); <= 0 disables clipping. */
typedef struct bsipipe_adamw {
    double lr, beta1, beta2, eps, weight_decay, grad_clip;
} bsipipe_adamw_t;

#ifdef __cplusplus
}
#endif
#endif
