/* ops/recurrence/cuda/extras.cu: prism_core's extra writes apart from the
 * core passes (the plan's "extras apart", pl.xa).
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
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

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
static size_t xw_smem();
size_t pr_rec_smem_xfwd(const rec_prob &p, bool wg) { return wg ? xw_smem() : (size_t)xfwd_layout(p).total * 4; }

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
size_t pr_rec_smem_xbwd(const rec_prob &p, bool wg) { return wg ? xw_smem() : (size_t)xbwd_layout(p).total * 4; }

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

/* ---- wgmma forms (sm_90a) ------------------------------------------------------------
 * At C = 64 with CL <= 128 and K, V <= 128 every product above is one shape:
 * 128 x 128 sums over k = 128 (2C = 128 rows of [K; Q], CL padded to 128 with
 * zero rows, K and V padded with zero columns). Each operand is a tile of 4
 * sub-tiles of 128 rows x 32 k (64 KB, 128-byte-swizzled, rec_wg_desc's
 * layout), D = A B^T with warpgroup w taking A's rows 64 w.. and all 128
 * columns (two n64 pieces). A tile is natural (row = the source's row, k
 * along it: rec_ld_tile<true>) or transposed (row = the source's column, k
 * = its row: rec_cpt); sums stored back as operands go through xw_put. Three
 * tiles fit a block (one an SM); the backward splits its seven products
 * over three kernels so that each block holds only what its products read. */
#define XW_T (128 * 128) /* one operand tile, floats */
#define XW_GATES (3 * XW_T)

bool pr_rec_xa_wg_fits(const rec_prob &p)
{
    return p.C == 64 && p.L * 64 <= 128 && p.K <= 128 && p.V <= 128 && rec_wgmma_runs();
}

__device__ __forceinline__ void xw_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void xw_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
/* element (row, k) of an operand tile (1024-byte aligned) */
__device__ __forceinline__ int xw_at(int row, int k)
{
    return (k >> 5) * 4096 + row * 32 + ((((k >> 2) ^ row) & 7) << 2) + (k & 3);
}
/* this thread's sum e of piece n: row xw_r(e) of the 128 (warpgroup w's
 * 64 w..), column 64 n + xw_c(e) */
__device__ __forceinline__ int xw_r(int e)
{
    const int t = threadIdx.x;
    return 64 * (t >> 7) + 16 * ((t >> 5) & 3) + ((t & 31) >> 2) + 8 * (e >> 1 & 1);
}
__device__ __forceinline__ int xw_c(int n, int e) { return 64 * n + 2 * (threadIdx.x & 3) + 8 * (e >> 2) + (e & 1); }
#define XW_EACH(n, e) _Pragma("unroll") for (int n = 0; n < 2; n++) _Pragma("unroll") for (int e = 0; e < 32; e++)

/* d (+)= A B^T: this warpgroup's 64 rows of A, all 128 rows of B */
__device__ __forceinline__ void xw_mm(float (&d)[2][32], const float *A, const float *B)
{
    const int w = threadIdx.x >> 7;
    rec_wg_fence();
#pragma unroll
    for (int kt = 0; kt < 4; kt++) {
        const unsigned long long da = rec_wg_desc(A + kt * 4096 + w * 64 * 32);
#pragma unroll
        for (int n = 0; n < 2; n++) {
            const unsigned long long db = rec_wg_desc(B + kt * 4096 + n * 64 * 32);
#pragma unroll
            for (int ks = 0; ks < 4; ks++) rec_wg_mma<64>(d[n], da + 2 * ks, db + 2 * ks);
        }
    }
    rec_wg_commit();
    rec_wg_wait();
    rec_wg_settle(d[0]);
    rec_wg_settle(d[1]);
}
__device__ __forceinline__ void xw_zero(float (&d)[2][32])
{
    rec_wg_zero(d[0]);
    rec_wg_zero(d[1]);
}
/* the sums into tile T as an operand, rounded to TF32: natural (row r, k a)
 * or transposed (row a, k r) */
__device__ __forceinline__ void xw_put(float *T, const float (&d)[2][32], bool tr, bool round = true)
{
    XW_EACH(n, e)
    {
        const int r = xw_r(e), a = xw_c(n, e);
        T[tr ? xw_at(a, r) : xw_at(r, a)] = round ? __uint_as_float(rec_tf32(d[n][e])) : d[n][e];
    }
}

/* Loads in two steps: own = false issues the copies (cp.async; the caller
 * commits and waits), own = true then rounds this thread's copies in place
 * (scaled by the source rows' factors f where given).
 * xw_nat: R source rows (stride rs, nr valid) x 128 columns (nc valid) as
 * tile rows r0.. with k along them */
