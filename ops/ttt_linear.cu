/* ops/ttt_linear.cu: TTT-Linear on CUDA, f32, forward and backward.
 *
 * One thread block per (batch, head) walks the mini-batches in order (the
 * backward in reverse), with the inner state W [K,K] in shared memory and the
 * mini-batch's rows beside it; inside a mini-batch the work is parallel:
 * block products (blk_mm) against W and between the rows, half a warp per
 * row for the LayerNorms. With ctx->matmul_tf32 the products of a mini-batch whose
 * sizes are multiples of 16 run on TF32 tensor cores (the recurrence's
 * mma.sync product, f32 accumulators; W itself stays f32), else in fp32. The
 * triangular parts of the dual form (Attn and D below) are products too,
 * masked afterwards. The math and the backward's derivation are the CPU
 * path's (ops/ttt_linear.c), which is the reference. No float atomics: the
 * dw, db partial sums of each (b,h) are reduced over b by the kit's column
 * sum, so results are bitwise reproducible. Limits: K <= 128 and shared
 * memory of 2K(K+4) + 9 mb (K+4) + 4 mb (mb+4) floats (about 220 KB at
 * K = 128, mb = 16). bf16 data (q, k, v, eta, o; ops/ttt_linear.h) is staged:
 * f32 copies in, the f32 kernels, o and the bf16 grads rounded back once.
 */
#include "ops/ops.h"
#include "ops/recurrence/recurrence_cuda.cuh" /* the block products and tile loads (rec_mm_*, rec_ld_tile) */
#include "ops/ttt_kit.cuh"
#include "ops/ttt_linear.h"

#define TTT_THREADS 256
#define TTT_RT 4     /* rows per thread in blk_mm's fp32 loops (the float4 loops assume 4) */
#define TTT_MAXK 128
#define TTT_LPR 16   /* lanes per row in the row phases: each half-warp takes a row, so a warp runs two at once */

struct ttt_args {
    const float *q, *k, *v, *w, *b, *eta, *h0, *hb0;
    float *o, *ht, *hbt;                        /* forward outputs */
    float *Ws, *hbs;                            /* starting states [B,H,NMB,K,K], [B,H,NMB,K] */
    const float *dout, *dht, *dhbt;             /* upstream grads */
    float *dq, *dk, *dv, *deta, *dh0, *dhb0;    /* input grads, accumulated; NULL: not needed */
    float *dwp, *dbp;                           /* per-(b,h) partials of dw, db [B,H,K] */
    int B, T, H, K, mb, nmb, ldw, ldr, ls, mbp;
    int tc;                                     /* TF32 products where a mini-batch's sizes allow */
    float scale, eps;
};

/* Shared-memory layout: when K % 4 == 0 every buffer starts on 16 bytes and
 * the row strides are K + 4 (W's ldw, the [mbp, K] row buffers' ldr) and
 * mbp + 4 (the [mbp, mbp] matrices' ls): at K a multiple of 32, a
 * quarter-warp reading 4-float rows 4 (mod 32) floats apart covers all 32
 * banks once, and so do the tensor-core fragments (8 rows x 4 columns). Otherwise ldw = K | 1 (odd: a column of W
 * hits distinct banks), ldr = K, and the products read floats one by one. */
__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }

/* C[i][c] = (acc ? C[i][c] : 0) + alpha sum_k op(A)[i][k] op(B)[k][c] for i < M,
 * c < N, all in shared memory; op(A) is A[i*lda + k], or A[k*lda + i] when TA;
 * op(B) is B[k*ldb + c], or B[c*ldb + k] when TB. tc: TF32 tensor cores (M, N
 * multiples of 16, Kd of 8). Else fp32: the recurrence's register-tiled
 * product where M and N are multiples of 32, otherwise a thread per column
 * and TTT_RT rows, 4 k at a time as float4 where the strides allow (a warp
 * per element, lanes along k, where there are at most 64). The fp32
 * loops read A's rows (TA: its columns) up to M rounded up to TTT_RT; the
 * extra ones only feed results that are dropped. The path depends on tc, M
 * and N only: two calls with the same tc, M, N and C give each thread the
 * same elements of C, so they may follow each other without a barrier.
 * Not inlined: one body per (TA, TB) instead of a copy per call (about 17
 * a kernel), which missed the instruction cache (NOTES.md v14). */
