/* test_engine_run: a real run under the bsipipe policy executes each
 * device's ops in plan order on the planned worker (read back from StarPU's
 * profiling); the naive send/recv order is caught by the watchdog and named,
 * not hung; 20 training iterations follow the reference trainer's loss. */
#include "tasks/bsipipe_engine.h"
#include "kernels/reference_trainer.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"
#include "tests/check.h"
#include "tests/test_data.h"

#include <errno.h>
#include <stdlib.h>

static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 8, 32, 2, 64, 64, 32};

/* unchecked: run a plan the validator would refuse up front. */
static bsipipe_engine_t *make_plan(bsipipe_comm_order_t comm, double watchdog, int m, int unchecked)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 4;
    pc.m = m;
    pc.comm = comm;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &pc);
    o.watchdog_s = watchdog;
    o.unchecked_plan = unchecked;
    bsipipe_engine_t *e = NULL;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create: %s", bsipipe_error_detail());
    return e;
}

static bsipipe_engine_t *make_m(bsipipe_comm_order_t comm, double watchdog, int m)
{
    return make_plan(comm, watchdog, m, comm == BSIPIPE_COMM_NAIVE); /* naive: refused up front */
}

static bsipipe_engine_t *make(bsipipe_comm_order_t comm, double watchdog)
{
    return make_m(comm, watchdog, 4);
}

/* The constructed plan's peak activation bytes per device (before the
 * optimising pass), which basic-unit concatenation keeps flat in N_s. */
static void constructed_peak(int m, double peak[4])
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 4;
    pc.m = m;
    pc.optimise = 0;
    bsipipe_schedule_t *s;
    bsipipe_sim_result_t *r;
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    CHECK(bsipipe_schedule_create(&pc, &gpt, &s) == 0, "constructed plan: %s", bsipipe_error_detail());
    CHECK(bsipipe_simulate(s, &unit, &r) == 0, "simulate the constructed plan");
    for (int d = 0; d < 4; d++)
        peak[d] = r->device[d].peak_act_bytes;
    bsipipe_sim_result_destroy(r);
    bsipipe_schedule_destroy(s);
}

/* Measured peak live activation memory per device equals the planner's
 * prediction for the same plan; the constructed plan's stays flat as N_s
 * grows (basic units), and the plan that runs (after the optimising pass)
 * never holds more than it. */
static void check_memory(void)
{
    double flat[4] = {0};
    for (int m = 4; m <= 16; m *= 2) {
        int S = gpt.seq_len;
        int *tokens = malloc(sizeof(int) * (size_t)(m * S)), *targets = malloc(sizeof(int) * (size_t)(m * S));
        test_data_make(m, S, gpt.vocab, 5, tokens, targets);
        bsipipe_engine_t *e = make_m(BSIPIPE_COMM_BSIPIPE, 20, m);
        if (e && bsipipe_engine_forward_backward(e, tokens, targets, NULL) == 0) {
            double peak[4];
            bsipipe_engine_peak_memory(e, peak);
            bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
            bsipipe_sim_result_t *r;
            CHECK(bsipipe_simulate(bsipipe_engine_schedule(e), &unit, &r) == 0, "simulate");
            printf("N_s=%2d peak bytes per device, measured / planned:", m * 2);
            for (int d = 0; d < 4; d++) {
                printf(" %.0f/%.0f", peak[d], r->device[d].peak_act_bytes);
                CHECK(peak[d] == r->device[d].peak_act_bytes, "m=%d device %d: measured %.0f, planned %.0f", m, d,
                      peak[d], r->device[d].peak_act_bytes);
                if (m == 8) {
                    double c[4];
                    constructed_peak(8, c);
                    flat[d] = c[d];
                }
                if (m == 16) {
                    double c[4];
                    constructed_peak(16, c);
                    CHECK(c[d] == flat[d], "device %d: the constructed peak grows with N_s (%.0f -> %.0f)", d,
                          flat[d], c[d]);
                    CHECK(peak[d] <= flat[d], "device %d: the plan holds %.0f, above one basic unit (%.0f)", d,
                          peak[d], flat[d]);
                }
            }
            printf("\n");
            bsipipe_sim_result_destroy(r);
        }
        bsipipe_engine_destroy(e);
        free(tokens);
        free(targets);
    }
}

/* How many of n gradients differ in their bits. */
static long count_differing(const float *a, const float *b, long n)
{
    long diff = 0;
    for (long j = 0; j < n; j++)
        diff += a[j] != b[j];
    return diff;
}