template <int R>
__device__ __forceinline__ void xw_nat(bool own, float *T, int r0, const float *src, long long rs, int nr, int nc,
                                       bool vec, const float *f = nullptr)
{
#pragma unroll 1
    for (int kt = 0; kt < 4; kt++) {
        float *dst = T + kt * 4096 + r0 * 32;
        if (own) rec_tf32_own(dst, R, f);
        else rec_ld_tile<true>(dst, 32, R, 32, kt * 32 < nc ? src + kt * 32 : src, rs, nr, nc - kt * 32, vec);
    }
}
/* xw_tr: R source rows x 128 columns as tile rows (one a column) with k =
 * k0 + the source row */
template <int R>
__device__ __forceinline__ void xw_tr(bool own, float *T, int k0, const float *src, long long rs, int nr, int nc,
                                      const float *f = nullptr)
{
    float *dst = T + (k0 >> 5) * 4096;
    if (own) rec_cpt_own<R, 128>(dst, 128, f, 1.f);
    else rec_cpt<R, 128>(dst, 128, src, rs, nr, nc);
}
/* bf16 rows of kx16 or vx16 into a tile of 64 source rows, loaded, widened,
 * scaled by f[source row] and rounded in one step (synchronous: cp.async
 * cannot widen, so this is the own step); zero where r >= nr or c >= nc
 * (nc % 8 == 0). Natural (TR false): source rows as tile rows o.., k along
 * them, four lanes a row's 32 k of a sub-tile (float4 stores that fill
 * distinct banks); transposed: tile row = source column, k = o + source row,
 * a lane a source row (scalar stores to 32 banks). A unit is 8 columns of a
 * row, one 16-byte load; all of a thread's loads are in flight before its
 * first store. */
