/* kernels/cuda/bsipipe_cuda_attention_tc.cu: causal attention over the KV prefix on the
 * tensor cores (see bsipipe_cuda_attention_tc.h).
 *
 * Same algorithm as the fp32 kernels of bsipipe_cuda_kernels.cu (online softmax forward;
 * backward recomputes P from the saved log-sum-exp, one kernel for dK/dV per key tile and
 * one for dQ per query tile), with the products on wmma 16x16x16 bf16 fragments:
 *   forward  S = Q K^T, O += P V                 (O rescaled in shared memory)
 *   dK/dV    S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q   (fragments in registers)
 *   dQ       S = Q K^T,  dP = dO V^T,  dQ += dS K                     (fragments in registers)
 * Block: TC_NW warps x TC_W rows = a TC_B-row tile of queries (keys for dK/dV); the other
 * side streams through shared memory in TC_B-row tiles. head_dim is padded with zeros to
 * hdp, a multiple of 16 (<= 128). Only wmma's documented interface is used (no fragment
 * element layout), so the kernels also build against the CPU emulation (emu/mma.h). */
#include "kernels/cuda/bsipipe_cuda_attention_tc.h"
#include "kernels/cuda/bsipipe_cuda_internal.h"

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

namespace {

using namespace nvcuda;
typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt;

#define TC_W 16                   /* rows per warp (one fragment high) */
#define TC_NW 4                   /* warps per block */
#define TC_NT (32 * TC_NW)        /* threads per block */
#define TC_B (TC_W * TC_NW)       /* rows of a block tile = columns of a score tile */
#define TC_LDS (TC_B + 4)         /* fp32 score rows (a multiple of 4 for wmma) */
#define TC_LDP (TC_B + 8)         /* bf16 P / dS rows (a multiple of 8 for wmma) */
#define TC_MAXHD 128

static inline __host__ __device__ size_t al128(size_t b) { return (b + 127) & ~(size_t)127; }

/* Shared memory. Forward: three bf16 [TC_B][hdp + 8] tiles (Q, K, V), then per warp an fp32
 * score tile [TC_W][TC_LDS], a bf16 P tile [TC_W][TC_LDP] and the fp32 output
 * [TC_W][hdp + 4] (the softmax statistics live in registers). Backward: four bf16 tiles (the block's two, the streamed two), per
 * warp two fp32 score tiles (S and dP; after the loop, the staging of [TC_W][hdp + 4]
 * accumulators) and two bf16 tiles (P and dS), then lse and D of the TC_B rows of the query
 * tile. Every region starts at a multiple of 128 bytes (wmma needs 32). Smaller is better
 * here: more blocks fit on an SM. */
struct tc_layout {
    size_t tile, s, p, o, warp, rows, total;
};

static inline __host__ __device__ tc_layout tc_layout_of(int hdp, bool fwd)
{
    tc_layout L;
    L.tile = al128(sizeof(bf16) * TC_B * (size_t)(hdp + 8));
    L.s = al128(sizeof(float) * TC_W * TC_LDS * (fwd ? 1 : 2));
    L.p = al128(sizeof(bf16) * TC_W * TC_LDP * (fwd ? 1 : 2));
    L.o = fwd ? al128(sizeof(float) * TC_W * (size_t)(hdp + 4)) : 0;
    L.warp = L.s + L.p + L.o;
    L.rows = fwd ? 0 : al128(sizeof(float) * 2 * TC_B);
    L.total = (fwd ? 3 : 4) * L.tile + TC_NW * L.warp + L.rows;
    return L;
}
/* the backward's staging of accumulators fits in its two score tiles */
static_assert(TC_W * (TC_MAXHD + 4) <= 2 * TC_W * TC_LDS, "staging outgrows the score tiles");

/* rows [row0, row0 + nrows) of the head's columns [col0, col0 + hd) -> bf16 tile, zeros
 * beyond (rows >= nrows, columns >= hd): padded products add nothing. Two threads per row
 * (TC_NT = 2 TC_B), each taking every other group of 4 columns, so a pair reads 32
 * contiguous bytes; float4 loads when the rows and the head's columns are 16-byte aligned
 * (head_dim and ld multiples of 4), else scalar ones. */
__device__ inline void tc_load(bf16 *dst, int hdp, const float *src, int ld, int col0, int row0,
                               int nrows, int hd)
{
    static_assert(TC_NT == 2 * TC_B, "tc_load maps two threads to a row");
    const int ldb = hdp + 8, r = threadIdx.x >> 1;
    const float *row = src + IX(row0 + r, col0, ld);
    const bool in = r < nrows;
    const bool vec = in && ((ld | col0 | hd) & 3) == 0 && ((uintptr_t)src & 15) == 0;
    bf16 *out = dst + r * ldb;
    for (int c = (threadIdx.x & 1) * 4; c < hdp; c += 8) {
        float x[4];
        if (vec && c + 4 <= hd) {
            const float4 v = *(const float4 *)(row + c);
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        } else {
            for (int j = 0; j < 4; j++)
                x[j] = in && c + j < hd ? row[c + j] : 0.0f;
        }
        for (int j = 0; j < 4; j++)
            out[c + j] = __float2bfloat16_rn(x[j]);
    }
}

/* the same from a bf16 source (K/V stored in bf16): copies, zeros beyond */
__device__ inline void tc_load(bf16 *dst, int hdp, const bf16 *src, int ld, int col0, int row0,
                               int nrows, int hd)
{
    const int ldb = hdp + 8, r = threadIdx.x >> 1;
    const bf16 *row = src + IX(row0 + r, col0, ld);
    const bool in = r < nrows;
    bf16 *out = dst + r * ldb;
    for (int c = (threadIdx.x & 1) * 4; c < hdp; c += 8)
        for (int j = 0; j < 4; j++)
            out[c + j] = in && c + j < hd ? row[c + j] : __float2bfloat16_rn(0.0f);
}

/* out[TC_W][TC_B] (fp32, ld TC_LDS) = A[TC_W rows of a][0, hdp) B[TC_B rows of b][0, hdp)^T */
__device__ inline void tc_scores(float *out, const bf16 *a, const bf16 *b, int hdp)
{
    const int ldb = hdp + 8;
    for (int n = 0; n < TC_B / 16; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < hdp / 16; kk++) {
            frag_a fa;
            frag_bt fb;
            wmma::load_matrix_sync(fa, a + kk * 16, ldb);
            wmma::load_matrix_sync(fb, b + (size_t)n * 16 * ldb + kk * 16, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + n * 16, acc, TC_LDS, wmma::mem_row_major);
    }
}

/* acc[f] += P[TC_W][TC_B] (bf16, ld TC_LDP) X[TC_B][16 f .. 16 f + 16) (bf16 tile) */
template <int NF>
__device__ inline void tc_accumulate(frag_acc (&acc)[NF], const bf16 *p, const bf16 *x)
{
    const int ldb = NF * 16 + 8;
    BSIPIPE_UNROLL
    for (int f = 0; f < NF; f++)
        for (int kk = 0; kk < TC_B / 16; kk++) {
            frag_a fa;
            frag_b fb;
            wmma::load_matrix_sync(fa, p + kk * 16, TC_LDP);
            wmma::load_matrix_sync(fb, x + (size_t)kk * 16 * ldb + f * 16, ldb);
            wmma::mma_sync(acc[f], fa, fb, acc[f]);
        }
}

/* dst[rows < nrows, columns < hd] (+)= the warp's accumulators, staged through stage */
template <int NF>
__device__ inline void tc_write(float *dst, int ld, int nrows, int hd, bool add,
                                const frag_acc (&acc)[NF], float *stage)
{
    const int lds = NF * 16 + 4, lane = threadIdx.x & 31;
    BSIPIPE_UNROLL
    for (int f = 0; f < NF; f++)
        wmma::store_matrix_sync(stage + f * 16, acc[f], lds, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < TC_W * hd; e += 32) {
        int r = e / hd, c = e % hd;
        if (r < nrows) {
            float x = stage[r * lds + c];
            dst[IX(r, c, ld)] = add ? dst[IX(r, c, ld)] + x : x;
        }
    }
    __syncwarp();
}

/* Forward: grid (query tiles, heads). KV: the element type of K and V (float or bf16). */
template <typename KV>
__global__ void __launch_bounds__(TC_NT)
k_tc_att_fwd(int hd, int hdp, int start, int len, const float *q, int ldq, const KV *k,
             const KV *v, int ldk, float *o, int ldo, float *lse, float scale)
{
    BSIPIPE_DYN_SHARED_ALIGNED(tsm);
    const tc_layout L = tc_layout_of(hdp, true);
    const int ldb = hdp + 8, lda = hdp + 4, t = threadIdx.x, lane = t & 31, w = t >> 5;
    const int h = blockIdx.y, i0 = blockIdx.x * TC_B, qr0 = w * TC_W;
    const int nq = min(TC_B, len - i0), kend = start + i0 + nq;
    bf16 *Qs = (bf16 *)tsm, *Ks = (bf16 *)(tsm + L.tile), *Vs = (bf16 *)(tsm + 2 * L.tile);
    unsigned char *wb = tsm + 3 * L.tile + w * L.warp;
    float *Sw = (float *)wb, *Ow = (float *)(wb + L.s + L.p);
    bf16 *Pw = (bf16 *)(wb + L.s);
    const bool active = qr0 < nq;
    /* the online softmax: lanes 2r and 2r + 1 own row r of the warp (even / odd columns);
     * both hold its running max and sum */
    const int r_own = lane >> 1, half = lane & 1, q_own = qr0 + r_own;
    float m_own = -INFINITY, l_own = 0.0f;

    tc_load(Qs, hdp, q, ldq, h * hd, i0, nq, hd);
    for (int e = lane; e < TC_W * lda; e += 32)
        Ow[e] = 0.0f;
    for (int j0 = 0; j0 < kend; j0 += TC_B) {
        const int nk = min(TC_B, kend - j0);
        __syncthreads(); /* the previous tile is no longer read */
        tc_load(Ks, hdp, k, ldk, h * hd, j0, nk, hd);
        tc_load(Vs, hdp, v, ldk, h * hd, j0, nk, hd);
        __syncthreads();
        if (!active || start + i0 + qr0 + TC_W - 1 < j0)
            continue; /* the warp's rows see none of this tile (causal) */
        tc_scores(Sw, Qs + qr0 * ldb, Ks, hdp);
        __syncwarp();
        {
            const int pos = start + i0 + q_own, lim = min(nk, pos - j0 + 1); /* visible: c < lim */
            const float *srow = Sw + r_own * TC_LDS;
            bf16 *prow = Pw + r_own * TC_LDP;
            float mx = -INFINITY;
            if (q_own < nq)
                for (int c = half; c < lim; c += 2)
                    mx = fmaxf(mx, srow[c] * scale);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float mnew = fmaxf(m_own, mx);
            float sum = 0.0f;
            for (int c = half; c < TC_B; c += 2) {
                const float p = q_own < nq && c < lim ? expf(srow[c] * scale - mnew) : 0.0f;
                sum += p;
                prow[c] = __float2bfloat16_rn(p);
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            const float al = mnew == -INFINITY ? 1.0f : expf(m_own - mnew);
            l_own = l_own * al + sum;
            m_own = mnew;
            float *orow = Ow + r_own * lda; /* the pair rescales its row of O */
            for (int c = half; c < hdp; c += 2)
                orow[c] *= al;
        }
        __syncwarp();
        for (int f = 0; f < hdp / 16; f++) {
            frag_acc acc;
            wmma::load_matrix_sync(acc, Ow + f * 16, lda, wmma::mem_row_major);
            for (int kk = 0; kk < TC_B / 16; kk++) {
                frag_a fa;
                frag_b fb;
                wmma::load_matrix_sync(fa, Pw + kk * 16, TC_LDP);
                wmma::load_matrix_sync(fb, Vs + (size_t)kk * 16 * ldb + f * 16, ldb);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Ow + f * 16, acc, lda, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (!active)
        return;
    __syncwarp();
    if (q_own < nq) {
        for (int c = half; c < hd; c += 2)
            o[IX(i0 + q_own, h * hd + c, ldo)] = Ow[r_own * lda + c] / l_own;
        if (!half)
            lse[IX(h, i0 + q_own, len)] = m_own + logf(l_own);
    }
}

/* dK, dV (+=) of one key tile of one head, over the piece's query tiles that see it. */
template <int NF, typename KV>
__global__ void __launch_bounds__(TC_NT)
k_tc_att_dkdv(int hd, int start, int len, const float *q, int ldq, const KV *k,
              const KV *v, int ldk, const float *do_, int ldo, const float *lse,
              const float *dvec, float *dk, float *dv, float scale)
{
    BSIPIPE_DYN_SHARED_ALIGNED(tsm);
    const int hdp = NF * 16, ldb = hdp + 8;
    const tc_layout L = tc_layout_of(hdp, false);
    const int t = threadIdx.x, lane = t & 31, w = t >> 5, h = blockIdx.y;
    const int j0 = blockIdx.x * TC_B, kr0 = w * TC_W, nk = min(TC_B, start + len - j0);
    bf16 *Ks = (bf16 *)tsm, *Vs = (bf16 *)(tsm + L.tile), *Qs = (bf16 *)(tsm + 2 * L.tile);
    bf16 *dOs = (bf16 *)(tsm + 3 * L.tile);
    unsigned char *wb = tsm + 4 * L.tile + w * L.warp;
    float *St = (float *)wb, *dPt = St + TC_W * TC_LDS;
    bf16 *Pt = (bf16 *)(wb + L.s), *dSt = Pt + TC_W * TC_LDP;
    float *lse_s = (float *)(tsm + 4 * L.tile + TC_NW * L.warp), *d_s = lse_s + TC_B;
    const bool active = kr0 < nk;
    frag_acc adk[NF], adv[NF];
    BSIPIPE_UNROLL
    for (int f = 0; f < NF; f++) {
        wmma::fill_fragment(adk[f], 0.0f);
        wmma::fill_fragment(adv[f], 0.0f);
    }
    tc_load(Ks, hdp, k, ldk, h * hd, j0, nk, hd);
    tc_load(Vs, hdp, v, ldk, h * hd, j0, nk, hd);
    const int first = j0 > start ? ((j0 - start) / TC_B) * TC_B : 0;
    for (int i0 = first; i0 < len; i0 += TC_B) {
        const int nq = min(TC_B, len - i0);
        __syncthreads(); /* the previous query tile is no longer read */
        tc_load(Qs, hdp, q, ldq, h * hd, i0, nq, hd);
        tc_load(dOs, hdp, do_, ldo, h * hd, i0, nq, hd);
        bsipipe_att_row_stats(lse_s, d_s, lse, dvec, h, i0, nq, len, TC_B);
        __syncthreads();
        if (!active || j0 + kr0 > start + i0 + nq - 1)
            continue; /* every query of the tile precedes the warp's keys */
        tc_scores(St, Ks + kr0 * ldb, Qs, hdp);
        tc_scores(dPt, Vs + kr0 * ldb, dOs, hdp);
        __syncwarp();
        for (int e = lane; e < TC_W * TC_B; e += 32) {
            const int r = e / TC_B, c = e % TC_B; /* key kr0 + r, query c */
            const bool vis = kr0 + r < nk && c < nq && j0 + kr0 + r <= start + i0 + c;
            const float p = vis ? expf(St[r * TC_LDS + c] * scale - lse_s[c]) : 0.0f;
            Pt[r * TC_LDP + c] = __float2bfloat16_rn(p);
            dSt[r * TC_LDP + c] = __float2bfloat16_rn(p * (dPt[r * TC_LDS + c] - d_s[c]) * scale);
        }
        __syncwarp();
        tc_accumulate<NF>(adv, Pt, dOs);
        tc_accumulate<NF>(adk, dSt, Qs);
    }
    if (!active)
        return;
    __syncwarp();
    tc_write<NF>(dv + IX(j0 + kr0, h * hd, ldk), ldk, nk - kr0, hd, true, adv, St);
    tc_write<NF>(dk + IX(j0 + kr0, h * hd, ldk), ldk, nk - kr0, hd, true, adk, St);
}

/* dQ (overwritten) of one query tile of one head. */
template <int NF, typename KV>
__global__ void __launch_bounds__(TC_NT)
k_tc_att_dq(int hd, int start, int len, const float *q, int ldq, const KV *k,
            const KV *v, int ldk, const float *do_, int ldo, const float *lse,
            const float *dvec, float *dq, int lddq, float scale)
{
    BSIPIPE_DYN_SHARED_ALIGNED(tsm);
    const int hdp = NF * 16, ldb = hdp + 8;
    const tc_layout L = tc_layout_of(hdp, false);
    const int t = threadIdx.x, lane = t & 31, w = t >> 5, h = blockIdx.y;
    const int i0 = blockIdx.x * TC_B, qr0 = w * TC_W, nq = min(TC_B, len - i0);
    const int kend = start + i0 + nq;
    bf16 *Qs = (bf16 *)tsm, *dOs = (bf16 *)(tsm + L.tile), *Ks = (bf16 *)(tsm + 2 * L.tile);
    bf16 *Vs = (bf16 *)(tsm + 3 * L.tile);
    unsigned char *wb = tsm + 4 * L.tile + w * L.warp;
    float *S = (float *)wb, *dP = S + TC_W * TC_LDS;
    bf16 *dS = (bf16 *)(wb + L.s);
    float *lse_s = (float *)(tsm + 4 * L.tile + TC_NW * L.warp), *d_s = lse_s + TC_B;
    const bool active = qr0 < nq;
    frag_acc adq[NF];
    BSIPIPE_UNROLL
    for (int f = 0; f < NF; f++)
        wmma::fill_fragment(adq[f], 0.0f);
    tc_load(Qs, hdp, q, ldq, h * hd, i0, nq, hd);
    tc_load(dOs, hdp, do_, ldo, h * hd, i0, nq, hd);
    bsipipe_att_row_stats(lse_s, d_s, lse, dvec, h, i0, nq, len, TC_B);
    for (int j0 = 0; j0 < kend; j0 += TC_B) {
        const int nk = min(TC_B, kend - j0);
        __syncthreads(); /* the previous key tile is no longer read */
        tc_load(Ks, hdp, k, ldk, h * hd, j0, nk, hd);
        tc_load(Vs, hdp, v, ldk, h * hd, j0, nk, hd);
        __syncthreads();
        if (!active || start + i0 + qr0 + TC_W - 1 < j0)
            continue;
        tc_scores(S, Qs + qr0 * ldb, Ks, hdp);
        tc_scores(dP, dOs + qr0 * ldb, Vs, hdp);
        __syncwarp();
        for (int e = lane; e < TC_W * TC_B; e += 32) {
            const int r = e / TC_B, c = e % TC_B, qi = qr0 + r; /* query qi, key j0 + c */
            const bool vis = qi < nq && c < nk && j0 + c <= start + i0 + qi;
            const float p = vis ? expf(S[r * TC_LDS + c] * scale - lse_s[qi]) : 0.0f;
            dS[r * TC_LDP + c] = __float2bfloat16_rn(p * (dP[r * TC_LDS + c] - d_s[qi]) * scale);
        }
        __syncwarp();
        tc_accumulate<NF>(adq, dS, Ks);
    }
    if (!active)
        return;
    __syncwarp();
    tc_write<NF>(dq + IX(i0 + qr0, h * hd, lddq), lddq, nq - qr0, hd, false, adq, S);
}

/* Opt in to `bytes` of shared memory: 1 when the device refuses (less than that per block,
 * e.g. 99 KB on sm_86 / sm_89; the caller then uses the fp32 kernels), 0 when granted. The
 * refusal is cleared, so later launch checks do not see it. */
template <typename K> static int tc_refuses(K kern, size_t bytes)
{
    if (bsipipe_cuda_allow_smem(kern, bytes) == 0)
        return 0;
    (void)cudaGetLastError();
    return 1;
}

template <int NF, typename KV>
static int tc_backward(int n_heads, int hd, int start, int len, const float *q, int ldq,
                       const KV *k, const KV *v, int ldk, const float *do_, int ldo,
                       const float *lse, const float *dvec, float *dq, int lddq, float *dk,
                       float *dv, float scale, cudaStream_t s)
{
    const size_t sm = tc_layout_of(NF * 16, false).total;
    auto kdkdv = k_tc_att_dkdv<NF, KV>; /* one name: a template's comma would split a macro */
    auto kdq = k_tc_att_dq<NF, KV>;
    if (tc_refuses(kdkdv, sm) || tc_refuses(kdq, sm))
        return -ENOSPC;
    dim3 gk((unsigned)((start + len + TC_B - 1) / TC_B), (unsigned)n_heads);
    BSIPIPE_LAUNCH(kdkdv, gk, TC_NT, sm, s, hd, start, len, q, ldq, k, v, ldk, do_, ldo, lse,
                   dvec, dk, dv, scale);
    RC_TRY(bsipipe_cuda_launched());
    dim3 gq((unsigned)((len + TC_B - 1) / TC_B), (unsigned)n_heads);
    BSIPIPE_LAUNCH(kdq, gq, TC_NT, sm, s, hd, start, len, q, ldq, k, v, ldk, do_, ldo, lse, dvec,
                   dq, lddq, scale);
    return bsipipe_cuda_launched();
}

static inline int padded(int hd) { return (hd + 15) / 16 * 16; }

template <typename KV>
static int tc_forward(int n_heads, int head_dim, int start, int len, const float *q, int ldq,
                      const KV *k, const KV *v, int ldk, float *o, int ldo, float *lse,
                      float scale, cudaStream_t s)
{
    const int hdp = padded(head_dim);
    if (hdp > TC_MAXHD)
        return -EINVAL;
    const size_t sm = tc_layout_of(hdp, true).total;
    auto kfwd = k_tc_att_fwd<KV>;
    if (tc_refuses(kfwd, sm))
        return -ENOSPC;
    dim3 grid((unsigned)((len + TC_B - 1) / TC_B), (unsigned)n_heads);
    BSIPIPE_LAUNCH(kfwd, grid, TC_NT, sm, s, head_dim, hdp, start, len, q, ldq, k, v, ldk, o, ldo,
                   lse, scale);
    return bsipipe_cuda_launched();
}

template <typename KV>
static int tc_backward_any(int n_heads, int head_dim, int start, int len, const float *q,
                           int ldq, const KV *k, const KV *v, int ldk, const float *do_, int ldo,
                           const float *lse, const float *dvec, float *dq, int lddq, float *dk,
                           float *dv, float scale, cudaStream_t s)
{
#define TC_BWD(nf)                                                                          \
    case nf:                                                                                \
        return tc_backward<nf, KV>(n_heads, head_dim, start, len, q, ldq, k, v, ldk, do_,   \
                                   ldo, lse, dvec, dq, lddq, dk, dv, scale, s)
    switch (padded(head_dim) / 16) {
        TC_BWD(1);
        TC_BWD(2);
        TC_BWD(3);
        TC_BWD(4);
        TC_BWD(5);
        TC_BWD(6);
        TC_BWD(7);
        TC_BWD(8);
    default: return -EINVAL;
    }
#undef TC_BWD
}

} // namespace

int bsipipe_cuda_attention_tc_forward(int n_heads, int head_dim, int start, int len,
                                      const float *q, int ldq, const float *k, const float *v,
                                      int ldk, float *o, int ldo, float *lse, float scale,
                                      cudaStream_t s)
{
    return tc_forward(n_heads, head_dim, start, len, q, ldq, k, v, ldk, o, ldo, lse, scale, s);
}

int bsipipe_cuda_attention_tc_forward_kv16(int n_heads, int head_dim, int start, int len,
                                           const float *q, int ldq, const __nv_bfloat16 *k,
                                           const __nv_bfloat16 *v, int ldk, float *o, int ldo,
                                           float *lse, float scale, cudaStream_t s)
{
    return tc_forward(n_heads, head_dim, start, len, q, ldq, k, v, ldk, o, ldo, lse, scale, s);
}

int bsipipe_cuda_attention_tc_backward(int n_heads, int head_dim, int start, int len,
                                       const float *q, int ldq, const float *k, const float *v,
                                       int ldk, const float *do_, int ldo, const float *lse,
                                       const float *dvec, float *dq, int lddq, float *dk,
                                       float *dv, float scale, cudaStream_t s)
{
    return tc_backward_any(n_heads, head_dim, start, len, q, ldq, k, v, ldk, do_, ldo, lse, dvec,
                           dq, lddq, dk, dv, scale, s);
}

int bsipipe_cuda_attention_tc_backward_kv16(int n_heads, int head_dim, int start, int len,
                                            const float *q, int ldq, const __nv_bfloat16 *k,
                                            const __nv_bfloat16 *v, int ldk, const float *do_,
                                            int ldo, const float *lse, const float *dvec,
                                            float *dq, int lddq, float *dk, float *dv,
                                            float scale, cudaStream_t s)
{
    return tc_backward_any(n_heads, head_dim, start, len, q, ldq, k, v, ldk, do_, ldo, lse, dvec,
                           dq, lddq, dk, dv, scale, s);
}
