/* engine_stats.c: what the engine reports of its last iteration, on top of
 * the driver and below the trace writer: the transfer and sync traffic,
 * each op's record, each device's busy time, measured op times by slot or
 * by op (the planner's tables, through the lowered plan), the peak
 * activation memory, and the ranks. Read-only, between iterations. */
#include "tasks/engine_internal.h"
#include "tasks/transport/transport.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>

int bsipipe_engine_traffic(bsipipe_engine_t *e, double act_bytes[2], double sync_bytes[2])
{
    if (!e || !act_bytes || !sync_bytes)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    double v[4] = {e->act_bytes_local, 0, e->sync_bytes_local, 0};
    double act[2] = {0, 0}, sync[2] = {0, 0};
    engine_transports_traffic(e, act, sync);
    v[1] = act[1];
    v[3] = sync[1];
    int rc = engine_mpi_sum(e, v, 4);
    if (rc < 0)
        return rc;
    act_bytes[0] = v[0];
    act_bytes[1] = v[1];
    sync_bytes[0] = v[2];
    sync_bytes[1] = v[3];
    return 0;
}

int bsipipe_engine_agree(bsipipe_engine_t *e, int rc, const char *failed)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    return engine_mpi_agree_named(e, rc, failed ? failed : "failed");
}

int bsipipe_engine_ranks(const bsipipe_engine_t *e, int *rank, int *nranks, int *device_rank)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    if (rank)
        *rank = e->rank;
    if (nranks)
        *nranks = e->nranks;
    for (int d = 0; device_rank && d < e->W; d++)
        device_rank[d] = e->dev_rank ? e->dev_rank[d] : 0;
    return 0;
}

int bsipipe_engine_records(const bsipipe_engine_t *e, int device, const bsipipe_engine_op_record_t **rec, int *n)
{
    if (!e || device < 0 || device >= e->W)
        return bsipipe_error_set(-EINVAL, "engine: no device %d", device);
    bsipipe_schedule_device_ops(e->sched, device, n);
    *rec = e->rec[device];
    return 0;
}

int bsipipe_engine_device_busy(const bsipipe_engine_t *e, double *busy_s)
{
    if (!e || !busy_s)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    for (int d = 0; d < e->W; d++)
        busy_s[d] = e->busy[d] * 1e-6;
    return 0;
}

/* The checks shared by the two op-time calls; clears the entries they fill
 * (slots, or op indices with `each`) and gives their count in *n_out. */
static int op_times_open(const bsipipe_engine_t *e, double *out, long n, int each, long *n_out)
{
    if (!e || !out)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    long need = each ? e->lowered->n_indices : e->lowered->n_slots;
    if (n < need)
        return bsipipe_error_set(-EINVAL, "engine: %ld op-time %s needed, %ld given", need,
                                 each ? "entries (one per op)" : "slots", n);
    if (e->T > 1) /* an op's span there holds its collectives' waits, not one device's work */
        return bsipipe_error_set(-ENOTSUP, "measured op times: not with tensor parallelism (D_t = %d); "
                                 "plan with the FLOPs cost model there", e->T);
    for (long i = 0; i < need; i++)
        out[i] = 0;
    if (n_out)
        *n_out = need;
    return 0;
}

static int op_times_missing(void)
{
    return bsipipe_error_set(-ENODATA, "measured op times: some ops have no record on this process "
                             "(run an iteration first; with MPI, other ranks ran them)");
}

int bsipipe_engine_op_seconds(const bsipipe_engine_t *e, double *out, int n)
{
    long slots;
    int rc = op_times_open(e, out, n, 0, &slots);
    if (rc < 0)
        return rc;
    int *count = calloc((size_t)slots, sizeof *count);
    if (!count)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int d = 0; d < e->W; d++) {
        int nd;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &nd);
        for (int i = 0; i < nd && engine_local(e, d); i++)
            if (ops[i].kind <= BSIPIPE_OP_W && e->rec[d][i].end_us > e->rec[d][i].start_us) {
                int slot = e->args[d][i].low->slot;
                out[slot] += (e->rec[d][i].end_us - e->rec[d][i].start_us) * 1e-6;
                count[slot]++;
            }
    }
    int missing = 0;
    for (int d = 0; d < e->W && !missing; d++) {
        int nd;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &nd);
        for (int i = 0; i < nd && !missing; i++)
            missing = ops[i].kind <= BSIPIPE_OP_W && !count[e->args[d][i].low->slot];
    }
    for (long i = 0; i < slots; i++)
        if (count[i])
            out[i] /= count[i];
    free(count);
    return missing ? op_times_missing() : 0;
}

int bsipipe_engine_op_durations(const bsipipe_engine_t *e, double *out, long n)
{
    int rc = op_times_open(e, out, n, 1, NULL);
    if (rc < 0)
        return rc;
    for (int d = 0; d < e->W; d++) {
        int nd;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &nd);
        for (int i = 0; i < nd; i++) {
            const bsipipe_engine_op_record_t *r = &e->rec[d][i];
            if (ops[i].kind > BSIPIPE_OP_W)
                continue;
            if (!engine_local(e, d) || !(r->start_us > 0 && r->end_us >= r->start_us))
                return op_times_missing();
            out[e->args[d][i].low->index] = (r->end_us - r->start_us) * 1e-6;
        }
    }
    return 0;
}

int bsipipe_engine_peak_memory(const bsipipe_engine_t *e, double *bytes)
{
    if (!e || !bytes)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    for (int d = 0; d < e->W; d++)
        bytes[d] = e->peak_bytes[d];
    return 0;
}

int bsipipe_engine_last_stats(const bsipipe_engine_t *e, bsipipe_engine_stats_t *out)
{
    if (!e || !out)
        return bsipipe_error_set(-EINVAL, "engine: no stats buffer");
    *out = e->stats;
    return 0;
}
