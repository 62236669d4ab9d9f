/* bsipipe_layout.c: layout strings (parse, format) and the split by cost.
 *
 * Parsing expands the string into a flat list of tokens (E, t, L, |), each
 * remembering the character it came from, then checks that list; the
 * expansion stops as soon as it passes twice what a valid layout can hold
 * (L layers, p·w - 1 bars, E and L), so "(t*65536)*65536" costs nothing,
 * while a near miss is still counted and named.
 *
 * The split by cost: every transformer layer costs the same (1), chunk c
 * also pays extra_c (the head, on the last chunk). With a bound T on every
 * chunk, chunk c can hold n_c(T) = clamp(floor(T - extra_c), 1, L) layers,
 * and T is feasible when the n_c(T) sum to L or more. n_c only steps at
 * T = a + extra_c, so the least feasible T is one of those 2L values: a
 * binary search over them finds it. Between that T and the candidate
 * just below it each n_c grows by at most one (the candidates include
 * every integer) and the sum falls short of L there, so the surplus at T
 * is taken back from chunks that stepped, chunk 0 first: the slowest chunk
 * costs the least possible, and the earlier chunks, which hold the most
 * activations, are the lighter ones. */
#include "graph/bsipipe_layout.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bsipipe_error.h"

enum { MAX_REPEAT = 65536, MAX_DEPTH = 64 };

typedef struct token {
    char c;  /* 'E', 't', 'L' or '|' */
    int pos; /* 1-based position in the text */
} token_t;

typedef struct parser {
    const char *text;
    int i;         /* next character */
    token_t *tok;
    int n, max;    /* tokens written, room */
    int depth;
} parser_t;

#define LAYOUT_ERR(p, pos, ...) layout_error((p)->text, (pos), __VA_ARGS__)

