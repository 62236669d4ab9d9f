/* test_tp_cost: the planner's tensor-parallel collectives (bsipipe_sim_tp_comm).
 *  - GPT, L = 8, hidden 256, S = 1024, k = 2, Seq1F1B at w = 2 (four layers
 *    per stage): a forward of a middle chunk makes 4 collectives per
 *    layer, the first chunk one more (embedding), the last one more (head);
 *    a backward 6 per layer; each moves piece x hidden x 4 bytes x (D_t-1)/D_t,
 *    at (D_t - 1) latencies + bytes / bandwidth of the intra-node link.
 *  - ZB-H1 splits them 4 (B) + 2 (W) per layer.
 *  - D_t = 1 and unit costs: none. A TP group wider than a node uses the
 *    inter-node link.
 *  - Simulated: the devices' tp_comm sums to the ops', tp_bytes to the bytes,
 *    and each op's cost includes its collectives. */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <stdlib.h>

static bsipipe_schedule_t *plan(bsipipe_schedule_kind_t kind, int tp)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = 2;
    pc.m = 4;
    pc.tp = tp;
    pc.k = bsipipe_schedule_kind_traits(kind).sequence_level ? 2 : 1;
    bsipipe_model_dims_t d = {BSIPIPE_MODEL_GPT, 8, 256, 8, 1024, 512, 1024};
    bsipipe_schedule_t *s = NULL;
    int rc = bsipipe_schedule_create(&pc, &d, &s);
    CHECK(rc == 0, "%s tp=%d: %s", bsipipe_schedule_kind_name(kind), tp, bsipipe_error_detail());
    return s;
}

static const bsipipe_op_t *find(const bsipipe_schedule_t *s, int kind, int chunk)
{
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].kind == kind && ops[i].chunk == chunk && ops[i].mb == 0)
                return &ops[i];
    }
    return NULL;
}

int main(void)
{
    bsipipe_cost_model_t c = bsipipe_cost_model_flops(100e12);
    c.devices_per_node = 8;
    for (int tp = 2; tp <= 4; tp *= 2) {
        bsipipe_schedule_t *s = plan(BSIPIPE_SCHED_SEQ1F1B, tp);
        if (!s)
            continue;
        const bsipipe_op_t *f0 = find(s, BSIPIPE_OP_F, 0), *f1 = find(s, BSIPIPE_OP_F, 1);
        const bsipipe_op_t *b0 = find(s, BSIPIPE_OP_B, 0);
        CHECK(f0 && f1 && b0, "ops found");
        if (!f0 || !f1 || !b0) continue;
        const int *st = bsipipe_schedule_sub_starts(s);
        double per = (double)(st[f0->sub + 1] - st[f0->sub]) * 256 * 4 * (tp - 1) / tp;
        double one = (tp - 1) * c.intra_latency + per / c.intra_bandwidth, bytes;
        /* chunk 0: layers 0..3 + embedding; chunk 1 (last): layers 4..7 + head */
        CHECK_NEAR(bsipipe_sim_tp_comm(s, &c, f0, &bytes), 17 * one, 1e-12, "F chunk 0, tp=%d", tp);
        CHECK_NEAR(bytes, 17 * per, 1e-3, "F chunk 0 bytes, tp=%d", tp);
        CHECK(f1->sub == f0->sub, "same piece");
        CHECK_NEAR(bsipipe_sim_tp_comm(s, &c, f1, NULL), 17 * one, 1e-12, "F chunk 1 (head), tp=%d", tp);
        CHECK_NEAR(bsipipe_sim_tp_comm(s, &c, b0, &bytes), 25 * ((tp - 1) * c.intra_latency +
                   (double)(st[b0->sub + 1] - st[b0->sub]) * 256 * 4 * (tp - 1) / tp / c.intra_bandwidth), 1e-12,
                   "B chunk 0, tp=%d", tp);
        /* the op's cost includes its collectives */
        bsipipe_cost_model_t no_links = c;
        no_links.intra_bandwidth = 0;
        no_links.intra_latency = 0;
        CHECK_NEAR(bsipipe_sim_op_cost(s, &c, f0) - bsipipe_sim_op_cost(s, &no_links, f0),
                   bsipipe_sim_tp_comm(s, &c, f0, NULL), 1e-12, "F cost includes TP, tp=%d", tp);
        /* simulated totals */
        bsipipe_sim_result_t *r = NULL;
        CHECK(bsipipe_simulate(s, &c, &r) == 0, "simulate: %s", bsipipe_error_detail());
        double sum_t = 0, sum_b = 0;
        for (int d = 0; r && d < bsipipe_schedule_n_devices(s); d++) {
            int n;
            const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
            for (int i = 0; i < n; i++) {
                double b;
                sum_t += bsipipe_sim_tp_comm(s, &c, &ops[i], &b);
                sum_b += b;
            }
        }
        if (r) {
            CHECK_NEAR(r->device[0].tp_comm + r->device[1].tp_comm, sum_t, 1e-9, "tp_comm total, tp=%d", tp);
            CHECK_NEAR(r->tp_bytes[0], sum_b, 1.0, "tp_bytes intra, tp=%d", tp);
            CHECK(r->tp_bytes[1] == 0, "no inter-node TP at tp=%d", tp);
        }
        bsipipe_sim_result_destroy(r);
        /* unit costs: no collectives */
        bsipipe_cost_model_t u = bsipipe_cost_model_unit();
        CHECK(bsipipe_sim_tp_comm(s, &u, f0, NULL) == 0, "unit costs charge no TP");
        /* a TP group wider than a node crosses it */
        bsipipe_cost_model_t narrow = c;
        narrow.devices_per_node = 1;
        CHECK(bsipipe_sim_tp_crosses_nodes(s, &narrow), "D_t=%d over 1-GPU nodes crosses nodes", tp);
        CHECK_NEAR(bsipipe_sim_tp_comm(s, &narrow, f0, NULL),
                   17 * ((tp - 1) * c.inter_latency + per / c.inter_bandwidth), 1e-12, "inter-node link, tp=%d", tp);
        bsipipe_schedule_destroy(s);
    }
    /* ZB-H1: 4 per layer in B, 2 in W */
    bsipipe_schedule_t *z = plan(BSIPIPE_SCHED_ZB_H1, 2);
    if (z) {
        const bsipipe_op_t *b1 = find(z, BSIPIPE_OP_B, 1), *w1 = find(z, BSIPIPE_OP_W, 1);
        double one = c.intra_latency + 1024.0 * 256 * 4 / 2 / c.intra_bandwidth;
        CHECK(b1 && w1, "zb ops");
        if (b1 && w1) {
            CHECK_NEAR(bsipipe_sim_tp_comm(z, &c, b1, NULL), 17 * one, 1e-12, "ZB-H1 B, last chunk");
            CHECK_NEAR(bsipipe_sim_tp_comm(z, &c, w1, NULL), 8 * one, 1e-12, "ZB-H1 W");
        }
        bsipipe_schedule_destroy(z);
    }
    bsipipe_schedule_t *one = plan(BSIPIPE_SCHED_SEQ1F1B, 1);
    if (one) {
        CHECK(bsipipe_sim_tp_comm(one, &c, find(one, BSIPIPE_OP_F, 0), NULL) == 0, "D_t = 1 charges none");
        bsipipe_schedule_destroy(one);
    }
    return check_finish("test_tp_cost");
}
