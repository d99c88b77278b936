/* tensor/cuda.h: what .cu files share. Included only by CUDA sources.
 *
 * Every CUDA, cuBLAS and cuRAND call goes through a CHECK macro that names
 * file, line and the call. A context's CUDA state (stream, cuBLAS handle) is
 * created on first use; kernels launch on pr_cuda_stream(ctx).
 */
#ifndef PR_CUDA_H
#define PR_CUDA_H

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PR_CUDA_CHECK(call)                                                              \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess)                                                           \
            pr_fatal("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)
#define PR_CUBLAS_CHECK(call)                                                            \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            pr_fatal("%s:%d: %s failed: cuBLAS status %d", __FILE__, __LINE__, #call, (int)s_); \
    } while (0)
/* after a kernel launch: catches bad launch configurations at once */
#define PR_CUDA_LAUNCH_CHECK() PR_CUDA_CHECK(cudaGetLastError())

cudaStream_t pr_cuda_stream(pr_ctx *ctx);     /* the context's stream (created on first use) */
cublasHandle_t pr_cublas(pr_ctx *ctx);        /* bound to that stream, math mode per ctx->matmul_tf32 */
void pr_cuda_set_stream(pr_ctx *ctx, cudaStream_t s);

/* the caching allocator (pr_cuda_malloc / pr_cuda_free, declared in tensor.h) */
void pr_cuda_empty_cache(void);

static inline unsigned pr_cuda_blocks(long long n, int threads)
{
    long long b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 65535LL * 32 ? 65535LL * 32 : b));
}

#ifdef __cplusplus
}
#endif
#endif
