/* ops/cuda/context.cu: a context's stream and cuBLAS handle. The state
 * itself (tensor/cuda.cu) is made on a context's first CUDA op and freed
 * with the context (pr_cuda_ctx_release). */
#include "ops/cuda/ops_cuda.h"

static pr_cuda_state *state_of(pr_ctx *ctx)
{
    if (!ctx->cuda) ctx->cuda = pr_cuda_state_new();
    return (pr_cuda_state *)ctx->cuda;
}

extern "C" cudaStream_t pr_cuda_stream(pr_ctx *ctx)
{
    (void)state_of(ctx); /* the GPU check */
    return pr_cuda_the_stream();
}

extern "C" cublasHandle_t pr_cublas(pr_ctx *ctx)
{
    return pr_cuda_state_cublas(state_of(ctx), ctx->matmul_tf32);
}
