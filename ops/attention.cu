/* ops/attention.cu: causal GQA attention on CUDA, f32, forward and backward
 * (bf16 goes to ops/attention_flash.cu, or stages into these kernels).
 *
 * Tiled with an online softmax: the T x T scores never exist in global
 * memory. Work is cut into tiles of 64 query rows of one sequence (a tile
 * table built on the host covers cu_seqlens); a block of PR_REC_THREADS
 * threads owns one tile and one head, keeps its tiles in shared memory and
 * multiplies them with the recurrence kit's block product (mma.sync TF32
 * when ctx->matmul_tf32, exact fp32 FMAs otherwise). Head dims are padded to
 * 32 with zeros in shared memory, so any D, Dv <= 128 works.
 *
 * forward (per query tile): for each key tile up to the diagonal,
 *   S = scale Q K^T; m' = max(m, rowmax S); P = exp(S - m'); l = l e^{m-m'} + rowsum P;
 *   O = O e^{m-m'} + P V;   at the end O /= l and the row log-sum-exp m + log l
 *   is saved for the backward.
 * backward (ops/attention.c derives it): Di = rowsum(dO * O) first; then a
 *   dq kernel per query tile (P = exp(S - lse), dS = P (dO V^T - Di) scale,
 *   dQ = dS K) and a dk/dv kernel per key tile and kv head that walks the
 *   query tiles below the diagonal of every head of its group (dV += P^T dO,
 *   dK += dS^T Q). Each gradient element has one writer: no atomics, reruns
 *   are bit-identical.
 */
#include "ops/ops.h"
#include "ops/attention.h"
#include "ops/cuda/tiles.cuh"
#include "ops/seqlens.h"

#include <math.h>
#include <stdlib.h>

#define ATT_BM 64    /* query rows per tile (forward, dq) */
#define ATT_BN 64    /* key rows per tile */
#define ATT_QS 32    /* query rows per step of the dk/dv kernel */
#define ATT_MAXD 128
static_assert(ATT_BM == ATT_BN, "the dk/dv kernel's key tiles are the forward's query tiles");

struct att_prob {
    const float *q, *k, *v, *o, *dout, *lse, *Di;
    float *out, *lse_out, *dq, *dk, *dv;
    const int *tiles;            /* [ntiles][3]: bos, len, t0 (rows over B*T) */
    int H, Hkv, D, Dv, Dp, Dvp, group;
    int vq, vv;                  /* q/k rows, v/o rows movable as float4 */
    float scale;
    bool tf32;                   /* TF32 products (the kit's rec_mm switch) */
};

struct att_tile {
    int bos, len, t0;
};
__device__ __forceinline__ att_tile att_tile_of(const att_prob &p, int i)
{
    return {p.tiles[3 * i], p.tiles[3 * i + 1], p.tiles[3 * i + 2]};
}

__device__ __forceinline__ float att_warp_sum(float x) { return pr_group_reduce<32>(x, pr_op_sum()); }
__device__ __forceinline__ float att_warp_max(float x) { return pr_group_reduce<32>(x, pr_op_max()); }

/* shared-memory carving, the same on host and device */
struct att_fwd_smem {
    int Q, K, V, S, O, m, l, al, total;
    __host__ __device__ att_fwd_smem(int Dp, int Dvp)
    {
        rec_bump b;
        Q = b.take(ATT_BM * (Dp + 4)), K = b.take(ATT_BN * (Dp + 4)), V = b.take(ATT_BN * (Dvp + 4));
        S = b.take(ATT_BM * (ATT_BN + 4)), O = b.take(ATT_BM * (Dvp + 4));
        m = b.take(ATT_BM), l = b.take(ATT_BM), al = b.take(ATT_BM);
        total = b.off;
    }
};

