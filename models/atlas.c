/* models/atlas.c: the ATLAS layer (Behrouz et al. 2025, "Atlas: learning to
 * optimally memorize the context at test time"; BASELINES.md 9.5): a memory
 * fitted at every token to a sliding window of the last c tokens (the Omega
 * rule), on polynomial features of the keys.
 *
 *   q = l2n(silu(x Wq))   k = l2n(silu(x Wk))   v = silu(x Wv)        [H,K] each
 *   phi(z) = z (degree 1) or [z, vec(z z^T)] / sqrt(2) (degree 2: phi(a).phi(b) =
 *            (a.b + (a.b)^2) / 2, the degree-2 polynomial kernel)       F features
 *   a_t = sigmoid(x Wa + ba + 4)   eta_t = sigmoid(x We + be) / c   gamma_t = sigmoid(x Wg + bg)
 *   G_t = sum_{i=t-c+1..t} gamma_i phi(k_i) (M_{t-1}^T phi(k_i) - v_i)^T   [F,V]: the gradient of
 *         sum_i gamma_i |M^T phi(k_i) - v_i|^2 / 2 at M_{t-1}
 *   gd:   M_t = a_t M_{t-1} - eta_t G_t
 *   muon: S_t = theta_t S_{t-1} + G_t (theta_t = sigmoid(x Wt + bt)),
 *         M_t = a_t M_{t-1} - eta_t NS(S_t), NS = Newton-Schulz orthogonalisation
 *         (atlas.ns_steps quintic steps, Muon's coefficients)
 *   o_t = M_t^T phi(q_t);  y = concat_heads(rms(o) * silu(x W_gate)) Wo
 * atlas.memory=mlp: the memory is M(p) = silu(p W1) W2 (W1 [F,K], W2 [K,V])
 *   starting from the learned W1_0, W2_0 of each head; G is the pair of its
 *   gradients (by hand: dW2 = A^T R, dW1 = P^T ((R W2^T) * silu'(P W1)) with
 *   A = silu(P W1), R = gamma (A W2 - v)), each updated as M above (Muon: one
 *   momentum and one orthogonalisation per matrix); o_t = M_t(phi(q_t)).
 * M_0 = 0 (mlp: the learned W1_0, W2_0) and S_0 = 0 for every sequence; c = atlas.window (c = 1 with gd is a
 * gated delta rule on phi(k)). With the 1/c in eta and |phi| <= 1 the erase
 * a_t - eta_t sum gamma |phi|^2 stays in (-1, 1).
 *
 * The recurrence runs token by token as ops on the tape (the exact form; no
 * chunked approximation), so its cost is T sequential steps of small batched
 * matmuls: a reference form for the rec task and small models, not a fast one.
 * State slots: 0 M [B,H,F,V] (mlp: W1), 1 S (muon), 5 and 6 W2 and its S (mlp), 2..4 the last c-1 tokens' phi(k)
 * [B,H,c-1,F], v [B,H,c-1,V] and gamma [B,H,c-1,1] (zeros before the start,
 * which add nothing to G). */
#include <math.h>
#include <string.h>

#include "models/models.h"
#include "models/slots.h"


typedef struct {
    pr_tensor *q_proj, *k_proj, *v_proj;     /* [D,HK] */
    pr_tensor *gates, *gates_bias;           /* [D,4H] [4H]: a, eta, gamma, theta */
    pr_tensor *g_proj, *o_norm, *o_proj;     /* [D,HK] [K] [HK,D] */
    pr_tensor *w1, *w2;                      /* mlp memory's start [H,F,K], [H,K,K] */
} atlas_layer;

static bool is_muon(const pr_config *c) { return strcmp(c->atlas_optimizer, "muon") == 0; }
static bool is_mlp(const pr_config *c) { return strcmp(c->atlas_memory, "mlp") == 0; }

/* features per head: K, or K + K^2 at degree 2 */
static int64_t feature_dim(const pr_config *c)
{
    int64_t K = pr_config_head_dim(c);
    return c->atlas_degree == 2 ? K + K * K : K;
}

