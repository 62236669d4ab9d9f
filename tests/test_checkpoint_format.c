/* test_checkpoint_format: the checks bsipipe_engine_load makes on the bytes
 * it reads (tasks/checkpoint_format.c, docs/checkpoint.md), without StarPU
 * or MPI: a version-1 file and a version-2 manifest with its part, built
 * here with the encoder the engine saves with, are accepted and round-trip;
 * each corruption below, sealed with a valid CRC so that only the check
 * under test can refuse it, is refused with BSIPIPE_EFORMAT naming the
 * problem. Among them the finding of fuzz/fuzz_checkpoint (docs/fuzzing.md,
 * #9): a manifest whose replica table disagrees with its part's own table
 * (an offset shifted by one float, another device) was loaded, the
 * parameters silently shifted. Built from the format's sources (the library
 * does not export them). */
#include "tasks/checkpoint_format.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <stdlib.h>

enum { PIPES = 2, CHUNKS = 2, NREP = PIPES * CHUNKS };
static const int64_t rep_n[NREP] = {3, 2, 2, 3};

static void header(ckpt_header_t *h, ckpt_replica_t *rep, int version)
{
    memset(h, 0, sizeof *h);
    *h = (ckpt_header_t){.version = (uint32_t)version, .dims = {0, 4, 32, 2, 128, 256, 16},
                         .pc = {8, 2, 2, 2, 4, 1, 0}, .opt = {1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0}, .seed = 1234,
                         .steps = 3, .iteration = 3, .pipes = PIPES, .chunks = CHUNKS, .rep = rep};
    uint64_t off = CKPT_FIXED_BYTES + NREP * CKPT_REPLICA_BYTES;
    for (int i = 0; i < NREP; i++) {
        rep[i] = (ckpt_replica_t){.pipe = i / CHUNKS, .chunk = i % CHUNKS, .device = i % CHUNKS,
                                  .base = i % CHUNKS ? rep_n[i - 1] : 0, .n = rep_n[i], .offset = off};
        off += 12 * (uint64_t)rep_n[i];
    }
}

static void seal(unsigned char *b, size_t size)
{
    ckpt_put_u32(b + size - CKPT_CRC_BYTES, ckpt_crc_of(b, size - CKPT_CRC_BYTES));
}

/* A version-1 image of h: header, data (byte i = i), CRC. */
static unsigned char *image_v1(const ckpt_header_t *h, size_t *size)
{
    *size = (size_t)ckpt_file_bytes(h);
    unsigned char *b = malloc(*size);
    for (size_t i = 0; i < *size; i++)
        b[i] = (unsigned char)i;
    ckpt_header_encode(h, b);
    seal(b, *size);
    return b;
}

/* Manifest of one part holding every replica (as one rank writes it), and
 * that part. */
static unsigned char *part_image(const ckpt_header_t *h, size_t *size)
{
    size_t table = PART_FIXED_BYTES + NREP * PART_REPLICA_BYTES, data = 0;
    for (int i = 0; i < NREP; i++)
        data += 12 * (size_t)rep_n[i];
    *size = table + data + CKPT_CRC_BYTES;
    unsigned char *q = calloc(1, *size);
    memcpy(q, PART_MAGIC, 8);
    ckpt_put_u32(q + 8, PART_VERSION);
    ckpt_put_u32(q + 12, 0);
    ckpt_put_u64(q + 16, *size);
    ckpt_put_u64(q + 24, (uint64_t)h->iteration);
    ckpt_put_u64(q + 32, h->nonce);
    ckpt_put_u32(q + 40, NREP);
    for (int i = 0; i < NREP; i++) {
        unsigned char *t = q + PART_FIXED_BYTES + i * PART_REPLICA_BYTES;
        ckpt_put_u32(t, (uint32_t)h->rep[i].pipe);
        ckpt_put_u32(t + 4, (uint32_t)h->rep[i].chunk);
        ckpt_put_u32(t + 8, (uint32_t)h->rep[i].device);
        ckpt_put_u64(t + 16, (uint64_t)h->rep[i].base);
        ckpt_put_u64(t + 24, (uint64_t)h->rep[i].n);
    }
    for (size_t i = table; i < table + data; i++)
        q[i] = (unsigned char)(i * 7);
    seal(q, *size);
    return q;
}

