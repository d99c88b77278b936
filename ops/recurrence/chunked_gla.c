/* ops/recurrence/chunked_gla.c: the chunked form of the per-key-decay rule
 * (gla: h = diag(exp(g_t)) h + k_t v_t^T, o_t = scale h^T q_t), forward and
 * backward, one (sequence, head) pair per call (recurrence_cpu.h).
 *
 * Inside a chunk starting from state S, with G_t = sum_{s<=t} g_s per key
 * channel (chunk-local) and E_ti = exp(G_t - G_i) elementwise (i <= t):
 *   o_t = scale (S^T (exp(G_t) o q_t) + sum_{i<=t} A_ti v_i),
 *         A_ti = sum_c q_t[c] k_i[c] E_ti[c]
 *   S'  = diag(exp(G_last)) S + sum_i (exp(G_last - G_i) o k_i) v_i^T
 * Every exponent is a decay from an earlier token to a later one of the same
 * chunk (or from the chunk start), so with log-decays <= 0 every factor lies
 * in (0, 1]: strong decays underflow to 0 as they should, nothing overflows.
 * (The factored form exp(G_t) exp(-G_i) that matrix products want overflows
 * once a chunk's log-decays sum past ~700.) E_ti is factored by sub-chunks
 * of GLA_SUB tokens, as fla's chunk_gla does: with r the first token of t's
 * sub-chunk, E_ti = exp(G_t - G_r) exp(G_r - G_i) for i < r (both factors in
 * (0, 1]; the K-side one is shared by every row of the sub-chunk), and
 * exp(G_t - G_i) itself for i, t in one sub-chunk. That takes about
 * (1 + C/GLA_SUB / 2 + GLA_SUB / 2) exps per token and key channel instead
 * of C/2.
 *
 * Backward, given dS' (the end state's gradient) and dO (do of the chunk):
 *   dS     = diag(exp(G_last)) dS' + scale sum_t (exp(G_t) o q_t) dO_t^T
 *   dq_t  += scale exp(G_t) o (S dO_t) + sum_{i<=t} dA_ti E_ti o k_i,
 *            dA_ti = scale <dO_t, v_i>
 *   dk_i  += sum_{t>=i} dA_ti E_ti o q_t + exp(G_last - G_i) o (dS' v_i)
 *   dv_i  += scale sum_{t>=i} A_ti dO_t + dS'^T (exp(G_last - G_i) o k_i)
 *   dG_t  += each term's derivative: +x for a factor exp(G_t ...), -x for
 *            exp(... - G_i), x the term itself per channel. A token's own
 *            write (i = t, and i = last in S') has E = 1 exactly and gives
 *            nothing: it is left out, not added and subtracted, since under
 *            strong decays dg is tiny and the rounding of x - x would swamp it
 *   dg_s   = sum_{t>=s} dG_t (G is the cumulative sum of g).
 */
#include <math.h>
#include <string.h>

#include "ops/recurrence/recurrence_cpu.h"

enum { GLA_SUB = 16 };   /* tokens a sub-chunk */

typedef struct {
    int n;        /* tokens in this chunk */
    int64_t t0;   /* its first token */
    int W;        /* decay channels: K (per-key decay) or V (per-value) */
    double *G;    /* [C][W] chunk-local cumulative log-decays */
    double *Qf;   /* [C][W] exp(G_t - G_r(t)), r(t) the first token of t's sub-chunk */
    double *Kf;   /* [nsub][C][W] exp(G_r - G_i) for sub-chunk b starting at r and tokens i < r */
} gla_chunk;

static const double *row(const double *x, int64_t stride, const gla_chunk *c, int t)
{
    return x + (c->t0 + t) * stride;
}

static int n_sub(int C) { return (C + GLA_SUB - 1) / GLA_SUB; }

