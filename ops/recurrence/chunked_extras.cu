/* ops/recurrence/chunked_extras.cu: prism_core's extra writes apart from the
 * core passes (NOTES.md v38; the plan's "extras apart", pl.xa).
 *
 * The extras only add to a chunk's writes, so the chunked equations of
 * docs/PRISM.md split into the Gated DeltaNet chunk with changed values and
 * three chunk-parallel terms. Per chunk, with CL = C L extra keys (row
 * a = l C + i is token i's l-th extra), D_ti = e^{G_t - G_i} and
 * eL_i = e^{G_last - G_i}:
 *   S1 = -strict(D o K KX^T),  S2 = scale incl(D o Q KX^T)     C x CL
 *   V' = V + S1 VX              the values the core solves with
 *   O  = S2 VX                  added by the core's output kernel
 *   E  = (eL o KX)^T VX         added by the state pass to the chunk's end state
 * so the serial passes, the solve and the scores run exactly as for gdn
 * (L = 0, wgmma forms and all), and the extras' products are plain
 * chunk-parallel matrix products here. E of chunk c goes to hs's slot
 * c + 1, which the state pass reads before it stores chunk c + 1's start
 * state there; a sequence's last chunk has its own slot (elast).
 *
 * The backward is the same split in reverse: the core's backward runs with
 * L = 0 and its dv into scratch (dV'), then chunk_xbwd_kernel takes dV', dO
 * and dE = dhs[c] (the gradient of the chunk's end state) to
 *   dS   = [dV'; dO] VX^T                       (S = [S1; S2] with its masks)
 *   dVX  = S^T [dV'; dO] + eL o (KX dE)
 *   dKX  = dR^T [K; Q] + eL o (VX dE^T)         dR = dS o the masks and decays
 *   dK  += dR_1 KX, dQ += dR_2 KX, dv += dV'
 *   dG   from S's decays and E's, its reverse cumulative sum into dg.
 */
#include "ops/recurrence/recurrence_cuda.cuh"

#define XA_T 32 /* the tiles' width along K, and along V in the backward */
#define XA_BV 64 /* the forward's V tile */
#define XA_LD (XA_T + 4)

/* rows l C + i of a [rows, H, L, D] array (kx, vx), columns d0.. (nd valid of W) */
__device__ __forceinline__ void xa_ld_extras(const rec_prob &p, float *dst, int ld, int C, int W, const float *src,
                                             int D, long long rk, int nval, int d0, int nd)
{
    const int H = p.H, L = p.L;
    for (int l = 0; l < L; l++)
        rec_ld_tile(dst + l * C * ld, ld, C, W, src + rk * L * D + l * D + d0, (long long)H * L * D, nval, nd, p.vec);
}
/* dst rows l C + i (+)= tile rows, into a [rows, H, L, D] array */
__device__ __forceinline__ void xa_st_extras(const rec_prob &p, float *dst, int D, long long rk, int nval, int d0,
                                             int nd, const float *src, int ld, int C)
{
    const int H = p.H, L = p.L;
    for (int l = 0; l < L; l++)
        rec_st_tile(dst + rk * L * D + l * D + d0, (long long)H * L * D, nval, nd, src + l * C * ld, ld, 1.f, true,
                    p.vec);
}
/* S's factor at (r, a): rows r < C are S1's (-strict), the next C S2's (scale incl) */
__device__ __forceinline__ float xa_mask(const rec_prob &p, const float *G, int C, int r, int a)
{
    const int t = r < C ? r : r - C, i = a % C;
    if (r < C ? i >= t : i > t) return 0.f;
    return (r < C ? -1.f : p.scale) * expf(G[t] - G[i]);
}
/* where chunk c's E lives (device pointer to its [K, V] block of head h) */
__device__ __forceinline__ float *xa_eslot(const rec_prob &p, int c, int h, float *hs, float *elast)
{
    const int n = p.cseq ? p.cseq[c] : c / p.ncs;
    const rec_seq_pos s = rec_seq_of(p, n);
    const bool last = c - s.cbase == (s.len + p.C - 1) / p.C - 1;
    const long long kv = (long long)p.K * p.V;
    return last ? elast + ((long long)n * p.H + h) * kv : hs + ((long long)(c + 1) * p.H + h) * kv;
}

