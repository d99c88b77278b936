/* models/prism.c: the PRISM layer (docs PRISM.md): the Gated DeltaNet base
 * path (models/gdn.c, same parameters and paths) plus L refinement writes
 * computed from the input alone:
 *
 *   u = silu(conv(x Wu))            (shortconv=off: silu(x Wu))      [B,T,H*V]
 *   r = v - u;  for l < L:
 *     k_l = l2n(u Wk_l)  p_l = u Wp_l + bp_l (gain=off: 1)  beta_l = sigmoid(u Wbeta_l + bbeta_l)
 *     d_l = gelu(p_l * r) (gelu=off: p_l * r);  r = r - d_l
 *     kx_l = k_l;  vx_l = beta_l * d_l
 *   o = prism_core recurrence;  y as in gdn.
 * L = 0 registers no extra parameter and runs the gdn rule: it IS the gdn layer.
 * State slots: 0..2 q, k, v conv windows, 3 the recurrent state, 4 the u window. */
#include "models/models.h"

#define PRISM_MAX_L 8
enum { SLOT_H = 3, SLOT_U = 4 };

typedef struct {
    pr_gdn_base base;
    pr_tensor *u_proj, *u_conv;                                  /* [D,HV], [HV,W] or NULL */
    pr_tensor *w_k[PRISM_MAX_L], *w_p[PRISM_MAX_L], *b_p[PRISM_MAX_L];   /* [HV,HK] [HV,HV] [HV] */
    pr_tensor *w_beta[PRISM_MAX_L], *b_beta[PRISM_MAX_L];        /* [HV,H] [H] */
} prism_layer;

static void *prism_build(pr_params *r, const pr_config *c)
{
    prism_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    pr_gdn_base_build(r, c, &l->base, true, c->gdn_gate);
    if (c->prism_L == 0) return l;
    int64_t D = c->d_model, H = c->n_heads, HK = H * pr_config_head_dim(c), HV = H * pr_config_value_dim(c);
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0}, beta0 = {PR_INIT_CONST, c->prism_beta_bias, 0};
    l->u_proj = pr_param_new(r, "u_proj", w, true, PR_DIMS(D, HV));
    if (c->prism_shortconv) l->u_conv = pr_param_new(r, "u_conv", w, true, PR_DIMS(HV, c->conv_width));
    char name[32];
    for (int i = 0; i < c->prism_L; i++) {
        snprintf(name, sizeof name, "w_k.%d", i);
        l->w_k[i] = pr_param_new(r, name, w, true, PR_DIMS(HV, HK));
        if (c->prism_gain) {
            snprintf(name, sizeof name, "w_p.%d", i);
            l->w_p[i] = pr_param_new(r, name, w, true, PR_DIMS(HV, HV));
            snprintf(name, sizeof name, "b_p.%d", i);
            l->b_p[i] = pr_param_new(r, name, one, false, PR_DIMS(HV));
        }
        snprintf(name, sizeof name, "w_beta.%d", i);
        l->w_beta[i] = pr_param_new(r, name, w, true, PR_DIMS(HV, H));
        snprintf(name, sizeof name, "b_beta.%d", i);
        l->b_beta[i] = pr_param_new(r, name, beta0, false, PR_DIMS(H));
    }
    return l;
}

/* the extra keys kx [B,T,H,L,K] and values vx [B,T,H,L,V] of the refinement writes */
static void refinement_writes(pr_ctx *ctx, const prism_layer *l, const pr_config *c, pr_tensor *x, pr_tensor *v,
                              pr_layer_state *st, pr_tensor **kx, pr_tensor **vx)
{
    int64_t H = c->n_heads;
    pr_tensor *u = pr_linear(ctx, x, l->u_proj, NULL);
    if (l->u_conv) u = pr_shortconv(ctx, u, l->u_conv, NULL, st ? &st->slot[SLOT_U] : NULL);
    u = pr_silu(ctx, u);
    pr_tensor *r = pr_sub(ctx, pr_merge_heads(ctx, v), u);     /* [B,T,HV] */
    pr_tensor *ks[PRISM_MAX_L], *vs[PRISM_MAX_L];
    for (int i = 0; i < c->prism_L; i++) {
        pr_tensor *k = pr_l2norm(ctx, pr_split_heads(ctx, pr_linear(ctx, u, l->w_k[i], NULL), H), 1e-6);
        pr_tensor *step = l->w_p[i] ? pr_mul(ctx, pr_linear(ctx, u, l->w_p[i], l->b_p[i]), r) : r;
        pr_tensor *d = c->prism_gelu ? pr_gelu(ctx, step) : step;
        if (i + 1 < c->prism_L) r = pr_sub(ctx, r, d);
        pr_tensor *beta = pr_sigmoid(ctx, pr_linear(ctx, u, l->w_beta[i], l->b_beta[i]));    /* [B,T,H] */
        pr_tensor *b4 = pr_reshape(ctx, beta, PR_DIMS(beta->shape[0], beta->shape[1], H, 1));
        pr_tensor *vv = pr_mul(ctx, pr_split_heads(ctx, d, H), b4);                          /* [B,T,H,V] */
        ks[i] = pr_reshape(ctx, k, PR_DIMS(k->shape[0], k->shape[1], H, 1, k->shape[3]));
        vs[i] = pr_reshape(ctx, vv, PR_DIMS(vv->shape[0], vv->shape[1], H, 1, vv->shape[3]));
    }
    *kx = c->prism_L == 1 ? ks[0] : pr_concat(ctx, c->prism_L, ks, 3);
    *vx = c->prism_L == 1 ? vs[0] : pr_concat(ctx, c->prism_L, vs, 3);
}

static pr_tensor *prism_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x,
                                pr_layer_state *st)
{
    const prism_layer *l = layer;
    pr_gdn_inputs in = pr_gdn_base_inputs(ctx, &l->base, c, x, st);
    pr_tensor *kx = NULL, *vx = NULL;
    if (c->prism_L > 0) refinement_writes(ctx, l, c, x, in.v, st, &kx, &vx);
    pr_rule rule = c->prism_L > 0 ? PR_RULE_PRISM_CORE : PR_RULE_GDN;
    pr_recurrence_opts opt = pr_config_recurrence(c, rule, x->shape[1], 0);
    pr_tensor *o = pr_recurrence(ctx, &opt, in.q, in.k, in.v, in.g, in.beta, kx, vx, st ? st->slot[SLOT_H] : NULL,
                                 NULL, st ? &st->slot[SLOT_H] : NULL);
    return pr_gdn_base_output(ctx, &l->base, c, x, o);
}

const pr_mixer_def pr_mixer_prism = {
    .name = "prism",
    .summary = "PRISM: Gated DeltaNet plus L input-computed refinement writes",
    .mlp = true,
    .build = prism_build,
    .forward = prism_forward,
};
