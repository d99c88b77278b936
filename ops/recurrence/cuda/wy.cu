/* ops/recurrence/cuda/wy.cu: the chunked backward's last pass, every chunk
 * at once: for the delta rules the WY form's backward, with dR0 = beta o dU,
 *   dY1 = T'^T dR0 -> dV;  dY2 = T'^T dW;  dM = -(dY1 R0^T + dY2 W^T) (strict)
 *   M = B diag(beta): dB = dM diag(beta), dbeta_i += sum_t dM_ti B_ti
 *   B = strict(D o K K^T):  dK += dKK K + dKK^T K,  dKK = dB o D
 *   Y1 = V - Mx VX, Mx = strict(D o K KX^T): dMx = -dY1 VX^T, dVX -= Mx^T dY1,
 *     dK += dKKX KX, dKX += dKKX^T K,  dKKX = dMx o D
 *   Y2 = e^G o K: dK += e^G o dY2
 * in its mma.sync form and its wgmma form (sm_90a, TF32, K <= 128, no
 * extras), and the final sums of dg (reverse cumulative sums of grad's dG
 * parts within the chunk); for the rules without the WY step only those
 * sums. Notation: chunked.cu.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

/* ---- wy: the WY form's backward (delta rules), and the final sums ------------------------ */
/* K runs in tiles of BK columns (the plan's bk_wy) wherever a product's
 * output or inner dimension is K: Mx = K KX^T and dM -= dY2 W^T sum over the
 * tiles, and the dK, dKX phases run tile by tile. So only C x BK pieces of K,
 * W, dW and KX are ever in shared memory, and at C = 64, K = 128 two blocks
 * share an SM (one alone leaves its barriers unhidden). The last
 * tile's dY2 = T'^T dW from the dM pass is kept, the others recomputed (a
 * C x C x BK product each). xg: the extras a product, 2 where the plan
 * finds that two keep as many blocks an SM as one (xg_wy): one product of
 * width 2C in place of two of width C, and one barrier pair less (v20). */
struct wy_lay {
    int G, bt, eG, eL, dG, dB, Ts, dM, dMx, Mx, Km, KXl, dUs, dY1, R0t, VXA, dVXt, dKK, Kt, sD, sA, sO, xg, total;
};
__host__ __device__ static wy_lay wy_layout_xg(const rec_prob &p, int BK, int BV, int xg)
{
    rec_bump m;
    wy_lay s;
    const int C = p.C, L = p.L, CL = C * L, LDB = BK + 4, LDC = C + 4, LDV = BV + 4, LDX = CL + 4;
    s.xg = xg;
    s.G = m.take(C), s.bt = m.take(C), s.eG = m.take(C), s.eL = m.take(C), s.dG = m.take(C), s.dB = m.take(C);
    s.Ts = m.take(C * LDC), s.dM = m.take(C * LDC), s.dMx = L ? m.take(C * LDX) : -1;
    const int region = m.off;
    /* Mx lives from its product to the end of the V loop; K's and KX's tiles
     * for its product, then the V loop's tiles, come after it */
    s.Mx = L ? m.take(C * LDX) : -1;
    const int sub = m.off;
    s.Km = L ? m.take(C * LDB) : -1, s.KXl = L ? m.take(xg * C * LDB) : -1;
    const int end_a = m.off;
    m.off = sub;
    s.dUs = m.take(C * LDV), s.dY1 = m.take(C * LDV), s.R0t = m.take(C * LDV);
    s.VXA = L ? m.take(CL * LDV) : -1, s.dVXt = L ? m.take(CL * LDV) : -1;
    const int end1 = m.off > end_a ? m.off : end_a;
    /* the K-tile phases: dKK = dM o D o beta_i, a K tile (W's in the dM pass),
     * dY2's, a work tile (dW's in the dM pass; the extras' KX from it on,
     * xg tiles adjacent: C x LDB is a multiple of 32 floats) and the extras'
     * products */
    m.off = region;
    s.dKK = m.take(C * LDC), s.Kt = m.take(C * LDB), s.sD = m.take(C * LDB), s.sA = m.take((L ? xg : 1) * C * LDB);
    s.sO = L ? m.take(C * LDB) : -1;
    s.total = m.off > end1 ? m.off : end1;
    return s;
}
static size_t wy_smem_xg(const rec_prob &p, int bk, int bv, int xg)
{
    return (size_t)wy_layout_xg(p, bk, bv, xg).total * 4;
}
/* the least shared memory wy takes at these tiles (one extra a product) */
size_t pr_rec_smem_wy(const rec_prob &p, int bk, int bv) { return wy_smem_xg(p, bk, bv, 1); }

/* wy's row steps at the end of its K-tile phases, a warp per row r < C and
 * its lanes along the row: the row dots' and REC_FOR2D's placement, so every
 * element is read and written by one lane and the steps need no barrier
 * between them. db[r] += K_r . X_r (db NULL: not); X_r *= f[r] (f NULL:
 * not); dg[r] += sgn K_r . X_r (dg NULL: not); Y_r += X_r (Y NULL: not).
 * The sums run in rec_row_dots' order. */