__global__ void __launch_bounds__(PR_REC_THREADS) att_fwd_kernel(att_prob p)
{
    extern __shared__ __align__(16) float sm[];
    const att_fwd_smem L(p.Dp, p.Dvp);
    float *Q = sm + L.Q, *K = sm + L.K, *V = sm + L.V, *S = sm + L.S, *O = sm + L.O;
    float *m = sm + L.m, *l = sm + L.l, *al = sm + L.al;
    const int ldq = p.Dp + 4, ldv = p.Dvp + 4, lds = ATT_BN + 4;
    /* the late query tiles see the most keys: launched first, they leave a lighter tail */
    const att_tile tl = att_tile_of(p, gridDim.x - 1 - blockIdx.x);
    const int h = blockIdx.y, hk = h / p.group, nq = min(ATT_BM, tl.len - tl.t0);
    const long long qrow = (long long)tl.bos + tl.t0, krow = tl.bos;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    rec_ld_tile(Q, ldq, ATT_BM, p.Dp, p.q + (qrow * p.H + h) * p.D, (long long)p.H * p.D, nq, p.D, p.vq);
    REC_FOR2D(ATT_BM, p.Dvp, r, c) O[r * ldv + c] = 0.f;
    for (int r = threadIdx.x; r < ATT_BM; r += PR_REC_THREADS) m[r] = -INFINITY, l[r] = 0.f;
    const int kend = tl.t0 + nq;   /* keys [0, kend) of the sequence are visible to the tile */
    for (int j0 = 0; j0 < kend; j0 += ATT_BN) {
        const int nk = min(ATT_BN, kend - j0);
        rec_ld_tile(K, ldq, ATT_BN, p.Dp, p.k + ((krow + j0) * p.Hkv + hk) * p.D, (long long)p.Hkv * p.D, nk, p.D,
                    p.vq);
        rec_ld_tile(V, ldv, ATT_BN, p.Dvp, p.v + ((krow + j0) * p.Hkv + hk) * p.Dv, (long long)p.Hkv * p.Dv, nk,
                    p.Dv, p.vv);
        rec_sync();
        rec_mm<false, true>(p.tf32, S, lds, Q, ldq, K, ldq, ATT_BM, ATT_BN, p.Dp, p.scale, false);
        __syncthreads();
        for (int r = warp; r < ATT_BM; r += PR_REC_WARPS) {
            const int i = tl.t0 + r;   /* the row's position in its sequence */
            const bool ok0 = r < nq && j0 + lane <= i, ok1 = r < nq && j0 + lane + 32 <= i;
            const float x0 = ok0 ? S[r * lds + lane] : -INFINITY, x1 = ok1 ? S[r * lds + lane + 32] : -INFINITY;
            const float mold = m[r], mnew = fmaxf(mold, att_warp_max(fmaxf(x0, x1)));
            const float p0 = ok0 ? expf(x0 - mnew) : 0.f, p1 = ok1 ? expf(x1 - mnew) : 0.f;
            const float sum = att_warp_sum(p0 + p1);
            S[r * lds + lane] = p0, S[r * lds + lane + 32] = p1;
            __syncwarp();
            if (lane == 0) {
                const float a = mnew == -INFINITY ? 1.f : expf(mold - mnew);
                m[r] = mnew, l[r] = l[r] * a + sum, al[r] = a;
            }
        }
        __syncthreads();
        REC_FOR2D(ATT_BM, p.Dvp, r, c) O[r * ldv + c] *= al[r];
        __syncthreads();
        rec_mm<false, false>(p.tf32, O, ldv, S, lds, V, ldv, ATT_BM, p.Dvp, ATT_BN, 1.f, true);
        __syncthreads();
    }
    REC_FOR2D(ATT_BM, p.Dvp, r, c) O[r * ldv + c] = r < nq ? O[r * ldv + c] / l[r] : 0.f;
    if (p.lse_out)
        for (int r = threadIdx.x; r < nq; r += PR_REC_THREADS) p.lse_out[(qrow + r) * p.H + h] = m[r] + logf(l[r]);
    __syncthreads();
    rec_st_tile(p.out + (qrow * p.H + h) * p.Dv, (long long)p.H * p.Dv, nq, p.Dv, O, ldv, 1.f, false, p.vv);
}

/* Di[r*H + h] = dO . O over Dv: a warp per (row, head) */
__global__ void att_di_kernel(const float *dout, const float *o, float *Di, long long rows, int Dv)
{
    const int lane = threadIdx.x & 31;
    const long long step = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows; w += step) {
        float s = 0.f;
        for (int c = lane; c < Dv; c += 32) s = fmaf(dout[w * Dv + c], o[w * Dv + c], s);
        s = att_warp_sum(s);
        if (lane == 0) Di[w] = s;
    }
}

