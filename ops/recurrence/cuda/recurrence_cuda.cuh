/* ops/recurrence/cuda/recurrence_cuda.cuh: what the CUDA kernels of the recurrence
 * family share (internal to the .cu files of ops/recurrence).
 *
 * - rec_prob: the problem (pointers, sizes, rule flags, sequence layout),
 *   passed by value to every kernel;
 * - the block-level tile kit (ops/cuda/tiles.cuh) with rec_prob's TF32
 *   switch, the gate scans, and the loads of a chunk's keys and values;
 * - the launchers of recurrent.cu (per-token form) and of the chunked form's
 *   passes (chunked.cu runs them: prep.cu, state.cu, scores.cu, dstate.cu,
 *   grad.cu, wy.cu, segments.cu, extras.cu; plan.cu plans them).
 * Every block has PR_REC_THREADS threads. No float atomics anywhere.
 */
#ifndef PR_RECURRENCE_CUDA_CUH
#define PR_RECURRENCE_CUDA_CUH

#include <type_traits>

#include "ops/ops.h"
#include "ops/recurrence/recurrence.h"
#include "ops/cuda/tiles.cuh"

/* One call's problem. Token row r (over B*T) of head h: q/k at (r*H + h)*K,
 * v/o at (r*H + h)*V, g/beta at r*H + h, kx at ((r*H + h)*L + l)*K.
 * Sequence n: rows [bos, bos + len); its chunks are global chunks
 * [cbase, cbase + ceil(len/C)). seq == NULL: every sequence has len = T,
 * bos = n*T (no cu_seqlens). */
struct rec_prob {
    const float *q, *k, *v, *g, *beta, *kx, *vx, *h0;
    const float *dout, *dht;        /* backward only */
    int N, H, K, V, L, T;
    int Kp, Vp;                     /* K, V rounded up to 32 */
    int has_g, delta, tf32, vec;    /* vec: K, V multiples of 4 (float4 rows) */
    int bf16;                       /* q, k, v, kx, vx are bf16 data (staged as f32) */
    int gk;                         /* the decay is per key channel (gla): g at (r*H + h)*K */
    int gv;                         /* the decay is per value channel (gla, g_per_value): g at (r*H + h)*V */
    /* kx, vx as bf16 bits, read in place (kx, vx then NULL): only the wgmma
     * extras do, the only kernels that read them when the extras run apart */
    const unsigned short *kx16, *vx16;
    /* bf16 q read and bf16 o written in place by the output pass (p.q then
     * NULL; the plan's io16_out): the forward's only reader of q and writer of o */
    const unsigned short *q16;
    unsigned short *o16;
    /* bf16 k and v read in place by the forward's wgmma passes (p.k, p.v
     * then NULL; the plan's io16_kv, with q16): prep, state and output */
    const unsigned short *k16, *v16;
    /* the backward's in place reads (the plan's io16_bwd): q16, dout16 and
     * k16 (p.q, p.dout, p.k NULL), v16 without beta (with beta no backward
     * pass reads v): dlocal, dstate, grad and wy in their wgmma forms */
    const unsigned short *dout16;
    float scale;
    const int *seq;                 /* device [3N]: bos, len, cbase; or NULL */
    const int *cseq;                /* device [nchunks]: chunk -> sequence; or NULL */
    int ncs;                        /* chunks per sequence when seq == NULL */
    int nchunks, C;
    int packed;                     /* cu_seqlens given: T counts the rows of all N sequences */
};

struct rec_seq_pos {
    int bos, len, cbase;
};
__device__ __forceinline__ rec_seq_pos rec_seq_of(const rec_prob &p, int n)
{
    if (p.seq) return {p.seq[n], p.seq[p.N + n], p.seq[2 * p.N + n]};
    return {n * p.T, p.T, n * p.ncs};
}
/* chunk c: its first token row and its number of valid tokens */
struct rec_chunk_pos {
    int row0, nval;
};
__device__ __forceinline__ rec_chunk_pos rec_chunk_of(const rec_prob &p, int c)
{
    const int n = p.cseq ? p.cseq[c] : c / p.ncs;
    const rec_seq_pos s = rec_seq_of(p, n);
    const int t0 = (c - s.cbase) * p.C;
    return {s.bos + t0, min(p.C, s.len - t0)};
}