template <bool TA, bool TB>
__device__ __noinline__ void blk_mm(bool tc, float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                                    int M, int N, int Kd, float alpha, bool acc)
{
    static_assert(TTT_THREADS == PR_REC_THREADS, "the recurrence's products divide blocks among PR_REC_WARPS warps");
    if (tc) {   /* 16x32 warp blocks where there are enough, else 16x16 (32x32 ones spilled registers) */
        if ((M >> 4) * (N >> 5) >= PR_REC_WARPS)
            return rec_mm_tc_tiles<TA, TB, 1, 2>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
        return rec_mm_tc_tiles<TA, TB, 1, 1>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
    }
    if (((M | N) & 31) == 0) return rec_mm_f32<TA, TB>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
    if (M * N <= 64) {   /* few outputs (mini-batches of 1 to 8): a warp each, lanes along k */
        for (int p = threadIdx.x >> 5; p < M * N; p += blockDim.x >> 5) {
            const int i = p / N, c = p - i * N;
            float s = 0;
            for (int k = threadIdx.x & 31; k < Kd; k += 32)
                s += (TA ? A[k * lda + i] : A[i * lda + k]) * (TB ? B[c * ldb + k] : B[k * ldb + c]);
            s = ttk_warp_sum(s);
            if ((threadIdx.x & 31) == 0) C[i * ldc + c] = (acc ? C[i * ldc + c] : 0.f) + alpha * s;
        }
        return;
    }
    const bool vec = ((Kd | lda | ldb) & 3) == 0;
    const int groups = (M + TTT_RT - 1) / TTT_RT;
    for (int idx = threadIdx.x; idx < groups * N; idx += blockDim.x) {
        const int c = idx % N, i0 = idx / N * TTT_RT;
        float s[TTT_RT] = {0};
        if (vec) {
            for (int k = 0; k < Kd; k += 4) {
                float b[4], x[TTT_RT][4];
                if (TB) {
                    const float4 v = ld4(B + c * ldb + k);
                    b[0] = v.x, b[1] = v.y, b[2] = v.z, b[3] = v.w;
                } else {
#pragma unroll
                    for (int u = 0; u < 4; u++) b[u] = B[(k + u) * ldb + c];
                }
#pragma unroll
                for (int u = 0; u < 4; u++) {   /* x[r][u] = op(A)[i0 + r][k + u] */
                    const float4 v = TA ? ld4(A + (k + u) * lda + i0) : ld4(A + (i0 + u) * lda + k);
                    if (TA) x[0][u] = v.x, x[1][u] = v.y, x[2][u] = v.z, x[3][u] = v.w;
                    else x[u][0] = v.x, x[u][1] = v.y, x[u][2] = v.z, x[u][3] = v.w;
                }
#pragma unroll
                for (int r = 0; r < TTT_RT; r++) s[r] += x[r][0] * b[0] + x[r][1] * b[1] + x[r][2] * b[2] + x[r][3] * b[3];
            }
        } else {
            for (int k = 0; k < Kd; k++) {
                const float bk = TB ? B[c * ldb + k] : B[k * ldb + c];
#pragma unroll
                for (int r = 0; r < TTT_RT; r++) {
                    const int i = min(i0 + r, M - 1);
                    s[r] += (TA ? A[k * lda + i] : A[i * lda + k]) * bk;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < TTT_RT; r++)
            if (i0 + r < M) {
                float *p = C + (i0 + r) * ldc + c;
                *p = (acc ? *p : 0.f) + alpha * s[r];
            }
    }
}

/* dst (global, row stride K) = W (shared, row stride ldw), K x K */
__device__ void st_state(float *dst, const float *W, int ldw, int K)
{
    if ((K & 3) == 0) return rec_st_tile(dst, K, K, K, W, ldw, 1.f, false, true);
    REC_FOR2D(K, K, r, c) dst[r * K + c] = W[r * ldw + c];
}

/* the mini-batch's rows [m, K] of a [B,T,H,K] input from element g0 into
 * shared memory (row stride ldr): cp.async when K % 4 == 0 (complete at the
 * next rec_sync), else a load and a store per element */
__device__ void ld_rows(float *dst, int ldr, const float *src, long long g0, int H, int m, int K)
{
    if ((K & 3) == 0) return rec_ld_tile(dst, ldr, m, K, src + g0, (long long)H * K, m, K, true);
    for (int i = 0; i < m; i++)
        for (int c = threadIdx.x; c < K; c += blockDim.x) dst[i * ldr + c] = src[g0 + (long long)i * H * K + c];
}

/* W (row stride ldw) = a saved K x K state: cp.async when K % 4 == 0 (complete
 * at the next rec_sync), else a load and a store per element */
__device__ void ld_state(float *W, int ldw, const float *src, int K)
{
    if ((K & 3) == 0) return rec_ld_tile(W, ldw, K, K, src, K, K, K, true);
    REC_FOR2D(K, K, r, c) W[r * ldw + c] = src[r * K + c];
}

/* A half-warp's view of one row of K <= TTT_LPR*KPL values: lane l of the half
 * holds c = l + TTT_LPR i. The reductions shuffle within the half. */
template <int KPL>
struct row_t {
    float x[KPL];
};

__device__ __forceinline__ int row_lane() { return threadIdx.x & (TTT_LPR - 1); }
__device__ __forceinline__ float row_reduce(float x) { return pr_group_reduce<TTT_LPR>(x, pr_op_sum()); }

template <int KPL>
__device__ __forceinline__ row_t<KPL> row_load(const float *p, int K)
{
    row_t<KPL> r;
    const int lane = row_lane();
#pragma unroll
    for (int i = 0; i < KPL; i++) r.x[i] = lane + TTT_LPR * i < K ? p[lane + TTT_LPR * i] : 0.f;
    return r;
}

template <int KPL>
__device__ __forceinline__ void row_store(float *p, const row_t<KPL> &r, int K)
{
    const int lane = row_lane();
#pragma unroll
    for (int i = 0; i < KPL; i++)
        if (lane + TTT_LPR * i < K) p[lane + TTT_LPR * i] = r.x[i];
}

template <int KPL>
__device__ __forceinline__ float row_sum(const row_t<KPL> &r)
{
    float s = 0;
#pragma unroll
    for (int i = 0; i < KPL; i++) s += r.x[i];
    return row_reduce(s);
}

template <int KPL>
__device__ __forceinline__ float row_dot(const row_t<KPL> &a, const row_t<KPL> &b)
{
    float s = 0;
#pragma unroll
    for (int i = 0; i < KPL; i++) s += a.x[i] * b.x[i];
    return row_reduce(s);
}

/* x -> (x - mean) / s in place (padding lanes stay 0); returns s */
template <int KPL>
__device__ __forceinline__ float row_ln(row_t<KPL> &r, int K, float eps)
{
    const int lane = row_lane();
    float mu = row_sum(r) / K, var = 0;
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        float d = lane + TTT_LPR * i < K ? r.x[i] - mu : 0.f;
        var += d * d;
        r.x[i] = d;
    }
    float s = sqrtf(row_reduce(var) / K + eps);
#pragma unroll
    for (int i = 0; i < KPL; i++) r.x[i] /= s;
    return s;
}

/* The row phases: half-warp j (threads 16j .. 16j+15) takes rows j, j + 16,
 * ... (the step is even, so both halves of a warp loop together). A half with
 * no row left (m odd) works on row m, a padding row that no one writes (m odd
 * is below mbp), and stores nothing (ok false): the shuffles need both halves. */
#define TTT_FOR_ROWS(i, ok, m) \
    for (int i = (int)(threadIdx.x >> 4), ok = i < (m); (i & ~1) < (m); i += blockDim.x >> 4, ok = i < (m))

/* LayerNorm backward without the affine part: (g - mean g - xh mean(g xh)) / s */
template <int KPL>
__device__ __forceinline__ row_t<KPL> row_ln_back(const row_t<KPL> &xh, float s, const row_t<KPL> &g, int K)
{
    float mg = row_sum(g) / K, mgx = row_dot(g, xh) / K;
    row_t<KPL> d;
    const int lane = row_lane();
#pragma unroll
    for (int i = 0; i < KPL; i++) d.x[i] = lane + TTT_LPR * i < K ? (g.x[i] - mg - xh.x[i] * mgx) / s : 0.f;
    return d;
}

/* Z row (z + hb, z holding k W) -> its normalized form xz (in z), scale sz,
 * the residual y = w xz + b - v + k (into y, which may alias v) and gz = dl/dZ. */
template <int KPL>
__device__ void inner_grad_row(float *z, const float *hb, const float *v, const float *k, const float *w,
                               const float *b, int K, float eps, float *gz, float *sz, float *y, bool ok)
{
    row_t<KPL> xz = row_load<KPL>(z, K), hr = row_load<KPL>(hb, K), vr = row_load<KPL>(v, K), kr = row_load<KPL>(k, K);
    row_t<KPL> wr = row_load<KPL>(w, K), br = row_load<KPL>(b, K), yr, G;
#pragma unroll
    for (int i = 0; i < KPL; i++) xz.x[i] += hr.x[i];
    float s = row_ln(xz, K, eps);
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        yr.x[i] = wr.x[i] * xz.x[i] + br.x[i] - vr.x[i] + kr.x[i];
        G.x[i] = wr.x[i] * yr.x[i];
    }
    const row_t<KPL> g = row_ln_back(xz, s, G, K);
    if (!ok) return;
    row_store(z, xz, K);
    row_store(gz, g, K);
    if (y) row_store(y, yr, K);
    if (row_lane() == 0) *sz = s;
}

