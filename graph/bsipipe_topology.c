/* bsipipe_topology.c: cluster topology through hwloc, and device mapping. */
#include "graph/bsipipe_topology.h"
#include "graph/bsipipe_error.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
        snprintf(synth, sizeof synth, "group:%d core:%d pu:1", n, g);
    } else if (strncmp(spec, "synthetic:", 10) == 0) {
        snprintf(synth, sizeof synth, "%s", spec + 10);
    } else if (strncmp(spec, "xml:", 4) == 0) {
        xml = spec + 4;
        if (access(xml, R_OK) != 0)
            return bsipipe_error_set(-ENOENT, "topology: cannot read XML file '%s'", xml);
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
    if (groups < 2 && w > 1)
        return bsipipe_error_set(BSIPIPE_ECONFIG,
            "mapping: a node holds %d device(s) of D_t=%d, so the mirrored devices d and w-1-d cannot share a "
            "node; use D_t <= %d, nodes with more devices, or the naive mapping", groups, tp,
            devices_per_node / 2);
    /* Pairs (j, w-1-j) in order, each on the first node with two free slots
     * (an odd w's middle device is its own mirror and needs one). Pairs left
     * over when no node has two free slots are split over single free slots:
     * co-located whenever possible, never refused for it. */
    int *free_slots = malloc(sizeof(int) * (size_t)nodes);
    if (!free_slots)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int n = 0; n < nodes; n++)
        free_slots[n] = groups;
    for (int j = 0; j <= (w - 1) / 2; j++) {
        int mirror = w - 1 - j, size = j == mirror ? 1 : 2, n = 0;
        while (n < nodes && free_slots[n] < size)
            n++;
        if (n < nodes) {
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
