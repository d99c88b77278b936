/* tests/test_prism_reference.c: the prism layer against a from-scratch reading
 * of its definition (docs/PRISM.md), in float64 on the CPU.
 *
 * The reference below is written token by token in the plainest form we could
 * think of: an explicit [K,V] state matrix per head, an explicit loop over the
 * refinement steps l = 1..L, the anchor's causal convolution summed tap by tap,
 * GELU through erf, the norms spelled out. It shares nothing with models/ or
 * ops/ except the parameter values, which it reads from the layer's registry by
 * path (pr_params_find) and checks the shape of, and the input x.
 *
 * Compared (relative max error 1e-12) for form paper with L = 1, 2, 3; with
 * gelu, shortconv, gain and knorm off in turn; a factorised projection rank;
 * another conv width; one to four heads; B = 2; T of 13 and 37 (no multiple of
 * either chunk size); the chunked and the per-token forms (chunk = 0); L = 0
 * (the Gated DeltaNet layer) and form augmented with its own switches. The
 * final recurrent state of a run with a carried state is compared with the
 * reference's S_T, and a prefix followed by token-by-token decoding with the
 * reference's outputs.
 *
 * To show the comparison can fail, the reference also runs with one thing
 * broken on purpose (no erase term; v written in place of d_1; r_1 = v without
 * the anchor; the l = 1 write dropped) and each must be rejected.
 *
 * Readings of the definition that the code could take two ways, and how we
 * took them:
 * - the anchor's conv weight w [C,W] applies tap i to x[t-W+1+i] (the last tap
 *   to the current token): the op's documented layout, not a choice of PRISM;
 * - "l2n" divides by sqrt(sum z^2 + 1e-6), the epsilon inside the root;
 * - every write, extra ones included, goes in AFTER the decay and the erase of
 *   the token (Eq. 18 applies a_t only to the erased old state), so the extra
 *   writes of token t are neither decayed nor erased at t;
 * - the output reads the state after the token's own write (o_t = S_t^T q_t);
 * - with proj_rank r > 0, W_k and W_p are products [in,r][r,out] and the gain's
 *   bias is added after the product; W_beta stays full.
 */
#include "tests/test_models_util.h"
#include "models/slots.h"

/* ---- the reference ------------------------------------------------------------------ */

/* things the reference can get wrong on purpose (the test must notice each) */
typedef enum {
    REF_EXACT,
    REF_NO_ERASE,          /* the rank-1 erase of the old state left out */
    REF_WRITE_V_NOT_D1,    /* form paper: v written where d_1 belongs */
    REF_R1_IS_V,           /* the first residual without the anchor subtracted */
    REF_NO_FIRST_WRITE,    /* the l = 1 write (form paper) or GDN's write (augmented) left out */
    REF_DECAYED_EXTRAS,    /* the extra writes decayed with the old state */
} ref_fault;

typedef struct {
    const pr_params *params;
    const pr_config *c;
    int64_t D, H, K, V, L;
    ref_fault fault;
} ref_layer;

/* the registry's tensor "mixer.<name>" as float64 data, after checking its shape */
static const double *ref_param(const ref_layer *r, const char *name, int64_t rows, int64_t cols)
{
    char path[64];
    snprintf(path, sizeof path, "mixer.%s", name);
    const pr_param *p = pr_params_find(r->params, path);
    if (!p) fail_msg("reference: no parameter '%s'", path);
    const pr_tensor *t = p->t;
    assert_int_equal(t->dtype, PR_F64);
    bool ok = cols ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols : t->ndim == 1 && t->shape[0] == rows;
    if (!ok) fail_msg("reference: parameter '%s' has an unexpected shape", path);
    return t->data;
}

static bool ref_has(const ref_layer *r, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "mixer.%s", name);
    return pr_params_find(r->params, path) != NULL;
}

static double sigmoid(double z) { return 1 / (1 + exp(-z)); }
static double silu(double z) { return z * sigmoid(z); }
static double gelu(double z) { return 0.5 * z * (1 + erf(z / sqrt(2.0))); }
static double softplus(double z) { return z > 20 ? z : log1p(exp(z)); }