static void manifest_header(ckpt_header_t *h, ckpt_replica_t *rep, ckpt_part_t *part, uint64_t part_bytes,
                            uint32_t part_crc)
{
    header(h, rep, CKPT_VERSION_MANIFEST);
    h->n_parts = h->nranks = 1;
    h->nonce = 0x1234abcd5678ef01ull;
    h->part = part;
    memset(part, 0, sizeof *part);
    snprintf(part->name, sizeof part->name, "checkpoint-i3-1234abcd5678ef01-r0.part");
    part->bytes = part_bytes;
    part->crc = part_crc;
    uint64_t off = PART_FIXED_BYTES + NREP * PART_REPLICA_BYTES;
    for (int i = 0; i < NREP; i++) {
        rep[i].part = 0;
        rep[i].offset = off;
        off += 12 * (uint64_t)rep_n[i];
    }
}

static unsigned char *image_v2(const ckpt_header_t *h, size_t *size)
{
    *size = (size_t)ckpt_file_bytes(h);
    unsigned char *b = malloc(*size);
    ckpt_header_encode(h, b);
    seal(b, *size);
    return b;
}

/* b refused by ckpt_image_parse with a detail containing want. */
static void expect_image_refused(const unsigned char *b, size_t size, const char *what, const char *want)
{
    ckpt_header_t got;
    int rc = ckpt_image_parse("DIR/checkpoint.bin", b, size, &got);
    CHECK(rc == BSIPIPE_EFORMAT, "%s: rc %d (%s)", what, rc, rc ? bsipipe_error_detail() : "accepted");
    CHECK(got.rep == NULL && got.part == NULL, "%s: tables left after a refusal", what);
    CHECK_CONTAINS(bsipipe_error_detail(), want);
    CHECK_CONTAINS(bsipipe_error_detail(), "DIR/checkpoint.bin");
    ckpt_header_clear(&got);
}

