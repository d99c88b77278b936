/* ops/cuda/wgmma.cuh: the wgmma part of the tile kit (ops/cuda/tiles.cuh,
 * which includes this file at its end; include tiles.cuh, not this): a
 * warpgroup's product from shared memory on sm_90a, TF32 (m64nNk8) and bf16
 * (m64nNk16) with f32 sums, its descriptors and fences, the K-major swizzled
 * operand tiles and the transposed copies that fill them, and the layout of
 * the sums in registers. C++, CUDA only.
 */
#ifndef PR_OPS_CUDA_WGMMA_CUH
#define PR_OPS_CUDA_WGMMA_CUH

#include "ops/cuda/tiles.cuh"

/* ---- wgmma (sm_90a): a warpgroup's product from shared memory --------------------
 * wgmma reads its operands from shared memory in rows of 32 floats (128
 * bytes, k along the row), 16-byte chunk j of row r stored at chunk j ^ (r %
 * 8), r counted from a 1024-byte boundary (the 128-byte swizzle; rec_sw128
 * places an element): eight consecutive rows then read a k-step without
 * bank conflicts, and no fragment loads are needed. rec_wg_desc describes
 * the rows from row on (groups of eight rows 1024 bytes apart); a k-step of
 * 8 TF32 advances it by 32 bytes, which the hardware swizzles as the stores
 * did. The products take the f32 bits and drop the low 13 (truncation), so
 * operands rounded to nearest are rounded in place first (rec_tf32).
 * Compiled for anything but sm_90a these trap; the plans pick them only
 * where they run (rec_wgmma_runs). */
__device__ __forceinline__ unsigned long long rec_wg_desc(const float *row)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    return (unsigned long long)((a & 0x3FFFF) >> 4) | 1ull << 16 | (unsigned long long)(1024 >> 4) << 32 | 1ull << 62;
}
/* the generic proxy's shared-memory writes (stores, cp.async) made visible
 * to wgmma, which reads through the async proxy; then a barrier */
