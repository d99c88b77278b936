/* ops/recurrence/chunked.c: the chunked (chunk-parallel) form of the
 * recurrence family with a scalar decay (linattn, ssd, delta, gdn,
 * prism_core), docs/PRISM.md "Chunked form with extra writes", forward and
 * backward, in the matrix form the CUDA kernels use: each chunk is a few
 * dense products of chunk-sized matrices through pr_rec_gemm, plus one
 * triangular solve by forward substitution. It gives the per-token form's
 * results up to rounding (tested to 1e-12 in float64).
 *
 * Inside a chunk of n tokens starting from state S [K][V], with
 * G_t = sum_{s<=t} g_s (chunk-local), gamma_t = e^{G_t}, D_ti = e^{G_t - G_i}:
 *   W_t = gamma_t S^T k_t + sum_{i<t} D_ti [(k_i.k_t) u_i + sum_l (kx_il.k_t) vx_il]
 *   u_t = beta_t (v_t - W_t)                (u_t = v_t without beta)
 *   o_t = scale (gamma_t S^T q_t + sum_{i<=t} D_ti [(k_i.q_t) u_i + sum_l (kx_il.q_t) vx_il])
 *   S'  = gamma_n S + sum_i D_ni (k_i u_i^T + sum_l kx_il vx_il^T)
 * W_t is the state just before token t's write, read at k_t; the extras land
 * after their own token's delta write, so W sees them with a strictly-lower
 * mask and the output with an inclusive one.
 *
 * As matrices, rows are tokens. The chunk's "writes" are its n keys followed
 * by its n L extra keys, Kw = [K; KX] (token t's extra l at row n + t L + l),
 * with values Uw = [U; VX]; tok(w) is write w's token. Folding masks and
 * decays into the scores,
 *   Mq = D o Q Kw^T   [n][nw], entry (t, w) kept where tok(w) <= t
 *   Mu = D o K K^T    [n][n],  kept where i < t
 *   Mx = D o K KX^T   [n][nL], kept where tok(w) < t
 * (D o: times D_t,tok(w)), the chunk is
 *   R  = V - W = V - diag(gamma) K S - Mx VX - Mu U
 *   U  = diag(beta) R: (I + diag(beta) Mu) U = diag(beta) (V - diag(gamma) K S - Mx VX),
 *        unit lower triangular, solved by forward substitution
 *   O  = scale (diag(gamma) Q S + Mq Uw)
 *   S' = gamma_n S + (Dn o Kw)^T Uw,  Dn_w = D_n,tok(w)
 */
#include "ops/recurrence/recurrence_cpu.h"

#include <math.h>
#include <string.h>

#include "ops/ops.h"

void pr_gemm_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                 const void *B, void *C, double beta);

void pr_rec_gemm(bool ta, bool tb, int M, int N, int K, const double *A, const double *B, double *C, double beta)
{
    pr_gemm_cpu(PR_F64, ta, tb, M, N, K, A, B, C, beta);
}

/* ---- the chunk's buffers ------------------------------------------------------------
 * Carved from the caller's work (pr_rec_chunk_work), sized for a full chunk
 * of C tokens; a chunk of n < C tokens uses them as n-row matrices. */

typedef struct {
    int C, n, nw;     /* chunk length, tokens in this chunk, its writes n (1 + L) */
    int64_t t0;       /* its first token */
    double *gam;      /* [C] gamma_t = e^{G_t} */
    double *Dm;       /* [C][C] D_ti = e^{G_t - G_i} for i <= t (row stride C) */
    double *Q, *Kw;   /* [n][K], [nw][K]: the chunk's queries; its keys then extra keys */
    double *Uw, *R;   /* [nw][V]: the write values U then VX; [n][V] V - W (delta rules) */
    double *Mq, *Mqx, *Mu, *Mx; /* the masked, decayed scores above, Mq split [Mq Mqx] by U and VX */
    double *T;        /* [nw][max(K, V)] scratch */
    /* backward only */
    double *dY, *dW;  /* [n][V] gradients of O / scale and of W */
    double *dQ, *dKw, *dUw; /* [n][K], [nw][K], [nw][V] */
    double *dG, *dB;  /* [C] */
    double *dM;       /* [n][nw] a score matrix's gradient */
    double *dS0, *dS; /* [K][V] gradients of the chunk's start state and of its end state */
} chunk;