/* the block's product with rec_prob's TF32 switch (ops/cuda/tiles.cuh's rec_mm) */
template <bool TA, bool TB, bool BF = false, bool W32 = true>
__device__ __forceinline__ void rec_mm(const rec_prob &p, float *C, int ldc, const float *A, int lda, const float *B,
                                       int ldb, int M, int N, int Kd, float alpha, bool acc)
{
    rec_mm<TA, TB, BF, W32>((bool)p.tf32, C, ldc, A, lda, B, ldb, M, N, Kd, alpha, acc);
}

/* warp 0's gate scans. Lane l holds the gates of tokens l * E .. l * E + E - 1
 * (E = C/32) as its own running sums x[e]; rec_lane_incl returns the sum up
 * to its lane's end, so with excl = incl - x[E - 1] G_t = excl + x[e]. */
template <int E> __device__ __forceinline__ float rec_lane_incl(const float (&x)[E])
{
    float incl = x[E - 1];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(PR_FULL_MASK, incl, o);
        if ((int)threadIdx.x >= o) incl += y;
    }
    return incl;
}
/* G[t] = excl + x[e], and where eG is given the row factors eG[t] = e^{G_t}
 * and where eL is given eL[t] = e^{G_last - G_t}, last = nval - 1. EL_GIVEN
 * says eL is given without a null test (rec_load_gates' callers pass it). */
template <int C, bool EL_GIVEN>
__device__ __forceinline__ void rec_gates_store(float *G, const float (&x)[C / 32], float excl, int nval, float *eG,
                                                float *eL)
{
    constexpr int E = C / 32;
    const int lane = threadIdx.x;
#pragma unroll
    for (int e = 0; e < E; e++) G[lane * E + e] = excl + x[e];
    if (!eG) return;
    __syncwarp();
    const float gl = G[nval - 1];
#pragma unroll
    for (int e = 0; e < E; e++) {
        const float gt = excl + x[e];
        eG[lane * E + e] = expf(gt);
        if (EL_GIVEN || eL) eL[lane * E + e] = expf(gl - gt);
    }
}
/* warp 0 reads a chunk's gates from global memory (zero past nval or without
 * g) into x as above and stores bt[t] = beta_t (zero past nval or without
 * beta); excl as above, returns the chunk's total */
template <int C>
__device__ __forceinline__ float rec_gate_scan(const rec_prob &p, int row0, int nval, int h, float *bt,
                                               float (&x)[C / 32], float &excl)
{
    constexpr int E = C / 32;
    float run = 0.f;
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int t = threadIdx.x * E + e;
        const long long o = (long long)(row0 + t) * p.H + h;
        const float gt = p.has_g && t < nval ? p.g[o] : 0.f;
        if (p.delta) bt[t] = t < nval ? p.beta[o] : 0.f;
        run += gt;
        x[e] = run;
    }
    const float incl = rec_lane_incl<E>(x);
    excl = incl - run;
    return incl;
}
/* chunk-local gates of a chunk of C tokens from token row row0 (nval valid):
 * G[t] = sum_{s<=t} g_s, bt[t] = beta_t and the row factors of
 * rec_gates_store. Warp 0 works; the caller synchronizes after. */
template <int C>
__device__ __forceinline__ void rec_load_gates(const rec_prob &p, int row0, int nval, int h, float *G, float *bt,
                                               float *eG = nullptr, float *eL = nullptr)
{
    if (threadIdx.x >= 32) return;
    float x[C / 32], excl;
    rec_gate_scan<C>(p, row0, nval, h, bt, x, excl);
    rec_gates_store<C, true>(G, x, excl, nval, eG, eL);
}

/* rec_load_gates in two steps, so that warp 0's loads fly with the tiles'
 * instead of holding the block at its first barrier:
 * rec_gates_issue copies g and beta as they are into G and bt (4-byte
 * cp.async by warp 0, zero past nval or without them); after its wait,
 * rec_gates_scan turns G into the cumulative sums in place and fills eG and
 * eL (where given), again by warp 0. The caller synchronizes after. */
/* B16: bf16 data, where p.k may be NULL (k read in place): the copies of
 * no bytes take k16 or q16 as their address then */
