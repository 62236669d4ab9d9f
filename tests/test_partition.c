/* test_partition: even and compute-balanced subsequence partitions. */
#include "graph/bsipipe_partition.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <stdlib.h>

/* Every piece of a balanced split costs the ideal total/k within the cost of
 * `align` tokens at the piece's end (the rounding of one boundary on each
 * side moves at most align tokens). */
static void check_balanced(bsipipe_piece_cost_t cost, int seq, int k, int align)
{
    int *st = malloc(sizeof(int) * (size_t)(k + 1));
    int rc = bsipipe_partition_balanced_cost(seq, k, align, cost, st);
    CHECK(rc == 0, "balanced S=%d k=%d align=%d: %s", seq, k, align, bsipipe_error_detail());
    if (rc == 0) {
        double total = bsipipe_piece_flops(cost, 0, seq), ideal = total / k, worst = 0;
        CHECK(st[0] == 0 && st[k] == seq, "ends 0 and S");
        for (int j = 0; j < k; j++) {
            CHECK(st[j + 1] > st[j] && st[j] % align == 0, "piece %d non-empty and aligned", j);
            double f = bsipipe_piece_flops(cost, st[j], st[j + 1]);
            /* one token's cost at the piece's end, times align, per boundary */
            double tok = bsipipe_piece_flops(cost, st[j + 1] - 1 < 0 ? 0 : st[j + 1] - 1, st[j + 1]);
            double dev = fabs(f - ideal) / tok;
            if (dev > worst) worst = dev;
            if (j + 1 < k && seq / align >= 4 * k)
                CHECK(st[j + 1] - st[j] >= st[j + 2] - st[j + 1] - align, "earlier pieces are longer");
        }
        /* Each boundary is off by at most half an alignment unit of cost
         * (nearest multiple), two boundaries per piece. */
        if (seq / align >= 2 * k)
            CHECK(worst <= align + 1e-9, "S=%d k=%d align=%d: a piece is %.3f tokens of cost off the ideal", seq, k,
                  align, worst);
    }
    free(st);
}

int main(void)
{
    bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 64, 1280, 32, 5120, 50257, 20480};
    bsipipe_piece_cost_t cost = bsipipe_piece_cost_of_model(&gpt);
    int st[65];

    /* Even split: lengths differ by at most one alignment unit. */
    CHECK(bsipipe_partition_even(10, 3, 1, st) == 0 && st[1] == 4 && st[2] == 7 && st[3] == 10, "even 10/3");
    CHECK(bsipipe_partition_even(16, 4, 2, st) == 0 && st[1] == 4 && st[4] == 16, "even 16/4 align 2");
    CHECK(bsipipe_partition_even(7, 1, 1, st) == 0 && st[0] == 0 && st[1] == 7, "k=1");
    CHECK(bsipipe_partition_even(5, 5, 1, st) == 0 && st[3] == 3 && st[5] == 5, "k=S");

    /* Balanced split at the paper's scale and at the edges. */
    check_balanced(cost, 20480, 2, 1);
    check_balanced(cost, 20480, 4, 2);
    check_balanced(cost, 8192, 64, 1);
    check_balanced(cost, 1001, 3, 1);   /* S not divisible by k */
    check_balanced(cost, 1000, 1, 1);   /* k = 1 */
    check_balanced(cost, 37, 37, 1);    /* k = S: every piece one token */
    check_balanced((bsipipe_piece_cost_t){0, 1}, 4096, 4, 1); /* attention only */
    check_balanced((bsipipe_piece_cost_t){1, 0}, 4096, 4, 1); /* linear only: even */
    CHECK(bsipipe_partition_balanced_cost(37, 37, 1, cost, st) == 0 && st[36] == 36, "k=S gives unit pieces");
    CHECK(bsipipe_partition_balanced(&gpt, 2, 1, st) == 0 && st[1] > 10240,
          "causal attention makes the first half longer (%d)", st[1]);

    /* The planner's alignment: the kernels' 16-token granule (with D_t) when
     * every piece keeps at least 8 of it on average, else D_t alone. */
    CHECK(bsipipe_partition_align(512, 2, 1) == 16, "512 tokens in 2 pieces: granule 16");
    CHECK(bsipipe_partition_align(512, 4, 1) == 16, "512 in 4 pieces: 128 tokens each, still 16");
    CHECK(bsipipe_partition_align(512, 5, 1) == 1, "512 in 5: under 128 tokens a piece, no granule");
    CHECK(bsipipe_partition_align(256, 2, 2) == 16, "D_t = 2 divides the granule");
    CHECK(bsipipe_partition_align(768, 2, 3) == 48, "D_t = 3: lcm(16, 3)");
    CHECK(bsipipe_partition_align(520, 2, 1) == 1, "520 is not a multiple of 16");
    CHECK(bsipipe_partition_align(64, 2, 4) == 4, "a short sequence keeps D_t");
    {
        bsipipe_model_dims_t small = {BSIPIPE_MODEL_GPT, 8, 128, 4, 512, 256, 512};
        int al = bsipipe_partition_align(small.seq_len, 2, 1);
        CHECK(bsipipe_partition_balanced(&small, 2, al, st) == 0 && st[1] == 288,
              "S=512 hidden 128 cut at 288 (the exact balance is 287), got %d", st[1]);
    }

    /* Errors name the problem. */
    CHECK(bsipipe_partition_even(10, 0, 1, st) == -EINVAL, "k=0");
    CHECK_CONTAINS(bsipipe_error_detail(), "k (subsequences) must be >= 1");
    CHECK(bsipipe_partition_even(10, 11, 1, st) == -EINVAL, "k > S");
    CHECK_CONTAINS(bsipipe_error_detail(), "use k <= 10");
    CHECK(bsipipe_partition_balanced_cost(10, 2, 4, cost, st) == -EINVAL, "S not a multiple of align");
    CHECK_CONTAINS(bsipipe_error_detail(), "nearest valid lengths: 8 or 12");
    CHECK(bsipipe_partition_balanced_cost(10, 2, 1, (bsipipe_piece_cost_t){0, 0}, st) == -EINVAL, "zero cost");
    return check_finish("test_partition");
}