/* y[out] = x[in] W[in,out] */
static void matvec(const double *x, const double *W, int64_t in, int64_t out, double *y)
{
    for (int64_t o = 0; o < out; o++) {
        double s = 0;
        for (int64_t i = 0; i < in; i++) s += x[i] * W[i * out + o];
        y[o] = s;
    }
}

/* each of n heads of size e divided by its length (sqrt of squares + 1e-6) */
static void l2n_heads(double *z, int64_t n, int64_t e)
{
    for (int64_t h = 0; h < n; h++) {
        double ss = 0;
        for (int64_t i = 0; i < e; i++) ss += z[h * e + i] * z[h * e + i];
        for (int64_t i = 0; i < e; i++) z[h * e + i] /= sqrt(ss + 1e-6);
    }
}

/* a causal depthwise conv over time of seq [T][C] with w [C][W], then SiLU, in place.
 * Output t sees inputs t-W+1 .. t (zeros before the start). */
static void conv_silu(double *seq, int64_t T, int64_t C, const double *w, int64_t W)
{
    double *out = calloc((size_t)(T * C), sizeof *out);
    for (int64_t t = 0; t < T; t++)
        for (int64_t ch = 0; ch < C; ch++) {
            double s = 0;
            for (int64_t i = 0; i < W; i++) {
                int64_t src = t - (W - 1) + i;
                if (src >= 0) s += w[ch * W + i] * seq[src * C + ch];
            }
            out[t * C + ch] = s;
        }
    for (int64_t i = 0; i < T * C; i++) seq[i] = silu(out[i]);
    free(out);
}

/* a refinement projection of step l (1-based) from width `in`: W^(l) full, or the
 * product of its ".down" and ".up" factors when proj_rank > 0 */
static void ref_step_proj(const ref_layer *r, const char *name, int l, bool factorised, const double *u,
                          int64_t in, int64_t out, double *y)
{
    char path[48];
    int rank = r->c->prism_proj_rank;
    if (factorised && rank > 0) {
        double mid[64];
        assert_true(rank <= 64);
        snprintf(path, sizeof path, "%s.%d.down", name, l - 1);
        matvec(u, ref_param(r, path, in, rank), in, rank, mid);
        snprintf(path, sizeof path, "%s.%d.up", name, l - 1);
        matvec(mid, ref_param(r, path, rank, out), rank, out, y);
    } else {
        snprintf(path, sizeof path, "%s.%d", name, l - 1);
        matvec(u, ref_param(r, path, in, out), in, out, y);
    }
}

static void add_bias(const ref_layer *r, const char *name, int l, double *y, int64_t n)
{
    char path[48];
    snprintf(path, sizeof path, "%s.%d", name, l - 1);
    const double *b = ref_param(r, path, n, 0);
    for (int64_t i = 0; i < n; i++) y[i] += b[i];
}

/* the L refinement steps of one token from its anchor u [A] (A = H*V) and residual
 * r [A] (consumed): keys k [L][H*K], steps d [L][A], strengths b [L][H] */
static void ref_refine(const ref_layer *r, const double *u, double *res, bool factorised_ok, double *k, double *d,
                       double *b)
{
    int64_t H = r->H, K = r->K, A = r->H * r->V;
    double p[256];
    assert_true(A <= 256);
    for (int l = 1; l <= r->L; l++) {
        double *kl = k + (l - 1) * H * K, *dl = d + (l - 1) * A, *bl = b + (l - 1) * H;
        ref_step_proj(r, "w_k", l, factorised_ok, u, A, H * K, kl);
        if (r->c->prism_knorm) l2n_heads(kl, H, K);
        if (r->c->prism_gain) {
            ref_step_proj(r, "w_p", l, factorised_ok, u, A, A, p);
            add_bias(r, "b_p", l, p, A);
        } else {
            for (int64_t i = 0; i < A; i++) p[i] = 1;
        }
        for (int64_t i = 0; i < A; i++) {
            double step = p[i] * res[i];
            dl[i] = r->c->prism_gelu ? gelu(step) : step;
            res[i] -= dl[i];
        }
        ref_step_proj(r, "w_beta", l, false, u, A, H, bl);
        add_bias(r, "b_beta", l, bl, H);
        for (int64_t h = 0; h < H; h++) bl[h] = sigmoid(bl[h]);
    }
}

