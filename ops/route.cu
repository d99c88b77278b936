/* ops/route.cu: MoM's padded routing on CUDA (ops/route.h): a thread per
 * batch row runs pr_route_row, the CPU's loop, over its T tokens, then a
 * thread per memory sums the rows' counts in row order (integers: the same
 * totals every run). T serial steps a thread: ~130K comparisons at T = 16K,
 * E = 4, k = 2, small beside the layer it routes.
 * pr_route_scatter and pr_route_gather: a thread an element, f32 or bf16 rows
 * (bf16 copied exact; the scatter's backward sums its k grads in f32 and
 * rounds once into a bf16 dx). */
#include "ops/route.h"
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

__global__ void route_rows(int64_t B, int64_t T, int64_t E, int64_t k, const float *probs, int64_t *at, int64_t *slot,
                           int64_t *row_count)
{
    const int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (b < B) pr_route_row(b, B, T, E, k, probs, nullptr, at, slot, row_count + b * E);
}

__global__ void route_counts(int64_t B, int64_t E, const int64_t *row_count, float *count)
{
    const int64_t e = threadIdx.x;
    if (e >= E) return;
    int64_t n = 0;
    for (int64_t b = 0; b < B; b++) n += row_count[b * E + e];
    count[e] = (float)n;
}

extern "C" void pr_route_padded_cuda(pr_ctx *ctx, const pr_tensor *probs, int64_t k, const pr_routing *r,
                                     pr_tensor *row_count)
{
    const int64_t B = probs->shape[0], T = probs->shape[1], E = probs->shape[2];
    if (B * T == 0) return;
    cudaStream_t s = pr_cuda_stream(ctx);
    route_rows<<<(unsigned)((B + 63) / 64), 64, 0, s>>>(B, T, E, k, (const float *)probs->data,
                                                         (int64_t *)r->at->data, (int64_t *)r->slot->data,
                                                         (int64_t *)row_count->data);
    PR_CUDA_LAUNCH_CHECK();
    route_counts<<<1, 64, 0, s>>>(B, E, (const int64_t *)row_count->data, (float *)r->count->data);
    PR_CUDA_LAUNCH_CHECK();
}

/* out[slot[i], :] = x[i / k, :]; the pads were zeroed before */
template <class T>
__global__ void route_spread(T *out, const T *x, const int64_t *slot, int64_t n, int64_t k, int64_t D)
{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * D; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / D, d = e - i * D;
        out[slot[i] * D + d] = x[(i / k) * D + d];
    }
}

/* dx[i, :] += sum over j of dout[slot[i k + j], :] */
template <class T>
__global__ void route_spread_grad(T *dx, const T *dout, const int64_t *slot, int64_t N, int64_t k, int64_t D)
{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < N * D; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / D, d = e - i * D;
        float sum = 0.0f;
        for (int64_t j = 0; j < k; j++) sum += pr_ld(dout, slot[i * k + j] * D + d);
        pr_acc(dx, e, sum);
    }
}

/* out[i, :] = y[slot[i], :] (grad: acc = true, dy[slot[i], :] += dout[i, :]) */
template <class T, bool acc>
__global__ void route_pick(T *dst, const T *src, const int64_t *slot, int64_t n, int64_t C)
{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * C; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / C, c = e - i * C;
        if (acc) pr_acc(dst, slot[i] * C + c, pr_ld(src, e));
        else dst[e] = src[slot[i] * C + c];
    }
}

template <class T> static void scatter_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *slot = n->in[1];
    pr_tensor *out = n->out[0];
    const int64_t D = x->shape[1], m = slot->numel;
    cudaStream_t s = pr_cuda_stream(ctx);
    PR_CUDA_CHECK(cudaMemsetAsync(out->data, 0, pr_nbytes(out), s));
    if (m * D == 0) return;
    route_spread<<<pr_cuda_blocks(m * D, 256), 256, 0, s>>>((T *)out->data, (const T *)x->data,
                                                           (const int64_t *)slot->data, m, slot->shape[1], D);
    PR_CUDA_LAUNCH_CHECK();
}

template <class T> static void scatter_backward(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *dx = pr_in_grad(n, 0);
    const pr_tensor *slot = n->in[1];
    if (!dx || dx->numel == 0) return;
    const int64_t N = dx->shape[0], D = dx->shape[1];
    route_spread_grad<<<pr_cuda_blocks(N * D, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (T *)dx->data, (const T *)n->out[0]->grad->data, (const int64_t *)slot->data, N, slot->shape[1], D);
    PR_CUDA_LAUNCH_CHECK();
}

template <class T> static void gather_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *y = n->in[0], *slot = n->in[1];
    const int64_t C = y->shape[1], m = slot->numel;
    if (m * C == 0) return;
    route_pick<T, false><<<pr_cuda_blocks(m * C, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (T *)n->out[0]->data, (const T *)y->data, (const int64_t *)slot->data, m, C);
    PR_CUDA_LAUNCH_CHECK();
}

template <class T> static void gather_backward(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *dy = pr_in_grad(n, 0);
    const pr_tensor *slot = n->in[1];
    const int64_t C = n->in[0]->shape[1], m = slot->numel;
    if (!dy || m * C == 0) return;
    route_pick<T, true><<<pr_cuda_blocks(m * C, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (T *)dy->data, (const T *)n->out[0]->grad->data, (const int64_t *)slot->data, m, C);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_route_scatter_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { scatter_forward<decltype(t)>(ctx, n); });
}

extern "C" void pr_route_scatter_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { scatter_backward<decltype(t)>(ctx, n); });
}

extern "C" void pr_route_gather_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { gather_forward<decltype(t)>(ctx, n); });
}

extern "C" void pr_route_gather_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { gather_backward<decltype(t)>(ctx, n); });
}
