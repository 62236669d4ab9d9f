/* plan_lower.h: the lowering pass (internal to libbsipipe). What the engine
 * reads of a plan while it runs, computed once when the engine is created,
 * so that the engine never calls the simulator after create:
 *  - the submission order: every op once, producers before consumers (the
 *    simulator's resolution order; for an unchecked plan that deadlocks,
 *    that of the same plan with its transfers in the paper's order);
 *  - how many ops before its own each RECV is posted (the receive semantics
 *    of the plan's comm order, bsipipe_sim_recv_ahead);
 *  - each compute op's slot and index in the simulator's tables (the
 *    per-slot statistics the engine reports);
 *  - under an emulation cost model, each op's duration and the share of it
 *    its tensor-parallel collectives take (emulated device time);
 *  - on request, each op's remaining critical path under FLOPs costs (the
 *    built-in StarPU policies' priorities);
 *  - where blocking receives may be asked for, whether the plan is free of
 *    deadlock under them too (the engine's blocking-receive ablation), with
 *    the validator's sentence when it is not.
 * Ownership: plan_lower allocates *out; plan_lowered_destroy frees it. */
#ifndef BSIPIPE_PLAN_LOWER_H
#define BSIPIPE_PLAN_LOWER_H

#include "graph/bsipipe_sim.h"

typedef struct plan_lowered_op {
    int ahead;        /* RECV: posted this many ops before its own (0: in place, and every other op) */
    int slot;         /* F/B/W: bsipipe_sim_op_slot; -1 for other ops */
    long index;       /* F/B/W: bsipipe_sim_op_index; -1 for other ops */
    double cost_s;    /* duration under the emulation cost model (0 without one) */
    double tp_comm_s; /* the op's tensor-parallel collectives within cost_s (0 without TP) */
    double crit;      /* remaining critical path under FLOPs costs (with priorities, else 0) */
} plan_lowered_op_t;

typedef struct plan_lowered {
    int n_devices;
    int n_slots;      /* bsipipe_sim_op_slots: entries of a per-slot table */
    long n_indices;   /* bsipipe_sim_op_count: entries of a per-op table */
    plan_lowered_op_t **ops; /* [device][index in the device's op list] */
    long n_order;     /* the submission order: op order_index[j] of device order_device[j] */
    int *order_device, *order_index;
    int has_crit;     /* the ops' crit are set (asked for, and the plan simulates) */
    double crit_top;  /* the largest crit */
    int blocking_checked; /* the plan was checked under blocking receives (a checked plan, where possible) */
    int blocking_rc;      /* then: 0, or the validator's error */
    char *blocking_why;   /* its sentence (owned) */
} plan_lowered_t;

typedef struct plan_lower_opts {
    const bsipipe_cost_model_t *recv;     /* receive semantics (recv_in_place, blocking_recv) */
    const bsipipe_cost_model_t *emulated; /* the emulation cost model, or NULL */
    int unchecked;                        /* the plan was not validated: a deadlock is not an error */
    int priorities;                       /* compute the critical paths */
    int blocking_possible;                /* blocking receives may be asked for: check the plan under them */
} plan_lower_opts_t;

/* Lowers s. 0, or -ENOMEM, or the simulator's error for a checked plan
 * that does not simulate, with a detail. */
int plan_lower(const bsipipe_schedule_t *s, const plan_lower_opts_t *opts, plan_lowered_t **out);
void plan_lowered_destroy(plan_lowered_t *l);

#endif
