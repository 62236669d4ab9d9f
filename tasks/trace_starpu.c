/* trace_starpu.c: StarPU's FxT trace of a run and StarPU's tools on it
 * (docs/tracing.md).
 *
 * bsipipe_trace_begin points StarPU's FxT tracing at the trace directory
 * before starpu_init; starpu_shutdown writes the raw file; bsipipe_trace_end
 * runs starpu_fxt_tool on it (paje.trace, dag.dot, tasks.rec, trace.rec ...),
 * puts paje.trace's events in time order and colours its task states like
 * the planner's SVG, and limits dag.dot to the engine's ops, labelled with
 * the ops they ran (DIR/ops.tsv, written by bsipipe_engine_trace_write).
 *
 * Task names are the codelets' model symbols (bsipipe_fwd, bsipipe_bwd ...:
 * engine_perfmodel.c), without blanks, so paje.trace as StarPU's own
 * converter writes it (run by hand on the raw file) is read by Paje readers
 * and StarPU's scripts group by those few names. */
#include "tasks/engine_internal.h"
#include "base/bsipipe_error.h"

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef BSIPIPE_STARPU_BINDIR
#define BSIPIPE_STARPU_BINDIR ""
#endif

#define RAW_SUFFIX "prof_file"

/* ---- colours --------------------------------------------------------------------------- */

unsigned bsipipe_trace_op_color(const bsipipe_op_t *op)
{
    /* [pipe][F, B, W]: the fills of graph/bsipipe_draw.c (paper's Figure 1). */
    static const unsigned compute[2][3] = {{0x9ecae1, 0x2171b5, 0x6a51a3}, {0xfdae6b, 0xd94801, 0x8c6d31}};
    switch (op->kind) {
    case BSIPIPE_OP_F:
    case BSIPIPE_OP_B:
    case BSIPIPE_OP_W: return compute[op->pipe ? 1 : 0][op->kind];
    case BSIPIPE_OP_SEND: return 0x969696;
    case BSIPIPE_OP_RECV: return 0xcccccc;
    case BSIPIPE_OP_SYNC: return 0x74c476;
    case BSIPIPE_OP_STEP: return 0x238b45;
    default: return 0x000000;
    }
}

/* The op kind of a task from its name in StarPU's trace (its codelet's
 * model symbol, engine_perfmodel.c), or -1 for StarPU's own tasks and for
 * NORM, which is not an op of the plan. */
static int name_kind(const char *name)
{
    static const struct {
        const char *name;
        int kind;
    } names[] = {
        {"bsipipe_fwd", BSIPIPE_OP_F},        {"bsipipe_fwd_head", BSIPIPE_OP_F}, {"bsipipe_tp_seg", BSIPIPE_OP_F},
        {"bsipipe_bwd", BSIPIPE_OP_B},        {"bsipipe_wgrad", BSIPIPE_OP_W},    {"bsipipe_send", BSIPIPE_OP_SEND},
        {"bsipipe_mpi_send", BSIPIPE_OP_SEND}, {"bsipipe_tp_coll", BSIPIPE_OP_SEND}, {"bsipipe_recv", BSIPIPE_OP_RECV},
        {"bsipipe_mpi_recv", BSIPIPE_OP_RECV}, {"bsipipe_sync", BSIPIPE_OP_SYNC}, {"bsipipe_mpi_sync", BSIPIPE_OP_SYNC},
        {"bsipipe_step", BSIPIPE_OP_STEP},    {"bsipipe_tp_step", BSIPIPE_OP_STEP},
    };
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (strcmp(name, names[k].name) == 0)
            return names[k].kind;
    return -1;
}

/* Colour of a task state from its name: its kind's, in the down pipe's
 * palette (a name is shared by both pipes); 0 for StarPU's own tasks. */
static unsigned name_color(const char *name)
{
    int kind = name_kind(name);
    if (kind < 0)
        return 0;
    bsipipe_op_t op = {0};
    op.kind = (uint8_t)kind;
    op.pipe = BSIPIPE_PIPE_DOWN;
    return bsipipe_trace_op_color(&op);
}

