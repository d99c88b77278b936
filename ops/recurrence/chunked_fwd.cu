/* ops/recurrence/chunked_fwd.cu: the chunked forward of the recurrence family
 * on CUDA (docs/PRISM.md, "Chunked form with extra writes"), in three kernels:
 *
 *   prep   (every chunk at once; delta rules only)  the chunk's WY form:
 *          B = strict(D o K K^T), T' = (I + B diag(beta))^-1,
 *          W = T' (e^G o K), R0 = T' (V - strict(D o K KX^T) VX)
 *   state  (serial over a sequence's chunks, parallel over heads and V tiles)
 *          the chunk-start states hs, the residuals R = R0 - W h and
 *          h <- e^{G_last} h + Ka^T (e^{G_last - G} o Ua)
 *   scores (every chunk at once)
 *          O = scale (e^G o (Q h) + incl(D o Q Ka^T) Ua)
 * with G the chunk-local cumulative log-decay, D_ti = e^{G_t - G_i}, the
 * chunk's augmented keys Ka = [K; KX_0; ...; KX_{L-1}] (extras l-major, so
 * row a is token a % C) and values Ua = [diag(beta) R (or V); VX_0; ...].
 * R is the unknown of the solve for the delta rules (u = beta R): with it
 * beta = 0 needs no division anywhere. Matrix products run on tensor cores
 * (TF32 in, f32 accumulate) when ctx->matmul_tf32, else in plain fp32.
 * The scores kernel in MODE 1 is the backward's first step (dUa = scale
 * incl(D o Q Ka^T)^T dO), since it shares the scores; without beta it adds
 * dv's value so far (dv0), so that the dstate pass stores dv = dUa + Kd dhn
 * without reading dv in its serial loop.
 */
#include "ops/recurrence/recurrence_cuda.cuh"

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

/* prep's wgmma form (sm_90a; NOTES.md v37): TF32 delta rules without
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

template <int C, int KB>
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
        rec_ld_tile<true>(KS + kb * 2048, 32, 64, 32, p.k + rk * K + kb * 32, HK, nval, K - kb * 32, p.vec);
    rec_cpt<64, KB * 32>(KT, KB * 32, p.k + rk * K, HK, nval, K);
    rec_gates_issue<C>(p, cp.row0, nval, h, G, bt);
    rec_gates_pad64<C>(G);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    rec_gates_scan<C>(G, nval, eG);
    for (int kb = 0; kb < KB; kb++) rec_tf32_own(KS + kb * 2048, 64);
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
    rec_cpt_own<64, KB * 32>(KT, KB * 32, eG, 1.f);
    __syncthreads(); /* Bs complete; the K tile's room takes V^T */
    rec_cpt<64, 128>(KS, 128, p.v + rk * V, HV, nval, V);
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
    rec_cpt_own<64, 128>(KS, 128, nullptr, 1.f);
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

/* ---- state, the wgmma form (sm_90a, TF32 products: NOTES.md v30) -----------------
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

template <int C, int NW, int MP, bool DELTA> /* DELTA: p.delta, so each form holds only its registers */
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
            rec_ld_tile<true>(SK + kb * C * 32, 32, C, 32, p.k + rk * K + kb * 32, (long long)H * K, nval,
                              K - kb * 32, p.vec);
            if (DELTA)
                rec_ld_tile<true>(W + kb * 64 * 32, 32, 64, 32, io.W + rk * K + kb * 32, (long long)H * K, nval,
                                  K - kb * 32, p.vec);
        }
        if (!DELTA)
            for (int vb = 0; vb < BV / 32; vb++)
                rec_ld_tile<true>(SV + vb * C * 32, 32, C, 32, p.v + rk * V + v0 + vb * 32, (long long)H * V, nval,
                                  nv - vb * 32, p.vec);
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

template <int C, int MODE, bool BF>
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

    rec_ld_tile(Qs, LDK, C, Kp, p.q + rk * K, (long long)H * K, cp.nval, K, p.vec);
    chunk_ld_keys(p, KA, LDK, C, Kp, rk, cp.nval, 0, K);
    rec_gates_issue<C>(p, cp.row0, cp.nval, h, G, bt);
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
            rec_st_tile(o + rk * V + v0, (long long)H * V, cp.nval, nv, Os, LDV, p.scale, false, p.vec);
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

