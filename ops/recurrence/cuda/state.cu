/* ops/recurrence/cuda/state.cu: the chunked forward's serial pass, over a
 * sequence's chunks (parallel over heads and V tiles): the chunk-start
 * states hs, the residuals R = R0 - W h and
 *   h <- e^{G_last} h + Ka^T (e^{G_last - G} o Ua)
 * in its mma.sync form and its wgmma form (sm_90a, TF32, K <= 128), and
 * the pass over segments (segments.cu has the chain and the fix-up).
 * Notation: chunked.cu.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

/* ---- state ----------------------------------------------------------------------- */
struct state_lay {
    int G, bt, eG, eL, Hs, KA, Ws, RA, total;
};
__host__ __device__ static state_lay state_layout(const rec_prob &p, int BV)
{
    rec_bump m;
    state_lay s;
    const int C = p.C, NA = C * (1 + p.L), LDK = p.Kp + 4, LDV = BV + 4;
    s.G = m.take(C), s.bt = m.take(C), s.eG = m.take(C), s.eL = m.take(C);
    s.Hs = m.take(p.Kp * LDV), s.KA = m.take(NA * LDK);
    s.Ws = p.delta ? m.take(C * LDK) : -1;
    s.RA = m.take(NA * LDV);
    s.total = m.off;
    return s;
}
size_t pr_rec_smem_state(const rec_prob &p, int bv) { return (size_t)state_layout(p, bv).total * 4; }

template <int C, bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS) chunk_state_kernel(rec_prob p, int BV, rec_state_io io)
{
    extern __shared__ __align__(128) float sm[];
    const state_lay s = state_layout(p, BV);
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * BV, H = p.H, K = p.K, V = p.V, Kp = p.Kp;
    const int NA = C * (1 + p.L), LDK = Kp + 4, LDV = BV + 4, nv = min(BV, V - v0);
    float *G = sm + s.G, *bt = sm + s.bt, *eL = sm + s.eL, *Hs = sm + s.Hs, *KA = sm + s.KA, *Ws = sm + s.Ws;
    float *RA = sm + s.RA;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + v0;
    if (io.h0) rec_ld_tile(Hs, LDV, Kp, BV, io.h0 + hoff, V, K, nv, p.vec);
    else
        for (int e = threadIdx.x; e < Kp * LDV; e += blockDim.x) {
            const int i = e / LDV, j = e - i * LDV; /* identity columns v0.. */
            Hs[e] = io.ident && j < nv && i == v0 + j ? 1.f : 0.f;
        }
    const int nck = (sq.len + C - 1) / C;
    for (int ci = 0; ci < nck; ci++) {
        const int c = sq.cbase + ci, row0 = sq.bos + ci * C, nval = min(C, sq.len - ci * C);
        const long long rk = (long long)row0 * H + h;
        rec_sync();
        /* the copies first, then the state's store and the gates (warp 0's
         * gate loads would otherwise hold back its share of the copies) */
        chunk_ld_keys(p, KA, LDK, C, Kp, rk, nval, 0, K);
        if (io.ident)
            for (int e = threadIdx.x; e < NA * LDV; e += blockDim.x) RA[e] = 0.f;
        else chunk_ld_values(p, RA, LDV, C, BV, p.delta ? io.R0 : p.v, rk, nval, v0, nv);
        if (p.delta) rec_ld_tile(Ws, LDK, C, Kp, io.W + rk * K, (long long)H * K, nval, K, p.vec);
        if (io.hs) rec_st_tile(io.hs + ((long long)c * H + h) * K * V + v0, V, K, nv, Hs, LDV, 1.f, false, p.vec);
        rec_load_gates<C>(p, row0, nval, h, G, bt, sm + s.eG, eL);
        rec_sync();
        if (p.delta) { /* R = R0 - W h */
            rec_mm<false, false, BF>(p, RA, LDV, Ws, LDK, Hs, LDV, C, BV, Kp, -1.f, true);
            rec_sync();
        }
        /* R stored (delta rules) by the thread that then scales its element */
        const float eGl = expf(G[nval - 1]);
        float *Rg = p.delta && io.R ? io.R + rk * V + v0 : nullptr;
        REC_FOR2D(NA, BV, a, j) {
            const float x = RA[a * LDV + j];
            if (Rg && a < nval && j < nv) Rg[(long long)a * H * V + j] = x;
            RA[a * LDV + j] = x * (eL[a % C] * (a < C && p.delta ? bt[a] : 1.f));
        }
        REC_FOR2D(Kp, BV, i, j) Hs[i * LDV + j] *= eGl;
        rec_sync();
        rec_mm<true, false, BF>(p, Hs, LDV, KA, LDK, RA, LDV, Kp, BV, NA, 1.f, true);
    }
    rec_sync();
    if (io.ht) rec_st_tile(io.ht + hoff, V, K, nv, Hs, LDV, 1.f, false, p.vec);
}

