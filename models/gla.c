/* models/gla.c: the two layers built on the per-key-decay rule `gla`
 * (BASELINES.md 9.1 and 9.2): Gated Linear Attention (fla
 * GatedLinearAttention) and Gated Slot Attention (fla GatedSlotAttention).
 *
 * GLA, K = d_model * gla.expand_k / H, V = d_model * gla.expand_v / H:
 *   q = x Wq  k = x Wk  v = x Wv                         (per head, no conv)
 *   gk = logsigmoid(x W_down W_up + b) / gla.gate_normalizer   [B,T,H,K]
 *   o = gla recurrence (scale K^-1/2)
 *   y = concat_heads(rms(o) * silu(x Wg)) Wo      (gla.gate off: rms(o) only)
 * State slot 0: the [B,H,K,V] state.
 *
 * GSA, M = gsa.slots, K = d_model * gsa.expand_k / H, V = d_model * gsa.expand_v / H:
 *   q = silu(x Wq)  k = silu(x Wk)  v = silu(x Wv)
 *   f = logsigmoid(x Wf) / gsa.gate_normalizer  [B,T,H,M]   s = 1 - exp(f)
 *   pass 1, keys into slots: Kt = Kt diag(exp(f_t)) + k_t s_t^T   [K,M]
 *           a_t = Kt^T q_t (M scores)
 *   pass 2, values out of slots: Vt = diag(exp(f_t)) Vt + s_t v_t^T   [M,V]
 *           o_t = Vt^T softmax(a_t)
 *   y = rms(concat_heads(silu(o))) Wo    (one RMSNorm over all H*V channels, eps 1e-5)
 * Both passes are the gla rule. Pass 2 decays its state's rows (the slots
 * are its key axis), the rule's usual form. Pass 1 decays the slots too, but
 * they are its value axis (it reads with q over the key axis), so it runs the
 * rule's per-value-decay form (opts.g_per_value, fla's gv). Both passes take
 * the config's chunk on the CPU (chunked_gla.c has both decay axes) and
 * scale 1, as fla's layer does; on CUDA the chunked kernels of
 * ops/recurrence/cuda/gla_chunked.cu take both axes too.
 * State slots 0 (pass 1, [B,H,K,M]) and 1 (pass 2, [B,H,M,V]): fla's layout
 * of its two states. */
#include <math.h>

#include "models/models.h"
#include "models/slots.h"

/* key or value dim, expand * d_model, must be a whole number of at least one per head */
static int check_expanded(const pr_config *c, double expand, const char *key, pr_err *err)
{
    const double dim = expand * c->d_model;
    const int64_t whole = (int64_t)llround(dim);
    if (fabs(dim - (double)whole) > 1e-9 * dim || whole < c->n_heads || whole % c->n_heads)
        return pr_errf(err, "config: %s %g times d_model %d gives %g, not a positive multiple of n_heads %d", key,
                       expand, c->d_model, dim, c->n_heads);
    return 0;
}

/* width * expand, the whole key or value dim of a layer (config.c checks it divides) */
static int64_t expanded(const pr_config *c, double expand) { return (int64_t)llround(c->d_model * expand); }

/* the gla rule's options at the config's chunk; on CUDA, where chunks of that
 * size need more shared memory than a block has (large K or V), the largest
 * that fits: 32, else the per-token form, which always runs */
static pr_recurrence_opts gla_opts(pr_ctx *ctx, const pr_config *c, const pr_tensor *q, const pr_tensor *v, double scale,
                                   bool per_value)
{
    pr_recurrence_opts o = pr_config_recurrence(c, PR_RULE_GLA, q->shape[1], scale);
    o.g_per_value = per_value;
    if (q->device != PR_CUDA) return o;
    pr_recurrence_opts po = o;
    po.tf32 = ctx->matmul_tf32, po.bf16 = q->dtype == PR_BF16;
    pr_rec_plan plan;
    char why[256];
    for (; po.chunk > 0; po.chunk = po.chunk > 32 ? 32 : 0)
        if (pr_recurrence_plan(&po, PR_CUDA, q->shape[0], q->shape[1], q->shape[2], q->shape[3], v->shape[3], 0, &plan,
                               why, sizeof why))
            break;
    o.chunk = po.chunk;
    return o;
}

