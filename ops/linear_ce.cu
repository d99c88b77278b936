/* ops/linear_ce.cu: CUDA linear_cross_entropy (f32; bf16 inputs are staged
 * through f32 copies, ops/ops.def). ops/linear_ce.c says what it computes.
 *
 * Before the chunks, the kept rows and the out-of-range targets are counted
 * on the device (tot[1], tot[2]), so every kernel reads 1/count from there
 * and nothing waits for the host. Per chunk of rows:
 *   l = x_c op(w)                       cuBLAS sgemm into a [rows, V] buffer
 *   lce_rows_kernel                     a group of threads a row: max, lse, the
 *                                       row's loss term, and (recorded) l
 *                                       overwritten by dl = (softmax - onehot)/count
 *   dx_c = dl op(w)^T, dw += ...        two more sgemms (dw: beta 1 after the first chunk)
 * then the loss is the fixed-order sum of the row terms over count. As
 * cross_entropy's CUDA forward, one sync per call reads the bad-target count
 * back (a bad target is fatal with the CPU's message); captured into a CUDA
 * graph, it is skipped (the task checks its labels on the host). The
 * backward scales the saved dx, dw by the loss's grad and adds them.
 */
#include <math.h>

#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

__device__ __forceinline__ long long lce_target(const void *t, bool is64, long long r)
{
    return is64 ? ((const long long *)t)[r] : ((const int *)t)[r];
}

/* rows [r0, r0 + rows) whose logits l holds: loss_rows[r] = lse - l[t] (0 when
 * ignored); with grad, l becomes dl in place. The lane owning the target's
 * chunk reads l[t] before it overwrites it, so no lane waits on another. */
template <int G, int S>
__global__ void PR_ROW_BOUNDS(G)
    lce_rows_kernel(float *l, const void *tgt, bool is64, long long ignore, long long r0, long long rows, long long V,
                    const double *tot, float *loss_rows, bool grad, bool vec)
{
    bool ok;
    int lane;
    long long i = pr_row_index<G>(rows, &ok, &lane);
    float *lr = l + i * V;
    long long t = lce_target(tgt, is64, r0 + i);
    const bool kept = t != ignore && t >= 0 && t < V;   /* a bad target fails after the forward */
    const float inv = tot[1] > 0 ? (float)(1.0 / tot[1]) : 0.0f;
    pr_f4 xs[S];
    pr_row_load<G, S>(xs, lr, V, vec, lane);
    float mx, sum;
    pr_row_max_sumexp<G, S>(xs, lr, V, vec, lane, &mx, &sum);
    const float lse = mx + logf(sum);
    if (ok && lane == 0 && !kept) loss_rows[r0 + i] = 0.0f;
    pr_row_chunks<G, S>(V, lane, [&](long long j, int k) {
        pr_f4 v = pr_row_get(xs, lr, j, V, vec, k), d;
        if (ok && kept && t >= j && t < j + 4) loss_rows[r0 + i] = lse - v.v[t - j];
        if (!grad || !ok) return;
#pragma unroll
        for (int q = 0; q < 4; q++) d.v[q] = kept ? inv * (expf(v.v[q] - lse) - (j + q == t ? 1.0f : 0.0f)) : 0.0f;
        pr_st4(lr, j, V, vec, d);
    });
}

struct lce_read_f {
    const float *p;
    __device__ __forceinline__ double operator()(long long i) const { return p[i]; }
};
/* kept rows (bad = false) or kept rows whose class is out of [0, V) (bad = true) */
struct lce_count {
    const void *t;
    bool is64, bad;
    long long ignore, V;
    __device__ __forceinline__ double operator()(long long i) const
    {
        long long v = lce_target(t, is64, i);
        if (v == ignore) return 0.0;
        return bad ? (v < 0 || v >= V ? 1.0 : 0.0) : 1.0;
    }
};

__global__ static void lce_finish_kernel(const double *tot, float *out)
{
    *out = (float)(tot[1] > 0 ? tot[0] / tot[1] : 0.0);
}

/* dst += g * src, g the loss's grad on the device */
__global__ static void lce_scale_add_kernel(float *dst, const float *src, const float *g, long long n)
{
    const float gs = *g;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x)
        dst[k] += gs * src[k];
}

static int lce_int(const char *what, long long v)
{
    PR_CHECK(v >= 0 && v <= INT32_MAX, "linear_cross_entropy: %s %lld does not fit cuBLAS's int", what, v);
    return (int)v;
}

/* row-major C[M,N] = op(A) op(B) + beta C (A [M,K] or [K,M] when ta; B [K,N] or [N,K] when tb):
 * column-major cuBLAS computes C^T = op(B)^T op(A)^T */
static void lce_gemm(pr_ctx *ctx, bool ta, bool tb, long long M, long long N, long long K, const float *A,
                     const float *B, float *C, float beta)
{
    const float one = 1.0f;
    const int m = lce_int("rows", M), nn = lce_int("cols", N), k = lce_int("depth", K);
    PR_CUBLAS_CHECK(cublasSgemm(pr_cublas(ctx), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, nn, m,
                                k, &one, B, tb ? k : nn, A, ta ? m : k, &beta, C, nn));
}

