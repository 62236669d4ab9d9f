/* checkpoint_format.c: the checkpoint files without StarPU (see
 * checkpoint_format.h, docs/checkpoint.md). Every check of the bytes read
 * back lives here, so the engine's load and fuzz/fuzz_checkpoint.c run the
 * same code: an image is checked on its own first (a refusal names what is
 * wrong with the file), then against the engine (a refusal names the field
 * in which this run differs). */
#include "tasks/checkpoint_format.h"
#include "graph/bsipipe_config.h"
#include "base/bsipipe_error.h"
#include "kernels/bsipipe_model.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- CRC-32 ---- */

void ckpt_crc_init(ckpt_crc_t *c) { c->crc = crc32_z(0L, Z_NULL, 0); }

void ckpt_crc_update(ckpt_crc_t *c, const void *data, size_t n)
{
    c->crc = crc32_z(c->crc, data, n); /* crc32_z: a size_t length (crc32's is 32-bit) */
}

uint32_t ckpt_crc_final(const ckpt_crc_t *c) { return (uint32_t)c->crc; }

uint32_t ckpt_crc_of(const void *data, size_t n)
{
    ckpt_crc_t c;
    ckpt_crc_init(&c);
    ckpt_crc_update(&c, data, n);
    return ckpt_crc_final(&c);
}

/* ---- the header ---- */

static uint64_t n_rep(const ckpt_header_t *h) { return (uint64_t)h->pipes * h->chunks; }

uint64_t ckpt_header_bytes(const ckpt_header_t *h)
{
    if (h->version == CKPT_VERSION_MANIFEST)
        return MAN_FIXED_BYTES + n_rep(h) * MAN_REPLICA_BYTES + (uint64_t)h->n_parts * MAN_PART_BYTES;
    return CKPT_FIXED_BYTES + n_rep(h) * CKPT_REPLICA_BYTES;
}

uint64_t ckpt_file_bytes(const ckpt_header_t *h)
{
    uint64_t data = 0;
    if (h->version != CKPT_VERSION_MANIFEST)
        for (uint64_t i = 0; i < n_rep(h); i++)
            data += 12 * (uint64_t)h->rep[i].n;
    return ckpt_header_bytes(h) + data + CKPT_CRC_BYTES;
}

void ckpt_header_encode(const ckpt_header_t *h, unsigned char *out)
{
    int man = h->version == CKPT_VERSION_MANIFEST;
    uint64_t hb = ckpt_header_bytes(h);
    memset(out, 0, (size_t)hb);
    memcpy(out + OFF_MAGIC, CKPT_MAGIC, 8);
    ckpt_put_u32(out + OFF_VERSION, h->version);
    ckpt_put_u32(out + OFF_HEADER_BYTES, (uint32_t)hb);
    ckpt_put_u64(out + OFF_FILE_BYTES, ckpt_file_bytes(h));
    for (int i = 0; i < 7; i++) {
        ckpt_put_u32(out + OFF_DIMS + 4 * i, (uint32_t)h->dims[i]);
        ckpt_put_u32(out + OFF_PC + 4 * i, (uint32_t)h->pc[i]);
    }
    for (int i = 0; i < 6; i++)
        ckpt_put_f64(out + OFF_OPT + 8 * i, h->opt[i]);
    ckpt_put_u64(out + OFF_SEED, h->seed);
    ckpt_put_u64(out + OFF_STEPS, (uint64_t)h->steps);
    ckpt_put_u64(out + OFF_ITER, (uint64_t)h->iteration);
    ckpt_put_u32(out + OFF_PIPES, h->pipes);
    ckpt_put_u32(out + OFF_CHUNKS, h->chunks);
    unsigned char *t = out + (man ? MAN_FIXED_BYTES : CKPT_FIXED_BYTES);
    if (man) {
        ckpt_put_u32(out + OFF_N_PARTS, h->n_parts);
        ckpt_put_u32(out + OFF_NRANKS, h->nranks);
        ckpt_put_u64(out + OFF_NONCE, h->nonce);
    }
    for (uint64_t i = 0; i < n_rep(h); i++) {
        const ckpt_replica_t *r = &h->rep[i];
        ckpt_put_u32(t + 0, (uint32_t)r->pipe);
        ckpt_put_u32(t + 4, (uint32_t)r->chunk);
        ckpt_put_u32(t + 8, (uint32_t)r->device);
        ckpt_put_u64(t + 16, (uint64_t)r->base);
        ckpt_put_u64(t + 24, (uint64_t)r->n);
        if (man) {
            ckpt_put_u32(t + 12, (uint32_t)r->part);
            ckpt_put_u64(t + 32, r->offset);
        }
        t += man ? MAN_REPLICA_BYTES : CKPT_REPLICA_BYTES;
    }
    for (uint32_t p = 0; man && p < h->n_parts; p++, t += MAN_PART_BYTES) {
        const ckpt_part_t *pe = &h->part[p];
        memcpy(t, pe->name, strnlen(pe->name, MAN_NAME_BYTES - 1)); /* NUL-padded by the memset */
        ckpt_put_u64(t + MAN_NAME_BYTES, pe->bytes);
        ckpt_put_u32(t + MAN_NAME_BYTES + 8, pe->crc);
        ckpt_put_u32(t + MAN_NAME_BYTES + 12, pe->rank);
    }
}

