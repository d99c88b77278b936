/* ops/recurrence/chunked.c: the chunked (chunk-parallel) form of the
 * recurrence family with a scalar decay (linattn, ssd, delta, gdn,
 * prism_core), docs/PRISM.md "Chunked form with extra writes", forward and
 * backward, in the matrix form the CUDA kernels use: each chunk is a few
 * dense products of chunk-sized matrices through pr_rec_gemm, plus a
 * triangular solve (blocked: substitution inside blocks of rows, products
 * between them). It gives the per-token form's results up to rounding
 * (tested to 1e-12 in float64).
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
 * As matrices, rows are tokens: Q, K [n][K], V, U [n][V]; the n L extra
 * keys and values KX [nL][K], VX [nL][V] (row t L + l: token t's extra l).
 * Folding masks and decays into the scores (D o: entry (t, w) times
 * D_t,tok(w), tok(w) the token of column w),
 *   Mq  = D o Q K^T   [n][n],  kept where i <= t     Mqx = D o Q KX^T  [n][nL], tok(w) <= t
 *   Mu  = D o K K^T   [n][n],  kept where i < t      Mx  = D o K KX^T  [n][nL], tok(w) < t
 * the chunk is
 *   W  = diag(gamma) K S + Mx VX + Mu U,  R = V - W,  U = diag(beta) R
 *        (I + diag(beta) Mu) U is unit lower triangular: forward substitution
 *   O  = scale (diag(gamma) Q S + Mq U + Mqx VX)
 *   S' = gamma_n S + (Dn o K)^T U + (Dn o KX)^T VX,  Dn_w = D_n,tok(w)
 */
#include "ops/recurrence/recurrence_cpu.h"

#include <math.h>
#include <string.h>

#include "ops/ops.h"

void pr_gemm_ld_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                    const void *B, int64_t ldb, void *C, int64_t ldc, double beta);

void pr_rec_gemm(bool ta, bool tb, int M, int N, int K, const double *A, int64_t lda, const double *B, int64_t ldb,
                 double *C, int64_t ldc, double beta)
{
    pr_gemm_ld_cpu(PR_F64, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta);
}

typedef pr_rec_mat cmat;

static void gemm(bool ta, bool tb, int M, int N, int K, cmat A, cmat B, double *C, int64_t ldc, double beta)
{
    pr_rec_mm(ta, tb, M, N, K, A, B, C, ldc, beta);
}

/* rows of the triangular solves' blocks: substitution inside, products between */
enum { SOLVE_BLOCK = 16 };

/* ---- the chunk's buffers ------------------------------------------------------------
 * Carved from the caller's work (pr_rec_chunk_work), sized for a full chunk
 * of C tokens; a chunk of n < C tokens uses them as n-row matrices. */

typedef struct {
    int C, n;             /* chunk length, tokens in this chunk */
    int64_t t0;           /* its first token */
    bool S_zero;          /* its start state is zero (the first chunk without h0): no product reads it */
    bool dS_zero;         /* backward: its end state's gradient is zero (the last chunk without dht) */
    bool dS0_unused;      /* backward: its start state's gradient is not wanted (the first chunk without dh0) */
    double *gam;          /* [C] gamma_t = e^{G_t} */
    double *Dm;           /* [C][C] D_ti for i <= t (row stride C) */
    double *Dn;           /* [C max(1, L)] D_n,tok(w): the decays to the chunk's end */
    cmat Q, K, V, KX, VX; /* the chunk's rows, read in place (KX, VX: copied when H > 1) */
    double *KXc, *VXc;    /* [C L][K], [C L][V] those copies */
    double *Ub, *R;       /* [C][V] the write values (delta rules), V - W */
    cmat U;               /* the write values: Ub, or V itself without beta */
    double *Mq, *Mqx, *Mu, *Mx; /* the masked, decayed scores above */
    double *T;            /* [C max(1, L)][max(K, V)] scratch */
    /* backward only */
    double *dY, *dW;      /* [C][V] gradients of O / scale and of W */
    double *dQ, *dK, *dKX, *dU, *dVX;
    double *dG, *dB;      /* [C] */
    double *dM;           /* [C][C L] a score matrix's gradient */
    double *dS0, *dS;     /* [K][V] gradients of the chunk's start state and of its end state */
} chunk;

