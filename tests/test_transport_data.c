/* tests/test_transport_data.c: data moves through the local transport.
 *
 * Rounds of channels between 4 workers: each channel has a RECV task on its
 * destination worker (STARPU_W on the destination buffer, one end
 * dependency), a SEND task on its source worker (STARPU_R on the source) and
 * a consumer task on the destination worker that reads the destination buffer
 * (a data dependency on the RECV). Some SENDs sleep before sending, so a
 * consumer that ran as soon as the RECV codelet returned would see the
 * initial -1 values: the consumer seeing the data proves that the RECV task
 * completes (and releases its dependents) only when the data has landed.
 * Round 2 reuses the transport after bsipipe_transport_reset. */
#include <stdint.h>
#include <string.h>

#include "tests/check.h"
#include "tests/transport/tt_util.h"

#define NCH 96


static long nelem(long ch) { return 64 + 37 * ch; }

static void run_round(bsipipe_transport_t *t, int round)
{
    static double *src[NCH], *dst[NCH];
    static starpu_data_handle_t hs[NCH], hd[NCH];
    static struct tt_arg ra[NCH], sa[NCH];
    static struct tt_consumer ca[NCH];
    int src_w[NCH], dst_w[NCH];

    for (long c = 0; c < NCH; c++) {
        long n = nelem(c);
        src[c] = malloc((size_t)n * sizeof(double));
        dst[c] = malloc((size_t)n * sizeof(double));
        for (long i = 0; i < n; i++) {
            src[c][i] = tt_pattern(c, i, round);
            dst[c][i] = -1.0;
        }
        starpu_vector_data_register(&hs[c], STARPU_MAIN_RAM, (uintptr_t)src[c], (uint32_t)n, sizeof(double));
        starpu_vector_data_register(&hd[c], STARPU_MAIN_RAM, (uintptr_t)dst[c], (uint32_t)n, sizeof(double));
        src_w[c] = (int)(c % TT_NWORKERS);
        dst_w[c] = (int)((c % TT_NWORKERS + 1 + (c / TT_NWORKERS) % (TT_NWORKERS - 1)) % TT_NWORKERS);
        ra[c] = (struct tt_arg){.t = t, .ch = c, .device = dst_w[c], .rc = 99};
        sa[c] = (struct tt_arg){.t = t, .ch = c, .device = src_w[c], .rc = 99};
        snprintf(ra[c].what, sizeof ra[c].what, "recv(r%d c%ld)", round, c);
        snprintf(sa[c].what, sizeof sa[c].what, "send(r%d c%ld)", round, c);
        /* Every 8th send is late by 50 ms: its consumer must still wait. */
        sa[c].delay_us = (c % 8 == 3) ? 50000 : 0;
        ca[c] = (struct tt_consumer){.ch = c, .round = round, .ok = -1};
    }
    /* RECVs (and their consumers) first, then SENDs: each worker posts its
     * receives before it can block in a send, so there is no cycle. */
    for (long c = 0; c < NCH; c++) {
        int rc = tt_submit_recv(&ra[c], hd[c], dst_w[c]);
        CHECK(rc == 0, "submit recv %ld: %d", c, rc);
        struct starpu_task *task = starpu_task_create();
        task->cl = &tt_consume_cl;
        task->handles[0] = hd[c];
        task->cl_arg = &ca[c];
        task->execute_on_a_specific_worker = 1;
        task->workerid = (unsigned)dst_w[c];
        rc = starpu_task_submit(task);
        CHECK(rc == 0, "submit consumer %ld: %d", c, rc);
    }
    for (long c = 0; c < NCH; c++) {
        int rc = tt_submit_send(&sa[c], hs[c], src_w[c]);
        CHECK(rc == 0, "submit send %ld: %d", c, rc);
    }
    starpu_task_wait_for_all();

    int bad_data = 0, bad_rc = 0, early = 0;
    for (long c = 0; c < NCH; c++) {
        if (ra[c].rc != 0 || sa[c].rc != 0)
            bad_rc++;
        if (ca[c].ok != 1)
            bad_data++;
        if (ca[c].t_start < sa[c].t_send)
            early++;
        CHECK(src_w[c] != dst_w[c], "channel %ld: same worker %d", c, src_w[c]);
    }
    CHECK(bad_rc == 0, "round %d: %d channels with a failing post/send", round, bad_rc);
    CHECK(bad_data == 0, "round %d: %d consumers saw wrong data", round, bad_data);
    CHECK(early == 0, "round %d: %d consumers started before their late send", round, early);
    CHECK(!bsipipe_transport_failed(t), "round %d: watchdog fired: %s", round, bsipipe_transport_report(t));
    CHECK(strcmp(bsipipe_transport_report(t), "") == 0, "no report without failure");

    for (long c = 0; c < NCH; c++) {
        starpu_data_unregister(hs[c]);
        starpu_data_unregister(hd[c]);
        /* after unregister the data is back in the user's buffer */
        long n = nelem(c);
        int same = memcmp(src[c], dst[c], (size_t)n * sizeof(double)) == 0;
        if (!same)
            CHECK(same, "round %d channel %ld: destination differs from source", round, c);
        free(src[c]);
        free(dst[c]);
    }
}

int main(void)
{
    int rc = tt_init(60);
    if (rc)
        return rc;
    bsipipe_transport_t *t = NULL;
    rc = bsipipe_transport_create(NCH, 10.0, &t);
    CHECK(rc == 0 && t, "create: %d", rc);
    if (!t) {
        check_finish("test_transport_data");
        return 1;
    }

    double expect = 0;
    for (long c = 0; c < NCH; c++)
        expect += (double)nelem(c) * sizeof(double);

    run_round(t, 0);
    CHECK_NEAR(bsipipe_transport_bytes(t), expect, 0.5, "bytes after round 0: %g, expected %g",
               bsipipe_transport_bytes(t), expect);
    rc = bsipipe_transport_reset(t);
    CHECK(rc == 0, "reset after a complete round: %d (%s)", rc, bsipipe_error_detail());
    run_round(t, 1);
    CHECK_NEAR(bsipipe_transport_bytes(t), 2 * expect, 0.5, "bytes after round 1: %g", bsipipe_transport_bytes(t));
    CHECK(bsipipe_transport_reset(t) == 0, "second reset");

    bsipipe_transport_destroy(t);
    starpu_shutdown();
    return check_finish("test_transport_data");
}
