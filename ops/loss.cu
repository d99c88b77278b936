/* ops/loss.cu: CUDA cross_entropy, bce_logits and score_rows (f32 or bf16 logits and
 * float targets: the kernels are templates over their storage type T; the
 * math, lse and the sums are f32/f64 either way, and the loss (a scalar) is
 * stored in whatever dtype the frontend gave it, f32 or bf16, rounded once;
 * each bf16 grad element is rounded once). Under bf16 autocast the
 * frontend gives bf16 logits an f32 loss and no cast: the bf16 instance then
 * gives the f32 kernel's bits on widened logits (exact loads, the same f32
 * math, and pr_acc4 rounds old + dx once, as the cast's backward would).
 *
 * cross_entropy: a warp or block per row computes lse = logsumexp(x_r) and
 * the row's loss lse - x_r[t_r]; the mean over kept rows is a fixed-order sum
 * (pr_cuda_sum). The forward then reads the number of kept rows and of
 * out-of-range targets back to the host (one sync per call): a bad target is
 * fatal as on the CPU, and the count goes into iarg[1] for the backward
 * (captured into a CUDA graph: iarg[1] = -1 and saved[1] the device sums).
 * Node: in = {logits, targets}, iarg[0] = ignore_index, iarg[1] = count
 * (set here), saved[0] = lse per row (set here when recorded; the CPU saves nothing).
 *   dx_rc += g/count (softmax(x_r)_c - [c == t_r]) for kept rows.
 * bce_logits: mean of max(x,0) - x t + log(1 + e^-|x|);
 *   dx += g/N (sigmoid(x) - t), dt += -g/N x.
 */
#include <math.h>

#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

__device__ __forceinline__ long long target_at(const void *t, bool is64, long long r)
{
    return is64 ? ((const long long *)t)[r] : ((const int *)t)[r];
}

/* the 0-dim loss or its grad, f32 or bf16 */
__device__ __forceinline__ float scalar_ld(const void *p, bool bf16)
{
    return bf16 ? pr_ld((const pr_bf16 *)p, 0) : *(const float *)p;
}
__device__ __forceinline__ void scalar_st(void *p, bool bf16, double v)
{
    if (bf16) pr_st_d((pr_bf16 *)p, 0, v);
    else *(float *)p = (float)v;
}
/* the loss tensor's dtype, f32 or bf16 */
static bool loss_is_bf16(const pr_tensor *loss)
{
    PR_CHECK(loss->dtype == PR_F32 || loss->dtype == PR_BF16, "loss: CUDA stores the loss in f32 or bf16, not %s",
             pr_dtype_name(loss->dtype));
    return loss->dtype == PR_BF16;
}

/* ---- cross_entropy ------------------------------------------------------------------- */

template <int G, int S, class T>
__global__ void PR_ROW_BOUNDS(G)
    ce_rows_kernel(const T *x, const void *tgt, bool is64, long long ignore, long long R, long long C, float *lse_out,
                   float *loss_out, bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    const T *xr = x + r * C;
    pr_f4 xs[S];
    pr_row_load<G, S>(xs, xr, C, vec, lane);
    float mx, sum;
    pr_row_max_sumexp<G, S>(xs, xr, C, vec, lane, &mx, &sum);
    if (!ok || lane != 0) return;
    float lse = mx + logf(sum);
    long long t = target_at(tgt, is64, r);
    lse_out[r] = lse;
    loss_out[r] = t == ignore || t < 0 || t >= C ? 0.0f : lse - pr_ld(xr, t);
}

