/* ops/recurrence/chunked_gla.c: the chunked form of gla, whose decay is per
 * key channel (h = diag(exp(g_t)) h + k_t v_t^T) or, with g_per_value, per
 * value channel (h = h diag(exp(g_t)) + k_t v_t^T); o_t = scale h^T q_t.
 * Forward and backward, one (sequence, head) pair per call
 * (recurrence_cpu.h), as chunk-sized products through pr_rec_gemm.
 *
 * Inside a chunk starting from state S, with G_t = sum_{s<=t} g_s per decay
 * channel (chunk-local), a_t = exp(g_t), and E_ti = exp(G_t - G_i)
 * elementwise (i <= t), per key:
 *   o_t = scale (S^T (exp(G_t) o q_t) + sum_{i<=t} A_ti v_i),  A_ti = sum_c q_t[c] k_i[c] E_ti[c]
 *   S'  = diag(exp(G_n)) S + sum_i (exp(G_n - G_i) o k_i) v_i^T
 * and per value, with A_ti = <q_t, k_i>:
 *   o_t = scale (exp(G_t) o (S^T q_t) + sum_{i<=t} A_ti (E_ti o v_i))
 *   S'  = S diag(exp(G_n)) + sum_i k_i (exp(G_n - G_i) o v_i)^T
 * Every decay is a product of factors a_s <= 1 (from an earlier token to a
 * later one), so strong decays underflow to 0 as they should and nothing
 * overflows; no exp but a_t's. (The factored form exp(G_t) exp(-G_i) that
 * one matrix product over the chunk wants overflows once a chunk's
 * log-decays sum past ~700.) The chunk is cut into sub-chunks of GLA_SUB
 * tokens, as fla's chunk_gla does: for t in the sub-chunk starting at r and
 * i < r, E_ti = Qf_t o Kf_i with Qf_t = exp(G_t - G_r), Kf_i = exp(G_r - G_i),
 * both <= 1, so the sub-chunk's rows against the earlier tokens are one
 * product of decayed rows (Q o Qf)(K o Kf)^T (per value: the decays go onto
 * the values, A (Kf o V) then o Qf). Pairs inside one sub-chunk take E_ti
 * itself, a running product, token pair by pair.
 *
 * Backward, given dS' (the end state's gradient) and dO (do of the chunk),
 * dY = scale dO; each line of the forward differentiated, per key:
 *   dS  = diag(exp(G_n)) dS' + (exp(G) o Q)^T dY
 *   dQ  = exp(G) o (dY S^T) + (the intra part),  dA = mask(dY V^T)
 *   dV  = A^T dY + (K o exp(G_n - G))  dS'
 *   dK  = exp(G_n - G) o (V dS'^T) + (the intra part)
 * the intra part being, per block, d(Q o Qf) = dA (K o Kf), d(K o Kf) =
 * dA^T (Q o Qf), then o Qf or o Kf (and E_ti itself inside a sub-chunk);
 * per value likewise with the decays on the value axis. dG_t gets each
 * term's derivative: +x for a factor exp(G_t ...), -x for exp(... - G_i), x
 * the term itself per channel. A token's own write (i = t, and i = n in S')
 * has E = 1 exactly and gives nothing: it is left out, not added and
 * subtracted, since under strong decays dg is tiny and the rounding of
 * x - x would swamp it. Then dg_s = sum_{t>=s} dG_t.
 */
#include <math.h>
#include <string.h>

#include "ops/recurrence/recurrence_cpu.h"

enum { GLA_SUB = 8 };   /* tokens a sub-chunk */

typedef pr_rec_mat cmat;