/* K tile k0 of [K; Q] (2C rows) into KQ and of KX (CL rows) into KX, rows of XA_LD */
__device__ __forceinline__ void xa_ld_keys(const rec_prob &p, float *KQ, float *KX, int C, long long rk, int nval,
                                           int k0, int nk)
{
    const long long rs = (long long)p.H * p.K;
    rec_ld_tile(KQ, XA_LD, C, XA_T, p.k + rk * p.K + k0, rs, nval, nk, p.vec);
    rec_ld_tile(KQ + C * XA_LD, XA_LD, C, XA_T, p.q + rk * p.K + k0, rs, nval, nk, p.vec);
    xa_ld_extras(p, KX, XA_LD, C, XA_T, p.kx, p.K, rk, nval, k0, nk);
}
/* S = [S1; S2] (2C x CL, rows of CL + 4): [K; Q] KX^T, K tile by K tile
 * through KQ and KX, times xa_mask; both directions start from it */
template <int C, bool BF>
__device__ __forceinline__ void xa_scores(const rec_prob &p, const float *G, float *S, float *KQ, float *KX,
                                          long long rk, int nval)
{
    const int CL = C * p.L, LDS = CL + 4;
    for (int k0 = 0; k0 < p.Kp; k0 += XA_T) {
        rec_sync();
        xa_ld_keys(p, KQ, KX, C, rk, nval, k0, min(XA_T, p.K - k0));
        rec_sync();
        rec_mm<false, true, BF>(p, S, LDS, KQ, XA_LD, KX, XA_LD, 2 * C, CL, XA_T, 1.f, k0 > 0);
    }
    rec_sync();
    REC_FOR2D(2 * C, CL, r, a) S[r * LDS + a] *= xa_mask(p, G, C, r, a);
}

/* ---- forward ---------------------------------------------------------------------- */
struct xfwd_lay {
    int G, bt, eG, eL, S, VX, U, total;
};
__host__ __device__ static xfwd_lay xfwd_layout(const rec_prob &p)
{
    rec_bump m;
    xfwd_lay s;
    const int C = p.C, CL = C * p.L, LDV = XA_BV + 4;
    s.G = m.take(C), s.bt = m.take(C), s.eG = m.take(C), s.eL = m.take(C);
    s.S = m.take(2 * C * (CL + 4)), s.VX = m.take(CL * LDV);
    /* [K; Q] and KX tiles for S; then S's products with VX; then KX tiles and E's */
    const int a = (2 * C + CL) * XA_LD, b = 2 * C * LDV, c = CL * XA_LD + XA_T * LDV;
    s.U = m.take(a > b ? (a > c ? a : c) : (b > c ? b : c));
    s.total = m.off;
    return s;
}
size_t pr_rec_smem_xfwd(const rec_prob &p) { return (size_t)xfwd_layout(p).total * 4; }