/* ---- state, the wgmma form (sm_90a, TF32 products) -------------------------------
 * The pass above with the state in registers. Warpgroup wg holds columns
 * wg NW .. wg NW + NW - 1 of the block's V tile (BV = 2 NW) as wgmma sums,
 * the K rows in MP pieces of 64. Per chunk:
 *   R = R0 - W h                              (delta rules)
 *   h = e^{G_last} h + Ka^T (eL o Ua)         Ua = [beta o R (or V); VX]
 * TF32 wgmma reads both operands K-major from shared memory, so each tile
 * is stored as its product reads it: W as copied (rows padded to 64), -h^T
 * and (beta eL o R)^T from the sums, Ka^T and the values transposed from
 * their copies; every element rounded to TF32 (to nearest, as mma.sync's
 * fragments are) by the thread that stores it. The next chunk's keys,
 * values and W are copied (cp.async) and its R0 and gates loaded while
 * this chunk's state product runs; Ka^T takes h^T's room once the
 * residual's product is done, so at K = V = 128 two blocks share an SM.
 * The extras' rows (prism_core) load where they are used. The segmented
 * passes (io.ident) keep the form above. */
struct state_wg_lay {
    int W, HK, RAT, SK, SV, gates, total;
};
__host__ __device__ static state_wg_lay state_wg_layout(const rec_prob &p, int BV)
{
    rec_bump m; /* every tile a multiple of 1024 floats: each starts on a 1024-byte boundary */
    state_wg_lay s;
    const int C = p.C, NA = C * (1 + p.L), KW = (p.Kp + 63) / 64 * 64;
    s.W = p.delta ? m.take(64 * KW) : -1;
    /* h^T for the residual's product, then Ka^T for the state's (delta rules) */
    s.HK = m.take(p.delta && BV * KW > KW * NA ? BV * KW : KW * NA);
    s.RAT = m.take(BV * NA);
    s.SK = m.take(C * KW), s.SV = p.delta ? -1 : m.take(C * BV); /* the next chunk's keys and values, as copied */
    s.gates = m.take(4 * C);
    s.total = m.off;
    return s;
}
size_t pr_rec_smem_state_wg(const rec_prob &p, int bv)
{
    return bv == 32 || bv == 64 ? (size_t)state_wg_layout(p, bv).total * 4 : (size_t)-1;
}

/* a chunk's beta (0 past nval or without beta) and eL[t] = e^{G_last - G_t}, by warp 0 */
template <int C>
__device__ __forceinline__ void state_wg_gates(const rec_prob &p, int row0, int nval, int h, float *bt, float *eL)
{
    if (threadIdx.x >= 32) return;
    constexpr int E = C / 32;
    const int lane = threadIdx.x;
    float x[E], excl;
    const float incl = rec_gate_scan<C>(p, row0, nval, h, bt, x, excl);
    const float gl = __shfl_sync(PR_FULL_MASK, incl, 31); /* G is flat past nval */
#pragma unroll
    for (int e = 0; e < E; e++) eL[lane * E + e] = expf(gl - (excl + x[e]));
}