typedef struct {
    int C, n, W;          /* chunk length, tokens in this chunk, decay channels (K or V) */
    int64_t t0;           /* its first token */
    bool S_zero;          /* its start state is zero (the first chunk without h0) */
    bool dS_zero;         /* backward: its end state's gradient is zero (the last chunk without dht) */
    bool dS0_unused;      /* backward: its start state's gradient is not wanted (the first chunk without dh0) */
    cmat Q, K, V;         /* the chunk's rows, read in place */
    double *a;            /* [C][W] a_t = exp(g_t) */
    double *P;            /* [C][W] exp(G_t) */
    double *Pn;           /* [C][W] exp(G_n - G_t), n the chunk's last token */
    double *Qf;           /* [C][W] exp(G_t - G_r), r the first token of t's sub-chunk */
    double *Kf;           /* [C][W] exp(G_r - G_i) for i < r, r the sub-chunk being worked on */
    double *A, *dA;       /* [C][C] the intra scores (i <= t, zero above) and their gradient */
    double *X, *Y, *Z, *T, *F;   /* [C][max(K, V)] scratch rows */
    double *e;            /* [max(K, V)] a running decay */
    double *dY, *dQ, *dK, *dV, *dG;   /* [C][V], [C][K], [C][K], [C][V], [C][W] */
    double *dS0, *dS;     /* [K][V] gradients of the chunk's start state and of its end state */
} gla_chunk;

/* Lays the buffers out from base (NULL: only counts); returns the doubles
 * they take. The one place that knows the layout. */
static int64_t chunk_layout(gla_chunk *c, double *base, int C, int K, int V)
{
    const int64_t X = K > V ? K : V, cx = C * X;
    int64_t off = 0;
#define TAKE(field, count) (c->field = base ? base + off : NULL, off += (count))
    TAKE(a, cx), TAKE(P, cx), TAKE(Pn, cx), TAKE(Qf, cx), TAKE(Kf, cx), TAKE(A, (int64_t)C * C);
    TAKE(dA, (int64_t)C * C), TAKE(X, cx), TAKE(Y, cx), TAKE(Z, cx), TAKE(T, cx), TAKE(F, cx), TAKE(e, X);
    TAKE(dY, cx), TAKE(dQ, cx), TAKE(dK, cx), TAKE(dV, cx), TAKE(dG, cx);
    TAKE(dS0, (int64_t)K * V), TAKE(dS, (int64_t)K * V);
#undef TAKE
    return off;
}

int64_t pr_rec_gla_chunk_work(int C, int K, int V)
{
    gla_chunk c;
    return chunk_layout(&c, NULL, C, K, V);
}

static gla_chunk chunk_init(double *work, int C, int K, int V, int W)
{
    gla_chunk c = {.C = C, .W = W};
    chunk_layout(&c, work, C, K, V);
    return c;
}

static void gemm(bool ta, bool tb, int M, int N, int K, cmat A, cmat B, double *C, int64_t ldc, double beta)
{
    pr_rec_mm(ta, tb, M, N, K, A, B, C, ldc, beta);
}

static cmat rows_of(const double *p, int64_t ld) { return (cmat){p, ld}; }

/* dst[t] = f[t] o src[t] over rows of n (f and dst contiguous) */
static void hadamard(double *dst, const double *f, cmat src, int rows, int n)
{
    for (int t = 0; t < rows; t++)
        for (int j = 0; j < n; j++) dst[(int64_t)t * n + j] = f[(int64_t)t * n + j] * src.p[t * src.ld + j];
}

/* sum_c a[c] b[c] e[c] in eight partial sums */
static double dot3(const double *a, const double *b, const double *e, int n)
{
    double acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k] * e[i + k];
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i] * e[i];
    return s;
}

/* dst[t*stride + j] += src[t*n + j]; dst NULL: not needed */
static void scatter_add(double *dst, int64_t stride, const double *src, int rows, int n)
{
    if (!dst) return;
    for (int t = 0; t < rows; t++)
        for (int j = 0; j < n; j++) dst[t * stride + j] += src[(int64_t)t * n + j];
}

/* ---- the chunk's decays --------------------------------------------------------------- */

