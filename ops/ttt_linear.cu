/* ops/ttt_linear.cu: TTT-Linear on CUDA, f32, forward and backward.
 *
 * The forward: one thread block per (batch, head) walks the mini-batches in
 * order, with the inner state W [K,K] in shared memory and the
 * mini-batch's rows beside it; inside a mini-batch the work is parallel:
 * block products (blk_mm) against W and between the rows, half a warp per
 * row for the LayerNorms. With ctx->matmul_tf32 the products of a mini-batch whose
 * sizes are multiples of 16 run on TF32 tensor cores (the recurrence's
 * mma.sync product, f32 accumulators; W itself stays f32), else in fp32. The
 * triangular parts of the dual form (Attn and D below) are products too,
 * masked afterwards. The math and the backward's derivation are the CPU
 * path's (ops/ttt_linear.c), which is the reference. No float atomics: the
 * dw, db partial sums of each (b,h) are reduced over b by the kit's column
 * sum, so results are bitwise reproducible. The backward has three plans
 * (fused; or split into a kernel per mini-batch and a serial one, one after
 * the other or side by side: see "backward"), and where they run side by
 * side the forward splits too (see "forward"). Limits: K <= 128 and the
 * fused backward's shared memory, 2K(K+4) + 9 mb (K+4) + 4 mb (mb+4)
 * floats and 2,048 more at mb = 16 (223 KB at K = 128, mb = 16; the other
 * kernels need less). bf16 data (q, k, v, eta, o; ops/ttt_linear.h) is staged:
 * f32 copies in, the kernels, o and the bf16 grads rounded back once; with
 * tensor cores on and K > 64 the kernels' BF instances multiply bf16
 * operands (TTT_BF, ttt_bf).
 */
#include <algorithm>

#include "ops/ops.h"
#include "ops/cuda/tiles.cuh" /* the block products and tile loads (rec_mm_*, rec_ld_tile) */
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
    float *dwp, *dbp;                           /* partials of dw, db [B + B NMB, H, K] */
    float *xzr, *yr, *gzr, *dzr, *szr, *cbr;    /* the backward's local half, per row: [B,T,H,K] x 4,
                                                   [B,T,H]; cb per mini-batch [B,H,NMB,mb,mb] */
    int B, T, H, K, mb, nmb, ldw, ldr, ls, mbp;
    int tc;                                     /* TF32 products where a mini-batch's sizes allow */
    float scale, eps;
};

/* The kernels: the forward and the backward's three (see "backward" below).
 * blk_mm takes the kernel as a template argument, so each kernel calls a
 * copy of its own: the compiler decides once, over all the callers of a
 * non-inlined function, whether its pointers are shared memory, and one
 * caller's generic pointer turned every kernel's products into generic
 * loads. */
enum { TTT_FORWARD, TTT_FUSED, TTT_LOCAL, TTT_SERIAL, TTT_FWD_SPLIT };
/* added to a kernel's KERNEL in its BF instance (bf16 data with tensor
 * cores on: ttt_bf): its tensor-core products run as bf16 mma.sync
 * m16n8k16. An instance of its own, not a branch: both tile paths in one
 * kernel took every kernel to 255 registers and spills */
#define TTT_BF 8
constexpr bool ttt_bf_kernel(int kernel) { return (kernel & TTT_BF) != 0; }

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
 * a kernel), which missed the instruction cache. */
template <bool TA, bool TB, int KERNEL>
__device__ __noinline__ void blk_mm(bool tc, float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                                    int M, int N, int Kd, float alpha, bool acc)
{
    static_assert(TTT_THREADS == PR_REC_THREADS, "the recurrence's products divide blocks among PR_REC_WARPS warps");
    if (tc) {   /* 16x32 warp blocks where there are enough, else 16x16 (32x32 ones spilled registers) */
        constexpr bool BF = ttt_bf_kernel(KERNEL);   /* tc: M, N, Kd multiples of 16 */
        if ((M >> 4) * (N >> 5) >= PR_REC_WARPS)
            return rec_mm_tc_tiles<TA, TB, 1, 2, BF>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
        return rec_mm_tc_tiles<TA, TB, 1, 1, BF>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
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
    const float s = sqrtf(row_reduce(var) / K + eps), inv = 1.f / s;   /* a multiply per element, not a division */
#pragma unroll
    for (int i = 0; i < KPL; i++) r.x[i] *= inv;
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
    const float mg = row_sum(g) / K, mgx = row_dot(g, xh) / K, inv = 1.f / s;
    row_t<KPL> d;
    const int lane = row_lane();
#pragma unroll
    for (int i = 0; i < KPL; i++) d.x[i] = lane + TTT_LPR * i < K ? (g.x[i] - mg - xh.x[i] * mgx) * inv : 0.f;
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

/* g[row t0 + i] = (acc ? g : 0) + alpha X[i] for the mini-batch's m rows (X:
 * row stride ldr); rec_st_tile where K % 4 == 0 (rows of X 16-byte aligned) */
__device__ void put_rows(float *g, const float *X, float alpha, bool acc, const ttt_args &a, int bi, int h, int t0,
                         int m)
{
    const int K = a.K;
    float *g0 = g + grow(a, bi, h, t0);
    if ((K & 3) == 0) return rec_st_tile(g0, (long long)a.H * K, m, K, X, a.ldr, alpha, acc, true);
    REC_FOR2D(m, K, i, c)
    {
        float *p = g0 + (long long)i * a.H * K + c;
        *p = (acc ? *p : 0.f) + alpha * X[i * a.ldr + c];
    }
}

/* ---- the pieces both directions share ----------------------------------------- */

/* A 16-row mini-batch's 16 x 16 products over K (Attn = q k^T, and the
 * backward's D = dZb gz^T) would fall to one warp beside its share of the
 * phase's 16 x K products, and that warp would hold the phase up (as a
 * profile showed). Where the mini-batch is 16 rows on tensor cores, every
 * warp takes K / PR_REC_WARPS of the columns into a partial of its own
 * (pt: PR_REC_WARPS blocks of 16 x 16, 2,048 floats) and the next phase
 * adds the partials up (pt_sum). */
#define TTT_PT (16 * 16 * PR_REC_WARPS)
template <bool BF> __device__ __forceinline__ bool pt_split(bool tc, const ttt_args &a, int m)
{
    return tc && m == 16 && a.mbp == 16 && a.K % ((BF ? 16 : 8) * PR_REC_WARPS) == 0;
}
template <int KERNEL>
__device__ __noinline__ void pt_mm(float *pt, const float *A, int lda, const float *B, int ldb, int K)
{
    const int w = threadIdx.x >> 5, kw = K / PR_REC_WARPS;
    rec_mm_tc_block<false, true, 1, 1, ttt_bf_kernel(KERNEL)>(pt + w * 256, 16, A + w * kw, lda, B + w * kw, ldb, 0,
                                                               0, kw, 1.f, false);
}
__device__ __forceinline__ float pt_sum(const float *pt, int t, int j)
{
    float s = 0;
#pragma unroll
    for (int w = 0; w < PR_REC_WARPS; w++) s += pt[w * 256 + t * 16 + j];
    return s;
}

/* [qs; kb] W -> [xq; xk] (q W unscaled, Z = k W): one product of 2m rows
 * where the rows fill their buffers (qs, kb and xq, xk adjacent), else two */
template <int KERNEL>
__device__ void qk_w(bool tc, const ttt_args &a, float *xq, float *xk, const float *qs, const float *kb,
                     const float *W, int m)
{
    const int K = a.K, ldr = a.ldr;
    if (m == a.mbp) return blk_mm<false, false, KERNEL>(tc, xq, ldr, qs, ldr, W, a.ldw, 2 * m, K, K, 1.f, false);
    blk_mm<false, false, KERNEL>(tc, xq, ldr, qs, ldr, W, a.ldw, m, K, K, 1.f, false);
    blk_mm<false, false, KERNEL>(tc, xk, ldr, kb, ldr, W, a.ldw, m, K, K, 1.f, false);
}

/* waits (the whole block) until *flag is set, then reads after it. The
 * writer fences before it raises the flag and thread 0 fences after it sees
 * it (release and acquire at GPU scope; the barrier carries the order to the
 * other threads), so plain loads after this see the writer's data under the
 * PTX memory model, L1 included. */
__device__ void wait_flag(int *flag)
{
    if (threadIdx.x == 0) {
        while (atomicAdd(flag, 0) == 0) __nanosleep(256);
        __threadfence();
    }
    __syncthreads();
}

/* 4 bytes global -> shared, asynchronously (complete at the next rec_sync) */
__device__ __forceinline__ void cp4(float *dst, const float *src)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}

/* ---- forward -----------------------------------------------------------------
 * Mini-batch n of (b, h) from its start state W, hb, in four barrier phases:
 * 1. [qs; k] W -> [zb; xz] (q unscaled), Attn = scale q k^T;
 * 2. the rows: Z = xz + hb -> its LayerNorm xz, the inner gradient gz and its
 *    scale sz; cm_tj = eta_t (Attn_tj + 1) for j <= t;
 * 3. vb = -cm gz (v is spent); the update W -= e k^T gz, hb' = hb - e sum gz;
 * 4. the output rows o = Zb + LN(Zb) w + b, Zb = scale zb + vb + hb.
 * The fused kernel (a block per (b, h)) keeps two row sets and loads
 * mini-batch n + 1's while it works on n. Where the backward runs overlapped
 * (B H below the SM count) and the states are saved, the forward splits too:
 * the chain of (b, h) does only phases 1-3's state part (Z, gz, the update)
 * and raises mini-batch n's flag once W_n, hb_n are stored; workers take the
 * mini-batches from a queue, wait for the flag, and run the four phases from
 * the saved W_n, hb_n. The chains wait for nothing, so any order of the
 * blocks is safe. */
template <class P> struct fwd_bufs {
    P W, hb, hbn, w, b;
    P qs, kb, vb, eta;   /* row set 0; set 1 is `set` floats on (the split's workers use set 0 only) */
    P zb, xz, gz, cm, sz, pt;
    size_t set, floats;
};
/* P = size_t from 0: the launcher's sizes (see bwd_bufs_of) */
template <class P> __host__ __device__ inline fwd_bufs<P> fwd_bufs_of(P base, const ttt_args &a)
{
    const size_t K = a.K, RK = (size_t)a.mbp * a.ldr, mb4 = (a.mb + 3) & ~3;
    size_t o = 0;
    auto take = [&](size_t n) {
        const P p = base + o;
        o += n;
        return p;
    };
    fwd_bufs<P> s;
    s.W = take(K * a.ldw), s.hb = take(K), s.hbn = take(K), s.w = take(K), s.b = take(K);
    s.qs = take(RK), s.kb = take(RK), s.vb = take(RK), s.eta = take(mb4);
    s.set = 3 * RK + mb4;
    o += s.set;
    s.zb = take(RK), s.xz = take(RK), s.gz = take(RK), s.cm = take((size_t)a.mbp * a.ls), s.sz = take(mb4);
    s.pt = take(a.mbp == 16 ? TTT_PT : 0);
    s.floats = o;
    return s;
}
struct fwd_rows {
    float *qs, *kb, *vb, *eta;
};
__device__ __forceinline__ fwd_rows fwd_rows_of(const fwd_bufs<float *> &s, int set)
{
    const size_t o = set * s.set;
    return {s.qs + o, s.kb + o, s.vb + o, s.eta + o};
}

/* zeroes the shared memory (padding rows and columns feed only dropped
 * results, but must be finite) when zero; w and b of head h */
__device__ void fwd_start(const ttt_args &a, const fwd_bufs<float *> &s, int h, bool zero)
{
    extern __shared__ float sm[];
    if (zero) {
        for (int i = threadIdx.x; i < (int)s.floats; i += blockDim.x) sm[i] = 0.f;
        __syncthreads();
    }
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) s.w[c] = a.w[h * a.K + c], s.b[c] = a.b[h * a.K + c];
}