template <int C>
__device__ __forceinline__ void wy_rows(const float *Kt, float *X, float *Y, int ld, int W, const float *f, float *db,
                                        float *dg, float sgn)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int r = warp; r < C; r += PR_REC_WARPS) {
        const float fr = f ? f[r] : 1.f;
        float sb = 0.f, sg = 0.f;
        for (int c = lane; c < W; c += 32) {
            const float k = Kt[r * ld + c], x = X[r * ld + c], y = f ? x * fr : x;
            sb = fmaf(k, x, sb);
            sg = fmaf(k, y, sg);
            if (f) X[r * ld + c] = y;
            if (Y) Y[r * ld + c] += y;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            sb += __shfl_xor_sync(PR_FULL_MASK, sb, o);
            sg += __shfl_xor_sync(PR_FULL_MASK, sg, o);
        }
        if (lane == 0 && db) db[r] += sb;
        if (lane == 0 && dg) dg[r] += sgn * sg;
    }
}

template <int C, bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    chunk_wy_kernel(rec_prob p, int BK, int BV, int xg, const float *Tinv, const float *Wp, const float *R0,
                    wy_scratch x, rec_grads d)
{
    extern __shared__ __align__(128) float sm[];
    const wy_lay s = wy_layout_xg(p, BK, BV, xg);
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, L = p.L, CL = C * L;
    const int LDB = BK + 4, LDC = C + 4, LDV = BV + 4, LDX = CL + 4, nkw = (K + BK - 1) / BK;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h, HK = (long long)H * K, HLK = HK * L;
    float *G = sm + s.G, *bt = sm + s.bt, *dG = sm + s.dG, *dB = sm + s.dB, *Ts = sm + s.Ts;
    float *dM = sm + s.dM, *dMx = sm + s.dMx, *Mx = sm + s.Mx;

    float *eG = sm + s.eG;
    rec_ld_tile(Ts, LDC, C, C, Tinv + ((long long)c * H + h) * C * C, C, C, C, true);
    rec_gates_issue<C>(p, cp.row0, cp.nval, h, G, bt);
    for (int t = threadIdx.x; t < C; t += blockDim.x) {
        const long long o = rk + (long long)t * H;
        float g = 0.f;
        if (p.has_g && t < cp.nval)
            for (int kt = 0; kt < x.nkt; kt++) g += x.dGp[kt * x.rowsH + o];
        dG[t] = g;
        dB[t] = t < cp.nval ? x.dbA[o] : 0.f;
    }
    rec_sync();
    rec_gates_scan<C>(G, cp.nval, eG, sm + s.eL); /* read after the next barrier (both branches below start with one) */
    if (L) { /* Mx = strict(D o K KX^T), summed over K tiles, xg extras a product */
        float *Km = sm + s.Km, *KXl = sm + s.KXl;
        for (int kt = 0; kt < nkw; kt++) {
            const int k0 = kt * BK, nk = min(BK, K - k0);
            for (int l0 = 0; l0 < L; l0 += s.xg) {
                const int nl = min(s.xg, L - l0);
                if (l0 == 0) rec_ld_tile(Km, LDB, C, BK, p.k + rk * K + k0, HK, cp.nval, nk, p.vec);
                for (int l = 0; l < nl; l++)
                    rec_ld_tile(KXl + l * C * LDB, LDB, C, BK, p.kx + rk * L * K + (l0 + l) * K + k0, HLK, cp.nval, nk,
                                p.vec);
                rec_sync();
                rec_mm<false, true, BF, false>(p, Mx + l0 * C, LDX, Km, LDB, KXl, LDB, C, nl * C, BK, 1.f, kt > 0);
                rec_sync();
            }
        }
        REC_FOR2D(C, C, t, i) {
            const float d = i < t ? expf(G[t] - G[i]) : 0.f;
            for (int l = 0; l < L; l++) Mx[t * LDX + l * C + i] *= d;
        }
    }
    float *dUs = sm + s.dUs, *dY1 = sm + s.dY1, *R0t = sm + s.R0t, *VXA = sm + s.VXA, *dVXt = sm + s.dVXt;
    for (int v0 = 0, vi = 0; v0 < V; v0 += BV, vi++) {
        const int nv = min(BV, V - v0);
        rec_sync();
        rec_ld_tile(dUs, LDV, C, BV, x.dU + rk * V + v0, (long long)H * V, cp.nval, nv, p.vec);
        rec_ld_tile(R0t, LDV, C, BV, R0 + rk * V + v0, (long long)H * V, cp.nval, nv, p.vec);
        for (int l = 0; l < L; l++) {
            rec_ld_tile(VXA + l * C * LDV, LDV, C, BV, p.vx + rk * L * V + l * V + v0, (long long)H * L * V, cp.nval, nv,
                        p.vec);
            rec_ld_tile(dVXt + l * C * LDV, LDV, C, BV, x.dVX + rk * L * V + l * V + v0, (long long)H * L * V, cp.nval,
                        nv, p.vec);
        }
        rec_sync();
        REC_FOR2D(C, BV, t, j) dUs[t * LDV + j] *= bt[t]; /* dR0 */
        rec_sync();
        rec_mm<true, false, BF, false>(p, dY1, LDV, Ts, LDC, dUs, LDV, C, BV, C, 1.f, false);
        rec_sync();
        if (d.dv) rec_st_tile(d.dv + rk * V + v0, (long long)H * V, cp.nval, nv, dY1, LDV, 1.f, true, p.vec);
        if constexpr (BF) /* bf16 dv in place (bf16 data with TF32 on only) */
            if (d.dv16) rec_acc_tile16<1>(d.dv16 + rk * V + v0, (long long)H * V, cp.nval, nv, dY1, LDV);
        rec_mm<false, true, BF, false>(p, dM, LDC, dY1, LDV, R0t, LDV, C, C, BV, -1.f, vi > 0);
        if (L) {
            rec_mm<false, true, BF, false>(p, dMx, LDX, dY1, LDV, VXA, LDV, C, CL, BV, -1.f, vi > 0);
            rec_mm<true, false, BF, false>(p, dVXt, LDV, Mx, LDX, dY1, LDV, CL, BV, C, -1.f, true);
            rec_sync();
            for (int l = 0; d.dvx && l < L; l++)
                rec_st_tile(d.dvx + rk * L * V + l * V + v0, (long long)H * L * V, cp.nval, nv, dVXt + l * C * LDV, LDV,
                            1.f, true, p.vec);
        }
    }
    float *dKK = sm + s.dKK, *Kt = sm + s.Kt, *sD = sm + s.sD, *sA = sm + s.sA, *sO = sm + s.sO;
    /* dM -= dY2 W^T, dY2 = T'^T dW, over the K tiles (W's tile in Kt, dW's in sA) */
    for (int kt = 0; kt < nkw; kt++) {
        const int k0 = kt * BK, nk = min(BK, K - k0);
        rec_sync();
        rec_ld_tile(sA, LDB, C, BK, x.dW + rk * K + k0, HK, cp.nval, nk, p.vec);
        rec_ld_tile(Kt, LDB, C, BK, Wp + rk * K + k0, HK, cp.nval, nk, p.vec);
        rec_sync();
        rec_mm<true, false, BF, false>(p, sD, LDB, Ts, LDC, sA, LDB, C, BK, C, 1.f, false); /* dY2 */
        rec_sync();
        rec_mm<false, true, BF, false>(p, dM, LDC, sD, LDB, Kt, LDB, C, C, BK, -1.f, true);
    }
    /* the last K tile's keys load while dM and dMx are masked */
    rec_sync();
    rec_ld_tile(Kt, LDB, C, BK, p.k + rk * K + (nkw - 1) * BK, HK, cp.nval, K - (nkw - 1) * BK, p.vec);
    REC_FOR2D(C, C, t, i) { /* dM o D; dKK = dM o D o beta_i */
        const float d = i < t ? expf(G[t] - G[i]) : 0.f, m = dM[t * LDC + i] * d;
        dM[t * LDC + i] = m;
        dKK[t * LDC + i] = m * bt[i];
        for (int l = 0; l < L; l++) dMx[t * LDX + l * C + i] *= d;
    }
    float *dg = p.has_g ? dG : nullptr;
    /* dK and dKX a K tile at a time, the last first: its dY2 is still in sD */
    for (int kt = nkw - 1; kt >= 0; kt--) {
        const int k0 = kt * BK, nk = min(BK, K - k0);
        const bool again = kt != nkw - 1;
        if (again) {
            rec_sync();
            rec_ld_tile(Kt, LDB, C, BK, p.k + rk * K + k0, HK, cp.nval, nk, p.vec);
            rec_ld_tile(sA, LDB, C, BK, x.dW + rk * K + k0, HK, cp.nval, nk, p.vec);
            rec_sync();
            rec_mm<true, false, BF, false>(p, sD, LDB, Ts, LDC, sA, LDB, C, BK, C, 1.f, false);
        }
        rec_sync();
        /* dY2 o e^G, and dG += k . that; (dM o D)^T K beside it */
        wy_rows<C>(Kt, sD, nullptr, LDB, BK, eG, nullptr, dg, 1.f);
        rec_mm<true, false, BF, false>(p, sA, LDB, dM, LDC, Kt, LDB, C, BK, C, 1.f, false);
        rec_sync();
        /* dbeta += k . (dM o D)^T K; that times beta is dKK^T K: into dK, dG -= k . it */
        wy_rows<C>(Kt, sA, sD, LDB, BK, bt, dB, dg, -1.f);
        rec_sync();
        rec_mm<false, false, BF, false>(p, sA, LDB, dKK, LDC, Kt, LDB, C, BK, C, 1.f, false); /* dKK K */
        rec_sync();
        wy_rows<C>(Kt, sA, sD, LDB, BK, nullptr, nullptr, dg, 1.f);
        rec_sync();
        for (int l0 = 0; l0 < L; l0 += s.xg) { /* KX of extras l0 .. l0 + nl - 1 in sA (and on) */
            const int nl = min(s.xg, L - l0);
            for (int l = 0; l < nl; l++)
                rec_ld_tile(sA + l * C * LDB, LDB, C, BK, p.kx + rk * L * K + (l0 + l) * K + k0, HLK, cp.nval, nk,
                            p.vec);
            rec_sync();
            /* sum_l dKKX_l KX_l */
            rec_mm<false, false, BF, false>(p, sO, LDB, dMx + l0 * C, LDX, sA, LDB, C, BK, nl * C, 1.f, false);
            rec_sync();
            wy_rows<C>(Kt, sO, sD, LDB, BK, nullptr, nullptr, dg, 1.f);
            rec_sync();
            for (int l = l0; l < l0 + nl; l++) {
                /* dKKX_l^T K */
                rec_mm<true, false, BF, false>(p, sO, LDB, dMx + l * C, LDX, Kt, LDB, C, BK, C, 1.f, false);
                rec_sync();
                if (p.has_g) rec_row_dots(dG, sA + (l - l0) * C * LDB, LDB, sO, LDB, C, BK, -1.f, true);
                const long long o = rk * L * K + l * K + k0;
                if (d.dkx) rec_st_tile(d.dkx + o, HLK, cp.nval, nk, sO, LDB, 1.f, true, p.vec, x.dkxa + o);
                rec_sync();
            }
        }
        bool dk_done = false;
        if constexpr (BF) /* bf16 dk: grad's f32 sums (in d.dk) + this part, rounded into dk16 */
            if (d.dk16) rec_acc_tile16_from<1>(d.dk16 + rk * K + k0, d.dk + rk * K + k0, HK, cp.nval, nk, sD, LDB),
                dk_done = true;
        if (d.dk && !dk_done) rec_st_tile(d.dk + rk * K + k0, HK, cp.nval, nk, sD, LDB, 1.f, true, p.vec);
    }
    rec_sync();
    if (threadIdx.x < 32 && p.has_g && d.dg) {
        float x[C / 32];
#pragma unroll
        for (int e = 0; e < C / 32; e++) x[e] = dG[threadIdx.x * (C / 32) + e];
        rec_chunk_dg_warp<C>(x, cp.nval, d.dg, rk, H);
    }
    if (d.dbeta)
        for (int t = threadIdx.x; t < cp.nval; t += blockDim.x) d.dbeta[rk + (long long)t * H] += dB[t];
}

