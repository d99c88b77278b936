/* ops/titans.c: Titans' linear memory, CPU forward and hand-derived backward.
 *
 * One tape node: in q,k,v,w,b,theta,alpha,eta,h0,s0 (h0/s0 may be NULL =
 * zeros), out o,ht,st; iarg[0] = chunk, farg[0] = eps. Sequential over
 * chunks; inside one the inner gradients come first (all at the chunk-start
 * memory), then the token-by-token update of S and M. The forward saves M and
 * S at every chunk start (saved[0], saved[1] [B,H,NC,d,d], f64 on the CPU);
 * the backward recomputes a chunk's M_t, S_t from them and walks the tokens
 * in reverse. f32 is computed in double and rounded on exit.
 */
#include "ops/titans.h"

#include "ops/ttt_kit.h"

typedef struct {
    int64_t B, T, H, K, ch, nc;
    double eps;
} titans_dims;

static titans_dims titans_dims_of(const pr_node *n)
{
    const pr_tensor *q = n->in[0];
    titans_dims d = {.B = q->shape[0], .T = q->shape[1], .H = q->shape[2], .K = q->shape[3]};
    d.ch = n->iarg[0];
    d.nc = (d.T + d.ch - 1) / d.ch;
    d.eps = n->farg[0];
    return d;
}

/* one chunk of m tokens: rows [ch,K], per-token scalars, and the memory and
 * momentum before every token and after the last: Ms, Ss [(ch+1),K,K] */
typedef struct {
    double *q, *k, *v, *dout, *xz, *G, *gZ, *xo, *out, *dO, *dq, *dk, *dv, *dgZ, *dZ, *t1, *t2;
    double *theta, *alpha, *eta, *sz, *so, *dtheta, *dalpha, *deta;
    double *Ms, *Ss;
} titans_work;

#define TITANS_ROWS(s) {&s->q, &s->k, &s->v, &s->dout, &s->xz, &s->G, &s->gZ, &s->xo, &s->out, &s->dO, \
                        &s->dq, &s->dk, &s->dv, &s->dgZ, &s->dZ, &s->t1, &s->t2}
#define TITANS_SCALARS(s) {&s->theta, &s->alpha, &s->eta, &s->sz, &s->so, &s->dtheta, &s->dalpha, &s->deta}

static void titans_work_init(titans_work *s, int64_t ch, int64_t K)
{
    double **r[] = TITANS_ROWS(s), **c[] = TITANS_SCALARS(s);
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) *r[i] = kit_zalloc(ch * K);
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) *c[i] = kit_zalloc(ch);
    s->Ms = kit_zalloc((ch + 1) * K * K), s->Ss = kit_zalloc((ch + 1) * K * K);
}

static void titans_work_free(titans_work *s)
{
    double **r[] = TITANS_ROWS(s), **c[] = TITANS_SCALARS(s);
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) free(*r[i]);
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) free(*c[i]);
    free(s->Ms), free(s->Ss);
}

/* from Ms[0], Ss[0] (the chunk start): every gZ_j at Mc = Ms[0], then per
 * token S, M (into Ms[t+1], Ss[t+1]), o_t = q_t M_t normalized into xo
 * (scale so) and the output row out_t = o_t + w xo_t + b */
static void chunk_recompute(int64_t m, int64_t K, double eps, const double *w, const double *b, titans_work *s)
{
    const int64_t KK = K * K;
    for (int64_t j = 0; j < m; j++) {
        double *z = s->t1;
        kit_vec_mat(s->k + j * K, s->Ms, K, K, z, false);
        s->sz[j] = kit_ln(z, K, eps, s->xz + j * K);
        kit_inner_grad(s->xz + j * K, s->sz[j], w, b, s->v + j * K, s->k + j * K, K, s->G + j * K, s->gZ + j * K);
    }
    for (int64_t t = 0; t < m; t++) {
        const double *M0 = s->Ms + t * KK, *S0 = s->Ss + t * KK;
        double *M1 = s->Ms + (t + 1) * KK, *S1 = s->Ss + (t + 1) * KK;
        for (int64_t i = 0; i < KK; i++) S1[i] = s->eta[t] * S0[i];
        kit_outer(S1, s->k + t * K, s->gZ + t * K, K, K, -2 * s->theta[t]);
        for (int64_t i = 0; i < KK; i++) M1[i] = (1 - s->alpha[t]) * M0[i] + S1[i];
        double *o = s->out + t * K;
        kit_vec_mat(s->q + t * K, M1, K, K, o, false);
        s->so[t] = kit_ln(o, K, eps, s->xo + t * K);
        for (int64_t c = 0; c < K; c++) o[c] += w[c] * s->xo[t * K + c] + b[c];
    }
}

