/* ops/cuda/tiles.cuh: the block-level tile kit of the tensor-core kernels
 * (the recurrence family, attention, TTT-Linear). C++, CUDA only.
 *
 * - rec_bump: shared-memory carving, the same arithmetic on host and device;
 * - loops, loads and stores over shared-memory tiles (cp.async);
 * - the block's matrix product: TF32 or bf16 tensor cores through mma.sync,
 *   or plain fp32 FMAs when TF32 is off (rec_mm);
 * - deterministic row dots and block sums;
 * - and, in ops/cuda/wgmma.cuh (included at the end), wgmma (sm_90a): a
 *   warpgroup's product from shared memory in TF32 or bf16, its
 *   descriptors, fences and the swizzled tile loads it reads.
 * Every block has PR_REC_THREADS threads. No float atomics anywhere. (The
 * rec_ prefix is the kit's: it grew in the recurrence's kernels.)
 */
#ifndef PR_OPS_CUDA_TILES_CUH
#define PR_OPS_CUDA_TILES_CUH

#include <type_traits>

#include "ops/cuda/ops_cuda.h"

#define PR_REC_THREADS 256
#define PR_REC_WARPS (PR_REC_THREADS / 32)

/* ---- shared-memory carving (same arithmetic on host and device) ---- */
struct rec_bump {
    int off = 0;
    __host__ __device__ int take(int n)
    {
        const int o = off;
        off += (n + 31) & ~31;
        return o;
    }
};

/* ---- loops and loads over tiles -------------------------------------------------
 * REC_FOR2D(R, W, r, c): every (r, c) of an R x W tile, a warp per row and its
 * lanes along the row: no divisions, conflict-free shared-memory rows. */
#define REC_FOR2D(R, W, r, c)                                                      \
    for (int r = (int)(threadIdx.x >> 5); r < (R); r += PR_REC_WARPS)            \
        for (int c = (int)(threadIdx.x & 31); c < (W); c += 32)

/* lanes per row for rows of W floats moved as float4: W/4 lanes (up to 32),
 * several rows per warp when W/4 divides 32 */
struct rec_rowmap {
    int r0, rstep, c0, cstep;
};
__device__ __forceinline__ rec_rowmap rec_rowmap_of(int W)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int lpr = W >> 2;
    if (lpr > 32 || lpr < 1 || 32 % lpr) lpr = 32;
    const int rpw = 32 / lpr;
    return {warp * rpw + lane / lpr, PR_REC_WARPS * rpw, (lane % lpr) * 4, lpr * 4};
}

/* cp.async: 16 bytes global -> shared without registers, many in flight;
 * fewer than 16 source bytes zero-fill the rest */
