/* ops/cuda/rows.cuh: the kernel kit the elementwise, row and reduction ops
 * share (C++, CUDA only; included through ops/cuda/ops_cuda.h): group
 * reductions, bf16 bits and the storage types (float or pr_bf16), float4
 * access, row kernels and deterministic row, column and whole-tensor sums.
 *
 * Every reduction here has a fixed shape decided by the sizes alone (no float
 * atomics), so two runs give the same bits. */
#ifndef PR_OPS_CUDA_ROWS_CUH
#define PR_OPS_CUDA_ROWS_CUH
#ifdef __CUDACC__
#include <type_traits>

#define PR_FULL_MASK 0xffffffffu

struct pr_op_sum {
    template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct pr_op_max {
    template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};

/* Reduce v over a group of G threads; every thread of the group gets the
 * result. G <= 32: aligned lanes of a warp. G > 32: the whole block, which
 * must have exactly G threads, all of them calling (it synchronizes). */
template <int G, class T, class Op> __device__ __forceinline__ T pr_group_reduce(T v, Op op)
{
    constexpr int W = G < 32 ? G : 32;
#pragma unroll
    for (int o = W / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(PR_FULL_MASK, v, o));
    if constexpr (G > 32) {
        constexpr int NW = G / 32;
        __shared__ T buf[32];
        __syncthreads(); /* an earlier call may still read buf */
        if (threadIdx.x % 32 == 0) buf[threadIdx.x / 32] = v;
        __syncthreads();
        v = buf[threadIdx.x % NW];
#pragma unroll
        for (int o = NW / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(PR_FULL_MASK, v, o));
    }
    return v;
}

/* bf16 as bits: f32 -> bf16 rounded to nearest even, NaNs kept quiet
 * (tensor/tensor.c's f32_to_bf16, so CPU and CUDA round alike); bf16 -> f32 exact */
__device__ __forceinline__ unsigned short pr_bf16_bits(float f)
{
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float pr_bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float pr_bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
/* v (a double) rounded once to bf16: when the f32 rounding of v lands on a
 * bf16 tie, a one-ulp nudge toward v breaks the tie v's way (tensor/tensor.c's
 * rule), so no double rounding */
__device__ __forceinline__ unsigned short pr_bf16_bits_once(double v)
{
    float f = __double2float_rn(v);
    const unsigned u = __float_as_uint(f);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    if (!nan && (u & 0xffffu) == 0x8000u && (double)f != v) f = __uint_as_float(fabs(v) > fabs((double)f) ? u + 1 : u - 1);
    return pr_bf16_bits(f);
}

/* ---- storage types ----
 * The ops' elementwise, row and copy kernels are templates over the element
 * type they read and write: float, or pr_bf16 (bf16 bits). Either way they
 * compute in f32: a bf16 load is exact, a bf16 store rounds to nearest even
 * once, and pr_acc (the backward's grad += contribution) adds in double and
 * rounds once, as pr_cuda_cast and the CPU do. The float overloads are the
 * plain f32 operations the kernels used before they were templates. */
struct pr_bf16 {
    unsigned short u;
};
__device__ __forceinline__ float pr_ld(const float *p, long long i) { return p[i]; }
__device__ __forceinline__ float pr_ld(const pr_bf16 *p, long long i) { return __uint_as_float((unsigned)p[i].u << 16); }
__device__ __forceinline__ void pr_st(float *p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void pr_st(pr_bf16 *p, long long i, float v) { p[i].u = pr_bf16_bits(v); }
/* p[i] = v given in double (a sum): rounded once to the element type */
__device__ __forceinline__ void pr_st_d(float *p, long long i, double v) { p[i] = (float)v; }
__device__ __forceinline__ void pr_st_d(pr_bf16 *p, long long i, double v) { p[i].u = pr_bf16_bits_once(v); }
/* the logistic function without overflow on either side (the CPU's kit_sigmoid, in f32) */
__device__ __forceinline__ float pr_sigmoidf(float x)
{
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}
/* log(1 + e^x), and x itself past 20 (the CPU's kit_softplus, in f32) */
__device__ __forceinline__ float pr_softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
/* its derivative: sigmoid(x), and 1 past 20 where softplus is x */
__device__ __forceinline__ float pr_softplus_gradf(float x) { return x > 20.0f ? 1.0f : pr_sigmoidf(x); }
__device__ __forceinline__ void pr_acc(float *p, long long i, float v) { p[i] += v; }
__device__ __forceinline__ void pr_acc(pr_bf16 *p, long long i, float v)
{
    p[i].u = pr_bf16_bits_once((double)pr_ld(p, i) + (double)v);
}

/* four consecutive floats of a row of n (float4 when vec: n % 4 == 0 and aligned) */
struct pr_f4 {
    float v[4];
};
__device__ __forceinline__ pr_f4 pr_ld4(const float *p, long long j, long long n, bool vec)
{
    pr_f4 r;
    if (vec) {
        float4 t = *reinterpret_cast<const float4 *>(p + j);
        r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) r.v[k] = j + k < n ? p[j + k] : 0.0f;
    }
    return r;
}
__device__ __forceinline__ void pr_st4(float *p, long long j, long long n, bool vec, const pr_f4 &r)
{
    if (vec) {
        *reinterpret_cast<float4 *>(p + j) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j + k < n) p[j + k] = r.v[k];
    }
}
/* the same for bf16 rows: vec loads and stores 8 bytes (4 bf16); vec needs
 * only 8-byte alignment, so a caller's 16-byte test is enough */
__device__ __forceinline__ pr_f4 pr_ld4(const pr_bf16 *p, long long j, long long n, bool vec)
{
    pr_f4 r;
    if (vec) {
        const uint2 t = *reinterpret_cast<const uint2 *>(p + j);
        r.v[0] = pr_bf16_lo(t.x), r.v[1] = pr_bf16_hi(t.x), r.v[2] = pr_bf16_lo(t.y), r.v[3] = pr_bf16_hi(t.y);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) r.v[k] = j + k < n ? pr_ld(p, j + k) : 0.0f;
    }
    return r;
}
__device__ __forceinline__ void pr_st4(pr_bf16 *p, long long j, long long n, bool vec, const pr_f4 &r)
{
    if (vec) {
        *reinterpret_cast<uint2 *>(p + j) =
            make_uint2((unsigned)pr_bf16_bits(r.v[0]) | (unsigned)pr_bf16_bits(r.v[1]) << 16,
                       (unsigned)pr_bf16_bits(r.v[2]) | (unsigned)pr_bf16_bits(r.v[3]) << 16);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j + k < n) pr_st(p, j + k, r.v[k]);
    }
}
/* p[j..j+3] += add (pr_acc's rounding: f32 adds; bf16 rounds old + add once) */
__device__ __forceinline__ void pr_acc4(float *p, long long j, long long n, bool vec, const pr_f4 &add)
{
    pr_f4 acc = pr_ld4(p, j, n, vec);
#pragma unroll
    for (int k = 0; k < 4; k++) acc.v[k] += add.v[k];
    pr_st4(p, j, n, vec, acc);
}
__device__ __forceinline__ void pr_acc4(pr_bf16 *p, long long j, long long n, bool vec, const pr_f4 &add)
{
    const pr_f4 old = pr_ld4(p, j, n, vec);
    unsigned short b[4];
#pragma unroll
    for (int k = 0; k < 4; k++) b[k] = pr_bf16_bits_once((double)old.v[k] + (double)add.v[k]);
    if (vec) {
        *reinterpret_cast<uint2 *>(p + j) = make_uint2((unsigned)b[0] | (unsigned)b[1] << 16, (unsigned)b[2] | (unsigned)b[3] << 16);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j + k < n) p[j + k].u = b[k];
    }
}