/* ---- GLA ------------------------------------------------------------------------------ */

typedef struct {
    pr_tensor *q_proj, *k_proj, *v_proj, *g_proj, *gk_down, *gk_up, *gk_bias, *g_norm, *o_proj;
} gla_layer;

static void *gla_build(pr_params *r, const pr_config *c)
{
    gla_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    const int64_t D = c->d_model, HK = expanded(c, c->gla_expand_k), HV = expanded(c, c->gla_expand_v);
    const int64_t R = c->gla_gate_low_rank;
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0}, zero = {PR_INIT_CONST, 0, 0};
    l->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    l->k_proj = pr_param_new(r, "k_proj", w, true, PR_DIMS(D, HK));
    l->v_proj = pr_param_new(r, "v_proj", w, true, PR_DIMS(D, HV));
    if (c->gla_gate) l->g_proj = pr_param_new(r, "g_proj", w, true, PR_DIMS(D, HV));
    l->gk_down = pr_param_new(r, "gk_down", w, true, PR_DIMS(D, R));
    l->gk_up = pr_param_new(r, "gk_up", w, true, PR_DIMS(R, HK));
    l->gk_bias = pr_param_new(r, "gk_bias", zero, false, PR_DIMS(HK));
    l->g_norm = pr_param_new(r, "g_norm", one, false, PR_DIMS(HV / c->n_heads));
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HV, D));
    return l;
}

/* logsigmoid(z) / normalizer: a log-decay in (-inf, 0) */
static pr_tensor *log_decay(pr_ctx *ctx, pr_tensor *z, double normalizer)
{
    return pr_scale(ctx, pr_logsigmoid(ctx, z), 1.0 / normalizer);
}

static pr_tensor *gla_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    const gla_layer *l = layer;
    const int64_t H = c->n_heads;
    pr_tensor *q = pr_split_heads(ctx, pr_linear(ctx, x, l->q_proj, NULL), H);
    pr_tensor *k = pr_split_heads(ctx, pr_linear(ctx, x, l->k_proj, NULL), H);
    pr_tensor *v = pr_split_heads(ctx, pr_linear(ctx, x, l->v_proj, NULL), H);
    pr_tensor *z = pr_linear(ctx, pr_linear(ctx, x, l->gk_down, NULL), l->gk_up, l->gk_bias);
    pr_tensor *gk = pr_split_heads(ctx, log_decay(ctx, z, c->gla_gate_normalizer), H);
    pr_recurrence_opts opt = gla_opts(ctx, c, q, v, 0, false);
    pr_tensor *o = pr_recurrence(ctx, &opt, q, k, v, gk, NULL, NULL, NULL, st ? st->slot[PR_SLOT_GLA_H] : NULL, NULL,
                                 st ? &st->slot[PR_SLOT_GLA_H] : NULL);
    pr_tensor *n;
    if (l->g_proj) n = pr_rmsnorm_gated(ctx, o, pr_split_heads(ctx, pr_linear(ctx, x, l->g_proj, NULL), H), l->g_norm,
                                        c->norm_eps);
    else n = pr_rmsnorm(ctx, o, l->g_norm, c->norm_eps);
    return pr_linear(ctx, pr_merge_heads(ctx, n), l->o_proj, NULL);
}

static int gla_check(const pr_config *c, pr_err *err)
{
    return check_expanded(c, c->gla_expand_k, "gla.expand_k", err) ||
           check_expanded(c, c->gla_expand_v, "gla.expand_v", err) ? -1 : 0;
}

