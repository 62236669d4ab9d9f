/* tests/test_data.h: the engine tests' batches — m sequences of S tokens
 * from a seeded LCG, each target a fixed map of its token (so training can
 * learn it and the loss falls). Same seed, same batch, on every rank. */
#ifndef BSIPIPE_TESTS_TEST_DATA_H
#define BSIPIPE_TESTS_TEST_DATA_H

static inline void test_data_make(int m, int S, int V, unsigned seed, int *tokens, int *targets)
{
    unsigned x = seed * 2654435761u + 12345u;
    for (long i = 0; i < (long)m * S; i++) {
        x = x * 1664525u + 1013904223u;
        tokens[i] = (int)((x >> 8) % (unsigned)V);
        targets[i] = (tokens[i] * 7 + 3) % V;
    }
}

#endif
