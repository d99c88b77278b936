/* ops/ttt_linear_bwd.cu: TTT-Linear's CUDA backward (its three plans: fused,
 * split, split overlapped; see "backward" below and the method at the top
 * of ops/ttt_linear.cu).
 */
#include <algorithm>

#include "ops/ttt_linear_cuda.cuh"

/* ---- backward -----------------------------------------------------------------
 * Names as in ops/ttt_linear.c's mb_backward. e = eta of the mini-batch's last
 * token; the small matrices: at_tj = qs_t . k_j and cb_tj = eta_t (at_tj + 1)
 * for j <= t (0 above), D_tj = dZb_t . gz_j and ED_tj = eta_t D_tj likewise.
 * dW', dhb' are the grads of the next mini-batch's start state.
 *
 * A mini-batch's backward has a local half, which needs only its saved start
 * state and its rows (the recompute of Z, gz, Zb and the output LayerNorm;
 * dZb, D, dq, deta but for one term, the dual form's dk term, the output
 * LayerNorm's dw and db), and a serial half, which needs dW' and dhb'. The
 * plans (plan_bwd): TTT_FUSED, one block per (b, h) doing both halves of each
 * mini-batch in reverse order; or split: TTT_LOCAL, a block per mini-batch,
 * keeping xz, the residual y, gz, dZb, sz and cb in global scratch, and
 * TTT_SERIAL, a block per (b, h) for the serial halves, either one launch
 * after the other or side by side in one (ttt_bwd_overlap_kernel). The split takes
 * half the products and three of five row phases off the serial chain and
 * spreads them over every SM: it wins where the B H fused blocks would leave
 * most SMs idle, and loses where they fill the card. */
template <class P> struct bwd_bufs {
    P W, dW, hb, dhb, w, b, dwp, dbp;
    P qs, kb, yb, xz, gz, xb, dzb, dgz, tq;
    P at, cb, D, ED, eta, sz, sb, pg, pt;
    size_t floats;   /* all of them */
};
typedef bwd_bufs<float *> bwd_smem;

/* the shared memory of a backward kernel: each holds what its half needs.
 * P = float * from the kernel's base; P = size_t from 0 for the launcher's
 * sizes (a pointer that could be null would make the compiler give up on
 * the buffers being shared memory: generic loads in every product). Row
 * buffers stay 16-byte aligned where K % 4 == 0. */
template <class P> __host__ __device__ inline bwd_bufs<P> bwd_bufs_of(P base, const ttt_args &a, int kind)
{
    const bool loc = kind != TTT_SERIAL, ser = kind != TTT_LOCAL;
    const size_t KW = (size_t)a.K * a.ldw, K = a.K, RK = (size_t)a.mbp * a.ldr, SS = (size_t)a.mbp * a.ls, mb = a.mb;
    size_t o = 0;
    auto take = [&](bool need, size_t n) {
        const P p = base + o;
        o += need ? n : 0;
        return p;
    };
    bwd_bufs<P> s;
    s.W = take(true, KW), s.dW = take(ser, KW), s.hb = take(loc, K), s.dhb = take(ser, K);
    s.w = take(true, K), s.b = take(loc, K), s.dwp = take(ser, K), s.dbp = take(ser, K);
    /* qs, kb and xb, xz adjacent: qk_w's one product */
    s.qs = take(true, RK), s.kb = take(true, RK), s.yb = take(true, RK), s.xb = take(true, RK);
    s.xz = take(true, RK), s.gz = take(true, RK), s.dzb = take(true, RK), s.dgz = take(ser, RK), s.tq = take(loc, RK);
    s.at = take(loc, SS), s.cb = take(true, SS), s.D = take(loc, SS), s.ED = take(loc, SS);
    s.eta = take(loc, mb), s.sz = take(true, mb), s.sb = take(loc, mb), s.pg = take(ser, mb);
    s.pt = take(loc && a.mbp == 16, TTT_PT);
    s.floats = o;
    return s;
}

/* recompute: xz = the normalized rows of Z = k W + hb, gz = dl/dZ, sz, yb =
 * the residual (yb held v); at, cb; and xb = q W (unscaled) for bwd_zb. Two
 * phases (q as loaded: its scale is applied after the products). */
