/* test_comm_order: SEND/RECV pairing and ordering. Without early receive
 * (naive: every device sends before it receives; ordered: complementary
 * order, receives just in time) BSIPipe deadlocks and the cycle of waiting
 * devices is reported; the paper's order completes, no send waits in the
 * timeline it was built from, and it stays deadlock-free under other costs. */
#include "graph/bsipipe_sim.h"
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

static bsipipe_schedule_t *make(bsipipe_schedule_kind_t kind, int w, int m, bsipipe_comm_order_t order)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.m = m;
    pc.comm = order;
    bsipipe_schedule_t *s = NULL;
    int rc = bsipipe_schedule_create(&pc, NULL, &s);
    if (rc == BSIPIPE_ECONFIG && (kind == BSIPIPE_SCHED_BITPIPE || kind == BSIPIPE_SCHED_DUALPIPE) && w % 2) {
        /* BitPipe halves each unit of w micro-batches, DualPipe pairs rank r
         * with w-1-r: a named config error. */
        CHECK_CONTAINS(bsipipe_error_detail(), "w must be even");
        return NULL;
    }
    CHECK(rc == 0, "create %s: %s", bsipipe_schedule_kind_name(kind), bsipipe_error_detail());
    return s;
}

/* Counts the SENDs that had to wait for their receive; with `must_be_zero`
 * requires none (the order's own timeline), else only that the run ends. */
static void check_sends(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, const char *what,
                        int must_be_zero)
{
    bsipipe_sim_result_t *r;
    int rc = bsipipe_simulate(s, cost, &r);
    CHECK(rc == 0, "%s: %s", what, bsipipe_error_detail());
    if (rc)
        return;
    int waits = 0;
    for (int d = 0; d < r->n_devices; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 1; i < n; i++)
            if (ops[i].kind == BSIPIPE_OP_SEND && r->op_start[d][i] > r->op_end[d][i - 1] + 1e-12)
                waits++;
    }
    if (must_be_zero)
        CHECK(waits == 0, "%s: %d sends waited for their receive", what, waits);
    bsipipe_sim_result_destroy(r);
}

/* Receives that block too (rendezvous both ways): every schedule's default
 * plan at w = 2..8 is deadlock-free under both semantics, with unit and FLOPs
 * costs, because each device meets its transfers in one global order (send
 * time, channel). A receive moved ahead of the send that feeds it is still
 * fine with posted receives, and deadlocks, naming the cycle, when they block. */
static void blocking_receives(const bsipipe_cost_model_t *unit, const bsipipe_cost_model_t *flops)
{
    bsipipe_cost_model_t ub = *unit, fb = *flops;
    ub.blocking_recv = fb.blocking_recv = 1;
    int plans = 0;
    for (int kind = 0; kind < BSIPIPE_SCHED_COUNT; kind++)
        for (int w = 2; w <= 8; w++)
            for (int mult = 2; mult <= 4; mult += 2) {
                bsipipe_schedule_t *s = make((bsipipe_schedule_kind_t)kind, w, mult * w, BSIPIPE_COMM_BSIPIPE);
                if (!s)
                    continue;
                const char *name = bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind);
                const bsipipe_cost_model_t *costs[4] = {unit, &ub, flops, &fb};
                for (int c = 0; c < 4; c++)
                    CHECK(bsipipe_schedule_validate_ex(s, costs[c]) == 0, "%s w=%d m=%d, %s costs, %s receives: %s",
                          name, w, mult * w, c < 2 ? "unit" : "FLOPs", c % 2 ? "blocking" : "posted",
                          bsipipe_error_detail());
                plans++;
                bsipipe_schedule_destroy(s);
            }
    printf("%d default plans deadlock-free with posted and with blocking receives\n", plans);

    /* 1F1B w=4: device 0 sends the activation of its last warmup forward,
     * then (later) receives that micro-batch's gradient; receiving first
     * blocks device 0 on data that needs the activation it has not sent. */
    bsipipe_schedule_t *s = make(BSIPIPE_SCHED_1F1B, 4, 8, BSIPIPE_COMM_BSIPIPE);
    if (!s)
        return;
    bsipipe_op_t *l = s->ops[0];
    int snd = -1, rcv = -1;
    for (int i = 0; i < s->n_ops[0] && rcv < 0; i++)
        if (l[i].kind == BSIPIPE_OP_SEND && snd < 0)
            snd = i;
        else if (snd >= 0 && l[i].kind == BSIPIPE_OP_RECV && l[i].mb == l[snd].mb)
            rcv = i;
    CHECK(snd >= 0 && rcv > snd, "1f1b: device 0 sends mb%d's activation before receiving its gradient",
          snd >= 0 ? l[snd].mb : -1);
    if (rcv > snd) {
        bsipipe_op_t r = l[rcv];
        memmove(l + snd + 1, l + snd, sizeof *l * (size_t)(rcv - snd));
        l[snd] = r;
        CHECK(bsipipe_schedule_validate_ex(s, unit) == 0, "receive moved ahead, posted receives: %s",
              bsipipe_error_detail());
        int rc = bsipipe_schedule_validate_ex(s, &ub);
        const char *msg = bsipipe_error_detail();
        CHECK(rc == BSIPIPE_EDEADLOCK, "receive moved ahead of its feeding send must deadlock when receives block "
              "(rc %d)", rc);
        printf("1f1b w=4, receive ahead of its send, blocking: %s\n", msg);
        CHECK_CONTAINS(msg, "with blocking receives");
        CHECK_CONTAINS(msg, "device 0 waits at op");
        CHECK_CONTAINS(msg, "RECV grad");
    }
    bsipipe_schedule_destroy(s);
}

