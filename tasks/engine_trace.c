/* engine_trace.c: the engine's own trace outputs of a run (docs/tracing.md),
 * from StarPU's profiling information, which the engine keeps per op for the
 * last iteration (engine_op_records): Chrome/Perfetto trace events
 * (with SEND -> RECV flow arrows), the planner's SVG timeline with measured
 * times next to the planned one, both inline in a zoomable index.html, and
 * ops.tsv, which names the op of every StarPU job of the run (the join of
 * StarPU's traces, whose task names are the codelets', with the plan).
 * StarPU's own FxT trace and its tools: trace_starpu.c. */
#include "tasks/engine_internal.h"
#include "graph/bsipipe_draw.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        rec = engine_op_records(e, d, &n);
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
        rec = engine_op_records(e, d, &n);
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
        rec = engine_op_records(e, d, &n);
        for (int i = 0; i < n; i++) {
            const bsipipe_op_t *op = &ops[i];
            int tid = d; /* the device whose worker ran it (placement is kept: normally d) */
            for (int x = 0; x < W; x++)
                if (e->workerid[x] == rec[i].worker)
                    tid = x;
            double ts = m->r.op_start[d][i] * 1e6, dur = (m->r.op_end[d][i] - m->r.op_start[d][i]) * 1e6;
            int eager = e->eager && op->kind == BSIPIPE_OP_SEND; /* ran inside its producer: no task */
            fputs(",\n{\"name\": ", f);
            json_string(f, e->args[d][i].name);
            fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                       "\"args\": {\"pipe\": \"%s\", \"mb\": %d, \"sub\": %d, \"chunk\": %d, \"peer\": %d, "
                       "\"channel\": %d, \"tensor\": \"%s\", \"device\": %d, \"index\": %d, \"worker\": %d, "
                       "\"seq\": %ld, \"eager\": %d, \"job\": %lu}}",
                    bsipipe_op_kind_name((bsipipe_op_kind_t)op->kind), tid, ts, dur,
                    bsipipe_pipe_name((bsipipe_pipe_t)op->pipe), op->mb, op->sub, op->chunk, op->peer, op->channel,
                    tensors[op->tensor < 3 ? op->tensor : 0], d, i, rec[i].worker, rec[i].seq, eager,
                    eager ? 0UL : rec[i].job_id);
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
            rec = engine_op_records(e, d, &n);
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

/* ---- ops.tsv: the op of every StarPU job ---- */

void engine_job_note(struct bsipipe_engine *e, int d, int i, struct starpu_task *t, int primary)
{
    unsigned long id = starpu_task_get_job_id(t);
    if (primary)
        e->rec[d][i].job_id = id;
    if (!engine_trace_recording())
        return;
    if (e->n_jobs == e->cap_jobs) {
        long nc = e->cap_jobs ? 2 * e->cap_jobs : 4096;
        struct engine_job *nj = realloc(e->jobs, sizeof *nj * (size_t)nc);
        if (!nj)
            return; /* the map is left short: those tasks keep their codelet's name in dag.dot */
        e->jobs = nj;
        e->cap_jobs = nc;
    }
    e->jobs[e->n_jobs++] = (struct engine_job){id, e->pass_iter, e->pass_kind, d, i};
}

/* DIR/ops.tsv: one line per StarPU job of an op, every pass of the run:
 * job id, iteration, pass, device, index, op label, colour. */
static int write_ops_tsv(const bsipipe_engine_t *e, const char *dir)
{
    char path[4096];
    int rc = 0;
    FILE *f = open_out(dir, "ops.tsv", path, sizeof path, &rc);
    if (!f)
        return rc;
    fputs("# job\titeration\tpass\tdevice\tindex\top\tcolour\n", f);
    for (long j = 0; j < e->n_jobs; j++) {
        const struct engine_job *x = &e->jobs[j];
        const op_args_t *a = &e->args[x->device][x->index];
        static const char *const pass[3] = {"train", "fwd-bwd", "eval"};
        fprintf(f, "%lu\t%ld\t%s\t%d\t%d\t%s\t#%06x\n", x->job_id, x->iteration, pass[x->pass],
                x->device, x->index, a->name, bsipipe_trace_op_color(&a->op));
    }
    return close_out(f, path, rc);
}

int bsipipe_engine_trace_write(bsipipe_engine_t *e, const char *dir, const struct bsipipe_sim_result *planned,
                               const struct bsipipe_cost_model *cost)
{
    if (!e || !dir || !*dir)
        return bsipipe_error_set(-EINVAL, "trace: no engine or no directory");
    if (planned && planned->n_devices != bsipipe_schedule_n_devices(e->sched))
        return bsipipe_error_set(-EINVAL, "trace: the planned result has %d devices, the engine's plan %d: simulate "
                                 "bsipipe_engine_schedule(e)", planned->n_devices,
                                 bsipipe_schedule_n_devices(e->sched));
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
    double planned_bubble = planned ? planned->bubble_ratio : -1;
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
    if (rc == 0 && planned) {
        snprintf(title, sizeof title, "planned: %s, %s", cfg, cost_name);
        rc = write_svg(e->sched, planned, dir, "planned.svg", title, !cost->unit, &planned_svg);
    }
    if (rc == 0)
        rc = write_index(dir, cfg, &m, planned_bubble, cost_name, planned_svg, measured_svg);
    if (rc == 0)
        rc = write_ops_tsv(e, dir);
    free(measured_svg);
    free(planned_svg);
    measured_free(&m);
    return rc;
}
