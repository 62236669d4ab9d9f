/* tasks/checkpoint_format.h: the checkpoint files (docs/checkpoint.md)
 * without StarPU or an engine: CRC-32, little-endian fields, the header's
 * encoding, reading a file, and the checks of an image on its own
 * (ckpt_image_parse: a version-1 file or a version-2 manifest), of a part
 * against its manifest (ckpt_part_check), and of a parsed header against
 * the one the loading engine expects (ckpt_header_match).
 * engine_checkpoint.c saves and loads through it; fuzz/fuzz_checkpoint.c
 * feeds it arbitrary bytes. Internal to the library (not exported, not
 * installed). */
#ifndef BSIPIPE_CHECKPOINT_FORMAT_H
#define BSIPIPE_CHECKPOINT_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CKPT_MAGIC "BSIPCKPT"
#define CKPT_FILE "checkpoint.bin"
#define PART_MAGIC "BSIPPART"
enum {
    CKPT_VERSION = 1,          /* one file: every replica */
    CKPT_VERSION_MANIFEST = 2, /* across ranks: a manifest naming one part per rank */
    CKPT_FIXED_BYTES = 160,    /* header before the replica table */
    CKPT_REPLICA_BYTES = 32,   /* i32 pipe, chunk, device, 0; i64 base, n */
    CKPT_CRC_BYTES = 4,
    MAN_FIXED_BYTES = 176,     /* manifest: the v1 fixed header, then n_parts, nranks, nonce */
    MAN_REPLICA_BYTES = 40,    /* i32 pipe, chunk, device, part; i64 base, n; u64 offset in the part */
    MAN_PART_BYTES = 80,       /* char name[64]; u64 bytes; u32 crc; u32 rank */
    MAN_NAME_BYTES = 64,
    PART_VERSION = 1,
    PART_FIXED_BYTES = 48,     /* magic, version, rank, file_bytes, iteration, nonce, n_replicas, 0 */
    PART_REPLICA_BYTES = 32,   /* i32 pipe, chunk, device, 0; i64 base, n */
    CKPT_MAX_COUNT = 0x7fffffff, /* iteration counter and step count: 0..INT_MAX */
    CKPT_MAX_PARTS = 1 << 20,  /* parts of a manifest (one per rank) */
};

/* Offsets in the fixed part (docs/checkpoint.md has the table). */
enum {
    OFF_MAGIC = 0, OFF_VERSION = 8, OFF_HEADER_BYTES = 12, OFF_FILE_BYTES = 16,
    OFF_DIMS = 24,   /* 7 x i32: family, n_layers, hidden, n_heads, ffn_hidden, vocab, seq_len */
    OFF_PC = 52,     /* 7 x i32: schedule, w, p, k, m, tp, partition */
    OFF_OPT = 80,    /* 6 x f64: lr, beta1, beta2, eps, weight_decay, grad_clip */
    OFF_SEED = 128, OFF_STEPS = 136, OFF_ITER = 144, OFF_PIPES = 152, OFF_CHUNKS = 156,
    OFF_N_PARTS = 160, OFF_NRANKS = 164, OFF_NONCE = 168, /* manifest only */
};

/* ---- little-endian fields ---- */

static inline void ckpt_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void ckpt_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void ckpt_put_f64(unsigned char *p, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    ckpt_put_u64(p, u);
}

static inline uint32_t ckpt_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ckpt_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline int32_t ckpt_get_i32(const unsigned char *p) { return (int32_t)ckpt_get_u32(p); }
static inline int64_t ckpt_get_i64(const unsigned char *p) { return (int64_t)ckpt_get_u64(p); }

