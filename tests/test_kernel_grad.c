/* test_kernel_grad: every backward against central finite differences, in
 * the fp64 build of the kernels (same source, same tiling as fp32).
 *
 * For each family and partition, the analytic gradient of
 * f(theta) = grad_scale * sum CE (one sequence through embedding, all layers,
 * head) w.r.t. EVERY parameter is compared with (f(theta+h) - f(theta-h))/2h.
 * Parameter gradients cover every backward: head (LM head + final norm),
 * each sub-layer of every block (norms, projections, GeLU / SwiGLU, RoPE,
 * attention including the KV-prefix path when k > 1: the dK/dV a later piece
 * hands back to earlier pieces), and the embedding (= dx of the first layer).
 * Tiny attention tiles (2 x 3) make the online softmax span several tiles.
 *
 * Error budget: h = 1e-6 in fp64 gives truncation ~h^2 |f'''| ~ 1e-9 and
 * cancellation ~ eps |f| / h ~ 1e-9, far below the 1e-6 criterion
 * (max |fd - analytic| / max |analytic| per tensor).
 * BSIPIPE_TEST_QUICK=1 (set by the valgrind target) checks every 5th
 * parameter only. */
#include "tests/kernels/kt_util.h"

static double loss_of(const bsipipe_model_dims_t *d, const double *p, const int *tok,
                      const int *tgt, int k, const int *starts, double scale)
{
    double l = 0;
    KT_CHECK(bsipipe_model_sequence_f64(d, p, NULL, tok, tgt, k, starts, scale, &l, NULL));
    return l * scale;
}

static int run(const bsipipe_model_dims_t *d, int k, const int *starts, int stride)
{
    long n = bsipipe_model_params(d);
    int S = d->seq_len, nt, fails = 0;
    double *p = kt_alloc(sizeof(double) * n), *g = kt_alloc(sizeof(double) * n);
    double *fd = kt_alloc(sizeof(double) * n), scale = 1.0 / S, h = 1e-6, l0 = 0, worst = 0;
    int *tok = kt_alloc(sizeof(int) * S), *tgt = kt_alloc(sizeof(int) * S);
    bsipipe_tensor_info_t *ti;
    KT_CHECK(bsipipe_model_init_f64(d, 7, p));
    /* larger than the 0.02 init so that every nonlinearity is exercised */
    for (long i = 0; i < n; i++)
        p[i] = p[i] * 5 + (i % 3 == 0 ? 0.02 : -0.01);
    kt_tokens(S, d->vocab, 1, tok);
    kt_tokens(S, d->vocab, 2, tgt);
    KT_CHECK(bsipipe_model_sequence_f64(d, p, g, tok, tgt, k, starts, scale, &l0, NULL));
    for (long i = 0; i < n; i += stride) {
        double keep = p[i], fp, fm;
        p[i] = keep + h;
        fp = loss_of(d, p, tok, tgt, k, starts, scale);
        p[i] = keep - h;
        fm = loss_of(d, p, tok, tgt, k, starts, scale);
        p[i] = keep;
        fd[i] = (fp - fm) / (2 * h);
    }
    nt = bsipipe_model_tensors(d, NULL, 0);
    ti = kt_alloc(sizeof *ti * nt);
    bsipipe_model_tensors(d, ti, nt);
    for (int t = 0; t < nt; t++) {
        double md = 0, mg = 0;
        long cnt = (long)ti[t].rows * ti[t].cols;
        for (long i = ti[t].offset; i < ti[t].offset + cnt; i++) {
            if ((i % stride) != 0)
                continue;
            if (fabs(fd[i] - g[i]) > md || fd[i] != fd[i] || g[i] != g[i])
                md = fabs(fd[i] - g[i]);
            if (fabs(g[i]) > mg)
                mg = fabs(g[i]);
        }
        double rel = mg > 0 ? md / mg : md;
        if (rel > worst)
            worst = rel;
        if (!(rel < 1e-6) || mg == 0) {
            printf("  FAIL %-14s max|fd-g|/max|g| = %.3e (max|g| %.3e)\n", ti[t].name, rel, mg);
            fails++;
        }
    }
    printf("%-5s k=%d loss %.6f params %ld: worst tensor rel err %.3e %s\n", kt_family(d), k,
           l0 * scale, n, worst, fails ? "FAIL" : "ok");
    free(ti);
    free(p);
    free(g);
    free(fd);
    free(tok);
    free(tgt);
    return fails;
}

int main(void)
{
    const char *q = getenv("BSIPIPE_TEST_QUICK");
    int stride = q && *q && *q != '0' ? 5 : 1, fails = 0;
    bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 2, 8, 2, 32, 11, 7};
    bsipipe_model_dims_t llama = {BSIPIPE_MODEL_LLAMA, 2, 8, 2, 12, 11, 7};
    int whole[2] = {0, 7}, three[4] = {0, 3, 5, 7};
    KT_CHECK(bsipipe_kernels_set_tiles(2, 3));
    fails += run(&gpt, 1, whole, stride);
    fails += run(&gpt, 3, three, stride);
    fails += run(&llama, 1, whole, stride);
    fails += run(&llama, 3, three, stride);
    printf("%s\n", fails ? "FAILED" : "all gradients match finite differences");
    return fails ? 1 : 0;
}
