/* ops/ttt_kit.cuh: device helpers that the CUDA paths of ttt_mlp and titans
 * share (ttt_linear.cu, with its own shared-memory row kernels, uses the
 * warp sum and the host helpers at the end). ttt_mlp and titans run one thread block of TTK_THREADS threads per (batch, head),
 * sequential over mini-batches (chunks), parallel inside one; the state and
 * the mini-batch's rows live in a per-block slice of a global workspace
 * (L2-resident at these sizes). Row operations (LayerNorms, dot products) use
 * a warp per row with lanes along the row; block-wide loops give a thread per
 * output element. Every sum has a fixed order (no float atomics), so two runs
 * give the same bits. The math is the CPU kits' (ops/ttt_kit.h). */
#ifndef PR_TTT_KIT_CUH
#define PR_TTT_KIT_CUH

#include "ops/cuda/ops_cuda.h"

#define TTK_THREADS 256
#define TTK_FOR(i, n) for (int i = threadIdx.x; i < (n); i += blockDim.x)
#define TTK_FOR_ROWS(j, m) for (int j = threadIdx.x >> 5; j < (m); j += blockDim.x >> 5)
#define TTK_FOR_LANE(c, n) for (int c = threadIdx.x & 31; c < (n); c += 32)

__device__ __forceinline__ float ttk_warp_sum(float x) { return pr_group_reduce<32>(x, pr_op_sum()); }
/* the whole block (TTK_THREADS threads, all calling) */
__device__ __forceinline__ float ttk_block_sum(float x) { return pr_group_reduce<TTK_THREADS>(x, pr_op_sum()); }

__device__ __forceinline__ float ttk_dot(const float *a, const float *b, int n)
{
    float s = 0;
    TTK_FOR_LANE(c, n) s += a[c] * b[c];
    return ttk_warp_sum(s);
}

__device__ __forceinline__ float ttk_sum(const float *a, int n)
{
    float s = 0;
    TTK_FOR_LANE(c, n) s += a[c];
    return ttk_warp_sum(s);
}

/* xh = (x - mean) / s, s = sqrt(var_biased + eps) (xh may be x); returns s */
__device__ __forceinline__ float ttk_ln(const float *x, float *xh, int K, float eps)
{
    const float mu = ttk_sum(x, K) / K;
    float var = 0;
    TTK_FOR_LANE(c, K) var += (x[c] - mu) * (x[c] - mu);
    const float s = sqrtf(ttk_warp_sum(var) / K + eps);
    TTK_FOR_LANE(c, K) xh[c] = (x[c] - mu) / s;
    return s;
}

/* dx = (g - mean g - xh mean(g xh)) / s (dx may be g) */
__device__ __forceinline__ void ttk_ln_back(const float *xh, float s, const float *g, int K, float *dx)
{
    const float mg = ttk_sum(g, K) / K, mgx = ttk_dot(g, xh, K) / K;
    TTK_FOR_LANE(c, K) dx[c] = (g[c] - mg - xh[c] * mgx) / s;
}

/* the inner gradient of one row: z -> xz (may be z), scale *sz, the residual
 * G = w (w xz + b - v + k) and gz = LNback(xz, sz, G) */
__device__ __forceinline__ void ttk_inner_grad(const float *z, const float *w, const float *b, const float *v,
                                               const float *k, int K, float eps, float *xz, float *sz, float *G,
                                               float *gz)
{
    const float s = ttk_ln(z, xz, K, eps);
    TTK_FOR_LANE(c, K) G[c] = w[c] * (w[c] * xz[c] + b[c] - v[c] + k[c]);
    __syncwarp();
    ttk_ln_back(xz, s, G, K, gz);
    if ((threadIdx.x & 31) == 0) *sz = s;
}

/* its backward (ops/ttt_kit.h, kit_inner_grad_back): dG and dz rows; dv (a
 * global row, -= w dG) and dk (+= w dG) when not NULL. The dw, db terms are
 * column sums over rows of dG, left to the caller. */
__device__ __forceinline__ void ttk_inner_grad_back(const float *xz, float sz, const float *G, const float *gz,
                                                    const float *dgz, const float *w, int K, float *dG, float *dz,
                                                    float *dv, float *dk)
{
    const float mgx = ttk_dot(G, xz, K) / K, mdx = ttk_dot(dgz, xz, K) / K, dsz = -ttk_dot(dgz, gz, K) / sz;
    ttk_ln_back(xz, sz, dgz, K, dG);
    __syncwarp();
    TTK_FOR_LANE(c, K) dz[c] = w[c] * w[c] * dG[c] - (dgz[c] * mgx + G[c] * mdx) / sz;
    __syncwarp();
    ttk_ln_back(xz, sz, dz, K, dz);
    TTK_FOR_LANE(c, K) {
        dz[c] += dsz * xz[c] / K;
        if (dv) dv[c] -= w[c] * dG[c];
        if (dk) dk[c] += w[c] * dG[c];
    }
}