/* ---- wy's wgmma form (sm_90a) ------------------------------------------------------
 * The same sums as chunk_wy_kernel without extras (L = 0), K <= 128, every
 * product a warpgroup's wgmma from 128-byte-swizzled tiles of 64 rows
 * (C = 32 leaves rows 32..63 zero), V and K in tiles of 64 whose halves the
 * two warpgroups take:
 *   dY1 = T'^T (beta o dU) a V tile at a time (A: T'^T, B: (beta o dU)^T,
 *     both copied transposed), added into dv from the registers;
 *   dY2 = T'^T dW a K tile at a time, kept for the dK step;
 *   dM += dY1 R0^T + dY2 W^T: each warpgroup sums the products of its own
 *     half of dY1 and dY2 (its rows of the swizzled tile it just stored: no
 *     block barrier between the two products), and the two 64 x 64 partial
 *     sums meet once, in shared memory, before the mask;
 *   per K tile, (dM o D)^T K and dKK K from one transposed K tile, and the
 *     row steps of wy_rows on the sums in registers, with K and dK (grad's
 *     part already in it) read from global memory at the sums' places:
 *     dK += e^G o dY2 + beta o (dM o D)^T K + dKK K, dbeta and dG their
 *     row dots.
 * The loops over tiles stay loops (the kernel's code then fits the
 * instruction cache), so dY2 waits in shared memory, each thread's sums in
 * its own column of Y; the next tile's rows are prefetched into L2 while
 * the current one multiplies. Layout (floats, tiles 1024-byte aligned):
 * gates (G, bt, eG, dG, dB, the warpgroups' row dots dGw[2][64] and
 * dBw[2][64]), slots S0..S3 of one tile each, Y. */
