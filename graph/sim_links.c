/* sim_links.c: the links of a cost model and their clocks, the one model of
 * what a transfer costs. The simulator moves a plan's bytes with it, and the
 * emulated engine (bsipipe_engine_options.emulate_links) holds a SEND or a
 * SYNC for the time it returns, so a one-process run stands in for a
 * cluster with the same links the planner predicts with.
 *
 * A transfer of n bytes from device a to device b costs latency + n /
 * bandwidth of its link class: intra-node when the two devices are on one
 * node, else inter-node. It starts when its data is ready and, where the
 * model shares a link, in the first gap of that link at or after then long
 * enough to hold it:
 *   - shared_nic: every inter-node transfer of a node goes through the
 *     node's one link, one at a time (a server's NIC);
 *   - async_send: each device's outgoing link of a class carries one
 *     transfer at a time (the device itself goes on);
 *   - otherwise the sender is held for the transfer, so its own transfers
 *     never overlap and no clock is needed.
 * A gradient SYNC of two replicas exchanges the gradient both ways at once
 * (a two-rank ring all-reduce: each side sends and receives it once), or,
 * with sync_reduce_back and the replicas on two nodes, sends it one way and
 * the sum back (the StarPU-MPI engine's SYNC across ranks: twice as long);
 * with sync_free it costs nothing.
 *
 * Why gaps, not a queue: the simulator resolves devices one after another,
 * not in time order, so it may book a later transfer on a link before an
 * earlier one. A link that only remembers when it is next free would put
 * the earlier transfer behind the later one (a FIFO in booking order, which
 * no link is); a list of booked intervals lets it take the idle time before.
 * The engine books in real time order, where the two are the same. */
#include "graph/bsipipe_sim.h"
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A shared link's booked time: intervals [start, end), sorted, disjoint. */
typedef struct booked {
    double *t; /* 2 * n: start0, end0, start1, end1, ... */
    int n, cap;
} booked_t;

struct bsipipe_links {
    const bsipipe_schedule_t *s;
    bsipipe_cost_model_t c;
    int *device_node;  /* [n_devices], the model's map resolved */
    int n_nodes;
    booked_t *link;    /* async_send: [device * 2 + inter], its outgoing link of that class */
    booked_t *nic;     /* shared_nic: [node], its inter-node link */
};

/* Books `dur` seconds on b at the first gap at or after `ready`; returns the
 * end, or -1 when out of memory. */
static double book(booked_t *b, double ready, double dur)
{
    double go = ready;
    int i = 0;
    for (; i < b->n; i++) {
        double s = b->t[2 * i], e = b->t[2 * i + 1];
        if (e <= go)
            continue;
        if (go + dur <= s)
            break; /* fits before interval i */
        go = e;
    }
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        double *t = realloc(b->t, sizeof(double) * 2 * (size_t)cap);
        if (!t)
            return -1;
        b->t = t;
        b->cap = cap;
    }
    memmove(b->t + 2 * (i + 1), b->t + 2 * i, sizeof(double) * 2 * (size_t)(b->n - i));
    b->t[2 * i] = go;
    b->t[2 * i + 1] = go + dur;
    b->n++;
    return go + dur;
}

int sim_node_of(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c, int d)
{
    if (c->device_node)
        return c->device_node[d];
    return c->devices_per_node > 0 ? (int)((long)d * s->pc.tp / c->devices_per_node) : 0;
}

int bsipipe_links_create(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c, bsipipe_links_t **out)
{
    *out = NULL;
    if (!s || !c)
        return bsipipe_error_set(-EINVAL, "links: schedule and cost model are required");
    int W = s->n_devices;
    bsipipe_links_t *l = calloc(1, sizeof *l);
    if (!l)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    l->s = s;
    l->c = *c;
    l->device_node = malloc(sizeof(int) * (size_t)(W > 0 ? W : 1));
    l->link = calloc((size_t)(W > 0 ? W : 1) * 2, sizeof *l->link);
    if (!l->device_node || !l->link) {
        bsipipe_links_destroy(l);
        return bsipipe_error_set(-ENOMEM, "out of memory");
    }
    l->n_nodes = 1;
    for (int d = 0; d < W; d++) {
        int n = sim_node_of(s, c, d);
        if (n < 0) {
            bsipipe_links_destroy(l);
            return bsipipe_error_set(-EINVAL, "links: device %d is on node %d; nodes count from 0", d, n);
        }
        l->device_node[d] = n;
        if (n + 1 > l->n_nodes)
            l->n_nodes = n + 1;
    }
    l->c.device_node = l->device_node; /* the caller's map need not outlive us */
    if (!(l->nic = calloc((size_t)l->n_nodes, sizeof *l->nic))) {
        bsipipe_links_destroy(l);
        return bsipipe_error_set(-ENOMEM, "out of memory");
    }
    *out = l;
    return 0;
}

void bsipipe_links_destroy(bsipipe_links_t *l)
{
    if (!l)
        return;
    int W = l->s->n_devices > 0 ? l->s->n_devices : 1;
    for (int i = 0; l->link && i < 2 * W; i++)
        free(l->link[i].t);
    for (int i = 0; l->nic && i < l->n_nodes; i++)
        free(l->nic[i].t);
    free(l->device_node);
    free(l->link);
    free(l->nic);
    free(l);
}

void bsipipe_links_reset(bsipipe_links_t *l)
{
    int W = l->s->n_devices > 0 ? l->s->n_devices : 1;
    for (int i = 0; i < 2 * W; i++)
        l->link[i].n = 0;
    for (int i = 0; i < l->n_nodes; i++)
        l->nic[i].n = 0;
}

int bsipipe_links_inter(const bsipipe_links_t *l, int a, int b)
{
    return l->device_node[a] != l->device_node[b];
}

double bsipipe_links_time(const bsipipe_links_t *l, int a, int b, double bytes)
{
    if (l->c.free_transfers)
        return 0;
    int inter = bsipipe_links_inter(l, a, b);
    double bw = inter ? l->c.inter_bandwidth : l->c.intra_bandwidth;
    double lat = inter ? l->c.inter_latency : l->c.intra_latency;
    return lat + (bw > 0 ? bytes / bw : 0);
}

double bsipipe_links_move(bsipipe_links_t *l, int a, int b, double bytes, double ready)
{
    int inter = bsipipe_links_inter(l, a, b);
    booked_t *link = NULL;
    if (inter && l->c.shared_nic)
        link = &l->nic[l->device_node[a]];
    else if (l->c.async_send)
        link = &l->link[2 * a + inter];
    double dur = bsipipe_links_time(l, a, b, bytes);
    if (!link || dur <= 0)
        return ready + dur;
    double end = book(link, ready, dur);
    return end >= 0 ? end : ready + dur; /* out of memory: unshared (optimistic) */
}

double bsipipe_links_sync(bsipipe_links_t *l, int a, int b, double bytes, double ready)
{
    if (l->c.sync_free)
        return ready;
    if (l->c.sync_reduce_back && bsipipe_links_inter(l, a, b))
        return bsipipe_links_move(l, b, a, bytes, bsipipe_links_move(l, a, b, bytes, ready));
    double there = bsipipe_links_move(l, a, b, bytes, ready), back = bsipipe_links_move(l, b, a, bytes, ready);
    return there > back ? there : back;
}