void ckpt_header_clear(ckpt_header_t *h)
{
    free(h->rep);
    free(h->part);
    h->rep = NULL;
    h->part = NULL;
}

int ckpt_part_name_ok(const char *name, size_t len)
{
    /* A manifest names files in DIR only: no path, no hidden name. */
    const char *end = memchr(name, '\0', len);
    return end && name[0] && name[0] != '.' && !memchr(name, '/', (size_t)(end - name));
}

/* ---- reading a file ---- */

int ckpt_temp_is_stale(long pid)
{
    return pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}

int ckpt_is_part_name(const char *name)
{
    long it;
    unsigned long long nonce;
    int rank, end = 0;
    return sscanf(name, "checkpoint-i%ld-%16llx-r%d.part%n", &it, &nonce, &rank, &end) == 3 && end > 0 &&
           name[end] == '\0';
}

int ckpt_file_read(const char *path, unsigned char **out, uint64_t *size)
{
    *out = NULL;
    *size = 0;
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
    unsigned char *buf = n == (uint64_t)(size_t)n ? malloc(n > 0 ? (size_t)n : 1) : NULL;
    if (!buf) {
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
            break; /* shrank while reading: checked as truncation later */
        got += (uint64_t)r;
    }
    close(fd);
    *out = buf;
    *size = got;
    return 0;
}

/* ---- checks of an image on its own ---- */

/* The tables of an image whose size, CRC and counters passed. */

/* Each pipe's replicas tile its whole-model vector in chunk order, from 0,
 * and every pipe's is as long (want NULL), or as long as want's (another
 * layout of the same model: the slices may differ). 0 or BSIPIPE_EFORMAT. */
static int replicas_tile(const char *path, const ckpt_header_t *h, const ckpt_header_t *want)
{
    int64_t first_end = -1;
    for (uint32_t pipe = 0; pipe < h->pipes; pipe++) {
        int64_t at = 0, end = 0;
        for (uint32_t c = 0; c < h->chunks; c++) {
            const ckpt_replica_t *g = &h->rep[pipe * h->chunks + c];
            if (g->base != at)
                return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: the replica of pipe %u, chunk "
                                         "%u holds elements [%lld, +%lld), which do not continue its pipe's model "
                                         "at %lld", path, pipe, c, (long long)g->base, (long long)g->n,
                                         (long long)at);
            at += g->n;
        }
        for (uint32_t c = 0; want && pipe < want->pipes && c < want->chunks; c++)
            end += want->rep[pipe * want->chunks + c].n;
        if (want && at != end)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s: pipe %u's replicas hold %lld elements, this "
                                     "run's %lld", path, pipe, (long long)at, (long long)end);
        if (!want && first_end >= 0 && at != first_end)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: pipe %u's replicas hold %lld "
                                     "elements, pipe 0's %lld", path, pipe, (long long)at, (long long)first_end);
        first_end = at;
    }
    return 0;
}