static void test_v1(void)
{
    ckpt_header_t h, got;
    ckpt_replica_t rep[NREP];
    header(&h, rep, CKPT_VERSION);
    size_t size;
    unsigned char *b = image_v1(&h, &size);
    int rc = ckpt_image_parse("DIR/checkpoint.bin", b, size, &got);
    CHECK(rc == 0, "a version-1 image: %s", bsipipe_error_detail());
    if (rc == 0) {
        CHECK(ckpt_header_match("DIR/checkpoint.bin", &h, &got) == 0, "match: %s", bsipipe_error_detail());
        for (int i = 0; i < NREP; i++)
            CHECK(got.rep[i].offset == rep[i].offset && got.rep[i].n == rep[i].n, "replica %d at %llu", i,
                  (unsigned long long)got.rep[i].offset);
        h.pc[1] = 4;
        CHECK(ckpt_header_match("DIR/checkpoint.bin", &h, &got) == BSIPIPE_EFORMAT, "another w matched");
        CHECK_CONTAINS(bsipipe_error_detail(), "checkpoint has w=2, this run has w=4");
        h.pc[1] = 2;
        /* The tensor-parallel degree is not compared: the file holds the
         * whole-model vectors, which any degree resumes. */
        int32_t tp = h.pc[5];
        h.pc[5] = tp == 4 ? 2 : 4;
        CHECK(ckpt_header_match("DIR/checkpoint.bin", &h, &got) == 0, "another tp refused: %s",
              bsipipe_error_detail());
        h.pc[5] = tp;
        /* Another layout (pipe 1 split 3 + 2 instead of 2 + 3) matches:
         * each pipe's replicas tile the same model; a gap does not. */
        got.rep[2].n = 3, got.rep[3].base = 3, got.rep[3].n = 2;
        CHECK(ckpt_header_match("DIR/checkpoint.bin", &h, &got) == 0, "another layout refused: %s",
              bsipipe_error_detail());
        got.rep[3].base = 4, got.rep[3].n = 1;
        CHECK(ckpt_header_match("DIR/checkpoint.bin", &h, &got) == BSIPIPE_EFORMAT, "a gap matched");
        CHECK_CONTAINS(bsipipe_error_detail(), "the replica of pipe 1, chunk 1 holds elements [4, +1), which do not "
                       "continue its pipe's model at 3");
        got.rep[3].base = 3, got.rep[3].n = 1;
        CHECK(ckpt_header_match("DIR/checkpoint.bin", &h, &got) == BSIPIPE_EFORMAT, "a shorter pipe matched");
        CHECK_CONTAINS(bsipipe_error_detail(), "pipe 1's replicas hold 4 elements, this run's 5");
    }
    ckpt_header_clear(&got);

    unsigned char *bad = malloc(size);
    /* A nonzero reserved field of the replica table. */
    memcpy(bad, b, size);
    ckpt_put_u32(bad + CKPT_FIXED_BYTES + 12, 7);
    seal(bad, size);
    expect_image_refused(bad, size, "reserved field", "nonzero reserved field");
    /* Entries out of order. */
    memcpy(bad, b, size);
    ckpt_put_u32(bad + CKPT_FIXED_BYTES + 4, 1);
    seal(bad, size);
    expect_image_refused(bad, size, "order", "replica table entry 0");
    /* One element more, or fewer, in the first replica: the data no longer tiles. */
    memcpy(bad, b, size);
    ckpt_put_u64(bad + CKPT_FIXED_BYTES + 24, 4);
    seal(bad, size);
    expect_image_refused(bad, size, "one element more", "run past the data");
    memcpy(bad, b, size);
    ckpt_put_u64(bad + CKPT_FIXED_BYTES + 24, 2);
    seal(bad, size);
    expect_image_refused(bad, size, "one element fewer", "the CRC starts at");
    /* A slice of 2^62 elements (12 bytes each would wrap 64 bits). */
    memcpy(bad, b, size);
    ckpt_put_u64(bad + CKPT_FIXED_BYTES + 24, 1ull << 62);
    seal(bad, size);
    expect_image_refused(bad, size, "huge slice", "run past the data");
    /* Three pipes; no chunk. */
    memcpy(bad, b, size);
    ckpt_put_u32(bad + OFF_PIPES, 3);
    seal(bad, size);
    expect_image_refused(bad, size, "3 pipes", "3 pipes x 2 chunks");
    memcpy(bad, b, size);
    ckpt_put_u32(bad + OFF_CHUNKS, 0);
    seal(bad, size);
    expect_image_refused(bad, size, "no chunk", "2 pipes x 0 chunks");
    /* A header_bytes field that does not follow from the counts. */
    memcpy(bad, b, size);
    ckpt_put_u32(bad + OFF_HEADER_BYTES, CKPT_FIXED_BYTES);
    seal(bad, size);
    expect_image_refused(bad, size, "header_bytes", "a header of 160 bytes");
    free(bad);
    free(b);
}