/* DELTA: p.delta, so each form holds only its registers; KV16: bf16 k (and
 * v without beta) read in place from p.k16, p.v16 (the plan's io16_kv; no
 * extras): 8-byte copies widened by their copiers after the wait */
template <int C, int NW, int MP, bool DELTA, bool KV16 = false>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    chunk_state_wg_kernel(rec_prob p, rec_state_io io)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    constexpr int BV = 2 * NW, NR = NW / 2, KW = 64 * MP; /* NR: a thread's sums in a piece of 64 rows */
    const state_wg_lay s = state_wg_layout(p, BV);
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * BV, H = p.H, K = p.K, V = p.V, L = p.L;
    const int nv = min(BV, V - v0), wg = threadIdx.x >> 7;
    const rec_wg_pos q = rec_wg_sums_of(NW); /* where a thread's sums sit (rec_wg_sums_ld) */
    const int r0 = q.r0, c0 = q.c0;
    float *W = sm + s.W, *HK = sm + s.HK, *RAT = sm + s.RAT, *SK = sm + s.SK, *SV = sm + s.SV;
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + v0;
    float hz[MP][NR], rz[NR];
    rec_wg_sums_ld(hz, q, io.h0 ? io.h0 + hoff : nullptr, V, K, nv);
    /* the state's sums stored at row stride V (global: hs, ht) */
    const auto store_h = [&](float *dst) {
#pragma unroll
        for (int m = 0; m < MP; m++)
#pragma unroll
            for (int e = 0; e < NR; e++) {
                const int k = 64 * m + r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
                if (k < K && j < nv) dst[(long long)k * V + j] = hz[m][e];
            }
    };
    /* chunk ci's loads, issued a chunk ahead: keys (and values without
     * beta) by cp.async as they are, W into its operand tile, R0 into the
     * residual's sums */
    const auto issue = [&](int ci) {
        const int nval = min(C, sq.len - ci * C);
        const long long rk = (long long)(sq.bos + ci * C) * H + h;
        for (int kb = 0; kb < KW / 32; kb++) {
            if constexpr (KV16)
                rec_ld_tile16<true>(SK + kb * C * 32, 32, C, 32, p.k16 + rk * K + kb * 32, (long long)H * K, nval,
                                     K - kb * 32);
            else
                rec_ld_tile<true>(SK + kb * C * 32, 32, C, 32, p.k + rk * K + kb * 32, (long long)H * K, nval,
                                  K - kb * 32, p.vec);
            if (DELTA)
                rec_ld_tile<true>(W + kb * 64 * 32, 32, 64, 32, io.W + rk * K + kb * 32, (long long)H * K, nval,
                                  K - kb * 32, p.vec);
        }
        if (!DELTA)
            for (int vb = 0; vb < BV / 32; vb++)
                if constexpr (KV16)
                    rec_ld_tile16<true>(SV + vb * C * 32, 32, C, 32, p.v16 + rk * V + v0 + vb * 32, (long long)H * V,
                                         nval, nv - vb * 32);
                else
                    rec_ld_tile<true>(SV + vb * C * 32, 32, C, 32, p.v + rk * V + v0 + vb * 32, (long long)H * V,
                                      nval, nv - vb * 32, p.vec);
        if (DELTA)
#pragma unroll
            for (int e = 0; e < NR; e++) {
                const int a = r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
                rz[e] = a < nval && j < nv ? io.R0[(rk + (long long)a * H) * V + v0 + j] : 0.f;
            }
    };
    /* Ka^T from the copied keys and the extras' keys (and values), loaded here */
    const auto keys_t = [&](long long rk, int nval, const float *eL) {
#pragma unroll
        for (int half = 0; half < 2; half++) { /* in halves of K: fewer registers at once */
            rec_wgt<C, KW / 2> x;
            rec_wgt_from_sw(x, SK + half * (KW / 64) * C * 32);
            rec_wgt_store(x, HK + half * (KW / 2) * 32, KW, 0, nullptr);
        }
        for (int l = 0; l < L; l++) {
            rec_wgt<C, KW> xx;
            rec_wgt_issue(xx, p.kx + rk * L * K + l * K, (long long)H * L * K, nval, K, p.vec);
            rec_wgt_store(xx, HK, KW, C + l * C, nullptr);
            rec_wgt<C, BV> xw;
            rec_wgt_issue(xw, p.vx + rk * L * V + l * V + v0, (long long)H * L * V, nval, nv, p.vec);
            rec_wgt_store(xw, RAT, BV, C + l * C, eL);
        }
    };
    const int nck = (sq.len + C - 1) / C;
    if (nck > 0) {
        state_wg_gates<C>(p, sq.bos, min(C, sq.len), h, sm + s.gates, sm + s.gates + C);
        issue(0);
    }
    for (int ci = 0; ci < nck; ci++) {
        const int c = sq.cbase + ci, row0 = sq.bos + ci * C, nval = min(C, sq.len - ci * C);
        const long long rk = (long long)row0 * H + h;
        const float *bt = sm + s.gates + (ci & 1) * 2 * C, *eL = bt + C;
        const bool next = ci + 1 < nck;
        /* this chunk's copies landed (W rounded by its copiers), every
         * product of the last chunk was waited for, this chunk's gates are in */
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        if (DELTA)
            for (int kb = 0; kb < KW / 32; kb++) rec_tf32_own(W + kb * 64 * 32, 64);
        if constexpr (KV16) { /* the bf16 keys (and values) widened in place by their copiers */
            for (int kb = 0; kb < KW / 32; kb++) rec_widen_own<true>(SK + kb * C * 32, 32, C, 32);
            if (!DELTA)
                for (int vb = 0; vb < BV / 32; vb++) rec_widen_own<true>(SV + vb * C * 32, 32, C, 32);
        }
        __syncthreads();
        if (DELTA) { /* -h^T (this warpgroup's columns): the product then gives R = R0 - W h */
#pragma unroll
            for (int m = 0; m < MP; m++)
#pragma unroll
                for (int e = 0; e < NR; e++) {
                    const int k = 64 * m + r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
                    float *sub = HK + (k >> 5) * BV * 32;
                    sub[rec_sw128((unsigned)__cvta_generic_to_shared(sub), j, k & 31)] =
                        __uint_as_float(rec_tf32(-hz[m][e]));
                }
        } else {
            keys_t(rk, nval, eL);
            rec_wgt<C, BV> x;
            rec_wgt_from_sw(x, SV);
            rec_wgt_store(x, RAT, BV, 0, eL);
        }
        if (io.hs) store_h(io.hs + ((long long)c * H + h) * K * V + v0);
        /* this chunk's E (extras apart) into L2 for the update */
        const float *E = !io.elast ? nullptr : next ? io.hs + ((long long)(c + 1) * H + h) * K * V + v0 : io.elast + hoff;
        if (E)
#pragma unroll
            for (int m = 0; m < MP; m++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int k = 64 * m + r0 + 8 * half;
                    if (k < K && c0 < nv) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(E + (long long)k * V + c0));
                }
        if (next) {
            float *nb = sm + s.gates + ((ci + 1) & 1) * 2 * C;
            state_wg_gates<C>(p, row0 + C, min(C, sq.len - (ci + 1) * C), h, nb, nb + C);
        }
        rec_fence_async();
        __syncthreads();
        if (DELTA) { /* R = R0 - W h, then (beta eL o R)^T and Ka^T for the state's product */
            rec_wg_fence();
            rec_wg_rows<NW, 2 * MP>(rz, W, HK + wg * NW * 32, BV * 32); /* K padded to 64 MP */
            rec_wg_commit();
            rec_wg_wait();
            rec_wg_settle(rz);
#pragma unroll
            for (int e = 0; e < NR; e++) {
                const int a = r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
                if (a >= C) continue;
                if (io.R && a < nval && j < nv) io.R[(rk + (long long)a * H) * V + v0 + j] = rz[e];
                float *sub = RAT + (a >> 5) * BV * 32;
                sub[rec_sw128((unsigned)__cvta_generic_to_shared(sub), j, a & 31)] =
                    __uint_as_float(rec_tf32(rz[e] * (eL[a] * bt[a])));
            }
            __syncthreads(); /* both warpgroups are done with W and h^T */
            keys_t(rk, nval, eL);
            rec_fence_async();
            __syncthreads();
        }
        if (next) issue(ci + 1); /* the copies' buffers are read no more this chunk */
        /* e^{G_last} = eL[0] e^{g_0}: the gates keep no room for it (at BV = 64 two blocks fill an SM) */
        const float dec = eL[0] * (p.has_g ? expf(p.g[rk]) : 1.f);
