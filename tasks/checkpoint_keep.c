/* checkpoint_keep.c: the checkpoints of earlier saves kept beside the
 * latest one. After a save, DIR's checkpoint (checkpoint.bin and, across
 * ranks, the parts its manifest names) is linked into DIR/iter_NNNNNNN/ (the
 * iteration the checkpoint stores, seven digits, as Megatron names its
 * directories), which is itself a checkpoint directory that
 * bsipipe_engine_load reads; then the kept directories beyond the newest N
 * go. Hard links cost no copy and stay valid when the next save replaces
 * DIR's own names (a rename or an unlink removes a name, not the file); a
 * file system without hard links gets a copy. A kept directory is made
 * complete under a temporary name (.iter_NNNNNNN.<pid>.tmp) and renamed, so
 * a crash leaves either the whole directory or a temporary one the next
 * bsipipe_checkpoint_lock removes. docs/checkpoint.md. */
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
#include <sys/stat.h>
#include <unistd.h>

#define KEPT_FORMAT "iter_%07ld"

/* The kept directory's name for iteration `it`, or -1 if `name` is not one
 * (exactly "iter_" and at least seven digits, as KEPT_FORMAT writes). */
static long kept_iteration(const char *name)
{
    if (strncmp(name, "iter_", 5) != 0)
        return -1;
    const char *d = name + 5;
    size_t n = strspn(d, "0123456789");
    if (n < 7 || n > 12 || d[n] != '\0')
        return -1;
    return strtol(d, NULL, 10);
}

/* Removes the files of a kept (or half-made) directory that a checkpoint
 * consists of, then the directory; anything else in it (a user's file)
 * makes the rmdir fail and is left alone. 0 or -errno. */
static int kept_remove(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, CKPT_FILE) != 0 && !ckpt_is_part_name(de->d_name))
            continue;
        char *f = ckpt_path_join(path, de->d_name);
        if (f)
            unlink(f);
        free(f);
    }
    closedir(d);
    return rmdir(path) == 0 ? 0 : -errno;
}

/* Removes DIR/.iter_NNNNNNN.<pid>.tmp of processes that no longer exist. */
void engine_ckpt_keep_remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        long it, pid;
        int end = 0;
        if (sscanf(de->d_name, ".iter_%ld.%ld.tmp%n", &it, &pid, &end) != 2 || de->d_name[end] != '\0' || pid <= 0)
            continue;
        if (!ckpt_temp_is_stale(pid))
            continue;
        char *p = ckpt_path_join(dir, de->d_name);
        if (p)
            kept_remove(p);
        free(p);
    }
    closedir(d);
}

/* dst as a copy of src (O_EXCL), fsync'ed. 0 or -errno. */
static int copy_file(const char *src, const char *dst)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (out < 0) {
        int err = errno;
        close(in);
        return -err;
    }
    static char buf[1 << 16];
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : 0;
            break;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t m = write(out, buf + off, (size_t)(n - off));
            if (m < 0 && errno == EINTR)
                continue;
            if (m < 0) {
                rc = -errno;
                break;
            }
            off += m;
        }
        if (rc)
            break;
    }
    if (rc == 0 && fsync(out) != 0)
        rc = -errno;
    close(in);
    if (close(out) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

/* DIR/name into tmp/name: a hard link, or a copy where the file system has
 * none. 0 or a negative code with a detail. */
static int keep_file(const char *dir, const char *tmp, const char *name)
{
    char *src = ckpt_path_join(dir, name), *dst = ckpt_path_join(tmp, name);
    int rc = 0;
    if (!src || !dst)
        rc = bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    else if (link(src, dst) != 0) {
        int err = errno;
        if (err == EPERM || err == EMLINK || err == ENOTSUP || err == EOPNOTSUPP || err == ENOSYS)
            err = -copy_file(src, dst);
        if (err)
            rc = bsipipe_error_set(-err, "checkpoint: cannot keep %s as %s: %s", src, dst, strerror(err));
    }
    free(src);
    free(dst);
    return rc;
}

/* The iteration DIR/checkpoint.bin stores and, for a manifest, its header
 * (the part names); *h stays empty for a version-1 file, of which only the
 * fixed header is read (it may be gigabytes). */
static int read_kept_header(const char *dir, long *iteration, ckpt_header_t *h)
{
    char *path = ckpt_path_join(dir, CKPT_FILE);
    if (!path)
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    unsigned char fixed[CKPT_FIXED_BYTES];
    int rc = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        rc = bsipipe_error_set(-errno, "checkpoint: nothing to keep: cannot open %s: %s", path, strerror(errno));
    else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || pread(fd, fixed, sizeof fixed, 0) != (ssize_t)sizeof fixed ||
             memcmp(fixed, CKPT_MAGIC, 8) != 0)
        rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: nothing to keep: %s is not a checkpoint", path);
    if (fd >= 0)
        close(fd);
    if (rc == 0 && ckpt_get_u32(fixed + OFF_VERSION) == CKPT_VERSION_MANIFEST) {
        unsigned char *img = NULL;
        uint64_t size = 0;
        if ((rc = ckpt_file_read(path, &img, &size)) == 0)
            rc = ckpt_image_parse(path, img, size, h);
        free(img);
    }
    if (rc == 0)
        *iteration = (long)ckpt_get_i64(fixed + OFF_ITER);
    free(path);
    return rc;
}

