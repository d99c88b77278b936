/* ops/recurrence/cuda/gla_fast.cu: the fast form of gla's chunked kernels (the plan's gla_fast,
 * the default: 1.7x the plain form's speed, H100); the algebra and the plain form are in
 * gla_chunked.cu, whose launchers call the ones at the end of this file.
 * gla_cumsum writes the chunk-local cumulative decays G once (a thread per key column, the
 * chunk's g in registers), times log2 e so that every factor is one exp2f (ex2.approx and its
 * range fix-up, where expf adds a scaled argument's split), and no kernel runs the 64-step
 * serial scan of gla_cumsum; the serial passes run in K tiles of 64 rows as well as V tiles
 * of 32 (the decay is diagonal in
 * K: a state's rows are independent), twice the blocks at half the shared memory, each chunk's
 * chain of loads, scalings and product half as long; gla_out_kh computes A in K tiles (two
 * blocks an SM where gla_out runs one) and stores it, and the backward's gla_dv_a reads it
 * instead of recomputing (112 KB of shared memory, two blocks an SM, where gla_dv takes
 * 182 KB); gla_dqk_kt runs in K tiles too (two blocks an SM where gla_dqk runs one) and sums
 * dg in shared memory, adding it by one tile store (the default's 64 dependent global
 * read-modify-writes a column). */
#include "ops/recurrence/cuda/gla.cuh"

#define GLA_BK 64   /* rows of a K tile in the fast serial passes */
#define GLA_LOG2E 1.4426950408889634f   /* G in the fast form is in base 2: every factor an exp2f */
#ifndef GLA_KT_BLOCKS
#define GLA_KT_BLOCKS 3   /* their blocks an SM (80 registers; 4 spill ~350 bytes): 53 KB (state), 62 KB (dstate) at C = 64 */
#endif

/* IO16 (bf16 data, the plan's io16_out: recurrence.cu sets the 16-bit pointers of what it does not
 * stage): q, k, v and dO read in place where their 16-bit pointer is set, each tile copied as bf16
 * into the f32 tile's slots (rec_ld_tile16) and widened there by its copiers once landed
 * (gla_landed, before the barrier), so the tiles hold the staged copies' values; o written and
 * dq, dk, dv accumulated in place with the cast's rounding (rec_st_tile16, rec_acc_tile16), the
 * bits of the staged path. The f32 instances keep their code (these kernels are register-bound). */
template <bool IO16>
__device__ __forceinline__ void gla_ld_in(float *dst, int ld, int R, int W, const float *src, const unsigned short *src16,
                                       long long rs, int nr, int nc, bool vec)
{
    if (IO16 && src16) rec_ld_tile16(dst, ld, R, W, src16, rs, nr, nc);
    else rec_ld_tile(dst, ld, R, W, src, rs, nr, nc, vec);
}
/* this thread's copies landed; its bf16 slots of each tile given with a 16-bit source widened */
struct gla_tile16 {
    float *dst;
    int ld, R, W;
    const unsigned short *src16;
};
template <bool IO16, int N>
__device__ __forceinline__ void gla_landed(const gla_tile16 (&t)[N])
{
    if constexpr (IO16) {
        asm volatile("cp.async.wait_all;\n" ::: "memory");
#pragma unroll
        for (int i = 0; i < N; i++)
            if (t[i].src16) rec_widen_own(t[i].dst, t[i].ld, t[i].R, t[i].W);
    }
}
/* dst (+)= the tile: f32, or bf16 in place where dst16 is set (rounded once) */
template <bool IO16>
__device__ __forceinline__ void gla_st(float *dst, unsigned short *dst16, long long rs, int nr, int nc,
                                       const float *src, int ld, float alpha, bool acc, bool vec)
{
    if (IO16 && dst16) {
        if (acc) rec_acc_tile16(dst16, rs, nr, nc, src, ld); /* alpha 1 (the callers') */
        else rec_st_tile16(dst16, rs, nr, nc, src, ld, alpha);
    } else if (dst) {
        rec_st_tile(dst, rs, nr, nc, src, ld, alpha, acc, vec);
    }
}

template <int C>
__global__ void __launch_bounds__(128) gla_cumsum_kernel(rec_prob p, float *gc)
{
    const rec_chunk_pos cp = rec_chunk_of(p, blockIdx.x);
    const long long base = ((long long)cp.row0 * p.H + blockIdx.y) * p.K, rs = (long long)p.H * p.K;
    for (int cc = threadIdx.x; cc < p.K; cc += blockDim.x) {
        float x[C];   /* every load in flight before the scan */
#pragma unroll
        for (int t = 0; t < C; t++) x[t] = t < cp.nval ? p.g[base + t * rs + cc] : 0.f;
        float run = 0.f;
#pragma unroll
        for (int t = 0; t < C; t++) {
            run += x[t];
            if (t < cp.nval) gc[base + t * rs + cc] = run * GLA_LOG2E;
        }
    }
}

/* the K-tiled serial passes: the state (or its gradient) [BK x BV], a key (or query) tile and
 * G [C x BK], a value (or dO) tile, and (dstate) the end-state tile */
struct gla_kt_lay {
    int H, X, G, V, E, X16, V16, total;
};
/* staged (the IO16 instances): the next chunk's bf16 key (query) and value (dO) tiles beside them,
 * packed (rec_ld_staged16; rows of GLA_BK and GLA_BV): 12 KB more at C = 64, still three blocks
 * an SM (65 KB state, 74.5 KB dstate), where f32 copies a chunk ahead would take 25 KB and drop
 * to two */
__host__ __device__ static gla_kt_lay gla_kt_layout(const rec_prob &p, bool with_end, bool staged)
{
    const int LDB = GLA_BK + 4, LDV = GLA_BV + 4;
    rec_bump m;
    gla_kt_lay s;
    s.H = m.take(GLA_BK * LDV), s.X = m.take(p.C * LDB), s.G = m.take(p.C * LDB), s.V = m.take(p.C * LDV);
    s.E = with_end ? m.take(GLA_BK * LDV) : -1;
    s.X16 = staged ? m.take(p.C * GLA_BK / 2) : -1;
    s.V16 = staged ? m.take(p.C * GLA_BV / 2) : -1;
    s.total = m.off;
    return s;
}
/* the serial passes' copies: where a chunk's bf16 tiles were staged a chunk ahead (their 16-bit
 * source set, IO16), widened from the staging by their copiers; else copied now (f32) */