/* global offset of row i of mini-batch starting at t0 */
__device__ __forceinline__ long long grow(const ttt_args &a, int bi, int h, int t)
{
    return (((long long)bi * a.T + t) * a.H + h) * a.K;
}

/* g[row t0 + i] += alpha X[i] for the mini-batch's m rows (X: row stride
 * ldr); rec_st_tile where K % 4 == 0 (rows of X 16-byte aligned) */
__device__ void add_rows(float *g, const float *X, float alpha, const ttt_args &a, int bi, int h, int t0, int m)
{
    const int K = a.K;
    float *g0 = g + grow(a, bi, h, t0);
    if ((K & 3) == 0) return rec_st_tile(g0, (long long)a.H * K, m, K, X, a.ldr, alpha, true, true);
    REC_FOR2D(m, K, i, c) g0[(long long)i * a.H * K + c] += alpha * X[i * a.ldr + c];
}

/* ---- forward ----------------------------------------------------------------- */

template <int KPL>
__global__ void __launch_bounds__(TTT_THREADS) ttt_fwd_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    const int K = a.K, ldw = a.ldw, ldr = a.ldr, ls = a.ls, mb = a.mb, RK = a.mbp * ldr;
    float *W = sm, *hb = W + K * ldw, *hbn = hb + K, *w = hbn + K, *b = w + K, *qs = b + K, *kb = qs + RK, *vb = kb + RK;
    float *xz = vb + RK, *gz = xz + RK, *zb = gz + RK, *cm = zb + RK, *sz = cm + a.mbp * ls, *eta = sz + mb;
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H, tid = threadIdx.x, nth = blockDim.x;
    const long long KK = (long long)K * K;

    for (int i = tid; i < (int)(eta + mb - sm); i += nth) sm[i] = 0.f;
    __syncthreads();
    for (int i = tid; i < K * K; i += nth) W[(i / K) * ldw + i % K] = a.h0 ? a.h0[bh * KK + i] : 0.f;
    for (int c = tid; c < K; c += nth) {
        hb[c] = a.hb0 ? a.hb0[(long long)bh * K + c] : 0.f;
        w[c] = a.w[h * K + c], b[c] = a.b[h * K + c];
    }
    __syncthreads();
    for (int n = 0; n < a.nmb; n++) {
        const int t0 = n * mb, m = min(mb, a.T - t0);
        const bool tc = a.tc && m % 16 == 0;
        if (a.Ws) {
            float *Wd = a.Ws + (bh * (long long)a.nmb + n) * KK;
            st_state(Wd, W, ldw, K);
            for (int c = tid; c < K; c += nth) a.hbs[(bh * (long long)a.nmb + n) * K + c] = hb[c];
        }
        const long long g0 = grow(a, bi, h, t0);
        ld_rows(qs, ldr, a.q, g0, a.H, m, K), ld_rows(kb, ldr, a.k, g0, a.H, m, K), ld_rows(vb, ldr, a.v, g0, a.H, m, K);
        for (int i = tid; i < m; i += nth) eta[i] = a.eta[((long long)bi * a.T + t0 + i) * a.H + h];
        rec_sync();
        /* Z = k W (+ hb in inner_grad_row); qs_t . k_j (q as loaded: its scale is the products' alpha) */
        blk_mm<false, false>(tc, xz, ldr, kb, ldr, W, ldw, m, K, K, 1.f, false);
        blk_mm<false, true>(tc, cm, ls, qs, ldr, kb, ldr, m, m, K, a.scale, false);
        __syncthreads();
        TTT_FOR_ROWS(i, ok, m)
        inner_grad_row<KPL>(xz + i * ldr, hb, vb + i * ldr, kb + i * ldr, w, b, K, a.eps, gz + i * ldr, sz + i,
                            nullptr, ok);
        for (int p = tid; p < m * m; p += nth) {   /* cm_tj = eta_t (qs_t . k_j + 1) for j <= t */
            const int t = p / m, j = p - t * m;
            cm[t * ls + j] = j <= t ? eta[t] * (cm[t * ls + j] + 1.f) : 0.f;
        }
        __syncthreads();
        /* Zb = qs W - cm gz (+ hb below); the next hb (into hbn: the rows below still read hb) */
        blk_mm<false, false>(tc, zb, ldr, qs, ldr, W, ldw, m, K, K, a.scale, false);
        blk_mm<false, false>(tc, zb, ldr, cm, ls, gz, ldr, m, K, m, -1.f, true);
        const float e = eta[m - 1];
        for (int c = tid; c < K; c += nth) {
            float s = 0;
            for (int j = 0; j < m; j++) s += gz[j * ldr + c];
            hbn[c] = hb[c] - e * s;
        }
        __syncthreads();
        TTT_FOR_ROWS(i, ok, m) {
            row_t<KPL> z = row_load<KPL>(zb + i * ldr, K), hr = row_load<KPL>(hb, K);
            row_t<KPL> wr = row_load<KPL>(w, K), br = row_load<KPL>(b, K);
#pragma unroll
            for (int r = 0; r < KPL; r++) z.x[r] += hr.x[r];
            row_t<KPL> xh = z;
            row_ln(xh, K, a.eps);
#pragma unroll
            for (int r = 0; r < KPL; r++) z.x[r] += wr.x[r] * xh.x[r] + br.x[r];
            if (ok) row_store(a.o + grow(a, bi, h, t0 + i), z, K);
        }
        blk_mm<true, false>(tc, W, ldw, kb, ldr, gz, ldr, K, K, m, -e, true);   /* W -= e k^T gz */
        __syncthreads();
        float *t = hb;   /* every thread swaps: hbn is the state from here */
        hb = hbn, hbn = t;
    }
    st_state(a.ht + bh * KK, W, ldw, K);
    for (int c = tid; c < K; c += nth) a.hbt[(long long)bh * K + c] = hb[c];
}