template <int C, bool B16 = false>
__device__ __forceinline__ void rec_gates_issue(const rec_prob &p, int row0, int nval, int h, float *G, float *bt)
{
    if (threadIdx.x >= 32) return;
    constexpr int E = C / 32;
    const long long o0 = (long long)row0 * p.H + h;
    const float *nil = !B16 ? p.k
                       : p.k   ? p.k
                       : p.k16 ? reinterpret_cast<const float *>(p.k16)
                               : reinterpret_cast<const float *>(p.q16);
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int t = threadIdx.x * E + e;
        const bool in = t < nval;
        rec_cp4((unsigned)__cvta_generic_to_shared(G + t), in && p.has_g ? p.g + o0 + (long long)t * p.H : nil,
                in && p.has_g ? 4 : 0);
        rec_cp4((unsigned)__cvta_generic_to_shared(bt + t), in && p.delta ? p.beta + o0 + (long long)t * p.H : nil,
                in && p.delta ? 4 : 0);
    }
}
template <int C>
__device__ __forceinline__ void rec_gates_scan(float *G, int nval, float *eG = nullptr, float *eL = nullptr)
{
    if (threadIdx.x >= 32) return;
    constexpr int E = C / 32;
    float x[E], run = 0.f;
#pragma unroll
    for (int e = 0; e < E; e++) run += G[threadIdx.x * E + e], x[e] = run;
    const float excl = rec_lane_incl<E>(x) - run;
    rec_gates_store<C, false>(G, x, excl, nval, eG, eL);
}

/* The wgmma kernels' tiles have 64 rows, and their G, bt, eG lie 64 apart.
 * At C = 32, rows 32..63 must be zero too: they scale (or multiply) tile
 * rows that are zero, and whatever the last kernel left in shared memory
 * there can be inf or NaN (0 * inf poisons a whole product; the sanitizers
 * showed it). Warp 1 writes them while warp 0 scans; the caller's next
 * barrier makes them visible. */
template <int C> __device__ __forceinline__ void rec_gates_pad64(float *G)
{
    if constexpr (C < 64) {
        const int t = (int)threadIdx.x - 32;
        if (t >= 0 && t < 64 - C) G[C + t] = G[64 + C + t] = G[128 + C + t] = 0.f;
    }
}

/* dg[o0 + t*stride] += sum_{s=t}^{nval-1} x_s for t < nval: the reverse
 * cumulative sum of one chunk's dG, by one warp (lane holds x_t for
 * t = lane*E + e, E = C/32). A suffix scan across lanes, then every lane's
 * loads in flight before its stores: a chunk costs one global round trip,
 * not one per token. Fixed order: deterministic. */
template <int C>
__device__ __forceinline__ void rec_chunk_dg_warp(const float (&x)[C / 32], int nval, float *dg, long long o0,
                                                  long long stride)
{
    constexpr int E = C / 32;
    const int lane = threadIdx.x & 31;
    float s[E], run = 0.f;
#pragma unroll
    for (int e = E - 1; e >= 0; e--) {
        run += lane * E + e < nval ? x[e] : 0.f;
        s[e] = run;
    }
    float after = run; /* the sum over lanes >= this one, then > this one */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_down_sync(PR_FULL_MASK, after, o);
        if (lane + o < 32) after += y;
    }
    after -= run;
    float old[E];
#pragma unroll
    for (int e = 0; e < E; e++) old[e] = lane * E + e < nval ? dg[o0 + (lane * E + e) * stride] : 0.f;
#pragma unroll
    for (int e = 0; e < E; e++)
        if (lane * E + e < nval) dg[o0 + (lane * E + e) * stride] = old[e] + (after + s[e]);
}

/* the augmented keys [K; KX_0; ...] of a chunk (rows C + l*C + t for the
 * extras), columns k0.. (nk valid of W) */
__device__ __forceinline__ void chunk_ld_keys(const rec_prob &p, float *KA, int ld, int C, int W, long long rk, int nval,
                                              int k0, int nk)
{
    const int H = p.H, K = p.K, L = p.L;
    rec_ld_tile(KA, ld, C, W, p.k + rk * K + k0, (long long)H * K, nval, nk, p.vec);
    for (int l = 0; l < L; l++)
        rec_ld_tile(KA + (C + l * C) * ld, ld, C, W, p.kx + rk * L * K + l * K + k0, (long long)H * L * K, nval, nk, p.vec);
}
/* the augmented values [U; VX_0; ...] of a chunk, columns v0.. (U from u: [rows,H,V]) */
template <bool SW = false>
__device__ __forceinline__ void chunk_ld_values(const rec_prob &p, float *UA, int ld, int C, int W, const float *u,
                                                long long rk, int nval, int v0, int nv)
{
    const int H = p.H, V = p.V, L = p.L;
    rec_ld_tile<SW>(UA, ld, C, W, u + rk * V + v0, (long long)H * V, nval, nv, p.vec);
    for (int l = 0; l < L; l++)
        rec_ld_tile<SW>(UA + (C + l * C) * ld, ld, C, W, p.vx + rk * L * V + l * V + v0, (long long)H * L * V, nval,
                        nv, p.vec);
}

