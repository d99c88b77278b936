/* ops/ttt_mlp.cu: TTT-MLP on CUDA, f32, forward and backward.
 *
 * One block per (batch, head), sequential over mini-batches (the backward in
 * reverse), parallel inside one: a thread per output element of the small
 * matmuls, a warp per row for the LayerNorms (ops/ttt_kit.cuh). The four
 * inner weights (2 d N + N + d floats: 128 KiB at d = 64, N = 256), their
 * grads and the mini-batch's rows live in a per-block slice of a global
 * workspace, which stays in L2 at model sizes; correctness first, no shared
 * memory tiling yet. The phases follow ops/ttt_mlp.c (mb_recompute,
 * mb_forward, mb_backward), whose comment has the derivation; where the CPU
 * scatters into rows j from a loop over i, the kernel gathers instead (one
 * thread owns each written element), so no two threads write one address.
 */
#include "ops/ops.h"
#include "ops/ttt_kit.cuh"

struct mlp_args {
    const float *q, *k, *v, *w, *b, *eta, *w1, *b1, *w2, *b2;
    float *o, *out_w[4];                 /* forward outputs: o, w1t, b1t, w2t, b2t */
    float *sv[4];                        /* the weights at every mini-batch start [B,H,NMB,...] */
    const float *dout, *dwt[4];          /* upstream grads */
    float *dq, *dk, *dv, *deta, *dw0[4]; /* input grads, accumulated; NULL: not needed */
    float *dwp, *dbp;                    /* per-(b,h) partials of dw, db [B,H,K] */
    float *ws;                           /* workspace, ws_per floats per block */
    long long ws_per;
    int B, T, H, K, N, mb, nmb;
    float scale, eps;
};

/* one block's workspace; ttk_alloc with p = NULL only counts */
struct mlp_ws {
    float *W[4], *dW[4];                                                      /* W1 [K,N], b1 [N], W2 [N,K], b2 [K] */
    float *qs, *k, *v, *dout, *xz, *G, *gZ2, *Z2b, *xb, *dZ2b, *dk, *P2, *dgZ2, *dZ2, *dG; /* [mb,K] */
    float *Z1, *X2, *gp, *gpp, *gX2, *gZ1, *X2b, *gpb, *dZ1b, *dX2, *dgZ1, *dZ1, *dgX2, *P1; /* [mb,N] */
    float *eta, *sz, *sb, *pg, *A1, *A2, *D1, *D2, *dwp, *dbp;
};

__host__ __device__ static long long mlp_ws_layout(float *base, int K, int N, int mb, mlp_ws *s)
{
    ttk_alloc a = {base, 0};
    const long long sz[4] = {(long long)K * N, N, (long long)N * K, K};
    for (int i = 0; i < 4; i++) s->W[i] = a.take(sz[i]), s->dW[i] = a.take(sz[i]);
    float **kr[] = {&s->qs, &s->k, &s->v, &s->dout, &s->xz, &s->G, &s->gZ2, &s->Z2b, &s->xb, &s->dZ2b, &s->dk,
                    &s->P2, &s->dgZ2, &s->dZ2, &s->dG};
    float **nr[] = {&s->Z1, &s->X2, &s->gp, &s->gpp, &s->gX2, &s->gZ1, &s->X2b, &s->gpb, &s->dZ1b, &s->dX2,
                    &s->dgZ1, &s->dZ1, &s->dgX2, &s->P1};
    for (auto p : kr) *p = a.take((long long)mb * K);
    for (auto p : nr) *p = a.take((long long)mb * N);
    s->eta = a.take(mb), s->sz = a.take(mb), s->sb = a.take(mb), s->pg = a.take(mb);
    s->A1 = a.take(mb * mb), s->A2 = a.take(mb * mb), s->D1 = a.take(mb * mb), s->D2 = a.take(mb * mb);
    s->dwp = a.take(K), s->dbp = a.take(K);
    return a.used;
}

__device__ __forceinline__ long long mlp_row(const mlp_args &a, int bi, int h, int t)
{
    return ((long long)bi * a.T + t) * a.H + h;
}