/* (b, h) = bh's start state: h0, hb0 (zero without them) */
__device__ void fwd_first_state(const ttt_args &a, const fwd_bufs<float *> &s, int bh)
{
    const int K = a.K;
    const long long KK = (long long)K * K;
    for (int i = threadIdx.x; i < K * K; i += blockDim.x) s.W[(i / K) * a.ldw + i % K] = a.h0 ? a.h0[bh * KK + i] : 0.f;
    for (int c = threadIdx.x; c < K; c += blockDim.x) s.hb[c] = a.hb0 ? a.hb0[(long long)bh * K + c] : 0.f;
}

/* mini-batch n's rows (q only when q) and eta into row set r, asynchronously
 * where K % 4 == 0 (complete at the next rec_sync) */
__device__ void fwd_load(const ttt_args &a, const fwd_rows &r, int bi, int h, int n, bool q)
{
    const int K = a.K, t0 = n * a.mb, m = min(a.mb, a.T - t0);
    const long long g0 = grow(a, bi, h, t0);
    if (q) ld_rows(r.qs, a.ldr, a.q, g0, a.H, m, K);
    ld_rows(r.kb, a.ldr, a.k, g0, a.H, m, K), ld_rows(r.vb, a.ldr, a.v, g0, a.H, m, K);
    for (int i = threadIdx.x; i < m; i += blockDim.x) cp4(r.eta + i, a.eta + ((long long)bi * a.T + t0 + i) * a.H + h);
}

/* W, hb -> the saved start state of mini-batch n */
__device__ void fwd_save_state(const ttt_args &a, const fwd_bufs<float *> &s, const float *hb, int bh, int n)
{
    const long long bn = bh * (long long)a.nmb + n;
    st_state(a.Ws + bn * a.K * a.K, s.W, a.ldw, a.K);
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) a.hbs[bn * a.K + c] = hb[c];
}

/* phase 1 (the chain: Z = k W alone) */
template <int KERNEL>
__device__ void fwd_products(bool tc, const ttt_args &a, const fwd_bufs<float *> &s, const fwd_rows &r, int m,
                             bool out)
{
    if (!out) return blk_mm<false, false, KERNEL>(tc, s.xz, a.ldr, r.kb, a.ldr, s.W, a.ldw, m, a.K, a.K, 1.f, false);
    qk_w<KERNEL>(tc, a, s.zb, s.xz, r.qs, r.kb, s.W, m);
    if (pt_split<ttt_bf_kernel(KERNEL)>(tc, a, m)) pt_mm<KERNEL>(s.pt, r.qs, a.ldr, r.kb, a.ldr, a.K);
    else blk_mm<false, true, KERNEL>(tc, s.cm, a.ls, r.qs, a.ldr, r.kb, a.ldr, m, m, a.K, a.scale, false);
}

/* phase 2 (cm only when out) */
template <int KPL, bool BF>
__device__ void fwd_rows_phase(bool tc, const ttt_args &a, const fwd_bufs<float *> &s, const fwd_rows &r,
                               const float *hb, int m, bool out)
{
    const int ldr = a.ldr, ls = a.ls;
    TTT_FOR_ROWS(i, ok, m)
    inner_grad_row<KPL>(s.xz + i * ldr, hb, r.vb + i * ldr, r.kb + i * ldr, s.w, s.b, a.K, a.eps, s.gz + i * ldr,
                        s.sz + i, nullptr, ok);
    if (!out) return;
    const bool split = pt_split<BF>(tc, a, m);
    for (int p = threadIdx.x; p < m * m; p += blockDim.x) {
        const int t = p / m, j = p - t * m;
        const float at = split ? a.scale * pt_sum(s.pt, t, j) : s.cm[t * ls + j];
        s.cm[t * ls + j] = j <= t ? r.eta[t] * (at + 1.f) : 0.f;
    }
}

