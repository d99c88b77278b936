/* models/prism.c: the PRISM layer in its two forms (docs/PRISM.md).
 *
 * Form paper (Algorithm 1): every projection reads the anchor U, and the
 * first refinement step is the write:
 *
 *   U = silu(conv(x))  (depthwise over D; shortconv=off: silu(x Wu))          [B,T,D]
 *   q = l2n(U Wq)  v = U Wv  g = log sigmoid(U Wa + b_a)
 *   r = v - U;  for l < L:
 *     k_l = l2n(U Wk_l)  p_l = U Wp_l + bp_l (gain=off: 1)  beta_l = sigmoid(U Wbeta_l + bbeta_l)
 *     d_l = gelu(p_l * r) (gelu=off: p_l * r);  r = r - d_l
 *   o = prism_core with k = k_0, v = d_0, beta = beta_0 and extras kx_l = k_l,
 *       vx_l = beta_l d_l for l >= 1 (L = 1: the gdn rule);  y = concat_heads(o) Wo
 *
 * Form augmented: the Gated DeltaNet base path (models/gdn.c, same parameters
 * and paths) plus L refinement writes that are never erased:
 *
 *   u = silu(conv(x Wu))  (shortconv=off: silu(x Wu))                         [B,T,H*V]
 *   r = v - u;  k_l, p_l, beta_l, d_l from u as above;  kx_l = k_l, vx_l = beta_l d_l
 *   o = prism_core recurrence;  y as in gdn.
 *
 * knorm=off drops the l2n on k_l (and on q in form paper); in form paper,
 * proj_rank = r > 0 factorises W_k and W_p through r (form augmented keeps them full). L = 0 registers the gdn parameters only
 * and runs the gdn rule in both forms: it IS the gdn layer.
 * State slots: 0..2 the gdn q, k, v conv windows, 3 the recurrent state, 4 the anchor's window. */
#include <math.h>
#include <string.h>

#include "models/models.h"
#include "models/slots.h"


/* x W (+ b), with W full [in,out] or factorised [in,r] [r,out] */
typedef struct { pr_tensor *w, *w_up, *b; } prism_proj;

typedef struct {
    bool paper;
    pr_gdn_base base;                        /* form augmented, and L = 0 in both forms */
    pr_tensor *u_proj, *u_conv;              /* the anchor: [in,out] when shortconv=off or augmented; [C,W] */
    pr_tensor *q_proj, *v_proj, *a_proj, *a_bias, *o_proj;   /* form paper: [D,HK] [D,D] [D,H] [H] [D,D] */
    prism_proj k[PR_PRISM_MAX_L], p[PR_PRISM_MAX_L], beta[PR_PRISM_MAX_L];
} prism_layer;

static prism_proj proj_new(pr_params *r, const pr_config *c, const char *name, int i, int64_t in, int64_t out,
                           int rank)
{
    pr_init w = pr_init_std(c);
    char path[40];
    prism_proj p = {0};
    if (rank > 0) {
        snprintf(path, sizeof path, "%s.%d.down", name, i);
        p.w = pr_param_new(r, path, w, true, PR_DIMS(in, rank));
        snprintf(path, sizeof path, "%s.%d.up", name, i);
        p.w_up = pr_param_new(r, path, w, true, PR_DIMS(rank, out));
    } else {
        snprintf(path, sizeof path, "%s.%d", name, i);
        p.w = pr_param_new(r, path, w, true, PR_DIMS(in, out));
    }
    return p;
}

static pr_tensor *proj_apply(pr_ctx *ctx, const prism_proj *p, pr_tensor *x)
{
    if (p->w_up) x = pr_linear(ctx, x, p->w, NULL);
    return pr_linear(ctx, x, p->w_up ? p->w_up : p->w, p->b);
}

static pr_tensor *bias_new(pr_params *r, const char *name, int i, double value, int64_t n)
{
    char path[40];
    snprintf(path, sizeof path, "%s.%d", name, i);
    return pr_param_new(r, path, (pr_init){PR_INIT_CONST, value, 0}, false, PR_DIMS(n));
}

/* the refinement projections of step i, reading the anchor of width A; W_k and W_p
 * factorised through `rank` when it is > 0 */
static void build_step(pr_params *r, const pr_config *c, prism_layer *l, int i, int64_t A, int rank)
{
    int64_t H = c->n_heads, HK = H * pr_config_head_dim(c), HV = H * pr_config_value_dim(c);
    l->k[i] = proj_new(r, c, "w_k", i, A, HK, rank);
    if (c->prism_gain) {
        l->p[i] = proj_new(r, c, "w_p", i, A, HV, rank);
        l->p[i].b = bias_new(r, "b_p", i, 1, HV);   /* gain starts near 1 (ours) */
    }
    l->beta[i] = proj_new(r, c, "w_beta", i, A, H, 0);
    l->beta[i].b = bias_new(r, "b_beta", i, c->prism_beta_bias, H);
}

