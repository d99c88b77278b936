/* ops/ttt_mlp.c: TTT-MLP, CPU forward and hand-derived backward.
 *
 * One tape node: in q,k,v,w,b,eta,w1,b1,w2,b2 (b1/b2 may be NULL = zeros),
 * out o,w1t,b1t,w2t,b2t; iarg[0] = mini_batch, farg[0] = scale, farg[1] = eps.
 * Sequential over mini-batches, dual form inside one. The forward saves the
 * four inner weights at every mini-batch start (saved[0..3], f64 on the CPU,
 * [B,H,NMB,...]); the backward recomputes a mini-batch from them, walking the
 * mini-batches in reverse. f32 and bf16 are computed in double and rounded on exit.
 */
#include "ops/ttt_mlp.h"

#include "ops/ttt_kit.h"

typedef struct {
    int64_t B, T, H, K, N, mb, nmb;
    double scale, eps;
} mlp_dims;

static mlp_dims mlp_dims_of(const pr_node *n)
{
    const pr_tensor *q = n->in[0];
    mlp_dims d = {.B = q->shape[0], .T = q->shape[1], .H = q->shape[2], .K = q->shape[3]};
    d.N = n->in[6]->shape[3];
    d.mb = n->iarg[0];
    d.nmb = (d.T + d.mb - 1) / d.mb;
    d.scale = n->farg[0], d.eps = n->farg[1];
    return d;
}

/* the inner weights of one (b,h): W1 [K,N], b1 [N], W2 [N,K], b2 [K] */
typedef struct {
    double *W1, *b1, *W2, *b2;
} mlp_weights;

/* ---- one mini-batch -----------------------------------------------------------
 * m token rows: qs (scaled q), k, v, eta. For the writing tokens j (at the
 * start weights): Z1, X2 = gelu(Z1), its derivatives gp, gpp, Z2 = X2 W2 + b2
 * normalized into xz (scale sz), the residual G, gZ2 = dl/dZ2, gX2 = gZ2 W2^T,
 * gZ1 = gX2 gp. For the reading tokens i: A1_ij = qs_i.k_j + 1,
 * Z1b_i = qs_i W1 + b1 - eta_i sum_{j<=i} A1_ij gZ1_j, X2b = gelu(Z1b) (gpb),
 * A2_ij = X2b_i.X2_j + 1, Z2b_i = X2b_i W2 + b2 - eta_i sum_{j<=i} A2_ij gZ2_j,
 * normalized into xb (scale sb). */
typedef struct {
    double *qs, *k, *v, *dout, *xz, *G, *gZ2, *Z2b, *xb, *dZ2b, *dqs, *dk, *dv, *P2, *dgZ2, *dZ2, *t1, *t2; /* [mb,K] */
    double *Z1, *X2, *gp, *gpp, *gX2, *gZ1, *X2b, *gpb, *dZ1b, *dX2, *dgZ1, *dZ1, *P1;                   /* [mb,N] */
    double *eta, *sz, *sb, *deta, *A1, *A2;
} mlp_work;

#define MLP_K_ROWS(s) {&s->qs, &s->k, &s->v, &s->dout, &s->xz, &s->G, &s->gZ2, &s->Z2b, &s->xb, &s->dZ2b, \
                       &s->dqs, &s->dk, &s->dv, &s->P2, &s->dgZ2, &s->dZ2, &s->t1, &s->t2}
#define MLP_N_ROWS(s) {&s->Z1, &s->X2, &s->gp, &s->gpp, &s->gX2, &s->gZ1, &s->X2b, &s->gpb, &s->dZ1b, &s->dX2, \
                       &s->dgZ1, &s->dZ1, &s->P1}
#define MLP_SMALL(s) {&s->eta, &s->sz, &s->sb, &s->deta, &s->A1, &s->A2}