/* phase 3: vb = -cm gz when out; W -= e k^T gz and hbn = hb - e sum gz when state */
template <int KERNEL>
__device__ void fwd_update(bool tc, const ttt_args &a, const fwd_bufs<float *> &s, const fwd_rows &r,
                           const float *hb, float *hbn, int m, bool out, bool state)
{
    const int K = a.K, ldr = a.ldr;
    const float e = r.eta[m - 1];
    if (out) blk_mm<false, false, KERNEL>(tc, r.vb, ldr, s.cm, a.ls, s.gz, ldr, m, K, m, -1.f, false);
    if (!state) return;
    blk_mm<true, false, KERNEL>(tc, s.W, a.ldw, r.kb, ldr, s.gz, ldr, K, K, m, -e, true);
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        float x = 0;
        for (int j = 0; j < m; j++) x += s.gz[j * ldr + c];
        hbn[c] = hb[c] - e * x;
    }
}

/* phase 4: o = Zb + LN(Zb) w + b, Zb = scale zb + vb + hb */
template <int KPL>
__device__ void fwd_out_rows(const ttt_args &a, const fwd_bufs<float *> &s, const fwd_rows &r, const float *hb,
                             int bi, int h, int t0, int m)
{
    const int K = a.K, ldr = a.ldr;
    TTT_FOR_ROWS(i, ok, m) {
        row_t<KPL> z = row_load<KPL>(s.zb + i * ldr, K), c = row_load<KPL>(r.vb + i * ldr, K);
        const row_t<KPL> hr = row_load<KPL>(hb, K), wr = row_load<KPL>(s.w, K), br = row_load<KPL>(s.b, K);
#pragma unroll
        for (int u = 0; u < KPL; u++) z.x[u] = a.scale * z.x[u] + c.x[u] + hr.x[u];
        row_t<KPL> xh = z;
        row_ln(xh, K, a.eps);
#pragma unroll
        for (int u = 0; u < KPL; u++) z.x[u] += wr.x[u] * xh.x[u] + br.x[u];
        if (ok) row_store(a.o + grow(a, bi, h, t0 + i), z, K);
    }
}

/* a block per (b, h): every mini-batch in order, the next one's rows loading */
template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS) ttt_fwd_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    const fwd_bufs<float *> s = fwd_bufs_of(sm, a);
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H;
    fwd_start(a, s, h, true);
    fwd_first_state(a, s, bh);
    fwd_load(a, fwd_rows_of(s, 0), bi, h, 0, true);
    __syncthreads();   /* the first state is in before its save */
    float *hb = s.hb, *hbn = s.hbn;
    for (int n = 0; n < a.nmb; n++) {
        const int t0 = n * a.mb, m = min(a.mb, a.T - t0);
        const bool tc = a.tc && m % 16 == 0;
        const fwd_rows r = fwd_rows_of(s, n & 1);
        if (a.Ws) fwd_save_state(a, s, hb, bh, n);
        rec_sync();
        if (n + 1 < a.nmb) fwd_load(a, fwd_rows_of(s, (n + 1) & 1), bi, h, n + 1, true);
        fwd_products<TTT_FORWARD + TTT_BF * BF>(tc, a, s, r, m, true);
        __syncthreads();
        fwd_rows_phase<KPL, BF>(tc, a, s, r, hb, m, true);
        __syncthreads();
        fwd_update<TTT_FORWARD + TTT_BF * BF>(tc, a, s, r, hb, hbn, m, true, true);
        __syncthreads();
        fwd_out_rows<KPL>(a, s, r, hb, bi, h, t0, m);
        float *t = hb;   /* every thread swaps: hbn is the state from here */
        hb = hbn, hbn = t;
    }
    st_state(a.ht + bh * (long long)a.K * a.K, s.W, a.ldw, a.K);
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) a.hbt[(long long)bh * a.K + c] = hb[c];
}

/* the split's chain of (b, h) = bh: the states only, the next rows loading */
template <int KPL, bool BF>
__device__ void fwd_chain(const ttt_args &a, const fwd_bufs<float *> &s, int bh, int *ready)
{
    const int bi = bh / a.H, h = bh % a.H;
    fwd_start(a, s, h, true);
    fwd_first_state(a, s, bh);
    fwd_load(a, fwd_rows_of(s, 0), bi, h, 0, false);
    __syncthreads();   /* the first state is in before its save */
    float *hb = s.hb, *hbn = s.hbn;
    for (int n = 0; n < a.nmb; n++) {
        const int m = min(a.mb, a.T - n * a.mb);
        const bool tc = a.tc && m % 16 == 0;
        const fwd_rows r = fwd_rows_of(s, n & 1);
        fwd_save_state(a, s, hb, bh, n);
        __threadfence();
        rec_sync();
        if (threadIdx.x == 0) atomicExch(ready + bh * (long long)a.nmb + n, 1);   /* W_n, hb_n are out */
        if (n + 1 < a.nmb) fwd_load(a, fwd_rows_of(s, (n + 1) & 1), bi, h, n + 1, false);
        fwd_products<TTT_FWD_SPLIT + TTT_BF * BF>(tc, a, s, r, m, false);
        __syncthreads();
        fwd_rows_phase<KPL, BF>(tc, a, s, r, hb, m, false);
        __syncthreads();
        fwd_update<TTT_FWD_SPLIT + TTT_BF * BF>(tc, a, s, r, hb, hbn, m, false, true);
        __syncthreads();
        float *t = hb;
        hb = hbn, hbn = t;
    }
    st_state(a.ht + bh * (long long)a.K * a.K, s.W, a.ldw, a.K);
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) a.hbt[(long long)bh * a.K + c] = hb[c];
}

/* the split's worker task: mini-batch n of (b, h) = bh from its saved start
 * state through to o */
template <int KPL, bool BF>
__device__ void fwd_out_task(const ttt_args &a, const fwd_bufs<float *> &s, int bh, int n, int *ready, bool first)
{
    const int K = a.K, bi = bh / a.H, h = bh % a.H, t0 = n * a.mb, m = min(a.mb, a.T - t0);
    const bool tc = a.tc && m % 16 == 0;
    const long long bn = bh * (long long)a.nmb + n;
    const fwd_rows r = fwd_rows_of(s, 0);
    fwd_start(a, s, h, first);
    fwd_load(a, r, bi, h, n, true);
    wait_flag(ready + bn);
    ld_state(s.W, a.ldw, a.Ws + bn * K * K, K);
    for (int c = threadIdx.x; c < K; c += blockDim.x) s.hb[c] = a.hbs[bn * K + c];
    rec_sync();
    fwd_products<TTT_FWD_SPLIT + TTT_BF * BF>(tc, a, s, r, m, true);
    __syncthreads();
    fwd_rows_phase<KPL, BF>(tc, a, s, r, s.hb, m, true);
    __syncthreads();
    fwd_update<TTT_FWD_SPLIT + TTT_BF * BF>(tc, a, s, r, s.hb, nullptr, m, true, false);
    __syncthreads();
    fwd_out_rows<KPL>(a, s, r, s.hb, bi, h, t0, m);
    __syncthreads();
}

/* the split: blocks 0 .. B H - 1 are the chains; the rest take mini-batches in order */
template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS, 1) ttt_fwd_split_kernel(ttt_args a, int *next, int *ready)
{
    extern __shared__ float sm[];
    __shared__ int task;
    const fwd_bufs<float *> s = fwd_bufs_of(sm, a);
    const int BH = a.B * a.H;
    if ((int)blockIdx.x < BH) return fwd_chain<KPL, BF>(a, s, blockIdx.x, ready);
    for (bool first = true;; first = false) {
        if (threadIdx.x == 0) task = atomicAdd(next, 1);
        __syncthreads();
        const int t = task;
        if (t >= BH * a.nmb) return;
        fwd_out_task<KPL, BF>(a, s, t % BH, t / BH, ready, first);
    }
}

