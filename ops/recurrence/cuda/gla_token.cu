/* ops/recurrence/cuda/gla_token.cu: the per-key-decay rule (gla) in the per-token
 * form on CUDA: h = diag(exp(g_t)) h + k_t v_t^T, o_t = scale h^T q_t, with
 * g [rows, H, K]. A correct, serial-in-time path so that the rule runs on the
 * GPU; the chunked tensor-core form is not written yet.
 *
 * A block owns (sequence, head, 32 columns of the state); warp w owns columns
 * 4w..4w+3 of them and lane l holds entries l, l+32, ... of each column's K
 * entries in registers (KPT of them), so a column's dot product with q or k
 * is a warp butterfly. Three kernels:
 *   fwd   forward time from h0: o, ht; with do given instead (backward) it
 *         rebuilds the same states for dq_t = scale h_t do_t;
 *   rev   reverse time from dht: dH <- dH + scale q_t do_t^T, then
 *         dk_t = dH v_t, dv_t = dH^T k_t, dH <- diag(exp(g_t)) dH; dh0 = dH;
 *   dg    per key channel: G_t = sum_{s<=t} g_s scales every term of o_t by
 *         exp(G_t) and every write of k_t by exp(-G_t), so
 *         dG_t = q_t o dq_t - k_t o dk_t (+ ht o dht summed over columns at
 *         the last token) and dg_s = sum_{t>=s} dG_t, a reverse scan.
 * Sums over columns (dq, dk) go through shared memory in a fixed order into
 * per-32-column partials, added in slice order by a last kernel:
 * deterministic, no atomics, like recurrent.cu. dg needs this node's own dq
 * and dk (the grads accumulate onto other nodes' contributions), so they are
 * summed into scratch first and added to the grads after dg is formed.
 * Under very strong decays the dg scan subtracts terms far larger than its
 * result; the CPU forms have no such cancellation (chunked_gla.c).
 *
 * With a per-value decay (p.gv, g [rows, H, V]; gated slot attention's first
 * pass) column j scales by exp(g_t[j]): a column's decay is one scalar of the
 * lane's warp, the kernels are otherwise the same (template GV), and dg is
 * scanned per value channel: G_t scales o_t[j] by exp(G_t[j]) and the write
 * of v_t[j] by exp(-G_t[j]), so dG_t[j] = o_t[j] do_t[j] - v_t[j] dv_t[j]
 * (+ column j of ht o dht at the last token). rev writes those terms (its own
 * dv, before it is added to the grad) into scratch.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

#define GLA_CPW 4                        /* columns per warp */
#define GLA_VS (GLA_CPW * PR_REC_WARPS)  /* columns per block */