/* one head's state S [K][V] through one token:
 *   S <- decay * (S - beta k (S^T k)^T) + beta k w^T + sum_extra k_l (b_l d_l)^T
 * where w is the value of the token's first write (d_1 in form paper, v in augmented) */
typedef struct {
    double decay, beta;
    const double *k, *w;
    int n_extra;
    const double *xk[PR_PRISM_MAX_L], *xv[PR_PRISM_MAX_L];
    double xb[PR_PRISM_MAX_L];
} ref_token;

static void ref_state_step(const ref_layer *r, double *S, const ref_token *tk)
{
    int64_t K = r->K, V = r->V;
    double Sk[256];
    assert_true(V <= 256);
    for (int64_t j = 0; j < V; j++) {
        Sk[j] = 0;
        for (int64_t i = 0; i < K; i++) Sk[j] += S[i * V + j] * tk->k[i];
    }
    double erase = r->fault == REF_NO_ERASE ? 0 : tk->beta;
    double write = r->fault == REF_NO_FIRST_WRITE ? 0 : tk->beta;
    for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) {
            double s = tk->decay * (S[i * V + j] - erase * tk->k[i] * Sk[j]) + write * tk->k[i] * tk->w[j];
            double keep = r->fault == REF_DECAYED_EXTRAS ? tk->decay : 1;
            for (int e = 0; e < tk->n_extra; e++) s += keep * tk->xb[e] * tk->xk[e][i] * tk->xv[e][j];
            S[i * V + j] = s;
        }
}

/* o [V] = S^T q / sqrt(K) */
static void ref_read(const ref_layer *r, const double *S, const double *q, double *o)
{
    for (int64_t j = 0; j < r->V; j++) {
        double s = 0;
        for (int64_t i = 0; i < r->K; i++) s += S[i * r->V + j] * q[i];
        o[j] = s / sqrt((double)r->K);
    }
}

/* the anchor U [T][D] of form paper from x [T][D] */
static double *paper_anchor(const ref_layer *r, const double *x, int64_t T)
{
    int64_t D = r->D;
    double *U = malloc(sizeof *U * (size_t)(T * D));
    if (r->c->prism_shortconv) {
        int64_t W = r->c->prism_conv_width ? r->c->prism_conv_width : r->c->conv_width;
        memcpy(U, x, sizeof *U * (size_t)(T * D));
        conv_silu(U, T, D, ref_param(r, "u_conv", D, W), W);
    } else {
        const double *Wu = ref_param(r, "u_proj", D, D);
        for (int64_t t = 0; t < T; t++) {
            matvec(x + t * D, Wu, D, D, U + t * D);
            for (int64_t i = 0; i < D; i++) U[t * D + i] = silu(U[t * D + i]);
        }
    }
    return U;
}

/* form paper (Algorithm 1), one sequence x [T][D] -> y [T][D]; S [H][K][V] starts at
 * zero and ends as S_T */