static void chunk_start(gla_chunk *c, const pr_rec_seq *s, int64_t t0)
{
    const int W = c->W;
    c->t0 = t0;
    c->n = (int)(s->T - t0 < c->C ? s->T - t0 : c->C);
    c->S_zero = t0 == 0 && !s->h0;
    c->Q = rows_of(s->q + t0 * s->sk, s->sk);
    c->K = rows_of(s->k + t0 * s->sk, s->sk);
    c->V = rows_of(s->v + t0 * s->sv, s->sv);
    /* a, and the running products P (from the chunk start) and Qf (from the sub-chunk start) */
    for (int t = 0; t < c->n; t++) {
        const double *g = s->g + (t0 + t) * s->sg;
        double *a = c->a + (int64_t)t * W, *P = c->P + (int64_t)t * W, *Qf = c->Qf + (int64_t)t * W;
        for (int j = 0; j < W; j++) a[j] = exp(g[j]);
        for (int j = 0; j < W; j++) P[j] = t ? P[j - W] * a[j] : a[j];
        for (int j = 0; j < W; j++) Qf[j] = t % GLA_SUB ? Qf[j - W] * a[j] : 1.0;
    }
    /* Pn, backwards from the last token */
    for (int t = c->n - 1; t >= 0; t--) {
        double *Pn = c->Pn + (int64_t)t * W;
        const double *a1 = c->a + (int64_t)(t + 1) * W;
        for (int j = 0; j < W; j++) Pn[j] = t == c->n - 1 ? 1.0 : Pn[j + W] * a1[j];
    }
}

/* Kf_i = exp(G_r - G_i) for i < r, backwards from Kf_{r-1} = a_r */
static void sub_factors(gla_chunk *c, int r)
{
    const int W = c->W;
    for (int i = r - 1; i >= 0; i--) {
        double *Kf = c->Kf + (int64_t)i * W;
        const double *a1 = c->a + (int64_t)(i + 1) * W;
        for (int j = 0; j < W; j++) Kf[j] = i == r - 1 ? a1[j] : Kf[j + W] * a1[j];
    }
}

/* the sub-chunk starting at r: its last token + 1 */
static int sub_end(const gla_chunk *c, int r) { return r + GLA_SUB < c->n ? r + GLA_SUB : c->n; }

/* e = E_ti for r <= i <= t, walking t up from e = 1 at t = i */
static void next_decay(const gla_chunk *c, int i, int t)
{
    const double *a = c->a + (int64_t)t * c->W;
    for (int j = 0; j < c->W; j++) c->e[j] = t == i ? 1.0 : c->e[j] * a[j];
}

/* ---- per-key decay: forward ------------------------------------------------------------- */

/* A (i <= t, zero above): E_ti itself inside a sub-chunk, (Q o Qf)(K o Kf)^T below it */
static void gk_scores(gla_chunk *c, const pr_rec_seq *s)
{
    const int K = s->K, n = c->n;
    memset(c->A, 0, sizeof(double) * (size_t)n * n);
    for (int r = 0; r < n; r += GLA_SUB) {
        const int r1 = sub_end(c, r);
        for (int i = r; i < r1; i++)
            for (int t = i; t < r1; t++) {
                next_decay(c, i, t);
                c->A[(int64_t)t * n + i] = dot3(c->Q.p + t * c->Q.ld, c->K.p + i * c->K.ld, c->e, K);
            }
        if (!r) continue;
        sub_factors(c, r);
        hadamard(c->X, c->Kf, c->K, r, K);                                   /* X = K o Kf, rows < r */
        hadamard(c->Y, c->Qf + (int64_t)r * K, rows_of(c->Q.p + r * c->Q.ld, c->Q.ld), r1 - r, K);   /* Y = Q o Qf */
        gemm(false, true, r1 - r, r, K, rows_of(c->Y, K), rows_of(c->X, K), c->A + (int64_t)r * n, n, 0);
    }
}

