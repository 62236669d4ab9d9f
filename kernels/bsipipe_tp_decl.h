/* bsipipe_tp_decl.h: tensor-parallel kernels of one precision. Included only
 * by bsipipe_tp.h, with BSIPIPE_R and BSIPIPE_FN defined; no include guard on
 * purpose. Shapes: d = hidden, len = piece length, ls = len / size (the
 * rank's token slice), ds = d / size, Vs = V / size.
 *
 * Every function below acts on one rank (tp->rank) and reads or writes only
 * that rank's buffers. Segment functions compute only; the comment after each
 * says which collective the caller runs next (the drivers do exactly that).
 * Buffers: "gath" [len, d] receives an all-gather, "part" [len, d] is the
 * input of a reduce-scatter, "red" [ls, d] its output. Weight gradients are
 * accumulated (+=) as in bsipipe_kernels.h. */

/* ---- parameters: full vector <-> one rank's shard ------------------------ */
/* part: -1 embedding, 0..L-1 a layer (all layers share one layout), L head.
 * full/shard point at that part (bsipipe_model_*_params / bsipipe_tp_*_params
 * elements). shard = the rank's blocks of full. */
int BSIPIPE_FN(bsipipe_tp_shard)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    int part, const BSIPIPE_R *full, BSIPIPE_R *shard);
/* Writes the rank's blocks into full. Replicated tensors: copied
 * (add_replicated == 0, parameters: every rank holds the same) or added
 * (add_replicated != 0, gradients: zero full first and unshard ranks
 * 0..size-1 in order, which sums them in rank order). */
int BSIPIPE_FN(bsipipe_tp_unshard)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    int part, const BSIPIPE_R *shard, BSIPIPE_R *full, int add_replicated);
/* The same over the whole-model vectors (bsipipe_tp_model_params elements). */
int BSIPIPE_FN(bsipipe_tp_model_shard)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    const BSIPIPE_R *full, BSIPIPE_R *shard);
int BSIPIPE_FN(bsipipe_tp_model_unshard)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const BSIPIPE_R *shard, BSIPIPE_R *full, int add_replicated);
/* Sums the replicated tensors' gradients of one part over the TP ranks
 * (comm->all_reduce, in place), after which every rank holds the full
 * gradient of its replicas. */
int BSIPIPE_FN(bsipipe_tp_reduce_replicated)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const bsipipe_tp_comm_t *comm, int part, BSIPIPE_R *grads);

/* ---- layer segments (layer = the rank's shard of one layer) ------------- */
/* stash.x = x [ls, d]; stash.n1 = norm1(x).     next: all_gather(n1 -> gath) */
int BSIPIPE_FN(bsipipe_tp_layer_fwd_norm1)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *layer, const BSIPIPE_R *x,
    BSIPIPE_R *stash);
/* q|k|v of the rank's heads from gath (k, v into kv rows [start, start+len)),
 * RoPE (LLaMA), attention over kv rows [0, start+len), part = att Wo_r^T.
 *                                          next: reduce_scatter(part -> red) */
int BSIPIPE_FN(bsipipe_tp_layer_fwd_attn)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int start, int len, const BSIPIPE_R *layer,
    const BSIPIPE_R *gath, BSIPIPE_R *stash, BSIPIPE_R *kv, BSIPIPE_R *part);
/* x2 = x + red; n2 = norm2(x2).                  next: all_gather(n2 -> gath) */
int BSIPIPE_FN(bsipipe_tp_layer_fwd_norm2)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *layer, const BSIPIPE_R *red,
    BSIPIPE_R *stash);
/* a1 = gath W1_r^T, a2 = act(a1), part = a2 W2_r^T.
 *                                          next: reduce_scatter(part -> red) */
int BSIPIPE_FN(bsipipe_tp_layer_fwd_mlp)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *layer, const BSIPIPE_R *gath,
    BSIPIPE_R *stash, BSIPIPE_R *part);
/* y [ls, d] = x2 + red (the layer's output slice; may alias red). */
int BSIPIPE_FN(bsipipe_tp_layer_fwd_out)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *stash, const BSIPIPE_R *red,
    BSIPIPE_R *y);
/* Backward. Before: all_gather(dy -> gdy), all_gather(stash.n2 -> gath) (the
 * column-parallel input is stashed sharded and gathered again, as Megatron-SP
 * does). MLP backward; part = dn2 partial.
 * work: bsipipe_tp_seg_work_size.          next: reduce_scatter(part -> red) */
int BSIPIPE_FN(bsipipe_tp_layer_bwd_mlp)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *layer, BSIPIPE_R *grads,
    const BSIPIPE_R *stash, const BSIPIPE_R *gdy, const BSIPIPE_R *gath, BSIPIPE_R *part,
    BSIPIPE_R *work);