/* The paper's ablation without the F-B overlap (no-reversal): bsipipe's
 * early receives with the complementary order at each boundary. It must run
 * (no deadlock with the engine's posted receives, under unit and FLOPs
 * costs); with blocking receives it deadlocks, the cycle named (printed). */
static void no_reversal(const bsipipe_cost_model_t *unit, const bsipipe_cost_model_t *flops)
{
    int plans = 0, blocked = 0;
    for (int w = 2; w <= 8; w++)
        for (int mult = 2; mult <= 4; mult += 2) {
            bsipipe_schedule_t *s = make(BSIPIPE_SCHED_BSIPIPE, w, mult * w, BSIPIPE_COMM_NO_REVERSAL);
            if (!s)
                continue;
            CHECK(bsipipe_schedule_validate_ex(s, unit) == 0, "no-reversal w=%d m=%d, unit costs: %s", w, mult * w,
                  bsipipe_error_detail());
            CHECK(bsipipe_schedule_validate_ex(s, flops) == 0, "no-reversal w=%d m=%d, FLOPs costs: %s", w,
                  mult * w, bsipipe_error_detail());
            bsipipe_cost_model_t b = *unit;
            b.blocking_recv = 1;
            int rc = bsipipe_schedule_validate_ex(s, &b);
            CHECK(rc == 0 || (rc == BSIPIPE_EDEADLOCK && strstr(bsipipe_error_detail(), "waits at op")),
                  "no-reversal w=%d m=%d, blocking receives: rc %d without a named cycle", w, mult * w, rc);
            blocked += rc == BSIPIPE_EDEADLOCK;
            plans++;
            bsipipe_schedule_destroy(s);
        }
    printf("no-reversal: %d plans deadlock-free with posted receives; %d of them deadlock when receives block\n",
           plans, blocked);
}

