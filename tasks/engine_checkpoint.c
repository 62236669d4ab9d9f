/* engine_checkpoint.c: save and resume an engine's training state
 * (parameters, AdamW moments, step count) as DIR/checkpoint.bin.
 *
 * Saving is atomic: the file is written as a temporary in DIR, fsync'ed,
 * renamed over the previous checkpoint, and DIR is fsync'ed, so a crash at
 * any point leaves either the old or the new checkpoint, never a mix.
 * Loading reads and checks the whole file (size, magic, version, CRC-32,
 * layout, then configuration) before it writes anything into the engine.
 * The format is described in docs/checkpoint.md; its encoding and every
 * check of the bytes read back are in checkpoint_format.c (no StarPU, so
 * fuzz/fuzz_checkpoint.c runs them too). */
#include "tasks/engine_internal.h"
#include "tasks/checkpoint_format.h"
#include "base/bsipipe_error.h"
#include "kernels/bsipipe_tp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    CKPT_BUF = 1 << 20,       /* write buffer */
};

/* ---- the header ---- */

static int n_replicas(const bsipipe_engine_t *e)
{
    return bsipipe_schedule_n_pipes(e->sched) * e->C;
}

/* The version-1 header of engine e at `iteration` (the one its load
 * expects, and its save writes); rep is allocated: ckpt_header_clear. */
static int engine_header(const bsipipe_engine_t *e, long iteration, ckpt_header_t *h)
{
    memset(h, 0, sizeof *h);
    h->version = CKPT_VERSION;
    const bsipipe_model_dims_t *d = &e->dims;
    int32_t dims[7] = {(int32_t)d->family, d->n_layers, d->hidden, d->n_heads, d->ffn_hidden, d->vocab, d->seq_len};
    const bsipipe_parallel_config_t *pc = &e->o.pc;
    int32_t pcv[7] = {(int32_t)pc->schedule, pc->w, pc->p, pc->k, pc->m, pc->tp, (int32_t)pc->partition};
    const bsipipe_adamw_t *o = &e->o.opt;
    double opt[6] = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->grad_clip};
    memcpy(h->dims, dims, sizeof dims);
    memcpy(h->pc, pcv, sizeof pcv);
    memcpy(h->opt, opt, sizeof opt);
    h->seed = (uint64_t)e->o.seed;
    h->steps = (int64_t)e->steps;
    h->iteration = (int64_t)iteration;
    h->pipes = (uint32_t)bsipipe_schedule_n_pipes(e->sched);
    h->chunks = (uint32_t)e->C;
    if (!(h->rep = calloc((size_t)n_replicas(e), sizeof *h->rep)))
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    uint64_t off = CKPT_FIXED_BYTES + (uint64_t)n_replicas(e) * CKPT_REPLICA_BYTES;
    for (int i = 0; i < n_replicas(e); i++) {
        ckpt_replica_t *r = &h->rep[i];
        r->pipe = i / e->C;
        r->chunk = i % e->C;
        r->device = e->rep[i].device;
        r->base = e->rep[i].base;
        r->n = e->rep[i].n;
        r->offset = off;
        off += 12 * (uint64_t)r->n;
    }
    return 0;
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

/* Appends n floats from memory. */
static int writer_put_floats(writer_t *w, const float *src, long n)
{
    int rc = 0;
    enum { CHUNK = 1 << 14 };
    unsigned char tmp[4 * CHUNK];
    for (long i = 0; i < n && rc == 0; i += CHUNK) {
        size_t k = (size_t)(n - i < CHUNK ? n - i : CHUNK);
        ckpt_floats_to_le(tmp, src + i, k);
        rc = writer_put(w, tmp, 4 * k, 0);
    }
    return rc;
}

