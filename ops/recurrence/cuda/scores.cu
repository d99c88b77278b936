/* ops/recurrence/cuda/scores.cu: the two chunk-parallel passes built on a
 * chunk's scores S = incl(D o Q Ka^T): the output (MODE 0)
 *   O = scale (e^G o (Q h) + S Ua)
 * and the backward's first step, dlocal (MODE 1), dUa = scale S^T dO
 * (without beta it adds dv's value so far, dv0, so that the dstate pass
 * stores dv = dUa + Kd dhn without reading dv in its serial loop). Each in
 * its mma.sync form and its wgmma form (sm_90a, TF32, K <= 128, no
 * extras). Notation: chunked.cu.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

/* ---- scores: the output (MODE 0) or the backward's local value gradients (MODE 1) ---- */
struct scores_lay {
    int G, bt, eG, eL, Qs, S, KA, Hs, RA, Os, dOs, dVA, total;
};
__host__ __device__ static scores_lay scores_layout(const rec_prob &p, int mode, int BV)
{
    rec_bump m;
    scores_lay s;
    const int C = p.C, NA = C * (1 + p.L), LDK = p.Kp + 4, LDV = BV + 4, LDA = NA + 4;
    s.G = m.take(C), s.bt = m.take(C), s.eG = m.take(C), s.eL = m.take(C);
    s.Qs = m.take(C * LDK), s.S = m.take(C * LDA);
    const int region = m.off;
    s.KA = m.take(NA * LDK);
    const int end1 = m.off;
    m.off = region;
    s.Hs = s.RA = s.Os = s.dOs = s.dVA = -1;
    if (mode == 0) s.Hs = m.take(p.Kp * LDV), s.RA = m.take(NA * LDV), s.Os = m.take(C * LDV);
    else s.dOs = m.take(C * LDV), s.dVA = m.take(NA * LDV);
    s.total = m.off > end1 ? m.off : end1;
    return s;
}
size_t pr_rec_smem_scores(const rec_prob &p, int mode, int bv) { return (size_t)scores_layout(p, mode, bv).total * 4; }

/* IO16 (MODE 0, bf16 data): q read from p.q16 and o written to p.o16 in
 * place, the same values and bits as the f32 instance on staged copies */