static void mlp_work_init(mlp_work *s, int64_t mb, int64_t K, int64_t N)
{
    double **kr[] = MLP_K_ROWS(s), **nr[] = MLP_N_ROWS(s), **sm[] = MLP_SMALL(s);
    for (size_t i = 0; i < sizeof kr / sizeof *kr; i++) *kr[i] = kit_zalloc(mb * K);
    for (size_t i = 0; i < sizeof nr / sizeof *nr; i++) *nr[i] = kit_zalloc(mb * N);
    for (size_t i = 0; i < sizeof sm / sizeof *sm; i++) *sm[i] = kit_zalloc(mb * mb);
}

static void mlp_work_free(mlp_work *s)
{
    double **kr[] = MLP_K_ROWS(s), **nr[] = MLP_N_ROWS(s), **sm[] = MLP_SMALL(s);
    for (size_t i = 0; i < sizeof kr / sizeof *kr; i++) free(*kr[i]);
    for (size_t i = 0; i < sizeof nr / sizeof *nr; i++) free(*nr[i]);
    for (size_t i = 0; i < sizeof sm / sizeof *sm; i++) free(*sm[i]);
}

/* x [K] through the inner model at W: Z1, X2 (+ derivatives) and Z2 */
static void mlp_inner_forward(const double *x, const mlp_weights *W, int64_t K, int64_t N, double *Z1, double *X2,
                              double *gp, double *gpp, double *Z2)
{
    kit_vec_mat(x, W->W1, K, N, Z1, false);
    for (int64_t c = 0; c < N; c++) X2[c] = kit_gelu(Z1[c] += W->b1[c], gp + c, gpp ? gpp + c : NULL);
    kit_vec_mat(X2, W->W2, N, K, Z2, false);
    for (int64_t c = 0; c < K; c++) Z2[c] += W->b2[c];
}

static void mb_recompute(int64_t m, int64_t K, int64_t N, double eps, const double *w, const double *b,
                         const mlp_weights *W, mlp_work *s)
{
    for (int64_t j = 0; j < m; j++) {
        double *z2 = s->t1 + j * K;
        mlp_inner_forward(s->k + j * K, W, K, N, s->Z1 + j * N, s->X2 + j * N, s->gp + j * N, s->gpp + j * N, z2);
        s->sz[j] = kit_ln(z2, K, eps, s->xz + j * K);
        kit_inner_grad(s->xz + j * K, s->sz[j], w, b, s->v + j * K, s->k + j * K, K, s->G + j * K, s->gZ2 + j * K);
        memset(s->gX2 + j * N, 0, (size_t)N * sizeof(double));
        kit_mat_vec(W->W2, s->gZ2 + j * K, N, K, 1.0, s->gX2 + j * N);
        for (int64_t c = 0; c < N; c++) s->gZ1[j * N + c] = s->gX2[j * N + c] * s->gp[j * N + c];
    }
    for (int64_t i = 0; i < m; i++) {
        double *x2 = s->X2b + i * N, *z2 = s->Z2b + i * K;
        double *Z1b = s->dZ1b + i * N; /* Z1b - b1 lives in dZ1b until the backward overwrites it */
        kit_vec_mat(s->qs + i * K, W->W1, K, N, Z1b, false);
        for (int64_t j = 0; j <= i; j++) {
            double cf = s->eta[i] * (s->A1[i * m + j] = kit_dot(s->qs + i * K, s->k + j * K, K) + 1);
            for (int64_t c = 0; c < N; c++) Z1b[c] -= cf * s->gZ1[j * N + c];
        }
        for (int64_t c = 0; c < N; c++) x2[c] = kit_gelu(Z1b[c] + W->b1[c], s->gpb + i * N + c, NULL);
        kit_vec_mat(x2, W->W2, N, K, z2, false);
        for (int64_t c = 0; c < K; c++) z2[c] += W->b2[c];
        for (int64_t j = 0; j <= i; j++) {
            double cf = s->eta[i] * (s->A2[i * m + j] = kit_dot(x2, s->X2 + j * N, N) + 1);
            for (int64_t c = 0; c < K; c++) z2[c] -= cf * s->gZ2[j * K + c];
        }
        s->sb[i] = kit_ln(z2, K, eps, s->xb + i * K);
    }
}