/* Backward of one chunk; dM, dS hold the grads of M, S after its last token
 * on entry and of Mc, S before its first on return. Per token, in reverse:
 *   out = o + w xo + b:  dO = do + LNback(xo, so, w do);  dw += do xo, db += do
 *   o = q M_t:           dq = dO M_t^T, dM += q^T dO
 *   M_t = (1-a) M + S_t: dS += dM, da = -<M_{t-1}, dM>, dM *= (1-a) afterwards
 *   S_t = e S + u:       de = <S_{t-1}, dS>, then dS *= e
 *   u = -2 th k^T gZ:    dth = -2 k dS gZ^T, dk = -2 th dS gZ, dgZ = -2 th k dS
 * and then per token the inner gradient (kit_inner_grad_back gives dZ) with
 * Z = k Mc: dk += dZ Mc^T, dM += k^T dZ. */
static void chunk_backward(int64_t m, int64_t K, double eps, const double *w, const double *b, double *dM,
                           double *dS, double *dw, double *db, titans_work *s)
{
    const int64_t KK = K * K;
    chunk_recompute(m, K, eps, w, b, s);
    for (int64_t t = m - 1; t >= 0; t--) {
        const double *kt = s->k + t * K, *gZ = s->gZ + t * K;
        double *dO = s->dO + t * K;
        kit_ln_out_back(s->xo + t * K, s->so[t], w, s->dout + t * K, K, s->t1, dO, dw, db);
        memset(s->dq + t * K, 0, (size_t)K * sizeof(double));
        kit_mat_vec(s->Ms + (t + 1) * KK, dO, K, K, 1.0, s->dq + t * K);
        kit_outer(dM, s->q + t * K, dO, K, K, 1.0);
        for (int64_t i = 0; i < KK; i++) dS[i] += dM[i];
        s->dalpha[t] = -kit_dot(s->Ms + t * KK, dM, KK);
        s->deta[t] = kit_dot(s->Ss + t * KK, dS, KK);
        double *dSg = s->t2, th2 = -2 * s->theta[t];
        memset(dSg, 0, (size_t)K * sizeof(double));
        kit_mat_vec(dS, gZ, K, K, 1.0, dSg);
        s->dtheta[t] = -2 * kit_dot(kt, dSg, K);
        for (int64_t c = 0; c < K; c++) s->dk[t * K + c] = th2 * dSg[c];
        kit_vec_mat(kt, dS, K, K, s->dgZ + t * K, false);
        for (int64_t c = 0; c < K; c++) s->dgZ[t * K + c] *= th2;
        for (int64_t i = 0; i < KK; i++) dM[i] *= 1 - s->alpha[t], dS[i] *= s->eta[t];
    }
    for (int64_t j = 0; j < m; j++) {
        double *dZ = s->dZ + j * K;
        kit_inner_grad_back(s->xz + j * K, s->sz[j], s->G + j * K, s->gZ + j * K, s->dgZ + j * K, w, b, s->v + j * K,
                            s->k + j * K, K, s->t1, s->t2, dZ, dw, db, s->dv + j * K, s->dk + j * K);
        kit_mat_vec(s->Ms, dZ, K, K, 1.0, s->dk + j * K);
        kit_outer(dM, s->k + j * K, dZ, K, K, 1.0);
    }
}

/* ---- the node's forward and backward ------------------------------------------------ */

enum { TI_NIN = 10, TI_NOUT = 3 };