static void *atlas_build(pr_params *r, const pr_config *c)
{
    atlas_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    int64_t D = c->d_model, H = c->n_heads, K = pr_config_head_dim(c), HK = H * K;
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0};
    l->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    l->k_proj = pr_param_new(r, "k_proj", w, true, PR_DIMS(D, HK));
    l->v_proj = pr_param_new(r, "v_proj", w, true, PR_DIMS(D, HK));
    l->gates = pr_param_new(r, "gates", w, true, PR_DIMS(D, 4 * H));
    l->gates_bias = pr_param_new(r, "gates_bias", (pr_init){PR_INIT_CONST, 0, 0}, false, PR_DIMS(4 * H));
    l->g_proj = pr_param_new(r, "g_proj", w, true, PR_DIMS(D, HK));
    l->o_norm = pr_param_new(r, "o_norm", one, false, PR_DIMS(K));
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HK, D));
    if (is_mlp(c)) {
        l->w1 = pr_param_new(r, "mem_w1", w, true, PR_DIMS(H, feature_dim(c), K));
        l->w2 = pr_param_new(r, "mem_w2", w, true, PR_DIMS(H, K, K));
    }
    return l;
}

/* z [B,T,H,K] -> phi(z) [B,H,T,F] */
static pr_tensor *features(pr_ctx *ctx, pr_tensor *z, int degree)
{
    int64_t B = z->shape[0], T = z->shape[1], H = z->shape[2], K = z->shape[3];
    pr_tensor *zt = pr_transpose(ctx, z, 1, 2);   /* [B,H,T,K] */
    if (degree == 1) return zt;
    pr_tensor *col = pr_reshape(ctx, zt, PR_DIMS(B * H * T, K, 1)), *row = pr_reshape(ctx, zt, PR_DIMS(B * H * T, 1, K));
    pr_tensor *outer = pr_reshape(ctx, pr_matmul(ctx, col, row, false, false), PR_DIMS(B, H, T, K * K));
    return pr_scale(ctx, pr_concat(ctx, 2, (pr_tensor *[]){zt, outer}, 3), sqrt(0.5));
}

/* concat of n pieces along dim, in a tree of groups (concat takes PR_MAX_IN at most) */
static pr_tensor *concat_many(pr_ctx *ctx, int n, pr_tensor **xs, int dim)
{
    while (n > 1) {
        int m = 0;
        for (int i = 0; i < n; i += PR_MAX_IN) {
            int g = n - i < PR_MAX_IN ? n - i : PR_MAX_IN;
            xs[m++] = g == 1 ? xs[i] : pr_concat(ctx, g, xs + i, dim);
        }
        n = m;
    }
    return xs[0];
}

/* Newton-Schulz orthogonalisation of s [B,H,F,V] (Muon's quintic iteration on
 * s / |s|_F, over the smaller of the two Gram matrices) */
static pr_tensor *newton_schulz(pr_ctx *ctx, pr_tensor *s, int steps)
{
    int64_t B = s->shape[0], H = s->shape[1], F = s->shape[2], V = s->shape[3];
    const double a = 3.4445, b = -4.7750, c = 2.0315;
    bool wide = F > V;   /* work on the transpose so that X X^T is the small Gram */
    pr_tensor *x = wide ? pr_transpose(ctx, s, 2, 3) : s;
    pr_tensor *sq = pr_sum(ctx, pr_reshape(ctx, pr_mul(ctx, x, x), PR_DIMS(B, H, F * V)));
    pr_tensor *norm = pr_reshape(ctx, pr_sqrt(ctx, pr_add(ctx, sq, pr_full(ctx->step, x->dtype, x->device, PR_DIMS(1), 1e-14))),
                                 PR_DIMS(B, H, 1, 1));
    x = pr_div(ctx, x, norm);
    for (int i = 0; i < steps; i++) {
        pr_tensor *gram = pr_matmul(ctx, x, x, false, true);
        pr_tensor *poly = pr_add(ctx, pr_scale(ctx, gram, b), pr_scale(ctx, pr_matmul(ctx, gram, gram, false, false), c));
        x = pr_add(ctx, pr_scale(ctx, x, a), pr_matmul(ctx, poly, x, false, false));
    }
    return wide ? pr_transpose(ctx, x, 2, 3) : x;
}

/* a, eta, gamma, theta = sigmoid(x W + b + shift), [B,T,H] each; the shift 4 on
 * a's pre-activation keeps ~98% of the memory a token at init (ours) */
static void gates_of(pr_ctx *ctx, const atlas_layer *l, int64_t H, pr_tensor *x, pr_tensor **gate)
{
    double *shift = pr_arena_alloc(ctx->step, sizeof(double) * (size_t)(4 * H));
    for (int64_t i = 0; i < H; i++) shift[i] = 4;
    pr_tensor *sh = pr_to(ctx->step, pr_from_host(ctx->step, PR_F64, PR_CPU, PR_DIMS(4 * H), shift), x->dtype, x->device);
    /* the gates' bias added in f32 (pr_add promotes; pr_linear would lower it) */
    pr_tensor *pre = pr_add(ctx, pr_add(ctx, pr_linear(ctx, x, l->gates, NULL), l->gates_bias), sh);
    pr_split(ctx, pr_sigmoid(ctx, pre), 2, 4, (const int64_t[]){H, H, H, H}, gate);
}