/* The scores kernel's wgmma form (sm_90a; NOTES.md v32): C <= 64 tokens
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

template <int C, int MODE, int KB>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    chunk_scores_wg_kernel(rec_prob p, const float *hs, const float *R, float *o, float *dU, const float *dv0)
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

    for (int kb = 0; kb < KB; kb++) {
        rec_ld_tile<true>(QS + kb * 2048, 32, 64, 32, p.q + rk * K + kb * 32, (long long)H * K, nval, K - kb * 32,
                          p.vec);
        rec_ld_tile<true>(KS + kb * 2048, 32, 64, 32, p.k + rk * K + kb * 32, (long long)H * K, nval, K - kb * 32,
                          p.vec);
    }
    if constexpr (MODE == 0) {
        rec_cpt<KB * 32, 64>(sm + s.BT, 64, hs + ((long long)c * H + h) * K * V + v0, V, K, nv);
        rec_cpt<64, 64>(VT, 64, (p.delta ? R : p.v) + rk * V + v0, (long long)H * V, nval, nv);
    } else {
        rec_cpt<64, BV>(VT, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv);
    }
    rec_gates_issue<C>(p, cp.row0, nval, h, G, bt);
    rec_gates_pad64<C>(G);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    rec_gates_scan<C>(G, nval, eG);
    for (int kb = 0; kb < KB; kb++) rec_tf32_own(QS + kb * 2048, 64), rec_tf32_own(KS + kb * 2048, 64);
    if constexpr (MODE == 0) {
        rec_cpt_own<KB * 32, 64>(sm + s.BT, 64, nullptr, 1.f);
        rec_cpt_own<64, 64>(VT, 64, nullptr, 1.f);
    } else {
        rec_cpt_own<64, BV>(VT, BV, nullptr, p.scale);
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

/* ---- launchers --------------------------------------------------------------------- */

template <int C> static void chunk_state_c(cudaStream_t st, const rec_prob &p, int bv, const rec_state_io &io)
{
    const size_t sm = pr_rec_smem_state(p, bv);
    const auto kernel = rec_bf_products(p) ? chunk_state_kernel<C, true> : chunk_state_kernel<C, false>;
    pr_cuda_smem_prep((const void *)kernel, sm);
    const dim3 grid((p.V + bv - 1) / bv, p.H, p.N);
    kernel<<<grid, PR_REC_THREADS, sm, st>>>(p, bv, io);
    PR_CUDA_LAUNCH_CHECK();
}
template <int C, int NW> static auto state_wg_for(int mp, bool delta) -> decltype(&chunk_state_wg_kernel<C, NW, 1, true>)
{
    if (delta) return mp == 1 ? chunk_state_wg_kernel<C, NW, 1, true> : chunk_state_wg_kernel<C, NW, 2, true>;
    return mp == 1 ? chunk_state_wg_kernel<C, NW, 1, false> : chunk_state_wg_kernel<C, NW, 2, false>;
}
template <int C> static void chunk_state_wg(cudaStream_t st, const rec_prob &p, int bv, const rec_state_io &io)
{
    PR_ASSERT(!io.ident && p.Kp <= 128 && (bv == 32 || bv == 64) && (!io.elast || (io.hs && p.L == 0)));
    const int mp = (p.Kp + 63) / 64;
    const auto kernel = bv == 32 ? state_wg_for<C, 16>(mp, p.delta) : state_wg_for<C, 32>(mp, p.delta);
    const size_t sm = pr_rec_smem_state_wg(p, bv);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3((p.V + bv - 1) / bv, p.H, p.N), PR_REC_THREADS, sm, st>>>(p, io);
    PR_CUDA_LAUNCH_CHECK();
}
/* the scores kernel's wgmma form (pl.wg_scores): MODE 0 the output, MODE 1 dlocal */
template <int C, int MODE>
static void scores_wg_c(cudaStream_t st, const rec_prob &p, const float *hs, const float *R, float *o, float *dU,
                        const float *dv0)
{
    const int kb = scores_wg_kb(p), bv = MODE == 0 ? 64 : 128;
    PR_ASSERT(kb && p.L == 0);
    const auto kernel = kb == 2 ? chunk_scores_wg_kernel<C, MODE, 2> : chunk_scores_wg_kernel<C, MODE, 4>;
    const size_t sm = pr_rec_smem_scores_wg(p, MODE);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3(p.nchunks * ((p.V + bv - 1) / bv), p.H), PR_REC_THREADS, sm, st>>>(p, hs, R, o, dU, dv0);
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
static void chunk_state_segmented(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl,
                                  const rec_chunk_saved &sv, float *ht)
{
    const rec_prob ps = pr_rec_seg_prob(p, sv.sg);
    const int bv = pl.bv_state;
    const bool fix = pl.seg_fix != 0;
    const size_t n_e = (size_t)sv.sg.n * p.H * p.K * p.V;
    const size_t n_p = fix && p.delta ? (size_t)p.nchunks * p.H * p.K * p.K : 0;
    float *E = rec_scratch(n_e), *starts = rec_scratch(n_e), *trans = n_p ? rec_scratch(n_p) : nullptr;
    const rec_state_io ends = {fix ? sv.hs : nullptr, fix ? sv.R : nullptr, E, sv.W, sv.R0, nullptr, 0};
    pr_rec_chunk_state(st, ps, bv, ends);
    if (p.delta) {
        /* the state has K columns; the transitions do not depend on prism_core's
         * extra writes (they only add to the writes, and this pass writes
         * nothing), so its chunks hold the C base keys only (L = 0) */
        rec_prob pa = ps;
        pa.V = p.K, pa.Vp = p.Kp, pa.L = 0;
        const rec_state_io ident = {trans, nullptr, sv.sg.A, sv.W, nullptr, nullptr, 1};
        pr_rec_chunk_state(st, pa, bv, ident);
    }
    pr_rec_seg_chain(st, p, sv.sg, false, p.h0, E, starts, ht, false);
    if (fix) {
        pr_rec_seg_fix(st, p, sv.sg, pl.bv_fix, trans, starts, sv.hs, sv.R, sv.W);
    } else {
        const rec_state_io real = {sv.hs, sv.R, nullptr, sv.W, sv.R0, starts, 0};
        pr_rec_chunk_state(st, ps, bv, real);
    }
    rec_scratch_free(E, n_e);
    rec_scratch_free(starts, n_e);
    if (trans) rec_scratch_free(trans, n_p);
}

template <int C>
static void chunk_forward_c(cudaStream_t st, const rec_prob &px, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                            float *o, float *ht)
{
    /* extras apart: their terms first (V', their output, each chunk's E),
     * then the core (L = 0) on V' */
    rec_prob p = px;
    float *vp = nullptr, *elast = nullptr;
    const size_t n_v = (size_t)(px.seq ? px.T : (long long)px.N * px.T) * px.H * px.V;
    const size_t n_e = (size_t)px.N * px.H * px.K * px.V;
    if (pl.xa) {
        PR_ASSERT(px.L > 0 && pl.wg_state && pl.wg_scores && !sv.sg.n);
        vp = rec_scratch(n_v), elast = rec_scratch(n_e);
        pr_rec_chunk_xfwd(st, px, pl.wg_xa, vp, o, sv.hs, elast);
        p = rec_core_prob(px);
        p.v = vp;
    }
    if (p.delta && pl.wg_prep) {
        const int kb = p.Kp <= 64 ? 2 : 4;
        const size_t sm = prep_wg_smem(kb);
        const auto kernel = kb == 2 ? chunk_prep_wg_kernel<C, 2> : chunk_prep_wg_kernel<C, 4>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, sv.Tinv, sv.W, sv.R0);
        PR_CUDA_LAUNCH_CHECK();
    } else if (p.delta) {
        const size_t sm = pr_rec_smem_prep(p, pl.bv_prep);
        const auto kernel = rec_bf_products(p) ? chunk_prep_kernel<C, true> : chunk_prep_kernel<C, false>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, pl.bv_prep, sv.Tinv, sv.W, sv.R0);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (!sv.sg.n) {
        const rec_state_io io = {sv.hs, sv.R, ht, sv.W, sv.R0, p.h0, 0, elast};
        pr_rec_chunk_state(st, p, pl.bv_state, io, pl.wg_state);
    } else {
        chunk_state_segmented(st, p, pl, sv, ht);
    }
    if (pl.wg_scores) {
        scores_wg_c<C, 0>(st, p, sv.hs, sv.R, o, nullptr, pl.xa ? o : nullptr);
    } else {
        const size_t sm = pr_rec_smem_scores(p, 0, pl.bv_out);
        const auto kernel = rec_bf_products(p) ? chunk_scores_kernel<C, 0, true> : chunk_scores_kernel<C, 0, false>;
        pr_cuda_smem_prep((const void *)kernel, sm);
        kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, pl.bv_out, sv.hs, sv.R, o, nullptr, nullptr, nullptr);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (vp) rec_scratch_free(vp, n_v), rec_scratch_free(elast, n_e);
}