static int parse_tables(const char *path, const unsigned char *b, uint64_t size, ckpt_header_t *h)
{
    int man = h->version == CKPT_VERSION_MANIFEST;
    uint64_t nrep = n_rep(h), hbf = ckpt_get_u32(b + OFF_HEADER_BYTES);
    if (h->pipes < 1 || h->pipes > 2 || h->chunks < 1)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: %u pipes x %u chunks of replicas "
                                 "(1 or 2 pipes, at least one chunk)", path, h->pipes, h->chunks);
    if (man) {
        h->n_parts = ckpt_get_u32(b + OFF_N_PARTS);
        h->nranks = ckpt_get_u32(b + OFF_NRANKS);
        h->nonce = ckpt_get_u64(b + OFF_NONCE);
        if (h->n_parts < 1 || h->n_parts > CKPT_MAX_PARTS || h->nranks != h->n_parts)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: a manifest of %u parts written by "
                                     "%u ranks (one part per rank, 1..%d)", path, h->n_parts, h->nranks,
                                     CKPT_MAX_PARTS);
    }
    uint64_t hb = ckpt_header_bytes(h); /* 64-bit: no overflow with 32-bit counts */
    if (hbf != hb || hb > size - CKPT_CRC_BYTES || (man && size != hb + CKPT_CRC_BYTES))
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: a header of %llu bytes in %llu; "
                                 "%u x %u replicas%s need %llu", path, (unsigned long long)hbf,
                                 (unsigned long long)size, h->pipes, h->chunks, man ? " and the parts listed" : "",
                                 (unsigned long long)hb);
    /* hb <= size: the tables are within the image, so these are bounded. */
    h->rep = calloc((size_t)nrep, sizeof *h->rep);
    h->part = man ? calloc(h->n_parts, sizeof *h->part) : NULL;
    if (!h->rep || (man && !h->part))
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory reading %s", path);
    const unsigned char *pt = b + MAN_FIXED_BYTES + nrep * MAN_REPLICA_BYTES;
    for (uint32_t p = 0; man && p < h->n_parts; p++, pt += MAN_PART_BYTES) {
        ckpt_part_t *pe = &h->part[p];
        if (!ckpt_part_name_ok((const char *)pt, MAN_NAME_BYTES))
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s: part %u has no valid file name (a manifest "
                                     "names files of its own directory only)", path, p);
        size_t len = strlen((const char *)pt);
        for (size_t j = len; j < MAN_NAME_BYTES; j++)
            if (pt[j])
                return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: the name of part %u is not "
                                         "padded with zero bytes", path, p);
        memcpy(pe->name, pt, len + 1);
        pe->bytes = ckpt_get_u64(pt + MAN_NAME_BYTES);
        pe->crc = ckpt_get_u32(pt + MAN_NAME_BYTES + 8);
        pe->rank = ckpt_get_u32(pt + MAN_NAME_BYTES + 12);
        if (pe->rank != p || pe->bytes < PART_FIXED_BYTES + CKPT_CRC_BYTES)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: part %u (%s) is listed as rank "
                                     "%u's, of %llu bytes (rank %u's, at least %d)", path, p, pe->name, pe->rank,
                                     (unsigned long long)pe->bytes, p, PART_FIXED_BYTES + CKPT_CRC_BYTES);
    }
    const unsigned char *t = b + (man ? MAN_FIXED_BYTES : CKPT_FIXED_BYTES);
    uint64_t data = hb, end = size - CKPT_CRC_BYTES; /* version 1: the tensor data, replica after replica */
    for (uint64_t i = 0; i < nrep; i++, t += man ? MAN_REPLICA_BYTES : CKPT_REPLICA_BYTES) {
        ckpt_replica_t *r = &h->rep[i];
        r->pipe = ckpt_get_i32(t);
        r->chunk = ckpt_get_i32(t + 4);
        r->device = ckpt_get_i32(t + 8);
        r->part = ckpt_get_i32(t + 12); /* version 1: the reserved field */
        r->base = ckpt_get_i64(t + 16);
        r->n = ckpt_get_i64(t + 24);
        uint32_t pipe = (uint32_t)(i / h->chunks), chunk = (uint32_t)(i % h->chunks);
        if ((uint32_t)r->pipe != pipe || (uint32_t)r->chunk != chunk || r->device < 0)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: replica table entry %llu is "
                                     "(pipe %d, chunk %d, device %d), expected (pipe %u, chunk %u) on a device",
                                     path, (unsigned long long)i, r->pipe, r->chunk, r->device, pipe, chunk);
        if (!man && r->part != 0)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: replica %llu has a nonzero "
                                     "reserved field (%d)", path, (unsigned long long)i, r->part);
        if (r->base < 0 || r->n < 0 || r->base > INT64_MAX - r->n)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: replica %llu holds elements "
                                     "[%lld, +%lld)", path, (unsigned long long)i, (long long)r->base,
                                     (long long)r->n);
        if (!man) {
            if ((uint64_t)r->n > (end - data) / 12)
                return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: replica %llu's %lld elements "
                                         "(12 bytes each) run past the data, which ends at byte %llu", path,
                                         (unsigned long long)i, (long long)r->n, (unsigned long long)end);
            r->offset = data;
            data += 12 * (uint64_t)r->n;
            continue;
        }
        r->offset = ckpt_get_u64(t + 32);
        if (r->part < 0 || (uint32_t)r->part >= h->n_parts)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: replica %llu lies in part %d of "
                                     "%u", path, (unsigned long long)i, r->part, h->n_parts);
        uint64_t pend = h->part[r->part].bytes - CKPT_CRC_BYTES;
        if (r->offset < PART_FIXED_BYTES || r->offset > pend || (uint64_t)r->n > (pend - r->offset) / 12)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s: replica %llu lies outside its part (part %d, "
                                     "offset %llu, %lld elements, the part's data ends at %llu)", path,
                                     (unsigned long long)i, r->part, (unsigned long long)r->offset,
                                     (long long)r->n, (unsigned long long)pend);
    }
    if (!man && data != end)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: the replicas' data ends at byte %llu, "
                                 "the CRC starts at %llu", path, (unsigned long long)data, (unsigned long long)end);
    return replicas_tile(path, h, NULL);
}

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
    if (version != CKPT_VERSION && version != CKPT_VERSION_MANIFEST)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has format version %u, this build reads versions %d "
                                 "(one file) and %d (a manifest of parts, written across MPI ranks)",
                                 path, version, CKPT_VERSION, CKPT_VERSION_MANIFEST);
    uint64_t expect = ckpt_get_u64(b + OFF_FILE_BYTES);
    if (size < expect)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is truncated: expected %llu bytes, found %llu", path,
                                 (unsigned long long)expect, (unsigned long long)size);
    if (size > expect)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s is corrupted: expected %llu bytes, found %llu (trailing data)", path,
                                 (unsigned long long)expect, (unsigned long long)size);
    if (size < min || (version == CKPT_VERSION_MANIFEST && size < MAN_FIXED_BYTES + CKPT_CRC_BYTES))
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is corrupted: %llu bytes, a %s has at least %llu",
                                 path, (unsigned long long)size, version == CKPT_VERSION ? "checkpoint" : "manifest",
                                 (unsigned long long)(version == CKPT_VERSION ? min
                                                                              : MAN_FIXED_BYTES + CKPT_CRC_BYTES));
    uint32_t got = ckpt_crc_of(b, (size_t)(size - CKPT_CRC_BYTES)), want = ckpt_get_u32(b + size - CKPT_CRC_BYTES);
    if (got != want)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s is corrupted: CRC-32 mismatch (stored %08x, computed %08x)", path,
                                 want, got);
    /* Intact as written: now the fields. */
    h->version = version;
    for (int i = 0; i < 7; i++) {
        h->dims[i] = ckpt_get_i32(b + OFF_DIMS + 4 * i);
        h->pc[i] = ckpt_get_i32(b + OFF_PC + 4 * i);
    }
    for (int i = 0; i < 6; i++)
        h->opt[i] = ckpt_get_f64(b + OFF_OPT + 8 * i);
    h->seed = ckpt_get_u64(b + OFF_SEED);
    h->steps = ckpt_get_i64(b + OFF_STEPS);
    h->iteration = ckpt_get_i64(b + OFF_ITER);
    h->pipes = ckpt_get_u32(b + OFF_PIPES);
    h->chunks = ckpt_get_u32(b + OFF_CHUNKS);
    /* Counters in range before anyone uses them: a caller's int loop index
     * must not wrap (the limit is far beyond any real run). */
    int rc = 0;
    if (h->iteration < 0 || h->iteration > CKPT_MAX_COUNT)
        rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has iteration counter %lld, outside 0..%d: "
                               "corrupted or not written by this program", path, (long long)h->iteration,
                               CKPT_MAX_COUNT);
    else if (h->steps < 0 || h->steps > CKPT_MAX_COUNT)
        rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has step count %lld, outside 0..%d: "
                               "corrupted or not written by this program", path, (long long)h->steps, CKPT_MAX_COUNT);
    else
        rc = parse_tables(path, b, size, h);
    if (rc < 0) {
        ckpt_header_clear(h);
        memset(h, 0, sizeof *h);
    }
    return rc;
}