int main(void)
{
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    /* FLOPs costs with slow links: a different timeline from the one the
     * order was built on. */
    bsipipe_cost_model_t flops = bsipipe_cost_model_flops(1e9);
    flops.devices_per_node = 2;
    flops.inter_bandwidth = 1e6;
    no_reversal(&unit, &flops);

    for (int w = 2; w <= 8; w *= 2) {
        bsipipe_schedule_t *s = make(BSIPIPE_SCHED_BSIPIPE, w, 2 * w, BSIPIPE_COMM_NAIVE);
        if (!s)
            continue;
        int rc = bsipipe_schedule_validate(s);
        CHECK(rc == BSIPIPE_EDEADLOCK, "w=%d: naive order must deadlock (rc %d)", w, rc);
        const char *msg = bsipipe_error_detail();
        printf("w=%d naive: %s\n", w, msg);
        CHECK_CONTAINS(msg, "deadlock under rendezvous send/recv");
        CHECK_CONTAINS(msg, "waits at op");
        CHECK_CONTAINS(msg, "SEND");
        /* The cycle closes: the first device named is waited for again. */
        int first = -1, last_target = -2;
        if (sscanf(strstr(msg, "device ") ? strstr(msg, "device ") : "", "device %d", &first) == 1) {
            const char *p = msg, *q;
            while ((q = strstr(p, "for device ")) != NULL) {
                sscanf(q, "for device %d", &last_target);
                p = q + 1;
            }
        }
        CHECK(first >= 0 && last_target == first, "w=%d: the reported waits form a cycle (%d ... %d)", w, first,
              last_target);

        CHECK(bsipipe_schedule_reorder_comm(s, BSIPIPE_COMM_ORDERED) == 0, "reorder");
        rc = bsipipe_schedule_validate(s);
        /* Two devices pair up cleanly; from w = 4 on, the two pipes' sends
         * between inner neighbours meet before any receive is posted. */
        if (w >= 4)
            CHECK(rc == BSIPIPE_EDEADLOCK, "w=%d: complementary order without early receive deadlocks (rc %d)", w, rc);
        CHECK(bsipipe_schedule_reorder_comm(s, BSIPIPE_COMM_BSIPIPE) == 0, "reorder");
        rc = bsipipe_schedule_validate(s);
        CHECK(rc == 0, "w=%d bsipipe order: %s", w, bsipipe_error_detail());
        bsipipe_schedule_destroy(s);
    }

    /* The paper's order on every schedule: no send waits under the unit
     * costs it was built from, no deadlock under FLOPs costs with slow links.
     * Turning point of the V: no transfer. */
    bsipipe_schedule_t *s;
    for (int kind = 0; kind < BSIPIPE_SCHED_COUNT; kind++) {
        s = make((bsipipe_schedule_kind_t)kind, 4, 8, BSIPIPE_COMM_BSIPIPE);
        if (!s)
            continue;
        CHECK(bsipipe_schedule_validate(s) == 0, "%s: %s", bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind),
              bsipipe_error_detail());
        check_sends(s, &unit, bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind), 1);
        check_sends(s, &flops, bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind), 0);
        int sends = 0, recvs = 0, turning = 0, early = 0;
        for (int d = 0; d < 4; d++) {
            int n;
            const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
            for (int i = 0; i < n; i++) {
                sends += ops[i].kind == BSIPIPE_OP_SEND;
                recvs += ops[i].kind == BSIPIPE_OP_RECV;
                if (kind == BSIPIPE_SCHED_BSIPIPE && ops[i].kind == BSIPIPE_OP_SEND &&
                    ops[i].tensor == BSIPIPE_TENSOR_ACT && ops[i].chunk == 3)
                    turning++;
                /* Reversal: a receive of an activation posted before a
                 * backward that runs ahead of the consuming forward. */
                if (ops[i].kind == BSIPIPE_OP_RECV && ops[i].tensor == BSIPIPE_TENSOR_ACT)
                    for (int j = i + 1; j < n && !(ops[j].kind == BSIPIPE_OP_F && ops[j].mb == ops[i].mb &&
                                                   ops[j].sub == ops[i].sub); j++)
                        if (ops[j].kind == BSIPIPE_OP_B) {
                            early++;
                            break;
                        }
            }
        }
        CHECK(sends == recvs && sends == bsipipe_schedule_n_channels(s), "%s: %d sends, %d receives, %d channels",
              bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind), sends, recvs, bsipipe_schedule_n_channels(s));
        if (kind == BSIPIPE_SCHED_BSIPIPE) {
            CHECK(turning == 0, "the V's turning point (chunk w-1 -> w) is a local hand-off, found %d sends", turning);
            CHECK(early > 0, "bsipipe posts some activation receives before a backward (reversal)");
        }
        bsipipe_schedule_destroy(s);
    }

    blocking_receives(&unit, &flops);

    /* Unidirectional 1F1B with the complementary order alone completes
     * (Megatron pairs its sends and receives that way). */
    s = make(BSIPIPE_SCHED_1F1B, 8, 16, BSIPIPE_COMM_ORDERED);
    if (s) {
        CHECK(bsipipe_schedule_validate(s) == 0, "1f1b ordered: %s", bsipipe_error_detail());
        bsipipe_schedule_destroy(s);
    }
    return check_finish("test_comm_order");
}
