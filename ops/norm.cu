/* ops/norm.cu: CUDA layernorm, rmsnorm, rmsnorm_gated and l2norm (f32 or
 * bf16: the kernels are templates over the storage type T of x, z, w, b, y
 * and their grads; statistics, sums and the saved per-row {mean, rstd} are
 * f32 either way, and each bf16 store, y or grad += contribution, rounds
 * once).
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
#include "ops/cuda/ops_cuda.h"

#define ROW_KERNEL(G) __global__ void PR_ROW_BOUNDS(G)

/* a [D] parameter's chunk j, or `dflt` when absent */
template <class T> __device__ __forceinline__ pr_f4 param4(const T *p, long long j, long long D, bool vec, float dflt)
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
static float *saved_or_null(const pr_node *n, int i)
{
    if (i >= n->n_saved) return NULL;
    PR_CHECK(n->saved[i]->dtype == PR_F32, "%s: CUDA keeps the per-row statistics in f32, not %s", n->op->name,
             pr_dtype_name(n->saved[i]->dtype));
    return (float *)n->saved[i]->data;
}

template <int G, int S, class T>
ROW_KERNEL(G) layernorm_forward_kernel(const T *x, const T *w, const T *b, T *y, float *mean_out, float *rstd_out,
                                       long long R, long long D, float eps, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * D;
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

template <int G, int S, class T>
ROW_KERNEL(G) layernorm_backward_kernel(const T *x, const T *w, const T *g, const float *mean_in, const float *rstd_in,
                                        T *dx, long long R, long long D, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * D, *gr = g + r * D;
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
        pr_f4 add;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float xh = (v.v[k] - mean) * rstd;
            add.v[k] = rstd * (gv.v[k] * wv.v[k] - m1 - xh * m2);
        }
        pr_acc4(dx + r * D, j, D, vec, add);
    });
}

/* dw: sum over rows of g xh; db: sum of g */
template <class T> struct ln_dw {
    const T *x, *g;
    const float *mean, *rstd;
    long long D;
    __device__ __forceinline__ double operator()(long long r, long long c) const
    {
        return pr_ld(g, r * D + c) * ((pr_ld(x, r * D + c) - mean[r]) * rstd[r]);
    }
};
template <class T> struct read_rc {
    const T *p;
    long long D;
    __device__ __forceinline__ double operator()(long long r, long long c) const { return pr_ld(p, r * D + c); }
};

/* a float input's data as T, NULL when absent */
template <class T> static const T *data_or_null(const pr_tensor *t) { return t ? (const T *)t->data : NULL; }
template <class T> static T *grad_or_null(pr_tensor *g) { return g ? (T *)g->data : NULL; }

template <class T> static void layernorm_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const T *pw = data_or_null<T>(n->in[1]), *pb = data_or_null<T>(n->in[2]);
    bool vec = D % 4 == 0 && all_aligned({x->data, pw, pb, n->out[0]->data});
    LAUNCH_ROWS(ctx, R, D, layernorm_forward_kernel, (const T *)x->data, pw, pb, (T *)n->out[0]->data,
                saved_or_null(n, 0), saved_or_null(n, 1), R, D, (float)n->farg[0], vec);
}

template <class T> static void layernorm_backward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    pr_tensor *gx = pr_in_grad(n, 0), *gw = pr_in_grad(n, 1), *gb = pr_in_grad(n, 2);
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const T *px = (const T *)x->data, *pg = (const T *)n->out[0]->grad->data, *pw = data_or_null<T>(n->in[1]);
    const float *mean = saved_or_null(n, 0), *rstd = saved_or_null(n, 1);
    if (gx) {
        bool vec = D % 4 == 0 && all_aligned({px, pw, pg, gx->data});
        LAUNCH_ROWS(ctx, R, D, layernorm_backward_kernel, px, pw, pg, mean, rstd, (T *)gx->data, R, D, vec);
    }
    cudaStream_t s = pr_cuda_stream(ctx);
    if (gw) pr_cuda_colsum_add(s, ln_dw<T>{px, pg, mean, rstd, D}, R, D, (T *)gw->data, 1.0);
    if (gb) pr_cuda_colsum_add(s, read_rc<T>{pg, D}, R, D, (T *)gb->data, 1.0);
}

