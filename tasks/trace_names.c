/* trace_names.c: the colours and op kinds that StarPU's trace files carry:
 * each op's colour (the planner's SVG palette, paper's Figure 1), the op
 * kind behind a task name in StarPU's files (its codelet's model symbol),
 * and the tab-separated lines they are read as. */
#include "tasks/engine_internal.h"
#include "tasks/trace_internal.h"

#include <stdint.h>
#include <string.h>

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
int trace_name_kind(const char *name)
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
unsigned trace_name_color(const char *name)
{
    int kind = trace_name_kind(name);
    if (kind < 0)
        return 0;
    bsipipe_op_t op = {0};
    op.kind = (uint8_t)kind;
    op.pipe = BSIPIPE_PIPE_DOWN;
    return bsipipe_trace_op_color(&op);
}

/* Splits a line (newline stripped) at tabs into at most max fields. */
int trace_split_tabs(char *line, char **f, int max)
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