__device__ __forceinline__ float gla_warp_sum(float x)
{
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* red [PR_REC_WARPS][K]: each warp's partial over its columns; summed in warp
 * order into part (this block's slice) at element base + i */
__device__ __forceinline__ void gla_reduce_rows(float *red, int K, float *part, long long base)
{
    __syncthreads();
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
        float s = 0.f;
        for (int w = 0; w < PR_REC_WARPS; w++) s += red[w * K + i];
        part[base + i] = s;
    }
    __syncthreads();
}

/* forward time. dq_part == nullptr: writes o and ht. Else (backward): reads
 * do and writes this block's column slice of dq into dq_part. */
template <int KPT, bool GV>
__global__ void __launch_bounds__(PR_REC_THREADS) gla_fwd_kernel(rec_prob p, float *o, float *ht, float *dq_part,
                                                                 long long part_n)
{
    extern __shared__ float red[];   /* [PR_REC_WARPS][K] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y, n = blockIdx.z, H = p.H, K = p.K, V = p.V;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const int j0 = blockIdx.x * GLA_VS + warp * GLA_CPW;
    float st[GLA_CPW][KPT];
    for (int c = 0; c < GLA_CPW; c++)
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m, j = j0 + c;
            st[c][m] = p.h0 && i < K && j < V ? p.h0[(((long long)n * H + h) * K + i) * V + j] : 0.f;
        }
    for (int t = 0; t < sq.len; t++) {
        const long long r = (long long)(sq.bos + t) * H + h;
        float qi[KPT], ki[KPT], ai[KPT];
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m;
            qi[m] = i < K ? p.q[r * K + i] : 0.f;
            ki[m] = i < K ? p.k[r * K + i] : 0.f;
            ai[m] = !GV && i < K ? expf(p.g[r * K + i]) : 0.f;
        }
        float dqs[KPT] = {};
        for (int c = 0; c < GLA_CPW; c++) {
            const int j = j0 + c;
            const float vj = j < V ? p.v[r * V + j] : 0.f;
            const float aj = GV && j < V ? expf(p.g[r * V + j]) : 0.f;
            float acc = 0.f;
            for (int m = 0; m < KPT; m++) {
                st[c][m] = (GV ? aj : ai[m]) * st[c][m] + ki[m] * vj;
                acc += st[c][m] * qi[m];
            }
            if (!dq_part) {
                acc = gla_warp_sum(acc);
                if (lane == 0 && j < V) o[r * V + j] = p.scale * acc;
            } else {
                const float dj = j < V ? p.scale * p.dout[r * V + j] : 0.f;
                for (int m = 0; m < KPT; m++) dqs[m] += st[c][m] * dj;
            }
        }
        if (dq_part) {
            for (int m = 0; m < KPT; m++)
                if (lane + 32 * m < K) red[warp * K + lane + 32 * m] = dqs[m];
            gla_reduce_rows(red, K, dq_part, blockIdx.x * part_n + r * K);
        }
    }
    if (dq_part) return;
    for (int c = 0; c < GLA_CPW; c++)
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m, j = j0 + c;
            if (i < K && j < V) ht[(((long long)n * H + h) * K + i) * V + j] = st[c][m];
        }
}

/* reverse time: dk (column slices into dk_part), dv and dh0 (accumulated);
 * GV with dgt: the per-value dG terms o_t[j] do_t[j] - v_t[j] dv_t[j] (o: the forward's) */
template <int KPT, bool GV>
__global__ void __launch_bounds__(PR_REC_THREADS) gla_rev_kernel(rec_prob p, rec_grads d, float *dk_part,
                                                                 long long part_n, const float *o, float *dgt)
{
    extern __shared__ float red[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y, n = blockIdx.z, H = p.H, K = p.K, V = p.V;
    const rec_seq_pos sq = rec_seq_of(p, n);
    const int j0 = blockIdx.x * GLA_VS + warp * GLA_CPW;
    float dh[GLA_CPW][KPT];
    for (int c = 0; c < GLA_CPW; c++)
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m, j = j0 + c;
            dh[c][m] = p.dht && i < K && j < V ? p.dht[(((long long)n * H + h) * K + i) * V + j] : 0.f;
        }
    for (int t = sq.len - 1; t >= 0; t--) {
        const long long r = (long long)(sq.bos + t) * H + h;
        float qi[KPT], ki[KPT], ai[KPT], dks[KPT] = {};
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m;
            qi[m] = i < K ? p.scale * p.q[r * K + i] : 0.f;
            ki[m] = i < K ? p.k[r * K + i] : 0.f;
            ai[m] = !GV && i < K ? expf(p.g[r * K + i]) : 0.f;
        }
        for (int c = 0; c < GLA_CPW; c++) {
            const int j = j0 + c;
            const float doj = j < V ? p.dout[r * V + j] : 0.f, vj = j < V ? p.v[r * V + j] : 0.f;
            const float aj = GV && j < V ? expf(p.g[r * V + j]) : 0.f;
            float dvj = 0.f;
            for (int m = 0; m < KPT; m++) {
                dh[c][m] += qi[m] * doj;   /* the gradient of h_t, whole */
                dks[m] += dh[c][m] * vj;
                dvj += dh[c][m] * ki[m];
                dh[c][m] *= GV ? aj : ai[m];   /* now that of h_{t-1} */
            }
            dvj = gla_warp_sum(dvj);
            if (d.dv && lane == 0 && j < V) d.dv[r * V + j] += dvj;
            if (GV && dgt && lane == 0 && j < V) dgt[r * V + j] = o[r * V + j] * doj - vj * dvj;
        }
        if (d.dk || (!GV && d.dg)) {
            for (int m = 0; m < KPT; m++)
                if (lane + 32 * m < K) red[warp * K + lane + 32 * m] = dks[m];
            gla_reduce_rows(red, K, dk_part, blockIdx.x * part_n + r * K);
        }
    }
    if (!d.dh0) return;
    for (int c = 0; c < GLA_CPW; c++)
        for (int m = 0; m < KPT; m++) {
            const int i = lane + 32 * m, j = j0 + c;
            if (i < K && j < V) d.dh0[(((long long)n * H + h) * K + i) * V + j] += dh[c][m];
        }
}

/* out[e] = sum over slices of part[s * n + e] */
__global__ void gla_sum_slices_kernel(float *out, const float *part, long long n, int ns)
{
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
        float s = 0.f;
        for (int i = 0; i < ns; i++) s += part[i * n + e];
        out[e] = s;
    }
}