static void ref_paper(const ref_layer *r, const double *x, int64_t T, double *y, double *S)
{
    int64_t D = r->D, H = r->H, K = r->K, V = r->V, L = r->L;
    double *U = paper_anchor(r, x, T);
    const double *Wq = ref_param(r, "q_proj", D, H * K), *Wv = ref_param(r, "v_proj", D, D);
    const double *Wa = ref_param(r, "a_proj", D, H), *ba = ref_param(r, "a_bias", H, 0);
    const double *Wo = ref_param(r, "o_proj", D, D);
    double q[256], v[256], a[16], res[256], k[PR_PRISM_MAX_L * 256], d[PR_PRISM_MAX_L * 256],
        b[PR_PRISM_MAX_L * 16], o[256];
    assert_true(D <= 256 && H * K <= 256 && H <= 16);
    memset(S, 0, sizeof *S * (size_t)(H * K * V));
    for (int64_t t = 0; t < T; t++) {
        const double *u = U + t * D;
        matvec(u, Wq, D, H * K, q);
        if (r->c->prism_knorm) l2n_heads(q, H, K);
        matvec(u, Wv, D, D, v);
        matvec(u, Wa, D, H, a);
        for (int64_t h = 0; h < H; h++) a[h] = sigmoid(a[h] + ba[h]);
        for (int64_t i = 0; i < D; i++) res[i] = r->fault == REF_R1_IS_V ? v[i] : v[i] - u[i];   /* r_1 */
        ref_refine(r, u, res, true, k, d, b);
        for (int64_t h = 0; h < H; h++) {
            /* Eq. 18: the l = 1 step is both the erase key and the first write */
            ref_token tk = {.decay = a[h], .beta = b[h], .k = k + h * K,
                            .w = (r->fault == REF_WRITE_V_NOT_D1 ? v : d) + h * V, .n_extra = (int)L - 1};
            for (int l = 2; l <= L; l++) {
                tk.xk[l - 2] = k + (l - 1) * H * K + h * K;
                tk.xv[l - 2] = d + (l - 1) * D + h * V;
                tk.xb[l - 2] = b[(l - 1) * H + h];
            }
            ref_state_step(r, S + h * K * V, &tk);
            ref_read(r, S + h * K * V, q + h * K, o + h * V);
        }
        matvec(o, Wo, D, D, y + t * D);
    }
    free(U);
}

/* the conv branch of the Gated DeltaNet base: silu(conv(x W)) for every token, [T][n] */
static double *conv_branch(const ref_layer *r, const double *x, int64_t T, const char *proj, const char *conv,
                           int64_t n, int64_t W)
{
    double *z = malloc(sizeof *z * (size_t)(T * n));
    const double *Wp = ref_param(r, proj, r->D, n);
    for (int64_t t = 0; t < T; t++) matvec(x + t * r->D, Wp, r->D, n, z + t * n);
    if (conv) conv_silu(z, T, n, ref_param(r, conv, n, W), W);
    else
        for (int64_t i = 0; i < T * n; i++) z[i] = silu(z[i]);
    return z;
}

/* y_h = rmsnorm(o_h) * w (* silu(z_h)) per head, in place */
static void gated_norm(const ref_layer *r, double *o, const double *z)
{
    const double *w = ref_param(r, "o_norm", r->V, 0);
    for (int64_t h = 0; h < r->H; h++) {
        double *oh = o + h * r->V, ms = 0;
        for (int64_t j = 0; j < r->V; j++) ms += oh[j] * oh[j];
        double inv = 1 / sqrt(ms / (double)r->V + r->c->norm_eps);
        for (int64_t j = 0; j < r->V; j++) oh[j] = oh[j] * inv * w[j] * (z ? silu(z[h * r->V + j]) : 1);
    }
}