int64_t pr_rec_chunk_work(int C, int K, int V, int L)
{
    const int64_t c = C, W = c * (1 + L), X = K > V ? K : V;
    return c + c * c + c * K + W * K + W * V + c * V       /* gam, Dm, Q, Kw, Uw, R */
           + 2 * c * c + 2 * c * c * L + W * X              /* Mq, Mqx, Mu, Mx, T */
           + 2 * c * V + c * K + W * K + W * V + 2 * c      /* dY, dW, dQ, dKw, dUw, dG, dB */
           + c * W + 2 * (int64_t)K * V;                    /* dM, dS0, dS */
}

static chunk chunk_init(double *work, int C, int K, int V, int L)
{
    const int64_t c = C, W = c * (1 + L), X = K > V ? K : V;
    chunk ch = {.C = C};
    double *p = work;
#define TAKE(field, count) (ch.field = p, p += (count))
    TAKE(gam, c), TAKE(Dm, c * c), TAKE(Q, c * K), TAKE(Kw, W * K), TAKE(Uw, W * V), TAKE(R, c * V);
    TAKE(Mq, c * c), TAKE(Mqx, c * c * L), TAKE(Mu, c * c), TAKE(Mx, c * c * L), TAKE(T, W * X);
    TAKE(dY, c * V), TAKE(dW, c * V), TAKE(dQ, c * K), TAKE(dKw, W * K), TAKE(dUw, W * V), TAKE(dG, c), TAKE(dB, c);
    TAKE(dM, c * W), TAKE(dS0, (int64_t)K * V), TAKE(dS, (int64_t)K * V);
#undef TAKE
    return ch;
}

/* ---- small row helpers ----------------------------------------------------------- */

/* rows x rows of n doubles from a strided source (dst[t*n + j] = f src[t*stride + j]) */
static void gather(double *dst, const double *src, int64_t stride, int rows, int64_t n, double f)
{
    for (int t = 0; t < rows; t++)
        for (int64_t j = 0; j < n; j++) dst[t * n + j] = f * src[t * stride + j];
}

/* dst[t*stride + j] += f src[t*n + j]; dst NULL: not needed */
static void scatter_add(double *dst, int64_t stride, const double *src, int rows, int64_t n, double f)
{
    if (!dst) return;
    for (int t = 0; t < rows; t++)
        for (int64_t j = 0; j < n; j++) dst[t * stride + j] += f * src[t * n + j];
}

/* row t of A [rows][n] times f[t] */
static void scale_rows(double *A, const double *f, int rows, int64_t n)
{
    for (int t = 0; t < rows; t++)
        for (int64_t j = 0; j < n; j++) A[t * n + j] *= f[t];
}

/* y[t] += f[t] <A_t, B_t> over rows of n */
static void add_row_dots(double *y, const double *f, const double *A, const double *B, int rows, int64_t n)
{
    for (int t = 0; t < rows; t++) y[t] += f[t] * pr_rec_dot(A + t * n, B + t * n, n);
}

/* ---- masks and decays -------------------------------------------------------------
 * A score block: M [n][cols], r writes a token (1 for K, L for KX), so
 * column w belongs to token w / r; kept where that token is < t (strict) or
 * <= t. */

typedef struct { double *M; int cols, r; bool strict; } block;

/* M = D o M on the kept entries, 0 elsewhere */
static void decay_mask(const chunk *c, block b)
{
    for (int t = 0; t < c->n; t++) {
        const double *Dt = c->Dm + (int64_t)t * c->C;
        double *m = b.M + (int64_t)t * b.cols;
        const int kept = b.strict ? t : t + 1;
        for (int i = 0; i < kept; i++)
            for (int l = 0; l < b.r; l++) m[i * b.r + l] *= Dt[i];
        for (int w = kept * b.r; w < b.cols; w++) m[w] = 0;
    }
}

/* Given dM, the gradient of the masked scores M = D o P: dG from the decays
 * (dD_ti = P dM, dG_t += D dD, dG_i -= D dD, D dD = M dM), then dM = D o dM,
 * the gradient of the raw product P. */
