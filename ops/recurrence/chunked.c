/* ops/recurrence/chunked.c: the chunked (chunk-parallel) forward of the
 * recurrence family, docs/PRISM.md "Chunked form with extra writes". It is
 * the blueprint of the CUDA kernels: each numbered step of chunk_forward is
 * one matrix product or one solve over a chunk of C tokens. It gives the
 * per-token form's results up to rounding (tested to 1e-12 in float64).
 *
 * Inside a chunk starting from state S, with G_t = sum_{s<=t} g_s
 * (chunk-local) and D_ti = exp(G_t - G_i):
 *   u_t = beta_t (v_t - e^{G_t} S^T k_t
 *                 - sum_{i<t} D_ti [(k_i.k_t) u_i + sum_l (kx_il.k_t) vx_il])
 *   o_t = scale (e^{G_t} S^T q_t + sum_{i<=t} D_ti [(k_i.q_t) u_i + sum_l (kx_il.q_t) vx_il])
 *   S'  = e^{G_last} S + sum_i D_last,i (k_i u_i^T + sum_l kx_il vx_il^T)
 * The u_t equations are a unit-lower-triangular system (I + A) U = R, with
 * A_ti = beta_t D_ti (k_i.k_t) for i < t, solved by forward substitution.
 * The extras enter R with a strictly-lower mask (they land after the delta
 * write of their own token) and the output with an inclusive mask. Without
 * beta (linattn, ssd) there is no solve: u_t = v_t.
 */
#include "ops/recurrence/recurrence_cpu.h"

#include <math.h>
#include <string.h>

typedef struct {
    double *G;    /* [C] chunk-local cumulative log-decay */
    double *A;    /* [C][C] key-key (then query-key) scores, decayed */
    double *X;    /* [C][C*L] key-extra (then query-extra) scores, decayed */
    double *U;    /* [C][V] the write values u_t */
    double *w;    /* [V] */
} chunk_work;

int64_t pr_rec_chunk_work(int C, int K, int V, int L)
{
    (void)K;
    return (int64_t)C + (int64_t)C * C + (int64_t)C * C * L + (int64_t)C * V + V;
}

/* Scores of the chunk's rows (x = k or q) against its keys and extra keys,
 * decayed and masked: A[t][i] = D_ti (k_i.x_t), X[t][i*L+l] = D_ti (kx_il.x_t)
 * for i < t (strict) or i <= t (inclusive); zero above the mask. */
static void chunk_scores(chunk_work *cw, const pr_rec_seq *s, const double *x, int64_t t0, int n, bool inclusive)
{
    const int K = s->K, L = s->L, C = n;
    for (int t = 0; t < C; t++) {
        const double *xt = x + (t0 + t) * s->sk;
        for (int i = 0; i < C; i++) {
            const bool in_mask = inclusive ? i <= t : i < t;
            const double D = in_mask ? exp(cw->G[t] - cw->G[i]) : 0.0;
            cw->A[t * C + i] = in_mask ? D * pr_rec_dot(s->k + (t0 + i) * s->sk, xt, K) : 0.0;
            for (int l = 0; l < L; l++)
                cw->X[(int64_t)t * C * L + i * L + l] =
                    in_mask ? D * pr_rec_dot(s->kx + (t0 + i) * s->skx + (int64_t)l * K, xt, K) : 0.0;
        }
    }
}

/* y_t += sum_i A[t][i] U_i + sum_{i,l} X[t][i*L+l] vx_il   (y: [n][V], stride V) */
static void apply_scores(double *y, const chunk_work *cw, const pr_rec_seq *s, int64_t t0, int n, int t)
{
    const int V = s->V, L = s->L;
    for (int i = 0; i < n; i++) {
        const double a = cw->A[t * n + i];
        if (a != 0.0)
            for (int j = 0; j < V; j++) y[j] += a * cw->U[(int64_t)i * V + j];
        for (int l = 0; l < L; l++) {
            const double x = cw->X[(int64_t)t * n * L + i * L + l];
            const double *vx = s->vx + (t0 + i) * s->svx + (int64_t)l * V;
            if (x != 0.0)
                for (int j = 0; j < V; j++) y[j] += x * vx[j];
        }
    }
}

