/* fuzz_topology: cluster descriptions through bsipipe_topology_create
 * ("NxG", "synthetic:DESC", "this"; graph/bsipipe_topology.c), then the
 * mapping of a fuzzed plan onto the cluster read.
 *
 * Input: the description up to the first newline (or NUL); after the
 * newline, fields (fuzz_util.h's fuzz_int) for the mapping: schedule, w,
 * D_t, topology-aware. "xml:FILE" descriptions are skipped: they name files,
 * and hwloc's XML parser is hwloc's to fuzz.
 * Properties: 0 with 1..8192 devices in all (an "NxG" gives N nodes of G),
 * or -EINVAL / -ENOENT / -ENOMEM with a detail; never a crash, a hang (the
 * bounds on what hwloc is asked to build) or unbounded memory. A validated
 * config maps onto the cluster with every device on one of its nodes, no
 * node over its capacity, or is refused with BSIPIPE_ECONFIG. */
#include "fuzz/fuzz_util.h"
#include "graph/bsipipe_config.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_topology.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__lsan_default_suppressions(void);

/* hwloc 2.9.0 leaks 32 bytes in hwloc_topology_set_synthetic whenever the
 * description attaches memory ("[numa(memory=1GB)] pack:2 core:2 pu:1",
 * valid or not; found by this target, docs/fuzzing.md): not ours to fix.
 * LeakSanitizer ignores leaks allocated under libhwloc; ours (allocated by
 * our own code) are still reported. */
const char *__lsan_default_suppressions(void)
{
    return "leak:libhwloc.so\n";
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_silence_stderr(); /* hwloc complains about bad synthetic descriptions on stderr */
    return 0;
}

static void check_mapping(const bsipipe_topology_t *t, fuzz_input_t *in)
{
    bsipipe_schedule_kind_t kind = (bsipipe_schedule_kind_t)(fuzz_byte(in) % BSIPIPE_SCHED_COUNT);
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = fuzz_int(in);
    pc.tp = fuzz_int(in);
    int aware = fuzz_byte(in) & 1;
    if (pc.w % 2 == 0 && pc.w > 0 && pc.w <= 4096)
        pc.m = pc.w * pc.k * 2; /* keeps most schedules' N_s rules satisfied */
    if (bsipipe_parallel_config_validate(&pc, NULL) < 0)
        return;
    int nodes = bsipipe_topology_nodes(t), dpn = bsipipe_topology_devices_per_node(t);
    int *map = malloc(sizeof(int) * (size_t)pc.w);
    FUZZ_REQUIRE(map != NULL, "out of memory");
    int rc = bsipipe_map_devices(&pc, nodes, dpn, aware, map);
    if (rc < 0) {
        FUZZ_REQUIRE(rc == BSIPIPE_ECONFIG || rc == -ENOMEM, "map rc %d", rc);
        free(map);
        return;
    }
    int *used = calloc((size_t)nodes, sizeof(int));
    FUZZ_REQUIRE(used != NULL, "out of memory");
    for (int d = 0; d < pc.w; d++) {
        FUZZ_REQUIRE(map[d] >= 0 && map[d] < nodes, "device %d on node %d of %d", d, map[d], nodes);
        FUZZ_REQUIRE(++used[map[d]] <= dpn / pc.tp, "node %d over its %d TP groups", map[d], dpn / pc.tp);
    }
    free(used);
    free(map);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len = 0;
    while (len < size && data[len] != '\n' && data[len] != '\0')
        len++;
    char *spec = malloc(len + 1);
    FUZZ_REQUIRE(spec != NULL, "out of memory");
    memcpy(spec, data, len);
    spec[len] = '\0';
    if (strncmp(spec, "xml:", 4) == 0) {
        free(spec);
        return 0;
    }
    bsipipe_topology_t *t = (bsipipe_topology_t *)&len; /* must be replaced: NULL on failure */
    int rc = bsipipe_topology_create(spec, &t);
    if (rc < 0) {
        FUZZ_REQUIRE(rc == -EINVAL || rc == -ENOENT || rc == -ENOMEM, "'%s': rc %d", spec, rc);
        FUZZ_REQUIRE(t == NULL, "'%s': a refusal left *out set", spec);
        const char *why = bsipipe_error_detail();
        FUZZ_REQUIRE(why && *why, "'%s': a refusal without a detail", spec);
        free(spec);
        return 0;
    }
    int nodes = bsipipe_topology_nodes(t), dpn = bsipipe_topology_devices_per_node(t);
    FUZZ_REQUIRE(nodes >= 1 && dpn >= 1 && (long)nodes * dpn <= BSIPIPE_TOPOLOGY_MAX_DEVICES, "'%s': %d x %d", spec,
                 nodes, dpn);
    int n, g;
    char tail;
    if (sscanf(spec, "%dx%d%c", &n, &g, &tail) == 2)
        FUZZ_REQUIRE(nodes == n && dpn == g, "'%s' read as %d x %d", spec, nodes, dpn);
    fuzz_input_t in = {data + len + (len < size), size - len - (len < size)};
    check_mapping(t, &in);
    bsipipe_topology_destroy(t);
    free(spec);
    return 0;
}