__device__ __forceinline__ void rec_cp16(float *dst, const float *src, int bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
/* the same, 4 bytes to shared address d (cached in L1: only 16-byte copies
 * may bypass it) */
__device__ __forceinline__ void rec_cp4(unsigned d, const float *src, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
/* every copy of this thread landed, then the block's barrier: the barrier
 * the kernels use after tile loads */
__device__ __forceinline__ void rec_sync()
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
}

/* (r, c) of a 128-byte-swizzled tile whose row 0 is at shared address base
 * (see rec_wg_desc) */
__device__ __forceinline__ int rec_sw128(unsigned base, int r, int c)
{
    return r * 32 + ((((c >> 2) ^ ((base >> 7) + r)) & 7) << 2) + (c & 3);
}
/* dst[r][c] (leading dim ld, W columns, W % 4 == 0) = src[r*rs + c] for r < nr,
 * c < nc; zero elsewhere (rows up to R). vec: src and rs allow float4, and the
 * copy is asynchronous (complete at the next rec_sync). SW: dst is a
 * 128-byte-swizzled wgmma tile (rec_sw128: W = ld = 32). */
template <bool SW = false>
__device__ __forceinline__ void rec_ld_tile(float *dst, int ld, int R, int W, const float *src, long long rs, int nr,
                                            int nc, bool vec)
{
    const rec_rowmap m = rec_rowmap_of(W);
    const unsigned base = (unsigned)__cvta_generic_to_shared(dst);
    for (int r = m.r0; r < R; r += m.rstep)
        for (int c = m.c0; c < W; c += m.cstep) {
            const bool in = r < nr && c < nc;
            float *d = dst + (SW ? rec_sw128(base, r, c) : r * ld + c);
            if (vec) {
                rec_cp16(d, in ? src + r * rs + c : src, in ? 16 : 0);
                continue;
            }
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (in) {
                const float *s = src + r * rs + c;
                x.x = s[0];
                if (c + 1 < nc) x.y = s[1];
                if (c + 2 < nc) x.z = s[2];
                if (c + 3 < nc) x.w = s[3];
            }
            *reinterpret_cast<float4 *>(d) = x;
        }
}
/* dst[r*rs + c] = (acc ? dst : 0) + alpha * src[r][c] (+ extra[r*rs + c]) for
 * r < nr, c < nc; four rows' global reads are in flight before their writes */
__device__ __forceinline__ void rec_st_tile(float *dst, long long rs, int nr, int nc, const float *src, int ld,
                                            float alpha, bool acc, bool vec, const float *extra = nullptr)
{
    const rec_rowmap m = rec_rowmap_of((nc + 3) & ~3);
    for (int rb = m.r0; rb < nr; rb += 4 * m.rstep)
        for (int c = m.c0; c < nc; c += m.cstep) {
            float y[4][4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int r = rb + u * m.rstep;
                const long long o = r * rs + c;
#pragma unroll
                for (int i = 0; i < 4; i++) y[u][i] = 0.f;
                if (r >= nr) continue;
                if (vec && c + 4 <= nc) {
                    float4 a = acc ? *reinterpret_cast<const float4 *>(dst + o) : make_float4(0.f, 0.f, 0.f, 0.f);
                    if (extra) {
                        const float4 b = *reinterpret_cast<const float4 *>(extra + o);
                        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
                    }
                    y[u][0] = a.x, y[u][1] = a.y, y[u][2] = a.z, y[u][3] = a.w;
                } else {
                    for (int i = 0; i < 4 && c + i < nc; i++)
                        y[u][i] = (acc ? dst[o + i] : 0.f) + (extra ? extra[o + i] : 0.f);
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int r = rb + u * m.rstep;
                if (r >= nr) continue;
                const float4 x = *reinterpret_cast<const float4 *>(src + r * ld + c);
                float *d = dst + r * rs + c;
                const float xs[4] = {x.x, x.y, x.z, x.w};
                if (vec && c + 4 <= nc) {
                    *reinterpret_cast<float4 *>(d) = make_float4(y[u][0] + alpha * xs[0], y[u][1] + alpha * xs[1],
                                                                 y[u][2] + alpha * xs[2], y[u][3] + alpha * xs[3]);
                } else {
                    for (int i = 0; i < 4 && c + i < nc; i++) d[i] = y[u][i] + alpha * xs[i];
                }
            }
        }
}

/* rec_ld_tile from bf16 rows read in place, asynchronous as rec_ld_tile's
 * copies (v16 measured synchronous loads losing): each group of 4 bf16
 * columns is one 8-byte cp.async into the first half of the 16-byte slot
 * rec_ld_tile's copy fills (zero-filled outside the rows and columns), and once this
 * thread's copies landed (its cp.async wait) rec_widen_own widens its own
 * slots in place, before the barrier that publishes the tile: no thread
 * reads another's raw bytes, and the tile holds the staged copy's values.
 * The same placement (rec_rowmap_of(W), SW), nc % 4 == 0 where nc > 0,
 * 8-byte aligned rows and src. */
__device__ __forceinline__ void rec_cp8(unsigned d, const void *src, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
template <bool SW = false>
__device__ __forceinline__ void rec_ld_tile16(float *dst, int ld, int R, int W, const unsigned short *src,
                                               long long rs, int nr, int nc)
{
    const rec_rowmap m = rec_rowmap_of(W);
    const unsigned base = (unsigned)__cvta_generic_to_shared(dst);
    for (int r = m.r0; r < R; r += m.rstep)
        for (int c = m.c0; c < W; c += m.cstep) {
            const bool in = r < nr && c < nc;
            rec_cp8(base + 4u * (unsigned)(SW ? rec_sw128(base, r, c) : r * ld + c), in ? src + r * rs + c : src,
                    in ? 8 : 0);
        }
}
/* a slot's 4 bf16 (its first 8 bytes) widened to its 4 floats */
__device__ __forceinline__ float4 rec_widen4(const float *slot)
{
    const uint2 w = *reinterpret_cast<const uint2 *>(slot);
    return make_float4(pr_bf16_lo(w.x), pr_bf16_hi(w.x), pr_bf16_lo(w.y), pr_bf16_hi(w.y));
}
/* (rows from r_begin, a multiple of the placement's row step: the rest of
 * a tile whose first rows a scaling copier widened, e.g. rec_tf32_own<true>) */
template <bool SW = false>
__device__ __forceinline__ void rec_widen_own(float *dst, int ld, int R, int W, int r_begin = 0)
{
    const rec_rowmap m = rec_rowmap_of(W);
    const unsigned base = (unsigned)__cvta_generic_to_shared(dst);
    for (int r = r_begin + m.r0; r < R; r += m.rstep)
        for (int c = m.c0; c < W; c += m.cstep) {
            float *d = dst + (SW ? rec_sw128(base, r, c) : r * ld + c);
            *reinterpret_cast<float4 *>(d) = rec_widen4(d);
        }
}

/* A bf16 tile staged a step ahead: rec_ld_tile16's copies into a packed
 * bf16 tile dst[r*ld + c] (ld in bf16 elements, a multiple of 4) instead of
 * an f32 tile's slots, so a next tile's copies fit beside the f32 tiles in
 * use at half their bytes. The same placement, so rec_widen_staged, run by
 * the same threads after their wait, reads only its own copies into the f32
 * tile (ld_f, W columns): no barrier between the two. */
__device__ __forceinline__ void rec_ld_staged16(unsigned short *dst, int ld, int R, int W, const unsigned short *src,
                                                long long rs, int nr, int nc)
{
    const rec_rowmap m = rec_rowmap_of(W);
    const unsigned base = (unsigned)__cvta_generic_to_shared(dst);
    for (int r = m.r0; r < R; r += m.rstep)
        for (int c = m.c0; c < W; c += m.cstep) {
            const bool in = r < nr && c < nc;
            rec_cp8(base + 2u * (unsigned)(r * ld + c), in ? src + r * rs + c : src, in ? 8 : 0);
        }
}
__device__ __forceinline__ void rec_widen_staged(float *dst, int ld_f, int R, int W, const unsigned short *src, int ld)
{
    const rec_rowmap m = rec_rowmap_of(W);
    for (int r = m.r0; r < R; r += m.rstep)
        for (int c = m.c0; c < W; c += m.cstep)
            *reinterpret_cast<float4 *>(dst + r * ld_f + c) =
                rec_widen4(reinterpret_cast<const float *>(src + r * ld + c));
}
/* rows r < nr of src (row stride rs_bytes), each's first row_bytes, into
 * L2: one 128-byte line a thread, for a tile that the next step reads */
__device__ __forceinline__ void rec_l2_rows(const void *src, long long rs_bytes, int nr, int row_bytes)
{
    const int lines = (row_bytes + 127) >> 7;
#pragma unroll 1
    for (int i = threadIdx.x; i < nr * lines; i += PR_REC_THREADS)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"((const char *)src + i / lines * rs_bytes + (i % lines) * 128));
}

/* dst[r*rs + c] = bf16(0 + alpha * src[r][c]) for r < nr, c < nc (nc % 4 ==
 * 0, 8-byte aligned rows): rec_st_tile's plain store with a bf16
 * destination, rounded as pr_cuda_cast rounds (pr_bf16_bits), so the bits
 * are those of rec_st_tile followed by the cast (its 0 + makes a -0 +0) */
__device__ __forceinline__ void rec_st_tile16(unsigned short *dst, long long rs, int nr, int nc, const float *src,
                                              int ld, float alpha)
{
    const rec_rowmap m = rec_rowmap_of(nc);
    for (int r = m.r0; r < nr; r += m.rstep)
        for (int c = m.c0; c < nc; c += m.cstep) {
            const float4 x = *reinterpret_cast<const float4 *>(src + r * ld + c);
            const unsigned lo =
                (unsigned)pr_bf16_bits(fmaf(alpha, x.x, 0.f)) | (unsigned)pr_bf16_bits(fmaf(alpha, x.y, 0.f)) << 16;
            const unsigned hi =
                (unsigned)pr_bf16_bits(fmaf(alpha, x.z, 0.f)) | (unsigned)pr_bf16_bits(fmaf(alpha, x.w, 0.f)) << 16;
            *reinterpret_cast<uint2 *>(dst + r * rs + c) = make_uint2(lo, hi);
        }
}

/* The accumulations below read their old values from global memory: each
 * thread's loads for four rows go out before the first sum (as rec_st_tile
 * batches its rows), where a load, its sum and its store a row in turn
 * waited out a global read's latency every row (gla_dqk_kt's bf16 dq and dk
 * stores). The rows and columns each thread visits are the same. NB: the
 * rows batched, 1 in a kernel that has no registers to spare (wy's mma.sync
 * instances spill 40 / 96 bytes with 4). */

/* dst[r*rs + c] = bf16(old + src[r][c]) for r < nr, c < nc (nc % 4 == 0,
 * 8-byte aligned rows): rec_st_tile's accumulation (alpha 1) into a bf16
 * tensor, old widened exactly and the sum rounded once by pr_bf16_bits: the
 * bits of an f32 copy of dst accumulated by rec_st_tile and cast back */
__device__ __forceinline__ unsigned rec_add_bf16x2(unsigned w, float x0, float x1)
{
    return (unsigned)pr_bf16_bits(fmaf(1.f, x0, pr_bf16_lo(w))) | (unsigned)pr_bf16_bits(fmaf(1.f, x1, pr_bf16_hi(w))) << 16;
}
__device__ __forceinline__ unsigned rec_sum_bf16x2(float x0, float y0, float x1, float y1)
{
    return (unsigned)pr_bf16_bits(fmaf(1.f, x0, y0)) | (unsigned)pr_bf16_bits(fmaf(1.f, x1, y1)) << 16;
}
template <int NB = 4>
__device__ __forceinline__ void rec_acc_tile16(unsigned short *dst, long long rs, int nr, int nc, const float *src,
                                               int ld)
{
    const rec_rowmap m = rec_rowmap_of(nc);
    for (int rb = m.r0; rb < nr; rb += NB * m.rstep)
        for (int c = m.c0; c < nc; c += m.cstep) {
            uint2 w[NB];
#pragma unroll
            for (int u = 0; u < NB; u++)
                if (rb + u * m.rstep < nr) w[u] = *reinterpret_cast<const uint2 *>(dst + (rb + u * m.rstep) * rs + c);
#pragma unroll
            for (int u = 0; u < NB; u++) {
                const int r = rb + u * m.rstep;
                if (r >= nr) break;
                const float4 x = *reinterpret_cast<const float4 *>(src + r * ld + c);
                *reinterpret_cast<uint2 *>(dst + r * rs + c) =
                    make_uint2(rec_add_bf16x2(w[u].x, x.x, x.y), rec_add_bf16x2(w[u].y, x.z, x.w));
            }
        }
}

/* the same with the old values from an f32 tensor (same layout, rows rs
 * apart): dst (bf16) = bf16(old + src), rec_st_tile's accumulation into old
 * followed by the cast to bf16 */
template <int NB = 4>
__device__ __forceinline__ void rec_acc_tile16_from(unsigned short *dst, const float *old, long long rs, int nr, int nc,
                                                    const float *src, int ld)
{
    const rec_rowmap m = rec_rowmap_of(nc);
    for (int rb = m.r0; rb < nr; rb += NB * m.rstep)
        for (int c = m.c0; c < nc; c += m.cstep) {
            float4 y[NB];
#pragma unroll
            for (int u = 0; u < NB; u++)
                if (rb + u * m.rstep < nr) y[u] = *reinterpret_cast<const float4 *>(old + (rb + u * m.rstep) * rs + c);
#pragma unroll
            for (int u = 0; u < NB; u++) {
                const int r = rb + u * m.rstep;
                if (r >= nr) break;
                const float4 x = *reinterpret_cast<const float4 *>(src + r * ld + c);
                *reinterpret_cast<uint2 *>(dst + r * rs + c) =
                    make_uint2(rec_sum_bf16x2(x.x, y[u].x, x.y, y[u].y), rec_sum_bf16x2(x.z, y[u].z, x.w, y[u].w));
            }
        }
}
/* and the other way: dst (f32) = old (bf16, widened) + src, the first of
 * two passes that add into a bf16 tensor (the second rounds) */
__device__ __forceinline__ void rec_acc_tile_from16(float *dst, const unsigned short *old, long long rs, int nr, int nc,
                                                    const float *src, int ld)
{
    const rec_rowmap m = rec_rowmap_of(nc);
    for (int rb = m.r0; rb < nr; rb += 4 * m.rstep)
        for (int c = m.c0; c < nc; c += m.cstep) {
            uint2 w[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (rb + u * m.rstep < nr) w[u] = *reinterpret_cast<const uint2 *>(old + (rb + u * m.rstep) * rs + c);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int r = rb + u * m.rstep;
                if (r >= nr) break;
                const float4 x = *reinterpret_cast<const float4 *>(src + r * ld + c);
                *reinterpret_cast<float4 *>(dst + r * rs + c) =
                    make_float4(fmaf(1.f, x.x, pr_bf16_lo(w[u].x)), fmaf(1.f, x.y, pr_bf16_hi(w[u].x)),
                                fmaf(1.f, x.z, pr_bf16_lo(w[u].y)), fmaf(1.f, x.w, pr_bf16_hi(w[u].y)));
            }
        }
}

/* ---- the block's matrix product ------------------------------------------------
 * C[M][N] = (acc ? C : 0) + alpha * op(A) op(B), all in shared memory.
 * op(A) [M][Kd]: A[m*lda + k], or A[k*lda + m] when TA. op(B) [Kd][N]: B[k*ldb + n],
 * or B[n*ldb + k] when TB. M, N multiples of 32, Kd of 8 (16 for bf16); leading dims multiples
 * of 4 and arrays 32-byte aligned. Each warp owns blocks of C (32x32, smaller
 * when there are few); C must not alias A or B. The caller synchronizes before and after (two calls with
 * the same M, N and C may follow each other: a warp owns the same blocks). */

/* d += a b, one m16n8k8 TF32 tensor-core product. Fragments (PTX mma.sync
 * layout, g = lane/4, t = lane%4): a = A[g][t], A[g+8][t], A[g][t+4],
 * A[g+8][t+4]; b = B[t][g], B[t+4][g]; d = D[g][2t], D[g][2t+1], D[g+8][2t],
 * D[g+8][2t+1]. */
__device__ __forceinline__ void rec_mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* f32 -> TF32, rounded to nearest (as the earlier wmma path did) */
__device__ __forceinline__ unsigned rec_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* four 8x4 f32 blocks from shared memory in one instruction: lane l gives
 * the address of row l % 8 of block l / 8 (16 bytes, 16-byte aligned) and
 * receives word l % 4 of row l / 4 of each block, which is the TF32
 * fragment's (g, t) element. ldmatrix moves 16-bit pairs; a 32-bit word is
 * one pair, so the f32 bits arrive unchanged. */
__device__ __forceinline__ void rec_ldsm_x4(unsigned (&r)[4], const float *row)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* d += a b, one m16n8k16 bf16 tensor-core product with f32 accumulators.
 * Fragments as rec_mm_tc_block loads them: each register two bf16, the
 * low half k = t and the high half k = t + 4 (a permutation of the 16 k of
 * a step, the same for A and B, so the sum is the same): a = A[g][t, t+4],
 * A[g+8][t, t+4], A[g][t+8, t+12], A[g+8][t+8, t+12]; b = B[t, t+4][g],
 * B[t+8, t+12][g]. With it a bf16 fragment is two TF32 ones converted in
 * pairs, and ldmatrix serves both. */
__device__ __forceinline__ void rec_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* two f32 -> one bf16 pair, lo in the low half (round to nearest even; exact
 * for values that are bf16 already) */
__device__ __forceinline__ unsigned rec_bf16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned rec_bf16x2(unsigned lo, unsigned hi)
{
    return rec_bf16x2(__uint_as_float(lo), __uint_as_float(hi));
}

/* one k-step's fragments of a warp's (16 FM) x (16 FN) block: A rows i*16, B
 * columns j*8. Operands whose rows run along k (A untransposed, B
 * transposed) come by ldmatrix: pa or pb is this lane's row address, one
 * instruction brings an A fragment or two B ones (TF32; bf16 takes two, k
 * and k + 8), converted here. The others are read element by element: pa,
 * pb point at this lane's first element; ai, bj: pointer steps between
 * fragments; a8 (row + 8), a4 (k + 4 for TF32, k + 8 for bf16), a1 (k + 4,
 * bf16's pair), likewise b4 and b1. All plain shared-memory loads (the
 * pointers come from the kernel's shared array). */
template <int FM, int FN, bool BF, bool TA, bool TB>
__device__ __forceinline__ void rec_mm_frags(unsigned (&fa)[FM][4], unsigned (&fb)[2 * FN][2], const float *pa,
                                             const float *pb, int ai, int a8, int a4, int a1, int bj, int b4, int b1)
{
#pragma unroll
    for (int i = 0; i < FM; i++) {
        const float *q = pa + i * ai;
        if constexpr (!TA && BF) { /* (g, t) (g+8, t) (g, t+4) (g+8, t+4), then k + 8 */
            unsigned r[4], r8[4];
            rec_ldsm_x4(r, q), rec_ldsm_x4(r8, q + 8);
            fa[i][0] = rec_bf16x2(r[0], r[2]), fa[i][1] = rec_bf16x2(r[1], r[3]);
            fa[i][2] = rec_bf16x2(r8[0], r8[2]), fa[i][3] = rec_bf16x2(r8[1], r8[3]);
        } else if constexpr (!TA) {
            rec_ldsm_x4(fa[i], q);
#pragma unroll
            for (int e = 0; e < 4; e++) fa[i][e] = rec_tf32(__uint_as_float(fa[i][e]));
        } else if constexpr (BF) {
            fa[i][0] = rec_bf16x2(q[0], q[a1]);
            fa[i][1] = rec_bf16x2(q[a8], q[a8 + a1]);
            fa[i][2] = rec_bf16x2(q[a4], q[a4 + a1]);
            fa[i][3] = rec_bf16x2(q[a8 + a4], q[a8 + a4 + a1]);
        } else {
            fa[i][0] = rec_tf32(q[0]);
            fa[i][1] = rec_tf32(q[a8]);
            fa[i][2] = rec_tf32(q[a4]);
            fa[i][3] = rec_tf32(q[a8 + a4]);
        }
    }
#pragma unroll
    for (int j = 0; j < 2 * FN; j += 2) {
        const float *q = pb + j * bj;
        if constexpr (TB && BF) { /* (g, t) (g, t+4) (8+g, t) (8+g, t+4), then k + 8 */
            unsigned r[4], r8[4];
            rec_ldsm_x4(r, q), rec_ldsm_x4(r8, q + 8);
            fb[j][0] = rec_bf16x2(r[0], r[1]), fb[j + 1][0] = rec_bf16x2(r[2], r[3]);
            fb[j][1] = rec_bf16x2(r8[0], r8[1]), fb[j + 1][1] = rec_bf16x2(r8[2], r8[3]);
        } else if constexpr (TB) {
            unsigned r[4];
            rec_ldsm_x4(r, q);
            fb[j][0] = rec_tf32(__uint_as_float(r[0])), fb[j][1] = rec_tf32(__uint_as_float(r[1]));
            fb[j + 1][0] = rec_tf32(__uint_as_float(r[2])), fb[j + 1][1] = rec_tf32(__uint_as_float(r[3]));
        } else {
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const float *w = q + u * bj;
                if constexpr (BF) {
                    fb[j + u][0] = rec_bf16x2(w[0], w[b1]);
                    fb[j + u][1] = rec_bf16x2(w[b4], w[b4 + b1]);
                } else {
                    fb[j + u][0] = rec_tf32(w[0]);
                    fb[j + u][1] = rec_tf32(w[b4]);
                }
            }
        }
    }
}
template <int FM, int FN, bool BF>
__device__ __forceinline__ void rec_mm_step(float (&d)[FM][2 * FN][4], const unsigned (&fa)[FM][4],
                                            const unsigned (&fb)[2 * FN][2])
{
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < 2 * FN; j++) {
            if constexpr (BF) rec_mma_bf16(d[i][j], fa[i], fb[j]);
            else rec_mma_tf32(d[i][j], fa[i], fb[j]);
        }
}

/* d[r] += A B^T for a warp's blocks r < nr, each 16 x 32, where A's 16 rows
 * start at row rab[r] & 0xffff and B's 32 at rab[r] >> 16 (packed: a
 * register a block) of one array X (leading dim ld,
 * rows along k, as rec_mm_tc_block with TA false, TB true). The k-steps run
 * outside the blocks: a step's R products do not wait on each other, and
 * one set of fragments suffices (a kernel keeping R blocks of sums in
 * registers has few to spare). */
template <int R, bool BF>
__device__ __forceinline__ void rec_mm_tc_blocks_nt(float (&d)[R][1][4][4], const float *X, int ld, const int (&rab)[R],
                                                    int nr, int Kd)
{
    constexpr int KS = BF ? 16 : 8, KH = KS / 2;
    const int lane = threadIdx.x & 31;
    const float *xa = X + (lane & 15) * ld + (lane >> 4) * 4;
    const float *xb = X + ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 4;
    for (int k = 0; k < Kd; k += KS)
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= nr) break;
            unsigned fa[1][4], fb[4][2];
            rec_mm_frags<1, 2, BF, false, true>(fa, fb, xa + (rab[r] & 0xffff) * ld + k, xb + (rab[r] >> 16) * ld + k,
                                                16 * ld, 8 * ld, KH, 4, 8 * ld, KH, 4);
            rec_mm_step<1, 2, BF>(d[r], fa, fb);
        }
}
/* C[m0.., n0..] = (acc ? C : 0) + alpha * d: a warp's accumulators in the
 * mma layout written back (g = lane / 4, t = lane % 4) */