/* Lays the chunk's buffers out from base (NULL: only counts); returns the
 * doubles they take. The one place that knows the layout. */
static int64_t chunk_layout(chunk *ch, double *base, int C, int K, int V, int L)
{
    const int64_t c = C, cl = c * (L > 1 ? L : 1), X = K > V ? K : V;
    int64_t off = 0;
#define TAKE(field, count) (ch->field = base ? base + off : NULL, off += (count))
    TAKE(gam, c), TAKE(Dm, c * c), TAKE(Dn, cl), TAKE(KXc, c * L * K), TAKE(VXc, c * L * V);
    TAKE(Ub, c * V), TAKE(R, c * V), TAKE(Mq, c * c), TAKE(Mqx, c * c * L), TAKE(Mu, c * c), TAKE(Mx, c * c * L);
    TAKE(T, cl * X), TAKE(dY, c * V), TAKE(dW, c * V), TAKE(dQ, c * K), TAKE(dK, c * K), TAKE(dKX, c * L * K);
    TAKE(dU, c * V), TAKE(dVX, c * L * V), TAKE(dG, c), TAKE(dB, c), TAKE(dM, c * cl);
    TAKE(dS0, (int64_t)K * V), TAKE(dS, (int64_t)K * V);
#undef TAKE
    return off;
}

int64_t pr_rec_chunk_work(int C, int K, int V, int L)
{
    chunk ch;
    return chunk_layout(&ch, NULL, C, K, V, L);
}

static chunk chunk_init(double *work, int C, int K, int V, int L)
{
    chunk ch = {.C = C};
    chunk_layout(&ch, work, C, K, V, L);
    return ch;
}

/* ---- small row helpers ----------------------------------------------------------- */

/* dst[t*n + j] = f src[t*stride + j] over rows rows */
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

/* dst[t] = f[t] src[t] over rows of n (dst contiguous) */
static void scaled_rows(double *dst, const double *f, cmat src, int rows, int64_t n)
{
    for (int t = 0; t < rows; t++)
        for (int64_t j = 0; j < n; j++) dst[t * n + j] = f[t] * src.p[t * src.ld + j];
}

/* y[t] += f[t] <X_t, B_t> over rows of n (B contiguous) */
static void add_row_dots(double *y, const double *f, cmat X, const double *B, int rows, int64_t n)
{
    for (int t = 0; t < rows; t++) y[t] += f[t] * pr_rec_dot8(X.p + t * X.ld, B + t * n, n);
}

/* Dn_w: the decay from write w's token to the chunk's last token, for rows
 * of r writes a token */
static void last_decays(chunk *c, int rows, int r)
{
    const double *Dl = c->Dm + (int64_t)(c->n - 1) * c->C;
    for (int w = 0; w < rows; w++) c->Dn[w] = Dl[w / r];
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
        if (b.r == 1)   /* the keys' blocks: a plain row product the compiler vectorizes */
            for (int i = 0; i < kept; i++) m[i] *= Dt[i];
        else
            for (int i = 0; i < kept; i++)
                for (int l = 0; l < b.r; l++) m[i * b.r + l] *= Dt[i];
        for (int w = kept * b.r; w < b.cols; w++) m[w] = 0;
    }
}

/* Given dM, the gradient of the masked scores M = D o P: dG from the decays
 * (dD_ti = P dM, dG_t += D dD, dG_i -= D dD, D dD = M dM), then dM = D o dM,
 * the gradient of the raw product P. */
