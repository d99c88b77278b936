/* ops/norm.cu: CUDA layernorm, rmsnorm, rmsnorm_gated and l2norm (f32).
 *
 * A warp (D <= 1024) or a block per row; the row stays in registers between
 * the statistics pass(es) and the write pass, so x is read once and y written
 * once. Node layout as ops/norm.c: in = {x, w, b} / {x, w} / {x, z, w} / {x},
 * saved = per-row {mean, rstd} (layernorm) or {rstd}, farg[0] = eps; w, b may
 * be NULL (1, 0). The derivations of the backwards are beside the CPU code
 * in ops/norm.c; in short, with xh = x-hat, dxh = g w:
 *   layernorm:     dx = rstd (dxh - mean(dxh) - xh mean(dxh xh))
 *   rmsnorm:       dx = rstd (dxh - xh mean(dxh xh))
 *   rmsnorm_gated: the same with g' = g silu(z); dz = g xh w silu'(z)
 *   l2norm:        dx = rstd (g - y sum(g y))
 * dw and db are column sums over the rows, in a fixed order (pr_cuda_colsum_add).
 */
#include <math.h>

#include "ops/ops.h"
#include "tensor/cuda.h"

#define ROW_KERNEL(G) __global__ void PR_ROW_BOUNDS(G)

__device__ __forceinline__ float sigmoidf_(float z)
{
    if (z >= 0.0f) return 1.0f / (1.0f + expf(-z));
    float e = expf(z);
    return e / (1.0f + e);
}

/* a [D] parameter's chunk j, or `dflt` when absent */
__device__ __forceinline__ pr_f4 param4(const float *p, long long j, long long D, bool vec, float dflt)
{
    if (p) return pr_ld4(p, j, D, vec);
    pr_f4 r = {{dflt, dflt, dflt, dflt}};
    return r;
}

/* launch a row kernel for R rows of D over the group size D calls for */
#define LAUNCH_ROWS(ctx, R, D, kernel, ...)                                                             \
    do {                                                                                                \
        cudaStream_t s_ = pr_cuda_stream(ctx);                                                          \
        pr_cuda_row_dispatch(D, [&](auto g_) {                                                          \
            constexpr int G = decltype(g_)::G, S = decltype(g_)::S;                                     \
            kernel<G, S><<<pr_row_blocks<G>(R), pr_row_threads<G>(), 0, s_>>>(__VA_ARGS__);             \
        });                                                                                             \
        PR_CUDA_LAUNCH_CHECK();                                                                         \
    } while (0)

static bool all_aligned(std::initializer_list<const void *> ps)
{
    for (const void *p : ps)
        if (p && !pr_aligned16(p)) return false;
    return true;
}

/* ---- layernorm -------------------------------------------------------------------- */

/* a forward's per-row statistics, NULL when the node saves none (not recorded) */
static float *saved_or_null(const pr_node *n, int i) { return i < n->n_saved ? (float *)n->saved[i]->data : NULL; }

template <int G, int S>
ROW_KERNEL(G) layernorm_forward_kernel(const float *x, const float *w, const float *b, float *y, float *mean_out,
                                       float *rstd_out, long long R, long long D, float eps, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const float *xr = x + r * D;
    pr_f4 xs[S];
    pr_row_load<G, S>(xs, xr, D, vec, lane);
    float sum = 0.0f;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++) sum += v.v[k]; /* padding is 0 */
    });
    float mean = pr_group_reduce<G>(sum, pr_op_sum()) / (float)D, var = 0.0f;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j + k < D) var += (v.v[k] - mean) * (v.v[k] - mean);
    });
    var = pr_group_reduce<G>(var, pr_op_sum());
    float rstd = 1.0f / sqrtf(var / (float)D + eps);
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), wv = param4(w, j, D, vec, 1.0f), bv = param4(b, j, D, vec, 0.0f);
#pragma unroll
        for (int k = 0; k < 4; k++) v.v[k] = (v.v[k] - mean) * rstd * wv.v[k] + bv.v[k];
        pr_st4(y + r * D, j, D, vec, v);
    });
    if (lane == 0 && rstd_out) mean_out[r] = mean, rstd_out[r] = rstd;   /* NULL: not recorded */
}

