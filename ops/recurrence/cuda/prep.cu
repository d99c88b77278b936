/* ops/recurrence/cuda/prep.cu: the chunked forward's first pass (delta
 * rules only), every chunk at once: the chunk's WY form
 *   B = strict(D o K K^T), T' = (I + B diag(beta))^-1,
 *   W = T' (e^G o K), R0 = T' (V - strict(D o K KX^T) VX)
 * in its mma.sync form and its wgmma form (sm_90a, TF32, K and V <= 128, no
 * extras). Notation: chunked.cu.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

/* ---- prep ------------------------------------------------------------------------ */
struct prep_lay {
    int G, bt, eG, eL, Ks, Xs, Bs, Ts, Mx, Vt, VXt, Rt, total;
};
__host__ __device__ static prep_lay prep_layout(const rec_prob &p, int BV)
{
    rec_bump m;
    prep_lay s;
    const int C = p.C, LDK = p.Kp + 4, LDC = C + 4, LDV = BV + 4, LDX = C * p.L + 4;
    s.G = m.take(C), s.bt = m.take(C), s.eG = m.take(C), s.eL = m.take(C);
    s.Ks = m.take(C * LDK), s.Bs = m.take(C * LDC), s.Ts = m.take(C * LDC);
    s.Mx = p.L ? m.take(C * LDX) : -1;
    const int region = m.off; /* the extras' keys and W, then the V tiles */
    s.Xs = m.take(C * LDK);
    const int end1 = m.off;
    m.off = region;
    s.Vt = m.take(C * LDV), s.VXt = p.L ? m.take(C * LDV) : -1, s.Rt = m.take(C * LDV);
    s.total = m.off > end1 ? m.off : end1;
    return s;
}
size_t pr_rec_smem_prep(const rec_prob &p, int bv) { return (size_t)prep_layout(p, bv).total * 4; }

/* column j of T' = (I + M)^-1 for M strictly lower (row t: M[t*ld + i]):
 * x_t = [t == j] - sum_{i<t} M_ti x_i, in registers; four partial sums;
 * put(t, x_t) stores each */
template <int C, class PUT> __device__ __forceinline__ void prep_solve(const float *M, int ld, int j, PUT put)
{
    float x[C];
#pragma unroll
    for (int t = 0; t < C; t++) {
        const float *row = M + t * ld;
        float s0 = t == j ? 1.f : 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
        for (int i = 0; i + 3 < t; i += 4) {
            s0 = fmaf(-row[i], x[i], s0);
            s1 = fmaf(-row[i + 1], x[i + 1], s1);
            s2 = fmaf(-row[i + 2], x[i + 2], s2);
            s3 = fmaf(-row[i + 3], x[i + 3], s3);
        }
#pragma unroll
        for (int i = t & ~3; i < t; i++) s0 = fmaf(-row[i], x[i], s0);
        x[t] = (s0 + s1) + (s2 + s3);
        put(t, x[t]);
    }
}