/* ---- launchers ------------------------------------------------------------------ */
/* bf16 data with TF32 on: the chunked kernels' products run as bf16 mma
 * (their BF instance), as fla's bf16 kernels multiply bf16 operands; the
 * states, T', W, U and every accumulator stay f32 in memory */
static inline bool rec_bf_products(const rec_prob &p) { return p.bf16 && p.tf32; }

struct rec_grads {
    float *dq, *dk, *dv, *dg, *dbeta, *dkx, *dvx, *dh0;   /* accumulate (+=); NULL: not needed */
    unsigned short *dkx16, *dvx16; /* bf16 in place (dkx, dvx then NULL): the wgmma extras' only */
    unsigned short *dq16;          /* bf16 dq accumulated in place (dq then NULL): grad's bf16 instances (io16_dq) */
    /* bf16 dv accumulated in place (dv then NULL; io16_dv): by wy for the
     * delta rules; without beta dlocal reads its old value and dstate
     * writes the sum (with io16_bwd, in their wgmma forms) */
    unsigned short *dv16;
    /* bf16 dk in place (io16_dk): without beta grad adds into it (dk NULL);
     * with beta grad writes old + its part into the f32 scratch dk and wy
     * adds the rest and rounds into dk16 */
    unsigned short *dk16;
};

/* recurrent.cu: the per-token form. Forward saves r = v - h'^T k (delta rules)
 * into r_save unless it is NULL (the node is not recorded). */
void pr_rec_token_forward(cudaStream_t s, const rec_prob &p, float *o, float *ht, float *r_save);
void pr_rec_token_backward(cudaStream_t s, const rec_prob &p, const rec_grads &d, const float *o, const float *ht,
                           const float *r_save);
/* gla_token.cu: the per-token form of the gla rule, its decay per key
 * channel (p.gk) or per value channel (p.gv); no delta erase, no extras. o
 * (the forward's f32 output) is read by the backward of p.gv only. */
void pr_rec_gla_token_forward(cudaStream_t s, const rec_prob &p, float *o, float *ht);
void pr_rec_gla_token_backward(cudaStream_t s, const rec_prob &p, const rec_grads &d, const float *o,
                               const float *ht);
/* gla_chunked.cu: the chunked form of the gla rule, its decay per key
 * (p.gk) or per value channel (p.gv), p.C = 32 or 64. hs [nchunks,H,K,V]: the chunk-start states, written by the forward,
 * read by the backward (with ht). pr_rec_gla_chunk_smem: the most shared
 * memory one of its kernels takes, with fast those of the fast form too (the
 * plan compares it with the device's). */
size_t pr_rec_gla_chunk_smem(const rec_prob &p, bool fast);
/* fast: the per-key decay's fast form (the plan's gla_fast): cumulative decays precomputed, the
 * serial passes in K tiles, dg summed in shared memory, and where A [nchunks,H,C,C] is given the
 * forward stores the chunks' scores there and the backward's gla_dv reads them (NULL: recomputed) */
void pr_rec_gla_chunk_forward(cudaStream_t s, const rec_prob &p, float *hs, float *o, float *ht, bool fast, float *A);
void pr_rec_gla_chunk_backward(cudaStream_t s, const rec_prob &p, const float *hs, const float *ht, const rec_grads &d,
                               bool fast, const float *A);
/* shared-memory bytes the per-token kernels need at one token per block step (their least) */
size_t pr_rec_token_smem_min(const rec_prob &p);

/* Segments (segments.cu): the serial passes split each sequence into
 * chunk-aligned segments walked in parallel (a two-level scan). A segment's
 * chunks map its start state affinely to its end state, S_end = A S_start + E;
 * the segments' E come from a pass over all segments at once from zero, their
 * A from one from the identity (delta rules; without beta A is e^{sum g} I),
 * a short serial chain over segments turns them into every segment's start,
 * and either a last pass from those starts gives the exact chunk states
 * (three passes) or a chunk-parallel fix-up adds each start's contribution
 * to what the pass from zero stored (two; plan.seg_fix). The backward runs
 * the chain in reverse with A^T. seg: device int32 [3n + N + 1]: bos, len,
 * cbase of each segment (a sequence of the state kernels' table), then each
 * sequence's first segment (N + 1 entries). n = 0: unsegmented. */
