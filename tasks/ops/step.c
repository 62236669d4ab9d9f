/* tasks/ops/step.c: STEP — the optimizer step of every replica a device holds:
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

struct starpu_codelet engine_cl_step = {
    .cpu_funcs = {step_cpu},
    .cpu_funcs_name = {"step_cpu"},
    BSIPIPE_CL_CUDA(step_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_step,
    .name = "STEP",
};

/* STEP's task: every chunk's squared norm (R), then the device's own
 * replicas' params, m, v (RW) and grads (R). With t->step 0 it keeps its
 * slot and changes nothing. */
int engine_insert_step(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    op_args_t *a = t->a;
    t->cl = &engine_cl_step;
    a->do_step = t->step;
    for (int c = 0; c < e->C; c++)
        engine_insert_buffer(t, &e->h_norm[c], STARPU_R);
    for (int j = 0; j < a->n_own && t->n + 4 <= ENGINE_MAX_BUFFERS; j++) {
        replica_t *o = &e->rep[a->own_rep[j]];
        engine_insert_buffer(t, &o->h_params, STARPU_RW);
        engine_insert_buffer(t, &o->h_m, STARPU_RW);
        engine_insert_buffer(t, &o->h_v, STARPU_RW);
        engine_insert_buffer(t, &o->h_grads, STARPU_R);
    }
    return 0;
}

/* NORM: the squared norm of chunk c's gradient, computed once on the
 * device holding its down replica, for every STEP (and, across ranks,
 * every rank) to read. Buffers: 0 grads R, 1 sumsq (one double) W. */
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

struct starpu_codelet engine_cl_norm = {
    .cpu_funcs = {norm_cpu},
    .cpu_funcs_name = {"norm_cpu"},
    BSIPIPE_CL_CUDA(norm_cuda)
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_W},
    .model = &engine_model_norm,
    .name = "NORM",
};

int engine_insert_norm(struct bsipipe_engine *e, int device, int c)
{
    struct starpu_data_descr descr[2] = {{e->rep[c].h_grads, STARPU_R}, {e->h_norm[c], STARPU_W}};
    return engine_task_submit(e, device, -1, &engine_cl_norm, descr, 2);
}