static int anchor_width(const pr_config *c)
{
    return c->prism_conv_width ? c->prism_conv_width : c->conv_width;
}

static void build_paper(pr_params *r, const pr_config *c, prism_layer *l)
{
    int64_t D = c->d_model, H = c->n_heads, HK = H * pr_config_head_dim(c);
    pr_init w = pr_init_std(c);
    /* the conv reads x itself: N(0, init_std) would shrink U to ~init_std, so it takes a
     * depthwise Conv1d's usual U(-1/sqrt(W), 1/sqrt(W)) (ours) */
    int W = anchor_width(c);
    pr_init conv = {PR_INIT_UNIFORM, -1 / sqrt(W), 1 / sqrt(W)};
    if (c->prism_shortconv) l->u_conv = pr_param_new(r, "u_conv", conv, true, PR_DIMS(D, W));
    else l->u_proj = pr_param_new(r, "u_proj", w, true, PR_DIMS(D, D));
    l->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    l->v_proj = pr_param_new(r, "v_proj", w, true, PR_DIMS(D, D));
    l->a_proj = pr_param_new(r, "a_proj", w, true, PR_DIMS(D, H));
    l->a_bias = pr_param_new(r, "a_bias", (pr_init){PR_INIT_CONST, c->prism_a_bias, 0}, false, PR_DIMS(H));
    for (int i = 0; i < c->prism_L; i++) build_step(r, c, l, i, D, c->prism_proj_rank);
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(D, D));
}

static void build_augmented(pr_params *r, const pr_config *c, prism_layer *l)
{
    int64_t D = c->d_model, HV = c->n_heads * pr_config_value_dim(c);
    pr_init w = pr_init_std(c);
    pr_gdn_base_build(r, c, &l->base, true, c->gdn_gate);
    l->u_proj = pr_param_new(r, "u_proj", w, true, PR_DIMS(D, HV));
    if (c->prism_shortconv) l->u_conv = pr_param_new(r, "u_conv", w, true, PR_DIMS(HV, anchor_width(c)));
    for (int i = 0; i < c->prism_L; i++) build_step(r, c, l, i, HV, 0);
}

static void *prism_build(pr_params *r, const pr_config *c)
{
    prism_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    l->paper = strcmp(c->prism_form, "paper") == 0;
    if (c->prism_L == 0) pr_gdn_base_build(r, c, &l->base, true, c->gdn_gate);   /* the gdn layer, both forms */
    else if (l->paper) build_paper(r, c, l);
    else build_augmented(r, c, l);
    return l;
}

/* the refinement steps from the anchor u [B,T,HV] and residual r: keys k [B,T,H,L,K] and
 * values [B,T,H,L,V], each step's value d_l; strengths beta [B,T,H,L,1] kept apart */
typedef struct { pr_tensor *k[PR_PRISM_MAX_L], *d[PR_PRISM_MAX_L], *beta[PR_PRISM_MAX_L]; } prism_steps;

static prism_steps refine(pr_ctx *ctx, const prism_layer *l, const pr_config *c, pr_tensor *u, pr_tensor *r)
{
    int64_t H = c->n_heads;
    prism_steps s;
    for (int i = 0; i < c->prism_L; i++) {
        pr_tensor *k = pr_split_heads(ctx, proj_apply(ctx, &l->k[i], u), H);
        s.k[i] = c->prism_knorm ? pr_l2norm(ctx, k, 1e-6) : k;
        pr_tensor *step = l->p[i].w ? pr_mul(ctx, proj_apply(ctx, &l->p[i], u), r) : r;
        pr_tensor *d = c->prism_gelu ? pr_gelu(ctx, step) : step;
        if (i + 1 < c->prism_L) r = pr_sub(ctx, r, d);
        s.d[i] = pr_split_heads(ctx, d, H);                                        /* [B,T,H,V] */
        s.beta[i] = pr_sigmoid(ctx, proj_apply(ctx, &l->beta[i], u));             /* [B,T,H] */
    }
    return s;
}

/* the extra writes of steps first..L-1: kx [B,T,H,n,K], vx = beta d [B,T,H,n,V] */
static void extras(pr_ctx *ctx, const pr_config *c, const prism_steps *s, int first, pr_tensor **kx, pr_tensor **vx)
{
    int n = c->prism_L - first;
    if (n <= 0) return;
    pr_tensor *ks[PR_PRISM_MAX_L], *vs[PR_PRISM_MAX_L];
    for (int i = 0; i < n; i++) {
        pr_tensor *k = s->k[first + i], *d = s->d[first + i], *b = s->beta[first + i];
        int64_t B = d->shape[0], T = d->shape[1], H = d->shape[2];
        pr_tensor *vv = pr_mul(ctx, d, pr_reshape(ctx, b, PR_DIMS(B, T, H, 1)));
        ks[i] = pr_reshape(ctx, k, PR_DIMS(B, T, H, 1, k->shape[3]));
        vs[i] = pr_reshape(ctx, vv, PR_DIMS(B, T, H, 1, d->shape[3]));
    }
    *kx = n == 1 ? ks[0] : pr_concat(ctx, n, ks, 3);
    *vx = n == 1 ? vs[0] : pr_concat(ctx, n, vs, 3);
}