/* f(T()) with T the storage type of dt (float or pr_bf16): launchers instantiate their kernels per type */
template <class F> static inline void pr_cuda_storage_switch(pr_dtype dt, F f)
{
    if (dt == PR_BF16) f(pr_bf16());
    else f(0.0f);
}

/* ---- row kernels: a group of G threads per row of D elements ----
 * Short rows get a warp (8 rows per 256-thread block), long rows a block.
 * Lane l owns the 4-element chunks j = 4 (l + i G), i = 0, 1, ...; the first
 * S of them (the slots) can stay in registers between passes over the row,
 * so a row of up to 4 G S elements (1024 for a warp, 8192 for a block) is
 * read from memory once; longer rows re-read the rest (from L2). S is as
 * small as the row allows: slots the row does not fill still hold registers,
 * and a warp kernel with 8 slots (~128 registers) fits only 16 warps on a
 * multiprocessor, too few loads in flight to reach the memory's rate on
 * short rows (a head's 96 floats). Kernels take <G, S> from the launcher's
 * pr_rowcfg. PR_ROW_BOUNDS(G): 256-thread blocks keep to 128 registers, so
 * two blocks share a multiprocessor. */
#define PR_ROW_THREADS(G) ((G) < 256 ? 256 : (G))
#define PR_ROW_BOUNDS(G) __launch_bounds__(PR_ROW_THREADS(G), (G) >= 1024 ? 1 : 2)
template <int G_, int S_> struct pr_rowcfg {
    static constexpr int G = G_, S = S_;   /* threads a row, register slots a thread */
};
/* launch(pr_rowcfg<G, S>()) for rows of D; 1024-thread blocks keep 2 slots (64 registers) */
template <class F> static inline void pr_cuda_row_dispatch(long long D, F launch)
{
    if (D <= 128) launch(pr_rowcfg<32, 1>());
    else if (D <= 256) launch(pr_rowcfg<32, 2>());
    else if (D <= 512) launch(pr_rowcfg<32, 4>());
    else if (D <= 1024) launch(pr_rowcfg<32, 8>());
    else if (D <= 8192) launch(pr_rowcfg<256, 8>());
    else launch(pr_rowcfg<1024, 2>());
}
template <int G> static inline int pr_row_threads() { return PR_ROW_THREADS(G); }
template <int G> static inline unsigned pr_row_blocks(long long R)
{
    long long rows = pr_row_threads<G>() / G;
    return (unsigned)((R + rows - 1) / rows);
}
/* this thread's row (clamped to R - 1, so every thread of a group takes part
 * in its reductions; `ok` says whether the thread may store) and lane */
