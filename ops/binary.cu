/* ops/binary.cu: CUDA add, sub, mul, div with numpy broadcasting (f32 or
 * bf16: the kernels are templates over the storage type T, computing in f32;
 * a bf16 output and each bf16 grad element are rounded once).
 *
 * Each input reaches the output's index space o through a map picked on the
 * host from the shapes: FULL (same shape: o), SUFFIX (x fills the trailing
 * dims, e.g. a bias [D] against [N, D]: o % m), PREFIX (x fills the leading
 * dims, e.g. [N, 1] against [N, D]: o / m) or GENERAL (div/mod over the dims).
 * The fast maps load float4s.
 * Backward: an input of the output's shape gets an elementwise `+=`; a
 * broadcast input gets the sum of its contributions over the broadcast dims,
 * in a fixed order (column sums for SUFFIX, row sums for PREFIX, a loop per
 * element for GENERAL): no atomics, the same bits every run.
 * d(a+b) = (1, 1); d(a-b) = (1, -1); d(ab) = (b, a); d(a/b) = (1/b, -a/b^2).
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

enum { ADD, SUB, MUL, DIV };
enum { MAP_FULL, MAP_SUFFIX, MAP_PREFIX, MAP_GENERAL };

/* how input x is read at output offset o */
struct bmap {
    int mode;
    bool v4;     /* 4 consecutive outputs (o % 4 == 0) read a float4, or one broadcast value */
    long long m; /* SUFFIX: numel(x); PREFIX: numel(out) / numel(x) */
    int nd;      /* GENERAL: out's shape and x's strides (0 along broadcast dims) */
    long long shape[PR_MAX_DIMS], stride[PR_MAX_DIMS];

    __device__ __forceinline__ long long off(long long o) const
    {
        if (mode == MAP_FULL) return o;
        if (mode == MAP_SUFFIX) return o % m;
        if (mode == MAP_PREFIX) return o / m;
        long long r = 0;
#pragma unroll /* constant indices keep shape[] and stride[] out of local memory */
        for (int d = PR_MAX_DIMS - 1; d >= 0; d--) {
            if (d >= nd) continue;
            long long q = o / shape[d];
            r += (o - q * shape[d]) * stride[d];
            o = q;
        }
        return r;
    }
    /* x at outputs j..j+3 (0 past n) */
    template <class T> __device__ __forceinline__ pr_f4 ld4(const T *p, long long j, long long n) const
    {
        pr_f4 r;
        if (v4 && j + 4 <= n) {
            if (mode == MAP_PREFIX) {
                float t = pr_ld(p, j / m);
                r.v[0] = r.v[1] = r.v[2] = r.v[3] = t;
                return r;
            }
            return pr_ld4(p, mode == MAP_FULL ? j : j % m, j + 4, true);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) r.v[k] = j + k < n ? pr_ld(p, off(j + k)) : 0.0f;
        return r;
    }
};

/* x's shape padded with leading 1s to out's rank */
static void padded_shape(const pr_tensor *x, int nd, long long *xs)
{
    for (int d = 0; d < nd; d++) {
        int xd = d - (nd - x->ndim);
        xs[d] = xd < 0 ? 1 : x->shape[xd];
    }
}

static bmap make_map(const pr_tensor *x, const pr_tensor *out)
{
    bmap mp = {};
    int nd = out->ndim;
    long long xs[PR_MAX_DIMS];
    padded_shape(x, nd, xs);
    bool al = pr_aligned16(x->data);
    if (x->numel == out->numel) {
        mp.mode = MAP_FULL, mp.v4 = al;
        return mp;
    }
    int lead = 0, trail = nd;
    while (lead < nd && xs[lead] == 1) lead++;
    while (trail > 0 && xs[trail - 1] == 1) trail--;
    bool suffix = true, prefix = true;
    for (int d = lead; d < nd; d++) suffix &= xs[d] == out->shape[d];
    for (int d = 0; d < trail; d++) prefix &= xs[d] == out->shape[d];
    if (suffix) {
        mp.mode = MAP_SUFFIX, mp.m = x->numel, mp.v4 = al && x->numel % 4 == 0;
    } else if (prefix) {
        mp.mode = MAP_PREFIX, mp.m = out->numel / x->numel, mp.v4 = mp.m % 4 == 0;
    } else {
        mp.mode = MAP_GENERAL, mp.nd = nd;
        long long s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            mp.shape[d] = out->shape[d];
            mp.stride[d] = xs[d] == 1 ? 0 : s;
            s *= xs[d];
        }
    }
    return mp;
}

