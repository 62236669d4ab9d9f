/* bsipipe_kernels_decl.h: declarations of the kernels for one precision.
 * Included only by bsipipe_kernels.h, with BSIPIPE_R (float or double) and
 * BSIPIPE_FN (name decoration) defined. No include guard on purpose.
 * Shapes: d = hidden, S = seq_len, V = vocab, len = piece length. */

/* ---- embedding (first chunk) ---------------------------------------- */
/* x_out[len, d] = wte[tokens[i]] (+ wpe[start + i] for GPT).
 * embed = the embed part of the parameters; tokens[len] in [0, V). */
int BSIPIPE_FN(bsipipe_embed_forward)(const bsipipe_model_dims_t *d,
    const BSIPIPE_R *embed, const int *tokens, int start, int len,
    BSIPIPE_R *x_out);
/* embed_grad += scatter of dx[len, d] (rows of wte by token, wpe by position). */
int BSIPIPE_FN(bsipipe_embed_backward)(const bsipipe_model_dims_t *d,
    BSIPIPE_R *embed_grad, const int *tokens, int start, int len,
    const BSIPIPE_R *dx);

/* ---- chunk of layers [l0, l1) ---------------------------------------- */
/* Forward of the piece [start, start+len) through layers l0..l1-1.
 *  layers : parameters of layers l0..l1-1 (layer_params elements each, the
 *           layer l0 block first); read only.
 *  x_in   : [len, d] piece input (embedding output or previous chunk's x_out).
 *  x_out  : [len, d] output; may alias x_in.
 *  stash  : (l1-l0) * stash_size(len), written; kept for the backward.
 *  kv     : (l1-l0) * kv_size; rows [start, start+len) of each layer's K and
 *           V are written, rows [0, start) are read (earlier pieces). */
int BSIPIPE_FN(bsipipe_chunk_forward)(const bsipipe_model_dims_t *d,
    int l0, int l1, int start, int len, const BSIPIPE_R *layers,
    const BSIPIPE_R *x_in, BSIPIPE_R *x_out, BSIPIPE_R *stash, BSIPIPE_R *kv);
/* Backward of the same piece. dy[len, d] = dLoss/dx_out; dx[len, d] receives
 * dLoss/dx_in (may alias dy). grads (+=, same layout as layers). stash and kv
 * as left by the forward (kv of later pieces may have been written since: only
 * rows < start+len are read). dkv: (l1-l0) * kv_size, += into rows
 * [0, start+len); rows [start, start+len) are then read as the complete
 * gradient of this piece's K/V. work: work_size(len) elements of scratch. */
int BSIPIPE_FN(bsipipe_chunk_backward)(const bsipipe_model_dims_t *d,
    int l0, int l1, int start, int len, const BSIPIPE_R *layers,
    BSIPIPE_R *grads, const BSIPIPE_R *dy, BSIPIPE_R *dx,
    const BSIPIPE_R *stash, const BSIPIPE_R *kv, BSIPIPE_R *dkv,
    BSIPIPE_R *work);

/* Split backward (ZeroBubble's B and W). _input does everything
 * bsipipe_chunk_backward does except the four weight-matrix products per
 * layer (norm-parameter gradients are cheap and done here); it saves the
 * output gradients those products need in wstash
 * ((l1-l0) * bsipipe_model_wstash_size(len) elements, per (micro-batch,
 * piece, chunk), live from B to W). _weight then adds the matrix gradients,
 * reading stash and wstash (stash must live until W). Running each piece's W
 * in the order of the B's gives bitwise the fused result. */
int BSIPIPE_FN(bsipipe_chunk_backward_input)(const bsipipe_model_dims_t *d,
    int l0, int l1, int start, int len, const BSIPIPE_R *layers,
    BSIPIPE_R *grads, const BSIPIPE_R *dy, BSIPIPE_R *dx,
    const BSIPIPE_R *stash, const BSIPIPE_R *kv, BSIPIPE_R *dkv,
    BSIPIPE_R *wstash, BSIPIPE_R *work);
int BSIPIPE_FN(bsipipe_chunk_backward_weight)(const bsipipe_model_dims_t *d,
    int l0, int l1, int start, int len, BSIPIPE_R *grads,
    const BSIPIPE_R *stash, const BSIPIPE_R *wstash);

/* ---- head: final norm, LM head, cross-entropy (last chunk) ------------ */
/* Forward only. x[len, d] = last layer's output. logits[len, V] (NULL to skip)
 * receives the logits; if targets[len] (in [0, V)) and loss are non-NULL,
 * *loss = SUM over the len tokens of the cross-entropy (not averaged).
 * work: head_work_size(len). */
int BSIPIPE_FN(bsipipe_head_forward)(const bsipipe_model_dims_t *d,
    const BSIPIPE_R *head, int len, const BSIPIPE_R *x, const int *targets,
    BSIPIPE_R *logits, double *loss, BSIPIPE_R *work);
