/* ops/recurrence/chunked_bwd.cu: the chunked backward on CUDA, the forward's
 * three steps in reverse, and the plan of tile sizes.
 *
 * Per chunk (notation of chunked_fwd.cu; dhn = dL/d(state at the chunk's
 * end), Kd = e^{G_last - G} o Ka, S = incl(D o Q Ka^T)):
 *   Ua enters O and the next state:  dUa = scale S^T dO + Kd dhn
 *   the chunk-start state h:          dh = e^{G_last} dhn + scale (e^G o Q)^T dO - W^T (beta o dU)
 * (dlocal computes scale S^T dO for every chunk at once, dstate then runs
 * serially over chunks, parallel over V tiles, adds Kd dhn and carries dh.)
 * grad, every chunk at once, K tiles in parallel, V tiles in a loop:
 *   dQ  = scale e^G o (dO h^T) + dS Ka,       dS = scale incl(D o dO Ua^T)
 *   dKa = e^{G_last - G} o (Ua dhn^T) + dS^T Q
 *   dW  = -(beta o dU) h^T,   dbeta += dU . R  (u = beta R, R = R0 - W h)
 * wy (delta rules), the WY form backward: with dR0 = beta o dU,
 *   dY1 = T'^T dR0 -> dV;  dY2 = T'^T dW;  dM = -(dY1 R0^T + dY2 W^T) (strict)
 *   M = B diag(beta): dB = dM diag(beta), dbeta_i += sum_t dM_ti B_ti
 *   B = strict(D o K K^T):  dK += dKK K + dKK^T K,  dKK = dB o D
 *   Y1 = V - Mx VX, Mx = strict(D o K KX^T): dMx = -dY1 VX^T, dVX -= Mx^T dY1,
 *     dK += dKKX KX, dKX += dKKX^T K,  dKKX = dMx o D
 *   Y2 = e^G o K: dK += e^G o dY2
 * dg: every factor e^{G_t - G_i} of a product X_ti = x_t . y_i gives
 * dG_t += dX_ti X_ti and dG_i -= dX_ti X_ti; summed over i that is
 * x_t . (dX y)_t, so dG_t = x_t . (its row gradient) - y_t . (its column
 * gradient), read off the products above; e^{G_t} and e^{G_last} factors add
 * q.dQ, k.dY2 and the chunk-end terms. dg is then the reverse cumulative sum
 * of dG within the chunk. Every sum has a fixed order: no atomics.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/recurrence/recurrence_cuda.cuh"

/* ---- dstate: serial over chunks in reverse ---------------------------------------- */
struct dstate_lay {
    int G, bt, eG, eL, dHs, dVA, dOs, R1, total;
};
__host__ __device__ static dstate_lay dstate_layout(const rec_prob &p, int BV)
{
    rec_bump m;
    dstate_lay s;
    const int C = p.C, NA = C * (1 + p.L), LDK = p.Kp + 4, LDV = BV + 4;
    const int r1 = NA > (p.delta ? 2 : 1) * C ? NA : (p.delta ? 2 : 1) * C;
    s.G = m.take(C), s.bt = m.take(C), s.eG = m.take(C), s.eL = m.take(C);
    s.dHs = m.take(p.Kp * LDV), s.dVA = m.take(NA * LDV), s.dOs = m.take(C * LDV), s.R1 = m.take(r1 * LDK);
    s.total = m.off;
    return s;
}
size_t pr_rec_smem_dstate(const rec_prob &p, int bv) { return (size_t)dstate_layout(p, bv).total * 4; }