template <int C, int MODE, bool BF, bool IO16 = false>
__global__ void __launch_bounds__(PR_REC_THREADS)
    chunk_scores_kernel(rec_prob p, int BV, const float *hs, const float *R, float *o, float *dU, float *dVX,
                        const float *dv0)
{
    extern __shared__ __align__(128) float sm[];
    const scores_lay s = scores_layout(p, MODE, BV);
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, L = p.L, Kp = p.Kp;
    const int NA = C * (1 + L), LDK = Kp + 4, LDV = BV + 4, LDA = NA + 4;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h;
    float *G = sm + s.G, *bt = sm + s.bt, *eG = sm + s.eG, *Qs = sm + s.Qs, *S = sm + s.S, *KA = sm + s.KA;

    if constexpr (!IO16) rec_ld_tile(Qs, LDK, C, Kp, p.q + rk * K, (long long)H * K, cp.nval, K, p.vec);
    else rec_ld_tile16(Qs, LDK, C, Kp, p.q16 + rk * K, (long long)H * K, cp.nval, K); /* bf16 q, 8-byte copies */
    chunk_ld_keys(p, KA, LDK, C, Kp, rk, cp.nval, 0, K);
    rec_gates_issue<C>(p, cp.row0, cp.nval, h, G, bt);
    if constexpr (IO16) { /* once landed, widened in place by their copiers before the barrier */
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        rec_widen_own(Qs, LDK, C, Kp);
    }
    rec_sync();
    rec_mm<false, true, BF>(p, S, LDA, Qs, LDK, KA, LDK, C, NA, Kp, 1.f, false);
    rec_gates_scan<C>(G, cp.nval, eG, sm + s.eL); /* warp 0, after its share of the product */
    rec_sync();
    /* S_ta = D_{t,i} (q_t . ka_a) for token i = a % C <= t; the output folds u = beta R in */
    REC_FOR2D(C, C, t, i) {
        const float d = i <= t ? expf(G[t] - G[i]) : 0.f;
        S[t * LDA + i] *= MODE == 0 && p.delta ? d * bt[i] : d;
        for (int l = 0; l < L; l++) S[t * LDA + C + l * C + i] *= d;
    }
    if (MODE == 0) REC_FOR2D(C, Kp, t, i) Qs[t * LDK + i] *= eG[t];
    rec_sync();
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        if (MODE == 0) {
            float *Hs = sm + s.Hs, *RA = sm + s.RA, *Os = sm + s.Os;
            rec_ld_tile(Hs, LDV, Kp, BV, hs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
            chunk_ld_values(p, RA, LDV, C, BV, p.delta ? R : p.v, rk, cp.nval, v0, nv);
            rec_sync();
            /* two products into Os of one shape: each warp adds to its own blocks */
            rec_mm<false, false, BF>(p, Os, LDV, Qs, LDK, Hs, LDV, C, BV, Kp, 1.f, false);
            rec_mm<false, false, BF>(p, Os, LDV, S, LDA, RA, LDV, C, BV, NA, 1.f, true);
            rec_sync();
            if constexpr (IO16) rec_st_tile16(p.o16 + rk * V + v0, (long long)H * V, cp.nval, nv, Os, LDV, p.scale);
            else rec_st_tile(o + rk * V + v0, (long long)H * V, cp.nval, nv, Os, LDV, p.scale, false, p.vec);
        } else {
            float *dOs = sm + s.dOs, *dVA = sm + s.dVA;
            rec_ld_tile(dOs, LDV, C, BV, p.dout + rk * V + v0, (long long)H * V, cp.nval, nv, p.vec);
            rec_sync();
            rec_mm<true, false, BF>(p, dVA, LDV, S, LDA, dOs, LDV, NA, BV, C, p.scale, false);
            rec_sync();
            rec_st_tile(dU + rk * V + v0, (long long)H * V, cp.nval, nv, dVA, LDV, 1.f, false, p.vec,
                        dv0 ? dv0 + rk * V + v0 : nullptr);
            for (int l = 0; l < L; l++)
                rec_st_tile(dVX + rk * L * V + l * V + v0, (long long)H * L * V, cp.nval, nv, dVA + (C + l * C) * LDV,
                            LDV, 1.f, false, p.vec);
        }
        /* no barrier here: the next tile's loads overwrite only what the
         * products read, and the barrier after them precedes the next
         * product's writes to what the store reads */
    }
}

/* The scores kernel's wgmma form (sm_90a): C <= 64 tokens
 * (rows past C are zero) and no extra writes, K <= 128 (KB = 2 or 4
 * sub-tiles of 32 keys, zero past K), two warpgroups of 128 threads. The
 * mma.sync form spends half of its instructions on fragments, conversions
 * and the V loop's barriers; here a block makes one V tile of 64 columns
 * (MODE 0; two blocks an SM at K = 128) or 128 (MODE 1) in three products:
 *   MODE 0: S = Q K^T and P = Q h together, S masked in registers
 *           (D, beta), then O = scale (e^G o P + S Ua), stored from the sums;
 *   MODE 1: S^T = K Q^T, masked, then dU = scale S^T dO (+ dv0).
 * h, Ua and dO are copied transposed (rec_cpt), Q and K as they are; every
 * operand is rounded to TF32 in place by its copier. A warpgroup makes the
 * 32 score columns of its half and, after one barrier for the keys' room
 * (S reuses it), its half of the output columns. */