static void titans_gather(const kit_rows *r, const titans_dims *d, double *const *in, titans_work *s)
{
    kit_gather(r, in[0], d->K, 1.0, s->q);
    kit_gather(r, in[1], d->K, 1.0, s->k);
    kit_gather(r, in[2], d->K, 1.0, s->v);
    kit_gather(r, in[5], 1, 1.0, s->theta);
    kit_gather(r, in[6], 1, 1.0, s->alpha);
    kit_gather(r, in[7], 1, 1.0, s->eta);
}

static kit_rows titans_rows(const titans_dims *d, int64_t bh, int64_t c)
{
    kit_rows r = {d->T, d->H, bh / d->H, bh % d->H, c * d->ch, d->ch};
    if (r.t0 + r.m > d->T) r.m = d->T - r.t0;
    return r;
}

void pr_titans_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    titans_dims d = titans_dims_of(n);
    const int64_t K = d.K, KK = K * K, BH = d.B * d.H;
    bool own[TI_NIN];
    double *in[TI_NIN];
    kit_inputs_f64(n, TI_NIN, in, own);
    double *o = kit_zalloc(d.B * d.T * d.H * K), *ht = kit_zalloc(BH * KK), *st = kit_zalloc(BH * KK);
    double *Msv = n->n_saved == 2 ? (double *)n->saved[0]->data : NULL;
    double *Ssv = n->n_saved == 2 ? (double *)n->saved[1]->data : NULL;
    titans_work s;
    titans_work_init(&s, d.ch, K);
    for (int64_t bh = 0; bh < BH; bh++) {
        if (in[8]) memcpy(s.Ms, in[8] + bh * KK, (size_t)KK * sizeof(double));
        else memset(s.Ms, 0, (size_t)KK * sizeof(double));
        if (in[9]) memcpy(s.Ss, in[9] + bh * KK, (size_t)KK * sizeof(double));
        else memset(s.Ss, 0, (size_t)KK * sizeof(double));
        for (int64_t c = 0; c < d.nc; c++) {
            kit_rows r = titans_rows(&d, bh, c);
            if (Msv) memcpy(Msv + (bh * d.nc + c) * KK, s.Ms, (size_t)KK * sizeof(double));
            if (Ssv) memcpy(Ssv + (bh * d.nc + c) * KK, s.Ss, (size_t)KK * sizeof(double));
            titans_gather(&r, &d, in, &s);
            chunk_recompute(r.m, K, d.eps, in[3] + r.h * K, in[4] + r.h * K, &s);
            kit_scatter(&r, s.out, K, 1.0, o);
            memcpy(s.Ms, s.Ms + r.m * KK, (size_t)KK * sizeof(double));
            memcpy(s.Ss, s.Ss + r.m * KK, (size_t)KK * sizeof(double));
        }
        memcpy(ht + bh * KK, s.Ms, (size_t)KK * sizeof(double));
        memcpy(st + bh * KK, s.Ss, (size_t)KK * sizeof(double));
    }
    kit_store(n->out[0], o, false);
    kit_store(n->out[1], ht, false);
    kit_store(n->out[2], st, false);
    free(o), free(ht), free(st);
    titans_work_free(&s);
    kit_free_owned(in, own, TI_NIN);
}

