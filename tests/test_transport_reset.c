/* tests/test_transport_reset.c: bad arguments and reset semantics.
 *  - create: bad n_channels / timeout / out -> -EINVAL
 *  - post/send on a bad channel -> -EINVAL (a post's end dependency is
 *    released anyway, so the graph cannot hang on a bad call)
 *  - a channel posted twice -> -EINVAL; sent twice -> -EINVAL
 *  - size mismatch -> -EINVAL for the send, the RECV task is released
 *  - reset: -EBUSY while a RECV is posted and not filled, 0 once done;
 *    channels are usable again after reset
 *  - after a failure: reset waits for every posted RECV to be released
 *  - bsipipe_transport_abort lets a posted RECV and a waiting send go */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "base/bsipipe_error.h"
#include "tests/check.h"
#include "tests/transport/tt_util.h"

#define N 128

static double src[N], dst[N], dst2[N];

struct sender {
    bsipipe_transport_t *t;
    long ch;
    int rc;
};

static void *send_thread(void *p)
{
    struct sender *s = p;
    s->rc = bsipipe_transport_send(s->t, s->ch, src, sizeof src, 7, "thread send");
    return NULL;
}

int main(void)
{
    int rc = tt_init(60);
    if (rc)
        return rc;
    for (int i = 0; i < N; i++)
        src[i] = i * 0.5;

    /* create */
    bsipipe_transport_t *t = NULL;
    CHECK(bsipipe_transport_create(0, 1.0, &t) == -EINVAL && !t, "n_channels 0");
    CHECK(bsipipe_transport_create(-3, 1.0, &t) == -EINVAL, "n_channels < 0");
    CHECK(bsipipe_transport_create(4, 0.0, &t) == -EINVAL, "timeout 0");
    CHECK(bsipipe_transport_create(4, -1.0, &t) == -EINVAL, "timeout < 0");
    CHECK(bsipipe_transport_create(4, 1.0, NULL) == -EINVAL, "out NULL");
    bsipipe_transport_destroy(NULL);
    CHECK(bsipipe_transport_failed(NULL) == 0, "failed(NULL)");
    rc = bsipipe_transport_create(4, 2.0, &t);
    CHECK(rc == 0 && t, "create: %d", rc);
    if (!t) {
        check_finish("test_transport_reset");
        return 1;
    }
    CHECK(bsipipe_transport_reset(t) == 0, "reset of a fresh transport");

    /* bad channels, without tasks */
    CHECK(bsipipe_transport_post(t, -1, dst, sizeof dst, NULL, 0, "r") == -EINVAL, "post ch -1");
    CHECK(bsipipe_transport_post(t, 4, dst, sizeof dst, NULL, 0, "r") == -EINVAL, "post ch n");
    CHECK_CONTAINS(bsipipe_error_detail(), "channel 4 out of range");
    CHECK(bsipipe_transport_send(t, 4, src, sizeof src, 0, "s") == -EINVAL, "send ch n");
    CHECK(bsipipe_transport_send(t, -2, src, sizeof src, 0, "s") == -EINVAL, "send ch -2");
    CHECK(bsipipe_transport_post(t, 0, NULL, 8, NULL, 0, "r") == -EINVAL, "post NULL buffer");

    /* A RECV task on a bad channel: post fails and releases the end
     * dependency, so the task completes (wait returns). */
    starpu_data_handle_t hd, hd2, hs;
    starpu_vector_data_register(&hd, STARPU_MAIN_RAM, (uintptr_t)dst, N, sizeof(double));
    starpu_vector_data_register(&hd2, STARPU_MAIN_RAM, (uintptr_t)dst2, N, sizeof(double));
    starpu_vector_data_register(&hs, STARPU_MAIN_RAM, (uintptr_t)src, N, sizeof(double));
    struct tt_arg bad = {.t = t, .ch = 9, .device = 1, .what = "bad recv", .rc = 99};
    CHECK(tt_submit_recv(&bad, hd, 1) == 0, "submit");
    starpu_task_wait_for_all();
    CHECK(bad.rc == -EINVAL, "RECV task on a bad channel: %d", bad.rc);
    CHECK_CONTAINS(bad.detail, "channel 9 out of range");

    /* reset: -EBUSY while channel 0 is posted and not filled */
    struct tt_arg r0 = {.t = t, .ch = 0, .device = 1, .what = "recv0", .rc = 99};
    CHECK(tt_submit_recv(&r0, hd, 1) == 0, "submit recv0");
    for (int i = 0; i < 2000 && r0.rc == 99; i++)
        usleep(1000);
    CHECK(r0.rc == 0, "recv0 posted: %d", r0.rc);
    rc = bsipipe_transport_reset(t);
    CHECK(rc == -EBUSY, "reset with a posted receive: %d", rc);
    CHECK_CONTAINS(bsipipe_error_detail(), "recv0");

    /* double post on channel 0 (second RECV task): -EINVAL, and that task
     * is released (it completes), the first stays posted. */
    struct tt_arg r0b = {.t = t, .ch = 0, .device = 2, .what = "recv0 again", .rc = 99};
    CHECK(tt_submit_recv(&r0b, hd2, 2) == 0, "submit recv0b");
    for (int i = 0; i < 2000 && r0b.rc == 99; i++)
        usleep(1000);
    CHECK(r0b.rc == -EINVAL, "double post: %d", r0b.rc);
    CHECK_CONTAINS(r0b.detail, "already posted");
    CHECK_CONTAINS(r0b.detail, "recv0 on device 1");

    /* size mismatch: the send fails, the RECV is released without data */
    rc = bsipipe_transport_send(t, 0, src, sizeof src - 8, 3, "short send");
    CHECK(rc == -EINVAL, "size mismatch: %d", rc);
    CHECK_CONTAINS(bsipipe_error_detail(), "bytes");
    starpu_task_wait_for_all(); /* returns: recv0 was released */
    CHECK(bsipipe_transport_bytes(t) == 0, "bytes after mismatch: %g", bsipipe_transport_bytes(t));
    CHECK(bsipipe_transport_send(t, 0, src, sizeof src, 3, "again") == -EINVAL, "send twice on a channel");
    CHECK(bsipipe_transport_reset(t) == 0, "reset after the mismatch: %s", bsipipe_error_detail());
    CHECK(!bsipipe_transport_failed(t), "a mismatch is not a watchdog failure");

    /* after reset channel 0 works: a send from a plain thread, posted later */
    struct sender s = {.t = t, .ch = 0, .rc = 99};
    pthread_t th;
    pthread_create(&th, NULL, send_thread, &s);
    for (int i = 0; i < 5000 && bsipipe_transport_waiting(t) < 1; i++) /* until it waits, not a guess */
        usleep(1000);
    rc = bsipipe_transport_reset(t);
    CHECK(rc == -EBUSY, "reset with a waiting send: %d", rc);
    struct tt_arg r1 = {.t = t, .ch = 0, .device = 1, .what = "recv0 round 2", .rc = 99};
    CHECK(tt_submit_recv(&r1, hd, 1) == 0, "submit");
    pthread_join(th, NULL);
    starpu_task_wait_for_all();
    CHECK(s.rc == 0 && r1.rc == 0, "round 2: send %d post %d", s.rc, r1.rc);
    CHECK_NEAR(bsipipe_transport_bytes(t), sizeof src, 0.5, "bytes %g", bsipipe_transport_bytes(t));
    CHECK(bsipipe_transport_reset(t) == 0, "reset after round 2");

    /* failure, then reset: channel 1 posted and never sent; a send on
     * channel 2 times out and releases it; reset then succeeds. */
    bsipipe_transport_t *t2 = NULL;
    CHECK(bsipipe_transport_create(3, 0.2, &t2) == 0, "create t2");
    struct tt_arg r2 = {.t = t2, .ch = 1, .device = 2, .what = "never sent", .rc = 99};
    CHECK(tt_submit_recv(&r2, hd2, 2) == 0, "submit");
    for (int i = 0; i < 2000 && r2.rc == 99; i++)
        usleep(1000);
    CHECK(bsipipe_transport_reset(t2) == -EBUSY, "reset t2 while posted");
    rc = bsipipe_transport_send(t2, 2, src, sizeof src, 0, "lonely send");
    CHECK(rc == -ETIMEDOUT, "lonely send: %d", rc);
    starpu_task_wait_for_all();
    CHECK(bsipipe_transport_failed(t2), "t2 failed");
    CHECK_CONTAINS(bsipipe_transport_report(t2), "device 0 waited");
    CHECK_CONTAINS(bsipipe_transport_report(t2), "lonely send");
    CHECK_CONTAINS(bsipipe_transport_report(t2), "device 2 posted RECV never sent");
    /* a post after the failure is released at once */
    struct tt_arg r3 = {.t = t2, .ch = 0, .device = 1, .what = "after failure", .rc = 99};
    CHECK(tt_submit_recv(&r3, hd, 1) == 0, "submit");
    starpu_task_wait_for_all();
    CHECK(r3.rc == 0, "post after failure: %d", r3.rc);
    CHECK(bsipipe_transport_reset(t2) == 0, "reset t2 after failure: %s", bsipipe_error_detail());
    CHECK(!bsipipe_transport_failed(t2), "t2 cleared");
    bsipipe_transport_destroy(t2);

    /* abort by hand: a posted RECV (device 2) and a waiting send (device 7,
     * from a thread) are both let go at once, long before the 30 s timeout. */
    bsipipe_transport_t *t3 = NULL;
    CHECK(bsipipe_transport_create(3, 30.0, &t3) == 0, "create t3");
    struct tt_arg r4 = {.t = t3, .ch = 0, .device = 2, .what = "recv to abort", .rc = 99};
    CHECK(tt_submit_recv(&r4, hd2, 2) == 0, "submit");
    for (int i = 0; i < 2000 && r4.rc == 99; i++)
        usleep(1000);
    struct sender s3 = {.t = t3, .ch = 1, .rc = 99};
    pthread_create(&th, NULL, send_thread, &s3);
    for (int i = 0; i < 5000 && bsipipe_transport_waiting(t3) < 1; i++)
        usleep(1000);
    double a0 = tt_now();
    CHECK(bsipipe_transport_abort(t3, "test abort") == 0, "abort");
    pthread_join(th, NULL);
    starpu_task_wait_for_all();
    CHECK(tt_now() - a0 < 2.0, "abort took %.2f s to drain", tt_now() - a0);
    CHECK(s3.rc == -ETIMEDOUT, "send after abort: %d", s3.rc);
    CHECK(bsipipe_transport_failed(t3), "t3 failed");
    CHECK_CONTAINS(bsipipe_transport_report(t3), "transport aborted (test abort)");
    CHECK_CONTAINS(bsipipe_transport_report(t3), "device 7 waited");
    CHECK_CONTAINS(bsipipe_transport_report(t3), "device 2 posted RECV recv to abort");
    CHECK(bsipipe_transport_abort(t3, "again") == 0, "second abort");
    CHECK_CONTAINS(bsipipe_transport_report(t3), "test abort");
    CHECK(bsipipe_transport_abort(NULL, "x") == -EINVAL, "abort(NULL)");
    CHECK(bsipipe_transport_reset(t3) == 0, "reset after abort: %s", bsipipe_error_detail());
    bsipipe_transport_destroy(t3);

    starpu_data_unregister(hd);
    starpu_data_unregister(hd2);
    starpu_data_unregister(hs);
    CHECK(memcmp(src, dst, sizeof src) == 0, "data of round 2");
    bsipipe_transport_destroy(t);
    starpu_shutdown();
    return check_finish("test_transport_reset");
}
