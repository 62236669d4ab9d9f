/* torch_csv.c: a plan in torch.distributed.pipelining's per-rank action CSV
 * (the `compute_only` format its _dump_csv writes and _load_csv reads): one
 * row per rank, one action per cell, each written as torch's _Action is,
 * "{stage}{type}{micro-batch}": F a forward, B a full backward, I an input
 * gradient, W a weight gradient. A torch stage is a bsipipe chunk, so the
 * placement carries over: stage s on rank s % w (looped) or on the V's
 * rank (s < w ? s : 2w-1-s). A split plan's backwards are written as I and
 * W, also where a peer's source says B (a full backward) or pairs an F with
 * a B (DualPipeV's overlapped F&B): both run the same ops in the same order. */
#include "graph/bsipipe_draw.h"
#include "graph/bsipipe_error.h"

#include <errno.h>
#include <stdio.h>

int bsipipe_export_torch_csv(FILE *out, const bsipipe_schedule_t *s)
{
    if (!out || !s)
        return bsipipe_error_set(-EINVAL, "torch CSV export: no %s given", out ? "schedule" : "output");
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    const char *name = bsipipe_schedule_kind_name(pc->schedule);
    if (bsipipe_schedule_n_pipes(s) != 1)
        return bsipipe_error_set(-EINVAL, "torch CSV export: %s runs two pipes (two replicas of every chunk); "
                                 "torch's action format has one stage per chunk: export a one-pipe schedule", name);
    if (pc->k != 1)
        return bsipipe_error_set(-EINVAL, "torch CSV export: %s cuts sequences into k = %d pieces; torch's action "
                                 "format names whole micro-batches: use k = 1", name, pc->k);
    if (pc->tp != 1)
        return bsipipe_error_set(-EINVAL, "torch CSV export: torch's action format has no tensor parallelism: use "
                                 "--tp 1");
    int split = bsipipe_schedule_kind_traits(pc->schedule).split_backward;
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int n, first = 1;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n; i++) {
            const bsipipe_op_t *op = &ops[i];
            char type = op->kind == BSIPIPE_OP_F ? 'F' : op->kind == BSIPIPE_OP_W ? 'W'
                      : op->kind == BSIPIPE_OP_B ? (split ? 'I' : 'B') : 0;
            if (!type)
                continue; /* transfers, SYNC, STEP: the compute_only format has none */
            fprintf(out, "%s%d%c%d", first ? "" : ",", op->chunk, type, op->mb);
            first = 0;
        }
        fputc('\n', out);
    }
    return ferror(out) ? bsipipe_error_set(-EIO, "torch CSV export: write failed") : 0;
}
