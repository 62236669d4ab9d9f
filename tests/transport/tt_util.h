/* tests/transport/tt_util.h: shared pieces of the transport tests: StarPU
 * start-up with 4 CPU workers, a clock, and the RECV / SEND codelets that
 * wrap bsipipe_transport_post / _send the way the engine does. */
#ifndef BSIPIPE_TESTS_TT_UTIL_H
#define BSIPIPE_TESTS_TT_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <starpu.h>

#include "base/bsipipe_error.h"
#include "tasks/bsipipe_transport.h"

#define TT_NWORKERS 4

static inline double tt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Starts StarPU with 4 unbound CPU workers; a hard alarm makes a hang a failure. Returns 0, or
 * 77 (skip) when StarPU cannot give 4 CPU workers. */
static inline int tt_init(unsigned alarm_s)
{
    alarm(alarm_s);
    setenv("STARPU_NCPU", "4", 1);
    setenv("STARPU_WORKERS_NOBIND", "1", 1);
    setenv("STARPU_SILENT", "1", 1);
    unsetenv("STARPU_SCHED");
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncuda = 0;
    conf.nopencl = 0;
    if (starpu_init(&conf) != 0) {
        fprintf(stderr, "starpu_init failed\n");
        return 77;
    }
    if (starpu_cpu_worker_get_count() < TT_NWORKERS) {
        fprintf(stderr, "need %d CPU workers, StarPU gave %u\n", TT_NWORKERS, starpu_cpu_worker_get_count());
        starpu_shutdown();
        return 77;
    }
    return 0;
}

/* Argument of one RECV or SEND task (one per task, owned by the test). */
struct tt_arg {
    bsipipe_transport_t *t;
    long ch;
    int device;
    char what[64];
    unsigned delay_us; /* SEND: sleep before sending */
    int rc;            /* out: return of post/send */
    double t_start;    /* out: codelet start */
    double t_send;     /* out: SEND: just before bsipipe_transport_send (after the delay) */
    double t_end;      /* out: post/send returned */
    char detail[256];  /* out: bsipipe_error_detail() of a failing call (worker thread) */
};

/* RECV: buffer 0 (vector, STARPU_W) is posted on the channel; the task itself
 * holds one end dependency that the transport releases. */
__attribute__((unused)) static void tt_recv_cpu(void *buffers[], void *cl_arg)
{
    struct tt_arg *a = cl_arg;
    a->t_start = tt_now();
    void *dst = (void *)STARPU_VECTOR_GET_PTR(buffers[0]);
    size_t bytes = (size_t)STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    a->rc = bsipipe_transport_post(a->t, a->ch, dst, bytes, starpu_task_get_current(), a->device, a->what);
    a->t_end = tt_now();
    if (a->rc)
        snprintf(a->detail, sizeof a->detail, "%s", bsipipe_error_detail());
}

/* SEND: buffer 0 (vector, STARPU_R) is copied into the posted receive. */
__attribute__((unused)) static void tt_send_cpu(void *buffers[], void *cl_arg)
{
    struct tt_arg *a = cl_arg;
    a->t_start = tt_now();
    if (a->delay_us)
        usleep(a->delay_us);
    const void *src = (const void *)STARPU_VECTOR_GET_PTR(buffers[0]);
    size_t bytes = (size_t)STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    a->t_send = tt_now();
    a->rc = bsipipe_transport_send(a->t, a->ch, src, bytes, a->device, a->what);
    a->t_end = tt_now();
    if (a->rc)
        snprintf(a->detail, sizeof a->detail, "%s", bsipipe_error_detail());
}

__attribute__((unused)) static struct starpu_codelet tt_recv_cl = {
    .cpu_funcs = {tt_recv_cpu},
    .nbuffers = 1,
    .modes = {STARPU_W},
    .name = "tt_recv",
};

__attribute__((unused)) static struct starpu_codelet tt_send_cl = {
    .cpu_funcs = {tt_send_cpu},
    .nbuffers = 1,
    .modes = {STARPU_R},
    .name = "tt_send",
};

/* Submits a RECV task on worker `w` posting handle h on a->ch. */
static inline int tt_submit_recv(struct tt_arg *a, starpu_data_handle_t h, int w)
{
    struct starpu_task *task = starpu_task_create();
    task->cl = &tt_recv_cl;
    task->handles[0] = h;
    task->cl_arg = a;
    task->execute_on_a_specific_worker = 1;
    task->workerid = (unsigned)w;
    starpu_task_end_dep_add(task, 1); /* released by the transport */
    return starpu_task_submit(task);
}

/* Submits a SEND task on worker `w` sending handle h on a->ch. */
static inline int tt_submit_send(struct tt_arg *a, starpu_data_handle_t h, int w)
{
    struct starpu_task *task = starpu_task_create();
    task->cl = &tt_send_cl;
    task->handles[0] = h;
    task->cl_arg = a;
    task->execute_on_a_specific_worker = 1;
    task->workerid = (unsigned)w;
    return starpu_task_submit(task);
}

/* The data of element i sent on channel ch in round `round`: exact in a double. */
static inline double tt_pattern(long ch, long i, int round)
{
    return (double)((long)round * 100000000L + ch * 100000L + i);
}

/* A task reading what a RECV delivered: checks it against tt_pattern and
 * notes when it started. */
struct tt_consumer {
    long ch;
    int round;
    int ok;          /* out: every element matched (-1 before it ran) */
    double t_start;  /* out */
};

static inline void tt_consume_cpu(void *buffers[], void *cl_arg)
{
    struct tt_consumer *a = cl_arg;
    a->t_start = tt_now();
    const double *x = (const double *)STARPU_VECTOR_GET_PTR(buffers[0]);
    long n = (long)STARPU_VECTOR_GET_NX(buffers[0]);
    a->ok = 1;
    for (long i = 0; i < n; i++)
        if (x[i] != tt_pattern(a->ch, i, a->round)) {
            a->ok = 0;
            break;
        }
}

__attribute__((unused)) static struct starpu_codelet tt_consume_cl = {
    .cpu_funcs = {tt_consume_cpu},
    .nbuffers = 1,
    .modes = {STARPU_R},
    .name = "tt_consume",
};

#endif
