/* ops/recurrence/cuda/gla_value.cu: the gla rule's per-value decay on CUDA
 * (p.gv: h = h diag(exp(g_t)) + k_t v_t^T, g [rows,H,V], gsa's first pass),
 * chunked, forward and backward; the per-key kernels and the launchers that
 * call these are gla_chunked.cu's, the shared pieces gla.cuh's. */
#include "ops/recurrence/cuda/gla.cuh"

/* ---- the per-value decay (p.gv, gsa's first pass) -------------------------------------------
 * h = h diag(exp(g_t)) + k_t v_t^T, g [rows,H,V]; the CPU blueprint is chunked_gla.c's gv_*
 * functions. The decay runs along V, so every V tile carries its own cumulative log-decays B
 * [C x BV] (chunk-local, inclusive, per value channel) and E_ti = exp(B_t - B_i) per column:
 *   O   = scale (e^B o (Q S) + X),   X_t[j] = sum_{i<=t} A_ti v_i[j] E_ti[j],  A = Q K^T
 *   S'  = S diag(e^{B_L}) + K^T (V o e^{B_L - B})
 * X by sub-chunks of 16 tokens: with r the row sub-chunk's first token, the earlier pairs are
 * e^{B_t - B_r} o (A[t, <r] (V o e^{B_r - B})[<r]), a 16 x BV tensor-core block, both factors
 * <= 1; the own sub-chunk's pairs element by element. Backward, dS' as above:
 *   dS    = dS' diag(e^{B_L}) + scale Q^T (e^B o dO)                       (serial, reverse)
 *   dA_ti = scale sum_j dO_t[j] v_i[j] E_ti[j]     (the per-key scores' algebra over V tiles)
 *   dv_i  = e^{B_L - B_i} o (K dS')_i + scale sum_{t>=i} A_ti dO_t o E_ti   (by column
 *           sub-chunks, e their last token, as gla_dqk's dk)
 *   dq    = dA K + scale (e^B o dO) S^T,   dk = dA^T Q + (V o e^{B_L - B}) dS'^T
 *   dg_s  = sum_{t>=s in the chunk} (o_t o do_t - v_t o dv_t) + sum_i S'[i] o dS'[i]
 * (the last line: o and ht are linear in v and the start state, so scaling a column's past
 * equals scaling its values and start state, less the outputs before s). Kernels: gv_state,
 * gv_out, gv_dstate (also the dg end term per value channel), gv_dv (o again, dv, dg, dA),
 * gv_dqk. Checked on the H200 by test_cuda_recurrence and the gla golden file (2026-12-05). */

/* the chunk-parallel kernels' shared memory: Q, K [C x LDK], A, dA [C x LDC], DQ, DK [C x LDK]
 * (gv_dqk), then the V loop: S, dS [Kp x LDV], and up to six [C x LDV] token tiles and two
 * [16 x LDV] blocks. kind: 0 gv_out, 1 gv_dv, 2 gv_dqk */
struct gv_chunk_lay {
    int Q, K, A, dA, DQ, DK, S, dS, V, dO, B, O, DV, U, W, X, total;
};
__host__ __device__ static gv_chunk_lay gv_chunk_layout(const rec_prob &p, int kind)
{
    const gla_ld l = gla_ld_of(p);
    rec_bump m;
    gv_chunk_lay s = {};
    const int tile = l.C * l.LDV, blk = GLA_SUB * l.LDV, st = l.Kp * l.LDV;
    s.Q = m.take(l.C * l.LDK), s.K = m.take(l.C * l.LDK);
    s.A = kind != 2 ? m.take(l.C * l.LDC) : -1;
    s.dA = kind != 0 ? m.take(l.C * l.LDC) : -1;
    s.DQ = kind == 2 ? m.take(l.C * l.LDK) : -1;
    s.DK = kind == 2 ? m.take(l.C * l.LDK) : -1;
    s.S = m.take(st);
    s.dS = kind != 0 ? m.take(st) : -1;
    s.V = m.take(tile), s.B = m.take(tile);
    s.dO = kind != 0 ? m.take(tile) : -1;
    s.O = kind != 2 ? m.take(tile) : -1;
    s.DV = kind == 1 ? m.take(tile) : -1;
    s.U = kind != 2 ? m.take(tile) : -1;
    s.W = kind != 2 ? m.take(blk) : -1;
    s.X = kind == 1 ? m.take(blk) : -1;
    s.total = m.off + 32;
    return s;
}

