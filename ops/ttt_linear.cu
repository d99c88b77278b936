/* ops/ttt_linear.cu: TTT-Linear on CUDA, f32, forward and backward.
 *
 * One thread block per (batch, head) walks the mini-batches in order (the
 * backward in reverse), with the inner state W [K,K] in shared memory and the
 * mini-batch's rows beside it; inside a mini-batch the work is parallel:
 * small matmuls against W (a thread per column and 4 rows), a warp per row
 * for the LayerNorms. The math and the backward's derivation are the CPU
 * path's (ops/ttt_linear.c), which is the reference. No float atomics: the
 * dw, db partial sums of each (b,h) are reduced over b by the kit's column sum,
 * so results are bitwise reproducible. Limits: K <= 128 and shared memory of
 * 2K(K+4) + 8 mb K floats (about 200 KB at K = 128, mb = 16). bf16 data (q,
 * k, v, eta, o; ops/ttt_linear.h) is staged: f32 copies in, the f32 kernels,
 * o and the bf16 grads rounded back once.
 */
#include "ops/ops.h"
#include "ops/recurrence/recurrence_cuda.cuh" /* rec_mm_f32: the block's register-tiled product */
#include "ops/ttt_kit.cuh"
#include "ops/ttt_linear.h"

#define TTT_THREADS 256
#define TTT_RT 4     /* rows per thread in the matmuls against W (the float4 loops assume 4) */
#define TTT_MAXK 128

struct ttt_args {
    const float *q, *k, *v, *w, *b, *eta, *h0, *hb0;
    float *o, *ht, *hbt;                        /* forward outputs */
    float *Ws, *hbs;                            /* starting states [B,H,NMB,K,K], [B,H,NMB,K] */
    const float *dout, *dht, *dhbt;             /* upstream grads */
    float *dq, *dk, *dv, *deta, *dh0, *dhb0;    /* input grads, accumulated; NULL: not needed */
    float *dwp, *dbp;                           /* per-(b,h) partials of dw, db [B,H,K] */
    int B, T, H, K, mb, nmb, ldw, mbp;
    float scale, eps;
};

/* Shared-memory layout: when K % 4 == 0 every [rows, K] buffer starts on 16
 * bytes and W's row stride ldw = K + 4, so the loops below read 4 floats per
 * instruction (a quarter-warp reading 4-float rows 132 floats apart covers all
 * 32 banks once); otherwise ldw = K | 1 (odd: a warp reading a column of W
 * hits distinct banks) and the loops read floats one by one. */
__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }

/* out[i,c] = sum_a A[i,a] Bm[a,c] (or Bm[c,a] when TRANS) for rows i < m,
 * handed to epi(i, c, acc). A is [mbp,K] (rows padded to TTT_RT), Bm has row
 * stride ldb. A thread owns a column c and TTT_RT rows. */
template <bool TRANS, typename Epi>
__device__ void mm_rows(const float *A, int m, const float *Bm, int K, int ldb, Epi epi)
{
    int groups = (m + TTT_RT - 1) / TTT_RT;
    for (int idx = threadIdx.x; idx < groups * K; idx += blockDim.x) {
        int c = idx % K, i0 = (idx / K) * TTT_RT;
        float acc[TTT_RT] = {0};
        if ((K & 3) == 0) {
            for (int a = 0; a < K; a += 4) {
                float4 b4 = TRANS ? ld4(Bm + c * ldb + a)
                                  : make_float4(Bm[a * ldb + c], Bm[(a + 1) * ldb + c], Bm[(a + 2) * ldb + c],
                                                Bm[(a + 3) * ldb + c]);
#pragma unroll
                for (int r = 0; r < TTT_RT; r++) {
                    float4 x = ld4(A + (i0 + r) * K + a);
                    acc[r] += x.x * b4.x + x.y * b4.y + x.z * b4.z + x.w * b4.w;
                }
            }
        } else {
            for (int a = 0; a < K; a++) {
                float bv = TRANS ? Bm[c * ldb + a] : Bm[a * ldb + c];
#pragma unroll
                for (int r = 0; r < TTT_RT; r++) acc[r] += A[(i0 + r) * K + a] * bv;
            }
        }
#pragma unroll
        for (int r = 0; r < TTT_RT; r++)
            if (i0 + r < m) epi(i0 + r, c, acc[r]);
    }
}

