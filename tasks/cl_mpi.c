/* cl_mpi.c: the codelets of ops whose two ends are on different StarPU-MPI
 * ranks (engine_mpi.c moves the data). The SEND, RECV and up-side SYNC
 * tasks only hold their op's slot in the device's plan order.
 *
 * Buffers: marker none; SEND 0 source RW (so the isend that follows waits
 * for the slot); SYNC up 0 grads RW (same). */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"

static void slot_only(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
}

struct starpu_codelet engine_cl_mpi_marker = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 0,
    .model = &engine_model_mpi_recv,
    .name = "RECV",
};

struct starpu_codelet engine_cl_mpi_send = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &engine_model_mpi_send,
    .name = "SEND",
};

struct starpu_codelet engine_cl_mpi_sync_up = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &engine_model_mpi_sync,
    .name = "SYNC",
};
