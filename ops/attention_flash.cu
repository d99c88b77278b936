/* ops/attention_flash.cu: causal GQA attention on CUDA in bf16, flash style.
 *
 * bf16 q, k, v tiles go from global memory into shared memory (cp.async,
 * two stages for the streamed operand) and from there straight into
 * mma.sync m16n8k16 bf16 products with f32 accumulators; nothing is staged
 * through f32. Each warp owns 16 rows of its block's 64, so scores,
 * probabilities and accumulators live in registers: the probabilities are
 * rounded to bf16 once, in the register layout the next product reads them
 * in (an m16n8 accumulator pair is an m16n8k16 A fragment).
 *
 * forward (block: 64 query rows of one sequence, one head): for each key
 * tile of 64 up to the diagonal, S = Q K^T; online softmax in base 2 with f32
 * row max m and sum l (the sum kept per thread and reduced over the quad at
 * the end); O = O 2^{m-m'} + P V. Tiles above the diagonal are never
 * visited; the diagonal tile (the last one) is masked. The row log-sum-exp
 * (natural log, as the f32 path saves it) is written for the backward.
 * backward: Di = rowsum(dO * O) (f32); a dq kernel per query tile (P from
 * the log-sum-exp, dP = dO V^T, dS = P (dP - Di) scale, dQ = dS K) and a
 * dk/dv kernel per key tile and kv head that walks the queries at or after
 * the tile of every head of its group (S^T = K Q^T, dP^T = V dO^T, dV +=
 * P^T dO, dK += dS^T Q). Every gradient element has one writer, no atomics:
 * reruns give the same bits. Grads are added into the bf16 grad buffers
 * with one rounding (sum in double, rounded once). That backward computes
 * P and dS twice (S = Q K^T and dP = dO V^T in both kernels): four of its
 * seven D-long products are the recomputation's, and on the H200 it took
 * 3.7 times the forward at D = 128.
 * Native for D = Dv in {32, 64, 96, 128} with 16-byte aligned tensors; any
 * other head dim (or a view that is not aligned) runs the f32 kernels of
 * ops/attention.cu on staged f32 copies (pr_attention_flash_fits says which).
 * The kernels are templates over D: the products step along D in 16s; a
 * tile row is D / 8 16-byte copies spread over the 128 threads, whole copies
 * each for a 64-row tile when 16 divides D and for a 32-row tile (the dk/dv
 * query step at D = 128) when 32 does (fa_load's static_assert); the row
 * pad of 8 elements keeps the 8 rows of an ldmatrix in distinct bank groups
 * for any such D (the row stride, D / 8 + 1 16-byte units, is odd). The
 * instances are the multiples of 32 from 32 to 128 (fa_with_head_dim).
 */
#include "ops/attention.h"
#include "ops/ops.h"
#include "ops/seqlens.h"
#include "ops/cuda/ops_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <type_traits>

#define FA_THREADS 128 /* four warps of 16 rows */
#define FA_ROWS 64     /* query rows of a forward/dq block, key rows of a dk/dv block, rows of a streamed tile */

typedef unsigned short fa_bf16;

struct fa_prob {
    const fa_bf16 *q, *k, *v, *o, *dout;
    const float *lse, *Di;
    fa_bf16 *out, *dq, *dk, *dv;
    float *lse_out;
    const int *tiles; /* [ntiles][3]: bos, len, t0 (rows over B*T); NULL: B sequences of T */
    int T, H, Hkv, group;
    float scale, scale_log2; /* scale, and scale * log2(e) for the base-2 softmax */
};

struct fa_tile {
    int bos, len, t0;
};
/* the tile of block i of gridDim.x: the tiles late in their sequences first
 * when late_first (forward, dq: they see the most keys), else the early
 * ones (dk/dv: they see the most queries), so the lightest blocks run last */