/* [B,T,H] gate -> [B,H,T,1] */
static pr_tensor *gate_column(pr_ctx *ctx, pr_tensor *g)
{
    return pr_reshape(ctx, pr_transpose(ctx, g, 1, 2), PR_DIMS(g->shape[0], g->shape[2], g->shape[1], 1));
}

/* the window's rows for the tokens before the first: the carried ones, or zeros */
static pr_tensor *window_start(pr_ctx *ctx, pr_layer_state *st, int slot, const pr_tensor *like, int64_t c, int64_t E)
{
    if (st && st->slot[slot]) return st->slot[slot];
    return pr_zeros(ctx->step, like->dtype, like->device, PR_DIMS(like->shape[0], like->shape[1], c - 1, E));
}

/* the memory read at features p [B,H,r,F]: p M, or silu(p W1) W2 */
static pr_tensor *memory_read(pr_ctx *ctx, int n, pr_tensor *const *m, pr_tensor *p)
{
    pr_tensor *y = pr_matmul(ctx, p, m[0], false, false);
    return n == 1 ? y : pr_matmul(ctx, pr_silu(ctx, y), m[1], false, false);
}

/* the gradients of sum_i gamma_i |M(p_i) - v_i|^2 / 2 over the window's rows
 * p [B,H,c,F], v [B,H,c,V], gamma [B,H,c,1], for each of the memory's matrices */
static void memory_grads(pr_ctx *ctx, int n, pr_tensor *const *m, pr_tensor *p, pr_tensor *v, pr_tensor *gamma,
                         pr_tensor **grad)
{
    if (n == 1) {
        pr_tensor *r = pr_mul(ctx, gamma, pr_sub(ctx, pr_matmul(ctx, p, m[0], false, false), v));
        grad[0] = pr_matmul(ctx, p, r, true, false);
        return;
    }
    pr_tensor *z = pr_matmul(ctx, p, m[0], false, false), *sg = pr_sigmoid(ctx, z), *act = pr_mul(ctx, z, sg);
    pr_tensor *r = pr_mul(ctx, gamma, pr_sub(ctx, pr_matmul(ctx, act, m[1], false, false), v));
    grad[1] = pr_matmul(ctx, act, r, true, false);
    /* silu'(z) = s + z s (1 - s) */
    pr_tensor *one = pr_full(ctx->step, z->dtype, z->device, PR_DIMS(1), 1.0);
    pr_tensor *dsilu = pr_add(ctx, sg, pr_mul(ctx, act, pr_sub(ctx, one, sg)));
    grad[0] = pr_matmul(ctx, p, pr_mul(ctx, pr_matmul(ctx, r, m[1], false, true), dsilu), true, false);
}