/* M[r,c] += alpha sum_{j<m} (X[j,r] Y[j,c] + X2[j,r] Y2[j,c]) over the K x K
 * block of M (row stride ldm); X2, Y2 may be NULL. K a multiple of 32: the
 * recurrence's fp32 block product (each lane a 4 x 8 piece of a warp's 32 x
 * 32 blocks, 12 loads for 32 FMAs a step); else a thread owns a column c and
 * TTT_RT rows (5 loads for 4 FMAs). */
__device__ void outer_acc(float *M, int ldm, int K, int m, float alpha, const float *X, const float *Y,
                          const float *X2, const float *Y2)
{
    static_assert(TTT_THREADS == PR_REC_THREADS, "rec_mm_f32 divides the blocks among PR_REC_WARPS warps");
    if ((K & 31) == 0) {
        rec_mm_f32<true, false>(M, ldm, X, K, Y, K, K, K, m, alpha, true);
        if (X2) rec_mm_f32<true, false>(M, ldm, X2, K, Y2, K, K, K, m, alpha, true);
        return;
    }
    int groups = (K + TTT_RT - 1) / TTT_RT;
    const bool vec = (K & 3) == 0;
    for (int idx = threadIdx.x; idx < groups * K; idx += blockDim.x) {
        int c = idx % K, r0 = (idx / K) * TTT_RT;
        float acc[TTT_RT] = {0};
        for (int j = 0; j < 2 * m; j++) {
            const float *Xs = j < m ? X : X2, *Ys = j < m ? Y : Y2;
            if (!Xs) break;
            const int jj = j < m ? j : j - m;
            float y = Ys[jj * K + c];
            if (vec) {
                float4 x = ld4(Xs + jj * K + r0);
                acc[0] += x.x * y, acc[1] += x.y * y, acc[2] += x.z * y, acc[3] += x.w * y;
            } else {
#pragma unroll
                for (int r = 0; r < TTT_RT; r++) acc[r] += Xs[jj * K + min(r0 + r, K - 1)] * y;
            }
        }
#pragma unroll
        for (int r = 0; r < TTT_RT; r++)
            if (r0 + r < K) M[(r0 + r) * ldm + c] += alpha * acc[r];
    }
}

/* dst[r*ldd + c] = src[r*lds + c] for a K x K matrix. With one block an SM
 * a load loop that stores each value before loading the next waits a full
 * memory latency per element; here every thread has four loads in flight
 * before its stores (float4 ones when K % 4 == 0: both strides are then
 * multiples of 4 floats and both bases 16-byte aligned). */
__device__ void mat_copy(float *dst, int ldd, const float *src, int lds, int K)
{
    const int V = (K & 3) == 0 ? 4 : 1, KV = K / V, n = K * KV, nth = blockDim.x;
    for (int e0 = threadIdx.x; e0 < n; e0 += 4 * nth) {
        float4 x[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int e = e0 + u * nth, r = e / KV, c = (e - r * KV) * V;
            if (e >= n) break;
            if (V == 4) x[u] = ld4(src + r * lds + c);
            else x[u].x = src[r * lds + c];
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int e = e0 + u * nth, r = e / KV, c = (e - r * KV) * V;
            if (e >= n) break;
            if (V == 4) *reinterpret_cast<float4 *>(dst + r * ldd + c) = x[u];
            else dst[r * ldd + c] = x[u].x;
        }
    }
}

/* the mini-batch's rows [m, K] of up to four [B,T,H,K] inputs (NULL: none)
 * into shared memory, the first scaled by alpha; all loads of an element
 * index issued before its stores, as float4 when K % 4 == 0 */
