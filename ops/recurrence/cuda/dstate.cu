/* ops/recurrence/cuda/dstate.cu: the chunked backward's serial pass, over
 * a sequence's chunks in reverse (parallel over heads and V tiles): it adds
 * Kd dhn to dlocal's dUa and carries the state's gradient
 *   dh = e^{G_last} dhn + scale (e^G o Q)^T dO - W^T (beta o dU)
 * in its mma.sync form and its wgmma form (sm_90a, TF32, K <= 128, L = 0),
 * and the pass over segments. Notation: chunked.cu.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

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

/* ---- dstate, the wgmma form (sm_90a, TF32 products) ------------------------------
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
/* IN16 (bf16 data, the plan's io16_bwd): q, dO and k read in place (p.q16,
 * p.dout16, p.k16): copied by cp.async into the f32 tiles' slots and
 * widened by their copiers where they scale and round them */
template <int C, int NW, int MP, bool DELTA, bool IN16 = false>
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
    constexpr bool k16 = IN16;
    /* chunk ci's copies, and its dU into P1's sums */
    const auto issue = [&](int ci) {
        const int nval = min(C, sq.len - ci * C);
        const long long rk = (long long)(sq.bos + ci * C) * H + h;
        for (int kb = 0; kb < KW / 32; kb++)
            if constexpr (k16)
                rec_ld_tile16<true>(KD + kb * 64 * 32, 32, 64, 32, p.k16 + rk * K + kb * 32, (long long)H * K, nval,
                                    K - kb * 32);
            else
                rec_ld_tile<true>(KD + kb * 64 * 32, 32, 64, 32, p.k + rk * K + kb * 32, (long long)H * K, nval,
                                  K - kb * 32, p.vec);
        if constexpr (IN16) {
            rec_cpt16<C, KW>(QT, KW, p.q16 + rk * K, (long long)H * K, nval, K);
            rec_cpt16<C, BV>(DOT, BV, p.dout16 + rk * V + v0, (long long)H * V, nval, nv);
        } else {
            rec_cpt<C, KW>(QT, KW, p.q + rk * K, (long long)H * K, nval, K);
            rec_cpt<C, BV>(DOT, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv);
        }
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
        for (int kb = 0; kb < KW / 32; kb++)
            if constexpr (k16) { /* and rows C..63 (zero-filled in their first halves only) widened to zero */
                rec_tf32_own<true>(KD + kb * 64 * 32, C, eL);
                if (C < 64) rec_widen_own<true>(KD + kb * 64 * 32, 32, 64, 32, C);
            } else {
                rec_tf32_own(KD + kb * 64 * 32, C, eL);
            }
        rec_cpt_own<C, KW, IN16>(QT, KW, eG, p.scale);
        rec_cpt_own<C, BV, IN16>(DOT, BV, nullptr, 1.f);
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
            if constexpr (IN16 && !DELTA) /* bf16 dv in place: the cast's rounding of the same sum */
                if (io.dv16 && a < nval && j < nv) io.dv16[(rk + (long long)a * H) * V + v0 + j] = pr_bf16_bits(rz[e]);
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
template <int C, int NW, bool IN16>
static auto dstate_wg_for(const rec_prob &p) -> decltype(&chunk_dstate_wg_kernel<C, NW, 1, true>)
{
    const bool mp1 = p.Kp <= 64;
    if (p.delta) return mp1 ? chunk_dstate_wg_kernel<C, NW, 1, true, IN16> : chunk_dstate_wg_kernel<C, NW, 2, true, IN16>;
    return mp1 ? chunk_dstate_wg_kernel<C, NW, 1, false, IN16> : chunk_dstate_wg_kernel<C, NW, 2, false, IN16>;
}
template <int C, int NW> static void chunk_dstate_wg_nw(cudaStream_t st, const rec_prob &p, const rec_dstate_io &io)
{
    PR_ASSERT(!p.q16 == !p.dout16 && !p.k16 == !p.dout16 && (!io.dv16 || (p.dout16 && !p.delta && !io.dv)));
    const auto kernel = p.dout16 ? dstate_wg_for<C, NW, true>(p) : dstate_wg_for<C, NW, false>(p);
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
    PR_ASSERT(!p.dout16 && !p.q16 && !p.k16 && !io.dv16); /* the plan reads them in place in the wgmma form only */
    if (p.C == 64) chunk_dstate_c<64>(st, p, bv, io);
    else chunk_dstate_c<32>(st, p, bv, io);
}

/* The dstate pass over segments: every segment with a zero terminal
 * gradient (the carry only: D_j, what its own outputs send to its start),
 * the reverse chain (each segment's terminal gradient, and dh0), then the
 * pass that stores dhs, dU, dVX and dv. */
void pr_rec_chunk_dstate_segmented(cudaStream_t st, const rec_prob &p, int bv, const rec_segs &sg,
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

size_t pr_rec_smem_dstate_wg(const rec_prob &p, int bv) { return smem_dstate_wg(p, bv); }
