/* models/common.c: pieces every layer shares: linear maps, the ShortConv with
 * a carried window, head reshapes, broadcasting repeats, the mixer table. */
#include <math.h>
#include <string.h>

#include "models/models.h"

const pr_mixer_def *const pr_mixers[] = {&pr_mixer_prism, &pr_mixer_gdn, &pr_mixer_mamba2, &pr_mixer_deltanet,
                                         &pr_mixer_linattn, &pr_mixer_ttt_linear, &pr_mixer_ttt_mlp, &pr_mixer_titans,
                                         &pr_mixer_attn, &pr_mixer_mamba, &pr_mixer_mom, &pr_mixer_hstu, &pr_mixer_gla,
                                         &pr_mixer_gsa, &pr_mixer_atlas, NULL};

const pr_mixer_def *pr_mixer_by_name(const char *name)
{
    if (strcmp(name, "sla") == 0) name = "linattn";   /* the PRISM paper's name for it */
    for (int i = 0; pr_mixers[i]; i++)
        if (strcmp(pr_mixers[i]->name, name) == 0) return pr_mixers[i];
    return NULL;
}

pr_tensor *pr_linear(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *b)
{
    pr_tensor *y = pr_matmul(ctx, x, w, false, false);
    return b ? pr_add(ctx, y, pr_autocast(ctx, b, y->dtype)) : y;   /* autocast: the bias in y's dtype */
}

pr_tensor *pr_shortconv_silu(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *bias, pr_tensor **win)
{
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[1];
    if (!win || W == 1) return pr_conv1d_silu(ctx, x, w, bias);
    /* prepend the window (zeros for a fresh sequence: the same as the op's padding) */
    pr_tensor *prev = *win ? *win : pr_zeros(ctx->step, x->dtype, x->device, PR_DIMS(B, W - 1, C));
    pr_tensor *full = pr_concat(ctx, 2, (pr_tensor *[]){prev, x}, 1);
    pr_tensor *y = pr_slice(ctx, pr_conv1d_silu(ctx, full, w, bias), 1, W - 1, T);
    *win = pr_slice(ctx, full, 1, T, W - 1);
    return y;
}

pr_pre_conv_params pr_pre_conv_build(pr_params *r, const pr_config *c, int width)
{
    pr_pre_conv_params p = {NULL, NULL};
    if (!width) return p;
    double bound = 1.0 / sqrt((double)width);
    pr_init u = {PR_INIT_UNIFORM, -bound, bound};
    p.w = pr_param_new(r, "pre_conv", u, true, PR_DIMS(c->d_model, width));
    p.b = pr_param_new(r, "pre_conv_bias", u, false, PR_DIMS(c->d_model));
    return p;
}

pr_tensor *pr_pre_conv(pr_ctx *ctx, pr_tensor *x, const pr_pre_conv_params *p, pr_tensor **win)
{
    return p->w ? pr_shortconv_silu(ctx, x, p->w, p->b, win) : x;
}

pr_tensor *pr_split_heads(pr_ctx *ctx, pr_tensor *x, int64_t H)
{
    int64_t E = x->shape[x->ndim - 1] / H;
    PR_CHECK(E * H == x->shape[x->ndim - 1], "split_heads: last dim %lld is not a multiple of %lld heads",
             (long long)x->shape[x->ndim - 1], (long long)H);
    return pr_reshape(ctx, x, PR_DIMS(x->shape[0], x->shape[1], H, E));
}

pr_tensor *pr_merge_heads(pr_ctx *ctx, pr_tensor *x)
{
    return pr_reshape(ctx, x, PR_DIMS(x->shape[0], x->shape[1], x->shape[2] * x->shape[3]));
}

pr_tensor *pr_repeat_dim(pr_ctx *ctx, pr_tensor *x, int dim, int64_t n)
{
    PR_CHECK(x->shape[dim] == 1, "repeat_dim: dim %d has size %lld, not 1", dim, (long long)x->shape[dim]);
    if (n == 1) return x;
    int64_t shape[PR_MAX_DIMS];
    int nd = x->ndim - dim;   /* ones span dim..last, so they broadcast against x's trailing dims */
    for (int i = 0; i < nd; i++) shape[i] = i == 0 ? n : 1;
    pr_tensor *ones = pr_ones(ctx->step, x->dtype, x->device, nd, shape);
    return pr_mul(ctx, x, ones);
}

void pr_qkvgo_build(pr_params *r, const pr_config *c, pr_qkvgo *p)
{
    int64_t D = c->d_model, HK = c->n_heads * pr_config_head_dim(c);
    pr_init w = pr_init_std(c);
    p->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    p->k_proj = pr_param_new(r, "k_proj", w, true, PR_DIMS(D, HK));
    p->v_proj = pr_param_new(r, "v_proj", w, true, PR_DIMS(D, HK));
    p->g_proj = pr_param_new(r, "g_proj", w, true, PR_DIMS(D, HK));
    p->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HK, D));
}

pr_recurrence_opts pr_config_recurrence(const pr_config *c, pr_rule rule, int64_t T, double scale)
{
    /* the chunked form needs no multiple of the chunk; a single token takes the per-token form.
     * PRISM's L extra keys a token make its chunks' products larger: it has a chunk of its own
     * (32 by default: faster than 64 on the H200 at L = 2, ops/recurrence/NOTES.md) */
    int chunk = rule == PR_RULE_PRISM_CORE ? c->prism_chunk : c->chunk;
    return (pr_recurrence_opts){.rule = rule, .scale = scale, .chunk = T == 1 ? 0 : chunk};
}

int64_t pr_config_head_dim(const pr_config *c)
{
    return c->head_dim ? c->head_dim : c->d_model / c->n_heads;
}

int64_t pr_config_value_dim(const pr_config *c)
{
    const pr_mixer_def *def = pr_mixer_by_name(c->mixer);
    return pr_config_head_dim(c) * (def && def->expands_v ? c->gdn_expand_v : 1);
}

pr_init pr_init_std(const pr_config *c)
{
    return (pr_init){PR_INIT_NORMAL, c->init_std, 0};
}