template <bool TR>
__device__ __forceinline__ void xw_bf16(float *T, int o, const unsigned short *src, long long rs, int nr, int nc,
                                        const float *f)
{
    constexpr int R = 64, NU = R * 16 / PR_REC_THREADS;
    uint4 w[NU];
    int rr[NU], cc[NU];
#pragma unroll
    for (int u = 0; u < NU; u++) {
        const int e = threadIdx.x + PR_REC_THREADS * u, g = e >> 5;
        const int r = TR ? g % (R / 32) * 32 + (e & 31) : (e >> 2) % R;
        const int c = TR ? g / (R / 32) * 8 : (e >> 2) / R * 32 + (e & 3) * 8;
        rr[u] = r, cc[u] = c;
        w[u] = r < nr && c < nc ? *reinterpret_cast<const uint4 *>(src + r * rs + c) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < NU; u++) {
        const float fr = f ? f[rr[u]] : 1.f;
        const unsigned ws[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
        float x[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            x[2 * j] = __uint_as_float(rec_tf32(pr_bf16_lo(ws[j]) * fr));
            x[2 * j + 1] = __uint_as_float(rec_tf32(pr_bf16_hi(ws[j]) * fr));
        }
        if (TR) {
#pragma unroll
            for (int j = 0; j < 8; j++) T[xw_at(cc[u] + j, o + rr[u])] = x[j];
        } else {
            *reinterpret_cast<float4 *>(T + xw_at(o + rr[u], cc[u])) = make_float4(x[0], x[1], x[2], x[3]);
            *reinterpret_cast<float4 *>(T + xw_at(o + rr[u], cc[u] + 4)) = make_float4(x[4], x[5], x[6], x[7]);
        }
    }
}
/* a chunk's extras (kx or vx: [rows, H, L, D], row a = l 64 + i, zero rows
 * from CL on), natural or transposed. X16: bf16 ones (p.kx16, p.vx16), loaded
 * in the own step; a template so that the f32 kernels keep their code size
 * (these kernels are near the instruction cache's size) */
enum { XW_KX, XW_VX };
template <bool X16>
__device__ __forceinline__ void xw_extras(bool own, bool tr, float *T, const rec_prob &p, int which, long long rk,
                                          int nval, const float *f = nullptr)
{
    const int D = which == XW_KX ? p.K : p.V;
    const long long rs = (long long)p.H * p.L * D;
#pragma unroll 1
    for (int l = 0; l < 2; l++) {
        const long long at = rk * p.L * D + (l < p.L ? l * D : 0);
        const int nr = l < p.L ? nval : 0;
        if constexpr (X16) {
            const unsigned short *x = (which == XW_KX ? p.kx16 : p.vx16) + at;
            if (!own) continue;
            if (tr) xw_bf16<true>(T, 64 * l, x, rs, nr, D, f);
            else xw_bf16<false>(T, 64 * l, x, rs, nr, D, f);
        } else {
            const float *x = (which == XW_KX ? p.kx : p.vx) + at;
            if (tr) xw_tr<64>(own, T, 64 * l, x, rs, nr, D, f);
            else xw_nat<64>(own, T, 64 * l, x, rs, nr, D, p.vec, f);
        }
    }
}
/* the 64-row half at row (or k) o of a tile from an f32 source, or from bf16
 * (X16 and src16 set: loaded and rounded in the own step) */
template <bool X16>
__device__ __forceinline__ void xw_half(bool own, bool tr, float *T, int o, const float *src,
                                        const unsigned short *src16, long long rs, int nval, int D, bool vec)
{
    if (X16 && src16) {
        if (!own) return;
        if (tr) xw_bf16<true>(T, o, src16, rs, nval, D, nullptr);
        else xw_bf16<false>(T, o, src16, rs, nval, D, nullptr);
    } else if (tr) {
        xw_tr<64>(own, T, o, src, rs, nval, D);
    } else {
        xw_nat<64>(own, T, o, src, rs, nval, D, vec);
    }
}
/* [K; Q] (bf16 in place where p.k16, p.q16: the plan's io16 with the extras apart), natural or transposed */
template <bool X16>
__device__ __forceinline__ void xw_kq(bool own, bool tr, float *T, const rec_prob &p, long long rk, int nval)
{
    const long long rs = (long long)p.H * p.K;
    xw_half<X16>(own, tr, T, 0, p.k + rk * p.K, p.k16 ? p.k16 + rk * p.K : nullptr, rs, nval, p.K, p.vec);
    xw_half<X16>(own, tr, T, 64, p.q + rk * p.K, p.q16 ? p.q16 + rk * p.K : nullptr, rs, nval, p.K, p.vec);
}
/* the operands of S = [K; Q] KX^T, which the forward, dVX and dK/dQ kernels
 * all start from: [K; Q] into T0, KX into T1 (both natural). X16: k and q
 * read as bf16 where p.k16, p.q16 are set (the plan's io16_out and io16_kv
 * with the extras apart), in the own step as xw_extras' */
template <bool X16>
__device__ __forceinline__ void xw_keys(bool own, float *T0, float *T1, const rec_prob &p, long long rk, int nval)
{
    xw_kq<X16>(own, false, T0, p, rk, nval);
    xw_extras<X16>(own, false, T1, p, XW_KX, rk, nval);
}
/* [dV'; dO] (dV' f32 scratch, dO bf16 in place where p.dout16), natural or transposed */
template <bool X16>
__device__ __forceinline__ void xw_dv_do(bool own, bool tr, float *T, const rec_prob &p, const float *dvp,
                                         long long rk, int nval)
{
    const long long rs = (long long)p.H * p.V;
    xw_half<false>(own, tr, T, 0, dvp + rk * p.V, nullptr, rs, nval, p.V, p.vec);
    xw_half<X16>(own, tr, T, 64, p.dout + rk * p.V, p.dout16 ? p.dout16 + rk * p.V : nullptr, rs, nval, p.V, p.vec);
}
/* S's decays Dt[t][i] = e^{G_t - G_i} (i <= t, else 0; rows of 65 floats),
 * computed once a block so that the masks below are a load each */
#define XW_DEC (XW_GATES + 256 + 256 + 8 * 128)
__device__ __forceinline__ void xw_decays(const float *G, float *Dt)
{
#pragma unroll 1
    for (int j = threadIdx.x; j < 64 * 64; j += PR_REC_THREADS) {
        const int t = j >> 6, i = j & 63;
        Dt[t * 65 + i] = i <= t ? expf(G[t] - G[i]) : 0.f;
    }
}
/* S's mask and decay factors (xa_mask) on the sums: rows 64.. (warpgroup 1)
 * are S2's, zero on the padding */
__device__ __forceinline__ void xw_mask(const rec_prob &p, const float *Dt, float (&d)[2][32])
{
    const int CL = 64 * p.L;
    const bool s2 = threadIdx.x >= 128;
    const float f = s2 ? p.scale : -1.f;
    XW_EACH(n, e)
    {
        const int t = xw_r(e) & 63, a = xw_c(n, e), i = a & 63;
        const bool in = a < CL && (s2 ? i <= t : i < t);
        d[n][e] *= in ? f * Dt[t * 65 + i] : 0.f;
    }
}
/* a warpgroup's sums to global memory through shared memory, so that the
 * stores are whole rows (and the code a loop, not 64 unrolled stores): the
 * sums go natural into rows 64 w.. of T (tile rows only this warpgroup's
 * products read), then its 128 threads store row r to dst + off(r) (rows
 * with off(r) < 0 skipped), columns < nc, dst (+)= (+ extra at the same
 * place; extra16: the same from bf16, nc % 4 == 0). dst16: bf16 bits
 * instead (nc % 4 == 0), the sum rounded once. */
template <class OFF>
__device__ __forceinline__ void xw_store(float *T, float *dst, const float (&d)[2][32], OFF off, int nc, bool acc,
                                         bool vec, const float *extra = nullptr, unsigned short *dst16 = nullptr,
                                         const unsigned short *extra16 = nullptr)
{
    const int w = threadIdx.x >> 7;
    xw_put(T, d, false, false);
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory"); /* this warpgroup's rows are in */
#pragma unroll 1
    for (int i = threadIdx.x & 127; i < 64 * 32; i += 128) {
        const int r = 64 * w + i / 32, c = i % 32 * 4;
        const long long o = off(r);
        if (o < 0 || c >= nc) continue;
        const float4 x = *reinterpret_cast<const float4 *>(T + xw_at(r, c));
        if (dst16) {
            uint2 *q = reinterpret_cast<uint2 *>(dst16 + o + c);
            const uint2 y = acc ? *q : make_uint2(0u, 0u);
            *q = make_uint2(pr_bf16_bits(pr_bf16_lo(y.x) + x.x) | (unsigned)pr_bf16_bits(pr_bf16_hi(y.x) + x.y) << 16,
                            pr_bf16_bits(pr_bf16_lo(y.y) + x.z) | (unsigned)pr_bf16_bits(pr_bf16_hi(y.y) + x.w) << 16);
            continue;
        }
        float *q = dst + o + c;
        const float *xe = extra ? extra + o + c : nullptr;
        if (extra16) { /* 4 bf16 values, widened (nc % 4 == 0: the 4 columns are real) */
            const float4 z = rec_widen4(reinterpret_cast<const float *>(extra16 + o + c));
            float4 y = acc ? (vec ? *reinterpret_cast<const float4 *>(q) : make_float4(q[0], q[1], q[2], q[3]))
                           : make_float4(0.f, 0.f, 0.f, 0.f);
            y.x += x.x + z.x, y.y += x.y + z.y, y.z += x.z + z.z, y.w += x.w + z.w;
            if (vec) *reinterpret_cast<float4 *>(q) = y;
            else q[0] = y.x, q[1] = y.y, q[2] = y.z, q[3] = y.w;
            continue;
        }
        if (vec) {
            float4 y = acc ? *reinterpret_cast<const float4 *>(q) : make_float4(0.f, 0.f, 0.f, 0.f);
            const float4 z = xe ? *reinterpret_cast<const float4 *>(xe) : make_float4(0.f, 0.f, 0.f, 0.f);
            y.x += x.x + z.x, y.y += x.y + z.y, y.z += x.z + z.z, y.w += x.w + z.w;
            *reinterpret_cast<float4 *>(q) = y;
            continue;
        }
        const float v[4] = {x.x, x.y, x.z, x.w};
        for (int j = 0; j < 4 && c + j < nc; j++) q[j] = (acc ? q[j] : 0.f) + v[j] + (xe ? xe[j] : 0.f);
    }
}

struct xw_chunk {
    int nval;
    long long rk;
};
__device__ __forceinline__ xw_chunk xw_chunk_of(const rec_prob &p)
{
    const rec_chunk_pos cp = rec_chunk_of(p, blockIdx.x);
    return {cp.nval, (long long)cp.row0 * p.H + blockIdx.y};
}

/* A kernel's first loads and the gates: issue(false) and ahead() issue
 * copies (two commit groups, so that ahead's may still be in flight),
 * issue(true) then rounds this thread's copies of the first group once it
 * has landed; then S's decays table. */
template <class ISSUE, class AHEAD>
__device__ __forceinline__ void xw_begin(const rec_prob &p, xw_chunk ch, float *sm, ISSUE issue, AHEAD ahead)
{
    float *G = sm + XW_GATES;
    issue(false);
    rec_gates_issue<64>(p, (int)(ch.rk / p.H), ch.nval, blockIdx.y, G, G + 64);
    xw_commit();
    ahead();
    xw_commit();
    xw_wait<1>();
    rec_gates_scan<64>(G, ch.nval, G + 128, G + 192);
    issue(true);
    rec_fence_async();
    __syncthreads();
    xw_decays(G, sm + XW_DEC);
    __syncthreads();
}
template <class ISSUE>
__device__ __forceinline__ void xw_begin(const rec_prob &p, xw_chunk ch, float *sm, ISSUE issue)
{
    xw_begin(p, ch, sm, issue, [] {});
}
/* loads mid-kernel: issue(false), then (once landed) issue(true); between
 * the two, work() runs under the copies */
template <class ISSUE, class WORK>
__device__ __forceinline__ void xw_load(ISSUE issue, WORK work)
{
    issue(false);
    xw_commit();
    work();
    xw_wait<0>();
    issue(true);
    rec_fence_async();
    __syncthreads();
}
template <class ISSUE> __device__ __forceinline__ void xw_load(ISSUE issue)
{
    xw_load(issue, [] {});
}

template <bool X16>
__global__ void __launch_bounds__(PR_REC_THREADS, 1)
    chunk_xfwd_wg_kernel(rec_prob p, float *vp, float *o, float *hs, float *elast)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    float *T0 = sm, *T1 = sm + XW_T, *T2 = sm + 2 * XW_T, *G = sm + XW_GATES, *eL = G + 192;
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const int h = blockIdx.y, H = p.H, K = p.K, V = p.V;
    const xw_chunk ch = xw_chunk_of(p);
    const int nval = ch.nval;
    const long long rk = ch.rk;
    float *eslot = xa_eslot(p, blockIdx.x, h, hs, elast);

    xw_begin(p, ch, sm, [&](bool own) {
        xw_keys<X16>(own, T0, T1, p, rk, nval);
    }, [&] { xw_extras<X16>(false, true, T2, p, XW_VX, rk, nval); });

    float d[2][32];
    xw_zero(d);
    xw_mm(d, T0, T1); /* S = [K; Q] KX^T */
    xw_mask(p, sm + XW_DEC, d);
    __syncthreads(); /* T1 read by both warpgroups */
    xw_put(T0, d, false);
    xw_extras<X16>(false, true, T1, p, XW_KX, rk, nval); /* KX^T for E */
    xw_commit();
    xw_wait<1>();
    xw_extras<X16>(true, true, T2, p, XW_VX, rk, nval);
    rec_fence_async();
    __syncthreads();

    xw_zero(d);
    xw_mm(d, T0, T2); /* [V' - V; O] = S VX */
    const auto tok = [&](int lo) { return [=](int r) { return r - lo >= 0 && r - lo < 64 && r - lo < nval ? (rk + (long long)(r - lo) * H) * V : -1LL; }; };
    if (threadIdx.x < 128) xw_store(T0, vp, d, tok(0), V, false, p.vec, p.v, nullptr, X16 ? p.v16 : nullptr);
    else xw_store(T0, o, d, tok(64), V, false, p.vec);
    xw_wait<0>();
    xw_extras<X16>(true, true, T1, p, XW_KX, rk, nval, eL);
    rec_fence_async();
    __syncthreads();

    xw_zero(d);
    xw_mm(d, T1, T2); /* E = (eL o KX)^T VX */
    xw_store(T1, eslot, d, [=](int r) { return r < K ? (long long)r * V : -1LL; }, V, false, p.vec);
}