/* the CPU's message for the first out-of-range target */
static void lce_report_bad_target(const pr_tensor *t, long long ignore, long long V)
{
    size_t bytes = pr_nbytes(t);
    void *h = malloc(bytes ? bytes : 1);
    PR_CHECK(h, "linear_cross_entropy: out of host memory");
    pr_cuda_memcpy(h, t->data, bytes, 0, 1);   /* on the thread's stream (tensor/cuda.cu) */
    for (long long r = 0; r < t->numel; r++) {
        long long v = t->dtype == PR_I64 ? ((const int64_t *)h)[r] : ((const int32_t *)h)[r];
        if (v != ignore && (v < 0 || v >= V)) {
            free(h);
            pr_fatal("linear_cross_entropy: target %lld at index %lld is out of range [0, %lld) (ignore_index %lld)",
                     v, r, V, ignore);
        }
    }
    free(h);
}

extern "C" void pr_linear_cross_entropy_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_check_f32(n);
    const pr_tensor *x = n->in[0], *w = n->in[1], *t = n->in[2];
    pr_tensor *dx = n->n_saved ? n->saved[0] : NULL, *dw = n->n_saved ? n->saved[1] : NULL;
    const bool trans_w = n->iarg[1] != 0, is64 = t->dtype == PR_I64, grad = dx || dw;
    const long long D = x->shape[x->ndim - 1], N = x->numel / D, V = w->shape[trans_w ? 0 : 1], ignore = n->iarg[0];
    const long long chunk = n->iarg[2] > 0 ? n->iarg[2] : pr_linear_ce_chunk_rows(V), cap = chunk < N ? chunk : N;
    cudaStream_t s = pr_cuda_stream(ctx);
    double *tot = (double *)pr_cuda_malloc(3 * sizeof(double));
    pr_cuda_sum(s, lce_count{t->data, is64, false, ignore, V}, N, tot + 1);
    pr_cuda_sum(s, lce_count{t->data, is64, true, ignore, V}, N, tot + 2);
    const size_t lbytes = sizeof(float) * (size_t)(cap > 0 ? cap : 1) * (size_t)V;
    float *l = (float *)pr_cuda_malloc(lbytes), *loss_rows = (float *)pr_cuda_malloc(sizeof(float) * (size_t)(N + 1));
    const float *xp = (const float *)x->data, *wp = (const float *)w->data;
    if (dw && N == 0) PR_CUDA_CHECK(cudaMemsetAsync(dw->data, 0, pr_nbytes(dw), s));
    for (long long r0 = 0; r0 < N; r0 += chunk) {
        const long long rows = N - r0 < chunk ? N - r0 : chunk;
        const float *xc = xp + r0 * D;
        lce_gemm(ctx, false, trans_w, rows, V, D, xc, wp, l, 0.0f);   /* l = x_c op(w) */
        const bool vec = V % 4 == 0 && pr_aligned16(l);
        pr_cuda_row_dispatch(V, [&](auto g) {
            constexpr int G = decltype(g)::G, S = decltype(g)::S;
            lce_rows_kernel<G, S><<<pr_row_blocks<G>(rows), pr_row_threads<G>(), 0, s>>>(
                l, t->data, is64, ignore, r0, rows, V, tot, loss_rows, grad, vec);
        });
        PR_CUDA_LAUNCH_CHECK();
        if (dx) lce_gemm(ctx, false, !trans_w, rows, D, V, l, wp, (float *)dx->data + r0 * D, 0.0f);
        const float beta = r0 == 0 ? 0.0f : 1.0f;
        if (dw && trans_w) lce_gemm(ctx, true, false, V, D, rows, l, xc, (float *)dw->data, beta);   /* dl^T x_c */
        else if (dw) lce_gemm(ctx, true, false, D, V, rows, xc, l, (float *)dw->data, beta);         /* x_c^T dl */
    }
    pr_cuda_sum(s, lce_read_f{loss_rows}, N, tot);
    lce_finish_kernel<<<1, 1, 0, s>>>(tot, (float *)n->out[0]->data);
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_free(l, lbytes);
    pr_cuda_free(loss_rows, sizeof(float) * (size_t)(N + 1));
    if (pr_cuda_capturing()) {   /* nothing has run yet: the labels were checked on the host */
        pr_cuda_free(tot, 3 * sizeof(double));
        return;
    }
    double bad;
    PR_CUDA_CHECK(cudaMemcpyAsync(&bad, tot + 2, sizeof bad, cudaMemcpyDeviceToHost, s));
    PR_CUDA_CHECK(cudaStreamSynchronize(s));
    pr_cuda_free(tot, 3 * sizeof(double));
    if (bad > 0) lce_report_bad_target(t, ignore, V);
}

extern "C" void pr_linear_cross_entropy_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_check_f32(n);
    PR_CHECK(n->n_saved == 2, "linear_cross_entropy: backward of a forward that kept no gradients");
    cudaStream_t s = pr_cuda_stream(ctx);
    const float *g = (const float *)n->out[0]->grad->data;
    for (int i = 0; i < 2; i++) {
        pr_tensor *gi = pr_in_grad(n, i), *src = n->saved[i];
        if (!gi || !src || gi->numel == 0) continue;
        long long blocks = (gi->numel + 255) / 256;
        lce_scale_add_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(
            (float *)gi->data, (const float *)src->data, g, gi->numel);
        PR_CUDA_LAUNCH_CHECK();
    }
}