/* G, and the sub-chunk factors Qf, Kf of the decays E_ti (see the top) */
static void cumulative_decays(gla_chunk *c, const pr_rec_seq *s)
{
    const int K = c->W;
    for (int t = 0; t < c->n; t++) {
        const double *g = row(s->g, s->sg, c, t);
        double *G = c->G + (int64_t)t * K;
        for (int i = 0; i < K; i++) G[i] = (t ? G[i - K] : 0.0) + g[i];
    }
    for (int t = 0; t < c->n; t++) {
        const double *Gt = c->G + (int64_t)t * K, *Gr = c->G + (int64_t)(t / GLA_SUB * GLA_SUB) * K;
        for (int ch = 0; ch < K; ch++) c->Qf[(int64_t)t * K + ch] = exp(Gt[ch] - Gr[ch]);
    }
    for (int r = GLA_SUB; r < c->n; r += GLA_SUB) {
        const double *Gr = c->G + (int64_t)r * K;
        double *Kf = c->Kf + (int64_t)(r / GLA_SUB) * c->n * K;
        for (int i = 0; i < r; i++)
            for (int ch = 0; ch < K; ch++) Kf[(int64_t)i * K + ch] = exp(Gr[ch] - c->G[(int64_t)i * K + ch]);
    }
}

/* E_ti on channel ch (i <= t) */
static inline double decay_ti(const gla_chunk *c, int t, int i, int ch)
{
    const int r = t / GLA_SUB * GLA_SUB, K = c->W;
    if (i >= r) return exp(c->G[(int64_t)t * K + ch] - c->G[(int64_t)i * K + ch]);
    return c->Qf[(int64_t)t * K + ch] * c->Kf[((int64_t)(r / GLA_SUB) * c->n + i) * K + ch];
}

/* the chunk's buffers at the start of work */
static gla_chunk chunk_init(double *work, int C, int K)
{
    gla_chunk c = {.W = K, .G = work};
    c.Qf = c.G + (int64_t)C * K;
    c.Kf = c.Qf + (int64_t)C * K;
    return c;
}
static int64_t chunk_doubles(int C, int K) { return (2 + (int64_t)n_sub(C)) * C * K; }

int64_t pr_rec_gla_chunk_work(int C, int K, int V)
{
    const int W = K > V ? K : V;   /* either decay axis */
    return chunk_doubles(C, W)     /* G, Qf, Kf */
           + (int64_t)C * W        /* dG */
           + 2 * (int64_t)K * V    /* dS (end of the chunk), dS0 (its start) */
           + 3 * (int64_t)W;       /* b, f, e: [K] or [V] each */
}

/* ---- forward ----------------------------------------------------------------------------- */

static void gk_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    gla_chunk c = chunk_init(work, C, K);
    double *b = work + chunk_doubles(C, K);   /* [K] a decayed query or key */
    double *S = ht;                      /* the running state lives in ht */
    if (s->h0) memcpy(S, s->h0, (size_t)KV * sizeof *S);
    else memset(S, 0, (size_t)KV * sizeof *S);
    for (c.t0 = 0; c.t0 < s->T; c.t0 += C) {
        c.n = (int)(s->T - c.t0 < C ? s->T - c.t0 : C);
        if (ckpt) memcpy(ckpt + (c.t0 / C) * KV, S, (size_t)KV * sizeof *S);
        cumulative_decays(&c, s);
        for (int t = 0; t < c.n; t++) {
            const double *q = row(s->q, s->sk, &c, t), *Gt = c.G + (int64_t)t * K;
            double *ot = o + (c.t0 + t) * s->sv;
            for (int i = 0; i < K; i++) b[i] = q[i] * exp(Gt[i]);
            pr_rec_mtv(ot, S, b, K, V);                      /* the state before the chunk */
            for (int i = 0; i <= t; i++) {                   /* the chunk's own writes */
                const double *k = row(s->k, s->sk, &c, i), *v = row(s->v, s->sv, &c, i);
                double A = 0;
                for (int ch = 0; ch < K; ch++) A += q[ch] * k[ch] * decay_ti(&c, t, i, ch);
                for (int j = 0; j < V; j++) ot[j] += A * v[j];
            }
            for (int j = 0; j < V; j++) ot[j] *= s->scale;
        }
        const double *GL = c.G + (int64_t)(c.n - 1) * K;
        for (int i = 0; i < K; i++) {
            const double a = exp(GL[i]);
            for (int j = 0; j < V; j++) S[(int64_t)i * V + j] *= a;
        }
        for (int i = 0; i < c.n; i++) {
            const double *k = row(s->k, s->sk, &c, i), *Gi = c.G + (int64_t)i * K;
            for (int ch = 0; ch < K; ch++) b[ch] = k[ch] * exp(GL[ch] - Gi[ch]);
            pr_rec_outer(S, 1.0, b, row(s->v, s->sv, &c, i), K, V);
        }
    }
}