static pr_tensor *recur(pr_ctx *ctx, const pr_config *c, pr_tensor *x, pr_tensor *q, pr_tensor *k, pr_tensor *v,
                        pr_tensor *g, pr_tensor *beta, pr_tensor *kx, pr_tensor *vx, pr_layer_state *st)
{
    pr_rule rule = kx ? PR_RULE_PRISM_CORE : PR_RULE_GDN;
    pr_recurrence_opts opt = pr_config_recurrence(c, rule, x->shape[1], 0);
    return pr_recurrence(ctx, &opt, q, k, v, g, beta, kx, vx, st ? st->slot[PR_SLOT_PRISM_H] : NULL, NULL,
                         st ? &st->slot[PR_SLOT_PRISM_H] : NULL);
}

static pr_tensor *forward_paper(pr_ctx *ctx, const prism_layer *l, const pr_config *c, pr_tensor *x,
                                pr_layer_state *st)
{
    int64_t H = c->n_heads;
    pr_tensor *u = l->u_conv ? pr_shortconv_silu(ctx, x, l->u_conv, NULL, st ? &st->slot[PR_SLOT_PRISM_U] : NULL)
                             : pr_silu(ctx, pr_linear(ctx, x, l->u_proj, NULL));   /* [B,T,D] */
    pr_tensor *q = pr_split_heads(ctx, pr_linear(ctx, u, l->q_proj, NULL), H);
    if (c->prism_knorm) q = pr_l2norm(ctx, q, 1e-6);
    /* log a, [B,T,H]; the decay's bias added in f32 (pr_add promotes; pr_linear would lower it) */
    pr_tensor *g = pr_logsigmoid(ctx, pr_add(ctx, pr_linear(ctx, u, l->a_proj, NULL), l->a_bias));
    pr_tensor *r = pr_sub(ctx, pr_linear(ctx, u, l->v_proj, NULL), u);              /* r_1 = v - U */
    prism_steps s = refine(ctx, l, c, u, r);
    pr_tensor *kx = NULL, *vx = NULL;
    extras(ctx, c, &s, 1, &kx, &vx);
    pr_tensor *o = recur(ctx, c, x, q, s.k[0], s.d[0], g, s.beta[0], kx, vx, st);
    return pr_linear(ctx, pr_merge_heads(ctx, o), l->o_proj, NULL);
}

static pr_tensor *forward_augmented(pr_ctx *ctx, const prism_layer *l, const pr_config *c, pr_tensor *x,
                                    pr_layer_state *st)
{
    pr_gdn_inputs in = pr_gdn_base_inputs(ctx, &l->base, c, x, st);
    pr_tensor *kx = NULL, *vx = NULL;
    if (c->prism_L > 0) {
        pr_tensor *u = pr_linear(ctx, x, l->u_proj, NULL);
        u = l->u_conv ? pr_shortconv_silu(ctx, u, l->u_conv, NULL, st ? &st->slot[PR_SLOT_PRISM_U] : NULL)
                      : pr_silu(ctx, u);
        prism_steps s = refine(ctx, l, c, u, pr_sub(ctx, pr_merge_heads(ctx, in.v), u));
        extras(ctx, c, &s, 0, &kx, &vx);
    }
    pr_tensor *o = recur(ctx, c, x, in.q, in.k, in.v, in.g, in.beta, kx, vx, st);
    return pr_gdn_base_output(ctx, &l->base, c, x, o);
}

static pr_tensor *prism_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x,
                                pr_layer_state *st)
{
    const prism_layer *l = layer;
    return l->paper && c->prism_L > 0 ? forward_paper(ctx, l, c, x, st) : forward_augmented(ctx, l, c, x, st);
}

/* form paper's residual v - U subtracts the anchor U [D] from v [H*V] */
static int prism_check(const pr_config *c, pr_err *err)
{
    if (strcmp(c->prism_form, "paper") == 0 && c->prism_L > 0 &&
        (int64_t)c->n_heads * pr_config_value_dim(c) != c->d_model)
        return pr_errf(err, "config: prism.form=paper needs n_heads * V = d_model (its residual v - U subtracts the "
                            "anchor U [D] from v [H*V]); got n_heads %d * V %lld != d_model %d (set head_dim=0 and "
                            "gdn.expand_v=1, or prism.form=augmented)",
                       c->n_heads, (long long)pr_config_value_dim(c), c->d_model);
    return 0;
}

const pr_mixer_def pr_mixer_prism = {
    .name = "prism",
    .summary = "PRISM (prism.form: paper = Algorithm 1; augmented = Gated DeltaNet plus L refinement writes)",
    .mlp = true,
    .expands_v = true,
    .check = prism_check,
    .build = prism_build,
    .forward = prism_forward,
};
