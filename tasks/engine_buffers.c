/* engine_buffers.c: the engine's per-iteration buffers (activations, stashes,
 * K/V caches, their gradients, receive buffers): how each gets a StarPU
 * handle for an iteration and gives it back after its last use.
 *
 * Two ways (bsipipe_engine_set_buffer_reuse):
 * - registered each iteration: StarPU allocates a buffer at its first write,
 *   and the handle is unregistered once the task of its last use ends;
 * - reused (the default in one process without tensor parallelism, for a
 *   plan proven free of deadlock): each
 *   device keeps a pool of handles, by size, registered once. At submission
 *   a buffer's first writer takes a handle of its size from its device's
 *   pool (a new one when the pool has none), and the submission of its last
 *   use puts it back for the next first writer. StarPU's sequential
 *   consistency orders that writer after every task submitted before it on
 *   the handle, so the reuse holds whatever order the workers run in, and
 *   the memory StarPU allocated at the handle's first write is never freed
 *   and allocated again (a third of the engine's cost per task at w = 2
 *   without device time: docs/benchmarks.md, "Where the time goes"). Every access must
 *   then be a task's: an eager send that finds no posted receive copies its
 *   data aside (bsipipe_transport_set_offer_staging), so its producer's
 *   buffer is free when the producer ends.
 *
 * The pool is as large as the buffers live at once in submission order
 * (the simulator's), per device and size: bsipipe_engine_buffer_bytes.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bsipipe_error.h"
#include "tasks/engine_internal.h"

struct pool_spare {
    starpu_data_handle_t h;
    long released; /* slot of the op whose submission gave it back, this iteration (LONG_MIN: earlier) */
};

struct pool_class { /* a device's spare handles of one size */
    uint32_t nx;
    long n, cap;
    struct pool_spare *spare;
};

struct engine_pool { /* per device */
    struct pool_class *cls;
    long n_cls, cap_cls;
    double bytes; /* of every handle it ever registered */
};

/* The buffer lists in use-record order: record u of list l, element i is
 * base + i, with base the summed lengths of the lists before l. */
enum { N_LISTS = 8 };

static void buffer_lists(const bsipipe_engine_t *e, starpu_data_handle_t *lists[N_LISTS],
                         const uint32_t *sizes[N_LISTS], long lens[N_LISTS])
{
    long n_act = (long)e->m * e->k * e->C * e->T, n_kv = (long)e->m * e->C * e->T;
    long nch = (long)bsipipe_schedule_n_channels(e->sched) * e->T;
    starpu_data_handle_t *l[N_LISTS] = {e->h_x_out, e->h_stash, e->h_dx, e->h_dy, e->h_wstash, e->h_kv, e->h_dkv,
                                        e->h_recv};
    const uint32_t *s[N_LISTS] = {e->n_x_out, e->n_stash, e->n_dx, e->n_dy, e->n_wstash, e->n_kv, e->n_dkv, e->n_recv};
    long n[N_LISTS] = {n_act, n_act, n_act, n_act, n_act, n_kv, n_kv, nch};
    for (int i = 0; i < N_LISTS; i++) {
        lists[i] = l[i];
        if (sizes)
            sizes[i] = s[i];
        lens[i] = n[i];
    }
}

/* The use record of a handle slot of the engine's lists, or NULL. */
static struct buffer_use *use_of_slot(bsipipe_engine_t *e, starpu_data_handle_t *slot, uint32_t *nx)
{
    starpu_data_handle_t *lists[N_LISTS];
    const uint32_t *sizes[N_LISTS];
    long lens[N_LISTS], base = 0;
    buffer_lists(e, lists, sizes, lens);
    for (int l = 0; l < N_LISTS; base += lens[l], l++)
        if (slot >= lists[l] && slot < lists[l] + lens[l]) {
            *nx = sizes[l][slot - lists[l]];
            return &e->uses[base + (slot - lists[l])];
        }
    return NULL;
}

/* arr (n elements used of *cap, each `size` bytes) with room for one
 * more: arr itself, or grown; NULL when out of memory (arr unchanged). */
static void *grow(void *arr, long n, long *cap, size_t size)
{
    if (n < *cap)
        return arr;
    long more = *cap ? 2 * *cap : 8;
    void *grown = realloc(arr, (size_t)more * size);
    if (grown)
        *cap = more;
    return grown;
}

/* The device pool's class of nx-float handles; with `add`, created when
 * missing (NULL when out of memory). */
static struct pool_class *pool_class(struct engine_pool *p, uint32_t nx, int add)
{
    for (long i = 0; i < p->n_cls; i++)
        if (p->cls[i].nx == nx)
            return &p->cls[i];
    struct pool_class *cls = add ? grow(p->cls, p->n_cls, &p->cap_cls, sizeof *p->cls) : NULL;
    if (!cls)
        return NULL;
    p->cls = cls;
    struct pool_class *c = &p->cls[p->n_cls++];
    memset(c, 0, sizeof *c);
    c->nx = nx;
    return c;
}

