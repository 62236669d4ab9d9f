/* bsipipe_topology.h: the cluster a plan runs on, and the mapping of the
 * plan's pipeline devices onto its nodes.
 *
 * A topology is read through hwloc: the real machine, an XML export, or a
 * synthetic description, so that a 4-node x 8-device cluster can be planned
 * on a laptop; the "NxG" shorthand is built directly (hwloc merges a group
 * of a single core into it, so one-device nodes cannot be described to it). A node is an hwloc Group object directly below the machine
 * (hwloc's way to join hosts), or the whole machine when there is none; the
 * devices of a node are its cores (one StarPU worker each; GPUs on a CUDA
 * build are counted the same way by the engine).
 *
 * Mapping: pipeline device d of a plan is a tensor-parallel group of D_t
 * physical devices, always kept inside one node. Topology-aware mapping puts
 * mirrored devices (d and w-1-d, which hold the same chunks in the two pipes
 * of a bidirectional schedule) on one node, so gradient sync stays on fast
 * intra-node links and only activations cross nodes (the paper's Figure 3);
 * the naive mapping fills nodes with consecutive devices.
 */
#ifndef BSIPIPE_TOPOLOGY_H
#define BSIPIPE_TOPOLOGY_H

#include "graph/bsipipe_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_topology bsipipe_topology_t;

/* The largest cluster a topology may describe (devices, i.e. processing
 * units): hwloc builds the whole tree, which for 512x512 takes minutes. */
#define BSIPIPE_TOPOLOGY_MAX_DEVICES 8192

/* spec: "NxG" (N nodes of G devices), "synthetic:DESC" (an hwloc synthetic
 * description, e.g. "group:4 core:8 pu:1"), "xml:FILE" (an hwloc XML export,
 * lstopo --of xml), or "this" (the machine we run on). *out: free with
 * _destroy. Descriptions of more than BSIPIPE_TOPOLOGY_MAX_DEVICES
 * processing units, synthetic descriptions over 255 characters and XML files
 * over 64 MiB are refused before hwloc builds anything.
 * Errors: -EINVAL (bad spec or over a bound, detail says which part),
 * -ENOENT (XML file), -ENOMEM. */
int bsipipe_topology_create(const char *spec, bsipipe_topology_t **out);
void bsipipe_topology_destroy(bsipipe_topology_t *t); /* NULL is fine */

int bsipipe_topology_nodes(const bsipipe_topology_t *t);
int bsipipe_topology_devices_per_node(const bsipipe_topology_t *t);

/* Assigns each of the plan's pc->w pipeline devices a node (device_node has
 * pc->w entries, caller-owned). Needs w*D_t <= nodes*devices_per_node and a
 * TP group inside one node. With topology_aware and a bidirectional
 * schedule, mirrored pairs share a node; that needs room for two TP groups
 * per node. Unidirectional schedules fill nodes with consecutive devices
 * either way. Errors: BSIPIPE_ECONFIG with a detail naming the rule and what
 * to change. */
int bsipipe_map_devices(const bsipipe_parallel_config_t *pc, int nodes, int devices_per_node, int topology_aware,
                        int *device_node);

/* The engine's map across `ranks` StarPU-MPI ranks (docs/scaleout.md): one node
 * per rank with room for ceil(w / ranks) TP groups, one group more where the
 * topology-aware mapping of a plan with two pipes (n_pipes > 1) needs room
 * for whole mirrored pairs; then bsipipe_map_devices. The planner and the
 * bench predict a multi-rank run with the same map the engine uses. Errors
 * as bsipipe_map_devices. */
int bsipipe_map_devices_to_ranks(const bsipipe_parallel_config_t *pc, int n_pipes, int ranks, int topology_aware,
                                 int *device_node);

#ifdef __cplusplus
}
#endif
#endif
