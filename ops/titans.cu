/* ops/titans.cu: Titans' linear memory on CUDA, f32, forward and backward.
 *
 * One block per (batch, head), sequential over chunks (the backward in
 * reverse). Inside a chunk the inner gradients are parallel (a warp per
 * row), then the token-by-token update of S and M is a thread per element
 * of the d x d matrices with one barrier per token. The memory and momentum
 * before every token of the chunk, the chunk's rows and the grads of M and S
 * live in a per-block slice of a global workspace (ops/ttt_kit.cuh). The
 * phases and the derivation are those of ops/titans.c (chunk_recompute,
 * chunk_backward).
 */
#include "ops/ops.h"
#include "ops/ttt_kit.cuh"

struct ti_args {
    const float *q, *k, *v, *w, *b, *theta, *alpha, *eta, *h0, *s0;
    float *o, *ht, *st;                       /* forward outputs */
    float *Msv, *Ssv;                         /* M, S at every chunk start [B,H,NC,K,K] */
    const float *dout, *dht, *dst;            /* upstream grads */
    float *dq, *dk, *dv, *dtheta, *dalpha, *deta, *dh0, *ds0; /* input grads, accumulated */
    float *dwp, *dbp;                         /* per-(b,h) partials of dw, db [B,H,K] */
    float *ws;
    long long ws_per;
    int B, T, H, K, ch, nc;
    float eps;
};

struct ti_ws {
    float *Mh, *Sh, *dM, *dS;                                     /* Mh, Sh [(ch+1),K,K]: before token t at t */
    float *q, *k, *v, *dout, *xz, *G, *gZ, *O, *xo, *dO, *dk, *dgZ, *dZ, *dG; /* [ch,K] */
    float *theta, *alpha, *eta, *sz, *so, *dSg, *dwp, *dbp;
};

__host__ __device__ static long long ti_ws_layout(float *base, int K, int ch, ti_ws *s)
{
    ttk_alloc a = {base, 0};
    const long long KK = (long long)K * K;
    s->Mh = a.take((ch + 1) * KK), s->Sh = a.take((ch + 1) * KK), s->dM = a.take(KK), s->dS = a.take(KK);
    float **rows[] = {&s->q, &s->k, &s->v, &s->dout, &s->xz, &s->G, &s->gZ, &s->O, &s->xo, &s->dO, &s->dk,
                      &s->dgZ, &s->dZ, &s->dG};
    for (auto p : rows) *p = a.take((long long)ch * K);
    s->theta = a.take(ch), s->alpha = a.take(ch), s->eta = a.take(ch), s->sz = a.take(ch), s->so = a.take(ch);
    s->dSg = a.take(K), s->dwp = a.take(K), s->dbp = a.take(K);
    return a.used;
}

__device__ __forceinline__ long long ti_row(const ti_args &a, int bi, int h, int t)
{
    return ((long long)bi * a.T + t) * a.H + h;
}

__device__ void ti_gather(const ti_args &a, const ti_ws &s, int bi, int h, int t0, int m)
{
    const int K = a.K;
    TTK_FOR(idx, m * K) {
        const int i = idx / K, c = idx % K;
        const long long g = ti_row(a, bi, h, t0 + i) * K + c;
        s.q[idx] = a.q[g], s.k[idx] = a.k[g], s.v[idx] = a.v[g];
        s.dout[idx] = a.dout ? a.dout[g] : 0.f;
    }
    TTK_FOR(i, m) {
        const long long r = ti_row(a, bi, h, t0 + i);
        s.theta[i] = a.theta[r], s.alpha[i] = a.alpha[r], s.eta[i] = a.eta[r];
    }
    __syncthreads();
}

/* chunk_recompute of ops/titans.c: from Mh[0], Sh[0], the inner gradients,
 * Mh[t+1], Sh[t+1], O_t = q_t M_t, its normalized xo (scale so) */