struct scores_wg_lay {
    int gates, QS, KS, SS, BT, VT, total;
};
__host__ __device__ static scores_wg_lay scores_wg_layout(int mode, int KB)
{
    rec_bump m; /* the gates (G, bt, eG) in 256 floats, then tiles of multiples of 1024: 1024-byte boundaries */
    scores_wg_lay s;
    s.gates = m.take(4 * 64);
    s.QS = m.take(KB * 64 * 32), s.KS = s.SS = m.take(KB * 64 * 32);
    s.BT = mode == 0 ? m.take(KB * 64 * 32) : -1;
    s.VT = m.take((mode == 0 ? 64 : 128) * 64);
    s.total = m.off;
    return s;
}
/* the sub-tiles of 32 keys the form runs at K (0: K > 128) */
static int scores_wg_kb(const rec_prob &p) { return p.Kp <= 64 ? 2 : p.Kp <= 128 ? 4 : 0; }
size_t pr_rec_smem_scores_wg(const rec_prob &p, int mode)
{
    const int kb = scores_wg_kb(p);
    return kb ? (size_t)scores_wg_layout(mode, kb).total * 4 : (size_t)-1;
}

/* IO16 (bf16 data): q read in place (p.q16), and MODE 0 writes o in place
 * (p.o16), MODE 1 reads dO and k in place (p.dout16, p.k16); MODE 0 reads
 * k (and v without beta) in place where p.k16 (p.v16) is set. bf16 is copied by cp.async
 * into the f32 tiles' slots and widened there by its copiers, so the tiles
 * hold the staged copies' values. */
template <int C, int MODE, int KB, bool IO16 = false>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    chunk_scores_wg_kernel(rec_prob p, const float *hs, const float *R, float *o, float *dU, const float *dv0,
                           const unsigned short *dv016)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    constexpr int NW = MODE == 0 ? 32 : 64, BV = 2 * NW, NR = NW / 2;
    const scores_wg_lay s = scores_wg_layout(MODE, KB);
    const int nvt = (p.V + BV - 1) / BV, c = blockIdx.x / nvt, v0 = blockIdx.x % nvt * BV, h = blockIdx.y;
    const int H = p.H, K = p.K, V = p.V, nv = min(BV, V - v0), wg = threadIdx.x >> 7;
    const int lane = threadIdx.x & 31, r0 = 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2), c0 = 2 * (lane & 3);
    float *G = sm + s.gates, *bt = G + 64, *eG = G + 128, *QS = sm + s.QS, *KS = sm + s.KS, *SS = sm + s.SS;
    float *VT = sm + s.VT;
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h;
    const int nval = cp.nval;
    const bool k16 = IO16 && (MODE == 1 || p.k16), v16 = IO16 && MODE == 0 && p.v16 && !p.delta; /* values: v, not R */

    for (int kb = 0; kb < KB; kb++) {
        if constexpr (!IO16)
            rec_ld_tile<true>(QS + kb * 2048, 32, 64, 32, p.q + rk * K + kb * 32, (long long)H * K, nval,
                              K - kb * 32, p.vec);
        else
            rec_ld_tile16<true>(QS + kb * 2048, 32, 64, 32, p.q16 + rk * K + kb * 32, (long long)H * K, nval,
                                K - kb * 32);
        if (k16)
            rec_ld_tile16<true>(KS + kb * 2048, 32, 64, 32, p.k16 + rk * K + kb * 32, (long long)H * K, nval,
                                K - kb * 32);
        else
            rec_ld_tile<true>(KS + kb * 2048, 32, 64, 32, p.k + rk * K + kb * 32, (long long)H * K, nval,
                              K - kb * 32, p.vec);
    }
    if constexpr (MODE == 0) {
        rec_cpt<KB * 32, 64>(sm + s.BT, 64, hs + ((long long)c * H + h) * K * V + v0, V, K, nv);
        if (v16) rec_cpt16<64, 64>(VT, 64, p.v16 + rk * V + v0, (long long)H * V, nval, nv);
        else rec_cpt<64, 64>(VT, 64, (p.delta ? R : p.v) + rk * V + v0, (long long)H * V, nval, nv);
    } else if constexpr (IO16) {
        rec_cpt16<64, BV>(VT, BV, p.dout16 + rk * V + v0, (long long)H * V, nval, nv);
    } else {
        rec_cpt<64, BV>(VT, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv);
    }
    rec_gates_issue<C, IO16>(p, cp.row0, nval, h, G, bt);
    rec_gates_pad64<C>(G);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    rec_gates_scan<C>(G, nval, eG);
    /* each thread rounds its own copies (bf16 ones widened first: exact in TF32) */
    for (int kb = 0; kb < KB; kb++) {
        rec_tf32_own<IO16>(QS + kb * 2048, 64);
        if (k16) rec_tf32_own<true>(KS + kb * 2048, 64);
        else rec_tf32_own(KS + kb * 2048, 64);
    }
    if constexpr (MODE == 0) {
        rec_cpt_own<KB * 32, 64>(sm + s.BT, 64, nullptr, 1.f);
        if (v16) rec_cpt_own<64, 64, true>(VT, 64, nullptr, 1.f);
        else rec_cpt_own<64, 64>(VT, 64, nullptr, 1.f);
    } else {
        rec_cpt_own<64, BV, IO16>(VT, BV, nullptr, p.scale);
    }
    rec_fence_async();
    __syncthreads();

    /* this warpgroup's 32 score columns (MODE 0: tokens i of S_ti; MODE 1:
     * tokens t of S^T_it), with Q h's columns beside them in MODE 0 */
    float sz[16], pz[MODE == 0 ? 16 : 1], oz[NR];
