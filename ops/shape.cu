/* ops/shape.cu: CUDA reshape, transpose, slice, concat (f32 or bf16).
 *
 * Index-mapping kernels, templates over the element type T (float or
 * pr_bf16); no arithmetic beyond the backward's `+=` (pr_acc: a bf16 grad
 * rounds old + dout once). reshape is
 * a view, so its backward is dx += dout elementwise. transpose sees x as
 * [A, n0, M, n1, I] (d0 < d1) and writes [A, n1, M, n0, I]; with I = 1 a
 * 32x32 shared-memory tile keeps both the reads and the writes coalesced.
 * slice and concat copy runs of len*I contiguous elements per outer index.
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

static int64_t prod(const int64_t *shape, int from, int to)
{
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= shape[i];
    return p;
}

/* f(T()) for x's dtype, f32 or bf16 */
template <class F> static void shape_switch(const char *op, const pr_tensor *x, F f)
{
    PR_CHECK(x->dtype == PR_F32 || x->dtype == PR_BF16, "%s: CUDA supports f32 and bf16 only, not %s", op,
             pr_dtype_name(x->dtype));
    pr_cuda_storage_switch(x->dtype, f);
}

/* dst[i] = src[i], or with acc dst[i] += src[i] (one rounding) */
template <class T> __device__ __forceinline__ void move_elem(T *dst, int64_t i, float v, bool acc)
{
    if (acc) pr_acc(dst, i, v);
    else pr_st(dst, i, v);
}

/* ---- reshape ------------------------------------------------------------------ */

template <class T> __global__ void shape_add(T *dst, const T *src, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        pr_acc(dst, i, pr_ld(src, i));
}

extern "C" void pr_reshape_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    pr_tensor *out = n->out[0];
    if (out->data != x->data && x->numel)   /* a view needs nothing; an own buffer gets a copy */
        PR_CUDA_CHECK(cudaMemcpyAsync(out->data, x->data, pr_nbytes(x), cudaMemcpyDeviceToDevice,
                                      pr_cuda_stream(ctx)));
}

extern "C" void pr_reshape_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *dx = pr_in_grad(n, 0);
    if (!dx || dx->numel == 0) return;
    shape_switch("reshape", dx, [&](auto t) {
        using T = decltype(t);
        shape_add<<<pr_cuda_blocks(dx->numel, 256), 256, 0, pr_cuda_stream(ctx)>>>(
            (T *)dx->data, (const T *)n->out[0]->grad->data, dx->numel);
    });
    PR_CUDA_LAUNCH_CHECK();
}

/* ---- transpose ------------------------------------------------------------------ */

typedef struct { int64_t A, n0, M, n1, I; } tr_dims;

static tr_dims tr_dims_of(const pr_tensor *x, int d0, int d1)
{
    return tr_dims{prod(x->shape, 0, d0), x->shape[d0], prod(x->shape, d0 + 1, d1), x->shape[d1],
                   prod(x->shape, d1 + 1, x->ndim)};
}

/* dst[a,j,m,i,c] (=|+=) src[a,i,m,j,c], src being [A, n0, M, n1, I] */
template <class T> __global__ void transpose_any(T *dst, const T *src, tr_dims d, bool acc)
{
    int64_t total = d.A * d.n0 * d.M * d.n1 * d.I;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t q = e, c = q % d.I;
        q /= d.I;
        int64_t i = q % d.n0;
        q /= d.n0;
        int64_t m = q % d.M;
        q /= d.M;
        int64_t j = q % d.n1, a = q / d.n1;
        float v = pr_ld(src, (((a * d.n0 + i) * d.M + m) * d.n1 + j) * d.I + c);
        move_elem(dst, e, v, acc);
    }
}

/* I = 1: a 32x32 tile of (i, j) for each (a, m) in blockIdx.z; loads run along
 * j (contiguous in src), stores along i (contiguous in dst). The +1 column
 * keeps the tile's column reads off a single bank. */
