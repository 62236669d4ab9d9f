/* bsipipe_draw.h: pictures and exports of a simulated schedule: a terminal
 * timeline, an SVG timeline in the style of the paper's Figure 1, and JSON
 * (format in docs/plan-json.md). All write to a caller-owned FILE. */
#ifndef BSIPIPE_DRAW_H
#define BSIPIPE_DRAW_H

#include <stdio.h>

#include "graph/bsipipe_sim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row per device, `cols` characters wide. Forward = micro-batch digit
 * (mb % 10), backward = letter ('A' + mb % 26), W = 'w', idle = '.'; with
 * color (ANSI) the up pipe is shown in another colour. */
int bsipipe_draw_terminal(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r, int cols,
                          int color);

/* SVG: one row per device, boxes labelled "mb.sub" (or "mb"), forward light
 * and backward dark, the down pipe blue and the up pipe orange, under a time
 * axis with ticks (1, 2 or 5 x 10^n). 1000..1600 px wide with a viewBox, so
 * viewers can scale it; ops narrower than a pixel are merged with their
 * neighbours into one-pixel boxes (the box's title counts them) rather than
 * dropped. Times are in units of the cost model (unit costs). */
int bsipipe_draw_svg(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r, const char *title);

/* The same, with the times of `r` in seconds when `seconds` is set (a FLOPs
 * cost model, or measured times): the axis is labelled in s, ms or us. */
int bsipipe_draw_svg_time(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r, const char *title,
                          int seconds);

/* JSON: config, summary, per-device statistics and every op with its times. */
int bsipipe_export_json(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r,
                        const bsipipe_cost_model_t *cost);

/* torch.distributed.pipelining's per-rank action CSV (`compute_only`, as its
 * _dump_csv writes it): one row per device, each compute op "{chunk}{F|B|I|W}{mb}"
 * (B a fused backward; I and W a split one's halves). Plans torch can express
 * only: one pipe, k = 1, D_t = 1; others get -EINVAL naming why. -EIO when
 * the write fails. */
int bsipipe_export_torch_csv(FILE *out, const bsipipe_schedule_t *s);

#ifdef __cplusplus
}
#endif
#endif
