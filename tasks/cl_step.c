/* cl_step.c: STEP — the optimizer step of every replica a device holds:
 * global gradient-norm clipping over the whole model (every chunk's gradient
 * once, read from the down pipe's replicas after SYNC), then AdamW per tensor
 * with weight decay on matrices (the reference trainer's semantics).
 *
 * Buffers: 0..C-1 grads of chunk c (down replica) R — across MPI ranks the
 * chunk's squared norm instead (one double, computed where the chunk lives);
 * then for each own replica: params RW, m RW, v RW, and its grads R when it
 * is an up replica or across ranks (otherwise a down replica's grads are
 * already among the first C). */
#include "tasks/engine_internal.h"

#include <math.h>
#include <stdlib.h>

static void step_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e) || !a->do_step || e->o.emulate_flops > 0)
        return;
    const bsipipe_model_dims_t *D = &e->dims;
    double sumsq = 0;
    for (int c = 0; c < e->C; c++)
        sumsq += e->mpi ? *(const double *)STARPU_VECTOR_GET_PTR(buffers[c])
                        : bsipipe_sumsq((long)STARPU_VECTOR_GET_NX(buffers[c]),
                                        (const float *)STARPU_VECTOR_GET_PTR(buffers[c]));
    double norm = sqrt(sumsq), mul = 1.0;
    if (e->o.opt.grad_clip > 0 && e->o.opt.grad_clip / (norm + 1e-6) < 1.0)
        mul = e->o.opt.grad_clip / (norm + 1e-6);
    e->gnorm = norm;
    int nt = bsipipe_model_tensors(D, NULL, 0), rc = 0;
    bsipipe_tensor_info_t *ti = malloc(sizeof *ti * (size_t)(nt > 0 ? nt : 1));
    if (!ti || nt < 0) {
        free(ti);
        engine_fail(e, -ENOMEM);
        return;
    }
    bsipipe_model_tensors(D, ti, nt);
    int b = e->C;
    for (int j = 0; j < a->n_own && rc == 0; j++) {
        const replica_t *r = &e->rep[a->own_rep[j]];
        float *p = (float *)STARPU_VECTOR_GET_PTR(buffers[b]);
        float *m = (float *)STARPU_VECTOR_GET_PTR(buffers[b + 1]);
        float *v = (float *)STARPU_VECTOR_GET_PTR(buffers[b + 2]);
        int own_grads = a->own_rep[j] >= e->C || e->mpi;
        const float *g = own_grads ? (const float *)STARPU_VECTOR_GET_PTR(buffers[b + 3])
                                   : (const float *)STARPU_VECTOR_GET_PTR(buffers[a->own_rep[j]]);
        b += own_grads ? 4 : 3;
        for (int i = 0; i < nt && rc == 0; i++) {
            long off = ti[i].offset - r->base, n = (long)ti[i].rows * ti[i].cols;
            if (off < 0 || off >= r->n)
                continue;
            rc = bsipipe_adamw_update(&e->o.opt, e->steps + 1, n, p + off, g + off, mul, ti[i].decay, m + off, v + off);
        }
    }
    free(ti);
    engine_report(e, a, rc);
}

struct starpu_codelet bsipipe_cl_step = {
    .cpu_funcs = {step_cpu},
    .cpu_funcs_name = {"step_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "STEP",
};
