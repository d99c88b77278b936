/* ops/recurrence/cuda/gla.cuh: what the per-key (gla_chunked.cu, its fast
 * form gla_fast.cu) and the per-value (gla_value.cu) decay kernels of the gla
 * rule share: the shared-memory layouts, the sub-chunk pieces every kernel
 * uses, and the fast form's and the per-value launchers' declarations. The
 * algebra is in gla_chunked.cu's header. */
#ifndef PR_REC_GLA_CUH
#define PR_REC_GLA_CUH

#include <stdint.h>

#include "ops/recurrence/cuda/recurrence_cuda.cuh"

#define GLA_SUB 16   /* tokens a sub-chunk */
#define GLA_BV 32    /* columns of a V tile */

/* ---- layouts (host and device) ------------------------------------------------------- */

struct gla_ld {
    int C, Kp, LDK, LDC, LDV;
};
__host__ __device__ inline gla_ld gla_ld_of(const rec_prob &p)
{
    return {p.C, p.Kp, p.Kp + 4, p.C + 4, GLA_BV + 4};
}
inline int gla_max(int a, int b) { return a > b ? a : b; }
__host__ __device__ inline int gla_imax(int a, int b) { return a > b ? a : b; }

/* the serial passes: the state (or its gradient) [Kp x BV], a key (or query)
 * tile, G, a value (or dO) tile, and (dstate) the end-state tile */
struct gla_serial_lay {
    int H, X, G, V, E, total;
};
__host__ __device__ inline gla_serial_lay gla_serial_layout(const rec_prob &p, bool with_end)
{
    const gla_ld l = gla_ld_of(p);
    rec_bump m;
    gla_serial_lay s;
    s.H = m.take(l.Kp * l.LDV), s.X = m.take(l.C * l.LDK), s.G = m.take(l.C * l.LDK), s.V = m.take(l.C * l.LDV);
    s.E = with_end ? m.take(l.Kp * l.LDV) : -1;
    s.total = m.off;
    return s;
}

/* the chunk-parallel kernels: Q, K, G [C x LDK], A (and dA) [C x LDC], DX,
 * DG [C x LDK] (dqk), then one region U that holds in turn the sub-chunk
 * factors (at most C - 16 rows of LDK) and the V loop's tiles */
struct gla_chunk_lay {
    int Q, K, G, A, A2, DX, DG, U, total;
};
/* kind: 0 gla_out, 1 gla_dv, 2 gla_dqk */
__host__ __device__ inline gla_chunk_lay gla_chunk_layout(const rec_prob &p, int kind)
{
    const gla_ld l = gla_ld_of(p);
    rec_bump m;
    gla_chunk_lay s;
    s.Q = m.take(l.C * l.LDK), s.K = m.take(l.C * l.LDK), s.G = m.take(l.C * l.LDK);
    s.A = m.take(l.C * l.LDC);
    s.A2 = kind == 1 ? m.take(l.C * l.LDC) : -1;   /* gla_dv: dA beside A */
    s.DX = kind == 2 ? m.take(l.C * l.LDK) : -1;
    s.DG = kind == 2 ? m.take(l.C * l.LDK) : -1;
    s.U = m.off;
    const int factors = (l.C - GLA_SUB) * l.LDK;
    int vloop;
    if (kind == 0) vloop = l.Kp * l.LDV + 2 * l.C * l.LDV;            /* S, V, O */
    else if (kind == 1) vloop = l.Kp * l.LDV + 3 * l.C * l.LDV;       /* dS', dO, V, dv */
    else vloop = l.Kp * l.LDV + l.C * l.LDV;                          /* S or dS', dO or V */
    s.total = s.U + gla_imax(factors, vloop) + 32;
    return s;
}

/* ---- shared pieces ---------------------------------------------------------------------- */

__device__ __forceinline__ float gla_warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(PR_FULL_MASK, x, o);
    return x;
}

/* g (per key) rows may be read by float4 copies: q's rows are, and g's base is 16-byte aligned */
__device__ __forceinline__ bool gla_gvec(const rec_prob &p) { return p.vec && ((uintptr_t)p.g & 15) == 0; }

/* a chunk's rows of x [rows, H, K] (q, k or g) into a C x Kp tile, zero past nval and K */
__device__ __forceinline__ void gla_ld_keys(const rec_prob &p, float *dst, const float *x, long long rk, int nval,
                                            bool vec)
{
    const gla_ld l = gla_ld_of(p);
    rec_ld_tile(dst, l.LDK, l.C, l.Kp, x + rk * p.K, (long long)p.H * p.K, nval, p.K, vec);
}

