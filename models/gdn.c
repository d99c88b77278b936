/* models/gdn.c: the Gated DeltaNet layer (BASELINES.md section 1), and its
 * base path (projections, ShortConvs, gates, gated output norm), which the
 * PRISM layer shares parameter for parameter.
 *
 *   q = l2n(silu(conv(x Wq)))  k = l2n(silu(conv(x Wk)))  v = silu(conv(x Wv))
 *   g = -exp(A_log) * softplus(x Wa + dt_bias)   beta = sigmoid(x Wb)
 *   o = gdn recurrence (scale K^-1/2);  y = concat_heads(rms(o) * silu(x Wg)) Wo
 * K = head_dim, V = gdn.expand_v * K (gdn, prism; else K); state slots: 0..2 the q, k, v conv windows, 3 the [B,H,K,V] state. */
#include "models/models.h"
#include "models/slots.h"


void pr_gdn_base_build(pr_params *r, const pr_config *c, pr_gdn_base *l, bool decay, bool gate)
{
    int64_t D = c->d_model, H = c->n_heads, K = pr_config_head_dim(c), HK = H * K, W = c->conv_width;
    int64_t V = pr_config_value_dim(c), HV = H * V;
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0};
    l->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    l->k_proj = pr_param_new(r, "k_proj", w, true, PR_DIMS(D, HK));
    l->v_proj = pr_param_new(r, "v_proj", w, true, PR_DIMS(D, HV));
    if (decay) l->a_proj = pr_param_new(r, "a_proj", w, true, PR_DIMS(D, H));
    l->b_proj = pr_param_new(r, "b_proj", w, true, PR_DIMS(D, H));
    l->q_conv = pr_param_new(r, "q_conv", w, true, PR_DIMS(HK, W));
    l->k_conv = pr_param_new(r, "k_conv", w, true, PR_DIMS(HK, W));
    l->v_conv = pr_param_new(r, "v_conv", w, true, PR_DIMS(HV, W));
    if (decay) {
        l->A_log = pr_param_new(r, "A_log", (pr_init){PR_INIT_LOG_UNIFORM, 0, 16}, false, PR_DIMS(H));
        l->dt_bias = pr_param_new(r, "dt_bias", (pr_init){PR_INIT_DT_BIAS, 1e-3, 0.1}, false, PR_DIMS(H));
    }
    if (gate) l->g_proj = pr_param_new(r, "g_proj", w, true, PR_DIMS(D, HV));
    l->o_norm = pr_param_new(r, "o_norm", one, false, PR_DIMS(V));
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HV, D));
}

static pr_tensor *conv_branch(pr_ctx *ctx, pr_tensor *x, pr_tensor *proj, pr_tensor *conv, int64_t H,
                              pr_layer_state *st, int slot)
{
    pr_tensor *y = pr_shortconv_silu(ctx, pr_linear(ctx, x, proj, NULL), conv, NULL, st ? &st->slot[slot] : NULL);
    return pr_split_heads(ctx, y, H);
}

pr_gdn_inputs pr_gdn_base_inputs(pr_ctx *ctx, const pr_gdn_base *l, const pr_config *c, pr_tensor *x,
                                 pr_layer_state *st)
{
    int64_t H = c->n_heads;
    pr_gdn_inputs in = {0};
    in.q = pr_l2norm(ctx, conv_branch(ctx, x, l->q_proj, l->q_conv, H, st, PR_SLOT_GDN_Q_CONV), 1e-6);
    in.k = pr_l2norm(ctx, conv_branch(ctx, x, l->k_proj, l->k_conv, H, st, PR_SLOT_GDN_K_CONV), 1e-6);
    in.v = conv_branch(ctx, x, l->v_proj, l->v_conv, H, st, PR_SLOT_GDN_V_CONV);
    in.beta = pr_sigmoid(ctx, pr_linear(ctx, x, l->b_proj, NULL));
    /* the decay's bias added in f32 (the op widens a; pr_linear would lower the bias) */
    if (l->A_log) in.g = pr_decay_gate(ctx, pr_linear(ctx, x, l->a_proj, NULL), l->A_log, l->dt_bias);
    return in;
}

pr_tensor *pr_gdn_base_output(pr_ctx *ctx, const pr_gdn_base *l, const pr_config *c, pr_tensor *x, pr_tensor *o)
{
    pr_tensor *n;
    if (l->g_proj) {
        pr_tensor *z = pr_split_heads(ctx, pr_linear(ctx, x, l->g_proj, NULL), c->n_heads);
        n = pr_rmsnorm_gated(ctx, o, z, l->o_norm, c->norm_eps);
    } else {
        n = pr_rmsnorm(ctx, o, l->o_norm, c->norm_eps);
    }
    return pr_linear(ctx, pr_merge_heads(ctx, n), l->o_proj, NULL);
}

static void *gdn_build(pr_params *r, const pr_config *c)
{
    pr_gdn_base *l = pr_arena_alloc(r->arena, sizeof *l);
    pr_gdn_base_build(r, c, l, true, c->gdn_gate);
    return l;
}

static pr_tensor *gdn_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    const pr_gdn_base *l = layer;
    pr_gdn_inputs in = pr_gdn_base_inputs(ctx, l, c, x, st);
    pr_recurrence_opts opt = pr_config_recurrence(c, PR_RULE_GDN, x->shape[1], 0);
    pr_tensor *o = pr_recurrence(ctx, &opt, in.q, in.k, in.v, in.g, in.beta, NULL, NULL, st ? st->slot[PR_SLOT_GDN_H] : NULL,
                                 NULL, st ? &st->slot[PR_SLOT_GDN_H] : NULL);
    return pr_gdn_base_output(ctx, l, c, x, o);
}

const pr_mixer_def pr_mixer_gdn = {
    .name = "gdn",
    .summary = "Gated DeltaNet (fla GatedDeltaNet)",
    .mlp = true,
    .expands_v = true,
    .build = gdn_build,
    .forward = gdn_forward,
};
