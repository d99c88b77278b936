/* ops/recurrence/cuda/recurrent.cu: the per-token (recurrent) form on CUDA, the
 * serial baseline of the chunked kernels and a second check of them.
 *
 * Given k, g, beta, the V columns of the state evolve independently:
 *   h_j <- a h_j;  r_j = v_j - h_j.k;  u_j = beta r_j;  h_j += k u_j  (+ kx_l vx_lj)
 * so a block owns (sequence, head, 32 columns) and walks time serially. A warp
 * owns 4 columns; lane i holds entries i, i+32, ... of each column's K
 * entries in registers, so a column dot product is a warp butterfly. Tokens
 * are staged in shared memory TT at a time.
 *
 * Backward, per column j (the derivation; ' marks the decayed state h' = a h_{t-1}):
 *   o_j = scale q.h_j               ->  dh_j += scale q do_j,  dq += scale h_j do_j
 *   h_j += kx_l vx_lj               ->  dvx_lj = dh_j.kx_l,    dkx_l += dh_j vx_lj
 *   h_j = h'_j + k u_j              ->  du_j = dh_j.k,          dk += dh_j u_j
 *   u_j = beta r_j, r_j = v_j - h'_j.k -> dr_j = beta du_j, dv_j = dr_j, dbeta += du_j r_j,
 *                                      dh'_j = dh_j - k dr_j,  dk -= h'_j dr_j
 *   h'_j = a h_{t-1,j}              ->  dg += a <dh'_j, h_{t-1,j}>,  dh_{t-1,j} = a dh'_j
 * Reverse time needs no state except through dk's h' dr term, dq and dg.
 * dg needs none either: psi_t = <dh_t, h_t> (per column) obeys
 *   dg_t = <dh'_t, h'_t> = psi_t - du.u - dr.(v - r) - sum_l dvx_l.vx_l
 *   psi_{t-1} = dg_t + do_{t-1}.o_{t-1},   psi_last = <dht, ht> + do.o
 * so the reverse pass carries one scalar per column. A second pass in forward
 * time rebuilds h from h0 and the saved r (no dot products) for dq and the
 * h' dr part of dk. Sums over columns (dq, dk, dkx, dbeta, dg) go through
 * shared memory in a fixed order, then per-32-column partials are added by a
 * last kernel in slice order: deterministic, no atomics.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

#define TOK_CPW 4                        /* columns per warp */
#define TOK_VS (TOK_CPW * PR_REC_WARPS)  /* columns per block */

/* shared-memory layout of the three kernels (offsets in floats; -1 absent) */
enum { TOK_FWD, TOK_REV, TOK_DQ };
struct tok_layout {
    int q, k, kx, v, vx, g, b, o, r, dO, dv, dvx, red, reds, total;
};
__host__ __device__ static tok_layout tok_layout_of(int kind, int TT, int Kp, int L, int delta, int has_g)
{
    rec_bump m;
    tok_layout s;
    const int VS = TOK_VS, W = PR_REC_WARPS;
    s.q = kind != TOK_DQ ? m.take(TT * Kp) : -1;
    s.k = m.take(TT * Kp);
    s.kx = L ? m.take(TT * L * Kp) : -1;
    s.v = m.take(TT * VS);
    s.vx = L ? m.take(TT * L * VS) : -1;
    s.g = has_g ? m.take(TT) : -1;
    s.b = delta ? m.take(TT) : -1;
    s.o = kind != TOK_DQ ? m.take(TT * VS) : -1;
    s.r = delta ? m.take(TT * VS) : -1;
    s.dO = kind != TOK_FWD ? m.take(TT * VS) : -1;
    s.dv = kind == TOK_REV || (kind == TOK_DQ && delta) ? m.take(TT * VS) : -1;
    s.dvx = kind == TOK_REV && L ? m.take(TT * L * VS) : -1;
    s.red = kind == TOK_REV ? m.take(TT * (1 + L) * W * Kp) : kind == TOK_DQ ? m.take(TT * 2 * W * Kp) : -1;
    s.reds = kind == TOK_REV ? m.take(TT * 2 * W) : -1;
    s.total = m.off;
    return s;
}