size_t pr_rec_gv_chunk_smem(const rec_prob &p)
{
    int most = gla_max(gla_serial_layout(p, false).total, gla_serial_layout(p, true).total);
    for (int kind = 0; kind < 3; kind++) most = gla_max(most, gv_chunk_layout(p, kind).total);
    return (size_t)most * 4;
}

/* a V tile of g (per value channel) into Bs [C x LDV], zero past nval and nv (the caller
 * syncs, then gv_cumsum) */
__device__ __forceinline__ void gv_ld_decays(const rec_prob &p, float *Bs, long long rk, int v0, int nval, int nv)
{
    rec_ld_tile(Bs, GLA_BV + 4, gla_ld_of(p).C, GLA_BV, p.g + rk * p.V + v0, (long long)p.H * p.V, nval, nv,
                gla_gvec(p));
}

/* X of the output (see above) added into O, which holds e^B o (Q S) on entry; U, W scratch.
 * The caller synchronizes before; O is complete after the closing barrier. */
template <bool BF>
__device__ void gv_out_tile(const rec_prob &p, float *O, const float *A, const float *Vs, const float *Bs, float *U,
                            float *W)
{
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV, warp = threadIdx.x >> 5;
    REC_FOR2D(C, BV, t, j) {
        const float bt = Bs[t * LDV + j];
        float x = O[t * LDV + j];
        for (int i = t & ~(GLA_SUB - 1); i <= t; i++)
            x = fmaf(A[t * LDC + i] * Vs[i * LDV + j], expf(bt - Bs[i * LDV + j]), x);
        O[t * LDV + j] = x;
    }
    for (int r = GLA_SUB; r < C; r += GLA_SUB) {
        __syncthreads();   /* U and W free */
        REC_FOR2D(r, BV, i, j) U[i * LDV + j] = Vs[i * LDV + j] * expf(Bs[r * LDV + j] - Bs[i * LDV + j]);
        __syncthreads();
        for (int nb = warp; nb < BV / 16; nb += PR_REC_WARPS)
            gla_blk16<false, false, BF>(p, W, LDV, A + r * LDC, LDC, U, LDV, 0, nb * 16, r, 1.f, false);
        __syncthreads();
        REC_FOR2D(GLA_SUB, BV, u, j) {
            const int t = r + u;
            O[t * LDV + j] = fmaf(W[u * LDV + j], expf(Bs[t * LDV + j] - Bs[r * LDV + j]), O[t * LDV + j]);
        }
    }
    __syncthreads();
}

/* the chunk's V tile v0 of S (hs), V and B (cumulated) for a (chunk, head) block */
__device__ __forceinline__ void gv_ld_tiles(const rec_prob &p, const float *hs, int c, int h, long long rk, int nval,
                                            int v0, float *Ss, float *Vs, float *Bs)
{
    const gla_ld l = gla_ld_of(p);
    const int nv = min(GLA_BV, p.V - v0);
    rec_ld_tile(Ss, l.LDV, l.Kp, GLA_BV, hs + ((long long)c * p.H + h) * p.K * p.V + v0, p.V, p.K, nv, p.vec);
    rec_ld_tile(Vs, l.LDV, l.C, GLA_BV, p.v + rk * p.V + v0, (long long)p.H * p.V, nval, nv, p.vec);
    gv_ld_decays(p, Bs, rk, v0, nval, nv);
}