template <bool IO16>
__device__ __forceinline__ void gla_kt_in(float *dst, int ld, int R, int W, const float *src, const unsigned short *src16,
                                          const unsigned short *staged, int ld16, long long rs, int nr, int nc, bool vec)
{
    if (IO16 && src16) rec_widen_staged(dst, ld, R, W, staged, ld16);
    else rec_ld_tile(dst, ld, R, W, src, rs, nr, nc, vec);
}
/* a staged bf16 tile widened straight into its scaled f32 tile, dst = src o factor(r, c), one pass where
 * widening and then scaling in place take two: each thread reads only the staging slots it copied
 * (rec_ld_staged16's placement), so it may stage the next chunk there as soon as it is through. The
 * products are the unfused passes' (a widened bf16 times the same factor), so the bits are theirs. */
template <class F>
__device__ __forceinline__ void gla_widen_scaled(float *dst, int ld, int R, int W, const unsigned short *staged, int ld16,
                                                 F factor)
{
    const rec_rowmap m = rec_rowmap_of(W);
    for (int r = m.r0; r < R; r += m.rstep)
        for (int c = m.c0; c < W; c += m.cstep) {
            const float4 x = rec_widen4(reinterpret_cast<const float *>(staged + r * ld16 + c)), f = factor(r, c);
            *reinterpret_cast<float4 *>(dst + r * ld + c) = make_float4(x.x * f.x, x.y * f.y, x.z * f.z, x.w * f.w);
        }
}
__device__ __forceinline__ float4 gla_ld4(const float *x) { return *reinterpret_cast<const float4 *>(x); }
__device__ __forceinline__ void gla_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* this thread's copies but the last group (the next chunk's staging) landed */
__device__ __forceinline__ void gla_wait_but_next(bool next)
{
    if (next) asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* a block's tiles (blockIdx.x = V tile * nkt + K tile): state rows k0.. (nk of them real, mt
 * computed, a multiple of 32) and columns v0.. */
struct gla_kt_at {
    int vt, v0, k0, nk, mt;
};
__device__ __forceinline__ gla_kt_at gla_kt_of(const rec_prob &p, int nkt)
{
    const int vt = blockIdx.x / nkt, k0 = blockIdx.x % nkt * GLA_BK;
    return {vt, vt * GLA_BV, k0, min(GLA_BK, p.K - k0), min(GLA_BK, p.Kp - k0)};
}

/* gla_state in K tiles; G's row nval - 1 is the chunk's G_L (rows past it hold zeros, and so do
 * K's: their factors e^{G_L} <= 1 multiply zero). Each chunk's loads wait on the serial chain, so
 * the next chunk's are started early: its G (and, for f32 data, K and V) into L2, and with bf16
 * data its K and V copied into the staging while this chunk's product runs. */
template <bool BF, bool IO16>
__global__ void __launch_bounds__(PR_REC_THREADS, GLA_KT_BLOCKS)
    gla_state_kt_kernel(rec_prob p, const float *gc, int nkt, float *hs, float *ht)
{
    extern __shared__ __align__(128) float sm[];
    const gla_kt_lay s = gla_kt_layout(p, false, IO16);
    const int C = p.C, LDB = GLA_BK + 4, LDV = GLA_BV + 4, BV = GLA_BV;
    const gla_kt_at kt = gla_kt_of(p, nkt);
    const int n = blockIdx.z, h = blockIdx.y, v0 = kt.v0, H = p.H, K = p.K, V = p.V, nv = min(BV, V - v0);
    float *Hs = sm + s.H, *Ks = sm + s.X, *G = sm + s.G, *Vs = sm + s.V;
    unsigned short *K16 = IO16 ? reinterpret_cast<unsigned short *>(sm + s.X16) : nullptr;
    unsigned short *V16 = IO16 ? reinterpret_cast<unsigned short *>(sm + s.V16) : nullptr;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + (long long)kt.k0 * V + v0;
    const long long rsk = (long long)H * K, rsv = (long long)H * V;
    if (p.h0) rec_ld_tile(Hs, LDV, kt.mt, BV, p.h0 + hoff, V, kt.nk, nv, p.vec);
    else REC_FOR2D(kt.mt, LDV, i, j) Hs[i * LDV + j] = 0.f;
    const int nck = (sq.len + C - 1) / C;
    const auto row_of = [&](int ci) { return ((long long)sq.bos + ci * C) * H + h; };
    /* bf16 keys: widened and decayed in one pass from the staging after the barrier (G in place), so
     * their next chunk is staged after that pass, not with the values' */
    const bool fuse_k = IO16 && p.k16;
    const auto stage_k = [&](int ci) {
        rec_ld_staged16(K16, GLA_BK, C, kt.mt, p.k16 + row_of(ci) * K + kt.k0, rsk, min(C, sq.len - ci * C), kt.nk);
    };
    const auto ahead = [&](int ci, bool with_k) {   /* chunk ci's loads started */
        const int nval = min(C, sq.len - ci * C);
        const long long rk = row_of(ci);
        if (IO16) {
            if (p.k16 && with_k) stage_k(ci);
            if (p.v16) rec_ld_staged16(V16, BV, C, BV, p.v16 + rk * V + v0, rsv, nval, nv);
            gla_commit();
        }
        if (!(IO16 && p.k16)) rec_l2_rows(p.k + rk * K + kt.k0, rsk * 4, nval, kt.nk * 4);
        if (!(IO16 && p.v16)) rec_l2_rows(p.v + rk * V + v0, rsv * 4, nval, nv * 4);
        rec_l2_rows(gc + rk * K + kt.k0, rsk * 4, nval, kt.nk * 4);
    };
    if (nck > 0) ahead(0, true);
    for (int ci = 0; ci < nck; ci++) {
        const int c = sq.cbase + ci, nval = min(C, sq.len - ci * C);
        const long long rk = row_of(ci);
        const bool next = ci + 1 < nck;
        rec_sync();   /* the last product done: Hs final, Ks and Vs free; this chunk's staging landed */
        if (!fuse_k)
            gla_kt_in<IO16>(Ks, LDB, C, kt.mt, p.k + rk * K + kt.k0, IO16 ? p.k16 : nullptr, K16, GLA_BK, rsk, nval,
                            kt.nk, p.vec);
        gla_kt_in<IO16>(Vs, LDV, C, BV, p.v + rk * V + v0, IO16 ? p.v16 : nullptr, V16, BV, rsv, nval, nv, p.vec);
        rec_ld_tile(G, LDB, C, kt.mt, gc + rk * K + kt.k0, rsk, nval, kt.nk, p.vec);
        gla_commit();
        if (next) ahead(ci + 1, !fuse_k);   /* after the widening: the staging is its copiers' own */
        if (hs)
            rec_st_tile(hs + ((long long)c * H + h) * K * V + (long long)kt.k0 * V + v0, V, kt.nk, nv, Hs, LDV, 1.f,
                        false, p.vec);
        gla_wait_but_next(IO16 && next);
        __syncthreads();
        const float *GL = G + (nval - 1) * LDB;
        if (fuse_k) {
            gla_widen_scaled(Ks, LDB, C, kt.mt, K16, GLA_BK, [&](int t, int cc) {
                const float4 g = gla_ld4(G + t * LDB + cc), gl = gla_ld4(GL + cc);
                return make_float4(exp2f(gl.x - g.x), exp2f(gl.y - g.y), exp2f(gl.z - g.z), exp2f(gl.w - g.w));
            });
            if (next) {   /* this thread's staging slots read: the next chunk's keys may land there */
                stage_k(ci + 1);
                gla_commit();
            }
        } else {
            REC_FOR2D(C, kt.mt, t, cc) Ks[t * LDB + cc] *= exp2f(GL[cc] - G[t * LDB + cc]);
        }
        REC_FOR2D(kt.mt, BV, i, j) Hs[i * LDV + j] *= exp2f(GL[i]);
        __syncthreads();
        rec_mm<true, false, BF>(p, Hs, LDV, Ks, LDB, Vs, LDV, kt.mt, BV, C, 1.f, true);
    }
    rec_sync();
    if (ht) rec_st_tile(ht + hoff, V, kt.nk, nv, Hs, LDV, 1.f, false, p.vec);
}

