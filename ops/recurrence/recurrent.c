/* ops/recurrence/recurrent.c: the per-token form of the recurrence family
 * (the reference) and the hand-derived reverse-time backward shared by both
 * forms. One (sequence, head) pair per call; see recurrence_cpu.h.
 *
 * The backward never keeps every state of a sequence: the forward saves the
 * state every `c` tokens, and the backward recomputes the c states of one
 * block at a time, then walks that block in reverse.
 */
#include "ops/recurrence/recurrence_cpu.h"

#include <math.h>
#include <string.h>

static double decay_of(const pr_rec_seq *s, int64_t t) { return s->g ? exp(s->g[t * s->sg]) : 1.0; }   /* scalar g */

/* the decay of token t on row i of the state: exp(g_t), or exp(g_t[i]) per key */
static double row_decay(const pr_rec_seq *s, int64_t t, int i)
{
    if (!s->g) return 1.0;
    return exp(s->g[t * s->sg + (s->g_per_key ? i : 0)]);
}

/* h = A_t's decay applied to h [K][V] */
static void decay_state(double *h, const pr_rec_seq *s, int64_t t)
{
    if (!s->g) return;
    if (s->g_per_value) {   /* column j by exp(g_t[j]) */
        const double *g = s->g + t * s->sg;
        for (int i = 0; i < s->K; i++) {
            double *hi = h + (int64_t)i * s->V;
            for (int j = 0; j < s->V; j++) hi[j] *= exp(g[j]);
        }
        return;
    }
    const double a0 = decay_of(s, t);   /* per-key: row_decay below */
    for (int i = 0; i < s->K; i++) {
        const double a = s->g_per_key ? row_decay(s, t, i) : a0;
        double *hi = h + (int64_t)i * s->V;
        for (int j = 0; j < s->V; j++) hi[j] *= a;
    }
}

/* One token: h (the state after token t-1) becomes the state after token t.
 * u receives the write's value (the pseudo-value beta (v - h^T k) for the
 * delta rules, v otherwise). w: V doubles of scratch. */
static void step(double *h, double *u, double *w, const pr_rec_seq *s, int64_t t)
{
    const int K = s->K, V = s->V;
    const double *k = s->k + t * s->sk, *v = s->v + t * s->sv;
    decay_state(h, s, t);
    if (s->beta) {
        const double beta = s->beta[t * s->sg];
        pr_rec_mtv(w, h, k, K, V);
        for (int j = 0; j < V; j++) u[j] = beta * (v[j] - w[j]);
    } else {
        memcpy(u, v, (size_t)V * sizeof *u);
    }
    pr_rec_outer(h, 1.0, k, u, K, V);
    for (int l = 0; l < s->L; l++)
        pr_rec_outer(h, 1.0, s->kx + t * s->skx + (int64_t)l * K, s->vx + t * s->svx + (int64_t)l * V, K, V);
}

void pr_rec_forward_recurrent(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int ckpt_every,
                              double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    double *h = ht;   /* the running state lives in ht */
    double *u = work, *w = work + V;
    if (s->h0) memcpy(h, s->h0, (size_t)KV * sizeof *h);
    else memset(h, 0, (size_t)KV * sizeof *h);
    for (int64_t t = 0; t < s->T; t++) {
        if (ckpt && t % ckpt_every == 0) memcpy(ckpt + (t / ckpt_every) * KV, h, (size_t)KV * sizeof *h);
        step(h, u, w, s, t);
        double *ot = o + t * s->sv;
        pr_rec_mtv(ot, h, s->q + t * s->sk, K, V);
        for (int j = 0; j < V; j++) ot[j] *= s->scale;
    }
}

int64_t pr_rec_backward_work(int c, int K, int V, int L)
{
    (void)L;
    return (int64_t)(c + 1) * K * V   /* the block's states */
           + (int64_t)K * V           /* dH */
           + 4 * (int64_t)V + (int64_t)K;
}

/* Backward of one token, given dH = dL/dh_t (the state after token t, the
 * output's contribution not yet added). On return dH = dL/dh_{t-1}.
 *
 * Forward (a = exp(g_t), ha = a h_{t-1}):
 *   w = ha^T k;  u = beta (v - w);  h_t = ha + k u^T + sum_l kx_l vx_l^T;
 *   o_t = scale h_t^T q.
 * Reverse, each line the chain rule of the line above it:
 *   dH += scale q do^T;               dq   = scale h_t do
 *   dkx_l = dH vx_l;                  dvx_l = dH^T kx_l
 *   dk  = dH u;                       du   = dH^T k
 *   dbeta = du.(v - w);  dv = beta du;  dw = -beta du      (u = v: dv = du)
 *   dk += ha dw;                      dHa  = dH + k dw^T
 *   dg  = sum(dHa o ha) = a sum(dHa o h_{t-1});  dh_{t-1} = a dHa
 *   (per-key decay a_i on row i: dg[i] = a_i <dHa row i, h_{t-1} row i>, row i of dh_{t-1} = a_i dHa row i;
 *   per-value decay a_j on column j likewise by columns; no delta erase then, so a only enters through the decay)
 * hprev = h_{t-1}, hcur = h_t. Vectors u, w, du, dw [V] and dk [K] are scratch. */