struct att_dq_smem {
    int Q, dO, K, V, S, dP, dQ, lse, Di, total;
    __host__ __device__ att_dq_smem(int Dp, int Dvp)
    {
        rec_bump b;
        Q = b.take(ATT_BM * (Dp + 4)), dO = b.take(ATT_BM * (Dvp + 4)), K = b.take(ATT_BN * (Dp + 4));
        V = b.take(ATT_BN * (Dvp + 4)), S = b.take(ATT_BM * (ATT_BN + 4)), dP = b.take(ATT_BM * (ATT_BN + 4));
        dQ = b.take(ATT_BM * (Dp + 4)), lse = b.take(ATT_BM), Di = b.take(ATT_BM);
        total = b.off;
    }
};

__global__ void __launch_bounds__(PR_REC_THREADS) att_dq_kernel(att_prob p)
{
    extern __shared__ __align__(16) float sm[];
    const att_dq_smem L(p.Dp, p.Dvp);
    float *Q = sm + L.Q, *dO = sm + L.dO, *K = sm + L.K, *V = sm + L.V, *S = sm + L.S, *dP = sm + L.dP;
    float *dQ = sm + L.dQ, *lse = sm + L.lse, *Di = sm + L.Di;
    const int ldq = p.Dp + 4, ldv = p.Dvp + 4, lds = ATT_BN + 4;
    const att_tile tl = att_tile_of(p, gridDim.x - 1 - blockIdx.x);
    const int h = blockIdx.y, hk = h / p.group, nq = min(ATT_BM, tl.len - tl.t0);
    const long long qrow = (long long)tl.bos + tl.t0, krow = tl.bos;
    rec_ld_tile(Q, ldq, ATT_BM, p.Dp, p.q + (qrow * p.H + h) * p.D, (long long)p.H * p.D, nq, p.D, p.vq);
    rec_ld_tile(dO, ldv, ATT_BM, p.Dvp, p.dout + (qrow * p.H + h) * p.Dv, (long long)p.H * p.Dv, nq, p.Dv, p.vv);
    REC_FOR2D(ATT_BM, p.Dp, r, c) dQ[r * ldq + c] = 0.f;
    for (int r = threadIdx.x; r < ATT_BM; r += PR_REC_THREADS) {
        lse[r] = r < nq ? p.lse[(qrow + r) * p.H + h] : 0.f;
        Di[r] = r < nq ? p.Di[(qrow + r) * p.H + h] : 0.f;
    }
    const int kend = tl.t0 + nq;
    for (int j0 = 0; j0 < kend; j0 += ATT_BN) {
        const int nk = min(ATT_BN, kend - j0);
        rec_ld_tile(K, ldq, ATT_BN, p.Dp, p.k + ((krow + j0) * p.Hkv + hk) * p.D, (long long)p.Hkv * p.D, nk, p.D,
                    p.vq);
        rec_ld_tile(V, ldv, ATT_BN, p.Dvp, p.v + ((krow + j0) * p.Hkv + hk) * p.Dv, (long long)p.Hkv * p.Dv, nk,
                    p.Dv, p.vv);
        rec_sync();
        rec_mm<false, true>(p.tf32, S, lds, Q, ldq, K, ldq, ATT_BM, ATT_BN, p.Dp, p.scale, false);
        rec_mm<false, true>(p.tf32, dP, lds, dO, ldv, V, ldv, ATT_BM, ATT_BN, p.Dvp, 1.f, false);
        __syncthreads();
        REC_FOR2D(ATT_BM, ATT_BN, r, c)
        {
            const bool ok = r < nq && j0 + c <= tl.t0 + r;
            const float pr = ok ? expf(S[r * lds + c] - lse[r]) : 0.f;
            S[r * lds + c] = pr * (dP[r * lds + c] - Di[r]) * p.scale;
        }
        __syncthreads();
        rec_mm<false, false>(p.tf32, dQ, ldq, S, lds, K, ldq, ATT_BM, p.Dp, ATT_BN, 1.f, true);
        __syncthreads();
    }
    rec_st_tile(p.dq + (qrow * p.H + h) * p.D, (long long)p.H * p.D, nq, p.D, dQ, ldq, 1.f, true, p.vq);
}