template <int KPL, int KERNEL>
__device__ void bwd_inner(bool tc, const ttt_args &a, const bwd_smem &s, int m)
{
    const int K = a.K, ldr = a.ldr, ls = a.ls;
    const bool split = pt_split<ttt_bf_kernel(KERNEL)>(tc, a, m);
    qk_w<KERNEL>(tc, a, s.xb, s.xz, s.qs, s.kb, s.W, m);
    if (split) pt_mm<KERNEL>(s.pt, s.qs, ldr, s.kb, ldr, K);
    else blk_mm<false, true, KERNEL>(tc, s.at, ls, s.qs, ldr, s.kb, ldr, m, m, K, a.scale, false);
    __syncthreads();
    TTT_FOR_ROWS(i, ok, m)
    inner_grad_row<KPL>(s.xz + i * ldr, s.hb, s.yb + i * ldr, s.kb + i * ldr, s.w, s.b, K, a.eps, s.gz + i * ldr,
                        s.sz + i, s.yb + i * ldr, ok);
    for (int p = threadIdx.x; p < m * m; p += blockDim.x) {
        const int t = p / m, j = p - t * m;
        const float x = j > t ? 0.f : split ? a.scale * pt_sum(s.pt, t, j) : s.at[t * ls + j];
        s.at[t * ls + j] = x, s.cb[t * ls + j] = j <= t ? s.eta[t] * (x + 1.f) : 0.f;
    }
    __syncthreads();
}

/* recompute: Zb = scale xb - cb gz (xb = q W from bwd_inner; cb gz into tq,
 * which is free until dq), LayerNormed with hb: xb = its normalized rows, sb
 * their scales. Two phases. */
template <int KPL, int KERNEL>
__device__ void bwd_zb(bool tc, const ttt_args &a, const bwd_smem &s, int m)
{
    const int K = a.K, ldr = a.ldr;
    blk_mm<false, false, KERNEL>(tc, s.tq, ldr, s.cb, a.ls, s.gz, ldr, m, K, m, -1.f, false);
    __syncthreads();
    TTT_FOR_ROWS(i, ok, m) {
        row_t<KPL> x = row_load<KPL>(s.xb + i * ldr, K), c = row_load<KPL>(s.tq + i * ldr, K);
        const row_t<KPL> hr = row_load<KPL>(s.hb, K);
#pragma unroll
        for (int r = 0; r < KPL; r++) x.x[r] = a.scale * x.x[r] + c.x[r] + hr.x[r];
        float sc = row_ln(x, K, a.eps);
        if (!ok) continue;
        row_store(s.xb + i * ldr, x, K);
        if (row_lane() == 0) s.sb[i] = sc;
    }
    __syncthreads();
}

/* the output LayerNorm's dw, db over the mini-batch (a thread per column:
 * fixed order), into dw[c], db[c] (acc: added) */
__device__ void bwd_out_dw_db(const ttt_args &a, const bwd_smem &s, int m, float *dw, float *db, bool acc)
{
    const int ldr = a.ldr;
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) {
        float sw = 0, sbias = 0;
        for (int t = 0; t < m; t++) sw += s.dzb[t * ldr + c] * s.xb[t * ldr + c], sbias += s.dzb[t * ldr + c];
        dw[c] = (acc ? dw[c] : 0.f) + sw, db[c] = (acc ? db[c] : 0.f) + sbias;
    }
}

/* dZb = do + LNback(xb, w do), in place of do (rows only) */
template <int KPL>
__device__ void bwd_dzb_rows(const ttt_args &a, const bwd_smem &s, int m)
{
    const int K = a.K, ldr = a.ldr;
    TTT_FOR_ROWS(i, ok, m) {
        row_t<KPL> d = row_load<KPL>(s.dzb + i * ldr, K), x = row_load<KPL>(s.xb + i * ldr, K);
        row_t<KPL> wr = row_load<KPL>(s.w, K), g;
#pragma unroll
        for (int r = 0; r < KPL; r++) g.x[r] = wr.x[r] * d.x[r];
        row_t<KPL> dz = row_ln_back(x, ok ? s.sb[i] : 1.f, g, K);   /* row m: padding */
#pragma unroll
        for (int r = 0; r < KPL; r++) dz.x[r] += d.x[r];
        if (ok) row_store(s.dzb + i * ldr, dz, K);
    }
}