static void step_backward(const pr_rec_grads *d, double *dH, const double *dout, const double *hprev,
                          const double *hcur, const pr_rec_seq *s, int64_t t, double *u, double *w, double *du,
                          double *dw, double *dk)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    const double *q = s->q + t * s->sk, *k = s->k + t * s->sk, *v = s->v + t * s->sv;
    const double *dot_ = dout + t * s->sv;
    const double a = s->g_per_key || s->g_per_value ? 1.0 : decay_of(s, t);   /* only the delta rules read it: scalar g */

    /* output o_t = scale h_t^T q */
    if (d->dq) {
        double *dq = d->dq + t * s->sk;
        for (int i = 0; i < K; i++) dq[i] += s->scale * pr_rec_dot(hcur + (int64_t)i * V, dot_, V);
    }
    for (int i = 0; i < K; i++) {
        const double sq = s->scale * q[i];
        double *dHi = dH + (int64_t)i * V;
        for (int j = 0; j < V; j++) dHi[j] += sq * dot_[j];
    }
    /* extra writes kx_l vx_l^T */
    for (int l = 0; l < s->L; l++) {
        const double *kx = s->kx + t * s->skx + (int64_t)l * K, *vx = s->vx + t * s->svx + (int64_t)l * V;
        if (d->dkx) {
            double *dkx = d->dkx + t * s->skx + (int64_t)l * K;
            for (int i = 0; i < K; i++) dkx[i] += pr_rec_dot(dH + (int64_t)i * V, vx, V);
        }
        if (d->dvx) {
            double *dvx = d->dvx + t * s->svx + (int64_t)l * V;
            pr_rec_mtv(w, dH, kx, K, V);
            for (int j = 0; j < V; j++) dvx[j] += w[j];
        }
    }
    /* recompute the write's value: w = ha^T k = a hprev^T k */
    if (s->beta) {
        pr_rec_mtv(w, hprev, k, K, V);
        for (int j = 0; j < V; j++) w[j] *= a;
        const double beta = s->beta[t * s->sg];
        for (int j = 0; j < V; j++) u[j] = beta * (v[j] - w[j]);
    } else {
        memcpy(u, v, (size_t)V * sizeof *u);
    }
    /* write k u^T */
    for (int i = 0; i < K; i++) dk[i] = pr_rec_dot(dH + (int64_t)i * V, u, V);
    pr_rec_mtv(du, dH, k, K, V);
    if (s->beta) {
        const double beta = s->beta[t * s->sg];
        if (d->dbeta) {
            double db = 0;
            for (int j = 0; j < V; j++) db += du[j] * (v[j] - w[j]);
            d->dbeta[t * s->sg] += db;
        }
        for (int j = 0; j < V; j++) dw[j] = -beta * du[j];
        if (d->dv)
            for (int j = 0; j < V; j++) d->dv[t * s->sv + j] += beta * du[j];
        /* w = ha^T k */
        for (int i = 0; i < K; i++) dk[i] += a * pr_rec_dot(hprev + (int64_t)i * V, dw, V);
        pr_rec_outer(dH, 1.0, k, dw, K, V);
    } else if (d->dv) {
        for (int j = 0; j < V; j++) d->dv[t * s->sv + j] += du[j];
    }
    if (d->dk)
        for (int i = 0; i < K; i++) d->dk[t * s->sk + i] += dk[i];
    /* decay ha = a h_{t-1} */
    if (s->g_per_value) {
        for (int j = 0; j < V; j++) {
            const double aj = exp(s->g[t * s->sg + j]);
            if (d->dg) {
                double x = 0;
                for (int i = 0; i < K; i++) x += dH[(int64_t)i * V + j] * hprev[(int64_t)i * V + j];
                d->dg[t * s->sg + j] += aj * x;
            }
            for (int i = 0; i < K; i++) dH[(int64_t)i * V + j] *= aj;
        }
    } else if (s->g_per_key) {
        for (int i = 0; i < K; i++) {
            const double ai = row_decay(s, t, i);
            double *dHi = dH + (int64_t)i * V;
            if (d->dg) d->dg[t * s->sg + i] += ai * pr_rec_dot(dHi, hprev + (int64_t)i * V, V);
            for (int j = 0; j < V; j++) dHi[j] *= ai;
        }
    } else if (s->g) {
        if (d->dg) d->dg[t * s->sg] += a * pr_rec_dot(dH, hprev, (int)KV);
        for (int64_t i = 0; i < KV; i++) dH[i] *= a;
    }
}

void pr_rec_backward(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                     const pr_rec_seq *s, int ckpt_every, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V, c = ckpt_every;
    double *hs = work;                   /* [c+1][K][V] states of one block */
    double *dH = hs + (c + 1) * KV;
    double *u = dH + KV, *w = u + V, *du = w + V, *dw = du + V, *dk = dw + V;

    if (dht) memcpy(dH, dht, (size_t)KV * sizeof *dH);
    else memset(dH, 0, (size_t)KV * sizeof *dH);
    for (int64_t b = pr_rec_nckpt(s->T, c) - 1; b >= 0; b--) {
        const int64_t t0 = b * c, t1 = t0 + c < s->T ? t0 + c : s->T;
        memcpy(hs, ckpt + b * KV, (size_t)KV * sizeof *hs);
        for (int64_t t = t0; t < t1; t++) {
            double *h = hs + (t - t0 + 1) * KV;
            memcpy(h, h - KV, (size_t)KV * sizeof *h);
            step(h, u, w, s, t);
        }
        for (int64_t t = t1 - 1; t >= t0; t--)
            step_backward(d, dH, dout, hs + (t - t0) * KV, hs + (t - t0 + 1) * KV, s, t, u, w, du, dw, dk);
    }
    if (d->dh0)
        for (int64_t i = 0; i < KV; i++) d->dh0[i] += dH[i];
}
