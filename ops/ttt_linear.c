/* ops/ttt_linear.c: TTT-Linear, CPU forward and hand-derived backward.
 *
 * One tape node: in q,k,v,w,b,eta,h0,hb0 (h0/hb0 may be NULL = zeros),
 * out o,ht,hbt; iarg[0] = mini_batch, iarg[1] = the CUDA backward's form
 * (pr_ttt_bwd), farg[0] = scale, farg[1] = eps.
 * Sequential over mini-batches, dual form inside one. The forward saves the
 * inner weights at the start of every mini-batch (saved[0] W [B,H,NMB,K,K],
 * saved[1] hb [B,H,NMB,K], always f64 on the CPU) and the backward recomputes
 * the rest of a mini-batch from them, walking the mini-batches in reverse.
 * Every dtype computes in double: f32 and bf16 inputs are promoted on entry
 * and the results rounded once on exit, so f32 differs from f64 only by that
 * rounding. bf16 data: q, k, v, eta, o and their grads are bf16; w, b, the
 * states h0, hb0, ht, hbt (and their grads) stay f32.
 */
#include "ops/ttt_linear.h"

#include "ops/ttt_kit.h"

/* ---- shapes and per-(b,h) access ----------------------------------------- */

typedef struct {
    int64_t B, T, H, K, mb, nmb;
    double scale, eps;
} ttt_dims;

static ttt_dims ttt_dims_of(const pr_node *n)
{
    ttt_dims d;
    const pr_tensor *q = n->in[0];
    d.B = q->shape[0], d.T = q->shape[1], d.H = q->shape[2], d.K = q->shape[3];
    d.mb = n->iarg[0];
    d.nmb = (d.T + d.mb - 1) / d.mb;
    d.scale = n->farg[0], d.eps = n->farg[1];
    return d;
}

/* ---- one mini-batch ---------------------------------------------------------
 * Rows of m tokens gathered contiguously: qs (scaled q), k, v [m,K], eta [m].
 * Work buffers, each [mb,K] unless noted: xz, gz, xb, tmp; sz, sb [mb];
 * at [mb*mb] holds Attn_tj = qs_t . k_j.                                    */
typedef struct {
    double *qs, *k, *v, *eta, *o, *dout;     /* gathered rows */
    double *xz, *gz, *xb, *tmp, *sz, *sb, *at;
    double *dzb, *dgz, *dqs, *dk, *dv, *dG, *dxh, *P, *deta;
} ttt_work;

static void ttt_work_init(ttt_work *s, int64_t mb, int64_t K)
{
    double **rows[] = {&s->qs, &s->k, &s->v, &s->o, &s->dout, &s->xz, &s->gz, &s->xb, &s->tmp,
                       &s->dzb, &s->dgz, &s->dqs, &s->dk, &s->dv, &s->dG, &s->dxh, &s->P};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) *rows[i] = kit_zalloc(mb * K);
    s->eta = kit_zalloc(mb), s->sz = kit_zalloc(mb), s->sb = kit_zalloc(mb), s->deta = kit_zalloc(mb);
    s->at = kit_zalloc(mb * mb);
}