struct att_dkv_smem {
    int K, V, dK, dV, Q, dO, P, dS, lse, Di, total;
    __host__ __device__ att_dkv_smem(int Dp, int Dvp)
    {
        rec_bump b;
        K = b.take(ATT_BN * (Dp + 4)), V = b.take(ATT_BN * (Dvp + 4)), dK = b.take(ATT_BN * (Dp + 4));
        dV = b.take(ATT_BN * (Dvp + 4)), Q = b.take(ATT_QS * (Dp + 4)), dO = b.take(ATT_QS * (Dvp + 4));
        P = b.take(ATT_BN * (ATT_QS + 4)), dS = b.take(ATT_BN * (ATT_QS + 4));
        lse = b.take(ATT_QS), Di = b.take(ATT_QS);
        total = b.off;
    }
};

/* one key tile of one kv head: P^T and dS^T [keys x queries] per step of
 * ATT_QS queries, over every query at or after the tile's first key, for each
 * head of the group */
__global__ void __launch_bounds__(PR_REC_THREADS) att_dkv_kernel(att_prob p)
{
    extern __shared__ __align__(16) float sm[];
    const att_dkv_smem L(p.Dp, p.Dvp);
    float *K = sm + L.K, *V = sm + L.V, *dK = sm + L.dK, *dV = sm + L.dV, *Q = sm + L.Q, *dO = sm + L.dO;
    float *P = sm + L.P, *dS = sm + L.dS, *lse = sm + L.lse, *Di = sm + L.Di;
    const int ldq = p.Dp + 4, ldv = p.Dvp + 4, ldp = ATT_QS + 4;
    const att_tile tl = att_tile_of(p, blockIdx.x); /* early key tiles (the most queries) first */
    const int hk = blockIdx.y, nk = min(ATT_BN, tl.len - tl.t0);
    const long long krow = (long long)tl.bos + tl.t0;
    rec_ld_tile(K, ldq, ATT_BN, p.Dp, p.k + (krow * p.Hkv + hk) * p.D, (long long)p.Hkv * p.D, nk, p.D, p.vq);
    rec_ld_tile(V, ldv, ATT_BN, p.Dvp, p.v + (krow * p.Hkv + hk) * p.Dv, (long long)p.Hkv * p.Dv, nk, p.Dv, p.vv);
    REC_FOR2D(ATT_BN, p.Dp, r, c) dK[r * ldq + c] = 0.f;
    REC_FOR2D(ATT_BN, p.Dvp, r, c) dV[r * ldv + c] = 0.f;
    for (int h = hk * p.group; h < (hk + 1) * p.group; h++)
        for (int i0 = tl.t0; i0 < tl.len; i0 += ATT_QS) {
            const int nq = min(ATT_QS, tl.len - i0);
            const long long qrow = (long long)tl.bos + i0;
            __syncthreads(); /* the previous step's products are done with Q, dO, lse, Di */
            rec_ld_tile(Q, ldq, ATT_QS, p.Dp, p.q + (qrow * p.H + h) * p.D, (long long)p.H * p.D, nq, p.D, p.vq);
            rec_ld_tile(dO, ldv, ATT_QS, p.Dvp, p.dout + (qrow * p.H + h) * p.Dv, (long long)p.H * p.Dv, nq, p.Dv,
                        p.vv);
            for (int c = threadIdx.x; c < ATT_QS; c += PR_REC_THREADS) {
                lse[c] = c < nq ? p.lse[(qrow + c) * p.H + h] : 0.f;
                Di[c] = c < nq ? p.Di[(qrow + c) * p.H + h] : 0.f;
            }
            rec_sync();
            rec_mm<false, true>(p.tf32, P, ldp, K, ldq, Q, ldq, ATT_BN, ATT_QS, p.Dp, p.scale, false);
            rec_mm<false, true>(p.tf32, dS, ldp, V, ldv, dO, ldv, ATT_BN, ATT_QS, p.Dvp, 1.f, false);
            __syncthreads();
            REC_FOR2D(ATT_BN, ATT_QS, r, c)
            {
                const bool ok = r < nk && c < nq && i0 + c >= tl.t0 + r;
                const float pr = ok ? expf(P[r * ldp + c] - lse[c]) : 0.f;
                P[r * ldp + c] = pr;
                dS[r * ldp + c] = pr * (dS[r * ldp + c] - Di[c]) * p.scale;
            }
            __syncthreads();
            rec_mm<false, false>(p.tf32, dV, ldv, P, ldp, dO, ldv, ATT_BN, p.Dvp, ATT_QS, 1.f, true);
            rec_mm<false, false>(p.tf32, dK, ldq, dS, ldp, Q, ldq, ATT_BN, p.Dp, ATT_QS, 1.f, true);
        }
    __syncthreads();
    if (p.dk) rec_st_tile(p.dk + (krow * p.Hkv + hk) * p.D, (long long)p.Hkv * p.D, nk, p.D, dK, ldq, 1.f, true, p.vq);
    if (p.dv)
        rec_st_tile(p.dv + (krow * p.Hkv + hk) * p.Dv, (long long)p.Hkv * p.Dv, nk, p.Dv, dV, ldv, 1.f, true, p.vv);
}