static pr_tensor *atlas_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    const atlas_layer *l = layer;
    int64_t B = x->shape[0], T = x->shape[1], H = c->n_heads, K = pr_config_head_dim(c), w = c->atlas_window;
    pr_tensor *q = pr_l2norm(ctx, pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->q_proj, NULL)), H), 1e-6);
    pr_tensor *k = pr_l2norm(ctx, pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->k_proj, NULL)), H), 1e-6);
    pr_tensor *v = pr_transpose(ctx, pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->v_proj, NULL)), H), 1, 2);
    pr_tensor *gate[4];   /* a, eta, gamma, theta: [B,T,H] each */
    gates_of(ctx, l, H, x, gate);
    pr_tensor *a = gate_column(ctx, gate[0]), *eta = pr_scale(ctx, gate_column(ctx, gate[1]), 1.0 / (double)w);
    pr_tensor *gamma = gate_column(ctx, gate[2]), *theta = gate_column(ctx, gate[3]);
    pr_tensor *fq = features(ctx, q, c->atlas_degree), *fk = features(ctx, k, c->atlas_degree);   /* [B,H,T,F] */
    int64_t F = fk->shape[3];
    /* the window's earlier tokens go first: row c-1+t is token t */
    if (w > 1) {
        fk = pr_concat(ctx, 2, (pr_tensor *[]){window_start(ctx, st, PR_SLOT_ATLAS_WPHI, fk, w, F), fk}, 2);
        v = pr_concat(ctx, 2, (pr_tensor *[]){window_start(ctx, st, PR_SLOT_ATLAS_WV, v, w, K), v}, 2);
        gamma = pr_concat(ctx, 2, (pr_tensor *[]){window_start(ctx, st, PR_SLOT_ATLAS_WGAMMA, gamma, w, 1), gamma}, 2);
    }
    int n = is_mlp(c) ? 2 : 1;   /* the memory's matrices: M, or W1 and W2 */
    const int m_slot[2] = {PR_SLOT_ATLAS_M, PR_SLOT_ATLAS_M2}, s_slot[2] = {PR_SLOT_ATLAS_S, PR_SLOT_ATLAS_S2};
    pr_tensor *m[2], *s[2] = {NULL, NULL};
    for (int i = 0; i < n; i++) {
        pr_tensor *init = !is_mlp(c) ? pr_zeros(ctx->step, x->dtype, x->device, PR_DIMS(B, H, F, K))
                                     : pr_repeat_dim(ctx, pr_reshape(ctx, i ? l->w2 : l->w1, 4, (const int64_t[]){1, H,
                                                     (i ? l->w2 : l->w1)->shape[1], K}), 0, B);
        m[i] = st && st->slot[m_slot[i]] ? st->slot[m_slot[i]] : init;
        if (is_muon(c))
            s[i] = st && st->slot[s_slot[i]] ? st->slot[s_slot[i]] : pr_zeros(ctx->step, x->dtype, x->device, 4, m[i]->shape);
    }
    pr_tensor **outs = pr_arena_alloc(ctx->step, sizeof *outs * (size_t)T);
    for (int64_t t = 0; t < T; t++) {
        pr_tensor *phi = pr_slice(ctx, fk, 2, t, w), *val = pr_slice(ctx, v, 2, t, w), *gw = pr_slice(ctx, gamma, 2, t, w);
        pr_tensor *grad[2];
        memory_grads(ctx, n, m, phi, val, gw, grad);
        for (int i = 0; i < n; i++) {
            if (s[i]) {
                s[i] = pr_add(ctx, pr_mul(ctx, pr_slice(ctx, theta, 2, t, 1), s[i]), grad[i]);
                grad[i] = newton_schulz(ctx, s[i], c->atlas_ns_steps);
            }
            m[i] = pr_sub(ctx, pr_mul(ctx, pr_slice(ctx, a, 2, t, 1), m[i]), pr_mul(ctx, pr_slice(ctx, eta, 2, t, 1), grad[i]));
        }
        outs[t] = memory_read(ctx, n, m, pr_slice(ctx, fq, 2, t, 1));   /* [B,H,1,V] */
    }
    if (st) {
        for (int i = 0; i < n; i++) st->slot[m_slot[i]] = m[i], st->slot[s_slot[i]] = s[i];
        if (w > 1) {
            int64_t rows = fk->shape[2];
            st->slot[PR_SLOT_ATLAS_WPHI] = pr_slice(ctx, fk, 2, rows - (w - 1), w - 1);
            st->slot[PR_SLOT_ATLAS_WV] = pr_slice(ctx, v, 2, rows - (w - 1), w - 1);
            st->slot[PR_SLOT_ATLAS_WGAMMA] = pr_slice(ctx, gamma, 2, rows - (w - 1), w - 1);
        }
    }
    pr_tensor *o = pr_transpose(ctx, concat_many(ctx, (int)T, outs, 2), 1, 2);   /* [B,T,H,V] */
    pr_tensor *z = pr_split_heads(ctx, pr_linear(ctx, x, l->g_proj, NULL), H);
    return pr_linear(ctx, pr_merge_heads(ctx, pr_rmsnorm_gated(ctx, o, z, l->o_norm, c->norm_eps)), l->o_proj, NULL);
}

double pr_atlas_step_bytes(const pr_config *c, int64_t B, int64_t T)
{
    if (strcmp(c->mixer, "atlas") != 0) return 0;
    double K = (double)pr_config_head_dim(c), F = K + (c->atlas_degree == 2 ? K * K : 0);
    /* per token: the memory, a M, eta G and G (gd); Muon adds S and each Newton-Schulz step's three products */
    double per_token = 4 + (is_muon(c) ? 2 + 3.0 * c->atlas_ns_steps : 0);
    return per_token * (double)B * (double)T * c->n_heads * F * K * 4.0 * c->n_layers;
}

const pr_mixer_def pr_mixer_atlas = {
    .name = "atlas",
    .summary = "ATLAS: Omega rule over a window of c tokens on polynomial features, gd or Muon (Behrouz et al. 2025)",
    .mlp = true,
    .build = atlas_build,
    .forward = atlas_forward,
};
