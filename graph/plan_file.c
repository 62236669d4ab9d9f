/* plan_file.c: a plan file read whole, within a size bound, for the JSON
 * import (bsipipe_import.c) and torch's CSV (torch_csv.c). Opened without
 * blocking (a FIFO with no writer must not hang the planner), and refused
 * unless it is a regular file. */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int plan_file_read(const char *path, long max_bytes, char **out, long *len)
{
    *out = NULL;
    /* Non-blocking open: a FIFO with no writer must not block it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return bsipipe_error_set(-e, "%s: cannot open the plan: %s", path, strerror(e));
    }
    struct stat st;
    int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (!regular) {
        close(fd);
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: not a regular file (a FIFO, a terminal or a device): write "
                                 "the plan to a file", path);
    }
    if (st.st_size > max_bytes) {
        close(fd);
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: %ld MiB, more than the %ld MiB a plan file may have",
                                 path, (long)(st.st_size >> 20), max_bytes >> 20);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return bsipipe_error_set(-e, "%s: cannot read the plan: %s", path, strerror(e));
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t got = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!text)
        return bsipipe_error_set(-ENOMEM, "%s: out of memory reading %ld bytes", path, (long)st.st_size);
    text[got] = '\0';
    *out = text;
    *len = (long)got;
    return 0;
}
