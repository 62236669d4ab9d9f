/* plan_lower.c: the lowering pass (plan_lower.h). Each field is the
 * simulator's own function of the op, evaluated once per op: the engine's
 * run-time view of the plan is the planner's by construction. */
#include "graph/plan_lower.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>

void plan_lowered_destroy(plan_lowered_t *l)
{
    if (!l)
        return;
    for (int d = 0; l->ops && d < l->n_devices; d++)
        free(l->ops[d]);
    free(l->ops);
    free(l);
}

int plan_lower(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *recv, const bsipipe_cost_model_t *emulated,
               plan_lowered_t **out)
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
            o->ahead = bsipipe_sim_recv_ahead(s, recv, d, i);
            o->slot = compute ? bsipipe_sim_op_slot(s, &ops[i]) : -1;
            o->index = compute ? bsipipe_sim_op_index(s, &ops[i]) : -1;
            if (emulated && compute) {
                o->cost_s = bsipipe_sim_op_cost(s, emulated, &ops[i]);
                o->tp_comm_s = bsipipe_sim_tp_comm(s, emulated, &ops[i], NULL);
            }
        }
    }
    *out = l;
    return 0;
}