static int layout_error(const char *text, int pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int layout_error(const char *text, int pos, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int n = (int)strlen(text);
    return bsipipe_error_set(BSIPIPE_ECONFIG, "layout \"%.*s%s\", position %d: %s (grammar: docs/schedules.md, "
                             "\"Placing layers\")", n > 60 ? 57 : n, text, n > 60 ? "..." : "", pos, what);
}

static void skip_blanks(parser_t *p)
{
    while (p->text[p->i] == ' ' || p->text[p->i] == '\t' || p->text[p->i] == ',')
        p->i++;
}

static int parse_seq(parser_t *p, int open_pos);

static int parse_item(parser_t *p)
{
    int start = p->n, pos = p->i + 1, rc;
    char c = p->text[p->i];
    if (c == 'E' || c == 't' || c == 'L' || c == '|') {
        if (p->n >= p->max)
            return LAYOUT_ERR(p, pos, "the layout holds more than the model's layers and the plan's stages");
        p->tok[p->n++] = (token_t){c, pos};
        p->i++;
    } else if (c == '(') {
        if (p->depth >= MAX_DEPTH)
            return LAYOUT_ERR(p, pos, "parentheses nested deeper than %d", MAX_DEPTH);
        p->i++;
        p->depth++;
        rc = parse_seq(p, pos);
        p->depth--;
        if (rc < 0)
            return rc;
    } else if (c == 'm') {
        return LAYOUT_ERR(p, pos, "'m' (Megatron's MTP layer) is not a layer bsipipe's models have; use E, t, L and |");
    } else if (c == ')') {
        return LAYOUT_ERR(p, pos, "')' closes no '('");
    } else {
        return LAYOUT_ERR(p, pos, "unexpected character '%c'; a layout is made of E, t, L, |, (, ), * and counts",
                          c);
    }
    skip_blanks(p);
    if (p->text[p->i] != '*')
        return 0;
    int star = p->i + 1;
    p->i++;
    skip_blanks(p);
    long count = 0;
    int digits = 0;
    while (p->text[p->i] >= '0' && p->text[p->i] <= '9' && count <= MAX_REPEAT) {
        count = count * 10 + (p->text[p->i++] - '0');
        digits++;
    }
    if (!digits)
        return LAYOUT_ERR(p, star, "'*' must be followed by a repeat count");
    if (count < 1 || count > MAX_REPEAT)
        return LAYOUT_ERR(p, star, "repeat count must be in 1..%d", MAX_REPEAT);
    long len = p->n - start;
    if (len * (count - 1) > p->max - p->n)
        return LAYOUT_ERR(p, star, "the layout holds more than the model's layers and the plan's stages");
    for (long r = 1; r < count; r++) {
        memcpy(p->tok + p->n, p->tok + start, sizeof *p->tok * (size_t)len);
        p->n += (int)len;
    }
    return 0;
}

/* Items up to the end (open_pos 0) or up to the ')' matching the '(' at
 * open_pos. */
static int parse_seq(parser_t *p, int open_pos)
{
    for (;;) {
        skip_blanks(p);
        char c = p->text[p->i];
        if (c == '\0') {
            if (open_pos)
                return LAYOUT_ERR(p, open_pos, "this '(' is never closed");
            return 0;
        }
        if (c == ')' && open_pos) {
            p->i++;
            return 0;
        }
        int rc = parse_item(p);
        if (rc < 0)
            return rc;
    }
}

/* The rules on the expanded tokens. */
static int check_tokens(const parser_t *p, int n_chunks, int n_layers, int *counts)
{
    const token_t *t = p->tok;
    int n = p->n, stage = 0, in_stage = 0, layers = 0;
    if (n == 0)
        return LAYOUT_ERR(p, 1, "the layout is empty");
    if (t[0].c != 'E')
        return LAYOUT_ERR(p, t[0].pos, "the first stage must open with the embedding E (got '%c')", t[0].c);
    if (t[n - 1].c != 'L')
        return LAYOUT_ERR(p, t[n - 1].pos, "the last stage must end with the loss L (got '%c')", t[n - 1].c);
    for (int i = 0; i < n; i++) {
        if (t[i].c == 'E' && i > 0)
            return LAYOUT_ERR(p, t[i].pos, "a second embedding E; E comes once, first");
        if (t[i].c == 'L' && i < n - 1)
            return LAYOUT_ERR(p, t[i].pos, "the loss L before the end; L comes once, last");
        if (t[i].c == 't') {
            in_stage++;
            layers++;
        }
        if (t[i].c == '|' || i == n - 1) {
            if (in_stage == 0)
                return LAYOUT_ERR(p, t[i].pos, "stage %d holds no transformer layer t; every chunk needs one or more",
                                  stage);
            counts[stage++] = in_stage;
            in_stage = 0;
            if (t[i].c == '|' && stage >= n_chunks)
                return LAYOUT_ERR(p, t[i].pos, "a stage past the plan's p*w = %d chunks begins here", n_chunks);
        }
    }
    if (stage != n_chunks)
        return LAYOUT_ERR(p, t[n - 1].pos, "%d stage%s, but the plan has p*w = %d chunks", stage, stage == 1 ? "" : "s",
                          n_chunks);
    if (layers != n_layers)
        return LAYOUT_ERR(p, t[n - 1].pos, "%d transformer layers t, but the model has L = %d", layers, n_layers);
    return 0;
}

int bsipipe_layout_parse(const char *text, int n_chunks, int n_layers, int *counts)
{
    if (!text || !counts || n_chunks < 1 || n_layers < 1)
        return bsipipe_error_set(BSIPIPE_ECONFIG, "layout: no text, or no chunks or layers to place");
    /* room for twice a valid layout: a near miss gets its own sentence */
    parser_t p = {.text = text, .max = 2 * (n_layers + n_chunks) + 16};
    if (!(p.tok = malloc(sizeof *p.tok * (size_t)p.max)))
        return bsipipe_error_set(-ENOMEM, "layout: out of memory");
    int rc = parse_seq(&p, 0);
    if (rc == 0)
        rc = check_tokens(&p, n_chunks, n_layers, counts);
    free(p.tok);
    return rc;
}

double bsipipe_layout_head_layers(const bsipipe_model_dims_t *d)
{
    double layer = bsipipe_model_layer_flops(d, 0, d->seq_len), head = bsipipe_model_head_flops(d, d->seq_len);
    return layer > 0 && head > 0 ? head / layer : 0;
}

double bsipipe_layout_chunk_cost(const bsipipe_model_dims_t *d, const int *counts, int n_chunks, int chunk)
{
    return counts[chunk] + (chunk == n_chunks - 1 ? bsipipe_layout_head_layers(d) : 0);
}

double bsipipe_layout_imbalance(const bsipipe_model_dims_t *d, const int *counts, int n_chunks)
{
    double max = 0, sum = 0;
    for (int c = 0; c < n_chunks; c++) {
        double x = bsipipe_layout_chunk_cost(d, counts, n_chunks, c);
        sum += x;
        max = x > max ? x : max;
    }
    return sum > 0 ? max / (sum / n_chunks) : 1;
}

/* Layers chunk c holds when no chunk may cost more than T. */
static int layers_within(double T, double extra, int L)
{
    double a = floor(T - extra + 1e-9);
    return a < 1 ? 1 : a > L ? L : (int)a;
}

static long sum_within(double T, double head, int C, int L)
{
    long s = 0;
    for (int c = 0; c < C; c++)
        s += layers_within(T, c == C - 1 ? head : 0, L);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bsipipe_layout_auto(const bsipipe_model_dims_t *d, int n_chunks, int *counts)
{
    int L = d ? d->n_layers : 0, C = n_chunks;
    if (!d || !counts || C < 1 || L < C)
        return bsipipe_error_set(BSIPIPE_ECONFIG, "layout auto: %d layers cannot fill %d chunks with one or more "
                                 "each; use L >= p*w", L, C);
    double head = bsipipe_layout_head_layers(d);
    double *cand = malloc(sizeof *cand * 2 * (size_t)L);
    if (!cand)
        return bsipipe_error_set(-ENOMEM, "layout auto: out of memory");
    for (int a = 1; a <= L; a++) {
        cand[2 * (a - 1)] = a;
        cand[2 * (a - 1) + 1] = a + head;
    }
    qsort(cand, 2 * (size_t)L, sizeof *cand, cmp_double);
    int lo = 0, hi = 2 * L - 1; /* cand[hi] = L + head: always feasible */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (sum_within(cand[mid], head, C, L) >= L)
            hi = mid;
        else
            lo = mid + 1;
    }
    double T = cand[lo], below = 0;
    for (int i = lo - 1; i >= 0 && !below; i--)
        if (cand[i] < T - 1e-9)
            below = cand[i];
    free(cand);
    long surplus = -L;
    for (int c = 0; c < C; c++)
        surplus += counts[c] = layers_within(T, c == C - 1 ? head : 0, L);
    for (int c = 0; c < C && surplus > 0; c++) {
        int before = below > 0 ? layers_within(below, c == C - 1 ? head : 0, L) : 1;
        if (counts[c] > before) {
            counts[c]--;
            surplus--;
        }
    }
    if (surplus != 0) /* the argument above says it cannot happen */
        return bsipipe_error_set(-EINVAL, "layout auto: internal error splitting %d layers over %d chunks", L, C);
    return 0;
}

/* The slowest device's cost and the slowest chunk's (load: n_devices). */
static void device_costs(const bsipipe_model_dims_t *d, const int *counts, int C, const int *chunk_dev, int pipes,
                         int W, double *load, double *max_dev, double *max_chunk)
{
    for (int dv = 0; dv < W; dv++)
        load[dv] = 0;
    *max_chunk = 0;
    for (int c = 0; c < C; c++) {
        double x = bsipipe_layout_chunk_cost(d, counts, C, c);
        *max_chunk = x > *max_chunk ? x : *max_chunk;
        for (int pipe = 0; pipe < pipes; pipe++)
            load[chunk_dev[pipe * C + c]] += x;
    }
    *max_dev = 0;
    for (int dv = 0; dv < W; dv++)
        *max_dev = load[dv] > *max_dev ? load[dv] : *max_dev;
}

int bsipipe_layout_balance_devices(const bsipipe_model_dims_t *d, int *counts, int n_chunks, const int *chunk_dev,
                                   int n_pipes, int n_devices)
{
    int C = n_chunks;
    if (C < 2 || C > 1024)
        return 0;
    for (int i = 0; i < n_pipes * C; i++)
        if (chunk_dev[i] < 0 || chunk_dev[i] >= n_devices)
            return bsipipe_error_set(-EINVAL, "layout: chunk %d placed on device %d of %d", i % C, chunk_dev[i],
                                     n_devices);
    double *load = malloc(sizeof *load * (size_t)n_devices), best_dev, best_chunk;
    if (!load)
        return bsipipe_error_set(-ENOMEM, "layout: out of memory");
    device_costs(d, counts, C, chunk_dev, n_pipes, n_devices, load, &best_dev, &best_chunk);
    long L = 0;
    for (int c = 0; c < C; c++)
        L += counts[c];
    /* Each accepted move lowers (slowest device, slowest chunk)
     * lexicographically; the cap only bounds a pathological walk. */
    for (long step = 0; step < 4 * L + 16; step++) {
        int from = -1, to = -1;
        double cand_dev = best_dev, cand_chunk = best_chunk;
        for (int b = 0; b + 1 < C; b++)
            for (int dir = 0; dir < 2; dir++) {
                int a = dir ? b + 1 : b, z = dir ? b : b + 1; /* one layer from chunk a to chunk z */
                if (counts[a] <= 1)
                    continue;
                counts[a]--;
                counts[z]++;
                double dv, ch;
                device_costs(d, counts, C, chunk_dev, n_pipes, n_devices, load, &dv, &ch);
                counts[a]++;
                counts[z]--;
                if (dv < cand_dev - 1e-9 || (dv < cand_dev + 1e-9 && ch < cand_chunk - 1e-9)) {
                    cand_dev = dv;
                    cand_chunk = ch;
                    from = a;
                    to = z;
                }
            }
        if (from < 0)
            break;
        counts[from]--;
        counts[to]++;
        best_dev = cand_dev;
        best_chunk = cand_chunk;
    }
    free(load);
    return 0;
}

/* Appends to buf at *at; 0, or -1 once it no longer fits. */
static int put(char *buf, size_t len, size_t *at, const char *fmt, int a)
{
    int n = snprintf(buf + *at, len - *at, fmt, a);
    if (n < 0 || (size_t)n >= len - *at)
        return -1;
    *at += (size_t)n;
    return 0;
}

char *bsipipe_layout_format(const int *counts, int n_chunks, char *buf, size_t len)
{
    size_t at = 0;
    if (!buf || len == 0 || !counts || n_chunks < 1)
        return NULL;
    buf[0] = '\0';
    for (int c = 0; c < n_chunks;) {
        int run = 1;
        while (c > 0 && c + run < n_chunks - 1 && counts[c + run] == counts[c])
            run++;
        const char *layers = counts[c] == 1 ? "t" : "t*%d";
        if (c > 0 && c < n_chunks - 1 && run > 1) { /* a run of equal middle stages */
            if (put(buf, len, &at, "(", 0) || put(buf, len, &at, layers, counts[c]) ||
                put(buf, len, &at, "|)*%d", run))
                return NULL;
            c += run;
            continue;
        }
        if ((c == 0 && put(buf, len, &at, "E", 0)) || put(buf, len, &at, layers, counts[c]) ||
            (c == n_chunks - 1 && put(buf, len, &at, "L", 0)) || (c < n_chunks - 1 && put(buf, len, &at, "|", 0)))
            return NULL;
        c++;
    }
    return buf;
}