struct rec_segs {
    int n;
    const int *seg;
    float *A; /* [n, H, K, K] (delta rules; NULL without beta): written by the forward, read by the backward */
};
/* chunked.cu: the chunked form with chunks of p.C tokens.
 * Saved by the forward: hs [nchunks,H,K,V] chunk-start states; for delta rules
 * also R [rows,H,V] (u = beta R), Tinv [nchunks,H,C,C], W [rows,H,K], R0 [rows,H,V].
 * Tinv may be NULL (a forward not recorded): only the backward reads it. */
struct rec_chunk_saved {
    float *hs, *R, *Tinv, *W, *R0;
    rec_segs sg;
};
/* tile sizes picked by pr_rec_chunk_plan; false: the sizes need too much shared memory.
 * segments: how many segments the serial passes split a sequence into (1: none);
 * seg_fix: the segmented forward ends with the fix-up (tile bv_fix) instead
 * of a last serial pass; wg_grad: grad's V-loop products run as wgmma, and
 * bpw_grad counts its 64 x 32 pieces a warpgroup instead of warp blocks;
 * wg_state, wg_dstate: the state (dstate) pass runs its wgmma form (bv_state,
 * bv_dstate its V tile); wg_scores: the output and dlocal do (V tiles of
 * bv_out = 64 and bv_dloc = 128); wg_wy: wy does (K and V tiles of 64);
 * wg_prep: prep does (bv_prep = 128); xa: prism_core's extras run apart
 * (extras.cu) and every other field is the plan of the core, the
 * same problem with L = 0 */
struct rec_chunk_plan {
    int C;
    int bv_prep, bv_state, bv_out, bv_dloc, bv_dstate, bv_grad, bk_grad, bpw_grad, passes_grad, wg_grad, bk_wy, bv_wy,
        xg_wy;
    int segments, seg_fix, bv_fix, wg_state, wg_dstate, wg_scores, wg_wy, wg_prep, xa, wg_xa;
    int io16_out; /* bf16 data: the output pass reads q and writes o as bf16 (rec_prob's q16, o16) */
    int io16_dq;  /* bf16 data, TF32 on: grad accumulates dq as bf16 (rec_grads' dq16) */
    int io16_dv;  /* and dv as bf16 (rec_grads' dv16): wy for the delta rules, dlocal and dstate (io16_bwd) without */
    int io16_dk;  /* and dk as bf16: grad alone, or grad through an f32 scratch and wy (rec_grads' dk16) */
    int io16_kv;  /* bf16 data: the forward's passes read k and v in place too (rec_prob's k16, v16; with
                     io16_out, where prep (delta rules), state and output all run their wgmma forms) */
    int io16_bwd; /* bf16 data, TF32 on: the backward's passes read q, dO, k (and without beta v) in place
                     (rec_prob's q16, dout16, k16, v16), where dlocal, dstate, grad and wy run their wgmma forms */
    int gla_fast; /* gla (per-key decay): the fast form (gla_fast.cu; force.gla_fast, on by default) */
    /* force.bf16_mma on: passes whose wgmma forms multiply bf16 tiles in shared memory with bf16 wgmma
     * (m64nNk16) where they read bf16 inputs in place: prep and the output (with io16_kv), dlocal (with io16_bwd) */
    int bf_out, bf_dloc, bf_prep;
};
/* plan.cu. p.C set; f: the fields forced (fatal where the kernels cannot run
 * them); smem_max: a block's opt-in limit, smem_sm: an SM's shared memory,
 * n_sm: the device's multiprocessors */
bool pr_rec_chunk_plan(const rec_prob &p, const pr_rec_force &f, int smem_max, int smem_sm, int n_sm,
                       rec_chunk_plan *plan);
/* bf16 data readable in place at all: bf16, K and V multiples of 4, not staged by
 * force.bf16_staged (fatal on a value outside PLANNED, OFF, ON); each pass adds its own terms */
bool pr_rec_bf16_unstaged(const rec_prob &p, const pr_rec_force &f);

