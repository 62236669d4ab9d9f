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
#include <zlib.h>

#define CKPT_MAGIC "BSIPCKPT"
#define CKPT_FILE "checkpoint.bin"
#define CKPT_LOCK ".checkpoint.lock"
#define PART_MAGIC "BSIPPART"
enum {
    CKPT_VERSION = 1,         /* one file: every replica */
    CKPT_VERSION_MANIFEST = 2, /* across ranks: a manifest naming one part per rank */
    MAN_FIXED_BYTES = 176,    /* manifest: the v1 fixed header, then n_parts, nranks, nonce */
    MAN_REPLICA_BYTES = 40,   /* i32 pipe, chunk, device, part; i64 base, n; u64 offset in the part */
    MAN_PART_BYTES = 80,      /* char name[64]; u64 bytes; u32 crc; u32 rank */
    MAN_NAME_BYTES = 64,
    PART_FIXED_BYTES = 48,    /* magic, version, rank, file_bytes, iteration, nonce, n_replicas, 0 */
    PART_REPLICA_BYTES = 32,  /* i32 pipe, chunk, device, 0; i64 base, n */
    CKPT_FIXED_BYTES = 160,   /* header before the replica table */
    CKPT_REPLICA_BYTES = 32,  /* one replica table entry */
    CKPT_CRC_BYTES = 4,
    CKPT_BUF = 1 << 20,       /* write buffer */
    CKPT_MAX_COUNT = 0x7fffffff, /* iteration counter and step count: 0..INT_MAX */
};

/* ---- CRC-32/ISO-HDLC (zlib's crc32: reflected 0xEDB88320, init and xorout ~0) ---- */

typedef struct ckpt_crc {
    uLong crc;
} ckpt_crc_t;

static void ckpt_crc_init(ckpt_crc_t *c) { c->crc = crc32_z(0L, Z_NULL, 0); }

static void ckpt_crc_update(ckpt_crc_t *c, const void *data, size_t n)
{
    c->crc = crc32_z(c->crc, data, n); /* crc32_z: a size_t length (crc32's is 32-bit) */
}

static uint32_t ckpt_crc_final(const ckpt_crc_t *c) { return (uint32_t)c->crc; }

/* The CRC of one buffer. */
static uint32_t ckpt_crc_of(const void *data, size_t n)
{
    ckpt_crc_t c;
    ckpt_crc_init(&c);
    ckpt_crc_update(&c, data, n);
    return ckpt_crc_final(&c);
}

/* ---- little-endian fields ---- */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_f64(unsigned char *p, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_u64(p, u);
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int32_t get_i32(const unsigned char *p) { return (int32_t)get_u32(p); }
static int64_t get_i64(const unsigned char *p) { return (int64_t)get_u64(p); }

static double get_f64(const unsigned char *p)
{
    uint64_t u = get_u64(p);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* n floats as little-endian binary32 into dst (memcpy on little-endian hosts). */
static void floats_to_le(unsigned char *dst, const float *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * sizeof(float));
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        put_u32(dst + 4 * i, u);
    }
#endif
}

static void floats_from_le(float *dst, const unsigned char *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * sizeof(float));
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u = get_u32(src + 4 * i);
        memcpy(&dst[i], &u, 4);
    }
#endif
}

/* ---- the header: fixed part and replica table ---- */

/* Offsets in the fixed part (docs/checkpoint.md has the table). */
enum {
    OFF_MAGIC = 0, OFF_VERSION = 8, OFF_HEADER_BYTES = 12, OFF_FILE_BYTES = 16,
    OFF_DIMS = 24,   /* 7 x i32: family, n_layers, hidden, n_heads, ffn_hidden, vocab, seq_len */
    OFF_PC = 52,     /* 7 x i32: schedule, w, p, k, m, tp, partition */
    OFF_OPT = 80,    /* 6 x f64: lr, beta1, beta2, eps, weight_decay, grad_clip */
    OFF_SEED = 128, OFF_STEPS = 136, OFF_ITER = 144, OFF_PIPES = 152, OFF_CHUNKS = 156,
};

static int n_replicas(const bsipipe_engine_t *e)
{
    return bsipipe_schedule_n_pipes(e->sched) * e->C;
}

