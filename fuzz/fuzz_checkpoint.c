/* fuzz_checkpoint: arbitrary bytes as DIR/checkpoint.bin (docs/checkpoint.md).
 *
 * Each input is checked three ways: as given; with its file_bytes field and
 * CRC-32 set to match (random bytes would otherwise stop at the size or the
 * CRC, and the checks behind them would never run); and read back from a
 * temporary file through ckpt_file_read, which must give the same bytes.
 * Properties: the parse never crashes or reads outside the image; a refusal
 * is BSIPIPE_EFORMAT with a detail; an accepted image round-trips (the
 * header re-encoded from what was parsed is byte for byte the image's, the
 * tensor data of the replicas tiles the rest up to the CRC, as the engine's
 * load walks it); matching an accepted header against itself passes and
 * against an engine that differs in one field is refused naming it. The
 * engine half of bsipipe_engine_load (StarPU handles) and bsipipe-train's
 * check of the loaded iteration counter against --iters use only fields
 * checked here. */
#include "fuzz/fuzz_util.h"
#include "graph/bsipipe_error.h"
#include "tasks/checkpoint_format.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static char tmp_path[4096];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *t = getenv("TMPDIR");
    snprintf(tmp_path, sizeof tmp_path, "%s/bsipipe-fuzz-ckpt.%ld", t && *t ? t : "/tmp", (long)getpid());
    return 0;
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The engine that would load h, but differing in one field (0..26 picks it). */
static int differs_in(const ckpt_header_t *h, int field, ckpt_header_t *want)
{
    *want = *h;
    size_t n = (size_t)h->pipes * h->chunks;
    want->rep = malloc(sizeof *want->rep * n);
    FUZZ_REQUIRE(want->rep != NULL, "out of memory");
    memcpy(want->rep, h->rep, sizeof *want->rep * n);
    if (field < 7)
        want->dims[field] ^= 1;
    else if (field < 14)
        want->pc[field - 7] ^= 1;
    else if (field < 20)
        want->opt[field - 14] = want->opt[field - 14] == 1.0 ? 2.0 : 1.0;
    else if (field == 20)
        want->seed++;
    else if (field == 21)
        want->rep[n - 1].n++;
    else if (field == 22)
        want->rep[0].base++;
    else
        return 0; /* counters and devices are not compared: a match */
    return 1;
}

