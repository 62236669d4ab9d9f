/* cl_mpi.c: the codelets of ops whose two ends are on different StarPU-MPI
 * ranks (engine_mpi.c moves the data). The SEND, RECV and up-side SYNC
 * tasks only hold their op's slot in the device's plan order; NORM is the
 * squared norm of a chunk's gradient that every rank's STEP needs.
 *
 * Buffers: marker none; SEND 0 source RW (so the isend that follows waits
 * for the slot); SYNC up 0 grads RW (same); NORM 0 grads R, 1 sumsq (one
 * double) W. */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"

static void slot_only(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
}

static void norm_cpu(void *buffers[], void *cl_arg)
{
    struct bsipipe_engine *e = cl_arg;
    double *out = (double *)STARPU_VECTOR_GET_PTR(buffers[1]);
    if (engine_failed(e) || e->o.emulate_flops > 0) {
        *out = 0;
        return;
    }
    *out = bsipipe_sumsq((long)STARPU_VECTOR_GET_NX(buffers[0]), (const float *)STARPU_VECTOR_GET_PTR(buffers[0]));
}

#ifdef BSIPIPE_HAVE_CUDA
/* On CUDA devices (a CUDA worker runs only CUDA functions): the norm on the
 * worker's stream into the one-double buffer; the slots stay empty. */
static void norm_cuda(void *buffers[], void *cl_arg)
{
    struct bsipipe_engine *e = cl_arg;
    double *out = (double *)STARPU_VECTOR_GET_PTR(buffers[1]);
    cudaStream_t s = engine_cuda_stream();
    int rc;
    if (engine_failed(e) || e->o.emulate_flops > 0)
        rc = bsipipe_cuda_zero(out, sizeof(double), s);
    else
        rc = bsipipe_cuda_sumsq((long)STARPU_VECTOR_GET_NX(buffers[0]), (const float *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                out, s);
    if (rc < 0)
        engine_fail(e, rc);
}
#endif

struct starpu_codelet bsipipe_cl_mpi_marker = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 0,
    .model = &engine_model_mpi_recv,
    .name = "RECV",
};

struct starpu_codelet bsipipe_cl_mpi_send = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &engine_model_mpi_send,
    .name = "SEND",
};

struct starpu_codelet bsipipe_cl_mpi_sync_up = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &engine_model_mpi_sync,
    .name = "SYNC",
};

struct starpu_codelet bsipipe_cl_norm = {
    .cpu_funcs = {norm_cpu},
    .cpu_funcs_name = {"norm_cpu"},
    BSIPIPE_CL_CUDA(norm_cuda)
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_W},
    .model = &engine_model_norm,
    .name = "NORM",
};
