/* ops/recurrence/cuda/grad.cu: the chunked backward's main pass, every
 * chunk at once, K tiles in parallel, V tiles in a loop:
 *   dQ  = scale e^G o (dO h^T) + dS Ka,       dS = scale incl(D o dO Ua^T)
 *   dKa = e^{G_last - G} o (Ua dhn^T) + dS^T Q
 *   dW  = -(beta o dU) h^T,   dbeta += dU . R  (u = beta R, R = R0 - W h)
 * with its parts of dg; in its mma.sync form (warp blocks held in
 * registers) and its wgmma form (sm_90a, TF32: 64 x 32 pieces a
 * warpgroup). Notation: chunked.cu.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

/* ---- grad: dq, dKa, dW, dbeta (part), dG (part) per (K tile, chunk) -------------------
 * The V loop's four products, Xq = dO H^T, P = dO Ua^T, Xk = Ua dHn^T and
 * Xw = dU H^T, are all rows-times-rows of the V tiles, summed in registers
 * across the whole V loop and stored once at its end. Two forms:
 * - mma.sync (fp32 and the fallback): their 16 x 32 warp blocks, numbered
 *   Xq's, P's, Xk's, Xw's, go to the warps round-robin, R a warp a pass
 *   (registers, so no V tile reads and writes them in shared memory);
 * - wgmma (WG, TF32 and bf16 data on sm_90a): their 64 x 32
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

/* grad_ld_vtile for bf16 data read in place (the wgmma form's B16: 1 dO
 * from p.dout16, 2 (no beta) v from p.v16 too; grad_wg_prepare widens
 * them). K and V are multiples of 4 there (the plan's io16), so the op's
 * own buffers (R, dU, hs, dhs) take 16-byte copies whatever p.vec says.
 * Out of line, taking what it reads by value: inlined, its two more base
 * pointers and the cp.async address arithmetic sat beside the V loop's 64
 * sums a thread and made the IN16 instances spill (92 / 224 bytes a thread
 * at the 128-register cap); by value because a reference to rec_prob made
 * ptxas copy all of it (344 bytes) to each thread's stack */
