/* engine_checkpoint.c: save and resume an engine's training state
 * (parameters, AdamW moments, step count) as DIR/checkpoint.bin.
 *
 * Saving is atomic: the file is written as a temporary in DIR, fsync'ed,
 * renamed over the previous checkpoint, and DIR is fsync'ed, so a crash at
 * any point leaves either the old or the new checkpoint, never a mix.
 * Loading reads and checks the whole file (size, magic, version, CRC-32,
 * configuration) before it writes anything into the engine.
 * The format is described in docs/checkpoint.md. */
#include "tasks/engine_internal.h"
#include "tasks/checkpoint_format.h"
#include "graph/bsipipe_error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FILE "checkpoint.bin"
#define CKPT_LOCK ".checkpoint.lock"
enum { CKPT_BUF = 1 << 20 }; /* write buffer */

/* n floats as little-endian binary32 into dst (memcpy on little-endian hosts). */
static void floats_to_le(unsigned char *dst, const float *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * sizeof(float));
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        ckpt_put_u32(dst + 4 * i, u);
    }
#endif
}

static void floats_from_le(float *dst, const unsigned char *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * sizeof(float));
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u = ckpt_get_u32(src + 4 * i);
        memcpy(&dst[i], &u, 4);
    }
#endif
}

/* ---- the header: what this engine writes, and expects to read ---- */

static int n_replicas(const bsipipe_engine_t *e)
{
    return bsipipe_schedule_n_pipes(e->sched) * e->C;
}

/* e's header (h->rep: malloc'ed, ckpt_header_clear frees); -ENOMEM. */
static int engine_header(const bsipipe_engine_t *e, long iteration, ckpt_header_t *h)
{
    memset(h, 0, sizeof *h);
    const bsipipe_model_dims_t *d = &e->dims;
    const bsipipe_parallel_config_t *pc = &e->o.pc;
    const bsipipe_adamw_t *o = &e->o.opt;
    int32_t dims[7] = {(int32_t)d->family, d->n_layers, d->hidden, d->n_heads, d->ffn_hidden, d->vocab, d->seq_len};
    int32_t pcv[7] = {(int32_t)pc->schedule, pc->w, pc->p, pc->k, pc->m, pc->tp, (int32_t)pc->partition};
    double opt[6] = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->grad_clip};
    memcpy(h->dims, dims, sizeof dims);
    memcpy(h->pc, pcv, sizeof pcv);
    memcpy(h->opt, opt, sizeof opt);
    h->seed = (uint64_t)e->o.seed;
    h->steps = e->steps;
    h->iteration = iteration;
    h->pipes = (uint32_t)bsipipe_schedule_n_pipes(e->sched);
    h->chunks = (uint32_t)e->C;
    int n = n_replicas(e);
    if (!(h->rep = malloc(sizeof *h->rep * (size_t)n)))
        return -ENOMEM;
    for (int i = 0; i < n; i++)
        h->rep[i] = (ckpt_replica_t){i / e->C, i % e->C, e->rep[i].device, e->rep[i].base, e->rep[i].n};
    return 0;
}

/* DIR/checkpoint.bin (or another name in DIR); caller frees. */
static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---- save ---- */

typedef struct writer {
    int fd;
    const char *path;
    unsigned char *buf;
    size_t len;
    ckpt_crc_t crc;
} writer_t;

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int writer_flush(writer_t *w)
{
    int rc = write_all(w->fd, w->buf, w->len);
    w->len = 0;
    return rc;
}