/* ---- backward ---------------------------------------------------------------------------- */

typedef struct {
    double *dG;    /* [C][K] */
    double *dS0;   /* [K][V] the chunk start state's gradient */
    double *b, *f, *e;
} gla_scratch;

/* the terms through the chunk's start state S: o_t's inter-chunk part and S' = diag(exp(G_last)) S + ... */
static void start_state_backward(const pr_rec_grads *d, gla_scratch *w, const pr_rec_seq *s, const gla_chunk *c,
                                 const double *S, const double *dS, const double *dout)
{
    const int K = s->K, V = s->V;
    const double *GL = c->G + (int64_t)(c->n - 1) * K;
    double *dGL = w->dG + (int64_t)(c->n - 1) * K;
    for (int i = 0; i < K; i++) {
        const double a = exp(GL[i]);
        const double *Si = S + (int64_t)i * V, *dSi = dS + (int64_t)i * V;
        double *dS0i = w->dS0 + (int64_t)i * V;
        for (int j = 0; j < V; j++) dS0i[j] = a * dSi[j];
        dGL[i] += a * pr_rec_dot(Si, dSi, V);
    }
    for (int t = 0; t < c->n; t++) {
        const double *q = row(s->q, s->sk, c, t), *Gt = c->G + (int64_t)t * K;
        const double *dot_ = dout + (c->t0 + t) * s->sv;
        double *dG = w->dG + (int64_t)t * K;
        for (int i = 0; i < K; i++) {
            const double a = s->scale * exp(Gt[i]);
            const double sd = a * pr_rec_dot(S + (int64_t)i * V, dot_, V);   /* scale exp(G_t) (S dO_t) */
            if (d->dq) d->dq[(c->t0 + t) * s->sk + i] += sd;
            dG[i] += q[i] * sd;
            double *dS0i = w->dS0 + (int64_t)i * V;
            for (int j = 0; j < V; j++) dS0i[j] += a * q[i] * dot_[j];
        }
    }
}

/* the chunk's writes read by its own outputs: the pairs i <= t */
static void intra_backward(const pr_rec_grads *d, gla_scratch *w, const pr_rec_seq *s, const gla_chunk *c,
                           const double *dout)
{
    const int K = s->K, V = s->V;
    for (int t = 0; t < c->n; t++) {
        const double *q = row(s->q, s->sk, c, t);
        const double *dot_ = dout + (c->t0 + t) * s->sv;
        for (int i = 0; i <= t; i++) {
            const double *k = row(s->k, s->sk, c, i), *v = row(s->v, s->sv, c, i);
            const double dA = s->scale * pr_rec_dot(dot_, v, V);
            double A = 0;
            for (int ch = 0; ch < K; ch++) {
                const double E = decay_ti(c, t, i, ch), x = dA * q[ch] * k[ch] * E;
                A += q[ch] * k[ch] * E;
                if (d->dq) d->dq[(c->t0 + t) * s->sk + ch] += dA * k[ch] * E;
                if (d->dk) d->dk[(c->t0 + i) * s->sk + ch] += dA * q[ch] * E;
                if (i < t) w->dG[(int64_t)t * K + ch] += x, w->dG[(int64_t)i * K + ch] -= x;   /* E_tt = 1 */
            }
            if (d->dv)
                for (int j = 0; j < V; j++) d->dv[(c->t0 + i) * s->sv + j] += s->scale * A * dot_[j];
        }
    }
}