/* Appends a float vector of a StarPU handle (acquired for reading). */
static int writer_put_handle(writer_t *w, starpu_data_handle_t h, long n)
{
    starpu_data_acquire(h, STARPU_R);
    int rc = writer_put_floats(w, (const float *)starpu_data_get_local_ptr(h), n);
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

/* The checks every rank makes before it writes anything. */
static int save_checks(bsipipe_engine_t *e, const char *dir, long iteration)
{
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
    char where[192];
    int rc = engine_ckpt_state_finite(e, where, sizeof where);
    if (rc == -EDOM)
        return bsipipe_error_set(rc, "checkpoint: the state of iteration %ld is not finite: %s; it is not saved "
                                 "(the previous checkpoint in %s, if any, is intact). Training diverged: lower the "
                                 "learning rate, or resume from an earlier checkpoint", iteration, where, dir);
    return rc;
}

static int save_single(bsipipe_engine_t *e, const char *dir, long iteration);
static int save_ranks(bsipipe_engine_t *e, const char *dir, long iteration, int rc);
static void remove_parts(const char *dir, const ckpt_header_t *manifest);

int bsipipe_engine_save(bsipipe_engine_t *e, const char *dir, long iteration)
{
    if (!e || !dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no engine or no directory");
    int rc = save_checks(e, dir, iteration);
    if (e->mpi)
        return save_ranks(e, dir, iteration, rc);
    if (rc == 0 && (rc = save_single(e, dir, iteration)) == 0)
        remove_parts(dir, NULL); /* the parts of a multi-rank checkpoint it replaced */
    return rc;
}

/* Replica i's params, m and v into the file: its handles, or with tensor
 * parallelism its slice of the whole-model vectors, gathered from this
 * process's shards into full (3 P floats) once per pipe (*full_pipe: the
 * pipe gathered, -1 for none yet); *what says what failed. */
static int write_replica(struct bsipipe_engine *e, writer_t *w, int i, float *full, long P, int *full_pipe,
                         const char **what)
{
    const replica_t *r = &e->rep[i];
    int rc;
    if (e->T <= 1) {
        if ((rc = writer_put_handle(w, r->h_params, r->n)) < 0 || (rc = writer_put_handle(w, r->h_m, r->n)) < 0)
            return rc;
        return writer_put_handle(w, r->h_v, r->n);
    }
    if (i / e->C != *full_pipe && (rc = engine_ckpt_tp_full_pipe(e, *full_pipe = i / e->C, full, P)) < 0) {
        *what = "cannot gather the tensor-parallel shards for";
        return rc;
    }
    if ((rc = writer_put_floats(w, full + r->base, r->n)) < 0 || (rc = writer_put_floats(w, full + P + r->base, r->n)) < 0)
        return rc;
    return writer_put_floats(w, full + 2 * P + r->base, r->n);
}

static int save_single(bsipipe_engine_t *e, const char *dir, long iteration)
{
    char tmpname[64];
    snprintf(tmpname, sizeof tmpname, "." CKPT_FILE ".%ld.tmp", (long)getpid());
    char *final = ckpt_path_join(dir, CKPT_FILE), *tmp = ckpt_path_join(dir, tmpname);
    writer_t w = {.fd = -1, .path = tmp, .buf = malloc(CKPT_BUF)};
    ckpt_header_t h;
    int rc = engine_header(e, iteration, &h), fd;
    unsigned char *hdr = rc == 0 ? malloc((size_t)ckpt_header_bytes(&h)) : NULL;
    long P = bsipipe_engine_n_params(e);
    float *full = e->T > 1 ? malloc(3 * sizeof(float) * (size_t)P) : NULL; /* params, m, v of one pipe */
    const char *what = "";
    if (!final || !tmp || !w.buf || !hdr || (e->T > 1 && !full)) {
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
    if ((rc = writer_put(&w, hdr, (size_t)ckpt_header_bytes(&h), 0)) < 0)
        goto fail;
    /* Pipe-major replicas; params, m, v of each. With tensor parallelism
     * the replica's slice of the whole-model vectors, gathered from the
     * ranks' shards: the file is the one a D_t = 1 run writes, so any
     * degree resumes it. */
    for (int i = 0, full_pipe = -1; i < n_replicas(e); i++)
        if ((rc = write_replica(e, &w, i, full, P, &full_pipe, &what)) < 0)
            goto fail;
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
    free(full);
    free(hdr);
    free(w.buf);
    free(tmp);
    free(final);
    return rc;
}

/* ---- save across ranks: one part per rank, then a manifest ---- */

static void part_name(char *out, size_t len, long iteration, uint64_t nonce, int rank)
{
    snprintf(out, len, "checkpoint-i%ld-%016llx-r%d.part", iteration, (unsigned long long)nonce, rank);
}

/* Bytes of the part of rank r (its replicas' table, then their data). */
static uint64_t part_bytes(const bsipipe_engine_t *e, int r, int *n_rep)
{
    uint64_t floats = 0;
    int k = 0;
    for (int i = 0; i < n_replicas(e); i++)
        if (!e->dev_rank || e->dev_rank[e->rep[i].device] == r) {
            floats += 3 * (uint64_t)e->rep[i].n;
            k++;
        }
    if (n_rep)
        *n_rep = k;
    return PART_FIXED_BYTES + (uint64_t)k * PART_REPLICA_BYTES + 4 * floats + CKPT_CRC_BYTES;
}

/* Writes this rank's part as DIR/name (a new name: O_EXCL | O_NOFOLLOW, so
 * nothing planted is followed and nothing of the current checkpoint is
 * overwritten), fsyncs it and DIR. Its size and CRC-32 go to the manifest. */
static int write_part(bsipipe_engine_t *e, const char *dir, const char *name, long iteration, uint64_t nonce,
                      uint64_t *bytes, uint32_t *crc_out)
{
    char *path = ckpt_path_join(dir, name);
    writer_t w = {.fd = -1, .path = path, .buf = malloc(CKPT_BUF)};
    int k, rc = 0;
    uint64_t total = part_bytes(e, e->rank, &k);
    size_t hlen = PART_FIXED_BYTES + (size_t)k * PART_REPLICA_BYTES;
    unsigned char *h = calloc(1, hlen);
    long P = bsipipe_engine_n_params(e);
    float *full = e->T > 1 ? malloc(3 * sizeof(float) * (size_t)P) : NULL; /* params, m, v of one pipe */
    int full_pipe = -1;
    const char *what = "cannot create";
    if (!path || !w.buf || !h || (e->T > 1 && !full)) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((w.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)) < 0) {
        rc = -errno;
        goto fail;
    }
    memcpy(h, PART_MAGIC, 8);
    ckpt_put_u32(h + 8, 1);
    ckpt_put_u32(h + 12, (uint32_t)e->rank);
    ckpt_put_u64(h + 16, total);
    ckpt_put_u64(h + 24, (uint64_t)(int64_t)iteration);
    ckpt_put_u64(h + 32, nonce);
    ckpt_put_u32(h + 40, (uint32_t)k);
    for (int i = 0, j = 0; i < n_replicas(e); i++) {
        if (!engine_local(e, e->rep[i].device))
            continue;
        unsigned char *t = h + PART_FIXED_BYTES + (size_t)j++ * PART_REPLICA_BYTES;
        ckpt_put_u32(t, (uint32_t)(i / e->C));
        ckpt_put_u32(t + 4, (uint32_t)(i % e->C));
        ckpt_put_u32(t + 8, (uint32_t)e->rep[i].device);
        ckpt_put_u64(t + 16, (uint64_t)e->rep[i].base);
        ckpt_put_u64(t + 24, (uint64_t)e->rep[i].n);
    }
    ckpt_crc_init(&w.crc);
    what = "cannot write";
    if ((rc = writer_put(&w, h, hlen, 0)) < 0)
        goto fail;
    for (int i = 0; i < n_replicas(e); i++)
        if (engine_local(e, e->rep[i].device) && (rc = write_replica(e, &w, i, full, P, &full_pipe, &what)) < 0)
            goto fail;
    uint32_t crc = ckpt_crc_final(&w.crc);
    unsigned char c4[4];
    ckpt_put_u32(c4, crc);
    if ((rc = writer_put(&w, c4, 4, 1)) < 0 || (rc = writer_flush(&w)) < 0)
        goto fail;
    what = "cannot sync";
    if (fsync(w.fd) != 0) {
        rc = -errno;
        goto fail;
    }
    int fd = w.fd;
    w.fd = -1;
    what = "cannot close";
    if (close(fd) != 0) {
        rc = -errno;
        goto fail;
    }
    what = "cannot sync the directory of";
    if ((rc = fsync_dir(dir)) < 0)
        goto fail;
    *bytes = total;
    *crc_out = crc;
    free(h);
    free(full);
    free(w.buf);
    free(path);
    return 0;
fail:
    if (w.fd >= 0)
        close(w.fd);
    if (path && rc != -EEXIST)
        unlink(path);
    rc = bsipipe_error_set(rc, "checkpoint: rank %d %s its part %s: %s (the previous checkpoint is intact)", e->rank,
                           what, path ? path : name, strerror(-rc));
    free(h);
    free(full);
    free(w.buf);
    free(path);
    return rc;
}

/* Writes buf as DIR/checkpoint.bin: a temporary (O_EXCL | O_NOFOLLOW),
 * fsync, rename, fsync of DIR. *renamed: the new file is in place. */
static int commit_file(const char *dir, const unsigned char *buf, size_t len, int *renamed)
{
    char tmpname[64];
    snprintf(tmpname, sizeof tmpname, "." CKPT_FILE ".%ld.tmp", (long)getpid());
    char *final = ckpt_path_join(dir, CKPT_FILE), *tmp = ckpt_path_join(dir, tmpname);
    int rc = 0, fd = -1;
    const char *what = "cannot create";
    *renamed = 0;
    if (!final || !tmp) {
        free(final);
        free(tmp);
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        rc = -errno;
        goto fail;
    }
    what = "cannot write";
    if ((rc = write_all(fd, buf, len)) < 0)
        goto fail;
    what = "cannot sync";
    if (fsync(fd) != 0) {
        rc = -errno;
        goto fail;
    }
    what = "cannot close";
    int f = fd;
    fd = -1;
    if (close(f) != 0) {
        rc = -errno;
        goto fail;
    }
    what = "cannot rename";
    if (rename(tmp, final) != 0) {
        rc = -errno;
        goto fail;
    }
    *renamed = 1;
    if ((rc = fsync_dir(dir)) < 0)
        rc = bsipipe_error_set(rc, "checkpoint: wrote %s but cannot sync directory %s: %s", final, dir, strerror(-rc));
    free(final);
    free(tmp);
    return rc;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    rc = bsipipe_error_set(rc, "checkpoint: %s %s: %s (the previous checkpoint, if any, is intact)", what, tmp,
                           strerror(-rc));
    free(final);
    free(tmp);
    return rc;
}

/* Rank 0: the manifest (the v1 header as version 2, then the replica table
 * pointing into the parts, then the part table with sizes and CRCs), made
 * DIR/checkpoint.bin atomically; then the parts it does not name go. g:
 * per rank {rc, bytes, crc}. */
static int commit_manifest(bsipipe_engine_t *e, const char *dir, long iteration, uint64_t nonce, const int64_t *g,
                           int *renamed)
{
    int nrep = n_replicas(e), np = e->nranks;
    ckpt_header_t h;
    int rc = engine_header(e, iteration, &h);
    *renamed = 0;
    if (rc < 0)
        return rc;
    h.version = CKPT_VERSION_MANIFEST;
    h.n_parts = (uint32_t)np;
    h.nranks = (uint32_t)e->nranks;
    h.nonce = nonce;
    h.part = calloc((size_t)np, sizeof *h.part);
    uint64_t *off = calloc((size_t)np, sizeof *off);
    size_t hb = (size_t)ckpt_header_bytes(&h);
    unsigned char *b = malloc(hb + CKPT_CRC_BYTES);
    if (!b || !h.part || !off) {
        free(b);
        free(off);
        ckpt_header_clear(&h);
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    }
    for (int r = 0; r < np; r++) {
        int k;
        part_bytes(e, r, &k);
        off[r] = PART_FIXED_BYTES + (uint64_t)k * PART_REPLICA_BYTES;
        part_name(h.part[r].name, MAN_NAME_BYTES, iteration, nonce, r);
        h.part[r].bytes = (uint64_t)g[3 * r + 1];
        h.part[r].crc = (uint32_t)g[3 * r + 2];
        h.part[r].rank = (uint32_t)r;
    }
    for (int i = 0; i < nrep; i++) { /* each rank's part: its replicas in table order */
        int r = e->dev_rank[e->rep[i].device];
        h.rep[i].part = r;
        h.rep[i].offset = off[r];
        off[r] += 12 * (uint64_t)e->rep[i].n;
    }
    free(off);
    ckpt_header_encode(&h, b);
    ckpt_put_u32(b + hb, ckpt_crc_of(b, hb));
    rc = commit_file(dir, b, hb + CKPT_CRC_BYTES, renamed);
    if (*renamed)
        remove_parts(dir, &h); /* the previous checkpoint's, and any of saves that crashed */
    ckpt_header_clear(&h);
    free(b);
    return rc;
}

static uint64_t new_nonce(void)
{
    static unsigned long long count;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t x = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    x ^= (uint64_t)getpid() << 40 ^ __atomic_fetch_add(&count, 1, __ATOMIC_SEQ_CST) * 0x9E3779B97F4A7C15ull;
    return (x & 0x7fffffffffffffffull) | 1; /* positive: agreed with a maximum */
}

/* Two phases across ranks: every rank writes and syncs its part under a
 * name of this save (iteration and a nonce), a collective (the barrier)
 * tells rank 0 that every part is durable, with its size and CRC; only
 * then rank 0 commits the manifest; then the parts of the previous
 * checkpoint go. A crash anywhere leaves the previous manifest, whose
 * parts nothing has touched. */
static int save_ranks(bsipipe_engine_t *e, const char *dir, long iteration, int rc)
{
    int n = e->nranks, rank = e->rank;
    char why[512];
    int64_t *g = calloc((size_t)3 * n, sizeof *g);
    if (rc == 0 && !g)
        rc = bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    snprintf(why, sizeof why, "%s", bsipipe_error_detail());
    int64_t v[3] = {rc < 0 ? -(int64_t)rc : 0, rc < 0 ? n - rank : 0, rank == 0 ? (int64_t)new_nonce() : 0};
    int arc = engine_mpi_max_i64(e, v, 3, "the start of a checkpoint save");
    if (arc < 0 || v[0]) {
        free(g);
        if (arc < 0)
            return arc;
        if (rc < 0)
            return bsipipe_error_set(rc, "%s", why);
        return bsipipe_error_set((int)-v[0], "checkpoint: rank %d cannot save (%s); see its message; the previous "
                                 "checkpoint is intact", n - (int)v[1], bsipipe_strerror((int)-v[0]));
    }
    uint64_t nonce = (uint64_t)v[2], bytes = 0;
    uint32_t crc = 0;
    char name[MAN_NAME_BYTES];
    part_name(name, sizeof name, iteration, nonce, rank);
    rc = write_part(e, dir, name, iteration, nonce, &bytes, &crc);
    snprintf(why, sizeof why, "%s", bsipipe_error_detail());
    engine_mpi_fault_point(e, "checkpoint-part");
    g[3 * rank] = rc < 0 ? -(int64_t)rc : 0;
    g[3 * rank + 1] = (int64_t)bytes;
    g[3 * rank + 2] = crc;
    /* The barrier: after it every part is on disk (each rank synced its
     * part and DIR before entering). */
    arc = engine_mpi_sum_i64(e, g, 3 * n, "the checkpoint barrier (every rank's part written and synced)");
    int failed = -1;
    for (int r = 0; r < n && arc == 0 && failed < 0; r++)
        if (g[3 * r])
            failed = r;
    char *mine = ckpt_path_join(dir, name);
    if (arc < 0 || failed >= 0) {
        if (mine && rc == 0)
            unlink(mine); /* no manifest will name it */
        free(mine);
        int code = arc < 0 ? arc : (int)-g[3 * failed];
        free(g);
        if (arc < 0)
            return arc;
        if (rc < 0)
            return bsipipe_error_set(rc, "%s", why);
        return bsipipe_error_set(code, "checkpoint: rank %d could not write its part (%s); see its message; the "
                                 "previous checkpoint is intact", failed, bsipipe_strerror(code));
    }
    int renamed = 0;
    rc = 0;
    if (rank == 0) {
        rc = commit_manifest(e, dir, iteration, nonce, g, &renamed);
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
    }
    free(g);
    engine_mpi_fault_point(e, "checkpoint-commit");
    int64_t c[2] = {rc < 0 ? -(int64_t)rc : 0, renamed};
    arc = engine_mpi_max_i64(e, c, 2, "the checkpoint's commit by rank 0");
    if (arc == 0 && c[0] && !c[1] && mine)
        unlink(mine); /* the manifest was not replaced: this part is nobody's */
    free(mine);
    if (arc < 0)
        return arc;
    if (c[0] == 0)
        return 0;
    if (rank == 0)
        return bsipipe_error_set(rc, "%s", why);
    return bsipipe_error_set((int)-c[0], "checkpoint: rank 0 could not commit the manifest (%s); see its message%s",
                             bsipipe_strerror((int)-c[0]), c[1] ? "" : "; the previous checkpoint is intact");
}

/* Removes DIR's parts that the manifest (NULL: none) does not name. */
static void remove_parts(const char *dir, const ckpt_header_t *manifest)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!ckpt_is_part_name(de->d_name))
            continue;
        int named = 0;
        for (uint32_t p = 0; manifest && p < manifest->n_parts && !named; p++)
            named = strcmp(manifest->part[p].name, de->d_name) == 0;
        if (named)
            continue;
        char *path = ckpt_path_join(dir, de->d_name);
        if (path)
            unlink(path);
        free(path);
    }
    closedir(d);
}