/* ---- the trace directory and StarPU's FxT environment ---------------------------------- */

/* STARPU_CALIBRATE: a traced run records its codelets' times into their
 * performance models (unless the user set it), so that every Model: of its
 * tasks.rec exists for starpu_tasks_rec_complete and starpu_perfmodel_display;
 * STARPU_HISTORY_MAX_ERROR: the tiny codelets (STEP, SYNC) vary by more than
 * StarPU's 50 %, which would print a warning and flush their models. */
enum { N_VARS = 5 };
static const char *const fxt_vars[N_VARS] = {"STARPU_FXT_PREFIX", "STARPU_FXT_SUFFIX", "STARPU_FXT_TRACE",
                                             "STARPU_CALIBRATE", "STARPU_HISTORY_MAX_ERROR"};
static char *saved_env[N_VARS];
static int saved_set[N_VARS], env_saved;

static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return bsipipe_error_set(-ENAMETOOLONG, "trace directory name too long: '%s'", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (stat(path, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return bsipipe_error_set(-ENOTDIR, "cannot use trace directory '%s': '%s' is not a directory",
                                         dir, path);
        } else if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            int err = errno;
            return bsipipe_error_set(-err, "cannot create trace directory '%s': %s", dir, strerror(err));
        }
        *p = c;
        if (c == '\0')
            break;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        int err = errno;
        return bsipipe_error_set(-err, "cannot write into trace directory '%s': %s", dir, strerror(err));
    }
    return 0;
}

static int recording; /* between bsipipe_trace_begin and bsipipe_trace_end */

int engine_trace_recording(void)
{
    return recording;
}

int bsipipe_trace_begin(const char *dir)
{
    if (!dir || !*dir)
        return bsipipe_error_set(-EINVAL, "trace: no directory given");
    int rc = make_dirs(dir);
    if (rc < 0)
        return rc;
    if (!env_saved) {
        for (int i = 0; i < N_VARS; i++) {
            const char *v = getenv(fxt_vars[i]);
            saved_set[i] = v != NULL;
            free(saved_env[i]);
            saved_env[i] = v ? strdup(v) : NULL;
        }
        env_saved = 1;
    }
    setenv("STARPU_FXT_PREFIX", dir, 1);
    setenv("STARPU_FXT_SUFFIX", RAW_SUFFIX, 1);
    setenv("STARPU_FXT_TRACE", "1", 1);
    setenv("STARPU_CALIBRATE", "1", 0);
    setenv("STARPU_HISTORY_MAX_ERROR", "10000", 0);
    recording = 1;
    return 0;
}

static void restore_env(void)
{
    if (!env_saved)
        return;
    for (int i = 0; i < N_VARS; i++) {
        if (saved_set[i] && saved_env[i])
            setenv(fxt_vars[i], saved_env[i], 1);
        else
            unsetenv(fxt_vars[i]);
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
    env_saved = 0;
}

/* ---- starpu_fxt_tool ------------------------------------------------------------------- */

/* Newest DIR/prof_file_<id> (the id is StarPU's process id, 0 without MPI). */
static int find_raw(const char *dir, char *out, size_t len)
{
    DIR *d = opendir(dir);
    if (!d) {
        int err = errno;
        return bsipipe_error_set(-err, "trace: cannot read directory '%s': %s", dir, strerror(err));
    }
    struct dirent *de;
    time_t best = 0;
    int found = 0;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, RAW_SUFFIX "_", sizeof RAW_SUFFIX) != 0)
            continue;
        char path[4096];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path || stat(path, &st) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (!found || st.st_mtime >= best) {
            snprintf(out, len, "%s", path);
            best = st.st_mtime;
            found = 1;
        }
    }
    closedir(d);
    return found ? 0
                 : bsipipe_error_set(-ENOENT, "trace: no raw FxT trace (%s_*) in '%s': did the engine start and "
                                     "shut down StarPU after bsipipe_trace_begin?", RAW_SUFFIX, dir);
}

