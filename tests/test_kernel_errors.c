/* test_kernel_errors: bad shapes, sizes and pointers passed to the public
 * kernel functions return -EINVAL (never crash, never touch memory out of
 * bounds: this test also runs under valgrind). */
#include <errno.h>

#include "kernels/reference_trainer.h"
#include "tests/kernels/kt_util.h"

static int fails, checks;

#define EXPECT(call, want)                                                          \
    do {                                                                            \
        long got_ = (long)(call);                                                   \
        checks++;                                                                   \
        if (got_ != (long)(want)) {                                                 \
            printf("FAIL %s:%d: %s = %ld, want %ld\n", __FILE__, __LINE__, #call,   \
                   got_, (long)(want));                                             \
            fails++;                                                                \
        }                                                                           \
    } while (0)

int main(void)
{
    bsipipe_model_dims_t ok = {BSIPIPE_MODEL_GPT, 2, 8, 2, 32, 11, 6}, bad;
    long np = bsipipe_model_params(&ok), lp = bsipipe_model_layer_params(&ok);
    long ss = bsipipe_model_stash_size(&ok, 6), kv = bsipipe_model_kv_size(&ok);
    long ws = bsipipe_model_work_size(&ok, 6), hw = bsipipe_model_head_work_size(&ok, 6);
    float *p = kt_alloc(sizeof(float) * np), *g = kt_alloc(sizeof(float) * np);
    float *x = kt_alloc(sizeof(float) * 6 * 8), *y = kt_alloc(sizeof(float) * 6 * 8);
    float *st = kt_alloc(sizeof(float) * 2 * ss), *kvb = kt_alloc(sizeof(float) * 2 * kv);
    float *dkv = kt_alloc(sizeof(float) * 2 * kv), *w = kt_alloc(sizeof(float) * ws);
    float *hwb = kt_alloc(sizeof(float) * hw), *lse = kt_alloc(sizeof(float) * 16);
    int tok[6] = {1, 2, 3, 4, 5, 6}, badtok[6] = {1, 2, 11, 4, 5, 6}, neg[6] = {0, -1, 0, 0, 0, 0};
    int starts[3] = {0, 3, 6}, badstarts[3] = {0, 4, 3};
    double loss;
    bsipipe_adamw_t hp = {1e-3, 0.9, 0.95, 1e-8, 0.0, 1.0};
    bsipipe_ref_trainer_t *t = NULL;

    /* dims */
    EXPECT(bsipipe_model_dims_check(&ok), 0);
    EXPECT(bsipipe_model_dims_check(NULL), -EINVAL);
    bad = ok; bad.n_heads = 3;           EXPECT(bsipipe_model_dims_check(&bad), -EINVAL);
    bad = ok; bad.hidden = 0;            EXPECT(bsipipe_model_dims_check(&bad), -EINVAL);
    bad = ok; bad.vocab = -1;            EXPECT(bsipipe_model_dims_check(&bad), -EINVAL);
    bad = ok; bad.family = 7;            EXPECT(bsipipe_model_dims_check(&bad), -EINVAL);
    bad = ok; bad.family = BSIPIPE_MODEL_LLAMA; bad.hidden = 6; bad.n_heads = 2;
    EXPECT(bsipipe_model_dims_check(&bad), -EINVAL); /* odd head_dim: no RoPE pairs */
    bad = ok; bad.seq_len = 0;           EXPECT(bsipipe_model_params(&bad), -EINVAL);
    EXPECT(bsipipe_model_stash_size(&ok, 0), -EINVAL);
    EXPECT(bsipipe_model_stash_size(&ok, 7), -EINVAL);
    EXPECT(bsipipe_model_work_size(&ok, -1), -EINVAL);
    EXPECT(bsipipe_model_head_work_size(&ok, 7), -EINVAL);
    EXPECT(bsipipe_model_layer_offset(&ok, 2) - bsipipe_model_layer_offset(&ok, 1), lp);
    EXPECT(bsipipe_model_layer_offset(&ok, 3), -EINVAL);
    EXPECT(bsipipe_model_layer_offset(&ok, -1), -EINVAL);
    EXPECT(bsipipe_model_tensors(&ok, (bsipipe_tensor_info_t[2]){0}, 2), -ENOSPC);

    /* embedding */
    EXPECT(bsipipe_embed_forward(&ok, p, tok, 0, 6, x), 0);
    EXPECT(bsipipe_embed_forward(&ok, p, badtok, 0, 6, x), -EINVAL);
    EXPECT(bsipipe_embed_forward(&ok, p, neg, 0, 6, x), -EINVAL);
    EXPECT(bsipipe_embed_forward(&ok, p, tok, 1, 6, x), -EINVAL); /* past S */
    EXPECT(bsipipe_embed_forward(&ok, p, tok, 0, 0, x), -EINVAL);
    EXPECT(bsipipe_embed_forward(&ok, NULL, tok, 0, 6, x), -EINVAL);
    EXPECT(bsipipe_embed_backward(&ok, g, badtok, 0, 6, x), -EINVAL);
    EXPECT(bsipipe_embed_backward(&ok, g, tok, -1, 6, x), -EINVAL);

    /* chunks */
    float *layers = p + bsipipe_model_layer_offset(&ok, 0), *lg = g + bsipipe_model_layer_offset(&ok, 0);
    EXPECT(bsipipe_chunk_forward(&ok, 0, 2, 0, 6, layers, x, y, st, kvb), 0);
    EXPECT(bsipipe_chunk_forward(&ok, 0, 3, 0, 6, layers, x, y, st, kvb), -EINVAL);
    EXPECT(bsipipe_chunk_forward(&ok, 1, 1, 0, 6, layers, x, y, st, kvb), -EINVAL);
    EXPECT(bsipipe_chunk_forward(&ok, -1, 1, 0, 6, layers, x, y, st, kvb), -EINVAL);
    EXPECT(bsipipe_chunk_forward(&ok, 0, 2, 3, 4, layers, x, y, st, kvb), -EINVAL);
    EXPECT(bsipipe_chunk_forward(&ok, 0, 2, 0, 6, layers, x, y, NULL, kvb), -EINVAL);
    EXPECT(bsipipe_chunk_backward(&ok, 0, 2, 0, 6, layers, lg, y, x, st, kvb, dkv, w), 0);
    EXPECT(bsipipe_chunk_backward(&ok, 0, 2, 0, 6, layers, lg, y, x, st, kvb, dkv, NULL), -EINVAL);
    EXPECT(bsipipe_chunk_backward(&ok, 2, 2, 0, 6, layers, lg, y, x, st, kvb, dkv, w), -EINVAL);
    EXPECT(bsipipe_chunk_backward(&ok, 0, 2, 6, 1, layers, lg, y, x, st, kvb, dkv, w), -EINVAL);
    float *wst = kt_alloc(sizeof(float) * 2 * bsipipe_model_wstash_size(&ok, 6));
    EXPECT(bsipipe_model_wstash_size(&ok, 7), -EINVAL);
    EXPECT(bsipipe_chunk_forward(&ok, 0, 2, 0, 6, layers, x, y, st, kvb), 0);
    EXPECT(bsipipe_chunk_backward_input(&ok, 0, 2, 0, 6, layers, lg, y, x, st, kvb, dkv, wst, w), 0);
    EXPECT(bsipipe_chunk_backward_input(&ok, 0, 2, 0, 6, layers, lg, y, x, st, kvb, dkv, NULL, w), -EINVAL);
    EXPECT(bsipipe_chunk_backward_weight(&ok, 0, 2, 0, 6, lg, st, wst), 0);
    EXPECT(bsipipe_chunk_backward_weight(&ok, 0, 2, 0, 6, lg, st, NULL), -EINVAL);
    EXPECT(bsipipe_chunk_backward_weight(&ok, 0, 3, 0, 6, lg, st, wst), -EINVAL);
    EXPECT(bsipipe_chunk_backward_weight(&ok, 0, 2, 2, 5, lg, st, wst), -EINVAL);
    free(wst);
    bad = ok; bad.n_heads = 5;
    EXPECT(bsipipe_chunk_forward(&bad, 0, 2, 0, 6, layers, x, y, st, kvb), -EINVAL);

    /* head */
    float *head = p + bsipipe_model_layer_offset(&ok, 2), *hg = g + bsipipe_model_layer_offset(&ok, 2);
    EXPECT(bsipipe_head_forward(&ok, head, 6, x, tok, NULL, &loss, hwb), 0);
    EXPECT(bsipipe_head_forward(&ok, head, 6, x, badtok, NULL, &loss, hwb), -EINVAL);
    EXPECT(bsipipe_head_forward(&ok, head, 7, x, tok, NULL, &loss, hwb), -EINVAL);
    EXPECT(bsipipe_head_forward_backward(&ok, head, hg, 6, x, tok, 1.0, &loss, y, hwb), 0);
    EXPECT(bsipipe_head_forward_backward(&ok, head, hg, 6, x, NULL, 1.0, &loss, y, hwb), -EINVAL);
    EXPECT(bsipipe_head_forward_backward(&ok, head, hg, 6, x, neg, 1.0, &loss, y, hwb), -EINVAL);

    /* attention */
    EXPECT(bsipipe_attention_forward(2, 4, 0, 2, x, 8, x, x, 8, y, 8, lse), 0);
    EXPECT(bsipipe_attention_forward(2, 4, 0, 2, x, 7, x, x, 8, y, 8, lse), -EINVAL);
    EXPECT(bsipipe_attention_forward(0, 4, 0, 2, x, 8, x, x, 8, y, 8, lse), -EINVAL);
    EXPECT(bsipipe_attention_forward(2, 4, -1, 2, x, 8, x, x, 8, y, 8, lse), -EINVAL);
    EXPECT(bsipipe_attention_backward(2, 4, 0, 2, x, 8, x, x, 8, y, y, 8, lse, w, 4, w, w), -EINVAL);

    /* model / optimizer / trainer */
    EXPECT(bsipipe_model_init(&ok, 1, NULL), -EINVAL);
    EXPECT(bsipipe_model_sequence(&ok, p, g, tok, tok, 2, starts, 1.0, &loss, NULL), 0);
    EXPECT(bsipipe_model_sequence(&ok, p, g, tok, tok, 2, badstarts, 1.0, &loss, NULL), -EINVAL);
    EXPECT(bsipipe_model_sequence(&ok, p, g, tok, tok, 0, starts, 1.0, &loss, NULL), -EINVAL);
    EXPECT(bsipipe_model_sequence(&ok, p, g, tok, badtok, 2, starts, 1.0, &loss, NULL), -EINVAL);
    EXPECT(bsipipe_adamw_update(&hp, 0, 4, p, g, 1.0, 1, w, w), -EINVAL);
    EXPECT(bsipipe_adamw_update(NULL, 1, 4, p, g, 1.0, 1, w, w), -EINVAL);
    EXPECT(bsipipe_kernels_set_tiles(0, 4), -EINVAL);
    EXPECT(bsipipe_kernels_set_threads(0), -EINVAL);
    bad = ok; bad.ffn_hidden = 0;
    EXPECT(bsipipe_ref_trainer_create(&bad, &hp, 1, &t), -EINVAL);
    hp.beta1 = 1.0;
    EXPECT(bsipipe_ref_trainer_create(&ok, &hp, 1, &t), -EINVAL);
    hp.beta1 = 0.9;
    EXPECT(bsipipe_ref_trainer_create(&ok, &hp, 1, &t), 0);
    EXPECT(bsipipe_ref_trainer_forward_backward(t, 0, tok, tok, 1, NULL, &loss), -EINVAL);
    EXPECT(bsipipe_ref_trainer_forward_backward(t, 1, tok, tok, 2, NULL, &loss), -EINVAL);
    EXPECT(bsipipe_ref_trainer_forward_backward(t, 1, tok, tok, 2, starts, &loss), 0);
    bsipipe_ref_trainer_destroy(t);
    bsipipe_ref_trainer_destroy(NULL);

    free(p); free(g); free(x); free(y); free(st); free(kvb); free(dkv); free(w); free(hwb);
    free(lse);
    printf("%d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}
