/* ops/gate.cu: CUDA forward and backward of the decay gate (ops/gate.c),
 * f32: g = -exp(A_log[h]) softplus(a + dt_bias[h]) elementwise; the
 * backward's da elementwise, and the two [H] grads by the deterministic
 * column sums of rows.cuh (a [R, H] viewed as R rows of H heads).
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"


__global__ void decay_gate_forward_kernel(float *g, const float *a, const float *A_log, const float *dt_bias, long long N,
                                          long long H)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < N; i += (long long)gridDim.x * blockDim.x) {
        const long long h = i % H;
        g[i] = -expf(A_log[h]) * pr_softplusf(a[i] + dt_bias[h]);
    }
}

/* da += dg (-exp(A_log)) sigmoid(z) */
__global__ void decay_gate_da_kernel(float *da, const float *dg, const float *a, const float *A_log,
                                     const float *dt_bias, long long N, long long H)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < N; i += (long long)gridDim.x * blockDim.x) {
        const long long h = i % H;
        const float z = a[i] + dt_bias[h];
        da[i] += dg[i] * -expf(A_log[h]) * pr_softplus_gradf(z);
    }
}

/* a row's share of d dt_bias[h] (da) or of d A_log[h] (dg g) */
struct gate_dsum {
    const float *dg, *a, *A_log, *dt_bias;
    long long H;
    bool of_log;
    __device__ __forceinline__ double operator()(long long r, long long h) const
    {
        const long long i = r * H + h;
        const float z = a[i] + dt_bias[h], e = -expf(A_log[h]);
        return (double)(dg[i] * e * (of_log ? pr_softplusf(z) : pr_softplus_gradf(z)));
    }
};

extern "C" void pr_decay_gate_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *a = n->in[0];
    const long long N = a->numel, H = a->shape[a->ndim - 1];
    if (N == 0) return;
    decay_gate_forward_kernel<<<pr_cuda_blocks(N, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (float *)n->out[0]->data, (const float *)a->data, (const float *)n->in[1]->data,
        (const float *)n->in[2]->data, N, H);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_decay_gate_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *a = n->in[0];
    pr_tensor *da = pr_in_grad(n, 0), *dl = pr_in_grad(n, 1), *db = pr_in_grad(n, 2);
    const long long N = a->numel, H = a->shape[a->ndim - 1];
    if (N == 0) return;
    cudaStream_t s = pr_cuda_stream(ctx);
    const float *dg = (const float *)n->out[0]->grad->data, *ap = (const float *)a->data;
    const float *lp = (const float *)n->in[1]->data, *bp = (const float *)n->in[2]->data;
    if (da) {
        decay_gate_da_kernel<<<pr_cuda_blocks(N, 256), 256, 0, s>>>((float *)da->data, dg, ap, lp, bp, N, H);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (db) pr_cuda_colsum_add(s, gate_dsum{dg, ap, lp, bp, H, false}, N / H, H, (float *)db->data, 1.0);
    if (dl) pr_cuda_colsum_add(s, gate_dsum{dg, ap, lp, bp, H, true}, N / H, H, (float *)dl->data, 1.0);
}