static void decay_backward(const chunk *c, block m, double *dM)
{
    for (int t = 0; t < c->n; t++) {
        const double *Dt = c->Dm + (int64_t)t * c->C, *mt = m.M + (int64_t)t * m.cols;
        double *d = dM + (int64_t)t * m.cols, row = 0;
        const int kept = m.strict ? t : t + 1;
        for (int i = 0; i < kept; i++) {
            double h = 0;
            for (int l = 0; l < m.r; l++) {
                const int w = i * m.r + l;
                h += mt[w] * d[w];
                d[w] *= Dt[i];
            }
            row += h;
            c->dG[i] -= h;
        }
        c->dG[t] += row;
        for (int w = kept * m.r; w < m.cols; w++) d[w] = 0;
    }
}

/* the score blocks: of the outputs against K and KX, of W against K and KX */
static block q_block(const chunk *c) { return (block){c->Mq, c->n, 1, false}; }
static block qx_block(const chunk *c, int L) { return (block){c->Mqx, c->n * L, L, false}; }
static block u_block(const chunk *c) { return (block){c->Mu, c->n, 1, true}; }
static block x_block(const chunk *c, int L) { return (block){c->Mx, c->n * L, L, true}; }

/* ---- the chunk's values, shared by forward and backward ------------------------------ */

/* gamma, D and the views of the chunk's rows */
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
    c->Q = (cmat){s->q + t0 * s->sk, s->sk};
    c->K = (cmat){s->k + t0 * s->sk, s->sk};
    c->V = (cmat){s->v + t0 * s->sv, s->sv};
    if (!L) return;
    /* token t's extras are rows t L .. t L + L - 1 of one matrix when the
     * tokens' extras are adjacent (one head); else copied so */
    if (s->skx == (int64_t)L * K) c->KX = (cmat){s->kx + t0 * s->skx, K};
    else gather(c->KXc, s->kx + t0 * s->skx, s->skx, n, (int64_t)L * K, 1), c->KX = (cmat){c->KXc, K};
    if (s->svx == (int64_t)L * V) c->VX = (cmat){s->vx + t0 * s->svx, V};
    else gather(c->VXc, s->vx + t0 * s->svx, s->svx, n, (int64_t)L * V, 1), c->VX = (cmat){c->VXc, V};
}

/* the masked, decayed scores; Mu and Mx only for the delta rules (W) */
static void chunk_scores(chunk *c, const pr_rec_seq *s)
{
    const int K = s->K, L = s->L, n = c->n;
    gemm(false, true, n, n, K, c->Q, c->K, c->Mq, n, 0);   /* Mq = Q K^T */
    decay_mask(c, q_block(c));
    if (L) {
        gemm(false, true, n, n * L, K, c->Q, c->KX, c->Mqx, n * L, 0);   /* Mqx = Q KX^T */
        decay_mask(c, qx_block(c, L));
    }
    if (!s->beta) return;
    gemm(false, true, n, n, K, c->K, c->K, c->Mu, n, 0);   /* Mu = K K^T */
    decay_mask(c, u_block(c));
    if (!L) return;
    gemm(false, true, n, n * L, K, c->K, c->KX, c->Mx, n * L, 0);   /* Mx = K KX^T */
    decay_mask(c, x_block(c, L));
}

/* Rows b0 .. b1-1 of the forward substitution, W already holding what every
 * row before b0 contributes: W_t += sum_{b0<=i<t} Mu_ti u_i, R_t = v_t - W_t,
 * u_t = beta_t R_t. */
static void solve_rows(chunk *c, const pr_rec_seq *s, double *W, int b0, int b1)
{
    const int V = s->V, n = c->n;
    for (int t = b0; t < b1; t++) {
        double *w = W + (int64_t)t * V, *r = c->R + (int64_t)t * V, *u = c->Ub + (int64_t)t * V;
        const double *mu = c->Mu + (int64_t)t * n, *v = c->V.p + t * c->V.ld;
        for (int i = b0; i < t; i++) {
            const double a = mu[i], *ui = c->Ub + (int64_t)i * V;
            for (int j = 0; j < V; j++) w[j] += a * ui[j];
        }
        const double beta = s->beta[(c->t0 + t) * s->sg];
        for (int j = 0; j < V; j++) r[j] = v[j] - w[j], u[j] = beta * r[j];
    }
}

