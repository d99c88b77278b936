/* ops/recurrence/cuda/segments.cu: the serial passes over segments of a
 * sequence (recurrence_cuda.cuh, rec_segs): the segments as sequences of
 * their own, and the chain that joins them.
 *
 * The chain is serial over a sequence's segments only (P of them, ~10-20),
 * one block per (sequence, head, 32 state columns): S <- A_j S + add_j, a
 * K x K by K x 32 product per step in plain fp32 FMAs (its cost is tiny
 * next to the passes it joins, and f32 keeps the joins at f32 rounding
 * whatever the chunk products use). A_j comes in 32-row slabs (forward) or
 * 32-column slabs (reverse, for A^T) through shared memory. The rules
 * without beta (linattn, ssd) have no A: their transition is a scalar
 * times I, e^{sum of g over the segment} (1 without g), summed here from g.
 *
 * The fix-up (the forward's two-pass form) turns the states and residuals
 * the pass from zero stored into the real ones, every chunk at once:
 * hs_c += P_c start_j and R_c -= W_c P_c start_j, with P_c the transition
 * from the start of chunk c's segment j to chunk c (the identity pass's
 * per-chunk states; the scalar e^{sum of g} without beta, and no R).
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

rec_prob pr_rec_seg_prob(const rec_prob &p, const rec_segs &sg)
{
    rec_prob ps = p;
    ps.N = sg.n;
    ps.seq = sg.seg;
    ps.cseq = nullptr; /* the serial passes walk a sequence's chunks from its table row */
    ps.h0 = nullptr, ps.dht = nullptr;
    return ps;
}

/* e^{sum of g over token rows [r0, r1) of head h} (1 without g), by the
 * whole block in a fixed order; red: 9 floats of shared memory */
__device__ static float seg_decay(const rec_prob &p, int h, int r0, int r1, float *red)
{
    if (!p.has_g) return 1.f;
    float s = 0.f;
    for (int r = r0 + (int)threadIdx.x; r < r1; r += blockDim.x) s += p.g[(long long)r * p.H + h];
    return expf(rec_block_sum(s, red));
}

/* The chain's blocks take BV state columns: 8 with the delta rules' K x K
 * transitions, where the chain is serial over the segments with only heads x
 * V/BV blocks, so narrow tiles spread its fp32 products over more SMs (32
 * columns made 24 blocks at H=8, V=96); 32 for the scalar transitions, whose
 * chain is a few scaled adds. */
#define SEG_SLAB_LD 36 /* a reverse slab: Kp rows of A's 32 columns */

/* floats of one slab of A: 32 rows of Kp (forward) or Kp rows of 32 (reverse) */
static __host__ __device__ int seg_slab_floats(int Kp) { return Kp * SEG_SLAB_LD; }
/* shared memory: three state tiles (the state, the segment being summed, the
 * next segment's ends, loaded ahead), two slabs of A (one multiplied while
 * the next lands), and 32 floats for the scalar rules' sums */
static size_t seg_chain_smem(const rec_prob &p, int bv)
{
    return ((size_t)3 * p.Kp * (bv + 4) + 2 * (size_t)seg_slab_floats(p.Kp) + 32) * sizeof(float);
}

/* Steps s = (segment jj, slab i) in order: S_{jj+1} = A_j S_jj + add_j, A_j in
 * slabs of 32 rows (one step without A). Each step's copies are issued during
 * the step before, so a step waits on no global load; X(jj % 3) sums segment
 * jj while X((jj + 2) % 3) is its start state and X((jj + 1) % 3) receives the
 * next segment's add (that buffer's last reader was segment jj - 1). */