struct grad_vt16 {
    const unsigned short *dO16, *v16;
    const float *hs, *dhs, *R, *dU;
    long long rk, hoff;
    int C, H, V, BK, nval, nk, oVA, odU, oHs, odH;
    bool delta;
};
template <int B16>
__device__ __noinline__ void grad_ld_vtile16(const grad_vt16 t, float *buf, int v0)
{
    const int LDV = 32, nv = min(32, t.V - v0);
    const long long rs = (long long)t.H * t.V, at = t.rk * t.V + v0;
    rec_ld_tile16<true>(buf, LDV, t.C, 32, t.dO16 + at, rs, t.nval, nv);
    if constexpr (B16 == 2) rec_ld_tile16<true>(buf + t.oVA * LDV, LDV, t.C, 32, t.v16 + at, rs, t.nval, nv);
    else rec_ld_tile<true>(buf + t.oVA * LDV, LDV, t.C, 32, t.R + at, rs, t.nval, nv, true);
    if (t.delta) rec_ld_tile<true>(buf + t.odU * LDV, LDV, t.C, 32, t.dU + at, rs, t.nval, nv, true);
    rec_ld_tile<true>(buf + t.oHs * LDV, LDV, t.BK, 32, t.hs + t.hoff + v0, t.V, t.nk, nv, true);
    rec_ld_tile<true>(buf + t.odH * LDV, LDV, t.BK, 32, t.dhs + t.hoff + v0, t.V, t.nk, nv, true);
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
template <int C, int B16 = 0> /* B16: dO (2: and v) copied as bf16: widened here first */
__device__ __forceinline__ void grad_wg_prepare(const rec_prob &p, const grad_lay &s, float *cur, int BK, bool first,
                                                bool do_db, bool acc_db, float *db, float &hd)
{
    constexpr bool o16 = B16 >= 1, u16 = B16 == 2;
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
        const float4 y = u16 ? rec_widen4(reinterpret_cast<const float *>(u)) : *u;
        *o = rnd(o16 ? rec_widen4(reinterpret_cast<const float *>(o)) : *o), *u = rnd(y);
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
 * of sum(H o dHn). B16: bf16 dO (and v) read in place (grad_ld_vtile's) */
template <int C, int R, int B16>
__device__ __forceinline__ float grad_sums_wg(const rec_prob &p, const grad_lay &s, float *sm, const grad_src &g,
                                              bool do_db)
{
    const int V = p.V, BK = g.BK, LDB = BK + 4, LDA = C * (1 + p.L) + 4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wg = warp >> 2;
    const int np = grad_pieces(p, BK, 0, nullptr, nullptr);
    float *Xq = sm + s.Xq, *Xk = sm + s.Xk, *Xw = sm + s.Xw, *P = sm + s.P;
    float hd = 0.f;
    const grad_vt16 t16 = {p.dout16, p.v16, g.hs,   g.dhs, g.R,     g.dU,     g.rk,     g.hoff,   p.C,
                           p.H,      p.V,   BK,     g.nval, g.nk,  s.oVA,    s.odU,    s.oHs,    s.odH,
                           p.delta != 0};
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
        if constexpr (B16) grad_ld_vtile16<B16>(t16, sm + s.buf, 0);
        else grad_ld_vtile<true>(p, s, sm + s.buf, BK, 32, g.hs, g.dhs, g.R, g.dU, g.rk, g.hoff, g.nval, g.nk, 0);
        for (int v0 = 0, vi = 0; v0 < V; v0 += 32, vi++) {
            float *cur = sm + s.buf + (vi & 1) * s.bufsz;
            /* this thread's copies of tile vi landed: its sums, its rounding,
             * then the barrier after which wgmma reads the whole tile and
             * tile vi - 1's buffer (every warpgroup waited for its products)
             * takes the next copy */
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            grad_wg_prepare<C, B16>(p, s, cur, BK, b0 == 0, do_db, v0 > 0, sm + s.db, hd);
            rec_fence_async();
            __syncthreads();
            if (v0 + 32 < V) {
                float *next = sm + s.buf + ((vi + 1) & 1) * s.bufsz;
                if constexpr (B16) grad_ld_vtile16<B16>(t16, next, v0 + 32);
                else grad_ld_vtile<true>(p, s, next, BK, 32, g.hs, g.dhs, g.R, g.dU, g.rk, g.hoff, g.nval, g.nk, v0 + 32);
            }
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

/* grad_st_tile's accumulation (alpha 1) into a bf16 grad: rec_acc_tile16, out of line as grad_st_tile is */
__device__ __noinline__ void grad_acc_tile16(unsigned short *dst, long long rs, int nr, int nc, const float *src,
                                             int ld)
{
    rec_acc_tile16(dst, rs, nr, nc, src, ld);
}
/* the same sums into an f32 scratch from the bf16 grad's old values (wy adds the rest and rounds) */
__device__ __noinline__ void grad_acc_tile_from16(float *dst, const unsigned short *old, long long rs, int nr, int nc,
                                                  const float *src, int ld)
{
    rec_acc_tile_from16(dst, old, rs, nr, nc, src, ld);
}

/* dq16, dk16 (BF instances only: bf16 data with TF32 on): the grads' bf16
 * bits, accumulated in place (dq then NULL; dk NULL too without beta, else
 * the f32 scratch that receives old + this part for wy to finish). IN16
 * (with BF and WG: the plan's io16_bwd): 1 q, dO and k read in place from
 * p.q16, p.dout16, p.k16 (the delta rules), 2 v too (p.v16: no beta) */
template <int C, bool BF, int R, bool WG, int IN16 = 0>
__global__ void __launch_bounds__(PR_REC_THREADS, R <= 4 ? 2 : 1)
    chunk_grad_kernel(rec_prob p, int BK, int BV, const float *hs, const float *dhs, const float *R_, const float *dU,
                      float *dq, float *dk, float *dkxa, float *dW, float *dGp, float *dbA, long long rowsH,
                      unsigned short *dq16, unsigned short *dk16)
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
    if constexpr (WG) hd = grad_sums_wg<C, R, IN16>(p, s, sm, src, do_db);
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
    /* IN16: bf16 q and k, widened by their copiers before the barrier */
    if constexpr (IN16) {
        rec_ld_tile16(Qs, LDB, C, BK, p.q16 + rk * K + k0, (long long)H * K, cp.nval, nk);
        rec_ld_tile16(KA, LDB, C, BK, p.k16 + rk * K + k0, (long long)H * K, cp.nval, nk); /* L = 0 */
    } else {
        rec_ld_tile(Qs, LDB, C, BK, p.q + rk * K + k0, (long long)H * K, cp.nval, nk, p.vec);
        chunk_ld_keys(p, KA, LDB, C, BK, rk, cp.nval, k0, nk);
    }
    rec_load_gates<C>(p, cp.row0, cp.nval, h, G, bt, eG, eL);
    if constexpr (IN16) {
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        rec_widen_own(Qs, LDB, C, BK);
        rec_widen_own(KA, LDB, C, BK);
    }
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
    if constexpr (BF)
        if (dq16) grad_acc_tile16(dq16 + rk * K + k0, (long long)H * K, cp.nval, nk, Xq, LDB);
    if (dq) grad_st_tile(dq + rk * K + k0, (long long)H * K, cp.nval, nk, Xq, LDB, 1.f, true, p.vec);
    bool dk_done = false;
    if constexpr (BF)
        if (dk16) {
            if (dk) grad_acc_tile_from16(dk + rk * K + k0, dk16 + rk * K + k0, (long long)H * K, cp.nval, nk, Xk, LDB);
            else grad_acc_tile16(dk16 + rk * K + k0, (long long)H * K, cp.nval, nk, Xk, LDB);
            dk_done = true;
        }
    if (dk && !dk_done) grad_st_tile(dk + rk * K + k0, (long long)H * K, cp.nval, nk, Xk, LDB, 1.f, true, p.vec);
    for (int l = 0; l < L; l++)
        grad_st_tile(dkxa + rk * L * K + l * K + k0, (long long)H * L * K, cp.nval, nk, Xk + (C + l * C) * LDB, LDB,
                     1.f, false, p.vec);
    if (p.delta) grad_st_tile(dW + rk * K + k0, (long long)H * K, cp.nval, nk, Xw, LDB, -1.f, false, p.vec);
}

/* ---- launcher --------------------------------------------------------------------- */
/* grad's instance for the plan: BF products, the wgmma form, R */
template <int C>
static auto grad_kernel_for(bool bf, bool wg, int r, int in16) -> decltype(&chunk_grad_kernel<C, false, 4, false>)
{
    if (in16 == 2) /* bf16 q, dO, k, v in place: the wgmma form's bf16 instances */
        return r == 2 ? chunk_grad_kernel<C, true, 2, true, 2>
                      : r == 3 ? chunk_grad_kernel<C, true, 3, true, 2> : chunk_grad_kernel<C, true, 4, true, 2>;
    if (in16 == 1) /* q, dO, k (the delta rules: Ua is R) */
        return r == 2 ? chunk_grad_kernel<C, true, 2, true, 1>
                      : r == 3 ? chunk_grad_kernel<C, true, 3, true, 1> : chunk_grad_kernel<C, true, 4, true, 1>;
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
static void chunk_grad_c(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                         const float *dhs, const wy_scratch &x, const rec_grads &d)
{
    const size_t sm = pr_rec_smem_grad(p, pl.bk_grad, pl.bv_grad, pl.bpw_grad, pl.wg_grad);
    PR_ASSERT(!d.dq16 || (rec_bf_products(p) && pl.io16_dq && !d.dq));
    PR_ASSERT(!d.dk16 || (rec_bf_products(p) && pl.io16_dk && !d.dk == !p.delta));
    /* bf16 q, dO (k, v) read in place: the wgmma form's bf16 instances only */
    const int in16 = !p.dout16 ? 0 : p.v16 ? 2 : 1;
    PR_ASSERT(!(p.q16 || p.dout16 || p.k16 || p.v16) || (rec_bf_products(p) && pl.wg_grad && p.q16 && p.dout16 &&
                                                         p.k16 && p.L == 0 && !p.v16 == p.delta));
    const auto kernel = grad_kernel_for<C>(rec_bf_products(p), pl.wg_grad, pl.bpw_grad, in16);
    pr_cuda_smem_prep((const void *)kernel, sm);
    const dim3 grid(x.nkt, p.nchunks, p.H);
    kernel<<<grid, PR_REC_THREADS, sm, st>>>(p, pl.bk_grad, pl.bv_grad, sv.hs, dhs, sv.R, x.dU, d.dq, d.dk,
                                             (float *)x.dkxa, (float *)x.dW, (float *)x.dGp, (float *)x.dbA,
                                             x.rowsH, d.dq16, d.dk16);
    PR_CUDA_LAUNCH_CHECK();
}

void pr_rec_chunk_grad(cudaStream_t st, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                       const float *dhs, const wy_scratch &x, const rec_grads &d)
{
    if (p.C == 64) chunk_grad_c<64>(st, p, pl, sv, dhs, x, d);
    else chunk_grad_c<32>(st, p, pl, sv, dhs, x, d);
}

int pr_rec_grad_blocks_per_warp(const rec_prob &p, int bk, bool wg) { return grad_blocks_per_warp(p, bk, wg); }
int pr_rec_grad_passes(const rec_prob &p, int bk, int r, bool wg) { return grad_passes(p, bk, r, wg); }