template <int C, bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS, 2) chunk_prep_kernel(rec_prob p, int BV, float *Tinv, float *Wp, float *R0)
{
    extern __shared__ __align__(128) float sm[];
    const prep_lay s = prep_layout(p, BV);
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, L = p.L, Kp = p.Kp;
    const int LDK = Kp + 4, LDC = C + 4, LDV = BV + 4, LDX = C * L + 4;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h;
    float *G = sm + s.G, *bt = sm + s.bt, *eG = sm + s.eG, *Ks = sm + s.Ks, *Xs = sm + s.Xs, *Bs = sm + s.Bs;
    float *Ts = sm + s.Ts, *Mx = sm + s.Mx, *Vt = sm + s.Vt, *VXt = sm + s.VXt, *Rt = sm + s.Rt;

    rec_ld_tile(Ks, LDK, C, Kp, p.k + rk * K, (long long)H * K, cp.nval, K, p.vec);
    rec_gates_issue<C>(p, cp.row0, cp.nval, h, G, bt);
    rec_sync();
    rec_mm<false, true, BF>(p, Bs, LDC, Ks, LDK, Ks, LDK, C, C, Kp, 1.f, false);
    rec_gates_scan<C>(G, cp.nval, eG, sm + s.eL); /* warp 0, after its share of the product */
    rec_sync();
    REC_FOR2D(C, C, t, i) Bs[t * LDC + i] = i < t ? Bs[t * LDC + i] * expf(G[t] - G[i]) * bt[i] : 0.f;
    rec_sync();
    /* warps 0-1 solve for T' while the others start on the extras */
    if (threadIdx.x < C) prep_solve<C>(Bs, LDC, threadIdx.x, [&](int t, float x) { Ts[t * LDC + threadIdx.x] = x; });
    for (int l = 0; l < L; l++) {
        rec_ld_tile(Xs, LDK, C, Kp, p.kx + rk * L * K + l * K, (long long)H * L * K, cp.nval, K, p.vec);
        rec_sync();
        rec_mm<false, true, BF>(p, Mx + l * C, LDX, Ks, LDK, Xs, LDK, C, C, Kp, 1.f, false);
        rec_sync();
    }
    if (L) REC_FOR2D(C, C, t, i) {
            const float d = i < t ? expf(G[t] - G[i]) : 0.f;
            for (int l = 0; l < L; l++) Mx[t * LDX + l * C + i] *= d;
        }
    REC_FOR2D(C, Kp, t, i) Ks[t * LDK + i] *= eG[t];
    rec_sync();
    rec_mm<false, false, BF>(p, Xs, LDK, Ts, LDC, Ks, LDK, C, Kp, C, 1.f, false); /* W = T' (e^G o K) */
    rec_sync();
    if (Tinv) rec_st_tile(Tinv + ((long long)c * H + h) * C * C, C, C, C, Ts, LDC, 1.f, false, true); /* backward only */
    rec_st_tile(Wp + rk * K, (long long)H * K, cp.nval, K, Xs, LDK, 1.f, false, p.vec);
    rec_sync(); /* the V tiles overwrite Xs */
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        rec_ld_tile(Vt, LDV, C, BV, p.v + rk * V + v0, (long long)H * V, cp.nval, nv, p.vec);
        for (int l = 0; l < L; l++) {
            rec_sync();
            rec_ld_tile(VXt, LDV, C, BV, p.vx + rk * L * V + l * V + v0, (long long)H * L * V, cp.nval, nv, p.vec);
            rec_sync();
            rec_mm<false, false, BF>(p, Vt, LDV, Mx + l * C, LDX, VXt, LDV, C, BV, C, -1.f, true);
        }
        rec_sync();
        rec_mm<false, false, BF>(p, Rt, LDV, Ts, LDC, Vt, LDV, C, BV, C, 1.f, false); /* R0 = T' (V - Mx VX) */
        rec_sync();
        rec_st_tile(R0 + rk * V + v0, (long long)H * V, cp.nval, nv, Rt, LDV, 1.f, false, p.vec);
    }
}

/* prep's wgmma form (sm_90a): TF32 delta rules without
 * extras, K and V <= 128. Two warpgroups, each on half of a product's columns:
 * B = K K^T from one swizzled K tile (A and B alike, as the scores' Q K^T),
 * masked in registers into Bs (plain f32, leading dim 65) for the solve;
 * T' then goes to Tinv and, rounded, swizzled as the A operand of W = T'
 * (e^G o K) (B: K^T, scaled by e^G as it is rounded) and R0 = T' V (B: V^T,
 * in the K tile's room); W and R0 go to global memory from the registers.
 * One V tile: a loop over several kept the next tile's copies' addresses
 * live across it, and ptxas spilled. Layout (floats, tiles 1024-byte aligned): gates (G,
 * bt, eG), the K tile (then V^T), K^T, T'^T's A copy, Bs. */
enum { PRW_KS = 256, PRW_KT = PRW_KS + 8192 };
__host__ __device__ constexpr int prw_ts(int kb) { return PRW_KT + kb * 2048; }
__host__ __device__ constexpr int prw_bs(int kb) { return prw_ts(kb) + 4096; }
static size_t prep_wg_smem(int kb) { return (size_t)(prw_bs(kb) + 64 * 65) * 4; }
size_t pr_rec_smem_prep_wg(const rec_prob &p) { return prep_wg_smem(p.Kp <= 64 ? 2 : 4); }

/* KV16: bf16 k and v read in place (p.k16, p.v16; the plan's io16_kv),
 * copied into the f32 tiles' slots and widened by their copiers; v as f32
 * where p.v16 is not set (the extras apart: the core's values are V') */
