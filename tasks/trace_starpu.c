/* trace_starpu.c: StarPU's FxT trace of a run and StarPU's tools on it
 * (docs/tracing.md).
 *
 * bsipipe_trace_begin points StarPU's FxT tracing at the trace directory
 * before starpu_init; starpu_shutdown writes the raw file; bsipipe_trace_end
 * runs starpu_fxt_tool on it (paje.trace, dag.dot, tasks.rec, trace.rec ...),
 * puts paje.trace's events in time order and colours its task states like
 * the planner's SVG, and limits dag.dot to the engine's ops, labelled with
 * the ops they ran (DIR/ops.tsv, written by bsipipe_engine_trace_write).
 *
 * Task names are the codelets' model symbols (bsipipe_fwd, bsipipe_bwd ...:
 * engine_perfmodel.c), without blanks, so paje.trace as StarPU's own
 * converter writes it (run by hand on the raw file) is read by Paje readers
 * and StarPU's scripts group by those few names. */
#include "tasks/engine_internal.h"
#include "tasks/trace_internal.h"
#include "base/bsipipe_error.h"

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef BSIPIPE_STARPU_BINDIR
#define BSIPIPE_STARPU_BINDIR ""
#endif

#define RAW_SUFFIX "prof_file"

/* ---- the trace directory and StarPU's FxT environment ---------------------------------- */

/* STARPU_CALIBRATE: a traced run records its codelets' times into their
 * performance models (unless the user set it), so that every Model: of its
 * tasks.rec exists for starpu_tasks_rec_complete and starpu_perfmodel_display;
 * STARPU_HISTORY_MAX_ERROR: the tiny codelets (STEP, SYNC) vary by more than
 * StarPU's 50 %, which would print a warning and flush their models. */
enum { N_VARS = 5 };
static const char *const fxt_vars[N_VARS] = {"STARPU_FXT_PREFIX", "STARPU_FXT_SUFFIX", "STARPU_FXT_TRACE",
                                             "STARPU_CALIBRATE", "STARPU_HISTORY_MAX_ERROR"};
static char *saved_env[N_VARS];
static int saved_set[N_VARS], env_saved;

static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return bsipipe_error_set(-ENAMETOOLONG, "trace directory name too long: '%s'", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (stat(path, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return bsipipe_error_set(-ENOTDIR, "cannot use trace directory '%s': '%s' is not a directory",
                                         dir, path);
        } else if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            int err = errno;
            return bsipipe_error_set(-err, "cannot create trace directory '%s': %s", dir, strerror(err));
        }
        *p = c;
        if (c == '\0')
            break;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        int err = errno;
        return bsipipe_error_set(-err, "cannot write into trace directory '%s': %s", dir, strerror(err));
    }
    return 0;
}

static int recording; /* between bsipipe_trace_begin and bsipipe_trace_end */

int engine_trace_recording(void)
{
    return recording;
}

int bsipipe_trace_begin(const char *dir)
{
    if (!dir || !*dir)
        return bsipipe_error_set(-EINVAL, "trace: no directory given");
    int rc = make_dirs(dir);
    if (rc < 0)
        return rc;
    if (!env_saved) {
        for (int i = 0; i < N_VARS; i++) {
            const char *v = getenv(fxt_vars[i]);
            saved_set[i] = v != NULL;
            free(saved_env[i]);
            saved_env[i] = v ? strdup(v) : NULL;
        }
        env_saved = 1;
    }
    setenv("STARPU_FXT_PREFIX", dir, 1);
    setenv("STARPU_FXT_SUFFIX", RAW_SUFFIX, 1);
    setenv("STARPU_FXT_TRACE", "1", 1);
    setenv("STARPU_CALIBRATE", "1", 0);
    setenv("STARPU_HISTORY_MAX_ERROR", "10000", 0);
    recording = 1;
    return 0;
}

