/* models/ttt_linear.c: the TTT-Linear and TTT-MLP layers (BASELINES.md 4.3, the
 * official block without share_qk and pre_conv) driving the fla-form ops
 * pr_ttt_linear and pr_ttt_mlp; the two differ only in the inner model.
 *
 *   XQ = x Wq, XK = x Wk, XV = x Wv; XQ, XK <- RoPE-pair per head at position (t mod b)
 *   eta_t = base_lr * tok(t mod b) * sigmoid(x_t W_lr + b_lr) / K,  tok(i) = max(0, 1/(i+1) + tau_i)
 *   Z = concat_heads(ttt_linear(XQ, XK, XV, eta; W0, c0, ln_w, ln_b))  (op: z + LN(z), q scaled K^-1/2)
 *   y = (gelu_tanh(x Wg) * ln(Z; eps 1e-6)) Wo
 * W0 [H,K,K] and c0 [H,1,K] (the inner model's start) are learned; TTT-MLP
 * (ttt_mlp op, inner gelu_tanh(x W1 + b1) W2 + b2) learns W1 [H,K,4K], b1 [H,1,4K],
 * W2 [H,4K,K], b2 [H,1,K] instead.
 *
 * Decoding: the op moves its inner weights at mini-batch ends only, so the
 * state holds the weights at the start of the open mini-batch (slots 0..3)
 * and that mini-batch's projected tokens (slots 4..7: q, k, v, eta); each call
 * re-runs the open mini-batch with the new tokens, which gives exactly the
 * whole-sequence outputs. */
#include <math.h>

#include "models/models.h"
#include "models/slots.h"


typedef struct {
    pr_qkvgo proj;
    pr_tensor *lr_proj, *lr_bias, *tau;                       /* [D,H], [H], [b,1] */
    pr_tensor *ttt_w, *ttt_b;                                 /* [H,K] [H,K] */
    pr_tensor *inner[4];      /* linear: W0, c0; mlp: W1, b1, W2, b2 (the inner model's start) */
    int n_inner;
    pr_tensor *post_w, *post_b;                               /* [HK] */
} ttt_layer;

static void *ttt_build_common(pr_params *r, const pr_config *c)
{
    ttt_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    int64_t D = c->d_model, H = c->n_heads, K = pr_config_head_dim(c), HK = H * K;
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0}, zero = {PR_INIT_CONST, 0, 0};
    pr_qkvgo_build(r, c, &l->proj);
    l->lr_proj = pr_param_new(r, "lr_proj", w, true, PR_DIMS(D, H));
    l->lr_bias = pr_param_new(r, "lr_bias", zero, false, PR_DIMS(H));
    l->tau = pr_param_new(r, "tau", zero, false, PR_DIMS(c->ttt_mini_batch, 1));
    l->ttt_w = pr_param_new(r, "ttt_norm_w", one, false, PR_DIMS(H, K));
    l->ttt_b = pr_param_new(r, "ttt_norm_b", zero, false, PR_DIMS(H, K));
    l->post_w = pr_param_new(r, "post_norm_w", one, false, PR_DIMS(HK));
    l->post_b = pr_param_new(r, "post_norm_b", zero, false, PR_DIMS(HK));
    return l;
}

static void *ttt_build(pr_params *r, const pr_config *c)
{
    ttt_layer *l = ttt_build_common(r, c);
    int64_t H = c->n_heads, K = pr_config_head_dim(c);
    l->inner[0] = pr_param_new(r, "W0", pr_init_std(c), true, PR_DIMS(H, K, K));
    l->inner[1] = pr_param_new(r, "c0", (pr_init){PR_INIT_CONST, 0, 0}, false, PR_DIMS(H, 1, K));
    l->n_inner = 2;
    return l;
}

static void *ttt_mlp_build(pr_params *r, const pr_config *c)
{
    ttt_layer *l = ttt_build_common(r, c);
    int64_t H = c->n_heads, K = pr_config_head_dim(c), N = 4 * K;
    pr_init w = pr_init_std(c), zero = {PR_INIT_CONST, 0, 0};
    l->inner[0] = pr_param_new(r, "W1", w, true, PR_DIMS(H, K, N));
    l->inner[1] = pr_param_new(r, "b1", zero, false, PR_DIMS(H, 1, N));
    l->inner[2] = pr_param_new(r, "W2", w, true, PR_DIMS(H, N, K));
    l->inner[3] = pr_param_new(r, "b2", zero, false, PR_DIMS(H, 1, K));
    l->n_inner = 4;
    return l;
}

