/* kernels/cpu/config.c: process-wide tuning knobs and a tiny parallel-for.
 * The knobs are not templated (one copy for both precisions). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsipipe_kernels.h"
#include "kernels/cpu/internal.h"

int bsipipe__tile_q = 64, bsipipe__tile_k = 128, bsipipe__threads = 1;

int bsipipe__blas_threads(void)
{
    /* looked up at run time: the BLAS need not be OpenBLAS */
    void *sym = dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    int (*fn)(void);
    if (!sym)
        return 1;
    memcpy(&fn, &sym, sizeof fn);
    return fn();
}

void bsipipe__attention_tiles(int head_dim, int *bq, int *bk)
{
    /* Attention no longer calls the BLAS (its own tile kernels), so the
     * tiles need no shrinking for a multi-threaded OpenBLAS any more. */
    (void)head_dim;
    *bq = bsipipe__tile_q;
    *bk = bsipipe__tile_k;
}

int bsipipe_kernels_set_tiles(int tile_q, int tile_k)
{
    if (tile_q < 1 || tile_k < 1)
        return -EINVAL;
    bsipipe__tile_q = tile_q;
    bsipipe__tile_k = tile_k;
    return 0;
}

int bsipipe_kernels_set_threads(int n)
{
    if (n < 1 || n > 1024)
        return -EINVAL;
    bsipipe__threads = n;
    return 0;
}

int bsipipe_kernels_get_threads(void) { return bsipipe__threads; }

struct pf_arg {
    int n, nt, tid, rc, rc_at;
    int (*fn)(void *, int);
    void *ctx;
};

static void *pf_run(void *p)
{
    struct pf_arg *a = p;
    a->rc = 0;
    a->rc_at = a->n;
    for (int i = a->tid; i < a->n; i += a->nt) {
        int rc = a->fn(a->ctx, i);
        if (rc && i < a->rc_at) {
            a->rc = rc;
            a->rc_at = i;
        }
    }
    return NULL;
}

int bsipipe__parallel_for(int n, int (*fn)(void *ctx, int i), void *ctx)
{
    int nt = bsipipe__threads < n ? bsipipe__threads : n, rc = 0, rc_at = n;
    struct pf_arg args[64];
    pthread_t th[64];
    int started[64] = {0};
    if (nt > 64)
        nt = 64;
    if (nt <= 1) {
        struct pf_arg a = {n, 1, 0, 0, 0, fn, ctx};
        pf_run(&a);
        return a.rc;
    }
    for (int t = 0; t < nt; t++) {
        args[t] = (struct pf_arg){n, nt, t, 0, 0, fn, ctx};
        /* thread 0's share runs on the caller */
        if (t > 0)
            started[t] = pthread_create(&th[t], NULL, pf_run, &args[t]) == 0;
    }
    pf_run(&args[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            pf_run(&args[t]); /* could not spawn: do its share here */
    }
    for (int t = 0; t < nt; t++)
        if (args[t].rc && args[t].rc_at < rc_at) {
            rc = args[t].rc;
            rc_at = args[t].rc_at;
        }
    return rc;
}
