/* cl_transfer.c: SEND and RECV over the engine's transport (local:
 * rendezvous copy between devices of this process). RECV posts its buffer
 * and returns; its task completes when the data lands (one end dependency,
 * released by the transport). SEND blocks its worker until the receive is
 * posted, then copies.
 *
 * Buffers: SEND 0 source R; RECV 0 destination W. */
#include "tasks/engine_internal.h"
#include "graph/bsipipe_error.h"


static void send_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    int rc = bsipipe_transport_send(e->transport, a->op.channel, (const void *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                    bytes, a->op.device, a->name + 5 /* past "SEND " */);
    if (rc == -ETIMEDOUT) /* the watchdog fired: the transport's report names the waits */
        engine_fail(e, BSIPIPE_EDEADLOCK);
    else
        engine_report(e, a, rc);
}

static void recv_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    int rc = bsipipe_transport_post(e->transport, a->op.channel, (void *)STARPU_VECTOR_GET_PTR(buffers[0]), bytes,
                                    starpu_task_get_current(), a->op.device, a->name + 5 /* past "RECV " */);
    engine_report(e, a, rc);
}

struct starpu_codelet bsipipe_cl_send = {
    .cpu_funcs = {send_cpu},
    .cpu_funcs_name = {"send_cpu"},
    .nbuffers = 1,
    .modes = {STARPU_R},
    .name = "SEND",
};

struct starpu_codelet bsipipe_cl_recv = {
    .cpu_funcs = {recv_cpu},
    .cpu_funcs_name = {"recv_cpu"},
    .nbuffers = 1,
    .modes = {STARPU_W},
    .name = "RECV",
};