/* ---- backward -----------------------------------------------------------------
 * Names as in ops/ttt_linear.c's mb_backward. e = eta of the mini-batch's last
 * token; the small matrices: at_tj = qs_t . k_j and cb_tj = eta_t (at_tj + 1)
 * for j <= t (0 above), D_tj = dZb_t . gz_j and ED_tj = eta_t D_tj likewise.
 * dW', dhb' are the grads of the next mini-batch's start state.
 *
 * A mini-batch's backward has a local half, which needs only its saved start
 * state and its rows (the recompute of Z, gz, Zb and the output LayerNorm;
 * dZb, D, dq, deta but for one term, the dual form's dk term, the output
 * LayerNorm's dw and db), and a serial half, which needs dW' and dhb'. The
 * plans (plan_bwd): TTT_FUSED, one block per (b, h) doing both halves of each
 * mini-batch in reverse order; or split: TTT_LOCAL, a block per mini-batch,
 * keeping xz, the residual y, gz, dZb, sz and cb in global scratch, and
 * TTT_SERIAL, a block per (b, h) for the serial halves, either one launch
 * after the other or side by side in one (ttt_bwd_overlap_kernel). The split takes
 * half the products and three of five row phases off the serial chain and
 * spreads them over every SM: it wins where the B H fused blocks would leave
 * most SMs idle, and loses where they fill the card. */
template <class P> struct bwd_bufs {
    P W, dW, hb, dhb, w, b, dwp, dbp;
    P qs, kb, yb, xz, gz, xb, dzb, dgz, tq;
    P at, cb, D, ED, eta, sz, sb, pg, pt;
    size_t floats;   /* all of them */
};
typedef bwd_bufs<float *> bwd_smem;

/* the shared memory of a backward kernel: each holds what its half needs.
 * P = float * from the kernel's base; P = size_t from 0 for the launcher's
 * sizes (a pointer that could be null would make the compiler give up on
 * the buffers being shared memory: generic loads in every product). Row
 * buffers stay 16-byte aligned where K % 4 == 0. */
template <class P> __host__ __device__ inline bwd_bufs<P> bwd_bufs_of(P base, const ttt_args &a, int kind)
{
    const bool loc = kind != TTT_SERIAL, ser = kind != TTT_LOCAL;
    const size_t KW = (size_t)a.K * a.ldw, K = a.K, RK = (size_t)a.mbp * a.ldr, SS = (size_t)a.mbp * a.ls, mb = a.mb;
    size_t o = 0;
    auto take = [&](bool need, size_t n) {
        const P p = base + o;
        o += need ? n : 0;
        return p;
    };
    bwd_bufs<P> s;
    s.W = take(true, KW), s.dW = take(ser, KW), s.hb = take(loc, K), s.dhb = take(ser, K);
    s.w = take(true, K), s.b = take(loc, K), s.dwp = take(ser, K), s.dbp = take(ser, K);
    /* qs, kb and xb, xz adjacent: qk_w's one product */
    s.qs = take(true, RK), s.kb = take(true, RK), s.yb = take(true, RK), s.xb = take(true, RK);
    s.xz = take(true, RK), s.gz = take(true, RK), s.dzb = take(true, RK), s.dgz = take(ser, RK), s.tq = take(loc, RK);
    s.at = take(loc, SS), s.cb = take(true, SS), s.D = take(loc, SS), s.ED = take(loc, SS);
    s.eta = take(loc, mb), s.sz = take(true, mb), s.sb = take(loc, mb), s.pg = take(ser, mb);
    s.pt = take(loc && a.mbp == 16, TTT_PT);
    s.floats = o;
    return s;
}

/* recompute: xz = the normalized rows of Z = k W + hb, gz = dl/dZ, sz, yb =
 * the residual (yb held v); at, cb; and xb = q W (unscaled) for bwd_zb. Two
 * phases (q as loaded: its scale is applied after the products). */
template <int KPL, int KERNEL>
__device__ void bwd_inner(bool tc, const ttt_args &a, const bwd_smem &s, int m)
{
    const int K = a.K, ldr = a.ldr, ls = a.ls;
    const bool split = pt_split<ttt_bf_kernel(KERNEL)>(tc, a, m);
    qk_w<KERNEL>(tc, a, s.xb, s.xz, s.qs, s.kb, s.W, m);
    if (split) pt_mm<KERNEL>(s.pt, s.qs, ldr, s.kb, ldr, K);
    else blk_mm<false, true, KERNEL>(tc, s.at, ls, s.qs, ldr, s.kb, ldr, m, m, K, a.scale, false);
    __syncthreads();
    TTT_FOR_ROWS(i, ok, m)
    inner_grad_row<KPL>(s.xz + i * ldr, s.hb, s.yb + i * ldr, s.kb + i * ldr, s.w, s.b, K, a.eps, s.gz + i * ldr,
                        s.sz + i, s.yb + i * ldr, ok);
    for (int p = threadIdx.x; p < m * m; p += blockDim.x) {
        const int t = p / m, j = p - t * m;
        const float x = j > t ? 0.f : split ? a.scale * pt_sum(s.pt, t, j) : s.at[t * ls + j];
        s.at[t * ls + j] = x, s.cb[t * ls + j] = j <= t ? s.eta[t] * (x + 1.f) : 0.f;
    }
    __syncthreads();
}

/* recompute: Zb = scale xb - cb gz (xb = q W from bwd_inner; cb gz into tq,
 * which is free until dq), LayerNormed with hb: xb = its normalized rows, sb
 * their scales. Two phases. */
template <int KPL, int KERNEL>
__device__ void bwd_zb(bool tc, const ttt_args &a, const bwd_smem &s, int m)
{
    const int K = a.K, ldr = a.ldr;
    blk_mm<false, false, KERNEL>(tc, s.tq, ldr, s.cb, a.ls, s.gz, ldr, m, K, m, -1.f, false);
    __syncthreads();
    TTT_FOR_ROWS(i, ok, m) {
        row_t<KPL> x = row_load<KPL>(s.xb + i * ldr, K), c = row_load<KPL>(s.tq + i * ldr, K);
        const row_t<KPL> hr = row_load<KPL>(s.hb, K);
#pragma unroll
        for (int r = 0; r < KPL; r++) x.x[r] = a.scale * x.x[r] + c.x[r] + hr.x[r];
        float sc = row_ln(x, K, a.eps);
        if (!ok) continue;
        row_store(s.xb + i * ldr, x, K);
        if (row_lane() == 0) s.sb[i] = sc;
    }
    __syncthreads();
}

/* the output LayerNorm's dw, db over the mini-batch (a thread per column:
 * fixed order), into dw[c], db[c] (acc: added) */
__device__ void bwd_out_dw_db(const ttt_args &a, const bwd_smem &s, int m, float *dw, float *db, bool acc)
{
    const int ldr = a.ldr;
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) {
        float sw = 0, sbias = 0;
        for (int t = 0; t < m; t++) sw += s.dzb[t * ldr + c] * s.xb[t * ldr + c], sbias += s.dzb[t * ldr + c];
        dw[c] = (acc ? dw[c] : 0.f) + sw, db[c] = (acc ? db[c] : 0.f) + sbias;
    }
}

/* dZb = do + LNback(xb, w do), in place of do (rows only) */
template <int KPL>
__device__ void bwd_dzb_rows(const ttt_args &a, const bwd_smem &s, int m)
{
    const int K = a.K, ldr = a.ldr;
    TTT_FOR_ROWS(i, ok, m) {
        row_t<KPL> d = row_load<KPL>(s.dzb + i * ldr, K), x = row_load<KPL>(s.xb + i * ldr, K);
        row_t<KPL> wr = row_load<KPL>(s.w, K), g;
#pragma unroll
        for (int r = 0; r < KPL; r++) g.x[r] = wr.x[r] * d.x[r];
        row_t<KPL> dz = row_ln_back(x, ok ? s.sb[i] : 1.f, g, K);   /* row m: padding */
#pragma unroll
        for (int r = 0; r < KPL; r++) dz.x[r] += d.x[r];
        if (ok) row_store(s.dzb + i * ldr, dz, K);
    }
}

