/* sim_noise.c: a plan simulated under op-time noise (Monte Carlo).
 *
 * Measured ops are not their means: on a shared machine one op takes 1.3x
 * its mean, the next 0.9x. A plan whose devices wait on each other turns
 * that spread into bubble that no noiseless simulation shows; plans differ
 * in how much (how tightly each device's order is coupled to its
 * neighbours'). This pass draws every compute op's duration as its cost
 * under the given model times a lognormal factor of mean 1 and the given
 * coefficient of variation, independently per op, simulates the plan on
 * those durations (cost->op_replay), and summarises the samples.
 *
 * Lognormal because measured op times are right-skewed (a stall makes an op
 * slower, nothing makes it much faster), and because its factors stay
 * positive at any spread. */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* splitmix64: a seeded, portable stream (the same samples on every libc). */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1), never 0 (log of it below). */
static double next_uniform(uint64_t *state)
{
    return ((double)(next_u64(state) >> 11) + 0.5) / 9007199254740992.0;
}

/* Standard normal (Box-Muller; one of the pair is enough here). */
static double next_normal(uint64_t *state)
{
    double u = next_uniform(state), v = next_uniform(state);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted v[0..n) (nearest rank). */
static double quantile(const double *v, int n, double q)
{
    int i = (int)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

int bsipipe_simulate_noise(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, double cv, int samples,
                           unsigned long long seed, bsipipe_sim_noise_t *out)
{
    if (!s || !cost || !out)
        return bsipipe_error_set(-EINVAL, "bsipipe_simulate_noise: NULL schedule, cost model or result");
    if (!(cv >= 0 && cv <= BSIPIPE_SIM_NOISE_MAX_CV))
        return bsipipe_error_set(-EINVAL, "op-time noise: coefficient of variation %g is outside 0..%g", cv,
                                 BSIPIPE_SIM_NOISE_MAX_CV);
    if (samples < 1 || samples > BSIPIPE_SIM_NOISE_MAX_SAMPLES)
        return bsipipe_error_set(-EINVAL, "op-time noise: %d samples is outside 1..%d", samples,
                                 BSIPIPE_SIM_NOISE_MAX_SAMPLES);
    bsipipe_sim_result_t *r = NULL;
    int rc = bsipipe_simulate(s, cost, &r); /* noiseless, and the plan's errors (a deadlock) first */
    if (rc < 0)
        return rc;
    *out = (bsipipe_sim_noise_t){.cv = cv, .samples = samples, .noiseless_makespan = r->makespan,
                                 .noiseless_bubble = r->bubble_ratio};
    bsipipe_sim_result_destroy(r);
    if (cv == 0) { /* every sample is the noiseless plan: exactly, and without simulating it again */
        out->mean_makespan = out->p90_makespan = out->noiseless_makespan;
        out->mean_bubble = out->p90_bubble = out->noiseless_bubble;
        return 0;
    }

    long n = bsipipe_sim_op_count(s);
    double *base = calloc((size_t)n, sizeof *base), *drawn = calloc((size_t)n, sizeof *drawn);
    double *makespan = malloc(sizeof(double) * (size_t)samples), *bubble = malloc(sizeof(double) * (size_t)samples);
    if (!base || !drawn || !makespan || !bubble) {
        rc = bsipipe_error_set(-ENOMEM, "op-time noise: out of memory for %ld ops x %d samples", n, samples);
        goto out;
    }
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int nops;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &nops);
        for (int i = 0; i < nops; i++)
            if (ops[i].kind <= BSIPIPE_OP_W)
                base[bsipipe_sim_op_index(s, &ops[i])] = bsipipe_sim_op_cost(s, cost, &ops[i]);
    }
    /* log X ~ N(mu, sigma^2) with E[X] = 1 and sd(X) = cv */
    double sigma = sqrt(log1p(cv * cv)), mu = -0.5 * sigma * sigma;
    uint64_t state = seed;
    bsipipe_cost_model_t noisy = *cost;
    noisy.op_replay = drawn;
    for (int t = 0; t < samples; t++) {
        for (long i = 0; i < n; i++)
            drawn[i] = base[i] * exp(mu + sigma * next_normal(&state));
        if ((rc = bsipipe_simulate(s, &noisy, &r)) < 0)
            goto out;
        makespan[t] = r->makespan;
        bubble[t] = r->bubble_ratio;
        out->mean_makespan += r->makespan;
        out->mean_bubble += r->bubble_ratio;
        bsipipe_sim_result_destroy(r);
    }
    out->mean_makespan /= samples;
    out->mean_bubble /= samples;
    qsort(makespan, (size_t)samples, sizeof *makespan, cmp_double);
    qsort(bubble, (size_t)samples, sizeof *bubble, cmp_double);
    out->p90_makespan = quantile(makespan, samples, 0.9);
    out->p90_bubble = quantile(bubble, samples, 0.9);
out:
    free(base);
    free(drawn);
    free(makespan);
    free(bubble);
    return rc < 0 ? rc : 0;
}