static void ttt_work_free(ttt_work *s)
{
    double *all[] = {s->qs, s->k, s->v, s->o, s->dout, s->xz, s->gz, s->xb, s->tmp, s->dzb, s->dgz,
                     s->dqs, s->dk, s->dv, s->dG, s->dxh, s->P, s->eta, s->sz, s->sb, s->deta, s->at};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* Inner gradients at the start weights: Z_i = k_i W + hb, xz_i = LN-normalized
 * Z_i (scale sz_i), G_i = w * (w xz_i + b - (v_i - k_i)), gz_i = dl_i/dZ_i.
 * Then Attn and the prediction Zb_t = qs_t W + hb - eta_t sum_{j<=t}
 * (Attn_tj + 1) gz_j, normalized into xb_t (scale sb_t). Zb goes to tmp. */
static void mb_recompute(int64_t m, int64_t K, double eps, const double *w, const double *b,
                         const double *W, const double *hb, ttt_work *s)
{
    for (int64_t i = 0; i < m; i++) {
        double *z = s->tmp + i * K, *G = s->dG + i * K;
        kit_vec_mat(s->k + i * K, W, K, K, z, false);
        for (int64_t c = 0; c < K; c++) z[c] += hb[c];
        s->sz[i] = kit_ln(z, K, eps, s->xz + i * K);
        for (int64_t c = 0; c < K; c++)
            G[c] = w[c] * (w[c] * s->xz[i * K + c] + b[c] - s->v[i * K + c] + s->k[i * K + c]);
        kit_ln_back(s->xz + i * K, s->sz[i], G, K, s->gz + i * K);
    }
    for (int64_t t = 0; t < m; t++) {
        double *zb = s->tmp + t * K;
        for (int64_t j = 0; j <= t; j++) s->at[t * m + j] = kit_dot(s->qs + t * K, s->k + j * K, K);
        kit_vec_mat(s->qs + t * K, W, K, K, zb, false);
        for (int64_t c = 0; c < K; c++) zb[c] += hb[c];
        for (int64_t j = 0; j <= t; j++) {
            double cf = s->eta[t] * (s->at[t * m + j] + 1);
            for (int64_t c = 0; c < K; c++) zb[c] -= cf * s->gz[j * K + c];
        }
        s->sb[t] = kit_ln(zb, K, eps, s->xb + t * K);
    }
}

/* forward of one mini-batch: o rows, and (W, hb) moved to the end state */
static void mb_forward(int64_t m, int64_t K, double eps, const double *w, const double *b, double *W,
                       double *hb, ttt_work *s)
{
    mb_recompute(m, K, eps, w, b, W, hb, s);
    for (int64_t t = 0; t < m; t++)
        for (int64_t c = 0; c < K; c++)
            s->o[t * K + c] = s->tmp[t * K + c] + w[c] * s->xb[t * K + c] + b[c];
    double el = s->eta[m - 1];
    for (int64_t j = 0; j < m; j++) {
        const double *gz = s->gz + j * K, *kj = s->k + j * K;
        for (int64_t a = 0; a < K; a++)
            for (int64_t c = 0; c < K; c++) W[a * K + c] -= el * kj[a] * gz[c];
        for (int64_t c = 0; c < K; c++) hb[c] -= el * gz[c];
    }
}

/* Backward of one mini-batch. With C_tj = eta_t (Attn_tj + 1) (j <= t), e = eta_m
 * (last token), P_j = k_j dW' + dhb' and D_tj = dZb_t . gz_j:
 *   Zb_t = qs_t W + hb - sum_j C_tj gz_j        W' = W - e sum_j k_j^T gz_j
 *   o_t  = Zb_t + w xb_t + b                    hb' = hb - e sum_j gz_j
 * give
 *   dZb_t = do_t + LNback(xb_t, w do_t);   dw += do xb, db += do
 *   dgz_j = -sum_{t>=j} C_tj dZb_t - e P_j
 *   dqs_t = dZb_t W^T - eta_t sum_{j<=t} D_tj k_j
 *   dk_j  = -sum_{t>=j} eta_t D_tj qs_t - e dW' gz_j^T  (+ the two terms below)
 *   deta_t = -sum_{j<=t} (Attn_tj + 1) D_tj,  deta_m -= sum_j P_j . gz_j
 * and through gz = LNback(xz, sz, G), G = w (w xz + b - v + k):
 *   dG = LNback(xz, sz, dgz)   (the map is self-adjoint in its G argument)
 *   dxh = w^2 dG - (dgz mean(G xz) + G mean(dgz xz)) / sz,   dsz = -dgz.gz / sz
 *   dZ = LNback(xz, sz, dxh) + dsz xz / K   (ds/dZ = xz / K)
 *   dw += dG (w xz + y) with y = w xz + b - v + k,  db += w dG,  dv -= w dG, dk += w dG
 *   dk_j += dZ_j W^T
 * and for the start state: dW = dW' + sum_t qs_t^T dZb_t + sum_j k_j^T dZ_j,
 * dhb = dhb' + sum_t dZb_t + sum_j dZ_j. dW, dhb hold dW', dhb' on entry.     */
static void mb_backward(int64_t m, int64_t K, double eps, const double *w, const double *b,
                        const double *W, const double *hb, double *dW, double *dhb, double *dw,
                        double *db, ttt_work *s)
{
    mb_recompute(m, K, eps, w, b, W, hb, s);
    double e = s->eta[m - 1];
    memset(s->deta, 0, (size_t)m * sizeof(double));
    for (int64_t t = 0; t < m; t++)
        kit_ln_out_back(s->xb + t * K, s->sb[t], w, s->dout + t * K, K, s->dxh + t * K, s->dzb + t * K, dw, db);
    /* terms through the end state, with dW', dhb' */
    for (int64_t j = 0; j < m; j++) {
        double *P = s->P + j * K, *dk = s->dk + j * K, *dg = s->dgz + j * K;
        kit_vec_mat(s->k + j * K, dW, K, K, P, false);
        for (int64_t c = 0; c < K; c++) P[c] += dhb[c];
        s->deta[m - 1] -= kit_dot(P, s->gz + j * K, K);
        memset(dk, 0, (size_t)K * sizeof(double));
        kit_mat_vec(dW, s->gz + j * K, K, K, -e, dk);
        for (int64_t c = 0; c < K; c++) dg[c] = -e * P[c];
    }
    /* terms through the predictions Zb */
    for (int64_t t = 0; t < m; t++) {
        double *dq = s->dqs + t * K;
        const double *dzb = s->dzb + t * K;
        memset(dq, 0, (size_t)K * sizeof(double));
        kit_mat_vec(W, dzb, K, K, 1.0, dq);
        for (int64_t j = 0; j <= t; j++) {
            double D = kit_dot(dzb, s->gz + j * K, K), A1 = s->at[t * m + j] + 1;
            double cf = s->eta[t] * A1;
            s->deta[t] -= A1 * D;
            for (int64_t c = 0; c < K; c++) {
                dq[c] -= s->eta[t] * D * s->k[j * K + c];
                s->dk[j * K + c] -= s->eta[t] * D * s->qs[t * K + c];
                s->dgz[j * K + c] -= cf * dzb[c];
            }
        }
    }
    /* through the inner gradients gz */
    for (int64_t j = 0; j < m; j++) {
        const double *xz = s->xz + j * K, *dg = s->dgz + j * K, *gz = s->gz + j * K;
        double *G = s->tmp + j * K, *dG = s->dG + j * K, *dxh = s->dxh + j * K, *dZ = s->P + j * K;
        const double *vj = s->v + j * K, *kj = s->k + j * K;
        double sz = s->sz[j], mgx = 0, mdx = 0;
        for (int64_t c = 0; c < K; c++) {
            G[c] = w[c] * (w[c] * xz[c] + b[c] - vj[c] + kj[c]);
            mgx += G[c] * xz[c], mdx += dg[c] * xz[c];
        }
        mgx /= (double)K, mdx /= (double)K;
        kit_ln_back(xz, sz, dg, K, dG);
        for (int64_t c = 0; c < K; c++) dxh[c] = w[c] * w[c] * dG[c] - (dg[c] * mgx + G[c] * mdx) / sz;
        double dsz = -kit_dot(dg, gz, K) / sz;
        kit_ln_back(xz, sz, dxh, K, dZ);
        for (int64_t c = 0; c < K; c++) {
            double y = w[c] * xz[c] + b[c] - vj[c] + kj[c];
            dZ[c] += dsz * xz[c] / (double)K;
            dw[c] += dG[c] * (w[c] * xz[c] + y);
            db[c] += w[c] * dG[c];
            s->dv[j * K + c] = -w[c] * dG[c];
            s->dk[j * K + c] += w[c] * dG[c];
        }
        kit_mat_vec(W, dZ, K, K, 1.0, s->dk + j * K);
    }
    /* the start state: dZ rows sit in P now */
    for (int64_t i = 0; i < m; i++) {
        const double *qs = s->qs + i * K, *dzb = s->dzb + i * K, *ki = s->k + i * K, *dZ = s->P + i * K;
        for (int64_t a = 0; a < K; a++)
            for (int64_t c = 0; c < K; c++) dW[a * K + c] += qs[a] * dzb[c] + ki[a] * dZ[c];
        for (int64_t c = 0; c < K; c++) dhb[c] += dzb[c] + dZ[c];
    }
}

/* ---- gather / scatter of a mini-batch's rows -------------------------------- */

typedef struct {
    const ttt_dims *d;
    int64_t b, h, t0, m;
} ttt_rows;

static int64_t row_off(const ttt_rows *r, int64_t i)
{
    return ((r->b * r->d->T + r->t0 + i) * r->d->H + r->h) * r->d->K;
}

static void gather(const ttt_rows *r, const double *src, double alpha, double *dst)
{
    int64_t K = r->d->K;
    for (int64_t i = 0; i < r->m; i++)
        for (int64_t c = 0; c < K; c++) dst[i * K + c] = alpha * src[row_off(r, i) + c];
}

static void scatter(const ttt_rows *r, const double *src, double alpha, double *dst)
{
    int64_t K = r->d->K;
    for (int64_t i = 0; i < r->m; i++)
        for (int64_t c = 0; c < K; c++) dst[row_off(r, i) + c] += alpha * src[i * K + c];
}

static void gather_rows(ttt_rows *r, const double *q, const double *k, const double *v, const double *eta,
                        ttt_work *s)
{
    gather(r, q, r->d->scale, s->qs);
    gather(r, k, 1.0, s->k);
    gather(r, v, 1.0, s->v);
    for (int64_t i = 0; i < r->m; i++) s->eta[i] = eta[row_off(r, i) / r->d->K];
}

/* ---- forward ------------------------------------------------------------------ */

void pr_ttt_linear_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    ttt_dims d = ttt_dims_of(n);
    int64_t K = d.K, KK = K * K;
    bool own[8];
    double *in[8];
    kit_inputs_f64(n, 8, in, own);
    double *o = kit_zalloc(d.B * d.T * d.H * K), *ht = kit_zalloc(d.B * d.H * KK), *hbt = kit_zalloc(d.B * d.H * K);
    double *Ws = n->n_saved > 0 ? (double *)n->saved[0]->data : NULL;
    double *hbs = n->n_saved > 1 ? (double *)n->saved[1]->data : NULL;
    ttt_work s;
    ttt_work_init(&s, d.mb, K);
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t h = 0; h < d.H; h++) {
            int64_t bh = b * d.H + h;
            double *W = ht + bh * KK, *hb = hbt + bh * K;
            if (in[6]) memcpy(W, in[6] + bh * KK, (size_t)KK * sizeof(double));
            if (in[7]) memcpy(hb, in[7] + bh * K, (size_t)K * sizeof(double));
            for (int64_t c = 0; c < d.nmb; c++) {
                ttt_rows r = {&d, b, h, c * d.mb, d.mb};
                if (r.t0 + r.m > d.T) r.m = d.T - r.t0;
                if (Ws) memcpy(Ws + (bh * d.nmb + c) * KK, W, (size_t)KK * sizeof(double));
                if (hbs) memcpy(hbs + (bh * d.nmb + c) * K, hb, (size_t)K * sizeof(double));
                gather_rows(&r, in[0], in[1], in[2], in[5], &s);
                mb_forward(r.m, K, d.eps, in[3] + h * K, in[4] + h * K, W, hb, &s);
                for (int64_t i = 0; i < r.m; i++)
                    memcpy(o + row_off(&r, i), s.o + i * K, (size_t)K * sizeof(double));
            }
        }
    kit_store(n->out[0], o, false);
    kit_store(n->out[1], ht, false);
    kit_store(n->out[2], hbt, false);
    free(o), free(ht), free(hbt);
    ttt_work_free(&s);
    kit_free_owned(in, own, 8);
}