template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS) gv_state_kernel(rec_prob p, float *hs, float *ht)
{
    extern __shared__ __align__(128) float sm[];
    const gla_serial_lay s = gla_serial_layout(p, false);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDV = l.LDV, BV = GLA_BV;
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * BV, H = p.H, K = p.K, V = p.V, nv = min(BV, V - v0);
    float *Hs = sm + s.H, *Ks = sm + s.X, *Bs = sm + s.G, *Vs = sm + s.V;   /* Bs [C x LDV] fits G's C x LDK */
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + v0;
    if (p.h0) rec_ld_tile(Hs, LDV, Kp, BV, p.h0 + hoff, V, K, nv, p.vec);
    else REC_FOR2D(Kp, LDV, i, j) Hs[i * LDV + j] = 0.f;
    const int nck = (sq.len + C - 1) / C;
    for (int ci = 0; ci < nck; ci++) {
        const int c = sq.cbase + ci, row0 = sq.bos + ci * C, nval = min(C, sq.len - ci * C);
        const long long rk = (long long)row0 * H + h;
        rec_sync();   /* the last product done: Hs final, Ks, Bs and Vs free */
        gla_ld_keys(p, Ks, p.k, rk, nval, p.vec);
        gv_ld_decays(p, Bs, rk, v0, nval, nv);
        rec_ld_tile(Vs, LDV, C, BV, p.v + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        if (hs) rec_st_tile(hs + ((long long)c * H + h) * K * V + v0, V, K, nv, Hs, LDV, 1.f, false, p.vec);
        rec_sync();
        gla_cumsum(Bs, LDV, C, BV);
        __syncthreads();
        const float *BL = Bs + (C - 1) * LDV;
        REC_FOR2D(C, BV, t, j) Vs[t * LDV + j] *= expf(BL[j] - Bs[t * LDV + j]);
        REC_FOR2D(Kp, BV, i, j) Hs[i * LDV + j] *= expf(BL[j]);
        __syncthreads();
        rec_mm<true, false, BF>(p, Hs, LDV, Ks, LDK, Vs, LDV, Kp, BV, C, 1.f, true);
    }
    rec_sync();
    if (ht) rec_st_tile(ht + hoff, V, K, nv, Hs, LDV, 1.f, false, p.vec);
}

template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS) gv_out_kernel(rec_prob p, const float *hs, float *o)
{
    extern __shared__ __align__(128) float sm[];
    const gv_chunk_lay s = gv_chunk_layout(p, 0);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV;
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, V = p.V;
    float *Q = sm + s.Q, *Kt = sm + s.K, *A = sm + s.A, *Ss = sm + s.S, *Vs = sm + s.V, *Bs = sm + s.B;
    float *Os = sm + s.O, *U = sm + s.U, *W = sm + s.W;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h;
    gla_ld_keys(p, Q, p.q, rk, cp.nval, p.vec);
    gla_ld_keys(p, Kt, p.k, rk, cp.nval, p.vec);
    rec_sync();
    rec_mm<false, true, BF>(p, A, LDC, Q, LDK, Kt, LDK, C, C, Kp, 1.f, false);   /* A = Q K^T, no decay */
    for (int v0 = 0; v0 < V; v0 += BV) {
        __syncthreads();   /* A done; the previous tile's store done */
        gv_ld_tiles(p, hs, c, h, rk, cp.nval, v0, Ss, Vs, Bs);
        rec_sync();
        gla_cumsum(Bs, LDV, C, BV);
        rec_mm<false, false, BF>(p, Os, LDV, Q, LDK, Ss, LDV, C, BV, Kp, 1.f, false);
        __syncthreads();
        REC_FOR2D(C, BV, t, j) Os[t * LDV + j] *= expf(Bs[t * LDV + j]);
        __syncthreads();
        gv_out_tile<BF>(p, Os, A, Vs, Bs, U, W);
        rec_st_tile(o + rk * V + v0, (long long)H * V, cp.nval, min(BV, V - v0), Os, LDV, p.scale, false, p.vec);
    }
}

