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

int kern_tile_q = 64, kern_tile_k = 128, kern_threads = 1;

/* OpenBLAS's thread count, set and read through dlsym (the BLAS need not
 * be OpenBLAS); the pointers are looked up once. */
static void (*blas_set)(int);
static int (*blas_get)(void);
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_lookup(void)
{
    void *set = dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
    void *get = dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    if (set && get) {
        memcpy(&blas_set, &set, sizeof blas_set);
        memcpy(&blas_get, &get, sizeof blas_get);
    }
}

int kern_blas_threads(void)
{
    pthread_once(&blas_once, blas_lookup);
    return blas_get ? blas_get() : 1;
}

int kern_blas_single(void)
{
    int n = kern_blas_threads();
    if (n > 1)
        blas_set(1);
    return n;
}

void kern_blas_restore(int n)
{
    if (n > 1 && blas_set)
        blas_set(n);
}

void kern_attention_tiles(int head_dim, int *bq, int *bk)
{
    /* Attention no longer calls the BLAS (its own tile kernels), so the
     * tiles need no shrinking for a multi-threaded OpenBLAS any more. */
    (void)head_dim;
    *bq = kern_tile_q;
    *bk = kern_tile_k;
}

int bsipipe_kernels_set_tiles(int tile_q, int tile_k)
{
    if (tile_q < 1 || tile_k < 1)
        return -EINVAL;
    kern_tile_q = tile_q;
    kern_tile_k = tile_k;
    return 0;
}

int bsipipe_kernels_set_threads(int n)
{
    if (n < 1 || n > 1024)
        return -EINVAL;
    kern_threads = n;
    return 0;
}

int bsipipe_kernels_get_threads(void) { return kern_threads; }

/* The parallel-for runs on a persistent pool: the block calls it dozens of
 * times per piece (heads, row blocks, the parts of every matrix product),
 * and a pthread_create per call plus OpenBLAS's own spinning server made
 * threads idle between the many short calls. Workers spin a little after a
 * job (the next one usually follows within microseconds), then sleep on a
 * condition variable. */
#define POOL_MAX 64
#define POOL_SPIN 4000 /* pause loops before sleeping (~0.1-0.5 ms) */

/* One job: indices are claimed from a shared counter, so a thread that the
 * OS delays (a shared machine) does not hold the others up. Every index is
 * a self-contained computation writing its own outputs, so which thread
 * runs it changes no bit. */
struct pf_job {
    int n, next;
    int (*fn)(void *, int);
    void *ctx;
};

struct pf_arg {
    struct pf_job *job;
    int rc, rc_at;
};

static void pf_run(struct pf_arg *a)
{
    struct pf_job *j = a->job;
    a->rc = 0;
    a->rc_at = j->n;
    for (;;) {
        int i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED), rc;
        if (i >= j->n)
            break;
        rc = j->fn(j->ctx, i);
        if (rc && i < a->rc_at) {
            a->rc = rc;
            a->rc_at = i;
        }
    }
}

static struct {
    pthread_t th[POOL_MAX];
    int started, quit, busy, nt, active;
    unsigned long gen, open, gen0[POOL_MAX]; /* open: the job taking workers, 0: none */
    struct pf_arg args[POOL_MAX];
} pool;
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_work = PTHREAD_COND_INITIALIZER, pool_done = PTHREAD_COND_INITIALIZER;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Worker w joins each job it wakes for (active++) and runs args[w + 1]
 * unless the job is already closed: the caller closes it when its own share
 * ends and then waits only for the workers that joined, never for one the
 * OS has not woken yet (on a loaded machine that can take a time slice). */
static void *pool_worker(void *p)
{
    int w = (int)(long)p;
    unsigned long seen = pool.gen0[w]; /* the generation at its creation */
    for (;;) {
        unsigned long g = __atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE);
        for (int i = 0; g == seen && i < POOL_SPIN; i++) {
            cpu_relax();
            g = __atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE);
        }
        if (g == seen) {
            pthread_mutex_lock(&pool_mu);
            while (pool.gen == seen && !pool.quit)
                pthread_cond_wait(&pool_work, &pool_mu);
            g = pool.gen;
            int quit = pool.quit;
            pthread_mutex_unlock(&pool_mu);
            if (quit)
                return NULL;
        }
        seen = g;
        __atomic_add_fetch(&pool.active, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&pool.open, __ATOMIC_SEQ_CST) == g && w + 1 < pool.nt)
            pf_run(&pool.args[w + 1]);
        if (__atomic_sub_fetch(&pool.active, 1, __ATOMIC_SEQ_CST) == 0 &&
            __atomic_load_n(&pool.open, __ATOMIC_SEQ_CST) != g) {
            pthread_mutex_lock(&pool_mu);
            pthread_cond_signal(&pool_done);
            pthread_mutex_unlock(&pool_mu);
        }
    }
}

/* joined at exit, so that memory checkers see no live threads */
__attribute__((destructor)) static void pool_stop(void)
{
    pthread_mutex_lock(&pool_mu);
    pool.quit = 1;
    pthread_cond_broadcast(&pool_work);
    pthread_mutex_unlock(&pool_mu);
    for (int t = 0; t < pool.started; t++)
        pthread_join(pool.th[t], NULL);
    pool.started = 0;
}

int kern_parallel_for(int n, int (*fn)(void *ctx, int i), void *ctx)
{
    int nt = kern_threads < n ? kern_threads : n, rc = 0, rc_at = n;
    struct pf_job job = {n, 0, fn, ctx};
    struct pf_arg one = {&job, 0, 0}, *args = &one;
    if (nt > POOL_MAX)
        nt = POOL_MAX;
    /* one job at a time: a second caller (another thread, or a nested call)
     * runs its indices itself */
    int own = nt > 1 && !__atomic_exchange_n(&pool.busy, 1, __ATOMIC_ACQUIRE);
    if (own) {
        pthread_mutex_lock(&pool_mu);
        while (pool.started < nt - 1) {
            pool.gen0[pool.started] = pool.gen;
            if (pthread_create(&pool.th[pool.started], NULL, pool_worker,
                               (void *)(long)pool.started))
                break;
            pool.started++;
        }
        pthread_mutex_unlock(&pool_mu);
        if (pool.started < nt - 1)
            nt = pool.started + 1; /* could not spawn them all: fewer threads */
    }
    if (!own || nt <= 1) {
        pf_run(&one);
        nt = 1;
    } else {
        args = pool.args;
        for (int t = 0; t < nt; t++)
            args[t] = (struct pf_arg){&job, 0, n};
        pool.nt = nt;
        pthread_mutex_lock(&pool_mu);
        /* open before the workers can see the new generation */
        __atomic_store_n(&pool.open, pool.gen + 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&pool.gen, 1, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&pool_work);
        pthread_mutex_unlock(&pool_mu);
        pf_run(&args[0]); /* the caller works too, until no index is left */
        __atomic_store_n(&pool.open, 0, __ATOMIC_SEQ_CST);
        for (int i = 0; __atomic_load_n(&pool.active, __ATOMIC_SEQ_CST) && i < POOL_SPIN; i++)
            cpu_relax();
        if (__atomic_load_n(&pool.active, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&pool_mu);
            while (__atomic_load_n(&pool.active, __ATOMIC_SEQ_CST))
                pthread_cond_wait(&pool_done, &pool_mu);
            pthread_mutex_unlock(&pool_mu);
        }
    }
    for (int t = 0; t < nt; t++)
        if (args[t].rc && args[t].rc_at < rc_at) {
            rc = args[t].rc;
            rc_at = args[t].rc_at;
        }
    if (own)
        __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
    return rc;
}