/* ---- decoding: one query row per (b, h) against n_valid cache rows -------------
 * Each warp walks keys warp, warp + 8, ... with its own online softmax (lane c
 * owns output columns c, c + 32, ...); the 8 partial results are merged in
 * a fixed order. */
__global__ void __launch_bounds__(PR_REC_THREADS) att_decode_kernel(att_prob p, int Tc, const int *n_valid)
{
    __shared__ float qs[ATT_MAXD], wm[PR_REC_WARPS], wl[PR_REC_WARPS], wo[PR_REC_WARPS][ATT_MAXD];
    const int b = blockIdx.x / p.H, h = blockIdx.x % p.H, hk = h / p.group;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = n_valid ? n_valid[b] : Tc;
    for (int c = threadIdx.x; c < p.D; c += PR_REC_THREADS) qs[c] = p.q[((long long)b * p.H + h) * p.D + c];
    __syncthreads();
    float m = -INFINITY, l = 0.f, acc[ATT_MAXD / 32];
#pragma unroll
    for (int e = 0; e < ATT_MAXD / 32; e++) acc[e] = 0.f;
    for (int j = warp; j < n; j += PR_REC_WARPS) {
        const long long row = (long long)b * Tc + j;
        const float *kr = p.k + (row * p.Hkv + hk) * p.D, *vr = p.v + (row * p.Hkv + hk) * p.Dv;
        float s = 0.f;
        for (int c = lane; c < p.D; c += 32) s = fmaf(qs[c], kr[c], s);
        s = att_warp_sum(s) * p.scale;
        const float mn = fmaxf(m, s), a = expf(m - mn), e = expf(s - mn);
        l = l * a + e;
#pragma unroll
        for (int i = 0; i < ATT_MAXD / 32; i++) {
            const int c = lane + 32 * i;
            acc[i] = acc[i] * a + (c < p.Dv ? e * vr[c] : 0.f);
        }
        m = mn;
    }
    if (lane == 0) wm[warp] = m, wl[warp] = l;
#pragma unroll
    for (int i = 0; i < ATT_MAXD / 32; i++) wo[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < PR_REC_WARPS; w++) M = fmaxf(M, wm[w]);
    for (int c = threadIdx.x; c < p.Dv; c += PR_REC_THREADS) {
        float num = 0.f, den = 0.f;
        for (int w = 0; w < PR_REC_WARPS; w++) {
            if (wm[w] == -INFINITY) continue; /* a warp that saw no key */
            const float f = expf(wm[w] - M);
            num += f * wo[w][c], den += f * wl[w];
        }
        p.out[((long long)b * p.H + h) * p.Dv + c] = num / den;
    }
}

/* ---- launchers ------------------------------------------------------------------ */