template <int G, int S>
ROW_KERNEL(G) layernorm_backward_kernel(const float *x, const float *w, const float *g, const float *mean_in,
                                        const float *rstd_in, float *dx, long long R, long long D, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const float *xr = x + r * D, *gr = g + r * D;
    float mean = mean_in[r], rstd = rstd_in[r];
    pr_f4 xs[S], gs[S];
    pr_row_load<G, S>(xs, xr, D, vec, lane);
    pr_row_load<G, S>(gs, gr, D, vec, lane);
    float m1 = 0.0f, m2 = 0.0f; /* sums of dxh and dxh xh */
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), gv = pr_row_get(gs, gr, j, D, vec, i), wv = param4(w, j, D, vec, 1.0f);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float dxh = gv.v[k] * wv.v[k];
            m1 += dxh;
            m2 += dxh * (v.v[k] - mean) * rstd;
        }
    });
    m1 = pr_group_reduce<G>(m1, pr_op_sum()) / (float)D;
    m2 = pr_group_reduce<G>(m2, pr_op_sum()) / (float)D;
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), gv = pr_row_get(gs, gr, j, D, vec, i), wv = param4(w, j, D, vec, 1.0f);
        pr_f4 acc = pr_ld4(dx + r * D, j, D, vec);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float xh = (v.v[k] - mean) * rstd;
            acc.v[k] += rstd * (gv.v[k] * wv.v[k] - m1 - xh * m2);
        }
        pr_st4(dx + r * D, j, D, vec, acc);
    });
}

/* dw: sum over rows of g xh; db: sum of g */
struct ln_dw {
    const float *x, *g, *mean, *rstd;
    long long D;
    __device__ __forceinline__ double operator()(long long r, long long c) const
    {
        return g[r * D + c] * ((x[r * D + c] - mean[r]) * rstd[r]);
    }
};
struct read_rc {
    const float *p;
    long long D;
    __device__ __forceinline__ double operator()(long long r, long long c) const { return p[r * D + c]; }
};

extern "C" void pr_layernorm_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_check_f32(n);
    const pr_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const float *pw = w ? (const float *)w->data : NULL, *pb = b ? (const float *)b->data : NULL;
    bool vec = D % 4 == 0 && all_aligned({x->data, pw, pb, n->out[0]->data});
    LAUNCH_ROWS(ctx, R, D, layernorm_forward_kernel, (const float *)x->data, pw, pb, (float *)n->out[0]->data,
                saved_or_null(n, 0), saved_or_null(n, 1), R, D, (float)n->farg[0], vec);
}

extern "C" void pr_layernorm_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *w = n->in[1];
    pr_tensor *gx = pr_in_grad(n, 0), *gw = pr_in_grad(n, 1), *gb = pr_in_grad(n, 2);
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const float *px = (const float *)x->data, *pg = (const float *)n->out[0]->grad->data;
    const float *mean = (const float *)n->saved[0]->data, *rstd = (const float *)n->saved[1]->data;
    const float *pw = w ? (const float *)w->data : NULL;
    if (gx) {
        bool vec = D % 4 == 0 && all_aligned({px, pw, pg, gx->data});
        LAUNCH_ROWS(ctx, R, D, layernorm_backward_kernel, px, pw, pg, mean, rstd, (float *)gx->data, R, D, vec);
    }
    cudaStream_t s = pr_cuda_stream(ctx);
    if (gw) pr_cuda_colsum_add(s, ln_dw{px, pg, mean, rstd, D}, R, D, (float *)gw->data, 1.0);
    if (gb) pr_cuda_colsum_add(s, read_rc{pg, D}, R, D, (float *)gb->data, 1.0);
}

/* ---- rmsnorm and rmsnorm_gated (z = NULL: no gate) ------------------------------------- */

template <int G, int S>
ROW_KERNEL(G) rms_forward_kernel(const float *x, const float *z, const float *w, float *y, float *rstd_out, long long R,
                                 long long D, float eps, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const float *xr = x + r * D;
    pr_f4 xs[S];
    pr_row_load<G, S>(xs, xr, D, vec, lane);
    float rstd = 1.0f / sqrtf(pr_row_sumsq<G, S>(xs, xr, D, vec, lane) / (float)D + eps);
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), wv = param4(w, j, D, vec, 1.0f);
        pr_f4 zv = z ? pr_ld4(z + r * D, j, D, vec) : pr_f4{{0, 0, 0, 0}};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v.v[k] = v.v[k] * rstd * wv.v[k];
            if (z) v.v[k] *= zv.v[k] * sigmoidf_(zv.v[k]);
        }
        pr_st4(y + r * D, j, D, vec, v);
    });
    if (lane == 0 && rstd_out) rstd_out[r] = rstd;   /* NULL: not recorded */
}

