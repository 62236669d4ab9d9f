/* bsipipe_schedule.c: the pass driver. A plan is the IR (schedule_ir.c)
 * filled by passes in order: a generator writes the compute ops (gen_*.c),
 * comm.c inserts the transfers in the configured order, then every device
 * gets its gradient syncs and STEP. The optimising pass (opt_justify.c)
 * and a comm reorder rerun the later passes. */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"

int bsipipe_schedule_create(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                            bsipipe_schedule_t **out)
{
    bsipipe_schedule_t *s;
    int rc = schedule_alloc(pc, dims, &s);
    *out = NULL;
    if (rc < 0)
        return rc;
    /* BSIPipe's includes the optimising pass; the baselines stay exactly as
     * their references build them. */
    switch (pc->schedule) {
    case BSIPIPE_SCHED_BSIPIPE: rc = generate_bsipipe(&s); break;
    case BSIPIPE_SCHED_BITPIPE: rc = generate_bitpipe(s); break;
    case BSIPIPE_SCHED_ZB_V: case BSIPIPE_SCHED_DUALPIPEV: case BSIPIPE_SCHED_DUALPIPE:
    case BSIPIPE_SCHED_SEQ_ZBV: case BSIPIPE_SCHED_BSIPIPE_ZB: case BSIPIPE_SCHED_ZB_I:
    case BSIPIPE_SCHED_ZB_H2: rc = generate_zb(s); break;
    default: rc = generate_fixed(s); break;
    }
    if (rc == 0)
        rc = comm_insert(s, NULL);
    if (rc == 0)
        rc = schedule_append_sync_step(s);
    if (rc < 0) {
        bsipipe_schedule_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

int bsipipe_schedule_reorder_comm(bsipipe_schedule_t *s, bsipipe_comm_order_t order)
{
    return bsipipe_schedule_reorder_comm_for(s, order, NULL);
}

int bsipipe_schedule_reorder_comm_for(bsipipe_schedule_t *s, bsipipe_comm_order_t order,
                                      const struct bsipipe_cost_model *cost)
{
    if ((unsigned)order >= BSIPIPE_COMM_COUNT)
        return bsipipe_error_set(-EINVAL, "unknown comm order %d", (int)order);
    s->pc.comm = order;
    int rc = comm_insert(s, cost);
    return rc < 0 ? rc : schedule_append_sync_step(s);
}

int bsipipe_schedule_optimise(bsipipe_schedule_t *s, const struct bsipipe_cost_model *cost, int budget,
                              bsipipe_optimise_report_t *report)
{
    if (budget < 0)
        return bsipipe_error_set(-EINVAL, "optimising pass: the memory budget must be >= 0 (got %d)", budget);
    int rc = schedule_optimise(s, cost, budget, report);
    if (rc == 0)
        rc = comm_insert(s, cost);
    return rc < 0 ? rc : schedule_append_sync_step(s);
}
