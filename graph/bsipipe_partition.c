/* bsipipe_partition.c: even and compute-balanced subsequence partitions. */
#include "graph/bsipipe_partition.h"
#include "base/bsipipe_error.h"

#include <math.h>

bsipipe_piece_cost_t bsipipe_piece_cost_of_model(const bsipipe_model_dims_t *dims)
{
    double h = dims->hidden, f = dims->ffn_hidden;
    /* QKV + output projections: 4h² MACs per token; MLP: 2 (GeLU) or 3
     * (SwiGLU) matrices of h·f. Attention: QK^T and PV, h MACs each per pair. */
    double mlp_mats = dims->family == BSIPIPE_MODEL_LLAMA ? 3.0 : 2.0;
    bsipipe_piece_cost_t c = {
        .linear_per_token = 2.0 * (4.0 * h * h + mlp_mats * h * f),
        .attn_per_pair = 2.0 * 2.0 * h,
    };
    return c;
}

/* C(P): cost of the first P tokens. */
static double prefix_cost(bsipipe_piece_cost_t c, long p)
{
    return c.linear_per_token * (double)p + c.attn_per_pair * 0.5 * (double)p * (double)(p + 1);
}

double bsipipe_piece_flops(bsipipe_piece_cost_t cost, long start, long end)
{
    return prefix_cost(cost, end) - prefix_cost(cost, start);
}

int bsipipe_partition_align(int seq_len, int k, int tp)
{
    int a = BSIPIPE_PARTITION_GRANULE, b = tp;
    if (tp < 1 || k < 1)
        return tp;
    while (b) { /* gcd(granule, tp) */
        int t = a % b;
        a = b;
        b = t;
    }
    long lcm = (long)BSIPIPE_PARTITION_GRANULE / a * tp;
    if (seq_len % lcm == 0 && (long)seq_len >= 8 * lcm * k)
        return (int)lcm;
    return tp;
}

static int check_split(int seq_len, int k, int align)
{
    if (align < 1)
        return bsipipe_error_set(-EINVAL, "partition: align must be >= 1 (got %d)", align);
    if (k < 1)
        return bsipipe_error_set(-EINVAL, "partition: k (subsequences) must be >= 1 (got %d)", k);
    if (seq_len < 1 || seq_len % align != 0)
        return bsipipe_error_set(-EINVAL,
            "partition: sequence length %d must be a positive multiple of the alignment %d "
            "(D_t); nearest valid lengths: %d or %d",
            seq_len, align, seq_len / align * align > 0 ? seq_len / align * align : align,
            (seq_len / align + 1) * align);
    if (k > seq_len / align)
        return bsipipe_error_set(-EINVAL,
            "partition: cannot split %d tokens into %d pieces of at least %d token(s); "
            "use k <= %d", seq_len, k, align, seq_len / align);
    return 0;
}

int bsipipe_partition_even(int seq_len, int k, int align, int *starts)
{
    int rc = check_split(seq_len, k, align);
    if (rc < 0)
        return rc;
    int units = seq_len / align, base = units / k, extra = units % k;
    starts[0] = 0;
    for (int j = 0; j < k; j++)  /* the first `extra` pieces get one unit more */
        starts[j + 1] = starts[j] + (base + (j < extra ? 1 : 0)) * align;
    return 0;
}

int bsipipe_partition_balanced_cost(int seq_len, int k, int align,
                                    bsipipe_piece_cost_t cost, int *starts)
{
    int rc = check_split(seq_len, k, align);
    if (rc < 0)
        return rc;
    if (!(cost.linear_per_token >= 0 && cost.attn_per_pair >= 0) ||
        cost.linear_per_token + cost.attn_per_pair <= 0)
        return bsipipe_error_set(-EINVAL, "partition: cost coefficients must be >= 0, not both 0");
    int units = seq_len / align;
    double total = prefix_cost(cost, seq_len);
    starts[0] = 0;
    for (int j = 1; j < k; j++) {
        double target = total * j / k;
        /* Invert C(P) = target (a quadratic in P), then pick the nearer of the
         * two neighbouring multiples of align. */
        double a = 0.5 * cost.attn_per_pair, b = cost.linear_per_token + 0.5 * cost.attn_per_pair;
        double p = a > 0 ? (-b + sqrt(b * b + 4 * a * target)) / (2 * a) : target / b;
        long lo = (long)floor(p / align), hi = lo + 1;
        long u = fabs(prefix_cost(cost, lo * align) - target) <=
                 fabs(prefix_cost(cost, hi * align) - target) ? lo : hi;
        /* Keep every piece non-empty: room for the pieces still to come. */
        long min_u = starts[j - 1] / align + 1, max_u = units - (k - j);
        if (u < min_u) u = min_u;
        if (u > max_u) u = max_u;
        starts[j] = (int)(u * align);
    }
    starts[k] = seq_len;
    return 0;
}

int bsipipe_partition_balanced(const bsipipe_model_dims_t *dims, int k, int align, int *starts)
{
    if (!dims)
        return bsipipe_error_set(-EINVAL, "partition: no model dimensions given");
    return bsipipe_partition_balanced_cost(dims->seq_len, k, align,
                                           bsipipe_piece_cost_of_model(dims), starts);
}