/* A spare handle of nx floats given back before slot `earliest` (the
 * first slot the taker may run at: a receive posted ahead runs before the
 * ops in front of it, and a handle of one of those would make it wait for
 * them), the last given back first; else a new one. */
static starpu_data_handle_t pool_take(bsipipe_engine_t *e, int device, uint32_t nx, long earliest)
{
    struct engine_pool *p = &e->pool[device];
    struct pool_class *c = pool_class(p, nx, 0);
    for (long j = c ? c->n - 1 : -1; j >= 0; j--)
        if (c->spare[j].released < earliest) {
            starpu_data_handle_t h = c->spare[j].h;
            memmove(&c->spare[j], &c->spare[j + 1], (size_t)(c->n - j - 1) * sizeof *c->spare);
            c->n--;
            return h;
        }
    starpu_data_handle_t h;
    starpu_vector_data_register(&h, -1, 0, nx, sizeof(float)); /* allocated by StarPU at its first write */
    p->bytes += (double)nx * sizeof(float);
    return h;
}

/* A pool's handle that goes out of the pool: unregistered once its tasks end. */
static void pool_forget(bsipipe_engine_t *e, int device, starpu_data_handle_t h)
{
    e->pool[device].bytes -= (double)starpu_vector_get_nx(h) * sizeof(float);
    starpu_data_unregister_submit(h);
}

/* Keeps h for the device's next buffer of its size; 0, or -ENOMEM (then
 * it is unregistered once its tasks end). */
static int pool_put(bsipipe_engine_t *e, int device, starpu_data_handle_t h, long released)
{
    struct pool_class *c = pool_class(&e->pool[device], (uint32_t)starpu_vector_get_nx(h), 1);
    struct pool_spare *spare = c ? grow(c->spare, c->n, &c->cap, sizeof *c->spare) : NULL;
    if (!spare) {
        pool_forget(e, device, h);
        return -ENOMEM;
    }
    c->spare = spare;
    starpu_data_set_user_data(h, NULL); /* a spare handle is no buffer's */
    c->spare[c->n++] = (struct pool_spare){h, released};
    return 0;
}

int engine_buffers_init(bsipipe_engine_t *e)
{
    starpu_data_handle_t *lists[N_LISTS];
    long lens[N_LISTS], n = 0;
    buffer_lists(e, lists, NULL, lens);
    for (int l = 0; l < N_LISTS; l++)
        n += lens[l];
    e->uses = calloc((size_t)(n > 0 ? n : 1), sizeof *e->uses);
    e->pool = calloc((size_t)e->W, sizeof *e->pool);
    return e->uses && e->pool ? 0 : -ENOMEM;
}

/* Every spare handle unregistered (its memory freed), the pools empty. */
static void pools_drop(bsipipe_engine_t *e)
{
    for (int d = 0; e->pool && d < e->W; d++) {
        struct engine_pool *p = &e->pool[d];
        for (long i = 0; i < p->n_cls; i++) {
            for (long j = 0; j < p->cls[i].n; j++)
                starpu_data_unregister(p->cls[i].spare[j].h);
            free(p->cls[i].spare);
        }
        free(p->cls);
        memset(p, 0, sizeof *p);
    }
}

void engine_buffers_free(bsipipe_engine_t *e)
{
    pools_drop(e);
    free(e->pool);
    e->pool = NULL;
    free(e->uses);
    free(e->use_counts);
    e->uses = NULL;
    e->use_counts = NULL;
}

void engine_buffers_begin(bsipipe_engine_t *e, int reuse)
{
    starpu_data_handle_t *lists[N_LISTS];
    const uint32_t *sizes[N_LISTS];
    long lens[N_LISTS], u = 0;
    buffer_lists(e, lists, sizes, lens);
    /* Reused handles are bound at their first writer's submission; the
     * first iteration's dry run still needs one handle per buffer to count
     * its uses (engine_buffers_counted drops them, never allocated). */
    e->pool_active = reuse && e->pool;
    bsipipe_transport_set_offer_staging(e->transport, e->pool_active); /* no producer's buffer read after it ends */
    int each = !e->pool_active || !e->use_counts;
    for (int l = 0; l < N_LISTS; l++)
        for (long i = 0; i < lens[l]; i++, u++) {
            starpu_data_handle_t *h = &lists[l][i];
            *h = NULL;
            e->uses[u].left = 0;
            e->uses[u].slot = h;
            e->uses[u].device = -1;
            if (each && sizes[l][i] && (!e->use_counts || e->use_counts[u] > 0)) { /* unused: not at all */
                starpu_vector_data_register(h, -1, 0, sizes[l][i], sizeof(float));
                starpu_data_set_user_data(*h, &e->uses[u]);
            }
        }
    e->n_uses = u;
}

