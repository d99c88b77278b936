/* ops/ttt_linear.cu: TTT-Linear on CUDA, f32, the forward and the plan (the
 * backward is ops/ttt_linear_bwd.cu, their shared pieces ops/ttt_linear_cuda.cuh).
 *
 * The forward: one thread block per (batch, head) walks the mini-batches in
 * order, with the inner state W [K,K] in shared memory and the
 * mini-batch's rows beside it; inside a mini-batch the work is parallel:
 * block products (blk_mm) against W and between the rows, half a warp per
 * row for the LayerNorms. With ctx->matmul_tf32 the products of a mini-batch whose
 * sizes are multiples of 16 run on TF32 tensor cores (the recurrence's
 * mma.sync product, f32 accumulators; W itself stays f32), else in fp32. The
 * triangular parts of the dual form (Attn and D below) are products too,
 * masked afterwards. The math and the backward's derivation are the CPU
 * path's (ops/ttt_linear.c), which is the reference. No float atomics: the
 * dw, db partial sums of each (b,h) are reduced over b by the kit's column
 * sum, so results are bitwise reproducible. The backward has three plans
 * (fused; or split into a kernel per mini-batch and a serial one, one after
 * the other or side by side: see "backward"), and where they run side by
 * side the forward splits too (see "forward"). Limits: K <= 128 and the
 * fused backward's shared memory, 2K(K+4) + 9 mb (K+4) + 4 mb (mb+4)
 * floats and 2,048 more at mb = 16 (223 KB at K = 128, mb = 16; the other
 * kernels need less). bf16 data (q, k, v, eta, o; ops/ttt_linear.h) is staged:
 * f32 copies in, the kernels, o and the bf16 grads rounded back once; with
 * tensor cores on and K > 64 the kernels' BF instances multiply bf16
 * operands (TTT_BF, ttt_bf).
 */
#include "ops/ttt_linear_cuda.cuh"

/* ---- forward -----------------------------------------------------------------
 * Mini-batch n of (b, h) from its start state W, hb, in four barrier phases:
 * 1. [qs; k] W -> [zb; xz] (q unscaled), Attn = scale q k^T;
 * 2. the rows: Z = xz + hb -> its LayerNorm xz, the inner gradient gz and its
 *    scale sz; cm_tj = eta_t (Attn_tj + 1) for j <= t;
 * 3. vb = -cm gz (v is spent); the update W -= e k^T gz, hb' = hb - e sum gz;
 * 4. the output rows o = Zb + LN(Zb) w + b, Zb = scale zb + vb + hb.
 * The fused kernel (a block per (b, h)) keeps two row sets and loads
 * mini-batch n + 1's while it works on n. Where the backward runs overlapped
 * (B H below the SM count) and the states are saved, the forward splits too:
 * the chain of (b, h) does only phases 1-3's state part (Z, gz, the update)
 * and raises mini-batch n's flag once W_n, hb_n are stored; workers take the
 * mini-batches from a queue, wait for the flag, and run the four phases from
 * the saved W_n, hb_n. The chains wait for nothing, so any order of the
 * blocks is safe. */
template <class P> struct fwd_bufs {
    P W, hb, hbn, w, b;
    P qs, kb, vb, eta;   /* row set 0; set 1 is `set` floats on (the split's workers use set 0 only) */
    P zb, xz, gz, cm, sz, pt;
    size_t set, floats;
};
/* P = size_t from 0: the launcher's sizes (see bwd_bufs_of) */
template <class P> __host__ __device__ inline fwd_bufs<P> fwd_bufs_of(P base, const ttt_args &a)
{
    const size_t K = a.K, RK = (size_t)a.mbp * a.ldr, mb4 = (a.mb + 3) & ~3;
    size_t o = 0;
    auto take = [&](size_t n) {
        const P p = base + o;
        o += n;
        return p;
    };
    fwd_bufs<P> s;
    s.W = take(K * a.ldw), s.hb = take(K), s.hbn = take(K), s.w = take(K), s.b = take(K);
    s.qs = take(RK), s.kb = take(RK), s.vb = take(RK), s.eta = take(mb4);
    s.set = 3 * RK + mb4;
    o += s.set;
    s.zb = take(RK), s.xz = take(RK), s.gz = take(RK), s.cm = take((size_t)a.mbp * a.ls), s.sz = take(mb4);
    s.pt = take(a.mbp == 16 ? TTT_PT : 0);
    s.floats = o;
    return s;
}
struct fwd_rows {
    float *qs, *kb, *vb, *eta;
};
__device__ __forceinline__ fwd_rows fwd_rows_of(const fwd_bufs<float *> &s, int set)
{
    const size_t o = set * s.set;
    return {s.qs + o, s.kb + o, s.vb + o, s.eta + o};
}