/* ---- load ---- */

static void set_handle(starpu_data_handle_t h, const float *src, long n)
{
    starpu_data_acquire(h, STARPU_W);
    memcpy(starpu_data_get_local_ptr(h), src, sizeof(float) * (size_t)n);
    starpu_data_release(h);
}

/* Whether the file's replica j holds elements one of this process's
 * replicas of the same pipe needs (the file's layout may differ). */
static int replica_needed(const bsipipe_engine_t *e, const ckpt_header_t *h, int j)
{
    const ckpt_replica_t *g = &h->rep[j];
    for (int c = 0; c < e->C; c++) {
        const replica_t *r = &e->rep[(j / (int)h->chunks) * e->C + c];
        if (engine_local(e, r->device) && r->base < g->base + g->n && g->base < r->base + r->n)
            return 1;
    }
    return 0;
}

int bsipipe_engine_load(bsipipe_engine_t *e, const char *dir, long *iteration)
{
    if (!e || !dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no engine or no directory");
    /* Every rank reads DIR/checkpoint.bin and checks it on its own, then
     * against this engine, then reads and checks the parts holding what its
     * own replicas need; the ranks agree before any touches its engine, so
     * a refusal leaves every rank's engine as it was. Each pipe's replicas
     * in the file tile the whole-model vector: it is put together, and
     * this engine's replicas (another layout, another TP degree) are cut
     * from it. */
    ckpt_load_t l;
    ckpt_header_t want;
    int rc = ckpt_load_open(dir, &l);
    if (rc == 0 && (rc = engine_header(e, 0, &want)) == 0) {
        rc = ckpt_header_match(l.path, &want, &l.h);
        ckpt_header_clear(&want);
    }
    for (int j = 0; rc == 0 && j < n_replicas(e); j++)
        if (replica_needed(e, &l.h, j))
            rc = ckpt_load_part(&l, (uint32_t)l.h.rep[j].part);
    for (int j = 0; rc == 0 && j < n_replicas(e); j++)
        if (replica_needed(e, &l.h, j))
            rc = engine_ckpt_loaded_finite(e, &l, j);
    rc = engine_mpi_agree_named(e, rc, "could not read the checkpoint");
    long P = bsipipe_engine_n_params(e);
    float *full = NULL, *shard = NULL;
    if (rc == 0 && (!(full = malloc(sizeof(float) * (size_t)P)) ||
                    (e->T > 1 && !(shard = malloc(sizeof(float) * (size_t)bsipipe_tp_model_params(&e->dims, e->T))))))
        rc = bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    if (rc == 0) { /* everything checked: only now touch the engine */
        starpu_task_wait_for_all();
        for (int pipe = 0; pipe < bsipipe_schedule_n_pipes(e->sched) && rc == 0; pipe++)
            for (int which = 0; which < 3 && rc == 0; which++) {
                for (int c = 0; c < (int)l.h.chunks; c++) {
                    int j = pipe * (int)l.h.chunks + c;
                    const ckpt_replica_t *g = &l.h.rep[j];
                    const unsigned char *p = replica_needed(e, &l.h, j) ? ckpt_load_replica(&l, (size_t)j) : NULL;
                    if (!p) /* no replica of this process needs it (MPI: another rank's) */
                        memset(full + g->base, 0, sizeof(float) * (size_t)g->n);
                    else
                        ckpt_floats_from_le(full + g->base, p + 4 * (size_t)which * (size_t)g->n, (size_t)g->n);
                }
                if (e->T > 1) {
                    rc = engine_tp_set_full(e, pipe, which == 0 ? ENGINE_TP_PARAMS : which == 1 ? ENGINE_TP_M
                                                                                             : ENGINE_TP_V, full, shard);
                    continue;
                }
                for (int c = 0; c < e->C; c++) {
                    replica_t *r = &e->rep[pipe * e->C + c];
                    if (engine_local(e, r->device)) /* another rank's replica: that rank sets it */
                        set_handle(which == 0 ? r->h_params : which == 1 ? r->h_m : r->h_v, full + r->base, r->n);
                }
            }
        if (rc == 0) {
            e->steps = (long)l.h.steps;
            if (iteration)
                *iteration = (long)l.h.iteration;
        }
    }
    free(full);
    free(shard);
    ckpt_load_close(&l);
    return rc;
}
