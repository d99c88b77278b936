/* ops/selective_scan.cu: the selective scan on CUDA, f32, forward and backward.
 *
 * Every (channel d, state n) is a scalar linear recurrence s_t = a_t s_{t-1}
 * + b_t (a_t = exp(dt_t A[d,n]), b_t = dt_t u_t B_t[n]), so T is cut into
 * chunks of SS_L tokens of one sequence and scanned in three passes:
 *   1. per chunk, in parallel: the local scan from a zero state gives the
 *      chunk's end state E and its decay product Pa = prod a_t;
 *   2. per (sequence, d, n): a walk over the sequence's chunks carries the
 *      state, Sin[c] = s; s = Pa[c] s + E[c] (T / SS_L steps); the end is ht;
 *   3. per chunk, in parallel: the scan again from Sin[c], writing y.
 * The backward is the same in reverse: g_t = dL/ds_t obeys g_t = dy_t C_t +
 * a_{t+1} g_{t+1}, so pass 1 runs each chunk's reverse scan from zero (its
 * carry out is Pa g_in + E'), pass 2 carries g right to left from dht (what
 * leaves the first chunk is dh0), and pass 3 re-runs every chunk from Sin
 * (saved by the forward) and its incoming g, with the per-token terms of
 * ops/selective_scan.c. Threads: G lanes per channel (N <= G NPL states, NPL
 * per lane), 256 / G channels per block; y and the sums over n are lane-group
 * shuffles. Sums over channels (dB, dC) and over tokens (dA, dD,
 * ddelta_bias) go through per-block partials and the kit's column sums: no
 * atomics, reruns are bit-identical. CUDA limit: N <= 64.
 */
#include "ops/ops.h"
#include "ops/selective_scan.h"
#include "ops/seqlens.h"
#include "ops/cuda/ops_cuda.h"

#include <math.h>
#include <stdlib.h>

#include <type_traits>

#define SS_L PR_SS_CHUNK  /* tokens per chunk */
#define SS_THREADS 256

struct ss_prob {
    const float *u, *delta, *A, *Bm, *Cm, *Dk, *z, *bias, *h0, *dout, *dht;
    float *y, *ht;
    float *Pa, *E, *Sin, *cin;        /* [nch, D, N] */
    float *du, *dx, *dz, *dh0;        /* dx: this call's ddelta [rows, D] */
    float *dBp, *dCp, *dAp;           /* partials: [nslab, rows, N], [nslab, rows, N], [nch, D, N] */
    const int *chunks;                /* [nch][3]: first row, valid rows, sequence */
    const int *cbase;                 /* [S+1]: first chunk of each sequence */
    int D, N, S, nch, rows;
};

/* this thread's channel (clamped, so every lane group takes part in its
 * shuffles; ok says whether it may store) and lane */
template <int G> struct ss_lane {
    int d, lane, ch;
    bool ok;
    __device__ ss_lane(const ss_prob &p)
    {
        ch = threadIdx.x / G, lane = threadIdx.x % G;
        const int d0 = blockIdx.y * (SS_THREADS / G) + ch;
        ok = d0 < p.D, d = ok ? d0 : p.D - 1;
    }
};

/* pass 1 (final = 0: Pa, E from a zero state) and pass 3 (final = 1: y from Sin) */
template <int G, int NPL> __global__ void __launch_bounds__(SS_THREADS) ss_fwd_chunk_kernel(ss_prob p, int final)
{
    const ss_lane<G> me(p);
    const int c = blockIdx.x, row0 = p.chunks[3 * c], nval = p.chunks[3 * c + 1], N = p.N, d = me.d;
    float A[NPL], s[NPL], P[NPL];
#pragma unroll
    for (int k = 0; k < NPL; k++) {
        const int n = me.lane + G * k;
        A[k] = n < N ? p.A[d * N + n] : 0.f;
        s[k] = final && n < N ? p.Sin[((long long)c * p.D + d) * N + n] : 0.f;
        P[k] = 1.f;
    }
    const float Dk = p.Dk ? p.Dk[d] : 0.f, bias = p.bias ? p.bias[d] : 0.f;
    for (int t = 0; t < nval; t++) {
        const long long r = row0 + t, i = r * p.D + d;
        const float dt = pr_softplusf(p.delta[i] + bias), u = p.u[i];
        float yk = 0.f;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int n = me.lane + G * k;
            if (n >= N) continue;
            const float a = expf(dt * A[k]);
            s[k] = fmaf(a, s[k], dt * u * p.Bm[r * N + n]);
            P[k] *= a;
            yk = fmaf(s[k], p.Cm[r * N + n], yk);
        }
        if (!final) continue;
        const float y = pr_group_reduce<G>(yk, pr_op_sum()) + Dk * u;
        if (me.lane == 0 && me.ok) {
            const float z = p.z ? p.z[i] : 0.f;
            p.y[i] = p.z ? y * z * pr_sigmoidf(z) : y;
        }
    }
    if (final || !me.ok) return;