static att_prob att_prob_of(pr_ctx *ctx, const pr_tensor *q, const pr_tensor *k, const pr_tensor *v, double scale)
{
    const pr_tensor *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        PR_CHECK(in[i]->dtype == PR_F32, "attention: CUDA supports f32 only (got %s)", pr_dtype_name(in[i]->dtype));
    att_prob p = {};
    p.q = (const float *)q->data, p.k = (const float *)k->data, p.v = (const float *)v->data;
    p.H = (int)q->shape[2], p.Hkv = (int)k->shape[2], p.D = (int)q->shape[3], p.Dv = (int)v->shape[3];
    PR_CHECK(p.D <= ATT_MAXD && p.Dv <= ATT_MAXD, "attention: CUDA supports D, Dv <= %d (got D=%d, Dv=%d)", ATT_MAXD,
             p.D, p.Dv);
    p.group = p.H / p.Hkv;
    p.Dp = (p.D + 31) & ~31, p.Dvp = (p.Dv + 31) & ~31;
    p.vq = p.D % 4 == 0 && pr_aligned16(p.q) && pr_aligned16(p.k);
    p.vv = p.Dv % 4 == 0 && pr_aligned16(p.v);
    p.scale = (float)scale;
    p.tf32 = ctx->matmul_tf32;
    return p;
}

/* Per-call device scratch from the caching allocator, handed back when the
 * launcher returns (stream order makes the reuse safe), so repeated calls do
 * not grow the step arena. */
struct att_scratch {
    void *p[4] = {};
    size_t n[4] = {};
    int k = 0;
    void *take(size_t bytes)
    {
        PR_CHECK(k < 4, "attention: scratch slots exhausted");
        n[k] = bytes, p[k] = pr_cuda_malloc(bytes);
        return p[k++];
    }
    ~att_scratch()
    {
        for (int i = 0; i < k; i++) pr_cuda_free(p[i], n[i]);
    }
};

/* the tile table of a node (64 query rows of one sequence per tile) on the device */
static int att_tiles(const pr_node *n, att_scratch &sc, const int **dev)
{
    const pr_tensor *q = n->in[0];
    int64_t *seq, S = pr_seqlens_read("attention", n->in[3], q->shape[0], q->shape[1], &seq);
    int64_t nt = 0;
    for (int64_t s = 0; s < S; s++) nt += (seq[s + 1] - seq[s] + ATT_BM - 1) / ATT_BM;
    PR_CHECK(nt < (1LL << 31), "attention: too many tiles (%lld)", (long long)nt);
    const size_t bytes = sizeof(int) * 3 * (size_t)nt;
    int *h = (int *)malloc(bytes);
    PR_CHECK(h, "attention: out of host memory");
    int64_t i = 0;
    for (int64_t s = 0; s < S; s++)
        for (int64_t t0 = 0; t0 < seq[s + 1] - seq[s]; t0 += ATT_BM, i++)
            h[3 * i] = (int)seq[s], h[3 * i + 1] = (int)(seq[s + 1] - seq[s]), h[3 * i + 2] = (int)t0;
    int *d = (int *)sc.take(bytes);
    pr_cuda_memcpy(d, h, bytes, 1, 0);
    *dev = d;
    free(h);
    free(seq);
    return (int)nt;
}

static void att_smem(const void *kernel, int floats)
{
    const size_t bytes = (size_t)floats * sizeof(float);
    const int limit = pr_cuda_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    PR_CHECK(bytes <= (size_t)limit, "attention: needs %zu bytes of shared memory per block; the device has %d",
             bytes, limit);
    pr_cuda_smem_prep(kernel, bytes);
}

/* the bf16 kernels (ops/attention_flash.cu) */
extern "C" bool pr_attention_flash_fits(const pr_node *n);
extern "C" void pr_attention_flash_forward(pr_ctx *ctx, pr_node *n);
extern "C" void pr_attention_flash_backward(pr_ctx *ctx, pr_node *n);

/* bf16 runs natively where attention_flash.cu has kernels for the shape;
 * anything else runs the f32 kernels below on staged f32 copies (the
 * backward then comes through autograd's staging, never here in bf16) */
