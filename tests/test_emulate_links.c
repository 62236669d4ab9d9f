/* test_emulate_links: the links model (graph/sim_links.c) and the engine's
 * emulated links (bsipipe_engine_options.emulate_links).
 *   1. A transfer's time is latency + bytes / bandwidth of its link class;
 *      a shared NIC queues a node's inter-node transfers; a SYNC exchanges
 *      both ways at once, or there and back (sync_reduce_back), or is free.
 *   2. The simulator charges the same links: a naive mapping whose syncs
 *      cross nodes adds at least one chunk's sync to the iteration.
 *   3. The engine emulating those links cannot beat the planner's ideal
 *      iteration on them (a lower bound: robust to a loaded machine), and
 *      bad combinations are refused with the rule. */
#include "tests/check.h"
#include "tests/test_data.h"
#include "tasks/bsipipe_engine.h"
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <stdlib.h>

static const bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 8, 64, 2, 256, 64, 64};

static bsipipe_cost_model_t links_model(const int *map, double inter_bw)
{
    bsipipe_cost_model_t c = bsipipe_cost_model_emulated(1e15); /* compute nearly free */
    c.free_transfers = 0;
    c.intra_latency = 0;
    c.intra_bandwidth = 0; /* free inside a node */
    c.inter_latency = 1e-3;
    c.inter_bandwidth = inter_bw;
    c.device_node = map;
    return c;
}

static void check_model(const bsipipe_schedule_t *s)
{
    int map[4] = {0, 1, 1, 0};
    bsipipe_cost_model_t c = links_model(map, 1e6);
    bsipipe_links_t *l = NULL;
    CHECK(bsipipe_links_create(s, &c, &l) == 0, "links: %s", bsipipe_error_detail());
    if (!l)
        return;
    CHECK(bsipipe_links_inter(l, 0, 1) && !bsipipe_links_inter(l, 0, 3), "link classes of {0,1,1,0}");
    CHECK_NEAR(bsipipe_links_time(l, 0, 1, 1e6), 1.001, 1e-12, "inter: 1 ms + 1 MB at 1 MB/s");
    CHECK_NEAR(bsipipe_links_time(l, 0, 3, 1e6), 0, 1e-12, "intra: free");
    /* per-device links, blocking sends: no queue */
    CHECK_NEAR(bsipipe_links_move(l, 0, 1, 1e6, 0) + bsipipe_links_move(l, 3, 2, 1e6, 0), 2 * 1.001, 1e-12,
               "two devices' own links in parallel");
    CHECK_NEAR(bsipipe_links_sync(l, 0, 1, 1e6, 0.5), 1.501, 1e-12, "sync: both ways at once");
    bsipipe_links_destroy(l);

    c.shared_nic = 1; /* node 0's devices 0 and 3 queue on its one link */
    CHECK(bsipipe_links_create(s, &c, &l) == 0, "links: %s", bsipipe_error_detail());
    if (!l)
        return;
    double a = bsipipe_links_move(l, 0, 1, 1e6, 0), b = bsipipe_links_move(l, 3, 2, 1e6, 0);
    CHECK_NEAR(a, 1.001, 1e-12, "shared NIC: first");
    CHECK_NEAR(b, 2.002, 1e-12, "shared NIC: the second waits for the first");
    bsipipe_links_reset(l);
    CHECK_NEAR(bsipipe_links_move(l, 3, 2, 1e6, 0), 1.001, 1e-12, "reset frees the links");
    bsipipe_links_destroy(l);

    c.shared_nic = 0;
    c.sync_reduce_back = 1;
    CHECK(bsipipe_links_create(s, &c, &l) == 0, "links: %s", bsipipe_error_detail());
    if (l) {
        CHECK_NEAR(bsipipe_links_sync(l, 0, 1, 1e6, 0), 2 * 1.001, 1e-12, "sync there and back");
        CHECK_NEAR(bsipipe_links_sync(l, 0, 3, 1e6, 0), 0, 1e-12, "sync inside a node: free");
        bsipipe_links_destroy(l);
    }
    c.sync_free = 1;
    CHECK(bsipipe_links_create(s, &c, &l) == 0, "links: %s", bsipipe_error_detail());
    if (l) {
        CHECK_NEAR(bsipipe_links_sync(l, 0, 1, 1e6, 0.25), 0.25, 1e-12, "sync_free");
        bsipipe_links_destroy(l);
    }
}

