/* ops/recurrence/cuda/gla_chunked.cu: the chunked form of the per-key-decay rule
 * (gla: h = diag(exp(g_t)) h + k_t v_t^T, o_t = scale h^T q_t, g [rows,H,K])
 * on CUDA, forward and backward; the CPU blueprint is chunked_gla.c. The
 * per-value decay (p.gv) has kernels of its own in gla_value.cu (gv_*).
 *
 * Inside a chunk of C tokens (32 or 64) with start state S, G_t = sum_{s<=t}
 * g_s per key channel (chunk-local, inclusive) and E_ti = exp(G_t - G_i):
 *   O   = scale ((Q o e^G) S + A V),  A_ti = sum_c q_t[c] k_i[c] E_ti[c], i <= t
 *   S'  = diag(e^{G_L}) S + (K o e^{G_L - G})^T V                 (L: last token)
 * Every exponent is a decay from an earlier token to a later one, so every
 * factor lies in (0, 1]. A's pairs are split by sub-chunks of 16 tokens, as
 * fla's chunk_gla does: a pair in row sub-chunk a and an earlier column
 * sub-chunk takes E_ti = exp(G_t - G_r) exp(G_r - G_i), r = 16 a the row
 * sub-chunk's first token, both factors <= 1, so the block is a tensor-core
 * product (Q o e^{G - G_r}) (K o e^{G_r - G})^T; a pair inside one sub-chunk
 * takes exp(G_t - G_i) itself, element by element. Nothing overflows however
 * strong the decay (e^{G_t} e^{-G_i} unfactored overflows once a chunk's
 * log-decays sum past ~88).
 *
 * Backward, with dS' the gradient of the chunk's end state:
 *   dS    = diag(e^{G_L}) dS' + scale (Q o e^G)^T dO        (the reverse serial pass)
 *   dA    = scale dO V^T (i <= t)
 *   dv    = scale A^T dO + (K o e^{G_L - G}) dS'
 *   dq_t  = scale e^{G_t} o (S dO_t) + sum_{i<=t} dA_ti E_ti o k_i
 *   dk_i  = e^{G_L - G_i} o (dS' v_i) + sum_{t>=i} dA_ti E_ti o q_t
 *   dg_s  = sum_{t>=s in the chunk} (q_t o dq_t - k_t o dk_t) + sum_j S'[:,j] o dS'[:,j]
 * (the last term: the later tokens' share, as fla's chunk_gla adds it). dq's
 * earlier-sub-chunk pairs factor by the row sub-chunk's first token r (as A),
 * dk's by the column sub-chunk's last token e: E_ti = exp(G_t - G_e)
 * exp(G_e - G_i), the second factor shared by every t of later sub-chunks.
 *
 * Kernels (256 threads; every product a block product in shared memory from
 * the project's tile kit: TF32 mma.sync when ctx->matmul_tf32, bf16 mma.sync
 * for bf16 data with TF32 on, plain f32 otherwise; the 16 x 16 sub-chunk
 * blocks a warp each):
 *   gla_state   serial over a sequence's chunks, a block per (V tile, head,
 *               sequence): the chunk-start states hs, ht
 *   gla_out     a block per (chunk, head): A, then O over V tiles
 *   gla_dstate  serial in reverse: dS' of every chunk (dhs), dh0, and the
 *               per-V-tile row sums of S' o dS' (the dg end term)
 *   gla_dv      a block per (chunk, head): A again, dA (stored), dv
 *   gla_dqk     a block per (chunk, head): dq, dk, dg
 * Shared memory bounds K: chunks of 64 run K <= 128, chunks of 32 K <= 256
 * (pr_rec_gla_chunk_smem; the plan refuses what does not fit).
 * The fast form (force.gla_fast, the default), in gla_fast.cu: gla_cumsum,
 * then gla_state_kt and gla_out_kh (the scores in K tiles, storing A);
 * gla_cumsum, gla_dstate_kt, gla_dv_a (A read, not recomputed) and gla_dqk_kt
 * (in K tiles, dg summed in shared memory). The launchers below run either.
 */
