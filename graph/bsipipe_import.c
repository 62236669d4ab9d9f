/* bsipipe_import.c: a plan read from JSON (bsipipe-plan/1, docs/plan-json.md)
 * into the builder (bsipipe_builder.c), which derives transfers, SYNC and
 * STEP and validates. Parsing is Jansson's (Debian's libjansson-dev): it
 * reports malformed input with line and column, rejects duplicate keys, and
 * keeps integers apart from reals, so every message here can name the file,
 * the op and the field. */
#include "graph/bsipipe_builder.h"
#include "base/bsipipe_error.h"
#include "graph/schedule_internal.h"

#include <jansson.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FORMAT_NAME "bsipipe-plan/1"

typedef struct import_ctx {
    const char *name; /* the file, as the caller named it */
} import_ctx_t;

/* "NAME: <sentence>" with `code`. */
__attribute__((format(printf, 3, 4)))
static int fail(const import_ctx_t *c, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bsipipe_error_set(code, "%s: %s", c->name, msg);
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Every key of obj is in `known` (NULL-terminated): else EFORMAT naming the
 * first stranger and the known ones (a typo would otherwise be a silent
 * default). */
static int check_keys(const import_ctx_t *c, const char *where, const json_t *obj, const char *const *known)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = strcmp(key, known[i]) == 0;
        if (!ok) {
            char list[512] = "";
            size_t len = 0;
            for (int i = 0; known[i] && len < sizeof list - 32; i++)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", known[i]);
            return fail(c, BSIPIPE_EFORMAT, "%s: unknown field \"%s\" (known: %s)", where, key, list);
        }
    }
    return 0;
}

/* An integer field in lo..hi. Missing: *out = def when not required, else
 * EFORMAT. */
static int get_int(const import_ctx_t *c, const char *where, const json_t *obj, const char *key, int required,
                   int def, int lo, int hi, int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return fail(c, BSIPIPE_EFORMAT, "%s: missing field \"%s\"", where, key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v))
        return fail(c, BSIPIPE_EFORMAT, "%s: field \"%s\": expected an integer, got %s", where, key,
                    json_type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return fail(c, BSIPIPE_EFORMAT, "%s: field \"%s\": %lld is out of range %d..%d", where, key, (long long)x,
                    lo, hi);
    *out = (int)x;
    return 0;
}

/* A string field; *out NULL when missing and not required. */
static int get_str(const import_ctx_t *c, const char *where, const json_t *obj, const char *key, int required,
                   const char **out)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v)
        return required ? fail(c, BSIPIPE_EFORMAT, "%s: missing field \"%s\"", where, key) : 0;
    if (!json_is_string(v))
        return fail(c, BSIPIPE_EFORMAT, "%s: field \"%s\": expected a string, got %s", where, key, json_type_name(v));
    *out = json_string_value(v);
    return 0;
}

