/* test_critical_path: bsipipe_schedule_critical_path gives each op its
 * remaining longest path to the end of the iteration's compute.
 *  - 1F1B, w = 2, m = 2, unit costs (F 1, B 2): the first forward on chunk 0
 *    waits on F c1, B c1, B c0 after it: 6; B on chunk 0 ends the chain: 2;
 *    an activation's SEND and RECV carry the path of the forward they feed
 *    (F c1: 1 + 2 + 2 = 5); SYNC/STEP 0.
 *  - Every schedule (w = 4): along every data dependency the producer's path
 *    is at least its own cost plus the consumer's (longest path), and at
 *    least one dependency meets it exactly unless the op ends a chain; a
 *    transfer's path equals its pair's; under FLOPs costs as well. */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <stdlib.h>

/* Index of (kind, mb, sub, chunk) among all devices' ops, or -1. */
static long find(const bsipipe_schedule_t *s, int kind, int mb, int sub, int chunk, int pipe)
{
    long base = 0;
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].kind == kind && ops[i].mb == mb && ops[i].sub == sub && ops[i].chunk == chunk &&
                ops[i].pipe == pipe)
                return base + i;
        base += n;
    }
    return -1;
}

static const bsipipe_op_t *op_at(const bsipipe_schedule_t *s, long j)
{
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        if (j < n)
            return &ops[j];
        j -= n;
    }
    return NULL;
}

static void check_small(void)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_1F1B);
    pc.w = 2;
    pc.m = 2;
    bsipipe_schedule_t *s;
    double *rp;
    CHECK(bsipipe_schedule_create(&pc, NULL, &s) == 0, "create: %s", bsipipe_error_detail());
    CHECK(bsipipe_schedule_critical_path(s, NULL, &rp) == 0, "critical path: %s", bsipipe_error_detail());
    CHECK(rp[find(s, BSIPIPE_OP_F, 0, 0, 0, 0)] == 6, "F mb0 c0: %g", rp[find(s, BSIPIPE_OP_F, 0, 0, 0, 0)]);
    CHECK(rp[find(s, BSIPIPE_OP_F, 1, 0, 1, 0)] == 5, "F mb1 c1: %g", rp[find(s, BSIPIPE_OP_F, 1, 0, 1, 0)]);
    CHECK(rp[find(s, BSIPIPE_OP_B, 1, 0, 1, 0)] == 4, "B mb1 c1: %g", rp[find(s, BSIPIPE_OP_B, 1, 0, 1, 0)]);
    CHECK(rp[find(s, BSIPIPE_OP_B, 0, 0, 0, 0)] == 2, "B mb0 c0: %g", rp[find(s, BSIPIPE_OP_B, 0, 0, 0, 0)]);
    long send = -1;
    for (long j = 0; j < 64 && op_at(s, j); j++) {
        const bsipipe_op_t *o = op_at(s, j);
        if ((o->kind == BSIPIPE_OP_SEND || o->kind == BSIPIPE_OP_RECV) && o->tensor == BSIPIPE_TENSOR_ACT) {
            CHECK(rp[j] == 5, "%s of an activation carries F c1's path 5 (got %g)", bsipipe_op_kind_name(o->kind),
                  rp[j]);
            send = j;
        }
        if (o->kind == BSIPIPE_OP_STEP || o->kind == BSIPIPE_OP_SYNC)
            CHECK(rp[j] == 0, "%s: 0 (got %g)", bsipipe_op_kind_name(o->kind), rp[j]);
    }
    CHECK(send >= 0, "the plan has activation transfers");
    CHECK(bsipipe_schedule_critical_path(NULL, NULL, &rp) == -EINVAL, "NULL schedule refused");
    free(rp);
    bsipipe_schedule_destroy(s);
}