#pragma unroll
    for (int k = 0; k < NPL; k++) {
        const int n = me.lane + G * k;
        if (n >= N) continue;
        const long long o = ((long long)c * p.D + d) * N + n;
        p.Pa[o] = P[k], p.E[o] = s[k];
    }
}

/* pass 2: a thread per (sequence, d, n) walks the sequence's chunks; forward
 * left to right from h0 (Sin, ht), backward right to left from dht (cin, dh0) */
__global__ void ss_carry_kernel(ss_prob p, int backward)
{
    const long long DN = (long long)p.D * p.N, idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= p.S * DN) return;
    const long long sq = idx / DN, dn = idx % DN;
    const int c0 = p.cbase[sq], c1 = p.cbase[sq + 1];
    if (!backward) {
        float s = p.h0 ? p.h0[idx] : 0.f;
        for (int c = c0; c < c1; c++) {
            const long long o = c * DN + dn;
            p.Sin[o] = s;
            s = fmaf(p.Pa[o], s, p.E[o]);
        }
        p.ht[idx] = s;
    } else {
        float g = p.dht ? p.dht[idx] : 0.f;
        for (int c = c1 - 1; c >= c0; c--) {
            const long long o = c * DN + dn;
            p.cin[o] = g;
            g = fmaf(p.Pa[o], g, p.E[o]);
        }
        if (p.dh0) p.dh0[idx] += g;
    }
}

/* backward passes 1 (final = 0: Pa and E' = the carry out from zero) and 3
 * (final = 1: every gradient). Shared memory: the states st[t][k][thread]
 * (t = 0..nval; after the reverse walk passes t, slot t+1 holds dy_t s_t, the
 * dC terms), the dB terms [SS_L][k][thread] and dy_pre [SS_L][channel]. */
template <int G, int NPL> __global__ void __launch_bounds__(SS_THREADS) ss_bwd_chunk_kernel(ss_prob p, int final)
{
    extern __shared__ float sm[];
    constexpr int CPB = SS_THREADS / G;
    float *st = sm, *dBc = sm + (SS_L + 1) * NPL * SS_THREADS, *dyp = dBc + SS_L * NPL * SS_THREADS;
    const ss_lane<G> me(p);
    const int c = blockIdx.x, row0 = p.chunks[3 * c], nval = p.chunks[3 * c + 1], N = p.N, d = me.d;
    const int tid = threadIdx.x;
#define SLOT(t, k) (((t) * NPL + (k)) * SS_THREADS + tid)
    float A[NPL], s[NPL];
#pragma unroll
    for (int k = 0; k < NPL; k++) {
        const int n = me.lane + G * k;
        A[k] = n < N ? p.A[d * N + n] : 0.f;
        s[k] = n < N ? p.Sin[((long long)c * p.D + d) * N + n] : 0.f;
        st[SLOT(0, k)] = s[k];
    }
    const float Dk = p.Dk ? p.Dk[d] : 0.f, bias = p.bias ? p.bias[d] : 0.f;
    for (int t = 0; t < nval; t++) {  /* forward: states, y_pre, dy_pre (and dz) */
        const long long r = row0 + t, i = r * p.D + d;
        const float dt = pr_softplusf(p.delta[i] + bias), u = p.u[i];
        float yk = 0.f;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int n = me.lane + G * k;
            if (n < N) {
                s[k] = fmaf(expf(dt * A[k]), s[k], dt * u * p.Bm[r * N + n]);
                yk = fmaf(s[k], p.Cm[r * N + n], yk);
            }
            st[SLOT(t + 1, k)] = s[k];
        }
        const float ypre = pr_group_reduce<G>(yk, pr_op_sum()) + Dk * u;
        if (me.lane == 0) {
            float dy = p.dout[i];
            if (p.z) {
                const float z = p.z[i], sg = pr_sigmoidf(z);
                if (final && me.ok && p.dz) p.dz[i] += dy * ypre * sg * (1.f + z * (1.f - sg));
                dy *= z * sg;
            }
            dyp[t * CPB + me.ch] = dy;
        }
    }
    __syncthreads();
    float g[NPL], P[NPL], dA[NPL];