/* The naive mapping {0,0,1,1} sends every sync across nodes. */
static void check_sim(const bsipipe_schedule_t *s)
{
    int naive[4] = {0, 0, 1, 1};
    bsipipe_cost_model_t c = links_model(naive, 2e6), nosync = c;
    nosync.sync_free = 1;
    bsipipe_sim_result_t *r = NULL, *f = NULL;
    CHECK(bsipipe_simulate(s, &c, &r) == 0 && bsipipe_simulate(s, &nosync, &f) == 0, "simulate: %s",
          bsipipe_error_detail());
    if (r && f) {
        /* both replicas' SYNC ops count the bytes: a chunk's own, on average */
        double chunk_sync = r->sync_bytes[1] / (2.0 * bsipipe_schedule_n_chunks(s)) / 2e6;
        CHECK(r->sync_bytes[1] > 0 && r->sync_bytes[0] == 0, "naive: every sync across nodes");
        CHECK(r->iteration_time - f->iteration_time >= chunk_sync * 0.999,
              "syncs across nodes add %.4f s, at least one chunk's %.4f s", r->iteration_time - f->iteration_time,
              chunk_sync);
        printf("naive mapping, 2 MB/s between nodes: iteration %.3f s predicted, %.3f s of it the syncs\n",
               r->iteration_time, r->iteration_time - f->iteration_time);
    }
    bsipipe_sim_result_destroy(r);
    bsipipe_sim_result_destroy(f);
}

static void check_engine(const bsipipe_parallel_config_t *pc, const bsipipe_schedule_t *s)
{
    int m = pc->m, S = dims.seq_len;
    int *tokens = malloc(sizeof(int) * (size_t)(m * S)), *targets = malloc(sizeof(int) * (size_t)(m * S));
    test_data_make(m, S, dims.vocab, 3, tokens, targets);
    int aware[4] = {0, 1, 1, 0}, naive[4] = {0, 0, 1, 1};
    for (int v = 0; v < 2; v++) {
        bsipipe_cost_model_t c = links_model(v ? naive : aware, 2e6);
        bsipipe_sim_result_t *r = NULL;
        if (bsipipe_simulate(s, &c, &r) < 0) {
            CHECK(0, "simulate: %s", bsipipe_error_detail());
            continue;
        }
        bsipipe_engine_options_t o = bsipipe_engine_options_default(&dims, pc);
        o.emulate_flops = 1e15;
        o.emulate_links = &c;
        bsipipe_engine_t *e = NULL;
        int rc = bsipipe_engine_create(&o, &e);
        CHECK(rc == 0, "create: %s", bsipipe_error_detail());
        double loss, gn, wall = 0;
        for (int it = 0; rc == 0 && it < 2; it++) {
            rc = bsipipe_engine_iteration(e, tokens, targets, &loss, &gn);
            CHECK(rc == 0, "iteration: %s", bsipipe_error_detail());
            bsipipe_engine_stats_t st;
            if (rc == 0 && bsipipe_engine_last_stats(e, &st) == 0)
                wall = st.wall_s;
        }
        printf("%s mapping: iteration %.3f s emulated, %.3f s predicted (the ideal, a lower bound)\n",
               v ? "naive" : "aware", wall, r->iteration_time);
        CHECK(wall >= 0.9 * r->iteration_time, "%s: emulated %.3f s beats the links' ideal %.3f s: transfers were "
              "not held", v ? "naive" : "aware", wall, r->iteration_time);
        bsipipe_engine_destroy(e);
        bsipipe_sim_result_destroy(r);
    }

    /* Refused, with the rule. */
    int map[4] = {0, 1, 1, 0};
    bsipipe_cost_model_t c = links_model(map, 2e6);
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&dims, pc);
    o.emulate_links = &c;
    bsipipe_engine_t *e = NULL;
    CHECK(bsipipe_engine_create(&o, &e) == -EINVAL, "links without emulated device time");
    CHECK_CONTAINS(bsipipe_error_detail(), "emulate_flops");
    bsipipe_engine_destroy(e);
    e = NULL;
    o.emulate_flops = 1e15;
    c.async_send = 1;
    CHECK(bsipipe_engine_create(&o, &e) == -EINVAL, "async sends cannot be emulated");
    CHECK_CONTAINS(bsipipe_error_detail(), "async_send");
    bsipipe_engine_destroy(e);
    free(tokens);
    free(targets);
}

int main(void)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 4;
    pc.m = 4;
    bsipipe_schedule_t *s = NULL;
    if (bsipipe_schedule_create(&pc, &dims, &s) < 0) {
        fprintf(stderr, "plan: %s\n", bsipipe_error_detail());
        return 1;
    }
    check_model(s);
    check_sim(s);
    check_engine(&pc, s);
    bsipipe_schedule_destroy(s);
    return check_finish("test_emulate_links");
}