/* g: the loss's grad, bf16 when g_bf16 */
template <int G, int S, class T>
__global__ void PR_ROW_BOUNDS(G)
    ce_backward_kernel(const T *x, const void *tgt, bool is64, long long ignore, const float *lse, const void *g,
                       bool g_bf16, double inv_count, const double *count_dev, T *dx, long long R, long long C,
                       bool vec)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    long long t = target_at(tgt, is64, r);
    if (!ok || t == ignore) return;
    if (count_dev) {   /* a captured step: the count the forward left on the device (the same division) */
        if (count_dev[1] == 0) return;
        inv_count = 1.0 / count_dev[1];
    }
    float gs = (float)(scalar_ld(g, g_bf16) * inv_count), l = lse[r];
    const T *xr = x + r * C;
    T *dxr = dx + r * C;
    pr_row_chunks<G, S>(C, lane, [&](long long j, int i) {
        pr_f4 v = pr_ld4(xr, j, C, vec), add;
#pragma unroll
        for (int k = 0; k < 4; k++) add.v[k] = gs * (expf(v.v[k] - l) - (j + k == t ? 1.0f : 0.0f));
        pr_acc4(dxr, j, C, vec, add);
    });
}

struct read_f {
    const float *p;
    __device__ __forceinline__ double operator()(long long i) const { return p[i]; }
};
/* kept rows (bad = false) or kept rows whose class is out of [0, C) (bad = true) */
struct count_targets {
    const void *t;
    bool is64, bad;
    long long ignore, C;
    __device__ __forceinline__ double operator()(long long i) const
    {
        long long v = target_at(t, is64, i);
        if (v == ignore) return 0.0;
        return bad ? (v < 0 || v >= C ? 1.0 : 0.0) : 1.0;
    }
};

/* out = sum / count, or 0 with no kept row */
__global__ static void ce_finish_kernel(const double *tot, void *out, bool bf16)
{
    scalar_st(out, bf16, tot[1] > 0 ? tot[0] / tot[1] : 0.0);
}

/* the message the CPU gives for the first out-of-range target */
static void ce_report_bad_target(const pr_tensor *t, long long ignore, long long C)
{
    size_t bytes = pr_nbytes(t);
    void *h = malloc(bytes ? bytes : 1);
    PR_CHECK(h, "cross_entropy: out of host memory");
    pr_cuda_memcpy(h, t->data, bytes, 0, 1);   /* on the thread's stream (tensor/cuda.cu) */
    for (long long r = 0; r < t->numel; r++) {
        long long v = t->dtype == PR_I64 ? ((const int64_t *)h)[r] : ((const int32_t *)h)[r];
        if (v != ignore && (v < 0 || v >= C)) {
            free(h);
            pr_fatal("cross_entropy: target %lld at index %lld is out of range [0, %lld) (ignore_index %lld)", v, r, C,
                     ignore);
        }
    }
    free(h);
}