/* zeroes the shared memory (padding rows and columns feed only dropped
 * results, but must be finite) when zero; w and b of head h */
__device__ void fwd_start(const ttt_args &a, const fwd_bufs<float *> &s, int h, bool zero)
{
    extern __shared__ float sm[];
    if (zero) {
        for (int i = threadIdx.x; i < (int)s.floats; i += blockDim.x) sm[i] = 0.f;
        __syncthreads();
    }
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) s.w[c] = a.w[h * a.K + c], s.b[c] = a.b[h * a.K + c];
}

/* (b, h) = bh's start state: h0, hb0 (zero without them) */
__device__ void fwd_first_state(const ttt_args &a, const fwd_bufs<float *> &s, int bh)
{
    const int K = a.K;
    const long long KK = (long long)K * K;
    for (int i = threadIdx.x; i < K * K; i += blockDim.x) s.W[(i / K) * a.ldw + i % K] = a.h0 ? a.h0[bh * KK + i] : 0.f;
    for (int c = threadIdx.x; c < K; c += blockDim.x) s.hb[c] = a.hb0 ? a.hb0[(long long)bh * K + c] : 0.f;
}

/* mini-batch n's rows (q only when q) and eta into row set r, asynchronously
 * where K % 4 == 0 (complete at the next rec_sync) */
__device__ void fwd_load(const ttt_args &a, const fwd_rows &r, int bi, int h, int n, bool q)
{
    const int K = a.K, t0 = n * a.mb, m = min(a.mb, a.T - t0);
    const long long g0 = grow(a, bi, h, t0);
    if (q) ld_rows(r.qs, a.ldr, a.q, g0, a.H, m, K);
    ld_rows(r.kb, a.ldr, a.k, g0, a.H, m, K), ld_rows(r.vb, a.ldr, a.v, g0, a.H, m, K);
    for (int i = threadIdx.x; i < m; i += blockDim.x) cp4(r.eta + i, a.eta + ((long long)bi * a.T + t0 + i) * a.H + h);
}

/* W, hb -> the saved start state of mini-batch n */
__device__ void fwd_save_state(const ttt_args &a, const fwd_bufs<float *> &s, const float *hb, int bh, int n)
{
    const long long bn = bh * (long long)a.nmb + n;
    st_state(a.Ws + bn * a.K * a.K, s.W, a.ldw, a.K);
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) a.hbs[bn * a.K + c] = hb[c];
}

/* phase 1 (the chain: Z = k W alone) */
template <int KERNEL>
__device__ void fwd_products(bool tc, const ttt_args &a, const fwd_bufs<float *> &s, const fwd_rows &r, int m,
                             bool out)
{
    if (!out) return blk_mm<false, false, KERNEL>(tc, s.xz, a.ldr, r.kb, a.ldr, s.W, a.ldw, m, a.K, a.K, 1.f, false);
    qk_w<KERNEL>(tc, a, s.zb, s.xz, r.qs, r.kb, s.W, m);
    if (pt_split<ttt_bf_kernel(KERNEL)>(tc, a, m)) pt_mm<KERNEL>(s.pt, r.qs, a.ldr, r.kb, a.ldr, a.K);
    else blk_mm<false, true, KERNEL>(tc, s.cm, a.ls, r.qs, a.ldr, r.kb, a.ldr, m, m, a.K, a.scale, false);
}

