/* bsipipe_draw.c: terminal and SVG timelines of a simulated schedule. */
#include "graph/bsipipe_draw.h"
#include "base/bsipipe_error.h"

#include <math.h>
#include <string.h>

int bsipipe_draw_terminal(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r, int cols,
                          int color)
{
    if (cols < 10 || cols > 4096 || r->makespan <= 0)
        return bsipipe_error_set(-EINVAL, "draw: width must be 10..4096 columns and the schedule non-empty");
    double per_col = r->makespan / cols;
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        fprintf(out, "dev%-3d|", d);
        int i = 0, last_pipe = -1;
        for (int c = 0; c < cols; c++) {
            double t = (c + 0.5) * per_col;
            while (i < n && (ops[i].kind > BSIPIPE_OP_W || r->op_end[d][i] <= t))
                i++;
            char ch = '.';
            int pipe = -1;
            if (i < n && r->op_start[d][i] <= t) {
                const bsipipe_op_t *op = &ops[i];
                ch = op->kind == BSIPIPE_OP_F ? (char)('0' + op->mb % 10)
                   : op->kind == BSIPIPE_OP_B ? (char)('A' + op->mb % 26) : 'w';
                pipe = op->pipe;
            }
            if (color && pipe != last_pipe)
                fputs(pipe < 0 ? "\033[0m" : pipe == 0 ? "\033[34m" : "\033[33m", out);
            last_pipe = pipe;
            fputc(ch, out);
        }
        if (color)
            fputs("\033[0m", out);
        fputs("|\n", out);
    }
    fprintf(out, "       forward = micro-batch digit, backward = letter (A = mb 0), W = w, idle = .%s\n",
            color ? "; blue = down pipe, yellow = up pipe" : "");
    return 0;
}

/* Fill colours: [pipe][0 forward, 1 backward, 2 W]. */
static const char *const fills[2][3] = {
    {"#9ecae1", "#2171b5", "#6a51a3"},
    {"#fdae6b", "#d94801", "#8c6d31"},
};

static void xml_text(FILE *out, const char *s)
{
    for (const char *c = s ? s : ""; *c; c++)
        fputs(*c == '<' ? "&lt;" : *c == '>' ? "&gt;" : *c == '&' ? "&amp;" : (char[2]){*c, 0}, out);
}

/* A tick step of 1, 2 or 5 times a power of ten, at least `target`. */
static double nice_step(double target)
{
    double p = pow(10, floor(log10(target)));
    for (int i = 0; i < 3; i++) {
        double m = (double[]){1, 2, 5}[i] * p;
        if (m >= target * (1 - 1e-9))
            return m;
    }
    return 10 * p;
}

/* Ops narrower than a pixel are merged with their neighbours into boxes at
 * most a pixel wide (drawn one pixel wide), so a long run keeps every op
 * visible and the file stays proportional to the width, not the op count. */
typedef struct svg_box {
    int n, first;          /* ops merged, index of the first */
    double start, end;     /* times */
    double weight[2][3];   /* time per (pipe, kind): the box takes the heaviest's colour */
} svg_box_t;

static void box_flush(FILE *out, const svg_box_t *b, const bsipipe_op_t *ops, double left, double scale, double y,
                      double h, int k)
{
    if (b->n == 0)
        return;
    const bsipipe_op_t *op = &ops[b->first];
    double x = left + b->start * scale, w = (b->end - b->start) * scale;
    if (b->n == 1) {
        /* a white outline separates neighbours, but would hide a box of a few pixels */
        fprintf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"%s><title>%s %s mb %d "
                     "sub %d chunk %d [%g, %g]</title></rect>\n",
                x, y, w < 1 ? 1 : w, h, fills[op->pipe][op->kind],
                w >= 4 ? " stroke=\"white\" stroke-width=\"0.5\"" : "", bsipipe_op_kind_name(op->kind),
                bsipipe_pipe_name(op->pipe), op->mb, op->sub, op->chunk, b->start, b->end);
        char label[32];
        if (k > 1) snprintf(label, sizeof label, "%d.%d", op->mb, op->sub);
        else snprintf(label, sizeof label, "%d", op->mb);
        /* ~6 px per character at font-size 10; narrower boxes get a
         * smaller label, legible once zoomed in. */
        double fit = w / (6.0 * (double)strlen(label) + 4);
        if (fit >= 0.5)
            fprintf(out, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\"%s>%s</text>\n", x + w / 2,
                    y + h * 0.6, op->kind == BSIPIPE_OP_F ? "black" : "white", fit >= 1 ? "" : " font-size=\"5\"",
                    label);
        return;
    }
    int bp = 0, bk = 0;
    for (int p = 0; p < 2; p++)
        for (int q = 0; q < 3; q++)
            if (b->weight[p][q] > b->weight[bp][bk])
                bp = p, bk = q;
    fprintf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>%d ops from %s %s mb %d "
                 "sub %d chunk %d [%g, %g] (narrower than a pixel: zoom in)</title></rect>\n",
            x, y, w < 1 ? 1 : w, h, fills[bp][bk], b->n, bsipipe_op_kind_name(op->kind), bsipipe_pipe_name(op->pipe),
            op->mb, op->sub, op->chunk, b->start, b->end);
}