/* the backward's three kernels (Z): 0 dVX and E's share of dG; 1 dS, dK, dQ
 * and S's share of dG; 2 dKX (apart, each gets its own registers). The shares of dG go to dgx [2, nchunks, H,
 * 64], which chunk_xdg_kernel adds into dg (with dv += dV'). */
template <bool X16>
__device__ void xw_bwd_dvx(const rec_prob &p, const rec_grads &g, const float *dE, const float *dvp, float *dgx,
                           float *sm, xw_chunk ch)
{
    float *T0 = sm, *T1 = sm + XW_T, *T2 = sm + 2 * XW_T, *G = sm + XW_GATES, *eL = G + 192;
    float *ed = G + 256;
    const int H = p.H, K = p.K, V = p.V, L = p.L, nval = ch.nval;
    const long long rk = ch.rk;
    const bool want_dg = p.has_g && g.dg;
    xw_begin(p, ch, sm, [&](bool own) {
        xw_keys<X16>(own, T0, T1, p, rk, nval);
        xw_tr<128>(own, T2, 0, dE, V, K, V); /* dE^T: rows v, k the state's rows */
    });

    float s[2][32], y[2][32];
    xw_zero(s);
    xw_mm(s, T0, T1); /* S */
    xw_mask(p, sm + XW_DEC, s);
    xw_zero(y);
    xw_mm(y, T1, T2); /* Y1 = KX dE: rows a, columns v */
    __syncthreads(); /* T0, T1, T2 read by both warpgroups */
    xw_put(T0, s, true); /* S^T */
    xw_load([&](bool own) {
        xw_dv_do<X16>(own, true, T1, p, dvp, rk, nval); /* [dV'; dO]^T */
        if (want_dg && (!own || X16)) /* VX for ed, read as it is (bf16: exact in TF32) */
            xw_extras<X16>(own, false, T2, p, XW_VX, rk, nval);
    });
    /* ed_a = Y1_a . vx_a (E's share of dG), then Y1's rows scaled by eL */
    if (want_dg) {
        float rs[2] = {0.f, 0.f};
        XW_EACH(n, e) rs[e >> 1 & 1] += y[n][e] * T2[xw_at(xw_r(e), xw_c(n, e))];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            rs[u] += __shfl_xor_sync(PR_FULL_MASK, rs[u], 1);
            rs[u] += __shfl_xor_sync(PR_FULL_MASK, rs[u], 2);
            if ((threadIdx.x & 3) == 0) ed[xw_r(2 * u)] = rs[u];
        }
    }
    XW_EACH(n, e) y[n][e] *= eL[xw_r(e) & 63];
    xw_mm(y, T0, T1); /* dVX = eL o Y1 + S^T [dV'; dO] */
    if (g.dvx || g.dvx16)
        xw_store(T0, g.dvx, y, [=](int a) {
            const int l = a >> 6, i = a & 63;
            return l < L && i < nval ? (rk + (long long)i * H) * L * V + l * V : -1LL;
        }, V, true, p.vec, nullptr, g.dvx16);
    if (!want_dg) return;
    __syncthreads(); /* ed complete */
    /* E's share: -eL_t ed_t summed over l from token t, all of it to the last
     * token (the two warps' sums in wsum, added in order) */
    float *wsum = ed + 128, v = 0.f;
    if (threadIdx.x < 64) {
        const int t = threadIdx.x;
        for (int l = 0; l < L; l++) v += eL[t] * ed[l * 64 + t];
        float all = v;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) all += __shfl_xor_sync(PR_FULL_MASK, all, o);
        if ((t & 31) == 0) wsum[t >> 5] = all;
    }
    __syncthreads();
    if (threadIdx.x < 64) {
        const int t = threadIdx.x;
        dgx[((long long)blockIdx.x * H + blockIdx.y) * 64 + t] = t == nval - 1 ? wsum[0] + wsum[1] - v : -v;
    }
}

