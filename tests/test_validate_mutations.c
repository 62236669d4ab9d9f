/* test_validate_mutations: valid plans of several schedules validate; each
 * one broken in exactly one way must fail validation with that hole's named
 * error (issue 12): (a) a SEND moved before the op that produces its data,
 * (b) a RECV naming the wrong peer device, (c) a RECV whose label (micro-
 * batch, subsequence, chunk, tensor, pipe) differs from its SEND's. Every
 * transfer of every plan is broken in turn, each mutation undone before the
 * next. */
#include "graph/bsipipe_sim.h"
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <stdlib.h>

static const char *const ERR_SEND_EARLY = "sends before its producer";
static const char *const ERR_PEER = "names the wrong peer";
static const char *const ERR_LABEL = "label differs from its SEND";

typedef struct counts {
    int tried, caught;
} counts_t;

/* Validates s (mutated) and expects a failure whose detail holds `err`. */
static void expect(bsipipe_schedule_t *s, const char *what, int channel, const char *err, counts_t *c)
{
    int rc = bsipipe_schedule_validate(s);
    const char *msg = bsipipe_error_detail();
    c->tried++;
    if (rc < 0 && strstr(msg, err)) {
        c->caught++;
        return;
    }
    CHECK(0, "%s, %s on channel %d: expected \"%s\", got rc %d \"%s\"", bsipipe_schedule_kind_name(s->pc.schedule),
          what, channel, err, rc, rc < 0 ? msg : "");
}

/* Position of a compute op (kind, mb, sub, chunk) in device d's list, or -1. */
static int find_compute(const bsipipe_schedule_t *s, int d, int kind, const bsipipe_op_t *label)
{
    for (int i = 0; i < s->n_ops[d]; i++) {
        const bsipipe_op_t *o = &s->ops[d][i];
        if (o->kind == kind && o->mb == label->mb && o->sub == label->sub && o->chunk == label->chunk)
            return i;
    }
    return -1;
}

/* (a) Moves the SEND at position i of device d to just before its producer. */
static void mutate_send_early(bsipipe_schedule_t *s, int d, int i, counts_t *c)
{
    bsipipe_op_t *l = s->ops[d], snd = l[i];
    int prod = find_compute(s, d, snd.tensor == BSIPIPE_TENSOR_ACT ? BSIPIPE_OP_F : BSIPIPE_OP_B, &snd);
    CHECK(prod >= 0 && prod < i, "%s: SEND at %d of device %d has no producer before it",
          bsipipe_schedule_kind_name(s->pc.schedule), i, d);
    if (prod < 0 || prod >= i)
        return;
    memmove(l + prod + 1, l + prod, sizeof *l * (size_t)(i - prod));
    l[prod] = snd;
    expect(s, "SEND before its producer", snd.channel, ERR_SEND_EARLY, c);
    memmove(l + prod, l + prod + 1, sizeof *l * (size_t)(i - prod));
    l[i] = snd;
}

/* (b) Points the RECV at position i of device d at every other wrong device. */
static void mutate_recv_peer(bsipipe_schedule_t *s, int d, int i, counts_t *c)
{
    bsipipe_op_t *r = &s->ops[d][i];
    int right = r->peer;
    for (int p = 0; p < s->n_devices; p++) {
        if (p == d || p == right)
            continue;
        r->peer = p;
        expect(s, "RECV from the wrong peer", r->channel, ERR_PEER, c);
    }
    r->peer = right;
}

/* (c) Changes one field of the RECV's label at a time, staying in range. */
static void mutate_recv_label(bsipipe_schedule_t *s, int d, int i, counts_t *c)
{
    bsipipe_op_t *r = &s->ops[d][i], keep = *r;
    if (s->pc.m > 1) {
        r->mb = (r->mb + 1) % s->pc.m;
        expect(s, "RECV label: micro-batch", keep.channel, ERR_LABEL, c);
        *r = keep;
    }
    if (s->pc.k > 1) {
        r->sub = (r->sub + 1) % s->pc.k;
        expect(s, "RECV label: subsequence", keep.channel, ERR_LABEL, c);
        *r = keep;
    }
    r->chunk = (r->chunk + 1) % s->n_chunks;
    expect(s, "RECV label: chunk", keep.channel, ERR_LABEL, c);
    *r = keep;
    r->tensor = r->tensor == BSIPIPE_TENSOR_ACT ? BSIPIPE_TENSOR_GRAD : BSIPIPE_TENSOR_ACT;
    expect(s, "RECV label: tensor", keep.channel, ERR_LABEL, c);
    *r = keep;
    if (s->n_pipes == 2) {
        r->pipe = (uint8_t)(1 - r->pipe);
        expect(s, "RECV label: pipe", keep.channel, ERR_LABEL, c);
        *r = keep;
    }
}

static void run(bsipipe_schedule_kind_t kind, int w, int k, int m)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.k = k;
    pc.m = m;
    bsipipe_schedule_t *s;
    int rc = bsipipe_schedule_create(&pc, NULL, &s);
    CHECK(rc == 0, "create %s w=%d k=%d m=%d: %s", bsipipe_schedule_kind_name(kind), w, k, m, bsipipe_error_detail());
    if (rc)
        return;
    rc = bsipipe_schedule_validate(s);
    CHECK(rc == 0, "%s w=%d k=%d m=%d: the unmutated plan must validate: %s", bsipipe_schedule_kind_name(kind), w, k,
          m, bsipipe_error_detail());
    counts_t a = {0, 0}, b = {0, 0}, c = {0, 0};
    for (int d = 0; d < s->n_devices && rc == 0; d++)
        for (int i = 0; i < s->n_ops[d]; i++) {
            if (s->ops[d][i].kind == BSIPIPE_OP_SEND)
                mutate_send_early(s, d, i, &a);
            else if (s->ops[d][i].kind == BSIPIPE_OP_RECV) {
                mutate_recv_peer(s, d, i, &b);
                mutate_recv_label(s, d, i, &c);
            }
        }
    /* Every mutation undone: the plan validates again. */
    CHECK(bsipipe_schedule_validate(s) == 0, "%s: restored plan: %s", bsipipe_schedule_kind_name(kind),
          bsipipe_error_detail());
    CHECK(a.tried > 0 && b.tried > 0 && c.tried > 0, "%s: no transfer to mutate", bsipipe_schedule_kind_name(kind));
    printf("%-10s w=%d k=%d m=%2d: send-early %d/%d, wrong peer %d/%d, label %d/%d caught\n",
           bsipipe_schedule_kind_name(kind), w, k, m, a.caught, a.tried, b.caught, b.tried, c.caught, c.tried);
    bsipipe_schedule_destroy(s);
}

int main(void)
{
    run(BSIPIPE_SCHED_GPIPE, 3, 1, 6);
    run(BSIPIPE_SCHED_1F1B, 4, 1, 8);
    run(BSIPIPE_SCHED_ZB_H1, 4, 1, 8);
    run(BSIPIPE_SCHED_1F1B_I, 4, 1, 8);
    run(BSIPIPE_SCHED_CHIMERA, 4, 1, 8);
    run(BSIPIPE_SCHED_SEQ1F1B, 3, 2, 6);
    run(BSIPIPE_SCHED_SEQ1F1B_I, 3, 2, 6);
    run(BSIPIPE_SCHED_BSIPIPE, 4, 2, 8);
    run(BSIPIPE_SCHED_BSIPIPE, 3, 2, 6);
    return check_finish("test_validate_mutations");
}
