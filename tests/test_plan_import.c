/* test_plan_import: plans composed outside the planner (graph/bsipipe_builder.h).
 *  1. Builder round trip: the compute ops of every preset (ten schedules,
 *     several w), appended through the builder in list order, give the same
 *     schedule: every op (transfers, SYNC, STEP included) equal, the same
 *     simulated makespan and bubble.
 *  2. JSON round trip: every preset exported (bsipipe_export_json) and
 *     imported gives the same op order and makespan.
 *  3. The hand-written plan of tests/data imports; a minimal one (no model,
 *     no "sub" at k = 1) too.
 *  4. Bad input: each broken file fails with its named error and code, and
 *     the builder refuses misuse. */
#include "graph/bsipipe_builder.h"
#include "graph/bsipipe_draw.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"
#include "tests/check.h"

#include <stdlib.h>

/* Same ops in the same order on every device. */
static int same_ops(const bsipipe_schedule_t *a, const bsipipe_schedule_t *b, char *why, size_t len)
{
    if (bsipipe_schedule_n_devices(a) != bsipipe_schedule_n_devices(b)) {
        snprintf(why, len, "device count");
        return 0;
    }
    for (int d = 0; d < bsipipe_schedule_n_devices(a); d++) {
        int na, nb;
        const bsipipe_op_t *x = bsipipe_schedule_device_ops(a, d, &na), *y = bsipipe_schedule_device_ops(b, d, &nb);
        if (na != nb) {
            snprintf(why, len, "device %d: %d ops vs %d", d, na, nb);
            return 0;
        }
        for (int i = 0; i < na; i++)
            if (memcmp(&x[i], &y[i], sizeof x[i]) != 0) {
                char s1[96], s2[96];
                snprintf(why, len, "device %d op %d: %s vs %s", d, i, bsipipe_op_format(&x[i], s1, sizeof s1),
                         bsipipe_op_format(&y[i], s2, sizeof s2));
                return 0;
            }
    }
    return 1;
}

static void sim_unit(const bsipipe_schedule_t *s, double *makespan, double *bubble)
{
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_result_t *r;
    *makespan = *bubble = -1;
    if (bsipipe_simulate(s, &unit, &r) == 0) {
        *makespan = r->makespan;
        *bubble = r->bubble_ratio;
        bsipipe_sim_result_destroy(r);
    }
}

static void round_trips(bsipipe_schedule_kind_t kind, int w, int m, int *tried)
{
    const char *name = bsipipe_schedule_kind_name(kind);
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.m = m;
    bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 4 * pc.p * w, 64, 4, 256, 256, 128};
    bsipipe_schedule_t *s;
    if (bsipipe_schedule_create(&pc, &dims, &s) < 0)
        return; /* a config this schedule does not take (e.g. bitpipe at odd w) */
    (*tried)++;
    double ms, bub;
    sim_unit(s, &ms, &bub);
    char why[256];

    /* 1. through the builder */
    bsipipe_builder_t *b;
    int rc = bsipipe_builder_create(&pc, &dims, &b);
    CHECK(rc == 0, "%s w=%d: builder: %s", name, w, bsipipe_error_detail());
    for (int d = 0; rc == 0 && d < w; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; rc == 0 && i < n; i++)
            if (ops[i].kind <= BSIPIPE_OP_W)
                rc = bsipipe_builder_append_op(b, &ops[i]);
    }
    bsipipe_schedule_t *t = NULL;
    if (rc == 0)
        rc = bsipipe_builder_finish(b, &t);
    CHECK(rc == 0, "%s w=%d: builder round trip: %s", name, w, bsipipe_error_detail());
    bsipipe_builder_destroy(b);
    if (t) {
        CHECK(same_ops(s, t, why, sizeof why), "%s w=%d: built plan differs: %s", name, w, why);
        double ms2, bub2;
        sim_unit(t, &ms2, &bub2);
        CHECK(ms2 == ms && bub2 == bub, "%s w=%d: built plan makespan %g bubble %g, preset %g %g", name, w, ms2,
              bub2, ms, bub);
        CHECK(bsipipe_schedule_n_channels(t) == bsipipe_schedule_n_channels(s), "%s: channels", name);
        bsipipe_schedule_destroy(t);
    }

    /* 2. through JSON (under unit costs, as bsipipe-plan --format json) */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_result_t *r = NULL;
    rc = f && bsipipe_simulate(s, &unit, &r) == 0 ? bsipipe_export_json(f, s, r, &unit) : -1;
    if (f)
        fclose(f);
    bsipipe_sim_result_destroy(r);
    CHECK(rc == 0, "%s w=%d: export", name, w);
    t = NULL;
    if (rc == 0) {
        bsipipe_import_info_t info;
        rc = bsipipe_schedule_import_json_ex("export.json", text, NULL, &t, &info);
        CHECK(rc == 0, "%s w=%d: JSON round trip: %s", name, w, bsipipe_error_detail());
        CHECK(rc < 0 || (info.has_model && info.ignored_ops > 0), "%s: import info", name);
    }
    if (t) {
        CHECK(same_ops(s, t, why, sizeof why), "%s w=%d: imported plan differs: %s", name, w, why);
        double ms2, bub2;
        sim_unit(t, &ms2, &bub2);
        CHECK(ms2 == ms && bub2 == bub, "%s w=%d: imported makespan %g, preset %g", name, w, ms2, ms);
        CHECK(!memcmp(bsipipe_schedule_model(t), &dims, sizeof dims), "%s: model not imported", name);
        CHECK(!memcmp(bsipipe_schedule_sub_starts(t), bsipipe_schedule_sub_starts(s), sizeof(int) * (pc.k + 1)),
              "%s: partition differs", name);
        bsipipe_schedule_destroy(t);
    }
    free(text);
    bsipipe_schedule_destroy(s);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 16);
    size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* text with the first `from` replaced by `to` (a new string). */