static void gk_forward_chunk(gla_chunk *c, const pr_rec_seq *s, double *o, double *S)
{
    const int K = s->K, V = s->V, n = c->n;
    gk_scores(c, s);
    /* O = scale ((exp(G) o Q) S + A V) */
    if (c->S_zero) memset(c->T, 0, sizeof(double) * (size_t)n * V);
    else {
        hadamard(c->X, c->P, c->Q, n, K);
        gemm(false, false, n, V, K, rows_of(c->X, K), rows_of(S, V), c->T, V, 0);
    }
    gemm(false, false, n, V, n, rows_of(c->A, n), c->V, c->T, V, 1);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < V; j++) o[(c->t0 + t) * s->sv + j] = s->scale * c->T[(int64_t)t * V + j];
    /* S' = diag(exp(G_n)) S + (exp(G_n - G) o K)^T V */
    const double *Pl = c->P + (int64_t)(n - 1) * K;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) S[(int64_t)i * V + j] *= Pl[i];
    hadamard(c->X, c->Pn, c->K, n, K);
    gemm(true, false, K, V, n, rows_of(c->X, K), c->V, S, V, 1);
}

/* a zero end-state gradient leaves nothing to the state's inputs: dS0, dK, dV all zero */
static void clear_state_grads(gla_chunk *c, int K, int V, int n)
{
    memset(c->dS0, 0, sizeof(double) * (size_t)K * V);
    memset(c->dK, 0, sizeof(double) * (size_t)n * K);
    memset(c->dV, 0, sizeof(double) * (size_t)n * V);
}

/* ---- per-key decay: backward ------------------------------------------------------------ */

/* S' = diag(exp(G_n)) S + (Pn o K)^T V: dS0, dG_n, and dK, dV overwritten */
static void gk_state_backward(gla_chunk *c, const pr_rec_seq *s, const double *S, const double *dS)
{
    const int K = s->K, V = s->V, n = c->n, last = n - 1;
    const double *Pl = c->P + (int64_t)last * K;
    if (c->dS_zero) {
        clear_state_grads(c, K, V, n);
        return;
    }
    for (int i = 0; i < K; i++) {
        const double *Si = S + (int64_t)i * V, *dSi = dS + (int64_t)i * V;
        for (int j = 0; j < V; j++) c->dS0[(int64_t)i * V + j] = Pl[i] * dSi[j];
        c->dG[(int64_t)last * K + i] += Pl[i] * pr_rec_dot8(Si, dSi, V);
    }
    gemm(false, true, n, K, V, c->V, rows_of(dS, V), c->T, K, 0);   /* T = V dS'^T */
    for (int t = 0; t < n; t++) {
        const double *Pn = c->Pn + (int64_t)t * K, *f = c->T + (int64_t)t * K, *k = c->K.p + t * c->K.ld;
        double *dk = c->dK + (int64_t)t * K, *dGt = c->dG + (int64_t)t * K, *dGl = c->dG + (int64_t)last * K;
        for (int j = 0; j < K; j++) dk[j] = Pn[j] * f[j];
        for (int j = 0; t < last && j < K; j++) {   /* the last token's own write gives nothing */
            const double x = k[j] * dk[j];
            dGl[j] += x, dGt[j] -= x;
        }
    }
    hadamard(c->X, c->Pn, c->K, n, K);
    gemm(false, false, n, V, K, rows_of(c->X, K), rows_of(dS, V), c->dV, V, 0);   /* dV = (Pn o K) dS' */
}

/* the outputs through S: dS0 += (P o Q)^T dY, dQ = P o (dY S^T) (overwritten), dG_t */
static void gk_read_state_backward(gla_chunk *c, const pr_rec_seq *s, const double *S)
{
    const int K = s->K, V = s->V, n = c->n;
    hadamard(c->X, c->P, c->Q, n, K);   /* X = P o Q */
    if (!c->dS0_unused) gemm(true, false, K, V, n, rows_of(c->X, K), rows_of(c->dY, V), c->dS0, V, 1);
    if (c->S_zero) {
        memset(c->dQ, 0, sizeof(double) * (size_t)n * K);
        return;
    }
    gemm(false, true, n, K, V, rows_of(c->dY, V), rows_of(S, V), c->T, K, 0);   /* T = dY S^T */
    for (int64_t i = 0; i < (int64_t)n * K; i++) {
        c->dQ[i] = c->P[i] * c->T[i];
        c->dG[i] += c->X[i] * c->T[i];
    }
}