/* P = k dW' (in dgz) += dhb'; pg_j = P_j . gz_j; dgz_j = -e P_j (rows only) */
template <int KPL>
__device__ void bwd_pg_rows(const ttt_args &a, const bwd_smem &s, int m, float e)
{
    const int K = a.K, ldr = a.ldr;
    TTT_FOR_ROWS(j, ok, m) {
        row_t<KPL> pr = row_load<KPL>(s.dgz + j * ldr, K), dh = row_load<KPL>(s.dhb, K);
#pragma unroll
        for (int r = 0; r < KPL; r++) pr.x[r] += dh.x[r];
        const float d = row_dot(pr, row_load<KPL>(s.gz + j * ldr, K));
#pragma unroll
        for (int r = 0; r < KPL; r++) pr.x[r] *= -e;
        if (!ok) continue;
        row_store(s.dgz + j * ldr, pr, K);
        if (row_lane() == 0) s.pg[j] = d;
    }
}

/* D = dZb gz^T (into pt where split) */
template <int KERNEL>
__device__ void bwd_d(bool split, bool tc, const ttt_args &a, const bwd_smem &s, int m)
{
    if (split) return pt_mm<KERNEL>(s.pt, s.dzb, a.ldr, s.gz, a.ldr, a.K);
    blk_mm<false, true, KERNEL>(tc, s.D, a.ls, s.dzb, a.ldr, s.gz, a.ldr, m, m, a.K, 1.f, false);
}

/* D masked to j <= t, and ED */
__device__ void bwd_mask_d(bool split, const ttt_args &a, const bwd_smem &s, int m)
{
    const int ls = a.ls;
    for (int p = threadIdx.x; p < m * m; p += blockDim.x) {
        const int t = p / m, j = p - t * m;
        const float x = j > t ? 0.f : split ? pt_sum(s.pt, t, j) : s.D[t * ls + j];
        s.D[t * ls + j] = x, s.ED[t * ls + j] = s.eta[t] * x;
    }
}

/* deta += -sum_{j<=t} (at_tj + 1) D_tj, and for the last token -sum_j pg_j
 * when pg is given */
__device__ void bwd_deta(const ttt_args &a, const bwd_smem &s, int bi, int h, int t0, int m, const float *pg)
{
    if (!a.deta) return;
    for (int t = threadIdx.x; t < m; t += blockDim.x) {
        float x = 0;
        for (int j = 0; j <= t; j++) x -= (s.at[t * a.ls + j] + 1.f) * s.D[t * a.ls + j];
        if (pg && t == m - 1)
            for (int j = 0; j < m; j++) x -= pg[j];
        a.deta[((long long)bi * a.T + t0 + t) * a.H + h] += x;
    }
}

/* through gz = LNback(xz, sz, G): dG (into gz), dZ (into dgz), dv (added to
 * the grad), xb += w dG (rows only) */
template <int KPL>
__device__ void bwd_dg_rows(const ttt_args &a, const bwd_smem &s, int bi, int h, int t0, int m)
{
    const int K = a.K, ldr = a.ldr;
    TTT_FOR_ROWS(j, ok, m) {
        row_t<KPL> xh = row_load<KPL>(s.xz + j * ldr, K), y = row_load<KPL>(s.yb + j * ldr, K);
        row_t<KPL> g = row_load<KPL>(s.gz + j * ldr, K), dg = row_load<KPL>(s.dgz + j * ldr, K);
        row_t<KPL> wr = row_load<KPL>(s.w, K), G, dxh, dv0{};
        const long long gj = grow(a, bi, h, t0 + j);
        if (a.dv && ok) dv0 = row_load<KPL>(a.dv + gj, K);   /* issued before the reductions below */
        const float sc = ok ? s.sz[j] : 1.f;   /* row m: padding */
#pragma unroll
        for (int r = 0; r < KPL; r++) G.x[r] = wr.x[r] * y.x[r];
        const float mgx = row_dot(G, xh) / K, mdx = row_dot(dg, xh) / K, dsz = -row_dot(dg, g) / sc, isc = 1.f / sc;
        row_t<KPL> dG = row_ln_back(xh, sc, dg, K);
#pragma unroll
        for (int r = 0; r < KPL; r++) dxh.x[r] = wr.x[r] * wr.x[r] * dG.x[r] - (dg.x[r] * mgx + G.x[r] * mdx) * isc;
        row_t<KPL> dZ = row_ln_back(xh, sc, dxh, K);
        if (!ok) continue;
        const int lane = row_lane();
        const float dszk = dsz / K;
#pragma unroll
        for (int r = 0; r < KPL; r++) {
            const int c = lane + TTT_LPR * r;
            if (c >= K) continue;
            dZ.x[r] += dszk * xh.x[r];
            s.xb[j * ldr + c] += wr.x[r] * dG.x[r];
            dv0.x[r] -= wr.x[r] * dG.x[r];
        }
        row_store(s.gz + j * ldr, dG, K);
        row_store(s.dgz + j * ldr, dZ, K);
        if (a.dv) row_store(a.dv + gj, dv0, K);
    }
}

/* the serial half's last phase: dk = xb + dZ W^T (added to the grad with the
 * next loads); dW' += scale q^T dZb + k^T dZ; dhb' += the column sums of dZb
 * and dZ; the inner LayerNorm's dw, db (a thread per column) */
template <int KERNEL>
__device__ void bwd_state_grads(bool tc, const ttt_args &a, const bwd_smem &s, int m)
{
    const int K = a.K, ldr = a.ldr, ldw = a.ldw;
    if (a.dk) blk_mm<false, true, KERNEL>(tc, s.xb, ldr, s.dgz, ldr, s.W, ldw, m, K, K, 1.f, true);
    blk_mm<true, false, KERNEL>(tc, s.dW, ldw, s.qs, ldr, s.dzb, ldr, K, K, m, a.scale, true);
    blk_mm<true, false, KERNEL>(tc, s.dW, ldw, s.kb, ldr, s.dgz, ldr, K, K, m, 1.f, true);
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        float sh = 0, sw = 0, sbias = 0;
        for (int t = 0; t < m; t++) {
            const float dG = s.gz[t * ldr + c];
            sh += s.dzb[t * ldr + c] + s.dgz[t * ldr + c];
            sw += dG * (s.w[c] * s.xz[t * ldr + c] + s.yb[t * ldr + c]);
            sbias += s.w[c] * dG;
        }
        s.dhb[c] += sh, s.dwp[c] += sw, s.dbp[c] += sbias;
    }
}

/* the grads of the first start state and the dw, db partials of (b, h) */
__device__ void bwd_finish(const ttt_args &a, const bwd_smem &s, int bi, int h)
{
    const int K = a.K, bh = bi * a.H + h;
    if (a.dk) put_rows(a.dk, s.xb, 1.f, true, a, bi, h, 0, min(a.mb, a.T));
    if (a.dh0)
        for (int i = threadIdx.x; i < K * K; i += blockDim.x)
            a.dh0[bh * (long long)K * K + i] += s.dW[(i / K) * a.ldw + i % K];
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        if (a.dhb0) a.dhb0[(long long)bh * K + c] += s.dhb[c];
        a.dwp[(long long)bh * K + c] = s.dwp[c], a.dbp[(long long)bh * K + c] = s.dbp[c];
    }
}

/* zeroes the block's shared memory (padding rows and columns feed only
 * dropped results, but must be finite), then loads what the start needs:
 * w (and b), dW' = dht and dhb' = dhbt for the serial half */
__device__ void bwd_start(const ttt_args &a, const bwd_smem &s, int kind, int bh)
{
    extern __shared__ float sm[];
    const int K = a.K, h = bh % a.H, tid = threadIdx.x, nth = blockDim.x;
    for (int i = tid; i < (int)s.floats; i += nth) sm[i] = 0.f;
    __syncthreads();
    for (int c = tid; c < K; c += nth) {
        s.w[c] = a.w[h * K + c];
        if (kind != TTT_SERIAL) s.b[c] = a.b[h * K + c];
    }
    if (kind == TTT_LOCAL) return;
    const long long KK = (long long)K * K;
    for (int i = tid; i < K * K; i += nth) s.dW[(i / K) * a.ldw + i % K] = a.dht ? a.dht[bh * KK + i] : 0.f;
    for (int c = tid; c < K; c += nth) s.dhb[c] = a.dhbt ? a.dhbt[(long long)bh * K + c] : 0.f;
}

