/* models/mamba2.c: the Mamba-2 layer (BASELINES.md section 2, fla Mamba2).
 * Di = expand*D, P = head_dim, Hm = Di/P heads, N = d_state, G = n_groups.
 *   [z | xBC | dt] = x W_in;   xBC = silu(conv(xBC) + b);   [xs | B | C] = xBC
 *   Delta = softplus(dt + dt_bias);  A = -exp(A_log)
 *   o = ssd recurrence with q = C, k = B, v = Delta * xs, g = A * Delta, scale 1
 *       (head h reads group h / (Hm/G))
 *   y = o + D * xs;  y = rms(y * silu(z)) over each group's Di/G channels, * w
 *   out = y W_out
 * x W_in is taken as three products with column slices of W_in, so the wide
 * projection's output is never copied (prism slices are copies).
 * State slots: 0 the conv window [B,W-1,Di+2GN], 1 the [B,Hm,N,P] state. */
#include <math.h>

#include "models/models.h"
#include "models/slots.h"

typedef struct {
    pr_tensor *in_proj, *conv_w, *conv_b, *A_log, *dt_bias, *D, *norm, *out_proj;
} mamba2_layer;

typedef struct { int64_t Di, P, Hm, N, G; } mamba2_dims;

static mamba2_dims dims_of(const pr_config *c)
{
    mamba2_dims d = {.Di = (int64_t)c->mamba2_expand * c->d_model, .P = c->mamba2_head_dim,
                     .N = c->mamba2_d_state, .G = c->mamba2_n_groups};
    d.Hm = d.Di / d.P;
    return d;
}

static void *mamba2_build(pr_params *r, const pr_config *c)
{
    mamba2_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    mamba2_dims d = dims_of(c);
    int64_t D = c->d_model, conv_dim = d.Di + 2 * d.G * d.N;
    double out_bound = 1.0 / sqrt((double)d.Di) / sqrt((double)c->n_layers);  /* prenorm residual rescale */
    pr_init w = pr_init_std(c), zero = {PR_INIT_CONST, 0, 0}, one = {PR_INIT_CONST, 1, 0};
    l->in_proj = pr_param_new(r, "in_proj", w, true, PR_DIMS(D, 2 * d.Di + 2 * d.G * d.N + d.Hm));
    l->conv_w = pr_param_new(r, "conv_w", w, true, PR_DIMS(conv_dim, c->conv_width));
    l->conv_b = pr_param_new(r, "conv_b", zero, false, PR_DIMS(conv_dim));
    l->A_log = pr_param_new(r, "A_log", (pr_init){PR_INIT_LOG_UNIFORM, 1, 16}, false, PR_DIMS(d.Hm));
    l->dt_bias = pr_param_new(r, "dt_bias", (pr_init){PR_INIT_DT_BIAS, 1e-3, 0.1}, false, PR_DIMS(d.Hm));
    l->D = pr_param_new(r, "D", one, false, PR_DIMS(d.Hm));
    l->norm = pr_param_new(r, "norm", one, false, PR_DIMS(d.Di));
    l->out_proj = pr_param_new(r, "out_proj", (pr_init){PR_INIT_UNIFORM, -out_bound, out_bound}, true,
                               PR_DIMS(d.Di, D));
    return l;
}

/* [B,T,G*N] -> [B,T,Hm,N], head h reading group h / (Hm/G) */
static pr_tensor *per_head(pr_ctx *ctx, pr_tensor *x, const mamba2_dims *d)
{
    int64_t B = x->shape[0], T = x->shape[1];
    pr_tensor *g = pr_reshape(ctx, x, PR_DIMS(B, T, d->G, 1, d->N));
    return pr_reshape(ctx, pr_repeat_dim(ctx, g, 3, d->Hm / d->G), PR_DIMS(B, T, d->Hm, d->N));
}

/* x times the columns [start, start + n) of in_proj: a slice (a copy) of the
 * weight (D x n) is far smaller than one of the fused projection's output
 * (tokens x n). Under autocast the weight is cast once (cached) and the bf16
 * copy sliced, as the product would cast each slice anyway. */
static pr_tensor *in_proj_part(pr_ctx *ctx, const mamba2_layer *l, pr_tensor *x, int64_t start, int64_t n)
{
    return pr_linear(ctx, x, pr_slice(ctx, pr_autocast(ctx, l->in_proj, PR_BF16), 1, start, n), NULL);
}