/* G[t][c] = sum_{s<=t} g_s[c] in place, a thread per key column. Rows past
 * nval were loaded as zero, so they hold G_last: row C - 1 is G_L. */
__device__ __forceinline__ void gla_cumsum(float *G, int ld, int C, int Kp)
{
    for (int c = threadIdx.x; c < Kp; c += blockDim.x) {
        float run = 0.f;
        for (int t = 0; t < C; t++) {
            run += G[t * ld + c];
            G[t * ld + c] = run;
        }
    }
}

/* a 16 x 16 block of C (rows m0.., columns n0..) = (acc ? C : 0) + alpha
 * op(A) op(B) over Kd, by one warp: the kit's tensor-core block (TF32, or
 * bf16 for BF) or, without TF32, plain f32 (lane l: row l / 2, 8 columns) */
template <bool TA, bool TB, bool BF>
__device__ __forceinline__ void gla_blk16(const rec_prob &p, float *C, int ldc, const float *A, int lda, const float *B,
                                          int ldb, int m0, int n0, int Kd, float alpha, bool acc)
{
    if constexpr (BF) {
        rec_mm_tc_block<TA, TB, 1, 1, true>(C, ldc, A, lda, B, ldb, m0, n0, Kd, alpha, acc);
    } else {
        if (p.tf32) {
            rec_mm_tc_block<TA, TB, 1, 1, false>(C, ldc, A, lda, B, ldb, m0, n0, Kd, alpha, acc);
            return;
        }
        const int lane = threadIdx.x & 31, m = m0 + (lane >> 1), nb = n0 + (lane & 1) * 8;
        float s[8];
#pragma unroll
        for (int j = 0; j < 8; j++) s[j] = 0.f;
        for (int k = 0; k < Kd; k++) {
            const float a = TA ? A[k * lda + m] : A[m * lda + k];
#pragma unroll
            for (int j = 0; j < 8; j++) s[j] = fmaf(a, TB ? B[(nb + j) * ldb + k] : B[k * ldb + nb + j], s[j]);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float *c = C + m * ldc + nb + j;
            *c = (acc ? *c : 0.f) + alpha * s[j];
        }
    }
}

/* A (ldc) += the pairs i <= t inside each 16-token sub-chunk over W key columns of Q, K and
 * G (ld; base 2, as gla_cumsum_kernel writes it), a thread a pair (the fast form): a sub-chunk's 136 pairs numbered row by row, each a
 * sum over the columns with no shuffles, so a thread's loads and exps pipeline where the
 * default's warp a pair waits on its 5-step reduction. The caller synchronizes around it. */
__device__ __forceinline__ void gla_pairs_by_thread(float *A, int ldc, int C, const float *Q, const float *Kt,
                                                    const float *G, int ld, int W)
{
    constexpr int PAIRS = GLA_SUB * (GLA_SUB + 1) / 2;
    for (int e = threadIdx.x; e < C / GLA_SUB * PAIRS; e += blockDim.x) {
        const int a = e / PAIRS, j = e % PAIRS;
        int u = (int)((sqrtf(8.f * j + 1.f) - 1.f) * 0.5f);   /* the row u with u(u+1)/2 <= j < (u+1)(u+2)/2 */
        if ((u + 1) * (u + 2) / 2 <= j) u++;
        if (u * (u + 1) / 2 > j) u--;
        const int t = a * GLA_SUB + u, i = a * GLA_SUB + j - u * (u + 1) / 2;
        const float *qt = Q + t * ld, *ki = Kt + i * ld, *gt = G + t * ld, *gi = G + i * ld;
        float s0 = 0.f, s1 = 0.f;
#pragma unroll 4
        for (int c = 0; c < W; c += 2) {   /* W: a multiple of 32 */
            s0 = fmaf(qt[c] * ki[c], exp2f(gt[c] - gi[c]), s0);
            s1 = fmaf(qt[c + 1] * ki[c + 1], exp2f(gt[c + 1] - gi[c + 1]), s1);
        }
        A[t * ldc + i] += s0 + s1;
    }
}

/* A [C x LDC] of a chunk from raw Q, K and the cumulative G (the caller
 * synchronizes before; Q is left as Q o e^G, the output's and dq's inter
 * factor, K as it was). U: room for the sub-chunk factors. Steps:
 *   zero A; the pairs inside each sub-chunk, a warp a pair (i <= t);
 *   Q <- Q o e^{G - G_r(t)}; for each row sub-chunk a >= 1 the factors
 *   K o e^{G_r - G} of the tokens before r = 16 a, and its blocks against
 *   every earlier sub-chunk, a warp a block; Q <- Q o e^{G_r(t)} = Q o e^G. */
