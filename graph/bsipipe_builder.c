/* bsipipe_builder.c: a schedule built op by op by a driver. The builder is a
 * schedule under construction (schedule_alloc: placement and partition as
 * for a preset) whose compute lists the caller fills; finish runs the same
 * passes as bsipipe_schedule_create after its generator: comm_insert, SYNC
 * and STEP, then the validator. Each op is checked when appended with the
 * validator's own check, so an error points at the op that caused it. */
#include "graph/bsipipe_builder.h"
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"

#include <stdlib.h>

struct bsipipe_builder {
    bsipipe_schedule_t *s; /* NULL once finished */
    unsigned char *seen;   /* by compute index: appended already */
};

int bsipipe_builder_create(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                           bsipipe_builder_t **out)
{
    *out = NULL;
    bsipipe_builder_t *b = calloc(1, sizeof *b);
    if (!b)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    int rc = schedule_alloc(pc, dims, &b->s);
    if (rc == 0 && !(b->seen = calloc((size_t)compute_index_count(b->s), 1)))
        rc = bsipipe_error_set(-ENOMEM, "out of memory");
    if (rc < 0) {
        bsipipe_builder_destroy(b);
        return rc;
    }
    *out = b;
    return 0;
}

void bsipipe_builder_destroy(bsipipe_builder_t *b)
{
    if (!b)
        return;
    bsipipe_schedule_destroy(b->s);
    free(b->seen);
    free(b);
}

const bsipipe_schedule_t *bsipipe_builder_placement(const bsipipe_builder_t *b)
{
    return b ? b->s : NULL;
}

int bsipipe_builder_n_ops(const bsipipe_builder_t *b, int device)
{
    if (!b || !b->s || device < 0 || device >= b->s->n_devices)
        return bsipipe_error_set(-EINVAL, "builder: no device %d", device);
    return b->s->n_ops[device];
}

int bsipipe_builder_append_op(bsipipe_builder_t *b, const bsipipe_op_t *op)
{
    if (!b || !b->s || !op)
        return bsipipe_error_set(-EINVAL, "builder: %s", !b ? "no builder" : !op ? "no op" :
                                 "the plan is finished; create another builder");
    bsipipe_schedule_t *s = b->s;
    const char *name = bsipipe_schedule_kind_name(s->pc.schedule);
    if (op->device < 0 || op->device >= s->n_devices)
        return bsipipe_error_set(-EINVAL, "%s: device %d does not exist (w=%d: devices 0..%d)", name, op->device,
                                 s->n_devices, s->n_devices - 1);
    if (op->kind > BSIPIPE_OP_W)
        return bsipipe_error_set(-EINVAL, "%s: a %s is not appended: only compute ops (F, B, W) are; transfers, "
                                 "SYNC and STEP are derived by finish", name,
                                 bsipipe_op_kind_name((bsipipe_op_kind_t)op->kind));
    if (op->flags && op->flags != (op->kind == BSIPIPE_OP_F ? BSIPIPE_OP_PAIR_F : BSIPIPE_OP_PAIR_B))
        return bsipipe_error_set(-EINVAL, "%s: flags %d on a %s: an overlapped pair's forward is "
                                 "BSIPIPE_OP_PAIR_F, its B and W BSIPIPE_OP_PAIR_B", name, op->flags,
                                 bsipipe_op_kind_name((bsipipe_op_kind_t)op->kind));
    bsipipe_op_t o = {.kind = op->kind, .pipe = op->pipe, .tensor = BSIPIPE_TENSOR_NONE, .flags = op->flags,
                      .device = op->device, .mb = op->mb, .sub = op->sub, .chunk = op->chunk, .peer = -1,
                      .channel = -1};
    int d = o.device, rc = schedule_check_compute_op(s, &o, d, s->n_ops[d], b->seen);
    if (rc < 0)
        return rc;
    if ((rc = schedule_push(s, &o)) < 0) /* unmark: the builder stays as it was */
        b->seen[compute_index(s, o.kind, o.mb, o.sub, o.chunk)] = 0;
    return rc;
}

int bsipipe_builder_append(bsipipe_builder_t *b, int device, bsipipe_op_kind_t kind, bsipipe_pipe_t pipe, int mb,
                           int sub, int chunk)
{
    if ((unsigned)kind > BSIPIPE_OP_STEP || (unsigned)pipe > BSIPIPE_PIPE_UP)
        return bsipipe_error_set(-EINVAL, "builder: unknown %s %d", (unsigned)pipe > BSIPIPE_PIPE_UP ? "pipe" : "op kind",
                                 (unsigned)pipe > BSIPIPE_PIPE_UP ? (int)pipe : (int)kind);
    bsipipe_op_t op = {.kind = (uint8_t)kind, .pipe = (uint8_t)pipe, .device = device, .mb = mb, .sub = sub,
                       .chunk = chunk, .peer = -1, .channel = -1};
    return bsipipe_builder_append_op(b, &op);
}

int bsipipe_builder_finish(bsipipe_builder_t *b, bsipipe_schedule_t **out)
{
    *out = NULL;
    if (!b || !b->s)
        return bsipipe_error_set(-EINVAL, "builder: %s", b ? "the plan is finished already" : "no builder");
    bsipipe_schedule_t *s = b->s;
    b->s = NULL;
    /* Missing ops first: comm_insert would report them as a dependency of
     * another op that never runs. */
    int rc = schedule_check_missing(s, b->seen);
    if (rc == 0)
        rc = comm_insert(s, NULL);
    if (rc == 0)
        rc = schedule_append_sync_step(s);
    if (rc == 0)
        rc = bsipipe_schedule_validate(s);
    if (rc < 0) {
        bsipipe_schedule_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}