/* dhs[c] = dS' of chunk c; ep[(c * H + h) * V + j] = sum_i S'[i][j] dS'[i][j]; dh0 += the start state's gradient */
template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    gv_dstate_kernel(rec_prob p, const float *hs, const float *ht, float *dhs, float *ep, float *dh0)
{
    extern __shared__ __align__(128) float sm[];
    const gla_serial_lay s = gla_serial_layout(p, true);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDV = l.LDV, BV = GLA_BV;
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * BV, H = p.H, K = p.K, V = p.V, nv = min(BV, V - v0);
    float *dH = sm + s.H, *Qs = sm + s.X, *Bs = sm + s.G, *dOs = sm + s.V, *Es = sm + s.E;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + v0;
    if (p.dht) rec_ld_tile(dH, LDV, Kp, BV, p.dht + hoff, V, K, nv, p.vec);
    else REC_FOR2D(Kp, LDV, i, j) dH[i * LDV + j] = 0.f;
    const int nck = (sq.len + C - 1) / C;
    for (int ci = nck - 1; ci >= 0; ci--) {
        const int c = sq.cbase + ci, row0 = sq.bos + ci * C, nval = min(C, sq.len - ci * C);
        const long long rk = (long long)row0 * H + h;
        rec_sync();   /* dH is dS' of chunk c */
        rec_st_tile(dhs + ((long long)c * H + h) * K * V + v0, V, K, nv, dH, LDV, 1.f, false, p.vec);
        const float *end = ci == nck - 1 ? ht + hoff : hs + ((long long)(c + 1) * H + h) * K * V + v0;
        rec_ld_tile(Es, LDV, Kp, BV, end, V, K, nv, p.vec);
        gla_ld_keys(p, Qs, p.q, rk, nval, p.vec);
        gv_ld_decays(p, Bs, rk, v0, nval, nv);
        rec_ld_tile(dOs, LDV, C, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        rec_sync();
        gla_cumsum(Bs, LDV, C, BV);
        for (int j = threadIdx.x; j < nv; j += blockDim.x) {   /* the dg end term of this V tile's columns */
            float x = 0.f;
            for (int i = 0; i < K; i++) x = fmaf(Es[i * LDV + j], dH[i * LDV + j], x);
            ep[((long long)c * H + h) * V + v0 + j] = x;
        }
        __syncthreads();
        const float *BL = Bs + (C - 1) * LDV;
        REC_FOR2D(C, BV, t, j) dOs[t * LDV + j] *= p.scale * expf(Bs[t * LDV + j]);
        REC_FOR2D(Kp, BV, i, j) dH[i * LDV + j] *= expf(BL[j]);
        __syncthreads();
        rec_mm<true, false, BF>(p, dH, LDV, Qs, LDK, dOs, LDV, Kp, BV, C, 1.f, true);
    }
    rec_sync();
    if (dh0) rec_st_tile(dh0 + hoff, V, K, nv, dH, LDV, 1.f, true, p.vec);
}

/* dA's pairs of one V tile, added into dA (see above); U holds V o e^{B_r - B} per r in turn, X
 * the 16 rows of dO o e^{B - B_r}. The caller synchronizes before and after. */
template <bool BF>
__device__ void gv_dscores_tile(const rec_prob &p, float *dA, const float *dOs, const float *Vs, const float *Bs,
                                float *U, float *X)
{
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int e = warp; e < C * GLA_SUB; e += PR_REC_WARPS) {   /* the own sub-chunk's pairs, lanes along V */
        const int t = e / GLA_SUB, i = (t & ~(GLA_SUB - 1)) + e % GLA_SUB;
        if (i > t) continue;
        const float x = gla_warp_sum(dOs[t * LDV + lane] * Vs[i * LDV + lane] *
                                     expf(Bs[t * LDV + lane] - Bs[i * LDV + lane]));
        if (lane == 0) dA[t * LDC + i] += p.scale * x;
    }
    for (int r = GLA_SUB; r < C; r += GLA_SUB) {
        __syncthreads();
        REC_FOR2D(r, BV, i, j) U[i * LDV + j] = Vs[i * LDV + j] * expf(Bs[r * LDV + j] - Bs[i * LDV + j]);
        REC_FOR2D(GLA_SUB, BV, u, j)
        X[u * LDV + j] = dOs[(r + u) * LDV + j] * expf(Bs[(r + u) * LDV + j] - Bs[r * LDV + j]);
        __syncthreads();
        for (int cb = warp; cb < r / GLA_SUB; cb += PR_REC_WARPS)
            gla_blk16<false, true, BF>(p, dA + r * LDC, LDC, X, LDV, U, LDV, 0, cb * 16, BV, p.scale, true);
    }
    __syncthreads();
}

