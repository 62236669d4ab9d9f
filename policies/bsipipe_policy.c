/* bsipipe_policy.c: the in-order StarPU scheduling policy ("bsipipe") and the
 * policy selection helpers. See bsipipe_policy.h and docs/policies.md.
 *
 * Data structures
 *   - one queue per StarPU worker: a binary min-heap of (slot, task) plus
 *     `next`, the slot the worker waits for. Only the heap top with
 *     slot == next may be popped; then next becomes slot + 1.
 *   - tasks that may run ahead (pos->ahead = j > 0) wait in a small unsorted
 *     list instead, poppable once next >= slot - j; one popped before its
 *     turn sets bit slot - next of `skip`, and next jumps over it later.
 *   - one shared FIFO for tasks without a plan position (sched_data NULL) or
 *     with an unusable one (worker out of range, worker unable to run it,
 *     slot already passed). Any worker able to run the task pops it.
 *
 * Locking
 *   - each worker queue has its own mutex (q->lock); the FIFO has fifo_lock.
 *     No path holds two of them at once, and none is held while waking a
 *     worker (starpu_wake_worker_relax_light takes the worker's sched mutex).
 *   - push_task may run on a worker thread (a task completing releases its
 *     successors), so the policy mutexes are taken inside
 *     starpu_worker_relax_on/off, as StarPU's own eager policy does.
 *   - starpu_push_task_end() is called while the queue lock is held: once the
 *     lock is released another worker may pop, run and free the task.
 *
 * Wake-ups: a push wakes the target worker only when the pushed slot is the
 * one it waits for; a FIFO push wakes every worker that can run the task.
 * pop_task returns NULL when the worker's slot is not there and StarPU puts
 * the worker to sleep (or lets it poll with non-blocking drivers);
 * starpu_wake_worker_relax_light sets the worker's keep-awake flag if it is
 * between pop and sleep, so no wake-up is lost.
 *
 * Idle spin (bsipipe_policy_set_idle_spin): sleeping costs a thread wake-up
 * per hand-off (50-120 µs on a shared VM, the whole bubble gap at w = 2 on
 * real compute), so when every worker has a core of its own, pop first
 * spins up to the budget on the queue's `ready` flag (an atomic copy of
 * "the heap top is the slot we wait for", kept under q->lock) and the FIFO
 * count, relaxed so that StarPU may lock the worker meanwhile, then sleeps.
 * It does not spin for a slot whose task is not submitted yet
 * (bsipipe_policy_note_submitted): at an iteration's end the spinning
 * workers kept the main thread, woken to collect the iteration, off both
 * cores for the whole budget (1 ms an iteration at w = 2).
 */
#include "policies/bsipipe_policy.h"

#include <starpu.h>
#include "base/bsipipe_error.h"

#include <starpu_scheduler.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLICY_NAME "bsipipe"

struct slot_entry {
    long slot;
    long from; /* early list: poppable once next >= from */
    struct starpu_task *task;
};

struct worker_queue {
    pthread_mutex_t lock;
    long next;               /* slot this worker waits for */
    struct slot_entry *heap; /* min-heap on slot */
    size_t n, cap;
    struct slot_entry *early; /* tasks that may run ahead, unsorted */
    size_t n_early, cap_early;
    unsigned long long skip;  /* bit b: slot next + b already ran ahead */
    int ready;                /* something is poppable; written under lock, read atomically by spinners */
    long submitted;           /* __atomic: slots below it are submitted (bsipipe_policy_note_submitted);
                                 -1 while nobody says */
};

struct policy_data {
    unsigned nworkers; /* starpu_worker_get_count() at init */
    struct worker_queue *queues;
    pthread_mutex_t fifo_lock;
    struct starpu_task_list fifo;
    unsigned long nfifo; /* tasks in fifo, read unlocked as a hint */
    long spin_ns;        /* idle spin budget per pop (0: sleep at once) */
};

/* Idle spin for the next policy instance (bsipipe_policy_set_idle_spin). */
static long idle_spin_us;

/* The policy instance in use (one StarPU context); NULL when inactive. */
static struct policy_data *active_data;
static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- heap --------------------------------------------------------------------------- */

static int heap_push(struct worker_queue *q, long slot, struct starpu_task *task)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 64;
        struct slot_entry *h = realloc(q->heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        q->heap = h;
        q->cap = cap;
    }
    size_t i = q->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (q->heap[parent].slot <= slot)
            break;
        q->heap[i] = q->heap[parent];
        i = parent;
    }
    q->heap[i].slot = slot;
    q->heap[i].task = task;
    return 0;
}

