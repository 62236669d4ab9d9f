/* trace_dag.c: DIR/dag.dot of a traced run, limited to the engine's ops.
 *
 * StarPU's dag.dot holds every task: two thirds of them are the runtime's
 * own (data acquire/release callbacks, sync tasks) plus a node per tag,
 * which makes the graph slow to lay out and hard to read. trace_dag_filter keeps
 * the engine's ops (a label that starts with an op kind, see trace_name_kind)
 * and turns every path through a dropped node into a direct edge, so the
 * dependencies between ops stay; BSIPIPE_TRACE_DAG=full keeps StarPU's
 * graph as it wrote it. */
#include "tasks/engine_internal.h"
#include "tasks/trace_internal.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
        if (line[0] == '#' || trace_split_tabs(line, fl, 8) != 7)
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
            } else if (!ops->n && trace_name_kind(name) >= 0) { /* no ops.tsv: its codelet's name */
                if (!(x->label = strdup(name)))
                    return -ENOMEM;
                x->colour = trace_name_color(name);
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

int trace_dag_filter(const char *dir)
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