void pr_titans_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    titans_dims d = titans_dims_of(n);
    const int64_t K = d.K, KK = K * K, BH = d.B * d.H, NT = d.B * d.T * d.H;
    PR_CHECK(n->n_saved == 2, "titans: backward without saved state");
    bool own[TI_NIN], gown[TI_NOUT];
    double *in[TI_NIN], *g[TI_NOUT];
    kit_inputs_f64(n, TI_NIN, in, own);
    kit_out_grads_f64(n, TI_NOUT, g, gown);
    const double *Msv = (const double *)n->saved[0]->data, *Ssv = (const double *)n->saved[1]->data;
    double *dq = kit_zalloc(NT * K), *dk = kit_zalloc(NT * K), *dv = kit_zalloc(NT * K);
    double *dw = kit_zalloc(d.H * K), *db = kit_zalloc(d.H * K);
    double *dth = kit_zalloc(NT), *dal = kit_zalloc(NT), *det = kit_zalloc(NT);
    double *dh0 = kit_zalloc(BH * KK), *ds0 = kit_zalloc(BH * KK);
    titans_work s;
    titans_work_init(&s, d.ch, K);
    for (int64_t bh = 0; bh < BH; bh++) {
        double *dM = dh0 + bh * KK, *dS = ds0 + bh * KK;
        if (g[1]) memcpy(dM, g[1] + bh * KK, (size_t)KK * sizeof(double));
        if (g[2]) memcpy(dS, g[2] + bh * KK, (size_t)KK * sizeof(double));
        for (int64_t c = d.nc - 1; c >= 0; c--) {
            kit_rows r = titans_rows(&d, bh, c);
            titans_gather(&r, &d, in, &s);
            if (g[0]) kit_gather(&r, g[0], K, 1.0, s.dout);
            else memset(s.dout, 0, (size_t)(r.m * K) * sizeof(double));
            memcpy(s.Ms, Msv + (bh * d.nc + c) * KK, (size_t)KK * sizeof(double));
            memcpy(s.Ss, Ssv + (bh * d.nc + c) * KK, (size_t)KK * sizeof(double));
            chunk_backward(r.m, K, d.eps, in[3] + r.h * K, in[4] + r.h * K, dM, dS, dw + r.h * K, db + r.h * K, &s);
            kit_scatter(&r, s.dq, K, 1.0, dq);
            kit_scatter(&r, s.dk, K, 1.0, dk);
            kit_scatter(&r, s.dv, K, 1.0, dv);
            kit_scatter(&r, s.dtheta, 1, 1.0, dth);
            kit_scatter(&r, s.dalpha, 1, 1.0, dal);
            kit_scatter(&r, s.deta, 1, 1.0, det);
        }
    }
    kit_add_grads(n, (double *[TI_NIN]){dq, dk, dv, dw, db, dth, dal, det, dh0, ds0}, TI_NIN);
    titans_work_free(&s);
    kit_free_owned(in, own, TI_NIN);
    kit_free_owned(g, gown, TI_NOUT);
}

/* ---- the public op ---------------------------------------------------------------- */