/* x and g load first (both in flight at once); pass 1 turns g into
 * g' = g silu(z) in its registers and writes dz; pass 2 writes dx */
template <int G, int S>
ROW_KERNEL(G) rms_backward_kernel(const float *x, const float *z, const float *w, const float *g, const float *rstd_in,
                                  float *dx, float *dz, long long R, long long D, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const float *xr = x + r * D, *gr = g + r * D;
    float rstd = rstd_in[r];
    pr_f4 xs[S], gs[S];
    pr_row_load<G, S>(xs, xr, D, vec, lane);
    pr_row_load<G, S>(gs, gr, D, vec, lane);
    float m2 = 0.0f; /* sum of g' w xh */
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), gv = pr_row_get(gs, gr, j, D, vec, i);
        pr_f4 wv = param4(w, j, D, vec, 1.0f);
        if (z) {
            pr_f4 zv = pr_ld4(z + r * D, j, D, vec);
            pr_f4 dzv = dz && ok ? pr_ld4(dz + r * D, j, D, vec) : pr_f4{{0, 0, 0, 0}};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float sg = sigmoidf_(zv.v[k]);
                dzv.v[k] += gv.v[k] * v.v[k] * rstd * wv.v[k] * sg * (1.0f + zv.v[k] * (1.0f - sg));
                gv.v[k] *= zv.v[k] * sg;
            }
            if (dz && ok) pr_st4(dz + r * D, j, D, vec, dzv);
        }
        if (i >= 0) gs[i] = gv;
#pragma unroll
        for (int k = 0; k < 4; k++) m2 += gv.v[k] * wv.v[k] * v.v[k] * rstd;
    });
    m2 = pr_group_reduce<G>(m2, pr_op_sum()) / (float)D;
    if (!ok || !dx) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), wv = param4(w, j, D, vec, 1.0f), gv;
        if (i >= 0) {
            gv = gs[i];
        } else { /* past the slots: recompute g' */
            gv = pr_ld4(gr, j, D, vec);
            if (z) {
                pr_f4 zv = pr_ld4(z + r * D, j, D, vec);
#pragma unroll
                for (int k = 0; k < 4; k++) gv.v[k] *= zv.v[k] * sigmoidf_(zv.v[k]);
            }
        }
        pr_f4 acc = pr_ld4(dx + r * D, j, D, vec);
#pragma unroll
        for (int k = 0; k < 4; k++) acc.v[k] += rstd * (gv.v[k] * wv.v[k] - v.v[k] * rstd * m2);
        pr_st4(dx + r * D, j, D, vec, acc);
    });
}

/* dw: sum over rows of g' xh */
struct rms_dw {
    const float *x, *z, *g, *rstd;
    long long D;
    __device__ __forceinline__ double operator()(long long r, long long c) const
    {
        long long o = r * D + c;
        float gp = g[o];
        if (z) gp *= z[o] * sigmoidf_(z[o]);
        return gp * (x[o] * rstd[r]);
    }
};

static void rms_forward(pr_ctx *ctx, pr_node *n, const pr_tensor *x, const pr_tensor *z, const pr_tensor *w)
{
    pr_cuda_check_f32(n);
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const float *pz = z ? (const float *)z->data : NULL, *pw = w ? (const float *)w->data : NULL;
    bool vec = D % 4 == 0 && all_aligned({x->data, pz, pw, n->out[0]->data});
    LAUNCH_ROWS(ctx, R, D, rms_forward_kernel, (const float *)x->data, pz, pw, (float *)n->out[0]->data,
                saved_or_null(n, 0), R, D, (float)n->farg[0], vec);
}