extern "C" void pr_layernorm_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { layernorm_forward<decltype(t)>(ctx, n); });
}
extern "C" void pr_layernorm_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { layernorm_backward<decltype(t)>(ctx, n); });
}

/* ---- rmsnorm and rmsnorm_gated (z = NULL: no gate) ------------------------------------- */

template <int G, int S, class T>
ROW_KERNEL(G) rms_forward_kernel(const T *x, const T *z, const T *w, T *y, float *rstd_out, long long R, long long D,
                                 float eps, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * D;
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
            if (z) v.v[k] *= zv.v[k] * pr_sigmoidf(zv.v[k]);
        }
        pr_st4(y + r * D, j, D, vec, v);
    });
    if (lane == 0 && rstd_out) rstd_out[r] = rstd;   /* NULL: not recorded */
}

/* x and g load first (both in flight at once); pass 1 turns g into
 * g' = g silu(z) in its registers and writes dz; pass 2 writes dx */
template <int G, int S, class T>
ROW_KERNEL(G) rms_backward_kernel(const T *x, const T *z, const T *w, const T *g, const float *rstd_in, T *dx, T *dz,
                                  long long R, long long D, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * D, *gr = g + r * D;
    float rstd = rstd_in[r];
    pr_f4 xs[S], gs[S];
    pr_row_load<G, S>(xs, xr, D, vec, lane);
    pr_row_load<G, S>(gs, gr, D, vec, lane);
    float m2 = 0.0f; /* sum of g' w xh */
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i), gv = pr_row_get(gs, gr, j, D, vec, i);
        pr_f4 wv = param4(w, j, D, vec, 1.0f);
        if (z) {
            pr_f4 zv = pr_ld4(z + r * D, j, D, vec), dzv;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float sg = pr_sigmoidf(zv.v[k]);
                dzv.v[k] = gv.v[k] * v.v[k] * rstd * wv.v[k] * sg * (1.0f + zv.v[k] * (1.0f - sg));
                gv.v[k] *= zv.v[k] * sg;
            }
            if (dz && ok) pr_acc4(dz + r * D, j, D, vec, dzv);
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
                for (int k = 0; k < 4; k++) gv.v[k] *= zv.v[k] * pr_sigmoidf(zv.v[k]);
            }
        }
        pr_f4 add;
#pragma unroll
        for (int k = 0; k < 4; k++) add.v[k] = rstd * (gv.v[k] * wv.v[k] - v.v[k] * rstd * m2);
        pr_acc4(dx + r * D, j, D, vec, add);
    });
}

/* dw: sum over rows of g' xh */
template <class T> struct rms_dw {
    const T *x, *z, *g;
    const float *rstd;
    long long D;
    __device__ __forceinline__ double operator()(long long r, long long c) const
    {
        long long o = r * D + c;
        float gp = pr_ld(g, o);
        if (z) gp *= pr_ld(z, o) * pr_sigmoidf(pr_ld(z, o));
        return gp * (pr_ld(x, o) * rstd[r]);
    }
};

template <class T>
static void rms_forward(pr_ctx *ctx, pr_node *n, const pr_tensor *x, const pr_tensor *z, const pr_tensor *w)
{
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const T *pz = data_or_null<T>(z), *pw = data_or_null<T>(w);
    bool vec = D % 4 == 0 && all_aligned({x->data, pz, pw, n->out[0]->data});
    LAUNCH_ROWS(ctx, R, D, rms_forward_kernel, (const T *)x->data, pz, pw, (T *)n->out[0]->data, saved_or_null(n, 0),
                R, D, (float)n->farg[0], vec);
}

template <class T>
static void rms_backward(pr_ctx *ctx, pr_node *n, const pr_tensor *x, const pr_tensor *z, const pr_tensor *w,
                         pr_tensor *gx, pr_tensor *gz, pr_tensor *gw)
{
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const T *px = (const T *)x->data, *pz = data_or_null<T>(z), *pw = data_or_null<T>(w);
    const T *pg = (const T *)n->out[0]->grad->data;
    const float *rstd = saved_or_null(n, 0);
    T *dx = grad_or_null<T>(gx), *dz = grad_or_null<T>(gz);
    if (dx || dz) {
        bool vec = D % 4 == 0 && all_aligned({px, pz, pw, pg, dx, dz});
        LAUNCH_ROWS(ctx, R, D, rms_backward_kernel, px, pz, pw, pg, rstd, dx, dz, R, D, vec);
    }
    if (gw) pr_cuda_colsum_add(pr_cuda_stream(ctx), rms_dw<T>{px, pz, pg, rstd, D}, R, D, (T *)gw->data, 1.0);
}