#include "ops/recurrence/cuda/gla.cuh"

/* ---- gla_state: the chunk-start states, serial over a sequence's chunks ------------------ */

template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS) gla_state_kernel(rec_prob p, float *hs, float *ht)
{
    extern __shared__ __align__(128) float sm[];
    const gla_serial_lay s = gla_serial_layout(p, false);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDV = l.LDV, BV = GLA_BV;
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * BV, H = p.H, K = p.K, V = p.V, nv = min(BV, V - v0);
    float *Hs = sm + s.H, *Ks = sm + s.X, *G = sm + s.G, *Vs = sm + s.V;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + v0;
    if (p.h0) rec_ld_tile(Hs, LDV, Kp, BV, p.h0 + hoff, V, K, nv, p.vec);
    else REC_FOR2D(Kp, LDV, i, j) Hs[i * LDV + j] = 0.f;
    const int nck = (sq.len + C - 1) / C;
    for (int ci = 0; ci < nck; ci++) {
        const int c = sq.cbase + ci, row0 = sq.bos + ci * C, nval = min(C, sq.len - ci * C);
        const long long rk = (long long)row0 * H + h;
        rec_sync();   /* the last product done: Hs final, Ks and Vs free */
        gla_ld_keys(p, Ks, p.k, rk, nval, p.vec);
        gla_ld_keys(p, G, p.g, rk, nval, gla_gvec(p));
        rec_ld_tile(Vs, LDV, C, BV, p.v + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        if (hs) rec_st_tile(hs + ((long long)c * H + h) * K * V + v0, V, K, nv, Hs, LDV, 1.f, false, p.vec);
        rec_sync();
        gla_cumsum(G, LDK, C, Kp);
        __syncthreads();
        const float *GL = G + (C - 1) * LDK;
        REC_FOR2D(C, Kp, t, cc) Ks[t * LDK + cc] *= expf(GL[cc] - G[t * LDK + cc]);
        REC_FOR2D(Kp, BV, i, j) Hs[i * LDV + j] *= expf(GL[i]);
        __syncthreads();
        rec_mm<true, false, BF>(p, Hs, LDV, Ks, LDK, Vs, LDV, Kp, BV, C, 1.f, true);
    }
    rec_sync();
    if (ht) rec_st_tile(ht + hoff, V, K, nv, Hs, LDV, 1.f, false, p.vec);
}

/* ---- gla_out: the output, a block per (chunk, head) ---------------------------------------- */

template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS) gla_out_kernel(rec_prob p, const float *hs, float *o)
{
    extern __shared__ __align__(128) float sm[];
    const gla_chunk_lay s = gla_chunk_layout(p, 0);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV;
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V;
    float *Q = sm + s.Q, *Kt = sm + s.K, *G = sm + s.G, *A = sm + s.A, *U = sm + s.U;
    const gla_chunk_at at = gla_chunk_load(p, c, h, Q, Kt, G);
    gla_scores<BF>(p, A, Q, Kt, G, U);   /* Q is Q o e^G now */
    float *Ss = U, *Vs = Ss + Kp * LDV, *Os = Vs + C * LDV;
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        rec_ld_tile(Ss, LDV, Kp, BV, hs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        rec_ld_tile(Vs, LDV, C, BV, p.v + at.rk * V + v0, (long long)H * V, at.cp.nval, nv, p.vec);
        rec_sync();
        rec_mm<false, false, BF>(p, Os, LDV, Q, LDK, Ss, LDV, C, BV, Kp, 1.f, false);
        rec_mm<false, false, BF>(p, Os, LDV, A, LDC, Vs, LDV, C, BV, C, 1.f, true);
        rec_sync();
        rec_st_tile(o + at.rk * V + v0, (long long)H * V, at.cp.nval, nv, Os, LDV, p.scale, false, p.vec);
    }
}

/* ---- gla_dstate: the end states' gradients, serial in reverse --------------------------------
 * dhs[c] = dS' of chunk c; ep[(vt * nchunks + c) * H + h][i] = sum over this
 * V tile's columns of S'[i][j] dS'[i][j] (S' = hs[c + 1], or ht for a
 * sequence's last chunk); dh0 += the start state's gradient */