template <bool BF>
__device__ void gla_scores(const rec_prob &p, float *A, float *Q, const float *Kt, const float *G, float *U)
{
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    REC_FOR2D(C, C, t, i) A[t * LDC + i] = 0.f;
    __syncthreads();
    for (int e = warp; e < C * GLA_SUB; e += PR_REC_WARPS) {
        const int t = e / GLA_SUB, i = (t & ~(GLA_SUB - 1)) + e % GLA_SUB;
        if (i > t) continue;   /* whole warps skip together */
        float s = 0.f;
        for (int c = lane; c < Kp; c += 32)
            s = fmaf(Q[t * LDK + c] * Kt[i * LDK + c], expf(G[t * LDK + c] - G[i * LDK + c]), s);
        s = gla_warp_sum(s);
        if (lane == 0) A[t * LDC + i] = s;
    }
    __syncthreads();   /* the pairs read Q as it was */
    REC_FOR2D(C, Kp, t, c) Q[t * LDK + c] *= expf(G[t * LDK + c] - G[(t & ~(GLA_SUB - 1)) * LDK + c]);
    for (int a = 1; a < C / GLA_SUB; a++) {
        const int r = a * GLA_SUB;
        __syncthreads();   /* U free (the previous blocks done), Q scaled */
        REC_FOR2D(r, Kp, i, c) U[i * LDK + c] = Kt[i * LDK + c] * expf(G[r * LDK + c] - G[i * LDK + c]);
        __syncthreads();
        for (int b = warp; b < a; b += PR_REC_WARPS)
            gla_blk16<false, true, BF>(p, A, LDC, Q, LDK, U, LDK, r, b * GLA_SUB, Kp, 1.f, false);
    }
    __syncthreads();
    REC_FOR2D(C, Kp, t, c) Q[t * LDK + c] *= expf(G[(t & ~(GLA_SUB - 1)) * LDK + c]);
    __syncthreads();
}

/* the chunk's tiles of a (chunk, head) block: Q (or nothing), K, g -> G */
struct gla_chunk_at {
    rec_chunk_pos cp;
    long long rk;
};
/* rows nval.. of a C-row tile of cumulative decays (loaded as zero) take row
 * nval - 1, as gla_cumsum leaves them: row C - 1 is G_L, and every reference
 * row r past the valid tokens gives factors <= 1. The caller synchronizes
 * before and after. */
__device__ __forceinline__ void gla_fill_tail(float *G, int ld, int C, int W, int nval)
{
    if (nval >= C || nval < 1) return;
    REC_FOR2D(C - nval, W, u, cc) G[(nval + u) * ld + cc] = G[(nval - 1) * ld + cc];
}

__device__ __forceinline__ gla_chunk_at gla_chunk_load(const rec_prob &p, int c, int h, float *Q, float *Kt, float *G)
{
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * p.H + h;
    if (Q) gla_ld_keys(p, Q, p.q, rk, cp.nval, p.vec);
    if (Kt) gla_ld_keys(p, Kt, p.k, rk, cp.nval, p.vec);
    gla_ld_keys(p, G, p.g, rk, cp.nval, gla_gvec(p));
    rec_sync();
    const gla_ld l = gla_ld_of(p);
    gla_cumsum(G, l.LDK, l.C, l.Kp);
    __syncthreads();
    return {cp, rk};
}

/* the fast form's passes (gla_fast.cu): G (base 2) into scratch [rows, H, K] that the caller
 * frees (n floats), then each pass on it; bf: bf16 products, io: bf16 data in place */
size_t gla_fast_smem(const rec_prob &p);
float *gla_fast_cumsum(cudaStream_t s, const rec_prob &p, size_t *n);
void gla_fast_state(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, float *hs, float *ht);
void gla_fast_out(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, const float *hs, float *o,
                  float *A);
void gla_fast_dstate(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, const float *hs,
                     const float *ht, float *dhs, float *ep, float *dh0);
void gla_fast_dv(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, const float *dhs, const float *A,
                 float *dA, float *dv, unsigned short *dv16);
void gla_fast_dqk(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, const float *hs,
                  const float *dhs, const float *dA, const float *ep, const rec_grads &d);

/* the per-value decay (p.gv, gsa's first pass): gla_value.cu */
size_t pr_rec_gv_chunk_smem(const rec_prob &p);
void pr_rec_gv_chunk_forward(cudaStream_t s, const rec_prob &p, float *hs, float *o, float *ht);
void pr_rec_gv_chunk_backward(cudaStream_t s, const rec_prob &p, const float *hs, const float *ht, const rec_grads &d);

#endif