enum { WYW_GATES = 0, WYW_S = 768, WYW_Y = WYW_S + 4 * 4096 };
static size_t wy_wg_smem(int nkt) { return (size_t)(WYW_Y + nkt * 16 * PR_REC_THREADS) * 4; }

/* this warpgroup's barrier (ids 1, 2; 0 is __syncthreads) */
__device__ __forceinline__ void wyw_bar(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory"); }
/* rows r < nr, columns [0, min(nc, 32 LINES)) of src (row stride rs) into
 * L2, a 128-byte line a thread */
template <int LINES> __device__ __forceinline__ void wyw_prefetch(const float *src, long long rs, int nr, int nc)
{
#pragma unroll 1
    for (int i = threadIdx.x; i < nr * LINES; i += PR_REC_THREADS)
        if (i % LINES * 32 < nc) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(src + i / LINES * rs + i % LINES * 32));
}
/* a warpgroup's 64 x 32 sums into sub-tile sub of a swizzled tile, rounded */
__device__ __forceinline__ void wyw_store_sums(float *sub, const float (&d)[16], int r0, int c0)
{
    const unsigned base = (unsigned)__cvta_generic_to_shared(sub);
#pragma unroll
    for (int e = 0; e < 16; e++)
        sub[rec_sw128(base, r0 + 8 * (e >> 1 & 1), c0 + 8 * (e >> 2) + (e & 1))] = __uint_as_float(rec_tf32(d[e]));
}
/* one tile of dY = T'^T X (X^T transposed into S1 from src, scaled by f
 * per source row; f NULL: 1) with its dM += dY B^T (B's rows swizzled into
 * S2 from b): the loads, the two products. y: this warpgroup's 32 columns
 * of dY; the caller waits for dm. */