static inline double ckpt_get_f64(const unsigned char *p)
{
    uint64_t u = ckpt_get_u64(p);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* n floats as little-endian binary32 into dst (memcpy on little-endian hosts). */
static inline void ckpt_floats_to_le(unsigned char *dst, const float *src, size_t n)
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

static inline void ckpt_floats_from_le(float *dst, const unsigned char *src, size_t n)
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

/* ---- CRC-32/ISO-HDLC (zlib's crc32: reflected 0xEDB88320, init and xorout ~0) ---- */

/* "DIR/NAME" (checkpoint.bin, a part, a temp file); caller frees; NULL when
 * out of memory. */
char *ckpt_path_join(const char *dir, const char *name);

typedef struct ckpt_crc {
    unsigned long crc; /* zlib's uLong */
} ckpt_crc_t;
void ckpt_crc_init(ckpt_crc_t *c);
void ckpt_crc_update(ckpt_crc_t *c, const void *data, size_t n);
uint32_t ckpt_crc_final(const ckpt_crc_t *c);
uint32_t ckpt_crc_of(const void *data, size_t n);

/* ---- the header ---- */

/* One replica: the slice [base, base+n) of the whole-model vector held by
 * (pipe, chunk) on `device`; its params, m and v (12 n bytes) lie at
 * `offset` of the image (version 1) or of part `part` (version 2). */
typedef struct ckpt_replica {
    int32_t pipe, chunk, device, part;
    int64_t base, n;
    uint64_t offset;
} ckpt_replica_t;

/* One part of a manifest: a file of the checkpoint's directory. */
typedef struct ckpt_part {
    char name[MAN_NAME_BYTES]; /* NUL-terminated */
    uint64_t bytes;
    uint32_t crc, rank;
} ckpt_part_t;

/* Everything in a header. rep has pipes*chunks entries, pipe-major, part
 * n_parts (version 2 only); both owned by whoever filled the header
 * (ckpt_image_parse: free them with ckpt_header_clear). */
typedef struct ckpt_header {
    uint32_t version;
    int32_t dims[7];   /* family, n_layers, hidden, n_heads, ffn_hidden, vocab, seq_len */
    int32_t pc[7];     /* schedule, w, p, k, m, tp, partition */
    double opt[6];     /* lr, beta1, beta2, eps, weight_decay, grad_clip */
    uint64_t seed;
    int64_t steps, iteration;
    uint32_t pipes, chunks;
    ckpt_replica_t *rep;
    uint32_t n_parts, nranks; /* version 2 */
    uint64_t nonce;
    ckpt_part_t *part;
} ckpt_header_t;

/* Offset of the tensor data (version 1) or of the CRC (version 2), and the
 * size of the whole file, CRC included. */
uint64_t ckpt_header_bytes(const ckpt_header_t *h);
uint64_t ckpt_file_bytes(const ckpt_header_t *h);
/* Writes the header (ckpt_header_bytes(h) bytes) into out. */
void ckpt_header_encode(const ckpt_header_t *h, unsigned char *out);
void ckpt_header_clear(ckpt_header_t *h); /* frees rep and part; NULL fields are fine */

/* A name a manifest may give a part: a file of the checkpoint's directory
 * (no '/', not hidden), NUL-terminated within MAN_NAME_BYTES. */
int ckpt_part_name_ok(const char *name, size_t len);
/* 1 if name is what a save across ranks names a part
 * (checkpoint-i<ITER>-<NONCE>-r<RANK>.part), 0 otherwise. */
int ckpt_is_part_name(const char *name);
/* 1 if the temporary named with `pid` is stale: pid is ours (an earlier
 * failed call) or no such process exists; 0 when it may be mid-save. */
int ckpt_temp_is_stale(long pid);

/* Reads a regular file whole (a FIFO or device is refused, not waited on).
 * *out: malloc'ed, caller frees. Errors: -ENOENT, -EINVAL, -errno, -ENOMEM,
 * each with a detail naming path. */
int ckpt_file_read(const char *path, unsigned char **out, uint64_t *size);

/* Checks an image of checkpoint.bin on its own, in this order: magic, size
 * against the header's file_bytes, version, CRC-32, counters in
 * 0..CKPT_MAX_COUNT, then the layout: 1 or 2 pipes, at least one chunk,
 * header_bytes (and file_bytes) following from the tables, the replica
 * table in pipe-major order with non-negative slices; version 1: a zero
 * reserved field, the tensor data tiling the rest up to the CRC; version 2:
 * 1..CKPT_MAX_PARTS parts, one per writer rank, each named as
 * ckpt_part_name_ok says, big enough for its header and CRC, and every
 * replica inside its part's data. 0 and *h filled (caller clears it), or
 * BSIPIPE_EFORMAT / -ENOMEM with a detail naming path; *h is then empty.
 * An accepted image starts with ckpt_header_encode(h). */
int ckpt_image_parse(const char *path, const unsigned char *b, uint64_t size, ckpt_header_t *h);

/* Checks the bytes q[0..size) read from part p (at `path`) of manifest h
 * (its checkpoint.bin at man_path): the size and CRC-32 the manifest lists,
 * the CRC it stores, its magic, version, rank, size field, the manifest's
 * iteration and nonce, and the part's own replica table: its entries tile
 * the part's data and are, in order, the replicas the manifest places in
 * it, at the offsets it gives. 0 or BSIPIPE_EFORMAT naming the file. */
int ckpt_part_check(const char *path, const char *man_path, const ckpt_header_t *h, uint32_t p,
                    const unsigned char *q, uint64_t size);

/* Compares a parsed header with the one the loading engine expects: model,
 * parallel config but its tp (the data is the whole-model vector at any
 * degree), optimizer, seed, pipes x chunks and each replica's slice
 * (counters, devices and where the data lies are not compared). 0 or
 * BSIPIPE_EFORMAT naming the first field that differs. */
int ckpt_header_match(const char *path, const ckpt_header_t *want, const ckpt_header_t *got);

/* ---- a checkpoint directory, read and checked ---- */

typedef struct ckpt_load {
    char *dir, *path;       /* path: DIR/checkpoint.bin */
    unsigned char *image;   /* its bytes */
    uint64_t size;
    ckpt_header_t h;
    unsigned char **part;   /* version 2: the parts read so far (ckpt_load_part), else NULL */
} ckpt_load_t;

/* Reads DIR/checkpoint.bin and parses it (ckpt_image_parse). On failure *l
 * is empty (ckpt_load_close is still fine). */
int ckpt_load_open(const char *dir, ckpt_load_t *l);
/* Version 2: reads part p of the manifest once and checks it
 * (ckpt_part_check; a missing part is named as such). Version 1: 0. */
int ckpt_load_part(ckpt_load_t *l, uint32_t p);
/* The params of replica i (m and v follow, n floats each), little-endian
 * binary32; NULL for a replica whose part was not read. */
const unsigned char *ckpt_load_replica(const ckpt_load_t *l, size_t i);
void ckpt_load_close(ckpt_load_t *l);

#endif
