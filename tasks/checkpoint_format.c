/* checkpoint_format.c: see checkpoint_format.h. Plain C: no StarPU, no
 * engine, so the fuzzer (fuzz/fuzz_checkpoint.c) runs it on its own. */
#include "tasks/checkpoint_format.h"
#include "graph/bsipipe_config.h"
#include "graph/bsipipe_error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CRC-32 ---- */

void ckpt_crc_init(ckpt_crc_t *c)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t x = i;
        for (int b = 0; b < 8; b++)
            x = (x >> 1) ^ (0xEDB88320u & (0u - (x & 1u)));
        c->t[0][i] = x;
    }
    for (int s = 1; s < 8; s++)
        for (int i = 0; i < 256; i++)
            c->t[s][i] = (c->t[s - 1][i] >> 8) ^ c->t[0][c->t[s - 1][i] & 0xffu];
    c->crc = 0xffffffffu;
}

void ckpt_crc_update(ckpt_crc_t *c, const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t crc = c->crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = c->t[7][lo & 0xff] ^ c->t[6][(lo >> 8) & 0xff] ^ c->t[5][(lo >> 16) & 0xff] ^ c->t[4][lo >> 24] ^
              c->t[3][hi & 0xff] ^ c->t[2][(hi >> 8) & 0xff] ^ c->t[1][(hi >> 16) & 0xff] ^ c->t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ c->t[0][(crc ^ *p++) & 0xff];
    c->crc = crc;
}

uint32_t ckpt_crc_final(const ckpt_crc_t *c) { return c->crc ^ 0xffffffffu; }

/* ---- little-endian fields ---- */

void ckpt_put_u32(unsigned char *p, uint32_t v)
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

uint32_t ckpt_get_u32(const unsigned char *p)
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

static int32_t get_i32(const unsigned char *p) { return (int32_t)ckpt_get_u32(p); }
static int64_t get_i64(const unsigned char *p) { return (int64_t)get_u64(p); }