/* a constant [n0, n1, n2, n3] of x's dtype and device from f(i, j) at [i, 0, j, 0] */
static pr_tensor *table(pr_ctx *ctx, const pr_tensor *like, int64_t rows, int64_t cols, int64_t start, int64_t b,
                        double (*f)(int64_t pos, int64_t j, int64_t cols))
{
    pr_tensor *h = pr_empty(ctx->step, PR_F64, PR_CPU, PR_DIMS(rows, 1, cols, 1));
    double *v = h->data;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) v[i * cols + j] = f((start + i) % b, j, cols);
    return pr_to(ctx->step, h, like->dtype, like->device);
}

static double rope_angle(int64_t pos, int64_t j, int64_t half) { return (double)pos * pow(10000.0, -(double)j / (double)half); }
static double rope_cos(int64_t pos, int64_t j, int64_t half) { return cos(rope_angle(pos, j, half)); }
static double rope_sin(int64_t pos, int64_t j, int64_t half) { return sin(rope_angle(pos, j, half)); }
static double inv_pos(int64_t pos, int64_t j, int64_t n) { (void)j, (void)n; return 1.0 / (double)(pos + 1); }

/* RoPE on pairs (2i, 2i+1) of each head of x [B,T,H,K], positions (start + t) mod b */
static pr_tensor *rope_pair(pr_ctx *ctx, pr_tensor *x, int64_t start, int64_t b)
{
    int64_t B = x->shape[0], T = x->shape[1], H = x->shape[2], K = x->shape[3];
    PR_CHECK(K % 2 == 0, "ttt_linear: head dim %lld must be even for RoPE", (long long)K);
    pr_tensor *cs = table(ctx, x, T, K / 2, start, b, rope_cos), *sn = table(ctx, x, T, K / 2, start, b, rope_sin);
    pr_tensor *ab[2];
    pr_split(ctx, pr_reshape(ctx, x, PR_DIMS(B, T, H, K / 2, 2)), 4, 2, (const int64_t[]){1, 1}, ab);
    pr_tensor *a = pr_sub(ctx, pr_mul(ctx, ab[0], cs), pr_mul(ctx, ab[1], sn));
    pr_tensor *c = pr_add(ctx, pr_mul(ctx, ab[0], sn), pr_mul(ctx, ab[1], cs));
    return pr_reshape(ctx, pr_concat(ctx, 2, (pr_tensor *[]){a, c}, 4), PR_DIMS(B, T, H, K));
}

/* eta [B,T,H,1] for tokens at mini-batch positions (start + t) mod b */
static pr_tensor *inner_lr(pr_ctx *ctx, const ttt_layer *l, const pr_config *c, pr_tensor *x, int64_t start)
{
    int64_t B = x->shape[0], T = x->shape[1], H = c->n_heads, b = c->ttt_mini_batch;
    pr_tensor *pos = pr_empty(ctx->step, PR_I64, PR_CPU, PR_DIMS(T));
    for (int64_t t = 0; t < T; t++) ((int64_t *)pos->data)[t] = (start + t) % b;
    if (x->device != PR_CPU) pos = pr_to(ctx->step, pos, PR_I64, x->device);
    pr_tensor *inv = pr_reshape(ctx, table(ctx, x, T, 1, start, b, inv_pos), PR_DIMS(T, 1));
    pr_tensor *tok = pr_relu(ctx, pr_add(ctx, pr_embedding(ctx, l->tau, pos), inv));           /* [T,1] */
    pr_tensor *gate = pr_sigmoid(ctx, pr_linear(ctx, x, l->lr_proj, l->lr_bias));              /* [B,T,H] */
    double k = c->ttt_base_lr / (double)pr_config_head_dim(c);
    return pr_reshape(ctx, pr_scale(ctx, pr_mul(ctx, gate, tok), k), PR_DIMS(B, T, H, 1));
}

/* the learned start of the inner model, broadcast over the batch */
static void start_weights(pr_ctx *ctx, const ttt_layer *l, int64_t B, pr_tensor **w)
{
    for (int i = 0; i < l->n_inner; i++) {
        const pr_tensor *p = l->inner[i];
        pr_tensor *one = pr_reshape(ctx, l->inner[i], PR_DIMS(1, p->shape[0], p->shape[1], p->shape[2]));
        w[i] = pr_repeat_dim(ctx, one, 0, B);
    }
}

static pr_tensor *cat_time(pr_ctx *ctx, pr_tensor *prev, pr_tensor *x)
{
    return prev ? pr_concat(ctx, 2, (pr_tensor *[]){prev, x}, 1) : x;
}