static uint64_t header_bytes(const bsipipe_engine_t *e)
{
    return CKPT_FIXED_BYTES + (uint64_t)n_replicas(e) * CKPT_REPLICA_BYTES;
}

static uint64_t file_bytes(const bsipipe_engine_t *e)
{
    uint64_t floats = 0;
    for (int i = 0; i < n_replicas(e); i++)
        floats += 3 * (uint64_t)e->rep[i].n;
    return header_bytes(e) + 4 * floats + CKPT_CRC_BYTES;
}

static void dims_fields(const bsipipe_model_dims_t *d, int32_t v[7])
{
    v[0] = (int32_t)d->family; v[1] = d->n_layers; v[2] = d->hidden; v[3] = d->n_heads;
    v[4] = d->ffn_hidden; v[5] = d->vocab; v[6] = d->seq_len;
}

static void pc_fields(const bsipipe_parallel_config_t *pc, int32_t v[7])
{
    v[0] = (int32_t)pc->schedule; v[1] = pc->w; v[2] = pc->p; v[3] = pc->k;
    v[4] = pc->m; v[5] = pc->tp; v[6] = (int32_t)pc->partition;
}

static void opt_fields(const bsipipe_adamw_t *o, double v[6])
{
    v[0] = o->lr; v[1] = o->beta1; v[2] = o->beta2; v[3] = o->eps; v[4] = o->weight_decay; v[5] = o->grad_clip;
}