template <int C, bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    chunk_dstate_kernel(rec_prob p, int BV, rec_dstate_io io)
{
    extern __shared__ __align__(128) float sm[];
    const dstate_lay s = dstate_layout(p, BV);
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * BV, H = p.H, K = p.K, V = p.V, L = p.L, Kp = p.Kp;
    const int NA = C * (1 + L), LDK = Kp + 4, LDV = BV + 4, nv = min(BV, V - v0);
    float *G = sm + s.G, *bt = sm + s.bt, *eG = sm + s.eG, *eL = sm + s.eL, *dHs = sm + s.dHs, *dVA = sm + s.dVA;
    float *dOs = sm + s.dOs, *KA = sm + s.R1, *Qs = sm + s.R1, *Ws = sm + s.R1 + C * LDK;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + v0;
    const bool store = io.dhs != nullptr; /* else the carry only */
    float *dU = io.dU, *dVX = io.dVX;
    if (io.dht) rec_ld_tile(dHs, LDV, Kp, BV, io.dht + hoff, V, K, nv, p.vec);
    else
        for (int e = threadIdx.x; e < Kp * LDV; e += blockDim.x) dHs[e] = 0.f;
    for (int ci = (sq.len + C - 1) / C - 1; ci >= 0; ci--) {
        const int c = sq.cbase + ci, row0 = sq.bos + ci * C, nval = min(C, sq.len - ci * C);
        const long long rk = (long long)row0 * H + h;
        rec_sync();
        /* the copies first, then the state's store and the gates (warp 0's
         * gate loads would otherwise hold back its share of the copies) */
        chunk_ld_keys(p, KA, LDK, C, Kp, rk, nval, 0, K);
        rec_ld_tile(dVA, LDV, C, BV, dU + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        for (int l = 0; l < L; l++)
            rec_ld_tile(dVA + (C + l * C) * LDV, LDV, C, BV, dVX + rk * L * V + l * V + v0, (long long)H * L * V, nval,
                        nv, p.vec);
        rec_ld_tile(dOs, LDV, C, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        if (store) rec_st_tile(io.dhs + ((long long)c * H + h) * K * V + v0, V, K, nv, dHs, LDV, 1.f, false, p.vec);
        rec_load_gates<C>(p, row0, nval, h, G, bt, eG, eL);
        rec_sync();
        const float Gl = G[nval - 1];
        REC_FOR2D(NA, Kp, a, i) KA[a * LDK + i] *= eL[a % C];
        rec_sync();
        rec_mm<false, false, BF>(p, dVA, LDV, KA, LDK, dHs, LDV, NA, BV, Kp, 1.f, true); /* dUa += Kd dhn */
        rec_sync();
        /* Qs and Ws overwrite the keys (read by the product above) while the
         * stores read dVA (scaled only after the next barrier) */
        rec_ld_tile(Qs, LDK, C, Kp, p.q + rk * K, (long long)H * K, nval, K, p.vec);
        if (p.delta) rec_ld_tile(Ws, LDK, C, Kp, io.W + rk * K, (long long)H * K, nval, K, p.vec);
        if (store && p.delta) rec_st_tile(dU + rk * V + v0, (long long)H * V, nval, nv, dVA, LDV, 1.f, false, p.vec);
        else if (store && io.dv)
            rec_st_tile(io.dv + rk * V + v0, (long long)H * V, nval, nv, dVA, LDV, 1.f, false, p.vec);
        for (int l = 0; store && l < L; l++)
            rec_st_tile(dVX + rk * L * V + l * V + v0, (long long)H * L * V, nval, nv, dVA + (C + l * C) * LDV, LDV,
                        1.f, false, p.vec);
        rec_sync();
        REC_FOR2D(C, Kp, t, i) Qs[t * LDK + i] *= p.scale * eG[t];
        if (p.delta) REC_FOR2D(C, BV, t, j) dVA[t * LDV + j] *= bt[t];
        const float eGl = expf(Gl);
        REC_FOR2D(Kp, BV, i, j) dHs[i * LDV + j] *= eGl;
        rec_sync();
        /* two products into dHs of one shape: each warp adds to its own blocks */
        rec_mm<true, false, BF>(p, dHs, LDV, Qs, LDK, dOs, LDV, Kp, BV, C, 1.f, true);
        if (p.delta) rec_mm<true, false, BF>(p, dHs, LDV, Ws, LDK, dVA, LDV, Kp, BV, C, -1.f, true);
    }
    rec_sync();
    if (io.dh_out) rec_st_tile(io.dh_out + hoff, V, K, nv, dHs, LDV, 1.f, io.dh_acc, p.vec);
}

template <int C> static void chunk_dstate_c(cudaStream_t st, const rec_prob &p, int bv, const rec_dstate_io &io)
{
    const size_t sm = pr_rec_smem_dstate(p, bv);
    const auto kernel = rec_bf_products(p) ? chunk_dstate_kernel<C, true> : chunk_dstate_kernel<C, false>;
    pr_cuda_smem_prep((const void *)kernel, sm);
    const dim3 grid((p.V + bv - 1) / bv, p.H, p.N);
    kernel<<<grid, PR_REC_THREADS, sm, st>>>(p, bv, io);
    PR_CUDA_LAUNCH_CHECK();
}

/* ---- dstate, the wgmma form (sm_90a, TF32 products: NOTES.md v31, v45) ----------
 * The pass above with dh in registers, one block per sequence, head and V
 * tile of BV = 2 NW columns (32, 64 or 128: every product is column-wise in
 * V, so narrower tiles only split the work where few heads leave SMs idle):
 * warpgroup wg holds columns NW wg .. NW wg + NW - 1 as wgmma sums, the K
 * rows in MP pieces of 64. Per chunk, in reverse:
 *   P1  dUa = dUa + (eL o K) dh                     A: the keys as copied, B: dh^T from the sums
 *   P2q dh  = e^{G_last} dh + (scale e^G o Q)^T dO  A: Q^T, B: dO^T, both copied transposed
 *   P2w dh -= W^T (beta o dU)                       (delta rules) A: W^T copied, B: from P1's sums
 * P1 and P2q run together. No room is left for staging copies, so the
 * transposed tiles are copied 4 bytes at a time straight into place
 * (rec_cpt) and scaled and rounded there by their copiers. The next
 * chunk's keys, Q and dO are copied and its dU loaded into P1's sums
 * while P2w runs; W^T is copied while
 * P1 and P2q run. (beta o dU)^T takes the warpgroup's own rows of dh^T's
 * room, which only that warpgroup's products read. L = 0 only. */
struct dstate_wg_lay {
    int KD, HK, QT, WT, DOT, gates, total;
};
__host__ __device__ static dstate_wg_lay dstate_wg_layout(const rec_prob &p, int BV)
{
    rec_bump m; /* every tile a multiple of 1024 floats: each starts on a 1024-byte boundary */
    dstate_wg_lay s;
    const int C = p.C, KW = (p.Kp + 63) / 64 * 64;
    s.KD = m.take(64 * KW), s.HK = m.take(BV * KW), s.QT = m.take(KW * C);
    s.WT = p.delta ? m.take(KW * C) : -1;
    s.DOT = m.take(BV * C), s.gates = m.take(8 * C); /* two chunks' G, bt, eG, eL */
    s.total = m.off;
    return s;
}
/* the form's shared memory at V tile bv (-1: no such form) */
static size_t smem_dstate_wg(const rec_prob &p, int bv)
{
    return bv == 32 || bv == 64 || bv == 128 ? (size_t)dstate_wg_layout(p, bv).total * 4 : (size_t)-1;
}

/* two blocks an SM only where their shared memory allows it (no beta, V
 * tiles of 32); elsewhere the 128-register cap would only spill */
template <int C, int NW, int MP, bool DELTA>
__global__ void __launch_bounds__(PR_REC_THREADS, !DELTA && NW == 16 ? 2 : 1) chunk_dstate_wg_kernel(rec_prob p, rec_dstate_io io)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    constexpr int BV = 2 * NW, NR = NW / 2, KW = 64 * MP;
    const dstate_wg_lay s = dstate_wg_layout(p, BV);
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * BV, H = p.H, K = p.K, V = p.V;
    const int nv = min(BV, V - v0), wg = threadIdx.x >> 7;
    const rec_wg_pos q = rec_wg_sums_of(NW); /* where a thread's sums sit (rec_wg_sums_ld) */
    const int r0 = q.r0, c0 = q.c0;
    float *KD = sm + s.KD, *HK = sm + s.HK, *QT = sm + s.QT, *WT = sm + s.WT, *DOT = sm + s.DOT;
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + v0;
    float hz[MP][NR], rz[NR];
    rec_wg_sums_ld(hz, q, io.dht ? io.dht + hoff : nullptr, V, K, nv);
    const auto gates = [&](int ci) { return sm + s.gates + (ci & 1) * 4 * C; }; /* G, bt, eG, eL */
    /* chunk ci's copies, and its dU into P1's sums */
    const auto issue = [&](int ci) {
        const int nval = min(C, sq.len - ci * C);
        const long long rk = (long long)(sq.bos + ci * C) * H + h;
        for (int kb = 0; kb < KW / 32; kb++)
            rec_ld_tile<true>(KD + kb * 64 * 32, 32, 64, 32, p.k + rk * K + kb * 32, (long long)H * K, nval,
                              K - kb * 32, p.vec);
        rec_cpt<C, KW>(QT, KW, p.q + rk * K, (long long)H * K, nval, K);
        rec_cpt<C, BV>(DOT, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv);
#pragma unroll
        for (int e = 0; e < NR; e++) {
            const int a = r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
            const long long o = (rk + (long long)a * H) * V + v0 + j;
            rz[e] = 0.f; /* no select or add on the loaded value: nothing waits for it before P1 */
            if (a < nval && j < nv) rz[e] = io.dU[o];
        }
    };
    const int nck = (sq.len + C - 1) / C;
    if (nck > 0) {
        float *g = gates(nck - 1);
        rec_load_gates<C>(p, sq.bos + (nck - 1) * C, sq.len - (nck - 1) * C, h, g, g + C, g + 2 * C, g + 3 * C);
        issue(nck - 1);
        __syncthreads();
    }
    for (int ci = nck - 1; ci >= 0; ci--) {
        const int c = sq.cbase + ci, row0 = sq.bos + ci * C, nval = min(C, sq.len - ci * C);
        const long long rk = (long long)row0 * H + h;
        const float *bt = gates(ci) + C, *eG = bt + C, *eL = eG + C;
        /* this chunk's copies landed: scaled and rounded by their copiers */
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        for (int kb = 0; kb < KW / 32; kb++) rec_tf32_own(KD + kb * 64 * 32, C, eL);
        rec_cpt_own<C, KW>(QT, KW, eG, p.scale);
        rec_cpt_own<C, BV>(DOT, BV, nullptr, 1.f);
        /* dh^T (this warpgroup's columns) for P1; dh stored as the chunk's */
#pragma unroll
        for (int m = 0; m < MP; m++)
#pragma unroll
            for (int e = 0; e < NR; e++) {
                const int k = 64 * m + r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
                float *sub = HK + (k >> 5) * BV * 32;
                sub[rec_sw128((unsigned)__cvta_generic_to_shared(sub), j, k & 31)] = __uint_as_float(rec_tf32(hz[m][e]));
                if (k < K && j < nv) io.dhs[((long long)c * H + h) * K * V + v0 + (long long)k * V + j] = hz[m][e];
            }
        rec_fence_async();
        __syncthreads();
        if (DELTA) rec_cpt<C, KW>(WT, KW, io.W + rk * K, (long long)H * K, nval, K);
        const float eGl = eG[nval - 1];
#pragma unroll
        for (int m = 0; m < MP; m++)
#pragma unroll
            for (int e = 0; e < NR; e++) hz[m][e] *= eGl;
        rec_wg_fence();
        rec_wg_rows<NW, 2 * MP>(rz, KD, HK + wg * NW * 32, BV * 32); /* P1 */
        rec_wg_cols<NW, MP, C / 32>(hz, QT, DOT + wg * NW * 32, BV * 32); /* P2q */
        rec_wg_commit();
        if (ci > 0) { /* the next chunk's gates while the products run */
            float *g = gates(ci - 1);
            rec_load_gates<C>(p, row0 - C, C, h, g, g + C, g + 2 * C, g + 3 * C);
        }
        rec_wg_wait();
        rec_wg_settle(rz);
#pragma unroll
        for (int m = 0; m < MP; m++) rec_wg_settle(hz[m]);
        /* dU (delta rules) or dv stored; -(beta o dU)^T into this warpgroup's rows of HK */
        float *dst = DELTA ? io.dU : io.dv;
#pragma unroll
        for (int e = 0; e < NR; e++) {
            const int a = r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
            if (a >= C) continue;
            if (dst && a < nval && j < nv) dst[(rk + (long long)a * H) * V + v0 + j] = rz[e];
            if (DELTA) {
                float *sub = HK + (a >> 5) * BV * 32;
                sub[rec_sw128((unsigned)__cvta_generic_to_shared(sub), j, a & 31)] =
                    __uint_as_float(rec_tf32(-bt[a] * rz[e]));
            }
        }
        if (DELTA) {
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            rec_cpt_own<C, KW>(WT, KW, nullptr, 1.f);
        }
        rec_fence_async();
        __syncthreads(); /* every P1 and P2q done: their tiles take the next chunk's copies */
        if (DELTA) {
            rec_wg_fence();
            rec_wg_cols<NW, MP, C / 32>(hz, WT, HK + wg * NW * 32, BV * 32); /* P2w */
            rec_wg_commit();
        }
        if (ci > 0) issue(ci - 1);
        if (DELTA) {
            rec_wg_wait();
#pragma unroll
            for (int m = 0; m < MP; m++) rec_wg_settle(hz[m]);
        }
    }
    if (io.dh_out)
#pragma unroll
        for (int m = 0; m < MP; m++)
#pragma unroll
            for (int e = 0; e < NR; e++) {
                const int k = 64 * m + r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
                float *d = io.dh_out + hoff + (long long)k * V + j;
                if (k < K && j < nv) *d = (io.dh_acc ? *d : 0.f) + hz[m][e];
            }
}
template <int C, int NW> static void chunk_dstate_wg_nw(cudaStream_t st, const rec_prob &p, const rec_dstate_io &io)
{
    const bool mp1 = p.Kp <= 64;
    const auto kernel = p.delta ? (mp1 ? chunk_dstate_wg_kernel<C, NW, 1, true> : chunk_dstate_wg_kernel<C, NW, 2, true>)
                                : (mp1 ? chunk_dstate_wg_kernel<C, NW, 1, false> : chunk_dstate_wg_kernel<C, NW, 2, false>);
    const size_t sm = smem_dstate_wg(p, 2 * NW);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3((p.V + 2 * NW - 1) / (2 * NW), p.H, p.N), PR_REC_THREADS, sm, st>>>(p, io);
    PR_CUDA_LAUNCH_CHECK();
}
template <int C> static void chunk_dstate_wg(cudaStream_t st, const rec_prob &p, int bv, const rec_dstate_io &io)
{
    PR_ASSERT(io.dhs && p.Kp <= 128 && p.L == 0);
    if (bv == 32) chunk_dstate_wg_nw<C, 16>(st, p, io);
    else if (bv == 64) chunk_dstate_wg_nw<C, 32>(st, p, io);
    else chunk_dstate_wg_nw<C, 64>(st, p, io);
}
void pr_rec_chunk_dstate(cudaStream_t st, const rec_prob &p, int bv, const rec_dstate_io &io, bool wg)
{
    if (wg) {
        PR_ASSERT(bv == 32 || bv == 64 || bv == 128);
        if (p.C == 64) chunk_dstate_wg<64>(st, p, bv, io);
        else chunk_dstate_wg<32>(st, p, bv, io);
        return;
    }
    if (p.C == 64) chunk_dstate_c<64>(st, p, bv, io);
    else chunk_dstate_c<32>(st, p, bv, io);
}

/* The dstate pass over segments: every segment with a zero terminal
 * gradient (the carry only: D_j, what its own outputs send to its start),
 * the reverse chain (each segment's terminal gradient, and dh0), then the
 * pass that stores dhs, dU, dVX and dv. */
static void chunk_dstate_segmented(cudaStream_t st, const rec_prob &p, int bv, const rec_segs &sg,
                                   const rec_dstate_io &io)
{
    const rec_prob ps = pr_rec_seg_prob(p, sg);
    const size_t n_e = (size_t)sg.n * p.H * p.K * p.V;
    float *D = rec_scratch(n_e), *dends = rec_scratch(n_e);
    rec_dstate_io carry = io;
    carry.dhs = nullptr, carry.dht = nullptr, carry.dh_out = D, carry.dh_acc = 0;
    /* prism_core's extra keys only feed dVX, which the carry does not store:
     * the carry's chunks hold the C base keys only (L = 0) */
    rec_prob pc = ps;
    pc.L = 0;
    pr_rec_chunk_dstate(st, pc, bv, carry);
    pr_rec_seg_chain(st, p, sg, true, io.dht, D, dends, io.dh_out, io.dh_acc);
    rec_dstate_io real = io;
    real.dht = dends, real.dh_out = nullptr;
    pr_rec_chunk_dstate(st, ps, bv, real);
    rec_scratch_free(D, n_e);
    rec_scratch_free(dends, n_e);
}

/* ---- grad: dq, dKa, dW, dbeta (part), dG (part) per (K tile, chunk) -------------------
 * The V loop's four products, Xq = dO H^T, P = dO Ua^T, Xk = Ua dHn^T and
 * Xw = dU H^T, are all rows-times-rows of the V tiles, summed in registers
 * across the whole V loop and stored once at its end. Two forms:
 * - mma.sync (fp32 and the fallback): their 16 x 32 warp blocks, numbered
 *   Xq's, P's, Xk's, Xw's, go to the warps round-robin, R a warp a pass
 *   (NOTES.md v27; until v26 every V tile read and wrote them in shared
 *   memory);
 * - wgmma (WG, TF32 and bf16 data on sm_90a, NOTES.md v29): their 64 x 32
 *   pieces (grad_pieces) go to the two warpgroups in turn, R a warpgroup a
 *   pass, multiplied straight from 128-byte-swizzled V tiles of 32 columns
 *   that each thread rounds to TF32 where its own copies landed.
 * The V tiles are double-buffered, the next one's copy in flight while the
 * current one multiplies: one barrier a tile. Where the blocks need more
 * than one pass the V loop runs again for the next ones. The tail's
 * queries, keys and per-token vectors and, with a single pass, the sums
 * themselves reuse the tiles' space. */
struct grad_lay {
    int db, pt, Xq, Xk, Xw, P, buf, bufsz, oVA, odU, oHs, odH, rows, Qs, KA, G, bt, eG, eL, dG, tq, tk, red, total;
};
/* the products' warp blocks: rows of 16 (mb), columns of 32 (nb), and the
 * rows of A and B in a tile buffer (row-major along V) */
struct grad_prods {
    int mb[4], nb[4], ra[4], rb[4], n;
};
__host__ __device__ static grad_prods grad_products(const rec_prob &p, int BK)
{
    const int C = p.C, NA = C * (1 + p.L), oVA = C, odU = C + NA, oHs = odU + (p.delta ? C : 0), odH = oHs + BK;
    grad_prods g = {{C / 16, C / 16, NA / 16, p.delta ? C / 16 : 0},
                    {BK / 32, NA / 32, BK / 32, BK / 32},
                    {0, 0, oVA, odU},
                    {oHs, oVA, odH, oHs},
                    0};
    for (int i = 0; i < 4; i++) g.n += g.mb[i] * g.nb[i];
    return g;
}
/* wgmma's pieces: 64 x 32 of a product, the 64 rows (a, in the tile buffer)
 * from the side whose size divides by 64, its rows or its columns (tr: the
 * piece is then the product's transpose), else from the side that makes
 * fewer pieces, padded past its end (rows the buffer holds but the piece's
 * sums drop). om, on: the piece's first row on the 64-row side (of mm) and
 * on the 32-row side (b). Returns the count; *pc gets piece idx, *reach the
 * buffer rows the pieces read. */
struct grad_piece {
    int a, b, prod, tr, om, on, mm;
};
__host__ __device__ static int grad_pieces(const rec_prob &p, int BK, int idx, grad_piece *pc, int *reach)
{
    const grad_prods g = grad_products(p, BK);
    int n = 0;
#ifdef __CUDA_ARCH__ /* the host compiler knows no such pragma */
#pragma unroll
#endif
    for (int i = 0; i < 4; i++) {
        const int ma = 16 * g.mb[i], nb = 32 * g.nb[i];
        if (!ma) continue;
        const int un = (ma + 63) / 64 * (nb / 32), ut = (nb + 63) / 64 * (ma / 32);
        const int tr = ma % 64 && (nb % 64 == 0 || ut < un);
        const int mm = tr ? nb : ma, per = (tr ? ma : nb) / 32, cnt = tr ? ut : un;
        const int a0 = tr ? g.rb[i] : g.ra[i], b0 = tr ? g.ra[i] : g.rb[i], end = a0 + (mm + 63) / 64 * 64;
        if (reach && end > *reach) *reach = end;
        if (pc && idx >= n && idx < n + cnt) {
            const int k = idx - n;
            *pc = {a0 + 64 * (k / per), b0 + 32 * (k % per), i, tr, 64 * (k / per), 32 * (k % per), mm};
        }
        n += cnt;
    }
    return n;
}
/* the warp blocks a warp holds a pass, by default: 3 or 4 while the blocks
 * fit in 24 or 32 (two 128-register blocks an SM; 3 leaves registers the
 * 4 would spill), else 8; wgmma's pieces a warpgroup: 2, 3 or 4 (a pass
 * holds at most 8: 64 sums a thread) */
static int grad_blocks_per_warp(const rec_prob &p, int BK, bool wg)
{
    if (wg) {
        const int n = grad_pieces(p, BK, 0, nullptr, nullptr);
        return n <= 4 ? 2 : n <= 6 ? 3 : 4;
    }
    const int n = grad_products(p, BK).n;
    return n <= 3 * PR_REC_WARPS ? 3 : n <= 4 * PR_REC_WARPS ? 4 : 8;
}
__host__ __device__ static int grad_passes(const rec_prob &p, int BK, int R, bool wg)
{
    const int per = wg ? 2 * R : R * PR_REC_WARPS;
    return ((wg ? grad_pieces(p, BK, 0, nullptr, nullptr) : grad_products(p, BK).n) + per - 1) / per;
}
__host__ __device__ static grad_lay grad_layout(const rec_prob &p, int BK, int BV, int R, bool wg)
{
    rec_bump m;
    grad_lay s;
    const int C = p.C, NA = C * (1 + p.L), LDB = BK + 4, LDV = wg ? 32 : BV + 4, LDA = NA + 4;
    const int passes = grad_passes(p, BK, R, wg);
    s.rows = C + NA + (p.delta ? C : 0) + 2 * BK;
    s.oVA = C, s.odU = C + NA, s.oHs = s.odU + (p.delta ? C : 0), s.odH = s.oHs + BK;
    int rows = s.rows;
    if (wg) grad_pieces(p, BK, 0, nullptr, &rows);
    s.db = m.take(C);
    s.pt = wg ? m.take(2 * grad_pieces(p, BK, 0, nullptr, nullptr)) : -1;
    s.Xq = m.take(C * LDB), s.Xk = m.take(NA * LDB), s.Xw = p.delta ? m.take(C * LDB) : -1, s.P = m.take(C * LDA);
    const int sums = m.off;
    s.Qs = m.take(C * LDB), s.KA = m.take(NA * LDB);
    s.G = m.take(C), s.bt = m.take(C), s.eG = m.take(C), s.eL = m.take(C), s.dG = m.take(C);
    s.tq = m.take(NA), s.tk = m.take(NA), s.red = m.take(32);
    const int tail = m.off;
    /* one pass: the sums are stored after the last tile's reads, over the
     * buffers; more: the buffers refill while the sums sit in their arrays.
     * wgmma's tiles start at 1024-byte boundaries (the shared array does). */
    m.off = passes == 1 ? s.Xq : sums;
    if (wg) m.off = (m.off + 255) & ~255;
    s.buf = m.take(rows * LDV);
    s.bufsz = m.take(rows * LDV) - s.buf;
    s.total = m.off > tail ? m.off : tail;
    return s;
}
/* r: blocks a warp (pieces a warpgroup with wg), 0 for the default */
size_t pr_rec_smem_grad(const rec_prob &p, int bk, int bv, int r, bool wg)
{
    return (size_t)grad_layout(p, bk, bv, r ? r : grad_blocks_per_warp(p, bk, wg), wg).total * 4;
}

/* the warp sum of x, every lane gets it */
__device__ __forceinline__ float grad_warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(PR_FULL_MASK, x, o);
    return x;
}