/* stage tokens [row0, row0+nt) of head h (columns j0.. of V-sized rows) */
struct tok_src {
    const float *o, *r, *dO, *dv;   /* [rows,H,V] arrays read per column, or NULL */
};
__device__ static void tok_stage(const rec_prob &p, const tok_layout &s, float *sm, int Kp, int row0, int nt, int h,
                                 int j0, const tok_src &src)
{
    const int H = p.H, K = p.K, V = p.V, L = p.L, VS = TOK_VS;
    for (int e = threadIdx.x; e < nt * Kp; e += blockDim.x) {
        const int t = e / Kp, i = e - t * Kp;
        const long long o = ((long long)(row0 + t) * H + h) * K + i;
        if (s.q >= 0) sm[s.q + e] = i < K ? p.q[o] : 0.f;
        sm[s.k + e] = i < K ? p.k[o] : 0.f;
    }
    for (int e = threadIdx.x; s.kx >= 0 && e < nt * L * Kp; e += blockDim.x) {
        const int tl = e / Kp, i = e - tl * Kp;
        sm[s.kx + e] = i < K ? p.kx[((long long)(row0 + tl / L) * H + h) * L * K + (long long)(tl % L) * K + i] : 0.f;
    }
    for (int e = threadIdx.x; e < nt * VS; e += blockDim.x) {
        const int t = e / VS, j = j0 + e - t * VS;
        const long long o = ((long long)(row0 + t) * H + h) * V + j;
        const bool ok = j < V;
        sm[s.v + e] = ok ? p.v[o] : 0.f;
        if (s.o >= 0 && src.o) sm[s.o + e] = ok ? src.o[o] : 0.f;
        if (s.r >= 0 && src.r) sm[s.r + e] = ok ? src.r[o] : 0.f;
        if (s.dO >= 0 && src.dO) sm[s.dO + e] = ok ? src.dO[o] : 0.f;
        if (s.dv >= 0 && src.dv) sm[s.dv + e] = ok ? src.dv[o] : 0.f;
    }
    for (int e = threadIdx.x; s.vx >= 0 && e < nt * L * VS; e += blockDim.x) {
        const int tl = e / VS, j = j0 + e - tl * VS;
        sm[s.vx + e] = j < V ? p.vx[((long long)(row0 + tl / L) * H + h) * L * V + (long long)(tl % L) * V + j] : 0.f;
    }
    for (int t = threadIdx.x; t < nt; t += blockDim.x) {
        const long long o = (long long)(row0 + t) * H + h;
        if (s.g >= 0) sm[s.g + t] = p.g[o];
        if (s.b >= 0) sm[s.b + t] = p.beta[o];
    }
}

/* x[c] = sum over the warp's lanes of x[c], in every lane */
template <int N> __device__ __forceinline__ void tok_allsum(float (&x)[N])
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int c = 0; c < N; c++) x[c] += __shfl_xor_sync(PR_FULL_MASK, x[c], o);
}

/* hs += sum_l kx_l vx_l^T over token tt's extra writes (staged in sm), this
 * thread's K rows (lane + 32 m) and V columns (jw + c) */
template <int KPT>
__device__ __forceinline__ void tok_add_extras(float (&hs)[TOK_CPW][KPT], const float *sm, const tok_layout &s, int L,
                                               int tt, int lane, int jw)
{
    constexpr int Kp = 32 * KPT;
    for (int l = 0; l < L; l++) {
        float xr[KPT];
#pragma unroll
        for (int m = 0; m < KPT; m++) xr[m] = sm[s.kx + (tt * L + l) * Kp + lane + 32 * m];
#pragma unroll
        for (int c = 0; c < TOK_CPW; c++) {
            const float u = sm[s.vx + (tt * L + l) * TOK_VS + jw + c];
#pragma unroll
            for (int m = 0; m < KPT; m++) hs[c][m] = fmaf(xr[m], u, hs[c][m]);
        }
    }
}

