/* apps/cli_policies.c: the --help list of scheduling policies, apart from
 * apps/cli.c so that the number parsers build without the engine (the fuzz
 * targets compile cli.c alone). */
#include "apps/cli.h"
#include "tasks/bsipipe_engine.h"

#include <stdio.h>
#include <string.h>

void cli_print_policies(FILE *out)
{
    const char *names[64];
    int n = bsipipe_engine_policies(names, 64), col = 0;
    fputs("\nScheduling policies (--policy): the engine's own, then the StarPU 1.3\n"
          "policies that run its graph correctly (the others are refused; see\n"
          "docs/policies.md):\n",
          out);
    for (int i = 0; i < n && i < 64; i++) {
        int len = (int)strlen(names[i]) + 1;
        if (col > 0 && col + len > 78) {
            fputc('\n', out);
            col = 0;
        }
        col += fprintf(out, "%s%s", col ? " " : "  ", names[i]);
    }
    fputc('\n', out);
}