/* gla_dstate in K tiles: the same outputs (ep's rows of this K tile); the next chunk's loads
 * started early as gla_state_kt's, and its end state into L2 */
template <bool BF, bool IO16>
__global__ void __launch_bounds__(PR_REC_THREADS, GLA_KT_BLOCKS)
    gla_dstate_kt_kernel(rec_prob p, const float *gc, int nkt, const float *hs, const float *ht, float *dhs,
                         float *ep, float *dh0)
{
    extern __shared__ __align__(128) float sm[];
    const gla_kt_lay s = gla_kt_layout(p, true, IO16);
    const int C = p.C, LDB = GLA_BK + 4, LDV = GLA_BV + 4, BV = GLA_BV;
    const gla_kt_at kt = gla_kt_of(p, nkt);
    const int n = blockIdx.z, h = blockIdx.y, vt = kt.vt, v0 = kt.v0, H = p.H, K = p.K, V = p.V;
    const int nv = min(BV, V - v0), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *dH = sm + s.H, *Qs = sm + s.X, *G = sm + s.G, *dOs = sm + s.V, *Es = sm + s.E;
    unsigned short *Q16 = IO16 ? reinterpret_cast<unsigned short *>(sm + s.X16) : nullptr;
    unsigned short *dO16 = IO16 ? reinterpret_cast<unsigned short *>(sm + s.V16) : nullptr;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const long long hoff = ((long long)n * H + h) * K * V + (long long)kt.k0 * V + v0, at = (long long)kt.k0 * V + v0;
    const long long rsk = (long long)H * K, rsv = (long long)H * V;
    if (p.dht) rec_ld_tile(dH, LDV, kt.mt, BV, p.dht + hoff, V, kt.nk, nv, p.vec);
    else REC_FOR2D(kt.mt, LDV, i, j) dH[i * LDV + j] = 0.f;
    const int nck = (sq.len + C - 1) / C;
    const auto row_of = [&](int ci) { return ((long long)sq.bos + ci * C) * H + h; };
    const auto end_of = [&](int ci) {   /* the state at chunk ci's end */
        return ci == nck - 1 ? ht + hoff : hs + ((long long)(sq.cbase + ci + 1) * H + h) * K * V + at;
    };
    /* bf16 queries: widened and scaled in one pass from the staging after the barrier, so their next
     * chunk is staged after that pass (gla_state_kt's keys likewise) */
    const bool fuse_q = IO16 && p.q16;
    const auto stage_q = [&](int ci) {
        rec_ld_staged16(Q16, GLA_BK, C, kt.mt, p.q16 + row_of(ci) * K + kt.k0, rsk, min(C, sq.len - ci * C), kt.nk);
    };
    const auto ahead = [&](int ci, bool with_q) {   /* chunk ci's loads started */
        const int nval = min(C, sq.len - ci * C);
        const long long rk = row_of(ci);
        if (IO16) {
            if (p.q16 && with_q) stage_q(ci);
            if (p.dout16) rec_ld_staged16(dO16, BV, C, BV, p.dout16 + rk * V + v0, rsv, nval, nv);
            gla_commit();
        }
        if (!(IO16 && p.q16)) rec_l2_rows(p.q + rk * K + kt.k0, rsk * 4, nval, kt.nk * 4);
        if (!(IO16 && p.dout16)) rec_l2_rows(p.dout + rk * V + v0, rsv * 4, nval, nv * 4);
        rec_l2_rows(gc + rk * K + kt.k0, rsk * 4, nval, kt.nk * 4);
        rec_l2_rows(end_of(ci), (long long)V * 4, kt.nk, nv * 4);
    };
    if (nck > 0) ahead(nck - 1, true);
    for (int ci = nck - 1; ci >= 0; ci--) {
        const int c = sq.cbase + ci, nval = min(C, sq.len - ci * C);
        const long long rk = row_of(ci);
        const bool next = ci > 0;
        rec_sync();   /* dH is dS' of chunk c; this chunk's staging landed */
        rec_st_tile(dhs + ((long long)c * H + h) * K * V + at, V, kt.nk, nv, dH, LDV, 1.f, false, p.vec);
        rec_ld_tile(Es, LDV, kt.mt, BV, end_of(ci), V, kt.nk, nv, p.vec);
        if (!fuse_q)
            gla_kt_in<IO16>(Qs, LDB, C, kt.mt, p.q + rk * K + kt.k0, IO16 ? p.q16 : nullptr, Q16, GLA_BK, rsk, nval,
                            kt.nk, p.vec);
        rec_ld_tile(G, LDB, C, kt.mt, gc + rk * K + kt.k0, rsk, nval, kt.nk, p.vec);
        gla_kt_in<IO16>(dOs, LDV, C, BV, p.dout + rk * V + v0, IO16 ? p.dout16 : nullptr, dO16, BV, rsv, nval, nv,
                        p.vec);
        gla_commit();
        if (next) ahead(ci - 1, !fuse_q);
        gla_wait_but_next(IO16 && next);
        __syncthreads();
        for (int i = warp; i < kt.nk; i += PR_REC_WARPS) {   /* the dg end term's share of this tile */
            float x = 0.f;
            for (int j = lane; j < nv; j += 32) x = fmaf(Es[i * LDV + j], dH[i * LDV + j], x);
            x = gla_warp_sum(x);
            if (lane == 0) ep[(((long long)vt * p.nchunks + c) * H + h) * K + kt.k0 + i] = x;
        }
        if (fuse_q) {   /* G landed at the barrier above; Qs is not read before the one below */
            gla_widen_scaled(Qs, LDB, C, kt.mt, Q16, GLA_BK, [&](int t, int cc) {
                const float4 g = gla_ld4(G + t * LDB + cc);
                return make_float4(p.scale * exp2f(g.x), p.scale * exp2f(g.y), p.scale * exp2f(g.z),
                                   p.scale * exp2f(g.w));
            });
            if (next) {   /* this thread's staging slots read: the next chunk's queries may land there */
                stage_q(ci - 1);
                gla_commit();
            }
        }
        __syncthreads();
        const float *GL = G + (nval - 1) * LDB;
        if (!fuse_q) REC_FOR2D(C, kt.mt, t, cc) Qs[t * LDB + cc] *= p.scale * exp2f(G[t * LDB + cc]);
        REC_FOR2D(kt.mt, BV, i, j) dH[i * LDV + j] *= exp2f(GL[i]);
        __syncthreads();
        rec_mm<true, false, BF>(p, dH, LDV, Qs, LDB, dOs, LDV, kt.mt, BV, C, 1.f, true);
    }
    rec_sync();
    if (dh0) rec_st_tile(dh0 + hoff, V, kt.nk, nv, dH, LDV, 1.f, true, p.vec);
}