template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    gla_dstate_kernel(rec_prob p, const float *hs, const float *ht, float *dhs, float *ep, float *dh0)
{
    extern __shared__ __align__(128) float sm[];
    const gla_serial_lay s = gla_serial_layout(p, true);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDV = l.LDV, BV = GLA_BV;
    const int n = blockIdx.z, h = blockIdx.y, vt = blockIdx.x, v0 = vt * BV, H = p.H, K = p.K, V = p.V;
    const int nv = min(BV, V - v0), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *dH = sm + s.H, *Qs = sm + s.X, *G = sm + s.G, *dOs = sm + s.V, *Es = sm + s.E;
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
        gla_ld_keys(p, G, p.g, rk, nval, gla_gvec(p));
        rec_ld_tile(dOs, LDV, C, BV, p.dout + rk * V + v0, (long long)H * V, nval, nv, p.vec);
        rec_sync();
        gla_cumsum(G, LDK, C, Kp);
        for (int i = warp; i < K; i += PR_REC_WARPS) {   /* the dg end term's share of this V tile */
            float x = 0.f;
            for (int j = lane; j < nv; j += 32) x = fmaf(Es[i * LDV + j], dH[i * LDV + j], x);
            x = gla_warp_sum(x);
            if (lane == 0) ep[(((long long)vt * p.nchunks + c) * H + h) * K + i] = x;
        }
        __syncthreads();
        const float *GL = G + (C - 1) * LDK;
        REC_FOR2D(C, Kp, t, cc) Qs[t * LDK + cc] *= p.scale * expf(G[t * LDK + cc]);
        REC_FOR2D(Kp, BV, i, j) dH[i * LDV + j] *= expf(GL[i]);
        __syncthreads();
        rec_mm<true, false, BF>(p, dH, LDV, Qs, LDK, dOs, LDV, Kp, BV, C, 1.f, true);
    }
    rec_sync();
    if (dh0) rec_st_tile(dh0 + hoff, V, K, nv, dH, LDV, 1.f, true, p.vec);
}

/* ---- gla_dv: A again, dA (stored for gla_dqk) and dv, a block per (chunk, head) ------------- */

template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    gla_dv_kernel(rec_prob p, const float *dhs, float *dA_out, float *dv)
{
    extern __shared__ __align__(128) float sm[];
    const gla_chunk_lay s = gla_chunk_layout(p, 1);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV;
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V;
    float *Q = sm + s.Q, *Kt = sm + s.K, *G = sm + s.G, *A = sm + s.A, *dA = sm + s.A2, *U = sm + s.U;
    const gla_chunk_at at = gla_chunk_load(p, c, h, Q, Kt, G);
    gla_scores<BF>(p, A, Q, Kt, G, U);
    const float *GL = G + (C - 1) * LDK;
    REC_FOR2D(C, Kp, t, cc) Kt[t * LDK + cc] *= expf(GL[cc] - G[t * LDK + cc]);   /* K o e^{G_L - G} */
    float *dSs = U, *dOs = dSs + Kp * LDV, *Vs = dOs + C * LDV, *DV = Vs + C * LDV;
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        rec_ld_tile(dSs, LDV, Kp, BV, dhs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        rec_ld_tile(dOs, LDV, C, BV, p.dout + at.rk * V + v0, (long long)H * V, at.cp.nval, nv, p.vec);
        rec_ld_tile(Vs, LDV, C, BV, p.v + at.rk * V + v0, (long long)H * V, at.cp.nval, nv, p.vec);
        rec_sync();
        rec_mm<false, true, BF>(p, dA, LDC, dOs, LDV, Vs, LDV, C, C, BV, p.scale, v0 > 0);
        rec_mm<true, false, BF>(p, DV, LDV, A, LDC, dOs, LDV, C, BV, C, p.scale, false);
        rec_mm<false, false, BF>(p, DV, LDV, Kt, LDK, dSs, LDV, C, BV, Kp, 1.f, true);
        rec_sync();
        if (dv) rec_st_tile(dv + at.rk * V + v0, (long long)H * V, at.cp.nval, nv, DV, LDV, 1.f, true, p.vec);
    }
    /* dA's pairs i <= t, to global memory [nchunks, H, C, C] */
    float *dst = dA_out + ((long long)c * H + h) * C * C;
    REC_FOR2D(C, C, t, i) dst[t * C + i] = i <= t ? dA[t * LDC + i] : 0.f;
}

