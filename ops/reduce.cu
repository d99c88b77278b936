/* ops/reduce.cu: CUDA sum and mean over the last dim, and over everything.
 *
 * Node layout as ops/reduce.c: in[0] = x, out[0] = the sums. Sums
 * accumulate in double, like the CPU's, in a fixed tree (a warp or block per
 * row; two passes for the whole tensor), so every run gives the same bits.
 * Backward: dx[r, j] += dout[r] (divided by N for a mean), four elements a
 * store. f32 or bf16 x and out, in any pairing (reduce_switch).
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

/* The element types: T of x and its grad, O of out and its grad, each float
 * or pr_bf16 (the frontend picks out's dtype; a bf16 x may sum into an f32
 * out). Sums are in double and stored rounded once either way. */
template <class T> struct read_rc {
    const T *x;
    long long C;
    __device__ __forceinline__ double operator()(long long r, long long c) const { return pr_ld(x, r * C + c); }
};
template <class T> struct read_i {
    const T *x;
    __device__ __forceinline__ double operator()(long long i) const { return pr_ld(x, i); }
};

template <class O> __global__ void store_scaled_kernel(const double *total, double scale, O *out)
{
    pr_st_d(out, 0, *total * scale);
}

/* dx[i] += g[i / N] * scale over n elements */
template <class T, class O>
__global__ void spread_kernel(const O *g, long long N, T *dx, long long n, double scale, bool al)
{
    long long n4 = (n + 3) / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        long long j = 4 * i;
        bool v = al && j + 4 <= n;
        pr_f4 add = {{0, 0, 0, 0}};
        long long r = j / N, c = j - r * N;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (j + k < n) add.v[k] = (float)(pr_ld(g, r) * scale);
            if (++c == N) c = 0, r++;
        }
        pr_acc4(dx, j, n, v, add);
    }
}

/* f(T(), O()) for the node's x and out types */
template <class F> static void reduce_switch(const pr_node *n, F f)
{
    const pr_tensor *out = n->out[0];
    PR_CHECK(out->dtype == PR_F32 || out->dtype == PR_BF16, "%s: CUDA sums into f32 or bf16, not %s", n->op->name,
             pr_dtype_name(out->dtype));
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) {
        pr_cuda_storage_switch(out->dtype, [&](auto o) { f(t, o); });
    });
}

static void reduce_rows_forward(pr_ctx *ctx, pr_node *n, bool mean)
{
    reduce_switch(n, [&](auto t, auto o) {
        using T = decltype(t);
        using O = decltype(o);
        const pr_tensor *x = n->in[0];
        long long N = x->shape[x->ndim - 1], R = x->numel / N;
        pr_cuda_rowsum(pr_cuda_stream(ctx), read_rc<T>{(const T *)x->data, N}, R, N, (O *)n->out[0]->data,
                       mean ? 1.0 / (double)N : 1.0, false);
    });
}

static void reduce_all_forward(pr_ctx *ctx, pr_node *n, bool mean)
{
    reduce_switch(n, [&](auto t, auto o) {
        using T = decltype(t);
        using O = decltype(o);
        const pr_tensor *x = n->in[0];
        cudaStream_t s = pr_cuda_stream(ctx);
        double *total = (double *)pr_cuda_malloc(sizeof(double));
        pr_cuda_sum(s, read_i<T>{(const T *)x->data}, x->numel, total);
        store_scaled_kernel<<<1, 1, 0, s>>>(total, mean ? 1.0 / (double)x->numel : 1.0, (O *)n->out[0]->data);
        PR_CUDA_LAUNCH_CHECK();
        pr_cuda_free(total, sizeof(double));
    });
}

/* N: elements per output element */
static void reduce_backward(pr_ctx *ctx, pr_node *n, long long N, bool mean)
{
    pr_tensor *gx = pr_in_grad(n, 0);
    if (!gx || gx->numel == 0) return;
    reduce_switch(n, [&](auto t, auto o) {
        using T = decltype(t);
        using O = decltype(o);
        long long total = gx->numel;
        bool al = pr_aligned16(gx->data) && N % 4 == 0;
        spread_kernel<<<pr_cuda_blocks((total + 3) / 4, 256), 256, 0, pr_cuda_stream(ctx)>>>(
            (const O *)n->out[0]->grad->data, N, (T *)gx->data, total, mean ? 1.0 / (double)N : 1.0, al);
        PR_CUDA_LAUNCH_CHECK();
    });
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