/* the layer's op from inner weights w; their final values into out when not NULL */
static pr_tensor *inner_op(pr_ctx *ctx, const ttt_layer *l, const pr_config *c, pr_tensor *const qkve[4],
                           pr_tensor *const *w, pr_tensor **out)
{
    pr_ttt_opts opt = {.mini_batch = c->ttt_mini_batch, .eps = 1e-6};
    if (l->n_inner == 2)
        return pr_ttt_linear(ctx, &opt, qkve[0], qkve[1], qkve[2], l->ttt_w, l->ttt_b, qkve[3], w[0], w[1],
                             out ? &out[0] : NULL, out ? &out[1] : NULL);
    return pr_ttt_mlp(ctx, &opt, qkve[0], qkve[1], qkve[2], l->ttt_w, l->ttt_b, qkve[3], w[0], w[1], w[2], w[3],
                      out ? &out[0] : NULL, out ? &out[1] : NULL, out ? &out[2] : NULL, out ? &out[3] : NULL);
}

/* the op over q, k, v, eta from w; with st, only whole mini-batches move the state */
static pr_tensor *run_inner(pr_ctx *ctx, const ttt_layer *l, const pr_config *c, pr_tensor *const qkve[4],
                            pr_tensor **w, pr_layer_state *st)
{
    int64_t T = qkve[0]->shape[1], b = c->ttt_mini_batch, whole = T / b * b;
    if (!st) return inner_op(ctx, l, c, qkve, w, NULL);
    pr_tensor *o = NULL;
    if (whole > 0) {
        pr_tensor *s[4];
        for (int i = 0; i < 4; i++) s[i] = whole == T ? qkve[i] : pr_slice(ctx, qkve[i], 1, 0, whole);
        o = inner_op(ctx, l, c, s, w, w);
    }
    for (int i = 0; i < l->n_inner; i++) st->slot[PR_SLOT_TTT_INNER + i] = w[i];
    for (int i = 0; i < 4; i++) st->slot[PR_SLOT_TTT_Q + i] = whole < T ? pr_slice(ctx, qkve[i], 1, whole, T - whole) : NULL;
    if (whole == T) return o;
    return cat_time(ctx, o, inner_op(ctx, l, c, &st->slot[PR_SLOT_TTT_Q], w, NULL));
}

static pr_tensor *ttt_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    const ttt_layer *l = layer;
    int64_t H = c->n_heads, T = x->shape[1], b = c->ttt_mini_batch;
    int64_t open = st && st->slot[PR_SLOT_TTT_Q] ? st->slot[PR_SLOT_TTT_Q]->shape[1] : 0;   /* tokens of the open mini-batch */
    pr_tensor *qkve[4];
    qkve[0] = rope_pair(ctx, pr_split_heads(ctx, pr_linear(ctx, x, l->proj.q_proj, NULL), H), open, b);
    qkve[1] = rope_pair(ctx, pr_split_heads(ctx, pr_linear(ctx, x, l->proj.k_proj, NULL), H), open, b);
    qkve[2] = pr_split_heads(ctx, pr_linear(ctx, x, l->proj.v_proj, NULL), H);
    qkve[3] = inner_lr(ctx, l, c, x, open);
    pr_tensor *w[4];
    if (st && st->slot[PR_SLOT_TTT_INNER])
        for (int i = 0; i < l->n_inner; i++) w[i] = st->slot[PR_SLOT_TTT_INNER + i];
    else start_weights(ctx, l, x->shape[0], w);
    if (open)
        for (int i = 0; i < 4; i++) qkve[i] = cat_time(ctx, st->slot[PR_SLOT_TTT_Q + i], qkve[i]);
    pr_tensor *z = run_inner(ctx, l, c, qkve, w, st);
    if (open) z = pr_slice(ctx, z, 1, open, T);
    z = pr_layernorm(ctx, pr_merge_heads(ctx, z), l->post_w, l->post_b, 1e-6);
    z = pr_mul(ctx, pr_gelu_tanh(ctx, pr_linear(ctx, x, l->proj.g_proj, NULL)), z);
    return pr_linear(ctx, z, l->proj.o_proj, NULL);
}

const pr_mixer_def pr_mixer_ttt_linear = {
    .name = "ttt_linear",
    .summary = "TTT-Linear (official block, fla op form)",
    .mlp = true,
    .build = ttt_build,
    .forward = ttt_forward,
};

const pr_mixer_def pr_mixer_ttt_mlp = {
    .name = "ttt_mlp",
    .summary = "TTT-MLP (official block, fla op form; inner MLP 4x)",
    .mlp = true,
    .build = ttt_mlp_build,
    .forward = ttt_forward,
};