template <int OP> __device__ __forceinline__ float binop(float a, float b)
{
    if constexpr (OP == ADD) return a + b;
    if constexpr (OP == SUB) return a - b;
    if constexpr (OP == MUL) return a * b;
    return a / b;
}

template <int OP, class T>
__global__ void binary_forward_kernel(const T *a, bmap ma, const T *b, bmap mb, T *out, long long n, bool out_al)
{
    long long n4 = (n + 3) / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        long long j = 4 * i;
        pr_f4 x = ma.ld4(a, j, n), y = mb.ld4(b, j, n);
#pragma unroll
        for (int k = 0; k < 4; k++) x.v[k] = binop<OP>(x.v[k], y.v[k]);
        pr_st4(out, j, n, out_al && j + 4 <= n, x);
    }
}

/* d out / d (input WHICH) times the upstream grad g, at one output element */
template <int OP, int WHICH> __device__ __forceinline__ float contribution(float g, float a, float b)
{
    if constexpr (OP == ADD) return g;
    if constexpr (OP == SUB) return WHICH == 0 ? g : -g;
    if constexpr (OP == MUL) return WHICH == 0 ? g * b : g * a;
    return WHICH == 0 ? g / b : -g * a / (b * b);
}
/* which operands a contribution reads */
template <int OP, int WHICH> constexpr bool reads_a() { return (OP == MUL || OP == DIV) && WHICH == 1; }
template <int OP, int WHICH> constexpr bool reads_b() { return (OP == MUL && WHICH == 0) || OP == DIV; }

/* the grad of an input with out's shape: dx[o] += contribution (pr_acc4) */
template <int OP, int WHICH, class T>
__global__ void binary_grad_full_kernel(const T *g, const T *a, bmap ma, const T *b, bmap mb, T *dx, long long n,
                                        bool al)
{
    long long n4 = (n + 3) / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        long long j = 4 * i;
        bool v = al && j + 4 <= n;
        pr_f4 gv = pr_ld4(g, j, n, v), add, av = {{0, 0, 0, 0}}, bv = {{0, 0, 0, 0}};
        if constexpr (reads_a<OP, WHICH>()) av = ma.ld4(a, j, n);
        if constexpr (reads_b<OP, WHICH>()) bv = mb.ld4(b, j, n);
#pragma unroll
        for (int k = 0; k < 4; k++) add.v[k] = contribution<OP, WHICH>(gv.v[k], av.v[k], bv.v[k]);
        pr_acc4(dx, j, n, v, add);
    }
}

/* a broadcast input's contribution at output o, for the reductions */
template <int OP, int WHICH, class T> struct contrib_at {
    const T *g, *a, *b;
    bmap ma, mb;
    __device__ __forceinline__ double operator()(long long o) const
    {
        float av = reads_a<OP, WHICH>() ? pr_ld(a, ma.off(o)) : 0.0f, bv = reads_b<OP, WHICH>() ? pr_ld(b, mb.off(o)) : 0.0f;
        return contribution<OP, WHICH>(pr_ld(g, o), av, bv);
    }
};
/* (r, c) of a [R, m] view of the output */
template <class F> struct at_rc {
    F f;
    long long m;
    __device__ __forceinline__ double operator()(long long r, long long c) const { return f(r * m + c); }
};

/* GENERAL: the grad of x [kept dims] is a row sum: row r = x's element, column c
 * = its c-th position in the broadcast dims. pr_cuda_rowsum gives each row a
 * group of threads (up to 1024) and a fixed summation order: a bias broadcast
 * over B, T and a trailing dim (Mamba-2's D [H,1] against [B,T,H,P]) has few rows
 * and ~10^6 columns, which one serial thread per row took ~250 ms to add up. */
struct gen_reduce {
    int nk, nr;                      /* kept and reduced dims */
    long long kshape[PR_MAX_DIMS], kstride[PR_MAX_DIMS], rshape[PR_MAX_DIMS], rstride[PR_MAX_DIMS];
    long long R;                     /* product of rshape */
};
template <class F> struct gen_at {
    F f;
    gen_reduce gr;
    __device__ __forceinline__ double operator()(long long r, long long c) const
    {
        long long o = 0;
#pragma unroll
        for (int d = PR_MAX_DIMS - 1; d >= 0; d--) {
            if (d >= gr.nk) continue;
            o += (r % gr.kshape[d]) * gr.kstride[d];
            r /= gr.kshape[d];
        }
#pragma unroll
        for (int d = PR_MAX_DIMS - 1; d >= 0; d--) {
            if (d >= gr.nr) continue;
            o += (c % gr.rshape[d]) * gr.rstride[d];
            c /= gr.rshape[d];
        }
        return f(o);
    }
};

