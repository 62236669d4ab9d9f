/* tests/policy_util.h: shared helpers of the policy tests (tests/test_policy_*.c).
 * Starts StarPU with n CPU workers (no CUDA/OpenCL, no binding) under the
 * `bsipipe` policy, and arms a watchdog so that a test never hangs. */
#ifndef BSIPIPE_TESTS_POLICY_UTIL_H
#define BSIPIPE_TESTS_POLICY_UTIL_H

#include "policies/bsipipe_policy.h"

#include <starpu.h>
#include "base/bsipipe_error.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *pu_test_name = "policy test";

static void pu_watchdog_fired(int sig)
{
    static const char msg[] = "policy test: watchdog fired (hang), failing\n";
    (void)sig;
    if (write(2, msg, sizeof(msg) - 1) < 0) {
        /* nothing more to do */
    }
    _exit(1);
}

/* Fails the program with exit 1 after `seconds`. */
static inline void pu_watchdog(unsigned seconds)
{
    signal(SIGALRM, pu_watchdog_fired);
    alarm(seconds);
}

/* starpu_init with `ncpu` CPU workers and policy `policy` (through
 * bsipipe_policy_configure). Returns starpu_init's code, 77 if StarPU has no
 * device to offer, or 1 on a configure error. */
static inline int pu_start(const char *name, unsigned ncpu, const char *policy)
{
    pu_test_name = name;
    setenv("STARPU_WORKERS_NOBIND", "1", 1);
    setenv("STARPU_SILENT", "1", 0);
    unsetenv("STARPU_SCHED");
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    int rc = bsipipe_policy_configure(&conf, policy);
    if (rc != 0) {
        fprintf(stderr, "%s: bsipipe_policy_configure(%s): %s: %s\n", name, policy,
                bsipipe_strerror(rc), bsipipe_error_detail());
        return 1;
    }
    conf.ncpus = (int)ncpu;
    conf.ncuda = 0;
    conf.nopencl = 0;
    conf.nmic = 0;
    conf.nmpi_ms = 0;
    conf.precedence_over_environment_variables = 1;
    rc = starpu_init(&conf);
    if (rc == -ENODEV) {
        fprintf(stderr, "%s: no StarPU device, skipping\n", name);
        return 77;
    }
    if (rc != 0) {
        fprintf(stderr, "%s: starpu_init: %d\n", name, rc);
        return 1;
    }
    if (starpu_cpu_worker_get_count() != ncpu) {
        fprintf(stderr, "%s: wanted %u CPU workers, StarPU gave %u\n", name, ncpu,
                starpu_cpu_worker_get_count());
        starpu_shutdown();
        return 1;
    }
    return 0;
}

/* Monotonic time in microseconds. */
static inline double pu_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static inline void pu_sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Deterministic xorshift random numbers. */
static inline unsigned pu_rand(unsigned long long *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (unsigned)(*s >> 11);
}

#endif