static int early_push(struct worker_queue *q, long slot, long from, struct starpu_task *task)
{
    if (q->n_early == q->cap_early) {
        size_t cap = q->cap_early ? 2 * q->cap_early : 16;
        struct slot_entry *l = realloc(q->early, cap * sizeof(*l));
        if (!l)
            return -ENOMEM;
        q->early = l;
        q->cap_early = cap;
    }
    q->early[q->n_early].slot = slot;
    q->early[q->n_early].from = from;
    q->early[q->n_early++].task = task;
    return 0;
}

/* Index of the lowest-slot early task poppable now, or -1. */
static long early_find(const struct worker_queue *q)
{
    long best = -1;
    for (size_t i = 0; i < q->n_early; i++)
        if (q->early[i].from <= q->next && (best < 0 || q->early[i].slot < q->early[best].slot))
            best = (long)i;
    return best;
}

/* The worker passed slot next: go on, over the slots that ran ahead. */
static void queue_advance(struct worker_queue *q)
{
    do {
        __atomic_store_n(&q->next, q->next + 1, __ATOMIC_RELAXED); /* read unlocked by pop's spin test */
        q->skip >>= 1;
    } while (q->skip & 1);
}

static int queue_ready(const struct worker_queue *q)
{
    return (q->n > 0 && q->heap[0].slot <= q->next) || early_find(q) >= 0;
}

static struct starpu_task *heap_pop(struct worker_queue *q)
{
    struct starpu_task *top = q->heap[0].task;
    struct slot_entry last = q->heap[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && q->heap[c + 1].slot < q->heap[c].slot)
            c++;
        if (last.slot <= q->heap[c].slot)
            break;
        q->heap[i] = q->heap[c];
        i = c;
    }
    if (q->n > 0)
        q->heap[i] = last;
    return top;
}

/* ---- init / deinit ----------------------------------------------------------------- */

static void init_bsipipe(unsigned sched_ctx_id)
{
    struct policy_data *d = calloc(1, sizeof(*d));
    unsigned n = starpu_worker_get_count();
    if (d)
        d->queues = calloc(n ? n : 1, sizeof(*d->queues));
    if (!d || !d->queues) {
        fprintf(stderr, "bsipipe policy: out of memory at initialisation\n");
        abort(); /* init_sched cannot report an error to StarPU */
    }
    d->nworkers = n;
    d->spin_ns = __atomic_load_n(&idle_spin_us, __ATOMIC_RELAXED) * 1000L;
    for (unsigned w = 0; w < n; w++) {
        pthread_mutex_init(&d->queues[w].lock, NULL);
        d->queues[w].submitted = -1;
    }
    pthread_mutex_init(&d->fifo_lock, NULL);
    starpu_task_list_init(&d->fifo);
    starpu_sched_ctx_set_policy_data(sched_ctx_id, d);

    pthread_mutex_lock(&active_lock);
    if (!active_data)
        active_data = d;
    pthread_mutex_unlock(&active_lock);
}

static void deinit_bsipipe(unsigned sched_ctx_id)
{
    struct policy_data *d = starpu_sched_ctx_get_policy_data(sched_ctx_id);
    if (!d)
        return;
    pthread_mutex_lock(&active_lock);
    if (active_data == d)
        active_data = NULL;
    pthread_mutex_unlock(&active_lock);

    for (unsigned w = 0; w < d->nworkers; w++) {
        struct worker_queue *q = &d->queues[w];
        if (q->n + q->n_early > 0)
            fprintf(stderr,
                    "bsipipe policy: at shutdown worker %u still holds %zu task(s) "
                    "(lowest slot %ld) while waiting for slot %ld, which was never pushed\n",
                    w, q->n + q->n_early, q->n ? q->heap[0].slot : q->early[0].slot, q->next);
        free(q->heap);
        free(q->early);
        pthread_mutex_destroy(&q->lock);
    }
    if (!starpu_task_list_empty(&d->fifo))
        fprintf(stderr, "bsipipe policy: at shutdown %lu unplanned task(s) were never run\n",
                d->nfifo);
    pthread_mutex_destroy(&d->fifo_lock);
    free(d->queues);
    free(d);
    starpu_sched_ctx_set_policy_data(sched_ctx_id, NULL);
}