#pragma unroll
    for (int e = 0; e < 16; e++) sz[e] = 0.f;
#pragma unroll
    for (int e = 0; e < NR; e++) oz[e] = 0.f;
    rec_wg_fence();
    if constexpr (MODE == 0) {
#pragma unroll
        for (int e = 0; e < 16; e++) pz[e] = 0.f;
        rec_wg_rows<32, KB>(sz, QS, KS + wg * 32 * 32, 2048);
        rec_wg_rows<32, KB>(pz, QS, sm + s.BT + wg * 32 * 32, 2048);
    } else {
        rec_wg_rows<32, KB>(sz, KS, QS + wg * 32 * 32, 2048);
    }
    rec_wg_commit();
    rec_wg_wait();
    rec_wg_settle(sz);
    if constexpr (MODE == 0)
        rec_wg_settle(pz);
    __syncthreads(); /* both warpgroups are done with the keys: S takes their room */
    {
        float *sub = SS + wg * 2048; /* the 32 columns of this warpgroup are one sub-tile of k */
        const unsigned base = (unsigned)__cvta_generic_to_shared(sub);
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const int a = r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1), b = 32 * wg + j;
            const int t = MODE == 0 ? a : b, i = MODE == 0 ? b : a; /* S_ti, or S^T_it */
            float x = 0.f;
            if (i <= t && t < nval) x = sz[e] * expf(G[t] - G[i]) * (MODE == 0 && p.delta ? bt[i] : 1.f);
            sub[rec_sw128(base, a, j)] = __uint_as_float(rec_tf32(x));
        }
    }
    rec_fence_async();
    __syncthreads();
    rec_wg_fence();
    rec_wg_rows<NW, 2>(oz, SS, VT + wg * NW * 32, BV * 32);
    rec_wg_commit();
    rec_wg_wait();
    rec_wg_settle(oz);
    /* sums e and e + 1 are adjacent columns of one row */