extern "C" void pr_attention_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    if (pr_cuda_storage(n) == PR_BF16) {
        if (pr_attention_flash_fits(n)) pr_attention_flash_forward(ctx, n);
        else pr_staged_forward(ctx, n, pr_attention_forward_cuda);
        return;
    }
    att_prob p = att_prob_of(ctx, n->in[0], n->in[1], n->in[2], n->farg[0]);
    p.out = (float *)n->out[0]->data;
    p.lse_out = n->n_saved > 0 ? (float *)n->saved[0]->data : nullptr;
    att_scratch sc;
    const int nt = att_tiles(n, sc, &p.tiles);
    const att_fwd_smem L(p.Dp, p.Dvp);
    att_smem((const void *)att_fwd_kernel, L.total);
    att_fwd_kernel<<<dim3(nt, p.H), PR_REC_THREADS, (size_t)L.total * sizeof(float), pr_cuda_stream(ctx)>>>(p);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_attention_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    if (pr_cuda_storage(n) == PR_BF16) {
        pr_attention_flash_backward(ctx, n);
        return;
    }
    PR_CHECK(n->n_saved == 1, "attention: backward without the saved row log-sum-exp");
    att_prob p = att_prob_of(ctx, n->in[0], n->in[1], n->in[2], n->farg[0]);
    pr_tensor *dq = pr_in_grad(n, 0), *dk = pr_in_grad(n, 1), *dv = pr_in_grad(n, 2);
    if (!dq && !dk && !dv) return;
    p.o = (const float *)n->out[0]->data;
    p.dout = (const float *)n->out[0]->grad->data;
    p.lse = (const float *)n->saved[0]->data;
    p.vv = p.vv && pr_aligned16(p.dout);
    p.dq = dq ? (float *)dq->data : nullptr, p.dk = dk ? (float *)dk->data : nullptr;
    p.dv = dv ? (float *)dv->data : nullptr;
    cudaStream_t st = pr_cuda_stream(ctx);
    const long long rows = n->saved[0]->numel; /* B*T*H */
    att_scratch sc;
    float *Di = (float *)sc.take(sizeof(float) * (size_t)rows);
    p.Di = Di;
    att_di_kernel<<<pr_cuda_blocks(rows * 32, 256), 256, 0, st>>>(p.dout, p.o, Di, rows, p.Dv);
    PR_CUDA_LAUNCH_CHECK();
    const int nt = att_tiles(n, sc, &p.tiles);
    if (p.dq) {
        const att_dq_smem L(p.Dp, p.Dvp);
        att_smem((const void *)att_dq_kernel, L.total);
        att_dq_kernel<<<dim3(nt, p.H), PR_REC_THREADS, (size_t)L.total * sizeof(float), st>>>(p);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (p.dk || p.dv) {
        const att_dkv_smem L(p.Dp, p.Dvp);
        att_smem((const void *)att_dkv_kernel, L.total);
        att_dkv_kernel<<<dim3(nt, p.Hkv), PR_REC_THREADS, (size_t)L.total * sizeof(float), st>>>(p);
        PR_CUDA_LAUNCH_CHECK();
    }
}

extern "C" void pr_attention_decode_cuda(pr_ctx *ctx, const pr_tensor *q, const pr_tensor *k, const pr_tensor *v,
                                         const int64_t *n_valid, double scale, pr_tensor *out)
{
    att_prob p = att_prob_of(ctx, q, k, v, scale);
    p.out = (float *)out->data;
    const int B = (int)q->shape[0], Tc = (int)k->shape[1];
    const int *nv = nullptr;
    att_scratch sc;
    if (n_valid) {
        int *h = (int *)malloc(sizeof(int) * (size_t)B);
        PR_CHECK(h, "attention_decode: out of host memory");
        for (int b = 0; b < B; b++) h[b] = (int)n_valid[b];
        int *d = (int *)sc.take(sizeof(int) * (size_t)B);
        pr_cuda_memcpy(d, h, sizeof(int) * (size_t)B, 1, 0);
        nv = d;
        free(h);
    }
    att_decode_kernel<<<B * p.H, PR_REC_THREADS, 0, pr_cuda_stream(ctx)>>>(p, Tc, nv);
    PR_CUDA_LAUNCH_CHECK();
}