/* P = k dW' (in dgz) += dhb'; pg_j = P_j . gz_j; dgz_j = -e P_j (rows only) */
template <int KPL>
__device__ void bwd_pg_rows(const ttt_args &a, const bwd_smem &s, int m, float e)
{
    const int K = a.K, ldr = a.ldr;
    TTT_FOR_ROWS(j, ok, m) {
        row_t<KPL> pr = row_load<KPL>(s.dgz + j * ldr, K), dh = row_load<KPL>(s.dhb, K);
#pragma unroll
        for (int r = 0; r < KPL; r++) pr.x[r] += dh.x[r];
        const float d = row_dot(pr, row_load<KPL>(s.gz + j * ldr, K));
#pragma unroll
        for (int r = 0; r < KPL; r++) pr.x[r] *= -e;
        if (!ok) continue;
        row_store(s.dgz + j * ldr, pr, K);
        if (row_lane() == 0) s.pg[j] = d;
    }
}

/* D = dZb gz^T (into pt where split) */
template <int KERNEL>
__device__ void bwd_d(bool split, bool tc, const ttt_args &a, const bwd_smem &s, int m)
{
    if (split) return pt_mm<KERNEL>(s.pt, s.dzb, a.ldr, s.gz, a.ldr, a.K);
    blk_mm<false, true, KERNEL>(tc, s.D, a.ls, s.dzb, a.ldr, s.gz, a.ldr, m, m, a.K, 1.f, false);
}

/* D masked to j <= t, and ED */
__device__ void bwd_mask_d(bool split, const ttt_args &a, const bwd_smem &s, int m)
{
    const int ls = a.ls;
    for (int p = threadIdx.x; p < m * m; p += blockDim.x) {
        const int t = p / m, j = p - t * m;
        const float x = j > t ? 0.f : split ? pt_sum(s.pt, t, j) : s.D[t * ls + j];
        s.D[t * ls + j] = x, s.ED[t * ls + j] = s.eta[t] * x;
    }
}

/* deta += -sum_{j<=t} (at_tj + 1) D_tj, and for the last token -sum_j pg_j
 * when pg is given */
__device__ void bwd_deta(const ttt_args &a, const bwd_smem &s, int bi, int h, int t0, int m, const float *pg)
{
    if (!a.deta) return;
    for (int t = threadIdx.x; t < m; t += blockDim.x) {
        float x = 0;
        for (int j = 0; j <= t; j++) x -= (s.at[t * a.ls + j] + 1.f) * s.D[t * a.ls + j];
        if (pg && t == m - 1)
            for (int j = 0; j < m; j++) x -= pg[j];
        a.deta[((long long)bi * a.T + t0 + t) * a.H + h] += x;
    }
}

/* through gz = LNback(xz, sz, G): dG (into gz), dZ (into dgz), dv (added to
 * the grad), xb += w dG (rows only) */
template <int KPL>
__device__ void bwd_dg_rows(const ttt_args &a, const bwd_smem &s, int bi, int h, int t0, int m)
{
    const int K = a.K, ldr = a.ldr;
    TTT_FOR_ROWS(j, ok, m) {
        row_t<KPL> xh = row_load<KPL>(s.xz + j * ldr, K), y = row_load<KPL>(s.yb + j * ldr, K);
        row_t<KPL> g = row_load<KPL>(s.gz + j * ldr, K), dg = row_load<KPL>(s.dgz + j * ldr, K);
        row_t<KPL> wr = row_load<KPL>(s.w, K), G, dxh, dv0{};
        const long long gj = grow(a, bi, h, t0 + j);
        if (a.dv && ok) dv0 = row_load<KPL>(a.dv + gj, K);   /* issued before the reductions below */
        const float sc = ok ? s.sz[j] : 1.f;   /* row m: padding */
#pragma unroll
        for (int r = 0; r < KPL; r++) G.x[r] = wr.x[r] * y.x[r];
        const float mgx = row_dot(G, xh) / K, mdx = row_dot(dg, xh) / K, dsz = -row_dot(dg, g) / sc, isc = 1.f / sc;
        row_t<KPL> dG = row_ln_back(xh, sc, dg, K);
#pragma unroll
        for (int r = 0; r < KPL; r++) dxh.x[r] = wr.x[r] * wr.x[r] * dG.x[r] - (dg.x[r] * mgx + G.x[r] * mdx) * isc;
        row_t<KPL> dZ = row_ln_back(xh, sc, dxh, K);
        if (!ok) continue;
        const int lane = row_lane();
        const float dszk = dsz / K;
#pragma unroll
        for (int r = 0; r < KPL; r++) {
            const int c = lane + TTT_LPR * r;
            if (c >= K) continue;
            dZ.x[r] += dszk * xh.x[r];
            s.xb[j * ldr + c] += wr.x[r] * dG.x[r];
            dv0.x[r] -= wr.x[r] * dG.x[r];
        }
        row_store(s.gz + j * ldr, dG, K);
        row_store(s.dgz + j * ldr, dZ, K);
        if (a.dv) row_store(a.dv + gj, dv0, K);
    }
}