static int executable(const char *path)
{
    struct stat st;
    return path && *path && stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The tool's path, or "starpu_fxt_tool" to look up on PATH. */
static void find_tool(char *out, size_t len)
{
    const char *env = getenv("STARPU_FXT_TOOL");
    if (executable(env)) {
        snprintf(out, len, "%s", env);
        return;
    }
    const char *dirs[2] = {getenv("STARPU_BINDIR"), BSIPIPE_STARPU_BINDIR};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i] || !*dirs[i])
            continue;
        snprintf(out, len, "%s/starpu_fxt_tool", dirs[i]);
        if (executable(out))
            return;
    }
    snprintf(out, len, "starpu_fxt_tool");
}

/* Splits a line (newline stripped) at tabs into at most max fields. */
static int split_tabs(char *line, char **f, int max)
{
    int nf = 1;
    f[0] = line;
    for (char *p = line; *p && nf < max; p++)
        if (*p == '\t') {
            *p = '\0';
            f[nf++] = p + 1;
        }
    return nf;
}

/* One event line of paje.trace, for sorting by time (definitions: -inf). */
typedef struct paje_event {
    double key;
    size_t index;
    char *text;
} paje_event_t;

static int cmp_paje_event(const void *a, const void *b)
{
    const paje_event_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Rewrites paje.trace: events in time order, and the colour of every task
 * state from the task's name; StarPU's own states keep theirs. (The file as
 * StarPU writes it is valid Paje already: the names hold no blanks.) */
static int rewrite_paje(const char *dir)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/paje.trace", dir);
    snprintf(tmp, sizeof tmp, "%s/.paje.trace.%ld.tmp", dir, (long)getpid());
    FILE *in = fopen(path, "r");
    if (!in) {
        int err = errno;
        return bsipipe_error_set(-err, "trace: starpu_fxt_tool wrote no '%s': %s", path, strerror(err));
    }
    enum { MAX_FIELDS = 64 };
    char *line = NULL, *f[MAX_FIELDS], define[16] = "";
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    enum { MAX_EVENT_ID = 4096 };
    unsigned char timed[MAX_EVENT_ID] = {0}; /* event ids whose first field is a time */
    int last_def = -1;
    /* Pass 1: the timed event kinds and the id of entity-value definitions. */
    while (rc == 0 && (n = getline(&line, &cap, in)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        char name[64], id[16], field[64];
        if (line[0] == '%') {
            if (sscanf(line, "%%EventDef %63s %15s", name, id) == 2) {
                if (strcmp(name, "PajeDefineEntityValue") == 0)
                    snprintf(define, sizeof define, "%s", id);
                last_def = atoi(id);
            } else if (last_def >= 0 && sscanf(line, "%% %63s", field) == 1) {
                if (strcmp(field, "Time") == 0 && last_def < MAX_EVENT_ID)
                    timed[last_def] = 1;
                last_def = -1; /* only the first field tells */
            }
            continue;
        }
    }
    FILE *out = rc == 0 ? fopen(tmp, "w") : NULL;
    if (rc == 0 && !out)
        rc = -errno;
    /* Pass 2: write it again, the events in time order. StarPU 1.3's fxt
     * tool writes some events out of order (the states and variables of
     * several workers, data unregistrations), which Paje readers refuse
     * ("trace is not time-ordered"): the definitions, which carry no time,
     * come first in file order, then the timed events sorted by time,
     * stably. */
    paje_event_t *ev = NULL;
    size_t nev = 0, evcap = 0;
    char *buf = NULL;
    size_t buflen = 0;
    if (rc == 0)
        rewind(in);
    while (rc == 0 && (n = getline(&line, &cap, in)) > 0) {
        if (line[0] == '%') {
            fputs(line, out);
            continue;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        char *end;
        long id = strtol(line, &end, 10);
        double key = id >= 0 && id < MAX_EVENT_ID && timed[id] ? strtod(end, NULL) : -INFINITY;
        int nf = split_tabs(line, f, MAX_FIELDS);
        /* An entity value (id, alias, type, name, "r g b") of a task: its colour. */
        char colour[64] = "";
        if (nf == 5 && define[0] && strcmp(f[0], define) == 0 && strcmp(f[2], "WS") == 0) {
            unsigned c = name_color(f[3]);
            if (c)
                snprintf(colour, sizeof colour, "\"%.6f %.6f %.6f\"", (c >> 16) / 255.0, ((c >> 8) & 0xff) / 255.0,
                         (c & 0xff) / 255.0);
        }
        FILE *ls = open_memstream(&buf, &buflen);
        if (!ls) { rc = -ENOMEM; break; }
        for (int i = 0; i < nf; i++) {
            const char *v = i == 4 && colour[0] ? colour : f[i];
            if (i)
                fputc('\t', ls);
            fputs(v, ls);
        }
        fputc('\n', ls);
        if (fclose(ls) != 0) { free(buf); buf = NULL; rc = -ENOMEM; break; }
        if (nev == evcap) {
            size_t nc = evcap ? 2 * evcap : 4096;
            paje_event_t *ne = realloc(ev, nc * sizeof *ne);
            if (!ne) { free(buf); buf = NULL; rc = -ENOMEM; break; }
            ev = ne;
            evcap = nc;
        }
        ev[nev] = (paje_event_t){key, nev, buf};
        nev++;
        buf = NULL;
    }
    if (nev)
        qsort(ev, nev, sizeof *ev, cmp_paje_event);
    for (size_t i = 0; i < nev; i++) {
        if (rc == 0)
            fputs(ev[i].text, out);
        free(ev[i].text);
    }
    free(ev);
    free(line);
    int rerr = ferror(in);
    fclose(in);
    if (rc < 0) {
        if (out)
            fclose(out);
        unlink(tmp);
        return bsipipe_error_set(rc, "trace: cannot rewrite '%s': %s", path, strerror(-rc));
    }
    if (fclose(out) != 0 || rerr || rename(tmp, path) != 0) {
        int err = errno ? errno : EIO;
        unlink(tmp);
        return bsipipe_error_set(-err, "trace: cannot rewrite '%s': %s", path, strerror(err));
    }
    return 0;
}

/* ---- dag.dot: the engine's ops only --------------------------------------------------- */

/* StarPU's dag.dot holds every task: two thirds of them are the runtime's
 * own (data acquire/release callbacks, sync tasks) plus a node per tag,
 * which makes the graph slow to lay out and hard to read. filter_dag keeps
 * the engine's ops (a label that starts with an op kind, see name_color)
 * and turns every path through a dropped node into a direct edge, so the
 * dependencies between ops stay; BSIPIPE_TRACE_DAG=full keeps StarPU's
 * graph as it wrote it. */
typedef struct dag_node {
    char *id, *label; /* label NULL: not an op (dropped) */
    unsigned colour;
    int *succ, n_succ, cap_succ;
    int stamp;
} dag_node_t;

/* DIR/ops.tsv (bsipipe_engine_trace_write): the op of each job, sorted by
 * job id; empty when the file is missing (the ops keep their codelets'
 * names). */
typedef struct ops_map {
    struct op_job {
        unsigned long job;
        unsigned colour;
        char *label;
    } *v;
    size_t n;
} ops_map_t;

static int cmp_op_job(const void *a, const void *b)
{
    unsigned long x = ((const struct op_job *)a)->job, y = ((const struct op_job *)b)->job;
    return x < y ? -1 : x > y;
}

static void ops_map_free(ops_map_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->v[i].label);
    free(m->v);
    m->v = NULL;
    m->n = 0;
}

static int ops_map_read(const char *dir, ops_map_t *m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/ops.tsv", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0, vcap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        char *fl[8];
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || split_tabs(line, fl, 8) != 7)
            continue;
        if (m->n == vcap) {
            size_t nc = vcap ? 2 * vcap : 4096;
            struct op_job *nv = realloc(m->v, nc * sizeof *nv);
            if (!nv) { rc = -ENOMEM; break; }
            m->v = nv;
            vcap = nc;
        }
        struct op_job *x = &m->v[m->n];
        x->job = strtoul(fl[0], NULL, 10);
        x->colour = (unsigned)strtoul(fl[6] + (fl[6][0] == '#'), NULL, 16);
        if (!(x->label = strdup(fl[5]))) { rc = -ENOMEM; break; }
        m->n++;
    }
    free(line);
    fclose(f);
    if (rc < 0)
        ops_map_free(m);
    else if (m->n)
        qsort(m->v, m->n, sizeof *m->v, cmp_op_job);
    return rc;
}