int bsipipe_draw_svg_time(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r, const char *title,
                          int seconds)
{
    int W = bsipipe_schedule_n_devices(s), k = bsipipe_schedule_config(s)->k;
    /* Wide enough that the shortest op can carry its label (18 px), within
     * 1000..1600 px: readable as it is; the viewBox lets a viewer zoom. */
    double shortest = 0;
    for (int d = 0; d < W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n; i++) {
            double len = r->op_end[d][i] - r->op_start[d][i];
            if (ops[i].kind <= BSIPIPE_OP_W && len > 0 && (shortest == 0 || len < shortest))
                shortest = len;
        }
    }
    double left = 60, right = 30, row = 28, top = 40, span = r->makespan > 0 ? r->makespan : 1;
    double width = shortest > 0 ? left + right + 18 * span / shortest : 1600;
    if (width < 1000) width = 1000;
    if (width > 1600) width = 1600;
    double scale = (width - left - right) / span;
    double axis_y = top + W * row + 2, height = axis_y + 66;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                 "font-family=\"sans-serif\" font-size=\"10\">\n", width, height, width, height);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(out, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">", left);
    xml_text(out, title);
    fprintf(out, " (bubble %.1f%%)</text>\n", 100 * r->bubble_ratio);

    /* Time axis: ticks every 1, 2 or 5 x 10^n, about one per 100 px, with
     * grid lines behind the rows; seconds shown in s, ms or us. */
    double step = nice_step(span / ((width - left - right) / 100));
    double unit_scale = 1;
    const char *unit = "units";
    if (seconds) {
        unit_scale = span >= 1 ? 1 : span >= 1e-3 ? 1e3 : 1e6;
        unit = span >= 1 ? "s" : span >= 1e-3 ? "ms" : "\xc2\xb5s";
    }
    fprintf(out, "<g class=\"axis\" stroke=\"#999\" stroke-width=\"0.5\">\n");
    for (int t = 0; t * step <= span * (1 + 1e-9); t++) {
        double x = left + t * step * scale;
        fprintf(out, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                     "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>\n",
                x, top, x, axis_y, x, axis_y, x, axis_y + 5);
    }
    fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n</g>\n", left, axis_y,
            left + span * scale, axis_y);
    for (int t = 0; t * step <= span * (1 + 1e-9); t++)
        fprintf(out, "<text class=\"tick\" x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%.6g</text>\n",
                left + t * step * scale, axis_y + 16, t * step * unit_scale);
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">time (%s)</text>\n", left + span * scale,
            axis_y + 30, unit);

    for (int d = 0; d < W; d++) {
        double y = top + d * row;
        fprintf(out, "<text x=\"5\" y=\"%.1f\">dev %d</text>\n", y + row * 0.6, d);
        fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f0f0f0\" fill-opacity=\"0.6\"/>\n",
                left, y + 2, r->makespan * scale, row - 4);
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        svg_box_t box = {0};
        for (int i = 0; i < n; i++) {
            const bsipipe_op_t *op = &ops[i];
            if (op->kind > BSIPIPE_OP_W)
                continue;
            double a = r->op_start[d][i], e = r->op_end[d][i];
            int narrow = (e - a) * scale < 1;
            if (box.n && (!narrow || (e - box.start) * scale > 1)) {
                box_flush(out, &box, ops, left, scale, y + 2, row - 4, k);
                box.n = 0;
            }
            if (box.n == 0) {
                memset(&box, 0, sizeof box);
                box.first = i;
                box.start = a;
            }
            box.n++;
            box.end = e > box.end ? e : box.end;
            box.weight[op->pipe ? 1 : 0][op->kind] += e - a;
            if (!narrow) { /* a wide op is a box of its own */
                box_flush(out, &box, ops, left, scale, y + 2, row - 4, k);
                box.n = 0;
            }
        }
        box_flush(out, &box, ops, left, scale, y + 2, row - 4, k);
    }
    double ly = axis_y + 44;
    const char *names[3] = {"forward", "backward", "W"};
    for (int pipe = 0; pipe < bsipipe_schedule_n_pipes(s); pipe++)
        for (int kind = 0; kind < 3; kind++) {
            if (kind == 2 && !bsipipe_schedule_kind_traits(bsipipe_schedule_config(s)->schedule).split_backward)
                continue;
            double x = left + (pipe * 3 + kind) * 140;
            fprintf(out, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"12\" fill=\"%s\"/>"
                         "<text x=\"%.0f\" y=\"%.0f\">%s %s</text>\n", x, ly, fills[pipe][kind], x + 18, ly + 10,
                    bsipipe_pipe_name((bsipipe_pipe_t)pipe), names[kind]);
        }
    fputs("</svg>\n", out);
    return ferror(out) ? bsipipe_error_set(-EIO, "draw: write error") : 0;
}