static void decay_backward(const chunk *c, block m, block dm)
{
    for (int t = 0; t < c->n; t++) {
        const double *Dt = c->Dm + (int64_t)t * c->C, *mt = m.M + (int64_t)t * m.cols;
        double *d = dm.M + (int64_t)t * m.cols;
        const int kept = m.strict ? t : t + 1;
        for (int i = 0; i < kept; i++)
            for (int l = 0; l < m.r; l++) {
                const int w = i * m.r + l;
                const double h = mt[w] * d[w];
                c->dG[t] += h;
                c->dG[i] -= h;
                d[w] *= Dt[i];
            }
        for (int w = kept * m.r; w < m.cols; w++) d[w] = 0;
    }
}

/* ---- the chunk's values, shared by forward and backward ------------------------------ */

/* gamma, D; the chunk's rows gathered */
static void chunk_load(chunk *c, const pr_rec_seq *s)
{
    const int K = s->K, V = s->V, L = s->L, n = c->n;
    const int64_t t0 = c->t0;
    /* gamma_t = a_0 ... a_t and D_ti = a_{i+1} ... a_t, a_t = e^{g_t}: products of
     * factors <= 1, one exp a token */
    for (int t = 0; t < n; t++) {
        const double a = s->g ? exp(s->g[(t0 + t) * s->sg]) : 1.0;
        double *Dt = c->Dm + (int64_t)t * c->C;
        const double *Dp = Dt - c->C;
        c->gam[t] = a * (t ? c->gam[t - 1] : 1.0);
        for (int i = 0; i < t; i++) Dt[i] = a * Dp[i];
        Dt[t] = 1.0;
    }
    gather(c->Q, s->q + t0 * s->sk, s->sk, n, K, 1);
    gather(c->Kw, s->k + t0 * s->sk, s->sk, n, K, 1);
    gather(c->R, s->v + t0 * s->sv, s->sv, n, V, 1);
    if (L) {
        gather(c->Kw + (int64_t)n * K, s->kx + t0 * s->skx, s->skx, n, (int64_t)L * K, 1);
        gather(c->Uw + (int64_t)n * V, s->vx + t0 * s->svx, s->svx, n, (int64_t)L * V, 1);
    }
}

/* the score blocks: of the outputs against U and VX, of W against U and VX */
static block q_block(const chunk *c) { return (block){c->Mq, c->n, 1, false}; }
static block qx_block(const chunk *c, int L) { return (block){c->Mqx, c->n * L, L, false}; }
static block u_block(const chunk *c) { return (block){c->Mu, c->n, 1, true}; }
static block x_block(const chunk *c, int L) { return (block){c->Mx, c->n * L, L, true}; }

/* the masked, decayed scores; Mu and Mx only for the delta rules (W) */
static void chunk_scores(chunk *c, const pr_rec_seq *s)
{
    const int K = s->K, L = s->L, n = c->n;
    const double *KX = c->Kw + (int64_t)n * K;
    pr_rec_gemm(false, true, n, n, K, c->Q, c->Kw, c->Mq, 0);   /* Mq = Q K^T */
    decay_mask(c, q_block(c));
    if (L) {
        pr_rec_gemm(false, true, n, n * L, K, c->Q, KX, c->Mqx, 0);   /* Mqx = Q KX^T */
        decay_mask(c, qx_block(c, L));
    }
    if (!s->beta) return;
    pr_rec_gemm(false, true, n, n, K, c->Kw, c->Kw, c->Mu, 0);   /* Mu = K K^T */
    decay_mask(c, u_block(c));
    if (!L) return;
    pr_rec_gemm(false, true, n, n * L, K, c->Kw, KX, c->Mx, 0);   /* Mx = K KX^T */
    decay_mask(c, x_block(c, L));
}

/* U (and R) from start state S; R holds V on entry */
static void chunk_values(chunk *c, const double *S, const pr_rec_seq *s)
{
    const int K = s->K, V = s->V, L = s->L, n = c->n;
    if (!s->beta) {   /* u = v */
        memcpy(c->Uw, c->R, sizeof(double) * (size_t)n * V);
        return;
    }
    pr_rec_gemm(false, false, n, V, K, c->Kw, S, c->T, 0);   /* T = K S */
    scale_rows(c->T, c->gam, n, V);                           /* T = diag(gamma) K S */
    if (L) pr_rec_gemm(false, false, n, V, n * L, c->Mx, c->Uw + (int64_t)n * V, c->T, 1);   /* T += Mx VX */
    for (int64_t i = 0; i < (int64_t)n * V; i++) c->R[i] -= c->T[i];
    /* R_t -= sum_{i<t} Mu_ti U_i, then U_t = beta_t R_t: the forward substitution */
    for (int t = 0; t < n; t++) {
        double *r = c->R + (int64_t)t * V, *u = c->Uw + (int64_t)t * V;
        const double *mu = c->Mu + (int64_t)t * n;
        for (int i = 0; i < t; i++) {
            const double a = mu[i], *ui = c->Uw + (int64_t)i * V;
            for (int j = 0; j < V; j++) r[j] -= a * ui[j];
        }
        const double beta = s->beta[(c->t0 + t) * s->sg];
        for (int j = 0; j < V; j++) u[j] = beta * r[j];
    }
}