template <bool X16>
__device__ void xw_bwd_dkq(const rec_prob &p, const rec_grads &g, const float *dvp, float *dgx, float *sm, xw_chunk ch)
{
    float *T0 = sm, *T1 = sm + XW_T, *T2 = sm + 2 * XW_T, *G = sm + XW_GATES;
    float *rd = G + 256, *cd = rd + 128, *red = cd + 128; /* red: [8 warps][128] */
    const int H = p.H, K = p.K, nval = ch.nval, L = p.L;
    const long long rk = ch.rk;
    const bool want_dg = p.has_g && g.dg;
    xw_begin(p, ch, sm, [&](bool own) {
        xw_keys<X16>(own, T0, T1, p, rk, nval);
        xw_dv_do<X16>(own, false, T2, p, dvp, rk, nval);
    });

    float s[2][32], ds[2][32];
    xw_zero(s);
    xw_mm(s, T0, T1); /* S */
    xw_mask(p, sm + XW_DEC, s);
    __syncthreads(); /* T0 read by both warpgroups */
    xw_load([&](bool own) { xw_extras<X16>(own, false, T0, p, XW_VX, rk, nval); });
    xw_zero(ds);
    xw_mm(ds, T2, T0); /* dS = [dV'; dO] VX^T */
    if (want_dg) {
        /* rd: row sums of dS o S (quads), cd: column sums (warps, then the 8 warps in order) */
        float rsum[2] = {0.f, 0.f};
        XW_EACH(n, e) rsum[e >> 1 & 1] += ds[n][e] * s[n][e];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            rsum[u] += __shfl_xor_sync(PR_FULL_MASK, rsum[u], 1);
            rsum[u] += __shfl_xor_sync(PR_FULL_MASK, rsum[u], 2);
            if ((threadIdx.x & 3) == 0) rd[xw_r(2 * u)] = rsum[u];
        }
        /* sums e and e + 2 share a column (rows 8 apart) */
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 32; e += (e & 1) ? 3 : 1) {
                float x = ds[n][e] * s[n][e] + ds[n][e + 2] * s[n][e + 2];
                x += __shfl_xor_sync(PR_FULL_MASK, x, 4);
                x += __shfl_xor_sync(PR_FULL_MASK, x, 8);
                x += __shfl_xor_sync(PR_FULL_MASK, x, 16);
                if ((threadIdx.x & 31) < 4) red[(threadIdx.x >> 5) * 128 + xw_c(n, e)] = x;
            }
    }
    xw_mask(p, sm + XW_DEC, ds); /* dR */
    __syncthreads(); /* T0, T2 read by both warpgroups; rd, red complete */
    xw_put(T2, ds, false);
    xw_load([&](bool own) { xw_extras<X16>(own, true, T0, p, XW_KX, rk, nval); }, /* KX^T */
            [&] {
                if (want_dg && threadIdx.x < 128) {
                    float x = 0.f;
                    for (int w = 0; w < PR_REC_WARPS; w++) x += red[w * 128 + threadIdx.x];
                    cd[threadIdx.x] = x;
                }
            });
    xw_zero(s);
    xw_mm(s, T2, T0); /* [dK; dQ] += dR KX */
    const auto tok = [&](int lo) {
        return [=](int r) { return r - lo >= 0 && r - lo < 64 && r - lo < nval ? (rk + (long long)(r - lo) * H) * K : -1LL; };
    };
    if (threadIdx.x < 128) {
        if (g.dk) xw_store(T2, g.dk, s, tok(0), K, true, p.vec);
    } else if (g.dq) xw_store(T2, g.dq, s, tok(64), K, true, p.vec);
    if (want_dg && threadIdx.x < 64) {
        const int t = threadIdx.x;
        float v = rd[t] + rd[64 + t];
        for (int l = 0; l < L; l++) v -= cd[l * 64 + t];
        dgx[((long long)(p.nchunks + blockIdx.x) * H + blockIdx.y) * 64 + t] = v;
    }
}

