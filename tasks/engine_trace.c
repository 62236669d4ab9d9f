/* engine_trace.c: trace outputs of a run (docs/tracing.md).
 *
 * Two sources:
 *  - StarPU's FxT tracing (StarPU built --with-fxt): bsipipe_trace_begin
 *    points it at the trace directory before starpu_init, starpu_shutdown
 *    writes the raw file, bsipipe_trace_end runs starpu_fxt_tool on it
 *    (paje.trace, dag.dot, tasks.rec, trace.rec ...), makes paje.trace
 *    valid for Paje readers and recolours its task states like the
 *    planner's SVG, and limits dag.dot to the engine's ops;
 *  - StarPU's profiling information, which the engine keeps per op for the
 *    last iteration (bsipipe_engine_records): bsipipe_engine_trace_write
 *    turns it into Chrome/Perfetto trace events (with SEND -> RECV flow
 *    arrows) and into the planner's SVG timeline with measured times, next
 *    to the planned one, both inline in a zoomable index.html.
 */
#include "tasks/engine_internal.h"
#include "graph/bsipipe_draw.h"
#include "graph/bsipipe_error.h"
#include "graph/bsipipe_sim.h"

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

/* Colour of a task from its name (bsipipe_op_format's labels: "F down mb3 s1
 * c5", "SEND act(up mb2 s0 c0) to dev2", "SYNC c7 with dev3", "STEP");
 * 0 for StarPU's own tasks. */
static unsigned name_color(const char *name)
{
    static const char *const kinds[] = {"F", "B", "W", "SEND", "RECV", "SYNC", "STEP"};
    size_t len = strcspn(name, " ");
    for (int k = 0; k < (int)(sizeof kinds / sizeof *kinds); k++)
        if (strlen(kinds[k]) == len && strncmp(name, kinds[k], len) == 0) {
            bsipipe_op_t op = {0};
            op.kind = (uint8_t)k;
            op.pipe = strstr(name, " up ") || strstr(name, "(up ") ? BSIPIPE_PIPE_UP : BSIPIPE_PIPE_DOWN;
            return bsipipe_trace_op_color(&op);
        }
    return 0;
}

/* ---- the trace directory and StarPU's FxT environment ---------------------------------- */

static const char *const fxt_vars[3] = {"STARPU_FXT_PREFIX", "STARPU_FXT_SUFFIX", "STARPU_FXT_TRACE"};
static char *saved_env[3];
static int saved_set[3], env_saved;

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