static double get_f64(const unsigned char *p)
{
    uint64_t u = get_u64(p);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* ---- the header ---- */

/* Offsets in the fixed part (docs/checkpoint.md has the table). */
enum {
    OFF_MAGIC = 0, OFF_VERSION = 8, OFF_HEADER_BYTES = 12, OFF_FILE_BYTES = 16,
    OFF_DIMS = 24,   /* 7 x i32: family, n_layers, hidden, n_heads, ffn_hidden, vocab, seq_len */
    OFF_PC = 52,     /* 7 x i32: schedule, w, p, k, m, tp, partition */
    OFF_OPT = 80,    /* 6 x f64: lr, beta1, beta2, eps, weight_decay, grad_clip */
    OFF_SEED = 128, OFF_STEPS = 136, OFF_ITER = 144, OFF_PIPES = 152, OFF_CHUNKS = 156,
};

static uint64_t n_replicas(const ckpt_header_t *h) { return (uint64_t)h->pipes * h->chunks; }

uint64_t ckpt_header_bytes(const ckpt_header_t *h)
{
    return CKPT_FIXED_BYTES + n_replicas(h) * CKPT_REPLICA_BYTES;
}

uint64_t ckpt_file_bytes(const ckpt_header_t *h)
{
    uint64_t floats = 0;
    for (uint64_t i = 0; i < n_replicas(h); i++)
        floats += 3 * (uint64_t)h->rep[i].n;
    return ckpt_header_bytes(h) + 4 * floats + CKPT_CRC_BYTES;
}

void ckpt_header_encode(const ckpt_header_t *h, unsigned char *out)
{
    memset(out, 0, ckpt_header_bytes(h));
    memcpy(out + OFF_MAGIC, CKPT_MAGIC, 8);
    ckpt_put_u32(out + OFF_VERSION, CKPT_VERSION);
    ckpt_put_u32(out + OFF_HEADER_BYTES, (uint32_t)ckpt_header_bytes(h));
    put_u64(out + OFF_FILE_BYTES, ckpt_file_bytes(h));
    for (int i = 0; i < 7; i++) {
        ckpt_put_u32(out + OFF_DIMS + 4 * i, (uint32_t)h->dims[i]);
        ckpt_put_u32(out + OFF_PC + 4 * i, (uint32_t)h->pc[i]);
    }
    for (int i = 0; i < 6; i++)
        put_f64(out + OFF_OPT + 8 * i, h->opt[i]);
    put_u64(out + OFF_SEED, h->seed);
    put_u64(out + OFF_STEPS, (uint64_t)h->steps);
    put_u64(out + OFF_ITER, (uint64_t)h->iteration);
    ckpt_put_u32(out + OFF_PIPES, h->pipes);
    ckpt_put_u32(out + OFF_CHUNKS, h->chunks);
    for (uint64_t i = 0; i < n_replicas(h); i++) {
        unsigned char *r = out + CKPT_FIXED_BYTES + i * CKPT_REPLICA_BYTES;
        ckpt_put_u32(r + 0, (uint32_t)h->rep[i].pipe);
        ckpt_put_u32(r + 4, (uint32_t)h->rep[i].chunk);
        ckpt_put_u32(r + 8, (uint32_t)h->rep[i].device);
        put_u64(r + 16, (uint64_t)h->rep[i].base);
        put_u64(r + 24, (uint64_t)h->rep[i].n);
    }
}

void ckpt_header_clear(ckpt_header_t *h)
{
    if (!h)
        return;
    free(h->rep);
    h->rep = NULL;
}

/* ---- reading the file ---- */

int ckpt_file_read(const char *path, unsigned char **out, uint64_t *size)
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

/* ---- checks ---- */

int ckpt_image_parse(const char *path, const unsigned char *b, uint64_t size, ckpt_header_t *h)
{
    memset(h, 0, sizeof *h);
    const uint64_t min = CKPT_FIXED_BYTES + CKPT_CRC_BYTES;
    if (size >= 8 && memcmp(b + OFF_MAGIC, CKPT_MAGIC, 8) != 0)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is not a bsipipe checkpoint (bad magic)", path);
    if (size < OFF_FILE_BYTES + 8)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s is truncated: %llu bytes, a checkpoint has at least %llu", path,
                                 (unsigned long long)size, (unsigned long long)min);
    uint32_t version = ckpt_get_u32(b + OFF_VERSION);
    if (version != CKPT_VERSION)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has format version %u, this build reads version %d",
                                 path, version, CKPT_VERSION);
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
    ckpt_crc_t *crc = malloc(sizeof *crc);
    if (!crc)
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    ckpt_crc_init(crc);
    ckpt_crc_update(crc, b, (size_t)(size - CKPT_CRC_BYTES));
    uint32_t got = ckpt_crc_final(crc), want = ckpt_get_u32(b + size - CKPT_CRC_BYTES);
    free(crc);
    if (got != want)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s is corrupted: CRC-32 mismatch (stored %08x, computed %08x)", path,
                                 want, got);

    /* Intact (the CRC is checked first, so a flipped bit reads as
     * "corrupted", not as another configuration). Counters in range before
     * anyone uses them: a caller's int loop index must not wrap (the limit is
     * far beyond any real run). */
    int64_t steps = get_i64(b + OFF_STEPS), iter = get_i64(b + OFF_ITER);
    if (iter < 0 || iter > CKPT_MAX_COUNT)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has iteration counter %lld, outside 0..%d: "
                                 "corrupted or not written by this program", path, (long long)iter, CKPT_MAX_COUNT);
    if (steps < 0 || steps > CKPT_MAX_COUNT)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has step count %lld, outside 0..%d: "
                                 "corrupted or not written by this program", path, (long long)steps, CKPT_MAX_COUNT);

    /* The layout must follow from the replica table, so that the tensor data
     * read later lies inside the image whatever the engine expects. */
    uint32_t pipes = ckpt_get_u32(b + OFF_PIPES), chunks = ckpt_get_u32(b + OFF_CHUNKS);
    uint64_t hb = CKPT_FIXED_BYTES + (uint64_t)pipes * chunks * CKPT_REPLICA_BYTES;
    if (pipes < 1 || pipes > 2 || chunks < 1 || hb > size - CKPT_CRC_BYTES)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has %u pipes x %u chunks of replicas, which do not "
                                 "fit its %llu bytes: corrupted or not written by this program", path, pipes, chunks,
                                 (unsigned long long)size);
    if (ckpt_get_u32(b + OFF_HEADER_BYTES) != hb)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has a header of %u bytes, %llu for its %u x %u "
                                 "replicas: corrupted or not written by this program", path,
                                 ckpt_get_u32(b + OFF_HEADER_BYTES), (unsigned long long)hb, pipes, chunks);
    uint64_t nrep = (uint64_t)pipes * chunks, data = size - CKPT_CRC_BYTES - hb, floats = 0;
    for (uint64_t i = 0; i < nrep; i++) {
        const unsigned char *r = b + CKPT_FIXED_BYTES + i * CKPT_REPLICA_BYTES;
        int64_t base = get_i64(r + 16), n = get_i64(r + 24);
        unsigned long long e = (unsigned long long)i;
        if (ckpt_get_u32(r + 0) != i / chunks || ckpt_get_u32(r + 4) != i % chunks)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s: replica table entry %llu is (pipe %d, chunk "
                                     "%d), expected (pipe %llu, chunk %llu): corrupted or not written by this program",
                                     path, e, get_i32(r + 0), get_i32(r + 4), e / chunks, e % chunks);
        if (ckpt_get_u32(r + 12) != 0)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s: replica table entry %llu has %u in its "
                                     "reserved field (always 0): corrupted or not written by this program", path, e,
                                     ckpt_get_u32(r + 12));
        if (base < 0 || n < 0 || (uint64_t)n > data / 12 - floats / 3)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s: replica table entry %llu holds elements [%lld, "
                                     "+%lld), %s: corrupted or not written by this program", path, e,
                                     (long long)base, (long long)n, base < 0 || n < 0 ? "negative"
                                     : "more than the file holds after the entries before it");
        floats += 3 * (uint64_t)n;
    }
    if (hb + 4 * floats + CKPT_CRC_BYTES != size)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s holds %llu bytes, its replica table describes %llu: "
                                 "corrupted or not written by this program", path, (unsigned long long)size,
                                 (unsigned long long)(hb + 4 * floats + CKPT_CRC_BYTES));

    /* Accepted: fill *h. */
    if (!(h->rep = malloc(sizeof *h->rep * (size_t)nrep)))
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    for (int i = 0; i < 7; i++) {
        h->dims[i] = get_i32(b + OFF_DIMS + 4 * i);
        h->pc[i] = get_i32(b + OFF_PC + 4 * i);
    }
    for (int i = 0; i < 6; i++)
        h->opt[i] = get_f64(b + OFF_OPT + 8 * i);
    h->seed = get_u64(b + OFF_SEED);
    h->steps = steps;
    h->iteration = iter;
    h->pipes = pipes;
    h->chunks = chunks;
    for (uint64_t i = 0; i < nrep; i++) {
        const unsigned char *r = b + CKPT_FIXED_BYTES + i * CKPT_REPLICA_BYTES;
        h->rep[i] = (ckpt_replica_t){get_i32(r + 0), get_i32(r + 4), get_i32(r + 8), get_i64(r + 16),
                                     get_i64(r + 24)};
    }
    return 0;
}