const pr_mixer_def pr_mixer_gla = {
    .name = "gla",
    .summary = "Gated Linear Attention (fla GatedLinearAttention)",
    .mlp = true,
    .check = gla_check,
    .build = gla_build,
    .forward = gla_forward,
};

/* ---- GSA ------------------------------------------------------------------------------ */

#define GSA_OUTPUT_NORM_EPS 1e-5

typedef struct {
    pr_tensor *q_proj, *k_proj, *v_proj, *f_proj, *g_norm, *o_proj;
} gsa_layer;

static void *gsa_build(pr_params *r, const pr_config *c)
{
    gsa_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    const int64_t D = c->d_model, HK = expanded(c, c->gsa_expand_k), HV = expanded(c, c->gsa_expand_v);
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0};
    l->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    l->k_proj = pr_param_new(r, "k_proj", w, true, PR_DIMS(D, HK));
    l->v_proj = pr_param_new(r, "v_proj", w, true, PR_DIMS(D, HV));
    l->f_proj = pr_param_new(r, "f_proj", w, true, PR_DIMS(D, (int64_t)c->n_heads * c->gsa_slots));
    l->g_norm = pr_param_new(r, "g_norm", one, false, PR_DIMS(HV));
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HV, D));
    return l;
}

static pr_tensor *gsa_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    const gsa_layer *l = layer;
    const int64_t H = c->n_heads;
    pr_tensor *q = pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->q_proj, NULL)), H);
    pr_tensor *k = pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->k_proj, NULL)), H);
    pr_tensor *v = pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->v_proj, NULL)), H);
    pr_tensor *f = pr_split_heads(ctx, log_decay(ctx, pr_linear(ctx, x, l->f_proj, NULL), c->gsa_gate_normalizer), H);
    pr_tensor *s = pr_sub(ctx, pr_ones(ctx->step, f->dtype, f->device, f->ndim, f->shape), pr_exp(ctx, f));

    /* pass 1: keys into the slots, the slots forgetting along the state's value axis */
    pr_recurrence_opts o1 = gla_opts(ctx, c, q, s, 1.0, true);
    pr_tensor *a = pr_recurrence(ctx, &o1, q, k, s, f, NULL, NULL, NULL, st ? st->slot[PR_SLOT_GSA_KEYS] : NULL, NULL,
                                 st ? &st->slot[PR_SLOT_GSA_KEYS] : NULL);
    pr_tensor *p = pr_softmax(ctx, a);   /* over the M slots */

    /* pass 2: the gla rule over the slots */
    pr_recurrence_opts o2 = gla_opts(ctx, c, p, v, 1.0, false);
    pr_tensor *o = pr_recurrence(ctx, &o2, p, s, v, f, NULL, NULL, NULL, st ? st->slot[PR_SLOT_GSA_VALUES] : NULL, NULL,
                                 st ? &st->slot[PR_SLOT_GSA_VALUES] : NULL);
    /* eps 1e-5, not norm_eps: fla's layer fuses this norm into the output
     * projection (rms_norm_linear), which takes its own default eps and not
     * the norm module's; a converted model gives fla's logits only so */
    pr_tensor *n = pr_rmsnorm(ctx, pr_merge_heads(ctx, pr_silu(ctx, o)), l->g_norm, GSA_OUTPUT_NORM_EPS);
    return pr_linear(ctx, n, l->o_proj, NULL);
}

static int gsa_check(const pr_config *c, pr_err *err)
{
    return check_expanded(c, c->gsa_expand_k, "gsa.expand_k", err) ||
           check_expanded(c, c->gsa_expand_v, "gsa.expand_v", err) ? -1 : 0;
}

const pr_mixer_def pr_mixer_gsa = {
    .name = "gsa",
    .summary = "Gated Slot Attention (fla GatedSlotAttention)",
    .mlp = true,
    .check = gsa_check,
    .build = gsa_build,
    .forward = gsa_forward,
};