/* phase 2 (cm only when out) */
template <int KPL, bool BF>
__device__ void fwd_rows_phase(bool tc, const ttt_args &a, const fwd_bufs<float *> &s, const fwd_rows &r,
                               const float *hb, int m, bool out)
{
    const int ldr = a.ldr, ls = a.ls;
    TTT_FOR_ROWS(i, ok, m)
    inner_grad_row<KPL>(s.xz + i * ldr, hb, r.vb + i * ldr, r.kb + i * ldr, s.w, s.b, a.K, a.eps, s.gz + i * ldr,
                        s.sz + i, nullptr, ok);
    if (!out) return;
    const bool split = pt_split<BF>(tc, a, m);
    for (int p = threadIdx.x; p < m * m; p += blockDim.x) {
        const int t = p / m, j = p - t * m;
        const float at = split ? a.scale * pt_sum(s.pt, t, j) : s.cm[t * ls + j];
        s.cm[t * ls + j] = j <= t ? r.eta[t] * (at + 1.f) : 0.f;
    }
}

/* phase 3: vb = -cm gz when out; W -= e k^T gz and hbn = hb - e sum gz when state */
template <int KERNEL>
__device__ void fwd_update(bool tc, const ttt_args &a, const fwd_bufs<float *> &s, const fwd_rows &r,
                           const float *hb, float *hbn, int m, bool out, bool state)
{
    const int K = a.K, ldr = a.ldr;
    const float e = r.eta[m - 1];
    if (out) blk_mm<false, false, KERNEL>(tc, r.vb, ldr, s.cm, a.ls, s.gz, ldr, m, K, m, -1.f, false);
    if (!state) return;
    blk_mm<true, false, KERNEL>(tc, s.W, a.ldw, r.kb, ldr, s.gz, ldr, K, K, m, -e, true);
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        float x = 0;
        for (int j = 0; j < m; j++) x += s.gz[j * ldr + c];
        hbn[c] = hb[c] - e * x;
    }
}

/* phase 4: o = Zb + LN(Zb) w + b, Zb = scale zb + vb + hb */
template <int KPL>
__device__ void fwd_out_rows(const ttt_args &a, const fwd_bufs<float *> &s, const fwd_rows &r, const float *hb,
                             int bi, int h, int t0, int m)
{
    const int K = a.K, ldr = a.ldr;
    TTT_FOR_ROWS(i, ok, m) {
        row_t<KPL> z = row_load<KPL>(s.zb + i * ldr, K), c = row_load<KPL>(r.vb + i * ldr, K);
        const row_t<KPL> hr = row_load<KPL>(hb, K), wr = row_load<KPL>(s.w, K), br = row_load<KPL>(s.b, K);
#pragma unroll
        for (int u = 0; u < KPL; u++) z.x[u] = a.scale * z.x[u] + c.x[u] + hr.x[u];
        row_t<KPL> xh = z;
        row_ln(xh, K, a.eps);
#pragma unroll
        for (int u = 0; u < KPL; u++) z.x[u] += wr.x[u] * xh.x[u] + br.x[u];
        if (ok) row_store(a.o + grow(a, bi, h, t0 + i), z, K);
    }
}