/* forward of one mini-batch: o rows (into dout), and W moved to the end state */
static void mb_forward(int64_t m, int64_t K, int64_t N, double eps, const double *w, const double *b,
                       mlp_weights *W, mlp_work *s)
{
    mb_recompute(m, K, N, eps, w, b, W, s);
    for (int64_t i = 0; i < m; i++)
        for (int64_t c = 0; c < K; c++) s->dout[i * K + c] = s->Z2b[i * K + c] + w[c] * s->xb[i * K + c] + b[c];
    double e = s->eta[m - 1];
    for (int64_t j = 0; j < m; j++) {
        kit_outer(W->W1, s->k + j * K, s->gZ1 + j * N, K, N, -e);
        kit_outer(W->W2, s->X2 + j * N, s->gZ2 + j * K, N, K, -e);
        for (int64_t c = 0; c < N; c++) W->b1[c] -= e * s->gZ1[j * N + c];
        for (int64_t c = 0; c < K; c++) W->b2[c] -= e * s->gZ2[j * K + c];
    }
}

/* Backward of one mini-batch. dW holds the grads of the end weights (W1', ..)
 * on entry and those of the start weights on return; e = eta of the last token.
 *  o_i = Z2b_i + w xb_i + b:  dZ2b_i = do_i + LNback(xb_i, w do_i)
 *  end state, with P1_j = k_j dW1' + db1', P2_j = X2_j dW2' + db2':
 *    dgZ1_j = -e P1_j, dgZ2_j = -e P2_j, dk_j = -e dW1' gZ1_j^T,
 *    dX2_j = -e dW2' gZ2_j^T, deta_m -= sum_j P1_j.gZ1_j + P2_j.gZ2_j
 *  Z2b (D2_ij = dZ2b_i.gZ2_j):  dX2b_i = dZ2b_i W2^T - eta_i sum_j D2_ij X2_j,
 *    dX2_j -= sum_i eta_i D2_ij X2b_i, dgZ2_j -= sum_i eta_i A2_ij dZ2b_i,
 *    deta_i -= sum_j A2_ij D2_ij;   dZ1b_i = dX2b_i gelu'(Z1b_i)
 *  Z1b likewise with (qs, k, gZ1, dZ1b, A1, D1) in place of (X2b, X2, gZ2, dZ2b, A2, D2)
 *  the writing path, per j, in reverse: gZ1 = gX2 gp gives dgX2 = dgZ1 gp and
 *    dZ1 = dgZ1 gX2 gpp; gX2 = gZ2 W2^T gives dgZ2 += dgX2 W2, dW2 += dgX2^T gZ2;
 *    gZ2 (the LN+L2 gradient) gives dZ2 (kit_inner_grad_back); Z2 = X2 W2 + b2
 *    gives dX2 += dZ2 W2^T, dW2 += X2^T dZ2, db2 += dZ2; X2 = gelu(Z1) gives
 *    dZ1 += dX2 gp; Z1 = k W1 + b1 gives dk += dZ1 W1^T, dW1 += k^T dZ1, db1 += dZ1
 *  the reads: dW1 += qs_i^T dZ1b_i, db1 += dZ1b_i, dW2 += X2b_i^T dZ2b_i, db2 += dZ2b_i */