__device__ void ti_recompute(const ti_args &a, const ti_ws &s, const float *w, const float *b, int m)
{
    const int K = a.K, KK = K * K;
    TTK_FOR(idx, m * K) {
        const int j = idx / K, c = idx % K;
        float z = 0;
        for (int r = 0; r < K; r++) z += s.k[j * K + r] * s.Mh[r * K + c];
        s.xz[idx] = z;
    }
    __syncthreads();
    TTK_FOR_ROWS(j, m)
        ttk_inner_grad(s.xz + j * K, w, b, s.v + j * K, s.k + j * K, K, a.eps, s.xz + j * K, s.sz + j, s.G + j * K,
                       s.gZ + j * K);
    __syncthreads();
    for (int t = 0; t < m; t++) {
        const float *M0 = s.Mh + t * KK, *S0 = s.Sh + t * KK;
        float *M1 = s.Mh + (t + 1) * KK, *S1 = s.Sh + (t + 1) * KK;
        const float th2 = -2 * s.theta[t], al = s.alpha[t], et = s.eta[t];
        TTK_FOR(idx, KK) {
            const int r = idx / K, c = idx % K;
            const float sv = et * S0[idx] + th2 * s.k[t * K + r] * s.gZ[t * K + c];
            S1[idx] = sv, M1[idx] = (1 - al) * M0[idx] + sv;
        }
        __syncthreads();
        TTK_FOR(c, K) {
            float o = 0;
            for (int r = 0; r < K; r++) o += s.q[t * K + r] * M1[r * K + c];
            s.O[t * K + c] = o;
        }
    }
    __syncthreads();
    TTK_FOR_ROWS(t, m) {
        const float so = ttk_ln(s.O + t * K, s.xo + t * K, K, a.eps);
        if ((threadIdx.x & 31) == 0) s.so[t] = so;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(TTK_THREADS) ti_fwd_kernel(ti_args a)
{
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H, K = a.K, KK = K * K;
    ti_ws s;
    ti_ws_layout(a.ws + bh * a.ws_per, K, a.ch, &s);
    const float *w = a.w + h * K, *b = a.b + h * K;
    TTK_FOR(x, KK) {
        s.Mh[x] = a.h0 ? a.h0[(long long)bh * KK + x] : 0.f;
        s.Sh[x] = a.s0 ? a.s0[(long long)bh * KK + x] : 0.f;
    }
    __syncthreads();
    for (int n = 0; n < a.nc; n++) {
        const int t0 = n * a.ch, m = min(a.ch, a.T - t0);
        if (a.Msv)
            TTK_FOR(x, KK) {
                a.Msv[(bh * (long long)a.nc + n) * KK + x] = s.Mh[x];
                a.Ssv[(bh * (long long)a.nc + n) * KK + x] = s.Sh[x];
            }
        ti_gather(a, s, bi, h, t0, m);
        ti_recompute(a, s, w, b, m);
        TTK_FOR(idx, m * K) {
            const int i = idx / K, c = idx % K;
            a.o[ti_row(a, bi, h, t0 + i) * K + c] = s.O[idx] + w[c] * s.xo[idx] + b[c];
        }
        TTK_FOR(x, KK) s.Mh[x] = s.Mh[m * KK + x], s.Sh[x] = s.Sh[m * KK + x];
        __syncthreads();
    }
    TTK_FOR(x, KK) a.ht[(long long)bh * KK + x] = s.Mh[x], a.st[(long long)bh * KK + x] = s.Sh[x];
}

/* one token of chunk_backward, in reverse (t = m-1 .. 0) */
__device__ void ti_bwd_token(const ti_args &a, const ti_ws &s, int bi, int h, int t0, int t)
{
    const int K = a.K, KK = K * K;
    const float *M1 = s.Mh + (t + 1) * KK, *M0 = s.Mh + t * KK, *S0 = s.Sh + t * KK;
    const long long row = ti_row(a, bi, h, t0 + t);
    TTK_FOR(r, K) { /* dq = dO M_t^T */
        float d = 0;
        for (int c = 0; c < K; c++) d += M1[r * K + c] * s.dO[t * K + c];
        if (a.dq) a.dq[row * K + r] += d;
    }
    TTK_FOR(idx, KK) { /* dM += q^T dO; dS += dM */
        const int r = idx / K, c = idx % K;
        const float dm = s.dM[idx] + s.q[t * K + r] * s.dO[t * K + c];
        s.dM[idx] = dm, s.dS[idx] += dm;
    }
    __syncthreads();
    float pa = 0, pe = 0;
    TTK_FOR(idx, KK) pa += M0[idx] * s.dM[idx], pe += S0[idx] * s.dS[idx];
    TTK_FOR(r, K) {
        float d = 0;
        for (int c = 0; c < K; c++) d += s.dS[r * K + c] * s.gZ[t * K + c];
        s.dSg[r] = d;
    }
    const float th2 = -2 * s.theta[t];
    TTK_FOR(c, K) {
        float d = 0;
        for (int r = 0; r < K; r++) d += s.k[t * K + r] * s.dS[r * K + c];
        s.dgZ[t * K + c] = th2 * d;
    }
    pa = ttk_block_sum(pa), pe = ttk_block_sum(pe); /* these synchronize the block */
    __syncthreads();
    if (threadIdx.x < 32) {
        const float dth = -2 * ttk_dot(s.k + t * K, s.dSg, K);
        if (threadIdx.x == 0) {
            if (a.dalpha) a.dalpha[row] += -pa;
            if (a.deta) a.deta[row] += pe;
            if (a.dtheta) a.dtheta[row] += dth;
        }
    }
    TTK_FOR(r, K) s.dk[t * K + r] = th2 * s.dSg[r];
    const float al = s.alpha[t], et = s.eta[t];
    TTK_FOR(idx, KK) s.dM[idx] *= 1 - al, s.dS[idx] *= et;
    __syncthreads();
}

__global__ void __launch_bounds__(TTK_THREADS) ti_bwd_kernel(ti_args a)
{
    const int bh = blockIdx.x, bi = bh / a.H, h = bh % a.H, K = a.K, KK = K * K;
    ti_ws s;
    ti_ws_layout(a.ws + bh * a.ws_per, K, a.ch, &s);
    const float *w = a.w + h * K, *b = a.b + h * K;
    TTK_FOR(x, KK) {
        s.dM[x] = a.dht ? a.dht[(long long)bh * KK + x] : 0.f;
        s.dS[x] = a.dst ? a.dst[(long long)bh * KK + x] : 0.f;
    }
    TTK_FOR(c, K) s.dwp[c] = 0.f, s.dbp[c] = 0.f;
    for (int n = a.nc - 1; n >= 0; n--) {
        const int t0 = n * a.ch, m = min(a.ch, a.T - t0);
        TTK_FOR(x, KK) {
            s.Mh[x] = a.Msv[(bh * (long long)a.nc + n) * KK + x];
            s.Sh[x] = a.Ssv[(bh * (long long)a.nc + n) * KK + x];
        }
        ti_gather(a, s, bi, h, t0, m);
        ti_recompute(a, s, w, b, m);
        TTK_FOR(c, K) { /* the output LayerNorm's dw, db */
            float sw = 0, sb = 0;
            for (int t = 0; t < m; t++) sw += s.dout[t * K + c] * s.xo[t * K + c], sb += s.dout[t * K + c];
            s.dwp[c] += sw, s.dbp[c] += sb;
        }
        TTK_FOR_ROWS(t, m) { /* dO = do + LNback(xo, so, w do) */
            float *d = s.dO + t * K;
            TTK_FOR_LANE(c, K) d[c] = w[c] * s.dout[t * K + c];
            __syncwarp();
            ttk_ln_back(s.xo + t * K, s.so[t], d, K, d);
            TTK_FOR_LANE(c, K) d[c] += s.dout[t * K + c];
        }
        __syncthreads();
        for (int t = m - 1; t >= 0; t--) ti_bwd_token(a, s, bi, h, t0, t);
        TTK_FOR_ROWS(j, m) {
            float *dv = a.dv ? a.dv + ti_row(a, bi, h, t0 + j) * K : nullptr;
            ttk_inner_grad_back(s.xz + j * K, s.sz[j], s.G + j * K, s.gZ + j * K, s.dgZ + j * K, w, K, s.dG + j * K,
                                s.dZ + j * K, dv, s.dk + j * K);
        }
        __syncthreads();
        TTK_FOR(idx, m * K) { /* dk += dZ Mc^T */
            const int j = idx / K, r = idx % K;
            float d = s.dk[idx];
            for (int c = 0; c < K; c++) d += s.Mh[r * K + c] * s.dZ[j * K + c];
            if (a.dk) a.dk[ti_row(a, bi, h, t0 + j) * K + r] += d;
        }
        TTK_FOR(idx, KK) { /* dM += k^T dZ */
            const int r = idx / K, c = idx % K;
            float d = 0;
            for (int j = 0; j < m; j++) d += s.k[j * K + r] * s.dZ[j * K + c];
            s.dM[idx] += d;
        }
        ttk_inner_dw_db(s.dG, s.xz, s.v, s.k, w, b, m, K, s.dwp, s.dbp);
        __syncthreads();
    }
    TTK_FOR(x, KK) {
        if (a.dh0) a.dh0[(long long)bh * KK + x] += s.dM[x];
        if (a.ds0) a.ds0[(long long)bh * KK + x] += s.dS[x];
    }
    TTK_FOR(c, K) a.dwp[(long long)bh * K + c] = s.dwp[c], a.dbp[(long long)bh * K + c] = s.dbp[c];
}

/* ---- launchers ------------------------------------------------------------------------ */

static ti_args ti_args_of(pr_ctx *ctx, const pr_node *n)
{
    pr_cuda_check_f32(n);
    ti_args a = {};
    const float **in[10] = {&a.q, &a.k, &a.v, &a.w, &a.b, &a.theta, &a.alpha, &a.eta, &a.h0, &a.s0};
    for (int i = 0; i < 10; i++) *in[i] = ttk_in(n->in[i]);
    a.B = (int)n->in[0]->shape[0], a.T = (int)n->in[0]->shape[1], a.H = (int)n->in[0]->shape[2];
    a.K = (int)n->in[0]->shape[3];
    a.ch = (int)n->iarg[0];
    a.nc = (a.T + a.ch - 1) / a.ch;
    a.eps = (float)n->farg[0];
    ti_ws s;
    a.ws_per = ti_ws_layout(nullptr, a.K, a.ch, &s);
    const int64_t wshape[2] = {(int64_t)a.B * a.H, a.ws_per};
    a.ws = (float *)pr_empty(ctx->step, PR_F32, PR_CUDA, 2, wshape)->data;
    if (n->n_saved == 2) a.Msv = (float *)n->saved[0]->data, a.Ssv = (float *)n->saved[1]->data;
    return a;
}

extern "C" void pr_titans_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    ti_args a = ti_args_of(ctx, n);
    a.o = (float *)n->out[0]->data, a.ht = (float *)n->out[1]->data, a.st = (float *)n->out[2]->data;
    ti_fwd_kernel<<<a.B * a.H, TTK_THREADS, 0, pr_cuda_stream(ctx)>>>(a);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_titans_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    PR_CHECK(n->n_saved == 2, "titans: backward without saved state");
    ti_args a = ti_args_of(ctx, n);
    a.dout = ttk_in(n->out[0]->grad), a.dht = ttk_in(n->out[1]->grad), a.dst = ttk_in(n->out[2]->grad);
    a.dq = ttk_grad(n, 0), a.dk = ttk_grad(n, 1), a.dv = ttk_grad(n, 2), a.dtheta = ttk_grad(n, 5);
    a.dalpha = ttk_grad(n, 6), a.deta = ttk_grad(n, 7), a.dh0 = ttk_grad(n, 8), a.ds0 = ttk_grad(n, 9);
    a.dwp = ttk_partials(ctx, a.B, a.H, a.K), a.dbp = ttk_partials(ctx, a.B, a.H, a.K);
    cudaStream_t st = pr_cuda_stream(ctx);
    ti_bwd_kernel<<<a.B * a.H, TTK_THREADS, 0, st>>>(a);
    PR_CUDA_LAUNCH_CHECK();
    ttk_add_dw_db(st, n, a.dwp, a.dbp, a.B, a.H, a.K);
}
