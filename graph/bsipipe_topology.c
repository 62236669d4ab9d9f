/* bsipipe_topology.c: cluster topology through hwloc, and device mapping. */
#include "graph/bsipipe_topology.h"
#include "base/bsipipe_error.h"

#include <ctype.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bounds on what hwloc is asked to build: its synthetic and XML backends
 * build the whole object tree, so 512x512 takes minutes and gigabytes
 * (8192 leaves load in about half a second, but its time grows with the
 * square of sibling groups or packages: 4096 of them take 8 s). */
enum {
    TOPO_MAX_LEAVES = BSIPIPE_TOPOLOGY_MAX_DEVICES,
    TOPO_MAX_SYNTH = 255,              /* characters of a synthetic description */
    TOPO_MAX_XML_BYTES = 64 << 20,     /* an XML export of 8192 PUs is a few MB */
};

/* The number of leaves (PUs) of an hwloc synthetic description: the product
 * of the arities of its levels ("group:4 core:8 pu:1", "4 8 1"); attributes
 * in parentheses and attached memory in brackets are skipped. 0 and a
 * detail when a level has no arity (hwloc would refuse it too); the product
 * saturates above the cap. */
/* leaves times the arity at num, saturating above the cap. Base 0, as hwloc
 * reads it: "core:0x1000" is 4096 cores, "core:010" is 8 (read in base 10,
 * 0x1000 counted as 0, and hwloc was handed "pack:0x100 core:0x100
 * pu:0x10", a million PUs, past the cap). */
static long times_arity(long leaves, const char *num)
{
    long a = strtol(num, NULL, 0);
    if (a < 1)
        a = 1; /* hwloc refuses 0 itself */
    return leaves > TOPO_MAX_LEAVES / a ? (long)TOPO_MAX_LEAVES + 1 : leaves * a;
}

static long synthetic_leaves(const char *desc)
{
    long leaves = 1;
    int levels = 0;
    const char *p = desc;
    while (*p) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        if (*p == '[') { /* attached memory: [numa(memory=...)] */
            while (*p && *p != ']')
                p++;
            if (*p)
                p++;
            continue;
        }
        /* Every "type:N" at depth 0 counts, not only the token's last: hwloc
         * needs no space between levels ("core:70pu:31" is 70 x 31; counted
         * as 31, "group:52 core:70pu:31" passed the cap and hwloc built
         * 112,840 PUs, 2 GB under the fuzzer: found by fuzz/fuzz_topology). */
        const char *start = p;
        int depth = 0, colons = 0;
        for (; *p && (depth > 0 || !isspace((unsigned char)*p)); p++) {
            depth += *p == '(';
            depth -= *p == ')' && depth > 0;
            if (*p != ':' || depth > 0)
                continue;
            colons++;
            if (!isdigit((unsigned char)p[1])) {
                bsipipe_error_set(-EINVAL, "topology: level '%.*s' of the synthetic description has no arity (e.g. "
                                  "core:8)", (int)(p + 1 - start), start);
                return 0;
            }
            leaves = times_arity(leaves, p + 1);
        }
        if (colons == 0) {
            if (!isdigit((unsigned char)*start)) {
                bsipipe_error_set(-EINVAL, "topology: level '%.*s' of the synthetic description has no arity (e.g. "
                                  "core:8)", (int)(p - start), start);
                return 0;
            }
            leaves = times_arity(leaves, start);
        }
        levels++;
    }
    if (levels == 0)
        bsipipe_error_set(-EINVAL, "topology: empty synthetic description");
    return levels ? leaves : 0;
}

struct bsipipe_topology {
    int nodes, devices_per_node;
};

/* Nodes = Group objects directly below the machine, else the machine; the
 * devices of a node = its cores (all nodes must have the same number). */
static int read_topology(hwloc_topology_t topo, bsipipe_topology_t *t)
{
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    int groups = 0;
    for (hwloc_obj_t c = root->first_child; c; c = c->next_sibling)
        groups += c->type == HWLOC_OBJ_GROUP;
    int cores_depth = hwloc_get_type_depth(topo, HWLOC_OBJ_CORE);
    if (cores_depth < 0)
        return bsipipe_error_set(-EINVAL, "topology: no cores found");
    if (groups == 0) {
        t->nodes = 1;
        t->devices_per_node = hwloc_get_nbobjs_by_depth(topo, (unsigned)cores_depth);
        return t->devices_per_node > 0 ? 0 : bsipipe_error_set(-EINVAL, "topology: no cores found");
    }
    t->nodes = 0;
    t->devices_per_node = -1;
    for (hwloc_obj_t c = root->first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_GROUP)
            continue;
        int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, c->cpuset, HWLOC_OBJ_CORE);
        if (t->devices_per_node >= 0 && n != t->devices_per_node)
            return bsipipe_error_set(-EINVAL, "topology: nodes differ in size (%d and %d devices); every node "
                                     "must have the same number", t->devices_per_node, n);
        t->devices_per_node = n;
        t->nodes++;
    }
    return t->devices_per_node > 0 ? 0 : bsipipe_error_set(-EINVAL, "topology: a node has no cores");
}