static void chunk_start(chunk *c, const pr_rec_seq *s, int64_t t0, const double *S)
{
    c->t0 = t0;
    c->n = (int)(s->T - t0 < c->C ? s->T - t0 : c->C);
    c->nw = c->n * (1 + s->L);
    chunk_load(c, s);
    chunk_scores(c, s);
    chunk_values(c, S, s);
}

/* ---- forward ------------------------------------------------------------------------ */

void pr_rec_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    chunk c = chunk_init(work, C, K, V, s->L);
    double *S = ht;   /* the running state lives in ht */
    if (s->h0) memcpy(S, s->h0, (size_t)KV * sizeof *S);
    else memset(S, 0, (size_t)KV * sizeof *S);
    for (int64_t t0 = 0; t0 < s->T; t0 += C) {
        if (ckpt) memcpy(ckpt + (t0 / C) * KV, S, (size_t)KV * sizeof *S);
        chunk_start(&c, s, t0, S);
        const int n = c.n, last = n - 1;
        /* O = scale (diag(gamma) Q S + Mq Uw) */
        pr_rec_gemm(false, false, n, V, K, c.Q, S, c.T, 0);
        scale_rows(c.T, c.gam, n, V);
        pr_rec_gemm(false, false, n, V, n, c.Mq, c.Uw, c.T, 1);
        if (s->L) pr_rec_gemm(false, false, n, V, n * s->L, c.Mqx, c.Uw + (int64_t)n * V, c.T, 1);
        for (int t = 0; t < n; t++)
            for (int j = 0; j < V; j++) o[(t0 + t) * s->sv + j] = s->scale * c.T[(int64_t)t * V + j];
        /* S' = gamma_n S + (Dn o Kw)^T Uw */
        const double *Dn = c.Dm + (int64_t)last * C;
        for (int64_t i = 0; i < KV; i++) S[i] *= c.gam[last];
        for (int w = 0; w < c.nw; w++) {
            const double D = Dn[w < n ? w : (w - n) / s->L];
            for (int j = 0; j < K; j++) c.T[(int64_t)w * K + j] = D * c.Kw[(int64_t)w * K + j];
        }
        pr_rec_gemm(true, false, K, V, c.nw, c.T, c.Uw, S, 1);
    }
}

/* ---- backward -------------------------------------------------------------------------
 * Chunks in reverse; each recomputes its values from its saved start state S,
 * takes dS' (the gradient of its end state) and leaves dS (of its start
 * state) in c->dS0. Every line of the matrix form, differentiated:
 *  S' = gamma_n S + Kw^T diag(Dn) Uw:
 *     dS += gamma_n dS';  dG_n += gamma_n <S, dS'>;
 *     dKw += diag(Dn) Uw dS'^T;  dUw += diag(Dn) Kw dS';  dDn_w = <Kw_w, (Uw dS'^T)_w>
 *  Y = diag(gamma) X S + M Uw, for Y = O / scale (X = Q, M = Mq) and for W
 *  (X = K, M = [Mu Mx]), given dY:
 *     dS += X^T diag(gamma) dY;  dX += diag(gamma) dY S^T;  dG_t += gamma_t <X_t, (dY S^T)_t>;
 *     dM = dY Uw^T (its decays feed dG, decay_backward; dP = D o dM);
 *     dUw += M^T dY;  dX += dP Kw;  dKw += dP^T X
 *  U = diag(beta) (V - W): dV = diag(beta) dU; dbeta_t = <dU_t, R_t>; dW = -diag(beta) dU.
 *     dU_i also receives sum_{t>i} Mu_ti dW_t (W_t reads u_i): walking t
 *     downwards, dU_t is complete when reached, the transposed solve.
 *  G_t = sum_{s<=t} g_s:  dg_s = sum_{t>=s} dG_t.
 */

