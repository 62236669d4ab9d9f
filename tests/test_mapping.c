/* test_mapping: cluster topologies through hwloc (NxG shorthand, synthetic,
 * XML) and the mapping of pipeline devices onto nodes: mirrored pairs share a
 * node whenever possible (then no gradient sync crosses nodes), impossible
 * requests are refused with the rule. */
#include "graph/bsipipe_topology.h"
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <stdlib.h>

static void topo(const char *spec, int nodes, int per_node)
{
    bsipipe_topology_t *t;
    int rc = bsipipe_topology_create(spec, &t);
    CHECK(rc == 0, "topology %s: %s", spec, bsipipe_error_detail());
    if (rc == 0) {
        CHECK(bsipipe_topology_nodes(t) == nodes && bsipipe_topology_devices_per_node(t) == per_node,
              "%s: %d x %d, expected %d x %d", spec, bsipipe_topology_nodes(t), bsipipe_topology_devices_per_node(t),
              nodes, per_node);
        bsipipe_topology_destroy(t);
    }
}

/* Maps BSIPipe (w, tp) on nodes x per_node; checks pairs and sync traffic. */
static void map_bsipipe(int w, int tp, int nodes, int per_node)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = w;
    pc.tp = tp;
    pc.m = w;
    int *aware = malloc(sizeof(int) * (size_t)w), *naive = malloc(sizeof(int) * (size_t)w);
    int rc = bsipipe_map_devices(&pc, nodes, per_node, 1, aware);
    CHECK(rc == 0, "w=%d D_t=%d on %dx%d: %s", w, tp, nodes, per_node, bsipipe_error_detail());
    CHECK(bsipipe_map_devices(&pc, nodes, per_node, 0, naive) == 0, "naive");
    if (rc == 0) {
        int load[64] = {0};
        for (int d = 0; d < w; d++) {
            CHECK(aware[d] == aware[w - 1 - d], "w=%d %dx%d: device %d on node %d, its mirror %d on node %d", w, nodes,
                  per_node, d, aware[d], w - 1 - d, aware[w - 1 - d]);
            CHECK(aware[d] >= 0 && aware[d] < nodes, "node in range");
            load[aware[d]] += tp;
        }
        for (int n = 0; n < nodes; n++)
            CHECK(load[n] <= per_node, "node %d holds %d devices of %d", n, load[n], per_node);
        /* Sync traffic: none across nodes when mirrored pairs share a node. */
        bsipipe_schedule_t *s;
        bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 2 * w, 64, 4, 256, 256, 64};
        if (bsipipe_schedule_create(&pc, &dims, &s) == 0) {
            bsipipe_cost_model_t cost = bsipipe_cost_model_flops(1e12);
            bsipipe_sim_result_t *ra, *rn;
            cost.device_node = aware;
            CHECK(bsipipe_simulate(s, &cost, &ra) == 0, "simulate aware");
            cost.device_node = naive;
            CHECK(bsipipe_simulate(s, &cost, &rn) == 0, "simulate naive");
            printf("bsipipe w=%2d D_t=%d on %dx%d: sync inter-node %.0f B (naive %.0f B), activations inter-node "
                   "%.0f B (naive %.0f B)\n", w, tp, nodes, per_node, ra->sync_bytes[1], rn->sync_bytes[1],
                   ra->act_bytes[1], rn->act_bytes[1]);
            CHECK(ra->sync_bytes[1] == 0, "aware mapping: no sync across nodes");
            if (nodes > 1)
                CHECK(rn->sync_bytes[1] > 0, "naive mapping: sync crosses nodes");
            CHECK(ra->sync_bytes[0] + ra->sync_bytes[1] == rn->sync_bytes[0] + rn->sync_bytes[1],
                  "the same sync bytes move either way");
            bsipipe_sim_result_destroy(ra);
            bsipipe_sim_result_destroy(rn);
            bsipipe_schedule_destroy(s);
        }
    }
    free(aware);
    free(naive);
}