int bsipipe_topology_create(const char *spec, bsipipe_topology_t **out)
{
    *out = NULL;
    if (!spec)
        return bsipipe_error_set(-EINVAL, "topology: no description given");
    char synth[256] = "";
    const char *xml = NULL;
    int n, g;
    char tail;
    if (sscanf(spec, "%dx%d%c", &n, &g, &tail) == 2) {
        if (n < 1 || g < 1 || n > 4096 || g > 4096)
            return bsipipe_error_set(-EINVAL, "topology '%s': nodes and devices per node must be in 1..4096", spec);
        if ((long)n * g > TOPO_MAX_LEAVES)
            return bsipipe_error_set(-EINVAL, "topology '%s': %ld devices; a cluster of at most %d devices can be "
                                     "planned (e.g. %dx%d); plan a part of the cluster, a pipeline spans w "
                                     "devices", spec, (long)n * g, TOPO_MAX_LEAVES, TOPO_MAX_LEAVES / 8, 8);
        /* Built directly, not through hwloc: hwloc merges a group that holds
         * a single core into it ("3x1" came back as 1 node of 3), and takes
         * seconds for thousands of groups (4096x2: 15 s); both found by
         * fuzz/fuzz_topology. */
        bsipipe_topology_t *t = calloc(1, sizeof *t);
        if (!t)
            return bsipipe_error_set(-ENOMEM, "out of memory");
        t->nodes = n;
        t->devices_per_node = g;
        *out = t;
        return 0;
    } else if (strncmp(spec, "synthetic:", 10) == 0) {
        if (strlen(spec + 10) > TOPO_MAX_SYNTH)
            return bsipipe_error_set(-EINVAL, "topology: the synthetic description is too long (%zu characters, at "
                                     "most %d)", strlen(spec + 10), TOPO_MAX_SYNTH);
        long leaves = synthetic_leaves(spec + 10);
        if (leaves == 0)
            return -EINVAL;
        if (leaves > TOPO_MAX_LEAVES)
            return bsipipe_error_set(-EINVAL, "topology '%s': more than %d processing units; a cluster of at most "
                                     "%d devices can be planned; describe a smaller one", spec, TOPO_MAX_LEAVES,
                                     TOPO_MAX_LEAVES);
        snprintf(synth, sizeof synth, "%s", spec + 10);
    } else if (strncmp(spec, "xml:", 4) == 0) {
        xml = spec + 4;
        struct stat st;
        if (access(xml, R_OK) != 0 || stat(xml, &st) != 0)
            return bsipipe_error_set(-ENOENT, "topology: cannot read XML file '%s'", xml);
        if (!S_ISREG(st.st_mode))
            return bsipipe_error_set(-EINVAL, "topology: XML file '%s' is not a regular file", xml);
        if (st.st_size > TOPO_MAX_XML_BYTES)
            return bsipipe_error_set(-EINVAL, "topology: XML file '%s' has %lld bytes, at most %d are read (a "
                                     "cluster of at most %d devices can be planned)", xml, (long long)st.st_size,
                                     TOPO_MAX_XML_BYTES, TOPO_MAX_LEAVES);
    } else if (strcmp(spec, "this") != 0) {
        return bsipipe_error_set(-EINVAL, "topology '%s' not understood: use NxG (e.g. 4x8), synthetic:DESC, "
                                 "xml:FILE or this", spec);
    }
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return bsipipe_error_set(-ENOMEM, "topology: hwloc_topology_init failed");
    int rc = 0;
    if (synth[0] && hwloc_topology_set_synthetic(topo, synth) != 0)
        rc = bsipipe_error_set(-EINVAL, "topology: hwloc rejects the synthetic description '%s'", synth);
    else if (xml && hwloc_topology_set_xml(topo, xml) != 0)
        rc = bsipipe_error_set(-EINVAL, "topology: '%s' is not an hwloc XML topology", xml);
    else if (hwloc_topology_load(topo) != 0)
        rc = bsipipe_error_set(-EINVAL, "topology: hwloc cannot load '%s'", spec);
    bsipipe_topology_t *t = NULL;
    if (rc == 0 && !(t = calloc(1, sizeof *t)))
        rc = bsipipe_error_set(-ENOMEM, "out of memory");
    if (rc == 0 && hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU) > TOPO_MAX_LEAVES)
        rc = bsipipe_error_set(-EINVAL, "topology '%s': %d processing units; a cluster of at most %d devices can "
                               "be planned", spec, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU), TOPO_MAX_LEAVES);
    if (rc == 0)
        rc = read_topology(topo, t);
    hwloc_topology_destroy(topo);
    if (rc < 0) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void bsipipe_topology_destroy(bsipipe_topology_t *t)
{
    free(t);
}