/* The op of a dag.dot node id ("task_<job>"), or NULL. */
static const struct op_job *ops_map_find(const ops_map_t *m, const char *id)
{
    if (!m->n || strncmp(id, "task_", 5) != 0 || !id[5] || strspn(id + 5, "0123456789") != strlen(id + 5))
        return NULL;
    struct op_job key = {strtoul(id + 5, NULL, 10), 0, NULL};
    return bsearch(&key, m->v, m->n, sizeof *m->v, cmp_op_job);
}

typedef struct dag {
    dag_node_t *v;
    int n, cap;
    int *slot; /* open-addressing hash of ids into v: -1 empty */
    size_t n_slot;
} dag_t;

static size_t dag_hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int dag_grow_hash(dag_t *g)
{
    size_t ns = g->n_slot ? 2 * g->n_slot : 4096;
    int *sl = malloc(ns * sizeof *sl);
    if (!sl)
        return -ENOMEM;
    for (size_t i = 0; i < ns; i++)
        sl[i] = -1;
    for (int i = 0; i < g->n; i++) {
        size_t h = dag_hash(g->v[i].id) & (ns - 1);
        while (sl[h] >= 0)
            h = (h + 1) & (ns - 1);
        sl[h] = i;
    }
    free(g->slot);
    g->slot = sl;
    g->n_slot = ns;
    return 0;
}

