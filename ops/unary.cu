/* ops/unary.cu: CUDA forward and backward of the elementwise ops y = f(x).
 *
 * One kernel pair serves every op: the op id is a template argument, so each
 * op compiles to its own loop, and the storage type T (float or pr_bf16) is
 * another: f32 in registers, accurate libm (no fast-math intrinsics); bf16
 * loads exact, each bf16 store (y, and dx += dy f') rounded once. Four
 * elements a load and a store where the data is 16-byte aligned,
 * grid-stride loops. Node layout as ops/unary.c: in[0] = x, out[0] = y,
 * farg[0] = s (scale). Backward: dx += dy * f'(x), f' in terms of y where
 * that is cheaper (exp, sqrt, sigmoid, tanh), so the f32 backward reads y,
 * not x. A bf16 y is rounded (f'(y) would carry that rounding), so the bf16
 * backward reads x instead and recomputes y in f32, as the forward had it.
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_TANH_C 0.044715f
#define INV_SQRT_2PI 0.3989422804014327f

template <int OP> __device__ __forceinline__ float unary_f(float x, float s)
{
    if constexpr (OP == PR_OP_scale) return s * x;
    if constexpr (OP == PR_OP_neg) return -x;
    if constexpr (OP == PR_OP_exp) return expf(x);
    if constexpr (OP == PR_OP_log) return logf(x);
    if constexpr (OP == PR_OP_sqrt) return sqrtf(x);
    if constexpr (OP == PR_OP_sigmoid) return pr_sigmoidf(x);
    if constexpr (OP == PR_OP_logsigmoid) return x >= 0.0f ? -log1pf(expf(-x)) : x - log1pf(expf(x));
    if constexpr (OP == PR_OP_tanh) return tanhf(x);
    if constexpr (OP == PR_OP_relu) return x > 0.0f ? x : 0.0f;
    if constexpr (OP == PR_OP_silu) return x * pr_sigmoidf(x);
    if constexpr (OP == PR_OP_gelu) return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    if constexpr (OP == PR_OP_gelu_tanh)
        return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x)));
    if constexpr (OP == PR_OP_softplus) return pr_softplusf(x);
    return 0.0f;
}

/* the backward reads y instead of x for these */
template <int OP> constexpr bool grad_from_y()
{
    return OP == PR_OP_exp || OP == PR_OP_sqrt || OP == PR_OP_sigmoid || OP == PR_OP_tanh;
}
/* and neither for these */
template <int OP> constexpr bool grad_constant() { return OP == PR_OP_scale || OP == PR_OP_neg; }
/* whether the backward loads y: f32 only (bf16 recomputes it from x) */
template <int OP, class T> constexpr bool loads_y() { return grad_from_y<OP>() && std::is_same<T, float>::value; }

/* dy/dx from x (or y, see grad_from_y) */
template <int OP> __device__ __forceinline__ float unary_df(float x, float y, float s)
{
    if constexpr (OP == PR_OP_scale) return s;
    if constexpr (OP == PR_OP_neg) return -1.0f;
    if constexpr (OP == PR_OP_exp) return y;
    if constexpr (OP == PR_OP_log) return 1.0f / x;
    if constexpr (OP == PR_OP_sqrt) return 0.5f / y;
    if constexpr (OP == PR_OP_sigmoid) return y * (1.0f - y);
    if constexpr (OP == PR_OP_logsigmoid) return pr_sigmoidf(-x); /* d/dx -log(1+e^-x) */
    if constexpr (OP == PR_OP_tanh) return 1.0f - y * y;
    if constexpr (OP == PR_OP_relu) return x > 0.0f ? 1.0f : 0.0f;
    if constexpr (OP == PR_OP_silu) { /* s + x s (1 - s) */
        float sg = pr_sigmoidf(x);
        return sg * (1.0f + x * (1.0f - sg));
    }
    if constexpr (OP == PR_OP_gelu) /* Phi(x) + x phi(x) */
        return 0.5f * (1.0f + erff(x * 0.7071067811865476f)) + x * expf(-0.5f * x * x) * INV_SQRT_2PI;
    if constexpr (OP == PR_OP_gelu_tanh) {
        float u = SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x), t = tanhf(u);
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_C * x * x);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    }
    if constexpr (OP == PR_OP_softplus) return pr_softplus_gradf(x);
    return 0.0f;
}

