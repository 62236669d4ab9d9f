/* plan_lower.h: the lowering pass (internal to libbsipipe). What the engine
 * reads of a plan while it runs, computed once when the engine is created,
 * so that no iteration calls the simulator:
 *  - how many ops before its own each RECV is posted (the receive semantics
 *    of the plan's comm order, bsipipe_sim_recv_ahead);
 *  - each compute op's slot and index in the simulator's tables (the
 *    per-slot statistics the engine reports);
 *  - under an emulation cost model, each op's duration and the share of it
 *    its tensor-parallel collectives take (emulated device time).
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
} plan_lowered_op_t;

typedef struct plan_lowered {
    int n_devices;
    int n_slots;      /* bsipipe_sim_op_slots: entries of a per-slot table */
    long n_indices;   /* bsipipe_sim_op_count: entries of a per-op table */
    plan_lowered_op_t **ops; /* [device][index in the device's op list] */
} plan_lowered_t;

/* Lowers s. `recv` gives the receive semantics (blocking_recv,
 * recv_in_place); `emulated` the emulation cost model, or NULL. 0, or
 * -ENOMEM with a detail. */
int plan_lower(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *recv, const bsipipe_cost_model_t *emulated,
               plan_lowered_t **out);
void plan_lowered_destroy(plan_lowered_t *l);

#endif