/* Eager sends (the default here) against a SEND task per transfer: the same
 * bits; each eager SEND is recorded on its producer's worker, after the
 * producer started; an unchecked plan keeps its SEND tasks. */
static void check_eager(const int *tokens, const int *targets)
{
    bsipipe_engine_t *e = make(BSIPIPE_COMM_BSIPIPE, 20);
    if (!e)
        return;
    CHECK(bsipipe_engine_eager_send(e) == 1, "sends are eager by default on CPU devices in one process");
    long n = bsipipe_engine_n_params(e);
    float *g_eager = malloc(sizeof(float) * (size_t)n), *g_tasks = malloc(sizeof(float) * (size_t)n);
    double l_eager = 0, l_tasks = -1;
    CHECK(bsipipe_engine_forward_backward(e, tokens, targets, &l_eager) == 0, "eager: %s", bsipipe_error_detail());
    bsipipe_engine_grads(e, g_eager);
    const bsipipe_schedule_t *s = bsipipe_engine_schedule(e);
    int sends = 0, off_worker = 0, early = 0;
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int n_ops, nr;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n_ops);
        const bsipipe_engine_op_record_t *rec;
        bsipipe_engine_records(e, d, &rec, &nr);
        for (int i = 0; i < n_ops; i++) {
            if (ops[i].kind != BSIPIPE_OP_SEND)
                continue;
            sends++;
            int p = i - 1; /* its producer: the F or B of the same piece before it */
            while (p >= 0 && !(ops[p].kind == (ops[i].tensor == BSIPIPE_TENSOR_ACT ? BSIPIPE_OP_F : BSIPIPE_OP_B) &&
                               ops[p].mb == ops[i].mb && ops[p].sub == ops[i].sub && ops[p].chunk == ops[i].chunk &&
                               ops[p].pipe == ops[i].pipe))
                p--;
            off_worker += p < 0 || rec[i].worker != rec[p].worker;
            early += p < 0 || rec[i].start_us < rec[p].start_us || rec[i].end_us < rec[i].start_us;
        }
    }
    printf("eager sends: %d SENDs ran inside their producer (%d off its worker, %d timed before it)\n", sends,
           off_worker, early);
    CHECK(sends > 0 && off_worker == 0 && early == 0, "eager SEND records");
    CHECK(bsipipe_engine_set_eager_send(e, 0) == 0, "a SEND task per transfer: %s", bsipipe_error_detail());
    CHECK(bsipipe_engine_forward_backward(e, tokens, targets, &l_tasks) == 0, "task sends: %s",
          bsipipe_error_detail());
    bsipipe_engine_grads(e, g_tasks);
    long diff = count_differing(g_eager, g_tasks, n);
    printf("eager sends against SEND tasks: loss %.9f / %.9f, %ld of %ld gradients differ\n", l_eager, l_tasks, diff,
           n);
    CHECK(l_eager == l_tasks && diff == 0, "eager sends change the results");
    free(g_eager);
    free(g_tasks);
    bsipipe_engine_destroy(e);

    e = make(BSIPIPE_COMM_NAIVE, 1.0);
    if (e) {
        CHECK(bsipipe_engine_eager_send(e) == 0, "an unchecked plan keeps its SEND tasks");
        CHECK(bsipipe_engine_set_eager_send(e, 1) == -ENOTSUP, "eager sends on an unchecked plan are refused");
        CHECK_CONTAINS(bsipipe_error_detail(), "unchecked");
        bsipipe_engine_destroy(e);
    }
}

/* Buffers reused from per-device pools (the default) against buffers
 * registered each iteration, with eager sends and with SEND tasks: the same
 * bits; the pools stop growing after the first iteration (the second
 * reuses every handle) and are freed when reuse is switched off; an
 * unchecked plan registers its buffers anew. */
