/* tests/grad_check.h: compares a whole-model gradient (or parameter) vector
 * with a reference, tensor by tensor, for the equivalence tests. */
#ifndef BSIPIPE_TESTS_GRAD_CHECK_H
#define BSIPIPE_TESTS_GRAD_CHECK_H

#include "kernels/bsipipe_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The worst over the tensors of max|a-b| / max|b| (max|a-b| where b is all
 * zero); a NaN anywhere makes it infinite. The worst tensor's name goes to
 * worst (wl bytes) when worst is not NULL. */
static inline double grad_error(const bsipipe_model_dims_t *d, const float *a, const float *b, char *worst,
                                size_t wl)
{
    int nt = bsipipe_model_tensors(d, NULL, 0);
    bsipipe_tensor_info_t *ti = malloc(sizeof *ti * (size_t)nt);
    if (!ti)
        return INFINITY;
    bsipipe_model_tensors(d, ti, nt);
    double err = 0;
    for (int i = 0; i < nt; i++) {
        long n = (long)ti[i].rows * ti[i].cols;
        double diff = 0, big = 0;
        for (long j = 0; j < n; j++) {
            double x = a[ti[i].offset + j], y = b[ti[i].offset + j];
            if (!(fabs(x - y) <= diff)) /* NaN too */
                diff = isnan(x - y) ? INFINITY : fabs(x - y);
            if (fabs(y) > big)
                big = fabs(y);
        }
        double r = big > 0 ? diff / big : diff;
        if (r > err) {
            err = r;
            if (worst)
                snprintf(worst, wl, "%s", ti[i].name);
        }
    }
    free(ti);
    return err;
}

#endif