static const char *const dims_names[7] = {"family", "n_layers", "hidden", "n_heads", "ffn_hidden", "vocab", "seq_len"};
static const char *const pc_names[7] = {"schedule", "w", "p", "k", "m", "tp", "partition"};
static const char *const opt_names[6] = {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"};

/* A field's value as text: enums by name (family, schedule, partition). */
static const char *field_text(int field, int32_t v, char *buf, size_t n)
{
    if (field == 0) /* family */
        return v == BSIPIPE_MODEL_GPT ? "gpt" : v == BSIPIPE_MODEL_LLAMA ? "llama" : (snprintf(buf, n, "%d", v), buf);
    if (field == 1) /* schedule */
        return v >= 0 && v < BSIPIPE_SCHED_COUNT ? bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)v)
                                                 : (snprintf(buf, n, "%d", v), buf);
    if (field == 2) /* partition */
        return v == BSIPIPE_PARTITION_BALANCED ? "balanced"
               : v == BSIPIPE_PARTITION_EVEN   ? "even"
                                               : (snprintf(buf, n, "%d", v), buf);
    snprintf(buf, n, "%d", v);
    return buf;
}

int ckpt_header_match(const char *path, const ckpt_header_t *want, const ckpt_header_t *got)
{
    char bc[32], be[32];
    for (int i = 0; i < 7; i++)
        if (got->dims[i] != want->dims[i])
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s is of another model: checkpoint has %s=%s, this run has %s=%s",
                                     path, dims_names[i], field_text(i == 0 ? 0 : -1, got->dims[i], bc, sizeof bc),
                                     dims_names[i], field_text(i == 0 ? 0 : -1, want->dims[i], be, sizeof be));
    for (int i = 0; i < 7; i++) {
        int f = i == 0 ? 1 : i == 6 ? 2 : -1;
        if (got->pc[i] != want->pc[i])
            return bsipipe_error_set(
                BSIPIPE_EFORMAT, "checkpoint: %s is of another parallel config: checkpoint has %s=%s, this run has %s=%s",
                path, pc_names[i], field_text(f, got->pc[i], bc, sizeof bc), pc_names[i],
                field_text(f, want->pc[i], be, sizeof be));
    }
    for (int i = 0; i < 6; i++)
        if (memcmp(&got->opt[i], &want->opt[i], sizeof(double)) != 0)
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s has other optimizer settings: checkpoint has %s=%.17g, this run "
                                     "has %s=%.17g",
                                     path, opt_names[i], got->opt[i], opt_names[i], want->opt[i]);
    if (got->seed != want->seed)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has another seed: checkpoint has seed=%llu, this run "
                                 "has seed=%llu", path, (unsigned long long)got->seed, (unsigned long long)want->seed);
    if (got->pipes != want->pipes || got->chunks != want->chunks)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s has %u pipes x %u chunks of replicas, this run has %u x %u", path,
                                 got->pipes, got->chunks, want->pipes, want->chunks);
    for (uint64_t i = 0; i < n_replicas(want); i++)
        if (got->rep[i].base != want->rep[i].base || got->rep[i].n != want->rep[i].n)
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s: replica %llu (pipe %d, chunk %d) holds elements [%lld, +%lld), "
                                     "this run's holds [%lld, +%lld)", path, (unsigned long long)i, want->rep[i].pipe,
                                     want->rep[i].chunk, (long long)got->rep[i].base, (long long)got->rep[i].n,
                                     (long long)want->rep[i].base, (long long)want->rep[i].n);
    return 0;
}