template <int FM, int NJ>
__device__ __forceinline__ void rec_frags_store(float *C, int ldc, int m0, int n0, int g, int t,
                                                const float (&d)[FM][NJ][4], float alpha, bool acc)
{
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            float2 *p0 = reinterpret_cast<float2 *>(C + (m0 + 16 * i + g) * ldc + n0 + 8 * j + 2 * t);
            float2 *p1 = reinterpret_cast<float2 *>(reinterpret_cast<float *>(p0) + 8 * ldc);
            float2 x0 = acc ? *p0 : make_float2(0.f, 0.f), x1 = acc ? *p1 : make_float2(0.f, 0.f);
            x0.x = fmaf(alpha, d[i][j][0], x0.x), x0.y = fmaf(alpha, d[i][j][1], x0.y);
            x1.x = fmaf(alpha, d[i][j][2], x1.x), x1.y = fmaf(alpha, d[i][j][3], x1.y);
            *p0 = x0, *p1 = x1;
        }
}
/* whether the wgmma forms can run: the build compiled them (CMake defines
 * PRISM_WGMMA when CMAKE_CUDA_ARCHITECTURES has 90a) and the current
 * device is sm_90 (another architecture in the same build gets trapping
 * stubs) */
static inline bool rec_wgmma_runs()
{
#ifdef PRISM_WGMMA
    int dev = 0, major = 0, minor = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
           minor == 0;
#else
    return false;
#endif
}
/* the product with warp blocks of (16 FM) x (16 FN): mma.sync with f32
 * accumulators in registers, m16n8k8 TF32 or (BF) m16n8k16 bf16; the next
 * k-step's fragments load while the current one multiplies (two register
 * sets), so the shared-memory latency overlaps the tensor work. A 16x16 block
 * has only two products a k-step, each waiting on its previous k-step's
 * result: there the odd k-steps sum into a second set of accumulators (added
 * at the end), which halves that chain of dependent products.
 * BF needs Kd a multiple of 16. ldmatrix reads 16-byte rows: the leading
 * dims and arrays as above (multiples of 4 floats, 32-byte aligned) keep
 * them aligned. One warp's block at (m0, n0): */