#pragma unroll
    for (int e = 0; e < NR; e += 2) {
        const int a = r0 + 8 * (e >> 1 & 1), j = wg * NW + c0 + 8 * (e >> 2);
        if (a >= nval || j >= nv) continue;
        const long long at = (rk + (long long)a * H) * V + v0 + j;
        float2 y;
        if constexpr (MODE == 0) {
            const float f = eG[a];
            y = make_float2(p.scale * fmaf(f, pz[e], oz[e]), p.scale * fmaf(f, pz[e + 1], oz[e + 1]));
        } else {
            y = make_float2(oz[e], oz[e + 1]);
        }
        if constexpr (IO16 && MODE == 0) { /* the cast's rounding of the f32 sums (pr_bf16_bits) */
            if (dv0) { /* the extras' share of o (extras apart), added as the f32 form adds it */
                y.x += dv0[at];
                if (j + 1 < nv) y.y += dv0[at + 1];
            }
            if (j + 1 < nv)
                *reinterpret_cast<unsigned *>(p.o16 + at) =
                    (unsigned)pr_bf16_bits(y.x) | (unsigned)pr_bf16_bits(y.y) << 16;
            else
                p.o16[at] = pr_bf16_bits(y.x);
            continue;
        }
        if constexpr (IO16 && MODE == 1)
            if (dv016) { /* dv so far as bf16, in place (no beta, the plan's io16_dv): widened, as dv0 below */
                y.x += pr_bf16_lo(dv016[at]);
                if (j + 1 < nv) y.y += pr_bf16_lo(dv016[at + 1]);
            }
        if (dv0) { /* MODE 1: dv so far (no beta); MODE 0: the extras' output (extras apart) */
            y.x += dv0[at];
            if (j + 1 < nv) y.y += dv0[at + 1];
        }
        float *dst = MODE == 0 ? o + at : dU + at;
        if (p.vec) *reinterpret_cast<float2 *>(dst) = y;
        else {
            dst[0] = y.x;
            if (j + 1 < nv) dst[1] = y.y;
        }
    }
}

/* The scores kernel's bf16 form (sm_90a; the plan's bf_out and bf_dloc,
 * force.bf16_mma): the wgmma form's blocks, tiles and three products with
 * bf16 operands (m64nNk16, f32 sums) where its inputs are bf16 data read
 * in place (io16_kv for the output, io16_bwd for dlocal). q, k (rows as
 * they are) are bf16 already and come by cp.async; h (f32 states), Ua (bf16
 * v, or f32 R with beta) and dO are transposed through registers
 * (rec_wgth), rounded to bf16 where they are f32, and S is rounded to bf16
 * as the second product's operand: the roundings fla's kernels make. The
 * scale multiplies the f32 sums (not dO, as the TF32 form does), so it adds
 * no rounding. K <= 128 (KB = 1 or 2 sub-tiles of 64 keys). */
struct scores_bf_lay {
    int gates, QS, KS, BT, VT, total;
};
__host__ __device__ static scores_bf_lay scores_bf_layout(int mode, int KB)
{
    rec_bump m; /* the gates in 256 floats, then sub-tiles of 64 x 64 bf16 (2048 floats): 1024-byte boundaries */
    scores_bf_lay s;
    s.gates = m.take(4 * 64);
    s.QS = m.take(KB * 2048), s.KS = m.take(KB * 2048); /* S (64 x 64) takes the keys' room */
    s.BT = mode == 0 ? m.take(KB * 2048) : -1;
    s.VT = m.take((mode == 0 ? 64 : 128) * 32);
    s.total = m.off;
    return s;
}
static int scores_bf_kb(const rec_prob &p) { return p.Kp <= 64 ? 1 : p.Kp <= 128 ? 2 : 0; }
size_t pr_rec_smem_scores_bf(const rec_prob &p, int mode)
{
    const int kb = scores_bf_kb(p);
    return kb ? (size_t)scores_bf_layout(mode, kb).total * 4 : (size_t)-1;
}

