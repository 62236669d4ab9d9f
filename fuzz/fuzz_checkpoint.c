/* fuzz_checkpoint: arbitrary bytes as DIR/checkpoint.bin (a version-1 file
 * or a version-2 manifest) and as a part of a manifest (docs/checkpoint.md),
 * through tasks/checkpoint_format.c, the code bsipipe_engine_load runs
 * before it touches the engine.
 *
 * Input: byte 0 picks the mode (its value % 3) and, in mode 2, the part
 * (its value / 3, modulo the parts listed); then
 *   mode 0: the image of checkpoint.bin, checked as given and sealed;
 *   mode 1: the same, sealed with its header_bytes also set from its counts
 *           (so the tables are reached whatever the mutation did to them);
 *   mode 2: u32 n, n bytes of a manifest, the rest is the part: the part is
 *           sealed (size field, CRC), the manifest's entry for it set to its
 *           size and CRC, the manifest sealed.
 * Sealed: file_bytes set to the size and the CRC-32 recomputed, since random
 * bytes would otherwise stop at the size or the CRC and the checks behind
 * them would never run.
 * Properties: no crash, leak or read outside the bytes; a refusal is
 * BSIPIPE_EFORMAT (or -ENOMEM) with a detail naming the file and leaves no
 * tables behind; an accepted image round-trips (the header re-encoded from
 * what was parsed is the image's, byte for byte; version 1: the replicas'
 * data tiles the rest up to the CRC); an accepted part holds the data of
 * every replica the manifest places in it (read here whole, as the engine's
 * load copies it); matching an accepted header against itself passes and
 * against an engine that differs in one compared field (tp is not one) is refused; the same
 * bytes read from files in a scratch directory (ckpt_load_open,
 * ckpt_load_part) give the same outcome as in memory. */
#include "fuzz/fuzz_util.h"
#include "base/bsipipe_error.h"
#include "tasks/checkpoint_format.h"

#include <fcntl.h>
#include <sys/stat.h>

#define MAN_PATH "fuzz/checkpoint.bin"
#define PART_PATH "fuzz/part"

static char dir[4096], man_file[4200];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void cleanup(void)
{
    if (*man_file)
        unlink(man_file);
    if (*dir)
        rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_silence_stderr();
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bsipipe-fuzz-ckpt.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        *dir = 0; /* no scratch space: the in-memory checks still run */
    else
        snprintf(man_file, sizeof man_file, "%s/" CKPT_FILE, dir);
    atexit(cleanup);
    return 0;
}

/* file_bytes = size and the CRC recomputed. */
static void seal(unsigned char *b, size_t size)
{
    if (size < OFF_FILE_BYTES + 8 + CKPT_CRC_BYTES)
        return;
    ckpt_put_u64(b + OFF_FILE_BYTES, size);
    ckpt_put_u32(b + size - CKPT_CRC_BYTES, ckpt_crc_of(b, size - CKPT_CRC_BYTES));
}

/* header_bytes from the image's own counts (where they are readable). */
static void set_header_bytes(unsigned char *b, size_t size)
{
    if (size < MAN_FIXED_BYTES)
        return;
    uint64_t nrep = (uint64_t)ckpt_get_u32(b + OFF_PIPES) * ckpt_get_u32(b + OFF_CHUNKS);
    uint64_t hb = ckpt_get_u32(b + OFF_VERSION) == CKPT_VERSION_MANIFEST
                      ? MAN_FIXED_BYTES + nrep * MAN_REPLICA_BYTES + ckpt_get_u32(b + OFF_N_PARTS) * (uint64_t)MAN_PART_BYTES
                      : CKPT_FIXED_BYTES + nrep * CKPT_REPLICA_BYTES;
    if (hb <= UINT32_MAX)
        ckpt_put_u32(b + OFF_HEADER_BYTES, (uint32_t)hb);
}

static unsigned char *copy(const uint8_t *p, size_t n)
{
    unsigned char *c = malloc(n ? n : 1);
    FUZZ_REQUIRE(c != NULL, "out of memory");
    if (n)
        memcpy(c, p, n);
    return c;
}

static void require_refusal(int rc, const char *path, const ckpt_header_t *h)
{
    FUZZ_REQUIRE(rc == BSIPIPE_EFORMAT || rc == -ENOMEM, "rc %d (%s)", rc, bsipipe_error_detail());
    const char *why = bsipipe_error_detail();
    FUZZ_REQUIRE(why && strstr(why, path), "detail '%s' does not name %s", why ? why : "(null)", path);
    FUZZ_REQUIRE(!h || (h->rep == NULL && h->part == NULL), "a refused parse left its tables");
}