/* the serial half's last phase: dk = xb + dZ W^T (added to the grad with the
 * next loads); dW' += scale q^T dZb + k^T dZ; dhb' += the column sums of dZb
 * and dZ; the inner LayerNorm's dw, db (a thread per column) */
template <int KERNEL>
__device__ void bwd_state_grads(bool tc, const ttt_args &a, const bwd_smem &s, int m)
{
    const int K = a.K, ldr = a.ldr, ldw = a.ldw;
    if (a.dk) blk_mm<false, true, KERNEL>(tc, s.xb, ldr, s.dgz, ldr, s.W, ldw, m, K, K, 1.f, true);
    blk_mm<true, false, KERNEL>(tc, s.dW, ldw, s.qs, ldr, s.dzb, ldr, K, K, m, a.scale, true);
    blk_mm<true, false, KERNEL>(tc, s.dW, ldw, s.kb, ldr, s.dgz, ldr, K, K, m, 1.f, true);
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        float sh = 0, sw = 0, sbias = 0;
        for (int t = 0; t < m; t++) {
            const float dG = s.gz[t * ldr + c];
            sh += s.dzb[t * ldr + c] + s.dgz[t * ldr + c];
            sw += dG * (s.w[c] * s.xz[t * ldr + c] + s.yb[t * ldr + c]);
            sbias += s.w[c] * dG;
        }
        s.dhb[c] += sh, s.dwp[c] += sw, s.dbp[c] += sbias;
    }
}

/* the grads of the first start state and the dw, db partials of (b, h) */
__device__ void bwd_finish(const ttt_args &a, const bwd_smem &s, int bi, int h)
{
    const int K = a.K, bh = bi * a.H + h;
    if (a.dk) put_rows(a.dk, s.xb, 1.f, true, a, bi, h, 0, min(a.mb, a.T));
    if (a.dh0)
        for (int i = threadIdx.x; i < K * K; i += blockDim.x)
            a.dh0[bh * (long long)K * K + i] += s.dW[(i / K) * a.ldw + i % K];
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        if (a.dhb0) a.dhb0[(long long)bh * K + c] += s.dhb[c];
        a.dwp[(long long)bh * K + c] = s.dwp[c], a.dbp[(long long)bh * K + c] = s.dbp[c];
    }
}

/* zeroes the block's shared memory (padding rows and columns feed only
 * dropped results, but must be finite), then loads what the start needs:
 * w (and b), dW' = dht and dhb' = dhbt for the serial half */
__device__ void bwd_start(const ttt_args &a, const bwd_smem &s, int kind, int bh)
{
    extern __shared__ float sm[];
    const int K = a.K, h = bh % a.H, tid = threadIdx.x, nth = blockDim.x;
    for (int i = tid; i < (int)s.floats; i += nth) sm[i] = 0.f;
    __syncthreads();
    for (int c = tid; c < K; c += nth) {
        s.w[c] = a.w[h * K + c];
        if (kind != TTT_SERIAL) s.b[c] = a.b[h * K + c];
    }
    if (kind == TTT_LOCAL) return;
    const long long KK = (long long)K * K;
    for (int i = tid; i < K * K; i += nth) s.dW[(i / K) * a.ldw + i % K] = a.dht ? a.dht[bh * KK + i] : 0.f;
    for (int c = tid; c < K; c += nth) s.dhb[c] = a.dhbt ? a.dhbt[(long long)bh * K + c] : 0.f;
}

/* the local half's loads of mini-batch n: its start state W, hb, and q, k, v
 * (into yb), do (into dzb), eta (cp.async where they allow: complete at the
 * next rec_sync) */
