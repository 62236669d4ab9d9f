/* checkpoint_values.c: a checkpoint holds finite parameters and Adam
 * moments, and a second moment that is not negative: anything else makes
 * every later step NaN. Both ends check, naming the tensor: a save refuses
 * to write such a state (the previous checkpoint stays), a load refuses to
 * resume it (its CRC matches: it was saved so, by an older build or by hand).
 * The scan reads each value once, next to the file's own write or read. */
#include "tasks/engine_internal.h"
#include "tasks/checkpoint_format.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensor parallelism: params, m and v of pipe `pipe` as whole-model
 * vectors (P floats each, one after the other in full). */
int engine_ckpt_tp_full_pipe(bsipipe_engine_t *e, int pipe, float *full, long P)
{
    int rc = engine_tp_full(e, pipe, ENGINE_TP_PARAMS, full);
    if (rc == 0)
        rc = engine_tp_full(e, pipe, ENGINE_TP_M, full + P);
    if (rc == 0)
        rc = engine_tp_full(e, pipe, ENGINE_TP_V, full + 2 * P);
    return rc;
}

static const char *const state_part[3] = {"parameter", "Adam first moment", "Adam second moment"};

/* The first bad value of vals[0..n): the slice at `base` of the
 * whole-model vector of state `which` (0 params, 1 m, 2 v); -1 if none. */
static long first_bad_value(const float *vals, long n, int which)
{
    for (long j = 0; j < n; j++)
        if (!isfinite(vals[j]) || (which == 2 && vals[j] < 0))
            return j;
    return -1;
}

/* "Adam second moment of layer3.wqkv [64 x 192], element 17 = nan
 * (replica pipe 0, chunk 2)" for element j of replica i's slice. */
static void describe_value(const bsipipe_engine_t *e, long base, int i, int which, long j, float v, char *out,
                           size_t len)
{
    long at = base + j;
    int nt = bsipipe_model_tensors(&e->dims, NULL, 0);
    bsipipe_tensor_info_t *ti = nt > 0 ? malloc(sizeof *ti * (size_t)nt) : NULL;
    char tensor[96];
    snprintf(tensor, sizeof tensor, "element %ld of the model", at);
    if (ti && bsipipe_model_tensors(&e->dims, ti, nt) == nt)
        for (int t = 0; t < nt; t++)
            if (at >= ti[t].offset && at < ti[t].offset + (long)ti[t].rows * ti[t].cols) {
                snprintf(tensor, sizeof tensor, "%s [%d x %d], element %ld", ti[t].name, ti[t].rows, ti[t].cols,
                         at - ti[t].offset);
                break;
            }
    free(ti);
    snprintf(out, len, "%s of %s = %g%s (replica pipe %d, chunk %d)", state_part[which], tensor, (double)v,
             isfinite(v) ? ", negative" : "", i / e->C, i % e->C);
}

/* Every local replica's params, m and v are finite (v >= 0): 0, or -EDOM
 * with *where naming the first bad value. */
int engine_ckpt_state_finite(bsipipe_engine_t *e, char *where, size_t len)
{
    long P = bsipipe_engine_n_params(e);
    float *full = NULL;
    int full_pipe = -1, rc = 0;
    if (e->T > 1 && !(full = malloc(3 * sizeof(float) * (size_t)P)))
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    for (int i = 0; i < bsipipe_schedule_n_pipes(e->sched) * e->C && rc == 0; i++) {
        const replica_t *r = &e->rep[i];
        if (!engine_local(e, r->device))
            continue;
        if (e->T > 1 && i / e->C != full_pipe && (rc = engine_ckpt_tp_full_pipe(e, full_pipe = i / e->C, full, P)) < 0)
            break;
        starpu_data_handle_t h[3] = {r->h_params, r->h_m, r->h_v};
        for (int which = 0; which < 3 && rc == 0; which++) {
            const float *vals;
            if (e->T > 1) {
                vals = full + (long)which * P + r->base;
            } else {
                starpu_data_acquire(h[which], STARPU_R);
                vals = (const float *)starpu_data_get_local_ptr(h[which]);
            }
            long j = first_bad_value(vals, r->n, which);
            if (j >= 0) {
                describe_value(e, r->base, i, which, j, vals[j], where, len);
                rc = -EDOM;
            }
            if (e->T <= 1)
                starpu_data_release(h[which]);
        }
    }
    free(full);
    return rc;
}

/* Replica i as read from the file holds finite values only (v >= 0). */
int engine_ckpt_loaded_finite(const bsipipe_engine_t *e, const ckpt_load_t *l, int i)
{
    const unsigned char *p = ckpt_load_replica(l, (size_t)i);
    long n = (long)l->h.rep[i].n; /* the file's replica: its layout may differ from the engine's */
    if (!p || n <= 0)
        return 0;
    float *vals = malloc(sizeof(float) * (size_t)n);
    if (!vals)
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    int rc = 0;
    for (int which = 0; which < 3 && rc == 0; which++) {
        ckpt_floats_from_le(vals, p + 4 * (size_t)which * (size_t)n, (size_t)n);
        long j = first_bad_value(vals, n, which);
        if (j >= 0) {
            char where[192];
            describe_value(e, (long)l->h.rep[i].base, i, which, j, vals[j], where, sizeof where);
            rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s holds a state that is not finite: %s; it is not "
                                   "resumed (its CRC matches: it was saved so). Resume from an earlier copy, or "
                                   "start afresh with --overwrite", l->path, where);
        }
    }
    free(vals);
    return rc;
}

