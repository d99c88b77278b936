/* ops/conv1d.cu: CUDA causal depthwise conv1d (f32 or bf16).
 *
 * x [B, T, C], w [C, W], bias [C] or NULL; z[b,t,c] = bias[c] +
 * sum_{i<W} w[c,i] x[b, t-W+1+i, c] (zero before t = 0); out = z, or silu(z)
 * (iarg[0]: the silu form, SILU in the kernels). The silu form's backward
 * recomputes z where it reads dout and writes dz = dout silu'(z) (f32, a
 * scratch) for the dx pass: the dw pass makes it (it holds x's window and
 * the taps already), so the silu costs no pass of its own. Rows r = b*T + t are
 * flattened; c is the fastest index, so a warp reads 32 consecutive channels.
 * dw and dbias reduce over B*T without atomics: each block sums a fixed chunk
 * of rows into a partial, a second pass adds the partials in chunk order, so
 * the result is the same on every run. Widths up to 8 (the models' short
 * convolutions) take the run kernels, which read each element once; wider
 * ones the generic per-element kernels. bf16 x, w, bias, out and grads (the
 * kernels are templates over the storage type T): loads exact, products and
 * sums in f32 (the dw/dbias partials f32), each stored element rounded once.
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

/* The generic kernels (any W): one thread per output, W loads each. */
__device__ __forceinline__ float cv_silu(float z) { return z * pr_sigmoidf(z); }
/* d silu(z) / dz = s (1 + z (1 - s)) */
__device__ __forceinline__ float cv_dsilu(float z)
{
    const float s = pr_sigmoidf(z);
    return s * (1.0f + z * (1.0f - s));
}

template <class E>
__device__ __forceinline__ float cv_z(const E *x, const E *w, const E *bias, int64_t e, int64_t t, int64_t c, int64_t C,
                                      int W)
{
    float acc = bias ? pr_ld(bias, c) : 0.0f;
    for (int i = 0; i < W; i++) {
        int64_t back = W - 1 - i;   /* x[t - back] */
        if (t >= back) acc += pr_ld(w, c * W + i) * pr_ld(x, e - back * C);
    }
    return acc;
}

template <class E>
__global__ void conv1d_fwd(E *out, const E *x, const E *w, const E *bias, int64_t R, int64_t T, int64_t C, int W,
                           bool silu)
{
    int64_t total = R * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / C, c = e - r * C, t = r % T;
        const float z = cv_z(x, w, bias, e, t, c, C, W);
        pr_st(out, e, silu ? cv_silu(z) : z);
    }
}

/* the generic kernels' dz = dout silu'(z) */
template <class E>
__global__ void conv1d_dz(float *dz, const E *g, const E *x, const E *w, const E *bias, int64_t R, int64_t T, int64_t C,
                          int W)
{
    int64_t total = R * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / C, c = e - r * C, t = r % T;
        dz[e] = pr_ld(g, e) * cv_dsilu(cv_z(x, w, bias, e, t, c, C, W));
    }
}

/* The run kernels (W <= CV_MAXW, the short convolutions of the models): block
 * (32, 8) owns 32 channels and CV_ROWS consecutive rows; thread row ty walks a
 * run of CV_RUN of them in order, keeping the last W inputs (or the next W
 * output grads) in registers, so each element is read once and the 64-bit
 * division is done once per run, not per element. A run may cross into the
 * next sequence: the window is cleared where t wraps to 0. */
enum { CV_MAXW = 8, CV_RUN = 16, CV_ROWS = 8 * CV_RUN };

static dim3 run_grid(int64_t R, int64_t C) { return dim3((unsigned)((C + 31) / 32), (unsigned)((R + CV_ROWS - 1) / CV_ROWS)); }
/* the run kernels take W <= CV_MAXW and at most 65535 row blocks (grid.y) */
static bool use_runs(int64_t R, int W) { return W <= CV_MAXW && (R + CV_ROWS - 1) / CV_ROWS <= 65535; }