/* the pairs inside the sub-chunk [r, r1): dQ, dK and dG from dA, E_ti itself */
static void gk_sub_backward(gla_chunk *c, const pr_rec_seq *s, int r, int r1)
{
    const int K = s->K, n = c->n;
    for (int i = r; i < r1; i++)
        for (int t = i; t < r1; t++) {
            next_decay(c, i, t);
            const double d = c->dA[(int64_t)t * n + i], *q = c->Q.p + t * c->Q.ld, *k = c->K.p + i * c->K.ld;
            double *dq = c->dQ + (int64_t)t * K, *dk = c->dK + (int64_t)i * K;
            for (int j = 0; j < K; j++) dq[j] += d * k[j] * c->e[j], dk[j] += d * q[j] * c->e[j];
            if (t == i) continue;   /* E_tt = 1: no decay to differentiate */
            double *dGt = c->dG + (int64_t)t * K, *dGi = c->dG + (int64_t)i * K;
            for (int j = 0; j < K; j++) {
                const double x = d * q[j] * k[j] * c->e[j];
                dGt[j] += x, dGi[j] -= x;
            }
        }
}

/* the sub-chunk [r, r1) against the tokens before r: Y = Q o Qf, X = K o Kf,
 * dY' = dA X, dX = dA^T Y, then o Qf, o Kf; dG_t += Y o dY', dG_i -= X o dX */
static void gk_block_backward(gla_chunk *c, const pr_rec_seq *s, int r, int r1)
{
    const int K = s->K, n = c->n, m = r1 - r;
    sub_factors(c, r);
    hadamard(c->X, c->Kf, c->K, r, K);
    hadamard(c->Y, c->Qf + (int64_t)r * K, rows_of(c->Q.p + r * c->Q.ld, c->Q.ld), m, K);
    const cmat dA = rows_of(c->dA + (int64_t)r * n, n);
    gemm(false, false, m, K, r, dA, rows_of(c->X, K), c->Z, K, 0);   /* Z = dA X */
    for (int64_t i = 0; i < (int64_t)m * K; i++) {
        c->dQ[(int64_t)r * K + i] += c->Qf[(int64_t)r * K + i] * c->Z[i];
        c->dG[(int64_t)r * K + i] += c->Y[i] * c->Z[i];
    }
    gemm(true, false, r, K, m, dA, rows_of(c->Y, K), c->T, K, 0);   /* T = dA^T Y */
    for (int64_t i = 0; i < (int64_t)r * K; i++) {
        c->dK[i] += c->Kf[i] * c->T[i];
        c->dG[i] -= c->X[i] * c->T[i];
    }
}

static void gk_backward_chunk(gla_chunk *c, const pr_rec_seq *s, const double *S)
{
    const int V = s->V, n = c->n;
    gk_scores(c, s);
    gk_state_backward(c, s, S, c->dS);
    gk_read_state_backward(c, s, S);
    /* O's intra part A V: dA = mask(dY V^T), dV += A^T dY */
    gemm(false, true, n, n, V, rows_of(c->dY, V), c->V, c->dA, n, 0);
    for (int t = 0; t < n; t++)
        for (int i = t + 1; i < n; i++) c->dA[(int64_t)t * n + i] = 0;
    gemm(true, false, n, V, n, rows_of(c->A, n), rows_of(c->dY, V), c->dV, V, 1);
    for (int r = 0; r < n; r += GLA_SUB) {
        gk_sub_backward(c, s, r, sub_end(c, r));
        if (r) gk_block_backward(c, s, r, sub_end(c, r));
    }
}

/* ---- per-value decay: forward ----------------------------------------------------------- */