__device__ __forceinline__ void wyw_tile(const rec_prob &p, float *S, const float *src, const float *b, long long rs,
                                         int nval, int nc, const float *f, float (&y)[16], float (&dm)[32], int wg,
                                         int r0, int c0)
{
    __syncthreads(); /* the previous tile's products are done with the slots */
    rec_cpt<64, 64>(S + 4096, 64, src, rs, nval, nc);
    for (int kb = 0; kb < 2; kb++)
        rec_ld_tile<true>(S + 8192 + kb * 2048, 32, 64, 32, b + kb * 32, rs, nval, nc - kb * 32, p.vec);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    rec_cpt_own<64, 64>(S + 4096, 64, f, 1.f);
    for (int kb = 0; kb < 2; kb++) rec_tf32_own(S + 8192 + kb * 2048, 64);
    rec_fence_async();
    __syncthreads();
#pragma unroll
    for (int e = 0; e < 16; e++) y[e] = 0.f;
    rec_wg_fence();
    rec_wg_rows<32, 2>(y, S, S + 4096 + wg * 32 * 32, 2048);
    rec_wg_commit();
    rec_wg_wait();
    rec_wg_settle(y);
    wyw_store_sums(S + 3 * 4096 + wg * 2048, y, r0, c0);
    rec_fence_async();
    wyw_bar(wg);
    rec_wg_fence();
    rec_wg_rows<64, 1>(dm, S + 3 * 4096 + wg * 2048, S + 8192 + wg * 2048, 0);
    rec_wg_commit();
}

/* G16: bf16 grads in place where given: dv (d.dv16; d.dv NULL) and dk
 * (d.dk16: grad's f32 sums in d.dk plus this part, rounded into it). K16
 * (with G16): bf16 k read in place from p.k16 (the plan's io16_bwd; p.k
 * NULL): K^T copied as bf16 pairs (rec_cpt16), K's own elements widened */
template <int C, bool G16 = false, bool K16 = false>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    chunk_wy_wg_kernel(rec_prob p, const float *Tinv, const float *Wp, const float *R0, wy_scratch x, rec_grads d)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, wg = threadIdx.x >> 7, nkt = (K + 63) / 64;
    const int lane = threadIdx.x & 31, r0 = 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2), c0 = 2 * (lane & 3);
    float *G = sm + WYW_GATES, *bt = G + 64, *eG = G + 128, *dG = G + 192, *dB = G + 256, *dGw = G + 320;
    float *dBw = G + 448, *S = sm + WYW_S, *Y = sm + WYW_Y + threadIdx.x;
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int nval = cp.nval;
    const long long rk = (long long)cp.row0 * H + h, HK = (long long)H * K, HV = (long long)H * V;

    constexpr bool k16 = K16;
    rec_cpt<64, 64>(S, 64, Tinv + ((long long)c * H + h) * C * C, C, C, C);
    rec_gates_issue<C, K16>(p, cp.row0, nval, h, G, bt);
    rec_gates_pad64<C>(G);
    /* grad's parts of dG and dbeta (thread t < C, row t): loads in flight
     * until the end, where they join the sums here */
    float g0 = 0.f, b0 = 0.f;
    if (threadIdx.x < nval) {
        const long long o = rk + (long long)threadIdx.x * H;
        if (p.has_g)
            for (int kt = 0; kt < x.nkt; kt++) g0 += x.dGp[kt * x.rowsH + o];
        b0 = x.dbA[o];
    }
    if (d.dv) wyw_prefetch<2>(d.dv + rk * V, HV, nval, min(64, V));
    /* bf16 rows: 64 columns are one 128-byte line (the row stride in floats: HV / 2, HV even) */
    if (G16 && d.dv16) wyw_prefetch<1>(reinterpret_cast<const float *>(d.dv16 + rk * V), HV / 2, nval, 32);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    rec_gates_scan<C>(G, nval, eG);
    rec_cpt_own<64, 64>(S, 64, nullptr, 1.f);
    /* (the first tile's barrier makes these visible) */
    float dm[32]; /* this warpgroup's part of dM: its halves of dY1 R0^T and dY2 W^T */
#pragma unroll
    for (int e = 0; e < 32; e++) dm[e] = 0.f;
    /* the tiles: V tiles of dY1 (added into dv), then K tiles of dY2 (kept in Y) */
    const int nvt = (V + 63) / 64;