/* the warp block blk: its product (0 Xq, 1 P, 2 Xk, 3 Xw) and place */
__device__ __forceinline__ void grad_block_at(const grad_prods &g, int blk, int &prod, int &m0, int &n0)
{
    prod = 0;
#pragma unroll
    for (int i = 0; i < 3; i++)
        if (prod == i && blk >= g.mb[i] * g.nb[i]) blk -= g.mb[i] * g.nb[i], prod = i + 1;
    const int nb = prod == 0 ? g.nb[0] : prod == 1 ? g.nb[1] : prod == 2 ? g.nb[2] : g.nb[3];
    m0 = (blk / nb) * 16, n0 = (blk % nb) * 32;
}

/* the V tile at v0 of dO, Ua (R for the delta rules), dU, H and dHn into one
 * buffer (SW: wgmma's swizzled rows of 32) */
template <bool SW>
__device__ __forceinline__ void grad_ld_vtile(const rec_prob &p, const grad_lay &s, float *buf, int BK, int BV,
                                              const float *hs, const float *dhs, const float *R, const float *dU,
                                              long long rk, long long hoff, int nval, int nk, int v0)
{
    const int C = p.C, H = p.H, V = p.V, LDV = SW ? 32 : BV + 4, nv = min(BV, V - v0);
    rec_ld_tile<SW>(buf, LDV, C, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv, p.vec);
    chunk_ld_values<SW>(p, buf + s.oVA * LDV, LDV, C, BV, p.delta ? R : p.v, rk, nval, v0, nv);
    if (p.delta) rec_ld_tile<SW>(buf + s.odU * LDV, LDV, C, BV, dU + rk * V + v0, (long long)H * V, nval, nv, p.vec);
    rec_ld_tile<SW>(buf + s.oHs * LDV, LDV, BK, BV, hs + hoff + v0, V, nk, nv, p.vec);
    rec_ld_tile<SW>(buf + s.odH * LDV, LDV, BK, BV, dhs + hoff + v0, V, nk, nv, p.vec);
}

/* what both forms of the V loop take */
struct grad_src {
    const float *hs, *dhs, *R, *dU;
    long long rk, hoff;
    int nval, nk, BK, BV;
};

/* the mma.sync form; returns this thread's part of sum(H o dHn) */
template <int C, bool BF, int R>
__device__ __forceinline__ float grad_sums_mma(const rec_prob &p, const grad_lay &s, float *sm, const grad_src &g,
                                               bool do_db)
{
    const grad_prods gp = grad_products(p, g.BK);
    const int V = p.V, BK = g.BK, BV = g.BV, LDB = BK + 4, LDV = BV + 4, LDA = C * (1 + p.L) + 4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Xq = sm + s.Xq, *Xk = sm + s.Xk, *Xw = sm + s.Xw, *P = sm + s.P;
    /* dbeta += dU . R, rows warp + 8 j, summed per tile in rec_row_dots'
     * order into db (each row's own warp: no barrier; not in registers, which
     * the sums need) */
    constexpr int DBR = C / PR_REC_WARPS;
    float *db = sm + s.db;
    float hd = 0.f;
    for (int b0 = 0; b0 < gp.n; b0 += R * PR_REC_WARPS) {
        float d[R][1][4][4];
        int rab[R]; /* A's first row | B's << 16 */
#pragma unroll
        for (int r = 0; r < R; r++) {
            int prod, m0, n0;
            grad_block_at(gp, b0 + warp + PR_REC_WARPS * r, prod, m0, n0);
            const int ra = (prod == 0 ? gp.ra[0] : prod == 1 ? gp.ra[1] : prod == 2 ? gp.ra[2] : gp.ra[3]) + m0;
            const int rb = (prod == 0 ? gp.rb[0] : prod == 1 ? gp.rb[1] : prod == 2 ? gp.rb[2] : gp.rb[3]) + n0;
            rab[r] = ra | rb << 16;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) d[r][0][j][e] = 0.f;
        }
        grad_ld_vtile<false>(p, s, sm + s.buf, BK, BV, g.hs, g.dhs, g.R, g.dU, g.rk, g.hoff, g.nval, g.nk, 0);
        for (int v0 = 0, vi = 0; v0 < V; v0 += BV, vi++) {
            /* tile vi has landed and every warp is done with tile vi - 1,
             * whose buffer the next copy fills while this tile multiplies */
            rec_sync();
            const float *cur = sm + s.buf + (vi & 1) * s.bufsz;
            if (v0 + BV < V)
                grad_ld_vtile<false>(p, s, sm + s.buf + ((vi + 1) & 1) * s.bufsz, BK, BV, g.hs, g.dhs, g.R, g.dU,
                                     g.rk, g.hoff, g.nval, g.nk, v0 + BV);
            /* the delta rules' beta (Ua = beta o R, dR0 = beta o dU) scales rows
             * of the sums, so it is applied once after the loop */
            if (b0 == 0) {
                const float *Hs = cur + s.oHs * LDV, *dHn = cur + s.odH * LDV;
                REC_FOR2D(BK, BV, i, j) hd = fmaf(Hs[i * LDV + j], dHn[i * LDV + j], hd);
                if (do_db) {
                    const float *dUs = cur + s.odU * LDV, *VA = cur + s.oVA * LDV;
#pragma unroll
                    for (int j = 0; j < DBR; j++) {
                        const int r = warp + PR_REC_WARPS * j;
                        float x = 0.f;
                        for (int cc = lane; cc < BV; cc += 32) x = fmaf(dUs[r * LDV + cc], VA[r * LDV + cc], x);
                        x = grad_warp_sum(x);
                        if (lane == 0) db[r] = (v0 ? db[r] : 0.f) + x;
                    }
                }
            }
            const int nr = min(R, (gp.n - b0 - warp + PR_REC_WARPS - 1) / PR_REC_WARPS);
            if (BF || p.tf32) rec_mm_tc_blocks_nt<R, BF>(d, cur, LDV, rab, nr, BV);
            else
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (r < nr) rec_mm_f32_acc_nt<4>(d[r], cur, LDV, cur, LDV, rab[r] & 0xffff, rab[r] >> 16, BV);
        }
        /* every read of the buffers is done before the sums (over them with
         * one pass) are stored */
        __syncthreads();
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int blk = b0 + warp + PR_REC_WARPS * r;
            if (blk >= gp.n) break;
            int prod, m0, n0;
            grad_block_at(gp, blk, prod, m0, n0);
            float *out = prod == 0 ? Xq : prod == 1 ? P : prod == 2 ? Xk : Xw;
            rec_frags_store<1, 4>(out, prod == 1 ? LDA : LDB, m0, n0, lane >> 2, lane & 3, d[r], 1.f, false);
        }
    }
    return hd;
}
/* the wgmma form's work on this thread's own copies of V tile cur (rows r0 +
 * 32 i, column c0, where rec_ld_tile put them): on the first pass the f32
 * sums hd (H . dHn) and db (dU . R, the delta rules' kt = 0 blocks, a row's
 * eight threads summed by shuffles), then every copy rounded to TF32 in
 * place (wgmma would truncate it) */