__device__ void bwd_load_local(const ttt_args &a, const bwd_smem &s, int bi, int h, int n, int m)
{
    const int K = a.K, ldr = a.ldr, t0 = n * a.mb;
    const long long bn = (bi * (long long)a.H + h) * a.nmb + n, g0 = grow(a, bi, h, t0);
    ld_state(s.W, a.ldw, a.Ws + bn * K * K, K);
    ld_rows(s.qs, ldr, a.q, g0, a.H, m, K), ld_rows(s.kb, ldr, a.k, g0, a.H, m, K);
    ld_rows(s.yb, ldr, a.v, g0, a.H, m, K), ld_rows(s.dzb, ldr, a.dout, g0, a.H, m, K);
    for (int c = threadIdx.x; c < K; c += blockDim.x) s.hb[c] = a.hbs[bn * K + c];
    for (int i = threadIdx.x; i < m; i += blockDim.x) s.eta[i] = a.eta[((long long)bi * a.T + t0 + i) * a.H + h];
}

template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS) ttt_bwd_fused_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    const bwd_smem s = bwd_bufs_of(sm, a, TTT_FUSED);
    const int K = a.K, ldr = a.ldr, ldw = a.ldw, ls = a.ls, mb = a.mb, bh = blockIdx.x, bi = bh / a.H, h = bh % a.H;

    bwd_start(a, s, TTT_FUSED, bh);
    for (int n = a.nmb - 1; n >= 0; n--) {
        const int t0 = n * mb, m = min(mb, a.T - t0);
        const bool tc = a.tc && m % 16 == 0, split = pt_split<BF>(tc, a, m);
        bwd_load_local(a, s, bi, h, n, m);
        if (a.dk && n + 1 < a.nmb) put_rows(a.dk, s.xb, 1.f, true, a, bi, h, t0 + mb, min(mb, a.T - t0 - mb));
        rec_sync();
        bwd_inner<KPL, TTT_FUSED + TTT_BF * BF>(tc, a, s, m);
        bwd_zb<KPL, TTT_FUSED + TTT_BF * BF>(tc, a, s, m);
        bwd_out_dw_db(a, s, m, s.dwp, s.dbp, true);
        __syncthreads();
        bwd_dzb_rows<KPL>(a, s, m);
        __syncthreads();
        /* D = dZb gz^T; P = k dW' (into dgz) */
        bwd_d<TTT_FUSED + TTT_BF * BF>(split, tc, a, s, m);
        blk_mm<false, false, TTT_FUSED + TTT_BF * BF>(tc, s.dgz, ldr, s.kb, ldr, s.dW, ldw, m, K, K, 1.f, false);
        __syncthreads();
        const float e = s.eta[m - 1];
        bwd_pg_rows<KPL>(a, s, m, e);
        bwd_mask_d(split, a, s, m);
        __syncthreads();
        /* deta; dgz -= cb^T dZb; xb = -e gz dW'^T - ED^T qs (the dk terms through dW'
         * and the dual form); dq = dZb W^T - ED k (into tq) */
        bwd_deta(a, s, bi, h, t0, m, s.pg);
        blk_mm<true, false, TTT_FUSED + TTT_BF * BF>(tc, s.dgz, ldr, s.cb, ls, s.dzb, ldr, m, K, m, -1.f, true);
        blk_mm<false, true, TTT_FUSED + TTT_BF * BF>(tc, s.xb, ldr, s.gz, ldr, s.dW, ldw, m, K, K, -e, false);
        blk_mm<true, false, TTT_FUSED + TTT_BF * BF>(tc, s.xb, ldr, s.ED, ls, s.qs, ldr, m, K, m, -a.scale, true);
        if (a.dq) {
            blk_mm<false, true, TTT_FUSED + TTT_BF * BF>(tc, s.tq, ldr, s.dzb, ldr, s.W, ldw, m, K, K, 1.f, false);
            blk_mm<false, false, TTT_FUSED + TTT_BF * BF>(tc, s.tq, ldr, s.ED, ls, s.kb, ldr, m, K, m, -1.f, true);
        }
        __syncthreads();
        bwd_dg_rows<KPL>(a, s, bi, h, t0, m);
        if (a.dq) put_rows(a.dq, s.tq, a.scale, true, a, bi, h, t0, m);
        __syncthreads();
        bwd_state_grads<TTT_FUSED + TTT_BF * BF>(tc, a, s, m);
        __syncthreads();
    }
    bwd_finish(a, s, bi, h);
}