/* The node of `id` (added if new), or -ENOMEM. */
static int dag_node(dag_t *g, const char *id, size_t len)
{
    if ((size_t)g->n * 2 >= g->n_slot && dag_grow_hash(g) < 0)
        return -ENOMEM;
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(len < sizeof key ? len : sizeof key - 1), id);
    size_t h = dag_hash(key) & (g->n_slot - 1);
    for (; g->slot[h] >= 0; h = (h + 1) & (g->n_slot - 1))
        if (strcmp(g->v[g->slot[h]].id, key) == 0)
            return g->slot[h];
    if (g->n == g->cap) {
        int nc = g->cap ? 2 * g->cap : 1024;
        dag_node_t *nv = realloc(g->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        g->v = nv;
        g->cap = nc;
    }
    dag_node_t *x = &g->v[g->n];
    memset(x, 0, sizeof *x);
    if (!(x->id = strdup(key)))
        return -ENOMEM;
    g->slot[h] = g->n;
    return g->n++;
}

static int dag_edge(dag_t *g, int a, int b)
{
    dag_node_t *x = &g->v[a];
    if (x->n_succ == x->cap_succ) {
        int nc = x->cap_succ ? 2 * x->cap_succ : 4;
        int *ns = realloc(x->succ, (size_t)nc * sizeof *ns);
        if (!ns)
            return -ENOMEM;
        x->succ = ns;
        x->cap_succ = nc;
    }
    x->succ[x->n_succ++] = b;
    return 0;
}

static void dag_free(dag_t *g)
{
    for (int i = 0; i < g->n; i++) {
        free(g->v[i].id);
        free(g->v[i].label);
        free(g->v[i].succ);
    }
    free(g->v);
    free(g->slot);
}

/* One line of StarPU's dag.dot: `"a"->"b"->"c" [attrs]` (edges between
 * consecutive ids) or `"a" [ ... label="...", ...]` (a node); anything
 * else (the graph's header, braces) is skipped. */