template <int G> __device__ __forceinline__ long long pr_row_index(long long R, bool *ok, int *lane)
{
    long long r = (long long)blockIdx.x * (blockDim.x / G) + threadIdx.x / G;
    *ok = r < R;
    *lane = threadIdx.x % G;
    return *ok ? r : R - 1;
}
/* f(j, i) for each chunk j of the lane: i is the register slot (a constant
 * after unrolling), -1 past the slots (only G = 1024 has rows past them) */
template <int G, int S, class F> __device__ __forceinline__ void pr_row_chunks(long long D, int lane, F f)
{
#pragma unroll
    for (int i = 0; i < S; i++) {
        long long j = ((long long)i * G + lane) * 4;
        if (j < D) f(j, i);
    }
    /* pr_cuda_row_dispatch gives smaller groups slots for the whole row: no
     * tail, so its registers are not held */
    if constexpr (G >= 1024)
        for (long long j = ((long long)S * G + lane) * 4; j < D; j += 4LL * G) f(j, -1);
}
/* chunk j from its register slot, or from memory past the slots (T: float or pr_bf16, as below) */
template <class T>
__device__ __forceinline__ pr_f4 pr_row_get(const pr_f4 *slots, const T *p, long long j, long long D, bool vec, int i)
{
    return i >= 0 ? slots[i] : pr_ld4(p, j, D, vec);
}
/* fill the register slots with the row */
template <int G, int S, class T>
__device__ __forceinline__ void pr_row_load(pr_f4 *slots, const T *p, long long D, bool vec, int lane)
{
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        if (i >= 0) slots[i] = pr_ld4(p, j, D, vec);
    });
}

/* the group-reduced sum of squares of a row (its slots loaded), for rms and l2 norms */
template <int G, int S, class T>
__device__ __forceinline__ float pr_row_sumsq(const pr_f4 *slots, const T *p, long long D, bool vec, int lane)
{
    float ss = 0.0f;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(slots, p, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++) ss += v.v[k] * v.v[k];
    });
    return pr_group_reduce<G>(ss, pr_op_sum());
}
/* the group-reduced max of a row and sum of exp(x - max), for softmax and logsumexp */
template <int G, int S, class T>
__device__ __forceinline__ void pr_row_max_sumexp(const pr_f4 *slots, const T *p, long long D, bool vec, int lane,
                                                  float *mx_out, float *sum_out)
{
    float mx = -INFINITY;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(slots, p, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j + k < D) mx = fmaxf(mx, v.v[k]);
    });
    mx = pr_group_reduce<G>(mx, pr_op_max());
    float sum = 0.0f;
    pr_row_chunks<G, S>(D, lane, [&](long long j, int i) {
        pr_f4 v = pr_row_get(slots, p, j, D, vec, i);
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j + k < D) sum += expf(v.v[k] - mx);
    });
    *mx_out = mx;
    *sum_out = pr_group_reduce<G>(sum, pr_op_sum());
}

/* ---- deterministic sums of f(i) (functor: __device__ double operator()(long long) const) ---- */