/* ---- backward ----------------------------------------------------------------- */

void pr_ttt_linear_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    ttt_dims d = ttt_dims_of(n);
    int64_t K = d.K, KK = K * K, NT = d.B * d.T * d.H;
    PR_CHECK(n->n_saved == 2, "ttt_linear: backward without saved state");
    bool own[8], gown[3];
    double *in[8], *g[3];
    kit_inputs_f64(n, 8, in, own);
    kit_out_grads_f64(n, 3, g, gown);
    const double *Ws = (const double *)n->saved[0]->data, *hbs = (const double *)n->saved[1]->data;
    /* gradients of every input, in double, added to the grads at the end */
    double *dq = kit_zalloc(NT * K), *dk = kit_zalloc(NT * K), *dv = kit_zalloc(NT * K);
    double *dw = kit_zalloc(d.H * K), *db = kit_zalloc(d.H * K), *deta = kit_zalloc(NT);
    double *dh0 = kit_zalloc(d.B * d.H * KK), *dhb0 = kit_zalloc(d.B * d.H * K);
    ttt_work s;
    ttt_work_init(&s, d.mb, K);
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t h = 0; h < d.H; h++) {
            int64_t bh = b * d.H + h;
            double *dW = dh0 + bh * KK, *dhb = dhb0 + bh * K;
            if (g[1]) memcpy(dW, g[1] + bh * KK, (size_t)KK * sizeof(double));
            if (g[2]) memcpy(dhb, g[2] + bh * K, (size_t)K * sizeof(double));
            for (int64_t c = d.nmb - 1; c >= 0; c--) {
                ttt_rows r = {&d, b, h, c * d.mb, d.mb};
                if (r.t0 + r.m > d.T) r.m = d.T - r.t0;
                gather_rows(&r, in[0], in[1], in[2], in[5], &s);
                if (g[0]) gather(&r, g[0], 1.0, s.dout);
                else memset(s.dout, 0, (size_t)(r.m * K) * sizeof(double));
                mb_backward(r.m, K, d.eps, in[3] + h * K, in[4] + h * K, Ws + (bh * d.nmb + c) * KK,
                            hbs + (bh * d.nmb + c) * K, dW, dhb, dw + h * K, db + h * K, &s);
                scatter(&r, s.dqs, d.scale, dq);
                scatter(&r, s.dk, 1.0, dk);
                scatter(&r, s.dv, 1.0, dv);
                for (int64_t i = 0; i < r.m; i++) deta[row_off(&r, i) / K] += s.deta[i];
            }
        }
    kit_add_grads(n, (double *[8]){dq, dk, dv, dw, db, deta, dh0, dhb0}, 8);
    ttt_work_free(&s);
    kit_free_owned(in, own, 8);
    kit_free_owned(g, gown, 3);
}