template <int C, int MODE, int KB>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    chunk_scores_bf_kernel(rec_prob p, const float *hs, const float *R, float *dU, const float *dv0,
                           const unsigned short *dv016, bool c16)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    constexpr int NW = MODE == 0 ? 32 : 64, BV = 2 * NW, NR = NW / 2;
    const scores_bf_lay s = scores_bf_layout(MODE, KB);
    const int nvt = (p.V + BV - 1) / BV, c = blockIdx.x / nvt, v0 = blockIdx.x % nvt * BV, h = blockIdx.y;
    const int H = p.H, K = p.K, V = p.V, nv = min(BV, V - v0), wg = threadIdx.x >> 7;
    const int lane = threadIdx.x & 31, r0 = 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2), c0 = 2 * (lane & 3);
    float *G = sm + s.gates, *bt = G + 64, *eG = G + 128;
    unsigned short *QS = reinterpret_cast<unsigned short *>(sm + s.QS);
    unsigned short *KS = reinterpret_cast<unsigned short *>(sm + s.KS), *SS = KS;
    unsigned short *VT = reinterpret_cast<unsigned short *>(sm + s.VT);
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h;
    const int nval = cp.nval;

    rec_ld_tileh<64, KB>(QS, p.q16 + rk * K, (long long)H * K, nval, K, c16);
    rec_ld_tileh<64, KB>(KS, p.k16 + rk * K, (long long)H * K, nval, K, c16);
    if constexpr (MODE == 0) {
        unsigned short *BT = reinterpret_cast<unsigned short *>(sm + s.BT);
        rec_wgth<KB * 64, 64> th;
        rec_wgth<64, 64> tu;
        rec_wgth_issue(th, hs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        if (p.delta) rec_wgth_issue(tu, R + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        else rec_wgth_issue16(tu, p.v16 + rk * V + v0, (long long)H * V, nval, nv);
        rec_wgth_store(th, BT, 64);
        rec_wgth_store(tu, VT, 64);
    } else {
        rec_wgth<64, BV> td;
        rec_wgth_issue16(td, p.dout16 + rk * V + v0, (long long)H * V, nval, nv);
        rec_wgth_store(td, VT, BV);
    }
    rec_gates_issue<C, true>(p, cp.row0, nval, h, G, bt);
    rec_gates_pad64<C>(G);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    rec_gates_scan<C>(G, nval, eG);
    rec_fence_async();
    __syncthreads();

    /* this warpgroup's 32 score columns (MODE 0: tokens i of S_ti; MODE 1:
     * tokens t of S^T_it), with Q h's columns beside them in MODE 0 */
    float sz[16], pz[MODE == 0 ? 16 : 1], oz[NR];
    rec_wg_zero(sz);
    rec_wg_zero(oz);
    if constexpr (MODE == 0) rec_wg_zero(pz);
    rec_wg_fence();
    if constexpr (MODE == 0) {
        rec_wgh_rows<32, KB>(sz, QS, KS + wg * 32 * 64, 64 * 64);
        rec_wgh_rows<32, KB>(pz, QS, reinterpret_cast<unsigned short *>(sm + s.BT) + wg * 32 * 64, 64 * 64);
    } else {
        rec_wgh_rows<32, KB>(sz, KS, QS + wg * 32 * 64, 64 * 64);
    }
    rec_wg_commit();
    rec_wg_wait();
    rec_wg_settle(sz);
    if constexpr (MODE == 0) rec_wg_settle(pz);
    __syncthreads(); /* both warpgroups are done with the keys: S takes their room */
    {
        const unsigned base = (unsigned)__cvta_generic_to_shared(SS);
#pragma unroll
        for (int e = 0; e < 16; e += 2) { /* sums e, e + 1: columns b, b + 1 of row a */
            const int a = r0 + 8 * (e >> 1 & 1), b = 32 * wg + c0 + 8 * (e >> 2);
            float x[2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int t = MODE == 0 ? a : b + u, i = MODE == 0 ? b + u : a; /* S_ti, or S^T_it */
                x[u] = i <= t && t < nval ? sz[e + u] * expf(G[t] - G[i]) * (MODE == 0 && p.delta ? bt[i] : 1.f)
                                          : 0.f;
            }
            *reinterpret_cast<unsigned *>(SS + rec_sw128h(base, a, b)) = rec_bf16x2(x[0], x[1]);
        }
    }
    rec_fence_async();
    __syncthreads();
    rec_wg_fence();
    rec_wgh_rows<NW, 1>(oz, SS, VT + wg * NW * 64, 0);
    rec_wg_commit();
    rec_wg_wait();
    rec_wg_settle(oz);
    /* sums e and e + 1 are adjacent columns of one row */
#pragma unroll
    for (int e = 0; e < NR; e += 2) {
        const int a = r0 + 8 * (e >> 1 & 1), j = wg * NW + c0 + 8 * (e >> 2);
        if (a >= nval || j >= nv) continue;
        const long long at = (rk + (long long)a * H) * V + v0 + j;
        if constexpr (MODE == 0) {
            const float f = eG[a];
            const float y0 = p.scale * fmaf(f, pz[e], oz[e]), y1 = p.scale * fmaf(f, pz[e + 1], oz[e + 1]);
            if (j + 1 < nv)
                *reinterpret_cast<unsigned *>(p.o16 + at) =
                    (unsigned)pr_bf16_bits(y0) | (unsigned)pr_bf16_bits(y1) << 16;
            else
                p.o16[at] = pr_bf16_bits(y0);
        } else {
            float2 y = make_float2(p.scale * oz[e], p.scale * oz[e + 1]);
            if (dv016) { /* dv so far as bf16, in place (no beta, the plan's io16_dv) */
                y.x += pr_bf16_lo(dv016[at]);
                if (j + 1 < nv) y.y += pr_bf16_lo(dv016[at + 1]);
            }
            if (dv0) {
                y.x += dv0[at];
                if (j + 1 < nv) y.y += dv0[at + 1];
            }
            if (p.vec) *reinterpret_cast<float2 *>(dU + at) = y;
            else {
                dU[at] = y.x;
                if (j + 1 < nv) dU[at + 1] = y.y;
            }
        }
    }
}

/* ---- launchers --------------------------------------------------------------------- */
/* its bf16 form (pl.bf_out, pl.bf_dloc): the in-place inputs only */
template <int C, int MODE>
static void scores_bf_c(cudaStream_t st, const rec_prob &p, const float *hs, const float *R, float *dU,
                        const float *dv0, const unsigned short *dv016)
{
    const int kb = scores_bf_kb(p), bv = MODE == 0 ? 64 : 128;
    PR_ASSERT(kb && p.L == 0 && p.q16 && p.k16 && (MODE == 1 || (p.o16 && (p.delta || p.v16) && !dv0)) &&
              (MODE == 0 || p.dout16) && (!dv016 || (MODE == 1 && !dv0)) && p.K % 4 == 0 && p.V % 4 == 0);
    /* 16-byte copies of q and k where their rows allow them */
    const bool c16 = p.K % 8 == 0 && !((uintptr_t)p.q16 & 15) && !((uintptr_t)p.k16 & 15);
    const auto kernel = kb == 1 ? chunk_scores_bf_kernel<C, MODE, 1> : chunk_scores_bf_kernel<C, MODE, 2>;
    const size_t sm = pr_rec_smem_scores_bf(p, MODE);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3(p.nchunks * ((p.V + bv - 1) / bv), p.H), PR_REC_THREADS, sm, st>>>(p, hs, R, dU, dv0, dv016, c16);
    PR_CUDA_LAUNCH_CHECK();
}

/* the scores kernel's wgmma form (pl.wg_scores): MODE 0 the output, MODE 1 dlocal */
template <int C, int MODE>
static void scores_wg_c(cudaStream_t st, const rec_prob &p, const float *hs, const float *R, float *o, float *dU,
                        const float *dv0, const unsigned short *dv016 = nullptr, bool bf = false)
{
    if (bf) return scores_bf_c<C, MODE>(st, p, hs, R, dU, dv0, dv016);
    const int kb = scores_wg_kb(p), bv = MODE == 0 ? 64 : 128;
    /* in place: MODE 0 q and o (k, v where set); MODE 1 q, dO and k */
    const bool io16 = MODE == 0 ? p.q16 != nullptr : p.dout16 != nullptr;
    PR_ASSERT(kb && p.L == 0 && (!io16 || (p.q16 && (MODE == 1 || p.o16))) &&
              (!(p.k16 || p.v16 || p.dout16) || io16) && (MODE == 0 || !io16 || p.k16));
    const auto kernel = io16 ? (kb == 2 ? chunk_scores_wg_kernel<C, MODE, 2, true>
                                        : chunk_scores_wg_kernel<C, MODE, 4, true>)
                             : (kb == 2 ? chunk_scores_wg_kernel<C, MODE, 2> : chunk_scores_wg_kernel<C, MODE, 4>);
    const size_t sm = pr_rec_smem_scores_wg(p, MODE);
    pr_cuda_smem_prep((const void *)kernel, sm);
    PR_ASSERT(!dv016 || (MODE == 1 && io16 && !dv0));
    kernel<<<dim3(p.nchunks * ((p.V + bv - 1) / bv), p.H), PR_REC_THREADS, sm, st>>>(p, hs, R, o, dU, dv0, dv016);
    PR_CUDA_LAUNCH_CHECK();
}

/* the forward's last pass: O for every chunk (pl.wg_scores: the wgmma form);
 * p.q16 set: q and o in bf16, in place (pl.io16_out) */
template <int C>
static void chunk_output_c(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                           float *o)
{
    if (pl.wg_scores) {
        /* bf16 products where the plan has them and q, k (v) are read in place
         * (recurrence.cu stages tensors that are not 8-byte aligned) */
        const bool bf = pl.bf_out && p.q16 && p.k16 && (p.delta || p.v16);
        PR_ASSERT(!bf || pl.io16_kv);
        scores_wg_c<C, 0>(st, p, sv.hs, sv.R, o, nullptr, pl.xa ? o : nullptr, nullptr, bf);
    } else {
        PR_ASSERT(!p.k16 && !p.v16 && !pl.bf_out); /* the plan reads k and v in place in the wgmma form only */
        const size_t sm = pr_rec_smem_scores(p, 0, pl.bv_out);
        const bool bf = rec_bf_products(p);
        const auto kernel = p.q16 ? (bf ? chunk_scores_kernel<C, 0, true, true> : chunk_scores_kernel<C, 0, false, true>)
                                  : (bf ? chunk_scores_kernel<C, 0, true> : chunk_scores_kernel<C, 0, false>);
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, pl.bv_out, sv.hs, sv.R, o, nullptr, nullptr, nullptr);
        PR_CUDA_LAUNCH_CHECK();
    }
}

