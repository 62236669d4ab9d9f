/* apps/train_log.c: --log-json (apps/train_log.h). */
#include "apps/train_log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct train_log {
    FILE *f;
    double peak; /* FLOP/s of all devices; 0: no MFU */
};

double train_log_iteration_flops(const bsipipe_model_dims_t *d, int m)
{
    double fwd = bsipipe_model_head_flops(d, d->seq_len);
    for (int l = 0; l < d->n_layers; l++)
        fwd += bsipipe_model_layer_flops(d, 0, d->seq_len);
    return 3.0 * fwd * m;
}

int train_log_open(const char *path, double peak_tflops, int devices, train_log_t **out)
{
    *out = NULL;
    train_log_t *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    if (!(l->f = fopen(path, "a"))) {
        int e = errno;
        fprintf(stderr, "bsipipe-train: --log-json %s: %s\n", path, strerror(e));
        free(l);
        return -e;
    }
    l->peak = peak_tflops > 0 ? peak_tflops * 1e12 * devices : 0;
    *out = l;
    return 0;
}

static void number(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ", \"%s\": %.9g", key, v);
    else
        fprintf(f, ", \"%s\": null", key); /* JSON has no NaN */
}

void train_log_iteration(train_log_t *l, int it, int iters, double loss, double gnorm, double lr, double tokens_s,
                         double wall_s, double flops, double bubble, double val_loss)
{
    if (!l)
        return;
    double achieved = wall_s > 0 ? flops / wall_s : NAN;
    fprintf(l->f, "{\"iteration\": %d, \"iterations\": %d", it, iters);
    number(l->f, "loss", loss);
    number(l->f, "grad_norm", gnorm);
    number(l->f, "lr", lr);
    number(l->f, "tokens_per_s", tokens_s);
    number(l->f, "iteration_s", wall_s);
    number(l->f, "tflops", achieved / 1e12);
    number(l->f, "mfu", l->peak > 0 ? achieved / l->peak : NAN);
    number(l->f, "bubble", bubble);
    number(l->f, "validation_loss", val_loss);
    fputs("}\n", l->f);
    fflush(l->f);
}

void train_log_close(train_log_t *l)
{
    if (!l)
        return;
    fclose(l->f);
    free(l);
}