template <bool REV, int BV>
__global__ void __launch_bounds__(PR_REC_THREADS)
    seg_chain_kernel(rec_prob p, rec_segs sg, const float *init, const float *add, float *per_seg, float *fin,
                     int fin_acc)
{
    extern __shared__ __align__(128) float sm[];
    constexpr int LDV = BV + 4;
    const int n = blockIdx.z, h = blockIdx.y, v0 = blockIdx.x * BV, H = p.H, K = p.K, V = p.V, Kp = p.Kp;
    const int nv = min(BV, V - v0), LDA = Kp + 4, slab = seg_slab_floats(Kp);
    /* state tiles X(0..2), slabs Ab(0..1) (by arithmetic: no arrays in local memory) */
    auto X = [&](int b) { return sm + b * Kp * LDV; };
    auto Ab = [&](int b) { return sm + 3 * Kp * LDV + b * slab; };
    float *red = Ab(2);
    /* element (r, k) of op(A)'s slab: forward A[i0 + r][k] at r*LDA + k,
     * reverse A[k][i0 + r] at k*SEG_SLAB_LD + r */
    const int ar = REV ? 1 : LDA, ak = REV ? SEG_SLAB_LD : 1;
    const long long soff = ((long long)n * H + h) * K * V + v0;
    if (init) rec_ld_tile(X(2), LDV, Kp, BV, init + soff, V, K, nv, p.vec);
    else
        for (int e = threadIdx.x; e < Kp * LDV; e += blockDim.x) X(2)[e] = 0.f;
    const int *first = sg.seg + 3 * sg.n;
    const int j0 = first[n], nseg = first[n + 1] - j0, nslab = sg.A ? (K + 31) / 32 : 1, nstep = nseg * nslab;
    auto seg_at = [&](int jj) { return REV ? j0 + nseg - 1 - jj : j0 + jj; };
    auto issue = [&](int s) { /* step s's copies: its slab, and its segment's add at the first slab */
        const int jj = s / nslab, i0 = (s - jj * nslab) * 32, j = seg_at(jj);
        const long long joff = ((long long)j * H + h) * K * V + v0;
        if (i0 == 0) rec_ld_tile(X(jj % 3), LDV, Kp, BV, add + joff, V, K, nv, p.vec);
        if (!sg.A) return;
        const float *Aj = sg.A + ((long long)j * H + h) * K * K;
        const int ni = min(32, K - i0);
        if (REV) rec_ld_tile(Ab(s & 1), SEG_SLAB_LD, Kp, 32, Aj + i0, K, K, ni, p.vec);
        else rec_ld_tile(Ab(s & 1), LDA, 32, Kp, Aj + (long long)i0 * K, K, ni, K, p.vec);
    };
    if (nstep) issue(0);
    for (int s = 0; s < nstep; s++) {
        const int jj = s / nslab, i0 = (s - jj * nslab) * 32, j = seg_at(jj);
        float *S = X((jj + 2) % 3), *Xj = X(jj % 3);
        rec_sync(); /* step s's copies landed; step s - 1's reads done */
        if (i0 == 0) rec_st_tile(per_seg + ((long long)j * H + h) * K * V + v0, V, K, nv, S, LDV, 1.f, false, p.vec);
        if (s + 1 < nstep) issue(s + 1);
        if (!sg.A) { /* A_j = a I */
            const float a = seg_decay(p, h, sg.seg[j], sg.seg[j] + sg.seg[sg.n + j], red);
            for (int e = threadIdx.x; e < Kp * BV; e += blockDim.x) {
                const int k = e / BV, c = e % BV;
                Xj[k * LDV + c] = fmaf(a, S[k * LDV + c], Xj[k * LDV + c]);
            }
            continue;
        }
        const float *A = Ab(s & 1);
        for (int e = threadIdx.x; e < 32 * BV; e += blockDim.x) {
            const int r = e / BV, c = e % BV;
            const float *a = A + r * ar;
            float x = 0.f;
            for (int k = 0; k < K; k++) x = fmaf(a[k * ak], S[k * LDV + c], x);
            Xj[(i0 + r) * LDV + c] += x;
        }
    }
    rec_sync();
    if (fin) rec_st_tile(fin + soff, V, K, nv, X(nseg ? (nseg - 1) % 3 : 2), LDV, 1.f, fin_acc, p.vec);
}

template <bool REV, int BV>
static void seg_chain_launch(cudaStream_t st, const rec_prob &p, const rec_segs &sg, const float *init,
                             const float *add, float *per_seg, float *fin, bool fin_acc)
{
    const size_t sm = seg_chain_smem(p, BV);
    pr_cuda_smem_prep((const void *)seg_chain_kernel<REV, BV>, sm);
    const dim3 grid((p.V + BV - 1) / BV, p.H, p.N);
    seg_chain_kernel<REV, BV><<<grid, PR_REC_THREADS, sm, st>>>(p, sg, init, add, per_seg, fin, fin_acc ? 1 : 0);
    PR_CUDA_LAUNCH_CHECK();
}

void pr_rec_seg_chain(cudaStream_t st, const rec_prob &p, const rec_segs &sg, bool rev, const float *init,
                      const float *add, float *per_seg, float *fin, bool fin_acc)
{
    if (sg.A && rev) seg_chain_launch<true, 8>(st, p, sg, init, add, per_seg, fin, fin_acc);
    else if (sg.A) seg_chain_launch<false, 8>(st, p, sg, init, add, per_seg, fin, fin_acc);
    else if (rev) seg_chain_launch<true, 32>(st, p, sg, init, add, per_seg, fin, fin_acc);
    else seg_chain_launch<false, 32>(st, p, sg, init, add, per_seg, fin, fin_acc);
}