/* gla_dv of the fast form: A read from the forward (gla_out stored it), not recomputed, so no
 * Q, no scores, and G only until K o e^{G_L - G} is formed, its room then the V loop's:
 * K [C x LDK], A, dA [C x LDC], then G or the V loop's dS', dO, V, dv tiles. At C = 64,
 * K = V = 128 that is 112 KB, two blocks an SM (the default gla_dv: 182 KB, one). */
struct gla_dva_lay {
    int K, A, dA, U, total;
};
__host__ __device__ static gla_dva_lay gla_dva_layout(const rec_prob &p)
{
    const gla_ld l = gla_ld_of(p);
    rec_bump m;
    gla_dva_lay s;
    s.K = m.take(l.C * l.LDK), s.A = m.take(l.C * l.LDC), s.dA = m.take(l.C * l.LDC);
    s.U = m.take(gla_imax(l.C * l.LDK, l.Kp * l.LDV + 3 * l.C * l.LDV));
    s.total = m.off;
    return s;
}

template <bool BF, bool IO16>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    gla_dv_a_kernel(rec_prob p, const float *dhs, const float *A_in, float *dA_out, float *dv, unsigned short *dv16,
                    const float *gc)
{
    extern __shared__ __align__(128) float sm[];
    const gla_dva_lay s = gla_dva_layout(p);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC, LDV = l.LDV, BV = GLA_BV;
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V;
    float *Kt = sm + s.K, *A = sm + s.A, *dA = sm + s.dA, *G = sm + s.U;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h;
    const unsigned short *k16 = IO16 && p.k16 ? p.k16 + rk * K : nullptr;
    gla_ld_in<IO16>(Kt, LDK, C, Kp, p.k + rk * K, k16, (long long)H * K, cp.nval, K, p.vec); /* gla_ld_keys */
    gla_ld_keys(p, G, gc, rk, cp.nval, p.vec);
    rec_ld_tile(A, LDC, C, C, A_in + ((long long)c * H + h) * C * C, C, C, C, true);
    gla_landed<IO16>({gla_tile16{Kt, LDK, C, Kp, k16}});
    rec_sync();
    const float *GL = G + (cp.nval - 1) * LDK;   /* rows past nval: K zero, G zero (factors e^{G_L} <= 1) */
    REC_FOR2D(C, Kp, t, cc) Kt[t * LDK + cc] *= exp2f(GL[cc] - G[t * LDK + cc]);   /* K o e^{G_L - G} */
    __syncthreads();   /* G read: its room is the V loop's */
    float *dSs = sm + s.U, *dOs = dSs + Kp * LDV, *Vs = dOs + C * LDV, *DV = Vs + C * LDV;
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        rec_ld_tile(dSs, LDV, Kp, BV, dhs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        const unsigned short *do16 = IO16 && p.dout16 ? p.dout16 + rk * V + v0 : nullptr;
        const unsigned short *v16 = IO16 && p.v16 ? p.v16 + rk * V + v0 : nullptr;
        gla_ld_in<IO16>(dOs, LDV, C, BV, p.dout + rk * V + v0, do16, (long long)H * V, cp.nval, nv, p.vec);
        gla_ld_in<IO16>(Vs, LDV, C, BV, p.v + rk * V + v0, v16, (long long)H * V, cp.nval, nv, p.vec);
        gla_landed<IO16>({gla_tile16{dOs, LDV, C, BV, do16}, gla_tile16{Vs, LDV, C, BV, v16}});
        rec_sync();
        rec_mm<false, true, BF>(p, dA, LDC, dOs, LDV, Vs, LDV, C, C, BV, p.scale, v0 > 0);
        rec_mm<true, false, BF>(p, DV, LDV, A, LDC, dOs, LDV, C, BV, C, p.scale, false);
        rec_mm<false, false, BF>(p, DV, LDV, Kt, LDK, dSs, LDV, C, BV, Kp, 1.f, true);
        rec_sync();
        gla_st<IO16>(dv ? dv + rk * V + v0 : nullptr, IO16 && dv16 ? dv16 + rk * V + v0 : nullptr, (long long)H * V,
                     cp.nval, nv, DV, LDV, 1.f, true, p.vec);
    }
    float *dst = dA_out + ((long long)c * H + h) * C * C;
    REC_FOR2D(C, C, t, i) dst[t * C + i] = i <= t ? dA[t * LDC + i] : 0.f;
}

