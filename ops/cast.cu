/* ops/cast.cu: CUDA forward and backward of pr_cast (ops/cast.c), and
 * pr_cuda_cast, the conversion kernel the bf16 paths of other ops share.
 *
 * f32 -> bf16 rounds to nearest even with tensor/tensor.c's integer rule
 * (a NaN keeps its payload, quieted), so both devices give the same bits;
 * bf16 -> f32 is exact. An accumulating cast adds in double and rounds the
 * sum once, as the CPU does: dst = round(dst + src). The conversions, which
 * the bf16 paths of the recurrence and TTT ops run on every input and
 * gradient they stage, move 16 bytes a load and a store where the pointers
 * allow (eight elements a thread; the scalar kernel takes the tail).
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

__device__ __forceinline__ float cast_ld(const void *p, int dt, long long i)
{
    if (dt == PR_BF16) return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
    return ((const float *)p)[i];
}
__device__ __forceinline__ void cast_st(void *p, int dt, long long i, double v)
{
    if (dt == PR_BF16) ((unsigned short *)p)[i] = pr_bf16_bits_once(v);
    else ((float *)p)[i] = __double2float_rn(v);
}

__global__ static void cast_kernel(void *dst, int ddt, const void *src, int sdt, long long n, bool acc)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        cast_st(dst, ddt, i, (acc ? (double)cast_ld(dst, ddt, i) : 0.0) + (double)cast_ld(src, sdt, i));
}

/* eight elements a thread: one 16-byte access on the bf16 side, two on the
 * f32 side; ACC: dst = round(dst + src), the sum in double as in cast_kernel */
template <bool ACC>
__global__ static void bf16_to_f32_x8(float4 *dst, const uint4 *src, long long n8)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
        const uint4 b = src[i];
        const unsigned w[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float4 y = make_float4(pr_bf16_lo(w[2 * h]), pr_bf16_hi(w[2 * h]), pr_bf16_lo(w[2 * h + 1]),
                                   pr_bf16_hi(w[2 * h + 1]));
            if (ACC) {
                const float4 d = dst[2 * i + h];
                y = make_float4(__double2float_rn((double)d.x + y.x), __double2float_rn((double)d.y + y.y),
                                __double2float_rn((double)d.z + y.z), __double2float_rn((double)d.w + y.w));
            }
            dst[2 * i + h] = y;
        }
    }
}
/* two bf16 (lo, hi) in a word: x rounded, or with ACC old + x rounded once */
template <bool ACC>
__device__ __forceinline__ unsigned bf16_pair(unsigned old, float lo, float hi)
{
    if (!ACC) return (unsigned)pr_bf16_bits(lo) | (unsigned)pr_bf16_bits(hi) << 16;
    return (unsigned)pr_bf16_bits_once((double)pr_bf16_lo(old) + lo) |
           (unsigned)pr_bf16_bits_once((double)pr_bf16_hi(old) + hi) << 16;
}
template <bool ACC>
__global__ static void f32_to_bf16_x8(uint4 *dst, const float4 *src, long long n8)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
        const float4 a = src[2 * i], b = src[2 * i + 1];
        const uint4 o = ACC ? dst[i] : make_uint4(0u, 0u, 0u, 0u);
        dst[i] = make_uint4(bf16_pair<ACC>(o.x, a.x, a.y), bf16_pair<ACC>(o.y, a.z, a.w), bf16_pair<ACC>(o.z, b.x, b.y),
                            bf16_pair<ACC>(o.w, b.z, b.w));
    }
}

extern "C" void pr_cuda_cast(cudaStream_t s, void *dst, pr_dtype ddt, const void *src, pr_dtype sdt, long long n,
                             bool acc)
{
    PR_CHECK((ddt == PR_F32 || ddt == PR_BF16) && (sdt == PR_F32 || sdt == PR_BF16),
             "cast: CUDA converts between f32 and bf16 only, not %s -> %s", pr_dtype_name(sdt), pr_dtype_name(ddt));
    if (n == 0) return;
    long long done = 0;
    if (sdt != ddt && pr_aligned16(dst) && pr_aligned16(src) && n >= 8) {
        const long long n8 = n / 8;
        const unsigned blocks = pr_cuda_blocks(n8, 256);
        float4 *f4 = (float4 *)(sdt == PR_BF16 ? dst : (void *)src);
        uint4 *b8 = (uint4 *)(sdt == PR_BF16 ? (void *)src : dst);
        if (sdt == PR_BF16 && acc) bf16_to_f32_x8<true><<<blocks, 256, 0, s>>>(f4, b8, n8);
        else if (sdt == PR_BF16) bf16_to_f32_x8<false><<<blocks, 256, 0, s>>>(f4, b8, n8);
        else if (acc) f32_to_bf16_x8<true><<<blocks, 256, 0, s>>>(b8, f4, n8);
        else f32_to_bf16_x8<false><<<blocks, 256, 0, s>>>(b8, f4, n8);
        PR_CUDA_LAUNCH_CHECK();
        done = 8 * n8;
        if (done == n) return;
    }
    const size_t ds = ddt == PR_BF16 ? 2 : 4, ss = sdt == PR_BF16 ? 2 : 4;
    cast_kernel<<<pr_cuda_blocks(n - done, 256), 256, 0, s>>>((char *)dst + done * ds, (int)ddt,
                                                               (const char *)src + done * ss, (int)sdt, n - done, acc);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_cast_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *y = n->out[0];
    pr_cuda_cast(pr_cuda_stream(ctx), y->data, y->dtype, x->data, x->dtype, y->numel, false);
}

extern "C" void pr_cast_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *dx = pr_in_grad(n, 0);
    const pr_tensor *dy = n->out[0]->grad;
    if (dx) pr_cuda_cast(pr_cuda_stream(ctx), dx->data, dx->dtype, dy->data, dy->dtype, dx->numel, true);
}