pr_tensor *pr_titans(pr_ctx *ctx, const pr_titans_opts *opt, pr_tensor *q, pr_tensor *k, pr_tensor *v, pr_tensor *w,
                     pr_tensor *b, pr_tensor *theta, pr_tensor *alpha, pr_tensor *eta, pr_tensor *h0, pr_tensor *s0,
                     pr_tensor **ht, pr_tensor **st)
{
    static const char *names[TI_NIN] = {"q", "k", "v", "w", "b", "theta", "alpha", "eta", "h0", "s0"};
    pr_tensor *in[TI_NIN] = {q, k, v, w, b, theta, alpha, eta, h0, s0};
    PR_CHECK(opt, "titans: opts is NULL");
    pr_autocast_all(ctx, TI_NIN, in, PR_F32);   /* autocast: its kernels take no bf16 */
    q = in[0], k = in[1], v = in[2], w = in[3], b = in[4];
    kit_check_inputs("titans", in, names, TI_NIN, 1u << 8 | 1u << 9);
    PR_CHECK(q->ndim == 4, "titans: q must be [B,T,H,d], got %d dims", q->ndim);
    int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3];
    PR_CHECK(B > 0 && T > 0 && H > 0 && K > 0, "titans: q has an empty dim");
    kit_check_shape("titans", k, "k", 4, q->shape);
    kit_check_shape("titans", v, "v", 4, q->shape);
    kit_check_shape("titans", w, "w", 2, (const int64_t[]){H, K});
    kit_check_shape("titans", b, "b", 2, (const int64_t[]){H, K});
    for (int i = 5; i < 8; i++) kit_check_shape("titans", in[i], names[i], 4, (const int64_t[]){B, T, H, 1});
    for (int i = 8; i < 10; i++)
        if (in[i]) kit_check_shape("titans", in[i], names[i], 4, (const int64_t[]){B, H, K, K});
    PR_CHECK(opt->chunk >= 1, "titans: chunk must be >= 1, got %d", opt->chunk);
    PR_CHECK(opt->eps >= 0, "titans: eps must be >= 0, got %g", opt->eps);

    pr_node n = pr_node_init(PR_OP_titans, TI_NIN, in);
    n.iarg[0] = opt->chunk;
    n.farg[0] = opt->eps > 0 ? opt->eps : 1e-6;
    n.n_out = TI_NOUT;
    n.out[0] = pr_op_output(ctx, q->dtype, q->device, 4, q->shape);
    n.out[1] = pr_op_output(ctx, q->dtype, q->device, PR_DIMS(B, H, K, K));
    n.out[2] = pr_op_output(ctx, q->dtype, q->device, PR_DIMS(B, H, K, K));
    /* pr_op_apply records the node under this same condition; only then does
     * the backward need the chunk-start states */
    bool record = false;
    for (int i = 0; i < TI_NIN; i++) record |= ctx->grad_enabled && in[i] && in[i]->requires_grad;
    if (record) {
        int64_t nc = (T + opt->chunk - 1) / opt->chunk;
        pr_dtype sdt = q->device == PR_CPU ? PR_F64 : q->dtype;
        n.n_saved = 2;
        n.saved[0] = pr_empty(ctx->step, sdt, q->device, PR_DIMS(B, H, nc, K, K));
        n.saved[1] = pr_empty(ctx->step, sdt, q->device, PR_DIMS(B, H, nc, K, K));
    }
    pr_tensor *o = pr_op_apply(ctx, &n);
    if (ht) *ht = n.out[1];
    if (st) *st = n.out[2];
    return o;
}

/* ---- example: B=1, T=7, chunk 3 (the last one has 1 token), H=2, d=3 --
 * iarg[0] = chunk, iarg[1] = which output apply returns (0 o, 1 ht, 2 st; 3:
 * all three flattened side by side, the default), farg[0] = eps. */
static pr_tensor *titans_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_titans_opts o = {.chunk = (int)ex->iarg[0], .eps = ex->farg[0]};
    pr_tensor *out[TI_NOUT];
    out[0] = pr_titans(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1], &out[2]);
    if (ex->iarg[1] < TI_NOUT) return out[ex->iarg[1]];
    for (int i = 0; i < TI_NOUT; i++) out[i] = pr_reshape(ctx, out[i], PR_DIMS(-1));
    return pr_concat(ctx, TI_NOUT, out, 0);
}

void pr_titans_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    const int64_t B = 1, T = 7, H = 2, K = 3;
    static const char *names[TI_NIN] = {"q", "k", "v", "w", "b", "theta", "alpha", "eta", "h0", "s0"};
    const int64_t sh[TI_NIN][4] = {{B, T, H, K}, {B, T, H, K}, {B, T, H, K}, {H, K},       {H, K},
                                   {B, T, H, 1}, {B, T, H, 1}, {B, T, H, 1}, {B, H, K, K}, {B, H, K, K}};
    const int nd[TI_NIN] = {4, 4, 4, 2, 2, 4, 4, 4, 4, 4};
    const double lo[TI_NIN] = {-1, -1, -1, 0.5, -0.5, 0.02, 0.01, 0.5, -0.5, -0.3};
    const double hi[TI_NIN] = {1, 1, 1, 1.5, 0.5, 0.3, 0.2, 0.95, 0.5, 0.3};
    ex->n_in = TI_NIN;
    for (int i = 0; i < TI_NIN; i++) {
        ex->in[i] = pr_example_input(ctx, r, dt, nd[i], sh[i], lo[i], hi[i]);
        ex->in[i]->name = names[i];
    }
    ex->iarg[0] = 3;
    ex->iarg[1] = TI_NOUT;
    ex->farg[0] = 1e-6;
    ex->apply = titans_apply;
    ex->tol_scale = 4; /* two LayerNorms and a 3-token chunk per output */
}