/* qs, k, v, eta (and dout when given) of tokens [t0, t0+m) */
__device__ void mlp_gather(const mlp_args &a, const mlp_ws &s, int bi, int h, int t0, int m, const float *dout)
{
    const int K = a.K;
    TTK_FOR(idx, m * K) {
        const int i = idx / K, c = idx % K;
        const long long g = mlp_row(a, bi, h, t0 + i) * K + c;
        s.qs[idx] = a.scale * a.q[g], s.k[idx] = a.k[g], s.v[idx] = a.v[g];
        if (dout) s.dout[idx] = dout[g];
    }
    TTK_FOR(i, m) s.eta[i] = a.eta[mlp_row(a, bi, h, t0 + i)];
    __syncthreads();
}

/* mb_recompute of ops/ttt_mlp.c; Z1b - b1 goes to dZ1b */
__device__ void mlp_recompute(const mlp_args &a, const mlp_ws &s, const float *w, const float *b, int m)
{
    const int K = a.K, N = a.N;
    const float *W1 = s.W[0], *b1 = s.W[1], *W2 = s.W[2], *b2 = s.W[3];
    TTK_FOR(idx, m * N) { /* Z1, X2 = gelu(Z1) */
        const int j = idx / N, c = idx % N;
        float z = b1[c];
        for (int r = 0; r < K; r++) z += s.k[j * K + r] * W1[r * N + c];
        s.Z1[idx] = z, s.X2[idx] = ttk_gelu(z, s.gp + idx, s.gpp + idx);
    }
    __syncthreads();
    TTK_FOR(idx, m * K) { /* Z2 (into xz) */
        const int j = idx / K, c = idx % K;
        float z = b2[c];
        for (int r = 0; r < N; r++) z += s.X2[j * N + r] * W2[r * K + c];
        s.xz[idx] = z;
    }
    __syncthreads();
    TTK_FOR_ROWS(j, m)
        ttk_inner_grad(s.xz + j * K, w, b, s.v + j * K, s.k + j * K, K, a.eps, s.xz + j * K, s.sz + j, s.G + j * K,
                       s.gZ2 + j * K);
    __syncthreads();
    TTK_FOR(idx, m * N) { /* gX2 = gZ2 W2^T, gZ1 = gX2 gelu'(Z1) */
        const int j = idx / N, r = idx % N;
        float g = 0;
        for (int c = 0; c < K; c++) g += W2[r * K + c] * s.gZ2[j * K + c];
        s.gX2[idx] = g, s.gZ1[idx] = g * s.gp[idx];
    }
    TTK_FOR(p, m * m) { /* A1_ij = qs_i . k_j + 1 */
        const int i = p / m, j = p % m;
        float d = 1;
        for (int c = 0; c < K; c++) d += s.qs[i * K + c] * s.k[j * K + c];
        s.A1[p] = j <= i ? d : 0.f;
    }
    __syncthreads();
    TTK_FOR(idx, m * N) { /* Z1b, X2b = gelu(Z1b) */
        const int i = idx / N, c = idx % N;
        float z = 0;
        for (int r = 0; r < K; r++) z += s.qs[i * K + r] * W1[r * N + c];
        for (int j = 0; j <= i; j++) z -= s.eta[i] * s.A1[i * m + j] * s.gZ1[j * N + c];
        s.dZ1b[idx] = z, s.X2b[idx] = ttk_gelu(z + b1[c], s.gpb + idx, nullptr);
    }
    __syncthreads();
    TTK_FOR(p, m * m) { /* A2_ij = X2b_i . X2_j + 1 */
        const int i = p / m, j = p % m;
        float d = 1;
        for (int c = 0; c < N; c++) d += s.X2b[i * N + c] * s.X2[j * N + c];
        s.A2[p] = j <= i ? d : 0.f;
    }
    __syncthreads();
    TTK_FOR(idx, m * K) { /* Z2b */
        const int i = idx / K, c = idx % K;
        float z = b2[c];
        for (int r = 0; r < N; r++) z += s.X2b[i * N + r] * W2[r * K + c];
        for (int j = 0; j <= i; j++) z -= s.eta[i] * s.A2[i * m + j] * s.gZ2[j * K + c];
        s.Z2b[idx] = z;
    }
    __syncthreads();
    TTK_FOR_ROWS(i, m) {
        const float sb = ttk_ln(s.Z2b + i * K, s.xb + i * K, K, a.eps);
        if ((threadIdx.x & 31) == 0) s.sb[i] = sb;
    }
    __syncthreads();
}