#pragma unroll 1
    for (int st = 0; st < nvt + nkt; st++) {
        const bool vt = st < nvt;
        const int j0 = (vt ? st : st - nvt) * 64, nc = min(64, (vt ? V : K) - j0);
        const long long rs = vt ? HV : HK, o = rk * (vt ? V : K) + j0;
        float y[16];
        wyw_tile(p, S, (vt ? x.dU : x.dW) + o, (vt ? R0 : Wp) + o, rs, nval, nc, vt ? bt : nullptr, y, dm, wg, r0,
                 c0);
        /* the next tile's rows (after the last, K's and dK's) into L2 */
        if (st + 1 < nvt + nkt) {
            const bool nvt1 = st + 1 < nvt;
            const int n0 = (nvt1 ? st + 1 : st + 1 - nvt) * 64, nn = min(64, (nvt1 ? V : K) - n0);
            const long long rn = nvt1 ? HV : HK, on = rk * (nvt1 ? V : K) + n0;
            wyw_prefetch<2>((nvt1 ? x.dU : x.dW) + on, rn, nval, nn);
            wyw_prefetch<2>((nvt1 ? R0 : Wp) + on, rn, nval, nn);
            if (nvt1 && d.dv) wyw_prefetch<2>(d.dv + on, rn, nval, nn);
            if (nvt1 && G16 && d.dv16)
                wyw_prefetch<1>(reinterpret_cast<const float *>(d.dv16 + on), rn / 2, nval, 32);
        } else {
            if constexpr (k16) wyw_prefetch<2>(reinterpret_cast<const float *>(p.k16 + rk * K), HK / 2, nval, K / 2);
            else wyw_prefetch<4>(p.k + rk * K, HK, nval, K);
            if (d.dk) wyw_prefetch<4>(d.dk + rk * K, HK, nval, K);
        }
        rec_wg_wait();
        rec_wg_settle(dm);
        if (!vt) {
#pragma unroll
            for (int e = 0; e < 16; e++) Y[((st - nvt) * 16 + e) * PR_REC_THREADS] = y[e];
        } else if (G16 && d.dv16) { /* bf16 dv += dY1, rounded once (the staged cast's bits); V % 4 == 0: pairs whole */
            unsigned old[8];
#pragma unroll
            for (int e = 0; e < 16; e += 2) {
                const int t = r0 + 8 * (e >> 1 & 1), j = wg * 32 + c0 + 8 * (e >> 2);
                old[e / 2] = 0u;
                if (t < nval && j < nc)
                    old[e / 2] = *reinterpret_cast<const unsigned *>(d.dv16 + (rk + (long long)t * H) * V + j0 + j);
            }
#pragma unroll
            for (int e = 0; e < 16; e += 2) {
                const int t = r0 + 8 * (e >> 1 & 1), j = wg * 32 + c0 + 8 * (e >> 2);
                if (t >= nval || j >= nc) continue;
                const unsigned w = old[e / 2];
                *reinterpret_cast<unsigned *>(d.dv16 + (rk + (long long)t * H) * V + j0 + j) =
                    (unsigned)pr_bf16_bits(pr_bf16_lo(w) + y[e]) | (unsigned)pr_bf16_bits(pr_bf16_hi(w) + y[e + 1]) << 16;
            }
        } else if (d.dv) { /* dv += dY1: every load, then every store */
            float2 old[8];
#pragma unroll
            for (int e = 0; e < 16; e += 2) {
                const int t = r0 + 8 * (e >> 1 & 1), j = wg * 32 + c0 + 8 * (e >> 2);
                const float *q = d.dv + (rk + (long long)t * H) * V + j0 + j;
                old[e / 2] = make_float2(0.f, 0.f);
                if (t >= nval || j >= nc) continue;
                if (p.vec) old[e / 2] = *reinterpret_cast<const float2 *>(q);
                else old[e / 2] = make_float2(q[0], j + 1 < nc ? q[1] : 0.f);
            }
#pragma unroll
            for (int e = 0; e < 16; e += 2) {
                const int t = r0 + 8 * (e >> 1 & 1), j = wg * 32 + c0 + 8 * (e >> 2);
                float *q = d.dv + (rk + (long long)t * H) * V + j0 + j;
                const float2 sv = make_float2(old[e / 2].x + y[e], old[e / 2].y + y[e + 1]);
                if (t >= nval || j >= nc) continue;
                if (p.vec) *reinterpret_cast<float2 *>(q) = sv;
                else {
                    q[0] = sv.x;
                    if (j + 1 < nc) q[1] = sv.y;
                }
            }
        }
    }
    /* K and dK at the places of the sums of K tile kt: loads in
     * flight across the barriers before their use */
    float2 kv[8], kd[8];
    const auto ld_kd = [&](int kt) {
#pragma unroll
        for (int e = 0; e < 16; e += 2) {
            const int t = r0 + 8 * (e >> 1 & 1), k = kt * 64 + wg * 32 + c0 + 8 * (e >> 2), u = e / 2;
            const long long o = (rk + (long long)t * H) * K + k;
            kv[u] = kd[u] = make_float2(0.f, 0.f);
            if (t >= nval || k >= K) continue;
            if constexpr (k16) { /* K % 4 == 0, k even: the pair whole and 4-byte aligned */
                const unsigned w = *reinterpret_cast<const unsigned *>(p.k16 + o);
                kv[u] = make_float2(pr_bf16_lo(w), pr_bf16_hi(w));
                if (d.dk) kd[u] = *reinterpret_cast<const float2 *>(d.dk + o);
            } else if (p.vec) {
                kv[u] = *reinterpret_cast<const float2 *>(p.k + o);
                if (d.dk) kd[u] = *reinterpret_cast<const float2 *>(d.dk + o);
            } else {
                const bool two = k + 1 < K;
                kv[u] = make_float2(p.k[o], two ? p.k[o + 1] : 0.f);
                if (d.dk) kd[u] = make_float2(d.dk[o], two ? d.dk[o + 1] : 0.f);
            }
        }
    };
    ld_kd(0);
    /* the partial sums meet in S3 (each warpgroup leaves the half of its
     * sums the other one finishes) while K^T's first tile loads into S2;
     * dM o D goes to S0 transposed, dKK to S1 */
    __syncthreads();
    if constexpr (k16) rec_cpt16<64, 64>(S + 2 * 4096, 64, p.k16 + rk * K, HK, nval, K);
    else rec_cpt<64, 64>(S + 2 * 4096, 64, p.k + rk * K, HK, nval, K);
    float *X = S + 3 * 4096; /* 64 x 64, columns swizzled by the row's low bits (fewer bank conflicts) */