static void gv_forward_chunk(gla_chunk *c, const pr_rec_seq *s, double *o, double *S)
{
    const int K = s->K, V = s->V, n = c->n;
    /* A = <q_t, k_i> for i <= t */
    gemm(false, true, n, n, K, c->Q, c->K, c->A, n, 0);
    for (int t = 0; t < n; t++)
        for (int i = t + 1; i < n; i++) c->A[(int64_t)t * n + i] = 0;
    /* T = P o (Q S): the state before the chunk */
    if (c->S_zero) memset(c->T, 0, sizeof(double) * (size_t)n * V);
    else {
        gemm(false, false, n, V, K, c->Q, rows_of(S, V), c->T, V, 0);
        for (int64_t i = 0; i < (int64_t)n * V; i++) c->T[i] *= c->P[i];
    }
    /* T_t += sum_{i<=t} A_ti (E_ti o v_i): E_ti itself inside a sub-chunk, Qf o (A (Kf o V)) below it */
    for (int r = 0; r < n; r += GLA_SUB) {
        const int r1 = sub_end(c, r);
        for (int i = r; i < r1; i++)
            for (int t = i; t < r1; t++) {
                next_decay(c, i, t);
                const double A = c->A[(int64_t)t * n + i], *v = c->V.p + i * c->V.ld;
                double *y = c->T + (int64_t)t * V;
                for (int j = 0; j < V; j++) y[j] += A * c->e[j] * v[j];
            }
        if (!r) continue;
        sub_factors(c, r);
        hadamard(c->X, c->Kf, c->V, r, V);   /* X = Kf o V */
        gemm(false, false, r1 - r, V, r, rows_of(c->A + (int64_t)r * n, n), rows_of(c->X, V), c->Z, V, 0);
        for (int64_t i = 0; i < (int64_t)(r1 - r) * V; i++) c->T[(int64_t)r * V + i] += c->Qf[(int64_t)r * V + i] * c->Z[i];
    }
    for (int t = 0; t < n; t++)
        for (int j = 0; j < V; j++) o[(c->t0 + t) * s->sv + j] = s->scale * c->T[(int64_t)t * V + j];
    /* S' = S diag(exp(G_n)) + K^T (Pn o V) */
    const double *Pl = c->P + (int64_t)(n - 1) * V;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) S[(int64_t)i * V + j] *= Pl[j];
    hadamard(c->X, c->Pn, c->V, n, V);
    gemm(true, false, K, V, n, c->K, rows_of(c->X, V), S, V, 1);
}

/* ---- per-value decay: backward ---------------------------------------------------------- */

/* S' = S diag(exp(G_n)) + K^T (Pn o V): dS0, dG_n, and dK, dV overwritten */
static void gv_state_backward(gla_chunk *c, const pr_rec_seq *s, const double *S, const double *dS)
{
    const int K = s->K, V = s->V, n = c->n, last = n - 1;
    const double *Pl = c->P + (int64_t)last * V;
    if (c->dS_zero) {
        clear_state_grads(c, K, V, n);
        return;
    }
    double *dGl = c->dG + (int64_t)last * V;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) {
            const double ds = dS[(int64_t)i * V + j];
            c->dS0[(int64_t)i * V + j] = Pl[j] * ds;
            dGl[j] += Pl[j] * S[(int64_t)i * V + j] * ds;
        }
    gemm(false, false, n, V, K, c->K, rows_of(dS, V), c->T, V, 0);   /* T = K dS' */
    for (int t = 0; t < n; t++) {
        const double *Pn = c->Pn + (int64_t)t * V, *f = c->T + (int64_t)t * V, *v = c->V.p + t * c->V.ld;
        double *dv = c->dV + (int64_t)t * V, *dGt = c->dG + (int64_t)t * V;
        for (int j = 0; j < V; j++) dv[j] = Pn[j] * f[j];
        for (int j = 0; t < last && j < V; j++) {   /* the last token's own write gives nothing */
            const double x = v[j] * dv[j];
            dGl[j] += x, dGt[j] -= x;
        }
    }
    hadamard(c->X, c->Pn, c->V, n, V);
    gemm(false, true, n, K, V, rows_of(c->X, V), rows_of(dS, V), c->dK, K, 0);   /* dK = (Pn o V) dS'^T */
}