int bsipipe_trace_begin(const char *dir)
{
    if (!dir || !*dir)
        return bsipipe_error_set(-EINVAL, "trace: no directory given");
    int rc = make_dirs(dir);
    if (rc < 0)
        return rc;
    if (!env_saved) {
        for (int i = 0; i < 3; i++) {
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
    return 0;
}

static void restore_env(void)
{
    if (!env_saved)
        return;
    for (int i = 0; i < 3; i++) {
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

/* The task names of paje.trace: StarPU 1.3 defines one entity value of type
 * "WS" per task name (id, alias, WS, name, colour; tab-separated) and then
 * writes those names bare in its events. Ours ("F down mb0 s0 c0") hold
 * spaces, which Paje readers (pj_dump, ViTE, starpu_paje_state_stats) take
 * for separators; StarPU's own bare blanks are separators too, so only
 * these names are quoted. */
typedef struct paje_names {
    char **v;
    size_t n, cap;
} paje_names_t;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
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

/* A field to quote: one of the names, or a name with StarPU's "_<context>"
 * suffix (the aliases of per-context values). */
static int paje_is_name(const paje_names_t *names, const char *v)
{
    if (!strchr(v, ' ') || strchr(v, '"'))
        return 0;
    if (bsearch(&v, names->v, names->n, sizeof *names->v, cmp_str))
        return 1;
    const char *u = strrchr(v, '_');
    if (!u || !u[1] || strspn(u + 1, "0123456789") != strlen(u + 1))
        return 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)(u - v), v);
    const char *k = buf;
    return bsearch(&k, names->v, names->n, sizeof *names->v, cmp_str) != NULL;
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

/* Rewrites paje.trace: every task name quoted (above), events in time
 * order, and the colour of every task state from the task's name; StarPU's
 * own states keep theirs. */
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
    paje_names_t names = {0};
    int rc = 0;
    enum { MAX_EVENT_ID = 4096 };
    unsigned char timed[MAX_EVENT_ID] = {0}; /* event ids whose first field is a time */
    int last_def = -1;
    /* Pass 1: the task names (WS entity values) and the timed event kinds. */
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
        if (split_tabs(line, f, MAX_FIELDS) == 5 && define[0] && strcmp(f[0], define) == 0 &&
            strcmp(f[2], "WS") == 0 && strchr(f[3], ' ')) {
            if (names.n == names.cap) {
                size_t nc = names.cap ? 2 * names.cap : 256;
                char **nv = realloc(names.v, nc * sizeof *nv);
                if (!nv) { rc = -ENOMEM; break; }
                names.v = nv;
                names.cap = nc;
            }
            if (!(names.v[names.n] = strdup(f[3]))) { rc = -ENOMEM; break; }
            names.n++;
        }
    }
    if (names.n)
        qsort(names.v, names.n, sizeof *names.v, cmp_str);
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
            fprintf(ls, paje_is_name(&names, v) ? "\"%s\"" : "%s", v);
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
    for (size_t i = 0; i < names.n; i++)
        free(names.v[i]);
    free(names.v);
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
    int *succ, n_succ, cap_succ;
    int stamp;
} dag_node_t;

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
static int dag_parse_line(dag_t *g, const char *line)
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
            if (name_color(name) && !(x->label = strdup(name)))
                return -ENOMEM;
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
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, in) > 0)
        rc = dag_parse_line(&g, line);
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
            unsigned c = name_color(x->label);
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

/* ---- trace.json and the SVG timelines from StarPU's profiling ------------------------- */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static FILE *open_out(const char *dir, const char *name, char *path, size_t len, int *rc)
{
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        int err = errno;
        *rc = bsipipe_error_set(-err, "trace: cannot write '%s': %s", path, strerror(err));
    }
    return f;
}

static int close_out(FILE *f, const char *path, int rc)
{
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return rc < 0 ? rc : bsipipe_error_set(-EIO, "trace: write error on '%s'", path);
    return rc;
}

/* Measured times of the last iteration shaped as a simulation result
 * (seconds from the iteration's first task start). */
typedef struct measured {
    bsipipe_sim_result_t r;
    double origin_us;
} measured_t;

static void measured_free(measured_t *m)
{
    for (int d = 0; d < m->r.n_devices; d++) {
        if (m->r.op_start) free(m->r.op_start[d]);
        if (m->r.op_end) free(m->r.op_end[d]);
    }
    free(m->r.op_start);
    free(m->r.op_end);
    free(m->r.device);
}