void pr_rec_chunk_forward(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                          float *o, float *ht)
{
    if (p.C == 64) chunk_forward_c<64>(s, p, pl, sv, o, ht);
    else chunk_forward_c<32>(s, p, pl, sv, o, ht);
}

/* the backward's first step (chunked_bwd.cu calls it): dU = scale S^T dO, dVX likewise */
void pr_rec_chunk_dlocal(cudaStream_t st, const rec_prob &p, int bv, float *dU, float *dVX, const float *dv0,
                         bool wg)
{
    if (wg) {
        if (p.C == 64) scores_wg_c<64, 1>(st, p, nullptr, nullptr, nullptr, dU, dv0);
        else scores_wg_c<32, 1>(st, p, nullptr, nullptr, nullptr, dU, dv0);
        return;
    }
    const size_t sm = pr_rec_smem_scores(p, 1, bv);
    const bool bf = rec_bf_products(p);
    const auto kernel = p.C == 64 ? (bf ? chunk_scores_kernel<64, 1, true> : chunk_scores_kernel<64, 1, false>)
                                  : (bf ? chunk_scores_kernel<32, 1, true> : chunk_scores_kernel<32, 1, false>);
    pr_cuda_smem_prep((const void *)kernel, sm);
    kernel<<<dim3(p.nchunks, p.H), PR_REC_THREADS, sm, st>>>(p, bv, nullptr, nullptr, nullptr, dU, dVX, dv0);
    PR_CUDA_LAUNCH_CHECK();
}