/* want: h with field f changed (0..26); 1 if f is compared by the match. */
static int differs_in(const ckpt_header_t *h, int f, ckpt_header_t *want)
{
    size_t n = (size_t)h->pipes * h->chunks;
    *want = *h;
    want->part = NULL;
    want->rep = malloc(sizeof *want->rep * n);
    FUZZ_REQUIRE(want->rep != NULL, "out of memory");
    memcpy(want->rep, h->rep, sizeof *want->rep * n);
    if (f < 7)
        want->dims[f] ^= 1;
    else if (f == 12) {
        want->pc[5] ^= 1; /* tp: the data is the whole-model vector at any degree, not compared */
        return 0;
    } else if (f < 14)
        want->pc[f - 7] ^= 1;
    else if (f < 20)
        want->opt[f - 14] = want->opt[f - 14] == 1.0 ? 2.0 : 1.0;
    else if (f == 20)
        want->seed++;
    else if (f == 21)
        want->rep[n - 1].n ^= 1;
    else if (f == 22) {
        want->rep[0].base ^= 1; /* the slices may differ (another layout): only the pipes' totals are compared */
        return 0;
    } else if (f == 23)
        want->chunks++; /* the replica count differs: refused before any replica is compared */
    else
        return 0; /* counters, devices, parts and offsets are not compared: a match */
    return 1;
}

/* An accepted image: the properties above. */
static void check_accepted(const unsigned char *b, size_t size, const ckpt_header_t *h, unsigned pick)
{
    uint64_t hb = ckpt_header_bytes(h);
    FUZZ_REQUIRE(hb <= size - CKPT_CRC_BYTES && ckpt_file_bytes(h) == size, "header %llu, file %llu, image %zu",
                 (unsigned long long)hb, (unsigned long long)ckpt_file_bytes(h), size);
    FUZZ_REQUIRE(h->pipes >= 1 && h->pipes <= 2 && h->chunks >= 1, "%u pipes, %u chunks", h->pipes, h->chunks);
    FUZZ_REQUIRE(h->iteration >= 0 && h->iteration <= CKPT_MAX_COUNT && h->steps >= 0 && h->steps <= CKPT_MAX_COUNT,
                 "counters %lld %lld", (long long)h->iteration, (long long)h->steps);
    unsigned char *enc = malloc((size_t)hb);
    FUZZ_REQUIRE(enc != NULL, "out of memory");
    ckpt_header_encode(h, enc);
    FUZZ_REQUIRE(memcmp(enc, b, (size_t)hb) == 0, "the re-encoded header differs from the image's");
    free(enc);
    size_t n = (size_t)h->pipes * h->chunks;
    uint64_t off = hb;
    for (size_t i = 0; i < n; i++) {
        const ckpt_replica_t *r = &h->rep[i];
        FUZZ_REQUIRE(r->n >= 0 && r->base >= 0, "replica %zu: n %lld base %lld", i, (long long)r->n,
                     (long long)r->base);
        if (h->version == CKPT_VERSION_MANIFEST) {
            FUZZ_REQUIRE(r->part >= 0 && (uint32_t)r->part < h->n_parts, "replica %zu in part %d", i, r->part);
            FUZZ_REQUIRE(r->offset + 12 * (uint64_t)r->n <= h->part[r->part].bytes - CKPT_CRC_BYTES,
                         "replica %zu past its part", i);
            continue;
        }
        FUZZ_REQUIRE(r->offset == off, "replica %zu at %llu, expected %llu", i, (unsigned long long)r->offset,
                     (unsigned long long)off);
        off += 12 * (uint64_t)r->n;
        FUZZ_REQUIRE(off <= size - CKPT_CRC_BYTES, "replica %zu ends past the data", i);
    }
    FUZZ_REQUIRE(h->version == CKPT_VERSION_MANIFEST || off == size - CKPT_CRC_BYTES,
                 "the replicas end at %llu, the CRC at %zu", (unsigned long long)off, size - CKPT_CRC_BYTES);
    FUZZ_REQUIRE(ckpt_header_match(MAN_PATH, h, h) == 0, "%s", bsipipe_error_detail());
    ckpt_header_t want;
    int f = (int)(pick % 26), differs = differs_in(h, f, &want);
    int rc = ckpt_header_match(MAN_PATH, &want, h);
    FUZZ_REQUIRE(differs ? rc == BSIPIPE_EFORMAT : rc == 0, "field %d: rc %d (%s)", f, rc, bsipipe_error_detail());
    if (differs)
        FUZZ_REQUIRE(strstr(bsipipe_error_detail(), MAN_PATH), "%s", bsipipe_error_detail());
    ckpt_header_clear(&want);
}