static int measured_build(bsipipe_engine_t *e, measured_t *m)
{
    memset(m, 0, sizeof *m);
    const bsipipe_schedule_t *s = e->sched;
    int W = bsipipe_schedule_n_devices(s);
    m->r.n_devices = W;
    m->r.device = calloc((size_t)W, sizeof *m->r.device);
    m->r.op_start = calloc((size_t)W, sizeof *m->r.op_start);
    m->r.op_end = calloc((size_t)W, sizeof *m->r.op_end);
    if (!m->r.device || !m->r.op_start || !m->r.op_end) {
        measured_free(m);
        return bsipipe_error_set(-ENOMEM, "trace: out of memory");
    }
    double first = -1, last_compute = 0, last = 0, busy = 0;
    int any = 0;
    for (int d = 0; d < W; d++) {
        const bsipipe_engine_op_record_t *rec;
        int n;
        bsipipe_engine_records(e, d, &rec, &n);
        for (int i = 0; i < n; i++)
            if (rec[i].end_us > 0 && (first < 0 || rec[i].start_us < first))
                first = rec[i].start_us;
        any |= n > 0;
    }
    if (!any || first < 0) {
        measured_free(m);
        return bsipipe_error_set(-EINVAL, "trace: no iteration has run yet: nothing to write");
    }
    m->origin_us = first;
    for (int d = 0; d < W; d++) {
        const bsipipe_engine_op_record_t *rec;
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        bsipipe_engine_records(e, d, &rec, &n);
        m->r.op_start[d] = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
        m->r.op_end[d] = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
        if (!m->r.op_start[d] || !m->r.op_end[d]) {
            measured_free(m);
            return bsipipe_error_set(-ENOMEM, "trace: out of memory");
        }
        bsipipe_sim_device_t *dev = &m->r.device[d];
        for (int i = 0; i < n; i++) {
            double a = rec[i].end_us > 0 ? (rec[i].start_us - first) * 1e-6 : 0;
            double b = rec[i].end_us > 0 ? (rec[i].end_us - first) * 1e-6 : 0;
            m->r.op_start[d][i] = a;
            m->r.op_end[d][i] = b;
            if (b > last) last = b;
            if (ops[i].kind <= BSIPIPE_OP_W) {
                dev->busy += b - a;
                if (b > dev->compute_end) dev->compute_end = b;
            } else if (ops[i].kind == BSIPIPE_OP_SEND || ops[i].kind == BSIPIPE_OP_SYNC) {
                dev->comm += b - a;
            }
        }
        busy += dev->busy;
        if (dev->compute_end > last_compute) last_compute = dev->compute_end;
    }
    m->r.makespan = last_compute;
    m->r.iteration_time = last;
    m->r.bubble_ratio = last_compute > 0 ? 1.0 - busy / (W * last_compute) : 0;
    for (int d = 0; d < W; d++)
        m->r.device[d].idle = last_compute - m->r.device[d].busy;
    return 0;
}

static void config_line(const bsipipe_engine_t *e, char *buf, size_t len)
{
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(e->sched);
    snprintf(buf, len, "%s w=%d p=%d k=%d m=%d, policy %s", bsipipe_schedule_kind_name(pc->schedule), pc->w,
             pc->p, pc->k, pc->m, e->o.policy ? e->o.policy : "bsipipe");
}