static void check_image(const uint8_t *b, size_t size)
{
    ckpt_header_t h;
    int rc = ckpt_image_parse("fuzz/checkpoint.bin", b, size, &h);
    if (rc < 0) {
        FUZZ_REQUIRE(rc == BSIPIPE_EFORMAT || rc == -ENOMEM, "rc %d", rc);
        FUZZ_REQUIRE(h.rep == NULL, "a refused parse left a replica table");
        const char *why = bsipipe_error_detail();
        FUZZ_REQUIRE(why && strstr(why, "fuzz/checkpoint.bin"), "detail '%s' does not name the file",
                     why ? why : "(null)");
        return;
    }
    /* Accepted: the same bytes again from what was parsed. */
    uint64_t hb = ckpt_header_bytes(&h), fb = ckpt_file_bytes(&h);
    FUZZ_REQUIRE(hb <= size && fb == size, "header %llu, file %llu, image %zu", (unsigned long long)hb,
                 (unsigned long long)fb, size);
    FUZZ_REQUIRE(h.pipes >= 1 && h.pipes <= 2 && h.chunks >= 1, "%u pipes, %u chunks", h.pipes, h.chunks);
    FUZZ_REQUIRE(h.iteration >= 0 && h.iteration <= CKPT_MAX_COUNT && h.steps >= 0 && h.steps <= CKPT_MAX_COUNT,
                 "counters %lld %lld", (long long)h.iteration, (long long)h.steps);
    unsigned char *enc = malloc(hb);
    FUZZ_REQUIRE(enc != NULL, "out of memory");
    ckpt_header_encode(&h, enc);
    FUZZ_REQUIRE(memcmp(enc, b, hb) == 0, "the re-encoded header differs from the image's");
    ckpt_crc_t *crc = malloc(sizeof *crc);
    FUZZ_REQUIRE(crc != NULL, "out of memory");
    ckpt_crc_init(crc);
    ckpt_crc_update(crc, enc, hb);
    ckpt_crc_update(crc, b + hb, size - hb - CKPT_CRC_BYTES);
    FUZZ_REQUIRE(ckpt_crc_final(crc) == ckpt_get_u32(b + size - CKPT_CRC_BYTES), "re-encoded CRC differs");
    free(crc);
    free(enc);
    /* The engine's load: params, m, v of each replica in table order. */
    uint64_t off = hb;
    for (size_t i = 0; i < (size_t)h.pipes * h.chunks; i++) {
        FUZZ_REQUIRE(h.rep[i].n >= 0 && h.rep[i].base >= 0, "replica %zu: n %lld base %lld", i,
                     (long long)h.rep[i].n, (long long)h.rep[i].base);
        off += 12 * (uint64_t)h.rep[i].n;
        FUZZ_REQUIRE(off <= size - CKPT_CRC_BYTES, "replica %zu ends past the data", i);
    }
    FUZZ_REQUIRE(off == size - CKPT_CRC_BYTES, "the replicas end at %llu, the CRC at %zu", (unsigned long long)off,
                 size - CKPT_CRC_BYTES);
    /* Matching: an engine of this very layout loads it; one that differs in
     * a compared field refuses it. */
    FUZZ_REQUIRE(ckpt_header_match("fuzz/checkpoint.bin", &h, &h) == 0, "%s", bsipipe_error_detail());
    int field = size > 0 ? b[size / 2] % 24 : 0;
    ckpt_header_t want;
    int differs = differs_in(&h, field, &want);
    rc = ckpt_header_match("fuzz/checkpoint.bin", &want, &h);
    FUZZ_REQUIRE(differs ? rc == BSIPIPE_EFORMAT : rc == 0, "field %d: rc %d (%s)", field, rc,
                 bsipipe_error_detail());
    ckpt_header_clear(&want);
    ckpt_header_clear(&h);
}

/* Through a file: ckpt_file_read must give back the bytes written. */
static void check_file(const uint8_t *b, size_t size)
{
    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return; /* no scratch space: the in-memory checks still ran */
    int ok = write(fd, b, size) == (ssize_t)size;
    close(fd);
    if (!ok)
        return;
    unsigned char *got = NULL;
    uint64_t n = 0;
    int rc = ckpt_file_read(tmp_path, &got, &n);
    FUZZ_REQUIRE(rc == 0, "read back %s: %s", tmp_path, bsipipe_error_detail());
    FUZZ_REQUIRE(n == size && (size == 0 || memcmp(got, b, size) == 0), "read back %llu bytes of %zu",
                 (unsigned long long)n, size);
    check_image(got, (size_t)n);
    free(got);
    unlink(tmp_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_image(data, size);
    if (size >= 24) {
        /* Size and CRC made to match, so the later checks see the bytes. */
        unsigned char *fixed = malloc(size);
        FUZZ_REQUIRE(fixed != NULL, "out of memory");
        memcpy(fixed, data, size);
        put_u64(fixed + 16, size);
        ckpt_crc_t *crc = malloc(sizeof *crc);
        FUZZ_REQUIRE(crc != NULL, "out of memory");
        ckpt_crc_init(crc);
        ckpt_crc_update(crc, fixed, size - CKPT_CRC_BYTES);
        ckpt_put_u32(fixed + size - CKPT_CRC_BYTES, ckpt_crc_final(crc));
        free(crc);
        check_image(fixed, size);
        check_file(fixed, size);
        free(fixed);
    } else {
        check_file(data, size);
    }
    return 0;
}