/* the state pass's inputs and outputs (state.cu). NULL hs, R or ht: not
 * stored; NULL h0: zero. ident: the pass starts from the identity (the state
 * has K columns, p.V = K) with every value zero, so its ht is the chunks'
 * transition A and its hs the transitions from the start to each chunk. */
struct rec_state_io {
    float *hs, *R, *ht;
    const float *W, *R0, *h0;
    int ident;
    /* extras apart (extras.cu): each chunk's end state adds its E,
     * found in hs's next slot, the sequence's last chunk's in elast [N,H,K,V]
     * (the wgmma form only) */
    const float *elast;
};
/* wg: the wgmma form (the plan's wg_state; not for io.ident) */
void pr_rec_chunk_state(cudaStream_t s, const rec_prob &p, int bv, const rec_state_io &io, bool wg = false);
/* the dstate pass (dstate.cu). dhs NULL: the carry only (nothing stored
 * but dh_out); dht NULL: zero terminal gradient; dh_out (+= when dh_acc) the
 * gradient of each sequence's start state, or NULL. Without beta dv (where
 * given) is stored as dU + Kd dhn: dlocal folded dv's earlier value into dU. */
struct rec_dstate_io {
    const float *W, *dht;
    float *dhs, *dU, *dVX, *dv, *dh_out;
    int dh_acc;
    unsigned short *dv16; /* dv as bf16 in place (dv then NULL): the wgmma form with bf16 q, dO, no beta */
};
/* wg: the wgmma form (the plan's wg_dstate; needs dhs, V tile 32, 64 or 128) */
void pr_rec_chunk_dstate(cudaStream_t s, const rec_prob &p, int bv, const rec_dstate_io &io, bool wg = false);
/* segments.cu: p with the segments as its sequences (for the serial passes) */
rec_prob pr_rec_seg_prob(const rec_prob &p, const rec_segs &sg);
/* the chain over a sequence's segments, one block per (sequence, head, 32
 * columns). Forward (rev 0): S = init (NULL: 0); for each segment j in order,
 * per_seg[j] = S, S = A_j S + add_j. Backward (rev 1): the same in reverse
 * order with A_j^T. Finally fin = S (+= when fin_acc; NULL: not stored). */
void pr_rec_seg_chain(cudaStream_t s, const rec_prob &p, const rec_segs &sg, bool rev, const float *init,
                      const float *add, float *per_seg, float *fin, bool fin_acc);
/* blocks of the fix-up an SM can hold at most (its registers allow three) */
#define SEG_FIX_PER_SM 3
/* the fix-up of the two-pass segmented forward, one block per (chunk, head,
 * V tile of bv): hs_c += P_c start_j and (delta rules) R_c -= W_c P_c start_j,
 * j chunk c's segment, starts [n, H, K, V] from the chain, trans [nchunks, H,
 * K, K] the identity pass's per-chunk states P_c (NULL without beta: P_c is
 * e^{sum of g from the segment's start to the chunk's} I) */
void pr_rec_seg_fix(cudaStream_t s, const rec_prob &p, const rec_segs &sg, int bv, const float *trans,
                    const float *starts, float *hs, float *R, const float *W);
size_t pr_rec_smem_segfix(const rec_prob &p, int bv);
/* the backward's first step: dU = scale S^T dO (+ dv0 where given: the rules
 * without beta) and dVX likewise, for every chunk */
/* wg: the wgmma form (the plan's wg_scores; V tiles of 128); bf: its bf16
 * products (the plan's bf_dloc, with q, dO, k read in place) */
void pr_rec_chunk_dlocal(cudaStream_t s, const rec_prob &p, int bv, float *dU, float *dVX, const float *dv0,
                         bool wg = false, const unsigned short *dv016 = nullptr, bool bf = false);
/* the forward's passes (prep.cu: delta rules only; state.cu, also over
 * segments; scores.cu: the output) */
void pr_rec_chunk_prep(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv);
void pr_rec_chunk_state_segmented(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl,
                                  const rec_chunk_saved &sv, float *ht);
void pr_rec_chunk_output(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                         float *o);
/* the backward's passes after dlocal: dstate over segments (dstate.cu), grad
 * (grad.cu), and wy with the final sums of dg (wy.cu), on the scratch the
 * backward keeps (dkxa, dW, dGp, dbA written by grad, read by wy) */