static int write_json(bsipipe_engine_t *e, const char *dir, const measured_t *m, double planned_bubble)
{
    char path[4200];
    int orc = 0;
    FILE *f = open_out(dir, "trace.json", path, sizeof path, &orc);
    if (!f)
        return orc;
    const bsipipe_schedule_t *s = e->sched;
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    int W = bsipipe_schedule_n_devices(s);
    char cfg[256];
    config_line(e, cfg, sizeof cfg);
    fputs("{\"traceEvents\": [\n", f);
    fputs("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {\"name\": ", f);
    char pname[300];
    snprintf(pname, sizeof pname, "bsipipe %s (last iteration)", cfg);
    json_string(f, pname);
    fputs("}}", f);
    for (int d = 0; d < W; d++)
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": "
                   "\"dev %d (StarPU worker %d)\"}},\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, "
                   "\"tid\": %d, \"args\": {\"sort_index\": %d}}", d, d, e->workerid[d], d, d);
    static const char *const tensors[] = {"none", "act", "grad"};
    for (int d = 0; d < W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        const bsipipe_engine_op_record_t *rec;
        bsipipe_engine_records(e, d, &rec, &n);
        for (int i = 0; i < n; i++) {
            const bsipipe_op_t *op = &ops[i];
            int tid = d; /* the device whose worker ran it (placement is kept: normally d) */
            for (int x = 0; x < W; x++)
                if (e->workerid[x] == rec[i].worker)
                    tid = x;
            double ts = m->r.op_start[d][i] * 1e6, dur = (m->r.op_end[d][i] - m->r.op_start[d][i]) * 1e6;
            fputs(",\n{\"name\": ", f);
            json_string(f, e->args[d][i].name);
            fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                       "\"args\": {\"pipe\": \"%s\", \"mb\": %d, \"sub\": %d, \"chunk\": %d, \"peer\": %d, "
                       "\"channel\": %d, \"tensor\": \"%s\", \"device\": %d, \"index\": %d, \"worker\": %d, "
                       "\"seq\": %ld, \"eager\": %d}}",
                    bsipipe_op_kind_name((bsipipe_op_kind_t)op->kind), tid, ts, dur,
                    bsipipe_pipe_name((bsipipe_pipe_t)op->pipe), op->mb, op->sub, op->chunk, op->peer, op->channel,
                    tensors[op->tensor < 3 ? op->tensor : 0], d, i, rec[i].worker, rec[i].seq,
                    e->eager && op->kind == BSIPIPE_OP_SEND); /* ran inside its producer, no task */
        }
    }
    /* Flow arrows (Perfetto, chrome://tracing): each SEND to its RECV, a
     * flow start ("s") inside the SEND's slice and its end ("f", bound to
     * the enclosing slice) inside the RECV's, with the channel as the id. */
    int nch = bsipipe_schedule_n_channels(s);
    double *recv_ts = nch > 0 ? malloc((size_t)nch * sizeof *recv_ts) : NULL;
    int *recv_tid = nch > 0 ? malloc((size_t)nch * sizeof *recv_tid) : NULL;
    if (nch > 0 && (!recv_ts || !recv_tid)) {
        free(recv_ts);
        free(recv_tid);
        fclose(f);
        return bsipipe_error_set(-ENOMEM, "trace: out of memory");
    }
    for (int c = 0; c < nch; c++)
        recv_tid[c] = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < W; d++) {
            int n;
            const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
            const bsipipe_engine_op_record_t *rec;
            bsipipe_engine_records(e, d, &rec, &n);
            for (int i = 0; i < n; i++) {
                const bsipipe_op_t *op = &ops[i];
                int c = op->channel;
                if (c < 0 || c >= nch || op->kind != (pass ? BSIPIPE_OP_SEND : BSIPIPE_OP_RECV))
                    continue;
                int tid = d;
                for (int x = 0; x < W; x++)
                    if (e->workerid[x] == rec[i].worker)
                        tid = x;
                double mid = (m->r.op_start[d][i] + m->r.op_end[d][i]) * 0.5e6;
                if (!pass) {
                    recv_ts[c] = mid;
                    recv_tid[c] = tid;
                } else if (recv_tid[c] >= 0) {
                    const char *t = tensors[op->tensor < 3 ? op->tensor : 0];
                    fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"transfer\", \"ph\": \"s\", \"id\": %d, \"pid\": 0, "
                               "\"tid\": %d, \"ts\": %.3f},\n{\"name\": \"%s\", \"cat\": \"transfer\", \"ph\": \"f\", "
                               "\"bp\": \"e\", \"id\": %d, \"pid\": 0, \"tid\": %d, \"ts\": %.3f}",
                            t, c, tid, mid, t, c, recv_tid[c], recv_ts[c]);
                }
            }
        }
    free(recv_ts);
    free(recv_tid);
    fputs("\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"format\": \"bsipipe-trace/1\", \"config\": ", f);
    json_string(f, cfg);
    fprintf(f, ", \"schedule\": \"%s\", \"w\": %d, \"p\": %d, \"k\": %d, \"m\": %d, \"iteration\": \"last\", "
               "\"origin_us\": %.3f, \"makespan_us\": %.3f, \"iteration_us\": %.3f, \"measured_bubble_ratio\": %.6f, "
               "\"planned_bubble_ratio\": %.6f, \"emulated\": %s}\n}\n",
            bsipipe_schedule_kind_name(pc->schedule), pc->w, pc->p, pc->k, pc->m, m->origin_us, m->r.makespan * 1e6,
            m->r.iteration_time * 1e6, m->r.bubble_ratio, planned_bubble, e->o.emulate_flops > 0 ? "true" : "false");
    return close_out(f, path, 0);
}

