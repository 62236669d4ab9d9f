#!/usr/bin/env python3
"""fuzz/gen-checkpoint-seeds.py DIR: writes the seed checkpoints of fuzz/fuzz_checkpoint
(docs/checkpoint.md, format version 1): small but complete files, so that the fuzzer
starts from images that pass every check. Run once; the files are committed."""
import os
import struct
import sys
import zlib


def image(pipes, chunks, sizes, iteration=3, steps=3, seed=1234, device=None):
    reps = []
    base = 0
    for i in range(pipes * chunks):
        n = sizes[i % len(sizes)]
        reps.append((i // chunks, i % chunks, (device or (lambda i: i % chunks))(i), base, n))
        base = (base + n) if i // chunks == 0 else base
    header_bytes = 160 + 32 * len(reps)
    data = b"".join(struct.pack("<%df" % (3 * n), *[0.25 * (j + 1) for j in range(3 * n)]) for *_, n in reps)
    file_bytes = header_bytes + len(data) + 4
    h = b"BSIPCKPT" + struct.pack("<IIQ", 1, header_bytes, file_bytes)
    h += struct.pack("<7i", 0, 4, 32, 4, 128, 64, 16)             # GPT, L=4, d=32, 4 heads, ffn, vocab, S
    h += struct.pack("<7i", 8 if pipes == 2 else 1, 2, 2 if pipes == 2 else 1, 2 if pipes == 2 else 1, 4, 1, 0)
    h += struct.pack("<6d", 1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0)
    h += struct.pack("<QqqII", seed, steps, iteration, pipes, chunks)
    assert len(h) == 160
    for pipe, chunk, dev, b, n in reps:
        h += struct.pack("<iiiiqq", pipe, chunk, dev, 0, b, n)
    body = h + data
    return body + struct.pack("<I", zlib.crc32(body) & 0xffffffff)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    one = image(1, 2, [3, 2])
    two = image(2, 4, [2, 1, 1, 3], iteration=7, steps=7)
    seeds = {
        "one-pipe": one,
        "two-pipes": two,
        "empty-replica": image(1, 1, [0], iteration=0, steps=0),
        "bad-crc": one[:-1] + bytes([one[-1] ^ 1]),
        "truncated": two[: len(two) // 2],
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
