/* engine_perfmodel.c: StarPU performance models of the engine's codelets.
 *
 * The model's symbol is also every task's name in StarPU's traces (the
 * engine sets no task name of its own): few, stable names without blanks,
 * which StarPU's tools group by (paje.trace states, distrib.data for
 * starpu_codelet_profile, tasks.rec); the op a task ran is in the engine's
 * own outputs, joined by StarPU's job id (docs/tracing.md).
 *
 * Each F, B, W and transfer codelet has a history-based model with a symbol
 * of its own, so StarPU's model-driven policies (dm, dmda, dmdas, ...) can
 * predict op durations, and STARPU_CALIBRATE=1 runs leave calibrated models
 * that starpu_perfmodel_display lists (bsipipe_fwd, bsipipe_fwd_head,
 * bsipipe_bwd, bsipipe_wgrad, bsipipe_send, bsipipe_recv). The F of the last
 * chunk, which also runs the head and the loss, is a codelet of its own
 * (engine_cl_forward_head) so its longer time gets a model of its own.
 *
 * Footprint: StarPU's default hashes the buffers' sizes, which here do not
 * tell ops apart (all share the scratch buffer; a piece's stash size depends
 * on the layout). Ours hashes what the op's cost depends on: the piece's
 * length and start (causal attention over the K/V prefix costs more for later
 * pieces), the chunk's layer count, the model's widths (hidden, FFN, heads,
 * vocabulary where the embedding or head runs), the embedding / head flags,
 * the CUDA precision, and the emulated rate (an emulated op's time is the
 * emulation's, not the kernels'). Transfers: the bytes moved. History-based
 * rather than regression-based: the key set is small and discrete (a plan
 * has a few piece shapes), and one history entry per shape is exact. */
#include "tasks/engine_internal.h"

#include <string.h>

static uint32_t hash_int(uint32_t h, long v)
{
    h = starpu_hash_crc32c_be((uint32_t)v, h);
    return starpu_hash_crc32c_be((uint32_t)((unsigned long)v >> 32), h);
}

static uint32_t compute_footprint(struct starpu_task *t)
{
    const op_args_t *a = t->cl_arg;
    if (!a)
        return 0;
    const struct bsipipe_engine *e = a->e;
    const bsipipe_model_dims_t *D = &e->dims;
    int first = a->op.chunk == 0, last = a->op.chunk == e->C - 1;
    long key[] = {a->op.kind, a->len, a->start, a->l1 - a->l0, D->hidden, D->ffn_hidden, D->n_heads, D->family,
                  first, last, first || last ? D->vocab : 0, e->gpu != NULL};
    uint32_t h = 0;
    for (size_t i = 0; i < sizeof key / sizeof *key; i++)
        h = hash_int(h, key[i]);
    if (e->o.precision)
        h = starpu_hash_crc32c_string(e->o.precision, h);
    double rate = e->o.emulate_flops;
    uint64_t bits;
    memcpy(&bits, &rate, sizeof bits);
    return hash_int(h, (long)bits);
}

static uint32_t transfer_footprint(struct starpu_task *t)
{
    const op_args_t *a = t->cl_arg;
    if (!a)
        return 0;
    return hash_int(hash_int(0, a->op.kind), (long)a->len * a->e->d * (long)sizeof(float));
}

#define MODEL(var, sym, fp)                                                                                \
    struct starpu_perfmodel var = {.type = STARPU_HISTORY_BASED, .symbol = sym, .footprint = fp}

MODEL(engine_model_fwd, "bsipipe_fwd", compute_footprint);
MODEL(engine_model_fwd_head, "bsipipe_fwd_head", compute_footprint);
MODEL(engine_model_bwd, "bsipipe_bwd", compute_footprint);
MODEL(engine_model_wgrad, "bsipipe_wgrad", compute_footprint);
MODEL(engine_model_send, "bsipipe_send", transfer_footprint);
MODEL(engine_model_recv, "bsipipe_recv", transfer_footprint);
/* The rest: StarPU's default footprint (the buffers' sizes) tells their
 * shapes apart. Every codelet has a model, so every task of a trace names
 * one (tasks.rec's Model:) and starpu_tasks_rec_complete can estimate it. */
MODEL(engine_model_sync, "bsipipe_sync", NULL);
MODEL(engine_model_step, "bsipipe_step", NULL);
MODEL(engine_model_norm, "bsipipe_norm", NULL);
MODEL(engine_model_mpi_send, "bsipipe_mpi_send", NULL);
MODEL(engine_model_mpi_recv, "bsipipe_mpi_recv", NULL);
MODEL(engine_model_mpi_sync, "bsipipe_mpi_sync", NULL);
MODEL(engine_model_tp_seg, "bsipipe_tp_seg", NULL);
MODEL(engine_model_tp_coll, "bsipipe_tp_coll", NULL);
MODEL(engine_model_tp_step, "bsipipe_tp_step", NULL);
MODEL(engine_model_tp_norm, "bsipipe_tp_norm", NULL);