#pragma unroll
    for (int k = 0; k < NPL; k++) {
        const int n = me.lane + G * k;
        g[k] = final && n < N ? p.cin[((long long)c * p.D + d) * N + n] : 0.f;
        P[k] = 1.f, dA[k] = 0.f;
    }
    for (int t = nval - 1; t >= 0; t--) {  /* reverse: g from dL/ds_t to dL/ds_{t-1} */
        const long long r = row0 + t, i = r * p.D + d;
        const float x = p.delta[i] + bias, dt = pr_softplusf(x), u = p.u[i], dy = dyp[t * CPB + me.ch];
        float ddt = 0.f, gB = 0.f;
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int n = me.lane + G * k;
            const float Ct = n < N ? p.Cm[r * N + n] : 0.f, Bt = n < N ? p.Bm[r * N + n] : 0.f;
            const float a = expf(dt * A[k]);
            g[k] = fmaf(dy, Ct, g[k]);
            if (final) {
                st[SLOT(t + 1, k)] *= dy; /* dC term: dy_t s_t */
                dBc[SLOT(t, k)] = g[k] * dt * u;
            }
            const float da = g[k] * st[SLOT(t, k)] * a;
            dA[k] = fmaf(da, dt, dA[k]);
            ddt = fmaf(da, A[k], ddt);
            gB = fmaf(g[k], Bt, gB);
            g[k] *= a;
            P[k] *= a;
        }
        if (!final) continue;
        gB = pr_group_reduce<G>(gB, pr_op_sum());
        ddt = pr_group_reduce<G>(ddt, pr_op_sum()) + gB * u;
        if (me.lane == 0 && me.ok) {
            if (p.du) p.du[i] += dy * Dk + dt * gB;
            p.dx[i] = ddt * pr_softplus_gradf(x);
        }
    }
    if (!final) {
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int n = me.lane + G * k;
            if (n >= N || !me.ok) continue;
            const long long o = ((long long)c * p.D + d) * N + n;
            p.Pa[o] = P[k], p.E[o] = g[k];
        }
        return;
    }
#pragma unroll
    for (int k = 0; k < NPL; k++) {
        const int n = me.lane + G * k;
        if (n < N && me.ok) p.dAp[((long long)c * p.D + d) * N + n] = dA[k];
    }
    __syncthreads();
    /* this block's channels summed, per (token, n), in a fixed order */
    const int nchan = min(CPB, p.D - (int)blockIdx.y * CPB);
    for (int e = tid; e < nval * N; e += SS_THREADS) {
        const int t = e / N, n = e % N, k = n / G, ln = n % G;
        float sB = 0.f, sC = 0.f;
        for (int ch = 0; ch < nchan; ch++) {
            const int th = ch * G + ln;
            sB += dBc[(t * NPL + k) * SS_THREADS + th];
            sC += st[((t + 1) * NPL + k) * SS_THREADS + th];
        }
        const long long o = ((long long)blockIdx.y * p.rows + row0 + t) * N + n;
        p.dBp[o] = sB, p.dCp[o] = sC;
    }
#undef SLOT
}

/* ---- launchers -------------------------------------------------------------------- */

struct ss_rows_of {    /* element (r, c) of a [R, C] float array, for the column sums */
    const float *p;
    long long C;
    __device__ double operator()(long long r, long long c) const { return p[r * C + c]; }
};
struct ss_dskip_term { /* dy_pre * u at (row r, channel c) */
    const float *dout, *z, *u;
    long long D;
    __device__ double operator()(long long r, long long c) const
    {
        const long long i = r * D + c;
        const float g = z ? dout[i] * z[i] * pr_sigmoidf(z[i]) : dout[i];
        return (double)g * u[i];
    }
};

