/* models/mamba.c: the Mamba-1 layer (BASELINES.md 2.1) on the selective scan.
 * Di = expand*D, N = d_state, R = dt_rank (0: ceil(D/16)).
 *
 *   [xi | z] = x W_in;   xc = silu(conv(xi) + b)
 *   [dr | Bt | Ct] = xc W_x           (Bt, Ct [N], shared by the Di channels)
 *   Delta = softplus(dr W_dt + b_dt)  (per channel; the bias is the scan's delta_bias)
 *   A = -exp(A_log) [Di,N];  s_t = exp(Delta_t A) s_{t-1} + Delta_t xc_t Bt_t
 *   y_t = s_t Ct_t + Dskip xc_t;  out = (y * silu(z)) W_out
 * State slots: 0 the conv window [B,W-1,Di], 1 the scan state [B,Di,N]. */
#include <math.h>

#include "models/models.h"
#include "models/slots.h"

typedef struct {
    pr_tensor *in_proj, *conv_w, *conv_b, *x_proj, *dt_proj, *dt_bias, *A_log, *D, *out_proj;
} mamba_layer;

typedef struct { int64_t Di, N, R; } mamba_dims;

static mamba_dims dims_of(const pr_config *c)
{
    mamba_dims d = {.Di = (int64_t)c->mamba_expand * c->d_model, .N = c->mamba_d_state, .R = c->mamba_dt_rank};
    if (!d.R) d.R = (c->d_model + 15) / 16;
    return d;
}

static void *mamba_build(pr_params *r, const pr_config *c)
{
    mamba_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    mamba_dims d = dims_of(c);
    int64_t D = c->d_model;
    double dt_bound = 1.0 / sqrt((double)d.R);
    pr_init w = pr_init_std(c), zero = {PR_INIT_CONST, 0, 0}, one = {PR_INIT_CONST, 1, 0};
    pr_init out = {PR_INIT_NORMAL, c->init_std / sqrt((double)c->n_layers), 0};  /* prenorm residual rescale */
    l->in_proj = pr_param_new(r, "in_proj", w, true, PR_DIMS(D, 2 * d.Di));
    l->conv_w = pr_param_new(r, "conv_w", w, true, PR_DIMS(d.Di, c->conv_width));
    l->conv_b = pr_param_new(r, "conv_b", zero, false, PR_DIMS(d.Di));
    l->x_proj = pr_param_new(r, "x_proj", w, true, PR_DIMS(d.Di, d.R + 2 * d.N));
    l->dt_proj = pr_param_new(r, "dt_proj", (pr_init){PR_INIT_UNIFORM, -dt_bound, dt_bound}, true,
                              PR_DIMS(d.R, d.Di));
    l->dt_bias = pr_param_new(r, "dt_bias", (pr_init){PR_INIT_DT_BIAS, 1e-3, 0.1}, false, PR_DIMS(d.Di));
    l->A_log = pr_param_new(r, "A_log", (pr_init){PR_INIT_S4D_REAL, (double)d.N, 0}, false, PR_DIMS(d.Di, d.N));
    l->D = pr_param_new(r, "D", one, false, PR_DIMS(d.Di));
    l->out_proj = pr_param_new(r, "out_proj", out, true, PR_DIMS(d.Di, D));
    return l;
}

static pr_tensor *mamba_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x,
                                pr_layer_state *st)
{
    const mamba_layer *l = layer;
    mamba_dims d = dims_of(c);
    pr_tensor *xz[2], *dbc[3];
    pr_split(ctx, pr_linear(ctx, x, l->in_proj, NULL), 2, 2, (const int64_t[]){d.Di, d.Di}, xz);
    pr_tensor *xc = pr_shortconv_silu(ctx, xz[0], l->conv_w, l->conv_b, st ? &st->slot[PR_SLOT_MAMBA_CONV] : NULL);
    pr_split(ctx, pr_linear(ctx, xc, l->x_proj, NULL), 2, 3, (const int64_t[]){d.R, d.N, d.N}, dbc);
    pr_tensor *delta = pr_linear(ctx, dbc[0], l->dt_proj, NULL);
    pr_tensor *A = pr_neg(ctx, pr_exp(ctx, l->A_log));
    pr_tensor *y = pr_selective_scan(ctx, xc, delta, A, dbc[1], dbc[2], l->D, xz[1], l->dt_bias,
                                     st ? st->slot[PR_SLOT_MAMBA_H] : NULL, NULL, st ? &st->slot[PR_SLOT_MAMBA_H] : NULL);
    return pr_linear(ctx, y, l->out_proj, NULL);
}

const pr_mixer_def pr_mixer_mamba = {
    .name = "mamba",
    .summary = "Mamba-1 (selective scan)",
    .mlp = false,
    .build = mamba_build,
    .forward = mamba_forward,
};