template <bool X16>
__device__ void xw_bwd_dkx(const rec_prob &p, const rec_grads &g, const float *dE, const float *dvp, float *sm,
                           xw_chunk ch)
{
    float *T0 = sm, *T1 = sm + XW_T, *T2 = sm + 2 * XW_T, *eL = sm + XW_GATES + 192;
    const int H = p.H, K = p.K, V = p.V, L = p.L, nval = ch.nval;
    const long long rk = ch.rk;
    xw_begin(p, ch, sm, [&](bool own) {
        xw_dv_do<X16>(own, false, T0, p, dvp, rk, nval);
        xw_extras<X16>(own, false, T1, p, XW_VX, rk, nval);
        xw_nat<128>(own, T2, 0, dE, V, K, V, p.vec); /* dE: rows the state's, k v */
    });

    float y[2][32];
    {
        float ds[2][32];
        xw_zero(ds);
        xw_mm(ds, T0, T1); /* dS */
        xw_mask(p, sm + XW_DEC, ds); /* dR */
        __syncthreads(); /* T0 read by both warpgroups */
        xw_put(T0, ds, true); /* dR^T */
    }
    xw_zero(y);
    xw_mm(y, T1, T2); /* Y2 = VX dE^T: rows a, columns the state's rows */
    XW_EACH(n, e) y[n][e] *= eL[xw_r(e) & 63];
    __syncthreads(); /* T1 read by both warpgroups */
    xw_load([&](bool own) { xw_kq<X16>(own, true, T1, p, rk, nval); }); /* [K; Q]^T */
    xw_mm(y, T0, T1); /* dKX = eL o Y2 + dR^T [K; Q] */
    if (g.dkx || g.dkx16)
        xw_store(T0, g.dkx, y, [=](int a) {
            const int l = a >> 6, i = a & 63;
            return l < L && i < nval ? (rk + (long long)i * H) * L * K + l * K : -1LL;
        }, K, true, p.vec, nullptr, g.dkx16);
}