/* a block per (b, h): every mini-batch in order, the next one's rows loading */
template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS) ttt_fwd_kernel(ttt_args a)
{
    extern __shared__ float sm[];
    const fwd_bufs<float *> s = fwd_bufs_of(sm, a);
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H;
    fwd_start(a, s, h, true);
    fwd_first_state(a, s, bh);
    fwd_load(a, fwd_rows_of(s, 0), bi, h, 0, true);
    __syncthreads();   /* the first state is in before its save */
    float *hb = s.hb, *hbn = s.hbn;
    for (int n = 0; n < a.nmb; n++) {
        const int t0 = n * a.mb, m = min(a.mb, a.T - t0);
        const bool tc = a.tc && m % 16 == 0;
        const fwd_rows r = fwd_rows_of(s, n & 1);
        if (a.Ws) fwd_save_state(a, s, hb, bh, n);
        rec_sync();
        if (n + 1 < a.nmb) fwd_load(a, fwd_rows_of(s, (n + 1) & 1), bi, h, n + 1, true);
        fwd_products<TTT_FORWARD + TTT_BF * BF>(tc, a, s, r, m, true);
        __syncthreads();
        fwd_rows_phase<KPL, BF>(tc, a, s, r, hb, m, true);
        __syncthreads();
        fwd_update<TTT_FORWARD + TTT_BF * BF>(tc, a, s, r, hb, hbn, m, true, true);
        __syncthreads();
        fwd_out_rows<KPL>(a, s, r, hb, bi, h, t0, m);
        float *t = hb;   /* every thread swaps: hbn is the state from here */
        hb = hbn, hbn = t;
    }
    st_state(a.ht + bh * (long long)a.K * a.K, s.W, a.ldw, a.K);
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) a.hbt[(long long)bh * a.K + c] = hb[c];
}

/* the split's chain of (b, h) = bh: the states only, the next rows loading */
template <int KPL, bool BF>
__device__ void fwd_chain(const ttt_args &a, const fwd_bufs<float *> &s, int bh, int *ready)
{
    const int bi = bh / a.H, h = bh % a.H;
    fwd_start(a, s, h, true);
    fwd_first_state(a, s, bh);
    fwd_load(a, fwd_rows_of(s, 0), bi, h, 0, false);
    __syncthreads();   /* the first state is in before its save */
    float *hb = s.hb, *hbn = s.hbn;
    for (int n = 0; n < a.nmb; n++) {
        const int m = min(a.mb, a.T - n * a.mb);
        const bool tc = a.tc && m % 16 == 0;
        const fwd_rows r = fwd_rows_of(s, n & 1);
        fwd_save_state(a, s, hb, bh, n);
        __threadfence();
        rec_sync();
        if (threadIdx.x == 0) atomicExch(ready + bh * (long long)a.nmb + n, 1);   /* W_n, hb_n are out */
        if (n + 1 < a.nmb) fwd_load(a, fwd_rows_of(s, (n + 1) & 1), bi, h, n + 1, false);
        fwd_products<TTT_FWD_SPLIT + TTT_BF * BF>(tc, a, s, r, m, false);
        __syncthreads();
        fwd_rows_phase<KPL, BF>(tc, a, s, r, hb, m, false);
        __syncthreads();
        fwd_update<TTT_FWD_SPLIT + TTT_BF * BF>(tc, a, s, r, hb, hbn, m, false, true);
        __syncthreads();
        float *t = hb;
        hb = hbn, hbn = t;
    }
    st_state(a.ht + bh * (long long)a.K * a.K, s.W, a.ldw, a.K);
    for (int c = threadIdx.x; c < a.K; c += blockDim.x) a.hbt[(long long)bh * a.K + c] = hb[c];
}

/* the split's worker task: mini-batch n of (b, h) = bh from its saved start
 * state through to o */
template <int KPL, bool BF>
__device__ void fwd_out_task(const ttt_args &a, const fwd_bufs<float *> &s, int bh, int n, int *ready, bool first)
{
    const int K = a.K, bi = bh / a.H, h = bh % a.H, t0 = n * a.mb, m = min(a.mb, a.T - t0);
    const bool tc = a.tc && m % 16 == 0;
    const long long bn = bh * (long long)a.nmb + n;
    const fwd_rows r = fwd_rows_of(s, 0);
    fwd_start(a, s, h, first);
    fwd_load(a, r, bi, h, n, true);
    wait_flag(ready + bn);
    ld_state(s.W, a.ldw, a.Ws + bn * K * K, K);
    for (int c = threadIdx.x; c < K; c += blockDim.x) s.hb[c] = a.hbs[bn * K + c];
    rec_sync();
    fwd_products<TTT_FWD_SPLIT + TTT_BF * BF>(tc, a, s, r, m, true);
    __syncthreads();
    fwd_rows_phase<KPL, BF>(tc, a, s, r, s.hb, m, true);
    __syncthreads();
    fwd_update<TTT_FWD_SPLIT + TTT_BF * BF>(tc, a, s, r, s.hb, nullptr, m, true, false);
    __syncthreads();
    fwd_out_rows<KPL>(a, s, r, s.hb, bi, h, t0, m);
    __syncthreads();
}