/* gla_out of the fast form, the scores in K tiles of 64 columns (A is a sum over key columns):
 * per tile Q, K, G [C x 68]; the pairs inside each sub-chunk a thread a pair; Q o e^G into a
 * full-width QE; Q <- Q o e^{G - G_r(t)}; then for each row sub-chunk a (r = 16 a) K's rows
 * before r scaled in place to K o e^{G_r - G} (rows before r - 16 already hold
 * K o e^{G_{r-16} - G}: one more column factor e^{G_r - G_{r-16}} <= 1) and its blocks against
 * the earlier sub-chunks on tensor cores, added into A. No factor region: QE [C x LDK], A,
 * and the tiles' room, later the V loop's (S, V, O): 101 KB at C = 64, K = V = 128, two blocks
 * an SM where gla_out takes 156 KB. A is stored when A_out is given (recorded calls). */
struct gla_okh_lay {
    int T, QE, A, total;
};
__host__ __device__ static gla_okh_lay gla_okh_layout(const rec_prob &p)
{
    const gla_ld l = gla_ld_of(p);
    rec_bump m;
    gla_okh_lay s;
    s.T = m.take(gla_imax(3 * l.C * (GLA_BK + 4), l.Kp * l.LDV + 2 * l.C * l.LDV));
    s.QE = m.take(l.C * l.LDK), s.A = m.take(l.C * l.LDC);
    s.total = m.off;
    return s;
}

/* one K tile's share of A (the caller synchronizes before: the tiles loaded, G's tail filled) */
template <bool BF>
__device__ void gla_scores_tile(const rec_prob &p, float *A, float *QE, float *Qh, float *Kh, const float *Gh, int k0,
                                int mt)
{
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, LDC = l.LDC, LDK = l.LDK, LDB = GLA_BK + 4, warp = threadIdx.x >> 5;
    gla_pairs_by_thread(A, LDC, C, Qh, Kh, Gh, LDB, mt);
    REC_FOR2D(C, mt, t, cc) QE[t * LDK + k0 + cc] = Qh[t * LDB + cc] * exp2f(Gh[t * LDB + cc]);
    __syncthreads();   /* the pairs read Q and K as loaded */
    REC_FOR2D(C, mt, t, cc) Qh[t * LDB + cc] *= exp2f(Gh[t * LDB + cc] - Gh[(t & ~(GLA_SUB - 1)) * LDB + cc]);
    for (int r = GLA_SUB; r < C; r += GLA_SUB) {
        REC_FOR2D(r, mt, i, cc) {
            const float gr = Gh[r * LDB + cc];
            Kh[i * LDB + cc] *= exp2f(gr - Gh[(i < r - GLA_SUB ? r - GLA_SUB : i) * LDB + cc]);
        }
        __syncthreads();
        for (int b = warp; b < r / GLA_SUB; b += PR_REC_WARPS)
            gla_blk16<false, true, BF>(p, A, LDC, Qh, LDB, Kh, LDB, r, b * GLA_SUB, mt, 1.f, true);
        __syncthreads();   /* the blocks read K before its next scaling */
    }
}