static const char *const dims_names[7] = {"family", "n_layers", "hidden", "n_heads", "ffn_hidden", "vocab", "seq_len"};
static const char *const pc_names[7] = {"schedule", "w", "p", "k", "m", "tp", "partition"};
static const char *const opt_names[6] = {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"};

/* Header of engine e (buffer of header_bytes(e)). */
static void build_header(const bsipipe_engine_t *e, long iteration, unsigned char *h)
{
    memset(h, 0, header_bytes(e));
    memcpy(h + OFF_MAGIC, CKPT_MAGIC, 8);
    put_u32(h + OFF_VERSION, CKPT_VERSION);
    put_u32(h + OFF_HEADER_BYTES, (uint32_t)header_bytes(e));
    put_u64(h + OFF_FILE_BYTES, file_bytes(e));
    int32_t iv[7];
    dims_fields(&e->dims, iv);
    for (int i = 0; i < 7; i++)
        put_u32(h + OFF_DIMS + 4 * i, (uint32_t)iv[i]);
    pc_fields(&e->o.pc, iv);
    for (int i = 0; i < 7; i++)
        put_u32(h + OFF_PC + 4 * i, (uint32_t)iv[i]);
    double dv[6];
    opt_fields(&e->o.opt, dv);
    for (int i = 0; i < 6; i++)
        put_f64(h + OFF_OPT + 8 * i, dv[i]);
    put_u64(h + OFF_SEED, (uint64_t)e->o.seed);
    put_u64(h + OFF_STEPS, (uint64_t)(int64_t)e->steps);
    put_u64(h + OFF_ITER, (uint64_t)(int64_t)iteration);
    put_u32(h + OFF_PIPES, (uint32_t)bsipipe_schedule_n_pipes(e->sched));
    put_u32(h + OFF_CHUNKS, (uint32_t)e->C);
    for (int i = 0; i < n_replicas(e); i++) {
        unsigned char *r = h + CKPT_FIXED_BYTES + (size_t)i * CKPT_REPLICA_BYTES;
        put_u32(r + 0, (uint32_t)(i / e->C));
        put_u32(r + 4, (uint32_t)(i % e->C));
        put_u32(r + 8, (uint32_t)e->rep[i].device);
        put_u64(r + 16, (uint64_t)e->rep[i].base);
        put_u64(r + 24, (uint64_t)e->rep[i].n);
    }
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
    return 0;
}

static int save_single(bsipipe_engine_t *e, const char *dir, long iteration);
static int save_ranks(bsipipe_engine_t *e, const char *dir, long iteration, int rc);
static void remove_parts(const char *dir, const unsigned char *manifest, uint32_t n_parts);

int bsipipe_engine_save(bsipipe_engine_t *e, const char *dir, long iteration)
{
    if (!e || !dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no engine or no directory");
    if (e->T > 1)
        return bsipipe_error_set(-ENOTSUP, "checkpoint: not supported with tensor parallelism yet (tp %d): the "
                                 "shards would have to be gathered into the full vector; run with --tp 1 to "
                                 "save or resume", e->T);
    int rc = save_checks(e, dir, iteration);
    if (e->mpi)
        return save_ranks(e, dir, iteration, rc);
    if (rc == 0 && (rc = save_single(e, dir, iteration)) == 0)
        remove_parts(dir, NULL, 0); /* the parts of a multi-rank checkpoint it replaced */
    return rc;
}

static int save_single(bsipipe_engine_t *e, const char *dir, long iteration)
{
    char tmpname[64];
    snprintf(tmpname, sizeof tmpname, "." CKPT_FILE ".%ld.tmp", (long)getpid());
    char *final = join(dir, CKPT_FILE), *tmp = join(dir, tmpname);
    writer_t w = {.fd = -1, .path = tmp, .buf = malloc(CKPT_BUF)};
    unsigned char *hdr = malloc(header_bytes(e));
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
    build_header(e, iteration, hdr);
    what = "cannot write";
    if ((rc = writer_put(&w, hdr, header_bytes(e), 0)) < 0)
        goto fail;
    /* Pipe-major replicas; params, m, v of each. */
    for (int i = 0; i < n_replicas(e); i++) {
        replica_t *r = &e->rep[i];
        if ((rc = writer_put_handle(&w, r->h_params, r->n)) < 0 || (rc = writer_put_handle(&w, r->h_m, r->n)) < 0 ||
            (rc = writer_put_handle(&w, r->h_v, r->n)) < 0)
            goto fail;
    }
    unsigned char crc[4];
    put_u32(crc, ckpt_crc_final(&w.crc));
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

static int is_part_name(const char *name)
{
    long it;
    unsigned long long nonce;
    int rank, end = 0;
    return sscanf(name, "checkpoint-i%ld-%16llx-r%d.part%n", &it, &nonce, &rank, &end) == 3 && end > 0 &&
           name[end] == '\0';
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
    char *path = join(dir, name);
    writer_t w = {.fd = -1, .path = path, .buf = malloc(CKPT_BUF)};
    int k, rc = 0;
    uint64_t total = part_bytes(e, e->rank, &k);
    size_t hlen = PART_FIXED_BYTES + (size_t)k * PART_REPLICA_BYTES;
    unsigned char *h = calloc(1, hlen);
    const char *what = "cannot create";
    if (!path || !w.buf || !h) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((w.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)) < 0) {
        rc = -errno;
        goto fail;
    }
    memcpy(h, PART_MAGIC, 8);
    put_u32(h + 8, 1);
    put_u32(h + 12, (uint32_t)e->rank);
    put_u64(h + 16, total);
    put_u64(h + 24, (uint64_t)(int64_t)iteration);
    put_u64(h + 32, nonce);
    put_u32(h + 40, (uint32_t)k);
    for (int i = 0, j = 0; i < n_replicas(e); i++) {
        if (!engine_local(e, e->rep[i].device))
            continue;
        unsigned char *t = h + PART_FIXED_BYTES + (size_t)j++ * PART_REPLICA_BYTES;
        put_u32(t, (uint32_t)(i / e->C));
        put_u32(t + 4, (uint32_t)(i % e->C));
        put_u32(t + 8, (uint32_t)e->rep[i].device);
        put_u64(t + 16, (uint64_t)e->rep[i].base);
        put_u64(t + 24, (uint64_t)e->rep[i].n);
    }
    ckpt_crc_init(&w.crc);
    what = "cannot write";
    if ((rc = writer_put(&w, h, hlen, 0)) < 0)
        goto fail;
    for (int i = 0; i < n_replicas(e); i++) {
        replica_t *r = &e->rep[i];
        if (engine_local(e, r->device) &&
            ((rc = writer_put_handle(&w, r->h_params, r->n)) < 0 || (rc = writer_put_handle(&w, r->h_m, r->n)) < 0 ||
             (rc = writer_put_handle(&w, r->h_v, r->n)) < 0))
            goto fail;
    }
    uint32_t crc = ckpt_crc_final(&w.crc);
    unsigned char c4[4];
    put_u32(c4, crc);
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
    char *final = join(dir, CKPT_FILE), *tmp = join(dir, tmpname);
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
    size_t hb = MAN_FIXED_BYTES + (size_t)nrep * MAN_REPLICA_BYTES + (size_t)np * MAN_PART_BYTES;
    unsigned char *b = calloc(1, hb + CKPT_CRC_BYTES), *v1 = malloc(header_bytes(e));
    uint64_t *off = calloc((size_t)np, sizeof *off);
    *renamed = 0;
    if (!b || !v1 || !off) {
        free(b); free(v1); free(off);
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    }
    build_header(e, iteration, v1);
    memcpy(b, v1, CKPT_FIXED_BYTES);
    free(v1);
    put_u32(b + OFF_VERSION, CKPT_VERSION_MANIFEST);
    put_u32(b + OFF_HEADER_BYTES, (uint32_t)hb);
    put_u64(b + OFF_FILE_BYTES, hb + CKPT_CRC_BYTES);
    put_u32(b + CKPT_FIXED_BYTES, (uint32_t)np);
    put_u32(b + CKPT_FIXED_BYTES + 4, (uint32_t)e->nranks);
    put_u64(b + CKPT_FIXED_BYTES + 8, nonce);
    for (int r = 0; r < np; r++) {
        int k;
        part_bytes(e, r, &k);
        off[r] = PART_FIXED_BYTES + (uint64_t)k * PART_REPLICA_BYTES;
    }
    for (int i = 0; i < nrep; i++) {
        unsigned char *t = b + MAN_FIXED_BYTES + (size_t)i * MAN_REPLICA_BYTES;
        int r = e->dev_rank[e->rep[i].device];
        put_u32(t, (uint32_t)(i / e->C));
        put_u32(t + 4, (uint32_t)(i % e->C));
        put_u32(t + 8, (uint32_t)e->rep[i].device);
        put_u32(t + 12, (uint32_t)r);
        put_u64(t + 16, (uint64_t)e->rep[i].base);
        put_u64(t + 24, (uint64_t)e->rep[i].n);
        put_u64(t + 32, off[r]);
        off[r] += 12 * (uint64_t)e->rep[i].n;
    }
    for (int r = 0; r < np; r++) {
        unsigned char *t = b + MAN_FIXED_BYTES + (size_t)nrep * MAN_REPLICA_BYTES + (size_t)r * MAN_PART_BYTES;
        part_name((char *)t, MAN_NAME_BYTES, iteration, nonce, r);
        put_u64(t + MAN_NAME_BYTES, (uint64_t)g[3 * r + 1]);
        put_u32(t + MAN_NAME_BYTES + 8, (uint32_t)g[3 * r + 2]);
        put_u32(t + MAN_NAME_BYTES + 12, (uint32_t)r);
    }
    free(off);
    put_u32(b + hb, ckpt_crc_of(b, hb));
    int rc = commit_file(dir, b, hb + CKPT_CRC_BYTES, renamed);
    if (*renamed)
        remove_parts(dir, b, (uint32_t)np); /* the previous checkpoint's, and any of saves that crashed */
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
    char *mine = join(dir, name);
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
static void remove_parts(const char *dir, const unsigned char *manifest, uint32_t n_parts)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    const unsigned char *table = NULL;
    if (manifest)
        table = manifest + get_u32(manifest + OFF_HEADER_BYTES) - (size_t)n_parts * MAN_PART_BYTES;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_part_name(de->d_name))
            continue;
        int named = 0;
        for (uint32_t p = 0; table && p < n_parts && !named; p++)
            named = strncmp((const char *)table + (size_t)p * MAN_PART_BYTES, de->d_name, MAN_NAME_BYTES) == 0;
        if (named)
            continue;
        char *path = join(dir, de->d_name);
        if (path)
            unlink(path);
        free(path);
    }
    closedir(d);
}