/* the outputs through S: with F = P o dY, dS0 += Q^T F, dQ = F S^T (overwritten), dG_t += F o (Q S) */
static void gv_read_state_backward(gla_chunk *c, const pr_rec_seq *s, const double *S)
{
    const int K = s->K, V = s->V, n = c->n;
    for (int64_t i = 0; i < (int64_t)n * V; i++) c->F[i] = c->P[i] * c->dY[i];
    if (!c->dS0_unused) gemm(true, false, K, V, n, c->Q, rows_of(c->F, V), c->dS0, V, 1);
    if (c->S_zero) {
        memset(c->dQ, 0, sizeof(double) * (size_t)n * K);
        return;
    }
    gemm(false, true, n, K, V, rows_of(c->F, V), rows_of(S, V), c->dQ, K, 0);
    gemm(false, false, n, V, K, c->Q, rows_of(S, V), c->T, V, 0);   /* T = Q S */
    for (int64_t i = 0; i < (int64_t)n * V; i++) c->dG[i] += c->F[i] * c->T[i];
}

/* the pairs inside the sub-chunk [r, r1): with y = dY_t o E_ti, dA_ti = <y, v_i>,
 * dV_i += A_ti y, dG from x = A_ti y o v_i */
static void gv_sub_backward(gla_chunk *c, const pr_rec_seq *s, int r, int r1)
{
    const int V = s->V, n = c->n;
    double *y = c->Z;   /* [V] */
    for (int i = r; i < r1; i++)
        for (int t = i; t < r1; t++) {
            next_decay(c, i, t);
            const double A = c->A[(int64_t)t * n + i], *v = c->V.p + i * c->V.ld, *dy = c->dY + (int64_t)t * V;
            for (int j = 0; j < V; j++) y[j] = dy[j] * c->e[j];
            c->dA[(int64_t)t * n + i] = pr_rec_dot8(y, v, V);
            double *dv = c->dV + (int64_t)i * V;
            for (int j = 0; j < V; j++) dv[j] += A * y[j];
            if (t == i) continue;   /* E_tt = 1: no decay to differentiate */
            double *dGt = c->dG + (int64_t)t * V, *dGi = c->dG + (int64_t)i * V;
            for (int j = 0; j < V; j++) {
                const double x = A * y[j] * v[j];
                dGt[j] += x, dGi[j] -= x;
            }
        }
}

/* the sub-chunk [r, r1) against the tokens before r: X = Kf o V, Y = Qf o dY;
 * dA = Y X^T, dX = A^T Y (dV += Kf o dX, dG_i -= X o dX), dG_t += Y o (A X) */
static void gv_block_backward(gla_chunk *c, const pr_rec_seq *s, int r, int r1)
{
    const int V = s->V, n = c->n, m = r1 - r;
    const cmat A = rows_of(c->A + (int64_t)r * n, n);
    sub_factors(c, r);
    hadamard(c->X, c->Kf, c->V, r, V);
    for (int64_t i = 0; i < (int64_t)m * V; i++) c->Y[i] = c->Qf[(int64_t)r * V + i] * c->dY[(int64_t)r * V + i];
    gemm(false, true, m, r, V, rows_of(c->Y, V), rows_of(c->X, V), c->dA + (int64_t)r * n, n, 0);   /* dA = Y X^T */
    gemm(true, false, r, V, m, A, rows_of(c->Y, V), c->T, V, 0);                                  /* T = A^T Y */
    for (int64_t i = 0; i < (int64_t)r * V; i++) {
        c->dV[i] += c->Kf[i] * c->T[i];
        c->dG[i] -= c->X[i] * c->T[i];
    }
    gemm(false, false, m, V, r, A, rows_of(c->X, V), c->T, V, 0);   /* T = A X */
    for (int64_t i = 0; i < (int64_t)m * V; i++) c->dG[(int64_t)r * V + i] += c->Y[i] * c->T[i];
}