static int dag_parse_line(dag_t *g, const char *line, const ops_map_t *ops)
{
    const char *p = line + strspn(line, " \t");
    int prev = -1, n_ids = 0;
    while (*p == '"') {
        const char *q = strchr(p + 1, '"');
        if (!q)
            return 0;
        int id = dag_node(g, p + 1, (size_t)(q - p - 1));
        if (id < 0)
            return id;
        if (prev >= 0 && dag_edge(g, prev, id) < 0)
            return -ENOMEM;
        prev = id;
        n_ids++;
        p = q + 1;
        if (strncmp(p, "->", 2) != 0)
            break;
        p += 2;
    }
    const char *lab = n_ids == 1 ? strstr(p, "label=\"") : NULL;
    if (lab) {
        lab += 7;
        const char *end = strchr(lab, '"');
        dag_node_t *x = &g->v[prev];
        if (end && !x->label) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(end - lab < 255 ? end - lab : 255), lab);
            const struct op_job *op = ops_map_find(ops, x->id);
            if (op) { /* the op it ran, coloured like the SVGs (pipes apart) */
                if (!(x->label = strdup(op->label)))
                    return -ENOMEM;
                x->colour = op->colour;
            } else if (!ops->n && name_kind(name) >= 0) { /* no ops.tsv: its codelet's name */
                if (!(x->label = strdup(name)))
                    return -ENOMEM;
                x->colour = name_color(name);
            }
        }
    }
    return 0;
}

/* The ops reachable from op u through dropped nodes only (u's stamp marks
 * the nodes seen), as op numbers (op_of) appended to *e. */
typedef struct dag_edges {
    int *from, *to;
    long n, cap;
} dag_edges_t;

static int dag_collect_edges(dag_t *g, int u, const int *op_of, int *stack, dag_edges_t *e)
{
    int top = 0;
    g->v[u].stamp = u + 1;
    for (int i = 0; i < g->v[u].n_succ; i++)
        stack[top++] = g->v[u].succ[i];
    while (top > 0) {
        int w = stack[--top];
        dag_node_t *x = &g->v[w];
        if (x->stamp == u + 1)
            continue;
        x->stamp = u + 1;
        if (x->label) {
            if (e->n == e->cap) {
                long nc = e->cap ? 2 * e->cap : 4096;
                int *nf = realloc(e->from, (size_t)nc * sizeof *nf);
                if (nf)
                    e->from = nf;
                int *nt = nf ? realloc(e->to, (size_t)nc * sizeof *nt) : NULL;
                if (!nt)
                    return -ENOMEM;
                e->to = nt;
                e->cap = nc;
            }
            e->from[e->n] = op_of[u];
            e->to[e->n++] = op_of[w];
            continue;
        }
        for (int i = 0; i < x->n_succ; i++)
            if (g->v[x->succ[i]].stamp != u + 1)
                stack[top++] = x->succ[i]; /* at most once per edge into a node expanded once */
    }
    return 0;
}

/* Transitive reduction: keep[i] = 0 for an edge a -> b when b is also
 * reachable from another successor of a. The contracted graph repeats what
 * StarPU's sync and acquire tasks imply (every F and B of an iteration ->
 * its STEP -> every op of the next): half of the edges of a 3-iteration run,
 * and those long edges are what makes Graphviz slow (125 s against 1.2 s
 * without them). Reachability is one bitset per op, so graphs of more than
 * DAG_REDUCE_MAX ops keep every edge. Edges are sorted by source. */
enum { DAG_REDUCE_MAX = 16384 };