static void check_reuse(const int *tokens, const int *targets)
{
    bsipipe_engine_t *e = make(BSIPIPE_COMM_BSIPIPE, 20);
    if (!e)
        return;
    CHECK(bsipipe_engine_buffer_reuse(e) == 1, "buffers are reused by default in one process");
    long n = bsipipe_engine_n_params(e);
    float *g_ref = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    double l_ref = 0, bytes1[4], bytes2[4];
    CHECK(bsipipe_engine_forward_backward(e, tokens, targets, &l_ref) == 0, "reused: %s", bsipipe_error_detail());
    bsipipe_engine_grads(e, g_ref);
    bsipipe_engine_buffer_bytes(e, bytes1);
    const char *names[3] = {"reused, second iteration", "reused, SEND tasks", "registered each iteration"};
    for (int v = 0; v < 3; v++) {
        if (v == 1)
            CHECK(bsipipe_engine_set_eager_send(e, 0) == 0, "SEND tasks: %s", bsipipe_error_detail());
        if (v == 2) {
            CHECK(bsipipe_engine_set_buffer_reuse(e, 0) == 0, "reuse off: %s", bsipipe_error_detail());
            double held[4];
            bsipipe_engine_buffer_bytes(e, held);
            CHECK(held[0] == 0 && held[1] == 0 && held[2] == 0 && held[3] == 0,
                  "reuse off gives the pools' memory back (%.0f bytes left on device 0)", held[0]);
        }
        double l = -1;
        CHECK(bsipipe_engine_forward_backward(e, tokens, targets, &l) == 0, "%s: %s", names[v],
              bsipipe_error_detail());
        bsipipe_engine_grads(e, g);
        long diff = count_differing(g, g_ref, n);
        printf("%s against the first reused iteration: loss %.9f / %.9f, %ld of %ld gradients differ\n", names[v], l,
               l_ref, diff, n);
        CHECK(l == l_ref && diff == 0, "%s changes the results", names[v]);
        if (v == 0) {
            bsipipe_engine_buffer_bytes(e, bytes2);
            for (int d = 0; d < 4; d++) {
                printf("device %d: pool %.0f bytes after one iteration, %.0f after two\n", d, bytes1[d], bytes2[d]);
                CHECK(bytes1[d] > 0 && bytes2[d] == bytes1[d], "device %d: the pool grew in its second iteration", d);
            }
        }
    }
    free(g_ref);
    free(g);
    bsipipe_engine_destroy(e);

    e = make(BSIPIPE_COMM_NAIVE, 1.0);
    if (e) {
        CHECK(bsipipe_engine_buffer_reuse(e) == 0, "an unchecked plan registers its buffers each iteration");
        CHECK(bsipipe_engine_set_buffer_reuse(e, 1) == -ENOTSUP, "reuse on an unchecked plan is refused");
        CHECK_CONTAINS(bsipipe_error_detail(), "unchecked");
        bsipipe_engine_destroy(e);
    }
}