int bsipipe_draw_svg(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r, const char *title)
{
    return bsipipe_draw_svg_time(out, s, r, title, 0);
}

int bsipipe_export_json(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r,
                        const bsipipe_cost_model_t *cost)
{
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    const bsipipe_model_dims_t *md = bsipipe_schedule_model(s);
    int W = bsipipe_schedule_n_devices(s);
    fprintf(out, "{\n  \"format\": \"bsipipe-plan/1\",\n");
    fprintf(out, "  \"config\": {\"schedule\": \"%s\", \"w\": %d, \"p\": %d, \"k\": %d, \"m\": %d, \"tp\": %d, "
                 "\"n_s\": %d, \"partition\": \"%s\", \"comm\": \"%s\", \"concat\": %s%s%s%s},\n",
            bsipipe_schedule_kind_name(pc->schedule), pc->w, pc->p, pc->k, pc->m, pc->tp, pc->m * pc->k,
            pc->partition == BSIPIPE_PARTITION_EVEN ? "even" : "balanced", bsipipe_comm_order_name(pc->comm),
            pc->concat ? "true" : "false", pc->layout ? ", \"layout\": \"" : "", pc->layout ? pc->layout : "",
            pc->layout ? "\"" : "");
    fprintf(out, "  \"model\": {\"family\": \"%s\", \"layers\": %d, \"hidden\": %d, \"heads\": %d, \"ffn\": %d, "
                 "\"vocab\": %d, \"seq_len\": %d},\n", md->family == BSIPIPE_MODEL_LLAMA ? "llama" : "gpt",
            md->n_layers, md->hidden, md->n_heads, md->ffn_hidden, md->vocab, md->seq_len);
    fprintf(out, "  \"cost_model\": \"%s\",\n", cost->unit ? "unit" : "flops");
    fprintf(out, "  \"summary\": {\"makespan\": %.9g, \"iteration_time\": %.9g, \"bubble_ratio\": %.9g, "
                 "\"act_bytes_intra\": %.9g, \"act_bytes_inter\": %.9g, \"sync_bytes_intra\": %.9g, "
                 "\"sync_bytes_inter\": %.9g},\n", r->makespan, r->iteration_time, r->bubble_ratio,
            r->act_bytes[0], r->act_bytes[1], r->sync_bytes[0], r->sync_bytes[1]);
    fprintf(out, "  \"devices\": [\n");
    for (int d = 0; d < W; d++) {
        const bsipipe_sim_device_t *v = &r->device[d];
        fprintf(out, "    {\"device\": %d, \"busy\": %.9g, \"idle\": %.9g, \"comm\": %.9g, \"peak_act_units\": %d, "
                     "\"peak_act_bytes\": %.9g, \"param_units\": %.9g, \"param_bytes\": %.9g}%s\n",
                d, v->busy, v->idle, v->comm, v->peak_act_units, v->peak_act_bytes, v->param_units,
                v->param_bytes, d + 1 < W ? "," : "");
    }
    fprintf(out, "  ],\n  \"ops\": [\n");
    int first = 1;
    for (int d = 0; d < W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n; i++) {
            const bsipipe_op_t *op = &ops[i];
            fprintf(out, "%s    {\"device\": %d, \"index\": %d, \"kind\": \"%s\", \"pipe\": \"%s\", \"mb\": %d, "
                         "\"sub\": %d, \"chunk\": %d, \"tensor\": \"%s\", \"peer\": %d, \"channel\": %d, "
                         "\"start\": %.9g, \"end\": %.9g%s}", first ? "" : ",\n", d, i,
                    bsipipe_op_kind_name((bsipipe_op_kind_t)op->kind), bsipipe_pipe_name((bsipipe_pipe_t)op->pipe),
                    op->mb, op->sub, op->chunk,
                    op->tensor == BSIPIPE_TENSOR_ACT ? "act" : op->tensor == BSIPIPE_TENSOR_GRAD ? "grad" : "none",
                    op->peer, op->channel, r->op_start[d][i], r->op_end[d][i],
                    op->flags == BSIPIPE_OP_PAIR_F ? ", \"pair\": \"F\"" : op->flags == BSIPIPE_OP_PAIR_B ? ", \"pair\": \"B\"" : "");
            first = 0;
        }
    }
    fprintf(out, "\n  ]\n}\n");
    return ferror(out) ? bsipipe_error_set(-EIO, "export: write error") : 0;
}