static int dag_reduce(int n_ops, const dag_edges_t *e, const long *first, unsigned char *keep)
{
    for (long i = 0; i < e->n; i++)
        keep[i] = 1;
    if (n_ops > DAG_REDUCE_MAX || n_ops == 0)
        return 0;
    size_t words = ((size_t)n_ops + 63) / 64;
    uint64_t *reach = calloc((size_t)n_ops * words, sizeof *reach);
    int *indeg = calloc((size_t)n_ops, sizeof *indeg), *order = malloc((size_t)n_ops * sizeof *order);
    if (!reach || !indeg || !order) {
        free(reach), free(indeg), free(order);
        return -ENOMEM;
    }
    for (long i = 0; i < e->n; i++)
        indeg[e->to[i]]++;
    int head = 0, tail = 0;
    for (int v = 0; v < n_ops; v++)
        if (!indeg[v])
            order[tail++] = v;
    while (head < tail) {
        int v = order[head++];
        for (long i = first[v]; i < first[v + 1]; i++)
            if (--indeg[e->to[i]] == 0)
                order[tail++] = e->to[i];
    }
    if (tail == n_ops) { /* acyclic, as a task graph is: else keep every edge */
        for (int k = n_ops - 1; k >= 0; k--) {
            int v = order[k];
            uint64_t *rv = reach + (size_t)v * words;
            for (long i = first[v]; i < first[v + 1]; i++) {
                int w = e->to[i];
                const uint64_t *rw = reach + (size_t)w * words;
                for (size_t j = 0; j < words; j++)
                    rv[j] |= rw[j];
                rv[w / 64] |= (uint64_t)1 << (w % 64);
            }
        }
        for (int v = 0; v < n_ops; v++)
            for (long i = first[v]; i < first[v + 1]; i++) {
                int b = e->to[i];
                for (long j = first[v]; j < first[v + 1] && keep[i]; j++) {
                    int c = e->to[j];
                    if (c != b && (reach[(size_t)c * words + (size_t)b / 64] >> (b % 64) & 1))
                        keep[i] = 0;
                }
            }
    }
    free(reach);
    free(indeg);
    free(order);
    return 0;
}