/* the split: blocks 0 .. B H - 1 are the chains; the rest take mini-batches in order */
template <int KPL, bool BF>
__global__ void __launch_bounds__(TTT_THREADS, 1) ttt_fwd_split_kernel(ttt_args a, int *next, int *ready)
{
    extern __shared__ float sm[];
    __shared__ int task;
    const fwd_bufs<float *> s = fwd_bufs_of(sm, a);
    const int BH = a.B * a.H;
    if ((int)blockIdx.x < BH) return fwd_chain<KPL, BF>(a, s, blockIdx.x, ready);
    for (bool first = true;; first = false) {
        if (threadIdx.x == 0) task = atomicAdd(next, 1);
        __syncthreads();
        const int t = task;
        if (t >= BH * a.nmb) return;
        fwd_out_task<KPL, BF>(a, s, t % BH, t / BH, ready, first);
    }
}

/* ---- launchers ----------------------------------------------------------------- */

static const char *const plan_names[3] = {"fused", "split", "split overlapped"};

extern "C" void pr_ttt_linear_cuda_plan(int B, int T, int H, int mini_batch, pr_ttt_bwd bwd, char *line, size_t n)
{
    const ttt_plan p = plan_bwd(B, H, bwd);
    const long long bh = (long long)B * H, nmb = (T + mini_batch - 1) / mini_batch;
    const char *why = p.forced ? "forced" : p.kind != PLAN_FUSED ? "B H < 0.6 x SMs" : "B H >= 0.6 x SMs";
    if (p.kind == PLAN_FUSED) snprintf(line, n, "backward fused (%s, %d SMs): %lld blocks (one a (b, h))", why, p.n_sm, bh);
    else
        snprintf(line, n, "backward %s (%s, %d SMs): %lld local halves (one a mini-batch), %lld serial chains",
                 plan_names[p.kind], why, p.n_sm, bh * nmb, bh);
}

template <int KPL, bool BF>
static void launch_fwd(const ttt_args &a, cudaStream_t st, int *flags)
{
    const size_t bytes = fwd_bufs_of<size_t>(0, a).floats * sizeof(float);
    if (flags) return launch_coop(ttt_fwd_split_kernel<KPL, BF>, bytes, a, st, flags);
    ttt_smem((const void *)ttt_fwd_kernel<KPL, BF>, bytes, a);
    ttt_fwd_kernel<KPL, BF><<<a.B * a.H, TTT_THREADS, bytes, st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_ttt_linear_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    cudaStream_t st = pr_cuda_stream(ctx);
    ttt_args a = ttt_args_of(ctx, st, n);
    a.o = ttk_f32_out(ctx, n->out[0]), a.ht = (float *)n->out[1]->data, a.hbt = (float *)n->out[2]->data;
    if (n->n_saved == 2) a.Ws = (float *)n->saved[0]->data, a.hbs = (float *)n->saved[1]->data;
    /* split where the backward overlaps, and the states are saved anyway */
    int *flags = a.Ws && plan_bwd(a.B, a.H, (int)n->iarg[1]).kind == PLAN_OVERLAP ? coop_flags(ctx, st, a) : nullptr;
    if (ttt_bf(a, n)) launch_fwd<8, true>(a, st, flags);
    else if (a.K <= 32) launch_fwd<2, false>(a, st, flags);
    else if (a.K <= 64) launch_fwd<4, false>(a, st, flags);
    else launch_fwd<8, false>(a, st, flags);
    ttk_f32_done(st, n->out[0], a.o, false);
}