static int cmp_long_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* Removes the kept directories of DIR beyond the newest keep_last. */
static void prune_kept(const char *dir, int keep_last)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    long *its = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long it = kept_iteration(de->d_name);
        if (it < 0)
            continue;
        if (n == cap) {
            long *g = realloc(its, (cap = cap ? 2 * cap : 16) * sizeof *its);
            if (!g)
                break;
            its = g;
        }
        its[n++] = it;
    }
    closedir(d);
    qsort(its, n, sizeof *its, cmp_long_desc);
    for (size_t i = (size_t)keep_last; i < n; i++) {
        char name[32], *p;
        snprintf(name, sizeof name, KEPT_FORMAT, its[i]);
        if ((p = ckpt_path_join(dir, name)))
            kept_remove(p);
        free(p);
    }
    free(its);
}

int bsipipe_checkpoint_keep(const char *dir, int keep_last, long *iteration)
{
    if (!dir || !*dir || keep_last < 1)
        return bsipipe_error_set(-EINVAL, "checkpoint: keep needs a directory and keep_last >= 1 (got %d)", keep_last);
    long it = 0;
    ckpt_header_t h;
    memset(&h, 0, sizeof h);
    int rc = read_kept_header(dir, &it, &h);
    char name[32], tmpname[64];
    snprintf(name, sizeof name, KEPT_FORMAT, it);
    snprintf(tmpname, sizeof tmpname, "." KEPT_FORMAT ".%ld.tmp", it, (long)getpid());
    char *final = rc ? NULL : ckpt_path_join(dir, name), *tmp = rc ? NULL : ckpt_path_join(dir, tmpname);
    if (rc == 0 && (!final || !tmp))
        rc = bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    if (rc == 0 && tmp) {
        kept_remove(tmp); /* ours, from an earlier failed call */
        if (mkdir(tmp, 0777) != 0)
            rc = bsipipe_error_set(-errno, "checkpoint: cannot create %s: %s", tmp, strerror(errno));
    }
    for (uint32_t p = 0; rc == 0 && p < h.n_parts; p++)
        rc = keep_file(dir, tmp, h.part[p].name);
    if (rc == 0)
        rc = keep_file(dir, tmp, CKPT_FILE); /* the manifest last: the parts it names are there */
    if (rc == 0) {
        /* The same iteration kept before (a run resumed from an earlier
         * checkpoint saves it again): the newer save replaces it. */
        struct stat st;
        if (lstat(final, &st) == 0 && S_ISDIR(st.st_mode) && (rc = kept_remove(final)) < 0)
            rc = bsipipe_error_set(rc, "checkpoint: cannot replace %s, kept before: %s (remove it)", final,
                                   strerror(-rc));
    }
    if (rc == 0 && rename(tmp, final) != 0)
        rc = bsipipe_error_set(-errno, "checkpoint: cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (rc < 0 && tmp)
        kept_remove(tmp);
    if (rc == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        prune_kept(dir, keep_last);
        if (iteration)
            *iteration = it;
    }
    ckpt_header_clear(&h);
    free(final);
    free(tmp);
    return rc;
}