extern "C" void pr_rmsnorm_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { rms_forward<decltype(t)>(ctx, n, n->in[0], NULL, n->in[1]); });
}
extern "C" void pr_rmsnorm_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) {
        rms_backward<decltype(t)>(ctx, n, n->in[0], NULL, n->in[1], pr_in_grad(n, 0), NULL, pr_in_grad(n, 1));
    });
}
extern "C" void pr_rmsnorm_gated_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n),
                           [&](auto t) { rms_forward<decltype(t)>(ctx, n, n->in[0], n->in[1], n->in[2]); });
}
extern "C" void pr_rmsnorm_gated_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) {
        rms_backward<decltype(t)>(ctx, n, n->in[0], n->in[1], n->in[2], pr_in_grad(n, 0), pr_in_grad(n, 1),
                                  pr_in_grad(n, 2));
    });
}

/* ---- l2norm -------------------------------------------------------------------------- */

template <int G, int S, class T>
ROW_KERNEL(G) l2norm_forward_kernel(const T *x, T *y, float *rstd_out, long long R, long long D, float eps, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * D;
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

template <int G, int S, class T>
ROW_KERNEL(G) l2norm_backward_kernel(const T *x, const T *g, const float *rstd_in, T *dx, long long R, long long D,
                                     bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * D, *gr = g + r * D;
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
        pr_f4 add;
#pragma unroll
        for (int k = 0; k < 4; k++) add.v[k] = rstd * (gv.v[k] - v.v[k] * rstd * dot);
        pr_acc4(dx + r * D, j, D, vec, add);
    });
}

template <class T> static void l2norm_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    bool vec = D % 4 == 0 && all_aligned({x->data, n->out[0]->data});
    LAUNCH_ROWS(ctx, R, D, l2norm_forward_kernel, (const T *)x->data, (T *)n->out[0]->data, saved_or_null(n, 0), R, D,
                (float)n->farg[0], vec);
}

template <class T> static void l2norm_backward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    pr_tensor *gx = pr_in_grad(n, 0);
    if (!gx) return;
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const T *pg = (const T *)n->out[0]->grad->data;
    bool vec = D % 4 == 0 && all_aligned({x->data, pg, gx->data});
    LAUNCH_ROWS(ctx, R, D, l2norm_backward_kernel, (const T *)x->data, pg, saved_or_null(n, 0),
                (T *)gx->data, R, D, vec);
}

extern "C" void pr_l2norm_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { l2norm_forward<decltype(t)>(ctx, n); });
}
extern "C" void pr_l2norm_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { l2norm_backward<decltype(t)>(ctx, n); });
}

/* ---- add_rmsnorm, add_layernorm: s = x + y, n = norm(s) -------------------------------
 * Node layout as ops/norm.c: in = {x, y, w[, b]}, out = {n, s}, saved = {rstd}
 * or {mean, rstd}. The forward reads x and y once, keeps s = x + y in the
 * row's registers for the statistics and writes s and n: one launch where
 * add then norm take two and read s back. The statistics are of the sum in
 * f32 before s is stored (for bf16, of the unrounded sum, as the CPU's staged
 * path). The backward's ds = s's grad + the norm's backward of n's grad goes
 * into x's and y's grads in the same pass. layer: layernorm (mean removed, b).
 * Storage: T for x, w, b, s, n and their grads; U for y and its grad, which
 * is T or, beside an f32 x, bf16 (a bf16 sublayer output into the f32
 * residual stream, ops/norm.c): y is widened as it is loaded and dy rounded
 * once as it is stored, the bits of an f32 copy of y and its cast back. */

/* chunk j of a + b (of `a` alone when b is NULL) */
template <class T, class U>
__device__ __forceinline__ pr_f4 sum4(const T *a, const U *b, long long j, long long D, bool vec)
{
    pr_f4 v = pr_ld4(a, j, D, vec);
    if (b) {
        pr_f4 u = pr_ld4(b, j, D, vec);
#pragma unroll
        for (int k = 0; k < 4; k++) v.v[k] += u.v[k];
    }
    return v;
}