__device__ void ld_rows4(const float *const (&src)[4], float *const (&dst)[4], float alpha, long long g0, int H,
                         int m, int K)
{
    const int V = (K & 3) == 0 ? 4 : 1, KV = K / V;
    for (int idx = threadIdx.x; idx < m * KV; idx += blockDim.x) {
        const int i = idx / KV, c = (idx - i * KV) * V;
        const long long g = g0 + (long long)i * H * K + c;
        float4 x[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (src[u]) {
                if (V == 4) x[u] = ld4(src[u] + g);
                else x[u].x = src[u][g];
            }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (src[u]) {
                const float f = u == 0 ? alpha : 1.f;
                if (V == 4)
                    *reinterpret_cast<float4 *>(dst[u] + i * K + c) =
                        make_float4(f * x[u].x, f * x[u].y, f * x[u].z, f * x[u].w);
                else dst[u][i * K + c] = f * x[u].x;
            }
    }
}

/* A warp's view of one row of K <= 32*KPL values: lane holds c = lane + 32 i. */
template <int KPL>
struct row_t {
    float x[KPL];
};

template <int KPL>
__device__ __forceinline__ row_t<KPL> row_load(const float *p, int K)
{
    row_t<KPL> r;
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < KPL; i++) r.x[i] = lane + 32 * i < K ? p[lane + 32 * i] : 0.f;
    return r;
}

template <int KPL>
__device__ __forceinline__ void row_store(float *p, const row_t<KPL> &r, int K)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < KPL; i++)
        if (lane + 32 * i < K) p[lane + 32 * i] = r.x[i];
}

template <int KPL>
__device__ __forceinline__ float row_sum(const row_t<KPL> &r)
{
    float s = 0;
#pragma unroll
    for (int i = 0; i < KPL; i++) s += r.x[i];
    return ttk_warp_sum(s);
}

template <int KPL>
__device__ __forceinline__ float row_dot(const row_t<KPL> &a, const row_t<KPL> &b)
{
    float s = 0;
#pragma unroll
    for (int i = 0; i < KPL; i++) s += a.x[i] * b.x[i];
    return ttk_warp_sum(s);
}

/* x -> (x - mean) / s in place (padding lanes stay 0); returns s */
template <int KPL>
__device__ __forceinline__ float row_ln(row_t<KPL> &r, int K, float eps)
{
    int lane = threadIdx.x & 31;
    float mu = row_sum(r) / K, var = 0;
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        float d = lane + 32 * i < K ? r.x[i] - mu : 0.f;
        var += d * d;
        r.x[i] = d;
    }
    float s = sqrtf(ttk_warp_sum(var) / K + eps);
#pragma unroll
    for (int i = 0; i < KPL; i++) r.x[i] /= s;
    return s;
}

/* LayerNorm backward without the affine part: (g - mean g - xh mean(g xh)) / s */
template <int KPL>
__device__ __forceinline__ row_t<KPL> row_ln_back(const row_t<KPL> &xh, float s, const row_t<KPL> &g, int K)
{
    float mg = row_sum(g) / K, mgx = row_dot(g, xh) / K;
    row_t<KPL> d;
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < KPL; i++) d.x[i] = lane + 32 * i < K ? (g.x[i] - mg - xh.x[i] * mgx) / s : 0.f;
    return d;
}

/* out[t*m + j] = f(t, j, X_t . Y_j) for j <= t, 0 above the diagonal; a warp
 * per pair, lanes along K (a thread per pair would hit one bank 16 ways) */
template <int KPL, typename F>
__device__ void tri_dots(const float *X, const float *Y, int m, int K, float *out, F f)
{
    for (int p = threadIdx.x >> 5; p < m * m; p += blockDim.x >> 5) {
        int t = p / m, j = p % m;
        float s = j <= t ? row_dot(row_load<KPL>(X + t * K, K), row_load<KPL>(Y + j * K, K)) : 0.f;
        if ((threadIdx.x & 31) == 0) out[p] = j <= t ? f(t, j, s) : 0.f;
    }
}

/* Z row (in z) -> its normalized form xz (in z), scale sz, the residual
 * y = w xz + b - v + k (into y, which may alias v) and gz = dl/dZ. */