template <bool TA, bool TB, int FM, int FN, bool BF = false>
__device__ __forceinline__ void rec_mm_tc_block(float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                                                int m0, int n0, int Kd, float alpha, bool acc)
{
    constexpr int NJ = 2 * FN, KS = BF ? 16 : 8, KH = KS / 2;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    /* element steps: between A fragments (16 rows), inside one (row + 8, k + KH,
     * k + 4), per k-step (k + KS); likewise for B (8 columns, k + KH, k + 4, k + KS) */
    const int ai = TA ? 16 : 16 * lda, a8 = TA ? 8 : 8 * lda, a4 = TA ? KH * lda : KH, a1 = TA ? 4 * lda : 4;
    const int ak = TA ? KS * lda : KS;
    const int bj = TB ? 8 * ldb : 8, b4 = TB ? KH : KH * ldb, b1 = TB ? 4 : 4 * ldb, bk = TB ? KS : KS * ldb;
    /* ldmatrix row addresses (rec_mm_frags) where rows run along k: A's four
     * blocks are (rows 0-7, k 0-3), (8-15, 0-3), (0-7, 4-7), (8-15, 4-7); B's
     * (columns 0-7, k 0-3), (0-7, 4-7), (8-15, 0-3), (8-15, 4-7), the last two
     * the next fragment's. Else this lane's element (g, t). */
    const float *pa = TA ? A + t * lda + m0 + g : A + (m0 + (lane & 15)) * lda + (lane >> 4) * 4;
    const float *pb = TB ? B + (n0 + (lane & 7) + (lane >> 4) * 8) * ldb + ((lane >> 3) & 1) * 4 : B + t * ldb + n0 + g;
    constexpr bool split = FM * FN == 1;
    float d[FM][NJ][4], d1[FM][NJ][4];
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) d[i][j][e] = 0.f, d1[i][j][e] = 0.f;
    unsigned fa0[FM][4], fb0[NJ][2], fa1[FM][4], fb1[NJ][2];
    rec_mm_frags<FM, FN, BF, TA, TB>(fa0, fb0, pa, pb, ai, a8, a4, a1, bj, b4, b1);
    for (int k0 = 0; k0 < Kd; k0 += 2 * KS) {
        pa += ak, pb += bk;
        if (k0 + KS < Kd) rec_mm_frags<FM, FN, BF, TA, TB>(fa1, fb1, pa, pb, ai, a8, a4, a1, bj, b4, b1);
        rec_mm_step<FM, FN, BF>(d, fa0, fb0);
        if (k0 + KS >= Kd) break;
        pa += ak, pb += bk;
        if (k0 + 2 * KS < Kd) rec_mm_frags<FM, FN, BF, TA, TB>(fa0, fb0, pa, pb, ai, a8, a4, a1, bj, b4, b1);
        if constexpr (split) rec_mm_step<FM, FN, BF>(d1, fa1, fb1);
        else rec_mm_step<FM, FN, BF>(d, fa1, fb1);
    }
    if constexpr (split)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) d[0][j][e] += d1[0][j][e];
    rec_frags_store<FM, NJ>(C, ldc, m0, n0, g, t, d, alpha, acc);
}
/* the whole product: warp w takes blocks w, w + PR_REC_WARPS, ... */
template <bool TA, bool TB, int FM, int FN, bool BF = false>
__device__ __forceinline__ void rec_mm_tc_tiles(float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                                                int M, int N, int Kd, float alpha, bool acc)
{
    const int nb = N / (16 * FN), nblk = (M / (16 * FM)) * nb;
    for (int blk = threadIdx.x >> 5; blk < nblk; blk += PR_REC_WARPS)
        rec_mm_tc_block<TA, TB, FM, FN, BF>(C, ldc, A, lda, B, ldb, (blk / nb) * 16 * FM, (blk % nb) * 16 * FN, Kd,
                                            alpha, acc);
}