/* ---- a part against its manifest ---- */

int ckpt_part_check(const char *path, const char *man_path, const ckpt_header_t *h, uint32_t p,
                    const unsigned char *q, uint64_t size)
{
    const ckpt_part_t *pe = &h->part[p];
    if (size != pe->bytes)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s is %s: expected %llu bytes, found %llu",
                                 path, size < pe->bytes ? "truncated" : "corrupted", (unsigned long long)pe->bytes,
                                 (unsigned long long)size);
    /* size == pe->bytes >= PART_FIXED_BYTES + CKPT_CRC_BYTES (ckpt_image_parse) */
    uint32_t got = ckpt_crc_of(q, (size_t)(size - CKPT_CRC_BYTES)), stored = ckpt_get_u32(q + size - CKPT_CRC_BYTES);
    if (got != stored || got != pe->crc)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s is corrupted: CRC-32 %08x, the part stores "
                                 "%08x and the manifest lists %08x", path, got, stored, pe->crc);
    if (memcmp(q, PART_MAGIC, 8) != 0 || ckpt_get_u32(q + 8) != PART_VERSION)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is not a part of a bsipipe checkpoint (bad magic "
                                 "or version %u)", path, ckpt_get_u32(q + 8));
    if (ckpt_get_u32(q + 12) != pe->rank || ckpt_get_u64(q + 16) != size ||
        ckpt_get_i64(q + 24) != h->iteration || ckpt_get_u64(q + 32) != h->nonce)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s does not belong to %s (another save's "
                                 "iteration or nonce, or another rank's part)", path, man_path);
    /* The part's own table: its entries tile its data, and they are, in
     * order, the replicas the manifest places in it, where it places them
     * (both were written from the same table). */
    uint32_t k = ckpt_get_u32(q + 40);
    uint64_t end = size - CKPT_CRC_BYTES, d = PART_FIXED_BYTES + (uint64_t)k * PART_REPLICA_BYTES;
    if (d > end)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s is corrupted: its table of %u replicas runs "
                                 "past its data", path, k);
    uint64_t i = 0, nrep = n_rep(h);
    for (uint32_t j = 0; j < k; j++) {
        const unsigned char *t = q + PART_FIXED_BYTES + (size_t)j * PART_REPLICA_BYTES;
        int32_t pipe = ckpt_get_i32(t), chunk = ckpt_get_i32(t + 4), dev = ckpt_get_i32(t + 8);
        int64_t base = ckpt_get_i64(t + 16), n = ckpt_get_i64(t + 24);
        if (ckpt_get_u32(t + 12) != 0 || n < 0 || (uint64_t)n > (end - d) / 12)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s is corrupted: its entry %u (%lld elements, "
                                     "reserved field %u) does not fit its data", path, j, (long long)n,
                                     ckpt_get_u32(t + 12));
        while (i < nrep && h->rep[i].part != (int32_t)p)
            i++;
        if (i == nrep)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s holds %u replicas, %s places fewer in it",
                                     path, k, man_path);
        const ckpt_replica_t *r = &h->rep[i++];
        if (pipe != r->pipe || chunk != r->chunk || dev != r->device || base != r->base || n != r->n ||
            d != r->offset)
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s places replica %llu (pipe %d, chunk %d, device "
                                     "%d, elements [%lld, +%lld)) at byte %llu of part %s, whose entry %u is (pipe "
                                     "%d, chunk %d, device %d, elements [%lld, +%lld)) at byte %llu: the manifest "
                                     "and the part disagree", man_path, (unsigned long long)(i - 1), r->pipe,
                                     r->chunk, r->device, (long long)r->base, (long long)r->n,
                                     (unsigned long long)r->offset, path, j, pipe, chunk, dev, (long long)base,
                                     (long long)n, (unsigned long long)d);
        d += 12 * (uint64_t)n;
    }
    while (i < nrep && h->rep[i].part != (int32_t)p)
        i++;
    if (i < nrep)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s places replica %llu in part %s, which holds only %u "
                                 "replicas", man_path, (unsigned long long)i, path, k);
    if (d != end)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: part %s is corrupted: its replicas' data ends at byte "
                                 "%llu, its CRC starts at %llu", path, (unsigned long long)d,
                                 (unsigned long long)end);
    return 0;
}