/* ---- forward: o, ht and the saved r ----------------------------------------------- */
template <int KPT>
__global__ void __launch_bounds__(PR_REC_THREADS) tok_fwd_kernel(rec_prob p, float *o, float *ht, float *r_save, int TT)
{
    extern __shared__ __align__(16) float sm[];
    constexpr int Kp = 32 * KPT, CPW = TOK_CPW, VS = TOK_VS;
    const tok_layout s = tok_layout_of(TOK_FWD, TT, Kp, p.L, p.delta, p.has_g);
    const int n = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * VS;
    const int lane = threadIdx.x & 31, jw = (threadIdx.x >> 5) * CPW;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * p.H + h) * p.K * p.V;
    float hs[CPW][KPT];
#pragma unroll
    for (int c = 0; c < CPW; c++)
#pragma unroll
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m, j = j0 + jw + c;
            hs[c][m] = p.h0 && i < p.K && j < p.V ? p.h0[hoff + (long long)i * p.V + j] : 0.f;
        }
    for (int t0 = 0; t0 < sq.len; t0 += TT) {
        const int nt = min(TT, sq.len - t0);
        __syncthreads();
        tok_stage(p, s, sm, Kp, sq.bos + t0, nt, h, j0, tok_src{});
        __syncthreads();
        for (int tt = 0; tt < nt; tt++) {
            float kr[KPT], qr[KPT], d[CPW];
#pragma unroll
            for (int m = 0; m < KPT; m++) kr[m] = sm[s.k + tt * Kp + lane + 32 * m], qr[m] = sm[s.q + tt * Kp + lane + 32 * m];
            if (p.has_g) {
                const float a = expf(sm[s.g + tt]);
#pragma unroll
                for (int c = 0; c < CPW; c++)
#pragma unroll
                    for (int m = 0; m < KPT; m++) hs[c][m] *= a;
            }
            if (p.delta) {
#pragma unroll
                for (int c = 0; c < CPW; c++) {
                    d[c] = 0.f;
#pragma unroll
                    for (int m = 0; m < KPT; m++) d[c] = fmaf(hs[c][m], kr[m], d[c]);
                }
                tok_allsum(d);
                const float b = sm[s.b + tt];
#pragma unroll
                for (int c = 0; c < CPW; c++) {
                    const float r = sm[s.v + tt * VS + jw + c] - d[c], u = b * r;
#pragma unroll
                    for (int m = 0; m < KPT; m++) hs[c][m] = fmaf(kr[m], u, hs[c][m]);
                    if (lane == c) sm[s.r + tt * VS + jw + c] = r;
                }
            } else {
#pragma unroll
                for (int c = 0; c < CPW; c++) {
                    const float u = sm[s.v + tt * VS + jw + c];
#pragma unroll
                    for (int m = 0; m < KPT; m++) hs[c][m] = fmaf(kr[m], u, hs[c][m]);
                }
            }
            tok_add_extras<KPT>(hs, sm, s, p.L, tt, lane, jw);
#pragma unroll
            for (int c = 0; c < CPW; c++) {
                d[c] = 0.f;
#pragma unroll
                for (int m = 0; m < KPT; m++) d[c] = fmaf(hs[c][m], qr[m], d[c]);
            }
            tok_allsum(d);
#pragma unroll
            for (int c = 0; c < CPW; c++)
                if (lane == c) sm[s.o + tt * VS + jw + c] = p.scale * d[c];
        }
        __syncthreads();
        for (int e = threadIdx.x; e < nt * VS; e += blockDim.x) {
            const int t = e / VS, j = j0 + e - t * VS;
            if (j >= p.V) continue;
            const long long off = ((long long)(sq.bos + t0 + t) * p.H + h) * p.V + j;
            o[off] = sm[s.o + e];
            if (r_save) r_save[off] = sm[s.r + e];   /* NULL: not recorded, nothing saved */
        }
    }
