/* tests/test_transport_offer.c: eager sends (bsipipe_transport_offer).
 *
 * 1. Data: on half the channels the data is offered before its RECV task is
 *    submitted (the post copies it, on the receiving worker); on the other
 *    half the RECV has posted first (the offer copies at once). A consumer
 *    task behind each RECV must see the data, and each offer's done callback
 *    must run exactly once.
 * 2. Errors: a bad channel and a second send are refused without calling
 *    done; a size mismatch with the post is an error that still releases
 *    the RECV and calls done.
 * 3. Failure: an offer kept while the transport is aborted is named in the
 *    report; a RECV posting afterwards is released at once and settles the
 *    offer (done once); an offer after the failure returns -ETIMEDOUT and
 *    calls done; reset then succeeds.
 * 4. Staging (bsipipe_transport_set_offer_staging): round 1 again, but an
 *    offer ahead of its post calls done before it returns and its source
 *    is overwritten right after: the consumers must still see the offered
 *    data (the transport's copy), and the staged bytes are counted. A
 *    staged offer left by an abort is settled once; one no RECV takes is
 *    given back by reset (no leak under ASan / valgrind). */
#include <string.h>

#include "tests/check.h"
#include "tests/transport/tt_util.h"

#define NCH 64

static int done_calls[NCH + 4];

static void count_done(void *arg)
{
    __atomic_fetch_add(&done_calls[(long)(intptr_t)arg], 1, __ATOMIC_SEQ_CST);
}

static long nelem(long ch) { return 32 + 29 * ch; }

static void wait_posted(bsipipe_transport_t *t, long ch)
{
    for (int i = 0; i < 20000 && !bsipipe_transport_posted(t, ch); i++)
        usleep(100);
}

static void check_data(bsipipe_transport_t *t, int staging)
{
    static double *src[NCH], *dst[NCH];
    static starpu_data_handle_t hd[NCH];
    static struct tt_arg ra[NCH];
    static struct tt_consumer ca[NCH];
    double bytes0 = bsipipe_transport_bytes(t), want = 0, staged0 = bsipipe_transport_staged_bytes(t), want_staged = 0;
    memset(done_calls, 0, sizeof done_calls);
    CHECK(bsipipe_transport_set_offer_staging(t, staging) == 0, "staging %d", staging);
    for (long c = 0; c < NCH; c++) {
        long n = nelem(c);
        src[c] = malloc((size_t)n * sizeof(double));
        dst[c] = malloc((size_t)n * sizeof(double));
        for (long i = 0; i < n; i++) {
            src[c][i] = tt_pattern(c, i, 0);
            dst[c][i] = -1;
        }
        want += (double)n * sizeof(double);
        starpu_vector_data_register(&hd[c], STARPU_MAIN_RAM, (uintptr_t)dst[c], (uint32_t)n, sizeof(double));
        ra[c] = (struct tt_arg){.t = t, .ch = c, .device = (int)(c % TT_NWORKERS), .rc = 99};
        snprintf(ra[c].what, sizeof ra[c].what, "recv(c%ld)", c);
        ca[c] = (struct tt_consumer){.ch = c, .ok = -1};
    }
    int offered_first = 0, posted_first = 0;
    for (long c = 0; c < NCH; c++) {
        int early = c % 2 == 0; /* even channels: the data comes before the post */
        size_t bytes = (size_t)nelem(c) * sizeof(double);
        if (early) {
            CHECK(bsipipe_transport_offer(t, c, src[c], bytes, 9, "send early", count_done, (void *)(intptr_t)c) ==
                      0, "offer before the post: %s", bsipipe_error_detail());
            if (staging) { /* src is free at once: scribble over it before the post copies */
                CHECK(done_calls[c] == 1, "channel %ld: a staged offer is settled before it returns (done %d)", c,
                      done_calls[c]);
                for (long i = 0; i < nelem(c); i++)
                    src[c][i] = -7;
                want_staged += (double)bytes;
            } else {
                CHECK(done_calls[c] == 0, "channel %ld: done before any post", c);
            }
        }
        CHECK(tt_submit_recv(&ra[c], hd[c], (int)(c % TT_NWORKERS)) == 0, "submit RECV %ld", c);
        struct starpu_task *task = starpu_task_create();
        task->cl = &tt_consume_cl;
        task->handles[0] = hd[c];
        task->cl_arg = &ca[c];
        CHECK(starpu_task_submit(task) == 0, "submit consumer %ld", c);
        if (!early) {
            wait_posted(t, c);
            CHECK(bsipipe_transport_offer(t, c, src[c], bytes, 9, "send late", count_done, (void *)(intptr_t)c) == 0,
                  "offer after the post: %s", bsipipe_error_detail());
            CHECK(done_calls[c] == 1, "channel %ld: an offer to a posted RECV copies at once (done %d)", c,
                  done_calls[c]);
            posted_first++;
        } else {
            offered_first++;
        }
    }
    starpu_task_wait_for_all();
    int bad = 0, twice = 0;
    for (long c = 0; c < NCH; c++) {
        bad += ca[c].ok != 1 || ra[c].rc != 0;
        twice += done_calls[c] != 1;
        starpu_data_unregister(hd[c]);
        free(src[c]);
        free(dst[c]);
    }
    double staged = bsipipe_transport_staged_bytes(t) - staged0;
    printf("data%s: %d channels offered before their post, %d after; %d consumers saw wrong data, %d offers not "
           "settled exactly once; %.0f bytes moved, %.0f staged\n", staging ? " (staging)" : "", offered_first,
           posted_first, bad, twice, bsipipe_transport_bytes(t) - bytes0, staged);
    CHECK(staged == want_staged, "staged bytes: %.0f, want %.0f", staged, want_staged);
    CHECK(bad == 0, "consumers must see the offered data");
    CHECK(twice == 0, "done once per offer");
    CHECK(bsipipe_transport_bytes(t) - bytes0 == want, "bytes counted");
    CHECK(bsipipe_transport_reset(t) == 0, "reset after the round: %s", bsipipe_error_detail());
}