template <bool BF, bool IO16>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    gla_out_kh_kernel(rec_prob p, const float *hs, float *o, const float *gc, float *A_out)
{
    extern __shared__ __align__(128) float sm[];
    const gla_okh_lay s = gla_okh_layout(p);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, Kp = l.Kp, LDK = l.LDK, LDC = l.LDC, LDV = l.LDV, LDB = GLA_BK + 4, BV = GLA_BV;
    const int c = blockIdx.x, h = blockIdx.y, H = p.H, K = p.K, V = p.V;
    float *Qh = sm + s.T, *Kh = Qh + C * LDB, *Gh = Kh + C * LDB, *QE = sm + s.QE, *A = sm + s.A;
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const long long rk = (long long)cp.row0 * H + h;
    REC_FOR2D(C, C, t, i) A[t * LDC + i] = 0.f;
    for (int k0 = 0; k0 < Kp; k0 += GLA_BK) {
        const int mt = min(GLA_BK, Kp - k0), nk = min(GLA_BK, K - k0);   /* k0 < Kp: k0 < K */
        const unsigned short *q16 = IO16 && p.q16 ? p.q16 + rk * K + k0 : nullptr;
        const unsigned short *k16 = IO16 && p.k16 ? p.k16 + rk * K + k0 : nullptr;
        gla_ld_in<IO16>(Qh, LDB, C, mt, p.q + rk * K + k0, q16, (long long)H * K, cp.nval, nk, p.vec);
        gla_ld_in<IO16>(Kh, LDB, C, mt, p.k + rk * K + k0, k16, (long long)H * K, cp.nval, nk, p.vec);
        rec_ld_tile(Gh, LDB, C, mt, gc + rk * K + k0, (long long)H * K, cp.nval, nk, p.vec);
        gla_landed<IO16>({gla_tile16{Qh, LDB, C, mt, q16}, gla_tile16{Kh, LDB, C, mt, k16}});
        rec_sync();   /* also: A zeroed, the last tile's blocks done */
        gla_fill_tail(Gh, LDB, C, mt, cp.nval);
        __syncthreads();
        gla_scores_tile<BF>(p, A, QE, Qh, Kh, Gh, k0, mt);
    }
    if (A_out) {   /* for gla_dv_a, [nchunks, H, C, C] */
        float *dst = A_out + ((long long)c * H + h) * C * C;
        REC_FOR2D(C, C, t, i) dst[t * C + i] = i <= t ? A[t * LDC + i] : 0.f;
    }
    float *Ss = sm + s.T, *Vs = Ss + Kp * LDV, *Os = Vs + C * LDV;
    for (int v0 = 0; v0 < V; v0 += BV) {
        const int nv = min(BV, V - v0);
        rec_ld_tile(Ss, LDV, Kp, BV, hs + ((long long)c * H + h) * K * V + v0, V, K, nv, p.vec);
        const unsigned short *v16 = IO16 && p.v16 ? p.v16 + rk * V + v0 : nullptr;
        gla_ld_in<IO16>(Vs, LDV, C, BV, p.v + rk * V + v0, v16, (long long)H * V, cp.nval, nv, p.vec);
        gla_landed<IO16>({gla_tile16{Vs, LDV, C, BV, v16}});
        rec_sync();
        rec_mm<false, false, BF>(p, Os, LDV, QE, LDK, Ss, LDV, C, BV, Kp, 1.f, false);
        rec_mm<false, false, BF>(p, Os, LDV, A, LDC, Vs, LDV, C, BV, C, 1.f, true);
        rec_sync();
        gla_st<IO16>(o ? o + rk * V + v0 : nullptr, IO16 && p.o16 ? p.o16 + rk * V + v0 : nullptr, (long long)H * V,
                     cp.nval, nv, Os, LDV, p.scale, false, p.vec);
    }
}

/* gla_dqk of the fast form in K tiles of 64 columns (dq's and dk's columns are independent: every
 * sum runs over tokens), a block per (chunk, K tile, head), so shared memory holds Q, K, G, dA,
 * DX, DG [C x 68] and V tiles of 16 columns: 112 KB at C = 64, two blocks an SM where gla_dqk
 * takes 214 KB. No factor region either: the earlier sub-chunks' K factors (dq) are scaled in
 * place from one reference row to the next as in gla_scores_tile, the later sub-chunks' Q
 * factors (dk) likewise from the last column sub-chunk back to the first (rows past t0 + 16
 * hold Q o e^{G - G_{e+16}}; one column factor e^{G_{e+16} - G_e} <= 1 makes them
 * Q o e^{G - G_e}), and K, then Q, are loaded again for the own sub-chunk's pairs. dg's
 * reverse sums in shared memory, added by one tile store. */
#define GLA_BVN 16   /* V tile of gla_dqk_kt's loops */
struct gla_dqkt_lay {
    int Q, K, G, dA, DX, DG, X, Y, total;
};
__host__ __device__ static gla_dqkt_lay gla_dqkt_layout(const rec_prob &p)
{
    const gla_ld l = gla_ld_of(p);
    const int tile = l.C * (GLA_BK + 4), LDW = GLA_BVN + 4;
    rec_bump m;
    gla_dqkt_lay s;
    s.Q = m.take(tile), s.K = m.take(tile), s.G = m.take(tile), s.dA = m.take(l.C * l.LDC);
    /* DG's room holds the dq loop's second pair of tiles first (gla_dqk_kt) */
    s.DX = m.take(tile), s.DG = m.take(gla_imax(tile, (GLA_BK + l.C) * LDW));
    s.X = m.take(GLA_BK * LDW), s.Y = m.take(l.C * LDW);
    s.total = m.off;
    return s;
}