/* the chunk's writes into its end state: S' += (exp(G_last - G_i) o k_i) v_i^T */
static void end_state_backward(const pr_rec_grads *d, gla_scratch *w, const pr_rec_seq *s, const gla_chunk *c,
                               const double *dS)
{
    const int K = s->K, V = s->V, last = c->n - 1;
    const double *GL = c->G + (int64_t)last * K;
    for (int i = 0; i < c->n; i++) {
        const double *k = row(s->k, s->sk, c, i), *v = row(s->v, s->sv, c, i), *Gi = c->G + (int64_t)i * K;
        for (int ch = 0; ch < K; ch++) {
            w->b[ch] = exp(GL[ch] - Gi[ch]);
            w->f[ch] = pr_rec_dot(dS + (int64_t)ch * V, v, V);   /* dS' v_i */
            const double x = w->b[ch] * k[ch] * w->f[ch];
            if (d->dk) d->dk[(c->t0 + i) * s->sk + ch] += w->b[ch] * w->f[ch];
            if (i < last) w->dG[(int64_t)last * K + ch] += x, w->dG[(int64_t)i * K + ch] -= x;
            w->b[ch] *= k[ch];
        }
        if (d->dv) {
            pr_rec_mtv(w->e, dS, w->b, K, V);
            for (int j = 0; j < V; j++) d->dv[(c->t0 + i) * s->sv + j] += w->e[j];
        }
    }
}

static void gk_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                                 const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    gla_chunk c = chunk_init(work, C, K);
    gla_scratch w;
    w.dG = work + chunk_doubles(C, K);
    double *dS = w.dG + (int64_t)C * K;   /* gradient of the current chunk's end state */
    w.dS0 = dS + KV;
    w.b = w.dS0 + KV;   /* b, f, e: K each here (the work has room for max(K, V)) */
    w.f = w.b + K;
    w.e = w.f + K;
    if (dht) memcpy(dS, dht, (size_t)KV * sizeof *dS);
    else memset(dS, 0, (size_t)KV * sizeof *dS);
    for (int64_t ci = pr_rec_nckpt(s->T, C) - 1; ci >= 0; ci--) {
        c.t0 = ci * C;
        c.n = (int)(s->T - c.t0 < C ? s->T - c.t0 : C);
        cumulative_decays(&c, s);
        memset(w.dG, 0, sizeof(double) * (size_t)C * K);
        start_state_backward(d, &w, s, &c, ckpt + ci * KV, dS, dout);
        intra_backward(d, &w, s, &c, dout);
        end_state_backward(d, &w, s, &c, dS);
        if (d->dg)   /* G_t = sum_{s<=t} g_s, per channel */
            for (int ch = 0; ch < K; ch++) {
                double acc = 0;
                for (int t = c.n - 1; t >= 0; t--)
                    acc += w.dG[(int64_t)t * K + ch], d->dg[(c.t0 + t) * s->sg + ch] += acc;
            }
        memcpy(dS, w.dS0, (size_t)KV * sizeof *dS);
    }
    if (d->dh0)
        for (int64_t i = 0; i < KV; i++) d->dh0[i] += dS[i];
}

/* ---- the per-value decay (opts.g_per_value, gsa's first pass) -----------------------------
 * h = h diag(exp(g_t)) + k_t v_t^T, g [T][V]. Transposed, this is a per-key decay of h^T with
 * k and v swapped, but the read-out is not: o_t = h_t^T q_t contracts h over its undecayed
 * axis, while the per-key form's read-out contracts over the decayed one. So the per-key code
 * above cannot produce o here; the same chunk algebra on the value axis can. With B_t the
 * chunk-local cumulative log-decays per value channel and E_ti = exp(B_t - B_i) (i <= t),
 * factored by sub-chunks exactly as above (gla_chunk with W = V):
 *   o_t[j] = scale (exp(B_t[j]) (S^T q_t)[j] + sum_{i<=t} A_ti v_i[j] E_ti[j]),  A_ti = <q_t, k_i>
 *   S'     = S diag(exp(B_last)) + sum_i k_i (exp(B_last - B_i) o v_i)^T
 * Backward, f_t = scale exp(B_t) o dO_t and y_tij = scale dO_t[j] E_ti[j]:
 *   dS     = dS' diag(exp(B_last)) + sum_t q_t f_t^T
 *   dq_t  += S f_t + sum_{i<=t} dA_ti k_i,     dA_ti = sum_j y_tij v_i[j]
 *   dk_i  += sum_{t>=i} dA_ti q_t + dS' (exp(B_last - B_i) o v_i)
 *   dv_i  += sum_{t>=i} A_ti y_ti + exp(B_last - B_i) o (dS'^T k_i)
 *   dB     as in the per-key form, per value channel (a token's own write gives nothing). */