/* the S' rule above; dS0 = gamma_n dS' */
static void state_backward(chunk *c, const pr_rec_seq *s, const double *S, const double *dS)
{
    const int K = s->K, V = s->V, n = c->n, last = n - 1;
    const int64_t KV = (int64_t)K * V;
    const double gl = c->gam[last], *Dn = c->Dm + (int64_t)last * c->C;
    for (int64_t i = 0; i < KV; i++) c->dS0[i] = gl * dS[i];
    c->dG[last] += gl * pr_rec_dot(S, dS, KV);
    pr_rec_gemm(false, true, c->nw, K, V, c->Uw, dS, c->T, 0);   /* T = Uw dS'^T */
    for (int w = 0; w < c->nw; w++) {
        const int i = w < n ? w : (w - n) / s->L;
        const double D = Dn[i], *f = c->T + (int64_t)w * K;
        const double h = D * pr_rec_dot(c->Kw + (int64_t)w * K, f, K);   /* Dn_w dDn_w */
        c->dG[last] += h;
        c->dG[i] -= h;
        for (int j = 0; j < K; j++) c->dKw[(int64_t)w * K + j] = D * f[j];
    }
    pr_rec_gemm(false, false, c->nw, V, K, c->Kw, dS, c->T, 0);   /* T = Kw dS' */
    for (int w = 0; w < c->nw; w++) {
        const double D = Dn[w < n ? w : (w - n) / s->L];
        for (int j = 0; j < V; j++) c->dUw[(int64_t)w * V + j] = D * c->T[(int64_t)w * V + j];
    }
}

/* The Y rule above, inter-chunk part: dS += X^T diag(gamma) dY, dX += diag(gamma) dY S^T
 * (dX overwritten when fresh), dG_t += gamma_t <X_t, (dY S^T)_t>. */
static void read_state_backward(chunk *c, const pr_rec_seq *s, const double *S, const double *X, double *dX,
                                const double *dY, bool fresh)
{
    const int K = s->K, V = s->V, n = c->n;
    memcpy(c->T, dY, sizeof(double) * (size_t)n * V);
    scale_rows(c->T, c->gam, n, V);
    pr_rec_gemm(true, false, K, V, n, X, c->T, c->dS0, 1);   /* dS += X^T diag(gamma) dY */
    pr_rec_gemm(false, true, n, K, V, dY, S, c->T, 0);       /* T = dY S^T */
    add_row_dots(c->dG, c->gam, X, c->T, n, K);
    scale_rows(c->T, c->gam, n, K);
    if (fresh) memcpy(dX, c->T, sizeof(double) * (size_t)n * K);
    else
        for (int64_t i = 0; i < (int64_t)n * K; i++) dX[i] += c->T[i];
}

/* The Y rule above, intra-chunk part, for one score block M (its columns the
 * writes Kw_w, Uw_w from w0 on): dM = dY Uw^T, decays, dUw += M^T dY (unless
 * the solve took it), dX += dP Kw, dKw += dP^T X. */
static void read_block_backward(chunk *c, const pr_rec_seq *s, block m, int w0, const double *X, double *dX,
                                const double *dY, bool solved)
{
    const int K = s->K, V = s->V, n = c->n;
    const double *Kw = c->Kw + (int64_t)w0 * K, *Uw = c->Uw + (int64_t)w0 * V;
    block dm = m;
    dm.M = c->dM;
    pr_rec_gemm(false, true, n, m.cols, V, dY, Uw, dm.M, 0);   /* dM = dY Uw^T */
    decay_backward(c, m, dm);                                   /* dM = dP */
    if (!solved) pr_rec_gemm(true, false, m.cols, V, n, m.M, dY, c->dUw + (int64_t)w0 * V, 1);   /* dUw += M^T dY */
    pr_rec_gemm(false, false, n, K, m.cols, dm.M, Kw, dX, 1);                       /* dX += dP Kw */
    pr_rec_gemm(true, false, m.cols, K, n, dm.M, X, c->dKw + (int64_t)w0 * K, 1);   /* dKw += dP^T X */
}