template <int C, bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    chunk_xfwd_kernel(rec_prob p, float *vp, float *o, float *hs, float *elast)
{
    extern __shared__ __align__(128) float sm[];
    const xfwd_lay s = xfwd_layout(p);
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, CL = C * p.L;
    const int LDS = CL + 4, LDV = XA_BV + 4;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int nval = cp.nval;
    const long long rk = (long long)cp.row0 * H + h;
    float *G = sm + s.G, *eL = sm + s.eL, *S = sm + s.S, *VX = sm + s.VX, *U = sm + s.U;
    float *eslot = xa_eslot(p, c, h, hs, elast);
    rec_load_gates<C>(p, cp.row0, nval, h, G, sm + s.bt, sm + s.eG, eL);
    xa_scores<C, BF>(p, G, S, U, U + 2 * C * XA_LD, rk, nval);
    for (int v0 = 0; v0 < V; v0 += XA_BV) {
        const int nv = min(XA_BV, V - v0);
        rec_sync();
        xa_ld_extras(p, VX, LDV, C, XA_BV, p.vx, V, rk, nval, v0, nv);
        rec_sync();
        float *O = U;
        rec_mm<false, false, BF>(p, O, LDV, S, LDS, VX, LDV, 2 * C, XA_BV, CL, 1.f, false);
        rec_sync();
        rec_st_tile(vp + rk * V + v0, (long long)H * V, nval, nv, O, LDV, 1.f, false, p.vec, p.v + rk * V + v0);
        rec_st_tile(o + rk * V + v0, (long long)H * V, nval, nv, O + C * LDV, LDV, 1.f, false, p.vec);
        /* E = (eL o KX)^T VX, K tile by K tile */
        for (int k0 = 0; k0 < K; k0 += XA_T) {
            const int nk = min(XA_T, K - k0);
            float *KX = U, *EO = U + CL * XA_LD;
            rec_sync();
            xa_ld_extras(p, KX, XA_LD, C, XA_T, p.kx, K, rk, nval, k0, nk);
            rec_sync();
            REC_FOR2D(CL, XA_T, a, j) KX[a * XA_LD + j] *= eL[a % C];
            rec_sync();
            rec_mm<true, false, BF>(p, EO, LDV, KX, XA_LD, VX, LDV, XA_T, XA_BV, CL, 1.f, false);
            rec_sync();
            rec_st_tile(eslot + (long long)k0 * V + v0, V, nk, nv, EO, LDV, 1.f, false, p.vec);
        }
    }
}

/* ---- backward --------------------------------------------------------------------- */
struct xbwd_lay {
    int G, bt, eG, eL, dG, ed, rd, cd, S, dS, DX, VX, Y, KX, dE, total;
};
__host__ __device__ static xbwd_lay xbwd_layout(const rec_prob &p)
{
    rec_bump m;
    xbwd_lay s;
    const int C = p.C, CL = C * p.L;
    s.G = m.take(C), s.bt = m.take(C), s.eG = m.take(C), s.eL = m.take(C), s.dG = m.take(C);
    s.ed = m.take(CL), s.rd = m.take(2 * C), s.cd = m.take(CL);
    s.S = m.take(2 * C * (CL + 4)), s.dS = m.take(2 * C * (CL + 4));
    s.DX = m.take(2 * C * XA_LD), s.VX = m.take(CL * XA_LD), s.Y = m.take(CL * XA_LD), s.KX = m.take(CL * XA_LD);
    s.dE = m.take(XA_T * XA_LD);
    s.total = m.off;
    return s;
}
size_t pr_rec_smem_xbwd(const rec_prob &p) { return (size_t)xbwd_layout(p).total * 4; }