/* ---- backward -----------------------------------------------------------------
 * Phases per mini-batch (reverse order), each ended by a barrier; names as in
 * ops/ttt_linear.c's mb_backward. e = eta of the mini-batch's last token. The
 * small matrices: at_tj = qs_t . k_j and cb_tj = eta_t (at_tj + 1) for j <= t
 * (0 above), D_tj = dZb_t . gz_j and ED_tj = eta_t D_tj likewise. dk of a
 * mini-batch is left in xb and added to the grad during the next one's loads. */

template <int KPL>
__global__ void __launch_bounds__(TTT_THREADS) ttt_bwd_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    const int K = a.K, ldw = a.ldw, ldr = a.ldr, ls = a.ls, mb = a.mb, RK = a.mbp * ldr, SS = a.mbp * ls;
    float *W = sm, *dW = W + K * ldw, *hb = dW + K * ldw, *dhb = hb + K, *w = dhb + K, *b = w + K;
    float *dwp = b + K, *dbp = dwp + K, *qs = dbp + K, *kb = qs + RK, *yb = kb + RK, *xz = yb + RK;
    float *gz = xz + RK, *xb = gz + RK, *dzb = xb + RK, *dgz = dzb + RK, *tq = dgz + RK;
    float *at = tq + RK, *cb = at + SS, *D = cb + SS, *ED = D + SS;
    float *eta = ED + SS, *sz = eta + mb, *sb = sz + mb, *pg = sb + mb;
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H, tid = threadIdx.x, nth = blockDim.x;
    const long long KK = (long long)K * K;

    for (int i = tid; i < (int)(pg + mb - sm); i += nth) sm[i] = 0.f;
    __syncthreads();
    for (int i = tid; i < K * K; i += nth) dW[(i / K) * ldw + i % K] = a.dht ? a.dht[bh * KK + i] : 0.f;
    for (int c = tid; c < K; c += nth) {
        dhb[c] = a.dhbt ? a.dhbt[(long long)bh * K + c] : 0.f;
        w[c] = a.w[h * K + c], b[c] = a.b[h * K + c];
    }
    for (int n = a.nmb - 1; n >= 0; n--) {
        const int t0 = n * mb, m = min(mb, a.T - t0);
        const bool tc = a.tc && m % 16 == 0;
        const float *Wsrc = a.Ws + (bh * (long long)a.nmb + n) * KK, *hbsrc = a.hbs + (bh * (long long)a.nmb + n) * K;
        const long long g0 = grow(a, bi, h, t0);
        ld_state(W, ldw, Wsrc, K);
        ld_rows(qs, ldr, a.q, g0, a.H, m, K), ld_rows(kb, ldr, a.k, g0, a.H, m, K);
        ld_rows(yb, ldr, a.v, g0, a.H, m, K), ld_rows(dzb, ldr, a.dout, g0, a.H, m, K);
        for (int c = tid; c < K; c += nth) hb[c] = hbsrc[c];
        if (a.dk && n + 1 < a.nmb) add_rows(a.dk, xb, 1.f, a, bi, h, t0 + mb, min(mb, a.T - t0 - mb));
        for (int i = tid; i < m; i += nth) eta[i] = a.eta[((long long)bi * a.T + t0 + i) * a.H + h];
        rec_sync();
        /* recompute: Z (+ hb in inner_grad_row), Attn (q as loaded: its scale is the products' alpha) */
        blk_mm<false, false>(tc, xz, ldr, kb, ldr, W, ldw, m, K, K, 1.f, false);
        blk_mm<false, true>(tc, at, ls, qs, ldr, kb, ldr, m, m, K, a.scale, false);
        __syncthreads();
        TTT_FOR_ROWS(i, ok, m)
        inner_grad_row<KPL>(xz + i * ldr, hb, yb + i * ldr, kb + i * ldr, w, b, K, a.eps, gz + i * ldr, sz + i,
                            yb + i * ldr, ok);
        for (int p = tid; p < m * m; p += nth) {
            const int t = p / m, j = p - t * m;
            const float x = j <= t ? at[t * ls + j] : 0.f;
            at[t * ls + j] = x, cb[t * ls + j] = j <= t ? eta[t] * (x + 1.f) : 0.f;
        }
        __syncthreads();
        /* recompute: Zb = qs W - cb gz (+ hb in the LayerNorm below) */
        blk_mm<false, false>(tc, xb, ldr, qs, ldr, W, ldw, m, K, K, a.scale, false);
        blk_mm<false, false>(tc, xb, ldr, cb, ls, gz, ldr, m, K, m, -1.f, true);
        __syncthreads();
        TTT_FOR_ROWS(i, ok, m) {
            row_t<KPL> x = row_load<KPL>(xb + i * ldr, K), hr = row_load<KPL>(hb, K);
#pragma unroll
            for (int r = 0; r < KPL; r++) x.x[r] += hr.x[r];
            float s = row_ln(x, K, a.eps);
            if (!ok) continue;
            row_store(xb + i * ldr, x, K);
            if (row_lane() == 0) sb[i] = s;
        }
        __syncthreads();
        /* output LayerNorm: dw, db partials (a thread per column: fixed order) */
        for (int c = tid; c < K; c += nth) {
            float sw = 0, sbias = 0;
            for (int t = 0; t < m; t++) sw += dzb[t * ldr + c] * xb[t * ldr + c], sbias += dzb[t * ldr + c];
            dwp[c] += sw, dbp[c] += sbias;
        }
        __syncthreads();
        /* dZb = do + LNback(xb, w do) */
        TTT_FOR_ROWS(i, ok, m) {
            row_t<KPL> d = row_load<KPL>(dzb + i * ldr, K), x = row_load<KPL>(xb + i * ldr, K);
            row_t<KPL> wr = row_load<KPL>(w, K), g;
#pragma unroll
            for (int r = 0; r < KPL; r++) g.x[r] = wr.x[r] * d.x[r];
            row_t<KPL> dz = row_ln_back(x, sb[i], g, K);
#pragma unroll
            for (int r = 0; r < KPL; r++) dz.x[r] += d.x[r];
            if (ok) row_store(dzb + i * ldr, dz, K);
        }
        __syncthreads();
        /* D = dZb gz^T; P = k dW' (into dgz) */
        blk_mm<false, true>(tc, D, ls, dzb, ldr, gz, ldr, m, m, K, 1.f, false);
        blk_mm<false, false>(tc, dgz, ldr, kb, ldr, dW, ldw, m, K, K, 1.f, false);
        __syncthreads();
        const float e = eta[m - 1];
        /* P_j += dhb'; pg_j = P_j . gz_j; dgz_j = -e P_j; D masked, ED */
        TTT_FOR_ROWS(j, ok, m) {
            row_t<KPL> pr = row_load<KPL>(dgz + j * ldr, K), dh = row_load<KPL>(dhb, K);
#pragma unroll
            for (int r = 0; r < KPL; r++) pr.x[r] += dh.x[r];
            const float s = row_dot(pr, row_load<KPL>(gz + j * ldr, K));
#pragma unroll
            for (int r = 0; r < KPL; r++) pr.x[r] *= -e;
            if (!ok) continue;
            row_store(dgz + j * ldr, pr, K);
            if (row_lane() == 0) pg[j] = s;
        }
        for (int p = tid; p < m * m; p += nth) {
            const int t = p / m, j = p - t * m;
            const float x = j <= t ? D[t * ls + j] : 0.f;
            D[t * ls + j] = x, ED[t * ls + j] = eta[t] * x;
        }
        __syncthreads();
        /* deta; dgz -= cb^T dZb; xb = -e gz dW'^T - ED^T qs (the dk terms through dW'
         * and the dual form); dq = dZb W^T - ED k (into tq) */
        for (int t = tid; t < m; t += nth) {
            float s = 0;
            for (int j = 0; j <= t; j++) s -= (at[t * ls + j] + 1.f) * D[t * ls + j];
            if (t == m - 1)
                for (int j = 0; j < m; j++) s -= pg[j];
            if (a.deta) a.deta[((long long)bi * a.T + t0 + t) * a.H + h] += s;
        }
        blk_mm<true, false>(tc, dgz, ldr, cb, ls, dzb, ldr, m, K, m, -1.f, true);
        blk_mm<false, true>(tc, xb, ldr, gz, ldr, dW, ldw, m, K, K, -e, false);
        blk_mm<true, false>(tc, xb, ldr, ED, ls, qs, ldr, m, K, m, -a.scale, true);
        if (a.dq) {
            blk_mm<false, true>(tc, tq, ldr, dzb, ldr, W, ldw, m, K, K, 1.f, false);
            blk_mm<false, false>(tc, tq, ldr, ED, ls, kb, ldr, m, K, m, -1.f, true);
        }
        __syncthreads();
        /* through gz = LNback(xz, sz, G): dG (into gz), dZ (into dgz), dv, dk; dq */
        TTT_FOR_ROWS(j, ok, m) {
            row_t<KPL> xh = row_load<KPL>(xz + j * ldr, K), y = row_load<KPL>(yb + j * ldr, K);
            row_t<KPL> g = row_load<KPL>(gz + j * ldr, K), dg = row_load<KPL>(dgz + j * ldr, K);
            row_t<KPL> wr = row_load<KPL>(w, K), G, dxh, dv0{};
            const long long gj = grow(a, bi, h, t0 + j);
            if (a.dv && ok) dv0 = row_load<KPL>(a.dv + gj, K);   /* issued before the reductions below */
            const float s = sz[j];
#pragma unroll
            for (int r = 0; r < KPL; r++) G.x[r] = wr.x[r] * y.x[r];
            float mgx = row_dot(G, xh) / K, mdx = row_dot(dg, xh) / K, dsz = -row_dot(dg, g) / s;
            row_t<KPL> dG = row_ln_back(xh, s, dg, K);
#pragma unroll
            for (int r = 0; r < KPL; r++)
                dxh.x[r] = wr.x[r] * wr.x[r] * dG.x[r] - (dg.x[r] * mgx + G.x[r] * mdx) / s;
            row_t<KPL> dZ = row_ln_back(xh, s, dxh, K);
            if (!ok) continue;
            const int lane = row_lane();
#pragma unroll
            for (int r = 0; r < KPL; r++) {
                const int c = lane + TTT_LPR * r;
                if (c >= K) continue;
                dZ.x[r] += dsz * xh.x[r] / K;
                xb[j * ldr + c] += wr.x[r] * dG.x[r];
                dv0.x[r] -= wr.x[r] * dG.x[r];
            }
            row_store(gz + j * ldr, dG, K);
            row_store(dgz + j * ldr, dZ, K);
            if (a.dv) row_store(a.dv + gj, dv0, K);
        }
        if (a.dq) add_rows(a.dq, tq, a.scale, a, bi, h, t0, m);
        __syncthreads();
        /* dk = xb + dZ W^T (added to the grad next); the start state's grads; dw, db partials */
        if (a.dk) blk_mm<false, true>(tc, xb, ldr, dgz, ldr, W, ldw, m, K, K, 1.f, true);
        blk_mm<true, false>(tc, dW, ldw, qs, ldr, dzb, ldr, K, K, m, a.scale, true);
        blk_mm<true, false>(tc, dW, ldw, kb, ldr, dgz, ldr, K, K, m, 1.f, true);
        for (int c = tid; c < K; c += nth) {
            float s = 0, sw = 0, sbias = 0;
            for (int t = 0; t < m; t++) {
                float dG = gz[t * ldr + c], x = xz[t * ldr + c];
                s += dzb[t * ldr + c] + dgz[t * ldr + c];
                sw += dG * (w[c] * x + yb[t * ldr + c]);
                sbias += w[c] * dG;
            }
            dhb[c] += s, dwp[c] += sw, dbp[c] += sbias;
        }
        __syncthreads();
    }
    if (a.dk) add_rows(a.dk, xb, 1.f, a, bi, h, 0, min(mb, a.T));
    if (a.dh0)
        for (int i = tid; i < K * K; i += nth) a.dh0[bh * KK + i] += dW[(i / K) * ldw + i % K];
    for (int c = tid; c < K; c += nth) {
        if (a.dhb0) a.dhb0[(long long)bh * K + c] += dhb[c];
        a.dwp[(long long)bh * K + c] = dwp[c], a.dbp[(long long)bh * K + c] = dbp[c];
    }
}