/* Draws an SVG timeline into DIR/name and into *text (for index.html;
 * the caller frees it). */
static int write_svg(const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r, const char *dir, const char *name,
                     const char *title, int seconds, char **text)
{
    size_t len = 0;
    *text = NULL;
    FILE *m = open_memstream(text, &len);
    if (!m)
        return bsipipe_error_set(-ENOMEM, "trace: out of memory");
    int rc = bsipipe_draw_svg_time(m, s, r, title, seconds);
    if (fclose(m) != 0 && rc == 0)
        rc = bsipipe_error_set(-ENOMEM, "trace: out of memory");
    if (rc < 0)
        return rc;
    char path[4200];
    int orc = 0;
    FILE *f = open_out(dir, name, path, sizeof path, &orc);
    if (!f)
        return orc;
    fputs(*text, f);
    return close_out(f, path, 0);
}

/* index.html: both timelines inline (so their boxes' titles show on hover),
 * each in a scrolling view with zoom buttons, zoom at the pointer with the
 * wheel and pan by dragging: plain inline JavaScript, nothing downloaded. */
static const char index_script[] =
    "<script>\n"
    "document.querySelectorAll('.timeline').forEach(function (box) {\n"
    "  var view = box.querySelector('.view'), svg = view.querySelector('svg'), shown = box.querySelector('.zoom');\n"
    "  var z = 1, drag = null;\n"
    "  function zoom(f, cx, cy) {\n"
    "    var r = view.getBoundingClientRect();\n"
    "    if (cx === undefined) { cx = r.width / 2; cy = r.height / 2; }\n"
    "    var x = (view.scrollLeft + cx) / z, y = (view.scrollTop + cy) / z;\n"
    "    z = f === 0 ? 1 : Math.min(200, Math.max(1, z * f));\n"
    "    svg.style.width = (100 * z) + '%';\n"
    "    view.scrollLeft = x * z - cx; view.scrollTop = y * z - cy;\n"
    "    shown.textContent = Math.round(100 * z) + '%';\n"
    "  }\n"
    "  box.querySelectorAll('button').forEach(function (b) {\n"
    "    b.onclick = function () { zoom(parseFloat(b.dataset.f)); };\n"
    "  });\n"
    "  view.addEventListener('wheel', function (e) {\n"
    "    e.preventDefault();\n"
    "    var r = view.getBoundingClientRect();\n"
    "    zoom(e.deltaY < 0 ? 1.25 : 0.8, e.clientX - r.left, e.clientY - r.top);\n"
    "  }, {passive: false});\n"
    "  view.addEventListener('mousedown', function (e) {\n"
    "    drag = {x: e.clientX, y: e.clientY, l: view.scrollLeft, t: view.scrollTop}; e.preventDefault();\n"
    "  });\n"
    "  window.addEventListener('mousemove', function (e) {\n"
    "    if (drag) { view.scrollLeft = drag.l - (e.clientX - drag.x); view.scrollTop = drag.t - (e.clientY - drag.y); }\n"
    "  });\n"
    "  window.addEventListener('mouseup', function () { drag = null; });\n"
    "});\n"
    "</script>\n";

static void index_view(FILE *f, const char *heading, const char *file, const char *svg)
{
    fprintf(f, "<div class=\"timeline\">\n<h2>%s</h2>\n<p class=\"bar\"><button data-f=\"0.5\">&minus;</button> "
               "<button data-f=\"2\">+</button> <button data-f=\"0\">fit</button> <span class=\"zoom\">100%%</span> "
               "&mdash; wheel: zoom at the pointer; drag: pan; hover a box: its op and times; "
               "<a href=\"%s\">%s</a></p>\n<div class=\"view\">\n", heading, file, file);
    fputs(svg, f);
    fputs("</div>\n</div>\n", f);
}