/* `al`: every pointer is 16-byte aligned, so whole chunks of 4 go as one access */
template <int OP, class T> __global__ void unary_forward_kernel(const T *x, T *y, long long n, float s, bool al)
{
    long long n4 = (n + 3) / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        long long j = 4 * i;
        bool v = al && j + 4 <= n;
        pr_f4 a = pr_ld4(x, j, n, v);
#pragma unroll
        for (int k = 0; k < 4; k++) a.v[k] = unary_f<OP>(a.v[k], s);
        pr_st4(y, j, n, v, a);
    }
}

template <int OP, class T>
__global__ void unary_backward_kernel(const T *x, const T *y, const T *dy, T *dx, long long n, float s, bool al)
{
    long long n4 = (n + 3) / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        long long j = 4 * i;
        bool v = al && j + 4 <= n;
        pr_f4 g = pr_ld4(dy, j, n, v), add, in = {{0, 0, 0, 0}};
        if constexpr (loads_y<OP, T>()) in = pr_ld4(y, j, n, v);
        else if constexpr (!grad_constant<OP>()) in = pr_ld4(x, j, n, v);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float yk = in.v[k];   /* y, or x where f' reads x alone */
            if constexpr (grad_from_y<OP>() && !loads_y<OP, T>()) yk = unary_f<OP>(in.v[k], s);
            add.v[k] = g.v[k] * unary_df<OP>(in.v[k], yk, s);
        }
        pr_acc4(dx, j, n, v, add);
    }
}

template <int OP, class T> static void unary_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    pr_tensor *y = n->out[0];
    long long N = x->numel;
    if (N == 0) return;
    bool al = pr_aligned16(x->data) && pr_aligned16(y->data);
    unary_forward_kernel<OP><<<pr_cuda_blocks((N + 3) / 4, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (const T *)x->data, (T *)y->data, N, (float)n->farg[0], al);
    PR_CUDA_LAUNCH_CHECK();
}

template <int OP, class T> static void unary_backward(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *gx = pr_in_grad(n, 0);
    if (!gx || gx->numel == 0) return;
    const pr_tensor *x = n->in[0], *y = n->out[0];
    long long N = x->numel;
    bool al = pr_aligned16(x->data) && pr_aligned16(y->data) && pr_aligned16(y->grad->data) &&
              pr_aligned16(gx->data);
    unary_backward_kernel<OP><<<pr_cuda_blocks((N + 3) / 4, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (const T *)x->data, (const T *)y->data, (const T *)y->grad->data, (T *)gx->data, N, (float)n->farg[0], al);
    PR_CUDA_LAUNCH_CHECK();
}

#define UNARY_CUDA(name)                                                                                     \
    extern "C" void pr_##name##_forward_cuda(pr_ctx *ctx, pr_node *n)                                        \
    {                                                                                                        \
        pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { unary_forward<PR_OP_##name, decltype(t)>(ctx, n); }); \
    }                                                                                                        \
    extern "C" void pr_##name##_backward_cuda(pr_ctx *ctx, pr_node *n)                                       \
    {                                                                                                        \
        pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { unary_backward<PR_OP_##name, decltype(t)>(ctx, n); }); \
    }

UNARY_CUDA(scale)
UNARY_CUDA(neg)
UNARY_CUDA(exp)
UNARY_CUDA(log)
UNARY_CUDA(sqrt)
UNARY_CUDA(sigmoid)
UNARY_CUDA(logsigmoid)
UNARY_CUDA(tanh)
UNARY_CUDA(relu)
UNARY_CUDA(silu)
UNARY_CUDA(gelu)
UNARY_CUDA(gelu_tanh)
UNARY_CUDA(softplus)