/* 32x32 warp tiles when there are enough of them to keep every warp busy,
 * else 16x32 or 16x16 ones (less operand reuse, more warps at work). W32
 * false leaves the 32x32 path out, for kernels whose products never have
 * enough blocks for it: its registers then do not count against the
 * kernel's (ptxas allocates for the worst path, taken or not). */
template <bool TA, bool TB, bool BF = false, bool W32 = true>
__device__ __forceinline__ void rec_mm_tc(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int M,
                                          int N, int Kd, float alpha, bool acc)
{
    if (W32 && (M >> 5) * (N >> 5) >= PR_REC_WARPS)
        rec_mm_tc_tiles<TA, TB, 2, 2, BF>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
    else if ((M >> 4) * (N >> 5) >= PR_REC_WARPS)
        rec_mm_tc_tiles<TA, TB, 1, 2, BF>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
    else rec_mm_tc_tiles<TA, TB, 1, 1, BF>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
}

/* the same product in plain fp32: each lane owns a 4x8 piece of a 32x32 block */
template <bool TA, bool TB>
__device__ __forceinline__ void rec_mm_f32(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int M,
                                           int N, int Kd, float alpha, bool acc)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nb = N >> 5, nblk = (M >> 5) * nb;
    const int r0 = (lane >> 2) * 4, c0 = (lane & 3) * 8;
    for (int blk = warp; blk < nblk; blk += PR_REC_WARPS) {
        const int m0 = (blk / nb) * 32 + r0, n0 = (blk % nb) * 32 + c0;
        float s[4][8];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) s[i][j] = 0.f;
        for (int k = 0; k < Kd; k++) {
            float a[4], b[8];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = TA ? A[k * lda + m0 + i] : A[(m0 + i) * lda + k];
#pragma unroll
            for (int j = 0; j < 8; j++) b[j] = TB ? B[(n0 + j) * ldb + k] : B[k * ldb + n0 + j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) s[i][j] = fmaf(a[i], b[j], s[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float *pc = C + (m0 + i) * ldc + n0 + j;
                *pc = (acc ? *pc : 0.f) + alpha * s[i][j];
            }
    }
}