/* ---- load ---- */

static int read_file(const char *path, unsigned char **out, uint64_t *size)
{
    /* O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer;
     * anything but a regular file is refused below, before any read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT)
            return bsipipe_error_set(-ENOENT, "checkpoint: no checkpoint at %s (file or directory missing)", path);
        return bsipipe_error_set(-err, "checkpoint: cannot open %s: %s", path, strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return bsipipe_error_set(-err, "checkpoint: cannot stat %s: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return bsipipe_error_set(-EINVAL, "checkpoint: %s is not a regular file (a %s); remove it or point "
                                 "--checkpoint at the directory of a real checkpoint", path,
                                 S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory"
                                 : S_ISSOCK(st.st_mode) ? "socket" : "device or special file");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    uint64_t n = (uint64_t)st.st_size;
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || n != (uint64_t)(size_t)n) {
        free(buf);
        close(fd);
        return bsipipe_error_set(-ENOMEM, "checkpoint: no memory to read %s (%llu bytes)", path,
                                 (unsigned long long)n);
    }
    uint64_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, (size_t)(n - got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            free(buf);
            close(fd);
            return bsipipe_error_set(-err, "checkpoint: cannot read %s: %s", path, strerror(err));
        }
        if (r == 0)
            break; /* shrank while reading: checked as truncation below */
        got += (uint64_t)r;
    }
    close(fd);
    *out = buf;
    *size = got;
    return 0;
}

