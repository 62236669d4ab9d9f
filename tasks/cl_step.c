/* cl_step.c: STEP — the optimizer step of every replica a device holds:
 * global gradient-norm clipping over the whole model (every chunk's squared
 * norm, computed once by its NORM task on its down replica after SYNC and
 * added in chunk order), then AdamW per tensor with weight decay on matrices
 * (the reference trainer's semantics). CPU and CUDA functions share the
 * per-tensor loop; only the AdamW kernel differs.
 *
 * Buffers: 0..C-1 chunk c's squared norm (one double) R; then for each own
 * replica: params RW, m RW, v RW, grads R. */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"

#include <math.h>
#include <stdlib.h>

/* One AdamW update of n floats (the CPU kernel or the CUDA one). */
typedef int (*step_update_fn)(const bsipipe_adamw_t *h, long t, long n, float *p, const float *g, double mul,
                              int decay, float *m, float *v);

/* Clipping multiplier from the global sum of squares; records the norm. */
static double step_clip(struct bsipipe_engine *e, double sumsq)
{
    double norm = sqrt(sumsq), mul = 1.0;
    if (e->o.opt.grad_clip > 0 && e->o.opt.grad_clip / (norm + 1e-6) < 1.0)
        mul = e->o.opt.grad_clip / (norm + 1e-6);
    e->gnorm = norm;
    return mul;
}

/* AdamW on every tensor of every replica the device holds. */
static int step_replicas(struct bsipipe_engine *e, const op_args_t *a, void *buffers[], double mul,
                         step_update_fn update)
{
    const bsipipe_model_dims_t *D = &e->dims;
    int nt = bsipipe_model_tensors(D, NULL, 0), rc = 0;
    bsipipe_tensor_info_t *ti = malloc(sizeof *ti * (size_t)(nt > 0 ? nt : 1));
    if (!ti || nt < 0) {
        free(ti);
        return -ENOMEM;
    }
    bsipipe_model_tensors(D, ti, nt);
    int b = e->C;
    bsipipe_adamw_t opt = e->o.opt; /* this step's rate: the base times the schedule's scale */
    opt.lr *= e->lr_scale;
    for (int j = 0; j < a->n_own && rc == 0; j++) {
        const replica_t *r = &e->rep[a->own_rep[j]];
        float *p = (float *)STARPU_VECTOR_GET_PTR(buffers[b]);
        float *m = (float *)STARPU_VECTOR_GET_PTR(buffers[b + 1]);
        float *v = (float *)STARPU_VECTOR_GET_PTR(buffers[b + 2]);
        const float *g = (const float *)STARPU_VECTOR_GET_PTR(buffers[b + 3]);
        b += 4;
        for (int i = 0; i < nt && rc == 0; i++) {
            long off = ti[i].offset - r->base, n = (long)ti[i].rows * ti[i].cols;
            if (off < 0 || off >= r->n)
                continue;
            rc = update(&opt, e->steps + 1, n, p + off, g + off, mul, ti[i].decay, m + off, v + off);
        }
    }
    free(ti);
    return rc;
}

static void step_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e) || !a->do_step || e->o.emulate_flops > 0)
        return;
    double sumsq = 0;
    for (int c = 0; c < e->C; c++)
        sumsq += *(const double *)STARPU_VECTOR_GET_PTR(buffers[c]);
    int rc = step_replicas(e, a, buffers, step_clip(e, sumsq), bsipipe_adamw_update);
    if (rc == -ENOMEM)
        engine_fail(e, rc);
    else
        engine_report(e, a, rc);
}

#ifdef BSIPIPE_HAVE_CUDA
static int step_cuda_update(const bsipipe_adamw_t *h, long t, long n, float *p, const float *g, double mul, int decay,
                            float *m, float *v)
{
    return bsipipe_cuda_adamw_update(h, t, n, p, g, mul, decay, m, v, engine_cuda_stream());
}

/* The norm needs every chunk's sum of squares on the host before any update:
 * the one place where a CUDA codelet waits for its stream. The per-chunk sums
 * (NORM tasks, one double each, on this GPU) are added in chunk order, as on
 * the CPU. */
static void step_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e) || !a->do_step || e->o.emulate_flops > 0)
        return;
    cudaStream_t s = engine_cuda_stream();
    double *dsum = NULL, *hsum = calloc((size_t)e->C, sizeof *hsum);
    int rc = hsum ? bsipipe_cuda_scratch_alloc((void **)&dsum, sizeof(double) * (size_t)e->C, s) : -ENOMEM;
    for (int c = 0; c < e->C && rc == 0; c++)
        rc = bsipipe_cuda_copy(dsum + c, (const double *)STARPU_VECTOR_GET_PTR(buffers[c]), sizeof(double), s);
    if (rc == 0)
        rc = bsipipe_cuda_copy_to_host(hsum, dsum, sizeof(double) * (size_t)e->C, s);
    if (dsum) {
        int rc_free = bsipipe_cuda_scratch_free(dsum, s);
        rc = rc ? rc : rc_free;
    }
    double sumsq = 0;
    for (int c = 0; c < e->C && rc == 0; c++)
        sumsq += hsum[c];
    free(hsum);
    if (rc == 0)
        rc = step_replicas(e, a, buffers, step_clip(e, sumsq), step_cuda_update);
    engine_report(e, a, rc);
}
#endif

struct starpu_codelet bsipipe_cl_step = {
    .cpu_funcs = {step_cpu},
    .cpu_funcs_name = {"step_cpu"},
    BSIPIPE_CL_CUDA(step_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_step,
    .name = "STEP",
};
