/* models/linattn.c: the linear attention layer (BASELINES.md 3.2, fla
 * LinearAttention): no ShortConv, no gate, a feature map on q and k.
 *   q = phi_q(x Wq)  k = phi_k(x Wk)  v = x Wv   (per head)
 *   elementwise_product: phi(z) = (z W1 + b1) * (z W2 + b2), W [K,K] per map;
 *   elu: elu(z) + 1 (= z + 1 for z > 0, e^z otherwise); relu; identity
 *   o = linattn recurrence (scale K^-1/2);  y = concat_heads(rms(o)) Wo
 * linattn.shortconv = W > 0 first runs x through silu(depthwise causal conv of
 * width W, with bias) (pr_pre_conv: the authors' probe baselines, W = 5 for theirs).
 * State slot 0: the [B,H,K,V] state; slot 1 the conv's window. */
#include <string.h>

#include "models/models.h"
#include "models/slots.h"

typedef struct {
    pr_pre_conv_params pre_conv;   /* linattn.shortconv only */
    pr_tensor *q_proj, *k_proj, *v_proj, *o_norm, *o_proj;
    pr_tensor *fq_w1, *fq_b1, *fq_w2, *fq_b2, *fk_w1, *fk_b1, *fk_w2, *fk_b2;   /* [K,K], [K] */
} linattn_layer;

static void *linattn_build(pr_params *r, const pr_config *c)
{
    linattn_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    int64_t D = c->d_model, K = pr_config_head_dim(c), HK = c->n_heads * K;
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0}, zero = {PR_INIT_CONST, 0, 0};
    l->pre_conv = pr_pre_conv_build(r, c, c->linattn_shortconv);
    l->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    l->k_proj = pr_param_new(r, "k_proj", w, true, PR_DIMS(D, HK));
    l->v_proj = pr_param_new(r, "v_proj", w, true, PR_DIMS(D, HK));
    if (strcmp(c->linattn_feature_map, "elementwise_product") == 0) {
        l->fq_w1 = pr_param_new(r, "feature_map_q.w1", w, true, PR_DIMS(K, K));
        l->fq_b1 = pr_param_new(r, "feature_map_q.b1", zero, false, PR_DIMS(K));
        l->fq_w2 = pr_param_new(r, "feature_map_q.w2", w, true, PR_DIMS(K, K));
        l->fq_b2 = pr_param_new(r, "feature_map_q.b2", zero, false, PR_DIMS(K));
        l->fk_w1 = pr_param_new(r, "feature_map_k.w1", w, true, PR_DIMS(K, K));
        l->fk_b1 = pr_param_new(r, "feature_map_k.b1", zero, false, PR_DIMS(K));
        l->fk_w2 = pr_param_new(r, "feature_map_k.w2", w, true, PR_DIMS(K, K));
        l->fk_b2 = pr_param_new(r, "feature_map_k.b2", zero, false, PR_DIMS(K));
    }
    l->o_norm = pr_param_new(r, "o_norm", one, false, PR_DIMS(K));
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HK, D));
    return l;
}

static pr_tensor *feature_map(pr_ctx *ctx, const pr_config *c, pr_tensor *z, pr_tensor *w1, pr_tensor *b1,
                              pr_tensor *w2, pr_tensor *b2)
{
    const char *f = c->linattn_feature_map;
    if (strcmp(f, "elementwise_product") == 0)
        return pr_mul(ctx, pr_linear(ctx, z, w1, b1), pr_linear(ctx, z, w2, b2));
    if (strcmp(f, "relu") == 0) return pr_relu(ctx, z);
    if (strcmp(f, "elu") == 0) {
        /* elu(z) + 1 = relu(z) + exp(min(z, 0)) = relu(z) + exp(z - relu(z)) */
        pr_tensor *pos = pr_relu(ctx, z);
        return pr_add(ctx, pos, pr_exp(ctx, pr_sub(ctx, z, pos)));
    }
    return z;   /* identity */
}

static pr_tensor *linattn_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x,
                                  pr_layer_state *st)
{
    const linattn_layer *l = layer;
    int64_t H = c->n_heads;
    x = pr_pre_conv(ctx, x, &l->pre_conv, st ? &st->slot[PR_SLOT_LINATTN_CONV] : NULL);
    pr_tensor *q = pr_split_heads(ctx, pr_linear(ctx, x, l->q_proj, NULL), H);
    pr_tensor *k = pr_split_heads(ctx, pr_linear(ctx, x, l->k_proj, NULL), H);
    pr_tensor *v = pr_split_heads(ctx, pr_linear(ctx, x, l->v_proj, NULL), H);
    q = feature_map(ctx, c, q, l->fq_w1, l->fq_b1, l->fq_w2, l->fq_b2);
    k = feature_map(ctx, c, k, l->fk_w1, l->fk_b1, l->fk_w2, l->fk_b2);
    pr_recurrence_opts opt = pr_config_recurrence(c, PR_RULE_LINATTN, x->shape[1], 0);
    pr_tensor *o = pr_recurrence(ctx, &opt, q, k, v, NULL, NULL, NULL, NULL, st ? st->slot[PR_SLOT_LINATTN_H] : NULL, NULL,
                                 st ? &st->slot[PR_SLOT_LINATTN_H] : NULL);
    pr_tensor *n = pr_rmsnorm(ctx, o, l->o_norm, c->norm_eps);
    return pr_linear(ctx, pr_merge_heads(ctx, n), l->o_proj, NULL);
}

const pr_mixer_def pr_mixer_linattn = {
    .name = "linattn",
    .summary = "linear attention (fla LinearAttention)",
    .mlp = true,
    .build = linattn_build,
    .forward = linattn_forward,
};