static void mb_backward(int64_t m, int64_t K, int64_t N, double eps, const double *w, const double *b,
                        const mlp_weights *W, mlp_weights *dW, double *dw, double *db, mlp_work *s)
{
    mb_recompute(m, K, N, eps, w, b, W, s);
    double e = s->eta[m - 1];
    memset(s->deta, 0, (size_t)m * sizeof(double));
    for (int64_t i = 0; i < m; i++)
        kit_ln_out_back(s->xb + i * K, s->sb[i], w, s->dout + i * K, K, s->t1 + i * K, s->dZ2b + i * K, dw, db);
    for (int64_t j = 0; j < m; j++) { /* through the end state */
        double *P1 = s->P1 + j * N, *P2 = s->P2 + j * K;
        kit_vec_mat(s->k + j * K, dW->W1, K, N, P1, false);
        kit_vec_mat(s->X2 + j * N, dW->W2, N, K, P2, false);
        for (int64_t c = 0; c < N; c++) P1[c] += dW->b1[c], s->dgZ1[j * N + c] = -e * P1[c];
        for (int64_t c = 0; c < K; c++) P2[c] += dW->b2[c], s->dgZ2[j * K + c] = -e * P2[c];
        s->deta[m - 1] -= kit_dot(P1, s->gZ1 + j * N, N) + kit_dot(P2, s->gZ2 + j * K, K);
        memset(s->dk + j * K, 0, (size_t)K * sizeof(double));
        memset(s->dX2 + j * N, 0, (size_t)N * sizeof(double));
        kit_mat_vec(dW->W1, s->gZ1 + j * N, K, N, -e, s->dk + j * K);
        kit_mat_vec(dW->W2, s->gZ2 + j * K, N, K, -e, s->dX2 + j * N);
    }
    for (int64_t i = 0; i < m; i++) { /* through the reads Z2b, then Z1b */
        const double *dz2 = s->dZ2b + i * K, *x2b = s->X2b + i * N;
        double *dx2b = s->dZ1b + i * N; /* becomes dZ1b in place */
        memset(dx2b, 0, (size_t)N * sizeof(double));
        kit_mat_vec(W->W2, dz2, N, K, 1.0, dx2b);
        for (int64_t j = 0; j <= i; j++) {
            double D = kit_dot(dz2, s->gZ2 + j * K, K), A = s->A2[i * m + j], ed = s->eta[i] * D;
            s->deta[i] -= A * D;
            for (int64_t c = 0; c < N; c++) dx2b[c] -= ed * s->X2[j * N + c], s->dX2[j * N + c] -= ed * x2b[c];
            for (int64_t c = 0; c < K; c++) s->dgZ2[j * K + c] -= s->eta[i] * A * dz2[c];
        }
        for (int64_t c = 0; c < N; c++) dx2b[c] *= s->gpb[i * N + c];
        const double *dz1 = dx2b, *qs = s->qs + i * K;
        double *dq = s->dqs + i * K;
        memset(dq, 0, (size_t)K * sizeof(double));
        kit_mat_vec(W->W1, dz1, K, N, 1.0, dq);
        for (int64_t j = 0; j <= i; j++) {
            double D = kit_dot(dz1, s->gZ1 + j * N, N), A = s->A1[i * m + j], ed = s->eta[i] * D;
            s->deta[i] -= A * D;
            for (int64_t c = 0; c < K; c++) dq[c] -= ed * s->k[j * K + c], s->dk[j * K + c] -= ed * qs[c];
            for (int64_t c = 0; c < N; c++) s->dgZ1[j * N + c] -= s->eta[i] * A * dz1[c];
        }
    }
    for (int64_t j = 0; j < m; j++) { /* the writing path */
        double *dgX2 = s->P1 + j * N, *dZ1 = s->dZ1 + j * N, *dZ2 = s->dZ2 + j * K, *dx2 = s->dX2 + j * N;
        const double *gp = s->gp + j * N, *kj = s->k + j * K;
        for (int64_t c = 0; c < N; c++) {
            dgX2[c] = s->dgZ1[j * N + c] * gp[c];
            dZ1[c] = s->dgZ1[j * N + c] * s->gX2[j * N + c] * s->gpp[j * N + c];
        }
        kit_vec_mat(dgX2, W->W2, N, K, s->dgZ2 + j * K, true);
        kit_outer(dW->W2, dgX2, s->gZ2 + j * K, N, K, 1.0);
        kit_inner_grad_back(s->xz + j * K, s->sz[j], s->G + j * K, s->gZ2 + j * K, s->dgZ2 + j * K, w, b,
                            s->v + j * K, kj, K, s->t1, s->t2, dZ2, dw, db, s->dv + j * K, s->dk + j * K);
        kit_mat_vec(W->W2, dZ2, N, K, 1.0, dx2);
        kit_outer(dW->W2, s->X2 + j * N, dZ2, N, K, 1.0);
        for (int64_t c = 0; c < K; c++) dW->b2[c] += dZ2[c];
        for (int64_t c = 0; c < N; c++) dZ1[c] += dx2[c] * gp[c];
        kit_mat_vec(W->W1, dZ1, K, N, 1.0, s->dk + j * K);
        kit_outer(dW->W1, kj, dZ1, K, N, 1.0);
        for (int64_t c = 0; c < N; c++) dW->b1[c] += dZ1[c];
    }
    for (int64_t i = 0; i < m; i++) { /* the reads */
        kit_outer(dW->W1, s->qs + i * K, s->dZ1b + i * N, K, N, 1.0);
        kit_outer(dW->W2, s->X2b + i * N, s->dZ2b + i * K, N, K, 1.0);
        for (int64_t c = 0; c < N; c++) dW->b1[c] += s->dZ1b[i * N + c];
        for (int64_t c = 0; c < K; c++) dW->b2[c] += s->dZ2b[i * K + c];
    }
}