/* the local half's loads of mini-batch n: its start state W, hb, and q, k, v
 * (into yb), do (into dzb), eta (cp.async where they allow: complete at the
 * next rec_sync) */
__device__ void bwd_load_local(const ttt_args &a, const bwd_smem &s, int bi, int h, int n, int m)
{
    const int K = a.K, ldr = a.ldr, t0 = n * a.mb;
    const long long bn = (bi * (long long)a.H + h) * a.nmb + n, g0 = grow(a, bi, h, t0);
    ld_state(s.W, a.ldw, a.Ws + bn * K * K, K);
    ld_rows(s.qs, ldr, a.q, g0, a.H, m, K), ld_rows(s.kb, ldr, a.k, g0, a.H, m, K);
    ld_rows(s.yb, ldr, a.v, g0, a.H, m, K), ld_rows(s.dzb, ldr, a.dout, g0, a.H, m, K);
    for (int c = threadIdx.x; c < K; c += blockDim.x) s.hb[c] = a.hbs[bn * K + c];
    for (int i = threadIdx.x; i < m; i += blockDim.x) s.eta[i] = a.eta[((long long)bi * a.T + t0 + i) * a.H + h];
}

template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS) ttt_bwd_fused_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    const bwd_smem s = bwd_bufs_of(sm, a, TTT_FUSED);
    const int K = a.K, ldr = a.ldr, ldw = a.ldw, ls = a.ls, mb = a.mb, bh = blockIdx.x, bi = bh / a.H, h = bh % a.H;

    bwd_start(a, s, TTT_FUSED, bh);
    for (int n = a.nmb - 1; n >= 0; n--) {
        const int t0 = n * mb, m = min(mb, a.T - t0);
        const bool tc = a.tc && m % 16 == 0, split = pt_split<BF>(tc, a, m);
        bwd_load_local(a, s, bi, h, n, m);
        if (a.dk && n + 1 < a.nmb) put_rows(a.dk, s.xb, 1.f, true, a, bi, h, t0 + mb, min(mb, a.T - t0 - mb));
        rec_sync();
        bwd_inner<KPL, TTT_FUSED + TTT_BF * BF>(tc, a, s, m);
        bwd_zb<KPL, TTT_FUSED + TTT_BF * BF>(tc, a, s, m);
        bwd_out_dw_db(a, s, m, s.dwp, s.dbp, true);
        __syncthreads();
        bwd_dzb_rows<KPL>(a, s, m);
        __syncthreads();
        /* D = dZb gz^T; P = k dW' (into dgz) */
        bwd_d<TTT_FUSED + TTT_BF * BF>(split, tc, a, s, m);
        blk_mm<false, false, TTT_FUSED + TTT_BF * BF>(tc, s.dgz, ldr, s.kb, ldr, s.dW, ldw, m, K, K, 1.f, false);
        __syncthreads();
        const float e = s.eta[m - 1];
        bwd_pg_rows<KPL>(a, s, m, e);
        bwd_mask_d(split, a, s, m);
        __syncthreads();
        /* deta; dgz -= cb^T dZb; xb = -e gz dW'^T - ED^T qs (the dk terms through dW'
         * and the dual form); dq = dZb W^T - ED k (into tq) */
        bwd_deta(a, s, bi, h, t0, m, s.pg);
        blk_mm<true, false, TTT_FUSED + TTT_BF * BF>(tc, s.dgz, ldr, s.cb, ls, s.dzb, ldr, m, K, m, -1.f, true);
        blk_mm<false, true, TTT_FUSED + TTT_BF * BF>(tc, s.xb, ldr, s.gz, ldr, s.dW, ldw, m, K, K, -e, false);
        blk_mm<true, false, TTT_FUSED + TTT_BF * BF>(tc, s.xb, ldr, s.ED, ls, s.qs, ldr, m, K, m, -a.scale, true);
        if (a.dq) {
            blk_mm<false, true, TTT_FUSED + TTT_BF * BF>(tc, s.tq, ldr, s.dzb, ldr, s.W, ldw, m, K, K, 1.f, false);
            blk_mm<false, false, TTT_FUSED + TTT_BF * BF>(tc, s.tq, ldr, s.ED, ls, s.kb, ldr, m, K, m, -1.f, true);
        }
        __syncthreads();
        bwd_dg_rows<KPL>(a, s, bi, h, t0, m);
        if (a.dq) put_rows(a.dq, s.tq, a.scale, true, a, bi, h, t0, m);
        __syncthreads();
        bwd_state_grads<TTT_FUSED + TTT_BF * BF>(tc, a, s, m);
        __syncthreads();
    }
    bwd_finish(a, s, bi, h);
}

/* the local half of mini-batch n of (b, h) = bh */
template <int KPL, bool BF>
__device__ void bwd_local_task(const ttt_args &a, const bwd_smem &s, int bh, int n)
{
    const int K = a.K, ldr = a.ldr, ldw = a.ldw, ls = a.ls;
    const int bi = bh / a.H, h = bh % a.H, t0 = n * a.mb, m = min(a.mb, a.T - t0);
    const bool tc = a.tc && m % 16 == 0, split = pt_split<BF>(tc, a, m);

    bwd_start(a, s, TTT_LOCAL, bh);
    bwd_load_local(a, s, bi, h, n, m);
    rec_sync();
    bwd_inner<KPL, TTT_LOCAL + TTT_BF * BF>(tc, a, s, m);
    /* what the serial half reads (nothing below writes these) */
    put_rows(a.xzr, s.xz, 1.f, false, a, bi, h, t0, m), put_rows(a.yr, s.yb, 1.f, false, a, bi, h, t0, m);
    put_rows(a.gzr, s.gz, 1.f, false, a, bi, h, t0, m);
    const long long bn = bh * (long long)a.nmb + n;
    for (int i = threadIdx.x; i < m; i += blockDim.x) a.szr[((long long)bi * a.T + t0 + i) * a.H + h] = s.sz[i];
    for (int p = threadIdx.x; p < m * m; p += blockDim.x) a.cbr[bn * a.mb * a.mb + p] = s.cb[(p / m) * ls + p % m];
    bwd_zb<KPL, TTT_LOCAL + TTT_BF * BF>(tc, a, s, m);
    /* into row B + b nmb + n of the partials (the serial kernel's are rows 0 .. B-1) */
    const long long po = ((a.B + (long long)bi * a.nmb + n) * a.H + h) * K;
    bwd_out_dw_db(a, s, m, a.dwp + po, a.dbp + po, false);
    __syncthreads();
    bwd_dzb_rows<KPL>(a, s, m);
    __syncthreads();
    put_rows(a.dzr, s.dzb, 1.f, false, a, bi, h, t0, m);
    /* D = dZb gz^T; dq's first term dZb W^T */
    bwd_d<TTT_LOCAL + TTT_BF * BF>(split, tc, a, s, m);
    if (a.dq) blk_mm<false, true, TTT_LOCAL + TTT_BF * BF>(tc, s.tq, ldr, s.dzb, ldr, s.W, ldw, m, K, K, 1.f, false);
    __syncthreads();
    bwd_mask_d(split, a, s, m);
    __syncthreads();
    /* deta but for the serial pg term; dq = dZb W^T - ED k; the dual form's dk term -ED^T qs (into xb) */
    bwd_deta(a, s, bi, h, t0, m, nullptr);
    if (a.dq) blk_mm<false, false, TTT_LOCAL + TTT_BF * BF>(tc, s.tq, ldr, s.ED, ls, s.kb, ldr, m, K, m, -1.f, true);
    if (a.dk)
        blk_mm<true, false, TTT_LOCAL + TTT_BF * BF>(tc, s.xb, ldr, s.ED, ls, s.qs, ldr, m, K, m, -a.scale, false);
    __syncthreads();
    if (a.dq) put_rows(a.dq, s.tq, a.scale, true, a, bi, h, t0, m);
    if (a.dk) put_rows(a.dk, s.xb, 1.f, true, a, bi, h, t0, m);
}