template <bool BF, bool IO16>
__global__ void __launch_bounds__(PR_REC_THREADS, 2)
    gla_dqk_kt_kernel(rec_prob p, const float *hs, const float *dhs, const float *dA_in, const float *ep, int nvt,
                      int nkt, rec_grads d, const float *gc)
{
    extern __shared__ __align__(128) float sm[];
    const gla_dqkt_lay s = gla_dqkt_layout(p);
    const gla_ld l = gla_ld_of(p);
    const int C = l.C, LDC = l.LDC, LDB = GLA_BK + 4, LDW = GLA_BVN + 4, BW = GLA_BVN;
    const int c = blockIdx.x / nkt, k0 = blockIdx.x % nkt * GLA_BK, h = blockIdx.y, H = p.H, K = p.K, V = p.V;
    const int mt = min(GLA_BK, p.Kp - k0), nk = min(GLA_BK, K - k0), warp = threadIdx.x >> 5;
    float *Q = sm + s.Q, *Kt = sm + s.K, *G = sm + s.G, *dA = sm + s.dA, *DX = sm + s.DX, *DG = sm + s.DG;
    float *Xs = sm + s.X, *Ys = sm + s.Y;   /* the V loops' state tile [mt x 16] and token tile [C x 16] */
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int nval = cp.nval;
    const long long rk = (long long)cp.row0 * H + h, rs = (long long)H * K;
    const long long st = ((long long)c * H + h) * K * V + (long long)k0 * V;   /* this K tile's rows of hs, dhs */
    const float *qg = p.q + rk * K + k0, *kg = p.k + rk * K + k0;
    const unsigned short *q16 = IO16 && p.q16 ? p.q16 + rk * K + k0 : nullptr;
    const unsigned short *k16 = IO16 && p.k16 ? p.k16 + rk * K + k0 : nullptr;
    auto sub_first = [](int t) { return t & ~(GLA_SUB - 1); };
    auto sub_last = [](int t) { return t | (GLA_SUB - 1); };
    rec_ld_tile(dA, LDC, C, C, dA_in + ((long long)c * H + h) * C * C, C, C, C, true);
    gla_ld_in<IO16>(Q, LDB, C, mt, qg, q16, rs, nval, nk, p.vec);
    gla_ld_in<IO16>(Kt, LDB, C, mt, kg, k16, rs, nval, nk, p.vec);
    rec_ld_tile(G, LDB, C, mt, gc + rk * K + k0, rs, nval, nk, p.vec);
    gla_landed<IO16>({gla_tile16{Q, LDB, C, mt, q16}, gla_tile16{Kt, LDB, C, mt, k16}});
    rec_sync();
    gla_fill_tail(G, LDB, C, mt, nval);   /* read after the V loop's barriers */

    /* dq: DX = scale e^{G_r} o (dO S^T), + the earlier sub-chunks' pairs, then o e^{G_t - G_r}, + the own sub-chunk's.
     * The V loop's tiles are copied a tile ahead, the second pair of buffers in DG's room (written after the loop):
     * each small product would otherwise wait for its own copies */
    const auto Xb = [&](int b) { return b ? DG : Xs; };
    const auto Yb = [&](int b) { return b ? DG + GLA_BK * LDW : Ys; };
    const auto dq_tiles = [&](int v0, int b) {
        const int nv = min(BW, V - v0);
        rec_ld_tile(Xb(b), LDW, mt, BW, hs + st + v0, V, nk, nv, p.vec);
        const unsigned short *do16 = IO16 && p.dout16 ? p.dout16 + rk * V + v0 : nullptr;
        gla_ld_in<IO16>(Yb(b), LDW, C, BW, p.dout + rk * V + v0, do16, (long long)H * V, nval, nv, p.vec);
        gla_commit();
    };
    dq_tiles(0, 0);
    for (int v0 = 0, b = 0; v0 < V; v0 += BW, b ^= 1) {
        const bool next = v0 + BW < V;
        if (next) dq_tiles(v0 + BW, b ^ 1);   /* its buffers' last product ended at the barrier below */
        gla_wait_but_next(next);
        if (IO16 && p.dout16) rec_widen_own(Yb(b), LDW, C, BW);
        __syncthreads();
        rec_mm<false, true, BF>(p, DX, LDB, Yb(b), LDW, Xb(b), LDW, C, mt, BW, 1.f, v0 > 0);
        __syncthreads();
    }
    REC_FOR2D(C, mt, t, cc) DX[t * LDB + cc] *= p.scale * exp2f(G[sub_first(t) * LDB + cc]);
    for (int r = GLA_SUB; r < C; r += GLA_SUB) {
        REC_FOR2D(r, mt, i, cc)   /* K's rows before r -> K o e^{G_r - G} */
        Kt[i * LDB + cc] *= exp2f(G[r * LDB + cc] - G[(i < r - GLA_SUB ? r - GLA_SUB : i) * LDB + cc]);
        __syncthreads();
        for (int cb = warp; cb < mt / 16; cb += PR_REC_WARPS)
            gla_blk16<false, false, BF>(p, DX, LDB, dA, LDC, Kt, LDB, r, cb * 16, r, 1.f, true);
        __syncthreads();
    }
    gla_ld_in<IO16>(Kt, LDB, C, mt, kg, k16, rs, nval, nk, p.vec);   /* K as it was */
    gla_landed<IO16>({gla_tile16{Kt, LDB, C, mt, k16}});
    rec_sync();
    REC_FOR2D(C, mt, t, cc) {
        const float gt = G[t * LDB + cc];
        float x = DX[t * LDB + cc] * exp2f(gt - G[sub_first(t) * LDB + cc]);
        for (int i = sub_first(t); i <= t; i++) x = fmaf(dA[t * LDC + i] * Kt[i * LDB + cc], exp2f(gt - G[i * LDB + cc]), x);
        DX[t * LDB + cc] = x;
        DG[t * LDB + cc] = Q[t * LDB + cc] * x;
    }
    __syncthreads();
    gla_st<IO16>(d.dq ? d.dq + rk * K + k0 : nullptr, IO16 && d.dq16 ? d.dq16 + rk * K + k0 : nullptr, rs, nval, nk,
                 DX, LDB, 1.f, true, p.vec);

    /* dk: DX = e^{G_L - G_e} o (V dS'^T), + the later sub-chunks' pairs, then o e^{G_e - G_i}, + the own sub-chunk's
     * (e: the last token of i's sub-chunk) */
    for (int v0 = 0; v0 < V; v0 += BW) {
        const int nv = min(BW, V - v0);
        rec_sync();   /* the previous tile's product (or dq's store) done */
        rec_ld_tile(Xs, LDW, mt, BW, dhs + st + v0, V, nk, nv, p.vec);
        const unsigned short *v16 = IO16 && p.v16 ? p.v16 + rk * V + v0 : nullptr;
        gla_ld_in<IO16>(Ys, LDW, C, BW, p.v + rk * V + v0, v16, (long long)H * V, nval, nv, p.vec);
        if (v0 + BW < V) {   /* no room for a second pair here (DG is in use): the next tiles into L2 */
            const int nn = min(BW, V - v0 - BW);
            rec_l2_rows(dhs + st + v0 + BW, (long long)V * 4, nk, nn * 4);
            if (v16) rec_l2_rows(v16 + BW, (long long)H * V * 2, nval, nn * 2);
            else rec_l2_rows(p.v + rk * V + v0 + BW, (long long)H * V * 4, nval, nn * 4);
        }
        gla_landed<IO16>({gla_tile16{Ys, LDW, C, BW, v16}});
        rec_sync();
        rec_mm<false, true, BF>(p, DX, LDB, Ys, LDW, Xs, LDW, C, mt, BW, 1.f, v0 > 0);
    }
    rec_sync();
    const float *GL = G + (C - 1) * LDB;
    REC_FOR2D(C, mt, i, cc) DX[i * LDB + cc] *= exp2f(GL[cc] - G[sub_last(i) * LDB + cc]);
    for (int b = C / GLA_SUB - 2; b >= 0; b--) {
        const int e = b * GLA_SUB + GLA_SUB - 1, t0 = e + 1;
        REC_FOR2D(C - t0, mt, u, cc) {   /* Q's rows t0.. -> Q o e^{G - G_e} */
            const int t = t0 + u;
            Q[t * LDB + cc] *= exp2f(G[(u < GLA_SUB ? t : e + GLA_SUB) * LDB + cc] - G[e * LDB + cc]);
        }
        __syncthreads();
        for (int cb = warp; cb < mt / 16; cb += PR_REC_WARPS)
            gla_blk16<true, false, BF>(p, DX, LDB, dA + t0 * LDC, LDC, Q + t0 * LDB, LDB, b * GLA_SUB, cb * 16, C - t0,
                                       1.f, true);
        __syncthreads();
    }
    gla_ld_in<IO16>(Q, LDB, C, mt, qg, q16, rs, nval, nk, p.vec);   /* Q as it was */
    gla_landed<IO16>({gla_tile16{Q, LDB, C, mt, q16}});
    rec_sync();
    REC_FOR2D(C, mt, i, cc) {
        const float gi = G[i * LDB + cc];
        float x = DX[i * LDB + cc] * exp2f(G[sub_last(i) * LDB + cc] - gi);
        for (int t = i; t <= sub_last(i); t++) x = fmaf(dA[t * LDC + i] * Q[t * LDB + cc], exp2f(G[t * LDB + cc] - gi), x);
        DX[i * LDB + cc] = x;
        DG[i * LDB + cc] -= Kt[i * LDB + cc] * x;
    }
    __syncthreads();
    gla_st<IO16>(d.dk ? d.dk + rk * K + k0 : nullptr, IO16 && d.dk16 ? d.dk16 + rk * K + k0 : nullptr, rs, nval, nk,
                 DX, LDB, 1.f, true, p.vec);

    /* dg: the reverse sums inside the chunk in place, from the later tokens' share, then one tile store */
    if (!d.dg) return;
    for (int cc = threadIdx.x; cc < nk; cc += blockDim.x) {
        float run = 0.f;
        for (int vt = 0; vt < nvt; vt++) run += ep[(((long long)vt * p.nchunks + c) * H + h) * K + k0 + cc];
        for (int t = nval - 1; t >= 0; t--) {
            run += DG[t * LDB + cc];
            DG[t * LDB + cc] = run;
        }
    }
    __syncthreads();
    rec_st_tile(d.dg + rk * K + k0, rs, nval, nk, DG, LDB, 1.f, true, p.vec);
}

