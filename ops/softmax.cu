/* ops/softmax.cu: CUDA softmax and log_softmax over the last dim (f32 or
 * bf16: the kernels are templates over the storage type T of x, y and their
 * grads; max, sum of exp and the dot of the backward in f32, each bf16 store
 * rounded once).
 *
 * A warp (short rows) or a block (long rows) per row; the row stays in
 * registers between its passes (max, sum of exp, write), so x is read from
 * memory once and y written once. Node layout as ops/softmax.c: in[0] = x,
 * out[0] = y; the f32 backwards read only y:
 *   softmax:     dx_j += y_j (g_j - sum_i g_i y_i)
 *   log_softmax: dx_j += g_j - e^{y_j} sum_i g_i
 * A bf16 y is rounded (e^y of rounded log-probabilities is off by |y| 2^-9
 * relative), so the bf16 backwards read x instead and recompute y in f32
 * with the forward's own max and sum: the same bytes, no rounded y.
 */
#include <math.h>

#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

template <int G, int S, bool LOG, class T>
__global__ void PR_ROW_BOUNDS(G) softmax_forward_kernel(const T *x, T *y, long long R, long long D, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * D;
    T *yr = y + r * D;
    pr_f4 xs[S];
    pr_row_load<G, S>(xs, xr, D, vec, lane);
    float mx, sum;
    pr_row_max_sumexp<G, S>(xs, xr, D, vec, lane, &mx, &sum);
    float lse = mx + logf(sum), inv = 1.0f / sum;
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(xs, xr, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++) v.v[k] = LOG ? v.v[k] - lse : expf(v.v[k] - mx) * inv;
        pr_st4(yr, j, D, vec, v);
    });
}

/* src: y (f32), or x (bf16: y recomputed from it) */
template <int G, int S, bool LOG, class T>
__global__ void PR_ROW_BOUNDS(G) softmax_backward_kernel(const T *src, const T *g, T *dx, long long R, long long D, bool vec)
{
    constexpr bool from_x = !std::is_same<T, float>::value;
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *sr = src + r * D, *gr = g + r * D;
    T *dxr = dx + r * D;
    pr_f4 ss[S], gs[S];
    pr_row_load<G, S>(ss, sr, D, vec, lane);
    pr_row_load<G, S>(gs, gr, D, vec, lane);
    float mx = 0.0f, lse = 0.0f, inv = 0.0f;
    if constexpr (from_x) {   /* every thread of the group takes part, as in the forward */
        float sum;
        pr_row_max_sumexp<G, S>(ss, sr, D, vec, lane, &mx, &sum);
        lse = mx + logf(sum), inv = 1.0f / sum;
    }
    /* y at chunk j (past D: garbage, multiplied by g's zero padding or never stored) */
    auto y_at = [&](long long j, int i) {
        pr_f4 v = pr_row_get(ss, sr, j, D, vec, i);
        if constexpr (from_x) {
#pragma unroll
            for (int k = 0; k < 4; k++) v.v[k] = LOG ? v.v[k] - lse : expf(v.v[k] - mx) * inv;
        }
        return v;
    };
    float dot = 0.0f; /* sum g y (softmax) or sum g (log_softmax); zero padding adds nothing */
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 yv = y_at(j, i), gv = pr_row_get(gs, gr, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++) dot += LOG ? gv.v[k] : gv.v[k] * yv.v[k];
    });
    dot = pr_group_reduce<G>(dot, pr_op_sum());
    if (!ok) return;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 yv = y_at(j, i), gv = pr_row_get(gs, gr, j, D, vec, i);
        pr_f4 add;
#pragma unroll
        for (int k = 0; k < 4; k++) add.v[k] = LOG ? gv.v[k] - expf(yv.v[k]) * dot : yv.v[k] * (gv.v[k] - dot);
        pr_acc4(dxr, j, D, vec, add);
    });
}

template <bool LOG, class T> static void softmax_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    pr_tensor *y = n->out[0];
    long long D = x->shape[x->ndim - 1], R = x->numel / D;
    if (R == 0) return;
    bool vec = D % 4 == 0 && pr_aligned16(x->data) && pr_aligned16(y->data);
    cudaStream_t s = pr_cuda_stream(ctx);
    pr_cuda_row_dispatch(D, [&](auto g) {
        constexpr int G = decltype(g)::G, S = decltype(g)::S;
        softmax_forward_kernel<G, S, LOG><<<pr_row_blocks<G>(R), pr_row_threads<G>(), 0, s>>>(
            (const T *)x->data, (T *)y->data, R, D, vec);
    });
    PR_CUDA_LAUNCH_CHECK();
}

template <bool LOG, class T> static void softmax_backward(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *gx = pr_in_grad(n, 0);
    if (!gx) return;
    const pr_tensor *y = n->out[0], *src = std::is_same<T, float>::value ? y : n->in[0];
    long long D = y->shape[y->ndim - 1], R = y->numel / D;
    if (R == 0) return;
    bool vec = D % 4 == 0 && pr_aligned16(src->data) && pr_aligned16(y->grad->data) && pr_aligned16(gx->data);
    cudaStream_t s = pr_cuda_stream(ctx);
    pr_cuda_row_dispatch(D, [&](auto g) {
        constexpr int G = decltype(g)::G, S = decltype(g)::S;
        softmax_backward_kernel<G, S, LOG><<<pr_row_blocks<G>(R), pr_row_threads<G>(), 0, s>>>(
            (const T *)src->data, (const T *)y->grad->data, (T *)gx->data, R, D, vec);
    });
    PR_CUDA_LAUNCH_CHECK();
}

template <bool LOG> static void softmax_forward_any(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { softmax_forward<LOG, decltype(t)>(ctx, n); });
}
template <bool LOG> static void softmax_backward_any(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { softmax_backward<LOG, decltype(t)>(ctx, n); });
}

extern "C" void pr_softmax_forward_cuda(pr_ctx *ctx, pr_node *n) { softmax_forward_any<false>(ctx, n); }
extern "C" void pr_softmax_backward_cuda(pr_ctx *ctx, pr_node *n) { softmax_backward_any<false>(ctx, n); }
extern "C" void pr_log_softmax_forward_cuda(pr_ctx *ctx, pr_node *n) { softmax_forward_any<true>(ctx, n); }
extern "C" void pr_log_softmax_backward_cuda(pr_ctx *ctx, pr_node *n) { softmax_backward_any<true>(ctx, n); }