/* the local halves, a block per mini-batch (block index (b h) nmb + n) */
template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS, 1) ttt_bwd_local_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    bwd_local_task<KPL, BF>(a, bwd_bufs_of(sm, a, TTT_LOCAL), blockIdx.x / a.nmb, blockIdx.x % a.nmb);
}

/* the serial halves of (b, h) = bh, mini-batches in reverse; with ready,
 * each waits for its local half's flag (ready[bh nmb + n] set) */
template <int KPL, bool BF>
__device__ void bwd_serial_chain(const ttt_args &a, const bwd_smem &s, int bh, int *ready)
{
    const int K = a.K, ldr = a.ldr, ldw = a.ldw, ls = a.ls, mb = a.mb, bi = bh / a.H, h = bh % a.H;

    bwd_start(a, s, TTT_SERIAL, bh);
    for (int n = a.nmb - 1; n >= 0; n--) {
        const int t0 = n * mb, m = min(mb, a.T - t0);
        const bool tc = a.tc && m % 16 == 0;
        const long long g0 = grow(a, bi, h, t0), bn = bh * (long long)a.nmb + n;
        const float e = a.eta[((long long)bi * a.T + t0 + m - 1) * a.H + h];
        ld_state(s.W, ldw, a.Ws + bn * K * K, K);
        ld_rows(s.qs, ldr, a.q, g0, a.H, m, K), ld_rows(s.kb, ldr, a.k, g0, a.H, m, K);
        if (ready) wait_flag(ready + bn);
        ld_rows(s.xz, ldr, a.xzr, g0, a.H, m, K), ld_rows(s.yb, ldr, a.yr, g0, a.H, m, K);
        ld_rows(s.gz, ldr, a.gzr, g0, a.H, m, K), ld_rows(s.dzb, ldr, a.dzr, g0, a.H, m, K);
        if (a.dk && n + 1 < a.nmb) put_rows(a.dk, s.xb, 1.f, true, a, bi, h, t0 + mb, min(mb, a.T - t0 - mb));
        for (int i = threadIdx.x; i < m; i += blockDim.x) s.sz[i] = a.szr[((long long)bi * a.T + t0 + i) * a.H + h];
        for (int p = threadIdx.x; p < m * m; p += blockDim.x) s.cb[(p / m) * ls + p % m] = a.cbr[bn * mb * mb + p];
        rec_sync();
        /* P = k dW' */
        blk_mm<false, false, TTT_SERIAL + TTT_BF * BF>(tc, s.dgz, ldr, s.kb, ldr, s.dW, ldw, m, K, K, 1.f, false);
        __syncthreads();
        bwd_pg_rows<KPL>(a, s, m, e);
        __syncthreads();
        /* deta's pg term; dgz -= cb^T dZb; xb = -e gz dW'^T (the dk term through dW') */
        if (a.deta && threadIdx.x == 0) {
            float x = 0;
            for (int j = 0; j < m; j++) x -= s.pg[j];
            a.deta[((long long)bi * a.T + t0 + m - 1) * a.H + h] += x;
        }
        blk_mm<true, false, TTT_SERIAL + TTT_BF * BF>(tc, s.dgz, ldr, s.cb, ls, s.dzb, ldr, m, K, m, -1.f, true);
        blk_mm<false, true, TTT_SERIAL + TTT_BF * BF>(tc, s.xb, ldr, s.gz, ldr, s.dW, ldw, m, K, K, -e, false);
        __syncthreads();
        bwd_dg_rows<KPL>(a, s, bi, h, t0, m);
        __syncthreads();
        bwd_state_grads<TTT_SERIAL + TTT_BF * BF>(tc, a, s, m);
        __syncthreads();
    }
    bwd_finish(a, s, bi, h);
}

template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS) ttt_bwd_serial_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    bwd_serial_chain<KPL, BF>(a, bwd_bufs_of(sm, a, TTT_SERIAL), blockIdx.x, nullptr);
}

/* Both halves in one cooperative launch, every block resident: blocks 0 ..
 * B H - 1 walk the serial chains while the rest take the local halves from a
 * queue (*next) in the order the chains need them (the last mini-batch of
 * every (b, h) first) and raise each one's flag when its writes are out. The
 * chains wait only for work that resident blocks are doing, so they cannot
 * deadlock; and the local halves run beside the chains instead of before
 * them. */
template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS, 1) ttt_bwd_overlap_kernel(ttt_args a, int *next, int *ready)
{
    extern __shared__ float sm[];
    __shared__ int task;
    const int BH = a.B * a.H;
    if ((int)blockIdx.x < BH) return bwd_serial_chain<KPL, BF>(a, bwd_bufs_of(sm, a, TTT_SERIAL), blockIdx.x, ready);
    const bwd_smem s = bwd_bufs_of(sm, a, TTT_LOCAL);
    for (;;) {
        if (threadIdx.x == 0) task = atomicAdd(next, 1);
        __syncthreads();
        const int t = task;
        if (t >= BH * a.nmb) return;
        const int bh = t % BH, n = a.nmb - 1 - t / BH;
        bwd_local_task<KPL, BF>(a, s, bh, n);
        __threadfence();   /* this thread's writes are visible to the GPU before the flag */
        __syncthreads();
        if (threadIdx.x == 0) atomicExch(ready + (long long)bh * a.nmb + n, 1);
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
    const int limit = pr_cuda_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    PR_CHECK(bytes <= (size_t)limit, "ttt_linear: K = %d with mini_batch = %d needs %zu bytes of shared "
             "memory; the device has %d per block (use a smaller mini_batch)", a.K, a.mb, bytes, limit);
    pr_cuda_smem_prep(kernel, bytes);
}


/* The backward's plan (see "backward" above): split where the B H fused
 * blocks would fill under 60% of the SMs, overlapped (one cooperative
 * launch) where the device allows it: timed on the H200 (132 SMs, K = 128,
 * mini-batch 16; ops/recurrence/NOTES.md has the times), the crossover lies
 * near 0.6 x the SMs. pr_ttt_opts.bwd forces fused, split or overlapped
 * (tests, comparisons). */
enum { PLAN_FUSED, PLAN_SPLIT, PLAN_OVERLAP };
static const char *const plan_names[3] = {"fused", "split", "split overlapped"};
struct ttt_plan {
    int kind, n_sm;
    bool forced;
};
static ttt_plan plan_bwd(int B, int H, int bwd)
{
    ttt_plan p = {};
    p.n_sm = pr_cuda_attr(cudaDevAttrMultiProcessorCount);
    const int coop = pr_cuda_attr(cudaDevAttrCooperativeLaunch);
    PR_CHECK(bwd >= PR_TTT_BWD_PLANNED && bwd <= PR_TTT_BWD_OVERLAP,
             "ttt_linear: bwd must be PR_TTT_BWD_PLANNED, _FUSED, _SPLIT or _OVERLAP, got %d", bwd);
    p.forced = bwd != PR_TTT_BWD_PLANNED;
    const long long bh = (long long)B * H;
    if (p.forced) p.kind = bwd - PR_TTT_BWD_FUSED; /* PLAN_FUSED, PLAN_SPLIT, PLAN_OVERLAP in order */
    else p.kind = bh * 5 >= 3LL * p.n_sm ? PLAN_FUSED : coop ? PLAN_OVERLAP : PLAN_SPLIT;
    PR_CHECK(p.kind != PLAN_OVERLAP || (coop && bh < p.n_sm),
             "ttt_linear: the overlapped backward needs cooperative launch and B H (%lld) below the SM count (%d)",
             bh, p.n_sm);
    return p;
}

extern "C" void pr_ttt_linear_cuda_plan(int B, int T, int H, int mini_batch, pr_ttt_bwd bwd, char *line, size_t n)
{
    const ttt_plan p = plan_bwd(B, H, bwd);
    const long long bh = (long long)B * H, nmb = (T + mini_batch - 1) / mini_batch;
    const char *why = p.forced ? "forced" : p.kind != PLAN_FUSED ? "B H < 0.6 x SMs" : "B H >= 0.6 x SMs";
    if (p.kind == PLAN_FUSED) snprintf(line, n, "backward fused (%s, %d SMs): %lld blocks (one a (b, h))", why, p.n_sm, bh);
    else
        snprintf(line, n, "backward %s (%s, %d SMs): %lld local halves (one a mini-batch), %lld serial chains",
                 plan_names[p.kind], why, p.n_sm, bh * nmb, bh);
}

/* a kernel whose first B H blocks are chains and the rest workers, as one
 * cooperative launch of as many blocks as are resident at once (cooperative
 * launch refuses more, and promises that every block runs: a block that
 * waits on another cannot hold the SM that one needs). flags: the queue
 * head, then a zeroed flag per mini-batch. */
static void launch_coop(void (*kernel)(ttt_args, int *, int *), size_t bytes, const ttt_args &a, cudaStream_t st,
                        int *flags)
{
    ttt_smem((const void *)kernel, bytes, a);
    int per_sm = 0;
    PR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, TTT_THREADS, bytes));
    const long long bh = (long long)a.B * a.H, blocks = (long long)per_sm * pr_cuda_attr(cudaDevAttrMultiProcessorCount);
    PR_CHECK(blocks > bh, "ttt_linear: the split plans need more than B H = %lld resident blocks, the device holds %lld",
             bh, blocks);
    ttt_args arg = a;
    int *next = flags, *ready = flags + 1;
    void *args[3] = {&arg, &next, &ready};
    PR_CUDA_CHECK(cudaLaunchCooperativeKernel((const void *)kernel, (unsigned)blocks, TTT_THREADS, args, bytes, st));
}

