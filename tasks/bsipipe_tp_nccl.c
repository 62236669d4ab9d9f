/* bsipipe_tp_nccl.c: the TP groups' collectives over NCCL (bsipipe_tp_nccl.h). */
#include "tasks/bsipipe_tp_nccl.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <stdlib.h>

#include <nccl.h>

#include "tasks/nccl_try.h"

struct bsipipe_tp_nccl {
    int n_groups, size;
    ncclComm_t *comm; /* [group * size + rank]; NULL: no communicator */
};

int tp_nccl_create(int n_groups, int size, const int *gpu, tp_nccl_t **out)
{
    if (!out || n_groups <= 0 || size < 2 || !gpu)
        return bsipipe_error_set(-EINVAL, "tp nccl: bad arguments");
    *out = NULL;
    tp_nccl_t *n = calloc(1, sizeof *n);
    if (!n || !(n->comm = calloc((size_t)n_groups * (size_t)size, sizeof *n->comm))) {
        free(n);
        return bsipipe_error_set(-ENOMEM, "tp nccl: out of memory");
    }
    n->n_groups = n_groups;
    n->size = size;
    for (int g = 0; g < n_groups; g++) {
        const int *dev = gpu + (long)g * size;
        if (dev[0] < 0)
            continue;
        for (int r = 0; r < size; r++) {
            if (dev[r] < 0) {
                tp_nccl_destroy(n);
                return bsipipe_error_set(-EINVAL, "tp nccl: rank %d of group %d has no GPU", r, g);
            }
            for (int q = 0; q < r; q++)
                if (dev[q] == dev[r]) {
                    tp_nccl_destroy(n);
                    return bsipipe_error_set(-EINVAL, "tp nccl: ranks %d and %d of group %d are both on GPU %d "
                                             "(NCCL needs one GPU per rank)", q, r, g, dev[r]);
                }
        }
        ncclResult_t rc = ncclCommInitAll(n->comm + (long)g * size, size, dev);
        if (rc != ncclSuccess) {
            for (int r = 0; r < size; r++)
                n->comm[(long)g * size + r] = NULL;
            tp_nccl_destroy(n);
            return bsipipe_error_set(-EIO, "tp nccl: ncclCommInitAll for group %d (%d GPUs from %d): %s", g, size,
                                     dev[0], ncclGetErrorString(rc));
        }
    }
    *out = n;
    return 0;
}

void tp_nccl_destroy(tp_nccl_t *n)
{
    if (!n)
        return;
    for (long i = 0; n->comm && i < (long)n->n_groups * n->size; i++)
        if (n->comm[i])
            ncclCommDestroy(n->comm[i]);
    free(n->comm);
    free(n);
}

/* Rank `rank`'s communicator of group `group`, or NULL with an error detail. */
static ncclComm_t group_comm(const tp_nccl_t *n, int group, int rank)
{
    ncclComm_t c = n && group >= 0 && group < n->n_groups && rank >= 0 && rank < n->size
                       ? n->comm[(long)group * n->size + rank]
                       : NULL;
    if (!c)
        bsipipe_error_set(-EINVAL, "tp nccl: no communicator for rank %d of group %d", rank, group);
    return c;
}

static ncclDataType_t nccl_type(bsipipe_tp_dtype_t dt)
{
    return dt == BSIPIPE_TP_F64 ? ncclDouble : ncclFloat;
}

int tp_nccl_all_gather(tp_nccl_t *n, int group, int rank, const void *send, void *recv, long count,
                               bsipipe_tp_dtype_t dt, cudaStream_t stream)
{
    ncclComm_t c = group_comm(n, group, rank);
    if (!c || count < 0)
        return -EINVAL;
    NCCL_TRY(ncclAllGather(send, recv, (size_t)count, nccl_type(dt), c, stream));
    return 0;
}

int tp_nccl_reduce_scatter(tp_nccl_t *n, int group, int rank, const void *send, void *recv,
                                   long count, bsipipe_tp_dtype_t dt, cudaStream_t stream)
{
    ncclComm_t c = group_comm(n, group, rank);
    if (!c || count < 0)
        return -EINVAL;
    NCCL_TRY(ncclReduceScatter(send, recv, (size_t)count, nccl_type(dt), ncclSum, c, stream));
    return 0;
}

int tp_nccl_all_reduce(tp_nccl_t *n, int group, int rank, void *buf, long count,
                               bsipipe_tp_dtype_t dt, bsipipe_tp_op_t op, cudaStream_t stream)
{
    ncclComm_t c = group_comm(n, group, rank);
    if (!c || count < 0)
        return -EINVAL;
    NCCL_TRY(ncclAllReduce(buf, buf, (size_t)count, nccl_type(dt), op == BSIPIPE_TP_MAX ? ncclMax : ncclSum, c,
                              stream));
    return 0;
}

int tp_nccl_batch_begin(void)
{
    NCCL_TRY(ncclGroupStart());
    return 0;
}

int tp_nccl_batch_end(void)
{
    NCCL_TRY(ncclGroupEnd());
    return 0;
}