enum { TR_TILE = 32, TR_ROWS = 8 };
template <class T> __global__ void transpose_tile(T *dst, const T *src, tr_dims d, bool acc)
{
    __shared__ float tile[TR_TILE][TR_TILE + 1];
    int64_t i0 = blockIdx.y * (int64_t)TR_TILE, j0 = blockIdx.x * (int64_t)TR_TILE;
    for (int64_t z = blockIdx.z; z < d.A * d.M; z += gridDim.z) {
        int64_t a = z / d.M, m = z - a * d.M;
        for (int r = threadIdx.y; r < TR_TILE; r += TR_ROWS) {
            int64_t i = i0 + r, j = j0 + threadIdx.x;
            if (i < d.n0 && j < d.n1) tile[r][threadIdx.x] = pr_ld(src, ((a * d.n0 + i) * d.M + m) * d.n1 + j);
        }
        __syncthreads();
        for (int r = threadIdx.y; r < TR_TILE; r += TR_ROWS) {
            int64_t j = j0 + r, i = i0 + threadIdx.x;
            if (i < d.n0 && j < d.n1) {
                int64_t o = ((a * d.n1 + j) * d.M + m) * d.n0 + i;
                move_elem(dst, o, tile[threadIdx.x][r], acc);
            }
        }
        __syncthreads();
    }
}

template <class T> static void transpose_launch(pr_ctx *ctx, T *dst, const T *src, tr_dims d, bool acc)
{
    int64_t total = d.A * d.n0 * d.M * d.n1 * d.I;
    if (total == 0) return;
    cudaStream_t s = pr_cuda_stream(ctx);
    int64_t bx = (d.n1 + TR_TILE - 1) / TR_TILE, by = (d.n0 + TR_TILE - 1) / TR_TILE;
    if (d.I == 1 && bx <= INT32_MAX && by <= 65535) {
        unsigned bz = (unsigned)(d.A * d.M < 65535 ? d.A * d.M : 65535);
        transpose_tile<<<dim3((unsigned)bx, (unsigned)by, bz), dim3(TR_TILE, TR_ROWS), 0, s>>>(dst, src, d, acc);
    } else {
        transpose_any<<<pr_cuda_blocks(total, 256), 256, 0, s>>>(dst, src, d, acc);
    }
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_transpose_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    shape_switch("transpose", x, [&](auto t) {
        using T = decltype(t);
        transpose_launch(ctx, (T *)n->out[0]->data, (const T *)x->data, tr_dims_of(x, (int)n->iarg[0], (int)n->iarg[1]),
                         false);
    });
}

/* the inverse move: dout is [A, n1, M, n0, I], so swap the roles of n0 and n1 */
extern "C" void pr_transpose_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *dx = pr_in_grad(n, 0);
    if (!dx) return;
    tr_dims d = tr_dims_of(n->in[0], (int)n->iarg[0], (int)n->iarg[1]);
    int64_t t = d.n0;
    d.n0 = d.n1;
    d.n1 = t;
    shape_switch("transpose", dx, [&](auto t) {
        using T = decltype(t);
        transpose_launch(ctx, (T *)dx->data, (const T *)n->out[0]->grad->data, d, true);
    });
}

/* ---- slice and concat: runs of contiguous elements ---------------------------------
 * For o < O: dst[o*dst_row + dst_off + r] (=|+=) src[o*src_row + src_off + r],
 * r < L. With every size and offset a multiple of 16 bytes' worth of
 * elements (and 16-byte aligned bases) the kernel moves 16 bytes at a time:
 * V = float4 (4 floats) or bf16x8 (8 bf16) below. */
typedef struct { int64_t O, L, dst_row, dst_off, src_row, src_off; } run_copy;

struct bf16x8 {
    uint4 w;
};
/* v += w, elementwise, for each run element type */
__device__ __forceinline__ void run_add(float &v, float w) { v += w; }
__device__ __forceinline__ void run_add(float4 &a, const float4 &b) { a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w; }
__device__ __forceinline__ void run_add(pr_bf16 &v, pr_bf16 w)
{
    v.u = pr_bf16_bits_once((double)pr_ld(&v, 0) + (double)pr_ld(&w, 0));
}
__device__ __forceinline__ unsigned bf16_pair_sum(unsigned a, unsigned b)
{
    return (unsigned)pr_bf16_bits_once((double)pr_bf16_lo(a) + (double)pr_bf16_lo(b)) |
           (unsigned)pr_bf16_bits_once((double)pr_bf16_hi(a) + (double)pr_bf16_hi(b)) << 16;
}
__device__ __forceinline__ void run_add(bf16x8 &a, const bf16x8 &b)
{
    a.w = make_uint4(bf16_pair_sum(a.w.x, b.w.x), bf16_pair_sum(a.w.y, b.w.y), bf16_pair_sum(a.w.z, b.w.z),
                     bf16_pair_sum(a.w.w, b.w.w));
}