template <int C, bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    chunk_xbwd_kernel(rec_prob p, const float *dhs, const float *dvp, rec_grads d)
{
    extern __shared__ __align__(128) float sm[];
    const xbwd_lay s = xbwd_layout(p);
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, CL = C * p.L;
    const int LDS = CL + 4, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int nval = cp.nval;
    const long long rk = (long long)cp.row0 * H + h;
    float *G = sm + s.G, *eL = sm + s.eL, *dG = sm + s.dG, *ed = sm + s.ed, *rd = sm + s.rd, *cd = sm + s.cd;
    float *S = sm + s.S, *dS = sm + s.dS, *DX = sm + s.DX, *VX = sm + s.VX, *Y = sm + s.Y, *KX = sm + s.KX;
    float *dEt = sm + s.dE;
    const float *dE = dhs + ((long long)c * H + h) * K * V;
    rec_load_gates<C>(p, cp.row0, nval, h, G, sm + s.bt, sm + s.eG, eL);
    for (int a = threadIdx.x; a < CL; a += PR_REC_THREADS) ed[a] = 0.f;
    xa_scores<C, BF>(p, G, S, DX, KX, rk, nval); /* S as the forward made it */
    /* V tile by V tile: dS += [dV'; dO] VX^T, and dVX = eL o (KX dE) + S^T [dV'; dO] */
    for (int v0 = 0; v0 < V; v0 += XA_T) {
        const int nv = min(XA_T, V - v0);
        rec_sync();
        rec_ld_tile(DX, XA_LD, C, XA_T, dvp + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        rec_ld_tile(DX + C * XA_LD, XA_LD, C, XA_T, p.dout + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        xa_ld_extras(p, VX, XA_LD, C, XA_T, p.vx, V, rk, nval, v0, nv);
        rec_sync();
        if (d.dv) rec_st_tile(d.dv + rk * V + v0, (long long)H * V, nval, nv, DX, XA_LD, 1.f, true, p.vec);
        rec_mm<false, true, BF>(p, dS, LDS, DX, XA_LD, VX, XA_LD, 2 * C, CL, XA_T, 1.f, v0 > 0);
        for (int k0 = 0; k0 < p.Kp; k0 += XA_T) {
            const int nk = min(XA_T, K - k0);
            rec_sync();
            xa_ld_extras(p, KX, XA_LD, C, XA_T, p.kx, K, rk, nval, k0, nk);
            rec_ld_tile(dEt, XA_LD, XA_T, XA_T, dE + (long long)k0 * V + v0, V, nk, nv, p.vec);
            rec_sync();
            rec_mm<false, false, BF>(p, Y, XA_LD, KX, XA_LD, dEt, XA_LD, CL, XA_T, XA_T, 1.f, k0 > 0);
        }
        rec_sync();
        /* ed_a += (KX dE)_a . vx_a (E's share of dG), then the rows scaled by eL */
        for (int a = warp; a < CL; a += PR_REC_WARPS) {
            const float x = Y[a * XA_LD + lane] * VX[a * XA_LD + lane];
            float t = x;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(PR_FULL_MASK, t, o);
            Y[a * XA_LD + lane] *= eL[a % C];
            if (lane == 0) ed[a] += t;
        }
        rec_sync();
        rec_mm<true, false, BF>(p, Y, XA_LD, S, LDS, DX, XA_LD, CL, XA_T, 2 * C, 1.f, true);
        rec_sync();
        if (d.dvx) xa_st_extras(p, d.dvx, V, rk, nval, v0, nv, Y, XA_LD, C);
    }
    rec_sync();
    /* dG: S's decays (row sums of dS o S to their token t, column sums from
     * their token i), E's (eL_i ed_a from token i, their sum to the last) */
    for (int r = warp; r < 2 * C; r += PR_REC_WARPS) {
        float t = 0.f;
        for (int a = lane; a < CL; a += 32) t = fmaf(dS[r * LDS + a], S[r * LDS + a], t);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(PR_FULL_MASK, t, o);
        if (lane == 0) rd[r] = t;
    }
    for (int a = threadIdx.x; a < CL; a += PR_REC_THREADS) {
        float t = 0.f;
        for (int r = 0; r < 2 * C; r++) t = fmaf(dS[r * LDS + a], S[r * LDS + a], t);
        cd[a] = t + eL[a % C] * ed[a];
    }
    rec_sync();
    /* dR = dS o the masks and decays, over dS */
    REC_FOR2D(2 * C, CL, r, a) dS[r * LDS + a] *= xa_mask(p, G, C, r, a);
    if (threadIdx.x < C) {
        const int t = threadIdx.x;
        float v = rd[t] + rd[C + t];
        for (int l = 0; l < p.L; l++) v -= cd[l * C + t];
        if (t == nval - 1)
            for (int a = 0; a < CL; a++) v += eL[a % C] * ed[a];
        dG[t] = v;
    }
    rec_sync();
    if (p.has_g && d.dg && warp == 0) {
        constexpr int E = C / 32;
        float x[E];
#pragma unroll
        for (int e = 0; e < E; e++) x[e] = dG[lane * E + e];
        rec_chunk_dg_warp<C>(x, nval, d.dg, rk, H);
    }
    /* K tile by K tile: dK, dQ += dR KX; dKX = eL o (VX dE^T) + dR^T [K; Q] */
    for (int k0 = 0; k0 < p.Kp; k0 += XA_T) {
        const int nk = min(XA_T, K - k0);
        float *Out = S; /* S is read no more */
        rec_sync();
        xa_ld_keys(p, DX, KX, C, rk, nval, k0, nk);
        rec_sync();
        rec_mm<false, false, BF>(p, Out, XA_LD, dS, LDS, KX, XA_LD, 2 * C, XA_T, CL, 1.f, false);
        for (int v0 = 0; v0 < V; v0 += XA_T) {
            const int nv = min(XA_T, V - v0);
            rec_sync();
            xa_ld_extras(p, VX, XA_LD, C, XA_T, p.vx, V, rk, nval, v0, nv);
            rec_ld_tile(dEt, XA_LD, XA_T, XA_T, dE + (long long)k0 * V + v0, V, nk, nv, p.vec);
            rec_sync();
            rec_mm<false, true, BF>(p, Y, XA_LD, VX, XA_LD, dEt, XA_LD, CL, XA_T, XA_T, 1.f, v0 > 0);
        }
        rec_sync();
        if (d.dk) rec_st_tile(d.dk + rk * K + k0, (long long)H * K, nval, nk, Out, XA_LD, 1.f, true, p.vec);
        if (d.dq) rec_st_tile(d.dq + rk * K + k0, (long long)H * K, nval, nk, Out + C * XA_LD, XA_LD, 1.f, true, p.vec);
        REC_FOR2D(CL, XA_T, a, j) Y[a * XA_LD + j] *= eL[a % C];
        rec_sync();
        rec_mm<true, false, BF>(p, Y, XA_LD, dS, LDS, DX, XA_LD, CL, XA_T, 2 * C, 1.f, true);
        rec_sync();
        if (d.dkx) xa_st_extras(p, d.dkx, K, rk, nval, k0, nk, Y, XA_LD, C);
    }
}

/* ---- launchers --------------------------------------------------------------------- */
template <class F> static void xa_smem_attr(F kernel, size_t smem)
{
    PR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

void pr_rec_chunk_xfwd(cudaStream_t st, const rec_prob &p, float *vp, float *o, float *hs, float *elast)
{
    const bool bf = rec_bf_products(p);
    const auto kernel = p.C == 64 ? (bf ? chunk_xfwd_kernel<64, true> : chunk_xfwd_kernel<64, false>)
                                  : (bf ? chunk_xfwd_kernel<32, true> : chunk_xfwd_kernel<32, false>);
    const size_t sm = pr_rec_smem_xfwd(p);
    xa_smem_attr(kernel, sm);
    kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, vp, o, hs, elast);
    PR_CUDA_LAUNCH_CHECK();
}

void pr_rec_chunk_xbwd(cudaStream_t st, const rec_prob &p, const float *dhs, const float *dvp, const rec_grads &d)
{
    const bool bf = rec_bf_products(p);
    const auto kernel = p.C == 64 ? (bf ? chunk_xbwd_kernel<64, true> : chunk_xbwd_kernel<64, false>)
                                  : (bf ? chunk_xbwd_kernel<32, true> : chunk_xbwd_kernel<32, false>);
    const size_t sm = pr_rec_smem_xbwd(p);
    xa_smem_attr(kernel, sm);
    kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, dhs, dvp, d);
    PR_CUDA_LAUNCH_CHECK();
}