/* the local half of mini-batch n of (b, h) = bh */
template <int KPL, bool BF>
__device__ void bwd_local_task(const ttt_args &a, const bwd_smem &s, int bh, int n)
{
    const int K = a.K, ldr = a.ldr, ldw = a.ldw, ls = a.ls;
    const int bi = bh / a.H, h = bh % a.H, t0 = n * a.mb, m = min(a.mb, a.T - t0);
    const bool tc = a.tc && m % 16 == 0, split = pt_split<BF>(tc, a, m);

    bwd_start(a, s, TTT_LOCAL, bh);
    bwd_load_local(a, s, bi, h, n, m);
    rec_sync();
    bwd_inner<KPL, TTT_LOCAL + TTT_BF * BF>(tc, a, s, m);
    /* what the serial half reads (nothing below writes these) */
    put_rows(a.xzr, s.xz, 1.f, false, a, bi, h, t0, m), put_rows(a.yr, s.yb, 1.f, false, a, bi, h, t0, m);
    put_rows(a.gzr, s.gz, 1.f, false, a, bi, h, t0, m);
    const long long bn = bh * (long long)a.nmb + n;
    for (int i = threadIdx.x; i < m; i += blockDim.x) a.szr[((long long)bi * a.T + t0 + i) * a.H + h] = s.sz[i];
    for (int p = threadIdx.x; p < m * m; p += blockDim.x) a.cbr[bn * a.mb * a.mb + p] = s.cb[(p / m) * ls + p % m];
    bwd_zb<KPL, TTT_LOCAL + TTT_BF * BF>(tc, a, s, m);
    /* into row B + b nmb + n of the partials (the serial kernel's are rows 0 .. B-1) */
    const long long po = ((a.B + (long long)bi * a.nmb + n) * a.H + h) * K;
    bwd_out_dw_db(a, s, m, a.dwp + po, a.dbp + po, false);
    __syncthreads();
    bwd_dzb_rows<KPL>(a, s, m);
    __syncthreads();
    put_rows(a.dzr, s.dzb, 1.f, false, a, bi, h, t0, m);
    /* D = dZb gz^T; dq's first term dZb W^T */
    bwd_d<TTT_LOCAL + TTT_BF * BF>(split, tc, a, s, m);
    if (a.dq) blk_mm<false, true, TTT_LOCAL + TTT_BF * BF>(tc, s.tq, ldr, s.dzb, ldr, s.W, ldw, m, K, K, 1.f, false);
    __syncthreads();
    bwd_mask_d(split, a, s, m);
    __syncthreads();
    /* deta but for the serial pg term; dq = dZb W^T - ED k; the dual form's dk term -ED^T qs (into xb) */
    bwd_deta(a, s, bi, h, t0, m, nullptr);
    if (a.dq) blk_mm<false, false, TTT_LOCAL + TTT_BF * BF>(tc, s.tq, ldr, s.ED, ls, s.kb, ldr, m, K, m, -1.f, true);
    if (a.dk)
        blk_mm<true, false, TTT_LOCAL + TTT_BF * BF>(tc, s.xb, ldr, s.ED, ls, s.qs, ldr, m, K, m, -a.scale, false);
    __syncthreads();
    if (a.dq) put_rows(a.dq, s.tq, a.scale, true, a, bi, h, t0, m);
    if (a.dk) put_rows(a.dk, s.xb, 1.f, true, a, bi, h, t0, m);
}

/* the local halves, a block per mini-batch (block index (b h) nmb + n) */
template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS, 1) ttt_bwd_local_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    bwd_local_task<KPL, BF>(a, bwd_bufs_of(sm, a, TTT_LOCAL), blockIdx.x / a.nmb, blockIdx.x % a.nmb);
}

/* the serial halves of (b, h) = bh, mini-batches in reverse; with ready,
 * each waits for its local half's flag (ready[bh nmb + n] set) */