/* rms(y * silu(z)) over each group's Di/G channels, times the norm weight; one
 * group normalizes over all of Di, so the weight folds into the norm */
static pr_tensor *gated_norm(pr_ctx *ctx, const mamba2_layer *l, const pr_config *c, const mamba2_dims *d,
                             pr_tensor *y, pr_tensor *z)
{
    int64_t B = y->shape[0], T = y->shape[1];
    y = pr_swiglu(ctx, z, y);
    if (d->G == 1) return pr_rmsnorm(ctx, y, l->norm, c->norm_eps);
    y = pr_rmsnorm(ctx, pr_reshape(ctx, y, PR_DIMS(B, T, d->G, d->Di / d->G)), NULL, c->norm_eps);
    return pr_mul(ctx, pr_reshape(ctx, y, PR_DIMS(B, T, d->Di)), l->norm);
}

static pr_tensor *mamba2_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x,
                                 pr_layer_state *st)
{
    const mamba2_layer *l = layer;
    mamba2_dims d = dims_of(c);
    int64_t B = x->shape[0], T = x->shape[1], GN = d.G * d.N, conv_dim = d.Di + 2 * GN;
    pr_tensor *xbc[3];
    pr_tensor *z = in_proj_part(ctx, l, x, 0, d.Di);
    pr_tensor *xbc_in = in_proj_part(ctx, l, x, d.Di, conv_dim);
    pr_tensor *dt = in_proj_part(ctx, l, x, d.Di + conv_dim, d.Hm);
    pr_tensor *conv = pr_shortconv_silu(ctx, xbc_in, l->conv_w, l->conv_b, st ? &st->slot[PR_SLOT_MAMBA_CONV] : NULL);
    pr_split(ctx, conv, 2, 3, (const int64_t[]){d.Di, GN, GN}, xbc);
    pr_tensor *xs = pr_reshape(ctx, xbc[0], PR_DIMS(B, T, d.Hm, d.P));
    pr_tensor *delta = pr_softplus(ctx, pr_add(ctx, dt, l->dt_bias));             /* [B,T,Hm] */
    pr_tensor *v = pr_mul(ctx, xs, pr_reshape(ctx, delta, PR_DIMS(B, T, d.Hm, 1)));
    pr_tensor *g = pr_mul(ctx, delta, pr_neg(ctx, pr_exp(ctx, l->A_log)));
    pr_recurrence_opts opt = pr_config_recurrence(c, PR_RULE_SSD, T, 1.0);
    pr_tensor *o = pr_recurrence(ctx, &opt, per_head(ctx, xbc[2], &d), per_head(ctx, xbc[1], &d), v, g, NULL, NULL,
                                 NULL, st ? st->slot[PR_SLOT_MAMBA_H] : NULL, NULL, st ? &st->slot[PR_SLOT_MAMBA_H] : NULL);
    pr_tensor *y = pr_add(ctx, o, pr_mul(ctx, xs, pr_reshape(ctx, l->D, PR_DIMS(d.Hm, 1))));
    y = gated_norm(ctx, l, c, &d, pr_reshape(ctx, y, PR_DIMS(B, T, d.Di)), z);
    return pr_linear(ctx, y, l->out_proj, NULL);
}

/* the inner width splits into whole heads, and the heads into whole groups */
static int mamba2_check(const pr_config *c, pr_err *err)
{
    int64_t di = (int64_t)c->mamba2_expand * c->d_model;
    if (di % c->mamba2_head_dim)
        return pr_errf(err, "config: mamba2.head_dim %d does not divide mamba2.expand * d_model = %lld",
                       c->mamba2_head_dim, (long long)di);
    if ((di / c->mamba2_head_dim) % c->mamba2_n_groups)
        return pr_errf(err, "config: mamba2.n_groups %d does not divide the %lld heads", c->mamba2_n_groups,
                       (long long)(di / c->mamba2_head_dim));
    return 0;
}

const pr_mixer_def pr_mixer_mamba2 = {
    .name = "mamba2",
    .summary = "Mamba-2 (fla Mamba2, SSD)",
    .mlp = false,
    .check = mamba2_check,
    .build = mamba2_build,
    .forward = mamba2_forward,
};