/* ---- launchers: one a pass, each instance picked by bf16 products (bf) and bf16 data in place (io) */
#define GLA_PICK(kern, bf, io) \
    ((bf) ? ((io) ? kern<true, true> : kern<true, false>) : ((io) ? kern<false, true> : kern<false, false>))
#define GLA_LAUNCH(k, grid, smem_floats, ...)                                  \
    do {                                                                       \
        const size_t bytes_ = (size_t)(smem_floats) * 4;                       \
        pr_cuda_smem_prep((const void *)(k), bytes_);                          \
        (k)<<<(grid), PR_REC_THREADS, bytes_, s>>>(__VA_ARGS__);               \
        PR_CUDA_LAUNCH_CHECK();                                                \
    } while (0)

size_t gla_fast_smem(const rec_prob &p)
{
    int most = gla_max(gla_kt_layout(p, false, true).total, gla_kt_layout(p, true, true).total);
    most = gla_max(most, gla_max(gla_dva_layout(p).total, gla_okh_layout(p).total));
    return (size_t)gla_max(most, gla_dqkt_layout(p).total) * 4;
}

float *gla_fast_cumsum(cudaStream_t s, const rec_prob &p, size_t *n)
{
    *n = (size_t)(p.packed ? p.T : (long long)p.N * p.T) * p.H * p.K;
    float *gc = rec_scratch(*n);
    const auto k = p.C == 64 ? gla_cumsum_kernel<64> : gla_cumsum_kernel<32>;
    k<<<dim3(p.nchunks, p.H), 128, 0, s>>>(p, gc);
    PR_CUDA_LAUNCH_CHECK();
    return gc;
}

static int gla_nkt(const rec_prob &p) { return (p.Kp + GLA_BK - 1) / GLA_BK; }

void gla_fast_state(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, float *hs, float *ht)
{
    const int nkt = gla_nkt(p), nvt = (p.V + GLA_BV - 1) / GLA_BV;
    GLA_LAUNCH(GLA_PICK(gla_state_kt_kernel, bf, io), dim3(nvt * nkt, p.H, p.N), gla_kt_layout(p, false, io).total, p,
               gc, nkt, hs, ht);
}

void gla_fast_out(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, const float *hs, float *o,
                  float *A)
{
    GLA_LAUNCH(GLA_PICK(gla_out_kh_kernel, bf, io), dim3(p.nchunks, p.H), gla_okh_layout(p).total, p, hs, o, gc, A);
}

void gla_fast_dstate(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, const float *hs,
                     const float *ht, float *dhs, float *ep, float *dh0)
{
    const int nkt = gla_nkt(p), nvt = (p.V + GLA_BV - 1) / GLA_BV;
    GLA_LAUNCH(GLA_PICK(gla_dstate_kt_kernel, bf, io), dim3(nvt * nkt, p.H, p.N), gla_kt_layout(p, true, io).total, p,
               gc, nkt, hs, ht, dhs, ep, dh0);
}

void gla_fast_dv(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, const float *dhs, const float *A,
                 float *dA, float *dv, unsigned short *dv16)
{
    GLA_LAUNCH(GLA_PICK(gla_dv_a_kernel, bf, io), dim3(p.nchunks, p.H), gla_dva_layout(p).total, p, dhs, A, dA, dv,
               dv16, gc);
}

void gla_fast_dqk(cudaStream_t s, const rec_prob &p, bool bf, bool io, const float *gc, const float *hs,
                  const float *dhs, const float *dA, const float *ep, const rec_grads &d)
{
    const int nkt = gla_nkt(p), nvt = (p.V + GLA_BV - 1) / GLA_BV;
    GLA_LAUNCH(GLA_PICK(gla_dqk_kt_kernel, bf, io), dim3(p.nchunks * nkt, p.H), gla_dqkt_layout(p).total, p, hs, dhs,
               dA, ep, nvt, nkt, d, gc);
}