/* ---- the public op ------------------------------------------------------------ */

pr_tensor *pr_ttt_linear(pr_ctx *ctx, const pr_ttt_opts *opt, pr_tensor *q, pr_tensor *k, pr_tensor *v,
                         pr_tensor *w, pr_tensor *b, pr_tensor *eta, pr_tensor *h0, pr_tensor *hb0,
                         pr_tensor **ht, pr_tensor **hbt)
{
    static const char *names[8] = {"q", "k", "v", "w", "b", "eta", "h0", "hb0"};
    pr_tensor *in[8] = {q, k, v, w, b, eta, h0, hb0};
    PR_CHECK(opt, "ttt_linear: opts is NULL");
    /* autocast: the data (q, k, v, eta) in bf16, the inner weights and states in f32 */
    for (int i = 0; i < 8; i++) in[i] = pr_autocast(ctx, in[i], 0x27u >> i & 1u ? PR_BF16 : PR_F32);
    q = in[0], k = in[1], v = in[2], w = in[3], b = in[4], eta = in[5], h0 = in[6], hb0 = in[7];
    /* bf16 data: q, k, v, eta and o; w, b and the states stay f32 */
    kit_check_inputs_bf16("ttt_linear", in, names, 8, 1u << 6 | 1u << 7, 0x27u, "w, b, h0 and hb0");
    PR_CHECK(q->ndim == 4, "ttt_linear: q must be [B,T,H,K], got %d dims", q->ndim);
    int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3];
    PR_CHECK(B > 0 && T > 0 && H > 0 && K > 0, "ttt_linear: q has an empty dim");
    kit_check_shape("ttt_linear", k, "k", 4, q->shape);
    kit_check_shape("ttt_linear", v, "v", 4, q->shape);
    kit_check_shape("ttt_linear", w, "w", 2, (const int64_t[]){H, K});
    kit_check_shape("ttt_linear", b, "b", 2, (const int64_t[]){H, K});
    kit_check_shape("ttt_linear", eta, "eta", 4, (const int64_t[]){B, T, H, 1});
    if (h0) kit_check_shape("ttt_linear", h0, "h0", 4, (const int64_t[]){B, H, K, K});
    if (hb0) kit_check_shape("ttt_linear", hb0, "hb0", 4, (const int64_t[]){B, H, 1, K});
    PR_CHECK(opt->mini_batch >= 1, "ttt_linear: mini_batch must be >= 1, got %d", opt->mini_batch);
    PR_CHECK(opt->eps >= 0, "ttt_linear: eps must be >= 0, got %g", opt->eps);

    pr_node n = pr_node_init(PR_OP_ttt_linear, 8, in);
    n.iarg[0] = opt->mini_batch;
    n.iarg[1] = opt->bwd;
    n.farg[0] = opt->scale != 0 ? opt->scale : 1 / sqrt((double)K);
    n.farg[1] = opt->eps > 0 ? opt->eps : 1e-6;
    n.n_out = 3;
    const pr_dtype st = q->dtype == PR_BF16 ? PR_F32 : q->dtype;
    n.out[0] = pr_op_output(ctx, q->dtype, q->device, 4, q->shape);
    n.out[1] = pr_op_output(ctx, st, q->device, PR_DIMS(B, H, K, K));
    n.out[2] = pr_op_output(ctx, st, q->device, PR_DIMS(B, H, 1, K));
    /* only a recorded node's backward needs the mini-batch starting states */
    if (pr_op_will_record(ctx, &n)) {
        int64_t nmb = (T + opt->mini_batch - 1) / opt->mini_batch;
        pr_dtype sdt = q->device == PR_CPU ? PR_F64 : st;
        n.n_saved = 2;
        n.saved[0] = pr_empty(ctx->step, sdt, q->device, PR_DIMS(B, H, nmb, K, K));
        n.saved[1] = pr_empty(ctx->step, sdt, q->device, PR_DIMS(B, H, nmb, K));
    }
    pr_tensor *o = pr_op_apply(ctx, &n);
    if (ht) *ht = n.out[1];
    if (hbt) *hbt = n.out[2];
    return o;
}