template <class F> __global__ void pr_sum_partial_kernel(F f, long long n, double *partial)
{
    double acc = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += f(i);
    acc = pr_group_reduce<256>(acc, pr_op_sum());
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
__global__ static void pr_sum_finish_kernel(const double *partial, int np, double *total)
{
    double acc = 0.0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) acc += partial[i];
    acc = pr_group_reduce<256>(acc, pr_op_sum());
    if (threadIdx.x == 0) *total = acc;
}
/* *total_dev = sum_{i<n} f(i), in double. The grid depends on n only. */
template <class F> static void pr_cuda_sum(cudaStream_t s, F f, long long n, double *total_dev)
{
    int np = (int)((n + 4095) / 4096);
    np = np < 1 ? 1 : (np > 1024 ? 1024 : np);
    double *partial = (double *)pr_cuda_malloc(sizeof(double) * (size_t)np);
    pr_sum_partial_kernel<<<np, 256, 0, s>>>(f, n, partial);
    PR_CUDA_LAUNCH_CHECK();
    pr_sum_finish_kernel<<<1, 256, 0, s>>>(partial, np, total_dev);
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_free(partial, sizeof(double) * (size_t)np);
}

/* ---- deterministic row sums: dst[r] (+)= scale * sum_{c<C} f(r, c) ---- */

template <int G, class F, class D>
__global__ void PR_ROW_BOUNDS(G) pr_rowsum_kernel(F f, long long R, long long C, D *dst, double scale, bool accumulate)
{
    bool ok;
    int lane;
    long long r = pr_row_index<G>(R, &ok, &lane);
    double acc = 0.0;
    for (long long c = lane; c < C; c += G) acc += f(r, c);
    acc = pr_group_reduce<G>(acc, pr_op_sum());
    if (ok && lane == 0) pr_st_d(dst, r, (accumulate ? (double)pr_ld(dst, r) : 0.0) + scale * acc);
}
/* D: float or pr_bf16 (the sum is rounded to it once) */
template <class F, class D>
static void pr_cuda_rowsum(cudaStream_t s, F f, long long R, long long C, D *dst, double scale, bool accumulate)
{
    if (R == 0) return;
    pr_cuda_row_dispatch(C, [&](auto g) {
        constexpr int G = decltype(g)::G;
        pr_rowsum_kernel<G><<<pr_row_blocks<G>(R), pr_row_threads<G>(), 0, s>>>(f, R, C, dst, scale, accumulate);
    });
    PR_CUDA_LAUNCH_CHECK();
}

/* ---- deterministic column sums: dst[c] += scale * sum_{r<R} f(r, c) ----
 * Rows are cut into P fixed chunks (from R and C only); each (chunk, 32
 * columns) block writes a partial, and a second pass adds the P partials in
 * order. Coalesced when f reads row-major [R, C] data at (r, c). */

template <class F>
__global__ void pr_colsum_partial_kernel(F f, long long R, long long C, long long rows_per_chunk, double *partial)
{
    __shared__ double sm[8][33];
    long long c = (long long)blockIdx.x * 32 + threadIdx.x;
    long long r0 = (long long)blockIdx.y * rows_per_chunk;
    long long r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
    double acc = 0.0;
    if (c < C)
        for (long long r = r0 + threadIdx.y; r < r1; r += 8) acc += f(r, c);
    sm[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t = 0.0;
#pragma unroll
        for (int i = 0; i < 8; i++) t += sm[i][threadIdx.x];
        partial[blockIdx.y * C + c] = t;
    }
}
template <class D>
__global__ void pr_colsum_finish_kernel(const double *partial, int P, long long C, D *dst, double scale)
{
    for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < C; c += (long long)gridDim.x * blockDim.x) {
        double t = 0.0;
        for (int p = 0; p < P; p++) t += partial[p * C + c];
        pr_st_d(dst, c, (double)pr_ld(dst, c) + scale * t);
    }
}
/* D: float or pr_bf16 (dst[c] + the sum is rounded to it once) */
template <class F, class D>
static void pr_cuda_colsum_add(cudaStream_t s, F f, long long R, long long C, D *dst, double scale)
{
    if (R == 0 || C == 0) return;
    long long cblocks = (C + 31) / 32;
    long long P = (2048 + cblocks - 1) / cblocks;  /* ~2048 blocks in all */
    long long pmax = (R + 63) / 64;                 /* at least 64 rows a chunk */
    if (P > pmax) P = pmax;
    if (P > 65535) P = 65535;
    if (P < 1) P = 1;
    long long rows = (R + P - 1) / P;
    P = (R + rows - 1) / rows;
    double *partial = (double *)pr_cuda_malloc(sizeof(double) * (size_t)(P * C));
    pr_colsum_partial_kernel<<<dim3((unsigned)cblocks, (unsigned)P), dim3(32, 8), 0, s>>>(f, R, C, rows, partial);
    PR_CUDA_LAUNCH_CHECK();
    pr_colsum_finish_kernel<<<pr_cuda_blocks(C, 256), 256, 0, s>>>(partial, (int)P, C, dst, scale);
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_free(partial, sizeof(double) * (size_t)(P * C));
}

#endif /* __CUDACC__ */
#endif