/* u_t = beta_t r_t, walked downwards: the transposed solve; fills dW, dB */
static void values_backward(chunk *c, const pr_rec_seq *s)
{
    const int V = s->V, n = c->n;
    for (int t = n - 1; t >= 0; t--) {
        const double beta = s->beta[(c->t0 + t) * s->sg], *du = c->dUw + (int64_t)t * V;
        double *dw = c->dW + (int64_t)t * V;
        c->dB[t] = pr_rec_dot(du, c->R + (int64_t)t * V, V);
        for (int j = 0; j < V; j++) dw[j] = -beta * du[j];
        for (int i = 0; i < t; i++) {   /* W_t read u_i with weight Mu_ti */
            const double a = c->Mu[(int64_t)t * n + i];
            double *dui = c->dUw + (int64_t)i * V;
            for (int j = 0; j < V; j++) dui[j] += a * dw[j];
        }
    }
}

/* one chunk: c->dS0 receives the gradient of its start state S, dS is that of its end state */
static void chunk_backward(const pr_rec_grads *d, chunk *c, const pr_rec_seq *s, const double *S, const double *dS,
                           const double *dout)
{
    const int K = s->K, V = s->V, L = s->L, n = c->n;
    const int64_t t0 = c->t0;
    memset(c->dG, 0, sizeof(double) * (size_t)n);
    state_backward(c, s, S, dS);
    /* the outputs, Y = O / scale with X = Q and M = Mq */
    gather(c->dY, dout + t0 * s->sv, s->sv, n, V, s->scale);
    read_state_backward(c, s, S, c->Q, c->dQ, c->dY, true);
    read_block_backward(c, s, q_block(c), 0, c->Q, c->dQ, c->dY, false);
    if (L) read_block_backward(c, s, qx_block(c, L), n, c->Q, c->dQ, c->dY, false);
    if (s->beta) {   /* the write values, then W with X = K and M = [Mu Mx] */
        values_backward(c, s);
        read_state_backward(c, s, S, c->Kw, c->dKw, c->dW, false);
        read_block_backward(c, s, u_block(c), 0, c->Kw, c->dKw, c->dW, true);   /* Mu's dU: in the solve */
        if (L) read_block_backward(c, s, x_block(c, L), n, c->Kw, c->dKw, c->dW, false);
    }
    if (d->dg) {   /* G_t = sum_{s<=t} g_s */
        double acc = 0;
        for (int t = n - 1; t >= 0; t--) acc += c->dG[t], d->dg[(t0 + t) * s->sg] += acc;
    }
    scatter_add(d->dq ? d->dq + t0 * s->sk : NULL, s->sk, c->dQ, n, K, 1);
    scatter_add(d->dk ? d->dk + t0 * s->sk : NULL, s->sk, c->dKw, n, K, 1);
    if (s->beta) {   /* dV = diag(beta) dU */
        for (int t = 0; d->dv && t < n; t++) {
            const double beta = s->beta[(t0 + t) * s->sg], *du = c->dUw + (int64_t)t * V;
            for (int j = 0; j < V; j++) d->dv[(t0 + t) * s->sv + j] += beta * du[j];
        }
        scatter_add(d->dbeta ? d->dbeta + t0 * s->sg : NULL, s->sg, c->dB, n, 1, 1);
    } else scatter_add(d->dv ? d->dv + t0 * s->sv : NULL, s->sv, c->dUw, n, V, 1);
    if (L) {
        scatter_add(d->dkx ? d->dkx + t0 * s->skx : NULL, s->skx, c->dKw + (int64_t)n * K, n, (int64_t)L * K, 1);
        scatter_add(d->dvx ? d->dvx + t0 * s->svx : NULL, s->svx, c->dUw + (int64_t)n * V, n, (int64_t)L * V, 1);
    }
}

void pr_rec_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                             const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    chunk c = chunk_init(work, C, K, V, s->L);
    double *dS = c.dS;
    if (dht) memcpy(dS, dht, (size_t)KV * sizeof *dS);
    else memset(dS, 0, (size_t)KV * sizeof *dS);
    for (int64_t b = pr_rec_nckpt(s->T, C) - 1; b >= 0; b--) {
        chunk_start(&c, s, b * C, ckpt + b * KV);
        chunk_backward(d, &c, s, ckpt + b * KV, dS, dout);
        memcpy(dS, c.dS0, (size_t)KV * sizeof *dS);
    }
    if (d->dh0)
        for (int64_t i = 0; i < KV; i++) d->dh0[i] += dS[i];
}