/* ---- the node's forward and backward ------------------------------------------------ */

enum { MLP_NIN = 10, MLP_NOUT = 5 };

/* sizes of the four weights of one (b,h): W1, b1, W2, b2 */
static void mlp_sizes(const mlp_dims *d, int64_t *sz)
{
    sz[0] = d->K * d->N, sz[1] = d->N, sz[2] = d->N * d->K, sz[3] = d->K;
}

static mlp_weights mlp_at(double *const *base, const int64_t *sz, int64_t idx)
{
    return (mlp_weights){base[0] + idx * sz[0], base[1] + idx * sz[1], base[2] + idx * sz[2], base[3] + idx * sz[3]};
}

static void mlp_gather(const kit_rows *r, const mlp_dims *d, double *const *in, mlp_work *s)
{
    kit_gather(r, in[0], d->K, d->scale, s->qs);
    kit_gather(r, in[1], d->K, 1.0, s->k);
    kit_gather(r, in[2], d->K, 1.0, s->v);
    kit_gather(r, in[5], 1, 1.0, s->eta);
}

void pr_ttt_mlp_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    mlp_dims d = mlp_dims_of(n);
    int64_t sz[4], BH = d.B * d.H;
    mlp_sizes(&d, sz);
    bool own[MLP_NIN];
    double *in[MLP_NIN], *fin[4], *sv[4] = {0};
    kit_inputs_f64(n, MLP_NIN, in, own);
    double *o = kit_zalloc(d.B * d.T * d.H * d.K);
    for (int i = 0; i < 4; i++) {
        fin[i] = kit_zalloc(BH * sz[i]);
        if (in[6 + i]) memcpy(fin[i], in[6 + i], (size_t)(BH * sz[i]) * sizeof(double));
        if (n->n_saved == 4) sv[i] = (double *)n->saved[i]->data;
    }
    mlp_work s;
    mlp_work_init(&s, d.mb, d.K, d.N);
    for (int64_t bh = 0; bh < BH; bh++) {
        mlp_weights W = mlp_at(fin, sz, bh);
        for (int64_t c = 0; c < d.nmb; c++) {
            kit_rows r = {d.T, d.H, bh / d.H, bh % d.H, c * d.mb, d.mb};
            if (r.t0 + r.m > d.T) r.m = d.T - r.t0;
            if (sv[0])
                for (int i = 0; i < 4; i++)
                    memcpy(sv[i] + (bh * d.nmb + c) * sz[i], fin[i] + bh * sz[i], (size_t)sz[i] * sizeof(double));
            mlp_gather(&r, &d, in, &s);
            mb_forward(r.m, d.K, d.N, d.eps, in[3] + r.h * d.K, in[4] + r.h * d.K, &W, &s);
            kit_scatter(&r, s.dout, d.K, 1.0, o);
        }
    }
    kit_store(n->out[0], o, false);
    for (int i = 0; i < 4; i++) kit_store(n->out[1 + i], fin[i], false), free(fin[i]);
    free(o);
    mlp_work_free(&s);
    kit_free_owned(in, own, MLP_NIN);
}