template <int KPL>
__device__ void inner_grad_row(float *z, const float *v, const float *k, const float *w, const float *b, int K,
                               float eps, float *gz, float *sz, float *y)
{
    row_t<KPL> xz = row_load<KPL>(z, K), vr = row_load<KPL>(v, K), kr = row_load<KPL>(k, K);
    row_t<KPL> wr = row_load<KPL>(w, K), br = row_load<KPL>(b, K), yr, G;
    float s = row_ln(xz, K, eps);
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        yr.x[i] = wr.x[i] * xz.x[i] + br.x[i] - vr.x[i] + kr.x[i];
        G.x[i] = wr.x[i] * yr.x[i];
    }
    row_store(z, xz, K);
    row_store(gz, row_ln_back(xz, s, G, K), K);
    if (y) row_store(y, yr, K);
    if ((threadIdx.x & 31) == 0) *sz = s;
}

/* global offset of row i of mini-batch starting at t0 */
__device__ __forceinline__ long long grow(const ttt_args &a, int bi, int h, int t)
{
    return (((long long)bi * a.T + t) * a.H + h) * a.K;
}

/* ---- forward ----------------------------------------------------------------- */

template <int KPL>
__global__ void __launch_bounds__(TTT_THREADS) ttt_fwd_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    const int K = a.K, ldw = a.ldw, mb = a.mb, RK = a.mbp * K;
    float *W = sm, *hb = W + K * ldw, *w = hb + K, *b = w + K, *qs = b + K, *kb = qs + RK, *vb = kb + RK;
    float *xz = vb + RK, *gz = xz + RK, *zb = gz + RK, *cm = zb + RK, *sz = cm + mb * mb, *eta = sz + mb;
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H, tid = threadIdx.x, nth = blockDim.x;
    const int warp = tid >> 5, nwarp = nth >> 5;
    const long long KK = (long long)K * K;

    for (int i = tid; i < (int)(eta + mb - sm); i += nth) sm[i] = 0.f;
    __syncthreads();
    for (int i = tid; i < K * K; i += nth) W[(i / K) * ldw + i % K] = a.h0 ? a.h0[bh * KK + i] : 0.f;
    for (int c = tid; c < K; c += nth) {
        hb[c] = a.hb0 ? a.hb0[(long long)bh * K + c] : 0.f;
        w[c] = a.w[h * K + c], b[c] = a.b[h * K + c];
    }
    __syncthreads();
    for (int n = 0; n < a.nmb; n++) {
        const int t0 = n * mb, m = min(mb, a.T - t0);
        if (a.Ws) {
            float *Wd = a.Ws + (bh * (long long)a.nmb + n) * KK;
            mat_copy(Wd, K, W, ldw, K);
            for (int c = tid; c < K; c += nth) a.hbs[(bh * (long long)a.nmb + n) * K + c] = hb[c];
        }
        ld_rows4({a.q, a.k, a.v, nullptr}, {qs, kb, vb, nullptr}, a.scale, grow(a, bi, h, t0), a.H, m, K);
        for (int i = tid; i < m; i += nth) eta[i] = a.eta[((long long)bi * a.T + t0 + i) * a.H + h];
        __syncthreads();
        mm_rows<false>(kb, m, W, K, ldw, [&](int i, int c, float acc) { xz[i * K + c] = acc + hb[c]; });
        __syncthreads();
        /* cm_tj = eta_t (qs_t . k_j + 1) for j <= t */
        tri_dots<KPL>(qs, kb, m, K, cm, [&](int t, int, float d) { return eta[t] * (d + 1.f); });
        for (int i = warp; i < m; i += nwarp)
            inner_grad_row<KPL>(xz + i * K, vb + i * K, kb + i * K, w, b, K, a.eps, gz + i * K, sz + i, nullptr);
        __syncthreads();
        mm_rows<false>(qs, m, W, K, ldw, [&](int i, int c, float acc) {
            float s = acc + hb[c];
            for (int j = 0; j <= i; j++) s -= cm[i * m + j] * gz[j * K + c];
            zb[i * K + c] = s;
        });
        __syncthreads();
        for (int i = warp; i < m; i += nwarp) {
            row_t<KPL> z = row_load<KPL>(zb + i * K, K), xh = z, wr = row_load<KPL>(w, K), br = row_load<KPL>(b, K);
            row_ln(xh, K, a.eps);
#pragma unroll
            for (int r = 0; r < KPL; r++) z.x[r] += wr.x[r] * xh.x[r] + br.x[r];
            row_store(a.o + grow(a, bi, h, t0 + i), z, K);
        }
        const float e = eta[m - 1];
        outer_acc(W, ldw, K, m, -e, kb, gz, nullptr, nullptr);
        for (int c = tid; c < K; c += nth) {
            float s = 0;
            for (int j = 0; j < m; j++) s += gz[j * K + c];
            hb[c] -= e * s;
        }
        __syncthreads();
    }
    mat_copy(a.ht + bh * KK, K, W, ldw, K);
    for (int c = tid; c < K; c += nth) a.hbt[(long long)bh * K + c] = hb[c];
}

