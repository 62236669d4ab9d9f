/* fuzz_config: fuzzed parallel configs and model dimensions through
 * bsipipe_parallel_config_validate, and the plans of the small ones.
 *
 * Input: fields in order (fuzz_util.h's fuzz_int: small values mostly, any
 * int32 after a 0xf0..0xff byte): schedule, w, p, k, m, tp, nodes,
 * devices_per_node, partition, comm, concat, optimise, a byte saying whether
 * model dimensions follow, then family, n_layers, hidden, n_heads,
 * ffn_hidden, vocab, seq_len, then the cluster for the mapping (nodes,
 * devices per node, topology-aware).
 * Properties: validation returns 0 or BSIPIPE_ECONFIG with a detail and
 * never crashes, whatever the ints (overflowing products included). An
 * accepted config with w <= 8, N_s <= 32 and p*w <= 16 (with the optimising
 * pass only where w*N_s <= 16: it costs seconds under ASan on the largest)
 * is built by bsipipe_schedule_create, and its plan passes
 * bsipipe_schedule_validate (where docs/schedules.md promises it) and the
 * simulator. The mapping onto a fuzzed cluster returns 0 with every device
 * on a node and no node over its capacity, or BSIPIPE_ECONFIG. */
#include "fuzz/fuzz_util.h"
#include "graph/bsipipe_config.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_schedule.h"
#include "graph/bsipipe_sim.h"
#include "graph/bsipipe_topology.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_silence_stderr();
    return 0;
}

static void check_mapping(const bsipipe_parallel_config_t *pc, fuzz_input_t *in)
{
    int nodes = fuzz_int(in), dpn = fuzz_int(in), aware = fuzz_byte(in) & 1;
    int *map = malloc(sizeof(int) * (size_t)pc->w);
    FUZZ_REQUIRE(map != NULL, "out of memory");
    int rc = bsipipe_map_devices(pc, nodes, dpn, aware, map);
    if (rc < 0) {
        FUZZ_REQUIRE(rc == BSIPIPE_ECONFIG || rc == -ENOMEM, "map rc %d", rc);
        free(map);
        return;
    }
    FUZZ_REQUIRE(nodes >= 1 && dpn >= 1 && dpn % pc->tp == 0, "mapped onto %d x %d with D_t=%d", nodes, dpn, pc->tp);
    /* Every node used holds a device: only the first w can be. */
    int span = nodes < pc->w ? nodes : pc->w;
    int *used = calloc((size_t)span, sizeof(int));
    FUZZ_REQUIRE(used != NULL, "out of memory");
    for (int d = 0; d < pc->w; d++) {
        FUZZ_REQUIRE(map[d] >= 0 && map[d] < span, "device %d on node %d of %d", d, map[d], nodes);
        used[map[d]]++;
        FUZZ_REQUIRE(used[map[d]] <= dpn / pc->tp, "node %d holds more than %d TP groups", map[d], dpn / pc->tp);
    }
    free(used);
    free(map);
}