void pr_ttt_mlp_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    mlp_dims d = mlp_dims_of(n);
    int64_t sz[4], BH = d.B * d.H, NT = d.B * d.T * d.H;
    mlp_sizes(&d, sz);
    PR_CHECK(n->n_saved == 4, "ttt_mlp: backward without saved state");
    bool own[MLP_NIN], gown[MLP_NOUT];
    double *in[MLP_NIN], *g[MLP_NOUT], *sv[4], *dst[4];
    kit_inputs_f64(n, MLP_NIN, in, own);
    kit_out_grads_f64(n, MLP_NOUT, g, gown);
    for (int i = 0; i < 4; i++) {
        sv[i] = (double *)n->saved[i]->data;
        dst[i] = kit_zalloc(BH * sz[i]);
        if (g[1 + i]) memcpy(dst[i], g[1 + i], (size_t)(BH * sz[i]) * sizeof(double));
    }
    double *dq = kit_zalloc(NT * d.K), *dk = kit_zalloc(NT * d.K), *dv = kit_zalloc(NT * d.K);
    double *dw = kit_zalloc(d.H * d.K), *db = kit_zalloc(d.H * d.K), *deta = kit_zalloc(NT);
    mlp_work s;
    mlp_work_init(&s, d.mb, d.K, d.N);
    for (int64_t bh = 0; bh < BH; bh++) {
        mlp_weights dW = mlp_at(dst, sz, bh);
        for (int64_t c = d.nmb - 1; c >= 0; c--) {
            kit_rows r = {d.T, d.H, bh / d.H, bh % d.H, c * d.mb, d.mb};
            if (r.t0 + r.m > d.T) r.m = d.T - r.t0;
            mlp_gather(&r, &d, in, &s);
            if (g[0]) kit_gather(&r, g[0], d.K, 1.0, s.dout);
            else memset(s.dout, 0, (size_t)(r.m * d.K) * sizeof(double));
            mlp_weights W = mlp_at(sv, sz, bh * d.nmb + c);
            mb_backward(r.m, d.K, d.N, d.eps, in[3] + r.h * d.K, in[4] + r.h * d.K, &W, &dW, dw + r.h * d.K,
                        db + r.h * d.K, &s);
            kit_scatter(&r, s.dqs, d.K, d.scale, dq);
            kit_scatter(&r, s.dk, d.K, 1.0, dk);
            kit_scatter(&r, s.dv, d.K, 1.0, dv);
            kit_scatter(&r, s.deta, 1, 1.0, deta);
        }
    }
    kit_add_grads(n, (double *[MLP_NIN]){dq, dk, dv, dw, db, deta, dst[0], dst[1], dst[2], dst[3]}, MLP_NIN);
    mlp_work_free(&s);
    kit_free_owned(in, own, MLP_NIN);
    kit_free_owned(g, gown, MLP_NOUT);
}

/* ---- the public op ---------------------------------------------------------------- */