/* dv's pairs t >= i of one V tile added into DV, by column sub-chunks (e their last token) */
template <bool BF>
__device__ void gv_dv_pairs(const rec_prob &p, float *DV, const float *A, const float *dOs, const float *Bs, float *U,
                            float *W)
{
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV, warp = threadIdx.x >> 5;
    REC_FOR2D(C, BV, i, j) {
        const float bi = Bs[i * LDV + j];
        float x = 0.f;
        for (int t = i; t <= (i | (GLA_SUB - 1)); t++)
            x = fmaf(A[t * LDC + i] * dOs[t * LDV + j], expf(Bs[t * LDV + j] - bi), x);
        DV[i * LDV + j] = fmaf(p.scale, x, DV[i * LDV + j]);
    }
    for (int b = 0; b + 1 < C / GLA_SUB; b++) {
        const int e = b * GLA_SUB + GLA_SUB - 1, t0 = e + 1, nt = C - t0;
        __syncthreads();
        REC_FOR2D(nt, BV, u, j) U[u * LDV + j] = dOs[(t0 + u) * LDV + j] * expf(Bs[(t0 + u) * LDV + j] - Bs[e * LDV + j]);
        __syncthreads();
        for (int nb = warp; nb < BV / 16; nb += PR_REC_WARPS)
            gla_blk16<true, false, BF>(p, W, LDV, A + t0 * LDC + b * GLA_SUB, LDC, U, LDV, 0, nb * 16, nt, 1.f, false);
        __syncthreads();
        REC_FOR2D(GLA_SUB, BV, u, j) {
            const int i = b * GLA_SUB + u;
            DV[i * LDV + j] = fmaf(p.scale * W[u * LDV + j], expf(Bs[e * LDV + j] - Bs[i * LDV + j]), DV[i * LDV + j]);
        }
    }
    __syncthreads();
}