static void check_all(const bsipipe_cost_model_t *cost, const char *cname)
{
    for (int kind = 0; kind < BSIPIPE_SCHED_COUNT; kind++) {
        bsipipe_parallel_config_t pc = bsipipe_parallel_config_default((bsipipe_schedule_kind_t)kind);
        pc.w = 4;
        pc.m = 8;
        bsipipe_schedule_t *s;
        double *rp;
        const char *kn = bsipipe_schedule_kind_name(pc.schedule);
        if (bsipipe_schedule_create(&pc, NULL, &s) != 0) {
            CHECK(0, "%s: create: %s", kn, bsipipe_error_detail());
            continue;
        }
        CHECK(bsipipe_schedule_critical_path(s, cost, &rp) == 0, "%s: %s", kn, bsipipe_error_detail());
        int bad = 0, loose = 0, n_ops = 0, pairs_bad = 0;
        double top = 0;
        for (long j = 0; op_at(s, j); j++, n_ops++) {
            const bsipipe_op_t *o = op_at(s, j);
            if (rp[j] > top)
                top = rp[j];
            if (o->kind == BSIPIPE_OP_SEND || o->kind == BSIPIPE_OP_RECV) {
                long other = find(s, o->kind == BSIPIPE_OP_SEND ? BSIPIPE_OP_RECV : BSIPIPE_OP_SEND, o->mb, o->sub,
                                  o->chunk, o->pipe);
                for (long q = 0; op_at(s, q); q++) /* the pair on the same channel */
                    if (op_at(s, q)->channel == o->channel && q != j)
                        other = q;
                pairs_bad += other < 0 || rp[other] != rp[j];
            }
            if (o->kind > BSIPIPE_OP_W)
                continue;
            double own = bsipipe_sim_op_cost(s, cost, o), longest = 0;
            int consumers = 0;
            /* consumers: F c+1, F s+1, B (same piece) for F; B c-1, B s-1, W for B */
            int ck[3] = {-1, -1, -1}, cmb = o->mb, csub[3], cch[3];
            if (o->kind == BSIPIPE_OP_F) {
                ck[0] = BSIPIPE_OP_F; csub[0] = o->sub; cch[0] = o->chunk + 1;
                ck[1] = BSIPIPE_OP_F; csub[1] = o->sub + 1; cch[1] = o->chunk;
                ck[2] = BSIPIPE_OP_B; csub[2] = o->sub; cch[2] = o->chunk;
            } else if (o->kind == BSIPIPE_OP_B) {
                ck[0] = BSIPIPE_OP_B; csub[0] = o->sub; cch[0] = o->chunk - 1;
                ck[1] = BSIPIPE_OP_B; csub[1] = o->sub - 1; cch[1] = o->chunk;
                ck[2] = BSIPIPE_OP_W; csub[2] = o->sub; cch[2] = o->chunk;
            }
            for (int c = 0; c < 3; c++) {
                long x = ck[c] >= 0 ? find(s, ck[c], cmb, csub[c], cch[c], o->pipe) : -1;
                if (x < 0)
                    continue;
                consumers++;
                if (rp[x] > longest)
                    longest = rp[x];
            }
            bad += rp[j] + 1e-9 * top < own + longest;
            loose += rp[j] > own + longest + 1e-9 * top;
        }
        printf("%-10s %-5s %4d ops, longest path %g\n", kn, cname, n_ops, top);
        CHECK(bad == 0 && loose == 0, "%s/%s: %d ops below, %d above their cost plus their longest consumer", kn,
              cname, bad, loose);
        CHECK(pairs_bad == 0, "%s/%s: %d transfers differ from their pair", kn, cname, pairs_bad);
        CHECK(top > 0, "%s/%s: a positive critical path", kn, cname);
        free(rp);
        bsipipe_schedule_destroy(s);
    }
}

int main(void)
{
    check_small();
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit(), flops = bsipipe_cost_model_flops(1e12);
    check_all(&unit, "unit");
    check_all(&flops, "flops");
    return check_finish("test_critical_path");
}