pr_tensor *pr_ttt_mlp(pr_ctx *ctx, const pr_ttt_opts *opt, pr_tensor *q, pr_tensor *k, pr_tensor *v, pr_tensor *w,
                      pr_tensor *b, pr_tensor *eta, pr_tensor *w1, pr_tensor *b1, pr_tensor *w2, pr_tensor *b2,
                      pr_tensor **w1t, pr_tensor **b1t, pr_tensor **w2t, pr_tensor **b2t)
{
    static const char *names[MLP_NIN] = {"q", "k", "v", "w", "b", "eta", "w1", "b1", "w2", "b2"};
    pr_tensor *in[MLP_NIN] = {q, k, v, w, b, eta, w1, b1, w2, b2};
    PR_CHECK(opt, "ttt_mlp: opts is NULL");
    /* autocast: the data (q, k, v, eta) in bf16, the inner model in f32 */
    for (int i = 0; i < MLP_NIN; i++) in[i] = pr_autocast(ctx, in[i], 0x27u >> i & 1u ? PR_BF16 : PR_F32);
    q = in[0], k = in[1], v = in[2], w = in[3], b = in[4], eta = in[5], w1 = in[6], b1 = in[7], w2 = in[8], b2 = in[9];
    /* bf16 data: q, k, v, eta and o; w, b and the inner model's states stay f32 */
    kit_check_inputs_bf16("ttt_mlp", in, names, MLP_NIN, 1u << 7 | 1u << 9, 0x27u, "w, b, w1, b1, w2 and b2");
    PR_CHECK(q->ndim == 4, "ttt_mlp: q must be [B,T,H,d], got %d dims", q->ndim);
    PR_CHECK(w1->ndim == 4, "ttt_mlp: w1 must be [B,H,d,N], got %d dims", w1->ndim);
    int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3], N = w1->shape[3];
    PR_CHECK(B > 0 && T > 0 && H > 0 && K > 0 && N > 0, "ttt_mlp: q or w1 has an empty dim");
    kit_check_shape("ttt_mlp", k, "k", 4, q->shape);
    kit_check_shape("ttt_mlp", v, "v", 4, q->shape);
    kit_check_shape("ttt_mlp", w, "w", 2, (const int64_t[]){H, K});
    kit_check_shape("ttt_mlp", b, "b", 2, (const int64_t[]){H, K});
    kit_check_shape("ttt_mlp", eta, "eta", 4, (const int64_t[]){B, T, H, 1});
    kit_check_shape("ttt_mlp", w1, "w1", 4, (const int64_t[]){B, H, K, N});
    if (b1) kit_check_shape("ttt_mlp", b1, "b1", 4, (const int64_t[]){B, H, 1, N});
    kit_check_shape("ttt_mlp", w2, "w2", 4, (const int64_t[]){B, H, N, K});
    if (b2) kit_check_shape("ttt_mlp", b2, "b2", 4, (const int64_t[]){B, H, 1, K});
    PR_CHECK(opt->mini_batch >= 1, "ttt_mlp: mini_batch must be >= 1, got %d", opt->mini_batch);
    PR_CHECK(opt->eps >= 0, "ttt_mlp: eps must be >= 0, got %g", opt->eps);

    pr_node n = pr_node_init(PR_OP_ttt_mlp, MLP_NIN, in);
    n.iarg[0] = opt->mini_batch;
    n.farg[0] = opt->scale != 0 ? opt->scale : 1 / sqrt((double)K);
    n.farg[1] = opt->eps > 0 ? opt->eps : 1e-6;
    n.n_out = MLP_NOUT;
    const pr_dtype st = q->dtype == PR_BF16 ? PR_F32 : q->dtype;
    n.out[0] = pr_op_output(ctx, q->dtype, q->device, 4, q->shape);
    n.out[1] = pr_op_output(ctx, st, q->device, PR_DIMS(B, H, K, N));
    n.out[2] = pr_op_output(ctx, st, q->device, PR_DIMS(B, H, 1, N));
    n.out[3] = pr_op_output(ctx, st, q->device, PR_DIMS(B, H, N, K));
    n.out[4] = pr_op_output(ctx, st, q->device, PR_DIMS(B, H, 1, K));
    /* pr_op_apply records the node under this same condition; only then does
     * the backward need the mini-batch starting weights */
    bool record = false;
    for (int i = 0; i < MLP_NIN; i++) record |= ctx->grad_enabled && in[i] && in[i]->requires_grad;
    if (record) {
        int64_t nmb = (T + opt->mini_batch - 1) / opt->mini_batch;
        pr_dtype sdt = q->device == PR_CPU ? PR_F64 : st;
        n.n_saved = 4;
        n.saved[0] = pr_empty(ctx->step, sdt, q->device, PR_DIMS(B, H, nmb, K, N));
        n.saved[1] = pr_empty(ctx->step, sdt, q->device, PR_DIMS(B, H, nmb, N));
        n.saved[2] = pr_empty(ctx->step, sdt, q->device, PR_DIMS(B, H, nmb, N, K));
        n.saved[3] = pr_empty(ctx->step, sdt, q->device, PR_DIMS(B, H, nmb, K));
    }
    pr_tensor *o = pr_op_apply(ctx, &n);
    pr_tensor **outs[4] = {w1t, b1t, w2t, b2t};
    for (int i = 0; i < 4; i++)
        if (outs[i]) *outs[i] = n.out[1 + i];
    return o;
}