template <int C>
__device__ __forceinline__ void grad_wg_prepare(const rec_prob &p, const grad_lay &s, float *cur, int BK, bool first,
                                                bool do_db, bool acc_db, float *db, float &hd)
{
    const rec_rowmap m = rec_rowmap_of(32);
    const unsigned base = (unsigned)__cvta_generic_to_shared(cur);
    const auto at = [&](int row) { return reinterpret_cast<float4 *>(cur + rec_sw128(base, row, m.c0)); };
    const auto rnd = [](float4 x) {
        return make_float4(__uint_as_float(rec_tf32(x.x)), __uint_as_float(rec_tf32(x.y)),
                           __uint_as_float(rec_tf32(x.z)), __uint_as_float(rec_tf32(x.w)));
    };
    const auto dot = [](float4 x, float4 y, float a) {
        return fmaf(x.w, y.w, fmaf(x.z, y.z, fmaf(x.y, y.y, fmaf(x.x, y.x, a))));
    };
    for (int r = m.r0; r < BK; r += m.rstep) {
        float4 *a = at(s.oHs + r), *b = at(s.odH + r);
        const float4 x = *a, y = *b;
        if (first) hd = dot(x, y, hd);
        *a = rnd(x), *b = rnd(y);
    }
#pragma unroll
    for (int i = 0; i < C / 32; i++) {
        const int r = m.r0 + 32 * i;
        float4 *o = at(r), *u = at(s.oVA + r);
        const float4 y = *u;
        *o = rnd(*o), *u = rnd(y);
        if (!p.delta) continue;
        float4 *w = at(s.odU + r);
        const float4 x = *w;
        *w = rnd(x);
        if (first && do_db) {
            float t = dot(x, y, 0.f);
            t += __shfl_xor_sync(PR_FULL_MASK, t, 1);
            t += __shfl_xor_sync(PR_FULL_MASK, t, 2);
            t += __shfl_xor_sync(PR_FULL_MASK, t, 4);
            if (m.c0 == 0) db[r] = (acc_db ? db[r] : 0.f) + t;
        }
    }
    for (int r = C + m.r0; r < C * (1 + p.L); r += m.rstep) *at(s.oVA + r) = rnd(*at(s.oVA + r));
}

/* the wgmma form (R pieces a warpgroup a pass); returns this thread's part
 * of sum(H o dHn) */
template <int C, int R>
__device__ __forceinline__ float grad_sums_wg(const rec_prob &p, const grad_lay &s, float *sm, const grad_src &g,
                                              bool do_db)
{
    const int V = p.V, BK = g.BK, LDB = BK + 4, LDA = C * (1 + p.L) + 4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wg = warp >> 2;
    const int np = grad_pieces(p, BK, 0, nullptr, nullptr);
    float *Xq = sm + s.Xq, *Xk = sm + s.Xk, *Xw = sm + s.Xw, *P = sm + s.P;
    float hd = 0.f;
    if ((unsigned)__cvta_generic_to_shared(sm + s.buf) & 1023) __trap(); /* the swizzle needs it */
    /* the pieces, a thread each, packed into a table (one copy of
     * grad_pieces' code: the kernel is near the instruction cache's size):
     * a | b << 16, then prod | tr << 2 | om / 32 << 3 | on / 32 << 12 | mm / 32 << 21 */
    int *pt = reinterpret_cast<int *>(sm + s.pt);
    for (int i = threadIdx.x; i < np; i += PR_REC_THREADS) {
        grad_piece pc;
        grad_pieces(p, BK, i, &pc, nullptr);
        pt[2 * i] = pc.a | pc.b << 16;
        pt[2 * i + 1] = pc.prod | pc.tr << 2 | pc.om / 32 << 3 | pc.on / 32 << 12 | pc.mm / 32 << 21;
    }
    __syncthreads();
    /* rows that padded pieces read past the data: zero, read, dropped */
    for (int i = s.rows * 32 + threadIdx.x; i < s.bufsz; i += PR_REC_THREADS)
        sm[s.buf + i] = sm[s.buf + s.bufsz + i] = 0.f;
    for (int b0 = 0; b0 < np; b0 += 2 * R) {
        /* a warpgroup multiplies all R of its pieces, those past the last
         * on rows 0 (a condition would make ptxas serialize the wgmma) */
        float d[R][16];
        int ab[R]; /* the piece's 64 rows' first | its 32 rows' << 16 */
        const int nj = min(R, (np - b0 - wg + 1) / 2);
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int i = b0 + wg + 2 * j;
            ab[j] = i < np ? pt[2 * i] : 0;
#pragma unroll
            for (int e = 0; e < 16; e++) d[j][e] = 0.f;
        }
        grad_ld_vtile<true>(p, s, sm + s.buf, BK, 32, g.hs, g.dhs, g.R, g.dU, g.rk, g.hoff, g.nval, g.nk, 0);
        for (int v0 = 0, vi = 0; v0 < V; v0 += 32, vi++) {
            float *cur = sm + s.buf + (vi & 1) * s.bufsz;
            /* this thread's copies of tile vi landed: its sums, its rounding,
             * then the barrier after which wgmma reads the whole tile and
             * tile vi - 1's buffer (every warpgroup waited for its products)
             * takes the next copy */
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            grad_wg_prepare<C>(p, s, cur, BK, b0 == 0, do_db, v0 > 0, sm + s.db, hd);
            rec_fence_async();
            __syncthreads();
            if (v0 + 32 < V)
                grad_ld_vtile<true>(p, s, sm + s.buf + ((vi + 1) & 1) * s.bufsz, BK, 32, g.hs, g.dhs, g.R, g.dU,
                                    g.rk, g.hoff, g.nval, g.nk, v0 + 32);
            rec_wg_fence();
#pragma unroll
            for (int j = 0; j < R; j++) {
                const unsigned long long da = rec_wg_desc(cur + (ab[j] & 0xffff) * 32);
                const unsigned long long db = rec_wg_desc(cur + (ab[j] >> 16) * 32);
#pragma unroll
                for (int k = 0; k < 4; k++) rec_wg_mma_n32(d[j], da + 2 * k, db + 2 * k);
            }
            rec_wg_commit();
            rec_wg_wait();
#pragma unroll
            for (int j = 0; j < R; j++) rec_wg_settle(d[j]);
        }
        /* every read of the buffers is done before the sums (over them with
         * one pass) are stored */
        __syncthreads();
        const int w4 = warp & 3, gq = lane >> 2, tq = lane & 3;
#pragma unroll
        for (int j = 0; j < R; j++) {
            if (j >= nj) break;
            /* sum (i, n) of the piece goes to out[i si + n sn]: (ld, 1), or (1, ld) transposed */
            const int w = pt[2 * (b0 + wg + 2 * j) + 1], prod = w & 3, tr = w >> 2 & 1;
            const int om = (w >> 3 & 511) * 32, on = (w >> 12 & 511) * 32, mm = (w >> 21) * 32;
            const int ld = prod == 1 ? LDA : LDB, si = tr ? 1 : ld, sn = tr ? ld : 1;
            float *out = (prod == 0 ? Xq : prod == 1 ? P : prod == 2 ? Xk : Xw) + on * sn;
#pragma unroll
            for (int jj = 0; jj < 4; jj++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int i = om + 16 * w4 + gq + 8 * hh, n = 8 * jj + 2 * tq;
                    if (i >= mm) continue;
                    out[i * si + n * sn] = d[j][4 * jj + 2 * hh];
                    out[i * si + (n + 1) * sn] = d[j][4 * jj + 2 * hh + 1];
                }
        }
    }
    return hd;
}

/* grad's stores of its sums: one copy of rec_st_tile's code for the four
 * (the kernel is near the instruction cache's size) */
__device__ __noinline__ void grad_st_tile(float *dst, long long rs, int nr, int nc, const float *src, int ld,
                                          float alpha, bool acc, bool vec)
{
    rec_st_tile(dst, rs, nr, nc, src, ld, alpha, acc, vec);
}