/* Y = diag(gamma) X S, [n][V] */
static void read_state(const chunk *c, const pr_rec_seq *s, const double *S, cmat X, double *Y)
{
    const int V = s->V, n = c->n;
    if (c->S_zero) {
        memset(Y, 0, sizeof(double) * (size_t)n * V);
        return;
    }
    gemm(false, false, n, V, s->K, X, (cmat){S, V}, Y, V, 0);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < V; j++) Y[(int64_t)t * V + j] *= c->gam[t];
}

/* U (and R) from start state S */
static void chunk_values(chunk *c, const double *S, const pr_rec_seq *s)
{
    const int V = s->V, L = s->L, n = c->n;
    if (!s->beta) {   /* u = v */
        c->U = c->V;
        return;
    }
    c->U = (cmat){c->Ub, V};
    double *W = c->T;
    read_state(c, s, S, c->K, W);                                 /* W = diag(gamma) K S */
    if (L) gemm(false, false, n, V, n * L, (cmat){c->Mx, n * L}, c->VX, W, V, 1);   /* W += Mx VX */
    /* W += Mu U and U = diag(beta) (V - W), a block of rows at a time */
    for (int b0 = 0; b0 < n; b0 += SOLVE_BLOCK) {
        const int b1 = b0 + SOLVE_BLOCK < n ? b0 + SOLVE_BLOCK : n;
        if (b0) gemm(false, false, b1 - b0, V, b0, (cmat){c->Mu + (int64_t)b0 * n, n}, c->U, W + (int64_t)b0 * V, V, 1);
        solve_rows(c, s, W, b0, b1);
    }
}

static void chunk_start(chunk *c, const pr_rec_seq *s, int64_t t0, const double *S)
{
    c->t0 = t0;
    c->n = (int)(s->T - t0 < c->C ? s->T - t0 : c->C);
    c->S_zero = t0 == 0 && !s->h0;
    chunk_load(c, s);
    chunk_scores(c, s);
    chunk_values(c, S, s);
}

/* ---- forward ------------------------------------------------------------------------ */

/* S' = gamma_n S + (Dn o K)^T U + (Dn o KX)^T VX */
static void state_forward(chunk *c, const pr_rec_seq *s, double *S)
{
    const int K = s->K, V = s->V, L = s->L, n = c->n;
    const int64_t KV = (int64_t)K * V;
    for (int64_t i = 0; i < KV; i++) S[i] *= c->gam[n - 1];
    last_decays(c, n, 1);
    scaled_rows(c->T, c->Dn, c->K, n, K);
    gemm(true, false, K, V, n, (cmat){c->T, K}, c->U, S, V, 1);
    if (!L) return;
    last_decays(c, n * L, L);
    scaled_rows(c->T, c->Dn, c->KX, n * L, K);
    gemm(true, false, K, V, n * L, (cmat){c->T, K}, c->VX, S, V, 1);
}

void pr_rec_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V, L = s->L;
    const int64_t KV = (int64_t)K * V;
    chunk c = chunk_init(work, C, K, V, L);
    double *S = ht;   /* the running state lives in ht */
    if (s->h0) memcpy(S, s->h0, (size_t)KV * sizeof *S);
    else memset(S, 0, (size_t)KV * sizeof *S);
    for (int64_t t0 = 0; t0 < s->T; t0 += C) {
        if (ckpt) memcpy(ckpt + (t0 / C) * KV, S, (size_t)KV * sizeof *S);
        chunk_start(&c, s, t0, S);
        const int n = c.n;
        /* O = scale (diag(gamma) Q S + Mq U + Mqx VX) */
        read_state(&c, s, S, c.Q, c.T);
        gemm(false, false, n, V, n, (cmat){c.Mq, n}, c.U, c.T, V, 1);
        if (L) gemm(false, false, n, V, n * L, (cmat){c.Mqx, n * L}, c.VX, c.T, V, 1);
        for (int t = 0; t < n; t++)
            for (int j = 0; j < V; j++) o[(t0 + t) * s->sv + j] = s->scale * c.T[(int64_t)t * V + j];
        state_forward(&c, s, S);
    }
}