static int get_bool(const import_ctx_t *c, const char *where, const json_t *obj, const char *key, int def, int *out)
{
    const json_t *v = json_object_get(obj, key);
    *out = def;
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return fail(c, BSIPIPE_EFORMAT, "%s: field \"%s\": expected true or false, got %s", where, key,
                    json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int parse_config(const import_ctx_t *c, const json_t *cfg, bsipipe_parallel_config_t *pc)
{
    static const char *const known[] = {"schedule", "w", "p", "k", "m", "tp", "n_s", "partition", "comm",
                                        "concat", "optimise", "layout", NULL};
    if (!json_is_object(cfg))
        return fail(c, BSIPIPE_EFORMAT, "field \"config\": expected an object, got %s", json_type_name(cfg));
    int rc = check_keys(c, "config", cfg, known);
    const char *name, *partition = NULL, *comm = NULL;
    if (rc == 0)
        rc = get_str(c, "config", cfg, "schedule", 1, &name);
    if (rc < 0)
        return rc;
    bsipipe_schedule_kind_t kind;
    if (bsipipe_schedule_kind_parse(name, &kind) < 0)
        return fail(c, BSIPIPE_EFORMAT, "config: field \"schedule\": %s", bsipipe_error_detail());
    *pc = bsipipe_parallel_config_default(kind);
    pc->optimise = 0; /* the order is the file's */
    int ns = 0, opt;
    if ((rc = get_int(c, "config", cfg, "w", 1, 0, 1, 1 << 20, &pc->w)) < 0 ||
        (rc = get_int(c, "config", cfg, "p", 1, 0, 1, 1 << 20, &pc->p)) < 0 ||
        (rc = get_int(c, "config", cfg, "k", 1, 0, 1, 1 << 20, &pc->k)) < 0 ||
        (rc = get_int(c, "config", cfg, "m", 1, 0, 1, 1 << 20, &pc->m)) < 0 ||
        (rc = get_int(c, "config", cfg, "tp", 0, 1, 1, 1 << 20, &pc->tp)) < 0 ||
        (rc = get_int(c, "config", cfg, "n_s", 0, 0, 0, INT_MAX, &ns)) < 0 ||
        (rc = get_str(c, "config", cfg, "partition", 0, &partition)) < 0 ||
        (rc = get_str(c, "config", cfg, "layout", 0, &pc->layout)) < 0 ||
        (rc = get_str(c, "config", cfg, "comm", 0, &comm)) < 0 ||
        (rc = get_bool(c, "config", cfg, "concat", 1, &pc->concat)) < 0 ||
        (rc = get_bool(c, "config", cfg, "optimise", 0, &opt)) < 0)
        return rc;
    if (ns && (long)ns != (long)pc->m * pc->k)
        return fail(c, BSIPIPE_EFORMAT, "config: field \"n_s\": %d is not m*k = %d*%d = %ld", ns, pc->m, pc->k,
                    (long)pc->m * pc->k);
    if (partition && strcmp(partition, "balanced") == 0)
        pc->partition = BSIPIPE_PARTITION_BALANCED;
    else if (partition && strcmp(partition, "even") == 0)
        pc->partition = BSIPIPE_PARTITION_EVEN;
    else if (partition)
        return fail(c, BSIPIPE_EFORMAT, "config: field \"partition\": unknown partition \"%s\" (balanced or even)",
                    partition);
    if (comm && bsipipe_comm_order_parse(comm, &pc->comm) < 0)
        return fail(c, BSIPIPE_EFORMAT, "config: field \"comm\": %s", bsipipe_error_detail());
    return 0;
}

static int parse_model(const import_ctx_t *c, const json_t *mod, bsipipe_model_dims_t *d)
{
    static const char *const known[] = {"family", "layers", "hidden", "heads", "ffn", "vocab", "seq_len", NULL};
    if (!json_is_object(mod))
        return fail(c, BSIPIPE_EFORMAT, "field \"model\": expected an object, got %s", json_type_name(mod));
    const char *family;
    int rc = check_keys(c, "model", mod, known);
    if (rc == 0)
        rc = get_str(c, "model", mod, "family", 0, &family);
    if (rc < 0)
        return rc;
    if (!family || strcmp(family, "gpt") == 0)
        d->family = BSIPIPE_MODEL_GPT;
    else if (strcmp(family, "llama") == 0)
        d->family = BSIPIPE_MODEL_LLAMA;
    else
        return fail(c, BSIPIPE_EFORMAT, "model: field \"family\": unknown family \"%s\" (gpt or llama)", family);
    if ((rc = get_int(c, "model", mod, "layers", 1, 0, 1, 1 << 24, &d->n_layers)) < 0 ||
        (rc = get_int(c, "model", mod, "hidden", 1, 0, 1, 1 << 24, &d->hidden)) < 0 ||
        (rc = get_int(c, "model", mod, "heads", 1, 0, 1, 1 << 24, &d->n_heads)) < 0 ||
        (rc = get_int(c, "model", mod, "seq_len", 1, 0, 1, 1 << 24, &d->seq_len)) < 0 ||
        (rc = get_int(c, "model", mod, "ffn", 0, 4 * d->hidden, 1, 1 << 24, &d->ffn_hidden)) < 0 ||
        (rc = get_int(c, "model", mod, "vocab", 0, 256, 2, 1 << 24, &d->vocab)) < 0)
        return rc;
    return 0;
}

/* One entry of "ops": a compute op goes to the builder, the rest is counted.
 * last_index[device]: the previous "index" seen on that device. */
static int parse_op(const import_ctx_t *c, const json_t *o, long i, bsipipe_builder_t *b, int *last_index,
                    bsipipe_import_info_t *info)
{
    static const char *const known[] = {"device", "index", "kind", "pipe", "mb", "sub", "chunk", "tensor",
                                        "peer", "channel", "start", "end", "pair", NULL};
    char where[32];
    snprintf(where, sizeof where, "ops[%ld]", i);
    if (!json_is_object(o))
        return fail(c, BSIPIPE_EFORMAT, "%s: expected an object, got %s", where, json_type_name(o));
    const char *kind_s, *pipe_s, *pair_s;
    int rc = check_keys(c, where, o, known);
    if (rc == 0)
        rc = get_str(c, where, o, "kind", 1, &kind_s);
    if (rc < 0)
        return rc;
    int kind = -1;
    for (int k = 0; k < BSIPIPE_OP_KIND_COUNT; k++)
        if (strcmp(kind_s, bsipipe_op_kind_name((bsipipe_op_kind_t)k)) == 0)
            kind = k;
    if (kind < 0)
        return fail(c, BSIPIPE_EFORMAT, "%s: unknown kind \"%s\" (F, B or W; SEND, RECV, SYNC and STEP are "
                    "accepted and ignored)", where, kind_s);
    if (kind > BSIPIPE_OP_W) { /* derived again by the builder */
        info->ignored_ops++;
        return 0;
    }
    const bsipipe_schedule_t *s = bsipipe_builder_placement(b);
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    int W = bsipipe_schedule_n_devices(s);
    bsipipe_op_t op = {.kind = (uint8_t)kind, .peer = -1, .channel = -1};
    int index;
    if ((rc = get_int(c, where, o, "device", 1, 0, 0, W - 1, &op.device)) < 0 ||
        (rc = get_int(c, where, o, "mb", 1, 0, 0, pc->m - 1, &op.mb)) < 0 ||
        (rc = get_int(c, where, o, "sub", pc->k > 1, 0, 0, pc->k - 1, &op.sub)) < 0 ||
        (rc = get_int(c, where, o, "chunk", 1, 0, 0, bsipipe_schedule_n_chunks(s) - 1, &op.chunk)) < 0 ||
        (rc = get_int(c, where, o, "index", 0, -1, 0, INT_MAX, &index)) < 0 ||
        (rc = get_str(c, where, o, "pipe", 0, &pipe_s)) < 0 || (rc = get_str(c, where, o, "pair", 0, &pair_s)) < 0)
        return rc;
    if (pair_s && strcmp(pair_s, "F") == 0 && kind == BSIPIPE_OP_F)
        op.flags = BSIPIPE_OP_PAIR_F;
    else if (pair_s && strcmp(pair_s, "B") == 0 && kind != BSIPIPE_OP_F)
        op.flags = BSIPIPE_OP_PAIR_B;
    else if (pair_s)
        return fail(c, BSIPIPE_EFORMAT, "%s: field \"pair\": \"%s\" on a %s op: an overlapped pair's forward is "
                    "\"F\" on an F op, its backward \"B\" on a B or W op", where, pair_s, kind_s);
    if (!pipe_s)
        op.pipe = (uint8_t)bsipipe_schedule_mb_pipe(s, op.mb);
    else if (strcmp(pipe_s, "down") == 0)
        op.pipe = BSIPIPE_PIPE_DOWN;
    else if (strcmp(pipe_s, "up") == 0)
        op.pipe = BSIPIPE_PIPE_UP;
    else
        return fail(c, BSIPIPE_EFORMAT, "%s: field \"pipe\": unknown pipe \"%s\" (down or up)", where, pipe_s);
    if (index >= 0) { /* the planner's position: lists are in execution order */
        if (index <= last_index[op.device])
            return fail(c, BSIPIPE_EFORMAT, "%s: field \"index\": %d after %d on device %d: list each device's ops "
                        "in execution order", where, index, last_index[op.device], op.device);
        last_index[op.device] = index;
    }
    if ((rc = bsipipe_builder_append_op(b, &op)) < 0) {
        char why[768];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        return fail(c, rc, "%s: %s", where, why);
    }
    info->compute_ops++;
    return 0;
}

static int import_root(const import_ctx_t *c, const json_t *root, const bsipipe_model_dims_t *dims,
                       bsipipe_schedule_t **out, bsipipe_import_info_t *info)
{
    static const char *const known[] = {"format", "config", "model", "ops", "cost_model", "summary", "devices",
                                        "comment", NULL};
    if (!json_is_object(root))
        return fail(c, BSIPIPE_EFORMAT, "expected a JSON object at the top, got %s", json_type_name(root));
    const char *format;
    int rc = check_keys(c, "top level", root, known);
    if (rc == 0)
        rc = get_str(c, "top level", root, "format", 1, &format);
    if (rc < 0)
        return rc;
    if (strcmp(format, FORMAT_NAME) != 0)
        return fail(c, BSIPIPE_EFORMAT, "field \"format\": \"%s\" is not a format this library reads (\"%s\")",
                    format, FORMAT_NAME);
    const json_t *cfg = json_object_get(root, "config"), *mod = json_object_get(root, "model");
    const json_t *ops = json_object_get(root, "ops");
    if (!cfg)
        return fail(c, BSIPIPE_EFORMAT, "missing field \"config\"");
    if (!ops)
        return fail(c, BSIPIPE_EFORMAT, "missing field \"ops\"");
    if (!json_is_array(ops))
        return fail(c, BSIPIPE_EFORMAT, "field \"ops\": expected an array, got %s", json_type_name(ops));
    bsipipe_parallel_config_t pc;
    bsipipe_model_dims_t md;
    if ((rc = parse_config(c, cfg, &pc)) < 0 || (mod && (rc = parse_model(c, mod, &md)) < 0))
        return rc;
    info->has_model = mod != NULL;
    bsipipe_builder_t *b;
    if ((rc = bsipipe_builder_create(&pc, mod ? &md : dims, &b)) < 0) {
        char why[768];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        return fail(c, rc, "config%s: %s", mod ? " and model" : "", why);
    }
    int *last_index = malloc(sizeof(int) * (size_t)pc.w);
    if (!last_index)
        rc = bsipipe_error_set(-ENOMEM, "out of memory");
    for (int d = 0; last_index && d < pc.w; d++)
        last_index[d] = -1;
    for (size_t i = 0; rc == 0 && i < json_array_size(ops); i++)
        rc = parse_op(c, json_array_get(ops, i), (long)i, b, last_index, info);
    free(last_index);
    if (rc == 0 && info->compute_ops == 0)
        rc = fail(c, BSIPIPE_EFORMAT, "field \"ops\": no F, B or W op: list each device's compute ops in "
                  "execution order");
    if (rc == 0 && (rc = bsipipe_builder_finish(b, out)) < 0) {
        char why[768];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        rc = fail(c, rc, "%s", why);
    }
    bsipipe_builder_destroy(b);
    return rc;
}

/* JSON plans larger than this are refused before they are parsed (the
 * parsed document takes about ten times its text): the planner's export of
 * the paper's setting at k = 16 is 33 MiB. */
#define PLAN_JSON_MAX_BYTES (256L << 20)

/* ---- a plan file read within bounds its own config sets ----
 * A plan of config (w, p, k, m) has at most
 *   18 p w m k + 4 p w + 2 w + 16
 * ops: per pipe (at most 2) an F, a B and a W per chunk (p w) and piece
 * (m k), a SEND and a RECV around each, a SYNC per chunk pair and a STEP
 * per device. An exported op takes about 150 bytes (pretty-printed 250);
 * OP_BYTES per op leaves room for whitespace. So the config object, parsed
 * alone first, bounds both the file's size and its object count before the
 * whole document is parsed (a JSON tree costs about 10 times its text). */
enum { OP_BYTES = 1024, PLAN_SLACK_BYTES = 1 << 20, PLAN_SMALL_BYTES = 1 << 20 };

static int plan_json_read_bounded(const char *path, char **out, long *out_size)
{
    char *buf;
    long len;
    int rc = plan_file_read(path, PLAN_JSON_MAX_BYTES, &buf, &len);
    if (rc < 0)
        return rc;
    size_t got = (size_t)len;
    long size = len;
    /* The config object, parsed alone (JSON_DISABLE_EOF_CHECK: one value). */
    long w = 0, p = 1, k = 1, m = 0;
    const char *key = strstr(buf, "\"config\"");
    const char *brace = key ? strchr(key + 8, '{') : NULL;
    if (brace) {
        json_error_t err;
        json_t *cfg = json_loadb(brace, got - (size_t)(brace - buf), JSON_DISABLE_EOF_CHECK, &err);
        json_t *v;
        if (cfg && json_is_object(cfg)) {
            if ((v = json_object_get(cfg, "w")) && json_is_integer(v)) w = (long)json_integer_value(v);
            if ((v = json_object_get(cfg, "p")) && json_is_integer(v)) p = (long)json_integer_value(v);
            if ((v = json_object_get(cfg, "k")) && json_is_integer(v)) k = (long)json_integer_value(v);
            if ((v = json_object_get(cfg, "m")) && json_is_integer(v)) m = (long)json_integer_value(v);
        }
        json_decref(cfg);
    }
    if (w < 1 || p < 1 || k < 1 || m < 1 || w > (1 << 20) || p > (1 << 20) || k > (1 << 20) || m > (1 << 20)) {
        if ((long)got <= PLAN_SMALL_BYTES) { /* small: the full parse names what is wrong */
            *out = buf;
            *out_size = (long)got;
            return 0;
        }
        free(buf);
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: %ld MiB without a readable \"config\" (w, p, k, m) to bound "
                                 "it: a plan file over 1 MiB must hold its config", path, size >> 20);
    }
    double ops = 18.0 * (double)p * (double)w * (double)m * (double)k + 4.0 * (double)p * (double)w + 2.0 * (double)w + 16;
    double max_bytes = ops * OP_BYTES + PLAN_SLACK_BYTES;
    if ((double)got > max_bytes) {
        free(buf);
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: %ld bytes, more than a plan of its config (w=%ld p=%ld k=%ld "
                                 "m=%ld: at most %.0f ops) can take (%.0f bytes)", path, (long)got, w, p, k, m, ops,
                                 max_bytes);
    }
    long objects = 0;
    for (size_t i = 0; i < got; i++)
        objects += buf[i] == '{';
    if ((double)objects > ops + 64) {
        free(buf);
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: %ld JSON objects, more than a plan of its config (w=%ld p=%ld "
                                 "k=%ld m=%ld) has ops (at most %.0f)", path, objects, w, p, k, m, ops);
    }
    *out = buf;
    *out_size = (long)got;
    return 0;
}

int bsipipe_schedule_import_json_ex(const char *path, const char *text, const bsipipe_model_dims_t *dims,
                                    bsipipe_schedule_t **out, bsipipe_import_info_t *info)
{
    bsipipe_import_info_t dummy;
    if (!info)
        info = &dummy;
    memset(info, 0, sizeof *info);
    *out = NULL;
    import_ctx_t c = {path ? path : "<string>"};
    if (!text && !path)
        return bsipipe_error_set(-EINVAL, "import: no file and no text given");
    size_t len = path ? strlen(path) : 0;
    if (!text && len > 4 && !strcasecmp(path + len - 4, ".csv")) /* torch's action CSV */
        return bsipipe_schedule_import_torch_csv(path, dims, out, info);
    json_error_t err;
    json_t *root;
    if (text) {
        root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    } else {
        char *buf = NULL;
        long size = 0;
        int rc = plan_json_read_bounded(path, &buf, &size);
        if (rc < 0)
            return rc;
        root = json_loadb(buf, (size_t)size, JSON_REJECT_DUPLICATES, &err);
        free(buf);
    }
    if (!root)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s:%d:%d: malformed JSON: %s", c.name, err.line, err.column,
                                 err.text);
    int rc = import_root(&c, root, dims, out, info);
    json_decref(root);
    return rc;
}

int bsipipe_schedule_import_json(const char *path, const bsipipe_model_dims_t *dims, bsipipe_schedule_t **out)
{
    if (!path) {
        *out = NULL;
        return bsipipe_error_set(-EINVAL, "import: no file given");
    }
    return bsipipe_schedule_import_json_ex(path, NULL, dims, out, NULL);
}

int bsipipe_schedule_import_json_string(const char *text, const char *name, const bsipipe_model_dims_t *dims,
                                        bsipipe_schedule_t **out)
{
    if (!text) {
        *out = NULL;
        return bsipipe_error_set(-EINVAL, "import: no text given");
    }
    return bsipipe_schedule_import_json_ex(name, text, dims, out, NULL);
}
