/* ops/recurrence/chunked.c: the chunked (chunk-parallel) form of the
 * recurrence family, docs/PRISM.md "Chunked form with extra writes",
 * forward and backward. It is the blueprint of the CUDA kernels, written row
 * by row for clarity: intra() over a chunk's rows is a decayed, masked score
 * matrix (against the keys and the extra keys) times [U; VX]; chunk_values()
 * is the triangular solve by forward substitution; the backward's reverse
 * loop is the transposed solve. It gives the per-token form's results up to
 * rounding (tested to 1e-12 in float64).
 *
 * Inside a chunk starting from state S, with G_t = sum_{s<=t} g_s
 * (chunk-local), gamma_t = e^{G_t}, D_ti = e^{G_t - G_i}:
 *   W_t = gamma_t S^T k_t + sum_{i<t} D_ti [(k_i.k_t) u_i + sum_l (kx_il.k_t) vx_il]
 *   u_t = beta_t (v_t - W_t)                (u_t = v_t without beta)
 *   o_t = scale (gamma_t S^T q_t + sum_{i<=t} D_ti [(k_i.q_t) u_i + sum_l (kx_il.q_t) vx_il])
 *   S'  = gamma_last S + sum_i D_last,i (k_i u_i^T + sum_l kx_il vx_il^T)
 * W_t is the state just before token t's write, read at k_t. The u_t form a
 * unit-lower-triangular system (I + A) U = R, A_ti = beta_t D_ti (k_i.k_t)
 * for i < t, solved by forward substitution. The extras enter W with a
 * strictly-lower mask (they land after the delta write of their own token)
 * and the output with an inclusive mask.
 */
#include "ops/recurrence/recurrence_cpu.h"

#include <math.h>
#include <string.h>

/* ---- the chunk's values, shared by forward and backward -------------------------- */

typedef struct {
    int C;        /* the chunk length: Dm's row stride */
    int n;        /* tokens in this chunk (<= C) */
    int64_t t0;   /* its first token */
    double *G;    /* [C] chunk-local cumulative log-decay */
    double *U;    /* [C][V] the write values u_t */
    double *R;    /* [C][V] v_t - W_t (delta rules; the backward's d beta) */
    double *Dm;   /* [C][C] D_ti = e^{G_t - G_i} for i <= t: every pass reads it, one exp each */
    double *w;    /* [V] scratch */
} chunk;

/* token i's key, extra key l and extra value l */
static const double *key(const pr_rec_seq *s, const chunk *c, int i) { return s->k + (c->t0 + i) * s->sk; }
static const double *xkey(const pr_rec_seq *s, const chunk *c, int i, int l)
{
    return s->kx + (c->t0 + i) * s->skx + (int64_t)l * s->K;
}
static const double *xval(const pr_rec_seq *s, const chunk *c, int i, int l)
{
    return s->vx + (c->t0 + i) * s->svx + (int64_t)l * s->V;
}

/* y += sum over i < t (or i <= t: inclusive) of D_ti [(k_i.x) u_i + sum_l (kx_il.x) vx_il] */
static void intra(double *y, const pr_rec_seq *s, const chunk *c, const double *x, int t, bool inclusive)
{
    const int V = s->V;
    const double *Dt = c->Dm + (int64_t)t * c->C;
    for (int i = 0; i < (inclusive ? t + 1 : t); i++) {
        const double D = Dt[i];
        const double a = D * pr_rec_dot(key(s, c, i), x, s->K);
        for (int j = 0; j < V; j++) y[j] += a * c->U[(int64_t)i * V + j];
        for (int l = 0; l < s->L; l++) {
            const double ax = D * pr_rec_dot(xkey(s, c, i, l), x, s->K);
            const double *vx = xval(s, c, i, l);
            for (int j = 0; j < V; j++) y[j] += ax * vx[j];
        }
    }
}

/* G, then U (and R) of the chunk starting from state S. Row t of U only reads
 * rows i < t, final by then: this is the forward substitution. */
static void chunk_values(chunk *c, const double *S, const pr_rec_seq *s)
{
    const int K = s->K, V = s->V;
    for (int t = 0; t < c->n; t++)
        c->G[t] = (t ? c->G[t - 1] : 0.0) + (s->g ? s->g[(c->t0 + t) * s->sg] : 0.0);
    for (int t = 0; t < c->n; t++)
        for (int i = 0; i <= t; i++) c->Dm[(int64_t)t * c->C + i] = s->g ? exp(c->G[t] - c->G[i]) : 1.0;
    for (int t = 0; t < c->n; t++) {
        const double *v = s->v + (c->t0 + t) * s->sv;
        double *u = c->U + (int64_t)t * V, *r = c->R + (int64_t)t * V;
        if (!s->beta) {
            memcpy(u, v, (size_t)V * sizeof *u);
            continue;
        }
        const double beta = s->beta[(c->t0 + t) * s->sg], gam = exp(c->G[t]);
        pr_rec_mtv(c->w, S, key(s, c, t), K, V);
        for (int j = 0; j < V; j++) c->w[j] *= gam;
        intra(c->w, s, c, key(s, c, t), t, false);   /* w = W_t */
        for (int j = 0; j < V; j++) r[j] = v[j] - c->w[j], u[j] = beta * r[j];
    }
}

