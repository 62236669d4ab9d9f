/* bsipipe_transport_nccl.c: the `nccl` transport (bsipipe_transport_nccl.h):
 * a table of two-rank communicators, one per pair of devices on two GPUs. */
#include "tasks/bsipipe_transport_nccl.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <stdlib.h>

#include <nccl.h>

#include "tasks/nccl_try.h"

struct pair_comm {
    ncclComm_t comm[2]; /* [0]: the lower device's rank, [1]: the higher's */
};

struct bsipipe_nccl {
    int n;                  /* devices */
    struct pair_comm *pair; /* [lo * n + hi], lo < hi; comm NULL = no communicator */
    int n_pairs;
};

int transport_nccl_create(int n_devices, const int *gpu, int n_pairs, const int *pairs, transport_nccl_t **out)
{
    if (!out || n_devices <= 0 || !gpu || n_pairs < 0 || (n_pairs > 0 && !pairs))
        return bsipipe_error_set(-EINVAL, "nccl transport: bad arguments");
    *out = NULL;
    transport_nccl_t *n = calloc(1, sizeof *n);
    if (!n || !(n->pair = calloc((size_t)n_devices * (size_t)n_devices, sizeof *n->pair))) {
        free(n);
        return bsipipe_error_set(-ENOMEM, "nccl transport: out of memory");
    }
    n->n = n_devices;
    for (int i = 0; i < n_pairs; i++) {
        int a = pairs[2 * i], b = pairs[2 * i + 1];
        if (a < 0 || b < 0 || a >= n_devices || b >= n_devices) {
            transport_nccl_destroy(n);
            return bsipipe_error_set(-EINVAL, "nccl transport: pair (%d, %d) outside 0..%d", a, b, n_devices - 1);
        }
        int lo = a < b ? a : b, hi = a < b ? b : a;
        struct pair_comm *p = &n->pair[lo * n_devices + hi];
        if (lo == hi || gpu[lo] == gpu[hi] || p->comm[0])
            continue; /* same GPU: NCCL cannot put two ranks there; the caller copies */
        int devs[2] = {gpu[lo], gpu[hi]};
        ncclResult_t r = ncclCommInitAll(p->comm, 2, devs);
        if (r != ncclSuccess) {
            p->comm[0] = p->comm[1] = NULL;
            transport_nccl_destroy(n);
            return bsipipe_error_set(-EIO, "nccl transport: ncclCommInitAll for devices %d and %d (GPUs %d, %d): %s",
                                     lo, hi, devs[0], devs[1], ncclGetErrorString(r));
        }
        n->n_pairs++;
    }
    *out = n;
    return 0;
}

void transport_nccl_destroy(transport_nccl_t *n)
{
    if (!n)
        return;
    for (long i = 0; n->pair && i < (long)n->n * n->n; i++)
        for (int r = 0; r < 2; r++)
            if (n->pair[i].comm[r])
                ncclCommDestroy(n->pair[i].comm[r]);
    free(n->pair);
    free(n);
}

/* The communicator of device `device` for its pair with `peer`, and the
 * peer's rank in it. */
static ncclComm_t pair_comm(const transport_nccl_t *n, int device, int peer, int *peer_rank)
{
    if (!n || device < 0 || peer < 0 || device >= n->n || peer >= n->n || device == peer)
        return NULL;
    int lo = device < peer ? device : peer, hi = device < peer ? peer : device;
    *peer_rank = peer == lo ? 0 : 1;
    return n->pair[lo * n->n + hi].comm[device == lo ? 0 : 1];
}

int transport_nccl_has(const transport_nccl_t *n, int a, int b)
{
    int r;
    return pair_comm(n, a, b, &r) != NULL;
}

int transport_nccl_n_pairs(const transport_nccl_t *n)
{
    return n ? n->n_pairs : 0;
}

/* The communicator of a pair and the peer's rank in it, or NULL with an
 * error detail set. */
static ncclComm_t pair_comm_checked(transport_nccl_t *n, int device, int peer, int *r)
{
    ncclComm_t c = pair_comm(n, device, peer, r);
    if (!c)
        bsipipe_error_set(-ENODEV, "nccl transport: no communicator between devices %d and %d", device, peer);
    return c;
}

int transport_nccl_send(transport_nccl_t *n, int device, int peer, const void *buf, size_t bytes, cudaStream_t stream)
{
    int r;
    ncclComm_t c = pair_comm_checked(n, device, peer, &r);
    if (!c)
        return -ENODEV;
    NCCL_TRY(ncclSend(buf, bytes, ncclChar, r, c, stream));
    return 0;
}

int transport_nccl_recv(transport_nccl_t *n, int device, int peer, void *buf, size_t bytes, cudaStream_t stream)
{
    int r;
    ncclComm_t c = pair_comm_checked(n, device, peer, &r);
    if (!c)
        return -ENODEV;
    NCCL_TRY(ncclRecv(buf, bytes, ncclChar, r, c, stream));
    return 0;
}

int transport_nccl_allreduce(transport_nccl_t *n, int device, int peer, float *buf, size_t count, cudaStream_t stream)
{
    int r;
    ncclComm_t c = pair_comm_checked(n, device, peer, &r);
    if (!c)
        return -ENODEV;
    NCCL_TRY(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c, stream));
    return 0;
}