/* ---- a header against the engine's ---- */

static const char *const dims_names[7] = {"family", "n_layers", "hidden", "n_heads", "ffn_hidden", "vocab",
                                          "seq_len"};
static const char *const pc_names[7] = {"schedule", "w", "p", "k", "m", "tp", "partition"};
static const char *const opt_names[6] = {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"};

/* kind: 0 a number, 1 family, 2 schedule, 3 partition. */
static const char *field_value(int kind, int32_t v, char *buf, size_t n)
{
    const char *s = NULL;
    if (kind == 1)
        s = v == BSIPIPE_MODEL_GPT ? "gpt" : v == BSIPIPE_MODEL_LLAMA ? "llama" : NULL;
    else if (kind == 2)
        s = v >= 0 && v < BSIPIPE_SCHED_COUNT ? bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)v) : NULL;
    else if (kind == 3)
        s = v == BSIPIPE_PARTITION_BALANCED ? "balanced" : v == BSIPIPE_PARTITION_EVEN ? "even" : NULL;
    if (s)
        return s;
    snprintf(buf, n, "%d", v);
    return buf;
}

int ckpt_header_match(const char *path, const ckpt_header_t *want, const ckpt_header_t *got)
{
    char bc[32], be[32];
    for (int i = 0; i < 7; i++) {
        int kind = i == 0 ? 1 : 0;
        if (got->dims[i] != want->dims[i])
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s is of another model: checkpoint has %s=%s, this run has %s=%s",
                                     path, dims_names[i], field_value(kind, got->dims[i], bc, sizeof bc),
                                     dims_names[i], field_value(kind, want->dims[i], be, sizeof be));
    }
    for (int i = 0; i < 7; i++) {
        int kind = i == 0 ? 2 : i == 6 ? 3 : 0;
        /* tp (i = 5) records the degree that saved the file: the data is the
         * whole-model vector whatever the degree, so any degree resumes it. */
        if (i != 5 && got->pc[i] != want->pc[i])
            return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s is of another parallel config: checkpoint has "
                                     "%s=%s, this run has %s=%s", path, pc_names[i],
                                     field_value(kind, got->pc[i], bc, sizeof bc), pc_names[i],
                                     field_value(kind, want->pc[i], be, sizeof be));
    }
    for (int i = 0; i < 6; i++)
        if (memcmp(&got->opt[i], &want->opt[i], sizeof(double)) != 0)
            return bsipipe_error_set(BSIPIPE_EFORMAT,
                                     "checkpoint: %s has other optimizer settings: checkpoint has %s=%.17g, this run "
                                     "has %s=%.17g", path, opt_names[i], got->opt[i], opt_names[i], want->opt[i]);
    if (got->seed != want->seed)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s has another seed: checkpoint has seed=%llu, this run "
                                 "has seed=%llu", path, (unsigned long long)got->seed,
                                 (unsigned long long)want->seed);
    if (got->pipes != want->pipes || got->chunks != want->chunks)
        return bsipipe_error_set(BSIPIPE_EFORMAT,
                                 "checkpoint: %s has %u pipes x %u chunks of replicas, this run has %u x %u", path,
                                 got->pipes, got->chunks, want->pipes, want->chunks);
    /* The layout (which layers each chunk holds) may differ: each pipe's
     * replicas must tile the same whole-model vector, in chunk order. */
    return replicas_tile(path, got, want);
}