/* the queue head and a flag per mini-batch, zeroed, in the step arena */
static int *coop_flags(pr_ctx *ctx, cudaStream_t st, const ttt_args &a)
{
    const int64_t nf = 1 + (int64_t)a.B * a.H * a.nmb;
    int *flags = (int *)pr_empty(ctx->step, PR_F32, PR_CUDA, 1, &nf)->data;
    PR_CUDA_CHECK(cudaMemsetAsync(flags, 0, (size_t)nf * sizeof(int), st));
    return flags;
}

template <int KPL, bool BF>
static void launch_bwd(const ttt_args &a, cudaStream_t st, int plan, int *flags)
{
    auto bytes_of = [&](int kind) { return bwd_bufs_of<size_t>(0, a, kind).floats * sizeof(float); };
    auto launch = [&](void (*kernel)(ttt_args), int kind, long long blocks) {
        ttt_smem((const void *)kernel, bytes_of(kind), a);
        kernel<<<(unsigned)blocks, TTT_THREADS, bytes_of(kind), st>>>(a);
        PR_CUDA_LAUNCH_CHECK();
    };
    const long long bh = (long long)a.B * a.H;
    if (plan == PLAN_FUSED) return launch(ttt_bwd_fused_kernel<KPL, BF>, TTT_FUSED, bh);
    if (plan == PLAN_SPLIT) {
        launch(ttt_bwd_local_kernel<KPL, BF>, TTT_LOCAL, bh * a.nmb);
        return launch(ttt_bwd_serial_kernel<KPL, BF>, TTT_SERIAL, bh);
    }
    launch_coop(ttt_bwd_overlap_kernel<KPL, BF>, std::max(bytes_of(TTT_LOCAL), bytes_of(TTT_SERIAL)), a, st, flags);
}

template <int KPL, bool BF>
static void launch_fwd(const ttt_args &a, cudaStream_t st, int *flags)
{
    const size_t bytes = fwd_bufs_of<size_t>(0, a).floats * sizeof(float);
    if (flags) return launch_coop(ttt_fwd_split_kernel<KPL, BF>, bytes, a, st, flags);
    ttt_smem((const void *)ttt_fwd_kernel<KPL, BF>, bytes, a);
    ttt_fwd_kernel<KPL, BF><<<a.B * a.H, TTT_THREADS, bytes, st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
}

/* the kernels' BF instances (bf16 mma.sync products): bf16 data with
 * tensor cores on, for K > 64 (the kernels of 8 keys a lane, the benchmark's
 * K = 128): one more instance of each kernel instead of three; smaller K
 * keeps TF32 on bf16 data. Not a field of ttt_args: a wider argument block
 * moved the f32 kernels' parameters and cost them 0.1 ms at size 1. */
static bool ttt_bf(const ttt_args &a, const pr_node *n) { return a.tc && a.K > 64 && n->in[0]->dtype == PR_BF16; }

extern "C" void pr_ttt_linear_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    cudaStream_t st = pr_cuda_stream(ctx);
    ttt_args a = ttt_args_of(ctx, st, n);
    a.o = ttk_f32_out(ctx, n->out[0]), a.ht = (float *)n->out[1]->data, a.hbt = (float *)n->out[2]->data;
    if (n->n_saved == 2) a.Ws = (float *)n->saved[0]->data, a.hbs = (float *)n->saved[1]->data;
    /* split where the backward overlaps, and the states are saved anyway */
    int *flags = a.Ws && plan_bwd(a.B, a.H, (int)n->iarg[1]).kind == PLAN_OVERLAP ? coop_flags(ctx, st, a) : nullptr;
    if (ttt_bf(a, n)) launch_fwd<8, true>(a, st, flags);
    else if (a.K <= 32) launch_fwd<2, false>(a, st, flags);
    else if (a.K <= 64) launch_fwd<4, false>(a, st, flags);
    else launch_fwd<8, false>(a, st, flags);
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
    /* the partials: the (b, h) blocks' rows, then for the split plans the local halves' */
    const int plan = plan_bwd(a.B, a.H, (int)n->iarg[1]).kind;
    const int np = a.B * (plan != PLAN_FUSED ? 1 + a.nmb : 1);
    a.dwp = ttk_partials(ctx, np, a.H, a.K), a.dbp = ttk_partials(ctx, np, a.H, a.K);
    int *flags = nullptr;   /* the overlapped plan's queue head and per-mini-batch flags, zeroed */
    if (plan != PLAN_FUSED) {
        const int64_t rows[4] = {a.B, a.T, a.H, a.K}, cbs[2] = {(int64_t)a.B * a.H * a.nmb, (int64_t)a.mb * a.mb};
        float **bufs[4] = {&a.xzr, &a.yr, &a.gzr, &a.dzr};
        for (float **b : bufs) *b = (float *)pr_empty(ctx->step, PR_F32, PR_CUDA, 4, rows)->data;
        a.szr = (float *)pr_empty(ctx->step, PR_F32, PR_CUDA, 3, rows)->data;
        a.cbr = (float *)pr_empty(ctx->step, PR_F32, PR_CUDA, 2, cbs)->data;
    }
    if (plan == PLAN_OVERLAP) flags = coop_flags(ctx, st, a);
    if (ttt_bf(a, n)) launch_bwd<8, true>(a, st, plan, flags);
    else if (a.K <= 32) launch_bwd<2, false>(a, st, plan, flags);
    else if (a.K <= 64) launch_bwd<4, false>(a, st, plan, flags);
    else launch_bwd<8, false>(a, st, plan, flags);
    ttk_add_dw_db(st, n, a.dwp, a.dbp, np, a.H, a.K);
    ttk_f32_done(st, gq, a.dq, true), ttk_f32_done(st, gk, a.dk, true), ttk_f32_done(st, gv, a.dv, true);
    ttk_f32_done(st, geta, a.deta, true);
}
