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
 * and backward dark, the down pipe blue and the up pipe orange. */
int bsipipe_draw_svg(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r, const char *title);

/* JSON: config, summary, per-device statistics and every op with its times. */
int bsipipe_export_json(FILE *out, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *r,
                        const bsipipe_cost_model_t *cost);

#ifdef __cplusplus
}
#endif
#endif