/* ---- backward -----------------------------------------------------------------
 * Phases per mini-batch (reverse order), each ended by a barrier; names as in
 * ops/ttt_linear.c's mb_backward. e = eta of the mini-batch's last token.   */

template <int KPL>
__global__ void __launch_bounds__(TTT_THREADS) ttt_bwd_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    const int K = a.K, ldw = a.ldw, mb = a.mb, RK = a.mbp * K;
    float *W = sm, *dW = W + K * ldw, *hb = dW + K * ldw, *dhb = hb + K, *w = dhb + K, *b = w + K;
    float *dwp = b + K, *dbp = dwp + K, *qs = dbp + K, *kb = qs + RK, *yb = kb + RK, *xz = yb + RK;
    float *gz = xz + RK, *xb = gz + RK, *dzb = xb + RK, *dgz = dzb + RK, *at = dgz + RK, *D = at + mb * mb;
    float *eta = D + mb * mb, *sz = eta + mb, *sb = sz + mb, *pg = sb + mb;
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H, tid = threadIdx.x, nth = blockDim.x;
    const int warp = tid >> 5, nwarp = nth >> 5;
    const long long KK = (long long)K * K;

    for (int i = tid; i < (int)(pg + mb - sm); i += nth) sm[i] = 0.f;
    __syncthreads();
    for (int i = tid; i < K * K; i += nth) dW[(i / K) * ldw + i % K] = a.dht ? a.dht[bh * KK + i] : 0.f;
    for (int c = tid; c < K; c += nth) {
        dhb[c] = a.dhbt ? a.dhbt[(long long)bh * K + c] : 0.f;
        w[c] = a.w[h * K + c], b[c] = a.b[h * K + c];
    }
    for (int n = a.nmb - 1; n >= 0; n--) {
        const int t0 = n * mb, m = min(mb, a.T - t0);
        const float *Wsrc = a.Ws + (bh * (long long)a.nmb + n) * KK;
        mat_copy(W, ldw, Wsrc, K, K);
        for (int c = tid; c < K; c += nth) hb[c] = a.hbs[(bh * (long long)a.nmb + n) * K + c];
        ld_rows4({a.q, a.k, a.v, a.dout}, {qs, kb, yb, dzb}, a.scale, grow(a, bi, h, t0), a.H, m, K);
        for (int i = tid; i < m; i += nth) eta[i] = a.eta[((long long)bi * a.T + t0 + i) * a.H + h];
        __syncthreads();
        /* recompute: Z, Attn */
        mm_rows<false>(kb, m, W, K, ldw, [&](int i, int c, float acc) { xz[i * K + c] = acc + hb[c]; });
        tri_dots<KPL>(qs, kb, m, K, at, [](int, int, float d) { return d; });
        __syncthreads();
        for (int i = warp; i < m; i += nwarp)
            inner_grad_row<KPL>(xz + i * K, yb + i * K, kb + i * K, w, b, K, a.eps, gz + i * K, sz + i, yb + i * K);
        __syncthreads();
        /* recompute: Zb */
        mm_rows<false>(qs, m, W, K, ldw, [&](int i, int c, float acc) {
            float s = acc + hb[c];
            for (int j = 0; j <= i; j++) s -= eta[i] * (at[i * m + j] + 1.f) * gz[j * K + c];
            xb[i * K + c] = s;
        });
        __syncthreads();
        for (int i = warp; i < m; i += nwarp) {
            row_t<KPL> x = row_load<KPL>(xb + i * K, K);
            float s = row_ln(x, K, a.eps);
            row_store(xb + i * K, x, K);
            if ((tid & 31) == 0) sb[i] = s;
        }
        __syncthreads();
        /* output LayerNorm: dw, db partials (a thread per column: fixed order) */
        for (int c = tid; c < K; c += nth) {
            float sw = 0, sbias = 0;
            for (int t = 0; t < m; t++) sw += dzb[t * K + c] * xb[t * K + c], sbias += dzb[t * K + c];
            dwp[c] += sw, dbp[c] += sbias;
        }
        __syncthreads();
        /* dZb = do + LNback(xb, w do) */
        for (int i = warp; i < m; i += nwarp) {
            row_t<KPL> d = row_load<KPL>(dzb + i * K, K), x = row_load<KPL>(xb + i * K, K);
            row_t<KPL> wr = row_load<KPL>(w, K), g;
#pragma unroll
            for (int r = 0; r < KPL; r++) g.x[r] = wr.x[r] * d.x[r];
            row_t<KPL> dz = row_ln_back(x, sb[i], g, K);
#pragma unroll
            for (int r = 0; r < KPL; r++) dz.x[r] += d.x[r];
            row_store(dzb + i * K, dz, K);
        }
        __syncthreads();
        /* D_tj = dZb_t . gz_j; P_j = k_j dW' + dhb' (into dgz) */
        tri_dots<KPL>(dzb, gz, m, K, D, [](int, int, float d) { return d; });
        mm_rows<false>(kb, m, dW, K, ldw, [&](int i, int c, float acc) { dgz[i * K + c] = acc + dhb[c]; });
        __syncthreads();
        for (int j = warp; j < m; j += nwarp) {
            float s = row_dot(row_load<KPL>(dgz + j * K, K), row_load<KPL>(gz + j * K, K));
            if ((tid & 31) == 0) pg[j] = s;
        }
        __syncthreads();
        const float e = eta[m - 1];
        /* deta; dgz; the dk terms through dW' and the dual form; dq */
        for (int t = tid; t < m; t += nth) {
            float s = 0;
            for (int j = 0; j <= t; j++) s -= (at[t * m + j] + 1.f) * D[t * m + j];
            if (t == m - 1)
                for (int j = 0; j < m; j++) s -= pg[j];
            if (a.deta) a.deta[((long long)bi * a.T + t0 + t) * a.H + h] += s;
        }
        for (int idx = tid; idx < m * K; idx += nth) {
            int j = idx / K, c = idx % K;
            float s = -e * dgz[idx];
            for (int t = j; t < m; t++) s -= eta[t] * (at[t * m + j] + 1.f) * dzb[t * K + c];
            dgz[idx] = s;
        }
        mm_rows<true>(gz, m, dW, K, ldw, [&](int j, int c, float acc) {
            float s = -e * acc;
            for (int t = j; t < m; t++) s -= eta[t] * D[t * m + j] * qs[t * K + c];
            xb[j * K + c] = s;
        });
        if (a.dq)
            mm_rows<true>(dzb, m, W, K, ldw, [&](int t, int c, float acc) {
                float s = acc;
                for (int j = 0; j <= t; j++) s -= eta[t] * D[t * m + j] * kb[j * K + c];
                a.dq[grow(a, bi, h, t0 + t) + c] += a.scale * s;
            });
        __syncthreads();
        /* through gz = LNback(xz, sz, G): dG (into gz), dZ (into dgz), dv, dk */
        for (int j = warp; j < m; j += nwarp) {
            row_t<KPL> xh = row_load<KPL>(xz + j * K, K), y = row_load<KPL>(yb + j * K, K);
            row_t<KPL> g = row_load<KPL>(gz + j * K, K), dg = row_load<KPL>(dgz + j * K, K);
            row_t<KPL> wr = row_load<KPL>(w, K), G, dxh;
            const float s = sz[j];
#pragma unroll
            for (int r = 0; r < KPL; r++) G.x[r] = wr.x[r] * y.x[r];
            float mgx = row_dot(G, xh) / K, mdx = row_dot(dg, xh) / K, dsz = -row_dot(dg, g) / s;
            row_t<KPL> dG = row_ln_back(xh, s, dg, K);
#pragma unroll
            for (int r = 0; r < KPL; r++)
                dxh.x[r] = wr.x[r] * wr.x[r] * dG.x[r] - (dg.x[r] * mgx + G.x[r] * mdx) / s;
            row_t<KPL> dZ = row_ln_back(xh, s, dxh, K);
            int lane = tid & 31;
#pragma unroll
            for (int r = 0; r < KPL; r++) {
                int c = lane + 32 * r;
                if (c >= K) continue;
                dZ.x[r] += dsz * xh.x[r] / K;
                xb[j * K + c] += wr.x[r] * dG.x[r];
                if (a.dv) a.dv[grow(a, bi, h, t0 + j) + c] -= wr.x[r] * dG.x[r];
            }
            row_store(gz + j * K, dG, K);
            row_store(dgz + j * K, dZ, K);
        }
        __syncthreads();
        /* dk; the start state's grads; dw, db partials */
        if (a.dk)
            mm_rows<true>(dgz, m, W, K, ldw, [&](int j, int c, float acc) {
                a.dk[grow(a, bi, h, t0 + j) + c] += xb[j * K + c] + acc;
            });
        outer_acc(dW, ldw, K, m, 1.f, qs, dzb, kb, dgz);
        for (int c = tid; c < K; c += nth) {
            float s = 0, sw = 0, sbias = 0;
            for (int t = 0; t < m; t++) {
                float dG = gz[t * K + c], x = xz[t * K + c];
                s += dzb[t * K + c] + dgz[t * K + c];
                sw += dG * (w[c] * x + yb[t * K + c]);
                sbias += w[c] * dG;
            }
            dhb[c] += s, dwp[c] += sw, dbp[c] += sbias;
        }
        __syncthreads();
    }
    if (a.dh0)
        for (int i = tid; i < K * K; i += nth) a.dh0[bh * KK + i] += dW[(i / K) * ldw + i % K];
    for (int c = tid; c < K; c += nth) {
        if (a.dhb0) a.dhb0[(long long)bh * K + c] += dhb[c];
        a.dwp[(long long)bh * K + c] = dwp[c], a.dbp[(long long)bh * K + c] = dbp[c];
    }
}