/* ---- the fix-up ------------------------------------------------------------------ */
struct seg_fix_lay {
    int S, X, PW, Y, red, total;
};
static seg_fix_lay seg_fix_layout(const rec_prob &p, int BV)
{
    rec_bump m;
    seg_fix_lay s;
    const int LDV = BV + 4, LDK = p.Kp + 4;
    s.S = m.take(p.Kp * LDV), s.red = m.take(32);
    s.X = s.PW = s.Y = -1;
    if (p.delta) { /* P_c, then W_c in its place */
        s.X = m.take(p.Kp * LDV), s.Y = m.take(p.C * LDV);
        s.PW = m.take((p.Kp > p.C ? p.Kp : p.C) * LDK);
    }
    s.total = m.off;
    return s;
}
size_t pr_rec_smem_segfix(const rec_prob &p, int bv) { return (size_t)seg_fix_layout(p, bv).total * 4; }

/* the segment of sequence n that holds chunk c */
__device__ static int seg_of_chunk(const rec_segs &sg, int n, int c)
{
    const int *cbase = sg.seg + 2 * sg.n, *first = sg.seg + 3 * sg.n;
    int j = first[n];
    while (j + 1 < first[n + 1] && cbase[j + 1] <= c) j++;
    return j;
}

/* C = A B (rec_mm) without 32x32 warp tiles, whose accumulators would not
 * fit the registers of three blocks an SM */
__device__ static void seg_mm(const rec_prob &p, float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                              int M, int N, int Kd)
{
    if (!p.tf32) rec_mm_f32<false, false>(C, ldc, A, lda, B, ldb, M, N, Kd, 1.f, false);
    else if ((M >> 4) * (N >> 5) >= PR_REC_WARPS)
        rec_mm_tc_tiles<false, false, 1, 2>(C, ldc, A, lda, B, ldb, M, N, Kd, 1.f, false);
    else rec_mm_tc_tiles<false, false, 1, 1>(C, ldc, A, lda, B, ldb, M, N, Kd, 1.f, false);
}

/* one block per (chunk, head, V tile); three share an SM (SEG_FIX_PER_SM) */
__global__ void __launch_bounds__(PR_REC_THREADS, SEG_FIX_PER_SM)
    seg_fix_kernel(rec_prob p, rec_segs sg, seg_fix_lay s, int BV, const float *trans, const float *starts, float *hs,
                   float *R, const float *W)
{
    extern __shared__ __align__(128) float sm[];
    const int c = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * BV, H = p.H, K = p.K, V = p.V, Kp = p.Kp;
    const int LDK = Kp + 4, LDV = BV + 4, nv = min(BV, V - v0);
    const rec_chunk_pos cp = rec_chunk_of(p, c);
    const int j = seg_of_chunk(sg, p.cseq ? p.cseq[c] : c / p.ncs, c);
    const long long hoff = ((long long)c * H + h) * K * V + v0, rk = (long long)cp.row0 * H + h;
    float *S = sm + s.S;
    rec_ld_tile(S, LDV, Kp, BV, starts + ((long long)j * H + h) * K * V + v0, V, K, nv, p.vec);
    if (!p.delta) { /* hs_c += e^{sum of g from the segment's start to the chunk's} start_j */
        const float d = seg_decay(p, h, sg.seg[j], cp.row0, sm + s.red);
        rec_sync();
        rec_st_tile(hs + hoff, V, K, nv, S, LDV, d, true, p.vec);
        return;
    }
    float *X = sm + s.X, *PW = sm + s.PW, *Y = sm + s.Y;
    rec_ld_tile(PW, LDK, Kp, Kp, trans + ((long long)c * H + h) * K * K, K, K, K, p.vec);
    rec_sync();
    seg_mm(p, X, LDV, PW, LDK, S, LDV, Kp, BV, Kp); /* X = P_c start_j */
    rec_sync();
    rec_ld_tile(PW, LDK, p.C, Kp, W + rk * K, (long long)H * K, cp.nval, K, p.vec);
    rec_st_tile(hs + hoff, V, K, nv, X, LDV, 1.f, true, p.vec);
    rec_sync();
    seg_mm(p, Y, LDV, PW, LDK, X, LDV, p.C, BV, Kp); /* Y = W_c X */
    rec_sync();
    rec_st_tile(R + rk * V + v0, (long long)H * V, cp.nval, nv, Y, LDV, -1.f, true, p.vec);
}

void pr_rec_seg_fix(cudaStream_t st, const rec_prob &p, const rec_segs &sg, int bv, const float *trans,
                    const float *starts, float *hs, float *R, const float *W)
{
    const seg_fix_lay s = seg_fix_layout(p, bv);
    const size_t sm = (size_t)s.total * 4;
    pr_cuda_smem_prep((const void *)seg_fix_kernel, sm);
    const dim3 grid(p.nchunks, p.H, (p.V + bv - 1) / bv);
    seg_fix_kernel<<<grid, PR_REC_THREADS, sm, st>>>(p, sg, s, bv, trans, starts, hs, R, W);
    PR_CUDA_LAUNCH_CHECK();
}