int main(void)
{
    int m = 4, S = gpt.seq_len;
    int *tokens = malloc(sizeof(int) * (size_t)(m * S)), *targets = malloc(sizeof(int) * (size_t)(m * S));
    test_data_make(m, S, gpt.vocab, 3, tokens, targets);

    /* 1. Plan order on the planned worker. */
    bsipipe_engine_t *e = make(BSIPIPE_COMM_BSIPIPE, 20);
    if (e) {
        double loss;
        CHECK(bsipipe_engine_forward_backward(e, tokens, targets, &loss) == 0, "run: %s", bsipipe_error_detail());
        const bsipipe_schedule_t *s = bsipipe_engine_schedule(e);
        int out_of_order = 0, misplaced = 0, total = 0, ran_ahead = 0, workers[64];
        for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
            const bsipipe_engine_op_record_t *rec;
            int n;
            bsipipe_engine_records(e, d, &rec, &n);
            workers[d] = rec[0].worker;
            int n_ops;
            const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n_ops);
            int eager = bsipipe_engine_eager_send(e); /* a SEND then runs inside its producer: no task to order */
            for (int i = 0; i < n; i++, total++) {
                /* a receive may be posted ahead of the ops before it back to the
                 * last compute op (bsipipe_sim_recv_ahead); nothing else moves */
                bsipipe_cost_model_t posted = bsipipe_cost_model_unit();
                int ahead = i < n_ops ? bsipipe_sim_recv_ahead(s, &posted, d, i) : 0;
                if (eager && ops[i].kind == BSIPIPE_OP_SEND)
                    continue;
                for (int k = 0; k < i - ahead; k++)
                    if (!(eager && ops[k].kind == BSIPIPE_OP_SEND) && rec[i].start_us < rec[k].start_us) {
                        out_of_order++;
                        break;
                    }
                for (int k = i - ahead; k < i; k++)
                    ran_ahead += rec[i].start_us < rec[k].start_us;
                if (rec[i].worker != workers[d])
                    misplaced++;
            }
            for (int q = 0; q < d; q++)
                CHECK(workers[q] != workers[d], "devices %d and %d share worker %d", q, d, workers[d]);
        }
        printf("plan order: %d ops, %d started out of plan order, %d off their device's worker (receives "
               "posted ahead of a compute op: %d)\n", total, out_of_order, misplaced, ran_ahead);
        CHECK(out_of_order == 0 && misplaced == 0, "executed order differs from the plan");
        bsipipe_engine_stats_t st;
        bsipipe_engine_last_stats(e, &st);
        printf("measured: wall %.3f s, bubble %.1f%%, %.0f tokens/s\n", st.wall_s, 100 * st.bubble_ratio,
               st.tokens_per_s);
        CHECK(st.bubble_ratio > 0 && st.bubble_ratio < 1 && st.tokens_per_s > 0, "stats are measured");
        double busy[4], sum = 0;
        CHECK(bsipipe_engine_device_busy(e, busy) == 0, "busy");
        for (int d = 0; d < 4; d++) {
            CHECK(busy[d] > 0 && busy[d] <= st.makespan_s, "device %d busy %.6f s of %.6f", d, busy[d], st.makespan_s);
            sum += busy[d];
        }
        CHECK(fabs(1 - sum / (4 * st.makespan_s) - st.bubble_ratio) < 1e-9, "bubble = 1 - busy / (w * makespan)");
        /* Measured op times: every op of the plan has its slot's mean, so
         * the plan simulated on them is as busy as the run measured. */
        int slots = bsipipe_sim_op_slots(s);
        double *secs = malloc(sizeof(double) * (size_t)slots), few[1];
        CHECK(bsipipe_engine_op_seconds(e, few, 1) == -EINVAL, "op times: a short buffer is refused");
        CHECK(secs && bsipipe_engine_op_seconds(e, secs, slots) == 0, "op times: %s", bsipipe_error_detail());
        bsipipe_cost_model_t measured = bsipipe_cost_model_emulated(1.0);
        measured.op_seconds = secs;
        bsipipe_sim_result_t *r = NULL;
        CHECK(secs && bsipipe_simulate(s, &measured, &r) == 0, "simulate on measured op times: %s",
              bsipipe_error_detail());
        double sim_busy = 0;
        for (int d = 0; r && d < 4; d++)
            sim_busy += r->device[d].busy;
        printf("measured op times: simulated busy %.6f s, measured %.6f s\n", sim_busy, sum);
        CHECK(fabs(sim_busy - sum) <= 1e-9 * sum, "simulated busy %.9f != measured %.9f", sim_busy, sum);
        bsipipe_sim_result_destroy(r);
        r = NULL;
        /* The run replayed on each op's own duration: every device exactly as
         * busy as measured, and no slower than the run (an ideal runtime
         * waits for nothing but the ops themselves). */
        long nidx = bsipipe_sim_op_count(s);
        double *each = malloc(sizeof(double) * (size_t)nidx);
        CHECK(bsipipe_engine_op_durations(e, few, 1) == -EINVAL, "op durations: a short buffer is refused");
        CHECK(each && bsipipe_engine_op_durations(e, each, nidx) == 0, "op durations: %s", bsipipe_error_detail());
        bsipipe_cost_model_t replay = bsipipe_cost_model_emulated(1.0);
        replay.op_replay = each;
        CHECK(each && bsipipe_simulate(s, &replay, &r) == 0, "replay: %s", bsipipe_error_detail());
        for (int d = 0; r && d < 4; d++)
            CHECK(fabs(r->device[d].busy - busy[d]) <= 1e-9 * busy[d], "replay: device %d busy %.9f != measured %.9f",
                  d, r->device[d].busy, busy[d]);
        if (r) {
            printf("replayed: makespan %.6f s (measured %.6f s), bubble %.2f%% (measured %.2f%%)\n", r->makespan,
                   st.makespan_s, 100 * r->bubble_ratio, 100 * st.bubble_ratio);
            CHECK(r->makespan <= st.makespan_s * (1 + 1e-9), "replay slower than the run: %.6f > %.6f s", r->makespan,
                  st.makespan_s);
        }
        bsipipe_sim_result_destroy(r);
        free(each);
        free(secs);
        bsipipe_engine_destroy(e);
    }

    check_memory();
    check_eager(tokens, targets);
    check_reuse(tokens, targets);

    /* 2. The naive order deadlocks; the watchdog names it and the run ends. */
    e = make(BSIPIPE_COMM_NAIVE, 1.0);
    if (e) {
        double loss;
        int rc = bsipipe_engine_forward_backward(e, tokens, targets, &loss);
        const char *why = bsipipe_error_detail();
        printf("naive order: %s\n", why);
        CHECK(rc == BSIPIPE_EDEADLOCK, "naive order: rc %d", rc);
        CHECK_CONTAINS(why, "device");
        CHECK_CONTAINS(why, "SEND");
        bsipipe_engine_destroy(e);
    }

    /* 2b. Blocking receives (the ablation's semantics): the default order
     * runs and gives the posted run's loss bit for bit; the order without
     * the F-B reversal is refused up front with its cycle named, and, run
     * unchecked, deadlocks and is caught by the watchdog. */
    double loss_posted = 0, loss_blocking = -1;
    e = make(BSIPIPE_COMM_BSIPIPE, 20);
    if (e) {
        CHECK(bsipipe_engine_forward_backward(e, tokens, targets, &loss_posted) == 0, "posted: %s",
              bsipipe_error_detail());
        CHECK(bsipipe_engine_set_blocking_recv(e, 1) == 0, "blocking receives on the default order: %s",
              bsipipe_error_detail());
        CHECK(bsipipe_engine_forward_backward(e, tokens, targets, &loss_blocking) == 0, "blocking: %s",
              bsipipe_error_detail());
        printf("blocking receives, default order: loss %.9f (posted %.9f)\n", loss_blocking, loss_posted);
        CHECK(loss_blocking == loss_posted, "blocking receives change the loss");
        bsipipe_engine_destroy(e);
    }
    e = make(BSIPIPE_COMM_NO_REVERSAL, 1.0);
    if (e) {
        int rc = bsipipe_engine_set_blocking_recv(e, 1);
        printf("no-reversal, blocking receives: %s\n", bsipipe_error_detail());
        CHECK(rc == BSIPIPE_EDEADLOCK, "no-reversal under blocking receives: rc %d, want refused", rc);
        CHECK_CONTAINS(bsipipe_error_detail(), "blocking receives");
        bsipipe_engine_destroy(e);
    }
    e = make_plan(BSIPIPE_COMM_NO_REVERSAL, 1.0, 4, 1);
    if (e) {
        CHECK(bsipipe_engine_set_blocking_recv(e, 1) == 0, "unchecked: %s", bsipipe_error_detail());
        double loss;
        int rc = bsipipe_engine_forward_backward(e, tokens, targets, &loss);
        const char *why = bsipipe_error_detail();
        printf("no-reversal, blocking receives, unchecked: %s\n", why);
        CHECK(rc == BSIPIPE_EDEADLOCK, "no-reversal, blocking receives, unchecked: rc %d", rc);
        CHECK_CONTAINS(why, "device");
        bsipipe_engine_destroy(e);
    }

    /* 3. Training follows the reference, iteration by iteration. */
    e = make(BSIPIPE_COMM_BSIPIPE, 20);
    bsipipe_ref_trainer_t *ref = NULL;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &(bsipipe_parallel_config_t){0});
    CHECK(bsipipe_ref_trainer_create(&gpt, &o.opt, o.seed, &ref) == 0, "reference");
    if (e && ref) {
        const int *starts = bsipipe_schedule_sub_starts(bsipipe_engine_schedule(e));
        double worst = 0, first = 0, last = 0;
        for (int it = 0; it < 20; it++) {
            double le, lr, ge, gr;
            test_data_make(m, S, gpt.vocab, 100 + it % 4, tokens, targets);
            CHECK(bsipipe_engine_iteration(e, tokens, targets, &le, &ge) == 0, "iteration %d: %s", it,
                  bsipipe_error_detail());
            bsipipe_ref_trainer_iteration(ref, m, tokens, targets, 2, starts, &lr, &gr);
            double rel = fabs(le - lr) / lr;
            if (rel > worst) worst = rel;
            if (it == 0) first = le;
            last = le;
        }
        printf("20 iterations: loss %.4f -> %.4f, worst relative gap to the reference %.2e\n", first, last, worst);
        /* Rounding differences (1e-7) grow through 20 AdamW steps but stay tiny. */
        CHECK(worst < 1e-4, "loss curve departs from the reference (%.3e)", worst);
        CHECK(last < first, "the model learns");
    }
    bsipipe_ref_trainer_destroy(ref);
    bsipipe_engine_destroy(e);
    free(tokens);
    free(targets);
    return check_finish("test_engine_run");
}