/* ---- example: B=1, T=11, mini-batch 4 (the last one has 3 tokens), H=2, K=5 --
 * iarg[0] = mini_batch, iarg[1] = which output apply returns (0 o, 1 ht, 2 hbt,
 * 3 all three flattened side by side: the default, so every check of the
 * example covers the final state too), farg[0] = scale (0: K^-1/2), farg[1] = eps. */
static pr_tensor *ttt_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_ttt_opts o = {.scale = ex->farg[0], .mini_batch = (int)ex->iarg[0], .eps = ex->farg[1]};
    pr_tensor *ht, *hbt;
    pr_tensor *out = pr_ttt_linear(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], &ht, &hbt);
    if (ex->iarg[1] < 3) return ex->iarg[1] == 1 ? ht : ex->iarg[1] == 2 ? hbt : out;
    pr_tensor *flat[3] = {pr_reshape(ctx, out, PR_DIMS(-1)), pr_reshape(ctx, ht, PR_DIMS(-1)),
                          pr_reshape(ctx, hbt, PR_DIMS(-1))};
    return pr_concat(ctx, 3, flat, 0);
}

void pr_ttt_linear_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    const int64_t B = 1, T = 11, H = 2, K = 5;
    static const char *names[8] = {"q", "k", "v", "w", "b", "eta", "h0", "hb0"};
    ex->n_in = 8;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, H, K), -1, 1);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, H, K), -1, 1);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, H, K), -1, 1);
    ex->in[3] = pr_example_input(ctx, r, dt, PR_DIMS(H, K), 0.5, 1.5);
    ex->in[4] = pr_example_input(ctx, r, dt, PR_DIMS(H, K), -0.5, 0.5);
    ex->in[5] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, H, 1), 0.05, 0.5);
    ex->in[6] = pr_example_input(ctx, r, dt, PR_DIMS(B, H, K, K), -0.5, 0.5);
    ex->in[7] = pr_example_input(ctx, r, dt, PR_DIMS(B, H, 1, K), -0.5, 0.5);
    for (int i = 0; i < 8; i++) ex->in[i]->name = names[i];
    ex->iarg[0] = 4;
    ex->iarg[1] = 3;
    ex->farg[0] = 0;
    ex->farg[1] = 1e-6;
    ex->apply = ttt_apply;
    ex->tol_scale = 4; /* two LayerNorms and a 4-token dual form per output */
}