__global__ void ss_add_kernel(float *dst, const float *src, long long n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

static const float *ss_ptr(const pr_tensor *t) { return t ? (const float *)t->data : nullptr; }

/* sizes, the chunk table on the device and the inputs */
/* Per-call device scratch from the caching allocator, handed back when the
 * launcher returns (stream order makes the reuse safe), so repeated calls do
 * not grow the step arena. */
struct ss_scratch {
    void *p[8] = {};
    size_t n[8] = {};
    int k = 0;
    float *take(long long floats)
    {
        PR_CHECK(k < 8, "selective_scan: scratch slots exhausted");
        n[k] = sizeof(float) * (size_t)(floats > 0 ? floats : 1), p[k] = pr_cuda_malloc(n[k]);
        return (float *)p[k++];
    }
    ~ss_scratch()
    {
        for (int i = 0; i < k; i++) pr_cuda_free(p[i], n[i]);
    }
};

static ss_prob ss_prob_of(const pr_node *n, ss_scratch &sc)
{
    for (int i = 0; i < 9; i++)
        PR_CHECK(!n->in[i] || n->in[i]->dtype == PR_F32, "selective_scan: CUDA supports f32 only (input %d is %s)",
                 i, pr_dtype_name(n->in[i]->dtype));
    ss_prob p = {};
    const pr_tensor *u = n->in[0];
    p.u = ss_ptr(u), p.delta = ss_ptr(n->in[1]), p.A = ss_ptr(n->in[2]), p.Bm = ss_ptr(n->in[3]);
    p.Cm = ss_ptr(n->in[4]), p.Dk = ss_ptr(n->in[5]), p.z = ss_ptr(n->in[6]), p.bias = ss_ptr(n->in[7]);
    p.h0 = ss_ptr(n->in[8]);
    p.D = (int)u->shape[2], p.N = (int)n->in[2]->shape[1], p.rows = (int)(u->shape[0] * u->shape[1]);
    PR_CHECK(p.N <= 64, "selective_scan: CUDA supports N <= 64 states, got N = %d", p.N);
    int64_t *seq;
    p.S = (int)pr_seqlens_read("selective_scan", n->in[9], u->shape[0], u->shape[1], &seq);
    int nch = 0;
    for (int s = 0; s < p.S; s++) nch += (int)((seq[s + 1] - seq[s] + SS_L - 1) / SS_L);
    int *h = (int *)malloc(sizeof(int) * (3 * (size_t)nch + p.S + 1));
    PR_CHECK(h, "selective_scan: out of host memory");
    int *cb = h + 3 * nch, c = 0;
    for (int s = 0; s < p.S; s++) {
        cb[s] = c;
        for (int64_t t0 = seq[s]; t0 < seq[s + 1]; t0 += SS_L, c++) {
            h[3 * c] = (int)t0, h[3 * c + 1] = (int)(seq[s + 1] - t0 < SS_L ? seq[s + 1] - t0 : SS_L);
            h[3 * c + 2] = s;
        }
    }
    cb[p.S] = c;
    const long long ints = 3 * (long long)nch + p.S + 1;
    int *dev = (int *)sc.take(ints);
    pr_cuda_memcpy(dev, h, sizeof(int) * (size_t)ints, 1, 0);
    p.chunks = dev, p.cbase = dev + 3 * nch, p.nch = nch;
    free(h);
    free(seq);
    return p;
}

/* G lanes per channel and NPL states per lane for N states */
template <class F> static void ss_dispatch(int N, F launch)
{
    if (N <= 4) launch(std::integral_constant<int, 4>(), std::integral_constant<int, 1>());
    else if (N <= 8) launch(std::integral_constant<int, 8>(), std::integral_constant<int, 1>());
    else if (N <= 16) launch(std::integral_constant<int, 16>(), std::integral_constant<int, 1>());
    else if (N <= 32) launch(std::integral_constant<int, 32>(), std::integral_constant<int, 1>());
    else launch(std::integral_constant<int, 32>(), std::integral_constant<int, 2>());
}

static void ss_fwd_chunks(const ss_prob &p, int final, cudaStream_t st)
{
    ss_dispatch(p.N, [&](auto g, auto k) {
        constexpr int G = decltype(g)::value, NPL = decltype(k)::value;
        const dim3 grid(p.nch, (p.D + SS_THREADS / G - 1) / (SS_THREADS / G));
        ss_fwd_chunk_kernel<G, NPL><<<grid, SS_THREADS, 0, st>>>(p, final);
    });
    PR_CUDA_LAUNCH_CHECK();
}

static void ss_bwd_chunks(const ss_prob &p, int final, cudaStream_t st)
{
    ss_dispatch(p.N, [&](auto g, auto k) {
        constexpr int G = decltype(g)::value, NPL = decltype(k)::value;
        const size_t bytes = sizeof(float) * ((2 * SS_L + 1) * NPL * SS_THREADS + SS_L * (SS_THREADS / G));
        pr_cuda_smem_prep((const void *)ss_bwd_chunk_kernel<G, NPL>, bytes);
        const dim3 grid(p.nch, (p.D + SS_THREADS / G - 1) / (SS_THREADS / G));
        ss_bwd_chunk_kernel<G, NPL><<<grid, SS_THREADS, bytes, st>>>(p, final);
    });
    PR_CUDA_LAUNCH_CHECK();
}

static void ss_carry(const ss_prob &p, int backward, cudaStream_t st)
{
    const long long n = (long long)p.S * p.D * p.N;
    ss_carry_kernel<<<pr_cuda_blocks(n, 256), 256, 0, st>>>(p, backward);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_selective_scan_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    ss_scratch sc;
    ss_prob p = ss_prob_of(n, sc);
    p.y = (float *)n->out[0]->data, p.ht = (float *)n->out[1]->data;
    const long long cdn = (long long)p.nch * p.D * p.N;
    p.Pa = sc.take(cdn), p.E = sc.take(cdn);
    p.Sin = n->n_saved > 0 ? (float *)n->saved[0]->data : sc.take(cdn);
    cudaStream_t st = pr_cuda_stream(ctx);
    ss_fwd_chunks(p, 0, st);
    ss_carry(p, 0, st);
    ss_fwd_chunks(p, 1, st);
}

extern "C" void pr_selective_scan_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    PR_CHECK(n->n_saved == 1, "selective_scan: backward without the saved chunk states");
    ss_scratch sc;
    ss_prob p = ss_prob_of(n, sc);
    p.Sin = (float *)n->saved[0]->data;
    p.dout = ss_ptr(n->out[0]->grad), p.dht = ss_ptr(n->out[1]->grad);
    pr_tensor *g[9];
    for (int i = 0; i < 9; i++) g[i] = pr_in_grad(n, i);
    p.du = g[0] ? (float *)g[0]->data : nullptr, p.dz = g[6] ? (float *)g[6]->data : nullptr;
    p.dh0 = g[8] ? (float *)g[8]->data : nullptr;
    const long long cdn = (long long)p.nch * p.D * p.N, rd = (long long)p.rows * p.D, rn = (long long)p.rows * p.N;
    const int G = p.N <= 4 ? 4 : p.N <= 8 ? 8 : p.N <= 16 ? 16 : 32;
    const long long nslab = (p.D + SS_THREADS / G - 1) / (SS_THREADS / G);
    p.Pa = sc.take(cdn), p.E = sc.take(cdn), p.cin = sc.take(cdn), p.dAp = sc.take(cdn);
    p.dx = sc.take(rd), p.dBp = sc.take(nslab * rn), p.dCp = sc.take(nslab * rn);
    cudaStream_t st = pr_cuda_stream(ctx);
    ss_bwd_chunks(p, 0, st);
    ss_carry(p, 1, st);
    ss_bwd_chunks(p, 1, st);
    if (g[1]) {
        ss_add_kernel<<<pr_cuda_blocks(rd, 256), 256, 0, st>>>((float *)g[1]->data, p.dx, rd);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (g[7]) pr_cuda_colsum_add(st, ss_rows_of{p.dx, p.D}, p.rows, p.D, (float *)g[7]->data, 1.0);
    if (g[2]) pr_cuda_colsum_add(st, ss_rows_of{p.dAp, (long long)p.D * p.N}, p.nch, (long long)p.D * p.N,
                                 (float *)g[2]->data, 1.0);
    if (g[3]) pr_cuda_colsum_add(st, ss_rows_of{p.dBp, rn}, nslab, rn, (float *)g[3]->data, 1.0);
    if (g[4]) pr_cuda_colsum_add(st, ss_rows_of{p.dCp, rn}, nslab, rn, (float *)g[4]->data, 1.0);
    if (g[5]) pr_cuda_colsum_add(st, ss_dskip_term{p.dout, p.z, p.u, p.D}, p.rows, p.D, (float *)g[5]->data, 1.0);
}
