/* tests/test_transport_rendezvous.c: a SEND that runs before its RECV is
 * posted blocks its worker until the post, then copies.
 *
 * Worker 0 runs the SEND at once. Worker 1 first runs a 300 ms "busy" task,
 * then the RECV (which depends on it). The SEND must end after the RECV's
 * post, and must have waited about 300 ms. Then a second channel checks the
 * opposite order: the RECV posted long before the SEND returns at once and
 * the SEND does not wait. */
#include <stdint.h>
#include <string.h>

#include "tests/check.h"
#include "tests/transport/tt_util.h"

#define N 1000
#define BUSY_S 0.3

static void busy_cpu(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
    usleep((useconds_t)(BUSY_S * 1e6));
}

static struct starpu_codelet busy_cl = {
    .cpu_funcs = {busy_cpu},
    .nbuffers = 0,
    .name = "tt_busy",
};

int main(void)
{
    int rc = tt_init(60);
    if (rc)
        return rc;
    bsipipe_transport_t *t = NULL;
    rc = bsipipe_transport_create(2, 5.0, &t);
    CHECK(rc == 0 && t, "create: %d", rc);
    if (!t) {
        check_finish("test_transport_rendezvous");
        return 1;
    }

    static double src[2][N], dst[2][N];
    starpu_data_handle_t hs[2], hd[2];
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < N; i++) {
            src[c][i] = 1000.0 * c + i;
            dst[c][i] = -1.0;
        }
        starpu_vector_data_register(&hs[c], STARPU_MAIN_RAM, (uintptr_t)src[c], N, sizeof(double));
        starpu_vector_data_register(&hd[c], STARPU_MAIN_RAM, (uintptr_t)dst[c], N, sizeof(double));
    }

    /* Channel 0: SEND first (worker 0), RECV late (worker 1 is busy). */
    struct tt_arg ra = {.t = t, .ch = 0, .device = 1, .what = "recv(late)", .rc = 99};
    struct tt_arg sa = {.t = t, .ch = 0, .device = 0, .what = "send(early)", .rc = 99};
    double t0 = tt_now();
    struct starpu_task *busy = starpu_task_create();
    busy->cl = &busy_cl;
    busy->execute_on_a_specific_worker = 1;
    busy->workerid = 1;
    CHECK(starpu_task_submit(busy) == 0, "submit busy");
    CHECK(tt_submit_send(&sa, hs[0], 0) == 0, "submit send");
    CHECK(tt_submit_recv(&ra, hd[0], 1) == 0, "submit recv");
    starpu_task_wait_for_all();

    CHECK(sa.rc == 0, "send rc %d (%s)", sa.rc, bsipipe_error_detail());
    CHECK(ra.rc == 0, "post rc %d", ra.rc);
    CHECK(sa.t_start < ra.t_end, "send started (%.3f) before the post (%.3f)", sa.t_start - t0, ra.t_end - t0);
    CHECK(sa.t_end >= ra.t_start, "send ended (%.3f) before the RECV started posting (%.3f)", sa.t_end - t0,
          ra.t_start - t0);
    CHECK(sa.t_end - sa.t_start >= BUSY_S * 0.8, "send waited only %.3f s", sa.t_end - sa.t_start);
    CHECK(ra.t_start - t0 >= BUSY_S * 0.9, "recv posted after %.3f s, before the busy task ended",
          ra.t_start - t0);

    /* Channel 1: RECV posted first; the SEND, 200 ms later, does not wait. */
    struct tt_arg ra1 = {.t = t, .ch = 1, .device = 2, .what = "recv(early)", .rc = 99};
    struct tt_arg sa1 = {.t = t, .ch = 1, .device = 3, .what = "send(late)", .rc = 99, .delay_us = 200000};
    CHECK(tt_submit_recv(&ra1, hd[1], 2) == 0, "submit recv 1");
    CHECK(tt_submit_send(&sa1, hs[1], 3) == 0, "submit send 1");
    starpu_task_wait_for_all();
    CHECK(sa1.rc == 0 && ra1.rc == 0, "channel 1: send %d post %d", sa1.rc, ra1.rc);
    double waited = sa1.t_end - sa1.t_send;
    CHECK(waited < 0.1, "send to an already posted receive took %.3f s", waited);
    CHECK(!bsipipe_transport_failed(t), "failed: %s", bsipipe_transport_report(t));

    for (int c = 0; c < 2; c++) {
        starpu_data_unregister(hs[c]);
        starpu_data_unregister(hd[c]);
        CHECK(memcmp(src[c], dst[c], sizeof dst[c]) == 0, "channel %d: data differs", c);
    }
    CHECK_NEAR(bsipipe_transport_bytes(t), 2.0 * N * sizeof(double), 0.5, "bytes %g", bsipipe_transport_bytes(t));
    CHECK(bsipipe_transport_reset(t) == 0, "reset");
    bsipipe_transport_destroy(t);
    starpu_shutdown();
    return check_finish("test_transport_rendezvous");
}