/* the inner LayerNorm's dw, db over the m rows [m,K] of a mini-batch (the
 * terms dw += dG (2 w xz + b - v + k), db += w dG of kit_inner_grad_back),
 * added to the block's partials dwp, dbp [K]; a thread per column */
__device__ __forceinline__ void ttk_inner_dw_db(const float *dG, const float *xz, const float *v, const float *k,
                                                const float *w, const float *b, int m, int K, float *dwp, float *dbp)
{
    TTK_FOR(c, K) {
        float sw = 0, sb = 0;
        for (int j = 0; j < m; j++) {
            const float g = dG[j * K + c], x = xz[j * K + c];
            sw += g * (2 * w[c] * x + b[c] - v[j * K + c] + k[j * K + c]);
            sb += w[c] * g;
        }
        dwp[c] += sw, dbp[c] += sb;
    }
}

/* gelu_tanh and its first two derivatives (ops/ttt_kit.h, kit_gelu) */
__device__ __forceinline__ float ttk_gelu(float x, float *d1, float *d2)
{
    const float c = 0.7978845608028654f, a = 0.044715f;
    const float t = tanhf(c * (x + a * x * x * x)), du = c * (1 + 3 * a * x * x), ddu = 6 * c * a * x;
    if (d1) *d1 = 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * du;
    if (d2) *d2 = (1 - t * t) * (du + 0.5f * x * (ddu - 2 * t * du * du));
    return 0.5f * x * (1 + t);
}

/* dynamic workspace: a per-block slice of floats, handed out in order */
struct ttk_alloc {
    float *p;
    long long used;
    __host__ __device__ float *take(long long n)
    {
        float *r = p ? p + used : nullptr;
        used += (n + 3) / 4 * 4; /* keep every buffer 16-byte aligned */
        return r;
    }
};

/* element (b, c) of a [B, C] per-block partial, for the column sum over b */
struct ttk_part {
    const float *p;
    long long C;
    __device__ double operator()(long long r, long long c) const { return p[r * C + c]; }
};

static inline const float *ttk_in(const pr_tensor *t) { return t ? (const float *)t->data : nullptr; }
static inline float *ttk_grad(const pr_node *n, int i)
{
    pr_tensor *g = pr_in_grad(n, i);
    return g ? (float *)g->data : nullptr;
}

/* bf16 data (q, k, v, eta and o of the TTT ops) is staged: the kernels run
 * in f32 on copies, and what they write goes to f32 scratch that is rounded
 * into the bf16 tensor once. t's data as f32: its own (NULL stays NULL), or
 * for bf16 a copy in the step arena. */
static inline const float *ttk_f32_in(pr_ctx *ctx, cudaStream_t st, const pr_tensor *t)
{
    if (!t || t->dtype == PR_F32) return ttk_in(t);
    PR_CHECK(t->dtype == PR_BF16, "ttk_f32_in: f32 or bf16 expected, got %s", pr_dtype_name(t->dtype));
    pr_tensor *f = pr_empty(ctx->step, PR_F32, PR_CUDA, t->ndim, t->shape);
    pr_cuda_cast(st, f->data, PR_F32, t->data, PR_BF16, t->numel, false);
    return (const float *)f->data;
}
/* where the kernels write (or add) what belongs in t: t itself when f32 (or
 * NULL), else zeroed f32 scratch that ttk_f32_done stores (acc: adds) in t */
static inline float *ttk_f32_out(pr_ctx *ctx, pr_tensor *t)
{
    if (!t || t->dtype == PR_F32) return t ? (float *)t->data : nullptr;
    return (float *)pr_zeros(ctx->step, PR_F32, PR_CUDA, t->ndim, t->shape)->data;
}
static inline void ttk_f32_done(cudaStream_t st, pr_tensor *t, const float *f, bool acc)
{
    if (t && t->dtype != PR_F32) pr_cuda_cast(st, t->data, t->dtype, f, PR_F32, t->numel, acc);
}

/* a [B,H,K] workspace for the per-(b,h) partial sums of dw or db */
static inline float *ttk_partials(pr_ctx *ctx, int B, int H, int K)
{
    const int64_t shape[3] = {B, H, K};
    return (float *)pr_empty(ctx->step, PR_F32, PR_CUDA, 3, shape)->data;
}

/* adds the sums over b of the partials dwp, dbp [B,H*K] to the grads of the
 * node's inputs 3 and 4 (w and b in every TTT op) where they take one */
static inline void ttk_add_dw_db(cudaStream_t st, const pr_node *n, const float *dwp, const float *dbp, int B, int H,
                                 int K)
{
    const long long HK = (long long)H * K;
    float *dw = ttk_grad(n, 3), *db = ttk_grad(n, 4);
    if (dw) pr_cuda_colsum_add(st, ttk_part{dwp, HK}, B, HK, dw, 1.0);
    if (db) pr_cuda_colsum_add(st, ttk_part{dbp, HK}, B, HK, db, 1.0);
}

#endif
