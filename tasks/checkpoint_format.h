/* tasks/checkpoint_format.h: the checkpoint file format (docs/checkpoint.md)
 * without StarPU or an engine: CRC-32, the header's encoding, reading the
 * file, and the checks of an image, first on its own (ckpt_image_parse: magic,
 * size, version, CRC, counters, a self-consistent layout) and then against
 * the header the engine expects (ckpt_header_match). engine_checkpoint.c
 * builds on it; fuzz/fuzz_checkpoint.c feeds it arbitrary bytes. Internal to
 * the library (not exported, not installed). */
#ifndef BSIPIPE_CHECKPOINT_FORMAT_H
#define BSIPIPE_CHECKPOINT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAGIC "BSIPCKPT"
enum {
    CKPT_VERSION = 1,
    CKPT_FIXED_BYTES = 160,      /* header before the replica table */
    CKPT_REPLICA_BYTES = 32,     /* one replica table entry */
    CKPT_CRC_BYTES = 4,
    CKPT_MAX_COUNT = 0x7fffffff, /* iteration counter and step count: 0..INT_MAX */
};

/* CRC-32 (IEEE 802.3, reflected 0xEDB88320: zlib's crc32), slicing by 8. */
typedef struct ckpt_crc {
    uint32_t t[8][256];
    uint32_t crc; /* running value, pre-inverted */
} ckpt_crc_t;
void ckpt_crc_init(ckpt_crc_t *c);
void ckpt_crc_update(ckpt_crc_t *c, const void *data, size_t n);
uint32_t ckpt_crc_final(const ckpt_crc_t *c);

void ckpt_put_u32(unsigned char *p, uint32_t v);
uint32_t ckpt_get_u32(const unsigned char *p);

/* One entry of the replica table: the slice [base, base+n) of the
 * whole-model vector held by (pipe, chunk) on `device`. */
typedef struct ckpt_replica {
    int32_t pipe, chunk, device;
    int64_t base, n;
} ckpt_replica_t;

/* Everything in a header. rep has pipes*chunks entries, pipe-major; it is
 * owned by whoever filled the header (ckpt_image_parse: free it with
 * ckpt_header_clear). */
typedef struct ckpt_header {
    int32_t dims[7];   /* family, n_layers, hidden, n_heads, ffn_hidden, vocab, seq_len */
    int32_t pc[7];     /* schedule, w, p, k, m, tp, partition */
    double opt[6];     /* lr, beta1, beta2, eps, weight_decay, grad_clip */
    uint64_t seed;
    int64_t steps, iteration;
    uint32_t pipes, chunks;
    ckpt_replica_t *rep;
} ckpt_header_t;

/* Offset of the tensor data (fixed part + replica table), and the size of
 * the whole file (12 bytes per parameter of every replica, and the CRC). */
uint64_t ckpt_header_bytes(const ckpt_header_t *h);
uint64_t ckpt_file_bytes(const ckpt_header_t *h);
/* Writes the header into out (ckpt_header_bytes(h) bytes). */
void ckpt_header_encode(const ckpt_header_t *h, unsigned char *out);
void ckpt_header_clear(ckpt_header_t *h); /* frees rep; NULL is fine */

/* Reads a regular file whole (a FIFO or device is refused, not waited on).
 * *out: malloc'ed, caller frees. Errors: -ENOENT, -EINVAL, -errno, -ENOMEM,
 * each with a detail naming path. */
int ckpt_file_read(const char *path, unsigned char **out, uint64_t *size);

/* Checks an image on its own, in this order: magic, size against the
 * header's file_bytes, version, CRC-32, counters in 0..CKPT_MAX_COUNT, then
 * the layout: 1 or 2 pipes, at least one chunk, header_bytes and file_bytes
 * that follow from the replica table, every entry in table order with
 * non-negative base and n. 0 and *h filled (caller clears it), or
 * BSIPIPE_EFORMAT / -ENOMEM with a detail naming path; *h is then empty.
 * Every image accepted is the one ckpt_header_encode writes for *h, followed
 * by the tensor data and its CRC. */
int ckpt_image_parse(const char *path, const unsigned char *b, uint64_t size, ckpt_header_t *h);

/* Compares a parsed header with the one the loading engine expects: model,
 * parallel config, optimizer, seed, replica count and each replica's slice
 * (counters and devices are not compared). 0 or BSIPIPE_EFORMAT naming the
 * first field that differs. */
int ckpt_header_match(const char *path, const ckpt_header_t *want, const ckpt_header_t *got);

#endif