void pr_rec_chunk_output(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                         float *o)
{
    /* o in place: no f32 o, except the extras' share (extras apart), which the output adds */
    PR_ASSERT(!p.q16 == !p.o16 && (!p.q16 || (pl.io16_out && !p.q && (pl.xa ? o != nullptr : !o))));
    if (p.C == 64) chunk_output_c<64>(st, p, pl, sv, o);
    else chunk_output_c<32>(st, p, pl, sv, o);
}

/* the backward's first step (chunked.cu calls it): dU = scale S^T dO, dVX likewise */
void pr_rec_chunk_dlocal(cudaStream_t st, const rec_prob &p, int bv, float *dU, float *dVX, const float *dv0,
                         bool wg, const unsigned short *dv016, bool bf_wg)
{
    PR_ASSERT(!bf_wg || (wg && p.dout16)); /* bf16 products on the inputs read in place (the plan's bf_dloc) */
    if (wg) {
        if (p.C == 64) scores_wg_c<64, 1>(st, p, nullptr, nullptr, nullptr, dU, dv0, dv016, bf_wg);
        else scores_wg_c<32, 1>(st, p, nullptr, nullptr, nullptr, dU, dv0, dv016, bf_wg);
        return;
    }
    PR_ASSERT(!p.dout16 && !p.k16 && !dv016); /* the plan reads them in place in the wgmma form only */
    const size_t sm = pr_rec_smem_scores(p, 1, bv);
    const bool bf = rec_bf_products(p);
    const auto kernel = p.C == 64 ? (bf ? chunk_scores_kernel<64, 1, true> : chunk_scores_kernel<64, 1, false>)
                                  : (bf ? chunk_scores_kernel<32, 1, true> : chunk_scores_kernel<32, 1, false>);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, bv, nullptr, nullptr, nullptr, dU, dVX, dv0);
    PR_CUDA_LAUNCH_CHECK();
}
