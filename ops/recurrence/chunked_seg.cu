/* ops/recurrence/chunked_seg.cu: the serial passes over segments of a
 * sequence (recurrence_cuda.cuh, rec_segs): the segments as sequences of
 * their own, and the chain that joins them.
 *
 * The chain is serial over a sequence's segments only (P of them, ~10-20),
 * one block per (sequence, head, 32 state columns): S <- A_j S + add_j, a
 * K x K by K x 32 product per step in plain fp32 FMAs (its cost is tiny
 * next to the passes it joins, and f32 keeps the joins at f32 rounding
 * whatever the chunk products use). A_j comes in 32-row slabs (forward) or
 * 32-column slabs (reverse, for A^T) through shared memory.
 */
#include "ops/recurrence/recurrence_cuda.cuh"

rec_prob pr_rec_seg_prob(const rec_prob &p, const rec_segs &sg)
{
    rec_prob ps = p;
    ps.N = sg.n;
    ps.seq = sg.seg;
    ps.cseq = nullptr; /* the serial passes walk a sequence's chunks from its table row */
    ps.h0 = nullptr, ps.dht = nullptr;
    return ps;
}

#define SEG_BV 32
#define SEG_LDV (SEG_BV + 4)

/* shared memory: S and X (Kp x 36 each) and the slab of A (the larger of
 * 32 x (Kp + 4) and Kp x 36, which is Kp x 36 for Kp >= 32) */
static size_t seg_chain_smem(const rec_prob &p) { return (size_t)3 * p.Kp * SEG_LDV * sizeof(float); }

template <bool REV>
__global__ void __launch_bounds__(PR_REC_THREADS)
    seg_chain_kernel(rec_prob p, rec_segs sg, const float *init, const float *add, float *per_seg, float *fin,
                     int fin_acc)
{
    extern __shared__ __align__(128) float sm[];
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * SEG_BV, H = p.H, K = p.K, V = p.V, Kp = p.Kp;
    const int nv = min(SEG_BV, V - v0), LDA = Kp + 4;
    float *S = sm, *X = sm + Kp * SEG_LDV, *Ab = sm + 2 * Kp * SEG_LDV;
    /* element (r, k) of op(A)'s slab: forward A[i0 + r][k] at r*LDA + k,
     * reverse A[k][i0 + r] at k*SEG_LDV + r */
    const int ar = REV ? 1 : LDA, ak = REV ? SEG_LDV : 1;
    const long long soff = ((long long)n * H + h) * K * V + v0;
    if (init) rec_ld_tile(S, SEG_LDV, Kp, SEG_BV, init + soff, V, K, nv, p.vec);
    else
        for (int e = threadIdx.x; e < Kp * SEG_LDV; e += blockDim.x) S[e] = 0.f;
    const int *first = sg.seg + 3 * sg.n;
    const int j0 = first[n], nseg = first[n + 1] - j0;
    for (int jj = 0; jj < nseg; jj++) {
        const int j = REV ? j0 + nseg - 1 - jj : j0 + jj;
        const long long joff = ((long long)j * H + h) * K * V + v0;
        const float *Aj = sg.A + ((long long)j * H + h) * K * K;
        rec_sync(); /* S complete; every read of X (the old S) done */
        rec_st_tile(per_seg + joff, V, K, nv, S, SEG_LDV, 1.f, false, p.vec);
        rec_ld_tile(X, SEG_LDV, Kp, SEG_BV, add + joff, V, K, nv, p.vec);
        for (int i0 = 0; i0 < K; i0 += 32) {
            const int ni = min(32, K - i0);
            if (REV) rec_ld_tile(Ab, SEG_LDV, Kp, 32, Aj + i0, K, K, ni, p.vec);
            else rec_ld_tile(Ab, LDA, 32, Kp, Aj + (long long)i0 * K, K, ni, K, p.vec);
            rec_sync();
            REC_FOR2D(32, SEG_BV, r, c) {
                const float *a = Ab + r * ar;
                float x = 0.f;
                for (int k = 0; k < K; k++) x = fmaf(a[k * ak], S[k * SEG_LDV + c], x);
                X[(i0 + r) * SEG_LDV + c] += x;
            }
            rec_sync(); /* the slab is read before the next one lands */
        }
        float *t = S;
        S = X, X = t;
    }
    rec_sync();
    if (fin) rec_st_tile(fin + soff, V, K, nv, S, SEG_LDV, 1.f, fin_acc, p.vec);
}

template <bool REV>
static void seg_chain_launch(cudaStream_t st, const rec_prob &p, const rec_segs &sg, const float *init,
                             const float *add, float *per_seg, float *fin, bool fin_acc)
{
    const size_t sm = seg_chain_smem(p);
    PR_CUDA_CHECK(cudaFuncSetAttribute(seg_chain_kernel<REV>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    const dim3 grid((p.V + SEG_BV - 1) / SEG_BV, p.H, p.N);
    seg_chain_kernel<REV><<<grid, PR_REC_THREADS, sm, st>>>(p, sg, init, add, per_seg, fin, fin_acc ? 1 : 0);
    PR_CUDA_LAUNCH_CHECK();
}

void pr_rec_seg_chain(cudaStream_t st, const rec_prob &p, const rec_segs &sg, bool rev, const float *init,
                      const float *add, float *per_seg, float *fin, bool fin_acc)
{
    if (rev) seg_chain_launch<true>(st, p, sg, init, add, per_seg, fin, fin_acc);
    else seg_chain_launch<false>(st, p, sg, init, add, per_seg, fin, fin_acc);
}
