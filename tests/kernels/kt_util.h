/* tests/kernels/kt_util.h: helpers shared by the kernel tests (header-only). */
#ifndef BSIPIPE_KT_UTIL_H
#define BSIPIPE_KT_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsipipe_kernels.h"

#define KT_CHECK(call)                                                              \
    do {                                                                            \
        int kt_rc_ = (call);                                                        \
        if (kt_rc_) {                                                               \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call,   \
                    kt_rc_);                                                        \
            exit(99);                                                               \
        }                                                                           \
    } while (0)

static inline void *kt_alloc(size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(99);
    }
    return p;
}

/* max |a - b| / max |b| over n elements (normwise relative difference, so a
 * tensor's tiny elements do not dominate); returns max|a-b| when b == 0. */
static inline double kt_reldiff_f(long n, const float *a, const float *b)
{
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double dd = fabs((double)a[i] - b[i]);
        if (dd > md || dd != dd)
            md = dd;
        if (fabs(b[i]) > mb)
            mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

static inline double kt_reldiff_d(long n, const double *a, const double *b)
{
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double dd = fabs(a[i] - b[i]);
        if (dd > md || dd != dd)
            md = dd;
        if (fabs(b[i]) > mb)
            mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* Deterministic tokens for tests (LCG). */
static inline void kt_tokens(int n, int vocab, unsigned seed, int *out)
{
    unsigned s = seed * 2654435761u + 12345u;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        out[i] = (int)((s >> 16) % (unsigned)vocab);
    }
}

static inline const char *kt_family(const bsipipe_model_dims_t *d)
{
    return d->family == BSIPIPE_MODEL_GPT ? "gpt" : "llama";
}

#endif