static void pc_split_check(void)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 6;
    int node[6], together = 0;
    CHECK(bsipipe_map_devices(&pc, 2, 3, 1, node) == 0, "w=6 on 2x3: %s", bsipipe_error_detail());
    for (int j = 0; j < 3; j++)
        together += node[j] == node[5 - j];
    CHECK(together == 2, "w=6 on 2x3: %d pairs share a node, 2 can", together);
}

int main(void)
{
    topo("1x8", 1, 8);
    topo("2x4", 2, 4);
    topo("4x8", 4, 8);
    topo("synthetic:group:3 core:2 pu:1", 3, 2);
    /* NxG is built directly (fuzz/fuzz_topology): through hwloc, nodes of one
     * device were merged (3x1 read as 1x3) and 4096 nodes took 15 s. */
    topo("3x1", 3, 1);
    topo("4096x2", 4096, 2);
    bsipipe_topology_t *t;
    CHECK(bsipipe_topology_create("this", &t) == 0 && bsipipe_topology_nodes(t) == 1 &&
              bsipipe_topology_devices_per_node(t) >= 1, "the real machine is one node");
    bsipipe_topology_destroy(t);

    /* The paper's settings, at cluster scale: 1x8, 2x4, 4x8 (w=32), and 4x4
     * with D_t=2 (Figure 3: a node holds one TP group of each pipe). */
    map_bsipipe(8, 1, 1, 8);
    map_bsipipe(8, 1, 2, 4);
    map_bsipipe(32, 1, 4, 8);
    map_bsipipe(8, 2, 4, 4);
    map_bsipipe(4, 4, 2, 8); /* (w, D_t) = (4, 4) on 16 devices */
    /* Odd slots per node: 2 of 3 pairs fit whole, the last one is split. */
    pc_split_check();

    /* Figure 3: 4 TP groups of 2 on 2 nodes of 4: node 0 holds groups 0 and 3. */
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 4;
    pc.tp = 2;
    int node[8]; /* pc.w goes up to 8 below */
    CHECK(bsipipe_map_devices(&pc, 2, 4, 1, node) == 0 && node[0] == 0 && node[3] == 0 && node[1] == 1 &&
              node[2] == 1, "Figure 3 mapping");
    /* A cluster of 2^31-1 nodes costs w slots, not 8 GiB (fuzz/fuzz_config). */
    CHECK(bsipipe_map_devices(&pc, 0x7fffffff, 4, 1, node) == 0 && node[0] == 0 && node[3] == 0 && node[1] == 1 &&
              node[2] == 1, "2^31-1 nodes: %s", bsipipe_error_detail());

    /* Impossible requests. */
    pc.w = 8;
    pc.tp = 1;
    CHECK(bsipipe_map_devices(&pc, 8, 1, 1, node) == BSIPIPE_ECONFIG, "one device per node");
    CHECK_CONTAINS(bsipipe_error_detail(), "cannot share a node");
    CHECK(bsipipe_map_devices(&pc, 8, 1, 0, node) == 0, "the naive mapping still works there");
    CHECK(bsipipe_map_devices(&pc, 2, 2, 1, node) == BSIPIPE_ECONFIG, "too few devices");
    CHECK_CONTAINS(bsipipe_error_detail(), "the cluster has 4");
    pc.tp = 3;
    CHECK(bsipipe_map_devices(&pc, 4, 8, 1, node) == BSIPIPE_ECONFIG, "TP across nodes");
    CHECK_CONTAINS(bsipipe_error_detail(), "does not fit evenly");
    CHECK(bsipipe_topology_create("4y8", &t) == -EINVAL, "bad spec");
    CHECK_CONTAINS(bsipipe_error_detail(), "use NxG");
    CHECK(bsipipe_topology_create("xml:/nonexistent/topo.xml", &t) == -ENOENT, "missing XML");
    CHECK(bsipipe_topology_create("0x8", &t) == -EINVAL, "zero nodes");
    CHECK(bsipipe_topology_create("synthetic:frobnicate:3", &t) == -EINVAL, "bad synthetic");
    return check_finish("test_mapping");
}