void pr_rec_chunk_dstate_segmented(cudaStream_t s, const rec_prob &p, int bv, const rec_segs &sg,
                                   const rec_dstate_io &io);
struct wy_scratch {
    const float *dU, *dVX, *dkxa, *dW, *dGp, *dbA;
    int nkt;
    long long rowsH;
};
void pr_rec_chunk_grad(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                       const float *dhs, const wy_scratch &x, const rec_grads &d);
void pr_rec_chunk_wy(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                     const wy_scratch &x, const rec_grads &d);
/* chunked.cu: the whole forward and backward */
void pr_rec_chunk_forward(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                          float *o, float *ht);
void pr_rec_chunk_backward(cudaStream_t s, const rec_prob &p, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                           const rec_grads &d);
/* shared-memory bytes of each chunk kernel for a plan (each pass's file) */
size_t pr_rec_smem_prep(const rec_prob &p, int bv);
size_t pr_rec_smem_state(const rec_prob &p, int bv);
size_t pr_rec_smem_state_wg(const rec_prob &p, int bv); /* SIZE_MAX where bv is not 32 or 64 */
size_t pr_rec_smem_scores(const rec_prob &p, int mode, int bv);
size_t pr_rec_smem_scores_wg(const rec_prob &p, int mode); /* SIZE_MAX where K > 128 */
size_t pr_rec_smem_scores_bf(const rec_prob &p, int mode); /* its bf16 form; SIZE_MAX where K > 128 */
size_t pr_rec_smem_prep_bf(const rec_prob &p);              /* prep's bf16 form (K, V <= 128) */
size_t pr_rec_smem_prep_wg(const rec_prob &p); /* prep's wgmma form (K <= 128) */
size_t pr_rec_smem_dstate(const rec_prob &p, int bv);
size_t pr_rec_smem_grad(const rec_prob &p, int bk, int bv, int r, bool wg);
size_t pr_rec_smem_wy(const rec_prob &p, int bk, int bv);
size_t pr_rec_smem_wy_xg(const rec_prob &p, int bk, int bv, int xg); /* with xg extras a product */
size_t pr_rec_smem_wy_wg(int nkt);                      /* wy's wgmma form, nkt K tiles of 64 */
size_t pr_rec_smem_dstate_wg(const rec_prob &p, int bv); /* dstate's wgmma form */
/* grad's warp blocks a warp holds at K tile bk (wg: 64 x 32 pieces a warpgroup),
 * and the passes over V tiles its sums then take at r of them */
int pr_rec_grad_blocks_per_warp(const rec_prob &p, int bk, bool wg);
int pr_rec_grad_passes(const rec_prob &p, int bk, int r, bool wg);

/* extras.cu: the extras apart (pl.xa). The core is p with L = 0
 * (rec_core_prob); xfwd runs first: vp = V' [rows,H,V] (the core's values),
 * o = the extras' share of the output (the core's output kernel adds its
 * own), and each chunk's E into hs's next slot or elast [N,H,K,V]. xbwd runs
 * after the core's backward, whose dv went to dvp (dV'), and dhs the
 * gradients of the chunks' end states. */
void pr_rec_chunk_xfwd(cudaStream_t s, const rec_prob &p, bool wg, float *vp, float *o, float *hs, float *elast);
void pr_rec_chunk_xbwd(cudaStream_t s, const rec_prob &p, bool wg, const float *dhs, const float *dvp,
                       const rec_grads &d);
/* wg: the extras' wgmma forms (the plan's wg_xa), which fit where
 * pr_rec_xa_wg_fits (C = 64, C L <= 128, K, V <= 128, sm_90a) */
size_t pr_rec_smem_xfwd(const rec_prob &p, bool wg);
size_t pr_rec_smem_xbwd(const rec_prob &p, bool wg);
bool pr_rec_xa_wg_fits(const rec_prob &p);
static inline rec_prob rec_core_prob(const rec_prob &p)
{
    rec_prob c = p;
    c.L = 0, c.kx = c.vx = nullptr;
    return c;
}

/* a scratch buffer of n floats from the caching allocator (freed by rec_scratch_free) */
static inline float *rec_scratch(size_t n) { return (float *)pr_cuda_malloc((n ? n : 1) * sizeof(float)); }
static inline void rec_scratch_free(float *p, size_t n) { pr_cuda_free(p, (n ? n : 1) * sizeof(float)); }

#endif