#pragma unroll
    for (int e = 0; e < 16; e++) {
        const int t = r0 + 8 * (e >> 1 & 1), i = c0 + 8 * (e >> 2) + (e & 1) + 32 * (1 - wg);
        X[t * 64 + (i ^ ((t & 7) << 3))] = wg ? dm[e] : dm[16 + e];
    }
    __syncthreads();
    {
        const unsigned bm = (unsigned)__cvta_generic_to_shared(S), bk = bm + 4096 * 4;
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const int t = r0 + 8 * (e >> 1 & 1), i = c0 + 8 * (e >> 2) + (e & 1) + 32 * wg;
            const float dd = i < t && t < C ? expf(G[t] - G[i]) : 0.f;
            const float m = -((wg ? dm[16 + e] : dm[e]) + X[t * 64 + (i ^ ((t & 7) << 3))]) * dd; /* dM o D */
            S[(t >> 5) * 2048 + rec_sw128(bm + (t >> 5) * 8192, i, t & 31)] = __uint_as_float(rec_tf32(m));
            S[4096 + (i >> 5) * 2048 + rec_sw128(bk + (i >> 5) * 8192, t, i & 31)] =
                __uint_as_float(rec_tf32(m * bt[i]));
        }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    if constexpr (k16) rec_cpt_own<64, 64, true>(S + 2 * 4096, 64, nullptr, 1.f);
    else rec_cpt_own<64, 64>(S + 2 * 4096, 64, nullptr, 1.f);
    rec_fence_async();
    __syncthreads();
    /* per K tile (K^T in S2, the next in S3): A6 = (dM o D)^T K and A7 = dKK K, then the row steps */
    float sg[2] = {0.f, 0.f}, sb[2] = {0.f, 0.f};
#pragma unroll 1
    for (int kt = 0; kt < nkt; kt++) {
        const float *KT = S + (2 + (kt & 1)) * 4096;
        if constexpr (k16) {
            if (kt + 1 < nkt)
                rec_cpt16<64, 64>(S + (2 + ((kt + 1) & 1)) * 4096, 64, p.k16 + rk * K + (kt + 1) * 64, HK, nval,
                                  K - (kt + 1) * 64);
        } else {
            if (kt + 1 < nkt) rec_cpt<64, 64>(S + (2 + ((kt + 1) & 1)) * 4096, 64, p.k + rk * K + (kt + 1) * 64, HK,
                                              nval, K - (kt + 1) * 64);
        }
        float a6[16], a7[16];
        rec_wg_zero(a6);
        rec_wg_zero(a7);
        rec_wg_fence();
        rec_wg_rows<32, 2>(a6, S, KT + wg * 32 * 32, 2048);
        rec_wg_rows<32, 2>(a7, S + 4096, KT + wg * 32 * 32, 2048);
        rec_wg_commit();
        rec_wg_wait();
        rec_wg_settle(a6);
        rec_wg_settle(a7);
#pragma unroll
        for (int e = 0; e < 16; e += 2) {
            const int hh = e >> 1 & 1, t = r0 + 8 * hh, k = kt * 64 + wg * 32 + c0 + 8 * (e >> 2);
            const float kk[2] = {kv[e / 2].x, kv[e / 2].y};
            float out[2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const float sd = Y[(kt * 16 + e + u) * PR_REC_THREADS] * eG[t], z6 = a6[e + u] * bt[t];
                sb[hh] = fmaf(kk[u], a6[e + u], sb[hh]);
                sg[hh] = fmaf(kk[u], sd - z6 + a7[e + u], sg[hh]);
                out[u] = sd + z6 + a7[e + u];
            }
            if (t >= nval || k >= K || !d.dk) continue;
            float *q = d.dk + (rk + (long long)t * H) * K + k;
            const float2 s = make_float2(kd[e / 2].x + out[0], kd[e / 2].y + out[1]);
            if (G16 && d.dk16) { /* grad's f32 sums (kd) + this part, rounded once; K % 4 == 0: pairs whole */
                *reinterpret_cast<unsigned *>(d.dk16 + (rk + (long long)t * H) * K + k) =
                    (unsigned)pr_bf16_bits(s.x) | (unsigned)pr_bf16_bits(s.y) << 16;
                continue;
            }
            if (p.vec) *reinterpret_cast<float2 *>(q) = s;
            else {
                q[0] = s.x;
                if (k + 1 < K) q[1] = s.y;
            }
        }
        if (kt + 1 < nkt) {
            ld_kd(kt + 1);
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            if constexpr (k16) rec_cpt_own<64, 64, true>(S + (2 + ((kt + 1) & 1)) * 4096, 64, nullptr, 1.f);
            else rec_cpt_own<64, 64>(S + (2 + ((kt + 1) & 1)) * 4096, 64, nullptr, 1.f);
            rec_fence_async();
            __syncthreads();
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            sg[hh] += __shfl_xor_sync(PR_FULL_MASK, sg[hh], o);
            sb[hh] += __shfl_xor_sync(PR_FULL_MASK, sb[hh], o);
        }
        if ((lane & 3) == 0) dGw[wg * 64 + r0 + 8 * hh] = sg[hh], dBw[wg * 64 + r0 + 8 * hh] = sb[hh];
    }
    if (threadIdx.x < C) dG[threadIdx.x] = g0, dB[threadIdx.x] = b0;
    __syncthreads();
    if (threadIdx.x < 32 && p.has_g && d.dg) {
        float g[C / 32];
#pragma unroll
        for (int e = 0; e < C / 32; e++) {
            const int t = threadIdx.x * (C / 32) + e;
            g[e] = dG[t] + (dGw[t] + dGw[64 + t]);
        }
        rec_chunk_dg_warp<C>(g, nval, d.dg, rk, H);
    }
    if (d.dbeta)
        for (int t = threadIdx.x; t < nval; t += blockDim.x)
            d.dbeta[rk + (long long)t * H] += dB[t] + (dBw[t] + dBw[64 + t]);
}