template <int G, int S, class T, class U>
ROW_KERNEL(G) add_norm_forward_kernel(const T *x, const U *y, const T *w, const T *b, T *s, T *out, float *mean_out,
                                      float *rstd_out, long long R, long long D, float eps, bool layer, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * D;
    const U *yr = y + r * D;
    pr_f4 ss[S];
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        if (i >= 0) ss[i] = sum4(xr, yr, j, D, vec);
    });
    auto get = [&](long long j, int i) { return i >= 0 ? ss[i] : sum4(xr, yr, j, D, vec); };
    float mean = 0.0f, var = 0.0f;
    if (layer) {
        float sum = 0.0f;
        pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
            pr_f4 v = get(j, i);
#pragma unroll
            for (int k = 0; k < 4; k++) sum += v.v[k]; /* padding is 0 */
        });
        mean = pr_group_reduce<G>(sum, pr_op_sum()) / (float)D;
    }
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = get(j, i);
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j + k < D) var += (v.v[k] - mean) * (v.v[k] - mean);
    });
    var = pr_group_reduce<G>(var, pr_op_sum());
    float rstd = 1.0f / sqrtf(var / (float)D + eps);
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = get(j, i), wv = param4(w, j, D, vec, 1.0f), bv = param4(b, j, D, vec, 0.0f), o;
        pr_st4(s + r * D, j, D, vec, v);
#pragma unroll
        for (int k = 0; k < 4; k++) o.v[k] = (v.v[k] - mean) * rstd * wv.v[k] + bv.v[k];
        pr_st4(out + r * D, j, D, vec, o);
    });
    if (lane == 0 && rstd_out) {   /* NULL: not recorded */
        rstd_out[r] = rstd;
        if (mean_out) mean_out[r] = mean;
    }
}

/* s is sa + sb (sb NULL: sa alone); gn, gs: n's and s's grads; dy in y's storage U */
template <int G, int S, class T, class U>
ROW_KERNEL(G) add_norm_backward_kernel(const T *sa, const T *sb, const T *w, const T *gn, const T *gs,
                                       const float *mean_in, const float *rstd_in, T *dx, U *dy, long long R,
                                       long long D, bool layer, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *ar = sa + r * D, *br = sb ? sb + r * D : NULL, *gr = gn + r * D;
    float mean = layer ? mean_in[r] : 0.0f, rstd = rstd_in[r];
    pr_f4 ss[S], gns[S];
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        if (i >= 0) ss[i] = sum4(ar, br, j, D, vec), gns[i] = pr_ld4(gr, j, D, vec);
    });
    auto s_at = [&](long long j, int i) { return i >= 0 ? ss[i] : sum4(ar, br, j, D, vec); };
    float m1 = 0.0f, m2 = 0.0f; /* sums of dxh and dxh xh, dxh = gn w */
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = s_at(j, i), gv = pr_row_get(gns, gr, j, D, vec, i), wv = param4(w, j, D, vec, 1.0f);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float dxh = gv.v[k] * wv.v[k]; /* 0 in the padding */
            m1 += dxh;
            m2 += dxh * (v.v[k] - mean) * rstd;
        }
    });
    m1 = layer ? pr_group_reduce<G>(m1, pr_op_sum()) / (float)D : 0.0f;
    m2 = pr_group_reduce<G>(m2, pr_op_sum()) / (float)D;
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = s_at(j, i), gv = pr_row_get(gns, gr, j, D, vec, i), wv = param4(w, j, D, vec, 1.0f);
        pr_f4 ds = pr_ld4(gs + r * D, j, D, vec);
#pragma unroll
        for (int k = 0; k < 4; k++) ds.v[k] += rstd * (gv.v[k] * wv.v[k] - m1 - (v.v[k] - mean) * rstd * m2);
        if (dx) pr_acc4(dx + r * D, j, D, vec, ds);
        if (dy) pr_acc4(dy + r * D, j, D, vec, ds);
    });
}

/* dw: sum over rows of gn xh, xh = (s - mean) rstd with s = sa + sb (sb NULL: sa) */
template <class T> struct add_norm_dw {
    const T *sa, *sb, *g;
    const float *mean, *rstd;
    long long D;
    __device__ __forceinline__ double operator()(long long r, long long c) const
    {
        long long o = r * D + c;
        float s = pr_ld(sa, o);
        if (sb) s += pr_ld(sb, o);
        return pr_ld(g, o) * ((s - (mean ? mean[r] : 0.0f)) * rstd[r]);
    }
};