template <class T> static void cross_entropy_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *t = n->in[1];
    long long C = x->shape[x->ndim - 1], R = x->numel / C, ignore = n->iarg[0];
    bool is64 = t->dtype == PR_I64;
    cudaStream_t s = pr_cuda_stream(ctx);
    /* lse is for the backward: kept only when the node is recorded */
    float *lse;
    if (n->recording) {
        pr_tensor *kept = pr_op_output(ctx, PR_F32, PR_CUDA, x->ndim - 1, x->shape);
        lse = (float *)kept->data;
        n->saved[0] = kept;
        n->n_saved = 1;
    } else {
        lse = (float *)pr_cuda_malloc(sizeof(float) * (size_t)R);
    }
    float *loss = (float *)pr_cuda_malloc(sizeof(float) * (size_t)R);
    /* loss sum, kept rows, bad targets. Captured into a CUDA graph, nothing
     * has run yet: the count stays on the device for the backward (iarg[1] =
     * -1) and the target check is the eager steps' before the capture. */
    const bool captured = pr_cuda_capturing();
    double *tot;
    if (captured && n->recording) {
        const int64_t three[1] = {3};
        pr_tensor *kept = pr_op_output(ctx, PR_F64, PR_CUDA, 1, three);
        tot = (double *)kept->data;
        n->saved[1] = kept;
        n->n_saved = 2;
    } else {
        tot = (double *)pr_cuda_malloc(3 * sizeof(double));
    }
    bool vec = C % 4 == 0 && pr_aligned16(x->data);
    pr_cuda_row_dispatch(C, [&](auto g) {
        constexpr int G = decltype(g)::G, S = decltype(g)::S;
        ce_rows_kernel<G, S><<<pr_row_blocks<G>(R), pr_row_threads<G>(), 0, s>>>(
            (const T *)x->data, t->data, is64, ignore, R, C, lse, loss, vec);
    });
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_sum(s, read_f{loss}, R, tot);
    pr_cuda_sum(s, count_targets{t->data, is64, false, ignore, C}, R, tot + 1);
    pr_cuda_sum(s, count_targets{t->data, is64, true, ignore, C}, R, tot + 2);
    ce_finish_kernel<<<1, 1, 0, s>>>(tot, n->out[0]->data, loss_is_bf16(n->out[0]));
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_free(loss, sizeof(float) * (size_t)R);
    if (!n->recording) pr_cuda_free(lse, sizeof(float) * (size_t)R);
    if (captured) {
        if (!n->recording) pr_cuda_free(tot, 3 * sizeof(double));
        n->iarg[1] = -1;
        return;
    }
    double h[3];
    PR_CUDA_CHECK(cudaMemcpyAsync(h, tot, sizeof h, cudaMemcpyDeviceToHost, s));
    PR_CUDA_CHECK(cudaStreamSynchronize(s));
    pr_cuda_free(tot, 3 * sizeof(double));
    if (h[2] > 0) ce_report_bad_target(t, ignore, C);
    n->iarg[1] = (int64_t)h[1];
}

template <class T> static void cross_entropy_backward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *t = n->in[1];
    pr_tensor *gx = pr_in_grad(n, 0);
    long long C = x->shape[x->ndim - 1], R = x->numel / C, count = n->iarg[1];
    if (!gx || count == 0) return;
    const double *count_dev = count < 0 ? (const double *)n->saved[1]->data : NULL;   /* captured */
    bool vec = C % 4 == 0 && pr_aligned16(x->data) && pr_aligned16(gx->data);
    cudaStream_t s = pr_cuda_stream(ctx);
    pr_cuda_row_dispatch(C, [&](auto g) {
        constexpr int G = decltype(g)::G, S = decltype(g)::S;
        ce_backward_kernel<G, S><<<pr_row_blocks<G>(R), pr_row_threads<G>(), 0, s>>>(
            (const T *)x->data, t->data, t->dtype == PR_I64, n->iarg[0], (const float *)n->saved[0]->data,
            n->out[0]->grad->data, loss_is_bf16(n->out[0]->grad), count_dev ? 0.0 : 1.0 / (double)count, count_dev,
            (T *)gx->data, R, C, vec);
    });
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_cross_entropy_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { cross_entropy_forward<decltype(t)>(ctx, n); });
}
extern "C" void pr_cross_entropy_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { cross_entropy_backward<decltype(t)>(ctx, n); });
}

/* ---- score_rows (ops.h): a warp a row, in double ------------------------------------ */

/* each lane keeps the first max of its columns; the butterfly keeps the larger
 * value and, on a tie, the lower column: the row's first argmax, as the CPU's */
template <class T>
__global__ void score_rows_kernel(const T *x, const int *labels, int ignore, long long R, long long C, double *loss,
                                  int *hit)
{
    const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (r >= R) return;   /* the whole warp: r is the warp's */
    const int t = labels[r];
    if (t == ignore) {
        if (lane == 0) loss[r] = 0, hit[r] = 0;
        return;
    }
    const T *xr = x + r * C;
    double mx = 0;
    long long best = -1;
    for (long long c = lane; c < C; c += 32) {
        double v = pr_ld(xr, c);
        if (best < 0 || v > mx) mx = v, best = c;
    }
    for (int o = 16; o; o >>= 1) {
        double m2 = __shfl_xor_sync(0xffffffffu, mx, o);
        long long b2 = __shfl_xor_sync(0xffffffffu, best, o);
        if (b2 >= 0 && (best < 0 || m2 > mx || (m2 == mx && b2 < best))) mx = m2, best = b2;
    }
    double sum = 0;
    for (long long c = lane; c < C; c += 32) sum += exp((double)pr_ld(xr, c) - mx);
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {
        loss[r] = log(sum) + mx - (double)pr_ld(xr, t);
        hit[r] = best == t;
    }
}