template <int C, int KB, bool KV16 = false>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    chunk_prep_wg_kernel(rec_prob p, float *Tinv, float *Wp, float *R0)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    constexpr int NW = KB * 16; /* W's columns a warpgroup */
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, wg = threadIdx.x >> 7;
    const int lane = threadIdx.x & 31, r0 = 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2), c0 = 2 * (lane & 3);
    float *G = sm, *bt = G + 64, *eG = G + 128, *KS = sm + PRW_KS, *KT = sm + PRW_KT, *Tw = sm + prw_ts(KB);
    float *Bs = sm + prw_bs(KB);
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int nval = cp.nval;
    const long long rk = (long long)cp.row0 * H + h, HK = (long long)H * K, HV = (long long)H * V;

    for (int kb = 0; kb < KB; kb++)
        if constexpr (KV16)
            rec_ld_tile16<true>(KS + kb * 2048, 32, 64, 32, p.k16 + rk * K + kb * 32, HK, nval, K - kb * 32);
        else
            rec_ld_tile<true>(KS + kb * 2048, 32, 64, 32, p.k + rk * K + kb * 32, HK, nval, K - kb * 32, p.vec);
    if constexpr (KV16) rec_cpt16<64, KB * 32>(KT, KB * 32, p.k16 + rk * K, HK, nval, K);
    else rec_cpt<64, KB * 32>(KT, KB * 32, p.k + rk * K, HK, nval, K);
    rec_gates_issue<C, KV16>(p, cp.row0, nval, h, G, bt);
    rec_gates_pad64<C>(G);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    rec_gates_scan<C>(G, nval, eG);
    for (int kb = 0; kb < KB; kb++) rec_tf32_own<KV16>(KS + kb * 2048, 64);
    rec_fence_async();
    __syncthreads();
    {
        float bz[16];
#pragma unroll
        for (int e = 0; e < 16; e++) bz[e] = 0.f;
        rec_wg_fence();
        rec_wg_rows<32, KB>(bz, KS, KS + wg * 32 * 32, 2048);
        rec_wg_commit();
        rec_wg_wait();
        rec_wg_settle(bz);
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const int t = r0 + 8 * (e >> 1 & 1), i = 32 * wg + c0 + 8 * (e >> 2) + (e & 1);
            Bs[t * 65 + i] = i < t && t < C ? bz[e] * expf(G[t] - G[i]) * bt[i] : 0.f;
        }
    }
    rec_cpt_own<64, KB * 32, KV16>(KT, KB * 32, eG, 1.f);
    __syncthreads(); /* Bs complete; the K tile's room takes V^T */
    const bool v16 = KV16 && p.v16;
    if (v16) rec_cpt16<64, 128>(KS, 128, p.v16 + rk * V, HV, nval, V);
    else rec_cpt<64, 128>(KS, 128, p.v + rk * V, HV, nval, V);
    /* T' column j by thread j, its rows t >= j stored transposed into Bs's
     * upper triangle (the solve reads only the strictly lower one) */
    if (threadIdx.x < C)
        prep_solve<C>(Bs, 65, threadIdx.x, [&](int t, float x) {
            if (t >= (int)threadIdx.x) Bs[threadIdx.x * 65 + t] = x;
        });
    __syncthreads();
    {
        float *tinv = Tinv ? Tinv + ((long long)c * H + h) * C * C : nullptr; /* backward only */
        const unsigned base = (unsigned)__cvta_generic_to_shared(Tw);
        for (int i = threadIdx.x; i < 64 * 64; i += PR_REC_THREADS) {
            const int t = i >> 6, j = i & 63;
            const float x = j <= t && t < C ? Bs[j * 65 + t] : 0.f;
            Tw[(j >> 5) * 2048 + rec_sw128(base + (j >> 5) * 8192, t, j & 31)] = __uint_as_float(rec_tf32(x));
            if (tinv && t < C && j < C) tinv[t * C + j] = x;
        }
    }
    rec_fence_async();
    __syncthreads();
    {
        float wz[NW / 2]; /* W = T' (e^G o K) */
#pragma unroll
        for (int e = 0; e < NW / 2; e++) wz[e] = 0.f;
        rec_wg_fence();
        rec_wg_rows<NW, 2>(wz, Tw, KT + wg * NW * 32, KB * 32 * 32);
        rec_wg_commit();
        rec_wg_wait();
        rec_wg_settle(wz);
        rec_wg_sums_st(Wp + rk * K, HK, wz, r0, wg * NW + c0, nval, K, p.vec);
    }
    /* R0 = T' V, V <= 128: one tile */
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    if (v16) rec_cpt_own<64, 128, true>(KS, 128, nullptr, 1.f);
    else rec_cpt_own<64, 128>(KS, 128, nullptr, 1.f);
    rec_fence_async();
    __syncthreads();
    float rz[32];