/* ---- a directory ---- */

char *ckpt_path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int ckpt_load_open(const char *dir, ckpt_load_t *l)
{
    memset(l, 0, sizeof *l);
    if (!(l->dir = strdup(dir)) || !(l->path = ckpt_path_join(dir, CKPT_FILE))) {
        ckpt_load_close(l);
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    }
    int rc = ckpt_file_read(l->path, &l->image, &l->size);
    if (rc == 0)
        rc = ckpt_image_parse(l->path, l->image, l->size, &l->h);
    if (rc == 0 && l->h.version == CKPT_VERSION_MANIFEST && !(l->part = calloc(l->h.n_parts, sizeof *l->part)))
        rc = bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    if (rc < 0) {
        free(l->image);
        l->image = NULL;
        l->size = 0;
        ckpt_header_clear(&l->h);
    }
    return rc;
}

int ckpt_load_part(ckpt_load_t *l, uint32_t p)
{
    if (l->h.version != CKPT_VERSION_MANIFEST)
        return 0;
    if (p >= l->h.n_parts)
        return bsipipe_error_set(-EINVAL, "checkpoint: %s has no part %u", l->path, p);
    if (l->part[p])
        return 0;
    char *path = ckpt_path_join(l->dir, l->h.part[p].name);
    if (!path)
        return bsipipe_error_set(-ENOMEM, "checkpoint: out of memory");
    unsigned char *q = NULL;
    uint64_t size = 0;
    int rc = ckpt_file_read(path, &q, &size);
    if (rc == -ENOENT)
        rc = bsipipe_error_set(BSIPIPE_EFORMAT, "checkpoint: %s names the part %s, which is missing: the checkpoint "
                               "is incomplete (a part was deleted)", l->path, path);
    if (rc == 0)
        rc = ckpt_part_check(path, l->path, &l->h, p, q, size);
    if (rc == 0)
        l->part[p] = q;
    else
        free(q);
    free(path);
    return rc;
}

const unsigned char *ckpt_load_replica(const ckpt_load_t *l, size_t i)
{
    const ckpt_replica_t *r = &l->h.rep[i];
    if (l->h.version != CKPT_VERSION_MANIFEST)
        return l->image + r->offset;
    return l->part[r->part] ? l->part[r->part] + r->offset : NULL;
}

void ckpt_load_close(ckpt_load_t *l)
{
    for (uint32_t p = 0; l->part && p < l->h.n_parts; p++)
        free(l->part[p]);
    free(l->part);
    ckpt_header_clear(&l->h);
    free(l->image);
    free(l->path);
    free(l->dir);
    memset(l, 0, sizeof *l);
}