/* Fused forward + backward (the head has no stash: the last chunk's forward
 * task can call it and keep dx for its backward). *loss = sum of CE over the
 * piece; gradients are those of grad_scale * loss (e.g. 1 / (m * S) for a
 * token mean over an iteration): head_grad +=, dx[len, d] = (overwritten;
 * must not alias x). */
int BSIPIPE_FN(bsipipe_head_forward_backward)(const bsipipe_model_dims_t *d,
    const BSIPIPE_R *head, BSIPIPE_R *head_grad, int len, const BSIPIPE_R *x,
    const int *targets, double grad_scale, double *loss, BSIPIPE_R *dx,
    BSIPIPE_R *work);

/* ---- attention alone (exposed for tests and the CUDA twin) ------------ */
/* Causal multi-head attention of the piece's queries over keys 0..start+i.
 * q[len, ldq] (head h in columns h*hd..), k, v [start+len, ldk] (rows are
 * positions), o[len, ldo], lse[H][len] (per-row log-sum-exp of the scaled
 * scores, kept for the backward). Tiled with an online softmax: memory is
 * O(tile), never S x S. */
int BSIPIPE_FN(bsipipe_attention_forward)(int n_heads, int head_dim,
    int start, int len, const BSIPIPE_R *q, int ldq, const BSIPIPE_R *k,
    const BSIPIPE_R *v, int ldk, BSIPIPE_R *o, int ldo, BSIPIPE_R *lse);
/* Backward. o and lse as left by the forward, do_[len, ldo] = dLoss/do.
 * dq[len, lddq] is overwritten; dk, dv [start+len, ldk] are accumulated (+=)
 * for every key row < start+len (rows of earlier pieces included). */
int BSIPIPE_FN(bsipipe_attention_backward)(int n_heads, int head_dim,
    int start, int len, const BSIPIPE_R *q, int ldq, const BSIPIPE_R *k,
    const BSIPIPE_R *v, int ldk, const BSIPIPE_R *o, const BSIPIPE_R *do_,
    int ldo, const BSIPIPE_R *lse, BSIPIPE_R *dq, int lddq, BSIPIPE_R *dk,
    BSIPIPE_R *dv);

/* ---- whole model, one sequence (reference path) ----------------------- */
/* Deterministic initialisation of the whole-model vector params
 * [model_params] from seed (RNG: splitmix64 -> Box-Muller normals, drawn in
 * layout order): matrices N(0, 0.02), wo and wproj/wdown N(0, 0.02/sqrt(2L))
 * (GPT-2), norm weights 1, norm biases 0. */
int BSIPIPE_FN(bsipipe_model_init)(const bsipipe_model_dims_t *d,
    unsigned long long seed, BSIPIPE_R *params);
/* One sequence tokens[S] -> targets[S] split into k pieces (starts[0..k],
 * starts[0] = 0 < starts[1] < ... < starts[k] = S): forward in order, head,
 * backward in reverse. grads += gradient of grad_scale * loss (grads may be
 * NULL: forward only). *loss = sum of CE over the S tokens. logits[S, V] NULL
 * or filled. Allocates its own activations (returns -ENOMEM on failure). */
int BSIPIPE_FN(bsipipe_model_sequence)(const bsipipe_model_dims_t *d,
    const BSIPIPE_R *params, BSIPIPE_R *grads, const int *tokens,
    const int *targets, int k, const int *starts, double grad_scale,
    double *loss, BSIPIPE_R *logits);

/* ---- optimizer ------------------------------------------------------ */
/* Sum of squares of g[0..n) (double accumulation). */
double BSIPIPE_FN(bsipipe_sumsq)(long n, const BSIPIPE_R *g);
/* One AdamW update of n elements at step t (t >= 1, for bias correction):
 * g_eff = g * grad_mul (the clipping factor), weight decay if decay != 0.
 * m, v: moments, same length, zero before step 1. */
int BSIPIPE_FN(bsipipe_adamw_update)(const bsipipe_adamw_t *h, long t, long n,
    BSIPIPE_R *p, const BSIPIPE_R *g, double grad_mul, int decay,
    BSIPIPE_R *m, BSIPIPE_R *v);
/* AdamW over the whole-model vector: global-norm clipping (h->grad_clip),
 * per-tensor decay from bsipipe_model_tensors. *gnorm (may be NULL) gets the
 * gradient norm before clipping. */
int BSIPIPE_FN(bsipipe_model_adamw_step)(const bsipipe_model_dims_t *d,
    const bsipipe_adamw_t *h, long t, BSIPIPE_R *params, const BSIPIPE_R *grads,
    BSIPIPE_R *m, BSIPIPE_R *v, double *gnorm);
