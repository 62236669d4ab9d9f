/* fuzz/fuzz_util.h: helpers shared by the libFuzzer targets (docs/fuzzing.md).
 * Header-only: each target is one translation unit plus the library's
 * sources, built with clang -fsanitize=fuzzer,address,undefined. */
#ifndef BSIPIPE_FUZZ_UTIL_H
#define BSIPIPE_FUZZ_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A property every input must keep: on failure the input is a finding, so
 * name what broke and abort (libFuzzer saves the input as crash-*). Written
 * to fd 2 through a fresh stream: the targets silence `stderr` (below). */
#define FUZZ_REQUIRE(cond, ...)                                                                                        \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            FILE *fz_err = fdopen(dup(2), "w");                                                                        \
            if (fz_err) {                                                                                              \
                fprintf(fz_err, "fuzz: %s:%d: property failed: %s: ", __FILE__, __LINE__, #cond);                     \
                fprintf(fz_err, __VA_ARGS__);                                                                          \
                fprintf(fz_err, "\n");                                                                                 \
                fclose(fz_err);                                                                                        \
            }                                                                                                          \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

/* The library and the apps' helpers print their refusals on stderr: at a
 * million inputs that is most of the time spent. libFuzzer keeps its own
 * copy of the stream it reports on, and the sanitizers write to fd 2
 * directly, so only the code under test is silenced. */
static inline void fuzz_silence_stderr(void)
{
    FILE *null = fopen("/dev/null", "w");
    if (null)
        stderr = null;
}

/* Reads fields from the input in order; past its end every field is 0. */
typedef struct fuzz_input {
    const uint8_t *p;
    size_t n;
} fuzz_input_t;

static inline uint8_t fuzz_byte(fuzz_input_t *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint32_t fuzz_u32(fuzz_input_t *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)fuzz_byte(in) << (8 * i);
    return v;
}

/* An int that is usually small: one byte b gives b-8 (-8..231) when b is
 * below 0xf0; 0xf0..0xff take the next 4 bytes as any int32 (the limits,
 * INT_MIN and INT_MAX, where products overflow). */
static inline int fuzz_int(fuzz_input_t *in)
{
    uint8_t b = fuzz_byte(in);
    return b < 0xf0 ? (int)b - 8 : (int)(int32_t)fuzz_u32(in);
}

#endif