/* dx2 [ls, d] = dy + norm2'(red); n2w/n2b grads of the slice.
 *     next: all_gather(dx2 -> gdy), all_gather(stash.n1 -> gath) */
int BSIPIPE_FN(bsipipe_tp_layer_bwd_norm2)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *layer, BSIPIPE_R *grads,
    const BSIPIPE_R *stash, const BSIPIPE_R *dy, const BSIPIPE_R *red, BSIPIPE_R *dx2);
/* Attention backward from gdy = gathered dx2 and gath = gathered n1; dkv of
 * the rank's heads as in bsipipe_chunk_backward; part = dn1 partial.
 *                                          next: reduce_scatter(part -> red) */
int BSIPIPE_FN(bsipipe_tp_layer_bwd_attn)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int start, int len, const BSIPIPE_R *layer, BSIPIPE_R *grads,
    const BSIPIPE_R *stash, const BSIPIPE_R *kv, BSIPIPE_R *dkv, const BSIPIPE_R *gdy,
    const BSIPIPE_R *gath, BSIPIPE_R *part, BSIPIPE_R *work);
/* dx [ls, d] = dx2 + norm1'(red); n1w/n1b grads of the slice. dx may alias
 * the layer's dy. */
int BSIPIPE_FN(bsipipe_tp_layer_bwd_norm1)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *layer, BSIPIPE_R *grads,
    const BSIPIPE_R *stash, const BSIPIPE_R *dx2, const BSIPIPE_R *red, BSIPIPE_R *dx);

/* Split backward (ZeroBubble B / W): the input halves of bwd_mlp and
 * bwd_attn (same inputs but no grads and no gath; they save the gathered
 * output gradient, da1 and dqkv in wst, the layer's
 * bsipipe_tp_wstash_size), then, in W, the weight halves: before each an
 * all_gather of stash.n2 (MLP) or stash.n1 (attention) -> gath. The
 * products are the fused segments', on the same operands. */
int BSIPIPE_FN(bsipipe_tp_layer_bwd_mlp_x)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *layer, const BSIPIPE_R *stash,
    const BSIPIPE_R *gdy, BSIPIPE_R *part, BSIPIPE_R *work, BSIPIPE_R *wst);
int BSIPIPE_FN(bsipipe_tp_layer_bwd_attn_x)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int start, int len, const BSIPIPE_R *layer,
    const BSIPIPE_R *stash, const BSIPIPE_R *kv, BSIPIPE_R *dkv, const BSIPIPE_R *gdy,
    BSIPIPE_R *part, BSIPIPE_R *work, BSIPIPE_R *wst);
int BSIPIPE_FN(bsipipe_tp_layer_wgrad_mlp)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, BSIPIPE_R *grads, const BSIPIPE_R *stash,
    const BSIPIPE_R *wst, const BSIPIPE_R *gath);
int BSIPIPE_FN(bsipipe_tp_layer_wgrad_attn)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, BSIPIPE_R *grads, const BSIPIPE_R *stash,
    const BSIPIPE_R *wst, const BSIPIPE_R *gath);

/* ---- chunk drivers (segments + comm, one rank) -------------------------- */
/* As bsipipe_chunk_forward / _backward on the rank's shard: layers, grads
 * (l1-l0) * bsipipe_tp_layer_params; x_in, x_out, dy, dx [ls, d] slices (x_out
 * may alias x_in, dx may alias dy); stash (l1-l0) * bsipipe_tp_stash_size;
 * kv, dkv (l1-l0) * bsipipe_tp_kv_size; work bsipipe_tp_work_size. */
int BSIPIPE_FN(bsipipe_tp_chunk_forward)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const bsipipe_tp_comm_t *comm, int l0, int l1, int start,
    int len, const BSIPIPE_R *layers, const BSIPIPE_R *x_in, BSIPIPE_R *x_out,
    BSIPIPE_R *stash, BSIPIPE_R *kv, BSIPIPE_R *work);
int BSIPIPE_FN(bsipipe_tp_chunk_backward)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const bsipipe_tp_comm_t *comm, int l0, int l1, int start,
    int len, const BSIPIPE_R *layers, BSIPIPE_R *grads, const BSIPIPE_R *dy, BSIPIPE_R *dx,
    const BSIPIPE_R *stash, const BSIPIPE_R *kv, BSIPIPE_R *dkv, BSIPIPE_R *work);

/* ---- vocabulary-parallel embedding -------------------------------------- */
/* tokens[len] of the whole piece. part[len, d] = rows of the rank's wte slice
 * (zero for tokens outside it).             next: reduce_scatter(part -> x) */