/* one thread per (sequence, head, key channel): the reverse scan of dG */
__global__ void gla_dg_kernel(rec_prob p, float *dg, const float *dq, const float *dk, const float *ht)
{
    const long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)p.N * p.H * p.K) return;
    const int i = (int)(e % p.K), h = (int)(e / p.K % p.H), n = (int)(e / ((long long)p.K * p.H));
    const rec_seq_pos sq = rec_seq_of(p, n);
    float acc = 0.f;
    if (p.dht) {
        const long long s0 = (((long long)n * p.H + h) * p.K + i) * p.V;
        for (int j = 0; j < p.V; j++) acc += ht[s0 + j] * p.dht[s0 + j];
    }
    for (int t = sq.len - 1; t >= 0; t--) {
        const long long x = ((long long)(sq.bos + t) * p.H + h) * p.K + i;
        acc += p.q[x] * dq[x] - p.k[x] * dk[x];
        dg[x] += acc;
    }
}

/* one thread per (sequence, head, value channel): the reverse scan of a
 * per-value dG, whose terms rev wrote into dgt */
__global__ void gla_dgv_kernel(rec_prob p, float *dg, const float *dgt, const float *ht)
{
    const long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)p.N * p.H * p.V) return;
    const int j = (int)(e % p.V), h = (int)(e / p.V % p.H), n = (int)(e / ((long long)p.V * p.H));
    const rec_seq_pos sq = rec_seq_of(p, n);
    float acc = 0.f;
    if (p.dht) {
        const long long s0 = ((long long)n * p.H + h) * p.K * p.V + j;
        for (int i = 0; i < p.K; i++) acc += ht[s0 + (long long)i * p.V] * p.dht[s0 + (long long)i * p.V];
    }
    for (int t = sq.len - 1; t >= 0; t--) {
        const long long x = ((long long)(sq.bos + t) * p.H + h) * p.V + j;
        acc += dgt[x];
        dg[x] += acc;
    }
}

__global__ void gla_add_kernel(float *dst, const float *src, long long n)
{
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x)
        dst[e] += src[e];
}

/* ---- launchers ---------------------------------------------------------------------- */

static int gla_kpt(int K)
{
    PR_CHECK(K <= 256, "recurrence: CUDA kernels support K <= 256, got K = %d", K);
    return K <= 32 ? 1 : K <= 64 ? 2 : K <= 128 ? 4 : 8;
}

#define GLA_DISPATCH_KPT(KER, GV, grid, smem, s, ...)                                                   \
    do {                                                                                                \
        switch (gla_kpt(p.K)) {                                                                         \
        case 1: KER<1, GV><<<grid, PR_REC_THREADS, smem, s>>>(__VA_ARGS__); break;                      \
        case 2: KER<2, GV><<<grid, PR_REC_THREADS, smem, s>>>(__VA_ARGS__); break;                      \
        case 4: KER<4, GV><<<grid, PR_REC_THREADS, smem, s>>>(__VA_ARGS__); break;                      \
        default: KER<8, GV><<<grid, PR_REC_THREADS, smem, s>>>(__VA_ARGS__); break;                     \
        }                                                                                               \
    } while (0)