/* ---- gla_dqk: dq, dk and dg, a block per (chunk, head) -------------------------------------- */

template <bool BF>
__global__ void __launch_bounds__(PR_REC_THREADS)
    gla_dqk_kernel(rec_prob p, const float *hs, const float *dhs, const float *dA_in, const float *ep, int nvt,
                   rec_grads d)
{
    extern __shared__ __align__(128) float sm[];
    const gla_chunk_lay s = gla_chunk_layout(p, 2);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV, NS = C / GLA_SUB;
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V, warp = threadIdx.x >> 5;
    float *Q = sm + s.Q, *Kt = sm + s.K, *G = sm + s.G, *dA = sm + s.A, *DX = sm + s.DX, *DG = sm + s.DG, *U = sm + s.U;
    rec_ld_tile(dA, LDC, C, C, dA_in + ((long long)c * H + h) * C * C, C, C, C, true);
    const gla_chunk_at at = gla_chunk_load(p, c, h, Q, Kt, G);
    const int nval = at.cp.nval;
    float *Xs = U, *Ys = Xs + Kp * LDV;   /* the V loop's state tile and token tile */
    auto sub_first = [](int t) { return t & ~(GLA_SUB - 1); };

    /* dq: DX = scale e^{G_r} o (dO S^T), + the earlier sub-chunks' pairs, then o e^{G_t - G_r}, + the own sub-chunk's */
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        rec_ld_tile(Xs, LDV, Kp, BV, hs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        rec_ld_tile(Ys, LDV, C, BV, p.dout + at.rk * V + v0, (long long)H * V, nval, nv, p.vec);
        rec_sync();
        rec_mm<false, true, BF>(p, DX, LDK, Ys, LDV, Xs, LDV, C, Kp, BV, 1.f, v0 > 0);
        rec_sync();
    }
    REC_FOR2D(C, Kp, t, cc) DX[t * LDK + cc] *= p.scale * expf(G[sub_first(t) * LDK + cc]);
    for (int a = 1; a < NS; a++) {
        const int r = a * GLA_SUB;
        __syncthreads();
        REC_FOR2D(r, Kp, i, cc) U[i * LDK + cc] = Kt[i * LDK + cc] * expf(G[r * LDK + cc] - G[i * LDK + cc]);
        __syncthreads();
        for (int cb = warp; cb < Kp / 16; cb += PR_REC_WARPS)
            gla_blk16<false, false, BF>(p, DX, LDK, dA, LDC, U, LDK, r, cb * 16, r, 1.f, true);
    }
    __syncthreads();
    REC_FOR2D(C, Kp, t, cc) {
        const float gt = G[t * LDK + cc];
        float x = DX[t * LDK + cc] * expf(gt - G[sub_first(t) * LDK + cc]);
        for (int i = sub_first(t); i <= t; i++) x = fmaf(dA[t * LDC + i] * Kt[i * LDK + cc], expf(gt - G[i * LDK + cc]), x);
        DX[t * LDK + cc] = x;
        DG[t * LDK + cc] = Q[t * LDK + cc] * x;
    }
    __syncthreads();
    if (d.dq) rec_st_tile(d.dq + at.rk * K, (long long)H * K, nval, K, DX, LDK, 1.f, true, p.vec);

    /* dk: DX = e^{G_L - G_e} o (V dS'^T), + the later sub-chunks' pairs, then o e^{G_e - G_i}, + the own sub-chunk's
     * (e: the last token of i's sub-chunk) */
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        rec_sync();   /* the previous tile's product (or dq's store) done */
        rec_ld_tile(Xs, LDV, Kp, BV, dhs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        rec_ld_tile(Ys, LDV, C, BV, p.v + at.rk * V + v0, (long long)H * V, nval, nv, p.vec);
        rec_sync();
        rec_mm<false, true, BF>(p, DX, LDK, Ys, LDV, Xs, LDV, C, Kp, BV, 1.f, v0 > 0);
    }
    rec_sync();
    const float *GL = G + (C - 1) * LDK;
    auto sub_last = [](int t) { return t | (GLA_SUB - 1); };
    REC_FOR2D(C, Kp, i, cc) DX[i * LDK + cc] *= expf(GL[cc] - G[sub_last(i) * LDK + cc]);
    for (int b = 0; b + 1 < NS; b++) {
        const int e = sub_last(b * GLA_SUB), t0 = e + 1, nt = C - t0;
        __syncthreads();
        REC_FOR2D(nt, Kp, u, cc) U[u * LDK + cc] = Q[(t0 + u) * LDK + cc] * expf(G[(t0 + u) * LDK + cc] - G[e * LDK + cc]);
        __syncthreads();
        for (int cb = warp; cb < Kp / 16; cb += PR_REC_WARPS)
            gla_blk16<true, false, BF>(p, DX, LDK, dA + t0 * LDC, LDC, U, LDK, b * GLA_SUB, cb * 16, nt, 1.f, true);
    }
    __syncthreads();
    REC_FOR2D(C, Kp, i, cc) {
        const float gi = G[i * LDK + cc];
        float x = DX[i * LDK + cc] * expf(G[sub_last(i) * LDK + cc] - gi);
        for (int t = i; t <= sub_last(i); t++) x = fmaf(dA[t * LDC + i] * Q[t * LDK + cc], expf(G[t * LDK + cc] - gi), x);
        DX[i * LDK + cc] = x;
        DG[i * LDK + cc] -= Kt[i * LDK + cc] * x;
    }
    __syncthreads();
    if (d.dk) rec_st_tile(d.dk + at.rk * K, (long long)H * K, nval, K, DX, LDK, 1.f, true, p.vec);

    /* dg: the reverse sums inside the chunk, from the later tokens' share */
    if (!d.dg) return;
    for (int cc = threadIdx.x; cc < K; cc += blockDim.x) {
        float run = 0.f;
        for (int vt = 0; vt < nvt; vt++) run += ep[(((long long)vt * p.nchunks + c) * H + h) * K + cc];
        for (int t = nval - 1; t >= 0; t--) {
            run += DG[t * LDK + cc];
            d.dg[(at.rk + (long long)t * H) * K + cc] += run;
        }
    }
}

