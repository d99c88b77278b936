/* ops/reduce.cu: CUDA sum and mean over the last dim, and over everything.
 *
 * Node layout as ops/reduce.c: in[0] = x, out[0] = the sums. Sums
 * accumulate in double, like the CPU's, in a fixed tree (a warp or block per
 * row; two passes for the whole tensor), so every run gives the same bits.
 * Backward: dx[r, j] += dout[r] (divided by N for a mean), float4 stores.
 */
#include "ops/ops.h"
#include "tensor/cuda.h"

struct read_rc {
    const float *x;
    long long C;
    __device__ __forceinline__ double operator()(long long r, long long c) const { return x[r * C + c]; }
};
struct read_i {
    const float *x;
    __device__ __forceinline__ double operator()(long long i) const { return x[i]; }
};

__global__ static void store_scaled_kernel(const double *total, double scale, float *out)
{
    *out = (float)(*total * scale);
}

/* dx[i] += g[i / N] * scale over n elements */
__global__ static void spread_kernel(const float *g, long long N, float *dx, long long n, double scale, bool al)
{
    long long n4 = (n + 3) / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        long long j = 4 * i;
        bool v = al && j + 4 <= n;
        pr_f4 acc = pr_ld4(dx, j, n, v);
        long long r = j / N, c = j - r * N;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (j + k < n) acc.v[k] += (float)(g[r] * scale);
            if (++c == N) c = 0, r++;
        }
        pr_st4(dx, j, n, v, acc);
    }
}

static void reduce_rows_forward(pr_ctx *ctx, pr_node *n, bool mean)
{
    pr_cuda_check_f32(n);
    const pr_tensor *x = n->in[0];
    long long N = x->shape[x->ndim - 1], R = x->numel / N;
    pr_cuda_rowsum(pr_cuda_stream(ctx), read_rc{(const float *)x->data, N}, R, N, (float *)n->out[0]->data,
                   mean ? 1.0 / (double)N : 1.0, false);
}

static void reduce_all_forward(pr_ctx *ctx, pr_node *n, bool mean)
{
    pr_cuda_check_f32(n);
    const pr_tensor *x = n->in[0];
    cudaStream_t s = pr_cuda_stream(ctx);
    double *total = (double *)pr_cuda_malloc(sizeof(double));
    pr_cuda_sum(s, read_i{(const float *)x->data}, x->numel, total);
    store_scaled_kernel<<<1, 1, 0, s>>>(total, mean ? 1.0 / (double)x->numel : 1.0, (float *)n->out[0]->data);
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_free(total, sizeof(double));
}

/* N: elements per output element */
static void reduce_backward(pr_ctx *ctx, pr_node *n, long long N, bool mean)
{
    pr_tensor *gx = pr_in_grad(n, 0);
    if (!gx || gx->numel == 0) return;
    long long total = gx->numel;
    bool al = pr_aligned16(gx->data) && N % 4 == 0;
    spread_kernel<<<pr_cuda_blocks((total + 3) / 4, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (const float *)n->out[0]->grad->data, N, (float *)gx->data, total, mean ? 1.0 / (double)N : 1.0, al);
    PR_CUDA_LAUNCH_CHECK();
}

static long long last_dim(const pr_node *n) { return n->in[0]->shape[n->in[0]->ndim - 1]; }

extern "C" void pr_sum_forward_cuda(pr_ctx *ctx, pr_node *n) { reduce_rows_forward(ctx, n, false); }
extern "C" void pr_mean_forward_cuda(pr_ctx *ctx, pr_node *n) { reduce_rows_forward(ctx, n, true); }
extern "C" void pr_sum_all_forward_cuda(pr_ctx *ctx, pr_node *n) { reduce_all_forward(ctx, n, false); }
extern "C" void pr_mean_all_forward_cuda(pr_ctx *ctx, pr_node *n) { reduce_all_forward(ctx, n, true); }
extern "C" void pr_sum_backward_cuda(pr_ctx *ctx, pr_node *n) { reduce_backward(ctx, n, last_dim(n), false); }
extern "C" void pr_mean_backward_cuda(pr_ctx *ctx, pr_node *n) { reduce_backward(ctx, n, last_dim(n), true); }
extern "C" void pr_sum_all_backward_cuda(pr_ctx *ctx, pr_node *n) { reduce_backward(ctx, n, n->in[0]->numel, false); }
extern "C" void pr_mean_all_backward_cuda(pr_ctx *ctx, pr_node *n) { reduce_backward(ctx, n, n->in[0]->numel, true); }
