/* test_kernel_torch: the C kernels against the PyTorch reference states in
 * tests/torch/ref_{gpt,llama}.bin (written by tests/torch/gen_reference.py;
 * the test itself needs no PyTorch). Per family: logits, loss, every
 * parameter gradient (tensor by tensor), and the weights after three AdamW
 * steps through the reference trainer. Each sequence is run whole (k = 1) and
 * as 3 pieces with the KV prefix, with small attention tiles so that the
 * online softmax spans several tiles.
 * Pass: max |c - torch| / max |torch| <= 1e-5 for every tensor (fp32).
 * Files are found in $srcdir/tests/torch, or in the directory given as argv[1]. */
#include <stdint.h>

#include "kernels/reference_trainer.h"
#include "tests/kernels/kt_util.h"

#define TOL 1e-5

struct rec {
    char name[32];
    uint32_t dtype;
    uint64_t count;
    void *data;
};

struct ref {
    struct rec r[32];
    int n;
};

static int load(const char *path, struct ref *f)
{
    FILE *fp = fopen(path, "rb");
    char magic[8];
    if (!fp)
        return -1;
    if (fread(magic, 1, 8, fp) != 8 || memcmp(magic, "BSIPREF1", 8)) {
        fclose(fp);
        return -2;
    }
    f->n = 0;
    for (;;) {
        uint32_t nl;
        struct rec *r = &f->r[f->n];
        if (fread(&nl, 4, 1, fp) != 1)
            break;
        if (nl >= sizeof r->name || f->n == 32 || fread(r->name, 1, nl, fp) != nl ||
            fread(&r->dtype, 4, 1, fp) != 1 || fread(&r->count, 8, 1, fp) != 1 ||
            r->dtype > 2 || r->count > (1u << 26)) {
            fclose(fp);
            return -3;
        }
        r->name[nl] = 0;
        size_t es = r->dtype == 2 ? 8 : 4;
        r->data = kt_alloc(es * r->count);
        if (fread(r->data, es, r->count, fp) != r->count) {
            fclose(fp);
            return -3;
        }
        f->n++;
    }
    fclose(fp);
    return 0;
}

static void *get(struct ref *f, const char *name, uint32_t dtype, uint64_t count)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->r[i].name, name)) {
            if (f->r[i].dtype != dtype || (count && f->r[i].count != count)) {
                fprintf(stderr, "record %s: wrong type or size\n", name);
                exit(99);
            }
            return f->r[i].data;
        }
    fprintf(stderr, "record %s missing\n", name);
    exit(99);
}

/* per-tensor comparison over the flat parameter vector */
static int cmp_tensors(const bsipipe_model_dims_t *d, const char *what, const float *c,
                       const float *t, int verbose)
{
    int nt = bsipipe_model_tensors(d, NULL, 0), fails = 0;
    bsipipe_tensor_info_t *ti = kt_alloc(sizeof *ti * nt);
    double worst = 0;
    const char *wn = "";
    bsipipe_model_tensors(d, ti, nt);
    for (int i = 0; i < nt; i++) {
        long cnt = (long)ti[i].rows * ti[i].cols;
        double r = kt_reldiff_f(cnt, c + ti[i].offset, t + ti[i].offset);
        if (verbose)
            printf("    %-8s %-14s %.3e\n", what, ti[i].name, r);
        if (!(r <= TOL)) {
            printf("    FAIL %s %s: max rel diff %.3e\n", what, ti[i].name, r);
            fails++;
        }
        if (r > worst) {
            worst = r;
            wn = ti[i].name;
        }
    }
    printf("  %-13s worst tensor %-14s max rel diff %.3e\n", what, wn, worst);
    free(ti);
    return fails;
}