template <typename V>
__global__ void copy_runs(V *dst, const V *src, run_copy c, bool acc)
{
    int64_t total = c.O * c.L;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = e / c.L, r = e - o * c.L;
        V v = src[o * c.src_row + c.src_off + r];
        V *p = dst + o * c.dst_row + c.dst_off + r;
        if (acc) run_add(v, *p);
        *p = v;
    }
}

/* the 16-byte vector of T's elements */
template <class T> struct run_vec;
template <> struct run_vec<float> { typedef float4 type; };
template <> struct run_vec<pr_bf16> { typedef bf16x8 type; };

template <class T> static void copy_runs_launch(pr_ctx *ctx, T *dst, const T *src, run_copy c, bool acc)
{
    if (c.O * c.L == 0) return;
    cudaStream_t s = pr_cuda_stream(ctx);
    typedef typename run_vec<T>::type V;
    const int64_t W = (int64_t)(sizeof(V) / sizeof(T));   /* elements a vector */
    bool vec = ((uintptr_t)dst % 16 == 0) && ((uintptr_t)src % 16 == 0) && c.L % W == 0 && c.dst_row % W == 0 &&
               c.dst_off % W == 0 && c.src_row % W == 0 && c.src_off % W == 0;
    if (vec) {
        run_copy cv = {c.O, c.L / W, c.dst_row / W, c.dst_off / W, c.src_row / W, c.src_off / W};
        copy_runs<V><<<pr_cuda_blocks(cv.O * cv.L, 256), 256, 0, s>>>((V *)dst, (const V *)src, cv, acc);
    } else {
        copy_runs<T><<<pr_cuda_blocks(c.O * c.L, 256), 256, 0, s>>>(dst, src, c, acc);
    }
    PR_CUDA_LAUNCH_CHECK();
}

/* x [O, D, I] -> out [O, len, I] = x[:, start:start+len, :] */
static run_copy slice_runs(const pr_tensor *x, const pr_node *n, bool back)
{
    int d = (int)n->iarg[0];
    int64_t O = prod(x->shape, 0, d), D = x->shape[d], I = prod(x->shape, d + 1, x->ndim);
    int64_t start = n->iarg[1], len = n->iarg[2];
    run_copy fwd = {O, len * I, len * I, 0, D * I, start * I};
    run_copy bwd = {O, len * I, D * I, start * I, len * I, 0};
    return back ? bwd : fwd;
}

extern "C" void pr_slice_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *x = n->in[0];
    shape_switch("slice", x, [&](auto t) {
        using T = decltype(t);
        copy_runs_launch(ctx, (T *)n->out[0]->data, (const T *)x->data, slice_runs(x, n, false), false);
    });
}

/* out rows are x rows start.. : dx[o, start+r, :] += dout[o, r, :] */
extern "C" void pr_slice_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *dx = pr_in_grad(n, 0);
    if (!dx) return;
    shape_switch("slice", dx, [&](auto t) {
        using T = decltype(t);
        copy_runs_launch(ctx, (T *)dx->data, (const T *)n->out[0]->grad->data, slice_runs(n->in[0], n, true), true);
    });
}

/* each input's [D_k, I] block of every outer row goes to its offset in out (or,
 * with back, out's grad block is added into the input's grad) */
template <class T> static void concat_move(pr_ctx *ctx, pr_node *n, bool back)
{
    pr_tensor *out = back ? n->out[0]->grad : n->out[0];
    int d = (int)n->iarg[0];
    int64_t O = prod(out->shape, 0, d), D = out->shape[d], I = prod(out->shape, d + 1, out->ndim);
    int64_t off = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t Dk = n->in[k]->shape[d];
        pr_tensor *x = back ? pr_in_grad(n, k) : n->in[k];
        if (x) {
            if (back)
                copy_runs_launch(ctx, (T *)x->data, (const T *)out->data, run_copy{O, Dk * I, Dk * I, 0, D * I, off * I},
                                 true);
            else
                copy_runs_launch(ctx, (T *)out->data, (const T *)x->data, run_copy{O, Dk * I, D * I, off * I, Dk * I, 0},
                                 false);
        }
        off += Dk;
    }
}

/* every input has out's dtype (ops/shape.c checks) */
extern "C" void pr_concat_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    shape_switch("concat", n->out[0], [&](auto t) { concat_move<decltype(t)>(ctx, n, false); });
}

extern "C" void pr_concat_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    shape_switch("concat", n->out[0], [&](auto t) { concat_move<decltype(t)>(ctx, n, true); });
}