static void restore_env(void)
{
    if (!env_saved)
        return;
    for (int i = 0; i < N_VARS; i++) {
        if (saved_set[i] && saved_env[i])
            setenv(fxt_vars[i], saved_env[i], 1);
        else
            unsetenv(fxt_vars[i]);
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
    env_saved = 0;
}

/* ---- starpu_fxt_tool ------------------------------------------------------------------- */

/* Newest DIR/prof_file_<id> (the id is StarPU's process id, 0 without MPI). */
static int find_raw(const char *dir, char *out, size_t len)
{
    DIR *d = opendir(dir);
    if (!d) {
        int err = errno;
        return bsipipe_error_set(-err, "trace: cannot read directory '%s': %s", dir, strerror(err));
    }
    struct dirent *de;
    time_t best = 0;
    int found = 0;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, RAW_SUFFIX "_", sizeof RAW_SUFFIX) != 0)
            continue;
        char path[4096];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path || stat(path, &st) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (!found || st.st_mtime >= best) {
            snprintf(out, len, "%s", path);
            best = st.st_mtime;
            found = 1;
        }
    }
    closedir(d);
    return found ? 0
                 : bsipipe_error_set(-ENOENT, "trace: no raw FxT trace (%s_*) in '%s': did the engine start and "
                                     "shut down StarPU after bsipipe_trace_begin?", RAW_SUFFIX, dir);
}

static int executable(const char *path)
{
    struct stat st;
    return path && *path && stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The tool's path, or "starpu_fxt_tool" to look up on PATH. */
static void find_tool(char *out, size_t len)
{
    const char *env = getenv("STARPU_FXT_TOOL");
    if (executable(env)) {
        snprintf(out, len, "%s", env);
        return;
    }
    const char *dirs[2] = {getenv("STARPU_BINDIR"), BSIPIPE_STARPU_BINDIR};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i] || !*dirs[i])
            continue;
        snprintf(out, len, "%s/starpu_fxt_tool", dirs[i]);
        if (executable(out))
            return;
    }
    snprintf(out, len, "starpu_fxt_tool");
}

/* One event line of paje.trace, for sorting by time (definitions: -inf). */
typedef struct paje_event {
    double key;
    size_t index;
    char *text;
} paje_event_t;