template <int KPL, bool BF>
__device__ void bwd_serial_chain(const ttt_args &a, const bwd_smem &s, int bh, int *ready)
{
    const int K = a.K, ldr = a.ldr, ldw = a.ldw, ls = a.ls, mb = a.mb, bi = bh / a.H, h = bh % a.H;

    bwd_start(a, s, TTT_SERIAL, bh);
    for (int n = a.nmb - 1; n >= 0; n--) {
        const int t0 = n * mb, m = min(mb, a.T - t0);
        const bool tc = a.tc && m % 16 == 0;
        const long long g0 = grow(a, bi, h, t0), bn = bh * (long long)a.nmb + n;
        const float e = a.eta[((long long)bi * a.T + t0 + m - 1) * a.H + h];
        ld_state(s.W, ldw, a.Ws + bn * K * K, K);
        ld_rows(s.qs, ldr, a.q, g0, a.H, m, K), ld_rows(s.kb, ldr, a.k, g0, a.H, m, K);
        if (ready) wait_flag(ready + bn);
        ld_rows(s.xz, ldr, a.xzr, g0, a.H, m, K), ld_rows(s.yb, ldr, a.yr, g0, a.H, m, K);
        ld_rows(s.gz, ldr, a.gzr, g0, a.H, m, K), ld_rows(s.dzb, ldr, a.dzr, g0, a.H, m, K);
        if (a.dk && n + 1 < a.nmb) put_rows(a.dk, s.xb, 1.f, true, a, bi, h, t0 + mb, min(mb, a.T - t0 - mb));
        for (int i = threadIdx.x; i < m; i += blockDim.x) s.sz[i] = a.szr[((long long)bi * a.T + t0 + i) * a.H + h];
        for (int p = threadIdx.x; p < m * m; p += blockDim.x) s.cb[(p / m) * ls + p % m] = a.cbr[bn * mb * mb + p];
        rec_sync();
        /* P = k dW' */
        blk_mm<false, false, TTT_SERIAL + TTT_BF * BF>(tc, s.dgz, ldr, s.kb, ldr, s.dW, ldw, m, K, K, 1.f, false);
        __syncthreads();
        bwd_pg_rows<KPL>(a, s, m, e);
        __syncthreads();
        /* deta's pg term; dgz -= cb^T dZb; xb = -e gz dW'^T (the dk term through dW') */
        if (a.deta && threadIdx.x == 0) {
            float x = 0;
            for (int j = 0; j < m; j++) x -= s.pg[j];
            a.deta[((long long)bi * a.T + t0 + m - 1) * a.H + h] += x;
        }
        blk_mm<true, false, TTT_SERIAL + TTT_BF * BF>(tc, s.dgz, ldr, s.cb, ls, s.dzb, ldr, m, K, m, -1.f, true);
        blk_mm<false, true, TTT_SERIAL + TTT_BF * BF>(tc, s.xb, ldr, s.gz, ldr, s.dW, ldw, m, K, K, -e, false);
        __syncthreads();
        bwd_dg_rows<KPL>(a, s, bi, h, t0, m);
        __syncthreads();
        bwd_state_grads<TTT_SERIAL + TTT_BF * BF>(tc, a, s, m);
        __syncthreads();
    }
    bwd_finish(a, s, bi, h);
}

template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS) ttt_bwd_serial_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    bwd_serial_chain<KPL, BF>(a, bwd_bufs_of(sm, a, TTT_SERIAL), blockIdx.x, nullptr);
}

/* Both halves in one cooperative launch, every block resident: blocks 0 ..
 * B H - 1 walk the serial chains while the rest take the local halves from a
 * queue (*next) in the order the chains need them (the last mini-batch of
 * every (b, h) first) and raise each one's flag when its writes are out. The
 * chains wait only for work that resident blocks are doing, so they cannot
 * deadlock; and the local halves run beside the chains instead of before
 * them. */
template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS, 1) ttt_bwd_overlap_kernel(ttt_args a, int *next, int *ready)
{
    extern __shared__ float sm[];
    __shared__ int task;
    const int BH = a.B * a.H;
    if ((int)blockIdx.x < BH) return bwd_serial_chain<KPL, BF>(a, bwd_bufs_of(sm, a, TTT_SERIAL), blockIdx.x, ready);
    const bwd_smem s = bwd_bufs_of(sm, a, TTT_LOCAL);
    for (;;) {
        if (threadIdx.x == 0) task = atomicAdd(next, 1);
        __syncthreads();
        const int t = task;
        if (t >= BH * a.nmb) return;
        const int bh = t % BH, n = a.nmb - 1 - t / BH;
        bwd_local_task<KPL, BF>(a, s, bh, n);
        __threadfence();   /* this thread's writes are visible to the GPU before the flag */
        __syncthreads();
        if (threadIdx.x == 0) atomicExch(ready + (long long)bh * a.nmb + n, 1);
    }
}

/* ---- launchers ----------------------------------------------------------------- */

