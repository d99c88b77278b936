/* ops/cuda/ops_cuda.h: what the op kernels share. tensor/cuda.h (checks,
 * the allocator, shared-memory opt-in) plus what needs a context or a node:
 * the stream and cuBLAS handle of a context, the dtype checks of a node's
 * inputs, and (C++ only) the kernel kit of ops/cuda/rows.cuh. */
#ifndef PR_OPS_CUDA_H
#define PR_OPS_CUDA_H

#include "autograd/autograd.h"
#include "tensor/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the stream kernels launch on: the calling thread's (tensor/cuda.cu: the
 * legacy default stream, or the thread's own after pr_device_thread_begin,
 * or a capture's private one while a graph is captured); fatal without a
 * usable GPU */
cudaStream_t pr_cuda_stream(pr_ctx *ctx);
/* on that stream; math mode set from ctx->matmul_tf32 at every call:
 * CUBLAS_TF32_TENSOR_OP_MATH when set, else CUBLAS_DEFAULT_MATH (full fp32) */
cublasHandle_t pr_cublas(pr_ctx *ctx);

/* fatal unless every float input of n is f32 (the CUDA kernels' one dtype) */
static inline void pr_cuda_check_f32(const pr_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && pr_dtype_is_float(n->in[i]->dtype) && n->in[i]->dtype != PR_F32)
            pr_fatal("%s: CUDA kernels are f32 only (input %d is %s)", n->op->name, i, pr_dtype_name(n->in[i]->dtype));
}

/* the element type of n's float inputs, which its CUDA kernels read and
 * write: PR_F32, or PR_BF16 when every float input is bf16; fatal for f64
 * or a mix (the frontends cast what they mix) */
static inline pr_dtype pr_cuda_storage(const pr_node *n)
{
    int first = -1;
    for (int i = 0; i < n->n_in; i++) {
        const pr_tensor *t = n->in[i];
        if (!t || !pr_dtype_has_grad(t->dtype)) continue;
        if (t->dtype != PR_F32 && t->dtype != PR_BF16)
            pr_fatal("%s: CUDA kernels are f32 or bf16 only (input %d is %s)", n->op->name, i, pr_dtype_name(t->dtype));
        if (first < 0) first = i;
        else if (t->dtype != n->in[first]->dtype)
            pr_fatal("%s: CUDA takes float inputs all f32 or all bf16 (input %d is %s, input %d %s)", n->op->name, first,
                     pr_dtype_name(n->in[first]->dtype), i, pr_dtype_name(t->dtype));
    }
    return first < 0 ? PR_F32 : n->in[first]->dtype;
}

#ifdef __cplusplus
}
#endif

#include "ops/cuda/rows.cuh"
#endif