static int filter_dag(const char *dir)
{
    const char *mode = getenv("BSIPIPE_TRACE_DAG");
    if (mode && strcmp(mode, "full") == 0)
        return 0;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/dag.dot", dir);
    snprintf(tmp, sizeof tmp, "%s/.dag.dot.%ld.tmp", dir, (long)getpid());
    FILE *in = fopen(path, "r");
    if (!in)
        return 0; /* the tool did not write one: nothing to filter */
    dag_t g = {0};
    ops_map_t ops = {0};
    char *line = NULL;
    size_t cap = 0;
    int rc = ops_map_read(dir, &ops);
    while (rc == 0 && getline(&line, &cap, in) > 0)
        rc = dag_parse_line(&g, line, &ops);
    ops_map_free(&ops);
    free(line);
    int rerr = ferror(in);
    fclose(in);
    long n_edges = 0;
    int n_ops = 0;
    for (int i = 0; i < g.n; i++) {
        n_edges += g.v[i].n_succ;
        n_ops += g.v[i].label != NULL;
    }
    int *stack = rc == 0 ? malloc((size_t)(n_edges + 1) * sizeof *stack) : NULL;
    int *op_of = rc == 0 ? malloc((size_t)(g.n + 1) * sizeof *op_of) : NULL;
    int *node_of = rc == 0 ? malloc((size_t)(n_ops + 1) * sizeof *node_of) : NULL;
    long *first = rc == 0 ? calloc((size_t)n_ops + 2, sizeof *first) : NULL;
    dag_edges_t e = {0};
    unsigned char *keep = NULL;
    if (rc == 0 && (!stack || !op_of || !node_of || !first))
        rc = -ENOMEM;
    if (rc == 0) {
        int k = 0;
        for (int i = 0; i < g.n; i++) {
            op_of[i] = g.v[i].label ? k : -1;
            if (g.v[i].label)
                node_of[k++] = i;
        }
        for (int k2 = 0; k2 < n_ops && rc == 0; k2++) { /* sources in op order: edges sorted by source */
            first[k2] = e.n;
            rc = dag_collect_edges(&g, node_of[k2], op_of, stack, &e);
        }
        first[n_ops] = e.n;
        keep = rc == 0 ? malloc((size_t)e.n + 1) : NULL;
        if (rc == 0 && !keep)
            rc = -ENOMEM;
        if (rc == 0)
            rc = dag_reduce(n_ops, &e, first, keep);
    }
    FILE *out = rc == 0 && !rerr ? fopen(tmp, "w") : NULL;
    if (rc == 0 && !rerr && !out)
        rc = -errno;
    if (out) {
        fputs("digraph G {\n\t/* the engine's ops only (BSIPIPE_TRACE_DAG=full keeps StarPU's whole graph); "
              "a dependency through StarPU's own tasks or tags is drawn directly, and one implied by "
              "others is left out */\n"
              "\trankdir=LR;\n\tnode [shape=box, style=filled, fontname=\"sans-serif\"];\n", out);
        for (int k = 0; k < n_ops; k++) {
            const dag_node_t *x = &g.v[node_of[k]];
            unsigned c = x->colour;
            int dark = ((c >> 16) * 299 + ((c >> 8) & 0xff) * 587 + (c & 0xff) * 114) / 1000 < 128;
            fprintf(out, "\t\"%s\" [label=\"%s\", fillcolor=\"#%06x\"%s]\n", x->id, x->label, c,
                    dark ? ", fontcolor=white" : "");
        }
        for (long i = 0; i < e.n; i++)
            if (keep[i])
                fprintf(out, "\t\"%s\" -> \"%s\"\n", g.v[node_of[e.from[i]]].id, g.v[node_of[e.to[i]]].id);
        fputs("}\n", out);
    }
    free(stack);
    free(op_of);
    free(node_of);
    free(first);
    free(e.from);
    free(e.to);
    free(keep);
    dag_free(&g);
    if (rc < 0 || rerr) {
        if (out)
            fclose(out);
        unlink(tmp);
        int err = rc < 0 ? -rc : EIO;
        return bsipipe_error_set(-err, "trace: cannot filter '%s': %s", path, strerror(err));
    }
    if (fclose(out) != 0 || rename(tmp, path) != 0) {
        int err = errno ? errno : EIO;
        unlink(tmp);
        return bsipipe_error_set(-err, "trace: cannot rewrite '%s': %s", path, strerror(err));
    }
    return 0;
}

int bsipipe_trace_end(const char *dir)
{
    restore_env();
    recording = 0;
    if (!dir || !*dir)
        return bsipipe_error_set(-EINVAL, "trace: no directory given");
#ifndef STARPU_USE_FXT
    return bsipipe_error_set(-ENOTSUP, "trace: StarPU was built without FxT, so there is no paje.trace; "
                             "rebuild it with --with-fxt (scripts/setup.sh does)");
#else
    char raw[4096], tool[4096], log[4200];
    int rc = find_raw(dir, raw, sizeof raw);
    if (rc < 0)
        return rc;
    find_tool(tool, sizeof tool);
    snprintf(log, sizeof log, "%s/starpu_fxt_tool.log", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        return bsipipe_error_set(-err, "trace: cannot start starpu_fxt_tool: %s", strerror(err));
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        char *argv[] = {tool, "-i", raw, "-d", (char *)dir, NULL};
        if (strchr(tool, '/'))
            execv(tool, argv);
        else
            execvp(tool, argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            int err = errno;
            return bsipipe_error_set(-err, "trace: waiting for starpu_fxt_tool: %s", strerror(err));
        }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return bsipipe_error_set(-ENOENT, "trace: starpu_fxt_tool not found (set STARPU_FXT_TOOL or "
                                 "STARPU_BINDIR); convert by hand: starpu_fxt_tool -i %s -d %s", raw, dir);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return bsipipe_error_set(-EIO, "trace: %s -i %s -d %s failed (%s %d); see %s", tool, raw, dir,
                                 WIFEXITED(status) ? "exit status" : "signal",
                                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), log);
    rc = rewrite_paje(dir);
    return rc < 0 ? rc : filter_dag(dir);
#endif
}