template <int W, bool SILU, class E>
__global__ void conv1d_fwd_run(E *out, const E *x, const E *w, const E *bias, int64_t R, int64_t T, int64_t C)
{
    const int64_t c = blockIdx.x * 32LL + threadIdx.x, r0 = blockIdx.y * (int64_t)CV_ROWS + threadIdx.y * CV_RUN;
    if (c >= C || r0 >= R) return;
    float wc[W], win[W];   /* win[W-1] is x[t], win[0] x[t-W+1] */
    for (int i = 0; i < W; i++) wc[i] = pr_ld(w, c * W + i);
    int64_t t = r0 % T;
    for (int i = 0; i < W - 1; i++) {
        const int64_t back = W - 1 - i;
        win[i] = t >= back ? pr_ld(x, (r0 - back) * C + c) : 0.0f;
    }
    const float b = bias ? pr_ld(bias, c) : 0.0f;
    for (int64_t r = r0; r < r0 + CV_RUN && r < R; r++, t++) {
        if (t == T) {   /* a new sequence: nothing before it */
            t = 0;
            for (int i = 0; i < W - 1; i++) win[i] = 0.0f;
        }
        win[W - 1] = pr_ld(x, r * C + c);
        float acc = b;
        for (int i = 0; i < W; i++) acc += wc[i] * win[i];
        pr_st(out, r * C + c, SILU ? cv_silu(acc) : acc);
        for (int i = 0; i < W - 1; i++) win[i] = win[i + 1];
    }
}

template <class E> static void conv1d_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2];
    int W = (int)w->shape[1];
    if (x->numel == 0) return;
    E *out = (E *)n->out[0]->data;
    const E *xp = (const E *)x->data, *wp = (const E *)w->data;
    const E *bp = bias ? (const E *)bias->data : nullptr;
    cudaStream_t s = pr_cuda_stream(ctx);
    const dim3 grid = run_grid(B * T, C), block(32, 8);
    const bool silu = n->iarg[0];
    switch (use_runs(B * T, W) ? W : 0) {
#define CV_FWD(w_)                                                                                                     \
    case w_:                                                                                                           \
        if (silu) conv1d_fwd_run<w_, true><<<grid, block, 0, s>>>(out, xp, wp, bp, B * T, T, C);                      \
        else conv1d_fwd_run<w_, false><<<grid, block, 0, s>>>(out, xp, wp, bp, B * T, T, C);                          \
        break;
        CV_FWD(1) CV_FWD(2) CV_FWD(3) CV_FWD(4) CV_FWD(5) CV_FWD(6) CV_FWD(7) CV_FWD(8)
#undef CV_FWD
    default: conv1d_fwd<<<pr_cuda_blocks(x->numel, 256), 256, 0, s>>>(out, xp, wp, bp, B * T, T, C, W, silu);
    }
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_conv1d_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { conv1d_forward<decltype(t)>(ctx, n); });
}

/* dx[b,s,c] += sum_i w[c,i] dz[b, s+W-1-i, c]  (terms past T dropped; dz: dout, or the f32 scratch) */
template <class E, class G>
__global__ void conv1d_dx(E *dx, const G *g, const E *w, int64_t R, int64_t T, int64_t C, int W)
{
    int64_t total = R * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / C, c = e - r * C, s = r % T;
        float acc = 0.0f;
        for (int i = 0; i < W; i++) {
            int64_t fwd = W - 1 - i;   /* dout[s + fwd] */
            if (s + fwd < T) acc += pr_ld(w, c * W + i) * pr_ld(g, e + fwd * C);
        }
        pr_acc(dx, e, acc);
    }
}

/* dx of a run: rows in order, the window holding dz[s .. s+W-1] of the same
 * sequence (zero past its end) */