/* Appends bytes (checksummed unless raw). */
static int writer_put(writer_t *w, const unsigned char *p, size_t n, int raw)
{
    if (!raw)
        ckpt_crc_update(&w->crc, p, n);
    while (n > 0) {
        size_t k = CKPT_BUF - w->len < n ? CKPT_BUF - w->len : n;
        memcpy(w->buf + w->len, p, k);
        w->len += k;
        p += k;
        n -= k;
        if (w->len == CKPT_BUF) {
            int rc = writer_flush(w);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Appends a float vector of a StarPU handle (acquired for reading). */
static int writer_put_handle(writer_t *w, starpu_data_handle_t h, long n)
{
    starpu_data_acquire(h, STARPU_R);
    const float *src = (const float *)starpu_data_get_local_ptr(h);
    int rc = 0;
    enum { CHUNK = 1 << 14 };
    unsigned char tmp[4 * CHUNK];
    for (long i = 0; i < n && rc == 0; i += CHUNK) {
        size_t k = (size_t)(n - i < CHUNK ? n - i : CHUNK);
        floats_to_le(tmp, src + i, k);
        rc = writer_put(w, tmp, 4 * k, 0);
    }
    starpu_data_release(h);
    return rc;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
        rc = -errno; /* some file systems cannot sync a directory: not an error */
    close(fd);
    return rc;
}

int bsipipe_engine_save(bsipipe_engine_t *e, const char *dir, long iteration)
{
    if (!e || !dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no engine or no directory");
    if (e->mpi)
        return bsipipe_error_set(-ENOTSUP, "checkpoint: not supported across MPI ranks yet (each rank holds only its "
                                           "own replicas and records); run in one process");
    if (iteration < 0 || iteration > CKPT_MAX_COUNT)
        return bsipipe_error_set(-EINVAL, "checkpoint: iteration %ld is outside 0..%d", iteration, CKPT_MAX_COUNT);
    struct stat st;
    if (stat(dir, &st) != 0) {
        int err = errno;
        return bsipipe_error_set(-err, "checkpoint: cannot use directory %s: %s", dir, strerror(err));
    }
    if (!S_ISDIR(st.st_mode))
        return bsipipe_error_set(-ENOTDIR, "checkpoint: %s is not a directory", dir);
    if (engine_failed(e))
        return bsipipe_error_set(-EINVAL, "checkpoint: the engine's last iteration failed (%s): its state is not "
                                 "saved", bsipipe_strerror(engine_failed(e)));

    char tmpname[64];
    snprintf(tmpname, sizeof tmpname, "." CKPT_FILE ".%ld.tmp", (long)getpid());
    char *final = join(dir, CKPT_FILE), *tmp = join(dir, tmpname);
    writer_t w = {.fd = -1, .path = tmp, .buf = malloc(CKPT_BUF)};
    ckpt_header_t h;
    int hrc = engine_header(e, iteration, &h);
    unsigned char *hdr = hrc == 0 ? malloc(ckpt_header_bytes(&h)) : NULL;
    int rc = 0, fd;
    const char *what = "";
    if (!final || !tmp || !w.buf || !hdr) {
        rc = bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
        goto out;
    }
    /* O_EXCL | O_NOFOLLOW: never write through a name someone planted (a
     * symlink, or a file of another run). A leftover of ours (this pid's, from
     * a run that died, or a planted link) is unlinked (the name only, never
     * what it points to) and the create retried once. */
    w.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (w.fd < 0 && errno == EEXIST && unlink(tmp) == 0)
        w.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (w.fd < 0) {
        rc = -errno;
        what = "cannot create";
        goto fail;
    }
    ckpt_crc_init(&w.crc);
    ckpt_header_encode(&h, hdr);
    what = "cannot write";
    if ((rc = writer_put(&w, hdr, ckpt_header_bytes(&h), 0)) < 0)
        goto fail;
    /* Pipe-major replicas; params, m, v of each. */
    for (int i = 0; i < n_replicas(e); i++) {
        replica_t *r = &e->rep[i];
        if ((rc = writer_put_handle(&w, r->h_params, r->n)) < 0 || (rc = writer_put_handle(&w, r->h_m, r->n)) < 0 ||
            (rc = writer_put_handle(&w, r->h_v, r->n)) < 0)
            goto fail;
    }
    unsigned char crc[4];
    ckpt_put_u32(crc, ckpt_crc_final(&w.crc));
    if ((rc = writer_put(&w, crc, sizeof crc, 1)) < 0 || (rc = writer_flush(&w)) < 0)
        goto fail;
    what = "cannot sync";
    if (fsync(w.fd) != 0) {
        rc = -errno;
        goto fail;
    }
    what = "cannot close";
    fd = w.fd;
    w.fd = -1;
    if (close(fd) != 0) {
        rc = -errno;
        goto fail;
    }
    if (rename(tmp, final) != 0) {
        int err = errno;
        unlink(tmp);
        rc = bsipipe_error_set(-err, "checkpoint: cannot rename %s to %s: %s", tmp, final, strerror(err));
        goto out;
    }
    if ((rc = fsync_dir(dir)) < 0) { /* the new file is in place; only its durability is in doubt */
        rc = bsipipe_error_set(rc, "checkpoint: wrote %s but cannot sync directory %s: %s", final, dir,
                               strerror(-rc));
        goto out;
    }
    goto out;
fail:
    if (w.fd >= 0)
        close(w.fd);
    unlink(tmp);
    rc = bsipipe_error_set(rc, "checkpoint: %s %s: %s (the previous checkpoint, if any, is intact)", what, tmp,
                           strerror(-rc));
out:
    ckpt_header_clear(&h);
    free(hdr);
    free(w.buf);
    free(tmp);
    free(final);
    return rc;
}

/* ---- load ---- */

/* Checks a checkpoint image on its own, then against engine e; 0 and *h
 * (the image's header, caller clears it), or an error with a detail. */
static int check_image(const bsipipe_engine_t *e, const char *path, const unsigned char *b, uint64_t size,
                       ckpt_header_t *h)
{
    int rc = ckpt_image_parse(path, b, size, h);
    if (rc < 0)
        return rc;
    ckpt_header_t want;
    if (engine_header(e, 0, &want) < 0)
        rc = bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    else
        rc = ckpt_header_match(path, &want, h);
    ckpt_header_clear(&want);
    if (rc < 0)
        ckpt_header_clear(h);
    return rc;
}

static void set_handle(starpu_data_handle_t h, const unsigned char *src, long n)
{
    starpu_data_acquire(h, STARPU_W);
    floats_from_le((float *)starpu_data_get_local_ptr(h), src, (size_t)n);
    starpu_data_release(h);
}

int bsipipe_engine_load(bsipipe_engine_t *e, const char *dir, long *iteration)
{
    if (!e || !dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no engine or no directory");
    if (e->mpi)
        return bsipipe_error_set(-ENOTSUP, "checkpoint: not supported across MPI ranks yet (each rank holds only its "
                                           "own replicas and records); run in one process");
    char *path = join(dir, CKPT_FILE);
    if (!path)
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    unsigned char *b = NULL;
    uint64_t size = 0;
    ckpt_header_t h = {0};
    int rc = ckpt_file_read(path, &b, &size);
    if (rc == 0)
        rc = check_image(e, path, b, size, &h);
    if (rc == 0) { /* everything checked: only now touch the engine */
        starpu_task_wait_for_all();
        const unsigned char *p = b + ckpt_header_bytes(&h);
        for (int i = 0; i < n_replicas(e); i++) {
            replica_t *r = &e->rep[i];
            set_handle(r->h_params, p, r->n);
            p += 4 * (size_t)r->n;
            set_handle(r->h_m, p, r->n);
            p += 4 * (size_t)r->n;
            set_handle(r->h_v, p, r->n);
            p += 4 * (size_t)r->n;
        }
        e->steps = (long)h.steps;
        if (iteration)
            *iteration = (long)h.iteration;
    }
    ckpt_header_clear(&h);
    free(b);
    free(path);
    return rc;
}

/* ---- the directory: existence, lock, stale temporaries ---- */

int bsipipe_checkpoint_exists(const char *dir)
{
    if (!dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no directory");
    char *path = join(dir, CKPT_FILE);
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
        if (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
            continue; /* alive (or not ours to probe): its save may be under way */
        char *p = join(dir, de->d_name);
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
    if (!l || !(l->path = join(dir, CKPT_LOCK))) {
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
