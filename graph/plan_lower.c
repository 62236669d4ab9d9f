/* plan_lower.c: the lowering pass (plan_lower.h). Each field is the
 * planner's own function of the plan, evaluated once: the engine's run-time
 * view of the plan is the planner's by construction. */
#include "graph/plan_lower.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>
#include <string.h>

void plan_lowered_destroy(plan_lowered_t *l)
{
    if (!l)
        return;
    for (int d = 0; l->ops && d < l->n_devices; d++)
        free(l->ops[d]);
    free(l->ops);
    free(l->order_device);
    free(l->order_index);
    free(l->blocking_why);
    free(l);
}

/* A submission order for a plan whose transfers deadlock: the same plan's
 * compute order with transfers reordered the paper's way, which cannot
 * deadlock, gives an order where every producer precedes its consumers;
 * mapped back onto the original op positions. */
static int topo_order(const bsipipe_schedule_t *plan, bsipipe_sim_result_t **out)
{
    bsipipe_schedule_t *ok;
    int rc = bsipipe_schedule_copy(plan, &ok); /* a driver's plan too, not only a preset */
    if (rc < 0)
        return rc;
    if ((rc = bsipipe_schedule_reorder_comm(ok, BSIPIPE_COMM_BSIPIPE)) < 0) {
        bsipipe_schedule_destroy(ok);
        return rc;
    }
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_result_t *r;
    if ((rc = bsipipe_simulate(ok, &unit, &r)) < 0) {
        bsipipe_schedule_destroy(ok);
        return rc;
    }
    /* Same ops on the same devices, only SEND/RECV positions differ: match by
     * identity (kind, channel or work). */
    for (long j = 0; j < r->n_order; j++) {
        int d = r->order_device[j], n_ok, n_plan;
        const bsipipe_op_t *a = &bsipipe_schedule_device_ops(ok, d, &n_ok)[r->order_index[j]];
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(plan, d, &n_plan);
        for (int i = 0; i < n_plan; i++) {
            const bsipipe_op_t *b = &ops[i];
            if (a->kind == b->kind && a->mb == b->mb && a->sub == b->sub && a->chunk == b->chunk &&
                a->tensor == b->tensor && a->pipe == b->pipe) {
                r->order_index[j] = i;
                break;
            }
        }
    }
    bsipipe_schedule_destroy(ok);
    *out = r;
    return 0;
}

/* The submission order: the simulator's resolution order respects every
 * dependency, so StarPU's sequential consistency sees each producer before
 * its consumers. Taken over from the simulation result. */
static int lower_order(const bsipipe_schedule_t *s, const plan_lower_opts_t *opts, plan_lowered_t *l)
{
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    unit.recv_in_place = opts->recv ? opts->recv->recv_in_place : 0;
    bsipipe_sim_result_t *sim;
    int rc = bsipipe_simulate(s, &unit, &sim);
    if (rc == BSIPIPE_EDEADLOCK && opts->unchecked) /* unchecked plan: submit every op, producers first */
        rc = topo_order(s, &sim);
    if (rc < 0)
        return rc;
    l->n_order = sim->n_order;
    l->order_device = sim->order_device;
    l->order_index = sim->order_index;
    sim->order_device = sim->order_index = NULL;
    bsipipe_sim_result_destroy(sim);
    return 0;
}

/* Each op's remaining critical path under FLOPs costs; none (not an error)
 * when the plan does not simulate. */
static void lower_priorities(const bsipipe_schedule_t *s, plan_lowered_t *l)
{
    bsipipe_cost_model_t flops = bsipipe_cost_model_flops(1e12);
    double *rp;
    if (bsipipe_schedule_critical_path(s, &flops, &rp) < 0)
        return;
    long j = 0;
    for (int d = 0; d < l->n_devices; d++) {
        int n;
        bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n; i++, j++) {
            l->ops[d][i].crit = rp[j];
            if (rp[j] > l->crit_top)
                l->crit_top = rp[j];
        }
    }
    free(rp);
    l->has_crit = 1;
}

int plan_lower(const bsipipe_schedule_t *s, const plan_lower_opts_t *opts, plan_lowered_t **out)
{
    *out = NULL;
    plan_lowered_t *l = calloc(1, sizeof *l);
    int W = bsipipe_schedule_n_devices(s);
    if (!l || !(l->ops = calloc((size_t)W, sizeof *l->ops))) {
        free(l);
        return bsipipe_error_set(-ENOMEM, "out of memory lowering the plan");
    }
    l->n_devices = W;
    l->n_slots = bsipipe_sim_op_slots(s);
    l->n_indices = bsipipe_sim_op_count(s);
    int rc = lower_order(s, opts, l);
    if (rc < 0) {
        plan_lowered_destroy(l);
        return rc;
    }
    for (int d = 0; d < W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        if (!(l->ops[d] = calloc((size_t)(n > 0 ? n : 1), sizeof *l->ops[d]))) {
            plan_lowered_destroy(l);
            return bsipipe_error_set(-ENOMEM, "out of memory lowering the plan");
        }
        for (int i = 0; i < n; i++) {
            plan_lowered_op_t *o = &l->ops[d][i];
            int compute = ops[i].kind <= BSIPIPE_OP_W;
            o->ahead = bsipipe_sim_recv_ahead(s, opts->recv, d, i);
            o->slot = compute ? bsipipe_sim_op_slot(s, &ops[i]) : -1;
            o->index = compute ? bsipipe_sim_op_index(s, &ops[i]) : -1;
            if (opts->emulated && compute) {
                o->cost_s = bsipipe_sim_op_cost(s, opts->emulated, &ops[i]);
                o->tp_comm_s = bsipipe_sim_tp_comm(s, opts->emulated, &ops[i], NULL);
            }
        }
    }
    if (opts->priorities)
        lower_priorities(s, l);
    if (!opts->unchecked && opts->blocking_possible) { /* the ablation may be asked for between iterations */
        bsipipe_cost_model_t blocking = bsipipe_cost_model_unit();
        blocking.blocking_recv = 1;
        l->blocking_checked = 1;
        l->blocking_rc = bsipipe_schedule_validate_ex(s, &blocking);
        if (l->blocking_rc < 0 && !(l->blocking_why = strdup(bsipipe_error_detail()))) {
            plan_lowered_destroy(l);
            return bsipipe_error_set(-ENOMEM, "out of memory lowering the plan");
        }
    }
    *out = l;
    return 0;
}
