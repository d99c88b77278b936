/* models/deltanet.c: the DeltaNet layer (BASELINES.md 3.1, fla DeltaNet with
 * its defaults: silu + l2n on q, k; beta = sigmoid(x Wb); no gate unless
 * deltanet.gate). The Gated DeltaNet base path without the decay:
 *   q = l2n(silu(conv(x Wq)))  k = l2n(silu(conv(x Wk)))  v = silu(conv(x Wv))
 *   o = delta recurrence (scale K^-1/2);  y = concat_heads(rms(o) [* silu(x Wg)]) Wo
 * State slots: 0..2 the q, k, v conv windows, 3 the [B,H,K,V] state. */
#include "models/models.h"
#include "models/slots.h"


static void *deltanet_build(pr_params *r, const pr_config *c)
{
    pr_gdn_base *l = pr_arena_alloc(r->arena, sizeof *l);
    pr_gdn_base_build(r, c, l, false, c->deltanet_gate);
    return l;
}

static pr_tensor *deltanet_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x,
                                   pr_layer_state *st)
{
    const pr_gdn_base *l = layer;
    pr_gdn_inputs in = pr_gdn_base_inputs(ctx, l, c, x, st);
    pr_recurrence_opts opt = pr_config_recurrence(c, PR_RULE_DELTA, x->shape[1], 0);
    pr_tensor *o = pr_recurrence(ctx, &opt, in.q, in.k, in.v, NULL, in.beta, NULL, NULL,
                                 st ? st->slot[PR_SLOT_GDN_H] : NULL, NULL, st ? &st->slot[PR_SLOT_GDN_H] : NULL);
    return pr_gdn_base_output(ctx, l, c, x, o);
}

const pr_mixer_def pr_mixer_deltanet = {
    .name = "deltanet",
    .summary = "DeltaNet (fla DeltaNet)",
    .mlp = true,
    .build = deltanet_build,
    .forward = deltanet_forward,
};
