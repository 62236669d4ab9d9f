/* choose_k.c: the number of pieces a sequence is cut into, chosen by
 * prediction.
 *
 * More pieces shrink the bubble (the paper's bound falls with N_s = m k) and
 * each piece's activations; they also make every op smaller, and small ops
 * run below the device's rate (cost->piece_half_tokens) and pay each
 * transfer's latency more often. Which k is fastest, and which fit a memory
 * budget, depends on the model, the pipeline and the device, so this pass
 * plans and simulates each candidate under the caller's cost model and
 * keeps the fastest that fits; among near ties, the one holding least. */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Plans and simulates pc at k = c->k; fills the rest of *c. */
static int try_k(const bsipipe_parallel_config_t *base, const bsipipe_model_dims_t *dims,
                 const bsipipe_cost_model_t *cost, bsipipe_k_candidate_t *c)
{
    bsipipe_parallel_config_t pc = *base;
    pc.k = c->k;
    bsipipe_schedule_t *s = NULL;
    bsipipe_sim_result_t *r = NULL;
    int rc = bsipipe_schedule_create(&pc, dims, &s);
    if (rc == 0)
        rc = bsipipe_simulate(s, cost, &r);
    if (rc == 0) {
        c->iteration_time = r->iteration_time;
        c->bubble_ratio = r->bubble_ratio;
        for (int d = 0; d < r->n_devices; d++)
            if (r->device[d].peak_act_bytes > c->peak_act_bytes)
                c->peak_act_bytes = r->device[d].peak_act_bytes;
    }
    c->rc = rc;
    bsipipe_sim_result_destroy(r);
    bsipipe_schedule_destroy(s);
    return rc;
}

int bsipipe_schedule_choose_k(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                              const bsipipe_cost_model_t *cost, double act_budget_bytes, bsipipe_k_choice_t *out)
{
    if (!pc || !dims || !cost || !out || !(act_budget_bytes >= 0))
        return bsipipe_error_set(-EINVAL, "choosing k: NULL config, model, cost model or result, or a negative "
                                          "activation budget");
    if (cost->unit)
        return bsipipe_error_set(-EINVAL, "choosing k compares predicted times: unit costs charge a piece as "
                                          "much as a whole sequence; use FLOPs costs");
    memset(out, 0, sizeof *out);
    int max_k = bsipipe_schedule_kind_traits(pc->schedule).sequence_level ? BSIPIPE_CHOOSE_K_MAX : 1;
    int fastest_fit = -1, least = -1;
    char first_error[256] = "";
    out->fastest = -1;
    for (int k = 1; k <= max_k; k++) {
        bsipipe_k_candidate_t *c = &out->tried[out->n_tried];
        *c = (bsipipe_k_candidate_t){.k = k};
        bsipipe_parallel_config_t trial = *pc;
        trial.k = k;
        int rc = bsipipe_parallel_config_validate(&trial, dims); /* e.g. pieces below the alignment: not tried */
        if (rc == 0) {
            out->n_tried++;
            rc = try_k(pc, dims, cost, c);
            if (rc == BSIPIPE_EDEADLOCK || rc == -ENOMEM)
                return rc; /* the plan's own problem, or the machine's: not k's */
        }
        if (rc < 0) {
            if (!first_error[0])
                snprintf(first_error, sizeof first_error, "k = %d: %s", k, bsipipe_error_detail());
            continue;
        }
        if (out->fastest < 0 || c->iteration_time < out->tried[out->fastest].iteration_time)
            out->fastest = out->n_tried - 1;
        c->fits = act_budget_bytes <= 0 || c->peak_act_bytes <= act_budget_bytes;
        if (least < 0 || c->peak_act_bytes < out->tried[least].peak_act_bytes)
            least = out->n_tried - 1;
        if (c->fits && (fastest_fit < 0 || c->iteration_time < out->tried[fastest_fit].iteration_time))
            fastest_fit = out->n_tried - 1;
    }
    if (least < 0)
        return bsipipe_error_set(-EINVAL, "choosing k: no k in 1..%d plans for this configuration (%s)", max_k,
                                 first_error);
    if (fastest_fit < 0 && max_k == 1)
        return bsipipe_error_set(-ENOSPC, "%s keeps sequences whole, and at k = 1 its activations need %.4g GiB "
                                          "per device, over the budget of %.4g GiB; raise the budget or use more "
                                          "devices", bsipipe_schedule_kind_name(pc->schedule),
                                 out->tried[least].peak_act_bytes / 1073741824.0, act_budget_bytes / 1073741824.0);
    if (fastest_fit < 0)
        return bsipipe_error_set(-ENOSPC, "no k in 1..%d keeps the activations within %.4g GiB per device: the "
                                          "least is %.4g GiB at k = %d; raise the budget or use more devices",
                                 max_k, act_budget_bytes / 1073741824.0,
                                 out->tried[least].peak_act_bytes / 1073741824.0, out->tried[least].k);
    /* Among those within 0.1% of the fastest, the least memory (at the
     * paper's setting 74 GiB at k = 8, 31 at k = 14), then the fewer pieces. */
    int best = fastest_fit;
    double near = out->tried[fastest_fit].iteration_time * (1 + BSIPIPE_CHOOSE_K_TIE);
    for (int i = 0; i < out->n_tried; i++) {
        const bsipipe_k_candidate_t *c = &out->tried[i];
        if (c->rc == 0 && c->fits && c->iteration_time <= near &&
            (c->peak_act_bytes < out->tried[best].peak_act_bytes ||
             (c->peak_act_bytes == out->tried[best].peak_act_bytes && c->k < out->tried[best].k)))
            best = i;
    }
    out->chosen = best;
    out->k = out->tried[best].k;
    return 0;
}