template <int C, bool BF, int R, bool WG>
__global__ void __launch_bounds__(PR_REC_THREADS, R <= 4 ? 2 : 1)
    chunk_grad_kernel(rec_prob p, int BK, int BV, const float *hs, const float *dhs, const float *R_, const float *dU,
                      float *dq, float *dk, float *dkxa, float *dW, float *dGp, float *dbA, long long rowsH)
{
    extern __shared__ __align__(128) float sm[];
    const grad_lay s = grad_layout(p, BK, BV, R, WG);
    const int kt = blockIdx.x, c = blockIdx.y, h = blockIdx.z, H = p.H, K = p.K, L = p.L;
    const int NA = C * (1 + L), LDB = BK + 4, LDA = NA + 4, k0 = kt * BK, nk = min(BK, K - k0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h, hoff = ((long long)c * H + h) * K * p.V + (long long)k0 * p.V;
    float *Xq = sm + s.Xq, *Xk = sm + s.Xk, *Xw = sm + s.Xw, *P = sm + s.P;
    const bool do_db = p.delta && kt == 0;
    const grad_src src = {hs, dhs, R_, dU, rk, hoff, cp.nval, nk, BK, BV};
    float hd;
    if constexpr (WG) hd = grad_sums_wg<C, R>(p, s, sm, src, do_db);
    else hd = grad_sums_mma<C, BF, R>(p, s, sm, src, do_db);
    constexpr int DBR = C / PR_REC_WARPS;
    if (do_db && lane == 0)
#pragma unroll
        for (int j = 0; j < DBR; j++) {
            const int r = warp + PR_REC_WARPS * j;
            if (r < cp.nval) dbA[rk + (long long)r * H] = sm[s.db + r];
        }
    hd = rec_block_sum(hd, sm + s.red);
    float *Qs = sm + s.Qs, *KA = sm + s.KA, *G = sm + s.G, *bt = sm + s.bt, *eG = sm + s.eG, *eL = sm + s.eL;
    float *dG = sm + s.dG, *tq = sm + s.tq, *tk = sm + s.tk;
    rec_ld_tile(Qs, LDB, C, BK, p.q + rk * K + k0, (long long)H * K, cp.nval, nk, p.vec);
    chunk_ld_keys(p, KA, LDB, C, BK, rk, cp.nval, k0, nk);
    rec_load_gates<C>(p, cp.row0, cp.nval, h, G, bt, eG, eL);
    rec_sync();
    const int last = cp.nval - 1;
    const float Gl = G[last];
    /* the deferred beta: P's U columns, Xk's U rows and Xw's rows */
    REC_FOR2D(C, C, t, i) {
        const float d = i <= t ? p.scale * expf(G[t] - G[i]) : 0.f;
        P[t * LDA + i] *= p.delta ? d * bt[i] : d;
        for (int l = 1; l <= L; l++) P[t * LDA + l * C + i] *= d;
    }
    REC_FOR2D(C, BK, t, i) Xq[t * LDB + i] *= p.scale * eG[t];
    if (p.delta) REC_FOR2D(C, BK, t, i) Xw[t * LDB + i] *= bt[t];
    /* Xk's rows scaled, and tq = ka . (that: the Kd part of dKa), a warp per
     * row, each lane on the elements it scaled */
    for (int a = warp; a < NA; a += PR_REC_WARPS) {
        const float f = a < C && p.delta ? eL[a] * bt[a] : eL[a % C];
        float x = 0.f;
        for (int i = lane; i < BK; i += 32) {
            const float y = Xk[a * LDB + i] * f;
            Xk[a * LDB + i] = y;
            x = fmaf(KA[a * LDB + i], y, x);
        }
        if (p.has_g) {
            x = grad_warp_sum(x);
            if (lane == 0) tq[a] = x;
        }
    }
    rec_sync();
    if constexpr (WG) { /* TF32 on: no fp32 fallback in the code (the kernel is near the instruction cache's size) */
        rec_mm_tc<false, false, BF, false>(Xq, LDB, P, LDA, KA, LDB, C, BK, NA, 1.f, true);
        rec_mm_tc<true, false, BF, false>(Xk, LDB, P, LDA, Qs, LDB, NA, BK, C, 1.f, true);
    } else {
        rec_mm<false, false, BF, false>(p, Xq, LDB, P, LDA, KA, LDB, C, BK, NA, 1.f, true);
        rec_mm<true, false, BF, false>(p, Xk, LDB, P, LDA, Qs, LDB, NA, BK, C, 1.f, true);
    }
    rec_sync();
    if (p.has_g) {
        rec_row_dots(dG, Qs, LDB, Xq, LDB, C, BK, 1.f, false);
        rec_row_dots(tk, KA, LDB, Xk, LDB, NA, BK, 1.f, false);
        rec_sync();
        if (threadIdx.x < C) {
            const int t = threadIdx.x;
            float v = dG[t];
            for (int l = 0; l <= L; l++) v -= tk[l * C + t];
            if (t == last) {
                float sa = 0.f;
                for (int a = 0; a < NA; a++) sa += tq[a];
                v += sa + expf(Gl) * hd;
            }
            if (t < cp.nval) dGp[kt * rowsH + rk + (long long)t * H] = v;
        }
    }
    if (dq) grad_st_tile(dq + rk * K + k0, (long long)H * K, cp.nval, nk, Xq, LDB, 1.f, true, p.vec);
    if (dk) grad_st_tile(dk + rk * K + k0, (long long)H * K, cp.nval, nk, Xk, LDB, 1.f, true, p.vec);
    for (int l = 0; l < L; l++)
        grad_st_tile(dkxa + rk * L * K + l * K + k0, (long long)H * L * K, cp.nval, nk, Xk + (C + l * C) * LDB, LDB,
                     1.f, false, p.vec);
    if (p.delta) grad_st_tile(dW + rk * K + k0, (long long)H * K, cp.nval, nk, Xw, LDB, -1.f, false, p.vec);
}

/* ---- wy: the WY form's backward (delta rules), and the final sums ------------------------ */
/* K runs in tiles of BK columns (the plan's bk_wy) wherever a product's
 * output or inner dimension is K: Mx = K KX^T and dM -= dY2 W^T sum over the
 * tiles, and the dK, dKX phases run tile by tile. So only C x BK pieces of K,
 * W, dW and KX are ever in shared memory, and at C = 64, K = 128 two blocks
 * share an SM (NOTES.md v25: one alone left its barriers unhidden). The last
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

struct wy_scratch {
    const float *dU, *dVX, *dkxa, *dW, *dGp, *dbA;
    int nkt;
    long long rowsH;
};

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
        if (d.dk) rec_st_tile(d.dk + rk * K + k0, HK, cp.nval, nk, sD, LDB, 1.f, true, p.vec);
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

/* ---- wy's wgmma form (sm_90a; NOTES.md v36) --------------------------------------
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

template <int C>
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

    rec_cpt<64, 64>(S, 64, Tinv + ((long long)c * H + h) * C * C, C, C, C);
    rec_gates_issue<C>(p, cp.row0, nval, h, G, bt);
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
        } else {
            wyw_prefetch<4>(p.k + rk * K, HK, nval, K);
            if (d.dk) wyw_prefetch<4>(d.dk + rk * K, HK, nval, K);
        }
        rec_wg_wait();
        rec_wg_settle(dm);
        if (!vt) {
#pragma unroll
            for (int e = 0; e < 16; e++) Y[((st - nvt) * 16 + e) * PR_REC_THREADS] = y[e];
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
            if (p.vec) {
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
    rec_cpt<64, 64>(S + 2 * 4096, 64, p.k + rk * K, HK, nval, K);
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
    rec_cpt_own<64, 64>(S + 2 * 4096, 64, nullptr, 1.f);
    rec_fence_async();
    __syncthreads();
    /* per K tile (K^T in S2, the next in S3): A6 = (dM o D)^T K and A7 = dKK K, then the row steps */
    float sg[2] = {0.f, 0.f}, sb[2] = {0.f, 0.f};
#pragma unroll 1
    for (int kt = 0; kt < nkt; kt++) {
        const float *KT = S + (2 + (kt & 1)) * 4096;
        if (kt + 1 < nkt) rec_cpt<64, 64>(S + (2 + ((kt + 1) & 1)) * 4096, 64, p.k + rk * K + (kt + 1) * 64, HK, nval,
                                          K - (kt + 1) * 64);
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
            if (p.vec) *reinterpret_cast<float2 *>(q) = s;
            else {
                q[0] = s.x;
                if (k + 1 < K) q[1] = s.y;
            }
        }
        if (kt + 1 < nkt) {
            ld_kd(kt + 1);
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            rec_cpt_own<64, 64>(S + (2 + ((kt + 1) & 1)) * 4096, 64, nullptr, 1.f);
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

/* ---- the plan and the launcher -------------------------------------------------------- */

/* blocks of a kernel an SM holds: by shared memory, and at most 2 (their
 * 256 threads use up to 128 registers each) */
static int plan_per_sm(size_t bytes, int smem_sm)
{
    const int n = (int)((size_t)smem_sm / (bytes + 1024));
    return n < 1 ? 1 : n > 2 ? 2 : n;
}

/* chunks of a sequence (packed: of their mean length) */
static long long seq_chunks(const rec_prob &p)
{
    const long long len = p.packed ? p.T / (p.N > 0 ? p.N : 1) : p.T;
    return (len + p.C - 1) / p.C;
}
/* A serial pass's chunk step, in steps of mma.sync's form at a V tile of 32:
 * half of such a step is latency, half its 32 columns' products, so each 32
 * columns more add a half; the wgmma forms' steps take 0.6 of that. Fitted
 * (H200, NOTES.md v46) to 11 shapes, f+b, where segments and the wgmma
 * passes were both measured: B=2 T=8192 H=16 K=V=128 linattn (segments 4
 * at tiles 96 and 64) 1.21x faster whole in wgmma, gdn at B=1 T=4096..16384
 * H=16 1.07-1.12x; linattn at B=1 T=8192 H=16 (segments 8) 0.86x, B=1
 * T=2048 H=2 K=V=32 (segments 8, tiles of 32) 0.65x, fewer heads over
 * longer sequences 0.3-0.6x. A flat weight got the last two wrong. */
static double serial_step_weight(int bv, bool wgmma)
{
    return (1.0 + 0.5 * (bv / 32 - 1)) * (wgmma ? 0.6 : 1.0);
}
/* Segments per sequence for the serial passes (rec_segs), by their cost in
 * chunk steps: a pass of B blocks over sequences of n chunks takes
 * waves(B) x n steps; unsegmented, fwd + bwd is two passes (state, dstate).
 * With P segments each pass has P times the blocks and n/P steps: the
 * forward's pass from zero (E), for the delta rules the one from the
 * identity (A, K columns), then either a last pass from the chained starts
 * or the fix-up; the backward's carry (D) and dstate passes; plus the two
 * chains (~P steps). The fix-up runs every chunk at once; a block of it
 * does about what one chunk step does (the same loads, two products and
 * barriers) but three share an SM, so it costs a step per wave of three
 * blocks an SM. It needs the per-chunk transitions of the delta rules, so
 * it runs only where that scratch (K x K a chunk and head) is at most twice
 * the hs the forward keeps anyway: K <= 2V. The cheaper of fix-up and last
 * pass (ties: the fix-up, whose blocks wait on no serial chain) and the
 * cheapest P (ties: fewer) win, with segments of >= 4 chunks and none for
 * a sequence of < 8 chunks. So segments pay only where the unsegmented
 * passes leave SMs idle: at B=1 T=16384 H=8 K=V=96 (24 blocks, 264 slots)
 * P = 16, while B=8 T=2048 H=16 K=V=128 (128 blocks, 132 slots) stays at 1.
 * PRISM_REC_SEGMENTS=P forces P (1: off; at most one segment per chunk),
 * for tests at small sizes and for comparisons; the fix-up is then chosen
 * the same way, and PRISM_REC_SEG_FIX=0/1 forces it off / on (where it can
 * run). Packed sequences: P from their mean length, each split into at most
 * P. A grid's z (sequences x segments) stays <= 65535. Returns the chosen
 * plan's cost with its steps weighed by their tiles (serial_step_weight),
 * -1 where P is 1 or PRISM_REC_SEGMENTS forced it. */
static double plan_segments(const rec_prob &p, int smem_sm, int n_sm, rec_chunk_plan *pl)
{
    const long long ncs = seq_chunks(p), zmax = 65535 / (p.N > 0 ? p.N : 1);
    /* waves of a pass over `segs` pieces per sequence, V tile bv, values width
     * wide, per_sm blocks an SM at most */
    auto waves = [&](size_t smem, int bv, int width, long long segs, int per_sm = 2) {
        const long long blocks = (long long)p.N * p.H * ((width + bv - 1) / bv) * segs;
        const int by_smem = smem_sm / (int)(smem + 1024);
        const long long slots = (long long)n_sm * (by_smem < 1 ? 1 : by_smem < per_sm ? by_smem : per_sm);
        return (blocks + slots - 1) / slots;
    };
    const size_t ss = pr_rec_smem_state(p, pl->bv_state), sd = pr_rec_smem_dstate(p, pl->bv_dstate);
    bool fix_ok = pl->bv_fix > 0 && (!p.delta || p.K <= 2 * p.V);
    const long long fix_steps =
        fix_ok ? waves(pr_rec_smem_segfix(p, pl->bv_fix), pl->bv_fix, p.V, ncs, SEG_FIX_PER_SM) : 0;
    /* PRISM_REC_SEG_FIX=0 forces the last pass, 1 the fix-up where it can run */
    long fix_force = -1;
    if (rec_env_knob("PRISM_REC_SEG_FIX", "0 (a last serial pass) or 1 (the fix-up)",
                 [](long v) { return v == 0 || v == 1; }, &fix_force))
        fix_ok = fix_ok && fix_force;
    /* the segmented cost at q segments, the state and dstate passes' steps
     * weighing ws and wd (1: the plain count); *fix: the fix-up beats the
     * last pass */
    auto seg_cost = [&](long long q, int *fix, double ws = 1, double wd = 1) {
        const long long steps = (ncs + q - 1) / q, last = waves(ss, pl->bv_state, p.V, q) * steps;
        const long long st = waves(ss, pl->bv_state, p.V, q) + (p.delta ? waves(ss, pl->bv_state, p.K, q) : 0);
        *fix = fix_ok && (fix_force == 1 || fix_steps <= last);
        return ws * (double)(st * steps) + wd * (double)(2 * waves(sd, pl->bv_dstate, p.V, q) * steps) +
               (double)(2 * q) + (*fix ? (double)fix_steps : ws * (double)last);
    };
    long long P = 1;
    long forced;
    const bool forced_p =
        rec_env_knob("PRISM_REC_SEGMENTS", "a whole number >= 1 (1: off)", [](long v) { return v >= 1; }, &forced);
    if (forced_p) {
        P = forced;
    } else if (ncs >= 8) {
        double best = (double)((waves(ss, pl->bv_state, p.V, 1) + waves(sd, pl->bv_dstate, p.V, 1)) * ncs);
        for (long long q = 2; q <= ncs / 4 && q <= zmax; q++) {
            int fix;
            const double cost = seg_cost(q, &fix);
            if (cost < best) best = cost, P = q;
        }
    }
    if (!p.packed && P > ncs) P = ncs;
    if (P > zmax) P = zmax;
    pl->segments = P < 1 ? 1 : (int)P;
    pl->seg_fix = 0;
    if (pl->segments == 1) return -1;
    const double weighed = seg_cost(pl->segments, &pl->seg_fix, serial_step_weight(pl->bv_state, false),
                                    serial_step_weight(pl->bv_dstate, false));
    return forced_p ? -1 : weighed;
}

/* PRISM_REC_BV_STATE / PRISM_REC_BV_DSTATE = b: the serial passes' V tile,
 * for comparisons (a multiple of 32 whose shared memory fits) */
static bool env_tile(const char *name, const rec_prob &p, size_t mx, size_t (*bytes)(const rec_prob &, int),
                     int *out)
{
    char must_be[64];
    snprintf(must_be, sizeof must_be, "a multiple of 32 up to %d whose shared memory fits", p.Vp);
    long b;
    if (!rec_env_knob(name, must_be,
                  [&](long v) { return v >= 32 && v % 32 == 0 && v <= p.Vp && bytes(p, (int)v) <= mx; }, &b))
        return false;
    *out = (int)b;
    return true;
}

/* a segmented pass's V tile: the widest that still lets as many blocks share
 * an SM as the tile picked for the unsegmented pass. Its blocks are few and
 * latency-bound, so a wider tile does more work per barrier, and fewer tiles
 * leave room for more segments (shorter chains of chunk steps). prism_core
 * at B=1 T=16384 H=8 K=V=96 L=2, fwd+bwd: 7.42 ms at tiles of 32 and 11
 * segments, 7.15 at the 64 and 64 this picks (NOTES.md v11). Wider tiles
 * only add room, so the segments planned again still pay. */
static void widen_tile(const rec_prob &p, int smem_sm, size_t mx, size_t (*bytes)(const rec_prob &, int), int *bv)
{
    const int per_sm = plan_per_sm(bytes(p, *bv), smem_sm);
    for (int b = p.Vp; b > *bv; b -= 32)
        if (bytes(p, b) <= mx && plan_per_sm(bytes(p, b), smem_sm) >= per_sm) {
            *bv = b;
            return;
        }
}

/* waves of a serial pass's blocks (one per sequence, head and V tile of
 * b) at smem bytes a block */
static long long serial_waves(const rec_prob &p, int b, size_t smem, int smem_sm, int n_sm)
{
    const long long blocks = (long long)p.N * p.H * ((p.V + b - 1) / b);
    const long long slots = (long long)n_sm * plan_per_sm(smem, smem_sm);
    return (blocks + slots - 1) / slots;
}
/* the SMs a serial pass keeps at work in its first wave */
static long long serial_sms(const rec_prob &p, int b, size_t smem, int smem_sm, int n_sm)
{
    const long long blocks = (long long)p.N * p.H * ((p.V + b - 1) / b), per_sm = plan_per_sm(smem, smem_sm);
    const long long sms = (blocks + per_sm - 1) / per_sm;
    return sms < n_sm ? sms : n_sm;
}
/* the fewest waves at the V tiles bytes(b) allows (b = 32, 64, ... up to
 * Vp), then the narrowest tile (more blocks at work) */
template <class F> static bool pick_serial(const rec_prob &p, size_t mx, int smem_sm, int n_sm, F bytes, int *out)
{
    long long best = -1;
    for (int b = 32; b <= p.Vp; b *= 2) {
        if (bytes(b) > mx) continue;
        const long long waves = serial_waves(p, b, bytes(b), smem_sm, n_sm);
        if (best < 0 || waves < best) best = waves, *out = b;
    }
    return best >= 0;
}

/* a wgmma form's knob: 0 (the mma.sync form), 1 (wgmma), -1 where unset */
static long wg_knob(const char *name)
{
    long want = -1;
    rec_env_knob(name, "0 (the mma.sync form) or 1 (wgmma)", [](long v) { return v == 0 || v == 1; }, &want);
    return want;
}

/* A serial pass's wgmma tile, 0 where mma.sync's form runs: the tile
 * forced (forced: bv_mma is PRISM_REC_BV_*'s) where it fits, else
 * pick_serial's by the form's shared memory bytes(p, b); unless insisted on
 * (want 1) or forced, not where it makes more waves than mma.sync's tile
 * bv_mma (smem_mma bytes), nor, with sms, where it keeps fewer SMs at work */
static int serial_wg_tile(const rec_prob &p, int smem_sm, int n_sm, size_t mx, bool forced, long want, int bv_mma,
                          size_t smem_mma, size_t (*bytes)(const rec_prob &, int), bool sms)
{
    const auto b_of = [&](int b) { return bytes(p, b); };
    int bv = 0;
    if (forced) bv = b_of(bv_mma) <= mx ? bv_mma : 0;
    else pick_serial(p, mx, smem_sm, n_sm, b_of, &bv); /* bv stays 0 where none fits */
    if (bv && !forced && want != 1 &&
        (serial_waves(p, bv, b_of(bv), smem_sm, n_sm) > serial_waves(p, bv_mma, smem_mma, smem_sm, n_sm) ||
         (sms && serial_sms(p, bv, b_of(bv), smem_sm, n_sm) < serial_sms(p, bv_mma, smem_mma, smem_sm, n_sm))))
        bv = 0;
    return bv;
}

/* The state pass's wgmma form (NOTES.md v30) where it runs: TF32 on, a
 * build for sm_90a on an sm_90 GPU, K <= 128, no extra writes and no
 * segments (the segmented passes keep mma.sync), and no more waves than
 * mma.sync's. Its tile: the same rule as the other form's, by its own
 * shared memory; a forced PRISM_REC_BV_STATE (forced) stays where the
 * form takes it (32 or 64), else mma.sync runs it.
 * PRISM_REC_STATE_WG=0 keeps mma.sync, 1 insists on wgmma (tests, A/Bs). */
static void plan_state_wg(const rec_prob &p, int smem_sm, int n_sm, size_t mx, bool forced, rec_chunk_plan *pl)
{
    pl->wg_state = 0;
    const long want = wg_knob("PRISM_REC_STATE_WG");
    const bool able = rec_wgmma_runs() && p.tf32 && p.Kp <= 128 && pl->segments == 1;
    int bv = 0;
    /* not with extras (prism_core) unless asked for: it loads their rows where they are used, unhidden */
    if (able && want != 0 && (p.L == 0 || forced || want == 1))
        bv = serial_wg_tile(p, smem_sm, n_sm, mx, forced, want, pl->bv_state, pr_rec_smem_state(p, pl->bv_state),
                            pr_rec_smem_state_wg, false);
    if (want == 1 && !bv)
        pr_fatal("PRISM_REC_STATE_WG=1 forces the state pass's wgmma form, which needs TF32 products (matmul_tf32 "
                 "on), a build for sm_90a on an sm_90 GPU, K <= 128, no segments and a V tile of 32 or 64 "
                 "whose shared memory fits (K = %d, V = %d here)", p.K, p.V);
    if (bv) pl->wg_state = 1, pl->bv_state = bv;
}

/* The dstate pass's wgmma form (NOTES.md v31, v45) where it runs: as the
 * state pass's above, with its tile (32, 64 or 128) by the same rule, at L
 * = 0 only, and with no fewer SMs at work than mma.sync keeps (where its
 * blocks fit one an SM and mma.sync's two). PRISM_REC_DSTATE_WG=0 keeps
 * mma.sync, 1 insists on wgmma (tests, A/Bs). */
static void plan_dstate_wg(const rec_prob &p, int smem_sm, int n_sm, size_t mx, bool forced, rec_chunk_plan *pl)
{
    pl->wg_dstate = 0;
    const long want = wg_knob("PRISM_REC_DSTATE_WG");
    const bool able = rec_wgmma_runs() && p.tf32 && p.Kp <= 128 && p.L == 0 && pl->segments == 1;
    int bv = 0;
    if (able && want != 0)
        bv = serial_wg_tile(p, smem_sm, n_sm, mx, forced, want, pl->bv_dstate, pr_rec_smem_dstate(p, pl->bv_dstate),
                            smem_dstate_wg, true);
    if (want == 1 && !bv)
        pr_fatal("PRISM_REC_DSTATE_WG=1 forces the dstate pass's wgmma form, which needs TF32 products (matmul_tf32 "
                 "on), a build for sm_90a on an sm_90 GPU, K <= 128, no extra writes (L = %d here), no segments and "
                 "a V tile of 32, 64 or 128 whose shared memory fits (K = %d, V = %d here)",
                 p.L, p.K, p.V);
    if (bv) pl->wg_dstate = 1, pl->bv_dstate = bv;
}

/* wy's wgmma form (NOTES.md v36) where it runs: TF32, no extras, K <= 128;
 * PRISM_REC_WY_WG=0 keeps mma.sync, 1 insists. A K tile forced by
 * PRISM_REC_BK_WY is mma.sync's (the wgmma form's tiles are 64). */
static void plan_wy_wg(const rec_prob &p, size_t mx, bool bk_forced, rec_chunk_plan *pl)
{
    pl->wg_wy = 0;
    const long want = wg_knob("PRISM_REC_WY_WG");
    if (!p.delta) return;
    if (want == 1 && bk_forced)
        pr_fatal("PRISM_REC_WY_WG=1 (wy's wgmma form, K tiles of 64) and PRISM_REC_BK_WY (mma.sync's K tile) force "
                 "different forms of wy: set one of them");
    const bool on = rec_wgmma_runs() && p.tf32 && p.L == 0 && p.K <= 128 && wy_wg_smem((p.K + 63) / 64) <= mx &&
                    want != 0 && !bk_forced;
    if (want == 1 && !on)
        pr_fatal("PRISM_REC_WY_WG=1 forces wy's wgmma form, which needs TF32 products (matmul_tf32 on), a build for "
                 "sm_90a on an sm_90 GPU, K <= 128 and no extra writes (K = %d, L = %d here)",
                 p.K, p.L);
    if (on) pl->wg_wy = 1, pl->bk_wy = 64, pl->bv_wy = 64;
}

/* prep's wgmma form (NOTES.md v37) where it runs: TF32, no extras, K and V
 * <= 128; PRISM_REC_PREP_WG=0 keeps mma.sync, 1 insists */
static void plan_prep_wg(const rec_prob &p, size_t mx, rec_chunk_plan *pl)
{
    pl->wg_prep = 0;
    const long want = wg_knob("PRISM_REC_PREP_WG");
    if (!p.delta) return;
    const bool on = rec_wgmma_runs() && p.tf32 && p.L == 0 && p.K <= 128 && p.V <= 128 &&
                    pr_rec_smem_prep_wg(p) <= mx && want != 0;
    if (want == 1 && !on)
        pr_fatal("PRISM_REC_PREP_WG=1 forces prep's wgmma form, which needs TF32 products (matmul_tf32 on), a build "
                 "for sm_90a on an sm_90 GPU, K and V <= 128 and no extra writes (K = %d, V = %d, L = %d here)",
                 p.K, p.V, p.L);
    if (on) pl->wg_prep = 1, pl->bv_prep = 128;
}

/* The scores kernels' wgmma form (chunked_fwd.cu, NOTES.md v32) where it
 * runs: TF32 on, a build for sm_90a on an sm_90 GPU, K <= 128 and no extra
 * writes; it has its own V tiles (64 for the output, 128 for dlocal).
 * PRISM_REC_SCORES_WG=0 keeps mma.sync, 1 insists on wgmma (tests, A/Bs). */
static void plan_scores_wg(const rec_prob &p, size_t mx, rec_chunk_plan *pl)
{
    pl->wg_scores = 0;
    const long want = wg_knob("PRISM_REC_SCORES_WG");
    const bool on = rec_wgmma_runs() && p.tf32 && p.L == 0 && pr_rec_smem_scores_wg(p, 0) <= mx &&
                    pr_rec_smem_scores_wg(p, 1) <= mx && want != 0;
    if (want == 1 && !on)
        pr_fatal("PRISM_REC_SCORES_WG=1 forces the scores kernels' wgmma form, which needs TF32 products (matmul_tf32 "
                 "on), a build for sm_90a on an sm_90 GPU, K <= 128 and no extra writes (K = %d, L = %d here)",
                 p.K, p.L);
    if (on) pl->wg_scores = 1, pl->bv_out = 64, pl->bv_dloc = 128;
}

/* Extras apart (chunked_extras.cu, NOTES.md v38, v39) where it runs: extra
 * writes (L > 0) beside a core (L = 0) whose state pass and output kernel
 * take their wgmma forms (TF32 on, a build for sm_90a on an sm_90 GPU, K <=
 * 128, no segments), with the extras kernels' shared memory fitting. Then
 * *pl is the core's plan. By default apart wherever the extras take their
 * wgmma forms too (C = 64, C L <= 128, K, V <= 128: measured 2x faster than
 * the extras in the core kernels there, v39); PRISM_REC_XA=1 insists on
 * apart (the mma.sync extras where the wgmma ones do not fit), 0 keeps the
 * extras in the core kernels. */
static bool plan_xa(const rec_prob &p, int smem_max, int smem_sm, int n_sm, rec_chunk_plan *pl)
{
    long want = -1;
    rec_env_knob("PRISM_REC_XA", "0 (the extras in the core kernels) or 1 (apart)", [](long v) { return v == 0 || v == 1; },
                 &want);
    const bool wg = pr_rec_xa_wg_fits(p);
    if (want == 0 || (want == -1 && !wg)) return false;
    const size_t mx = (size_t)smem_max;
    const bool on = p.delta && pr_rec_smem_xfwd(p, wg) <= mx && pr_rec_smem_xbwd(p, wg) <= mx &&
                    pr_rec_chunk_plan(rec_core_prob(p), smem_max, smem_sm, n_sm, pl) && pl->wg_state &&
                    pl->wg_scores && pl->segments == 1;
    if (want == 1 && !on)
        pr_fatal("PRISM_REC_XA=1 runs the extra writes apart, which needs a core whose state pass and output take "
                 "their wgmma forms (TF32 products on, a build for sm_90a on an sm_90 GPU, K <= 128, no segments) and "
                 "%zu + %zu bytes of shared memory a block for the extras' kernels (K = %d, V = %d, L = %d, C = %d here)",
                 pr_rec_smem_xfwd(p, wg), pr_rec_smem_xbwd(p, wg), p.K, p.V, p.L, p.C);
    if (!on) *pl = rec_chunk_plan{}; /* the native plan starts from nothing */
    pl->xa = on, pl->wg_xa = on && wg;
    return on;
}

/* The segmented passes keep mma.sync's form. Where the plan segments, the
 * whole sequence is planned too (whole: segments 1, the unwidened tiles),
 * with the state and dstate passes' wgmma forms as plan_state_wg and
 * plan_dstate_wg pick them; where both take it and its steps, weighed by
 * serial_step_weight, cost less than the segments (seg_cost, weighed the
 * same way), the whole plan wins. */
static bool whole_wins(const rec_prob &p, int smem_sm, int n_sm, size_t mx, double seg_cost, rec_chunk_plan *whole)
{
    if (seg_cost < 0) return false;
    plan_state_wg(p, smem_sm, n_sm, mx, false, whole);
    plan_dstate_wg(p, smem_sm, n_sm, mx, false, whole);
    if (!whole->wg_state || !whole->wg_dstate) return false;
    const int bs = whole->bv_state, bd = whole->bv_dstate;
    const double steps =
        (double)serial_waves(p, bs, pr_rec_smem_state_wg(p, bs), smem_sm, n_sm) * serial_step_weight(bs, true) +
        (double)serial_waves(p, bd, smem_dstate_wg(p, bd), smem_sm, n_sm) * serial_step_weight(bd, true);
    return steps * (double)seq_chunks(p) < seg_cost;
}

bool pr_rec_chunk_plan(const rec_prob &p, int smem_max, int smem_sm, int n_sm, rec_chunk_plan *pl)
{
    if (p.L > 0 && plan_xa(p, smem_max, smem_sm, n_sm, pl)) return true;
    const size_t mx = (size_t)smem_max, two = (size_t)(smem_sm / 2 - 1024);
    const int bvs[2] = {p.Vp >= 64 ? 64 : 32, 32};
    /* the chunk-parallel kernels: the widest V tile that lets two blocks share
     * an SM, else the widest that fits */
    auto pick = [&](auto bytes, int *out) {
        for (size_t lim : {two, mx})
            for (int b : bvs)
                if (bytes(b) <= lim) return *out = b, true;
        return false;
    };
    /* the serial state passes (one block per sequence, head and V tile) */
    pl->C = p.C;
    bool ok = true;
    if (p.delta) ok &= pick([&](int b) { return pr_rec_smem_prep(p, b); }, &pl->bv_prep);
    ok &= pick_serial(p, mx, smem_sm, n_sm, [&](int b) { return pr_rec_smem_state(p, b); }, &pl->bv_state);
    ok &= pick([&](int b) { return pr_rec_smem_scores(p, 0, b); }, &pl->bv_out);
    ok &= pick([&](int b) { return pr_rec_smem_scores(p, 1, b); }, &pl->bv_dloc);
    ok &= pick_serial(p, mx, smem_sm, n_sm, [&](int b) { return pr_rec_smem_dstate(p, b); }, &pl->bv_dstate);
    /* the segmented forward's fix-up: none when it does not fit (the last pass runs instead) */
    /* V tiles of 32: no padding of V beyond the 32 every tile has, so the
     * least product work (the reloads of P_c per tile cost less), and the
     * most blocks an SM */
    pl->bv_fix = pr_rec_smem_segfix(p, 32) <= mx ? 32 : 0;
    pl->segments = 1, pl->seg_fix = 0, pl->wg_state = 0, pl->wg_dstate = 0, pl->wg_scores = 0, pl->wg_wy = 0;
    pl->wg_prep = 0, pl->xa = 0, pl->wg_xa = 0;
    if (ok) {
        const bool fs = env_tile("PRISM_REC_BV_STATE", p, mx, pr_rec_smem_state, &pl->bv_state);
        const bool fd = env_tile("PRISM_REC_BV_DSTATE", p, mx, pr_rec_smem_dstate, &pl->bv_dstate);
        rec_chunk_plan whole = *pl; /* segments 1, the tiles before widening */
        double seg_cost = plan_segments(p, smem_sm, n_sm, pl);
        if (pl->segments > 1 && !(fs && fd)) {
            if (!fs) widen_tile(p, smem_sm, mx, pr_rec_smem_state, &pl->bv_state);
            if (!fd) widen_tile(p, smem_sm, mx, pr_rec_smem_dstate, &pl->bv_dstate);
            seg_cost = plan_segments(p, smem_sm, n_sm, pl);
        }
        if (pl->segments > 1 && !fs && !fd && whole_wins(p, smem_sm, n_sm, mx, seg_cost, &whole)) *pl = whole;
        plan_state_wg(p, smem_sm, n_sm, mx, fs, pl);
        plan_dstate_wg(p, smem_sm, n_sm, mx, fd, pl);
        plan_scores_wg(p, mx, pl);
        plan_prep_wg(p, mx, pl);
    }
    /* grad: wgmma where its TF32 products apply (TF32 on, a build for sm_90a
     * on an sm_90 GPU: NOTES.md v29), else mma.sync or fp32. PRISM_REC_GRAD_BPW forces
     * the mma.sync form, PRISM_REC_GRAD_PIECES the wgmma one (tests, A/Bs). */
    const char *e_bpw = getenv("PRISM_REC_GRAD_BPW"), *e_pcs = getenv("PRISM_REC_GRAD_PIECES");
    const bool set_bpw = e_bpw && *e_bpw, set_pcs = e_pcs && *e_pcs, wg_able = rec_wgmma_runs() && p.tf32;
    if (set_bpw && set_pcs)
        pr_fatal("PRISM_REC_GRAD_BPW (mma.sync) and PRISM_REC_GRAD_PIECES (wgmma) force different forms of grad: "
                 "set one of them");
    if (set_pcs && !wg_able)
        pr_fatal("PRISM_REC_GRAD_PIECES forces grad's wgmma form, which needs TF32 products (matmul_tf32 on), a "
                 "build for sm_90a (CMAKE_CUDA_ARCHITECTURES=90a) and an sm_90 GPU");
    bool wg = set_pcs || (wg_able && !set_bpw);
    /* the widest K tile that lets two blocks share an SM (a narrower one
     * redoes the K-independent loads and dO Ua^T, but one block alone leaves
     * its loads and barriers unhidden: 2.8 ms at one K tile of 128 and one
     * block per SM, NOTES.md v4), else the widest that fits; wgmma's V
     * tiles have 32 columns (its swizzled rows of 128 bytes) */
    const int bks[3] = {p.Kp <= 128 ? p.Kp : 128, p.Kp >= 64 ? 64 : 32, 32};
    const auto pick_tiles = [&](bool w) {
        for (size_t lim : {two, mx})
            for (int bk : bks)
                for (int bv : {w ? 32 : bvs[0], 32})
                    if (pr_rec_smem_grad(p, bk, bv, 0, w) <= lim) return pl->bk_grad = bk, pl->bv_grad = bv, true;
        return false;
    };
    bool g = pick_tiles(wg);
    /* where wgmma's form needs more shared memory than a block has (its
     * sums take room of their own once they need more than one pass, where
     * mma.sync's eight blocks a warp may still take one), mma.sync's runs */
    if (!g && wg && !set_pcs) wg = false, g = pick_tiles(false);
    const int bvs_g[2] = {wg ? 32 : bvs[0], 32};
    /* PRISM_REC_BK_GRAD=32, 64, ... forces grad's K tile, with the widest V
     * tile that fits (tests: several K tiles at small K; A/Bs of tiles) */
    char must_be[96];
    long bk_force;
    snprintf(must_be, sizeof must_be, "a multiple of 32 up to %d whose shared memory fits", p.Kp);
    /* the widest V tile whose shared memory fits at K tile bk and r blocks a warp (0: none) */
    const auto bv_for = [&](int bk, int r) {
        for (int bv : bvs_g)
            if (pr_rec_smem_grad(p, bk, bv, r, wg) <= mx) return bv;
        return 0;
    };
    if (g && rec_env_knob("PRISM_REC_BK_GRAD", must_be,
                          [&](long v) { return v >= 32 && v % 32 == 0 && v <= p.Kp && bv_for((int)v, 0); },
                          &bk_force))
        pl->bk_grad = (int)bk_force, pl->bv_grad = bv_for(pl->bk_grad, 0);
    pl->wg_grad = wg;
    pl->bpw_grad = g ? grad_blocks_per_warp(p, pl->bk_grad, wg) : 4;
    /* PRISM_REC_GRAD_BPW=3, 4 or 8 (warp blocks) or PRISM_REC_GRAD_PIECES=2,
     * 3 or 4 (wgmma pieces) forces what a pass holds, keeping the V tile
     * where it still fits, else the widest that does (tests: fewer makes
     * several passes, and the sums then need room of their own) */
    long bpw;
    const bool forced =
        g && (wg ? rec_env_knob("PRISM_REC_GRAD_PIECES", "2, 3 or 4, with shared memory that fits",
                                [&](long v) { return v >= 2 && v <= 4 && bv_for(pl->bk_grad, (int)v); }, &bpw)
                 : rec_env_knob("PRISM_REC_GRAD_BPW", "3, 4 or 8, with shared memory that fits",
                                [&](long v) { return (v == 3 || v == 4 || v == 8) && bv_for(pl->bk_grad, (int)v); },
                                &bpw));
    if (forced) {
        pl->bpw_grad = (int)bpw;
        if (pr_rec_smem_grad(p, pl->bk_grad, pl->bv_grad, pl->bpw_grad, wg) > mx)
            pl->bv_grad = bv_for(pl->bk_grad, pl->bpw_grad);
    }
    pl->passes_grad = g ? grad_passes(p, pl->bk_grad, pl->bpw_grad, wg) : 1;
    /* wy: likewise the widest K tile (of those that divide Kp) that lets two
     * blocks share an SM (at C = 64, K = 128 a K tile of 64 does: 104 KB
     * where the whole K took 171), else the widest that fits */
    bool w = !p.delta;
    for (size_t lim : {two, mx})
        for (int bk : bks)
            for (int bv : bvs)
                if (!w && p.Kp % bk == 0 && pr_rec_smem_wy(p, bk, bv) <= lim)
                    pl->bk_wy = bk, pl->bv_wy = bv, w = true;
    /* PRISM_REC_BK_WY=32, 64, ... forces the K tile (tests: several tiles at small K) */
    snprintf(must_be, sizeof must_be, "a multiple of 32 that divides %d and whose shared memory fits", p.Kp);
    const bool bk_wy_forced =
        w && p.delta &&
        rec_env_knob("PRISM_REC_BK_WY", must_be,
                     [&](long v) {
                         return v >= 32 && v % 32 == 0 && v <= p.Kp && p.Kp % v == 0 &&
                                pr_rec_smem_wy(p, (int)v, pl->bv_wy) <= mx;
                     },
                     &bk_force);
    if (bk_wy_forced) pl->bk_wy = (int)bk_force;
    /* two extras a product where that keeps as many blocks an SM as one */
    pl->xg_wy = 1;
    plan_wy_wg(p, mx, bk_wy_forced, pl);
    if (w && p.delta && p.L >= 2) {
        const size_t one = pr_rec_smem_wy(p, pl->bk_wy, pl->bv_wy), two_x = wy_smem_xg(p, pl->bk_wy, pl->bv_wy, 2);
        if (two_x <= mx && plan_per_sm(two_x, smem_sm) >= plan_per_sm(one, smem_sm)) pl->xg_wy = 2;
    }
    return ok && g && w;
}

/* grad's instance for the plan: BF products, the wgmma form, R */
template <int C>
static auto grad_kernel_for(bool bf, bool wg, int r) -> decltype(&chunk_grad_kernel<C, false, 4, false>)
{
    if (wg) return bf ? (r == 2 ? chunk_grad_kernel<C, true, 2, true>
                         : r == 3 ? chunk_grad_kernel<C, true, 3, true> : chunk_grad_kernel<C, true, 4, true>)
                      : (r == 2 ? chunk_grad_kernel<C, false, 2, true>
                         : r == 3 ? chunk_grad_kernel<C, false, 3, true> : chunk_grad_kernel<C, false, 4, true>);
    return bf ? (r == 3 ? chunk_grad_kernel<C, true, 3, false>
                 : r == 4 ? chunk_grad_kernel<C, true, 4, false> : chunk_grad_kernel<C, true, 8, false>)
              : (r == 3 ? chunk_grad_kernel<C, false, 3, false>
                 : r == 4 ? chunk_grad_kernel<C, false, 4, false> : chunk_grad_kernel<C, false, 8, false>);
}

template <int C>
static void chunk_backward_c(cudaStream_t st, const rec_prob &px, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                             const rec_grads &dx)
{
    /* extras apart: the core (L = 0) with its dv into dvp (dV'), then the extras' backward */
    const rec_prob p = pl.xa ? rec_core_prob(px) : px;
    rec_grads d = dx;
    float *dvp = nullptr;
    const long long rows = p.seq ? (long long)p.T : (long long)p.N * p.T, rowsH = rows * p.H;
    const int nkt = (p.K + pl.bk_grad - 1) / pl.bk_grad;
    const size_t n_v = (size_t)(rowsH * p.V), n_vx = n_v * p.L, n_k = (size_t)(rowsH * p.K), n_kx = n_k * p.L;
    const size_t n_h = (size_t)p.nchunks * p.H * p.K * p.V;
    float *dU = rec_scratch(n_v), *dVX = p.L ? rec_scratch(n_vx) : nullptr, *dhs = rec_scratch(n_h);
    float *dkxa = p.L ? rec_scratch(n_kx) : nullptr; /* grad adds its part of dk into d.dk, wy the rest */
    float *dW = p.delta ? rec_scratch(n_k) : nullptr, *dbA = p.delta ? rec_scratch((size_t)rowsH) : nullptr;
    float *dGp = p.has_g ? rec_scratch((size_t)(nkt * rowsH)) : nullptr;
    if (pl.xa) {
        PR_ASSERT(px.L > 0 && p.delta && !sv.sg.n);
        dvp = rec_scratch(n_v);
        PR_CUDA_CHECK(cudaMemsetAsync(dvp, 0, n_v * sizeof(float), st));
        d.dv = dvp, d.dkx = d.dvx = nullptr, d.dkx16 = d.dvx16 = nullptr;
    }

    pr_rec_chunk_dlocal(st, p, pl.bv_dloc, dU, dVX, p.delta ? nullptr : d.dv, pl.wg_scores);
    {
        const rec_dstate_io io = {sv.W, p.dht, dhs, dU, dVX, d.dv, d.dh0, 1};
        if (sv.sg.n) chunk_dstate_segmented(st, p, pl.bv_dstate, sv.sg, io);
        else pr_rec_chunk_dstate(st, p, pl.bv_dstate, io, pl.wg_dstate);
    }
    {
        const size_t sm = pr_rec_smem_grad(p, pl.bk_grad, pl.bv_grad, pl.bpw_grad, pl.wg_grad);
        const auto kernel = grad_kernel_for<C>(rec_bf_products(p), pl.wg_grad, pl.bpw_grad);
        pr_cuda_smem_prep((const void *)kernel, sm);
        const dim3 grid(nkt, p.nchunks, p.H);
        kernel<<<grid, PR_REC_THREADS, sm, st>>>(p, pl.bk_grad, pl.bv_grad, sv.hs, dhs, sv.R, dU, d.dq, d.dk, dkxa, dW,
                                                 dGp, dbA, rowsH);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (p.delta && pl.wg_wy) {
        const wy_scratch x = {dU, dVX, dkxa, dW, dGp, dbA, nkt, rowsH};
        const size_t sm = wy_wg_smem((p.K + 63) / 64);
        const auto kernel = chunk_wy_wg_kernel<C>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, sv.Tinv, sv.W, sv.R0, x, d);
        PR_CUDA_LAUNCH_CHECK();
    } else if (p.delta) {
        const size_t sm = wy_smem_xg(p, pl.bk_wy, pl.bv_wy, pl.xg_wy);
        const auto kernel = rec_bf_products(p) ? chunk_wy_kernel<C, true> : chunk_wy_kernel<C, false>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        const wy_scratch x = {dU, dVX, dkxa, dW, dGp, dbA, nkt, rowsH};
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, pl.bk_wy, pl.bv_wy, pl.xg_wy, sv.Tinv, sv.W, sv.R0,
                                                                   x, d);
        PR_CUDA_LAUNCH_CHECK();
    } else if (p.has_g && d.dg) {
        chunk_dg_kernel<C><<<pr_cuda_blocks((long long)p.nchunks * p.H * 32, 128), 128, 0, st>>>(p, dGp, nkt, rowsH,
                                                                                                 d.dg);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (pl.xa) {
        pr_rec_chunk_xbwd(st, px, pl.wg_xa, dhs, dvp, dx);
        rec_scratch_free(dvp, n_v);
    }
    rec_scratch_free(dU, n_v);
    if (dVX) rec_scratch_free(dVX, n_vx);
    rec_scratch_free(dhs, n_h);
    if (p.delta) rec_scratch_free(dW, n_k), rec_scratch_free(dbA, (size_t)rowsH);
    if (dkxa) rec_scratch_free(dkxa, n_kx);
    if (dGp) rec_scratch_free(dGp, (size_t)(nkt * rowsH));
}

void pr_rec_chunk_backward(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                           const rec_grads &d)
{
    if (p.C == 64) chunk_backward_c<64>(s, p, pl, sv, d);
    else chunk_backward_c<32>(s, p, pl, sv, d);
}