template <class T, class U> static void add_norm_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    const bool layer = pr_node_op(n) == PR_OP_add_layernorm;
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const U *py = (const U *)n->in[1]->data;
    const T *px = (const T *)x->data, *pw = data_or_null<T>(n->in[2]);
    const T *pb = layer ? data_or_null<T>(n->in[3]) : NULL;
    T *pn = (T *)n->out[0]->data, *ps = (T *)n->out[1]->data;
    bool vec = D % 4 == 0 && all_aligned({px, py, pw, pb, pn, ps});
    float *mean = layer ? saved_or_null(n, 0) : NULL, *rstd = saved_or_null(n, layer ? 1 : 0);
    LAUNCH_ROWS(ctx, R, D, add_norm_forward_kernel, px, py, pw, pb, ps, pn, mean, rstd, R, D, (float)n->farg[0],
                layer, vec);
}

/* f32: s is read back as stored (the exact f32 sum, whatever y's storage);
 * bf16: s = x + y again from the inputs, the unrounded sum the statistics
 * were taken of */
template <class T, class U> static void add_norm_backward(pr_ctx *ctx, pr_node *n)
{
    const bool layer = pr_node_op(n) == PR_OP_add_layernorm;
    const pr_tensor *x = n->in[0];
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    const bool bf16 = std::is_same<T, pr_bf16>::value;
    const T *sa = bf16 ? (const T *)x->data : (const T *)n->out[1]->data;
    const T *sb = bf16 ? (const T *)n->in[1]->data : NULL, *pw = data_or_null<T>(n->in[2]);
    const T *gn = (const T *)n->out[0]->grad->data, *gs = (const T *)n->out[1]->grad->data;
    const float *mean = layer ? saved_or_null(n, 0) : NULL, *rstd = saved_or_null(n, layer ? 1 : 0);
    T *dx = grad_or_null<T>(pr_in_grad(n, 0));
    U *dy = grad_or_null<U>(pr_in_grad(n, 1));
    pr_tensor *gw = pr_in_grad(n, 2), *gb = layer ? pr_in_grad(n, 3) : NULL;
    if (dx || dy) {
        bool vec = D % 4 == 0 && all_aligned({sa, sb, pw, gn, gs, dx, dy});
        LAUNCH_ROWS(ctx, R, D, add_norm_backward_kernel, sa, sb, pw, gn, gs, mean, rstd, dx, dy, R, D, layer, vec);
    }
    cudaStream_t s = pr_cuda_stream(ctx);
    if (gw) pr_cuda_colsum_add(s, add_norm_dw<T>{sa, sb, gn, mean, rstd, D}, R, D, (T *)gw->data, 1.0);
    if (gb) pr_cuda_colsum_add(s, read_rc<T>{gn, D}, R, D, (T *)gb->data, 1.0);
}

/* x f32 and y bf16 (the one mix the frontend lets through) run the <f32,
 * bf16> instance; else every float input is f32 or every one bf16 */
static bool add_norm_mixed(const pr_node *n) { return n->in[0]->dtype == PR_F32 && n->in[1]->dtype == PR_BF16; }

static void add_norm_forward_any(pr_ctx *ctx, pr_node *n)
{
    if (add_norm_mixed(n)) add_norm_forward<float, pr_bf16>(ctx, n);
    else pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { add_norm_forward<decltype(t), decltype(t)>(ctx, n); });
}
static void add_norm_backward_any(pr_ctx *ctx, pr_node *n)
{
    if (add_norm_mixed(n)) add_norm_backward<float, pr_bf16>(ctx, n);
    else pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { add_norm_backward<decltype(t), decltype(t)>(ctx, n); });
}

extern "C" void pr_add_rmsnorm_forward_cuda(pr_ctx *ctx, pr_node *n) { add_norm_forward_any(ctx, n); }
extern "C" void pr_add_rmsnorm_backward_cuda(pr_ctx *ctx, pr_node *n) { add_norm_backward_any(ctx, n); }
extern "C" void pr_add_layernorm_forward_cuda(pr_ctx *ctx, pr_node *n) { add_norm_forward_any(ctx, n); }
extern "C" void pr_add_layernorm_backward_cuda(pr_ctx *ctx, pr_node *n) { add_norm_backward_any(ctx, n); }