/* ---- launchers ----------------------------------------------------------------- */

static ttt_args ttt_args_of(pr_ctx *ctx, cudaStream_t st, const pr_node *n)
{
    PR_CHECK(n->in[0]->dtype == PR_F32 || n->in[0]->dtype == PR_BF16,
             "ttt_linear: CUDA computes f32 and bf16 data, not %s (run f64 on the CPU)", pr_dtype_name(n->in[0]->dtype));
    ttt_args a = {};
    a.q = ttk_f32_in(ctx, st, n->in[0]), a.k = ttk_f32_in(ctx, st, n->in[1]), a.v = ttk_f32_in(ctx, st, n->in[2]);
    a.w = ttk_f32_in(ctx, st, n->in[3]), a.b = ttk_f32_in(ctx, st, n->in[4]), a.eta = ttk_f32_in(ctx, st, n->in[5]);
    a.h0 = ttk_f32_in(ctx, st, n->in[6]), a.hb0 = ttk_f32_in(ctx, st, n->in[7]);
    a.B = (int)n->in[0]->shape[0], a.T = (int)n->in[0]->shape[1], a.H = (int)n->in[0]->shape[2];
    a.K = (int)n->in[0]->shape[3];
    a.mb = (int)n->iarg[0];
    a.nmb = (a.T + a.mb - 1) / a.mb;
    a.ldw = a.K % 4 == 0 ? a.K + 4 : a.K | 1;
    a.mbp = (a.mb + TTT_RT - 1) / TTT_RT * TTT_RT;
    a.scale = (float)n->farg[0], a.eps = (float)n->farg[1];
    PR_CHECK(a.K <= TTT_MAXK, "ttt_linear: CUDA supports K <= %d, got K = %d", TTT_MAXK, a.K);
    return a;
}