__device__ __forceinline__ fa_tile fa_tile_of(const fa_prob &p, int i, bool late_first)
{
    if (p.tiles) {
        const int k = late_first ? gridDim.x - 1 - i : i;
        return {p.tiles[3 * k], p.tiles[3 * k + 1], p.tiles[3 * k + 2]};
    }
    const int per_seq = (p.T + FA_ROWS - 1) / FA_ROWS, B = gridDim.x / per_seq, j = i / B;
    return {i % B * p.T, p.T, (late_first ? per_seq - 1 - j : j) * FA_ROWS};
}

/* ---- the pieces: copies, fragments, products ------------------------------------ */

__device__ __forceinline__ unsigned fa_smem(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, asynchronously; zeros when !ok (src is then not read) */
__device__ __forceinline__ void fa_cp16(fa_bf16 *dst, const fa_bf16 *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fa_smem(dst)), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void fa_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

/* rows [0, nr) of an R x D bf16 tile (global row stride rs elements) into
 * shared memory with row stride D + 8 (the 16-byte pad puts the 8 rows an
 * ldmatrix reads in 8 different bank groups); rows from nr on are zeros */
template <int D, int R = FA_ROWS>
__device__ __forceinline__ void fa_load(fa_bf16 *dst, const fa_bf16 *src, long long rs, int nr)
{
    constexpr int CH = D / 8, LD = D + 8;
    static_assert(R * CH % FA_THREADS == 0, "whole copies per thread");
#pragma unroll
    for (int u = 0; u < R * CH / FA_THREADS; u++) {
        const int i = threadIdx.x + u * FA_THREADS, r = i / CH, c = (i % CH) * 8;
        const bool ok = r < nr;
        fa_cp16(dst + r * LD + c, src + (ok ? r * rs : 0) + c, ok);
    }
}

/* four 8x8 b16 matrices from shared memory; lane i gives the row address of
 * matrix i / 8, row i % 8 (trans: each matrix delivered transposed) */
__device__ __forceinline__ void fa_ldsm(unsigned (&r)[4], const fa_bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(p))
                 : "memory");
}
__device__ __forceinline__ void fa_ldsm_t(unsigned (&r)[4], const fa_bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(p))
                 : "memory");
}

/* d += a b: m16n8k16, bf16 operands, f32 accumulators. Fragments (g = lane / 4,
 * t = lane % 4): a = A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..];
 * b = B[2t..][g], B[2t+8..][g]; d = C[g][2t, 2t+1], C[g+8][2t, 2t+1]. */
__device__ __forceinline__ void fa_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* two f32 -> a bf16 pair rounded to nearest even, lo in the low half */
__device__ __forceinline__ unsigned fa_pack(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float fa_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* c[16 x 8 NT] += A[16 x KD] Y[8 NT x KD]^T: A and Y row-major bf16 in shared
 * memory (A at the warp's first row), row strides lda, ldy */
template <int KD, int NT>
__device__ __forceinline__ void fa_gemm_nt(float (&c)[NT][4], const fa_bf16 *A, int lda, const fa_bf16 *Y, int ldy)
{
    const int lane = threadIdx.x & 31;
    const fa_bf16 *pa = A + (lane & 15) * lda + (lane >> 4) * 8;
    const fa_bf16 *py = Y + ((lane & 7) + ((lane >> 4) << 3)) * ldy + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < KD / 16; kk++) {
        unsigned a[4];
        fa_ldsm(a, pa + kk * 16);
#pragma unroll
        for (int jj = 0; jj < NT / 2; jj++) {
            unsigned b[4];
            fa_ldsm(b, py + jj * 16 * ldy + kk * 16);
            fa_mma(c[2 * jj], a, b[0], b[1]);
            fa_mma(c[2 * jj + 1], a, b[2], b[3]);
        }
    }
}

/* c[16 x 8 NT] += A[16 x 16 KT] Z[16 KT x 8 NT]: A as register fragments, Z
 * row-major bf16 in shared memory (row stride ldz), read transposed */
template <int KT, int NT>
__device__ __forceinline__ void fa_gemm_rn(float (&c)[NT][4], const unsigned (&a)[KT][4], const fa_bf16 *Z, int ldz)
{
    const int lane = threadIdx.x & 31;
    const fa_bf16 *pz = Z + ((lane & 7) + (((lane >> 3) & 1) << 3)) * ldz + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < KT; kk++)
#pragma unroll
        for (int jj = 0; jj < NT / 2; jj++) {
            unsigned b[4];
            fa_ldsm_t(b, pz + kk * 16 * ldz + jj * 16);
            fa_mma(c[2 * jj], a[kk], b[0], b[1]);
            fa_mma(c[2 * jj + 1], a[kk], b[2], b[3]);
        }
}