static int write_index(const char *dir, const char *cfg, const measured_t *m, double planned_bubble,
                       const char *cost_name, const char *planned_svg, const char *measured_svg)
{
    char path[4200];
    int orc = 0;
    FILE *f = open_out(dir, "index.html", path, sizeof path, &orc);
    if (!f)
        return orc;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>bsipipe trace: %s</title>\n"
               "<style>\nbody { font-family: sans-serif; }\n"
               ".view { overflow: auto; max-height: 85vh; border: 1px solid #ccc; cursor: grab; }\n"
               ".view svg { display: block; width: 100%%; height: auto; }\n.bar { margin: 0.3em 0; }\n"
               "</style></head>\n<body>\n<h1>bsipipe trace: %s</h1>\n", cfg, cfg);
    char heading[300];
    if (planned_svg) {
        snprintf(heading, sizeof heading, "Planned (%s): bubble %.1f%%", cost_name, 100 * planned_bubble);
        index_view(f, heading, "planned.svg", planned_svg);
    }
    snprintf(heading, sizeof heading, "Measured (StarPU profiling, last iteration): bubble %.1f%%, makespan %.3f ms",
             100 * m->r.bubble_ratio, m->r.makespan * 1e3);
    index_view(f, heading, "timeline.svg", measured_svg);
    fputs("<p>Also here: trace.json (ui.perfetto.dev or chrome://tracing), paje.trace (ViTE), dag.dot, "
          "tasks.rec, trace.rec; see docs/tracing.md.</p>\n", f);
    fputs(index_script, f);
    fputs("</body></html>\n", f);
    return close_out(f, path, 0);
}

int bsipipe_engine_trace_write(bsipipe_engine_t *e, const char *dir, const struct bsipipe_cost_model *cost)
{
    if (!e || !dir || !*dir)
        return bsipipe_error_set(-EINVAL, "trace: no engine or no directory");
    if (e->mpi)
        return bsipipe_error_set(-ENOTSUP, "trace: not supported across MPI ranks yet (each rank holds only its "
                                           "own replicas and records); run in one process");
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    if (!cost)
        cost = &unit;
    measured_t m;
    int rc = measured_build(e, &m);
    if (rc < 0)
        return rc;
    bsipipe_sim_result_t *plan = NULL;
    int src = bsipipe_simulate(e->sched, cost, &plan);
    char sim_err[512] = "";
    if (src < 0)
        snprintf(sim_err, sizeof sim_err, "%s", bsipipe_error_detail());
    double planned_bubble = src == 0 ? plan->bubble_ratio : -1;
    char cfg[256], title[400];
    config_line(e, cfg, sizeof cfg);
    const char *cost_name = cost->unit ? "unit costs" : "FLOPs costs";
    rc = write_json(e, dir, &m, planned_bubble);
    char *measured_svg = NULL, *planned_svg = NULL;
    if (rc == 0) {
        snprintf(title, sizeof title, "measured: %s, last iteration, makespan %.3f ms%s", cfg, m.r.makespan * 1e3,
                 e->o.emulate_flops > 0 ? " [EMULATED]" : "");
        rc = write_svg(e->sched, &m.r, dir, "timeline.svg", title, 1, &measured_svg);
    }
    if (rc == 0 && src == 0) {
        snprintf(title, sizeof title, "planned: %s, %s", cfg, cost_name);
        rc = write_svg(e->sched, plan, dir, "planned.svg", title, !cost->unit, &planned_svg);
    }
    if (rc == 0)
        rc = write_index(dir, cfg, &m, planned_bubble, cost_name, planned_svg, measured_svg);
    free(measured_svg);
    free(planned_svg);
    bsipipe_sim_result_destroy(plan);
    measured_free(&m);
    if (rc == 0 && src < 0)
        return bsipipe_error_set(src, "trace: no planned.svg: the plan does not simulate (%s)", sim_err);
    return rc;
}