static const char *enum_name(int field, int32_t v, char *buf, size_t n)
{
    if (field == 0) /* family */
        return v == BSIPIPE_MODEL_GPT ? "gpt" : v == BSIPIPE_MODEL_LLAMA ? "llama" : (snprintf(buf, n, "%d", v), buf);
    if (field == 1) /* schedule */
        return v >= 0 && v < BSIPIPE_SCHED_COUNT ? bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)v)
                                                 : (snprintf(buf, n, "%d", v), buf);
    /* partition */
    return v == BSIPIPE_PARTITION_BALANCED ? "balanced"
           : v == BSIPIPE_PARTITION_EVEN   ? "even"
                                           : (snprintf(buf, n, "%d", v), buf);
}

static int check_manifest(const bsipipe_engine_t *e, const char *path, const unsigned char *b, uint64_t size);
static int part_path_ok(const char *name);

/* Checks a checkpoint image against engine e; 0 or BSIPIPE_EFORMAT with a detail. */
static int check_image(const bsipipe_engine_t *e, const char *path, const unsigned char *b, uint64_t size)
{
    const uint64_t min = CKPT_FIXED_BYTES + CKPT_CRC_BYTES;
    if (size >= 8 && memcmp(b + OFF_MAGIC, CKPT_MAGIC, 8) != 0)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is not a bsipipe checkpoint (bad magic)", path);
    if (size < OFF_FILE_BYTES + 8)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s is truncated: %llu bytes, a checkpoint has at least %llu", path,
                                 (unsigned long long)size, (unsigned long long)min);
    uint32_t version = get_u32(b + OFF_VERSION);
    if (version != CKPT_VERSION && version != CKPT_VERSION_MANIFEST)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has format version %u, this build reads versions %d "
                                 "(one file) and %d (a manifest of parts, written across MPI ranks)",
                                 path, version, CKPT_VERSION, CKPT_VERSION_MANIFEST);
    uint64_t expect = get_u64(b + OFF_FILE_BYTES);
    if (size < expect)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is truncated: expected %llu bytes, found %llu", path,
                                 (unsigned long long)expect, (unsigned long long)size);
    if (size > expect)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s is corrupted: expected %llu bytes, found %llu (trailing data)", path,
                                 (unsigned long long)expect, (unsigned long long)size);
    if (size < min)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: %llu bytes, a checkpoint has at least %llu",
                                 path, (unsigned long long)size, (unsigned long long)min);
    uint32_t got = ckpt_crc_of(b, (size_t)(size - CKPT_CRC_BYTES)), want = get_u32(b + size - CKPT_CRC_BYTES);
    if (got != want)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s is corrupted: CRC-32 mismatch (stored %08x, computed %08x)", path,
                                 want, got);

    /* Intact: now compare its configuration with this engine's. */
    char bc[32], be[32];
    int32_t ce[7];
    dims_fields(&e->dims, ce);
    for (int i = 0; i < 7; i++) {
        int32_t c = get_i32(b + OFF_DIMS + 4 * i);
        if (c != ce[i])
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s is of another model: checkpoint has %s=%s, this run has %s=%s",
                                     path, dims_names[i], i == 0 ? enum_name(0, c, bc, sizeof bc) : (snprintf(bc, sizeof bc, "%d", c), bc),
                                     dims_names[i], i == 0 ? enum_name(0, ce[i], be, sizeof be) : (snprintf(be, sizeof be, "%d", ce[i]), be));
    }
    pc_fields(&e->o.pc, ce);
    for (int i = 0; i < 7; i++) {
        int32_t c = get_i32(b + OFF_PC + 4 * i);
        int en = i == 0 ? 1 : i == 6 ? 2 : -1;
        if (c != ce[i])
            return bsipipe_error_set(
                BSIPIPE_EFORMAT, "checkpoint: %s is of another parallel config: checkpoint has %s=%s, this run has %s=%s",
                path, pc_names[i], en >= 0 ? enum_name(en, c, bc, sizeof bc) : (snprintf(bc, sizeof bc, "%d", c), bc),
                pc_names[i], en >= 0 ? enum_name(en, ce[i], be, sizeof be) : (snprintf(be, sizeof be, "%d", ce[i]), be));
    }
    double de[6];
    opt_fields(&e->o.opt, de);
    for (int i = 0; i < 6; i++) {
        double c = get_f64(b + OFF_OPT + 8 * i);
        if (memcmp(&c, &de[i], sizeof c) != 0)
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s has other optimizer settings: checkpoint has %s=%.17g, this run "
                                     "has %s=%.17g",
                                     path, opt_names[i], c, opt_names[i], de[i]);
    }
    uint64_t seed = get_u64(b + OFF_SEED);
    if (seed != (uint64_t)e->o.seed)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has another seed: checkpoint has seed=%llu, this run "
                                 "has seed=%llu", path, (unsigned long long)seed, (unsigned long long)e->o.seed);
    /* Counters in range before anyone uses them: a caller's int loop index
     * must not wrap (the limit is far beyond any real run). */
    int64_t steps = get_i64(b + OFF_STEPS), iter = get_i64(b + OFF_ITER);
    if (iter < 0 || iter > CKPT_MAX_COUNT)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has iteration counter %lld, outside 0..%d: "
                                 "corrupted or not written by this program", path, (long long)iter, CKPT_MAX_COUNT);
    if (steps < 0 || steps > CKPT_MAX_COUNT)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has step count %lld, outside 0..%d: "
                                 "corrupted or not written by this program", path, (long long)steps, CKPT_MAX_COUNT);
    uint32_t pipes = get_u32(b + OFF_PIPES), chunks = get_u32(b + OFF_CHUNKS);
    if (pipes != (uint32_t)bsipipe_schedule_n_pipes(e->sched) || chunks != (uint32_t)e->C)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s has %u pipes x %u chunks of replicas, this run has %d x %d", path,
                                 pipes, chunks, bsipipe_schedule_n_pipes(e->sched), e->C);
    if (version == CKPT_VERSION_MANIFEST)
        return check_manifest(e, path, b, size);
    if (get_u32(b + OFF_HEADER_BYTES) != header_bytes(e) || expect != file_bytes(e))
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s has a layout of %llu bytes (header %u), this run needs %llu (header "
                                 "%llu)", path, (unsigned long long)expect, get_u32(b + OFF_HEADER_BYTES),
                                 (unsigned long long)file_bytes(e), (unsigned long long)header_bytes(e));
    for (int i = 0; i < n_replicas(e); i++) {
        const unsigned char *r = b + CKPT_FIXED_BYTES + (size_t)i * CKPT_REPLICA_BYTES;
        int64_t base = get_i64(r + 16), n = get_i64(r + 24);
        if (get_u32(r + 0) != (uint32_t)(i / e->C) || get_u32(r + 4) != (uint32_t)(i % e->C) ||
            base != e->rep[i].base || n != e->rep[i].n)
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s: replica %d (pipe %d, chunk %d) holds elements [%lld, +%lld), this "
                                     "run's holds [%ld, +%ld)", path, i, i / e->C, i % e->C, (long long)base,
                                     (long long)n, e->rep[i].base, e->rep[i].n);
    }
    return 0;
}