#pragma unroll
    for (int c = 0; c < CPW; c++)
#pragma unroll
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m, j = j0 + jw + c;
            if (i < p.K && j < p.V) ht[hoff + (long long)i * p.V + j] = hs[c][m];
        }
}

/* per-slice partial sums over the block's columns: slice s of a [rows*H*X]
 * quantity lives at part + s * rows*H*X */
struct tok_parts {
    float *dk, *dkx, *dq, *db, *dg;
    long long nk, nkx, ns;   /* rows*H*K, rows*H*L*K, rows*H */
};

/* ---- backward, reverse time: dv, dvx, dh0, dr (saved), partial dk, dkx, dbeta, dg ---- */
template <int KPT>
__global__ void __launch_bounds__(PR_REC_THREADS)
    tok_rev_kernel(rec_prob p, rec_grads d, tok_parts pt, const float *o, const float *ht, const float *r_save,
                   float *dr_save, int TT)
{
    extern __shared__ __align__(16) float sm[];
    constexpr int Kp = 32 * KPT, CPW = TOK_CPW, VS = TOK_VS, W = PR_REC_WARPS;
    const int L = p.L;
    const tok_layout s = tok_layout_of(TOK_REV, TT, Kp, L, p.delta, p.has_g);
    const int n = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * VS, slice = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, jw = warp * CPW;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * p.H + h) * p.K * p.V;
    float dh[CPW][KPT], psi[CPW];