template <int Z, bool X16>
__global__ void __launch_bounds__(PR_REC_THREADS, 1)
    chunk_xbwd_wg_kernel(rec_prob p, const float *dhs, const float *dvp, rec_grads g, float *dgx)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const xw_chunk ch = xw_chunk_of(p);
    const float *dE = dhs + ((long long)blockIdx.x * p.H + blockIdx.y) * p.K * p.V;
    if constexpr (Z == 0) xw_bwd_dvx<X16>(p, g, dE, dvp, dgx, sm, ch);
    else if constexpr (Z == 1) xw_bwd_dkq<X16>(p, g, dvp, dgx, sm, ch);
    else xw_bwd_dkx<X16>(p, g, dE, dvp, sm, ch);
}

/* dg += the reverse cumulative sums of the two shares of dG; dv += dV' */
__global__ void __launch_bounds__(PR_REC_THREADS) chunk_xdg_kernel(rec_prob p, const float *dgx, const float *dvp, rec_grads g)
{
    const xw_chunk ch = xw_chunk_of(p);
    const long long j = ((long long)blockIdx.x * p.H + blockIdx.y) * 64, sh = (long long)p.nchunks * p.H * 64;
    if (p.has_g && g.dg && threadIdx.x < 32) {
        float x[2];
        for (int e = 0; e < 2; e++) x[e] = dgx[j + threadIdx.x * 2 + e] + dgx[sh + j + threadIdx.x * 2 + e];
        rec_chunk_dg_warp<64>(x, ch.nval, g.dg, ch.rk, p.H);
    }
    if (!g.dv && !g.dv16) return;
    for (int i = threadIdx.x; i < ch.nval * p.V; i += PR_REC_THREADS) {
        const long long o = (ch.rk + (long long)(i / p.V) * p.H) * p.V + i % p.V;
        if (g.dv16) g.dv16[o] = pr_bf16_bits(pr_bf16_lo(g.dv16[o]) + dvp[o]); /* dv's only writer: in place */
        else g.dv[o] += dvp[o];
    }
}
static size_t xw_smem() { return (size_t)(XW_DEC + 64 * 65) * 4; }