/* A version-2 image (its CRC and configuration already checked): the
 * replica table matches this engine and points inside the listed parts. */
static int check_manifest(const bsipipe_engine_t *e, const char *path, const unsigned char *b, uint64_t size)
{
    int nrep = n_replicas(e);
    if (size < MAN_FIXED_BYTES + CKPT_CRC_BYTES)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is a manifest of %llu bytes, too short", path,
                                 (unsigned long long)size);
    uint32_t np = get_u32(b + CKPT_FIXED_BYTES);
    uint64_t hb = MAN_FIXED_BYTES + (uint64_t)nrep * MAN_REPLICA_BYTES + (uint64_t)np * MAN_PART_BYTES;
    if (np == 0 || np > 1u << 20 || get_u32(b + OFF_HEADER_BYTES) != hb || size != hb + CKPT_CRC_BYTES)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s lists %u parts in %llu bytes; with this run's %d "
                                 "replicas it needs %llu", path, np, (unsigned long long)size, nrep,
                                 (unsigned long long)(hb + CKPT_CRC_BYTES));
    const unsigned char *parts = b + MAN_FIXED_BYTES + (size_t)nrep * MAN_REPLICA_BYTES;
    for (uint32_t p = 0; p < np; p++)
        if (!part_path_ok((const char *)parts + (size_t)p * MAN_PART_BYTES))
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s: part %u has no valid file name (a manifest "
                                     "names files of its own directory only)", path, p);
    for (int i = 0; i < nrep; i++) {
        const unsigned char *t = b + MAN_FIXED_BYTES + (size_t)i * MAN_REPLICA_BYTES;
        int64_t base = get_i64(t + 16), n = get_i64(t + 24);
        uint32_t p = get_u32(t + 12);
        if (get_u32(t) != (uint32_t)(i / e->C) || get_u32(t + 4) != (uint32_t)(i % e->C) || base != e->rep[i].base ||
            n != e->rep[i].n)
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s: replica %d (pipe %d, chunk %d) holds elements [%lld, +%lld), this "
                                     "run's holds [%ld, +%ld)", path, i, i / e->C, i % e->C, (long long)base,
                                     (long long)n, e->rep[i].base, e->rep[i].n);
        uint64_t off = get_u64(t + 32), pbytes = p < np ? get_u64(parts + (size_t)p * MAN_PART_BYTES + MAN_NAME_BYTES) : 0;
        if (p >= np || off < PART_FIXED_BYTES || pbytes < CKPT_CRC_BYTES || off > pbytes - CKPT_CRC_BYTES ||
            (uint64_t)n * 12 > pbytes - CKPT_CRC_BYTES - off)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s: replica %d lies outside its part (part %u, "
                                     "offset %llu)", path, i, p, (unsigned long long)off);
    }
    return 0;
}

