/* ops/route.cu: MoM's padded routing on CUDA (ops/route.h): a thread per
 * batch row runs pr_route_row, the CPU's loop, over its T tokens, then a
 * thread per memory sums the rows' counts in row order (integers: the same
 * totals every run). T serial steps a thread: ~130K comparisons at T = 16K,
 * E = 4, k = 2, small beside the layer it routes. */
#include "ops/route.h"
#include "ops/cuda/ops_cuda.h"

__global__ void route_rows(int64_t B, int64_t T, int64_t E, int64_t k, const float *probs, int64_t *at, int64_t *slot,
                           int64_t *tok, int64_t *row_count)
{
    const int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (b < B) pr_route_row(b, B, T, E, k, probs, nullptr, at, slot, tok, row_count + b * E);
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
                                                         (int64_t *)r->tok->data, (int64_t *)row_count->data);
    PR_CUDA_LAUNCH_CHECK();
    route_counts<<<1, 64, 0, s>>>(B, E, (const int64_t *)row_count->data, (float *)r->count->data);
    PR_CUDA_LAUNCH_CHECK();
}