static int run_file(const char *path, int verbose)
{
    struct ref f;
    int fails = 0;
    if (load(path, &f)) {
        fprintf(stderr, "cannot read %s\n", path);
        return 99;
    }
    int *cfg = get(&f, "config", 1, 9);
    double *hpv = get(&f, "adamw", 2, 6);
    bsipipe_model_dims_t d = {(bsipipe_model_family_t)cfg[0], cfg[1], cfg[2], cfg[3],
                              cfg[4], cfg[5], cfg[6]};
    int m = cfg[7], steps = cfg[8], S = d.seq_len, V = d.vocab;
    long n = bsipipe_model_params(&d);
    bsipipe_adamw_t hp = {hpv[0], hpv[1], hpv[2], hpv[3], hpv[4], hpv[5]};
    int *tok = get(&f, "tokens", 1, (uint64_t)m * S), *tgt = get(&f, "targets", 1, (uint64_t)m * S);
    float *p0 = get(&f, "params", 0, n), *tlog = get(&f, "logits", 0, (uint64_t)m * S * V);
    float *tgr = get(&f, "grads", 0, n), *tpa = get(&f, "params_after", 0, n);
    double tloss = *(double *)get(&f, "loss", 2, 1);
    double *tl = get(&f, "losses", 2, steps), *tg = get(&f, "gnorms", 2, steps);
    float *logits = kt_alloc(sizeof(float) * m * S * V);
    int three[4] = {0, S / 3, 2 * S / 3 + 1, S};
    bsipipe_ref_trainer_t *t;
    printf("%s (%s, L=%d d=%d H=%d F=%d V=%d S=%d m=%d, %ld params)\n", path, kt_family(&d),
           d.n_layers, d.hidden, d.n_heads, d.ffn_hidden, V, S, m, n);
    KT_CHECK(bsipipe_ref_trainer_create(&d, &hp, 1, &t));
    for (int k = 1; k <= 3; k += 2) {
        const int *st = k == 1 ? NULL : three;
        double loss, lsum = 0, rel;
        char what[32];
        printf(" k=%d\n", k);
        KT_CHECK(bsipipe_ref_trainer_set_params(t, p0));
        /* logits through the fp32 model path */
        for (int b = 0; b < m; b++) {
            double l;
            int whole[2] = {0, S};
            KT_CHECK(bsipipe_model_sequence(&d, p0, NULL, tok + b * S, tgt + b * S, k,
                                            st ? st : whole, 1.0, &l, logits + (size_t)b * S * V));
            lsum += l;
        }
        rel = kt_reldiff_f((long)m * S * V, logits, tlog);
        printf("  %-13s max rel diff %.3e\n", "logits", rel);
        fails += !(rel <= TOL);
        KT_CHECK(bsipipe_ref_trainer_forward_backward(t, m, tok, tgt, k, st, &loss));
        rel = fabs(loss - tloss) / fabs(tloss);
        printf("  %-13s C %.8f torch %.8f rel diff %.3e (forward-only %.3e)\n", "loss", loss,
               tloss, rel, fabs(lsum / (m * S) - tloss) / fabs(tloss));
        fails += !(rel <= TOL);
        fails += cmp_tensors(&d, "grads", bsipipe_ref_trainer_grads(t), tgr, verbose);
        for (int s = 0; s < steps; s++) {
            double gn;
            KT_CHECK(bsipipe_ref_trainer_forward_backward(t, m, tok, tgt, k, st, &loss));
            KT_CHECK(bsipipe_ref_trainer_step(t, &gn));
            rel = fmax(fabs(loss - tl[s]) / fabs(tl[s]), fabs(gn - tg[s]) / tg[s]);
            printf("  step %d        loss %.8f (torch %.8f) grad norm %.6f (torch %.6f) %.2e\n",
                   s + 1, loss, tl[s], gn, tg[s], rel);
            fails += !(rel <= TOL);
        }
        snprintf(what, sizeof what, "params+%d", steps);
        fails += cmp_tensors(&d, what, bsipipe_ref_trainer_params(t), tpa, verbose);
    }
    bsipipe_ref_trainer_destroy(t);
    free(logits);
    for (int i = 0; i < f.n; i++)
        free(f.r[i].data);
    return fails;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : NULL, *src = getenv("srcdir");
    const char *v = getenv("BSIPIPE_TEST_VERBOSE");
    char path[4096];
    int fails = 0;
    KT_CHECK(bsipipe_kernels_set_tiles(4, 8));
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "ref_llama.bin" : "ref_gpt.bin";
        if (dir)
            snprintf(path, sizeof path, "%s/%s", dir, name);
        else
            snprintf(path, sizeof path, "%s/tests/torch/%s", src ? src : ".", name);
        int r = run_file(path, v && *v && *v != '0');
        if (r == 99)
            return 99;
        fails += r;
    }
    printf("%s\n", fails ? "FAILED" : "C kernels match PyTorch within 1e-5");
    return fails ? 1 : 0;
}
