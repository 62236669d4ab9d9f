/* tests/test_transport_deadlock.c: the watchdog turns a head-to-head
 * deadlock into an error instead of a hang.
 *
 * Worker 0 runs SEND a (channel 0, to device 1) and only then RECV b
 * (channel 1); worker 1 runs SEND b (channel 1, to device 0) and then RECV a
 * (channel 0). Both sends block waiting for a receive that sits behind the
 * peer's send. With a 0.5 s timeout: both sends return -ETIMEDOUT, nothing is
 * copied, the RECVs posted afterwards are released at once so
 * starpu_task_wait_for_all() returns, failed() is 1 and the report names both
 * devices and both ops. A third device with a posted, never-sent receive is
 * named too, and released. Later sends fail at once. */
#include <stdint.h>
#include <string.h>

#include "tests/check.h"
#include "tests/transport/tt_util.h"

#define N 256

int main(void)
{
    int rc = tt_init(60);
    if (rc)
        return rc;
    bsipipe_transport_t *t = NULL;
    rc = bsipipe_transport_create(4, 0.5, &t);
    CHECK(rc == 0 && t, "create: %d", rc);
    if (!t) {
        check_finish("test_transport_deadlock");
        return 1;
    }

    static double buf[4][N], out[4][N];
    starpu_data_handle_t hb[4], ho[4];
    for (int c = 0; c < 4; c++) {
        for (int i = 0; i < N; i++) {
            buf[c][i] = c + 1;
            out[c][i] = -1.0;
        }
        starpu_vector_data_register(&hb[c], STARPU_MAIN_RAM, (uintptr_t)buf[c], N, sizeof(double));
        starpu_vector_data_register(&ho[c], STARPU_MAIN_RAM, (uintptr_t)out[c], N, sizeof(double));
    }

    struct tt_arg send_a = {.t = t, .ch = 0, .device = 0, .what = "act(fwd mb0 c0)", .rc = 99};
    struct tt_arg send_b = {.t = t, .ch = 1, .device = 1, .what = "grad(bwd mb0 c1)", .rc = 99};
    struct tt_arg recv_b = {.t = t, .ch = 1, .device = 0, .what = "recv grad(bwd mb0 c1)", .rc = 99};
    struct tt_arg recv_a = {.t = t, .ch = 0, .device = 1, .what = "recv act(fwd mb0 c0)", .rc = 99};
    struct tt_arg recv_c = {.t = t, .ch = 2, .device = 2, .what = "recv orphan(c2)", .rc = 99};

    double t0 = tt_now();
    /* Device 2 posts a receive nobody sends to (it must be released too). */
    CHECK(tt_submit_recv(&recv_c, ho[2], 2) == 0, "submit orphan recv");
    /* Head to head: on each worker the SEND comes first (tasks on one
     * worker run in submission order; the RECV also depends on the SEND). */
    struct starpu_task *sa = starpu_task_create(), *sb = starpu_task_create();
    sa->cl = &tt_send_cl;
    sa->handles[0] = hb[0];
    sa->cl_arg = &send_a;
    sa->execute_on_a_specific_worker = 1;
    sa->workerid = 0;
    sb->cl = &tt_send_cl;
    sb->handles[0] = hb[1];
    sb->cl_arg = &send_b;
    sb->execute_on_a_specific_worker = 1;
    sb->workerid = 1;
    struct starpu_task *rb = starpu_task_create(), *ra = starpu_task_create();
    rb->cl = &tt_recv_cl;
    rb->handles[0] = ho[1];
    rb->cl_arg = &recv_b;
    rb->execute_on_a_specific_worker = 1;
    rb->workerid = 0;
    starpu_task_declare_deps(rb, 1, sa);
    starpu_task_end_dep_add(rb, 1);
    ra->cl = &tt_recv_cl;
    ra->handles[0] = ho[0];
    ra->cl_arg = &recv_a;
    ra->execute_on_a_specific_worker = 1;
    ra->workerid = 1;
    starpu_task_declare_deps(ra, 1, sb);
    starpu_task_end_dep_add(ra, 1);
    CHECK(starpu_task_submit(sa) == 0, "submit send a");
    CHECK(starpu_task_submit(sb) == 0, "submit send b");
    CHECK(starpu_task_submit(rb) == 0, "submit recv b");
    CHECK(starpu_task_submit(ra) == 0, "submit recv a");
    starpu_task_wait_for_all();
    double elapsed = tt_now() - t0;

    CHECK(send_a.rc == -ETIMEDOUT, "send a rc %d", send_a.rc);
    CHECK(send_b.rc == -ETIMEDOUT, "send b rc %d", send_b.rc);
    CHECK_CONTAINS(send_a.detail, "act(fwd mb0 c0)");
    CHECK_CONTAINS(send_b.detail, "grad(bwd mb0 c1)");
    CHECK(recv_a.rc == 0 && recv_b.rc == 0 && recv_c.rc == 0, "posts after failure: %d %d %d", recv_a.rc,
          recv_b.rc, recv_c.rc);
    CHECK(elapsed < 3.0, "took %.2f s with a 0.5 s timeout", elapsed);
    CHECK(send_a.t_end - send_a.t_start >= 0.45 || send_b.t_end - send_b.t_start >= 0.45,
          "watchdog fired early: %.3f / %.3f s", send_a.t_end - send_a.t_start, send_b.t_end - send_b.t_start);
    CHECK(bsipipe_transport_failed(t) == 1, "failed() = %d", bsipipe_transport_failed(t));
    const char *rep = bsipipe_transport_report(t);
    printf("report: %s\n", rep);
    CHECK_CONTAINS(rep, "device 0 waited");
    CHECK_CONTAINS(rep, "device 1 waited");
    CHECK_CONTAINS(rep, "SEND act(fwd mb0 c0)");
    CHECK_CONTAINS(rep, "SEND grad(bwd mb0 c1)");
    CHECK_CONTAINS(rep, "channel 0");
    CHECK_CONTAINS(rep, "channel 1");
    CHECK_CONTAINS(rep, "device 2 posted RECV recv orphan(c2)");
    CHECK(bsipipe_transport_bytes(t) == 0, "bytes copied: %g", bsipipe_transport_bytes(t));
    for (int i = 0; i < N; i++)
        if (out[0][i] != -1.0 || out[1][i] != -1.0) {
            CHECK(0, "data copied after the failure (index %d)", i);
            break;
        }

    /* A later send fails at once, with the report in the error detail. */
    double s0 = tt_now();
    rc = bsipipe_transport_send(t, 3, buf[3], sizeof buf[3], 3, "late send");
    CHECK(rc == -ETIMEDOUT, "late send rc %d", rc);
    CHECK(tt_now() - s0 < 0.1, "late send waited %.3f s", tt_now() - s0);
    CHECK_CONTAINS(bsipipe_error_detail(), "device 0 waited");

    /* Every posted RECV has been released: reset is allowed and clears the failure. */
    rc = bsipipe_transport_reset(t);
    CHECK(rc == 0, "reset after the failure: %d (%s)", rc, bsipipe_error_detail());
    CHECK(bsipipe_transport_failed(t) == 0, "failed() after reset");
    CHECK(strcmp(bsipipe_transport_report(t), "") == 0, "report after reset");

    /* The transport works again: channel 0, in the right order this time. */
    struct tt_arg r2 = {.t = t, .ch = 0, .device = 1, .what = "recv again", .rc = 99};
    struct tt_arg s2 = {.t = t, .ch = 0, .device = 0, .what = "send again", .rc = 99};
    CHECK(tt_submit_recv(&r2, ho[3], 1) == 0, "submit");
    CHECK(tt_submit_send(&s2, hb[3], 0) == 0, "submit");
    starpu_task_wait_for_all();
    CHECK(r2.rc == 0 && s2.rc == 0, "after reset: post %d send %d", r2.rc, s2.rc);

    for (int c = 0; c < 4; c++) {
        starpu_data_unregister(hb[c]);
        starpu_data_unregister(ho[c]);
    }
    CHECK(out[3][0] == 4.0 && out[3][N - 1] == 4.0, "data after reset: %g", out[3][0]);
    bsipipe_transport_destroy(t);
    starpu_shutdown();
    return check_finish("test_transport_deadlock");
}