/* Writes b to path (0), or -1 without scratch space. */
static int put_file(const char *path, const unsigned char *b, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    int ok = write(fd, b, size) == (ssize_t)size;
    close(fd);
    return ok ? 0 : -1;
}

/* checkpoint.bin alone: in memory, then from a file; a manifest's parts are
 * missing there, and refused naming the part. */
static void check_image(const unsigned char *b, size_t size, unsigned pick, int files)
{
    ckpt_header_t h;
    int rc = ckpt_image_parse(MAN_PATH, b, size, &h);
    if (rc < 0)
        require_refusal(rc, MAN_PATH, &h);
    else
        check_accepted(b, size, &h, pick);
    if (files && *dir && put_file(man_file, b, size) == 0) {
        ckpt_load_t l;
        int frc = ckpt_load_open(dir, &l);
        FUZZ_REQUIRE(frc == rc, "from a file: rc %d, in memory %d (%s)", frc, rc, bsipipe_error_detail());
        if (frc < 0) {
            FUZZ_REQUIRE(strstr(bsipipe_error_detail(), man_file), "%s", bsipipe_error_detail());
        } else if (l.h.version == CKPT_VERSION) {
            for (size_t i = 0; i < (size_t)l.h.pipes * l.h.chunks; i++) {
                const unsigned char *p = ckpt_load_replica(&l, i);
                FUZZ_REQUIRE(p >= l.image && p + 12 * (size_t)l.h.rep[i].n <= l.image + l.size - CKPT_CRC_BYTES,
                             "replica %zu outside the image", i);
            }
        } else {
            frc = ckpt_load_part(&l, 0);
            FUZZ_REQUIRE(frc == BSIPIPE_EFORMAT && strstr(bsipipe_error_detail(), "which is missing"),
                         "a missing part: rc %d (%s)", frc, bsipipe_error_detail());
            FUZZ_REQUIRE(ckpt_load_replica(&l, 0) == NULL || l.h.rep[0].part != 0, "data of a part not read");
        }
        ckpt_load_close(&l);
        unlink(man_file);
    }
    ckpt_header_clear(&h);
}

/* An accepted part agrees with its own table: every replica the manifest
 * places in it is one of the part's entries (pipe, chunk, device, slice),
 * at the offset where the part's data, entry after entry, puts it. */
static void require_part_table(const ckpt_header_t *h, uint32_t p, const unsigned char *q)
{
    uint32_t k = ckpt_get_u32(q + 40);
    for (size_t i = 0; i < (size_t)h->pipes * h->chunks; i++) {
        const ckpt_replica_t *r = &h->rep[i];
        if ((uint32_t)r->part != p)
            continue;
        uint64_t d = PART_FIXED_BYTES + (uint64_t)k * PART_REPLICA_BYTES;
        int found = 0;
        for (uint32_t j = 0; j < k && !found; j++) {
            const unsigned char *t = q + PART_FIXED_BYTES + (size_t)j * PART_REPLICA_BYTES;
            if (ckpt_get_i32(t) == r->pipe && ckpt_get_i32(t + 4) == r->chunk) {
                found = 1;
                FUZZ_REQUIRE(ckpt_get_i32(t + 8) == r->device && ckpt_get_i64(t + 16) == r->base &&
                                 ckpt_get_i64(t + 24) == r->n && d == r->offset,
                             "replica %zu: the manifest places it at %llu, the part's entry %u at %llu", i,
                             (unsigned long long)r->offset, j, (unsigned long long)d);
            }
            d += 12 * (uint64_t)ckpt_get_i64(t + 24);
        }
        FUZZ_REQUIRE(found, "replica %zu (pipe %d, chunk %d) is not in part %u's table", i, r->pipe, r->chunk, p);
    }
}

/* The replica data of part p, read whole (as the engine copies it). */
static unsigned sum_part_data(const ckpt_header_t *h, uint32_t p, const unsigned char *q, size_t qsize)
{
    unsigned sum = 0;
    for (size_t i = 0; i < (size_t)h->pipes * h->chunks; i++) {
        const ckpt_replica_t *r = &h->rep[i];
        if ((uint32_t)r->part != p)
            continue;
        FUZZ_REQUIRE(r->offset + 12 * (uint64_t)r->n <= qsize - CKPT_CRC_BYTES, "replica %zu past part %u", i, p);
        for (size_t j = 0; j < 12 * (size_t)r->n; j++)
            sum += q[r->offset + j];
    }
    return sum;
}

