/* critical_path.c: each op's remaining longest path to the end of the
 * iteration (bsipipe_schedule_critical_path), for runtime priorities.
 *
 * The path follows data dependencies only (compute_deps), never a device's
 * list order: a free policy does not keep that order, and what it should run
 * first is what the most work still waits on. Processed in reverse of the
 * simulator's resolution order, which puts every producer before its
 * consumers, so each op's consumers are final when it is reached. */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"
#include "graph/schedule_internal.h"

#include <errno.h>
#include <stdlib.h>

/* The compute op a transfer feeds: an activation leaving chunk c goes to
 * the forward of c+1, a gradient to the backward of c-1. */
static long fed_op(const bsipipe_schedule_t *s, const bsipipe_op_t *op)
{
    int act = op->tensor == BSIPIPE_TENSOR_ACT;
    int c = op->chunk + (act ? 1 : -1);
    if (c < 0 || c >= bsipipe_schedule_n_chunks(s) || op->mb < 0 || op->sub < 0)
        return -1;
    return compute_index(s, act ? BSIPIPE_OP_F : BSIPIPE_OP_B, op->mb, op->sub, c);
}

int bsipipe_schedule_critical_path(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, double **out)
{
    if (!s || !out)
        return bsipipe_error_set(-EINVAL, "critical path: no schedule or output");
    *out = NULL;
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    if (!cost)
        cost = &unit;
    bsipipe_sim_result_t *r;
    int rc = bsipipe_simulate(s, cost, &r);
    if (rc < 0)
        return rc;
    int W = bsipipe_schedule_n_devices(s);
    long total = 0, nc = compute_index_count(s);
    long *base = malloc(sizeof(long) * (size_t)(W + 1));
    for (int d = 0; base && d < W; d++) {
        int n;
        bsipipe_schedule_device_ops(s, d, &n);
        base[d] = total;
        total += n;
    }
    double *rp = calloc((size_t)(total > 0 ? total : 1), sizeof *rp);
    double *after = calloc((size_t)(nc > 0 ? nc : 1), sizeof *after); /* longest path below each compute op */
    double *comp = calloc((size_t)(nc > 0 ? nc : 1), sizeof *comp);   /* each compute op's own path */
    if (!base || !rp || !after || !comp) {
        free(base); free(rp); free(after); free(comp);
        bsipipe_sim_result_destroy(r);
        return bsipipe_error_set(-ENOMEM, "critical path: out of memory");
    }
    for (long j = r->n_order - 1; j >= 0; j--) {
        int d = r->order_device[j], i = r->order_index[j], n;
        const bsipipe_op_t *op = &bsipipe_schedule_device_ops(s, d, &n)[i];
        double v = 0;
        if (op->kind <= BSIPIPE_OP_W) {
            long x = compute_index(s, op->kind, op->mb, op->sub, op->chunk);
            v = bsipipe_sim_op_cost(s, cost, op) + after[x];
            comp[x] = v;
            bsipipe_op_t deps[3];
            int nd = compute_deps(s, op, deps);
            for (int q = 0; q < nd; q++) {
                long y = compute_index(s, deps[q].kind, deps[q].mb, deps[q].sub, deps[q].chunk);
                if (v > after[y])
                    after[y] = v;
            }
        } else if (op->kind == BSIPIPE_OP_SEND || op->kind == BSIPIPE_OP_RECV) {
            long x = fed_op(s, op); /* its consumer comes later in the order: final */
            v = x >= 0 ? comp[x] : 0;
        } else if (op->kind == BSIPIPE_OP_STEP) {
            v = cost->step_time;
        }
        rp[base[d] + i] = v;
    }
    free(base);
    free(after);
    free(comp);
    bsipipe_sim_result_destroy(r);
    *out = rp;
    return 0;
}