int64_t pr_rec_chunk_work(int C, int K, int V, int L)
{
    return (int64_t)C + 2 * (int64_t)C * V + (int64_t)C * C + V                /* chunk: G, U, R, Dm, w */
           + 2 * (int64_t)C * V + 2 * (int64_t)C + 2 * (int64_t)C * K + C       /* dU, dG, dV, dQ, dK, dB */
           + (int64_t)C * L * (K + V) + 2 * (int64_t)K * V + 2 * (int64_t)V + K; /* dKX, dVX, dS0, dS, e, y, f */
}

static chunk chunk_init(double *work, int C, int V)
{
    chunk c = {.C = C};
    c.G = work;
    c.U = c.G + C;
    c.R = c.U + (int64_t)C * V;
    c.Dm = c.R + (int64_t)C * V;
    c.w = c.Dm + (int64_t)C * C;
    return c;
}

/* ---- forward ------------------------------------------------------------------------ */

void pr_rec_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    chunk c = chunk_init(work, C, V);
    double *S = ht;   /* the running state lives in ht */
    if (s->h0) memcpy(S, s->h0, (size_t)KV * sizeof *S);
    else memset(S, 0, (size_t)KV * sizeof *S);
    for (c.t0 = 0; c.t0 < s->T; c.t0 += C) {
        c.n = (int)(s->T - c.t0 < C ? s->T - c.t0 : C);
        if (ckpt) memcpy(ckpt + (c.t0 / C) * KV, S, (size_t)KV * sizeof *S);
        chunk_values(&c, S, s);
        /* outputs: the inter-chunk part (S) plus the intra-chunk part */
        for (int t = 0; t < c.n; t++) {
            const double *q = s->q + (c.t0 + t) * s->sk, gam = exp(c.G[t]);
            double *ot = o + (c.t0 + t) * s->sv;
            pr_rec_mtv(ot, S, q, K, V);
            for (int j = 0; j < V; j++) ot[j] *= gam;
            intra(ot, s, &c, q, t, true);
            for (int j = 0; j < V; j++) ot[j] *= s->scale;
        }
        /* the state at the chunk's end */
        const double gl = exp(c.G[c.n - 1]);
        for (int64_t i = 0; i < KV; i++) S[i] *= gl;
        for (int i = 0; i < c.n; i++) {
            const double D = c.Dm[(int64_t)(c.n - 1) * C + i];
            pr_rec_outer(S, D, key(s, &c, i), c.U + (int64_t)i * V, K, V);
            for (int l = 0; l < s->L; l++) pr_rec_outer(S, D, xkey(s, &c, i, l), xval(s, &c, i, l), K, V);
        }
    }
}

/* ---- backward -------------------------------------------------------------------------
 * Chunks in reverse; each recomputes its G, U, R from its saved start state S,
 * takes dS' (the gradient of its end state) and leaves dS (of its start
 * state). Every line of the forward, differentiated (x_t the token's row):
 *  S' = gl S + sum_i Dl_i a_i, a_i = k_i u_i^T + sum_l kx_il vx_il^T:
 *     dS += gl dS';  dG_last += gl <S, dS'>;  dk_i += Dl_i dS' u_i;
 *     du_i += Dl_i dS'^T k_i;  dkx_il += Dl_i dS' vx_il;  dvx_il += Dl_i dS'^T kx_il;
 *     dDl_i = <dS', a_i>, and dD_ti feeds dG_t += D_ti dD_ti, dG_i -= D_ti dD_ti.
 *  y_t = gamma_t S^T x_t + sum_i D_ti [(k_i.x_t) u_i + sum_l (kx_il.x_t) vx_il],
 *  for y = o/scale (x = q, i <= t) and y = W (x = k, i < t), given dy_t:
 *     dS += gamma_t x_t dy_t^T;  dx_t += gamma_t S dy_t;  dG_t += gamma_t <S^T x_t, dy_t>;
 *     du_i += D_ti (k_i.x_t) dy_t;  dx_t += D_ti <u_i,dy_t> k_i;  dk_i += D_ti <u_i,dy_t> x_t;
 *     likewise for (kx_il, vx_il);  dD_ti = (k_i.x_t)<u_i,dy_t> + sum_l (kx_il.x_t)<vx_il,dy_t>.
 *  u_t = beta_t (v_t - W_t): dv_t += beta_t du_t; dbeta_t += <du_t, v_t - W_t>;
 *     dW_t = -beta_t du_t. Walking t downwards, du_t is complete when t is
 *     reached (only later rows read u_t): the transposed solve.
 *  G_t = sum_{s<=t} g_s:  dg_s = sum_{t>=s} dG_t.
 */