#pragma unroll
        for (int m = 0; m < MP; m++)
#pragma unroll
            for (int e = 0; e < NR; e++) {
                const int k = 64 * m + r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2) + (e & 1);
                hz[m][e] = fmaf(hz[m][e], dec, E && k < K && j < nv ? E[(long long)k * V + j] : 0.f);
            }
        /* a stage for each C rows of Ka */
        for (int l = 0; l <= L; l++) {
            rec_wg_fence();
            rec_wg_cols<NW, MP, C / 32>(hz, HK + l * (C / 32) * KW * 32, RAT + l * (C / 32) * BV * 32 + wg * NW * 32,
                                        BV * 32);
            rec_wg_commit();
            rec_wg_wait();
#pragma unroll
            for (int m = 0; m < MP; m++)
                rec_wg_settle(hz[m]);
        }
    }
    if (io.ht) store_h(io.ht + hoff);
}

/* ---- launchers --------------------------------------------------------------------- */

template <int C> static void chunk_state_c(cudaStream_t st, const rec_prob &p, int bv, const rec_state_io &io)
{
    PR_ASSERT(!p.k16 && !p.v16); /* the plan reads k and v in place in the wgmma form only */
    const size_t sm = pr_rec_smem_state(p, bv);
    const auto kernel = rec_bf_products(p) ? chunk_state_kernel<C, true> : chunk_state_kernel<C, false>;
    pr_cuda_smem_prep((const void *)kernel, sm);
    const dim3 grid((p.V + bv - 1) / bv, p.H, p.N);
    kernel<<<grid, PR_REC_THREADS, sm, st>>>(p, bv, io);
    PR_CUDA_LAUNCH_CHECK();
}
template <int C, int NW, bool KV16>
static auto state_wg_kv(int mp, bool delta) -> decltype(&chunk_state_wg_kernel<C, NW, 1, true>)
{
    if (delta)
        return mp == 1 ? chunk_state_wg_kernel<C, NW, 1, true, KV16> : chunk_state_wg_kernel<C, NW, 2, true, KV16>;
    return mp == 1 ? chunk_state_wg_kernel<C, NW, 1, false, KV16> : chunk_state_wg_kernel<C, NW, 2, false, KV16>;
}
/* bf16 k and v in place where p.k16 is set (then p.v16 too, or beta: no values read) */
template <int C, int NW>
static auto state_wg_for(const rec_prob &p, int mp) -> decltype(&chunk_state_wg_kernel<C, NW, 1, true>)
{
    return p.k16 ? state_wg_kv<C, NW, true>(mp, p.delta) : state_wg_kv<C, NW, false>(mp, p.delta);
}
template <int C> static void chunk_state_wg(cudaStream_t st, const rec_prob &p, int bv, const rec_state_io &io)
{
    PR_ASSERT(!io.ident && p.Kp <= 128 && (bv == 32 || bv == 64) && (!io.elast || (io.hs && p.L == 0)) &&
              (!p.k16 || ((p.v16 || p.delta) && p.L == 0))); /* with beta the values are R0 (f32) */
    const int mp = (p.Kp + 63) / 64;
    const auto kernel = bv == 32 ? state_wg_for<C, 16>(p, mp) : state_wg_for<C, 32>(p, mp);
    const size_t sm = pr_rec_smem_state_wg(p, bv);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3((p.V + bv - 1) / bv, p.H, p.N), PR_REC_THREADS, sm, st>>>(p, io);
    PR_CUDA_LAUNCH_CHECK();
}