/* ---- launchers ----------------------------------------------------------------- */

static ttt_args ttt_args_of(pr_ctx *ctx, cudaStream_t st, const pr_node *n)
{
    PR_CHECK(n->in[0]->dtype == PR_F32 || n->in[0]->dtype == PR_BF16,
             "ttt_linear: CUDA computes f32 and bf16 data, not %s (run f64 on the CPU)", pr_dtype_name(n->in[0]->dtype));
    ttt_args a = {};
    a.q = ttk_f32_in(ctx, st, n->in[0]), a.k = ttk_f32_in(ctx, st, n->in[1]), a.v = ttk_f32_in(ctx, st, n->in[2]);
    a.w = ttk_f32_in(ctx, st, n->in[3]), a.b = ttk_f32_in(ctx, st, n->in[4]), a.eta = ttk_f32_in(ctx, st, n->in[5]);
    a.h0 = ttk_f32_in(ctx, st, n->in[6]), a.hb0 = ttk_f32_in(ctx, st, n->in[7]);
    a.B = (int)n->in[0]->shape[0], a.T = (int)n->in[0]->shape[1], a.H = (int)n->in[0]->shape[2];
    a.K = (int)n->in[0]->shape[3];
    a.mb = (int)n->iarg[0];
    a.nmb = (a.T + a.mb - 1) / a.mb;
    a.ldw = a.K % 4 == 0 ? a.K + 4 : a.K | 1;
    a.ldr = a.K % 4 == 0 ? a.K + 4 : a.K;
    a.mbp = (a.mb + TTT_RT - 1) / TTT_RT * TTT_RT;
    a.ls = a.mbp + 4;
    a.tc = ctx->matmul_tf32 && a.K % 16 == 0;
    a.scale = (float)n->farg[0], a.eps = (float)n->farg[1];
    PR_CHECK(a.K <= TTT_MAXK, "ttt_linear: CUDA supports K <= %d, got K = %d", TTT_MAXK, a.K);
    return a;
}