typedef struct {
    double *dU, *dG, *dV, *dQ, *dK, *dB, *dKX, *dVX;   /* chunk-local, [C][...] like the inputs */
    double *dS0;                                       /* [K][V] gradient of the chunk's start state */
    double *e, *y, *f;                                 /* [V], [V], [K] scratch */
} chunk_grads;

/* the y_t rule above, for row t with input row x_t (gradient row dx_t), dy_t given */
static void read_backward(chunk_grads *cg, const pr_rec_seq *s, const chunk *c, const double *S, const double *x,
                          double *dx, const double *dy, int t, bool inclusive)
{
    const int K = s->K, V = s->V, L = s->L;
    const double gam = exp(c->G[t]);
    pr_rec_outer(cg->dS0, gam, x, dy, K, V);
    for (int i = 0; i < K; i++) dx[i] += gam * pr_rec_dot(S + (int64_t)i * V, dy, V);
    pr_rec_mtv(cg->e, S, x, K, V);
    cg->dG[t] += gam * pr_rec_dot(cg->e, dy, V);
    const double *Dt = c->Dm + (int64_t)t * c->C;
    for (int i = 0; i < (inclusive ? t + 1 : t); i++) {
        const double D = Dt[i];
        const double *ki = key(s, c, i), *ui = c->U + (int64_t)i * V;
        const double a = pr_rec_dot(ki, x, K), cu = pr_rec_dot(ui, dy, V);
        double dD = a * cu;
        for (int j = 0; j < V; j++) cg->dU[(int64_t)i * V + j] += D * a * dy[j];
        for (int j = 0; j < K; j++) dx[j] += D * cu * ki[j], cg->dK[(int64_t)i * K + j] += D * cu * x[j];
        for (int l = 0; l < L; l++) {
            const double *kx = xkey(s, c, i, l), *vx = xval(s, c, i, l);
            const double ax = pr_rec_dot(kx, x, K), cx = pr_rec_dot(vx, dy, V);
            double *dkx = cg->dKX + ((int64_t)i * L + l) * K, *dvx = cg->dVX + ((int64_t)i * L + l) * V;
            dD += ax * cx;
            for (int j = 0; j < V; j++) dvx[j] += D * ax * dy[j];
            for (int j = 0; j < K; j++) dx[j] += D * cx * kx[j], dkx[j] += D * cx * x[j];
        }
        cg->dG[t] += D * dD;
        cg->dG[i] -= D * dD;
    }
}

/* the S' rule above, dS = dS' */
static void state_backward(chunk_grads *cg, const pr_rec_seq *s, const chunk *c, const double *S, const double *dS)
{
    const int K = s->K, V = s->V, L = s->L, last = c->n - 1;
    const int64_t KV = (int64_t)K * V;
    const double gl = exp(c->G[last]);
    for (int64_t i = 0; i < KV; i++) cg->dS0[i] += gl * dS[i];
    cg->dG[last] += gl * pr_rec_dot(S, dS, KV);
    for (int i = 0; i < c->n; i++) {
        const double D = c->Dm[(int64_t)last * c->C + i];
        /* each rank-1 term a b^T of a_i: da = D dS' b, db = D dS'^T a, dDl_i += a.(dS' b) */
        double dD = 0;
        for (int l = -1; l < L; l++) {
            const double *a = l < 0 ? key(s, c, i) : xkey(s, c, i, l);
            const double *b = l < 0 ? c->U + (int64_t)i * V : xval(s, c, i, l);
            double *da = l < 0 ? cg->dK + (int64_t)i * K : cg->dKX + ((int64_t)i * L + l) * K;
            double *db = l < 0 ? cg->dU + (int64_t)i * V : cg->dVX + ((int64_t)i * L + l) * V;
            for (int j = 0; j < K; j++) cg->f[j] = pr_rec_dot(dS + (int64_t)j * V, b, V);
            dD += pr_rec_dot(a, cg->f, K);
            for (int j = 0; j < K; j++) da[j] += D * cg->f[j];
            pr_rec_mtv(cg->e, dS, a, K, V);
            for (int j = 0; j < V; j++) db[j] += D * cg->e[j];
        }
        cg->dG[last] += D * dD;
        cg->dG[i] -= D * dD;
    }
}