int bsipipe_topology_nodes(const bsipipe_topology_t *t) { return t->nodes; }
int bsipipe_topology_devices_per_node(const bsipipe_topology_t *t) { return t->devices_per_node; }

int bsipipe_map_devices(const bsipipe_parallel_config_t *pc, int nodes, int devices_per_node, int topology_aware,
                        int *device_node)
{
    int w = pc->w, tp = pc->tp;
    if (nodes < 1 || devices_per_node < 1)
        return bsipipe_error_set(BSIPIPE_ECONFIG, "mapping: the cluster needs at least one node and device");
    if (devices_per_node % tp != 0)
        return bsipipe_error_set(BSIPIPE_ECONFIG,
            "mapping: a TP group of D_t=%d devices does not fit evenly in nodes of %d devices (TP would cross "
            "nodes); use a D_t that divides %d", tp, devices_per_node, devices_per_node);
    int groups = devices_per_node / tp; /* pipeline devices a node holds */
    if ((long)w > (long)nodes * groups)
        return bsipipe_error_set(BSIPIPE_ECONFIG,
            "mapping: %d pipeline devices of D_t=%d need %d devices, the cluster has %d (%d nodes x %d); use "
            "w <= %d or a larger cluster", w, tp, w * tp, nodes * devices_per_node, nodes, devices_per_node,
            nodes * groups);
    int bidirectional = bsipipe_schedule_kind_traits(pc->schedule).bidirectional;
    if (!topology_aware || !bidirectional) {
        for (int d = 0; d < w; d++)
            device_node[d] = d / groups;
        return 0;
    }
    if (groups < 2 && w > 1 && devices_per_node < 2)
        return bsipipe_error_set(BSIPIPE_ECONFIG,
            "mapping: a node holds 1 device, so the mirrored devices d and w-1-d cannot share a node; use nodes "
            "with at least 2 devices, or the naive mapping");
    if (groups < 2 && w > 1)
        return bsipipe_error_set(BSIPIPE_ECONFIG,
            "mapping: a node holds %d device(s) of D_t=%d, so the mirrored devices d and w-1-d cannot share a "
            "node; use D_t <= %d, nodes with more devices, or the naive mapping", groups, tp,
            devices_per_node / 2);
    /* Pairs (j, w-1-j) in order, each on the first node with two free slots
     * (an odd w's middle device is its own mirror and needs one). Pairs left
     * over when no node has two free slots are split over single free slots:
     * co-located whenever possible, never refused for it. */
    /* Only the first w nodes can be used (each takes at least one device):
     * a cluster described with 2^31 nodes costs w slots, not 8 GiB. */
    int span = nodes < w ? nodes : w;
    int *free_slots = malloc(sizeof(int) * (size_t)span);
    if (!free_slots)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int n = 0; n < span; n++)
        free_slots[n] = groups;
    for (int j = 0; j <= (w - 1) / 2; j++) {
        int mirror = w - 1 - j, size = j == mirror ? 1 : 2, n = 0;
        while (n < span && free_slots[n] < size)
            n++;
        if (n < span) {
            device_node[j] = device_node[mirror] = n;
            free_slots[n] -= size;
            continue;
        }
        for (int k = 0, *dev = (int[]){j, mirror}; k < size; k++) {
            n = 0;
            while (free_slots[n] < 1) /* room exists: w <= nodes * groups */
                n++;
            device_node[dev[k]] = n;
            free_slots[n]--;
        }
    }
    free(free_slots);
    return 0;
}

int bsipipe_map_devices_to_ranks(const bsipipe_parallel_config_t *pc, int n_pipes, int ranks, int topology_aware,
                                 int *device_node)
{
    if (ranks < 1)
        return bsipipe_error_set(BSIPIPE_ECONFIG, "mapping: %d ranks; give at least one", ranks);
    int groups = (pc->w + ranks - 1) / ranks, tp = pc->tp > 1 ? pc->tp : 1;
    if (topology_aware && n_pipes > 1 && groups % 2)
        groups++; /* mirrored pairs fit together */
    return bsipipe_map_devices(pc, ranks, groups * tp, topology_aware, device_node);
}
