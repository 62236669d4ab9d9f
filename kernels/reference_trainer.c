/* reference_trainer.c: see reference_trainer.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference_trainer.h"

struct bsipipe_ref_trainer {
    bsipipe_model_dims_t dims;
    bsipipe_adamw_t opt;
    long n, step;
    float *params, *grads, *m, *v; /* one allocation, params first */
};

int bsipipe_ref_trainer_create(const bsipipe_model_dims_t *dims, const bsipipe_adamw_t *opt,
                               unsigned long long seed, bsipipe_ref_trainer_t **out)
{
    bsipipe_ref_trainer_t *t;
    int rc;
    if (!out || !opt || bsipipe_model_dims_check(dims))
        return -EINVAL;
    if (!(opt->lr >= 0) || !(opt->beta1 >= 0 && opt->beta1 < 1) ||
        !(opt->beta2 >= 0 && opt->beta2 < 1) || !(opt->eps >= 0) || !(opt->weight_decay >= 0))
        return -EINVAL;
    t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->dims = *dims;
    t->opt = *opt;
    t->n = bsipipe_model_params(dims);
    t->params = calloc((size_t)t->n * 4, sizeof(float));
    if (!t->params) {
        free(t);
        return -ENOMEM;
    }
    t->grads = t->params + t->n;
    t->m = t->grads + t->n;
    t->v = t->m + t->n;
    rc = bsipipe_model_init(dims, seed, t->params);
    if (rc) {
        bsipipe_ref_trainer_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void bsipipe_ref_trainer_destroy(bsipipe_ref_trainer_t *t)
{
    if (!t)
        return;
    free(t->params);
    free(t);
}

long bsipipe_ref_trainer_n_params(const bsipipe_ref_trainer_t *t) { return t ? t->n : -EINVAL; }
float *bsipipe_ref_trainer_params(bsipipe_ref_trainer_t *t) { return t ? t->params : NULL; }
const float *bsipipe_ref_trainer_grads(const bsipipe_ref_trainer_t *t)
{
    return t ? t->grads : NULL;
}
long bsipipe_ref_trainer_steps(const bsipipe_ref_trainer_t *t) { return t ? t->step : -EINVAL; }

int bsipipe_ref_trainer_set_params(bsipipe_ref_trainer_t *t, const float *params)
{
    if (!t || !params)
        return -EINVAL;
    memcpy(t->params, params, sizeof(float) * (size_t)t->n);
    memset(t->grads, 0, sizeof(float) * (size_t)t->n * 3);
    t->step = 0;
    return 0;
}

int bsipipe_ref_trainer_forward_backward(bsipipe_ref_trainer_t *t, int m, const int *tokens,
                                         const int *targets, int k, const int *starts,
                                         double *loss)
{
    int S, whole[2], rc = 0;
    double sum = 0, scale;
    if (!t || m < 1 || !tokens || !targets || !loss || k < 1 || (!starts && k != 1))
        return -EINVAL;
    S = t->dims.seq_len;
    whole[0] = 0;
    whole[1] = S;
    if (!starts)
        starts = whole;
    memset(t->grads, 0, sizeof(float) * (size_t)t->n);
    scale = 1.0 / ((double)m * S); /* token mean over the whole iteration */
    for (int b = 0; b < m && !rc; b++) {
        double l = 0;
        rc = bsipipe_model_sequence(&t->dims, t->params, t->grads, tokens + (size_t)b * S,
                                    targets + (size_t)b * S, k, starts, scale, &l, NULL);
        sum += l;
    }
    *loss = sum * scale;
    return rc;
}

int bsipipe_ref_trainer_step(bsipipe_ref_trainer_t *t, double *gnorm)
{
    int rc;
    if (!t)
        return -EINVAL;
    rc = bsipipe_model_adamw_step(&t->dims, &t->opt, t->step + 1, t->params, t->grads, t->m,
                                  t->v, gnorm);
    if (!rc)
        t->step++;
    return rc;
}

int bsipipe_ref_trainer_iteration(bsipipe_ref_trainer_t *t, int m, const int *tokens,
                                  const int *targets, int k, const int *starts, double *loss,
                                  double *gnorm)
{
    int rc = bsipipe_ref_trainer_forward_backward(t, m, tokens, targets, k, starts, loss);
    return rc ? rc : bsipipe_ref_trainer_step(t, gnorm);
}