extern "C" void pr_score_rows_cuda(pr_ctx *ctx, const pr_tensor *logits, const int32_t *labels, int32_t ignore,
                                   double *loss, int32_t *hit)
{
    PR_CHECK(logits->dtype == PR_F32 || logits->dtype == PR_BF16, "score_rows: CUDA logits are f32 or bf16, not %s",
             pr_dtype_name(logits->dtype));
    long long C = logits->shape[logits->ndim - 1], R = logits->numel / C;
    if (!R) return;
    const int threads = 256, rows_a_block = threads / 32;
    pr_cuda_storage_switch(logits->dtype, [&](auto t) {
        using T = decltype(t);
        score_rows_kernel<T><<<(unsigned)((R + rows_a_block - 1) / rows_a_block), threads, 0, pr_cuda_stream(ctx)>>>(
            (const T *)logits->data, labels, ignore, R, C, loss, hit);
    });
    PR_CUDA_LAUNCH_CHECK();
}

/* ---- bce_logits ------------------------------------------------------------------------ */

template <class T> struct bce_term {
    const T *x, *t;
    __device__ __forceinline__ double operator()(long long i) const
    {
        float xi = pr_ld(x, i);
        return (double)(fmaxf(xi, 0.0f) - xi * pr_ld(t, i)) + (double)log1pf(expf(-fabsf(xi)));
    }
};

__global__ static void bce_finish_kernel(const double *tot, double inv_n, void *out, bool bf16)
{
    scalar_st(out, bf16, *tot * inv_n);
}

template <class T>
__global__ void bce_backward_kernel(const T *x, const T *t, const void *g, bool g_bf16, double inv_n, T *dx, T *dt,
                                    long long n)
{
    float gs = (float)(scalar_ld(g, g_bf16) * inv_n);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float xi = pr_ld(x, i), e = expf(-fabsf(xi));
        float sig = xi >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        if (dx) pr_acc(dx, i, gs * (sig - pr_ld(t, i)));
        if (dt) pr_acc(dt, i, -gs * xi);
    }
}

template <class T> static void bce_logits_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *t = n->in[1];
    cudaStream_t s = pr_cuda_stream(ctx);
    double *tot = (double *)pr_cuda_malloc(sizeof(double));
    pr_cuda_sum(s, bce_term<T>{(const T *)x->data, (const T *)t->data}, x->numel, tot);
    bce_finish_kernel<<<1, 1, 0, s>>>(tot, 1.0 / (double)x->numel, n->out[0]->data, loss_is_bf16(n->out[0]));
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_free(tot, sizeof(double));
}

template <class T> static void bce_logits_backward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *t = n->in[1];
    pr_tensor *gx = pr_in_grad(n, 0), *gt = pr_in_grad(n, 1);
    if (!gx && !gt) return;
    long long N = x->numel;
    bce_backward_kernel<<<pr_cuda_blocks(N, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (const T *)x->data, (const T *)t->data, n->out[0]->grad->data, loss_is_bf16(n->out[0]->grad), 1.0 / (double)N,
        gx ? (T *)gx->data : (T *)NULL, gt ? (T *)gt->data : (T *)NULL, N);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_bce_logits_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { bce_logits_forward<decltype(t)>(ctx, n); });
}
extern "C" void pr_bce_logits_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { bce_logits_backward<decltype(t)>(ctx, n); });
}