/* ---- push / pop -------------------------------------------------------------------- */

static const char *task_label(const struct starpu_task *task)
{
    const char *name = starpu_task_get_name((struct starpu_task *)task);
    return name ? name : "(unnamed)";
}

static void wake_fifo_workers(struct starpu_task *task, unsigned nworkers, int can_run[])
{
    (void)task;
    for (unsigned w = 0; w < nworkers; w++)
        if (can_run[w])
            starpu_wake_worker_relax_light((int)w);
}

static int push_fifo(struct policy_data *d, struct starpu_task *task)
{
    unsigned n = d->nworkers;
    int can_run[STARPU_NMAXWORKERS];
    /* decide whom to wake before the task is visible to other workers */
    for (unsigned w = 0; w < n; w++)
        can_run[w] = starpu_worker_can_execute_task_first_impl(w, task, NULL) != 0;

    starpu_worker_relax_on();
    pthread_mutex_lock(&d->fifo_lock);
    starpu_worker_relax_off();
    starpu_task_list_push_back(&d->fifo, task);
    __atomic_add_fetch(&d->nfifo, 1, __ATOMIC_RELAXED);
    starpu_push_task_end(task);
    pthread_mutex_unlock(&d->fifo_lock);

    /* `task` may already be running or freed: only the precomputed mask is used */
    wake_fifo_workers(NULL, n, can_run);
    return 0;
}

static int push_bsipipe(struct starpu_task *task)
{
    struct policy_data *d = starpu_sched_ctx_get_policy_data(task->sched_ctx);
    const bsipipe_plan_pos_t *pos = task->sched_data;
    if (!pos)
        return push_fifo(d, task);

    int worker = pos->worker;
    long slot = pos->slot;
    if (worker < 0 || (unsigned)worker >= d->nworkers) {
        fprintf(stderr,
                "bsipipe policy: task %s: planned worker %d is out of range (StarPU has %u "
                "workers, 0..%u); running it on any worker, plan order not enforced\n",
                task_label(task), worker, d->nworkers, d->nworkers ? d->nworkers - 1 : 0);
        return push_fifo(d, task);
    }
    if (slot < 0) {
        fprintf(stderr,
                "bsipipe policy: task %s: negative slot %ld for worker %d; running it on any "
                "worker, plan order not enforced\n",
                task_label(task), slot, worker);
        return push_fifo(d, task);
    }
    if (!starpu_worker_can_execute_task_first_impl((unsigned)worker, task, NULL)) {
        fprintf(stderr,
                "bsipipe policy: task %s: planned worker %d cannot execute it (no "
                "implementation for its architecture); running it on any worker able to\n",
                task_label(task), worker);
        return push_fifo(d, task);
    }

    struct worker_queue *q = &d->queues[worker];
    starpu_worker_relax_on();
    pthread_mutex_lock(&q->lock);
    starpu_worker_relax_off();
    int ahead = pos->ahead < 0 ? 0 : pos->ahead > BSIPIPE_POLICY_MAX_AHEAD ? BSIPIPE_POLICY_MAX_AHEAD : pos->ahead;
    if (slot < q->next || (slot > q->next && slot - q->next < 64 && (q->skip >> (slot - q->next) & 1))) {
        long next = q->next;
        pthread_mutex_unlock(&q->lock);
        fprintf(stderr,
                "bsipipe policy: task %s: slot %ld of worker %d was pushed after the worker "
                "already passed it (now at slot %ld); running it on any worker\n",
                task_label(task), slot, worker, next);
        return push_fifo(d, task);
    }
    if ((ahead ? early_push(q, slot, slot - ahead, task) : heap_push(q, slot, task)) != 0) {
        pthread_mutex_unlock(&q->lock);
        fprintf(stderr, "bsipipe policy: task %s: out of memory queueing slot %ld of worker %d; "
                        "running it on any worker\n", task_label(task), slot, worker);
        return push_fifo(d, task);
    }
    int wake = slot - ahead <= q->next;
    if (wake)
        __atomic_store_n(&q->ready, 1, __ATOMIC_RELEASE);
    starpu_push_task_end(task);
    pthread_mutex_unlock(&q->lock);

    if (wake)
        starpu_wake_worker_relax_light(worker);
    return 0;
}