static char *replace(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    CHECK(at != NULL, "test bug: \"%s\" not in the plan", from);
    if (!at)
        return strdup(text);
    size_t a = (size_t)(at - text), n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    memcpy(out, text, a);
    strcpy(out + a, to);
    strcat(out, at + strlen(from));
    return out;
}

/* Imports text (named "plan.json") and expects code `code` with `needle`
 * (and "plan.json") in the detail. */
static void expect_bad(const char *what, const char *text, int code, const char *needle)
{
    bsipipe_schedule_t *s = (bsipipe_schedule_t *)1;
    int rc = bsipipe_schedule_import_json_string(text, "plan.json", NULL, &s);
    const char *msg = bsipipe_error_detail();
    CHECK(rc == code, "%s: rc %d (%s), expected %d (%s): %s", what, rc, bsipipe_strerror(rc), code,
          bsipipe_strerror(code), msg);
    CHECK(s == NULL, "%s: *out not cleared", what);
    CHECK_CONTAINS(msg, needle);
    CHECK_CONTAINS(msg, "plan.json");
    printf("  %-24s -> %s\n", what, msg);
}

static const char *const op0 = "{\"device\": 0, \"kind\": \"F\", \"mb\": 0, \"sub\": 0, \"chunk\": 0}";

int main(void)
{
    /* 1, 2: all ten schedules, on three pipeline depths */
    int tried = 0;
    const int ws[3][2] = {{4, 8}, {2, 4}, {3, 6}};
    for (int kind = 0; kind < BSIPIPE_SCHED_COUNT; kind++)
        for (int i = 0; i < 3; i++)
            round_trips((bsipipe_schedule_kind_t)kind, ws[i][0], ws[i][1], &tried);
    CHECK(tried >= 28, "only %d presets planned", tried);
    printf("round trips: %d presets through the builder and through JSON\n", tried);

    /* 3. the committed hand-written plan */
    const char *src = getenv("srcdir") ? getenv("srcdir") : ".";
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/plan-seq1f1b-w2.json", src);
    char *plan = read_text(path);
    CHECK(plan != NULL, "cannot read %s", path);
    if (!plan)
        return check_finish("test_plan_import");
    bsipipe_schedule_t *s;
    int rc = bsipipe_schedule_import_json(path, NULL, &s);
    CHECK(rc == 0, "import %s: %s", path, bsipipe_error_detail());
    if (rc == 0) {
        CHECK(bsipipe_schedule_config(s)->schedule == BSIPIPE_SCHED_SEQ1F1B && bsipipe_schedule_n_devices(s) == 2,
              "config of the hand-written plan");
        CHECK(bsipipe_schedule_model(s)->n_layers == 4 && bsipipe_schedule_model(s)->ffn_hidden == 128,
              "model of the hand-written plan (ffn defaults to 4*hidden)");
        CHECK(bsipipe_schedule_validate(s) == 0, "validate: %s", bsipipe_error_detail());
        double ms, bub;
        sim_unit(s, &ms, &bub);
        CHECK(ms == 15, "hand-written plan: makespan %g under unit costs, expected 15", ms);
        int n, seen = 0, fourth = -1;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, 0, &n);
        for (int i = 0; i < n && fourth < 0; i++)
            if (ops[i].kind <= BSIPIPE_OP_W && ++seen == 4)
                fourth = i;
        CHECK(fourth >= 0 && ops[fourth].kind == BSIPIPE_OP_F && ops[fourth].mb == 1 && ops[fourth].sub == 1,
              "device 0 keeps the file's order (its fourth compute op is F mb1 s1)");
        bsipipe_schedule_destroy(s);
    }
    /* minimal: gpipe on 2 devices, k = 1 (no "sub"), no model: dims are the caller's */
    const char *minimal =
        "{\"format\": \"bsipipe-plan/1\", \"config\": {\"schedule\": \"gpipe\", \"w\": 2, \"p\": 1, \"k\": 1, \"m\": 2},"
        " \"ops\": ["
        "{\"device\": 0, \"kind\": \"F\", \"mb\": 0, \"chunk\": 0}, {\"device\": 0, \"kind\": \"F\", \"mb\": 1, \"chunk\": 0},"
        "{\"device\": 1, \"kind\": \"F\", \"mb\": 0, \"chunk\": 1}, {\"device\": 1, \"kind\": \"B\", \"mb\": 0, \"chunk\": 1},"
        "{\"device\": 1, \"kind\": \"F\", \"mb\": 1, \"chunk\": 1}, {\"device\": 1, \"kind\": \"B\", \"mb\": 1, \"chunk\": 1},"
        "{\"device\": 0, \"kind\": \"B\", \"mb\": 0, \"chunk\": 0}, {\"device\": 0, \"kind\": \"B\", \"mb\": 1, \"chunk\": 0}]}";
    bsipipe_model_dims_t dims = {BSIPIPE_MODEL_LLAMA, 2, 32, 2, 64, 64, 16};
    rc = bsipipe_schedule_import_json_string(minimal, "minimal.json", &dims, &s);
    CHECK(rc == 0, "minimal plan: %s", bsipipe_error_detail());
    if (rc == 0) {
        CHECK(!memcmp(bsipipe_schedule_model(s), &dims, sizeof dims), "minimal plan: the caller's model");
        bsipipe_schedule_destroy(s);
    }

    /* 4. bad input: one fault each */
    char *t;
    expect_bad("broken JSON", "{\"format\": \"bsipipe-plan/1\", \"config\": {", BSIPIPE_EFORMAT, "malformed JSON");
    expect_bad("not an object", "[1, 2]", BSIPIPE_EFORMAT, "expected a JSON object");
    expect_bad("wrong format", t = replace(plan, "bsipipe-plan/1", "bsipipe-plan/9"), BSIPIPE_EFORMAT,
               "\"bsipipe-plan/9\" is not a format");
    free(t);
    expect_bad("missing config field", t = replace(plan, "\"w\": 2, ", ""), BSIPIPE_EFORMAT,
               "config: missing field \"w\"");
    free(t);
    expect_bad("missing op field", t = replace(plan, op0, "{\"device\": 0, \"kind\": \"F\", \"mb\": 0, \"sub\": 0}"),
               BSIPIPE_EFORMAT, "ops[0]: missing field \"chunk\"");
    free(t);
    expect_bad("missing sub at k=2", t = replace(plan, op0, "{\"device\": 0, \"kind\": \"F\", \"mb\": 0, \"chunk\": 0}"),
               BSIPIPE_EFORMAT, "ops[0]: missing field \"sub\"");
    free(t);
    expect_bad("unknown kind", t = replace(plan, "\"kind\": \"B\"", "\"kind\": \"X\""), BSIPIPE_EFORMAT,
               "ops[4]: unknown kind \"X\"");
    free(t);
    expect_bad("mistyped field", t = replace(plan, "\"mb\": 1,", "\"mb\": \"1\","), BSIPIPE_EFORMAT,
               "ops[2]: field \"mb\": expected an integer, got a string");
    free(t);
    expect_bad("unknown field", t = replace(plan, "\"chunk\": 0}", "\"chunk\": 0, \"chnk\": 1}"), BSIPIPE_EFORMAT,
               "ops[0]: unknown field \"chnk\"");
    free(t);
    expect_bad("duplicate key", t = replace(plan, "\"chunk\": 0}", "\"chunk\": 0, \"chunk\": 1}"), BSIPIPE_EFORMAT,
               "duplicate object key");
    free(t);
    expect_bad("out of range", t = replace(plan, "\"mb\": 1,", "\"mb\": 7,"), BSIPIPE_EFORMAT,
               "ops[2]: field \"mb\": 7 is out of range 0..1");
    free(t);
    expect_bad("n_s", t = replace(plan, "\"m\": 2}", "\"m\": 2, \"n_s\": 6}"), BSIPIPE_EFORMAT, "n_s");
    free(t);
    expect_bad("config rule", t = replace(plan, "\"layers\": 4", "\"layers\": 5"), BSIPIPE_ECONFIG,
               "layers L=5 must be a multiple of p*w = 2");
    free(t);
    expect_bad("op on wrong device", t = replace(plan, op0, "{\"device\": 1, \"kind\": \"F\", \"mb\": 0, \"sub\": 0, \"chunk\": 0}"),
               -EINVAL, "ops[0]: seq1f1b: F down mb0 s0 c0 runs on device 1, placement says device 0");
    free(t);
    expect_bad("pipe of micro-batch", t = replace(plan, op0, "{\"device\": 0, \"kind\": \"F\", \"pipe\": \"up\", \"mb\": 0, \"sub\": 0, \"chunk\": 0}"),
               -EINVAL, "micro-batch 0 runs in the down pipe");
    free(t);
    expect_bad("W without split", t = replace(plan, "\"kind\": \"B\", \"mb\": 0, \"sub\": 1", "\"kind\": \"W\", \"mb\": 0, \"sub\": 1"),
               -EINVAL, "has no W ops");
    free(t);
    expect_bad("duplicate op", t = replace(plan, "\"kind\": \"B\", \"mb\": 1, \"sub\": 0, \"chunk\": 1",
                                             "\"kind\": \"B\", \"mb\": 1, \"sub\": 1, \"chunk\": 1"),
               -EINVAL, "ops[15]: seq1f1b: B down mb1 s1 c1 appears twice");
    free(t);
    expect_bad("missing op", t = replace(plan, ",\n    {\"device\": 1, \"kind\": \"B\", \"mb\": 1, \"sub\": 0, \"chunk\": 1}", ""),
               -EINVAL, "B down mb1 s0 c1 is missing from every device (it belongs on device 1)");
    free(t);
    /* B(0,1) of chunk 0 moved first on device 0: it waits for F(0,1,c0) behind it */
    char *u = replace(plan, "    {\"device\": 0, \"kind\": \"B\", \"mb\": 0, \"sub\": 1, \"chunk\": 0},\n", "");
    expect_bad("dependency never met", t = replace(u, op0, "{\"device\": 0, \"kind\": \"B\", \"mb\": 0, \"sub\": 1, \"chunk\": 0},\n    " "{\"device\": 0, \"kind\": \"F\", \"mb\": 0, \"sub\": 0, \"chunk\": 0}"),
               BSIPIPE_EDEPEND, "device 0 cannot run op 0 (B down mb0 s1 c0): a dependency is never satisfied");
    free(t);
    free(u);
    t = replace(plan, op0, "{\"device\": 0, \"index\": 5, \"kind\": \"F\", \"mb\": 0, \"sub\": 0, \"chunk\": 0}");
    char *t2 = replace(t, "\"sub\": 1, \"chunk\": 0}", "\"sub\": 1, \"chunk\": 0, \"index\": 2}");
    expect_bad("index order", t2, BSIPIPE_EFORMAT, "ops[1]: field \"index\": 2 after 5 on device 0");
    free(t);
    free(t2);
    expect_bad("no ops", "{\"format\": \"bsipipe-plan/1\", \"config\": {\"schedule\": \"gpipe\", \"w\": 2, \"p\": 1, "
               "\"k\": 1, \"m\": 2}, \"ops\": []}", BSIPIPE_EFORMAT, "no F, B or W op");
    expect_bad("unknown schedule", t = replace(plan, "\"seq1f1b\"", "\"seq2f2b\""), BSIPIPE_EFORMAT,
               "unknown schedule 'seq2f2b'");
    free(t);
    rc = bsipipe_schedule_import_json("/nonexistent/plan.json", NULL, &s);
    CHECK(rc == -ENOENT && strstr(bsipipe_error_detail(), "/nonexistent/plan.json"), "missing file: rc %d %s", rc,
          bsipipe_error_detail());

    /* A transfer order that deadlocks (naive, two pipes) is found on import. */
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    bsipipe_schedule_t *pre;
    char *text = NULL;
    size_t len = 0;
    if (bsipipe_schedule_create(&pc, NULL, &pre) == 0) {
        FILE *f = open_memstream(&text, &len);
        bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
        bsipipe_sim_result_t *r = NULL;
        if (f && bsipipe_simulate(pre, &unit, &r) == 0)
            bsipipe_export_json(f, pre, r, &unit);
        if (f)
            fclose(f);
        bsipipe_sim_result_destroy(r);
        bsipipe_schedule_destroy(pre);
        expect_bad("deadlock", t = replace(text, "\"comm\": \"bsipipe\"", "\"comm\": \"naive\""), BSIPIPE_EDEADLOCK,
                   "deadlock");
        free(t);
        free(text);
    }

    /* The builder refuses misuse and keeps its state on error. */
    pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_1F1B);
    pc.w = 2;
    pc.m = 2;
    bsipipe_builder_t *b;
    CHECK(bsipipe_builder_create(&pc, NULL, &b) == 0, "builder: %s", bsipipe_error_detail());
    CHECK(bsipipe_builder_append(b, 2, BSIPIPE_OP_F, BSIPIPE_PIPE_DOWN, 0, 0, 0) == -EINVAL, "device 2 of 2");
    CHECK_CONTAINS(bsipipe_error_detail(), "device 2 does not exist");
    CHECK(bsipipe_builder_append(b, 0, BSIPIPE_OP_SEND, BSIPIPE_PIPE_DOWN, 0, 0, 0) == -EINVAL, "SEND appended");
    CHECK_CONTAINS(bsipipe_error_detail(), "only compute ops");
    CHECK(bsipipe_builder_append(b, 0, BSIPIPE_OP_F, BSIPIPE_PIPE_DOWN, 0, 0, 0) == 0, "F0");
    CHECK(bsipipe_builder_append(b, 0, BSIPIPE_OP_F, BSIPIPE_PIPE_DOWN, 0, 0, 0) == -EINVAL, "F0 twice");
    CHECK(bsipipe_builder_n_ops(b, 0) == 1, "a refused op is not kept");
    CHECK(bsipipe_schedule_chunk_device(bsipipe_builder_placement(b), BSIPIPE_PIPE_DOWN, 1) == 1, "placement");
    CHECK(bsipipe_builder_finish(b, &s) == -EINVAL && s == NULL, "finish with ops missing");
    CHECK(bsipipe_builder_append(b, 0, BSIPIPE_OP_F, BSIPIPE_PIPE_DOWN, 1, 0, 0) == -EINVAL, "append after finish");
    CHECK(bsipipe_builder_finish(b, &s) == -EINVAL, "finish twice");
    CHECK(bsipipe_builder_placement(b) == NULL, "placement after finish");
    bsipipe_builder_destroy(b);
    pc.m = 1; /* fine for 1f1b */
    pc.schedule = BSIPIPE_SCHED_BSIPIPE; /* but not for bsipipe (a micro-batch in each pipe) */
    pc.p = 2;
    pc.k = 2;
    CHECK(bsipipe_builder_create(&pc, NULL, &b) == BSIPIPE_ECONFIG && b == NULL, "config rules apply");
    bsipipe_builder_destroy(NULL);
    free(plan);
    return check_finish("test_plan_import");
}