/* ---- backward -------------------------------------------------------------------------
 * Chunks in reverse; each recomputes its values from its saved start state S,
 * takes dS' (the gradient of its end state) and leaves dS (of its start
 * state) in c->dS0. Every line of the matrix form, differentiated:
 *  S' = gamma_n S + sum over (keys A, values B) in {(K, U), (KX, VX)} of A^T diag(Dn) B:
 *     dS += gamma_n dS';  dG_n += gamma_n <S, dS'>;
 *     dA = diag(Dn) B dS'^T;  dB = diag(Dn) A dS';  Dn_w dDn_w = Dn_w <A_w, (B dS'^T)_w>
 *  Y = diag(gamma) X S + sum over blocks of M B, for Y = O / scale (X = Q,
 *  blocks Mq with (K, U), Mqx with (KX, VX)) and for W (X = K, blocks Mu, Mx),
 *  given dY:
 *     dS += X^T diag(gamma) dY;  dX += diag(gamma) dY S^T;  dG_t += gamma_t <X_t, (dY S^T)_t>;
 *     per block: dM = dY B^T (its decays feed dG, decay_backward; dP = D o dM);
 *     dB += M^T dY;  dX += dP A;  dA += dP^T X
 *  U = diag(beta) (V - W): dV = diag(beta) dU; dbeta_t = <dU_t, R_t>; dW = -diag(beta) dU.
 *     dU_i also receives sum_{t>i} Mu_ti dW_t (W_t reads u_i): walking t
 *     downwards, dU_t is complete when reached, the transposed solve.
 *  G_t = sum_{s<=t} g_s:  dg_s = sum_{t>=s} dG_t.
 */

/* the S' rule above for one (keys A, values B) pair of rows r writes a
 * token; dA and dB overwritten */
static void state_pair_backward(chunk *c, const pr_rec_seq *s, const double *dS, cmat A, cmat B, int rows, int r,
                                double *dA, double *dB)
{
    const int K = s->K, V = s->V, last = c->n - 1;
    const double *Dn = c->Dn;
    last_decays(c, rows, r);
    gemm(false, true, rows, K, V, B, (cmat){dS, V}, c->T, K, 0);   /* T = B dS'^T */
    for (int w = 0; w < rows; w++) {
        const double *f = c->T + (int64_t)w * K;
        const double h = Dn[w] * pr_rec_dot8(A.p + w * A.ld, f, K);   /* Dn_w dDn_w */
        c->dG[last] += h;
        c->dG[w / r] -= h;
        for (int j = 0; j < K; j++) dA[(int64_t)w * K + j] = Dn[w] * f[j];
    }
    gemm(false, false, rows, V, K, A, (cmat){dS, V}, c->T, V, 0);   /* T = A dS' */
    for (int w = 0; w < rows; w++)
        for (int j = 0; j < V; j++) dB[(int64_t)w * V + j] = Dn[w] * c->T[(int64_t)w * V + j];
}

/* the S' rule; fills dS0, dK, dU, dKX, dVX */
static void state_backward(chunk *c, const pr_rec_seq *s, const double *S, const double *dS)
{
    const int K = s->K, V = s->V, last = c->n - 1, L = s->L;
    const int64_t KV = (int64_t)K * V, n = c->n;
    const double gl = c->gam[last];
    if (c->dS_zero) {   /* every product below is zero */
        memset(c->dS0, 0, sizeof(double) * (size_t)KV);
        memset(c->dK, 0, sizeof(double) * (size_t)(n * K));
        memset(c->dU, 0, sizeof(double) * (size_t)(n * V));
        memset(c->dKX, 0, sizeof(double) * (size_t)(n * L * K));
        memset(c->dVX, 0, sizeof(double) * (size_t)(n * L * V));
        return;
    }
    for (int64_t i = 0; i < KV; i++) c->dS0[i] = gl * dS[i];
    c->dG[last] += gl * pr_rec_dot8(S, dS, KV);
    state_pair_backward(c, s, dS, c->K, c->U, c->n, 1, c->dK, c->dU);
    if (L) state_pair_backward(c, s, dS, c->KX, c->VX, c->n * L, L, c->dKX, c->dVX);
}

