/* ops/dropout.cu: CUDA inverted dropout (f32 or bf16), the CPU's mask bit for bit.
 *
 * Element i is kept when uniform(seed, stream, offset + i) >= p, uniform being
 * tensor/rng.c's pr_philox_uniform: Philox4x32-10 on the counter
 * (lo32(i), hi32(i), stream, 0) keyed by the 64-bit seed, then 53 bits of
 * words 0 and 1 times 2^-53. That product is exact (a power-of-two scale of
 * an integer below 2^53), so the double comparison with p is the CPU's
 * comparison exactly, and the kept value x * (float)(1/(1-p)) is the CPU's f32
 * product. The mask is recomputed in the backward from the node's iarg.
 * bf16 (a template over the storage type T): the same f32 product, rounded
 * once to bf16; the backward's dx += rounds once.
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

/* dst (=|+=) keep_i * src * scale */
template <class T>
__global__ void dropout_mask(T *dst, const T *src, int64_t n, uint64_t seed, uint32_t stream, uint64_t offset, double p,
                             float scale, bool acc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = pr_philox_uniform_dev(seed, stream, offset + (uint64_t)i) >= p ? __fmul_rn(pr_ld(src, i), scale) : 0.0f; /* no fma with the += */
        if (acc) pr_acc(dst, i, v);
        else pr_st(dst, i, v);
    }
}

template <class T>
static void dropout_launch(pr_ctx *ctx, const pr_node *n, T *dst, const T *src, int64_t numel, bool acc)
{
    if (numel == 0) return;
    double p = n->farg[0];
    float scale = (float)(1.0 / (1.0 - p));   /* the CPU's (T)scale */
    dropout_mask<<<pr_cuda_blocks(numel, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        dst, src, numel, (uint64_t)n->iarg[0], (uint32_t)n->iarg[1], (uint64_t)n->iarg[2], p, scale, acc);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_dropout_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) {
        using T = decltype(t);
        dropout_launch(ctx, n, (T *)n->out[0]->data, (const T *)x->data, x->numel, false);
    });
}

/* y = keep * x / (1-p) is linear with a diagonal Jacobian: dx += keep * dy / (1-p) */
extern "C" void pr_dropout_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *dx = pr_in_grad(n, 0);
    if (!dx) return;
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) {
        using T = decltype(t);
        dropout_launch(ctx, n, (T *)dx->data, (const T *)n->out[0]->grad->data, dx->numel, true);
    });
}