#pragma unroll
    for (int e = 0; e < 32; e++) rz[e] = 0.f;
    rec_wg_fence();
    rec_wg_rows<64, 2>(rz, Tw, KS + wg * 64 * 32, 128 * 32);
    rec_wg_commit();
    rec_wg_wait();
    rec_wg_settle(rz);
    rec_wg_sums_st(R0 + rk * V, HV, rz, r0, wg * 64 + c0, nval, V, p.vec);
}

/* prep's bf16 form (sm_90a; the plan's bf_prep, force.bf16_mma): the
 * wgmma form's steps with bf16 tiles and bf16 wgmma (m64nNk16, f32 sums)
 * where the forward reads k and v in place (io16_kv). K K^T from the bf16
 * K tile as it is; the solve in f32 (Bs) as before, and T' (Tinv, f32)
 * saved unrounded; T' rounded to bf16 as the A operand of W = T' (e^G o
 * K) and R0 = T' V, whose B operands (e^G o K)^T and V^T come through
 * registers (rec_wgth; e^G o K rounded to bf16 once scaled): fla's
 * roundings of A, w and u's operands. Layout (floats, tiles 1024-byte
 * aligned): gates (G, bt, eG), the K tile (KB sub-tiles of 64 x 64 bf16),
 * (e^G o K)^T (64 KB rows), V^T (128 rows), T' (64 x 64), Bs (64 x 65 f32). */
struct prep_bf_lay {
    int KS, KT, VT, TW, BS, total;
};
__host__ __device__ static prep_bf_lay prep_bf_layout(int KB)
{
    rec_bump m;
    prep_bf_lay s;
    m.take(4 * 64);
    s.KS = m.take(KB * 2048), s.KT = m.take(KB * 2048), s.VT = m.take(4096), s.TW = m.take(2048);
    s.BS = m.take(64 * 65);
    s.total = m.off;
    return s;
}
static int prep_bf_kb(const rec_prob &p) { return p.Kp <= 64 ? 1 : 2; }
size_t pr_rec_smem_prep_bf(const rec_prob &p) { return (size_t)prep_bf_layout(prep_bf_kb(p)).total * 4; }

template <int C, int KB>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    chunk_prep_bf_kernel(rec_prob p, float *Tinv, float *Wp, float *R0, bool c16)
{
    extern __shared__ __align__(128) float sm[]; /* 1024-byte aligned in fact: checked below */
    constexpr int NW = KB * 32; /* W's columns a warpgroup */
    const prep_bf_lay s = prep_bf_layout(KB);
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, wg = threadIdx.x >> 7;
    const int lane = threadIdx.x & 31, r0 = 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2), c0 = 2 * (lane & 3);
    float *G = sm, *bt = G + 64, *eG = G + 128, *Bs = sm + s.BS;
    unsigned short *KS = reinterpret_cast<unsigned short *>(sm + s.KS), *KT = reinterpret_cast<unsigned short *>(sm + s.KT);
    unsigned short *VT = reinterpret_cast<unsigned short *>(sm + s.VT), *Tw = reinterpret_cast<unsigned short *>(sm + s.TW);
    if ((unsigned)__cvta_generic_to_shared(sm) & 1023) __trap(); /* the swizzle needs it */
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int nval = cp.nval;
    const long long rk = (long long)cp.row0 * H + h, HK = (long long)H * K, HV = (long long)H * V;

    rec_ld_tileh<64, KB>(KS, p.k16 + rk * K, HK, nval, K, c16);
    {   /* (e^G o K)^T and V^T: every load in flight before the gates' scan, stored once eG is in */
        rec_wgth<64, KB * 64> tk;
        rec_wgth<64, 128> tv;
        rec_wgth_issue16(tk, p.k16 + rk * K, HK, nval, K);
        rec_wgth_issue16(tv, p.v16 + rk * V, HV, nval, V);
        rec_gates_issue<C, true>(p, cp.row0, nval, h, G, bt);
        rec_gates_pad64<C>(G);
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        rec_gates_scan<C>(G, nval, eG);
        __syncthreads();
        rec_wgth_store(tk, KT, KB * 64, eG);
        rec_wgth_store(tv, VT, 128);
    }
    rec_fence_async();
    __syncthreads();
    {
        float bz[16];
        rec_wg_zero(bz);
        rec_wg_fence();
        rec_wgh_rows<32, KB>(bz, KS, KS + wg * 32 * 64, 64 * 64);
        rec_wg_commit();
        rec_wg_wait();
        rec_wg_settle(bz);
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const int t = r0 + 8 * (e >> 1 & 1), i = 32 * wg + c0 + 8 * (e >> 2) + (e & 1);
            Bs[t * 65 + i] = i < t && t < C ? bz[e] * expf(G[t] - G[i]) * bt[i] : 0.f;
        }
    }
    __syncthreads(); /* Bs complete */
    /* T' column j by thread j, its rows t >= j stored transposed into Bs's
     * upper triangle (the solve reads only the strictly lower one) */
    if (threadIdx.x < C)
        prep_solve<C>(Bs, 65, threadIdx.x, [&](int t, float x) {
            if (t >= (int)threadIdx.x) Bs[threadIdx.x * 65 + t] = x;
        });
    __syncthreads();
    {
        float *tinv = Tinv ? Tinv + ((long long)c * H + h) * C * C : nullptr; /* backward only */
        const unsigned base = (unsigned)__cvta_generic_to_shared(Tw);
        for (int i = threadIdx.x; i < 64 * 32; i += PR_REC_THREADS) { /* a bf16 pair a thread: j, j + 1 of row t */
            const int t = i >> 5, j = 2 * (i & 31);
            const float x0 = j <= t && t < C ? Bs[j * 65 + t] : 0.f, x1 = j + 1 <= t && t < C ? Bs[(j + 1) * 65 + t] : 0.f;
            *reinterpret_cast<unsigned *>(Tw + rec_sw128h(base, t, j)) = rec_bf16x2(x0, x1);
            if (tinv && t < C && j < C) tinv[t * C + j] = x0, tinv[t * C + j + 1] = x1;
        }
    }
    rec_fence_async();
    __syncthreads();
    {
        float wz[NW / 2]; /* W = T' (e^G o K) */
        rec_wg_zero(wz);
        rec_wg_fence();
        rec_wgh_rows<NW, 1>(wz, Tw, KT + wg * NW * 64, 0);
        rec_wg_commit();
        rec_wg_wait();
        rec_wg_settle(wz);
        rec_wg_sums_st(Wp + rk * K, HK, wz, r0, wg * NW + c0, nval, K, p.vec);
    }
    float rz[32]; /* R0 = T' V, V <= 128: one tile */
    rec_wg_zero(rz);
    rec_wg_fence();
    rec_wgh_rows<64, 1>(rz, Tw, VT + wg * 64 * 64, 0);
    rec_wg_commit();
    rec_wg_wait();
    rec_wg_settle(rz);
    rec_wg_sums_st(R0 + rk * V, HV, rz, r0, wg * 64 + c0, nval, V, p.vec);
}

