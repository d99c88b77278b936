/* ops/cast.cu: CUDA forward and backward of pr_cast (ops/cast.c), and
 * pr_cuda_cast, the conversion kernel the bf16 paths of other ops share.
 *
 * f32 -> bf16 rounds to nearest even (__float2bfloat16_rn, the CPU's
 * rounding); bf16 -> f32 is exact. An accumulating cast adds in double and
 * rounds the sum once, as the CPU does: dst = round(dst + src), the same bits
 * on both devices.
 */
#include <cuda_bf16.h>

#include "ops/ops.h"
#include "tensor/cuda.h"

__device__ __forceinline__ float cast_ld(const void *p, int dt, long long i)
{
    if (dt == PR_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}
/* v rounded once to bf16: when the f32 rounding of v lands on a bf16 tie, a
 * one-ulp nudge toward v breaks the tie v's way (tensor/tensor.c's rule) */
__device__ __forceinline__ __nv_bfloat16 cast_bf16_of(double v)
{
    float f = __double2float_rn(v);
    const unsigned u = __float_as_uint(f);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    if (!nan && (u & 0xffffu) == 0x8000u && (double)f != v) f = __uint_as_float(fabs(v) > fabs((double)f) ? u + 1 : u - 1);
    return __float2bfloat16_rn(f);
}
__device__ __forceinline__ void cast_st(void *p, int dt, long long i, double v)
{
    if (dt == PR_BF16) ((__nv_bfloat16 *)p)[i] = cast_bf16_of(v);
    else ((float *)p)[i] = __double2float_rn(v);
}

__global__ static void cast_kernel(void *dst, int ddt, const void *src, int sdt, long long n, bool acc)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        cast_st(dst, ddt, i, (acc ? (double)cast_ld(dst, ddt, i) : 0.0) + (double)cast_ld(src, sdt, i));
}

extern "C" void pr_cuda_cast(cudaStream_t s, void *dst, pr_dtype ddt, const void *src, pr_dtype sdt, long long n,
                             bool acc)
{
    PR_CHECK((ddt == PR_F32 || ddt == PR_BF16) && (sdt == PR_F32 || sdt == PR_BF16),
             "cast: CUDA converts between f32 and bf16 only, not %s -> %s", pr_dtype_name(sdt), pr_dtype_name(ddt));
    if (n == 0) return;
    cast_kernel<<<pr_cuda_blocks(n, 256), 256, 0, s>>>(dst, (int)ddt, src, (int)sdt, n, acc);
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