static void check_errors(bsipipe_transport_t *t)
{
    double x[8] = {0}, y[4];
    memset(done_calls, 0, sizeof done_calls);
    CHECK(bsipipe_transport_offer(t, NCH + 1, x, sizeof x, 0, "bad", count_done, (void *)(intptr_t)NCH) == -EINVAL,
          "a channel out of range is refused");
    CHECK_CONTAINS(bsipipe_error_detail(), "out of range");
    CHECK(bsipipe_transport_offer(t, 0, x, sizeof x, 0, "first", count_done, (void *)(intptr_t)0) == 0, "offer");
    CHECK(bsipipe_transport_offer(t, 0, x, sizeof x, 1, "second", count_done, (void *)(intptr_t)1) == -EINVAL,
          "a second send on one channel is refused");
    CHECK_CONTAINS(bsipipe_error_detail(), "already used");
    CHECK(done_calls[NCH] == 0 && done_calls[1] == 0, "refused offers do not call done");
    /* Size mismatch: the offer of channel 0 is 64 bytes, the RECV posts 32. */
    starpu_data_handle_t h;
    starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)y, 4, sizeof(double));
    struct tt_arg ra = {.t = t, .ch = 0, .device = 2, .rc = 99};
    snprintf(ra.what, sizeof ra.what, "short recv");
    CHECK(tt_submit_recv(&ra, h, 2) == 0, "submit RECV");
    starpu_task_wait_for_all(); /* ends: the mismatch still releases it */
    printf("size mismatch: %s\n", ra.detail);
    CHECK(ra.rc == -EINVAL, "size mismatch is an error (%d)", ra.rc);
    CHECK_CONTAINS(ra.detail, "64 bytes");
    CHECK(done_calls[0] == 1, "the mismatched offer is settled once (%d)", done_calls[0]);
    starpu_data_unregister(h);
    CHECK(bsipipe_transport_reset(t) == 0, "reset: %s", bsipipe_error_detail());
}