static void gv_backward_chunk(gla_chunk *c, const pr_rec_seq *s, const double *S)
{
    const int K = s->K, n = c->n;
    gemm(false, true, n, n, K, c->Q, c->K, c->A, n, 0);   /* A = <q_t, k_i>, i <= t */
    for (int t = 0; t < n; t++)
        for (int i = t + 1; i < n; i++) c->A[(int64_t)t * n + i] = 0;
    gv_state_backward(c, s, S, c->dS);
    gv_read_state_backward(c, s, S);
    memset(c->dA, 0, sizeof(double) * (size_t)n * n);
    for (int r = 0; r < n; r += GLA_SUB) {
        gv_sub_backward(c, s, r, sub_end(c, r));
        if (r) gv_block_backward(c, s, r, sub_end(c, r));
    }
    /* A = Q K^T: dQ += dA K, dK += dA^T Q */
    gemm(false, false, n, K, n, rows_of(c->dA, n), c->K, c->dQ, K, 1);
    gemm(true, false, n, K, n, rows_of(c->dA, n), c->Q, c->dK, K, 1);
}

/* ---- entry points ------------------------------------------------------------------------ */

void pr_rec_gla_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    gla_chunk c = chunk_init(work, C, K, V, s->g_per_value ? V : K);
    double *S = ht;   /* the running state lives in ht */
    if (s->h0) memcpy(S, s->h0, (size_t)KV * sizeof *S);
    else memset(S, 0, (size_t)KV * sizeof *S);
    for (int64_t t0 = 0; t0 < s->T; t0 += C) {
        if (ckpt) memcpy(ckpt + (t0 / C) * KV, S, (size_t)KV * sizeof *S);
        chunk_start(&c, s, t0);
        if (s->g_per_value) gv_forward_chunk(&c, s, o, S);
        else gk_forward_chunk(&c, s, o, S);
    }
}

void pr_rec_gla_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                                 const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V, W = s->g_per_value ? V : K;
    const int64_t KV = (int64_t)K * V;
    gla_chunk c = chunk_init(work, C, K, V, W);
    if (dht) memcpy(c.dS, dht, (size_t)KV * sizeof *c.dS);
    else memset(c.dS, 0, (size_t)KV * sizeof *c.dS);
    const int64_t nb = pr_rec_nckpt(s->T, C);
    for (int64_t b = nb - 1; b >= 0; b--) {
        const double *S = ckpt + b * KV;
        chunk_start(&c, s, b * C);
        c.dS_zero = b == nb - 1 && !dht;
        c.dS0_unused = b == 0 && !d->dh0;
        const int n = c.n;
        const int64_t t0 = c.t0;
        for (int t = 0; t < n; t++)
            for (int j = 0; j < V; j++) c.dY[(int64_t)t * V + j] = s->scale * dout[(t0 + t) * s->sv + j];
        memset(c.dG, 0, sizeof(double) * (size_t)n * W);
        if (s->g_per_value) gv_backward_chunk(&c, s, S);
        else gk_backward_chunk(&c, s, S);
        if (d->dg)   /* G_t = sum_{s<=t} g_s, per channel */
            for (int j = 0; j < W; j++) {
                double acc = 0;
                for (int t = n - 1; t >= 0; t--) acc += c.dG[(int64_t)t * W + j], d->dg[(t0 + t) * s->sg + j] += acc;
            }
        scatter_add(d->dq ? d->dq + t0 * s->sk : NULL, s->sk, c.dQ, n, K);
        scatter_add(d->dk ? d->dk + t0 * s->sk : NULL, s->sk, c.dK, n, K);
        scatter_add(d->dv ? d->dv + t0 * s->sv : NULL, s->sv, c.dV, n, V);
        memcpy(c.dS, c.dS0, (size_t)KV * sizeof *c.dS);
    }
    if (d->dh0)
        for (int64_t i = 0; i < KV; i++) d->dh0[i] += c.dS[i];
}