__device__ __forceinline__ void rec_fence_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define REC_WG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define REC_WG_ASM(...) __trap()
#endif
__device__ __forceinline__ void rec_wg_fence() { REC_WG_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void rec_wg_commit() { REC_WG_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void rec_wg_wait() { REC_WG_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* after rec_wg_wait: the sums are final only now, so keep the compiler from
 * touching them before it */
template <int N> __device__ __forceinline__ void rec_wg_settle(float (&d)[N])
{
#pragma unroll
    for (int e = 0; e < N; e++) asm volatile("" : "+f"(d[e])::"memory");
}
/* sums set to zero each by an instruction of its own (sums sharing one zero
 * register can make ptxas serialize the wgmma that follow, C7520) */
template <int N> __device__ __forceinline__ void rec_wg_zero(float (&d)[N])
{
#pragma unroll
    for (int e = 0; e < N; e++) asm volatile("mov.b32 %0, 0;\n" : "=f"(d[e]));
}
/* d += A B^T, A 64 rows (da), B N rows (db), one k-step of 8 TF32. d: the
 * warpgroup's 64 x N f32 sums, warp w's rows 16 w + g and + 8 as in
 * rec_frags_store (d[4 j + e] is mma.sync's d[j][e]); rec_wg_mma<N> picks
 * the instance by N = 16, 32 or 64 */
__device__ __forceinline__ void rec_wg_mma_n32(float (&d)[16], unsigned long long da, unsigned long long db)
{
    REC_WG_ASM("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "l"(da), "l"(db));
}
__device__ __forceinline__ void rec_wg_mma_n16(float (&d)[8], unsigned long long da, unsigned long long db)
{
    REC_WG_ASM("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 "
               "{%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "l"(da), "l"(db));
}
__device__ __forceinline__ void rec_wg_mma_n64(float (&d)[32], unsigned long long da, unsigned long long db)
{
    REC_WG_ASM("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
               "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db));
}
template <int N> __device__ __forceinline__ void rec_wg_mma(float (&d)[N / 2], unsigned long long da,
                                                            unsigned long long db)
{
    static_assert(N == 16 || N == 32 || N == 64, "wgmma here takes N = 16, 32 or 64");
    if constexpr (N == 16) rec_wg_mma_n16(d, da, db);
    else if constexpr (N == 32) rec_wg_mma_n32(d, da, db);
    else rec_wg_mma_n64(d, da, db);
}

/* The serial passes' wgmma products (ops/recurrence/cuda/state.cu's form,
 * dstate.cu's): a warpgroup's NW columns of a tile whose
 * B operand has sub-tiles of 32 k at stride bs floats (B at this
 * warpgroup's first row).
 * rec_wg_rows: d += A B^T, A 64 rows in KB sub-tiles of 64 x 32 (k = KB 32).
 * rec_wg_cols: d[m] += A_m B^T for the MP pieces of 64 rows of A (KW rows
 * in all) over KT sub-tiles of KW x 32 (k = KT 32).
 * Both unrolled whole, so that nothing but wgmma defines the sums inside
 * them (ptxas serializes them otherwise, C7515); the caller fences,
 * commits and waits. */
template <int NW, int KB>
__device__ __forceinline__ void rec_wg_rows(float (&d)[NW / 2], const float *A, const float *B, int bs)
{
#pragma unroll
    for (int kb = 0; kb < KB; kb++) {
        const unsigned long long da = rec_wg_desc(A + kb * 64 * 32), db = rec_wg_desc(B + kb * bs);
#pragma unroll
        for (int ks = 0; ks < 4; ks++) rec_wg_mma<NW>(d, da + 2 * ks, db + 2 * ks);
    }
}
template <int NW, int MP, int KT>
__device__ __forceinline__ void rec_wg_cols(float (&d)[MP][NW / 2], const float *A, const float *B, int bs)
{
#pragma unroll
    for (int kt = 0; kt < KT; kt++) {
        const unsigned long long db = rec_wg_desc(B + kt * bs);
#pragma unroll
        for (int m = 0; m < MP; m++) {
            const unsigned long long da = rec_wg_desc(A + (kt * MP + m) * 64 * 32);
#pragma unroll
            for (int ks = 0; ks < 4; ks++) rec_wg_mma<NW>(d[m], da + 2 * ks, db + 2 * ks);
        }
    }
}
/* ---- bf16 wgmma (sm_90a): m64nNk16, bf16 operands, f32 sums ----------------------
 * bf16 operand tiles are K-major too, with rows of 64 bf16 (128 bytes, the
 * same 128-byte swizzle: 16-byte chunk j, 8 bf16, of row r at chunk j ^ (r %
 * 8), r counted from a 1024-byte boundary; rec_sw128h places an element), in
 * sub-tiles of R rows x 64 k (R * 64 bf16, 1024-byte aligned). rec_wg_desc
 * describes them unchanged: a k-step of 16 bf16 is 32 bytes, as TF32's of 8
 * floats, so four k-steps a sub-tile at +2 each. bf16 needs no rounding in
 * place (wgmma reads exactly the bits stored), and the sums' layout is
 * TF32's (rec_wg_sums_of, rec_wg_sums_st). Half the shared memory and half
 * the bytes copied of an f32 tile of the same k. */
__device__ __forceinline__ int rec_sw128h(unsigned base, int r, int c)
{
    return r * 64 + ((((c >> 3) ^ ((base >> 7) + r)) & 7) << 3) + (c & 7);
}
__device__ __forceinline__ unsigned long long rec_wg_desc(const unsigned short *row)
{
    return rec_wg_desc(reinterpret_cast<const float *>(row));
}
/* d += A B^T, one k-step of 16 bf16 (imm-trans 0: both K-major) */
__device__ __forceinline__ void rec_wgh_mma_n32(float (&d)[16], unsigned long long da, unsigned long long db)
{
    REC_WG_ASM("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "l"(da), "l"(db));
}
__device__ __forceinline__ void rec_wgh_mma_n64(float (&d)[32], unsigned long long da, unsigned long long db)
{
    REC_WG_ASM("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
               "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db));
}
/* rec_wg_rows with bf16 tiles: d += A B^T, A 64 rows in KB sub-tiles of 64
 * x 64 bf16 (k = KB 64), B's sub-tiles bs bf16 apart (B at this
 * warpgroup's first row); unrolled whole, the caller fences, commits and
 * waits */
template <int NW, int KB>
__device__ __forceinline__ void rec_wgh_rows(float (&d)[NW / 2], const unsigned short *A, const unsigned short *B,
                                             int bs)
{
    static_assert(NW == 32 || NW == 64, "bf16 wgmma here takes N = 32 or 64");
#pragma unroll
    for (int kb = 0; kb < KB; kb++) {
        const unsigned long long da = rec_wg_desc(A + kb * 64 * 64), db = rec_wg_desc(B + kb * bs);
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            if constexpr (NW == 32) rec_wgh_mma_n32(d, da + 2 * ks, db + 2 * ks);
            else rec_wgh_mma_n64(d, da + 2 * ks, db + 2 * ks);
        }
    }
}

/* bf16 rows copied as they are into such a tile of R rows and KB sub-tiles:
 * dst (r, c) = src[r rs + c] for r < nr, c < nc, zero elsewhere (c < 64
 * KB). Asynchronous (cp.async, complete at the next cp.async wait); eight
 * lanes copy a row's 128 bytes of a sub-tile. c16: 16-byte copies (nc % 8
 * == 0, src and rows 16-byte aligned), else two 8-byte ones (nc % 4 == 0,
 * 8-byte aligned). */
__device__ __forceinline__ void rec_cp16h(unsigned d, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
template <int R, int KB>
__device__ __forceinline__ void rec_ld_tileh(unsigned short *dst, const unsigned short *src, long long rs, int nr,
                                             int nc, bool c16)
{
    static_assert(R * 8 % PR_REC_THREADS == 0, "whole rows of chunks for every thread");
#pragma unroll
    for (int kb = 0; kb < KB; kb++) {
        unsigned short *sub = dst + kb * R * 64;
        const unsigned base = (unsigned)__cvta_generic_to_shared(sub);
#pragma unroll
        for (int i = 0; i < R * 8 / PR_REC_THREADS; i++) {
            const int e = (int)threadIdx.x + i * PR_REC_THREADS, r = e >> 3, c = kb * 64 + (e & 7) * 8;
            const unsigned d = base + 2u * (unsigned)rec_sw128h(base, r, c & 63);
            const unsigned short *s = src + r * rs + c;
            if (c16) {
                const bool in = r < nr && c < nc;
                rec_cp16h(d, in ? s : src, in ? 16 : 0);
            } else {
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const bool in = r < nr && c + 4 * u < nc;
                    rec_cp8(d + 8 * u, in ? s + 4 * u : src, in ? 8 : 0);
                }
            }
        }
    }
}

/* R source rows x WC columns transposed into a bf16 operand tile of OR rows
 * a sub-tile: operand row c, k = r holds bf16(src[r rs + c]) (round to
 * nearest even; exact for bf16 sources), zero where r >= nr or c >= nc; k
 * in sub-tile r / 64. Through registers in two steps, so that every load
 * of a thread is in flight before its first store: rec_wgth_issue (f32
 * rows, vec: float4 loads) or rec_wgth_issue16 (bf16 rows, 8-byte loads:
 * nc % 4 == 0, 8-byte aligned), then rec_wgth_store. A unit is two source
 * rows (k, k + 1) x 4 columns, stored as 4 bf16 pairs (one 4-byte store a
 * column); a warp step is 16 row pairs (lanes & 15) x 8 columns (lanes >>
 * 4: + 4): an operand row's 64 contiguous bytes from each half-warp, in
 * disjoint banks (the two rows' chunks differ by 4 in the swizzle). */
template <int R, int WC> struct rec_wgth {
    static_assert(R % 32 == 0 && WC % 8 == 0 && R * WC % 2048 == 0, "whole warp steps for every warp");
    static constexpr int NU = R * WC / 2048;
    float4 a[NU], b[NU]; /* rows k and k + 1 */
};
struct rec_wgth_pos {
    int k, c;
};
template <int R> __device__ __forceinline__ rec_wgth_pos rec_wgth_of(int u)
{
    const int lane = threadIdx.x & 31, e = (int)(threadIdx.x >> 5) + u * PR_REC_WARPS;
    return {e % (R / 32) * 32 + 2 * (lane & 15), e / (R / 32) * 8 + (lane >> 4) * 4};
}
template <int R, int WC>
__device__ __forceinline__ void rec_wgth_issue(rec_wgth<R, WC> &t, const float *src, long long rs, int nr, int nc,
                                               bool vec)
{
#pragma unroll
    for (int u = 0; u < t.NU; u++) {
        const rec_wgth_pos q = rec_wgth_of<R>(u);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float4 &x = h ? t.b[u] : t.a[u];
            const int r = q.k + h;
            x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r >= nr || q.c >= nc) continue;
            const float *s = src + r * rs + q.c;
            if (vec) {
                x = *reinterpret_cast<const float4 *>(s);
                continue;
            }
            x.x = s[0];
            if (q.c + 1 < nc) x.y = s[1];
            if (q.c + 2 < nc) x.z = s[2];
            if (q.c + 3 < nc) x.w = s[3];
        }
    }
}
template <int R, int WC>
__device__ __forceinline__ void rec_wgth_issue16(rec_wgth<R, WC> &t, const unsigned short *src, long long rs, int nr,
                                                 int nc)
{
#pragma unroll
    for (int u = 0; u < t.NU; u++) {
        const rec_wgth_pos q = rec_wgth_of<R>(u);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = q.k + h;
            uint2 w = make_uint2(0u, 0u);
            if (r < nr && q.c < nc) w = *reinterpret_cast<const uint2 *>(src + r * rs + q.c);
            (h ? t.b[u] : t.a[u]) = make_float4(pr_bf16_lo(w.x), pr_bf16_hi(w.x), pr_bf16_lo(w.y), pr_bf16_hi(w.y));
        }
    }
}
/* (f: a factor for each source row, f[r] multiplying row r before the rounding; NULL: 1) */
template <int R, int WC>
__device__ __forceinline__ void rec_wgth_store(const rec_wgth<R, WC> &t, unsigned short *dst, int OR,
                                               const float *f = nullptr)
{
#pragma unroll
    for (int u = 0; u < t.NU; u++) {
        const rec_wgth_pos q = rec_wgth_of<R>(u);
        unsigned short *sub = dst + (q.k >> 6) * OR * 64;
        const unsigned base = (unsigned)__cvta_generic_to_shared(sub);
        const float fa = f ? f[q.k] : 1.f, fb = f ? f[q.k + 1] : 1.f;
        const float a[4] = {fa * t.a[u].x, fa * t.a[u].y, fa * t.a[u].z, fa * t.a[u].w};
        const float b[4] = {fb * t.b[u].x, fb * t.b[u].y, fb * t.b[u].z, fb * t.b[u].w};
#pragma unroll
        for (int i = 0; i < 4; i++)
            *reinterpret_cast<unsigned *>(sub + rec_sw128h(base, q.c + i, q.k & 63)) = rec_bf16x2(a[i], b[i]);
    }
}

/* the sums of a K x V state in registers as the products above leave them:
 * sum e of piece m is row 64 m + r0 + 8 (e >> 1 & 1), column c0 + 8 (e >>
 * 2) + (e & 1), with r0 and c0 of rec_wg_sums_of. rec_wg_sums_ld loads them
 * from src (row stride V; zero past K rows, nv columns or without src). */
struct rec_wg_pos {
    int r0, c0;
};
__device__ __forceinline__ rec_wg_pos rec_wg_sums_of(int NW)
{
    const int t = threadIdx.x;
    return {16 * ((t >> 5) & 3) + ((t & 31) >> 2), (t >> 7) * NW + 2 * (t & 3)};
}
template <int MP, int NR>
__device__ __forceinline__ void rec_wg_sums_ld(float (&d)[MP][NR], rec_wg_pos q, const float *src, int V, int K, int nv)
{
#pragma unroll
    for (int m = 0; m < MP; m++)
#pragma unroll
        for (int e = 0; e < NR; e++) {
            const int k = 64 * m + q.r0 + 8 * (e >> 1 & 1), j = q.c0 + 8 * (e >> 2) + (e & 1);
            d[m][e] = k < K && j < nv && src ? src[(long long)k * V + j] : 0.f;
        }
}

/* a warpgroup's 64 x N sums (N / 2 of them a thread, rec_wg_mma's order)
 * stored to dst[r * rs + c0 + j] for rows r < nr and columns c0 + j < nc,
 * with r0 and c0 of this thread (rec_wg_sums_of(N), c0 offset by the
 * tile's first column); vec: float2 stores (even nc and rs, dst 8-byte
 * aligned) */
template <int NR>
__device__ __forceinline__ void rec_wg_sums_st(float *dst, long long rs, const float (&d)[NR], int r0, int c0, int nr,
                                               int nc, bool vec)
{
#pragma unroll
    for (int e = 0; e < NR; e += 2) {
        const int r = r0 + 8 * (e >> 1 & 1), j = c0 + 8 * (e >> 2);
        if (r >= nr || j >= nc) continue;
        float *q = dst + r * rs + j;
        if (vec) *reinterpret_cast<float2 *>(q) = make_float2(d[e], d[e + 1]);
        else {
            q[0] = d[e];
            if (j + 1 < nc) q[1] = d[e + 1];
        }
    }
}

/* Tiles for wgmma operands: K-major (k along the rows), in sub-tiles of
 * OR rows x 32 floats, 128-byte-swizzled (rec_sw128), each element rounded
 * to TF32 by the thread that stores it.
 * rec_tf32_own: this thread's copies into such a tile of R rows and 32
 * floats (rec_ld_tile<true>'s placement), rounded in place once landed
 * (scaled by the row factors f[r] first, where given). */
template <bool W16 = false> /* W16: the slots hold bf16 (rec_ld_tile16<true>), widened first */
__device__ __forceinline__ void rec_tf32_own(float *dst, int R, const float *f = nullptr)
{
    const rec_rowmap m = rec_rowmap_of(32);
    const unsigned base = (unsigned)__cvta_generic_to_shared(dst);
    for (int r = m.r0; r < R; r += m.rstep) {
        float4 *q = reinterpret_cast<float4 *>(dst + rec_sw128(base, r, m.c0));
        float4 x = W16 ? rec_widen4(reinterpret_cast<const float *>(q)) : *q;
        if (f) x.x *= f[r], x.y *= f[r], x.z *= f[r], x.w *= f[r];
        x.x = __uint_as_float(rec_tf32(x.x)), x.y = __uint_as_float(rec_tf32(x.y));
        x.z = __uint_as_float(rec_tf32(x.z)), x.w = __uint_as_float(rec_tf32(x.w));
        *q = x;
    }
}
/* R source rows x WC columns transposed into such a tile: operand row c, k
 * k0 + r holds f[r] src[r rs + c] (f NULL: 1), zero where r >= nr or c >=
 * nc. In two steps: rec_wgt_issue loads this thread's part into t from
 * global memory (rec_wgt_from_sw from a swizzled copy in shared memory),
 * rec_wgt_store stores it. A warp step is 16 source rows x 8 columns: 32-byte row segments, and
 * stores that fall in 32 distinct banks. */
template <int R, int WC> struct rec_wgt {
    static_assert(R % 16 == 0 && WC % 8 == 0 && R * WC % 1024 == 0, "whole warp steps for every warp");
    static constexpr int NU = R * WC / 1024;
    float4 x[NU];
};
template <int R, int WC>
__device__ __forceinline__ void rec_wgt_issue(rec_wgt<R, WC> &t, const float *src, long long rs, int nr, int nc,
                                              bool vec)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < t.NU; u++) {
        const int e = warp + u * PR_REC_WARPS, r = e % (R / 16) * 16 + (lane & 15), c = e / (R / 16) * 8 + (lane >> 4) * 4;
        float4 &x = t.x[u];
        x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r >= nr || c >= nc) continue;
        const float *q = src + r * rs + c;
        if (vec) {
            x = *reinterpret_cast<const float4 *>(q);
            continue;
        }
        x.x = q[0];
        if (c + 1 < nc) x.y = q[1];
        if (c + 2 < nc) x.z = q[2];
        if (c + 3 < nc) x.w = q[3];
    }
}
/* rec_wgt_issue's part of a tile that rec_ld_tile<true> copied into
 * sub-tiles of R rows x 32 floats (src): reads of 16 rows that fall in
 * distinct 16-byte chunks */
template <int R, int WC> __device__ __forceinline__ void rec_wgt_from_sw(rec_wgt<R, WC> &t, const float *src)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < t.NU; u++) {
        const int e = warp + u * PR_REC_WARPS, r = e % (R / 16) * 16 + (lane & 15), c = e / (R / 16) * 8 + (lane >> 4) * 4;
        const float *sub = src + (c >> 5) * R * 32;
        t.x[u] = *reinterpret_cast<const float4 *>(sub + rec_sw128((unsigned)__cvta_generic_to_shared(sub), r, c & 31));
    }
}
template <int R, int WC>
__device__ __forceinline__ void rec_wgt_store(const rec_wgt<R, WC> &t, float *dst, int OR, int k0, const float *f)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < t.NU; u++) {
        const int e = warp + u * PR_REC_WARPS, r = e % (R / 16) * 16 + (lane & 15), c = e / (R / 16) * 8 + (lane >> 4) * 4;
        const float fr = f ? f[r] : 1.f, v[4] = {t.x[u].x, t.x[u].y, t.x[u].z, t.x[u].w};
        const int k = k0 + r;
        float *sub = dst + (k >> 5) * OR * 32;
        const unsigned base = (unsigned)__cvta_generic_to_shared(sub);
#pragma unroll
        for (int i = 0; i < 4; i++) sub[rec_sw128(base, c + i, k & 31)] = __uint_as_float(rec_tf32(fr * v[i]));
    }
}