static void gv_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    gla_chunk c = chunk_init(work, C, V);
    double *e = work + chunk_doubles(C, V);   /* [V] */
    double *S = ht;
    if (s->h0) memcpy(S, s->h0, (size_t)KV * sizeof *S);
    else memset(S, 0, (size_t)KV * sizeof *S);
    for (c.t0 = 0; c.t0 < s->T; c.t0 += C) {
        c.n = (int)(s->T - c.t0 < C ? s->T - c.t0 : C);
        if (ckpt) memcpy(ckpt + (c.t0 / C) * KV, S, (size_t)KV * sizeof *S);
        cumulative_decays(&c, s);
        for (int t = 0; t < c.n; t++) {
            const double *q = row(s->q, s->sk, &c, t), *Bt = c.G + (int64_t)t * V;
            double *ot = o + (c.t0 + t) * s->sv;
            pr_rec_mtv(ot, S, q, K, V);
            for (int j = 0; j < V; j++) ot[j] *= exp(Bt[j]);
            for (int i = 0; i <= t; i++) {
                const double *v = row(s->v, s->sv, &c, i);
                const double A = pr_rec_dot(q, row(s->k, s->sk, &c, i), K);
                for (int j = 0; j < V; j++) ot[j] += A * v[j] * decay_ti(&c, t, i, j);
            }
            for (int j = 0; j < V; j++) ot[j] *= s->scale;
        }
        const double *BL = c.G + (int64_t)(c.n - 1) * V;
        for (int j = 0; j < V; j++) e[j] = exp(BL[j]);
        for (int i = 0; i < K; i++)
            for (int j = 0; j < V; j++) S[(int64_t)i * V + j] *= e[j];
        for (int i = 0; i < c.n; i++) {
            const double *v = row(s->v, s->sv, &c, i), *Bi = c.G + (int64_t)i * V;
            for (int j = 0; j < V; j++) e[j] = v[j] * exp(BL[j] - Bi[j]);
            pr_rec_outer(S, 1.0, row(s->k, s->sk, &c, i), e, K, V);
        }
    }
}

/* the terms through the chunk's start state S (per-value decay) */
static void gv_start_state_backward(const pr_rec_grads *d, gla_scratch *w, const pr_rec_seq *s, const gla_chunk *c,
                                    const double *S, const double *dS, const double *dout)
{
    const int K = s->K, V = s->V;
    const double *BL = c->G + (int64_t)(c->n - 1) * V;
    double *dBL = w->dG + (int64_t)(c->n - 1) * V;
    for (int j = 0; j < V; j++) w->e[j] = exp(BL[j]);
    for (int i = 0; i < K; i++) {
        const double *Si = S + (int64_t)i * V, *dSi = dS + (int64_t)i * V;
        double *dS0i = w->dS0 + (int64_t)i * V;
        for (int j = 0; j < V; j++) dS0i[j] = w->e[j] * dSi[j], dBL[j] += w->e[j] * Si[j] * dSi[j];
    }
    for (int t = 0; t < c->n; t++) {
        const double *q = row(s->q, s->sk, c, t), *Bt = c->G + (int64_t)t * V;
        const double *dot_ = dout + (c->t0 + t) * s->sv;
        double *dB = w->dG + (int64_t)t * V;
        for (int j = 0; j < V; j++) w->f[j] = s->scale * exp(Bt[j]) * dot_[j];
        pr_rec_mtv(w->e, S, q, K, V);   /* S^T q_t */
        for (int j = 0; j < V; j++) dB[j] += w->f[j] * w->e[j];
        if (d->dq)
            for (int i = 0; i < K; i++) d->dq[(c->t0 + t) * s->sk + i] += pr_rec_dot(S + (int64_t)i * V, w->f, V);
        pr_rec_outer(w->dS0, 1.0, q, w->f, K, V);
    }
}