static int cmp_paje_event(const void *a, const void *b)
{
    const paje_event_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Rewrites paje.trace: events in time order, and the colour of every task
 * state from the task's name; StarPU's own states keep theirs. (The file as
 * StarPU writes it is valid Paje already: the names hold no blanks.) */
static int rewrite_paje(const char *dir)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/paje.trace", dir);
    snprintf(tmp, sizeof tmp, "%s/.paje.trace.%ld.tmp", dir, (long)getpid());
    FILE *in = fopen(path, "r");
    if (!in) {
        int err = errno;
        return bsipipe_error_set(-err, "trace: starpu_fxt_tool wrote no '%s': %s", path, strerror(err));
    }
    enum { MAX_FIELDS = 64 };
    char *line = NULL, *f[MAX_FIELDS], define[16] = "";
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    enum { MAX_EVENT_ID = 4096 };
    unsigned char timed[MAX_EVENT_ID] = {0}; /* event ids whose first field is a time */
    int last_def = -1;
    /* Pass 1: the timed event kinds and the id of entity-value definitions. */
    while (rc == 0 && (n = getline(&line, &cap, in)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        char name[64], id[16], field[64];
        if (line[0] == '%') {
            if (sscanf(line, "%%EventDef %63s %15s", name, id) == 2) {
                if (strcmp(name, "PajeDefineEntityValue") == 0)
                    snprintf(define, sizeof define, "%s", id);
                last_def = atoi(id);
            } else if (last_def >= 0 && sscanf(line, "%% %63s", field) == 1) {
                if (strcmp(field, "Time") == 0 && last_def < MAX_EVENT_ID)
                    timed[last_def] = 1;
                last_def = -1; /* only the first field tells */
            }
            continue;
        }
    }
    FILE *out = rc == 0 ? fopen(tmp, "w") : NULL;
    if (rc == 0 && !out)
        rc = -errno;
    /* Pass 2: write it again, the events in time order. StarPU 1.3's fxt
     * tool writes some events out of order (the states and variables of
     * several workers, data unregistrations), which Paje readers refuse
     * ("trace is not time-ordered"): the definitions, which carry no time,
     * come first in file order, then the timed events sorted by time,
     * stably. */
    paje_event_t *ev = NULL;
    size_t nev = 0, evcap = 0;
    char *buf = NULL;
    size_t buflen = 0;
    if (rc == 0)
        rewind(in);
    while (rc == 0 && (n = getline(&line, &cap, in)) > 0) {
        if (line[0] == '%') {
            fputs(line, out);
            continue;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        char *end;
        long id = strtol(line, &end, 10);
        double key = id >= 0 && id < MAX_EVENT_ID && timed[id] ? strtod(end, NULL) : -INFINITY;
        int nf = trace_split_tabs(line, f, MAX_FIELDS);
        /* An entity value (id, alias, type, name, "r g b") of a task: its colour. */
        char colour[64] = "";
        if (nf == 5 && define[0] && strcmp(f[0], define) == 0 && strcmp(f[2], "WS") == 0) {
            unsigned c = trace_name_color(f[3]);
            if (c)
                snprintf(colour, sizeof colour, "\"%.6f %.6f %.6f\"", (c >> 16) / 255.0, ((c >> 8) & 0xff) / 255.0,
                         (c & 0xff) / 255.0);
        }
        FILE *ls = open_memstream(&buf, &buflen);
        if (!ls) { rc = -ENOMEM; break; }
        for (int i = 0; i < nf; i++) {
            const char *v = i == 4 && colour[0] ? colour : f[i];
            if (i)
                fputc('\t', ls);
            fputs(v, ls);
        }
        fputc('\n', ls);
        if (fclose(ls) != 0) { free(buf); buf = NULL; rc = -ENOMEM; break; }
        if (nev == evcap) {
            size_t nc = evcap ? 2 * evcap : 4096;
            paje_event_t *ne = realloc(ev, nc * sizeof *ne);
            if (!ne) { free(buf); buf = NULL; rc = -ENOMEM; break; }
            ev = ne;
            evcap = nc;
        }
        ev[nev] = (paje_event_t){key, nev, buf};
        nev++;
        buf = NULL;
    }
    if (nev)
        qsort(ev, nev, sizeof *ev, cmp_paje_event);
    for (size_t i = 0; i < nev; i++) {
        if (rc == 0)
            fputs(ev[i].text, out);
        free(ev[i].text);
    }
    free(ev);
    free(line);
    int rerr = ferror(in);
    fclose(in);
    if (rc < 0) {
        if (out)
            fclose(out);
        unlink(tmp);
        return bsipipe_error_set(rc, "trace: cannot rewrite '%s': %s", path, strerror(-rc));
    }
    if (fclose(out) != 0 || rerr || rename(tmp, path) != 0) {
        int err = errno ? errno : EIO;
        unlink(tmp);
        return bsipipe_error_set(-err, "trace: cannot rewrite '%s': %s", path, strerror(err));
    }
    return 0;
}

int bsipipe_trace_end(const char *dir)
{
    restore_env();
    recording = 0;
    if (!dir || !*dir)
        return bsipipe_error_set(-EINVAL, "trace: no directory given");
#ifndef STARPU_USE_FXT
    return bsipipe_error_set(-ENOTSUP, "trace: StarPU was built without FxT, so there is no paje.trace; "
                             "rebuild it with --with-fxt (scripts/setup.sh does)");
#else
    char raw[4096], tool[4096], log[4200];
    int rc = find_raw(dir, raw, sizeof raw);
    if (rc < 0)
        return rc;
    find_tool(tool, sizeof tool);
    snprintf(log, sizeof log, "%s/starpu_fxt_tool.log", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        return bsipipe_error_set(-err, "trace: cannot start starpu_fxt_tool: %s", strerror(err));
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        char *argv[] = {tool, "-i", raw, "-d", (char *)dir, NULL};
        if (strchr(tool, '/'))
            execv(tool, argv);
        else
            execvp(tool, argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            int err = errno;
            return bsipipe_error_set(-err, "trace: waiting for starpu_fxt_tool: %s", strerror(err));
        }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return bsipipe_error_set(-ENOENT, "trace: starpu_fxt_tool not found (set STARPU_FXT_TOOL or "
                                 "STARPU_BINDIR); convert by hand: starpu_fxt_tool -i %s -d %s", raw, dir);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return bsipipe_error_set(-EIO, "trace: %s -i %s -d %s failed (%s %d); see %s", tool, raw, dir,
                                 WIFEXITED(status) ? "exit status" : "signal",
                                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), log);
    rc = rewrite_paje(dir);
    return rc < 0 ? rc : trace_dag_filter(dir);
#endif
}