template <int W, class E, class G>
__global__ void conv1d_dx_run(E *dx, const G *g, const E *w, int64_t R, int64_t T, int64_t C)
{
    const int64_t c = blockIdx.x * 32LL + threadIdx.x, r0 = blockIdx.y * (int64_t)CV_ROWS + threadIdx.y * CV_RUN;
    if (c >= C || r0 >= R) return;
    float wc[W], win[W];   /* win[j] = dout[s + j] */
    for (int i = 0; i < W; i++) wc[i] = pr_ld(w, c * W + i);
    int64_t t = r0 % T;
    for (int j = 0; j < W - 1; j++) win[j + 1] = t + j < T ? pr_ld(g, (r0 + j) * C + c) : 0.0f;
    for (int64_t r = r0; r < r0 + CV_RUN && r < R; r++) {
        for (int j = 0; j < W - 1; j++) win[j] = win[j + 1];
        /* dout[s + W - 1] belongs to this sequence only while t + W - 1 < T */
        win[W - 1] = t + W - 1 < T ? pr_ld(g, (r + W - 1) * C + c) : 0.0f;
        float acc = 0.0f;
        for (int i = 0; i < W; i++) acc += wc[i] * win[W - 1 - i];
        pr_acc(dx, r * C + c, acc);
        if (++t == T) {   /* the next row starts a sequence: reload its window */
            t = 0;
            for (int j = 0; j < W - 1; j++) win[j + 1] = j < T && r + 1 + j < R ? pr_ld(g, (r + 1 + j) * C + c) : 0.0f;
        }
    }
}

/* dw, dbias partials of a run kernel block: thread row ty sums its run with
 * the inputs' window in registers; the 8 runs are added in order into
 * part[blockIdx.y][i][c] (i = W: the bias). SILU: each row's z from that
 * window and the taps, dout silu'(z) summed and stored into dz for dx */
template <int W, bool SILU, class E>
__global__ void conv1d_dw_run(float *part, float *dz, const E *g, const E *x, const E *w, const E *bias, int64_t R,
                              int64_t T, int64_t C)
{
    __shared__ float red[8][W + 1][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t c = blockIdx.x * 32LL + tx, r0 = blockIdx.y * (int64_t)CV_ROWS + ty * CV_RUN;
    float acc[W + 1];
    for (int i = 0; i <= W; i++) acc[i] = 0.0f;
    if (c < C && r0 < R) {
        float win[W], wc[W];   /* win[W-1] = x[t] */
        if (SILU)
            for (int i = 0; i < W; i++) wc[i] = pr_ld(w, c * W + i);
        const float b = SILU && bias ? pr_ld(bias, c) : 0.0f;
        int64_t t = r0 % T;
        for (int i = 0; i < W - 1; i++) {
            const int64_t back = W - 1 - i;
            win[i] = t >= back ? pr_ld(x, (r0 - back) * C + c) : 0.0f;
        }
        for (int64_t r = r0; r < r0 + CV_RUN && r < R; r++, t++) {
            if (t == T) {
                t = 0;
                for (int i = 0; i < W - 1; i++) win[i] = 0.0f;
            }
            win[W - 1] = pr_ld(x, r * C + c);
            float gv = pr_ld(g, r * C + c);
            if (SILU) {
                float z = b;
                for (int i = 0; i < W; i++) z += wc[i] * win[i];
                gv *= cv_dsilu(z);
                dz[r * C + c] = gv;
            }
            for (int i = 0; i < W; i++) acc[i] += gv * win[i];
            acc[W] += gv;
            for (int i = 0; i < W - 1; i++) win[i] = win[i + 1];
        }
    }
    for (int i = 0; i <= W; i++) red[ty][i][tx] = acc[i];
    __syncthreads();
    if (ty == 0 && c < C)
        for (int i = 0; i <= W; i++) {
            float sum = red[0][i][tx];
            for (int k = 1; k < 8; k++) sum += red[k][i][tx];
            part[(blockIdx.y * (int64_t)(W + 1) + i) * C + c] = sum;
        }
}

/* Pass 1 (generic W). Block (32, 8) owns channels c0..c0+31 and the rows of one chunk;
 * thread row ty takes every 8th row. For tap i < W it sums
 * dout[r,c] x[r-(W-1-i),c]; tap W is the bias (sum of dout). The 8 partials
 * are added in order into part[chunk][i][c]. */
enum { CV_X = 32, CV_Y = 8 };
template <class E, class G>
__global__ void conv1d_dw_partial(float *part, const G *g, const E *x, int64_t R, int64_t T, int64_t C, int W,
                                  int64_t rows_per_chunk)
{
    __shared__ float red[CV_Y][CV_X];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t c = blockIdx.x * (int64_t)CV_X + tx, chunk = blockIdx.y;
    int64_t r0 = chunk * rows_per_chunk, r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
    for (int i = 0; i <= W; i++) {
        int64_t back = W - 1 - i;
        float acc = 0.0f;
        if (c < C)
            for (int64_t r = r0 + ty; r < r1; r += CV_Y) {
                float gv = pr_ld(g, r * C + c);
                if (i == W) acc += gv;
                else if (r % T >= back) acc += gv * pr_ld(x, (r - back) * C + c);
            }
        red[ty][tx] = acc;
        __syncthreads();
        if (ty == 0 && c < C) {
            float sum = red[0][tx];
            for (int k = 1; k < CV_Y; k++) sum += red[k][tx];
            part[(chunk * (W + 1) + i) * C + c] = sum;
        }
        __syncthreads();
    }
}

/* Pass 2: for each (tap i, channel c), add the chunks' partials in order */
template <class E>
__global__ void conv1d_dw_reduce(E *dw, E *dbias, const float *part, int64_t chunks, int64_t C, int W)
{
    int64_t total = (int64_t)(W + 1) * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / C, c = e - i * C;
        float sum = 0.0f;
        for (int64_t k = 0; k < chunks; k++) sum += part[k * total + e];
        if (i < W) {
            if (dw) pr_acc(dw, c * W + i, sum);
        } else if (dbias) {
            pr_acc(dbias, c, sum);
        }
    }
}