void engine_buffers_counted(bsipipe_engine_t *e)
{
    for (long u = 0; u < e->n_uses; u++) {
        starpu_data_handle_t h = *e->uses[u].slot;
        if (!h || (!e->pool_active && e->uses[u].left != 0))
            continue;
        *e->uses[u].slot = NULL; /* no task has it yet: unregistered at once */
        starpu_data_unregister_submit(h);
    }
}

void engine_buffers_end(bsipipe_engine_t *e)
{
    for (long u = 0; u < e->n_uses; u++) {
        /* Every task has ended: the handle is taken before it is read. */
        starpu_data_handle_t h = __atomic_exchange_n(e->uses[u].slot, NULL, __ATOMIC_ACQ_REL);
        if (!h)
            continue;
        if (!starpu_data_get_user_data(h)) { /* not a per-iteration buffer: left in place */
            *e->uses[u].slot = h;
            continue;
        }
        if (e->pool_active && e->uses[u].device >= 0)
            pool_put(e, e->uses[u].device, h, LONG_MIN); /* uses left: the iteration stopped half way */
        else
            starpu_data_unregister_submit(h);
    }
    /* Every task has ended: a spare may go to any op of the next iteration. */
    for (int d = 0; e->pool && d < e->W; d++)
        for (long i = 0; i < e->pool[d].n_cls; i++)
            for (long j = 0; j < e->pool[d].cls[i].n; j++)
                e->pool[d].cls[i].spare[j].released = LONG_MIN;
    e->pool_active = 0;
}

starpu_data_handle_t engine_buffer_bind(bsipipe_engine_t *e, starpu_data_handle_t *slot, int device, long earliest,
                                        enum starpu_data_access_mode mode)
{
    if (*slot || !e->pool_active || !(mode & STARPU_W))
        return *slot;
    uint32_t nx;
    struct buffer_use *use = use_of_slot(e, slot, &nx);
    if (!use || nx == 0 || use->left <= 0) /* not a pooled buffer, or one no op uses */
        return *slot;
    starpu_data_handle_t h = pool_take(e, device, nx, earliest);
    starpu_data_set_user_data(h, use);
    use->device = device;
    *slot = h;
    return h;
}

void engine_buffer_use(bsipipe_engine_t *e, starpu_data_handle_t h, int dry_run)
{
    if (dry_run) {
        struct buffer_use *use = starpu_data_get_user_data(h);
        if (use)
            use->left++;
    } else {
        engine_buffer_used(e, h, -1, LONG_MAX);
    }
}

void engine_buffer_used(bsipipe_engine_t *e, starpu_data_handle_t h, int device, long slot)
{
    struct buffer_use *use = starpu_data_get_user_data(h);
    if (!use)
        return;
    long left;
    if ((left = __atomic_sub_fetch(&use->left, 1, __ATOMIC_ACQ_REL)) == 0) {
        /* Reused: back to its device's pool for later first writers
         * (StarPU orders them after this use), unless another device's op
         * used it last (never in the engine's plans: that would order two
         * devices' ops). Else freed once its tasks end. */
        if ((h = __atomic_exchange_n(use->slot, NULL, __ATOMIC_ACQ_REL))) {
            if (e->pool_active && use->device >= 0 && (device < 0 || device == use->device))
                pool_put(e, use->device, h, slot);
            else if (e->pool_active && use->device >= 0)
                pool_forget(e, use->device, h);
            else
                starpu_data_unregister_submit(h);
        }
    } else if (left < 0) { /* a use the dry run did not count: it would follow the unregistration */
        fprintf(stderr, "bsipipe engine: internal error: a buffer was used after its counted last use\n");
        engine_fail(e, -EFAULT);
    }
}

int bsipipe_engine_set_buffer_reuse(bsipipe_engine_t *e, int on)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    if (on && (e->mpi || e->T > 1))
        return bsipipe_error_set(-ENOTSUP, "engine: buffers are reused in one process without tensor parallelism "
                                           "only (StarPU-MPI and the TP path register theirs each iteration)");
    if (on && e->o.unchecked_plan) /* its submission order need not be one the devices can run */
        return bsipipe_error_set(-ENOTSUP, "engine: buffers are reused only for a plan proven free of deadlock "
                                           "(reuse adds dependencies in submission order, which for an unchecked "
                                           "plan could turn its transfer deadlock into a stall elsewhere)");
    if (!on && e->pool_active)
        return bsipipe_error_set(-EBUSY, "engine: buffer reuse switched during an iteration");
    e->reuse_buffers = on != 0;
    if (!on)
        pools_drop(e); /* their memory goes back */
    return 0;
}

int bsipipe_engine_buffer_reuse(const bsipipe_engine_t *e)
{
    return e ? e->reuse_buffers : 0;
}

int bsipipe_engine_buffer_bytes(const bsipipe_engine_t *e, double *bytes)
{
    if (!e || !bytes)
        return bsipipe_error_set(-EINVAL, "engine: no engine or no output");
    for (int d = 0; d < e->W; d++)
        bytes[d] = e->pool ? e->pool[d].bytes : 0;
    return 0;
}
