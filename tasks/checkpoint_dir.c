/* checkpoint_dir.c: a checkpoint directory as a whole: whether it holds a
 * checkpoint, and the lock one run holds on it (flock on DIR/.checkpoint.lock,
 * so two runs never write the same directory), which also clears the stale
 * temporaries a run that died left there. docs/checkpoint.md. */
#include "tasks/engine_internal.h"
#include "tasks/checkpoint_format.h"
#include "base/bsipipe_error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_LOCK ".checkpoint.lock"

/* ---- the directory: existence, lock, stale temporaries ---- */

int bsipipe_checkpoint_exists(const char *dir)
{
    if (!dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no directory");
    char *path = ckpt_path_join(dir, CKPT_FILE);
    if (!path)
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    struct stat st;
    int rc = lstat(path, &st) == 0 ? 1 : errno == ENOENT ? 0 : -errno;
    if (rc < 0)
        bsipipe_error_set(rc, "checkpoint: cannot look at %s: %s", path, strerror(-rc));
    free(path);
    return rc;
}

struct bsipipe_checkpoint_lock {
    int fd;
    char *path;
};

/* Removes DIR/.checkpoint.bin.<pid>.tmp of processes that no longer exist
 * (runs killed in the middle of a save). Called with the lock held. */
static int remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long pid;
        int end = 0;
        if (sscanf(de->d_name, "." CKPT_FILE ".%ld.tmp%n", &pid, &end) != 1 || de->d_name[end] != '\0' || pid <= 0)
            continue;
        if (!ckpt_temp_is_stale(pid))
            continue; /* alive (or not ours to probe): its save may be under way */
        char *p = ckpt_path_join(dir, de->d_name);
        if (p && unlink(p) == 0)
            removed++;
        free(p);
    }
    closedir(d);
    return removed;
}

int bsipipe_checkpoint_lock(const char *dir, bsipipe_checkpoint_lock_t **out)
{
    *out = NULL;
    if (!dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no directory");
    bsipipe_checkpoint_lock_t *l = calloc(1, sizeof *l);
    if (!l || !(l->path = ckpt_path_join(dir, CKPT_LOCK))) {
        free(l);
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    }
    for (int tries = 0;; tries++) {
        l->fd = open(l->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (l->fd < 0) {
            int err = errno;
            int rc = err == ENOENT ? bsipipe_error_set(-ENOENT, "checkpoint directory %s does not exist", dir)
                                   : bsipipe_error_set(-err, "checkpoint: cannot create the lock %s: %s", l->path,
                                                       strerror(err));
            free(l->path);
            free(l);
            return rc;
        }
        if (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno;
            char buf[32] = "";
            ssize_t n = err == EWOULDBLOCK ? pread(l->fd, buf, sizeof buf - 1, 0) : -1;
            long pid = 0;
            if (n > 0)
                buf[n] = 0, pid = strtol(buf, NULL, 10);
            close(l->fd);
            int rc;
            char who[48] = "another process";
            if (pid > 0)
                snprintf(who, sizeof who, "process %ld", pid);
            if (err == EWOULDBLOCK)
                rc = bsipipe_error_set(-EBUSY, "checkpoint directory %s is in use by %s (it holds the lock %s); "
                                       "wait for that run to end, stop it, or use another --checkpoint directory",
                                       dir, who, l->path);
            else
                rc = bsipipe_error_set(-err, "checkpoint: cannot lock %s: %s", l->path, strerror(err));
            free(l->path);
            free(l);
            return rc;
        }
        /* The holder before us may have unlinked the file between our open
         * and our flock: then we hold a lock on a name nobody sees; retry. */
        struct stat a, b;
        if (fstat(l->fd, &a) == 0 && stat(l->path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            break;
        close(l->fd);
        if (tries > 100) {
            free(l->path);
            free(l);
            return bsipipe_error_set(-EBUSY, "checkpoint: cannot lock %s: it keeps being replaced", dir);
        }
    }
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, buf, (size_t)n, 0) != n) {
        int err = errno;
        bsipipe_checkpoint_unlock(l);
        return bsipipe_error_set(-err, "checkpoint: cannot write the lock %s: %s", dir, strerror(err));
    }
    remove_stale_temps(dir);
    engine_ckpt_keep_remove_stale(dir);
    *out = l;
    return 0;
}

void bsipipe_checkpoint_unlock(bsipipe_checkpoint_lock_t *l)
{
    if (!l)
        return;
    unlink(l->path); /* while still locked: a waiter then sees a fresh file */
    close(l->fd);
    free(l->path);
    free(l);
}