static void check_plan(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims)
{
    bsipipe_schedule_t *s = NULL;
    int rc = bsipipe_schedule_create(pc, dims, &s);
    FUZZ_REQUIRE(rc == 0, "a validated config (%s w=%d p=%d k=%d m=%d tp=%d comm %s) is not built: %s",
                 bsipipe_schedule_kind_name(pc->schedule), pc->w, pc->p, pc->k, pc->m, pc->tp,
                 bsipipe_comm_order_name(pc->comm), bsipipe_error_detail());
    FUZZ_REQUIRE(bsipipe_schedule_n_devices(s) == pc->w && bsipipe_schedule_n_chunks(s) == pc->p * pc->w,
                 "%d devices, %d chunks", bsipipe_schedule_n_devices(s), bsipipe_schedule_n_chunks(s));
    /* What docs/schedules.md promises: bsipipe never deadlocks; no-reversal
     * only on Megatron's interleaved order with odd w (its wrap-around link
     * joins two even devices, both sending first); ordered is fine for the
     * schedules without interleaving or split backward (GPipe, TeraPipe,
     * 1F1B, Seq1F1B) and for BitPipe; naive deadlocks by design. */
    bsipipe_schedule_kind_t k = pc->schedule;
    int megatron_interleaved = k == BSIPIPE_SCHED_1F1B_I || k == BSIPIPE_SCHED_SEQ1F1B_I;
    int must_run = pc->comm == BSIPIPE_COMM_BSIPIPE ||
                   (pc->comm == BSIPIPE_COMM_NO_REVERSAL && !(megatron_interleaved && pc->w % 2)) ||
                   (pc->comm == BSIPIPE_COMM_ORDERED &&
                    (k == BSIPIPE_SCHED_GPIPE || k == BSIPIPE_SCHED_TERAPIPE || k == BSIPIPE_SCHED_1F1B ||
                     k == BSIPIPE_SCHED_SEQ1F1B || k == BSIPIPE_SCHED_BITPIPE));
    rc = bsipipe_schedule_validate(s);
    if (must_run)
        FUZZ_REQUIRE(rc == 0, "%s w=%d p=%d k=%d m=%d comm %s: %s", bsipipe_schedule_kind_name(pc->schedule), pc->w,
                     pc->p, pc->k, pc->m, bsipipe_comm_order_name(pc->comm), bsipipe_error_detail());
    if (rc == 0) {
        bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
        bsipipe_sim_result_t *r = NULL;
        rc = bsipipe_simulate(s, &unit, &r);
        FUZZ_REQUIRE(rc == 0, "a valid plan does not simulate: %s", bsipipe_error_detail());
        FUZZ_REQUIRE(r->makespan > 0 && r->bubble_ratio >= 0 && r->bubble_ratio < 1, "makespan %g, bubble %g",
                     r->makespan, r->bubble_ratio);
        bsipipe_sim_result_destroy(r);
    }
    bsipipe_schedule_destroy(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    bsipipe_parallel_config_t pc;
    memset(&pc, 0, sizeof pc);
    pc.schedule = (bsipipe_schedule_kind_t)fuzz_int(&in);
    pc.w = fuzz_int(&in);
    pc.p = fuzz_int(&in);
    pc.k = fuzz_int(&in);
    pc.m = fuzz_int(&in);
    pc.tp = fuzz_int(&in);
    pc.nodes = fuzz_int(&in);
    pc.devices_per_node = fuzz_int(&in);
    pc.partition = (bsipipe_partition_kind_t)fuzz_int(&in);
    pc.comm = (bsipipe_comm_order_t)fuzz_int(&in);
    pc.concat = fuzz_int(&in);
    pc.optimise = fuzz_int(&in);
    bsipipe_model_dims_t dims, *d = NULL;
    memset(&dims, 0, sizeof dims);
    if (fuzz_byte(&in) & 1) {
        dims.family = (bsipipe_model_family_t)fuzz_int(&in);
        dims.n_layers = fuzz_int(&in);
        dims.hidden = fuzz_int(&in);
        dims.n_heads = fuzz_int(&in);
        dims.ffn_hidden = fuzz_int(&in);
        dims.vocab = fuzz_int(&in);
        dims.seq_len = fuzz_int(&in);
        d = &dims;
        int rc = bsipipe_model_dims_validate(d);
        FUZZ_REQUIRE(rc == 0 || rc == BSIPIPE_ECONFIG, "dims rc %d", rc);
    }
    /* A layout: none, "auto", or up to 48 characters of the grammar's
     * alphabet (and a few strangers) */
    char layout[49];
    uint8_t mode = fuzz_byte(&in);
    if (mode % 3 == 1) {
        pc.layout = "auto";
    } else if (mode % 3 == 2) {
        static const char alphabet[] = "Et|L()*0123456789, mx";
        int n = fuzz_byte(&in) % 49;
        for (int i = 0; i < n; i++)
            layout[i] = alphabet[fuzz_byte(&in) % (sizeof alphabet - 1)];
        layout[n] = '\0';
        pc.layout = layout;
    }
    int rc = bsipipe_parallel_config_validate(&pc, d);
    if (rc < 0) {
        FUZZ_REQUIRE(rc == BSIPIPE_ECONFIG, "validate rc %d", rc);
        const char *why = bsipipe_error_detail();
        FUZZ_REQUIRE(why && *why, "a refusal without a detail");
        return 0;
    }
    check_mapping(&pc, &in);
    if (pc.w <= 8 && (long)pc.m * pc.k <= 32 && pc.p * pc.w <= 16) {
        /* The optimising pass takes seconds per plan under ASan at w=8,
         * N_s=32, a tenth of one at w*N_s = 16: it runs where w*N_s <= 16,
         * the larger plans are checked as constructed. */
        if (pc.optimise && pc.w * pc.m * pc.k > 16)
            pc.optimise = 0;
        check_plan(&pc, d);
    }
    return 0;
}