/* W -= e sum_j (the gradient of token j): the end state of a mini-batch */
__device__ void mlp_step_weights(const mlp_args &a, const mlp_ws &s, int m)
{
    const int K = a.K, N = a.N;
    const float e = s.eta[m - 1];
    TTK_FOR(idx, K * N) {
        const int r = idx / N, c = idx % N;
        float g = 0;
        for (int j = 0; j < m; j++) g += s.k[j * K + r] * s.gZ1[j * N + c];
        s.W[0][idx] -= e * g;
    }
    TTK_FOR(idx, N * K) {
        const int r = idx / K, c = idx % K;
        float g = 0;
        for (int j = 0; j < m; j++) g += s.X2[j * N + r] * s.gZ2[j * K + c];
        s.W[2][idx] -= e * g;
    }
    TTK_FOR(c, N) {
        float g = 0;
        for (int j = 0; j < m; j++) g += s.gZ1[j * N + c];
        s.W[1][c] -= e * g;
    }
    TTK_FOR(c, K) {
        float g = 0;
        for (int j = 0; j < m; j++) g += s.gZ2[j * K + c];
        s.W[3][c] -= e * g;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(TTK_THREADS) mlp_fwd_kernel(mlp_args a)
{
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H, K = a.K, N = a.N;
    mlp_ws s;
    mlp_ws_layout(a.ws + bh * a.ws_per, K, N, a.mb, &s);
    const long long sz[4] = {(long long)K * N, N, (long long)N * K, K};
    const float *init[4] = {a.w1, a.b1, a.w2, a.b2};
    for (int i = 0; i < 4; i++) TTK_FOR(x, (int)sz[i]) s.W[i][x] = init[i] ? init[i][bh * sz[i] + x] : 0.f;
    const float *w = a.w + h * K, *b = a.b + h * K;
    __syncthreads();
    for (int n = 0; n < a.nmb; n++) {
        const int t0 = n * a.mb, m = min(a.mb, a.T - t0);
        if (a.sv[0])
            for (int i = 0; i < 4; i++) TTK_FOR(x, (int)sz[i]) a.sv[i][(bh * (long long)a.nmb + n) * sz[i] + x] = s.W[i][x];
        mlp_gather(a, s, bi, h, t0, m, nullptr);
        mlp_recompute(a, s, w, b, m);
        TTK_FOR(idx, m * K) {
            const int i = idx / K, c = idx % K;
            a.o[mlp_row(a, bi, h, t0 + i) * K + c] = s.Z2b[idx] + w[c] * s.xb[idx] + b[c];
        }
        mlp_step_weights(a, s, m);
    }
    for (int i = 0; i < 4; i++) TTK_FOR(x, (int)sz[i]) a.out_w[i][bh * sz[i] + x] = s.W[i][x];
}

/* ---- backward: mb_backward of ops/ttt_mlp.c as gathers ------------------------------ */

/* dZ2b, the output LayerNorm's dw, db partials, D2, P1, P2 */
__device__ void mlp_bwd_reads(const mlp_args &a, const mlp_ws &s, const float *w, int m)
{
    const int K = a.K, N = a.N;
    TTK_FOR(c, K) {
        float sw = 0, sb = 0;
        for (int i = 0; i < m; i++) sw += s.dout[i * K + c] * s.xb[i * K + c], sb += s.dout[i * K + c];
        s.dwp[c] += sw, s.dbp[c] += sb;
    }
    TTK_FOR_ROWS(i, m) {
        float *d = s.dZ2b + i * K;
        TTK_FOR_LANE(c, K) d[c] = w[c] * s.dout[i * K + c];
        __syncwarp();
        ttk_ln_back(s.xb + i * K, s.sb[i], d, K, d);
        TTK_FOR_LANE(c, K) d[c] += s.dout[i * K + c];
    }
    TTK_FOR(idx, m * N) { /* P1 = k dW1' + db1' */
        const int j = idx / N, c = idx % N;
        float p = s.dW[1][c];
        for (int r = 0; r < K; r++) p += s.k[j * K + r] * s.dW[0][r * N + c];
        s.P1[idx] = p;
    }
    TTK_FOR(idx, m * K) { /* P2 = X2 dW2' + db2' */
        const int j = idx / K, c = idx % K;
        float p = s.dW[3][c];
        for (int r = 0; r < N; r++) p += s.X2[j * N + r] * s.dW[2][r * K + c];
        s.P2[idx] = p;
    }
    __syncthreads();
    TTK_FOR(p, m * m) {
        const int i = p / m, j = p % m;
        float d = 0;
        for (int c = 0; c < K; c++) d += s.dZ2b[i * K + c] * s.gZ2[j * K + c];
        s.D2[p] = j <= i ? d : 0.f;
    }
    __syncthreads();
}

/* dZ1b (over Z1b - b1 in dZ1b), pg, D1, then dgZ1, dgZ2, dX2, dk, dq, deta */
__device__ void mlp_bwd_dual(const mlp_args &a, const mlp_ws &s, int bi, int h, int t0, int m)
{
    const int K = a.K, N = a.N;
    const float e = s.eta[m - 1];
    TTK_FOR(idx, m * N) {
        const int i = idx / N, r = idx % N;
        float d = 0;
        for (int c = 0; c < K; c++) d += s.W[2][r * K + c] * s.dZ2b[i * K + c];
        for (int j = 0; j <= i; j++) d -= s.eta[i] * s.D2[i * m + j] * s.X2[j * N + r];
        s.dZ1b[idx] = d * s.gpb[idx];
    }
    TTK_FOR_ROWS(j, m) {
        const float p = ttk_dot(s.P1 + j * N, s.gZ1 + j * N, N) + ttk_dot(s.P2 + j * K, s.gZ2 + j * K, K);
        if ((threadIdx.x & 31) == 0) s.pg[j] = p;
    }
    __syncthreads();
    TTK_FOR(p, m * m) {
        const int i = p / m, j = p % m;
        float d = 0;
        for (int c = 0; c < N; c++) d += s.dZ1b[i * N + c] * s.gZ1[j * N + c];
        s.D1[p] = j <= i ? d : 0.f;
    }
    __syncthreads();
    TTK_FOR(idx, m * N) {
        const int j = idx / N, c = idx % N;
        float g1 = -e * s.P1[idx], x2 = 0;
        for (int r = 0; r < K; r++) x2 -= e * s.dW[2][c * K + r] * s.gZ2[j * K + r];
        for (int i = j; i < m; i++) {
            g1 -= s.eta[i] * s.A1[i * m + j] * s.dZ1b[i * N + c];
            x2 -= s.eta[i] * s.D2[i * m + j] * s.X2b[i * N + c];
        }
        s.dgZ1[idx] = g1, s.dX2[idx] = x2;
    }
    TTK_FOR(idx, m * K) {
        const int j = idx / K, c = idx % K;
        float g2 = -e * s.P2[idx], dk = 0, dq = 0;
        for (int r = 0; r < N; r++) {
            dk -= e * s.dW[0][c * N + r] * s.gZ1[j * N + r];
            dq += s.W[0][c * N + r] * s.dZ1b[j * N + r];
        }
        for (int i = j; i < m; i++) {
            g2 -= s.eta[i] * s.A2[i * m + j] * s.dZ2b[i * K + c];
            dk -= s.eta[i] * s.D1[i * m + j] * s.qs[i * K + c];
        }
        for (int i = 0; i <= j; i++) dq -= s.eta[j] * s.D1[j * m + i] * s.k[i * K + c];
        s.dgZ2[idx] = g2, s.dk[idx] = dk;
        if (a.dq) a.dq[mlp_row(a, bi, h, t0 + j) * K + c] += a.scale * dq;
    }
    TTK_FOR(i, m) {
        float d = 0;
        for (int j = 0; j <= i; j++) d -= s.A1[i * m + j] * s.D1[i * m + j] + s.A2[i * m + j] * s.D2[i * m + j];
        if (i == m - 1)
            for (int j = 0; j < m; j++) d -= s.pg[j];
        if (a.deta) a.deta[mlp_row(a, bi, h, t0 + i)] += d;
    }
    __syncthreads();
}

/* the writing path, then the start state's grads */
__device__ void mlp_bwd_write(const mlp_args &a, const mlp_ws &s, const float *w, const float *b, int bi, int h,
                              int t0, int m)
{
    const int K = a.K, N = a.N;
    TTK_FOR(idx, m * N) {
        s.dgX2[idx] = s.dgZ1[idx] * s.gp[idx];
        s.dZ1[idx] = s.dgZ1[idx] * s.gX2[idx] * s.gpp[idx];
    }
    __syncthreads();
    TTK_FOR(idx, m * K) { /* dgZ2 += dgX2 W2 */
        const int j = idx / K, c = idx % K;
        float g = 0;
        for (int r = 0; r < N; r++) g += s.dgX2[j * N + r] * s.W[2][r * K + c];
        s.dgZ2[idx] += g;
    }
    __syncthreads();
    TTK_FOR_ROWS(j, m) {
        float *dv = a.dv ? a.dv + mlp_row(a, bi, h, t0 + j) * K : nullptr;
        ttk_inner_grad_back(s.xz + j * K, s.sz[j], s.G + j * K, s.gZ2 + j * K, s.dgZ2 + j * K, w, K, s.dG + j * K,
                            s.dZ2 + j * K, dv, s.dk + j * K);
    }
    __syncthreads();
    TTK_FOR(idx, m * N) { /* dX2 += dZ2 W2^T, dZ1 += dX2 gelu'(Z1) */
        const int j = idx / N, r = idx % N;
        float d = s.dX2[idx];
        for (int c = 0; c < K; c++) d += s.W[2][r * K + c] * s.dZ2[j * K + c];
        s.dZ1[idx] += d * s.gp[idx];
    }
    ttk_inner_dw_db(s.dG, s.xz, s.v, s.k, w, b, m, K, s.dwp, s.dbp);
    __syncthreads();
    TTK_FOR(idx, m * K) { /* dk += dZ1 W1^T */
        const int j = idx / K, c = idx % K;
        float d = s.dk[idx];
        for (int r = 0; r < N; r++) d += s.W[0][c * N + r] * s.dZ1[j * N + r];
        if (a.dk) a.dk[mlp_row(a, bi, h, t0 + j) * K + c] += d;
    }
    TTK_FOR(idx, K * N) {
        const int r = idx / N, c = idx % N;
        float g = 0;
        for (int j = 0; j < m; j++) g += s.k[j * K + r] * s.dZ1[j * N + c] + s.qs[j * K + r] * s.dZ1b[j * N + c];
        s.dW[0][idx] += g;
    }
    TTK_FOR(idx, N * K) {
        const int r = idx / K, c = idx % K;
        float g = 0;
        for (int j = 0; j < m; j++)
            g += s.dgX2[j * N + r] * s.gZ2[j * K + c] + s.X2[j * N + r] * s.dZ2[j * K + c] +
                 s.X2b[j * N + r] * s.dZ2b[j * K + c];
        s.dW[2][idx] += g;
    }
    TTK_FOR(c, N) {
        float g = 0;
        for (int j = 0; j < m; j++) g += s.dZ1[j * N + c] + s.dZ1b[j * N + c];
        s.dW[1][c] += g;
    }
    TTK_FOR(c, K) {
        float g = 0;
        for (int j = 0; j < m; j++) g += s.dZ2[j * K + c] + s.dZ2b[j * K + c];
        s.dW[3][c] += g;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(TTK_THREADS) mlp_bwd_kernel(mlp_args a)
{
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H, K = a.K, N = a.N;
    mlp_ws s;
    mlp_ws_layout(a.ws + bh * a.ws_per, K, N, a.mb, &s);
    const long long sz[4] = {(long long)K * N, N, (long long)N * K, K};
    for (int i = 0; i < 4; i++) TTK_FOR(x, (int)sz[i]) s.dW[i][x] = a.dwt[i] ? a.dwt[i][bh * sz[i] + x] : 0.f;
    TTK_FOR(c, K) s.dwp[c] = 0.f, s.dbp[c] = 0.f;
    const float *w = a.w + h * K, *b = a.b + h * K;
    for (int n = a.nmb - 1; n >= 0; n--) {
        const int t0 = n * a.mb, m = min(a.mb, a.T - t0);
        for (int i = 0; i < 4; i++) TTK_FOR(x, (int)sz[i]) s.W[i][x] = a.sv[i][(bh * (long long)a.nmb + n) * sz[i] + x];
        if (!a.dout) TTK_FOR(x, m * K) s.dout[x] = 0.f;
        mlp_gather(a, s, bi, h, t0, m, a.dout);
        mlp_recompute(a, s, w, b, m);
        mlp_bwd_reads(a, s, w, m);
        mlp_bwd_dual(a, s, bi, h, t0, m);
        mlp_bwd_write(a, s, w, b, bi, h, t0, m);
    }
    for (int i = 0; i < 4; i++)
        if (a.dw0[i]) TTK_FOR(x, (int)sz[i]) a.dw0[i][bh * sz[i] + x] += s.dW[i][x];
    TTK_FOR(c, K) a.dwp[(long long)bh * K + c] = s.dwp[c], a.dbp[(long long)bh * K + c] = s.dbp[c];
}

/* ---- launchers ------------------------------------------------------------------------ */

static mlp_args mlp_args_of(pr_ctx *ctx, cudaStream_t st, const pr_node *n)
{
    PR_CHECK(n->in[0]->dtype == PR_F32 || n->in[0]->dtype == PR_BF16,
             "ttt_mlp: CUDA computes f32 and bf16 data, not %s (run f64 on the CPU)", pr_dtype_name(n->in[0]->dtype));
    mlp_args a = {};
    a.q = ttk_f32_in(ctx, st, n->in[0]), a.k = ttk_f32_in(ctx, st, n->in[1]), a.v = ttk_f32_in(ctx, st, n->in[2]);
    a.w = ttk_in(n->in[3]), a.b = ttk_in(n->in[4]), a.eta = ttk_f32_in(ctx, st, n->in[5]);
    a.w1 = ttk_in(n->in[6]), a.b1 = ttk_in(n->in[7]), a.w2 = ttk_in(n->in[8]), a.b2 = ttk_in(n->in[9]);
    a.B = (int)n->in[0]->shape[0], a.T = (int)n->in[0]->shape[1], a.H = (int)n->in[0]->shape[2];
    a.K = (int)n->in[0]->shape[3], a.N = (int)n->in[6]->shape[3];
    a.mb = (int)n->iarg[0];
    a.nmb = (a.T + a.mb - 1) / a.mb;
    a.scale = (float)n->farg[0], a.eps = (float)n->farg[1];
    mlp_ws s;
    a.ws_per = mlp_ws_layout(nullptr, a.K, a.N, a.mb, &s);
    const int64_t wshape[2] = {(int64_t)a.B * a.H, a.ws_per};
    pr_tensor *ws = pr_empty(ctx->step, PR_F32, PR_CUDA, 2, wshape);
    a.ws = (float *)ws->data;
    if (n->n_saved == 4)
        for (int i = 0; i < 4; i++) a.sv[i] = (float *)n->saved[i]->data;
    return a;
}

extern "C" void pr_ttt_mlp_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    cudaStream_t st = pr_cuda_stream(ctx);
    mlp_args a = mlp_args_of(ctx, st, n);
    a.o = ttk_f32_out(ctx, n->out[0]);
    for (int i = 0; i < 4; i++) a.out_w[i] = (float *)n->out[1 + i]->data;
    mlp_fwd_kernel<<<a.B * a.H, TTK_THREADS, 0, st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
    ttk_f32_done(st, n->out[0], a.o, false);
}

extern "C" void pr_ttt_mlp_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    PR_CHECK(n->n_saved == 4, "ttt_mlp: backward without saved state");
    cudaStream_t st = pr_cuda_stream(ctx);
    mlp_args a = mlp_args_of(ctx, st, n);
    a.dout = ttk_f32_in(ctx, st, n->out[0]->grad);
    for (int i = 0; i < 4; i++) a.dwt[i] = ttk_in(n->out[1 + i]->grad), a.dw0[i] = ttk_grad(n, 6 + i);
    /* the kernel adds to the grads; a bf16 grad gets the sum in f32 scratch, added and rounded once */
    pr_tensor *gq = pr_in_grad(n, 0), *gk = pr_in_grad(n, 1), *gv = pr_in_grad(n, 2), *geta = pr_in_grad(n, 5);
    a.dq = ttk_f32_out(ctx, gq), a.dk = ttk_f32_out(ctx, gk), a.dv = ttk_f32_out(ctx, gv);
    a.deta = ttk_f32_out(ctx, geta);
    a.dwp = ttk_partials(ctx, a.B, a.H, a.K), a.dbp = ttk_partials(ctx, a.B, a.H, a.K);
    mlp_bwd_kernel<<<a.B * a.H, TTK_THREADS, 0, st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
    ttk_add_dw_db(st, n, a.dwp, a.dbp, a.B, a.H, a.K);
    ttk_f32_done(st, gq, a.dq, true), ttk_f32_done(st, gk, a.dk, true), ttk_f32_done(st, gv, a.dv, true);
    ttk_f32_done(st, geta, a.deta, true);
}