/* d += A[m0.., :Kd] B[n0.., :Kd]^T in plain fp32 into accumulators laid out
 * as rec_mm_tc_block's (one 16 x 8 NJ block, rows of A and B along k): the
 * exact twin of the tensor-core path for kernels that keep sums in registers */
template <int NJ>
__device__ __forceinline__ void rec_mm_f32_acc_nt(float (&d)[1][NJ][4], const float *A, int lda, const float *B, int ldb,
                                                  int m0, int n0, int Kd)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float *a0 = A + (m0 + g) * lda, *a1 = a0 + 8 * lda, *b0 = B + (n0 + 2 * t) * ldb;
    for (int k = 0; k < Kd; k++) {
        const float x0 = a0[k], x1 = a1[k];
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const float y0 = b0[8 * j * ldb + k], y1 = b0[(8 * j + 1) * ldb + k];
            d[0][j][0] = fmaf(x0, y0, d[0][j][0]), d[0][j][1] = fmaf(x0, y1, d[0][j][1]);
            d[0][j][2] = fmaf(x1, y0, d[0][j][2]), d[0][j][3] = fmaf(x1, y1, d[0][j][3]);
        }
    }
}

/* BF: the product as bf16 mma.sync m16n8k16 (each operand rounded to bf16,
 * f32 accumulators): the chunked kernels' instance for bf16 data with TF32
 * on (rec_bf_products), one instruction per k-step of 16 where TF32 takes
 * two, exact where both tiles hold raw bf16 data. Kd a multiple of 16. */