int BSIPIPE_FN(bsipipe_tp_embed_fwd_vocab)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const BSIPIPE_R *embed, const int *tokens, int len,
    BSIPIPE_R *part);
/* x [ls, d] += wpe rows of the slice's positions (GPT; no-op for LLaMA). */
int BSIPIPE_FN(bsipipe_tp_embed_fwd_pos)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const BSIPIPE_R *embed, int start, int len, BSIPIPE_R *x);
/* wpe grad += dx [ls, d] at the slice's positions.  next: all_gather(dx -> gath) */
int BSIPIPE_FN(bsipipe_tp_embed_bwd_pos)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, BSIPIPE_R *embed_grad, int start, int len, const BSIPIPE_R *dx);
/* wte-slice grad += rows of gath [len, d] whose token is in the slice. */
int BSIPIPE_FN(bsipipe_tp_embed_bwd_vocab)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, BSIPIPE_R *embed_grad, const int *tokens, int len,
    const BSIPIPE_R *gath);
/* Drivers. x, dx: [ls, d]; work: bsipipe_tp_embed_work_size. */
int BSIPIPE_FN(bsipipe_tp_embed_forward)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const bsipipe_tp_comm_t *comm, const BSIPIPE_R *embed,
    const int *tokens, int start, int len, BSIPIPE_R *x, BSIPIPE_R *work);
int BSIPIPE_FN(bsipipe_tp_embed_backward)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const bsipipe_tp_comm_t *comm, BSIPIPE_R *embed_grad,
    const int *tokens, int start, int len, const BSIPIPE_R *dx, BSIPIPE_R *work);

/* ---- vocabulary-parallel head and cross-entropy ------------------------- */
/* ce: 3 * len doubles (per token: max, sum of exp, target logit).
 * xn [ls, d] = normf(x) of the slice, st [2 ls] its statistics.
 *                                           next: all_gather(xn -> gath) */
int BSIPIPE_FN(bsipipe_tp_head_fwd_norm)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const BSIPIPE_R *head, int len, const BSIPIPE_R *x,
    BSIPIPE_R *xn, BSIPIPE_R *st);
/* logits [len, Vs] = gath Wlm_r^T (columns = vocab ids rank*Vs ..);
 * ce[0..len) = the rank's row maxima.   next: all_reduce(ce[0..len), MAX) */
int BSIPIPE_FN(bsipipe_tp_head_fwd_logits)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const BSIPIPE_R *head, int len, const BSIPIPE_R *gath,
    BSIPIPE_R *logits, double *ce);
/* ce[len..2len) = sum over the slice of exp(logit - max), ce[2len..3len) =
 * the target's logit if the rank owns it, else 0.
 *                                 next: all_reduce(ce[len..3len), SUM) */
int BSIPIPE_FN(bsipipe_tp_head_ce_sums)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, int len, const BSIPIPE_R *logits, const int *targets,
    double *ce);
/* logits -> grad_scale * (softmax - onehot) in place; head grad of the rank's
 * wlm rows += dlogits^T gath; part = dlogits Wlm_r (dxn partial).
 *                                        next: reduce_scatter(part -> red) */
int BSIPIPE_FN(bsipipe_tp_head_bwd_logits)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const BSIPIPE_R *head, BSIPIPE_R *head_grad, int len,
    const BSIPIPE_R *gath, const int *targets, double grad_scale, const double *ce,
    BSIPIPE_R *logits, BSIPIPE_R *part);
/* dx [ls, d] = normf'(red); nfw/nfb grads of the slice. */
int BSIPIPE_FN(bsipipe_tp_head_bwd_norm)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const BSIPIPE_R *head, BSIPIPE_R *head_grad, int len,
    const BSIPIPE_R *x, const BSIPIPE_R *st, const BSIPIPE_R *red, BSIPIPE_R *dx);
/* Drivers: as bsipipe_head_forward (loss only, targets required) and
 * bsipipe_head_forward_backward, x and dx [ls, d] slices, targets[len] of the
 * whole piece; work bsipipe_tp_head_work_size; ce is allocated inside. */
int BSIPIPE_FN(bsipipe_tp_head_forward)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const bsipipe_tp_comm_t *comm, const BSIPIPE_R *head, int len,
    const BSIPIPE_R *x, const int *targets, double *loss, BSIPIPE_R *work);
int BSIPIPE_FN(bsipipe_tp_head_forward_backward)(const bsipipe_model_dims_t *d,
    const bsipipe_tp_t *tp, const bsipipe_tp_comm_t *comm, const BSIPIPE_R *head,
    BSIPIPE_R *head_grad, int len, const BSIPIPE_R *x, const int *targets,
    double grad_scale, double *loss, BSIPIPE_R *dx, BSIPIPE_R *work);