/* The Y rule above, inter-chunk part: dS += X^T diag(gamma) dY, dX += diag(gamma) dY S^T
 * (dX overwritten when fresh), dG_t += gamma_t <X_t, (dY S^T)_t>. */
static void read_state_backward(chunk *c, const pr_rec_seq *s, const double *S, cmat X, double *dX,
                                const double *dY, bool fresh)
{
    const int K = s->K, V = s->V, n = c->n;
    if (!c->dS0_unused) {
        scaled_rows(c->T, c->gam, (cmat){dY, V}, n, V);
        gemm(true, false, K, V, n, X, (cmat){c->T, V}, c->dS0, V, 1);   /* dS += X^T diag(gamma) dY */
    }
    if (c->S_zero) {   /* the rest reads S */
        if (fresh) memset(dX, 0, sizeof(double) * (size_t)n * K);
        return;
    }
    gemm(false, true, n, K, V, (cmat){dY, V}, (cmat){S, V}, c->T, K, 0);   /* T = dY S^T */
    add_row_dots(c->dG, c->gam, X, c->T, n, K);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < K; j++) {
            const double e = c->gam[t] * c->T[(int64_t)t * K + j];
            dX[(int64_t)t * K + j] = fresh ? e : dX[(int64_t)t * K + j] + e;
        }
}

/* The Y rule above, intra-chunk part, for one score block M with its keys A
 * and values B: dM = dY B^T, decays, dB += M^T dY (dB NULL: the solve took
 * it), dX += dP A, dA += dP^T X. */
static void read_block_backward(chunk *c, const pr_rec_seq *s, block m, cmat A, cmat B, cmat X, double *dX,
                                double *dA, double *dB, const double *dY)
{
    const int K = s->K, V = s->V, n = c->n;
    gemm(false, true, n, m.cols, V, (cmat){dY, V}, B, c->dM, m.cols, 0);   /* dM = dY B^T */
    decay_backward(c, m, c->dM);                                            /* dM = dP */
    if (dB) gemm(true, false, m.cols, V, n, (cmat){m.M, m.cols}, (cmat){dY, V}, dB, V, 1);   /* dB += M^T dY */
    gemm(false, false, n, K, m.cols, (cmat){c->dM, m.cols}, A, dX, K, 1);   /* dX += dP A */
    gemm(true, false, m.cols, K, n, (cmat){c->dM, m.cols}, X, dA, K, 1);    /* dA += dP^T X */
}

/* Rows b1-1 down to b0 of the transposed solve, dU of every row complete but
 * for what rows b0 .. t-1 of this block take from W: dbeta_t = <dU_t, R_t>,
 * dW_t = -beta_t dU_t, dU_i += Mu_ti dW_t. */
static void unsolve_rows(chunk *c, const pr_rec_seq *s, int b0, int b1)
{
    const int V = s->V, n = c->n;
    for (int t = b1 - 1; t >= b0; t--) {
        const double beta = s->beta[(c->t0 + t) * s->sg], *du = c->dU + (int64_t)t * V;
        double *dw = c->dW + (int64_t)t * V;
        c->dB[t] = pr_rec_dot8(du, c->R + (int64_t)t * V, V);
        for (int j = 0; j < V; j++) dw[j] = -beta * du[j];
        for (int i = b0; i < t; i++) {
            const double a = c->Mu[(int64_t)t * n + i];
            double *dui = c->dU + (int64_t)i * V;
            for (int j = 0; j < V; j++) dui[j] += a * dw[j];
        }
    }
}

/* u_t = beta_t r_t, walked downwards a block at a time: fills dW, dB, and
 * adds to dU what each W_t read of it */
