/* test_version: the configured version macros (bsipipe_version.h, through the
 * umbrella bsipipe.h) agree with AC_INIT's version (PACKAGE_VERSION, on the
 * command line) and with bsipipe_version(), the library's at run time. */
#include <bsipipe.h>
#include "tests/check.h"

#include <stdio.h>

int main(void)
{
    char composed[64];
    snprintf(composed, sizeof composed, "%d.%d.%d", BSIPIPE_VERSION_MAJOR, BSIPIPE_VERSION_MINOR,
             BSIPIPE_VERSION_PATCH);
    printf("headers %s (%s, number %d), library %s, package %s\n", BSIPIPE_VERSION_STRING, composed,
           BSIPIPE_VERSION_NUMBER, bsipipe_version(), PACKAGE_VERSION);
    CHECK(strcmp(composed, BSIPIPE_VERSION_STRING) == 0, "MAJOR.MINOR.PATCH %s vs string %s", composed,
          BSIPIPE_VERSION_STRING);
    CHECK(strcmp(BSIPIPE_VERSION_STRING, PACKAGE_VERSION) == 0, "header %s vs package %s", BSIPIPE_VERSION_STRING,
          PACKAGE_VERSION);
    CHECK(bsipipe_version() && strcmp(bsipipe_version(), BSIPIPE_VERSION_STRING) == 0, "library %s vs header %s",
          bsipipe_version(), BSIPIPE_VERSION_STRING);
    CHECK(BSIPIPE_VERSION_NUMBER == BSIPIPE_VERSION_MAJOR * 10000 + BSIPIPE_VERSION_MINOR * 100 + BSIPIPE_VERSION_PATCH,
          "number");
#if BSIPIPE_VERSION_NUMBER < BSIPIPE_VERSION_ENCODE(0, 1, 0)
    CHECK(0, "the version macros work in #if (0.1.0 is the first release)");
#endif
    return check_finish("test_version");
}
