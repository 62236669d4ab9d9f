/* test_draw_svg: the SVG timeline (bsipipe_draw_svg, bsipipe_draw_svg_time).
 *  - BSIPipe w = 4, m = 8, unit costs: a viewBox equal to the drawing's size,
 *    at most 1600 px wide; a time axis with at least 3 ticks, the first
 *    labelled 0, titled "time (units)"; one box (with a title) per compute
 *    op, none merged;
 *  - m = 256 (8192 compute ops on 1600 px): ops narrower than a pixel are
 *    merged, not dropped: the boxes' op counts add up to every compute op,
 *    and each device has at most two boxes per pixel (a merged box spans up
 *    to a pixel, and is followed by a wider box or by a gap);
 *  - in seconds (FLOPs costs) the axis says s, ms or us. */
#include "graph/bsipipe_draw.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <stdlib.h>

/* Draws BSIPipe (w = 4, m micro-batches) into a string. */
static char *draw(int m, int seconds, int *n_compute)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 4;
    pc.m = m;
    bsipipe_schedule_t *s = NULL;
    bsipipe_sim_result_t *r = NULL;
    CHECK(bsipipe_schedule_create(&pc, NULL, &s) == 0, "create m=%d: %s", m, bsipipe_error_detail());
    if (!s)
        return NULL;
    bsipipe_cost_model_t cost = seconds ? bsipipe_cost_model_flops(1e12) : bsipipe_cost_model_unit();
    CHECK(bsipipe_simulate(s, &cost, &r) == 0, "simulate m=%d: %s", m, bsipipe_error_detail());
    *n_compute = 0;
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n; i++)
            *n_compute += ops[i].kind <= BSIPIPE_OP_W;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc = r ? bsipipe_draw_svg_time(f, s, r, "test <&>", seconds) : -1;
    fclose(f);
    CHECK(rc == 0, "draw m=%d: %s", m, bsipipe_error_detail());
    bsipipe_sim_result_destroy(r);
    bsipipe_schedule_destroy(s);
    return text;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Ops drawn: a box's title is "N ops from ..." when merged, else one op. */
static long ops_drawn(const char *text, int *boxes)
{
    long n = 0;
    *boxes = 0;
    for (const char *p = text; (p = strstr(p, "<title>")); p += 7) {
        int k;
        n += sscanf(p + 7, "%d ops from", &k) == 1 ? k : 1;
        (*boxes)++;
    }
    return n;
}

static void check_frame(const char *text, const char *unit)
{
    double w = 0, h = 0, vw = 0, vh = 0;
    const char *svg = strstr(text, "<svg ");
    CHECK(svg && sscanf(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lf\" height=\"%lf\" viewBox=\"0 0 "
                             "%lf %lf\"", &w, &h, &vw, &vh) == 4,
          "no width, height and viewBox: %.200s", text);
    CHECK(w == vw && h == vh && w > 0 && w <= 1600, "size %gx%g, viewBox %gx%g", w, h, vw, vh);
    CHECK(count(text, "class=\"tick\"") >= 3, "%d ticks", count(text, "class=\"tick\""));
    CHECK_CONTAINS(text, "text-anchor=\"middle\">0</text>");
    CHECK_CONTAINS(text, unit);
    CHECK_CONTAINS(text, "test &lt;&amp;&gt;");
}

int main(void)
{
    int n = 0, boxes = 0;
    char *small = draw(8, 0, &n);
    if (small) {
        check_frame(small, "time (units)");
        long drawn = ops_drawn(small, &boxes);
        CHECK(drawn == n && boxes == n, "m=8: %d compute ops, %d boxes holding %ld", n, boxes, drawn);
        CHECK(!strstr(small, "ops from"), "m=8: ops merged although every one is wider than a pixel");
    }
    free(small);

    char *big = draw(256, 0, &n);
    if (big) {
        check_frame(big, "time (units)");
        long drawn = ops_drawn(big, &boxes);
        printf("m=256: %d compute ops in %d boxes\n", n, boxes);
        CHECK(drawn == n, "m=256: %d compute ops, the boxes hold %ld", n, drawn);
        CHECK(strstr(big, "ops from") != NULL, "m=256: no op merged");
        CHECK(boxes < n && boxes <= 4 * 2 * 1600, "m=256: %d boxes for %d ops", boxes, n);
    }
    free(big);

    char *secs = draw(8, 1, &n);
    if (secs) {
        const char *unit = strstr(secs, "time (");
        CHECK(unit && (!strncmp(unit, "time (s)", 8) || !strncmp(unit, "time (ms)", 9) ||
                       !strncmp(unit, "time (\xc2\xb5s)", 10)), "FLOPs costs: axis %.12s", unit ? unit : "(none)");
    }
    free(secs);
    return check_finish("test_draw_svg");
}