static void set_handle(starpu_data_handle_t h, const unsigned char *src, long n)
{
    starpu_data_acquire(h, STARPU_W);
    floats_from_le((float *)starpu_data_get_local_ptr(h), src, (size_t)n);
    starpu_data_release(h);
}

/* Where each replica's data comes from: the image itself (one file), or
 * the parts of a manifest, read and checked whole before anything is set. */
typedef struct load_src {
    unsigned char **part;   /* per part: its bytes (only parts with a replica of this rank) */
    uint32_t n_parts;
} load_src_t;

static int part_path_ok(const char *name)
{
    /* A manifest names files in DIR only: no path, no hidden name. */
    return name[0] && name[0] != '.' && !strchr(name, '/') && memchr(name, '\0', MAN_NAME_BYTES);
}

/* Reads and checks (size, magic, CRC against the manifest's, iteration and
 * nonce) every part that holds a replica this rank runs. */
static int load_parts(const bsipipe_engine_t *e, const char *dir, const unsigned char *b, load_src_t *src)
{
    uint32_t n_parts = get_u32(b + CKPT_FIXED_BYTES);
    int nrep = n_replicas(e);
    const unsigned char *parts = b + MAN_FIXED_BYTES + (size_t)nrep * MAN_REPLICA_BYTES;
    src->n_parts = n_parts;
    if (!(src->part = calloc(n_parts, sizeof *src->part)))
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    for (int i = 0; i < nrep; i++) {
        if (!engine_local(e, e->rep[i].device))
            continue;
        uint32_t p = get_u32(b + MAN_FIXED_BYTES + (size_t)i * MAN_REPLICA_BYTES + 12);
        if (src->part[p])
            continue;
        const unsigned char *pe = parts + (size_t)p * MAN_PART_BYTES;
        char name[MAN_NAME_BYTES];
        memcpy(name, pe, MAN_NAME_BYTES);
        char *path = join(dir, name);
        if (!path)
            return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
        uint64_t size = 0, want = get_u64(pe + MAN_NAME_BYTES);
        int rc = read_file(path, &src->part[p], &size);
        if (rc == -ENOENT)
            rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s/checkpoint.bin names the part %s, which is "
                                   "missing: the checkpoint is incomplete (a part was deleted)", dir, path);
        if (rc == 0 && size != want)
            rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s is %s: expected %llu bytes, found %llu",
                                   path, size < want ? "truncated" : "corrupted", (unsigned long long)want,
                                   (unsigned long long)size);
        if (rc == 0) {
            const unsigned char *q = src->part[p];
            uint32_t got = ckpt_crc_of(q, (size_t)(size - CKPT_CRC_BYTES)),
                     stored = get_u32(q + size - CKPT_CRC_BYTES), listed = get_u32(pe + MAN_NAME_BYTES + 8);
            if (got != stored || got != listed)
                rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s is corrupted: CRC-32 %08x, the part "
                                       "stores %08x and the manifest lists %08x", path, got, stored, listed);
            else if (memcmp(q, PART_MAGIC, 8) != 0 || get_u64(q + 24) != get_u64(b + OFF_ITER) ||
                     get_u64(q + 32) != get_u64(b + 168))
                rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s does not belong to %s/checkpoint.bin "
                                       "(another save's iteration or nonce)", path, dir);
        }
        free(path);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void load_src_free(load_src_t *src)
{
    for (uint32_t p = 0; src->part && p < src->n_parts; p++)
        free(src->part[p]);
    free(src->part);
}