template <int KPL, bool BF>
static void launch_bwd(const ttt_args &a, cudaStream_t st, int plan, int *flags)
{
    auto bytes_of = [&](int kind) { return bwd_bufs_of<size_t>(0, a, kind).floats * sizeof(float); };
    auto launch = [&](void (*kernel)(ttt_args), int kind, long long blocks) {
        ttt_smem((const void *)kernel, bytes_of(kind), a);
        kernel<<<(unsigned)blocks, TTT_THREADS, bytes_of(kind), st>>>(a);
        PR_CUDA_LAUNCH_CHECK();
    };
    const long long bh = (long long)a.B * a.H;
    if (plan == PLAN_FUSED) return launch(ttt_bwd_fused_kernel<KPL, BF>, TTT_FUSED, bh);
    if (plan == PLAN_SPLIT) {
        launch(ttt_bwd_local_kernel<KPL, BF>, TTT_LOCAL, bh * a.nmb);
        return launch(ttt_bwd_serial_kernel<KPL, BF>, TTT_SERIAL, bh);
    }
    launch_coop(ttt_bwd_overlap_kernel<KPL, BF>, std::max(bytes_of(TTT_LOCAL), bytes_of(TTT_SERIAL)), a, st, flags);
}

extern "C" void pr_ttt_linear_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    PR_CHECK(n->n_saved == 2, "ttt_linear: backward without saved state");
    cudaStream_t st = pr_cuda_stream(ctx);
    ttt_args a = ttt_args_of(ctx, st, n);
    a.Ws = (float *)n->saved[0]->data, a.hbs = (float *)n->saved[1]->data;
    a.dout = ttk_f32_in(ctx, st, n->out[0]->grad), a.dht = ttk_in(n->out[1]->grad), a.dhbt = ttk_in(n->out[2]->grad);
    /* the kernels add to the grads; a bf16 grad gets the sum in f32 scratch, added and rounded once */
    pr_tensor *gq = pr_in_grad(n, 0), *gk = pr_in_grad(n, 1), *gv = pr_in_grad(n, 2), *geta = pr_in_grad(n, 5);
    a.dq = ttk_f32_out(ctx, gq), a.dk = ttk_f32_out(ctx, gk), a.dv = ttk_f32_out(ctx, gv);
    a.deta = ttk_f32_out(ctx, geta);
    a.dh0 = ttk_grad(n, 6), a.dhb0 = ttk_grad(n, 7);
    /* the partials: the (b, h) blocks' rows, then for the split plans the local halves' */
    const int plan = plan_bwd(a.B, a.H, (int)n->iarg[1]).kind;
    const int np = a.B * (plan != PLAN_FUSED ? 1 + a.nmb : 1);
    a.dwp = ttk_partials(ctx, np, a.H, a.K), a.dbp = ttk_partials(ctx, np, a.H, a.K);
    int *flags = nullptr;   /* the overlapped plan's queue head and per-mini-batch flags, zeroed */
    if (plan != PLAN_FUSED) {
        const int64_t rows[4] = {a.B, a.T, a.H, a.K}, cbs[2] = {(int64_t)a.B * a.H * a.nmb, (int64_t)a.mb * a.mb};
        float **bufs[4] = {&a.xzr, &a.yr, &a.gzr, &a.dzr};
        for (float **b : bufs) *b = (float *)pr_empty(ctx->step, PR_F32, PR_CUDA, 4, rows)->data;
        a.szr = (float *)pr_empty(ctx->step, PR_F32, PR_CUDA, 3, rows)->data;
        a.cbr = (float *)pr_empty(ctx->step, PR_F32, PR_CUDA, 2, cbs)->data;
    }
    if (plan == PLAN_OVERLAP) flags = coop_flags(ctx, st, a);
    if (ttt_bf(a, n)) launch_bwd<8, true>(a, st, plan, flags);
    else if (a.K <= 32) launch_bwd<2, false>(a, st, plan, flags);
    else if (a.K <= 64) launch_bwd<4, false>(a, st, plan, flags);
    else launch_bwd<8, false>(a, st, plan, flags);
    ttk_add_dw_db(st, n, a.dwp, a.dbp, np, a.H, a.K);
    ttk_f32_done(st, gq, a.dq, true), ttk_f32_done(st, gk, a.dk, true), ttk_f32_done(st, gv, a.dv, true);
    ttk_f32_done(st, geta, a.deta, true);
}