/* dst[t*stride + j] += src[t*n + j] for the chunk's rows; dst NULL: not needed */
static void flush(double *dst, int64_t stride, const double *src, int rows, int64_t n)
{
    if (!dst) return;
    for (int t = 0; t < rows; t++)
        for (int64_t j = 0; j < n; j++) dst[t * stride + j] += src[t * n + j];
}

/* one chunk: cg->dS0 receives the gradient of its start state S, dS is that of its end state */
static void chunk_backward(const pr_rec_grads *d, chunk_grads *cg, const pr_rec_seq *s, const chunk *c,
                           const double *S, const double *dS, const double *dout)
{
    const int K = s->K, V = s->V, L = s->L, n = c->n;
    const int64_t t0 = c->t0;
    memset(cg->dS0, 0, sizeof(double) * (size_t)K * V);
    memset(cg->dU, 0, sizeof(double) * (size_t)(cg->dS0 - cg->dU));   /* dU .. dVX */
    state_backward(cg, s, c, S, dS);
    for (int t = 0; t < n; t++) {   /* the outputs, o_t = scale y_t */
        for (int j = 0; j < V; j++) cg->y[j] = s->scale * dout[(t0 + t) * s->sv + j];
        read_backward(cg, s, c, S, s->q + (t0 + t) * s->sk, cg->dQ + (int64_t)t * K, cg->y, t, true);
    }
    for (int t = n - 1; t >= 0; t--) {   /* the write values, the transposed solve */
        const double *du = cg->dU + (int64_t)t * V;
        double *dv = cg->dV + (int64_t)t * V;
        if (!s->beta) {
            for (int j = 0; j < V; j++) dv[j] += du[j];
            continue;
        }
        const double beta = s->beta[(t0 + t) * s->sg];
        cg->dB[t] += pr_rec_dot(du, c->R + (int64_t)t * V, V);
        for (int j = 0; j < V; j++) dv[j] += beta * du[j], cg->y[j] = -beta * du[j];
        read_backward(cg, s, c, S, key(s, c, t), cg->dK + (int64_t)t * K, cg->y, t, false);
    }
    if (d->dg) {   /* G_t = sum_{s<=t} g_s */
        double acc = 0;
        for (int t = n - 1; t >= 0; t--) acc += cg->dG[t], d->dg[(t0 + t) * s->sg] += acc;
    }
    flush(d->dq ? d->dq + t0 * s->sk : NULL, s->sk, cg->dQ, n, K);
    flush(d->dk ? d->dk + t0 * s->sk : NULL, s->sk, cg->dK, n, K);
    flush(d->dv ? d->dv + t0 * s->sv : NULL, s->sv, cg->dV, n, V);
    if (s->beta) flush(d->dbeta ? d->dbeta + t0 * s->sg : NULL, s->sg, cg->dB, n, 1);
    if (L) {
        flush(d->dkx ? d->dkx + t0 * s->skx : NULL, s->skx, cg->dKX, n, (int64_t)L * K);
        flush(d->dvx ? d->dvx + t0 * s->svx : NULL, s->svx, cg->dVX, n, (int64_t)L * V);
    }
}

void pr_rec_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                             const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V, L = s->L;
    const int64_t KV = (int64_t)K * V;
    chunk c = chunk_init(work, C, V);
    chunk_grads cg;   /* carved after the chunk's buffers; dU..dVX contiguous (cleared as one) */
    cg.dU = c.w + V;
    cg.dG = cg.dU + (int64_t)C * V;
    cg.dV = cg.dG + C;
    cg.dQ = cg.dV + (int64_t)C * V;
    cg.dK = cg.dQ + (int64_t)C * K;
    cg.dB = cg.dK + (int64_t)C * K;
    cg.dKX = cg.dB + C;
    cg.dVX = cg.dKX + (int64_t)C * L * K;
    cg.dS0 = cg.dVX + (int64_t)C * L * V;
    cg.e = cg.dS0 + KV;
    cg.y = cg.e + V;
    cg.f = cg.y + V;
    double *dS = cg.f + K;   /* gradient of the current chunk's end state */
    if (dht) memcpy(dS, dht, (size_t)KV * sizeof *dS);
    else memset(dS, 0, (size_t)KV * sizeof *dS);
    for (int64_t b = pr_rec_nckpt(s->T, C) - 1; b >= 0; b--) {
        c.t0 = b * C;
        c.n = (int)(s->T - c.t0 < C ? s->T - c.t0 : C);
        chunk_values(&c, ckpt + b * KV, s);
        chunk_backward(d, &cg, s, &c, ckpt + b * KV, dS, dout);
        memcpy(dS, cg.dS0, (size_t)KV * sizeof *dS);
    }
    if (d->dh0)
        for (int64_t i = 0; i < KV; i++) d->dh0[i] += dS[i];
}