static struct starpu_task *pop_fifo(struct policy_data *d, unsigned workerid)
{
    if (__atomic_load_n(&d->nfifo, __ATOMIC_RELAXED) == 0)
        return NULL;
    struct starpu_task *chosen = NULL;
    starpu_worker_relax_on();
    pthread_mutex_lock(&d->fifo_lock);
    starpu_worker_relax_off();
    for (struct starpu_task *t = starpu_task_list_begin(&d->fifo); t != starpu_task_list_end(&d->fifo);
         t = starpu_task_list_next(t)) {
        unsigned impl;
        if (starpu_worker_can_execute_task_first_impl(workerid, t, &impl)) {
            starpu_task_list_erase(&d->fifo, t);
            starpu_task_set_implementation(t, impl);
            __atomic_sub_fetch(&d->nfifo, 1, __ATOMIC_RELAXED);
            chosen = t;
            break;
        }
    }
    pthread_mutex_unlock(&d->fifo_lock);
    return chosen;
}

/* Pops the worker's next slot (or a duplicate of a passed one); NULL when absent. */
static struct starpu_task *pop_slot(struct worker_queue *q, unsigned workerid)
{
    struct starpu_task *task = NULL;
    long dup_slot = -1, dup_next = -1;

    starpu_worker_relax_on();
    pthread_mutex_lock(&q->lock);
    starpu_worker_relax_off();
    long e = early_find(q);
    if (e >= 0) {
        struct slot_entry got = q->early[e];
        q->early[e] = q->early[--q->n_early];
        task = got.task;
        if (got.slot == q->next) {
            queue_advance(q);
        } else if (got.slot < q->next || (q->skip >> (got.slot - q->next) & 1)) {
            /* a second task with this slot (the first ran already): the plan is broken */
            dup_slot = got.slot;
            dup_next = q->next;
        } else {
            q->skip |= 1ULL << (got.slot - q->next); /* 0 < slot - next <= MAX_AHEAD */
        }
    } else if (q->n > 0) {
        long top = q->heap[0].slot;
        if (top == q->next) {
            task = heap_pop(q);
            queue_advance(q);
        } else if (top < q->next) {
            /* a second task with a slot this worker already ran: run it rather than
             * keep it forever; the plan is broken, say so */
            task = heap_pop(q);
            dup_slot = top;
            dup_next = q->next;
        }
    }
    __atomic_store_n(&q->ready, queue_ready(q), __ATOMIC_RELAXED);
    pthread_mutex_unlock(&q->lock);

    if (dup_slot >= 0)
        fprintf(stderr,
                "bsipipe policy: task %s: slot %ld of worker %u was given to two tasks "
                "(worker is at slot %ld); running the duplicate now\n",
                task_label(task), dup_slot, workerid, dup_next);
    if (task) {
        unsigned impl;
        if (starpu_worker_can_execute_task_first_impl(workerid, task, &impl))
            starpu_task_set_implementation(task, impl);
    }
    return task;
}

static long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause(); /* lets the sibling hyperthread run, saves power */
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* Waits up to d->spin_ns for the worker's slot or an unplanned task. */
static void idle_spin(struct policy_data *d, struct worker_queue *q)
{
    long end = now_ns() + d->spin_ns;
    starpu_worker_relax_on();
    while (!__atomic_load_n(&q->ready, __ATOMIC_ACQUIRE) && __atomic_load_n(&d->nfifo, __ATOMIC_RELAXED) == 0 &&
           now_ns() < end) {
        for (int i = 0; i < 32; i++)
            cpu_relax();
    }
    starpu_worker_relax_off();
}

static struct starpu_task *pop_bsipipe(unsigned sched_ctx_id)
{
    struct policy_data *d = starpu_sched_ctx_get_policy_data(sched_ctx_id);
    int id = starpu_worker_get_id();
    if (!d || id < 0 || (unsigned)id >= d->nworkers)
        return NULL;
    unsigned workerid = (unsigned)id;
    struct worker_queue *q = &d->queues[workerid];
    struct starpu_task *task = pop_slot(q, workerid);
    if (task)
        return task;
    /* Waiting for our next slot: unplanned tasks may run meanwhile. No
     * spinning for a slot not submitted yet (the iteration's end): the
     * thread that submits, or waits for the end, needs the core. */
    long submitted = __atomic_load_n(&q->submitted, __ATOMIC_RELAXED);
    if ((task = pop_fifo(d, workerid)) != NULL || d->spin_ns <= 0 ||
        (submitted >= 0 && __atomic_load_n(&q->next, __ATOMIC_RELAXED) >= submitted))
        return task;
    idle_spin(d, q);
    if ((task = pop_slot(q, workerid)) != NULL)
        return task;
    return pop_fifo(d, workerid);
}