#pragma unroll
    for (int c = 0; c < CPW; c++) {
        psi[c] = 0.f;
#pragma unroll
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m, j = j0 + jw + c;
            const bool ok = i < p.K && j < p.V;
            dh[c][m] = ok ? p.dht[hoff + (long long)i * p.V + j] : 0.f;
            psi[c] = fmaf(dh[c][m], ok ? ht[hoff + (long long)i * p.V + j] : 0.f, psi[c]);
        }
    }
    tok_allsum(psi);
    const tok_src src = {o, r_save, p.dout, nullptr};
    for (int t0 = sq.len > 0 ? (sq.len - 1) / TT * TT : -1; t0 >= 0; t0 -= TT) {
        const int nt = min(TT, sq.len - t0), row0 = sq.bos + t0;
        __syncthreads();
        tok_stage(p, s, sm, Kp, row0, nt, h, j0, src);
        __syncthreads();
        for (int tt = nt - 1; tt >= 0; tt--) {
            float kr[KPT], acc[KPT], x[CPW], dov[CPW];
            float *red = sm + s.red + tt * (1 + L) * W * Kp;
#pragma unroll
            for (int m = 0; m < KPT; m++) kr[m] = p.scale * sm[s.q + tt * Kp + lane + 32 * m];
#pragma unroll
            for (int c = 0; c < CPW; c++) {
                dov[c] = sm[s.dO + tt * VS + jw + c];
                psi[c] = fmaf(dov[c], sm[s.o + tt * VS + jw + c], psi[c]);
#pragma unroll
                for (int m = 0; m < KPT; m++) dh[c][m] = fmaf(kr[m], dov[c], dh[c][m]);
            }
            for (int l = 0; l < L; l++) {   /* extra writes kx_l vx_l^T */
#pragma unroll
                for (int m = 0; m < KPT; m++) kr[m] = sm[s.kx + (tt * L + l) * Kp + lane + 32 * m], acc[m] = 0.f;
#pragma unroll
                for (int c = 0; c < CPW; c++) {
                    x[c] = 0.f;
#pragma unroll
                    for (int m = 0; m < KPT; m++) x[c] = fmaf(dh[c][m], kr[m], x[c]);
                }
                tok_allsum(x);
#pragma unroll
                for (int c = 0; c < CPW; c++) {
                    const float vx = sm[s.vx + (tt * L + l) * VS + jw + c];
                    psi[c] -= x[c] * vx;
#pragma unroll
                    for (int m = 0; m < KPT; m++) acc[m] = fmaf(dh[c][m], vx, acc[m]);
                    if (lane == c) sm[s.dvx + (tt * L + l) * VS + jw + c] = x[c];
                }
#pragma unroll
                for (int m = 0; m < KPT; m++) red[((1 + l) * W + warp) * Kp + lane + 32 * m] = acc[m];
            }
#pragma unroll
            for (int m = 0; m < KPT; m++) kr[m] = sm[s.k + tt * Kp + lane + 32 * m], acc[m] = 0.f;
#pragma unroll
            for (int c = 0; c < CPW; c++) {
                x[c] = 0.f;
#pragma unroll
                for (int m = 0; m < KPT; m++) x[c] = fmaf(dh[c][m], kr[m], x[c]);
            }
            tok_allsum(x);   /* du (delta rules) or dv */
            float db = 0.f;
            if (p.delta) {
                const float b = sm[s.b + tt];
#pragma unroll
                for (int c = 0; c < CPW; c++) {
                    const float r = sm[s.r + tt * VS + jw + c], u = b * r, dr = b * x[c];
                    psi[c] -= x[c] * u + dr * (sm[s.v + tt * VS + jw + c] - r);
                    db = fmaf(x[c], r, db);
#pragma unroll
                    for (int m = 0; m < KPT; m++) acc[m] = fmaf(dh[c][m], u, acc[m]);
                    if (lane == c) sm[s.dv + tt * VS + jw + c] = dr;
#pragma unroll
                    for (int m = 0; m < KPT; m++) dh[c][m] = fmaf(-kr[m], dr, dh[c][m]);
                }
            } else {
#pragma unroll
                for (int c = 0; c < CPW; c++) {
                    const float u = sm[s.v + tt * VS + jw + c];
                    psi[c] -= x[c] * u;
#pragma unroll
                    for (int m = 0; m < KPT; m++) acc[m] = fmaf(dh[c][m], u, acc[m]);
                    if (lane == c) sm[s.dv + tt * VS + jw + c] = x[c];
                }
            }
#pragma unroll
            for (int m = 0; m < KPT; m++) red[warp * Kp + lane + 32 * m] = acc[m];
            if (lane == 0) sm[s.reds + (tt * 2) * W + warp] = db;
            if (p.has_g) {   /* psi is now <dh'_t, h'_t> = this column's dg_t */
                float dg = 0.f;
#pragma unroll
                for (int c = 0; c < CPW; c++) dg += psi[c];
                if (lane == 0) sm[s.reds + (tt * 2 + 1) * W + warp] = dg;
                const float a = expf(sm[s.g + tt]);
#pragma unroll
                for (int c = 0; c < CPW; c++)
#pragma unroll
                    for (int m = 0; m < KPT; m++) dh[c][m] *= a;
            }
        }
        __syncthreads();
        /* flush: column sums in warp order, per-column gradients */
        for (int e = threadIdx.x; e < nt * (1 + L) * Kp; e += blockDim.x) {
            const int t = e / ((1 + L) * Kp), sl = (e / Kp) % (1 + L), i = e % Kp;
            if (i >= p.K) continue;
            const float *red = sm + s.red + (t * (1 + L) + sl) * W * Kp + i;
            float sum = 0.f;
            for (int w = 0; w < W; w++) sum += red[w * Kp];
            const long long rh = (long long)(row0 + t) * p.H + h;
            if (sl == 0) pt.dk[slice * pt.nk + rh * p.K + i] = sum;
            else pt.dkx[slice * pt.nkx + (rh * L + sl - 1) * p.K + i] = sum;
        }
        for (int t = threadIdx.x; t < nt; t += blockDim.x) {
            const long long rh = (long long)(row0 + t) * p.H + h;
            float sb = 0.f, sg = 0.f;
            for (int w = 0; w < W; w++) sb += sm[s.reds + (t * 2) * W + w], sg += sm[s.reds + (t * 2 + 1) * W + w];
            if (p.delta) pt.db[slice * pt.ns + rh] = sb;
            if (p.has_g) pt.dg[slice * pt.ns + rh] = sg;
        }
        for (int e = threadIdx.x; e < nt * VS; e += blockDim.x) {
            const int t = e / VS, j = j0 + e - t * VS;
            if (j >= p.V) continue;
            const long long off = ((long long)(row0 + t) * p.H + h) * p.V + j;
            if (d.dv) d.dv[off] += sm[s.dv + e];
            if (p.delta) dr_save[off] = sm[s.dv + e];
        }
        for (int e = threadIdx.x; d.dvx && e < nt * L * VS; e += blockDim.x) {
            const int tl = e / VS, j = j0 + e - tl * VS;
            if (j < p.V) d.dvx[((long long)(row0 + tl / L) * p.H + h) * L * p.V + (long long)(tl % L) * p.V + j] += sm[s.dvx + e];
        }
    }
    if (d.dh0)
