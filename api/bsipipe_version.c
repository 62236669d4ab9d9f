/* bsipipe_version.c: the library's version at run time (bsipipe.h). */
#include "bsipipe.h"

const char *bsipipe_version(void)
{
    return BSIPIPE_VERSION_STRING;
}