/* dynamic shared memory of a kernel instance, opted in up to the device's limit */
static void ttt_smem(const void *kernel, size_t bytes, const ttt_args &a)
{
    int dev = 0, limit = 0;
    PR_CUDA_CHECK(cudaGetDevice(&dev));
    PR_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    PR_CHECK(bytes <= (size_t)limit, "ttt_linear: K = %d with mini_batch = %d needs %zu bytes of shared "
             "memory; the device has %d per block (use a smaller mini_batch)", a.K, a.mb, bytes, limit);
    PR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int KPL>
static void launch_fwd(const ttt_args &a, cudaStream_t st)
{
    size_t fl = (size_t)a.K * a.ldw + 3 * a.K + 6 * (size_t)a.mbp * a.K + (size_t)a.mb * a.mb + 2 * a.mb;
    ttt_smem((const void *)ttt_fwd_kernel<KPL>, fl * sizeof(float), a);
    ttt_fwd_kernel<KPL><<<a.B * a.H, TTT_THREADS, fl * sizeof(float), st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
}

template <int KPL>
static void launch_bwd(const ttt_args &a, cudaStream_t st)
{
    size_t fl = 2 * (size_t)a.K * a.ldw + 6 * a.K + 8 * (size_t)a.mbp * a.K + 2 * (size_t)a.mb * a.mb + 4 * a.mb;
    ttt_smem((const void *)ttt_bwd_kernel<KPL>, fl * sizeof(float), a);
    ttt_bwd_kernel<KPL><<<a.B * a.H, TTT_THREADS, fl * sizeof(float), st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_ttt_linear_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    cudaStream_t st = pr_cuda_stream(ctx);
    ttt_args a = ttt_args_of(ctx, st, n);
    a.o = ttk_f32_out(ctx, n->out[0]), a.ht = (float *)n->out[1]->data, a.hbt = (float *)n->out[2]->data;
    if (n->n_saved == 2) a.Ws = (float *)n->saved[0]->data, a.hbs = (float *)n->saved[1]->data;
    if (a.K <= 32) launch_fwd<1>(a, st);
    else if (a.K <= 64) launch_fwd<2>(a, st);
    else launch_fwd<4>(a, st);
    ttk_f32_done(st, n->out[0], a.o, false);
}

extern "C" void pr_ttt_linear_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    PR_CHECK(n->n_saved == 2, "ttt_linear: backward without saved state");
    cudaStream_t st = pr_cuda_stream(ctx);
    ttt_args a = ttt_args_of(ctx, st, n);
    a.Ws = (float *)n->saved[0]->data, a.hbs = (float *)n->saved[1]->data;
    a.dout = ttk_f32_in(ctx, st, n->out[0]->grad), a.dht = ttk_in(n->out[1]->grad), a.dhbt = ttk_in(n->out[2]->grad);
    /* the kernels add to the grads; a bf16 grad gets the sum in f32 scratch, added and rounded once */
    pr_tensor *gq = pr_in_grad(n, 0), *gk = pr_in_grad(n, 1), *gv = pr_in_grad(n, 2), *geta = pr_in_grad(n, 5);
    a.dq = ttk_f32_out(ctx, gq), a.dk = ttk_f32_out(ctx, gk), a.dv = ttk_f32_out(ctx, gv);
    a.deta = ttk_f32_out(ctx, geta);
    a.dh0 = ttk_grad(n, 6), a.dhb0 = ttk_grad(n, 7);
    a.dwp = ttk_partials(ctx, a.B, a.H, a.K), a.dbp = ttk_partials(ctx, a.B, a.H, a.K);
    if (a.K <= 32) launch_bwd<1>(a, st);
    else if (a.K <= 64) launch_bwd<2>(a, st);
    else launch_bwd<4>(a, st);
    ttk_add_dw_db(st, n, a.dwp, a.dbp, a.B, a.H, a.K);
    ttk_f32_done(st, gq, a.dq, true), ttk_f32_done(st, gk, a.dk, true), ttk_f32_done(st, gv, a.dv, true);
    ttk_f32_done(st, geta, a.deta, true);
}