/* dg of the rules without the WY step (ssd): reverse cumulative sums of dG
 * per chunk, a warp per (chunk, head) */
template <int C>
__global__ static void chunk_dg_kernel(rec_prob p, const float *dGp, int nkt, long long rowsH, float *dg)
{
    const long long id = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    if (id >= (long long)p.nchunks * p.H) return; /* whole warps leave together */
    const int c = (int)(id / p.H), h = (int)(id % p.H), lane = threadIdx.x & 31;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * p.H + h;
    float x[C / 32];
#pragma unroll
    for (int e = 0; e < C / 32; e++) {
        const int t = lane * (C / 32) + e;
        x[e] = 0.f;
        if (t < cp.nval)
            for (int kt = 0; kt < nkt; kt++) x[e] += dGp[kt * rowsH + rk + (long long)t * p.H];
    }
    rec_chunk_dg_warp<C>(x, cp.nval, dg, rk, p.H);
}

/* ---- launcher --------------------------------------------------------------------- */
template <int C>
static void chunk_wy_c(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                       const wy_scratch &x, const rec_grads &d)
{
    if (p.delta && pl.wg_wy) {
        const size_t sm = wy_wg_smem((p.K + 63) / 64);
        const auto kernel = p.k16                ? chunk_wy_wg_kernel<C, true, true>
                            : d.dv16 || d.dk16 ? chunk_wy_wg_kernel<C, true>
                                               : chunk_wy_wg_kernel<C>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, sv.Tinv, sv.W, sv.R0, x, d);
        PR_CUDA_LAUNCH_CHECK();
    } else if (p.delta) {
        const size_t sm = wy_smem_xg(p, pl.bk_wy, pl.bv_wy, pl.xg_wy);
        PR_ASSERT((!d.dv16 && !d.dk16) || rec_bf_products(p)); /* the BF instance alone adds into bf16 dv, dk */
        PR_ASSERT(!p.k16); /* the plan reads k in place in the wgmma form only */
        const auto kernel = rec_bf_products(p) ? chunk_wy_kernel<C, true> : chunk_wy_kernel<C, false>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, pl.bk_wy, pl.bv_wy, pl.xg_wy, sv.Tinv, sv.W, sv.R0,
                                                                   x, d);
        PR_CUDA_LAUNCH_CHECK();
    } else if (p.has_g && d.dg) {
        chunk_dg_kernel<C><<<pr_cuda_blocks((long long)p.nchunks * p.H * 32, 128), 128, 0, st>>>(p, x.dGp, x.nkt,
                                                                                                 x.rowsH, d.dg);
        PR_CUDA_LAUNCH_CHECK();
    }
}

void pr_rec_chunk_wy(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                     const wy_scratch &x, const rec_grads &d)
{
    if (p.C == 64) chunk_wy_c<64>(st, p, pl, sv, x, d);
    else chunk_wy_c<32>(st, p, pl, sv, x, d);
}

size_t pr_rec_smem_wy_xg(const rec_prob &p, int bk, int bv, int xg) { return wy_smem_xg(p, bk, bv, xg); }
size_t pr_rec_smem_wy_wg(int nkt) { return wy_wg_smem(nkt); }