/* The same transposed tile copied without registers or a staging copy:
 * rec_cpt issues 4-byte cp.asyncs (zero-filling where r >= nr or c >= nc;
 * complete at the next cp.async wait), rec_cpt_own then scales this
 * thread's elements by alpha f[r] (f NULL: 1) and rounds them in place. A
 * warp step is 4 source rows x 8 columns: 32-byte row segments, and stores
 * that fall in 32 distinct banks. A thread keeps one k (r % 32) and one
 * column phase (c % 8), so its addresses are a base and constant offsets
 * (dst 1024-byte aligned). */
struct rec_cpt_pos {
    int r, c, off; /* source row and column of the first element, its place in dst */
};
__device__ __forceinline__ rec_cpt_pos rec_cpt_of()
{
    const int lane = threadIdx.x & 31, r = 4 * (threadIdx.x >> 5) + (lane >> 3), c = lane & 7;
    return {r, c, c * 32 + ((((r >> 2) ^ c) & 7) << 2) + (r & 3)};
}
template <int R, int WC>
__device__ __forceinline__ void rec_cpt(float *dst, int OR, const float *src, long long rs, int nr, int nc)
{
    static_assert(R % 32 == 0 && WC % 8 == 0 && PR_REC_WARPS == 8, "a warp step of 4 rows a warp");
    const rec_cpt_pos q = rec_cpt_of();
    const unsigned d0 = (unsigned)__cvta_generic_to_shared(dst + q.off); /* the offsets below fold into it */
#pragma unroll
    for (int rb = 0; rb < R / 32; rb++) {
        const int r = q.r + 32 * rb;
        const float *s = src + r * rs + q.c;
#pragma unroll
        for (int cb = 0; cb < WC / 8; cb++) {
            const bool in = r < nr && q.c + 8 * cb < nc;
            rec_cp4(d0 + 4 * (rb * OR * 32 + cb * 256), in ? s + 8 * cb : src, in ? 4 : 0);
        }
    }
}
template <int R, int WC, bool W16 = false>
__device__ __forceinline__ void rec_cpt_own(float *dst, int OR, const float *f, float alpha)
{
    const rec_cpt_pos q = rec_cpt_of();
    const unsigned d0 = (unsigned)__cvta_generic_to_shared(dst + q.off); /* the offsets below fold into it */
#pragma unroll
    for (int rb = 0; rb < R / 32; rb++) {
        const float fr = f ? alpha * f[q.r + 32 * rb] : alpha;
        float *d = dst + q.off + rb * OR * 32;
#pragma unroll
        for (int cb = 0; cb < WC / 8; cb++) {
            /* W16: the element is the low (even column) or high half of its copied pair */
            const unsigned w = __float_as_uint(d[cb * 256]);
            const float x = !W16 ? d[cb * 256] : q.c & 1 ? pr_bf16_hi(w) : pr_bf16_lo(w);
            d[cb * 256] = __uint_as_float(rec_tf32(x * fr));
        }
    }
}
/* rec_cpt from bf16 rows (even rs, 4-byte aligned src, nc even): cp.async
 * has no 2-byte copy, so each thread copies the 4-byte pair that holds its
 * element (columns c & ~1 and c | 1) into its own slot, and
 * rec_cpt_own<R, WC, true> keeps its half, widened (exact), then scales and
 * rounds it as rec_cpt_own does: the bits of rec_cpt of a staged copy.
 * Each pair is read by two neighbouring lanes (cached in L1). */
template <int R, int WC>
__device__ __forceinline__ void rec_cpt16(float *dst, int OR, const unsigned short *src, long long rs, int nr, int nc)
{
    static_assert(R % 32 == 0 && WC % 8 == 0 && PR_REC_WARPS == 8, "a warp step of 4 rows a warp");
    const rec_cpt_pos q = rec_cpt_of();
    const unsigned d0 = (unsigned)__cvta_generic_to_shared(dst + q.off);
#pragma unroll
    for (int rb = 0; rb < R / 32; rb++) {
        const int r = q.r + 32 * rb;
        const unsigned short *s = src + r * rs + (q.c & ~1);
#pragma unroll
        for (int cb = 0; cb < WC / 8; cb++) {
            const bool in = r < nr && q.c + 8 * cb < nc;
            rec_cp4(d0 + 4 * (rb * OR * 32 + cb * 256), in ? reinterpret_cast<const float *>(s + 8 * cb)
                                                             : reinterpret_cast<const float *>(src),
                    in ? 4 : 0);
        }
    }
}

#endif