#pragma unroll
        for (int c = 0; c < CPW; c++)
#pragma unroll
            for (int m = 0; m < KPT; m++) {
                const int i = lane + 32 * m, j = j0 + jw + c;
                if (i < p.K && j < p.V) d.dh0[hoff + (long long)i * p.V + j] += dh[c][m];
            }
}

/* ---- backward, forward time: partial dq and (delta rules) dk += -h' dr ---------------- */
template <int KPT>
__global__ void __launch_bounds__(PR_REC_THREADS)
    tok_dq_kernel(rec_prob p, tok_parts pt, const float *r_save, const float *dr_save, int TT)
{
    extern __shared__ __align__(16) float sm[];
    constexpr int Kp = 32 * KPT, CPW = TOK_CPW, VS = TOK_VS, W = PR_REC_WARPS;
    const tok_layout s = tok_layout_of(TOK_DQ, TT, Kp, p.L, p.delta, p.has_g);
    const int n = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * VS, slice = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, jw = warp * CPW;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * p.H + h) * p.K * p.V;
    float hs[CPW][KPT];
#pragma unroll
    for (int c = 0; c < CPW; c++)
#pragma unroll
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m, j = j0 + jw + c;
            hs[c][m] = p.h0 && i < p.K && j < p.V ? p.h0[hoff + (long long)i * p.V + j] : 0.f;
        }
    const tok_src src = {nullptr, r_save, p.dout, dr_save};
    for (int t0 = 0; t0 < sq.len; t0 += TT) {
        const int nt = min(TT, sq.len - t0), row0 = sq.bos + t0;
        __syncthreads();
        tok_stage(p, s, sm, Kp, row0, nt, h, j0, src);
        __syncthreads();
        for (int tt = 0; tt < nt; tt++) {
            float kr[KPT], acc[KPT];
            float *red = sm + s.red + tt * 2 * W * Kp;
#pragma unroll
            for (int m = 0; m < KPT; m++) kr[m] = sm[s.k + tt * Kp + lane + 32 * m], acc[m] = 0.f;
            if (p.has_g) {
                const float a = expf(sm[s.g + tt]);
#pragma unroll
                for (int c = 0; c < CPW; c++)
#pragma unroll
                    for (int m = 0; m < KPT; m++) hs[c][m] *= a;
            }
            const float b = p.delta ? sm[s.b + tt] : 1.f;
#pragma unroll
            for (int c = 0; c < CPW; c++) {
                float u = sm[s.v + tt * VS + jw + c];
                if (p.delta) {
                    const float dr = sm[s.dv + tt * VS + jw + c];
#pragma unroll
                    for (int m = 0; m < KPT; m++) acc[m] = fmaf(-hs[c][m], dr, acc[m]);
                    u = b * sm[s.r + tt * VS + jw + c];
                }
#pragma unroll
                for (int m = 0; m < KPT; m++) hs[c][m] = fmaf(kr[m], u, hs[c][m]);
            }
            tok_add_extras<KPT>(hs, sm, s, p.L, tt, lane, jw);
#pragma unroll
            for (int m = 0; m < KPT; m++) red[warp * Kp + lane + 32 * m] = acc[m], acc[m] = 0.f;
#pragma unroll
            for (int c = 0; c < CPW; c++) {
                const float dov = p.scale * sm[s.dO + tt * VS + jw + c];
#pragma unroll
                for (int m = 0; m < KPT; m++) acc[m] = fmaf(hs[c][m], dov, acc[m]);
            }
#pragma unroll
            for (int m = 0; m < KPT; m++) red[(W + warp) * Kp + lane + 32 * m] = acc[m];
        }
        __syncthreads();
        for (int e = threadIdx.x; e < nt * 2 * Kp; e += blockDim.x) {
            const int t = e / (2 * Kp), sl = (e / Kp) & 1, i = e % Kp;
            if (i >= p.K || (sl == 0 && !p.delta)) continue;
            const float *red = sm + s.red + (t * 2 + sl) * W * Kp + i;
            float sum = 0.f;
            for (int w = 0; w < W; w++) sum += red[w * Kp];
            const long long off = ((long long)(row0 + t) * p.H + h) * p.K + i;
            if (sl == 0) pt.dk[slice * pt.nk + off] += sum;
            else pt.dq[slice * pt.nk + off] = sum;
        }
    }
}