/* the pairs i <= t inside the chunk (per-value decay) */
static void gv_intra_backward(const pr_rec_grads *d, gla_scratch *w, const pr_rec_seq *s, const gla_chunk *c,
                              const double *dout)
{
    const int K = s->K, V = s->V;
    for (int t = 0; t < c->n; t++) {
        const double *q = row(s->q, s->sk, c, t);
        const double *dot_ = dout + (c->t0 + t) * s->sv;
        for (int i = 0; i <= t; i++) {
            const double *k = row(s->k, s->sk, c, i), *v = row(s->v, s->sv, c, i);
            const double A = pr_rec_dot(q, k, K);
            double dA = 0;
            for (int j = 0; j < V; j++) {
                const double y = s->scale * dot_[j] * decay_ti(c, t, i, j), x = y * A * v[j];
                dA += y * v[j];
                if (d->dv) d->dv[(c->t0 + i) * s->sv + j] += A * y;
                if (i < t) w->dG[(int64_t)t * V + j] += x, w->dG[(int64_t)i * V + j] -= x;   /* E_tt = 1 */
            }
            for (int ch = 0; ch < K; ch++) {
                if (d->dq) d->dq[(c->t0 + t) * s->sk + ch] += dA * k[ch];
                if (d->dk) d->dk[(c->t0 + i) * s->sk + ch] += dA * q[ch];
            }
        }
    }
}

/* the chunk's writes into its end state: S' += k_i (exp(B_last - B_i) o v_i)^T */
static void gv_end_state_backward(const pr_rec_grads *d, gla_scratch *w, const pr_rec_seq *s, const gla_chunk *c,
                                  const double *dS)
{
    const int K = s->K, V = s->V, last = c->n - 1;
    const double *BL = c->G + (int64_t)last * V;
    for (int i = 0; i < c->n; i++) {
        const double *k = row(s->k, s->sk, c, i), *v = row(s->v, s->sv, c, i), *Bi = c->G + (int64_t)i * V;
        pr_rec_mtv(w->e, dS, k, K, V);   /* dS'^T k_i */
        for (int j = 0; j < V; j++) {
            const double b = exp(BL[j] - Bi[j]), x = b * v[j] * w->e[j];
            if (d->dv) d->dv[(c->t0 + i) * s->sv + j] += b * w->e[j];
            if (i < last) w->dG[(int64_t)last * V + j] += x, w->dG[(int64_t)i * V + j] -= x;
            w->f[j] = b * v[j];
        }
        if (d->dk)
            for (int ch = 0; ch < K; ch++) d->dk[(c->t0 + i) * s->sk + ch] += pr_rec_dot(dS + (int64_t)ch * V, w->f, V);
    }
}

static void gv_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                                const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    gla_chunk c = chunk_init(work, C, V);
    gla_scratch w;
    w.dG = work + chunk_doubles(C, V);
    double *dS = w.dG + (int64_t)C * V;
    w.dS0 = dS + KV;
    w.b = w.dS0 + KV;   /* unused here; f and e are [V] */
    w.f = w.b + V;
    w.e = w.f + V;
    if (dht) memcpy(dS, dht, (size_t)KV * sizeof *dS);
    else memset(dS, 0, (size_t)KV * sizeof *dS);
    for (int64_t ci = pr_rec_nckpt(s->T, C) - 1; ci >= 0; ci--) {
        c.t0 = ci * C;
        c.n = (int)(s->T - c.t0 < C ? s->T - c.t0 : C);
        cumulative_decays(&c, s);
        memset(w.dG, 0, sizeof(double) * (size_t)C * V);
        gv_start_state_backward(d, &w, s, &c, ckpt + ci * KV, dS, dout);
        gv_intra_backward(d, &w, s, &c, dout);
        gv_end_state_backward(d, &w, s, &c, dS);
        if (d->dg)
            for (int j = 0; j < V; j++) {
                double acc = 0;
                for (int t = c.n - 1; t >= 0; t--)
                    acc += w.dG[(int64_t)t * V + j], d->dg[(c.t0 + t) * s->sg + j] += acc;
            }
        memcpy(dS, w.dS0, (size_t)KV * sizeof *dS);
    }
    if (d->dh0)
        for (int64_t i = 0; i < KV; i++) d->dh0[i] += dS[i];
}

/* ---- entry points: the decay's axis picks the algebra ------------------------------------- */

void pr_rec_gla_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work)
{
    if (s->g_per_value) gv_forward_chunked(o, ht, ckpt, s, C, work);
    else gk_forward_chunked(o, ht, ckpt, s, C, work);
}

void pr_rec_gla_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                                 const pr_rec_seq *s, int C, double *work)
{
    if (s->g_per_value) gv_backward_chunked(d, dout, dht, ckpt, s, C, work);
    else gk_backward_chunked(d, dout, dht, ckpt, s, C, work);
}
