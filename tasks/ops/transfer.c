/* tasks/ops/transfer.c: SEND and RECV, what they move. A SEND sends one
 * activation (forward) or activation gradient (backward) of a
 * subsequence-chunk to the next device of its pipeline; its RECV takes it
 * into its channel's receive buffer (e->h_recv[channel]), which the
 * consumer reads. How the bytes move is the transport's, chosen per op
 * (tasks/transport/transport.h: local rendezvous, NCCL, StarPU-MPI); the
 * insert functions of both op kinds are the transports' dispatch
 * (engine_insert_send, engine_insert_recv in transport.c).
 *
 * With tensor parallelism (T > 1) a transfer is T slices: rank r sends its
 * [len/T, d] slice from its own buffer, over channel channel * T + r. */
#include "tasks/engine_internal.h"

starpu_data_handle_t engine_send_source(const struct bsipipe_engine *e, const bsipipe_op_t *op, int r)
{
    long ai = act_index(e, op->mb, op->sub, op->chunk) * e->T + r;
    return op->tensor == BSIPIPE_TENSOR_ACT ? e->h_x_out[ai] : e->h_dx[ai];
}

void engine_insert_send_source(engine_insert_t *t)
{
    engine_insert_read(t, engine_send_source(t->e, &t->a->op, 0));
    if (!t->dry_run && t->descr[0].handle) /* the bytes this process moves between its devices */
        t->e->act_bytes_local += (double)starpu_vector_get_nx(t->descr[0].handle) * sizeof(float);
}