/* grad[e] += sum over ns slices of part[s * n + e] */
__global__ static void tok_sum_slices_kernel(float *grad, const float *part, long long n, int ns)
{
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
        float s = 0.f;
        for (int i = 0; i < ns; i++) s += part[i * n + e];
        grad[e] += s;
    }
}

/* ---- launchers ---------------------------------------------------------------------- */

static int tok_kpt(int K)
{
    PR_CHECK(K <= 256, "recurrence: CUDA kernels support K <= 256, got K = %d", K);
    return K <= 32 ? 1 : K <= 64 ? 2 : K <= 128 ? 4 : 8;
}

/* launch kernel template KER<KPT> with the largest TT <= 16 whose shared memory fits 96 KB */
#define TOK_DISPATCH(kind, KER, grid, stream, ...)                                                             \
    do {                                                                                                       \
        const int kpt_ = tok_kpt(p.K), kp_ = 32 * kpt_;                                                        \
        int tt_ = 16;                                                                                          \
        while (tt_ > 1 && tok_layout_of(kind, tt_, kp_, p.L, p.delta, p.has_g).total * 4 > 96 * 1024) tt_ /= 2; \
        const size_t sm_ = (size_t)tok_layout_of(kind, tt_, kp_, p.L, p.delta, p.has_g).total * 4;            \
        switch (kpt_) {                                                                                        \
        case 1: tok_launch(KER<1>, grid, sm_, stream, tt_, __VA_ARGS__); break;                                \
        case 2: tok_launch(KER<2>, grid, sm_, stream, tt_, __VA_ARGS__); break;                                \
        case 4: tok_launch(KER<4>, grid, sm_, stream, tt_, __VA_ARGS__); break;                                \
        default: tok_launch(KER<8>, grid, sm_, stream, tt_, __VA_ARGS__); break;                               \
        }                                                                                                      \
    } while (0)

template <class F, class... A> static void tok_launch(F kernel, dim3 grid, size_t smem, cudaStream_t s, int TT, A... args)
{
    pr_cuda_smem_prep((const void *)kernel, smem);
    kernel<<<grid, PR_REC_THREADS, smem, s>>>(args..., TT);
    PR_CUDA_LAUNCH_CHECK();
}