/* ---- launchers --------------------------------------------------------------------- */
void pr_rec_chunk_xfwd(cudaStream_t st, const rec_prob &p, bool wg, float *vp, float *o, float *hs, float *elast)
{
    PR_ASSERT(!p.kx16 == !p.vx16); /* in place together (rec_extras_of) */
    if (wg) {
        const auto kernel = p.kx16 ? chunk_xfwd_wg_kernel<true> : chunk_xfwd_wg_kernel<false>;
        pr_cuda_smem_prep((const void *)kernel, xw_smem());
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, xw_smem(), st>>>(p, vp, o, hs, elast);
        PR_CUDA_LAUNCH_CHECK();
        return;
    }
    PR_ASSERT(!p.kx16 && !p.vx16); /* bf16 in place is the wgmma form's only */
    const bool bf = rec_bf_products(p);
    const auto kernel = p.C == 64 ? (bf ? chunk_xfwd_kernel<64, true> : chunk_xfwd_kernel<64, false>)
                                  : (bf ? chunk_xfwd_kernel<32, true> : chunk_xfwd_kernel<32, false>);
    const size_t sm = pr_rec_smem_xfwd(p, false);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, vp, o, hs, elast);
    PR_CUDA_LAUNCH_CHECK();
}

void pr_rec_chunk_xbwd(cudaStream_t st, const rec_prob &p, bool wg, const float *dhs, const float *dvp,
                       const rec_grads &d)
{
    if (wg) {
        const size_t n_g = (size_t)2 * p.nchunks * p.H * 64;
        float *dgx = rec_scratch(n_g);
        PR_ASSERT(!p.kx16 == !p.vx16); /* in place together (rec_extras_of) */
        const decltype(&chunk_xbwd_wg_kernel<0, false>) roles[2][3] = {
            {chunk_xbwd_wg_kernel<0, false>, chunk_xbwd_wg_kernel<1, false>, chunk_xbwd_wg_kernel<2, false>},
            {chunk_xbwd_wg_kernel<0, true>, chunk_xbwd_wg_kernel<1, true>, chunk_xbwd_wg_kernel<2, true>}};
        const int x16 = p.kx16 ? 1 : 0;
        for (int z = 0; z < 3; z++) {
            pr_cuda_smem_prep((const void *)roles[x16][z], xw_smem());
            roles[x16][z]<<<dim3(p.nchunks, p.H), PR_REC_THREADS, xw_smem(), st>>>(p, dhs, dvp, d, dgx);
            PR_CUDA_LAUNCH_CHECK();
        }
        chunk_xdg_kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, 0, st>>>(p, dgx, dvp, d);
        PR_CUDA_LAUNCH_CHECK();
        rec_scratch_free(dgx, n_g);
        return;
    }
    PR_ASSERT(!p.kx16 && !p.vx16 && !d.dkx16 && !d.dvx16); /* bf16 in place is the wgmma form's only */
    const bool bf = rec_bf_products(p);
    const auto kernel = p.C == 64 ? (bf ? chunk_xbwd_kernel<64, true> : chunk_xbwd_kernel<64, false>)
                                  : (bf ? chunk_xbwd_kernel<32, true> : chunk_xbwd_kernel<32, false>);
    const size_t sm = pr_rec_smem_xbwd(p, false);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, dhs, dvp, d);
    PR_CUDA_LAUNCH_CHECK();
}
