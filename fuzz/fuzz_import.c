/* fuzz_import: arbitrary bytes as a plan file (`bsipipe-plan --plan FILE`,
 * docs/plan-json.md) through bsipipe_schedule_import_json_ex, and a plan it
 * imports through what bsipipe-plan does next: validation and simulation
 * (unit and FLOP costs), and the export back to JSON.
 *
 * Properties: no crash, leak, hang or unbounded memory (the per-input
 * limits); a refusal is negative, leaves no schedule, and its detail names
 * the file; an imported plan validates (the importer says it checked it),
 * simulates under both cost models, exports, and its export imports again
 * to the same ops on every device (the round trip bsipipe-plan --format json
 * | bsipipe-plan --plan promises); the same bytes read from a file (the
 * path bsipipe-plan takes) give the same outcome as from memory. */
#include "fuzz/fuzz_util.h"
#include "graph/bsipipe_builder.h"
#include "graph/bsipipe_draw.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"

#include <fcntl.h>

#define NAME "fuzz/plan.json"

static char tmp_path[4096];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void cleanup(void)
{
    if (*tmp_path)
        unlink(tmp_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_silence_stderr();
    const char *t = getenv("TMPDIR");
    snprintf(tmp_path, sizeof tmp_path, "%s/bsipipe-fuzz-plan.%ld.json", t && *t ? t : "/tmp", (long)getpid());
    atexit(cleanup);
    return 0;
}

/* The model when the plan has none: bsipipe-plan's default is larger; a
 * small one keeps the FLOP simulation's numbers small (any model is fine). */
static const bsipipe_model_dims_t default_dims = {
    .family = BSIPIPE_MODEL_GPT, .n_layers = 16, .hidden = 64, .n_heads = 4, .ffn_hidden = 256, .vocab = 256,
    .seq_len = 256,
};

static void require_refusal(int rc, const bsipipe_schedule_t *s, const char *name)
{
    FUZZ_REQUIRE(rc < 0 && s == NULL, "rc %d, schedule %p", rc, (const void *)s);
    const char *why = bsipipe_error_detail();
    FUZZ_REQUIRE(rc == -ENOMEM || (why && strstr(why, name)), "rc %d: detail '%s' does not name %s", rc,
                 why ? why : "(null)", name);
}

static void require_same_ops(const bsipipe_schedule_t *a, const bsipipe_schedule_t *b)
{
    int w = bsipipe_schedule_n_devices(a);
    FUZZ_REQUIRE(bsipipe_schedule_n_devices(b) == w, "%d devices, re-imported %d", w, bsipipe_schedule_n_devices(b));
    for (int d = 0; d < w; d++) {
        int na, nb;
        const bsipipe_op_t *oa = bsipipe_schedule_device_ops(a, d, &na), *ob = bsipipe_schedule_device_ops(b, d, &nb);
        FUZZ_REQUIRE(na == nb, "device %d: %d ops, re-imported %d", d, na, nb);
        for (int i = 0; i < na; i++)
            FUZZ_REQUIRE(oa[i].kind == ob[i].kind && oa[i].pipe == ob[i].pipe && oa[i].tensor == ob[i].tensor &&
                             oa[i].mb == ob[i].mb && oa[i].sub == ob[i].sub && oa[i].chunk == ob[i].chunk &&
                             oa[i].peer == ob[i].peer && oa[i].channel == ob[i].channel,
                         "device %d op %d differs after the round trip", d, i);
    }
}

/* An imported plan: what bsipipe-plan does with it. */
static void check_imported(const bsipipe_schedule_t *s, const bsipipe_import_info_t *info)
{
    FUZZ_REQUIRE(info->compute_ops > 0, "imported without compute ops");
    FUZZ_REQUIRE(bsipipe_schedule_validate(s) == 0, "imported but invalid: %s", bsipipe_error_detail());
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit(), flops = bsipipe_cost_model_flops(100e12);
    bsipipe_sim_result_t *ru = NULL, *rf = NULL;
    int rc = bsipipe_simulate(s, &unit, &ru);
    FUZZ_REQUIRE(rc == 0, "unit simulation: %s", bsipipe_error_detail());
    rc = bsipipe_simulate(s, &flops, &rf);
    FUZZ_REQUIRE(rc == 0, "FLOP simulation: %s", bsipipe_error_detail());
    char *json = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&json, &len);
    FUZZ_REQUIRE(f != NULL, "open_memstream");
    rc = bsipipe_export_json(f, s, ru, &unit);
    fclose(f);
    FUZZ_REQUIRE(rc == 0, "export: %s", bsipipe_error_detail());
    bsipipe_schedule_t *again = NULL;
    bsipipe_import_info_t info2;
    rc = bsipipe_schedule_import_json_ex("export.json", json, NULL, &again, &info2);
    FUZZ_REQUIRE(rc == 0, "the export does not import: %s", bsipipe_error_detail());
    FUZZ_REQUIRE(info2.compute_ops == info->compute_ops && info2.has_model, "re-imported %ld compute ops of %ld",
                 info2.compute_ops, info->compute_ops);
    require_same_ops(s, again);
    bsipipe_schedule_destroy(again);
    free(json);
    bsipipe_sim_result_destroy(ru);
    bsipipe_sim_result_destroy(rf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    FUZZ_REQUIRE(text != NULL, "out of memory");
    memcpy(text, data, size);
    text[size] = 0;
    bsipipe_schedule_t *s = NULL;
    bsipipe_import_info_t info;
    int rc = bsipipe_schedule_import_json_ex(NAME, text, &default_dims, &s, &info);
    if (rc < 0)
        require_refusal(rc, s, NAME);
    else
        check_imported(s, &info);
    /* From a file, as bsipipe-plan reads it (a NUL byte ends the string,
     * not the file: compared only without one). */
    if (!memchr(data, 0, size) && *tmp_path) {
        int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0 && write(fd, data, size) == (ssize_t)size) {
            close(fd);
            bsipipe_schedule_t *sf = NULL;
            bsipipe_import_info_t info_f;
            int rf = bsipipe_schedule_import_json_ex(tmp_path, NULL, &default_dims, &sf, &info_f);
            FUZZ_REQUIRE((rf < 0) == (rc < 0), "from a file: rc %d, from memory %d (%s)", rf, rc,
                         bsipipe_error_detail());
            if (rf < 0)
                require_refusal(rf, sf, tmp_path);
            else
                require_same_ops(s, sf);
            bsipipe_schedule_destroy(sf);
        } else if (fd >= 0) {
            close(fd);
        }
        unlink(tmp_path);
    }
    bsipipe_schedule_destroy(s);
    free(text);
    return 0;
}