/* ---- example: B=1, T=7, mini-batch 3 (the last one has 1 token), H=2, d=4, N=5 --
 * iarg[0] = mini_batch, iarg[1] = which output apply returns (0..4: o, w1t,
 * b1t, w2t, b2t; 5: all five flattened side by side, the default), farg[0] =
 * scale (0: d^-1/2), farg[1] = eps. */
static pr_tensor *mlp_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_ttt_opts o = {.scale = ex->farg[0], .mini_batch = (int)ex->iarg[0], .eps = ex->farg[1]};
    pr_tensor *out[MLP_NOUT];
    out[0] = pr_ttt_mlp(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1], &out[2],
                        &out[3], &out[4]);
    if (ex->iarg[1] < MLP_NOUT) return out[ex->iarg[1]];
    for (int i = 0; i < MLP_NOUT; i++) out[i] = pr_reshape(ctx, out[i], PR_DIMS(-1));
    return pr_concat(ctx, MLP_NOUT, out, 0);
}

void pr_ttt_mlp_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    const int64_t B = 1, T = 7, H = 2, K = 4, N = 5;
    static const char *names[MLP_NIN] = {"q", "k", "v", "w", "b", "eta", "w1", "b1", "w2", "b2"};
    const int64_t sh[MLP_NIN][4] = {{B, T, H, K}, {B, T, H, K}, {B, T, H, K}, {H, K},       {H, K},
                                    {B, T, H, 1}, {B, H, K, N}, {B, H, 1, N}, {B, H, N, K}, {B, H, 1, K}};
    const int nd[MLP_NIN] = {4, 4, 4, 2, 2, 4, 4, 4, 4, 4};
    const double lo[MLP_NIN] = {-1, -1, -1, 0.5, -0.5, 0.05, -1.0, -0.5, -1.0, -0.5};
    const double hi[MLP_NIN] = {1, 1, 1, 1.5, 0.5, 0.5, 1.0, 0.5, 1.0, 0.5};
    ex->n_in = MLP_NIN;
    for (int i = 0; i < MLP_NIN; i++) {
        ex->in[i] = pr_example_input(ctx, r, dt, nd[i], sh[i], lo[i], hi[i]);
        ex->in[i]->name = names[i];
    }
    ex->iarg[0] = 3;
    ex->iarg[1] = MLP_NOUT;
    ex->farg[0] = 0;
    ex->farg[1] = 1e-6;
    ex->apply = mlp_apply;
    ex->tol_scale = 4; /* two LayerNorms, a gelu and a 3-token dual form per output */
}