/* o again, dv, dg, and dA (stored for gv_dqk), a block per (chunk, head) */
template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    gv_dv_kernel(rec_prob p, const float *hs, const float *dhs, const float *ep, float *dA_out, rec_grads d)
{
    extern __shared__ __align__(128) float sm[];
    const gv_chunk_lay s = gv_chunk_layout(p, 1);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV;
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V;
    float *Q = sm + s.Q, *Kt = sm + s.K, *A = sm + s.A, *dA = sm + s.dA, *Ss = sm + s.S, *dSs = sm + s.dS;
    float *Vs = sm + s.V, *dOs = sm + s.dO, *Bs = sm + s.B, *Os = sm + s.O, *DV = sm + s.DV, *U = sm + s.U;
    float *W = sm + s.W, *X = sm + s.X;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int nval = cp.nval;
    const long long rk = (long long)cp.row0 * H + h;
    gla_ld_keys(p, Q, p.q, rk, nval, p.vec);
    gla_ld_keys(p, Kt, p.k, rk, nval, p.vec);
    rec_sync();
    REC_FOR2D(C, C, t, i) dA[t * LDC + i] = 0.f;
    rec_mm<false, true, BF>(p, A, LDC, Q, LDK, Kt, LDK, C, C, Kp, 1.f, false);
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        __syncthreads();   /* A done; the previous tile's reads done */
        gv_ld_tiles(p, hs, c, h, rk, nval, v0, Ss, Vs, Bs);
        rec_ld_tile(dSs, LDV, Kp, BV, dhs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        rec_ld_tile(dOs, LDV, C, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        rec_sync();
        gla_cumsum(Bs, LDV, C, BV);
        rec_mm<false, false, BF>(p, Os, LDV, Q, LDK, Ss, LDV, C, BV, Kp, 1.f, false);      /* Q S */
        rec_mm<false, false, BF>(p, DV, LDV, Kt, LDK, dSs, LDV, C, BV, Kp, 1.f, false);    /* K dS' */
        __syncthreads();
        const float *BL = Bs + (C - 1) * LDV;
        REC_FOR2D(C, BV, t, j) {
            Os[t * LDV + j] *= expf(Bs[t * LDV + j]);
            DV[t * LDV + j] *= expf(BL[j] - Bs[t * LDV + j]);
        }
        __syncthreads();
        gv_out_tile<BF>(p, Os, A, Vs, Bs, U, W);
        gv_dv_pairs<BF>(p, DV, A, dOs, Bs, U, W);
        gv_dscores_tile<BF>(p, dA, dOs, Vs, Bs, U, X);
        if (d.dv) rec_st_tile(d.dv + rk * V + v0, (long long)H * V, nval, nv, DV, LDV, 1.f, true, p.vec);
        if (d.dg)   /* dg = reverse sums of scale o o dO - v o dv, from the later chunks' share */
            for (int j = threadIdx.x; j < nv; j += blockDim.x) {
                float run = ep[((long long)c * H + h) * V + v0 + j];
                for (int t = nval - 1; t >= 0; t--) {
                    run += p.scale * Os[t * LDV + j] * dOs[t * LDV + j] - Vs[t * LDV + j] * DV[t * LDV + j];
                    d.dg[(rk + (long long)t * H) * V + v0 + j] += run;
                }
            }
    }
    __syncthreads();
    float *dst = dA_out + ((long long)c * H + h) * C * C;
    REC_FOR2D(C, C, t, i) dst[t * C + i] = i <= t ? dA[t * LDC + i] : 0.f;
}

/* dq = dA K + scale (e^B o dO) S^T, dk = dA^T Q + (V o e^{B_L - B}) dS'^T, a block per (chunk, head) */
template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    gv_dqk_kernel(rec_prob p, const float *hs, const float *dhs, const float *dA_in, rec_grads d)
{
    extern __shared__ __align__(128) float sm[];
    const gv_chunk_lay s = gv_chunk_layout(p, 2);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV;
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V;
    float *Q = sm + s.Q, *Kt = sm + s.K, *dA = sm + s.dA, *DQ = sm + s.DQ, *DK = sm + s.DK, *Ss = sm + s.S;
    float *dSs = sm + s.dS, *Vs = sm + s.V, *dOs = sm + s.dO, *Bs = sm + s.B;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int nval = cp.nval;
    const long long rk = (long long)cp.row0 * H + h;
    rec_ld_tile(dA, LDC, C, C, dA_in + ((long long)c * H + h) * C * C, C, C, C, true);
    gla_ld_keys(p, Q, p.q, rk, nval, p.vec);
    gla_ld_keys(p, Kt, p.k, rk, nval, p.vec);
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        __syncthreads();   /* the previous tile's products done */
        gv_ld_tiles(p, hs, c, h, rk, nval, v0, Ss, Vs, Bs);
        rec_ld_tile(dSs, LDV, Kp, BV, dhs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        rec_ld_tile(dOs, LDV, C, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        rec_sync();
        gla_cumsum(Bs, LDV, C, BV);
        __syncthreads();
        const float *BL = Bs + (C - 1) * LDV;
        REC_FOR2D(C, BV, t, j) {
            dOs[t * LDV + j] *= p.scale * expf(Bs[t * LDV + j]);
            Vs[t * LDV + j] *= expf(BL[j] - Bs[t * LDV + j]);
        }
        __syncthreads();
        rec_mm<false, true, BF>(p, DQ, LDK, dOs, LDV, Ss, LDV, C, Kp, BV, 1.f, v0 > 0);
        rec_mm<false, true, BF>(p, DK, LDK, Vs, LDV, dSs, LDV, C, Kp, BV, 1.f, v0 > 0);
    }
    __syncthreads();
    rec_mm<false, false, BF>(p, DQ, LDK, dA, LDC, Kt, LDK, C, Kp, C, 1.f, true);
    rec_mm<true, false, BF>(p, DK, LDK, dA, LDC, Q, LDK, C, Kp, C, 1.f, true);
    __syncthreads();
    if (d.dq) rec_st_tile(d.dq + rk * K, (long long)H * K, nval, K, DQ, LDK, 1.f, true, p.vec);
    if (d.dk) rec_st_tile(d.dk + rk * K, (long long)H * K, nval, K, DK, LDK, 1.f, true, p.vec);
}

/* ---- launchers ------------------------------------------------------------------------------ */


void pr_rec_gv_chunk_forward(cudaStream_t s, const rec_prob &p, float *hs, float *o, float *ht)
{
    const bool bf = rec_bf_products(p);
    const int nvt = (p.V + GLA_BV - 1) / GLA_BV;
    const size_t sm_state = (size_t)gla_serial_layout(p, false).total * 4, sm_out = (size_t)gv_chunk_layout(p, 0).total * 4;
    {
        const auto k = bf ? gv_state_kernel<true> : gv_state_kernel<false>;
        pr_cuda_smem_prep((const void *)k, sm_state);
        k<<<dim3(nvt, p.H, p.N), PR_REC_THREADS, sm_state, s>>>(p, hs, ht);
        PR_CUDA_LAUNCH_CHECK();
    }
    {
        const auto k = bf ? gv_out_kernel<true> : gv_out_kernel<false>;
        pr_cuda_smem_prep((const void *)k, sm_out);
        k<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm_out, s>>>(p, hs, o);
        PR_CUDA_LAUNCH_CHECK();
    }
}

void pr_rec_gv_chunk_backward(cudaStream_t s, const rec_prob &p, const float *hs, const float *ht, const rec_grads &d)
{
    const bool bf = rec_bf_products(p);
    const int nvt = (p.V + GLA_BV - 1) / GLA_BV;
    const size_t n_dhs = (size_t)p.nchunks * p.H * p.K * p.V, n_ep = (size_t)p.nchunks * p.H * p.V;
    const size_t n_dA = (size_t)p.nchunks * p.H * p.C * p.C;
    float *dhs = rec_scratch(n_dhs), *ep = rec_scratch(n_ep), *dA = rec_scratch(n_dA);
    const size_t sm_ds = (size_t)gla_serial_layout(p, true).total * 4;
    const size_t sm_dv = (size_t)gv_chunk_layout(p, 1).total * 4, sm_dqk = (size_t)gv_chunk_layout(p, 2).total * 4;
    {
        const auto k = bf ? gv_dstate_kernel<true> : gv_dstate_kernel<false>;
        pr_cuda_smem_prep((const void *)k, sm_ds);
        k<<<dim3(nvt, p.H, p.N), PR_REC_THREADS, sm_ds, s>>>(p, hs, ht, dhs, ep, d.dh0);
        PR_CUDA_LAUNCH_CHECK();
    }
    {
        const auto k = bf ? gv_dv_kernel<true> : gv_dv_kernel<false>;
        pr_cuda_smem_prep((const void *)k, sm_dv);
        k<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm_dv, s>>>(p, hs, dhs, ep, dA, d);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (d.dq || d.dk) {
        const auto k = bf ? gv_dqk_kernel<true> : gv_dqk_kernel<false>;
        pr_cuda_smem_prep((const void *)k, sm_dqk);
        k<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm_dqk, s>>>(p, hs, dhs, dA, d);
        PR_CUDA_LAUNCH_CHECK();
    }
    rec_scratch_free(dhs, n_dhs);
    rec_scratch_free(ep, n_ep);
    rec_scratch_free(dA, n_dA);
}