static void rms_backward(pr_ctx *ctx, pr_node *n, const pr_tensor *x, const pr_tensor *z, const pr_tensor *w,
                         pr_tensor *gx, pr_tensor *gz, pr_tensor *gw)
{
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const float *px = (const float *)x->data, *pz = z ? (const float *)z->data : NULL;
    const float *pw = w ? (const float *)w->data : NULL, *pg = (const float *)n->out[0]->grad->data;
    const float *rstd = (const float *)n->saved[0]->data;
    float *dx = gx ? (float *)gx->data : NULL, *dz = gz ? (float *)gz->data : NULL;
    if (dx || dz) {
        bool vec = D % 4 == 0 && all_aligned({px, pz, pw, pg, dx, dz});
        LAUNCH_ROWS(ctx, R, D, rms_backward_kernel, px, pz, pw, pg, rstd, dx, dz, R, D, vec);
    }
    if (gw) pr_cuda_colsum_add(pr_cuda_stream(ctx), rms_dw{px, pz, pg, rstd, D}, R, D, (float *)gw->data, 1.0);
}

extern "C" void pr_rmsnorm_forward_cuda(pr_ctx *ctx, pr_node *n) { rms_forward(ctx, n, n->in[0], NULL, n->in[1]); }
extern "C" void pr_rmsnorm_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    rms_backward(ctx, n, n->in[0], NULL, n->in[1], pr_in_grad(n, 0), NULL, pr_in_grad(n, 1));
}
extern "C" void pr_rmsnorm_gated_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    rms_forward(ctx, n, n->in[0], n->in[1], n->in[2]);
}
extern "C" void pr_rmsnorm_gated_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    rms_backward(ctx, n, n->in[0], n->in[1], n->in[2], pr_in_grad(n, 0), pr_in_grad(n, 1), pr_in_grad(n, 2));
}

/* ---- l2norm -------------------------------------------------------------------------- */

template <int G, int S>
ROW_KERNEL(G) l2norm_forward_kernel(const float *x, float *y, float *rstd_out, long long R, long long D, float eps,
                                    bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const float *xr = x + r * D;
    pr_f4 xs[S];
    pr_row_load<G, S>(xs, xr, D, vec, lane);
    float rstd = 1.0f / sqrtf(pr_row_sumsq<G, S>(xs, xr, D, vec, lane) + eps);
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++) v.v[k] *= rstd;
        pr_st4(y + r * D, j, D, vec, v);
    });
    if (lane == 0 && rstd_out) rstd_out[r] = rstd;   /* NULL: not recorded */
}

template <int G, int S>
ROW_KERNEL(G) l2norm_backward_kernel(const float *x, const float *g, const float *rstd_in, float *dx, long long R,
                                     long long D, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const float *xr = x + r * D, *gr = g + r * D;
    float rstd = rstd_in[r];
    pr_f4 xs[S], gs[S];
    pr_row_load<G, S>(xs, xr, D, vec, lane);
    pr_row_load<G, S>(gs, gr, D, vec, lane);
    float dot = 0.0f; /* sum g y */
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), gv = pr_row_get(gs, gr, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++) dot += gv.v[k] * v.v[k] * rstd;
    });
    dot = pr_group_reduce<G>(dot, pr_op_sum());
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), gv = pr_row_get(gs, gr, j, D, vec, i);
        pr_f4 acc = pr_ld4(dx + r * D, j, D, vec);
#pragma unroll
        for (int k = 0; k < 4; k++) acc.v[k] += rstd * (gv.v[k] - v.v[k] * rstd * dot);
        pr_st4(dx + r * D, j, D, vec, acc);
    });
}

extern "C" void pr_l2norm_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_check_f32(n);
    const pr_tensor *x = n->in[0];
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    bool vec = D % 4 == 0 && all_aligned({x->data, n->out[0]->data});
    LAUNCH_ROWS(ctx, R, D, l2norm_forward_kernel, (const float *)x->data, (float *)n->out[0]->data,
                saved_or_null(n, 0), R, D, (float)n->farg[0], vec);
}

extern "C" void pr_l2norm_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    pr_tensor *gx = pr_in_grad(n, 0);
    if (!gx) return;
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const float *pg = (const float *)n->out[0]->grad->data;
    bool vec = D % 4 == 0 && all_aligned({x->data, pg, gx->data});
    LAUNCH_ROWS(ctx, R, D, l2norm_backward_kernel, (const float *)x->data, pg, (const float *)n->saved[0]->data,
                (float *)gx->data, R, D, vec);
}