static void check_failure(bsipipe_transport_t *t)
{
    double x[4] = {1, 2, 3, 4}, y[4] = {0};
    memset(done_calls, 0, sizeof done_calls);
    CHECK(bsipipe_transport_offer(t, 5, x, sizeof x, 3, "kept send", count_done, (void *)(intptr_t)5) == 0,
          "offer kept");
    CHECK(bsipipe_transport_abort(t, "test") == 0, "abort");
    const char *report = bsipipe_transport_report(t);
    printf("report: %s\n", report);
    CHECK_CONTAINS(report, "offered SEND kept send on channel 5");
    CHECK(done_calls[5] == 0, "abort leaves a kept offer to its post");
    starpu_data_handle_t h;
    starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)y, 4, sizeof(double));
    struct tt_arg ra = {.t = t, .ch = 5, .device = 1, .rc = 99};
    snprintf(ra.what, sizeof ra.what, "late recv");
    CHECK(tt_submit_recv(&ra, h, 1) == 0, "submit RECV");
    starpu_task_wait_for_all(); /* released at once: no hang */
    CHECK(done_calls[5] == 1, "a post after the failure settles the kept offer (%d)", done_calls[5]);
    CHECK(y[0] == 0, "nothing copied after the failure");
    starpu_data_unregister(h);
    CHECK(bsipipe_transport_offer(t, 6, x, sizeof x, 3, "late send", count_done, (void *)(intptr_t)6) == -ETIMEDOUT,
          "an offer after the failure fails");
    CHECK(done_calls[6] == 1, "and is settled at once (%d)", done_calls[6]);
    CHECK(bsipipe_transport_reset(t) == 0, "reset after the failure: %s", bsipipe_error_detail());
    CHECK(!bsipipe_transport_failed(t), "reset clears the failure");
}

static void check_staging_failure(bsipipe_transport_t *t)
{
    double x[4] = {1, 2, 3, 4}, y[4] = {0};
    memset(done_calls, 0, sizeof done_calls);
    CHECK(bsipipe_transport_set_offer_staging(t, 1) == 0, "staging on");
    CHECK(bsipipe_transport_offer(t, 7, x, sizeof x, 3, "staged send", count_done, (void *)(intptr_t)7) == 0,
          "staged offer");
    CHECK(bsipipe_transport_offer(t, 8, x, sizeof x, 3, "never taken", count_done, (void *)(intptr_t)8) == 0,
          "staged offer no RECV takes");
    CHECK(done_calls[7] == 1 && done_calls[8] == 1, "staged offers settled at once");
    CHECK(bsipipe_transport_abort(t, "test") == 0, "abort");
    CHECK_CONTAINS(bsipipe_transport_report(t), "offered SEND staged send on channel 7");
    starpu_data_handle_t h;
    starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)y, 4, sizeof(double));
    struct tt_arg ra = {.t = t, .ch = 7, .device = 1, .rc = 99};
    snprintf(ra.what, sizeof ra.what, "late recv");
    CHECK(tt_submit_recv(&ra, h, 1) == 0, "submit RECV");
    starpu_task_wait_for_all(); /* released at once */
    CHECK(done_calls[7] == 1, "a staged offer is not settled twice (%d)", done_calls[7]);
    CHECK(y[0] == 0, "nothing copied after the failure");
    starpu_data_unregister(h);
    CHECK(bsipipe_transport_reset(t) == 0, "reset gives the untaken copy back: %s", bsipipe_error_detail());
    CHECK(bsipipe_transport_offer(t, 8, x, sizeof x, 3, "again", count_done, (void *)(intptr_t)8) == 0,
          "the channel is free again after reset");
    /* left staged: bsipipe_transport_destroy frees it */
}

int main(void)
{
    int rc = tt_init(120);
    if (rc)
        return rc;
    bsipipe_transport_t *t = NULL;
    CHECK(bsipipe_transport_create(NCH, 5.0, &t) == 0, "create");
    if (t) {
        check_data(t, 0);
        check_errors(t);
        check_failure(t);
        check_data(t, 1);
        check_staging_failure(t);
    }
    bsipipe_transport_destroy(t);
    starpu_shutdown();
    return check_finish("test_transport_offer");
}