/* the most shared memory one of the kernels that run takes (the plan compares it with a block's
 * limit); fast: the fast form's too. Where the default's come near the limit the fast form's are
 * smaller (C = 64, K = 128: 112 KB against 209 KB), but not at small K (C = 64, K <= 32: 112 KB
 * against 93 KB), and whichever kernels run must fit */
size_t pr_rec_gla_chunk_smem(const rec_prob &p, bool fast)
{
    if (p.gv) return pr_rec_gv_chunk_smem(p);
    int most = gla_max(gla_serial_layout(p, false).total, gla_serial_layout(p, true).total);
    for (int kind = 0; kind < 3; kind++) most = gla_max(most, gla_chunk_layout(p, kind).total);
    const size_t plain = (size_t)most * 4, fast_most = fast ? gla_fast_smem(p) : 0;
    return plain > fast_most ? plain : fast_most;
}

/* ---- launchers ------------------------------------------------------------------------------ */
/* a plain kernel's instance (bf16 products or not), its shared memory and launch */
#define GLA_PLAIN(kern, bf, grid, smem_floats, ...)                            \
    do {                                                                       \
        const auto k_ = (bf) ? kern<true> : kern<false>;                       \
        const size_t bytes_ = (size_t)(smem_floats) * 4;                       \
        pr_cuda_smem_prep((const void *)k_, bytes_);                           \
        k_<<<(grid), PR_REC_THREADS, bytes_, s>>>(__VA_ARGS__);                \
        PR_CUDA_LAUNCH_CHECK();                                                \
    } while (0)

