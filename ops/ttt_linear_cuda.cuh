/* ops/ttt_linear_cuda.cuh: what TTT-Linear's CUDA files share (internal to
 * ops/ttt_linear.cu, the forward and the plan, and ops/ttt_linear_bwd.cu,
 * the backward): the kernels' arguments, the block products and row
 * phases, the pieces both directions use, and the launchers' helpers. The
 * method is described at the top of ops/ttt_linear.cu.
 */
#ifndef PR_TTT_LINEAR_CUDA_CUH
#define PR_TTT_LINEAR_CUDA_CUH

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
static __device__ void st_state(float *dst, const float *W, int ldw, int K)
{
    if ((K & 3) == 0) return rec_st_tile(dst, K, K, K, W, ldw, 1.f, false, true);
    REC_FOR2D(K, K, r, c) dst[r * K + c] = W[r * ldw + c];
}

/* the mini-batch's rows [m, K] of a [B,T,H,K] input from element g0 into
 * shared memory (row stride ldr): cp.async when K % 4 == 0 (complete at the
 * next rec_sync), else a load and a store per element */
static __device__ void ld_rows(float *dst, int ldr, const float *src, long long g0, int H, int m, int K)
{
    if ((K & 3) == 0) return rec_ld_tile(dst, ldr, m, K, src + g0, (long long)H * K, m, K, true);
    for (int i = 0; i < m; i++)
        for (int c = threadIdx.x; c < K; c += blockDim.x) dst[i * ldr + c] = src[g0 + (long long)i * H * K + c];
}

/* W (row stride ldw) = a saved K x K state: cp.async when K % 4 == 0 (complete
 * at the next rec_sync), else a load and a store per element */
static __device__ void ld_state(float *W, int ldw, const float *src, int K)
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
static __device__ void put_rows(float *g, const float *X, float alpha, bool acc, const ttt_args &a, int bi, int h, int t0,
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
static __device__ void wait_flag(int *flag)
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

/* ---- launchers ----------------------------------------------------------------- */

static inline ttt_args ttt_args_of(pr_ctx *ctx, cudaStream_t st, const pr_node *n)
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
static inline void ttt_smem(const void *kernel, size_t bytes, const ttt_args &a)
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
struct ttt_plan {
    int kind, n_sm;
    bool forced;
};
static inline ttt_plan plan_bwd(int B, int H, int bwd)
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

/* a kernel whose first B H blocks are chains and the rest workers, as one
 * cooperative launch of as many blocks as are resident at once (cooperative
 * launch refuses more, and promises that every block runs: a block that
 * waits on another cannot hold the SM that one needs). flags: the queue
 * head, then a zeroed flag per mini-batch. */
static inline void launch_coop(void (*kernel)(ttt_args, int *, int *), size_t bytes, const ttt_args &a, cudaStream_t st,
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
static inline int *coop_flags(pr_ctx *ctx, cudaStream_t st, const ttt_args &a)
{
    const int64_t nf = 1 + (int64_t)a.B * a.H * a.nmb;
    int *flags = (int *)pr_empty(ctx->step, PR_F32, PR_CUDA, 1, &nf)->data;
    PR_CUDA_CHECK(cudaMemsetAsync(flags, 0, (size_t)nf * sizeof(int), st));
    return flags;
}

/* the kernels' BF instances (bf16 mma.sync products): bf16 data with
 * tensor cores on, for K > 64 (the kernels of 8 keys a lane, the benchmark's
 * K = 128): one more instance of each kernel instead of three; smaller K
 * keeps TF32 on bf16 data. Not a field of ttt_args: a wider argument block
 * moved the f32 kernels' parameters and cost them 0.1 ms at size 1. */
static inline bool ttt_bf(const ttt_args &a, const pr_node *n)
{
    return a.tc && a.K > 64 && n->in[0]->dtype == PR_BF16;
}

#endif