/* form augmented (and L = 0 in either form: the Gated DeltaNet layer) */
static void ref_augmented(const ref_layer *r, const double *x, int64_t T, double *y, double *S)
{
    int64_t D = r->D, H = r->H, K = r->K, V = r->V, A = H * V, W = r->c->conv_width, L = r->L;
    double *Q = conv_branch(r, x, T, "q_proj", "q_conv", H * K, W);
    double *Kb = conv_branch(r, x, T, "k_proj", "k_conv", H * K, W);
    double *Vb = conv_branch(r, x, T, "v_proj", "v_conv", A, W);
    double *Ua = NULL;
    if (L > 0) {
        int64_t Wu = r->c->prism_conv_width ? r->c->prism_conv_width : W;
        Ua = conv_branch(r, x, T, "u_proj", r->c->prism_shortconv ? "u_conv" : NULL, A, Wu);
    }
    const double *Wa = ref_param(r, "a_proj", D, H), *Wb = ref_param(r, "b_proj", D, H);
    const double *A_log = ref_param(r, "A_log", H, 0), *dt_bias = ref_param(r, "dt_bias", H, 0);
    const double *Wg = ref_has(r, "g_proj") ? ref_param(r, "g_proj", D, A) : NULL;
    const double *Wo = ref_param(r, "o_proj", A, D);
    double g[16], beta[16], res[256], k[PR_PRISM_MAX_L * 256], d[PR_PRISM_MAX_L * 256], b[PR_PRISM_MAX_L * 16],
        o[256], z[256];
    assert_true(A <= 256 && H * K <= 256 && H <= 16);
    memset(S, 0, sizeof *S * (size_t)(H * K * V));
    for (int64_t t = 0; t < T; t++) {
        const double *xt = x + t * D;
        double *q = Q + t * H * K, *kt = Kb + t * H * K, *vt = Vb + t * A;
        l2n_heads(q, H, K);
        l2n_heads(kt, H, K);
        matvec(xt, Wa, D, H, g);
        matvec(xt, Wb, D, H, beta);
        for (int64_t h = 0; h < H; h++) {
            g[h] = -exp(A_log[h]) * softplus(g[h] + dt_bias[h]);
            beta[h] = sigmoid(beta[h]);
        }
        if (L > 0) {
            const double *u = Ua + t * A;
            for (int64_t i = 0; i < A; i++) res[i] = r->fault == REF_R1_IS_V ? vt[i] : vt[i] - u[i];
            ref_refine(r, u, res, false, k, d, b);
        }
        for (int64_t h = 0; h < H; h++) {
            /* GDN's own write of v, erased by GDN's key; every refinement step is extra */
            ref_token tk = {.decay = exp(g[h]), .beta = beta[h], .k = kt + h * K,
                            .w = vt + h * V, .n_extra = (int)L};
            for (int l = 1; l <= L; l++) {
                tk.xk[l - 1] = k + (l - 1) * H * K + h * K;
                tk.xv[l - 1] = d + (l - 1) * A + h * V;
                tk.xb[l - 1] = b[(l - 1) * H + h];
            }
            ref_state_step(r, S + h * K * V, &tk);
            ref_read(r, S + h * K * V, q + h * K, o + h * V);
        }
        if (Wg) matvec(xt, Wg, D, A, z);
        gated_norm(r, o, Wg ? z : NULL);
        matvec(o, Wo, A, D, y + t * D);
    }
    free(Q), free(Kb), free(Vb), free(Ua);
}

/* the reference on every sequence of x [B][T][D]: y [B][T][D], S [B][H][K][V] */
static void ref_forward(const ref_layer *r, const double *x, int64_t B, int64_t T, double *y, double *S)
{
    bool paper = strcmp(r->c->prism_form, "paper") == 0 && r->L > 0;
    int64_t HKV = r->H * r->K * r->V;
    for (int64_t s = 0; s < B; s++) {
        if (paper) ref_paper(r, x + s * T * r->D, T, y + s * T * r->D, S + s * HKV);
        else ref_augmented(r, x + s * T * r->D, T, y + s * T * r->D, S + s * HKV);
    }
}

/* ---- the comparison --------------------------------------------------------------------- */

/* max |a - b| / max |b| */
static double rel_err(const double *a, const double *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    assert_true(den > 1e-3);   /* a signal too small to compare would pass anything */
    return num / den;
}

static pr_config case_config(const char *const *sets)
{
    pr_config c = pr_config_default();
    const char *base[] = {"mixer=prism", "d_model=12", "n_heads=3", "conv_width=3", "chunk=4", "prism.chunk=5",
                          "init_std=0.5", "seed=5", "gdn.expand_v=1", "head_dim=0"};
    pr_err err;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) assert_int_equal(pr_config_set(&c, base[i], &err), 0);
    for (int i = 0; sets[i]; i++) {
        int rc = pr_config_set(&c, sets[i], &err);
        if (rc) fail_msg("%s: %s", sets[i], err.msg);
    }
    return c;
}

/* every parameter moved off its init by N(0, 0.2): constant inits (biases, norm
 * weights) become distinct per element, so a misplaced index shows */
static void perturb_params(const pr_params *p, uint64_t seed)
{
    pr_rng rng = pr_rng_init(seed, 3);
    for (int i = 0; i < p->n; i++) {
        pr_tensor *t = p->p[i].t;
        pr_arena *a = pr_arena_new("noise", 0);
        pr_tensor *n = pr_randn(a, PR_F64, PR_CPU, t->ndim, t->shape, &rng);
        double *dst = t->data;
        const double *src = n->data;
        for (int64_t j = 0; j < t->numel; j++) dst[j] += 0.2 * src[j];
        pr_arena_free(a);
    }
}