/* what a conv1d backward reads and writes (dz: the silu form's f32 scratch, else NULL) */
template <class E> struct cv_bwd {
    pr_tensor *dx, *dw, *db;
    const E *g, *x, *w, *bias;
    float *dz;
    int64_t R, T, C;
};

/* the run kernels: without silu dx from dout, then the dw and dbias partials;
 * with it the partials first, which write dz, then dx from dz */
template <int W, class E> static void conv1d_backward_w(cudaStream_t s, const cv_bwd<E> &a)
{
    const dim3 grid = run_grid(a.R, a.C), block(32, 8);
    if (a.dx && !a.dz) {
        conv1d_dx_run<W><<<grid, block, 0, s>>>((E *)a.dx->data, a.g, a.w, a.R, a.T, a.C);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (!a.dw && !a.db && !a.dz) return;
    const int64_t chunks = grid.y;   /* a function of the shapes: the same sums on every run */
    size_t bytes = sizeof(float) * (size_t)(chunks * (W + 1) * a.C);
    float *part = (float *)pr_cuda_malloc(bytes);
    if (a.dz) conv1d_dw_run<W, true><<<grid, block, 0, s>>>(part, a.dz, a.g, a.x, a.w, a.bias, a.R, a.T, a.C);
    else conv1d_dw_run<W, false><<<grid, block, 0, s>>>(part, nullptr, a.g, a.x, a.w, a.bias, a.R, a.T, a.C);
    PR_CUDA_LAUNCH_CHECK();
    if (a.dw || a.db) {
        conv1d_dw_reduce<<<pr_cuda_blocks((int64_t)(W + 1) * a.C, 256), 256, 0, s>>>(
            a.dw ? (E *)a.dw->data : nullptr, a.db ? (E *)a.db->data : nullptr, part, chunks, a.C, W);
        PR_CUDA_LAUNCH_CHECK();
    }
    pr_cuda_free(part, bytes);
    if (a.dx && a.dz) {
        conv1d_dx_run<W><<<grid, block, 0, s>>>((E *)a.dx->data, (const float *)a.dz, a.w, a.R, a.T, a.C);
        PR_CUDA_LAUNCH_CHECK();
    }
}

/* the generic kernels: with silu dz first (its own pass), then dx and the partials from it */
template <class E, class G> static void conv1d_backward_generic(cudaStream_t s, const cv_bwd<E> &a, const G *g, int W)
{
    const int64_t R = a.R, T = a.T, C = a.C;
    if (a.dx) {
        conv1d_dx<<<pr_cuda_blocks(R * C, 256), 256, 0, s>>>((E *)a.dx->data, g, a.w, R, T, C, W);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (!a.dw && !a.db) return;
    /* about 1024 blocks in pass 1, at least 32 rows a chunk; a function of the
     * shapes alone, so the summation order never depends on the device */
    int64_t cblocks = (C + CV_X - 1) / CV_X;
    int64_t chunks = (1024 + cblocks - 1) / cblocks, max_chunks = (R + 31) / 32;
    if (chunks > max_chunks) chunks = max_chunks;
    if (chunks > 65535) chunks = 65535;
    int64_t rows_per_chunk = (R + chunks - 1) / chunks;
    chunks = (R + rows_per_chunk - 1) / rows_per_chunk;
    size_t bytes = sizeof(float) * (size_t)(chunks * (W + 1) * C);
    float *part = (float *)pr_cuda_malloc(bytes);
    conv1d_dw_partial<<<dim3((unsigned)cblocks, (unsigned)chunks), dim3(CV_X, CV_Y), 0, s>>>(part, g, a.x, R, T, C, W,
                                                                                              rows_per_chunk);
    PR_CUDA_LAUNCH_CHECK();
    conv1d_dw_reduce<<<pr_cuda_blocks((int64_t)(W + 1) * C, 256), 256, 0, s>>>(
        a.dw ? (E *)a.dw->data : nullptr, a.db ? (E *)a.db->data : nullptr, part, chunks, C, W);
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_free(part, bytes);
}

/* z = bias + sum_i w[c,i] x[t-W+1+i]: each product feeds one output, so
 *   dx[s] += w[c,i] dz[s+W-1-i],  dw[c,i] += sum_{b,t} dz[b,t,c] x[b,t-W+1+i,c],
 *   dbias[c] += sum_{b,t} dz[b,t,c];  dz = dout, or dout silu'(z) */
template <class E> static void conv1d_backward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], R = B * T;
    int W = (int)w->shape[1];
    cudaStream_t s = pr_cuda_stream(ctx);
    if (x->numel == 0) return;
    cv_bwd<E> a = {pr_in_grad(n, 0), pr_in_grad(n, 1), pr_in_grad(n, 2),
                   (const E *)n->out[0]->grad->data, (const E *)x->data, (const E *)w->data,
                   bias ? (const E *)bias->data : nullptr, nullptr, R, T, C};
    if (!a.dx && !a.dw && !a.db) return;
    const size_t dz_bytes = n->iarg[0] ? sizeof(float) * (size_t)(R * C) : 0;
    if (dz_bytes) a.dz = (float *)pr_cuda_malloc(dz_bytes);
    if (use_runs(R, W)) {
        switch (W) {
#define CV_BWD(w_) case w_: conv1d_backward_w<w_>(s, a); break;
            CV_BWD(1) CV_BWD(2) CV_BWD(3) CV_BWD(4) CV_BWD(5) CV_BWD(6) CV_BWD(7) CV_BWD(8)
#undef CV_BWD
        }
    } else if (a.dz) {
        conv1d_dz<<<pr_cuda_blocks(R * C, 256), 256, 0, s>>>(a.dz, a.g, a.x, a.w, a.bias, R, T, C, W);
        PR_CUDA_LAUNCH_CHECK();
        conv1d_backward_generic(s, a, (const float *)a.dz, W);
    } else {
        conv1d_backward_generic(s, a, a.g, W);
    }
    if (dz_bytes) pr_cuda_free(a.dz, dz_bytes);
}

extern "C" void pr_conv1d_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { conv1d_backward<decltype(t)>(ctx, n); });
}