void pr_rec_gla_chunk_forward(cudaStream_t s, const rec_prob &p, float *hs, float *o, float *ht, bool fast, float *A)
{
    if (p.gv) return pr_rec_gv_chunk_forward(s, p, hs, o, ht);
    const bool io = p.q16 || p.k16 || p.v16 || p.o16;
    const bool bf = rec_bf_products(p);
    PR_ASSERT(!io || (fast && p.K % 4 == 0 && p.V % 4 == 0)); /* in place: the fast kernels only (gla_ld_in) */
    PR_ASSERT((p.o16 != nullptr) != (o != nullptr)); /* o written once: in place or f32 */
    if (!fast) {
        const int nvt = (p.V + GLA_BV - 1) / GLA_BV;
        GLA_PLAIN(gla_state_kernel, bf, dim3(nvt, p.H, p.N), gla_serial_layout(p, false).total, p, hs, ht);
        GLA_PLAIN(gla_out_kernel, bf, dim3(p.nchunks, p.H), gla_chunk_layout(p, 0).total, p, hs, o);
        return;
    }
    size_t n_gc = 0;
    float *gc = gla_fast_cumsum(s, p, &n_gc);
    gla_fast_state(s, p, bf, io, gc, hs, ht);
    gla_fast_out(s, p, bf, io, gc, hs, o, A);
    rec_scratch_free(gc, n_gc);
}

void pr_rec_gla_chunk_backward(cudaStream_t s, const rec_prob &p, const float *hs, const float *ht, const rec_grads &d,
                               bool fast, const float *A)
{
    if (p.gv) return pr_rec_gv_chunk_backward(s, p, hs, ht, d);
    const bool bf = rec_bf_products(p);
    const bool io = p.q16 || p.k16 || p.v16 || p.dout16 || d.dq16 || d.dk16 || d.dv16;
    PR_ASSERT(!io || (fast && A && p.K % 4 == 0 && p.V % 4 == 0)); /* in place: the fast kernels only (gla_ld_in) */
    const int nvt = (p.V + GLA_BV - 1) / GLA_BV;
    const size_t n_dhs = (size_t)p.nchunks * p.H * p.K * p.V, n_ep = (size_t)nvt * p.nchunks * p.H * p.K;
    const size_t n_dA = (size_t)p.nchunks * p.H * p.C * p.C;
    float *dhs = rec_scratch(n_dhs), *ep = rec_scratch(n_ep), *dA = rec_scratch(n_dA);
    size_t n_gc = 0;
    float *gc = fast ? gla_fast_cumsum(s, p, &n_gc) : nullptr;
    if (fast) gla_fast_dstate(s, p, bf, io, gc, hs, ht, dhs, ep, d.dh0);
    else GLA_PLAIN(gla_dstate_kernel, bf, dim3(nvt, p.H, p.N), gla_serial_layout(p, true).total, p, hs, ht, dhs, ep, d.dh0);
    if (fast && A) gla_fast_dv(s, p, bf, io, gc, dhs, A, dA, d.dv, d.dv16);
    else GLA_PLAIN(gla_dv_kernel, bf, dim3(p.nchunks, p.H), gla_chunk_layout(p, 1).total, p, dhs, dA, d.dv);
    if ((d.dq || d.dk || d.dg || d.dq16 || d.dk16) && fast) gla_fast_dqk(s, p, bf, io, gc, hs, dhs, dA, ep, d);
    else if (d.dq || d.dk || d.dg)
        GLA_PLAIN(gla_dqk_kernel, bf, dim3(p.nchunks, p.H), gla_chunk_layout(p, 2).total, p, hs, dhs, dA, ep, nvt, d);
    if (gc) rec_scratch_free(gc, n_gc);
    rec_scratch_free(dhs, n_dhs);
    rec_scratch_free(ep, n_ep);
    rec_scratch_free(dA, n_dA);
}