size_t pr_rec_token_smem_min(const rec_prob &p)
{
    const int kp = 32 * tok_kpt(p.K);
    size_t most = 0;
    for (int kind = TOK_FWD; kind <= TOK_DQ; kind++) {
        const size_t b = (size_t)tok_layout_of(kind, 1, kp, p.L, p.delta, p.has_g).total * 4;
        most = b > most ? b : most;
    }
    return most;
}

void pr_rec_token_forward(cudaStream_t s, const rec_prob &p, float *o, float *ht, float *r_save)
{
    const dim3 grid((p.V + TOK_VS - 1) / TOK_VS, p.H, p.N);
    TOK_DISPATCH(TOK_FWD, tok_fwd_kernel, grid, s, p, o, ht, r_save);
}

void pr_rec_token_backward(cudaStream_t s, const rec_prob &p, const rec_grads &d, const float *o, const float *ht,
                           const float *r_save)
{
    const int ns = (p.V + TOK_VS - 1) / TOK_VS;
    const long long rows = p.seq ? (long long)p.T : (long long)p.N * p.T;
    tok_parts pt;
    pt.nk = rows * p.H * p.K, pt.nkx = pt.nk * p.L, pt.ns = rows * p.H;
    pt.dk = rec_scratch((size_t)(ns * pt.nk));
    pt.dq = rec_scratch((size_t)(ns * pt.nk));
    pt.dkx = p.L ? rec_scratch((size_t)(ns * pt.nkx)) : nullptr;
    pt.db = p.delta ? rec_scratch((size_t)(ns * pt.ns)) : nullptr;
    pt.dg = p.has_g ? rec_scratch((size_t)(ns * pt.ns)) : nullptr;
    float *dr = p.delta ? rec_scratch((size_t)(rows * p.H * p.V)) : nullptr;
    const dim3 grid(ns, p.H, p.N);
    TOK_DISPATCH(TOK_REV, tok_rev_kernel, grid, s, p, d, pt, o, ht, r_save, dr);
    if (d.dq || (d.dk && p.delta)) TOK_DISPATCH(TOK_DQ, tok_dq_kernel, grid, s, p, pt, r_save, dr);
    const unsigned nb = pr_cuda_blocks(pt.nk, 256);
    if (d.dq) {
        tok_sum_slices_kernel<<<nb, 256, 0, s>>>(d.dq, pt.dq, pt.nk, ns);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (d.dk) {
        tok_sum_slices_kernel<<<nb, 256, 0, s>>>(d.dk, pt.dk, pt.nk, ns);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (d.dkx) {
        tok_sum_slices_kernel<<<pr_cuda_blocks(pt.nkx, 256), 256, 0, s>>>(d.dkx, pt.dkx, pt.nkx, ns);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (d.dbeta) {
        tok_sum_slices_kernel<<<pr_cuda_blocks(pt.ns, 256), 256, 0, s>>>(d.dbeta, pt.db, pt.ns, ns);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (d.dg) {
        tok_sum_slices_kernel<<<pr_cuda_blocks(pt.ns, 256), 256, 0, s>>>(d.dg, pt.dg, pt.ns, ns);
        PR_CUDA_LAUNCH_CHECK();
    }
    rec_scratch_free(pt.dk, (size_t)(ns * pt.nk));
    rec_scratch_free(pt.dq, (size_t)(ns * pt.nk));
    if (pt.dkx) rec_scratch_free(pt.dkx, (size_t)(ns * pt.nkx));
    if (pt.db) rec_scratch_free(pt.db, (size_t)(ns * pt.ns));
    if (pt.dg) rec_scratch_free(pt.dg, (size_t)(ns * pt.ns));
    if (dr) rec_scratch_free(dr, (size_t)(rows * p.H * p.V));
}