/* A manifest and one of its parts. */
static void check_part(const unsigned char *in, size_t size, unsigned pick)
{
    fuzz_input_t fi = {in, size};
    uint32_t mlen = fuzz_u32(&fi);
    if (mlen > fi.n)
        mlen = (uint32_t)fi.n;
    unsigned char *man = copy(fi.p, mlen), *part = copy(fi.p + mlen, fi.n - mlen);
    size_t psize = fi.n - mlen;
    /* The part sealed; its manifest entry made to list it. */
    if (psize >= PART_FIXED_BYTES + CKPT_CRC_BYTES) {
        ckpt_put_u64(part + 16, psize);
        ckpt_put_u32(part + psize - CKPT_CRC_BYTES, ckpt_crc_of(part, psize - CKPT_CRC_BYTES));
    }
    uint32_t p = 0;
    if (mlen >= MAN_FIXED_BYTES) {
        uint32_t np = ckpt_get_u32(man + OFF_N_PARTS);
        uint64_t nrep = (uint64_t)ckpt_get_u32(man + OFF_PIPES) * ckpt_get_u32(man + OFF_CHUNKS);
        p = np ? pick % np : 0;
        uint64_t at = MAN_FIXED_BYTES + nrep * MAN_REPLICA_BYTES + (uint64_t)p * MAN_PART_BYTES;
        if (at + MAN_PART_BYTES <= mlen) {
            ckpt_put_u64(man + at + MAN_NAME_BYTES, psize);
            if (psize >= CKPT_CRC_BYTES)
                ckpt_put_u32(man + at + MAN_NAME_BYTES + 8, ckpt_get_u32(part + psize - CKPT_CRC_BYTES));
        }
    }
    seal(man, mlen);
    ckpt_header_t h;
    int rc = ckpt_image_parse(MAN_PATH, man, mlen, &h);
    if (rc < 0) {
        require_refusal(rc, MAN_PATH, &h);
    } else if (h.version == CKPT_VERSION_MANIFEST) {
        check_accepted(man, mlen, &h, pick);
        rc = ckpt_part_check(PART_PATH, MAN_PATH, &h, p, part, psize);
        if (rc < 0)
            require_refusal(rc, PART_PATH, NULL);
        else {
            require_part_table(&h, p, part);
            (void)sum_part_data(&h, p, part, psize);
        }
        /* The same from files: the manifest as checkpoint.bin, the part
         * under the name it lists (unless that is checkpoint.bin itself). */
        char *pfile = NULL;
        if (*dir && strcmp(h.part[p].name, CKPT_FILE) != 0 && put_file(man_file, man, mlen) == 0 &&
            (pfile = malloc(strlen(dir) + MAN_NAME_BYTES + 2))) {
            sprintf(pfile, "%s/%s", dir, h.part[p].name);
            if (put_file(pfile, part, psize) == 0) {
                ckpt_load_t l;
                int frc = ckpt_load_open(dir, &l);
                FUZZ_REQUIRE(frc == 0, "the manifest from a file: %s", bsipipe_error_detail());
                frc = ckpt_load_part(&l, p);
                FUZZ_REQUIRE((frc < 0) == (rc < 0), "part %u from a file: rc %d, in memory %d (%s)", p, frc, rc,
                             bsipipe_error_detail());
                if (frc < 0)
                    FUZZ_REQUIRE(strstr(bsipipe_error_detail(), pfile), "%s", bsipipe_error_detail());
                for (size_t i = 0; frc == 0 && i < (size_t)h.pipes * h.chunks; i++) {
                    const unsigned char *d = ckpt_load_replica(&l, i);
                    FUZZ_REQUIRE((d != NULL) == ((uint32_t)h.rep[i].part == p), "replica %zu: data %p", i,
                                 (const void *)d);
                    if (d)
                        FUZZ_REQUIRE(memcmp(d, part + h.rep[i].offset, 12 * (size_t)h.rep[i].n) == 0,
                                     "replica %zu: other data from the file", i);
                }
                ckpt_load_close(&l);
            }
            unlink(pfile);
            unlink(man_file);
        }
        free(pfile);
    }
    ckpt_header_clear(&h);
    free(man);
    free(part);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0] % 3, pick = data[0] / 3 + (size > 1 ? data[size / 2] : 0);
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    if (mode == 2) {
        check_part(b, n, data[0] / 3);
        return 0;
    }
    unsigned char *c = copy(b, n);
    if (mode == 0)
        check_image(c, n, pick, 0); /* as given */
    else
        set_header_bytes(c, n);
    seal(c, n);
    check_image(c, n, pick, 1);
    free(c);
    return 0;
}