struct starpu_sched_policy bsipipe_sched_policy = {
    .init_sched = init_bsipipe,
    .deinit_sched = deinit_bsipipe,
    .push_task = push_bsipipe,
    .pop_task = pop_bsipipe,
    .policy_name = POLICY_NAME,
    .policy_description = "bsipipe: each worker runs its planned tasks strictly in plan slot order",
    .worker_type = STARPU_WORKER_LIST,
};

/* ---- selection --------------------------------------------------------------------- */

static const char *builtin_policy_name(const char *name)
{
    struct starpu_sched_policy **p = starpu_sched_get_predefined_policies();
    for (; p && *p; p++)
        if ((*p)->policy_name && strcmp((*p)->policy_name, name) == 0)
            return (*p)->policy_name;
    return NULL;
}

/* Writes "bsipipe, eager, lws, ..." into buf. */
static void valid_names(char *buf, size_t size)
{
    size_t len = 0;
    int r = snprintf(buf, size, "%s", POLICY_NAME);
    if (r > 0)
        len = (size_t)r;
    struct starpu_sched_policy **p = starpu_sched_get_predefined_policies();
    for (; p && *p && len < size; p++) {
        if (!(*p)->policy_name)
            continue;
        r = snprintf(buf + len, size - len, ", %s", (*p)->policy_name);
        if (r < 0)
            break;
        len += (size_t)r;
    }
}

int bsipipe_policy_is_inorder(const char *name)
{
    return name != NULL && strcmp(name, POLICY_NAME) == 0;
}

int bsipipe_policy_configure(struct starpu_conf *conf, const char *name)
{
    if (!conf)
        return bsipipe_error_set(-EINVAL, "bsipipe_policy_configure: conf is NULL");
    const char *builtin = NULL;
    if (!name || !name[0] || (!bsipipe_policy_is_inorder(name) && !(builtin = builtin_policy_name(name)))) {
        char list[2048];
        valid_names(list, sizeof(list));
        return bsipipe_error_set(-EINVAL, "unknown scheduling policy '%s'; valid policies: %s",
                                 name ? name : "(null)", list);
    }
    const char *env = getenv("STARPU_SCHED");
    if (env && env[0] && strcmp(env, name) != 0)
        return bsipipe_error_set(BSIPIPE_ECONFIG,
                                 "STARPU_SCHED=%s overrides the requested scheduling policy '%s' "
                                 "(StarPU cannot select the external 'bsipipe' policy by that "
                                 "variable); unset STARPU_SCHED or pass the same name to --policy / "
                                 "BSIPIPE_POLICY",
                                 env, name);
    if (builtin) {
        conf->sched_policy = NULL;
        conf->sched_policy_name = builtin;
    } else {
        conf->sched_policy = &bsipipe_sched_policy;
        conf->sched_policy_name = NULL;
    }
    return 0;
}

void bsipipe_policy_set_idle_spin(long usec)
{
    __atomic_store_n(&idle_spin_us, usec > 0 ? usec : 0, __ATOMIC_RELAXED);
}

void bsipipe_policy_note_submitted(int worker, long slot)
{
    struct policy_data *d = __atomic_load_n(&active_data, __ATOMIC_ACQUIRE);
    if (!d || worker < 0 || (unsigned)worker >= d->nworkers)
        return;
    long *sub = &d->queues[worker].submitted;
    if (slot + 1 > __atomic_load_n(sub, __ATOMIC_RELAXED)) /* one submitting thread: no lost update */
        __atomic_store_n(sub, slot + 1, __ATOMIC_RELAXED);
}

long bsipipe_policy_next_slot(int worker)
{
    long next = -1;
    pthread_mutex_lock(&active_lock);
    struct policy_data *d = active_data;
    if (d && worker >= 0 && (unsigned)worker < d->nworkers) {
        pthread_mutex_lock(&d->queues[worker].lock);
        next = d->queues[worker].next;
        pthread_mutex_unlock(&d->queues[worker].lock);
    }
    pthread_mutex_unlock(&active_lock);
    return next;
}