/* ---- launcher --------------------------------------------------------------------- */
template <int C>
static void chunk_prep_c(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv)
{
    if (pl.bf_prep && p.k16 && p.v16) { /* bf16 products where k and v are read in place */
        PR_ASSERT(pl.wg_prep && p.L == 0 && p.K <= 128 && p.V <= 128 && p.K % 4 == 0 && p.V % 4 == 0);
        const int kb = prep_bf_kb(p);
        const bool c16 = p.K % 8 == 0 && !((uintptr_t)p.k16 & 15);
        const size_t sm = pr_rec_smem_prep_bf(p);
        const auto kernel = kb == 1 ? chunk_prep_bf_kernel<C, 1> : chunk_prep_bf_kernel<C, 2>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, sv.Tinv, sv.W, sv.R0, c16);
        PR_CUDA_LAUNCH_CHECK();
    } else if (pl.wg_prep) {
        const int kb = p.Kp <= 64 ? 2 : 4;
        const size_t sm = prep_wg_smem(kb);
        const auto kernel = p.k16 ? (kb == 2 ? chunk_prep_wg_kernel<C, 2, true> : chunk_prep_wg_kernel<C, 4, true>)
                                  : (kb == 2 ? chunk_prep_wg_kernel<C, 2> : chunk_prep_wg_kernel<C, 4>);
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, sv.Tinv, sv.W, sv.R0);
        PR_CUDA_LAUNCH_CHECK();
    } else {
        PR_ASSERT(!p.k16 && !p.v16); /* the plan reads k and v in place in the wgmma form only */
        const size_t sm = pr_rec_smem_prep(p, pl.bv_prep);
        const auto kernel = rec_bf_products(p) ? chunk_prep_kernel<C, true> : chunk_prep_kernel<C, false>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, pl.bv_prep, sv.Tinv, sv.W, sv.R0);
        PR_CUDA_LAUNCH_CHECK();
    }
}

void pr_rec_chunk_prep(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv)
{
    if (p.C == 64) chunk_prep_c<64>(st, p, pl, sv);
    else chunk_prep_c<32>(st, p, pl, sv);
}