/* dynamic shared memory of a kernel instance, opted in up to the device's limit */
static void ttt_smem(const void *kernel, size_t bytes, const ttt_args &a)
{
    int dev = 0, limit = 0;
    PR_CUDA_CHECK(cudaGetDevice(&dev));
    PR_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    PR_CHECK(bytes <= (size_t)limit, "ttt_linear: K = %d with mini_batch = %d needs %zu bytes of shared "
             "memory; the device has %d per block (use a smaller mini_batch)", a.K, a.mb, bytes, limit);
    PR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int KPL>
static void launch_fwd(const ttt_args &a, cudaStream_t st)
{
    size_t fl = (size_t)a.K * a.ldw + 4 * a.K + 6 * (size_t)a.mbp * a.ldr + (size_t)a.mbp * a.ls + 2 * a.mb;
    ttt_smem((const void *)ttt_fwd_kernel<KPL>, fl * sizeof(float), a);
    ttt_fwd_kernel<KPL><<<a.B * a.H, TTT_THREADS, fl * sizeof(float), st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
}

template <int KPL>
static void launch_bwd(const ttt_args &a, cudaStream_t st)
{
    size_t fl = 2 * (size_t)a.K * a.ldw + 6 * a.K + 9 * (size_t)a.mbp * a.ldr + 4 * (size_t)a.mbp * a.ls + 4 * a.mb;
    ttt_smem((const void *)ttt_bwd_kernel<KPL>, fl * sizeof(float), a);
    ttt_bwd_kernel<KPL><<<a.B * a.H, TTT_THREADS, fl * sizeof(float), st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_ttt_linear_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    cudaStream_t st = pr_cuda_stream(ctx);
    ttt_args a = ttt_args_of(ctx, st, n);
    a.o = ttk_f32_out(ctx, n->out[0]), a.ht = (float *)n->out[1]->data, a.hbt = (float *)n->out[2]->data;
    if (n->n_saved == 2) a.Ws = (float *)n->saved[0]->data, a.hbs = (float *)n->saved[1]->data;
    if (a.K <= 32) launch_fwd<2>(a, st);
    else if (a.K <= 64) launch_fwd<4>(a, st);
    else launch_fwd<8>(a, st);
    ttk_f32_done(st, n->out[0], a.o, false);
}

extern "C" void pr_ttt_linear_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    PR_CHECK(n->n_saved == 2, "ttt_linear: backward without saved state");
    cudaStream_t st = pr_cuda_stream(ctx);
    ttt_args a = ttt_args_of(ctx, st, n);
    a.Ws = (float *)n->saved[0]->data, a.hbs = (float *)n->saved[1]->data;
    a.dout = ttk_f32_in(ctx, st, n->out[0]->grad), a.dht = ttk_in(n->out[1]->grad), a.dhbt = ttk_in(n->out[2]->grad);
    /* the kernels add to the grads; a bf16 grad gets the sum in f32 scratch, added and rounded once */
    pr_tensor *gq = pr_in_grad(n, 0), *gk = pr_in_grad(n, 1), *gv = pr_in_grad(n, 2), *geta = pr_in_grad(n, 5);
    a.dq = ttk_f32_out(ctx, gq), a.dk = ttk_f32_out(ctx, gk), a.dv = ttk_f32_out(ctx, gv);
    a.deta = ttk_f32_out(ctx, geta);
    a.dh0 = ttk_grad(n, 6), a.dhb0 = ttk_grad(n, 7);
    a.dwp = ttk_partials(ctx, a.B, a.H, a.K), a.dbp = ttk_partials(ctx, a.B, a.H, a.K);
    if (a.K <= 32) launch_bwd<2>(a, st);
    else if (a.K <= 64) launch_bwd<4>(a, st);
    else launch_bwd<8>(a, st);
    ttk_add_dw_db(st, n, a.dwp, a.dbp, a.B, a.H, a.K);
    ttk_f32_done(st, gq, a.dq, true), ttk_f32_done(st, gk, a.dk, true), ttk_f32_done(st, gv, a.dv, true);
    ttk_f32_done(st, geta, a.deta, true);
}