static void test_v2(void)
{
    ckpt_header_t h, got;
    ckpt_replica_t rep[NREP];
    ckpt_part_t part;
    manifest_header(&h, rep, &part, 0, 0);
    size_t psize, size;
    unsigned char *q = part_image(&h, &psize);
    manifest_header(&h, rep, &part, psize, ckpt_crc_of(q, psize - CKPT_CRC_BYTES));
    unsigned char *b = image_v2(&h, &size);
    int rc = ckpt_image_parse("DIR/checkpoint.bin", b, size, &got);
    CHECK(rc == 0, "a manifest: %s", bsipipe_error_detail());
    if (rc == 0) {
        CHECK(strcmp(got.part[0].name, part.name) == 0, "part name %s", got.part[0].name);
        rc = ckpt_part_check("DIR/part", "DIR/checkpoint.bin", &got, 0, q, psize);
        CHECK(rc == 0, "its part: %s", bsipipe_error_detail());
        unsigned char *enc = malloc(size);
        ckpt_header_encode(&got, enc);
        CHECK(memcmp(enc, b, size - CKPT_CRC_BYTES) == 0, "the manifest does not round-trip");
        free(enc);
    }
    ckpt_header_clear(&got);

    /* The finding (#9): the manifest and its part disagree, the manifest
     * sealed with a valid CRC: refused, not loaded shifted. */
    static const struct {
        const char *what;
        int field; /* 0: replica 1's offset + 4; 1: replica 2's device; 2: replica 0's offset into the table */
    } disagree[] = {{"an offset shifted by one float", 0}, {"another device", 1}, {"data inside the table", 2}};
    for (size_t c = 0; c < sizeof disagree / sizeof *disagree; c++) {
        ckpt_replica_t r2[NREP];
        memcpy(r2, rep, sizeof r2);
        ckpt_header_t h2 = h;
        h2.rep = r2;
        if (disagree[c].field == 0)
            r2[1].offset += 4;
        else if (disagree[c].field == 1)
            r2[2].device = 5;
        else
            r2[0].offset = PART_FIXED_BYTES;
        size_t s2;
        unsigned char *b2 = image_v2(&h2, &s2);
        rc = ckpt_image_parse("DIR/checkpoint.bin", b2, s2, &got);
        CHECK(rc == 0, "%s: the manifest alone: %s", disagree[c].what, bsipipe_error_detail());
        if (rc == 0) {
            rc = ckpt_part_check("DIR/part", "DIR/checkpoint.bin", &got, 0, q, psize);
            CHECK(rc == BSIPIPE_EFORMAT, "%s: rc %d", disagree[c].what, rc);
            CHECK_CONTAINS(bsipipe_error_detail(), "the manifest and the part disagree");
            CHECK_CONTAINS(bsipipe_error_detail(), "DIR/part");
        }
        ckpt_header_clear(&got);
        free(b2);
    }

    /* The part: another rank's, another save's, a table that does not tile. */
    rc = ckpt_image_parse("DIR/checkpoint.bin", b, size, &got);
    unsigned char *bad = malloc(psize);
    static const struct {
        const char *what, *want;
        size_t at;
        uint32_t value;
    } parts[] = {{"another rank's part", "another rank's part", 12, 1},
                 {"another save's part", "another save's", 32, 99},
                 {"one replica fewer in its table", "the manifest and the part disagree", 40, NREP - 1},
                 {"a reserved field", "reserved field 1", PART_FIXED_BYTES + 12, 1}};
    for (size_t c = 0; rc == 0 && c < sizeof parts / sizeof *parts; c++) {
        memcpy(bad, q, psize);
        ckpt_put_u32(bad + parts[c].at, parts[c].value);
        seal(bad, psize);
        got.part[0].crc = ckpt_get_u32(bad + psize - CKPT_CRC_BYTES); /* as if the manifest listed it */
        int prc = ckpt_part_check("DIR/part", "DIR/checkpoint.bin", &got, 0, bad, psize);
        CHECK(prc == BSIPIPE_EFORMAT, "%s: rc %d", parts[c].what, prc);
        CHECK_CONTAINS(bsipipe_error_detail(), parts[c].want);
    }
    ckpt_header_clear(&got);
    free(bad);

    /* The manifest: a part listed as another rank's, a name with a path, a
     * name not padded with zeros. */
    ckpt_part_t p2 = part;
    ckpt_header_t h2 = h;
    h2.part = &p2;
    p2.rank = 1;
    unsigned char *b2 = image_v2(&h2, &size);
    expect_image_refused(b2, size, "rank", "listed as rank 1's");
    free(b2);
    p2 = part;
    snprintf(p2.name, sizeof p2.name, "../x.part");
    b2 = image_v2(&h2, &size);
    expect_image_refused(b2, size, "a path", "no valid file name");
    free(b2);
    b2 = image_v2(&h, &size);
    b2[MAN_FIXED_BYTES + NREP * MAN_REPLICA_BYTES + MAN_NAME_BYTES - 1] = 'x';
    seal(b2, size);
    expect_image_refused(b2, size, "padding", "not padded with zero bytes");
    free(b2);
    free(b);
    free(q);
}

int main(void)
{
    test_v1();
    test_v2();
    return check_finish("test_checkpoint_format");
}