typedef struct {
    test_layer layer;
    ref_layer ref;
    int64_t B, T;
    double *x, *y_ref, *S_ref;
    pr_tensor *xt;
} ref_case;

/* the layer of sets (parameters perturbed), an input of B = 2 sequences of T, and the
 * reference's outputs and final states for it */
static void case_open(ref_case *k, pr_ctx *ctx, const char *const *sets, int64_t T)
{
    pr_config c = case_config(sets);
    *k = (ref_case){.B = 2, .T = T, .layer = test_layer_new(&c, PR_F64, PR_CPU)};
    perturb_params(k->layer.params, 17);
    const pr_config *lc = &k->layer.cfg;
    int64_t H = lc->n_heads, K = pr_config_head_dim(lc), V = pr_config_value_dim(lc), D = lc->d_model;
    k->ref = (ref_layer){.params = k->layer.params, .c = lc, .D = D, .H = H, .K = K, .V = V, .L = lc->prism_L};
    int64_t n = k->B * T * D;
    k->xt = test_input(ctx->step, PR_F64, k->B, T, D, 23);
    k->x = malloc(sizeof *k->x * (size_t)n);
    k->y_ref = malloc(sizeof *k->y_ref * (size_t)n);
    k->S_ref = malloc(sizeof *k->S_ref * (size_t)(k->B * H * K * V));
    pr_to_host_f64(k->xt, k->x);
    ref_forward(&k->ref, k->x, k->B, T, k->y_ref, k->S_ref);
}

static void case_close(ref_case *k)
{
    free(k->x), free(k->y_ref), free(k->S_ref);
    test_layer_free(&k->layer);
}

static void assert_close(const char *what, const char *const *sets, const pr_tensor *got, const double *ref)
{
    double *g = malloc(sizeof *g * (size_t)got->numel);
    pr_to_host_f64(got, g);
    double e = rel_err(g, ref, got->numel);
    free(g);
    if (!(e <= 1e-12)) {
        fprintf(stderr, "  %s differs from the reference by %.3g (relative) with", what, e);
        for (int i = 0; sets[i]; i++) fprintf(stderr, " %s", sets[i]);
        fprintf(stderr, "\n");
        fail();
    }
}

/* the layer's whole-sequence forward with a carried state: output and S_T; then a
 * prefix of 5 tokens followed by token-by-token decoding */
static void check_case(const char *const *sets, int64_t T)
{
    pr_ctx *ctx = pr_ctx_new(1);
    ref_case k;
    case_open(&k, ctx, sets, T);
    pr_layer_state st = {0};
    assert_close("output", sets, test_layer_forward(ctx, &k.layer, k.xt, &st), k.y_ref);
    assert_close("final state", sets, st.slot[PR_SLOT_PRISM_H], k.S_ref);

    pr_layer_state dec = {0};
    pr_tensor *joined = test_layer_forward(ctx, &k.layer, pr_slice(ctx, k.xt, 1, 0, 5), &dec);
    for (int64_t t = 5; t < T; t++)
        joined = pr_concat(ctx, 2, (pr_tensor *[]){joined, test_layer_forward(ctx, &k.layer,
                                                                              pr_slice(ctx, k.xt, 1, t, 1), &dec)}, 1);
    assert_close("decoded output", sets, joined, k.y_ref);
    assert_close("decoded final state", sets, dec.slot[PR_SLOT_PRISM_H], k.S_ref);
    case_close(&k);
    pr_ctx_free(ctx);
}