/* accumulators [16 x 8 NT] -> A fragments [16 x 16 (NT / 2)], rounded to bf16 */
template <int NT> __device__ __forceinline__ void fa_to_a(unsigned (&a)[NT / 2][4], const float (&c)[NT][4])
{
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        a[kk][0] = fa_pack(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = fa_pack(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = fa_pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = fa_pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

/* dst[0..1] = round(dst + (x0, x1)): one bf16 pair of a grad, added in double, rounded once */
__device__ __forceinline__ void fa_acc2(fa_bf16 *dst, float x0, float x1)
{
    unsigned *w = (unsigned *)dst;
    const unsigned old = *w;
    const unsigned lo = pr_bf16_bits_once((double)pr_bf16_lo(old) + (double)x0);
    const unsigned hi = pr_bf16_bits_once((double)pr_bf16_hi(old) + (double)x1);
    *w = lo | (hi << 16);
}

/* ---- forward -------------------------------------------------------------------- */

template <int D> __global__ void __launch_bounds__(FA_THREADS) fa_fwd_kernel(fa_prob p)
{
    constexpr int LD = D + 8, TILE = FA_ROWS * LD, NT = FA_ROWS / 8, DT = D / 8;
    extern __shared__ __align__(16) fa_bf16 fsm[];
    fa_bf16 *Qs = fsm, *Ks = fsm + TILE, *Vs = fsm + 3 * TILE; /* K and V: two stages each */
    const fa_tile tl = fa_tile_of(p, blockIdx.x, true);
    const int h = blockIdx.y, hk = h / p.group, nq = min(FA_ROWS, tl.len - tl.t0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long long qrow = (long long)tl.bos + tl.t0, krs = (long long)p.Hkv * D;
    const fa_bf16 *kb = p.k + ((long long)tl.bos * p.Hkv + hk) * D, *vb = p.v + ((long long)tl.bos * p.Hkv + hk) * D;
    const int kend = tl.t0 + nq, ntiles = (kend + FA_ROWS - 1) / FA_ROWS;
    fa_load<D>(Qs, p.q + (qrow * p.H + h) * D, (long long)p.H * D, nq);
    fa_load<D>(Ks, kb, krs, min(FA_ROWS, kend));
    fa_load<D>(Vs, vb, krs, min(FA_ROWS, kend));
    fa_commit();
    float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    const int row0 = tl.t0 + warp * 16 + g; /* this thread's rows in the sequence: row0, row0 + 8 */
    for (int j = 0; j < ntiles; j++) {
        fa_wait_all();
        __syncthreads(); /* tile j is in for every thread; every warp is done with tile j - 1's stage */
        if (j + 1 < ntiles) {
            const int j1 = (j + 1) * FA_ROWS, nk = min(FA_ROWS, kend - j1);
            fa_load<D>(Ks + ((j + 1) & 1) * TILE, kb + j1 * krs, krs, nk);
            fa_load<D>(Vs + ((j + 1) & 1) * TILE, vb + j1 * krs, krs, nk);
            fa_commit();
        }
        const fa_bf16 *Kt = Ks + (j & 1) * TILE, *Vt = Vs + (j & 1) * TILE;
        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        fa_gemm_nt<D, NT>(s, Qs + warp * 16 * LD, LD, Kt, LD);
        const bool diag = j == ntiles - 1; /* the only tile with keys after some of the rows */
        const int j0 = j * FA_ROWS;
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) {
            float mx = m[e2];
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float x = s[n][2 * e2 + e] * p.scale_log2;
                    if (diag && j0 + 8 * n + 2 * t + e > row0 + 8 * e2) x = -INFINITY;
                    s[n][2 * e2 + e] = x;
                    mx = fmaxf(mx, x);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ms = mx == -INFINITY ? 0.f : mx, alpha = fa_exp2(m[e2] - ms);
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) sum += (s[n][2 * e2 + e] = fa_exp2(s[n][2 * e2 + e] - ms));
            m[e2] = mx, l[e2] = l[e2] * alpha + sum;
#pragma unroll
            for (int d = 0; d < DT; d++) o[d][2 * e2] *= alpha, o[d][2 * e2 + 1] *= alpha;
        }
        unsigned pa[NT / 2][4];
        fa_to_a<NT>(pa, s);
        fa_gemm_rn<NT / 2, DT>(o, pa, Vt, LD);
    }
#pragma unroll
    for (int e2 = 0; e2 < 2; e2++) {
        float sum = l[e2];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int r = warp * 16 + g + 8 * e2;
        if (r >= nq) continue;
        const float inv = 1.f / sum;
        fa_bf16 *dst = p.out + ((qrow + r) * p.H + h) * D + 2 * t;
#pragma unroll
        for (int d = 0; d < DT; d++) *(unsigned *)(dst + 8 * d) = fa_pack(o[d][2 * e2] * inv, o[d][2 * e2 + 1] * inv);
        if (p.lse_out && t == 0) p.lse_out[(qrow + r) * p.H + h] = m[e2] * 0.69314718f + logf(sum);
    }
}

/* ---- backward ------------------------------------------------------------------- */

/* Di[w] = dO . O over D for each (row, head) w: a warp each */
__global__ void fa_di_kernel(const fa_bf16 *dout, const fa_bf16 *o, float *Di, long long rows, int D)
{
    const int lane = threadIdx.x & 31;
    const long long step = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows; w += step) {
        const unsigned *a = (const unsigned *)(dout + w * D), *b = (const unsigned *)(o + w * D);
        float s = 0.f;
        for (int c = lane; c < D / 2; c += 32)
            s = fmaf(pr_bf16_lo(a[c]), pr_bf16_lo(b[c]), fmaf(pr_bf16_hi(a[c]), pr_bf16_hi(b[c]), s));
        s = pr_group_reduce<32>(s, pr_op_sum());
        if (lane == 0) Di[w] = s;
    }
}

/* dQ of 64 query rows of one head: every key tile up to the diagonal */
template <int D> __global__ void __launch_bounds__(FA_THREADS) fa_dq_kernel(fa_prob p)
{
    constexpr int LD = D + 8, TILE = FA_ROWS * LD, NT = FA_ROWS / 8, DT = D / 8;
    extern __shared__ __align__(16) fa_bf16 fsm[];
    fa_bf16 *Qs = fsm, *dOs = fsm + TILE, *Ks = fsm + 2 * TILE, *Vs = fsm + 4 * TILE;
    const fa_tile tl = fa_tile_of(p, blockIdx.x, true);
    const int h = blockIdx.y, hk = h / p.group, nq = min(FA_ROWS, tl.len - tl.t0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long long qrow = (long long)tl.bos + tl.t0, krs = (long long)p.Hkv * D;
    const fa_bf16 *kb = p.k + ((long long)tl.bos * p.Hkv + hk) * D, *vb = p.v + ((long long)tl.bos * p.Hkv + hk) * D;
    const int kend = tl.t0 + nq, ntiles = (kend + FA_ROWS - 1) / FA_ROWS;
    fa_load<D>(Qs, p.q + (qrow * p.H + h) * D, (long long)p.H * D, nq);
    fa_load<D>(dOs, p.dout + (qrow * p.H + h) * D, (long long)p.H * D, nq);
    fa_load<D>(Ks, kb, krs, min(FA_ROWS, kend));
    fa_load<D>(Vs, vb, krs, min(FA_ROWS, kend));
    fa_commit();
    const int row0 = tl.t0 + warp * 16 + g;
    float lse2[2], di[2], dq[DT][4];
#pragma unroll
    for (int e2 = 0; e2 < 2; e2++) {
        const int r = warp * 16 + g + 8 * e2; /* rows past the sequence: P = 0 */
        lse2[e2] = r < nq ? p.lse[(qrow + r) * p.H + h] * 1.44269504f : INFINITY;
        di[e2] = r < nq ? p.Di[(qrow + r) * p.H + h] : 0.f;
    }
#pragma unroll
    for (int d = 0; d < DT; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.f;
    for (int j = 0; j < ntiles; j++) {
        fa_wait_all();
        __syncthreads();
        if (j + 1 < ntiles) {
            const int j1 = (j + 1) * FA_ROWS, nk = min(FA_ROWS, kend - j1);
            fa_load<D>(Ks + ((j + 1) & 1) * TILE, kb + j1 * krs, krs, nk);
            fa_load<D>(Vs + ((j + 1) & 1) * TILE, vb + j1 * krs, krs, nk);
            fa_commit();
        }
        const fa_bf16 *Kt = Ks + (j & 1) * TILE, *Vt = Vs + (j & 1) * TILE;
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
        fa_gemm_nt<D, NT>(s, Qs + warp * 16 * LD, LD, Kt, LD);
        fa_gemm_nt<D, NT>(dp, dOs + warp * 16 * LD, LD, Vt, LD);
        const bool diag = j == ntiles - 1;
        const int j0 = j * FA_ROWS;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int e2 = e >> 1;
                float pr = fa_exp2(s[n][e] * p.scale_log2 - lse2[e2]);
                if (diag && j0 + 8 * n + 2 * t + (e & 1) > row0 + 8 * e2) pr = 0.f;
                s[n][e] = pr * (dp[n][e] - di[e2]) * p.scale;
            }
        unsigned da[NT / 2][4];
        fa_to_a<NT>(da, s);
        fa_gemm_rn<NT / 2, DT>(dq, da, Kt, LD);
    }
#pragma unroll
    for (int e2 = 0; e2 < 2; e2++) {
        const int r = warp * 16 + g + 8 * e2;
        if (r >= nq) continue;
        fa_bf16 *dst = p.dq + ((qrow + r) * p.H + h) * D + 2 * t;
#pragma unroll
        for (int d = 0; d < DT; d++) fa_acc2(dst + 8 * d, dq[d][2 * e2], dq[d][2 * e2 + 1]);
    }
}

/* dK, dV of 64 key rows of one kv head: per step, QS queries of one head of
 * the group, from the tile's own rows to the sequence's end (QS = 32 at
 * D = 128, where 64 would spill the dK, dV accumulators). At D = 96 QS = 64
 * takes 251 registers without spills and QS = 32 takes 171, over the 168
 * that three blocks an SM would allow: two blocks an SM either way, so 64,
 * with half the steps and barriers. S^T and dP^T
 * [keys x queries] are computed transposed so that P^T and dS^T come out of
 * the accumulators as the A fragments of dV += P^T dO and dK += dS^T Q. */
template <int D, int QS> __global__ void __launch_bounds__(FA_THREADS) fa_dkv_kernel(fa_prob p)
{
    constexpr int LD = D + 8, TILE = FA_ROWS * LD, QT = QS * LD, NT = QS / 8, DT = D / 8;
    extern __shared__ __align__(16) fa_bf16 fsm[];
    fa_bf16 *Ks = fsm, *Vs = fsm + TILE, *Qs = fsm + 2 * TILE, *dOs = Qs + 2 * QT; /* Q, dO: two stages */
    float *lse2s = (float *)(dOs + 2 * QT), *dis = lse2s + 2 * QS;                 /* two stages each */
    const fa_tile tl = fa_tile_of(p, blockIdx.x, false);
    const int hk = blockIdx.y, nk = min(FA_ROWS, tl.len - tl.t0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long long krow = (long long)tl.bos + tl.t0, qrs = (long long)p.H * D;
    const int nsh = (tl.len - tl.t0 + QS - 1) / QS, nsteps = nsh * p.group; /* steps per head, in all */
    fa_load<D>(Ks, p.k + (krow * p.Hkv + hk) * D, (long long)p.Hkv * D, nk);
    fa_load<D>(Vs, p.v + (krow * p.Hkv + hk) * D, (long long)p.Hkv * D, nk);
    /* step i: head hk * group + i / nsh, queries from i0 = t0 + QS (i % nsh) */
    auto issue = [&](int i) {
        const int h = hk * p.group + i / nsh, i0 = tl.t0 + (i % nsh) * QS, nq = min(QS, tl.len - i0);
        const long long qrow = (long long)tl.bos + i0;
        fa_load<D, QS>(Qs + (i & 1) * QT, p.q + (qrow * p.H + h) * D, qrs, nq);
        fa_load<D, QS>(dOs + (i & 1) * QT, p.dout + (qrow * p.H + h) * D, qrs, nq);
        fa_commit();
        for (int c = threadIdx.x; c < QS; c += FA_THREADS) {
            lse2s[(i & 1) * QS + c] = c < nq ? p.lse[(qrow + c) * p.H + h] * 1.44269504f : INFINITY;
            dis[(i & 1) * QS + c] = c < nq ? p.Di[(qrow + c) * p.H + h] : 0.f;
        }
    };
    issue(0);
    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int d = 0; d < DT; d++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[d][e] = dv[d][e] = 0.f;
    const int key0 = tl.t0 + warp * 16 + g; /* this thread's keys in the sequence: key0, key0 + 8 */
    for (int i = 0; i < nsteps; i++) {
        fa_wait_all();
        __syncthreads(); /* step i is in; every warp is done with step i - 1's stage */
        if (i + 1 < nsteps) issue(i + 1);
        const fa_bf16 *Qt = Qs + (i & 1) * QT, *dOt = dOs + (i & 1) * QT;
        const float *lse2 = lse2s + (i & 1) * QS, *di = dis + (i & 1) * QS;
        const int i0 = tl.t0 + (i % nsh) * QS;
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
        fa_gemm_nt<D, NT>(s, Ks + warp * 16 * LD, LD, Qt, LD);
        fa_gemm_nt<D, NT>(dp, Vs + warp * 16 * LD, LD, dOt, LD);
        /* queries before a key (only in the steps over the tile's own rows) or past the end (the last step) */
        const bool edge = i0 < tl.t0 + FA_ROWS || i0 + QS > tl.len;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = 8 * n + 2 * t + (e & 1), qpos = i0 + c;
                float pr = fa_exp2(s[n][e] * p.scale_log2 - lse2[c]);
                if (edge && (qpos < key0 + 8 * (e >> 1) || qpos >= tl.len)) pr = 0.f;
                s[n][e] = pr;
                dp[n][e] = pr * (dp[n][e] - di[c]) * p.scale;
            }
        unsigned a[NT / 2][4];
        fa_to_a<NT>(a, s);
        fa_gemm_rn<NT / 2, DT>(dv, a, dOt, LD);
        fa_to_a<NT>(a, dp);
        fa_gemm_rn<NT / 2, DT>(dk, a, Qt, LD);
    }
#pragma unroll
    for (int e2 = 0; e2 < 2; e2++) {
        const int r = warp * 16 + g + 8 * e2;
        if (r >= nk) continue;
        const long long off = ((krow + r) * p.Hkv + hk) * D + 2 * t;
#pragma unroll
        for (int d = 0; d < DT; d++) {
            if (p.dk) fa_acc2(p.dk + off + 8 * d, dk[d][2 * e2], dk[d][2 * e2 + 1]);
            if (p.dv) fa_acc2(p.dv + off + 8 * d, dv[d][2 * e2], dv[d][2 * e2 + 1]);
        }
    }
}

/* ---- launchers ------------------------------------------------------------------ */

/* shared memory of each kernel, bytes */
static size_t fa_fwd_smem(int D) { return (size_t)5 * FA_ROWS * (D + 8) * sizeof(fa_bf16); }
static size_t fa_dq_smem(int D) { return (size_t)6 * FA_ROWS * (D + 8) * sizeof(fa_bf16); }
#define FA_DKV_QS(D) ((D) == 128 ? 32 : 64)
static size_t fa_dkv_smem(int D)
{
    const int QS = FA_DKV_QS(D);
    return (size_t)(2 * FA_ROWS + 4 * QS) * (D + 8) * sizeof(fa_bf16) + 4 * QS * sizeof(float);
}

/* the head dims with kernels: 32, 64, 96, 128 */
static bool fa_head_dim_ok(int64_t D) { return D % 32 == 0 && D >= 32 && D <= 128; }

/* f(std::integral_constant<int, D>()): the kernels' instance for head dim D */
template <class F> static void fa_with_head_dim(int D, F f)
{
    switch (D) {
    case 32: return f(std::integral_constant<int, 32>());
    case 64: return f(std::integral_constant<int, 64>());
    case 96: return f(std::integral_constant<int, 96>());
    case 128: return f(std::integral_constant<int, 128>());
    }
    pr_fatal("attention: no bf16 kernels for head dim %d", D);
}

extern "C" bool pr_attention_flash_fits(const pr_node *n)
{
    const pr_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    const int64_t D = q->shape[3];
    if (!fa_head_dim_ok(D) || v->shape[3] != D) return false;
    for (int i = 0; i < 3; i++)
        if (!pr_aligned16(n->in[i]->data)) return false;
    return pr_aligned16(n->out[0]->data) && q->dtype == PR_BF16 && k->dtype == PR_BF16;
}

static fa_prob fa_prob_of(const pr_node *n)
{
    fa_prob p = {};
    p.q = (const fa_bf16 *)n->in[0]->data, p.k = (const fa_bf16 *)n->in[1]->data;
    p.v = (const fa_bf16 *)n->in[2]->data;
    p.T = (int)n->in[0]->shape[1], p.H = (int)n->in[0]->shape[2], p.Hkv = (int)n->in[1]->shape[2], p.group = p.H / p.Hkv;
    p.scale = (float)n->farg[0], p.scale_log2 = (float)(n->farg[0] * 1.4426950408889634);
    return p;
}

/* the tiles of a node (64 rows of one sequence each): their count, and with
 * cu_seqlens their table on the device in scratch from the caching allocator
 * (*bytes its size); without, *dev = NULL and the kernels count the tiles of
 * B sequences of T (no upload, which would wait for the device) */
static int fa_tiles(const pr_node *n, int **dev, size_t *bytes)
{
    const pr_tensor *q = n->in[0];
    *dev = nullptr, *bytes = 0;
    if (!n->in[3]) {
        const int64_t nt = q->shape[0] * ((q->shape[1] + FA_ROWS - 1) / FA_ROWS);
        PR_CHECK(nt < (1LL << 31) && q->shape[0] * q->shape[1] < (1LL << 31), "attention: too many rows (B*T = %lld)",
                 (long long)(q->shape[0] * q->shape[1]));
        return (int)nt;
    }
    int64_t *seq, S = pr_seqlens_read("attention", n->in[3], q->shape[0], q->shape[1], &seq);
    int64_t nt = 0;
    for (int64_t s = 0; s < S; s++) nt += (seq[s + 1] - seq[s] + FA_ROWS - 1) / FA_ROWS;
    PR_CHECK(nt < (1LL << 31), "attention: too many tiles (%lld)", (long long)nt);
    *bytes = sizeof(int) * 3 * (size_t)nt;
    int *h = (int *)malloc(*bytes);
    PR_CHECK(h, "attention: out of host memory");
    int64_t i = 0;
    for (int64_t s = 0; s < S; s++)
        for (int64_t t0 = 0; t0 < seq[s + 1] - seq[s]; t0 += FA_ROWS, i++)
            h[3 * i] = (int)seq[s], h[3 * i + 1] = (int)(seq[s + 1] - seq[s]), h[3 * i + 2] = (int)t0;
    *dev = (int *)pr_cuda_malloc(*bytes);
    pr_cuda_memcpy(*dev, h, *bytes, 1, 0);
    free(h);
    free(seq);
    return (int)nt;
}

template <class K> static void fa_launch(K kernel, dim3 grid, size_t smem, cudaStream_t st, const fa_prob &p)
{
    pr_cuda_smem_prep((const void *)kernel, smem);
    kernel<<<grid, FA_THREADS, smem, st>>>(p);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_attention_flash_forward(pr_ctx *ctx, pr_node *n)
{
    fa_prob p = fa_prob_of(n);
    p.out = (fa_bf16 *)n->out[0]->data;
    p.lse_out = n->n_saved > 0 ? (float *)n->saved[0]->data : nullptr;
    int *tiles;
    size_t tb;
    const int nt = fa_tiles(n, &tiles, &tb), D = (int)n->in[0]->shape[3];
    p.tiles = tiles;
    const dim3 grid(nt, p.H);
    fa_with_head_dim(D, [&](auto d) {
        constexpr int Dc = decltype(d)::value;
        fa_launch(fa_fwd_kernel<Dc>, grid, fa_fwd_smem(Dc), pr_cuda_stream(ctx), p);
    });
    if (tiles) pr_cuda_free(tiles, tb); /* stream order makes the reuse safe */
}

extern "C" void pr_attention_flash_backward(pr_ctx *ctx, pr_node *n)
{
    PR_CHECK(n->n_saved == 1, "attention: backward without the saved row log-sum-exp");
    pr_tensor *dq = pr_in_grad(n, 0), *dk = pr_in_grad(n, 1), *dv = pr_in_grad(n, 2);
    if (!dq && !dk && !dv) return;
    fa_prob p = fa_prob_of(n);
    const pr_tensor *g = n->out[0]->grad;
    const int D = (int)n->in[0]->shape[3];
    cudaStream_t st = pr_cuda_stream(ctx);
    PR_CHECK(g->dtype == PR_BF16, "attention: the bf16 backward needs a bf16 output grad (got %s)",
             pr_dtype_name(g->dtype));
    /* dO is read 16 bytes at a time: an unaligned view is copied first */
    void *gcopy = nullptr;
    const size_t gbytes = (size_t)g->numel * sizeof(fa_bf16);
    if (!pr_aligned16(g->data)) {
        gcopy = pr_cuda_malloc(gbytes);
        PR_CUDA_CHECK(cudaMemcpyAsync(gcopy, g->data, gbytes, cudaMemcpyDeviceToDevice, st));
    }
    p.dout = (const fa_bf16 *)(gcopy ? gcopy : g->data);
    p.o = (const fa_bf16 *)n->out[0]->data;
    p.lse = (const float *)n->saved[0]->data;
    p.dq = dq ? (fa_bf16 *)dq->data : nullptr, p.dk = dk ? (fa_bf16 *)dk->data : nullptr;
    p.dv = dv ? (fa_bf16 *)dv->data : nullptr;
    const long long rows = n->saved[0]->numel; /* B*T*H */
    float *Di = (float *)pr_cuda_malloc(sizeof(float) * (size_t)rows);
    p.Di = Di;
    fa_di_kernel<<<pr_cuda_blocks(rows * 32, 256), 256, 0, st>>>(p.dout, p.o, Di, rows, D);
    PR_CUDA_LAUNCH_CHECK();
    int *tiles;
    size_t tb;
    const int nt = fa_tiles(n, &tiles, &tb);
    p.tiles = tiles;
    fa_with_head_dim(D, [&](auto d) {
        constexpr int Dc = decltype(d)::value;
        if (p.dq) fa_launch(fa_dq_kernel<Dc>, dim3(nt, p.H), fa_dq_smem(Dc), st, p);
        if (p.dk || p.dv) fa_launch(fa_dkv_kernel<Dc, FA_DKV_QS(Dc)>, dim3(nt, p.Hkv), fa_dkv_smem(Dc), st, p);
    });
    if (tiles) pr_cuda_free(tiles, tb);
    pr_cuda_free(Di, sizeof(float) * (size_t)rows);
    if (gcopy) pr_cuda_free(gcopy, gbytes);
}
