/* bsipipe-ref: runs the sequential reference trainer (kernels/reference_trainer.h)
 * on synthetic data and prints loss and gradient norm per iteration. The
 * engine's runs are compared with this one (same seed, data and partition).
 *
 * Data: for iteration it and micro-batch b, a periodic token stream
 * x[i] = pattern[(i + b + it) mod P] (P = 13), the pattern drawn from the seed
 * by an LCG, targets = the next token; a model learns it quickly, so the loss
 * falling is a visible sanity check. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/cli.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_partition.h"
#include "kernels/reference_trainer.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bsipipe-ref [options]\n"
            "  --family gpt|llama    model family (gpt)\n"
            "  --layers L --hidden d --heads H --ffn F --vocab V --seq S\n"
            "                        dims (2, 64, 4, 4d for gpt / 172 for llama, 64, 128)\n"
            "  -m N                  micro-batches per iteration (2)\n"
            "  -k N                  pieces per sequence (1)\n"
            "  --partition even|balanced   piece boundaries (balanced)\n"
            "  --iters N             iterations (10)\n"
            "  --seed N              init and data seed (1)\n"
            "  --lr X --wd X --clip X     AdamW lr (1e-3), weight decay (0.1), clip (1.0)\n"
            "  --version             the bsipipe version\n"
            "  --save FILE           write the final parameters (raw fp32, layout of\n"
            "                        kernels/bsipipe_model.h)\n");
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void make_batch(const bsipipe_model_dims_t *d, int m, int it, unsigned long long seed,
                       int *tok, int *tgt)
{
    enum { P = 13 };
    int pat[P];
    unsigned long long s = seed * 6364136223846793005ULL + 1;
    for (int i = 0; i < P; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        pat[i] = (int)((s >> 33) % (unsigned long long)d->vocab);
    }
    for (int b = 0; b < m; b++)
        for (int i = 0; i < d->seq_len; i++) {
            tok[b * d->seq_len + i] = pat[(i + b + it) % P];
            tgt[b * d->seq_len + i] = pat[(i + b + it + 1) % P];
        }
}

int main(int argc, char **argv)
{
    bsipipe_model_dims_t d = {BSIPIPE_MODEL_GPT, 2, 64, 4, 0, 64, 128};
    bsipipe_adamw_t hp = {1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0};
    int m = 2, k = 1, iters = 10, balanced = 1, rc;
    unsigned long long seed = 1;
    const char *save = NULL;
    static const struct option opts[] = {
        {"family", 1, 0, 'f'}, {"layers", 1, 0, 'L'}, {"hidden", 1, 0, 'd'},
        {"heads", 1, 0, 'H'},  {"ffn", 1, 0, 'F'},    {"vocab", 1, 0, 'V'},
        {"seq", 1, 0, 'S'},    {"partition", 1, 0, 'p'}, {"iters", 1, 0, 'i'},
        {"seed", 1, 0, 's'},   {"lr", 1, 0, 'l'},     {"wd", 1, 0, 'w'},
        {"clip", 1, 0, 'c'},   {"save", 1, 0, 'o'},   {"version", 0, 0, 1000}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    int c, bad = 0;
    const char *P = "bsipipe-ref";
    opterr = 0;
    while (!bad && (c = cli_getopt(argc, argv, "m:k:h", opts, "bsipipe-ref")) != -1) {
        switch (c) {
        case 'f':
            if (!strcmp(optarg, "gpt"))
                d.family = BSIPIPE_MODEL_GPT;
            else if (!strcmp(optarg, "llama"))
                d.family = BSIPIPE_MODEL_LLAMA;
            else {
                fprintf(stderr, "bsipipe-ref: unknown family '%s' (gpt or llama)\n", optarg);
                return 2;
            }
            break;
        case 'L': bad = cli_parse_int(P, "--layers", optarg, 1, 4096, &d.n_layers); break;
        case 'd': bad = cli_parse_int(P, "--hidden", optarg, 1, 65536, &d.hidden); break;
        case 'H': bad = cli_parse_int(P, "--heads", optarg, 1, 4096, &d.n_heads); break;
        case 'F': bad = cli_parse_int(P, "--ffn", optarg, 1, 1 << 20, &d.ffn_hidden); break;
        case 'V': bad = cli_parse_int(P, "--vocab", optarg, 1, 1 << 24, &d.vocab); break;
        case 'S': bad = cli_parse_int(P, "--seq", optarg, 1, 1 << 20, &d.seq_len); break;
        case 'm': bad = cli_parse_int(P, "-m", optarg, 1, 4096, &m); break;
        case 'k': bad = cli_parse_int(P, "-k", optarg, 1, 4096, &k); break;
        case 'p':
            if (strcmp(optarg, "even") && strcmp(optarg, "balanced")) {
                fprintf(stderr, "bsipipe-ref: --partition even or balanced\n");
                return 2;
            }
            balanced = !strcmp(optarg, "balanced");
            break;
        case 'i': bad = cli_parse_int(P, "--iters", optarg, 0, 1000000, &iters); break;
        case 's': bad = cli_parse_ull(P, "--seed", optarg, &seed); break;
        case 'l': bad = cli_parse_double(P, "--lr", optarg, 0, 10, &hp.lr); break;
        case 'w': bad = cli_parse_double(P, "--wd", optarg, 0, 10, &hp.weight_decay); break;
        case 'c': bad = cli_parse_double(P, "--clip", optarg, 0, 1e30, &hp.grad_clip); break;
        case 'o': save = optarg; break;
        case 'h': usage(stdout); return 0;
        case 1000: cli_print_version("bsipipe-ref"); return 0;
        default:
            return cli_bad_option("bsipipe-ref", argv[optind - 1]);
        }
    }
    if (bad)
        return 2;
    if (cli_no_operands("bsipipe-ref", argc, argv, optind))
        return 2;
    if (d.ffn_hidden == 0)
        d.ffn_hidden = d.family == BSIPIPE_MODEL_GPT ? 4 * d.hidden : (8 * d.hidden / 3 + 7) / 8 * 8;
    if (bsipipe_model_dims_check(&d)) {
        fprintf(stderr, "bsipipe-ref: invalid model dims (all >= 1, hidden %% heads == 0, "
                        "even head_dim for llama)\n");
        return 2;
    }
    int *starts = malloc(sizeof(int) * (size_t)(k > 0 ? k + 1 : 1));
    int *tok = malloc(sizeof(int) * (size_t)m * d.seq_len);
    int *tgt = malloc(sizeof(int) * (size_t)m * d.seq_len);
    if (!starts || !tok || !tgt) {
        fprintf(stderr, "bsipipe-ref: out of memory\n");
        return 1;
    }
    rc = balanced ? bsipipe_partition_balanced(&d, k, 1, starts)
                  : bsipipe_partition_even(d.seq_len, k, 1, starts);
    if (rc) {
        fprintf(stderr, "bsipipe-ref: partition: %s (%s)\n", bsipipe_strerror(rc),
                bsipipe_error_detail());
        return 2;
    }
    bsipipe_ref_trainer_t *t;
    rc = bsipipe_ref_trainer_create(&d, &hp, seed, &t);
    if (rc) {
        fprintf(stderr, "bsipipe-ref: %s\n", bsipipe_strerror(rc));
        return 1;
    }
    printf("# bsipipe-ref: %s L=%d d=%d H=%d F=%d V=%d S=%d, %ld params; m=%d k=%d (%s:",
           d.family == BSIPIPE_MODEL_GPT ? "gpt" : "llama", d.n_layers, d.hidden, d.n_heads,
           d.ffn_hidden, d.vocab, d.seq_len, bsipipe_ref_trainer_n_params(t), m, k,
           balanced ? "balanced" : "even");
    for (int j = 0; j <= k; j++)
        printf(" %d", starts[j]);
    printf("); AdamW lr %g wd %g clip %g; seed %llu\n", hp.lr, hp.weight_decay, hp.grad_clip,
           seed);
    printf("%5s %12s %12s %10s %12s\n", "iter", "loss", "grad_norm", "time_s", "tokens/s");
    for (int it = 0; it < iters; it++) {
        double loss, gn, t0 = now(), dt;
        make_batch(&d, m, it, seed, tok, tgt);
        rc = bsipipe_ref_trainer_iteration(t, m, tok, tgt, k, starts, &loss, &gn);
        if (rc) {
            fprintf(stderr, "bsipipe-ref: iteration %d: %s\n", it, bsipipe_strerror(rc));
            return 1;
        }
        dt = now() - t0;
        printf("%5d %12.6f %12.6f %10.4f %12.1f\n", it, loss, gn, dt, m * d.seq_len / dt);
    }
    if (save) {
        FILE *f = fopen(save, "wb");
        long n = bsipipe_ref_trainer_n_params(t);
        if (!f || fwrite(bsipipe_ref_trainer_params(t), sizeof(float), (size_t)n, f) != (size_t)n ||
            fclose(f)) {
            fprintf(stderr, "bsipipe-ref: cannot write %s\n", save);
            return 1;
        }
        printf("# saved %ld fp32 parameters to %s\n", n, save);
    }
    bsipipe_ref_trainer_destroy(t);
    free(starts);
    free(tok);
    free(tgt);
    return 0;
}