/* KER<KPT, GV> for p's K and decay axis */
#define GLA_DISPATCH(KER, grid, smem, s, ...)                                                           \
    do {                                                                                                \
        if (p.gv) GLA_DISPATCH_KPT(KER, true, grid, smem, s, __VA_ARGS__);                              \
        else GLA_DISPATCH_KPT(KER, false, grid, smem, s, __VA_ARGS__);                                  \
        PR_CUDA_LAUNCH_CHECK();                                                                         \
    } while (0)

void pr_rec_gla_token_forward(cudaStream_t s, const rec_prob &p, float *o, float *ht)
{
    const dim3 grid((p.V + GLA_VS - 1) / GLA_VS, p.H, p.N);
    GLA_DISPATCH(gla_fwd_kernel, grid, 0, s, p, o, ht, (float *)nullptr, 0LL);
}

void pr_rec_gla_token_backward(cudaStream_t s, const rec_prob &p, const rec_grads &d, const float *o,
                               const float *ht)
{
    const int ns = (p.V + GLA_VS - 1) / GLA_VS;
    const long long rows = p.seq ? (long long)p.T : (long long)p.N * p.T, nk = rows * p.H * p.K, nv = rows * p.H * p.V;
    const dim3 grid(ns, p.H, p.N);
    const size_t smem = sizeof(float) * PR_REC_WARPS * (size_t)p.K;
    /* dg of a per-key decay reads this node's dq and dk; of a per-value one, rev's dgt */
    const bool want_dq = d.dq || (d.dg && !p.gv), want_dk = d.dk || (d.dg && !p.gv);
    float *part = rec_scratch((size_t)(ns * nk));
    float *dq = want_dq ? rec_scratch((size_t)nk) : nullptr, *dk = want_dk ? rec_scratch((size_t)nk) : nullptr;
    float *dgt = d.dg && p.gv ? rec_scratch((size_t)nv) : nullptr;
    const unsigned nb = pr_cuda_blocks(nk, 256);
    if (want_dq) {
        GLA_DISPATCH(gla_fwd_kernel, grid, smem, s, p, (float *)nullptr, (float *)nullptr, part, nk);
        gla_sum_slices_kernel<<<nb, 256, 0, s>>>(dq, part, nk, ns);
        PR_CUDA_LAUNCH_CHECK();
    }
    /* dv and dh0 always; dk into part; the per-value dG terms into dgt */
    GLA_DISPATCH(gla_rev_kernel, grid, smem, s, p, d, part, nk, o, dgt);
    if (want_dk) {
        gla_sum_slices_kernel<<<nb, 256, 0, s>>>(dk, part, nk, ns);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (d.dg && !p.gv) {
        gla_dg_kernel<<<pr_cuda_blocks((long long)p.N * p.H * p.K, 128), 128, 0, s>>>(p, d.dg, dq, dk, ht);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (dgt) {
        gla_dgv_kernel<<<pr_cuda_blocks((long long)p.N * p.H * p.V, 128), 128, 0, s>>>(p, d.dg, dgt, ht);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (d.dq) {
        gla_add_kernel<<<nb, 256, 0, s>>>(d.dq, dq, nk);
        PR_CUDA_LAUNCH_CHECK();
    }
    if (d.dk) {
        gla_add_kernel<<<nb, 256, 0, s>>>(d.dk, dk, nk);
        PR_CUDA_LAUNCH_CHECK();
    }
    rec_scratch_free(part, (size_t)(ns * nk));
    if (dq) rec_scratch_free(dq, (size_t)nk);
    if (dk) rec_scratch_free(dk, (size_t)nk);
    if (dgt) rec_scratch_free(dgt, (size_t)nv);
}