static void values_backward(chunk *c, const pr_rec_seq *s)
{
    const int V = s->V, n = c->n;
    for (int b0 = (n - 1) / SOLVE_BLOCK * SOLVE_BLOCK; b0 >= 0; b0 -= SOLVE_BLOCK) {
        const int b1 = b0 + SOLVE_BLOCK < n ? b0 + SOLVE_BLOCK : n;
        unsolve_rows(c, s, b0, b1);
        /* dU_i += sum_{b0<=t<b1} Mu_ti dW_t for the rows i < b0 */
        if (b0)
            gemm(true, false, b0, V, b1 - b0, (cmat){c->Mu + (int64_t)b0 * n, n}, (cmat){c->dW + (int64_t)b0 * V, V},
                 c->dU, V, 1);
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
    /* the outputs, Y = O / scale with X = Q */
    gather(c->dY, dout + t0 * s->sv, s->sv, n, V, s->scale);
    read_state_backward(c, s, S, c->Q, c->dQ, c->dY, true);
    read_block_backward(c, s, q_block(c), c->K, c->U, c->Q, c->dQ, c->dK, c->dU, c->dY);
    if (L) read_block_backward(c, s, qx_block(c, L), c->KX, c->VX, c->Q, c->dQ, c->dKX, c->dVX, c->dY);
    if (s->beta) {   /* the write values, then W with X = K (Mu's dU: in the solve) */
        values_backward(c, s);
        read_state_backward(c, s, S, c->K, c->dK, c->dW, false);
        read_block_backward(c, s, u_block(c), c->K, c->U, c->K, c->dK, c->dK, NULL, c->dW);
        if (L) read_block_backward(c, s, x_block(c, L), c->KX, c->VX, c->K, c->dK, c->dKX, c->dVX, c->dW);
    }
    if (d->dg) {   /* G_t = sum_{s<=t} g_s */
        double acc = 0;
        for (int t = n - 1; t >= 0; t--) acc += c->dG[t], d->dg[(t0 + t) * s->sg] += acc;
    }
    scatter_add(d->dq ? d->dq + t0 * s->sk : NULL, s->sk, c->dQ, n, K, 1);
    scatter_add(d->dk ? d->dk + t0 * s->sk : NULL, s->sk, c->dK, n, K, 1);
    if (s->beta) {   /* dV = diag(beta) dU */
        for (int t = 0; d->dv && t < n; t++) {
            const double beta = s->beta[(t0 + t) * s->sg], *du = c->dU + (int64_t)t * V;
            for (int j = 0; j < V; j++) d->dv[(t0 + t) * s->sv + j] += beta * du[j];
        }
        scatter_add(d->dbeta ? d->dbeta + t0 * s->sg : NULL, s->sg, c->dB, n, 1, 1);
    } else scatter_add(d->dv ? d->dv + t0 * s->sv : NULL, s->sv, c->dU, n, V, 1);
    if (L) {
        scatter_add(d->dkx ? d->dkx + t0 * s->skx : NULL, s->skx, c->dKX, n, (int64_t)L * K, 1);
        scatter_add(d->dvx ? d->dvx + t0 * s->svx : NULL, s->svx, c->dVX, n, (int64_t)L * V, 1);
    }
}

void pr_rec_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                             const pr_rec_seq *s, int C, double *work)
{
    const int K = s->K, V = s->V;
    const int64_t KV = (int64_t)K * V;
    chunk c = chunk_init(work, C, K, V, s->L);
    if (dht) memcpy(c.dS, dht, (size_t)KV * sizeof *c.dS);
    else memset(c.dS, 0, (size_t)KV * sizeof *c.dS);
    const int64_t nb = pr_rec_nckpt(s->T, C);
    for (int64_t b = nb - 1; b >= 0; b--) {
        chunk_start(&c, s, b * C, ckpt + b * KV);
        c.dS_zero = b == nb - 1 && !dht;
        c.dS0_unused = b == 0 && !d->dh0;
        chunk_backward(d, &c, s, ckpt + b * KV, c.dS, dout);
        memcpy(c.dS, c.dS0, (size_t)KV * sizeof *c.dS);
    }
    if (d->dh0)
        for (int64_t i = 0; i < KV; i++) d->dh0[i] += c.dS[i];
}