#define SETS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_paper_form(void **state)
{
    (void)state;
    check_case(SETS("prism.L=1"), 13);
    check_case(SETS("prism.L=2"), 37);
    check_case(SETS("prism.L=3"), 13);
    check_case(SETS("prism.L=2", "prism.gelu=off"), 13);
    check_case(SETS("prism.L=2", "prism.shortconv=off"), 13);
    check_case(SETS("prism.L=2", "prism.gain=off"), 13);
    check_case(SETS("prism.L=2", "prism.knorm=off"), 13);
    check_case(SETS("prism.L=1", "prism.knorm=off", "prism.gelu=off"), 17);
    check_case(SETS("prism.L=3", "prism.proj_rank=2", "prism.conv_width=4"), 19);
    check_case(SETS("prism.L=2", "prism.a_bias=-1", "prism.beta_bias=0.5"), 13);
    check_case(SETS("prism.L=2", "n_heads=1"), 13);
    check_case(SETS("prism.L=2", "n_heads=4"), 13);
    /* the per-token form of the whole sequence (chunk 0) */
    check_case(SETS("prism.L=1", "chunk=0"), 13);
    check_case(SETS("prism.L=3", "prism.chunk=0"), 13);
}

static void test_l0_is_gdn(void **state)
{
    (void)state;
    check_case(SETS("prism.L=0", "prism.form=paper"), 13);
    check_case(SETS("prism.L=0", "prism.form=augmented", "gdn.gate=false"), 13);
}

static void test_augmented_form(void **state)
{
    (void)state;
    check_case(SETS("prism.form=augmented", "prism.L=2"), 37);
    check_case(SETS("prism.form=augmented", "prism.L=1", "gdn.expand_v=2", "head_dim=3"), 13);
    check_case(SETS("prism.form=augmented", "prism.L=3", "prism.gelu=off"), 13);
    check_case(SETS("prism.form=augmented", "prism.L=2", "prism.shortconv=off"), 13);
    check_case(SETS("prism.form=augmented", "prism.L=2", "prism.gain=off", "prism.knorm=off"), 13);
    check_case(SETS("prism.form=augmented", "prism.L=2", "gdn.gate=false", "prism.conv_width=2"), 13);
    check_case(SETS("prism.form=augmented", "prism.L=2", "prism.chunk=0"), 13);
}

/* each deliberate fault in the reference must be caught by the same comparison */
static void fault_caught(const char *const *sets, ref_fault fault)
{
    pr_ctx *ctx = pr_ctx_new(1);
    ref_case k;
    case_open(&k, ctx, sets, 13);
    pr_tensor *y = test_layer_forward(ctx, &k.layer, k.xt, NULL);
    double *got = malloc(sizeof *got * (size_t)y->numel), *bad = malloc(sizeof *bad * (size_t)y->numel);
    double *S = malloc(sizeof *S * (size_t)(k.B * k.ref.H * k.ref.K * k.ref.V));
    pr_to_host_f64(y, got);
    assert_true(rel_err(got, k.y_ref, y->numel) <= 1e-12);   /* the exact reference agrees ... */
    k.ref.fault = fault;
    ref_forward(&k.ref, k.x, k.B, k.T, bad, S);
    double e = rel_err(got, bad, y->numel);                    /* ... and the broken one must not */
    if (!(e > 1e-3)) fail_msg("fault %d of the reference went unnoticed (relative error %.3g)", (int)fault, e);
    free(got), free(bad), free(S);
    case_close(&k);
    pr_ctx_free(ctx);
}

static void test_faults_are_caught(void **state)
{
    (void)state;
    const ref_fault paper_faults[] = {REF_NO_ERASE, REF_WRITE_V_NOT_D1, REF_R1_IS_V, REF_NO_FIRST_WRITE,
                                      REF_DECAYED_EXTRAS};
    for (int i = 0; i < 5; i++) fault_caught(SETS("prism.L=2"), paper_faults[i]);
    fault_caught(SETS("prism.L=1"), REF_WRITE_V_NOT_D1);
    fault_caught(SETS("prism.form=augmented", "prism.L=2"), REF_NO_ERASE);
    fault_caught(SETS("prism.form=augmented", "prism.L=2"), REF_R1_IS_V);
    fault_caught(SETS("prism.form=augmented", "prism.L=2"), REF_DECAYED_EXTRAS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_form),
        cmocka_unit_test(test_l0_is_gdn),
        cmocka_unit_test(test_augmented_form),
        cmocka_unit_test(test_faults_are_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