int bsipipe_engine_load(bsipipe_engine_t *e, const char *dir, long *iteration)
{
    if (!e || !dir || !*dir)
        return bsipipe_error_set(-EINVAL, "checkpoint: no engine or no directory");
    if (e->T > 1)
        return bsipipe_error_set(-ENOTSUP, "checkpoint: not supported with tensor parallelism yet (tp %d): the "
                                 "shards would have to be cut from the full vector; run with --tp 1 to save or "
                                 "resume", e->T);
    char *path = join(dir, CKPT_FILE);
    if (!path)
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    unsigned char *b = NULL;
    uint64_t size = 0;
    load_src_t src = {0};
    /* Every rank reads DIR/checkpoint.bin and the parts holding its own
     * replicas, and checks them all; the ranks agree before any touches its
     * engine, so a refusal leaves every rank's engine as it was. */
    int rc = read_file(path, &b, &size);
    if (rc == 0)
        rc = check_image(e, path, b, size);
    int manifest = rc == 0 && get_u32(b + OFF_VERSION) == CKPT_VERSION_MANIFEST;
    if (rc == 0 && manifest)
        rc = load_parts(e, dir, b, &src);
    rc = engine_mpi_agree_named(e, rc, "could not read the checkpoint");
    if (rc == 0) { /* everything checked: only now touch the engine */
        starpu_task_wait_for_all();
        const unsigned char *p = b + header_bytes(e);
        for (int i = 0; i < n_replicas(e); i++) {
            replica_t *r = &e->rep[i];
            if (manifest) {
                const unsigned char *t = b + MAN_FIXED_BYTES + (size_t)i * MAN_REPLICA_BYTES;
                p = engine_local(e, r->device) ? src.part[get_u32(t + 12)] + get_u64(t + 32) : NULL;
            }
            if (engine_local(e, r->device)) { /* another rank's replica: that rank sets it */
                set_handle(r->h_params, p, r->n);
                set_handle(r->h_m, p + 4 * (size_t)r->n, r->n);
                set_handle(r->h_v, p + 8 * (size_t)r->n, r->n);
            }
            if (!manifest)
                p += 12 * (size_t)r->n;
        }
        e->steps = (long)get_i64(b + OFF_STEPS);
        if (iteration)
            *iteration = (long)get_i64(b + OFF_ITER);
    }
    load_src_free(&src);
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