void pr_rec_chunk_state(cudaStream_t st, const rec_prob &p, int bv, const rec_state_io &io, bool wg)
{
    if (wg) {
        if (p.C == 64) chunk_state_wg<64>(st, p, bv, io);
        else chunk_state_wg<32>(st, p, bv, io);
        return;
    }
    if (p.C == 64) chunk_state_c<64>(st, p, bv, io);
    else chunk_state_c<32>(st, p, bv, io);
}

/* The state pass over segments (recurrence_cuda.cuh, rec_segs): every
 * segment from zero (its ends E), for the delta rules every segment from the
 * identity with zero values (its transitions A, kept for the backward), the
 * chain (each segment's start, and ht), then the real states. Three passes:
 * a last pass from those starts stores hs and R. Two (pl.seg_fix): the pass
 * from zero already stored hs and R for a zero start and the identity pass
 * the per-chunk transitions P_c (nchunks x H x K x K scratch), and the
 * chunk-parallel fix-up adds each start's share (without beta there is no
 * identity pass and P_c is a scalar: one serial pass in all). */
void pr_rec_chunk_state_segmented(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl,
                                  const rec_chunk_saved &sv, float *ht)
{
    const rec_prob ps = pr_rec_seg_prob(p, sv.sg);
    const int bv = pl.bv_state;
    const bool fix = pl.seg_fix != 0;
    const size_t n_e = (size_t)sv.sg.n * p.H * p.K * p.V;
    const size_t n_p = fix && p.delta ? (size_t)p.nchunks * p.H * p.K * p.K : 0;
    float *E = rec_scratch(n_e), *starts = rec_scratch(n_e), *trans = n_p ? rec_scratch(n_p) : nullptr;
    const rec_state_io ends = {fix ? sv.hs : nullptr, fix ? sv.R : nullptr, E, sv.W, sv.R0, nullptr, 0, nullptr};
    pr_rec_chunk_state(st, ps, bv, ends);
    if (p.delta) {
        /* the state has K columns; the transitions do not depend on prism_core's
         * extra writes (they only add to the writes, and this pass writes
         * nothing), so its chunks hold the C base keys only (L = 0) */
        rec_prob pa = ps;
        pa.V = p.K, pa.Vp = p.Kp, pa.L = 0;
        const rec_state_io ident = {trans, nullptr, sv.sg.A, sv.W, nullptr, nullptr, 1, nullptr};
        pr_rec_chunk_state(st, pa, bv, ident);
    }
    pr_rec_seg_chain(st, p, sv.sg, false, p.h0, E, starts, ht, false);
    if (fix) {
        pr_rec_seg_fix(st, p, sv.sg, pl.bv_fix, trans, starts, sv.hs, sv.R, sv.W);
    } else {
        const rec_state_io real = {sv.hs, sv.R, nullptr, sv.W, sv.R0, starts, 0, nullptr};
        pr_rec_chunk_state(st, ps, bv, real);
    }
    rec_scratch_free(E, n_e);
    rec_scratch_free(starts, n_e);
    if (trans) rec_scratch_free(trans, n_p);
}