static gen_reduce make_gen_reduce(const pr_tensor *x, const pr_tensor *out)
{
    gen_reduce gr = {};
    int nd = out->ndim;
    long long xs[PR_MAX_DIMS], ostride[PR_MAX_DIMS], s = 1;
    padded_shape(x, nd, xs);
    for (int d = nd - 1; d >= 0; d--) ostride[d] = s, s *= out->shape[d];
    gr.R = 1;
    for (int d = 0; d < nd; d++) {
        if (xs[d] == out->shape[d]) {
            gr.kshape[gr.nk] = xs[d], gr.kstride[gr.nk++] = ostride[d];
        } else {
            gr.rshape[gr.nr] = out->shape[d], gr.rstride[gr.nr++] = ostride[d];
            gr.R *= out->shape[d];
        }
    }
    return gr;
}

template <int OP, class T> static void binary_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *a = n->in[0], *b = n->in[1];
    pr_tensor *out = n->out[0];
    long long N = out->numel;
    if (N == 0) return;
    binary_forward_kernel<OP><<<pr_cuda_blocks((N + 3) / 4, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (const T *)a->data, make_map(a, out), (const T *)b->data, make_map(b, out), (T *)out->data, N,
        pr_aligned16(out->data));
    PR_CUDA_LAUNCH_CHECK();
}

template <int OP, int WHICH, class T> static void binary_grad(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *gx = pr_in_grad(n, WHICH);
    if (!gx) return;
    const pr_tensor *a = n->in[0], *b = n->in[1], *out = n->out[0];
    long long N = out->numel;
    if (N == 0) return;
    cudaStream_t s = pr_cuda_stream(ctx);
    const T *g = (const T *)out->grad->data, *pa = (const T *)a->data, *pb = (const T *)b->data;
    T *dx = (T *)gx->data;
    bmap ma = make_map(a, out), mb = make_map(b, out), mx = WHICH == 0 ? ma : mb;
    if (mx.mode == MAP_FULL) {
        bool al = pr_aligned16(g) && pr_aligned16(dx);
        binary_grad_full_kernel<OP, WHICH><<<pr_cuda_blocks((N + 3) / 4, 256), 256, 0, s>>>(g, pa, ma, pb, mb, dx, N, al);
        PR_CUDA_LAUNCH_CHECK();
        return;
    }
    using C = contrib_at<OP, WHICH, T>;
    C f = {g, pa, pb, ma, mb};
    if (mx.mode == MAP_SUFFIX) {
        pr_cuda_colsum_add(s, at_rc<C>{f, mx.m}, N / mx.m, mx.m, dx, 1.0);
    } else if (mx.mode == MAP_PREFIX) {
        pr_cuda_rowsum(s, at_rc<C>{f, mx.m}, N / mx.m, mx.m, dx, 1.0, true);
    } else {
        const pr_tensor *x = WHICH == 0 ? a : b;
        const gen_reduce gr = make_gen_reduce(x, out);
        pr_cuda_rowsum(s, gen_at<C>{f, gr}, x->numel, gr.R, dx, 1.0, true);
    }
}

template <int OP> static void binary_forward_any(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { binary_forward<OP, decltype(t)>(ctx, n); });
}
template <int OP> static void binary_backward_any(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) {
        binary_grad<OP, 0, decltype(t)>(ctx, n);
        binary_grad<OP, 1, decltype(t)>(ctx, n);
    });
}

#define BINARY_CUDA(name, OP)                                                                              \
    extern "C" void pr_##name##_forward_cuda(pr_ctx *ctx, pr_node *n) { binary_forward_any<OP>(ctx, n); }  \
    extern "C" void pr_##name##_backward_cuda(pr_ctx *ctx, pr_node *n) { binary_backward_any<OP>(ctx, n); }

BINARY_CUDA(add, ADD)
BINARY_CUDA(sub, SUB)
BINARY_CUDA(mul, MUL)
BINARY_CUDA(div, DIV)
