/* bsipipe_error.c: code → text, and the per-thread detail sentence. */
#include "base/bsipipe_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char error_detail[4096]; /* room for a deadlock report naming every device */

const char *bsipipe_strerror(int code)
{
    switch (code) {
    case 0: return "success";
    case BSIPIPE_ECONFIG: return "invalid configuration";
    case BSIPIPE_EDEADLOCK: return "schedule deadlocks";
    case BSIPIPE_EDEPEND: return "unsatisfiable dependency";
    case BSIPIPE_EFORMAT: return "malformed input";
    default: break;
    }
    if (code < 0 && code > -4000)
        return strerror(-code);
    return "unknown error";
}

const char *bsipipe_error_detail(void)
{
    return error_detail;
}

int bsipipe_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_detail, sizeof error_detail, fmt, ap);
    va_end(ap);
    return code;
}

void bsipipe_error_clear(void)
{
    error_detail[0] = '\0';
}