template <bool TA, bool TB, bool BF = false, bool W32 = true>
__device__ __forceinline__ void rec_mm(bool tf32, float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                                       int M, int N, int Kd, float alpha, bool acc)
{
    if constexpr (BF) rec_mm_tc<TA, TB, true, W32>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
    else if (tf32) rec_mm_tc<TA, TB, false, W32>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
    else rec_mm_f32<TA, TB>(C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
}

/* out[r] (+)= sgn * sum_{c<W} A[r*lda + c] B[r*ldb + c], r < R; a warp per row */
__device__ __forceinline__ void rec_row_dots(float *out, const float *A, int lda, const float *B, int ldb, int R, int W,
                                             float sgn, bool acc)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int r = warp; r < R; r += PR_REC_WARPS) {
        float s = 0.f;
        for (int c = lane; c < W; c += 32) s = fmaf(A[r * lda + c], B[r * ldb + c], s);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(PR_FULL_MASK, s, o);
        if (lane == 0) out[r] = (acc ? out[r] : 0.f) + sgn * s;
    }
}

/* the block's sum of v (every thread gets it); red: 9 floats of shared memory */
__device__ __forceinline__ float rec_block_sum(float v, float *red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(PR_FULL_MASK, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int w = 0; w < PR_REC_WARPS; w++) s += red[w];
        red[8] = s;
    }
    __syncthreads();
    return red[8];
}

/* the wgmma forms (sm_90a), TF32 and bf16: ops/cuda/wgmma.cuh */
#include "ops/cuda/wgmma.cuh"

#endif