/* One chunk of n tokens starting at token t0; S [K][V] is the state before
 * the chunk on entry and after it on return. */
static void chunk_forward(double *o, double *S, const pr_rec_seq *s, int64_t t0, int n, chunk_work *cw)
{
    const int K = s->K, V = s->V, L = s->L;

    /* 1. cumulative log-decay */
    for (int t = 0; t < n; t++) cw->G[t] = (t ? cw->G[t - 1] : 0.0) + (s->g ? s->g[(t0 + t) * s->sg] : 0.0);

    /* 2. the write values U */
    if (s->beta) {
        /* R_t = beta_t (v_t - e^{G_t} S^T k_t - sum_{i<t} D_ti (kx_il.k_t) vx_il), then
         * forward substitution: u_t = R_t - beta_t sum_{i<t} D_ti (k_i.k_t) u_i.
         * Row t only reads rows i < t of U, which are final by then. */
        chunk_scores(cw, s, s->k, t0, n, false);
        for (int t = 0; t < n; t++) {
            const double beta = s->beta[(t0 + t) * s->sg], eG = exp(cw->G[t]);
            const double *v = s->v + (t0 + t) * s->sv;
            double *u = cw->U + (int64_t)t * V;
            pr_rec_mtv(cw->w, S, s->k + (t0 + t) * s->sk, K, V);
            for (int j = 0; j < V; j++) cw->w[j] *= eG;
            apply_scores(cw->w, cw, s, t0, n, t);   /* w = (state before t's write)^T k_t */
            for (int j = 0; j < V; j++) u[j] = beta * (v[j] - cw->w[j]);
        }
    } else {
        for (int t = 0; t < n; t++) memcpy(cw->U + (int64_t)t * V, s->v + (t0 + t) * s->sv, (size_t)V * sizeof(double));
    }

    /* 3. outputs: the inter-chunk part (S) plus the intra-chunk part (inclusive mask) */
    chunk_scores(cw, s, s->q, t0, n, true);
    for (int t = 0; t < n; t++) {
        double *ot = o + (t0 + t) * s->sv;
        const double eG = exp(cw->G[t]);
        pr_rec_mtv(ot, S, s->q + (t0 + t) * s->sk, K, V);
        for (int j = 0; j < V; j++) ot[j] *= eG;
        apply_scores(ot, cw, s, t0, n, t);
        for (int j = 0; j < V; j++) ot[j] *= s->scale;
    }

    /* 4. the state at the chunk's end */
    const double Glast = cw->G[n - 1];
    for (int64_t i = 0; i < (int64_t)K * V; i++) S[i] *= exp(Glast);
    for (int i = 0; i < n; i++) {
        const double D = exp(Glast - cw->G[i]);
        pr_rec_outer(S, D, s->k + (t0 + i) * s->sk, cw->U + (int64_t)i * V, K, V);
        for (int l = 0; l < L; l++)
            pr_rec_outer(S, D, s->kx + (t0 + i) * s->skx + (int64_t)l * K, s->vx + (t0 + i) * s->svx + (int64_t)l * V,
                         K, V);
    }
}

void pr_rec_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work)
{
    const int64_t KV = (int64_t)s->K * s->V;
    chunk_work cw;
    cw.G = work;
    cw.A = cw.G + C;
    cw.X = cw.A + (int64_t)C * C;
    cw.U = cw.X + (int64_t)C * C * s->L;
    cw.w = cw.U + (int64_t)C * s->V;
    if (s->h0) memcpy(ht, s->h0, (size_t)KV * sizeof *ht);
    else memset(ht, 0, (size_t)KV * sizeof *ht);
    for (int64_t t0 = 0; t0 < s->T; t0 += C) {
        const int n = (int)(s->T - t0 < C ? s->T - t0 : C);
        memcpy(ckpt + (t0 / C) * KV, ht, (size_t)KV * sizeof *ht);
        chunk_forward(o, ht, s, t0, n, &cw);
    }
}
