/* models/titans.c: a Titans neural-memory layer (BASELINES.md 5.1 with the fla
 * op of 5.2: linear memory, momentum, forgetting, TTT-style LN target).
 *
 *   q = l2n(silu(x Wq)), k = l2n(silu(x Wk)), v = silu(x Wv)   per head [B,T,H,K]
 *   theta = sigmoid(x W_theta + b_theta), alpha = sigmoid(x W_alpha + b_alpha),
 *   eta = sigmoid(x W_eta + b_eta)                                    [B,T,H,1]
 *   o = titans op (chunk titans.chunk; memory from the learned M0 [H,K,K], S0 = 0)
 *   y = concat_heads(rms(o) * silu(x Wg)) Wo
 * The paper's depthwise convs after the projections are left out (fla ships
 * no Titans layer to follow). Init: b_alpha = -4 (forget ~2% a token),
 * b_theta = b_eta = 0.
 *
 * Decoding: inside a chunk every gradient is taken at the chunk-start memory,
 * so the state is the memory and momentum at the start of the open chunk
 * (slots 0, 1) and the open chunk's inputs (slots 2..7: q, k, v, theta,
 * alpha, eta); each call re-runs the open chunk with the new tokens, which
 * gives exactly the whole-sequence outputs. */
#include "models/models.h"
#include "models/slots.h"


typedef struct {
    pr_qkvgo proj;
    pr_tensor *gate_proj, *gate_bias;                         /* [D,3H] [3H]: theta, alpha, eta */
    pr_tensor *ln_w, *ln_b, *M0, *o_norm;                     /* [H,K] [H,K] [H,K,K] [K] */
} titans_layer;

static void *titans_build(pr_params *r, const pr_config *c)
{
    titans_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    int64_t D = c->d_model, H = c->n_heads, K = pr_config_head_dim(c);
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0}, zero = {PR_INIT_CONST, 0, 0};
    pr_qkvgo_build(r, c, &l->proj);
    l->gate_proj = pr_param_new(r, "gate_proj", w, true, PR_DIMS(D, 3 * H));
    l->gate_bias = pr_param_new(r, "gate_bias", zero, false, PR_DIMS(3 * H));
    l->ln_w = pr_param_new(r, "mem_norm_w", one, false, PR_DIMS(H, K));
    l->ln_b = pr_param_new(r, "mem_norm_b", zero, false, PR_DIMS(H, K));
    l->M0 = pr_param_new(r, "M0", w, true, PR_DIMS(H, K, K));
    l->o_norm = pr_param_new(r, "o_norm", one, false, PR_DIMS(K));
    return l;
}

/* b_alpha starts at -4: the gate bias is [theta | alpha | eta] by head */
static pr_tensor *gate_bias(pr_ctx *ctx, const titans_layer *l, int64_t H)
{
    pr_tensor *shift = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(3 * H));
    for (int64_t h = 0; h < H; h++) ((double *)shift->data)[H + h] = -4.0;
    return pr_add(ctx, l->gate_bias, pr_to(ctx->step, shift, l->gate_bias->dtype, l->gate_bias->device));
}

/* the op's six per-token inputs: q, k, v [B,T,H,K]; theta, alpha, eta [B,T,H,1] */
static void inputs(pr_ctx *ctx, const titans_layer *l, const pr_config *c, pr_tensor *x, pr_tensor **in)
{
    int64_t B = x->shape[0], T = x->shape[1], H = c->n_heads;
    in[0] = pr_l2norm(ctx, pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->proj.q_proj, NULL)), H), 1e-6);
    in[1] = pr_l2norm(ctx, pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->proj.k_proj, NULL)), H), 1e-6);
    in[2] = pr_split_heads(ctx, pr_silu(ctx, pr_linear(ctx, x, l->proj.v_proj, NULL)), H);
    pr_tensor *gates = pr_sigmoid(ctx, pr_linear(ctx, x, l->gate_proj, gate_bias(ctx, l, H)));
    pr_tensor *g[3];
    pr_split(ctx, gates, 2, 3, (const int64_t[]){H, H, H}, g);
    for (int i = 0; i < 3; i++) in[3 + i] = pr_reshape(ctx, g[i], PR_DIMS(B, T, H, 1));
}

static pr_tensor *op(pr_ctx *ctx, const titans_layer *l, const pr_config *c, pr_tensor *const *in, pr_tensor *M,
                     pr_tensor *S, pr_tensor **Mt, pr_tensor **St)
{
    pr_titans_opts opt = {.chunk = c->titans_chunk, .eps = 1e-6};
    return pr_titans(ctx, &opt, in[0], in[1], in[2], l->ln_w, l->ln_b, in[3], in[4], in[5], M, S, Mt, St);
}

/* with st: whole chunks move the stored memory; the open chunk's inputs wait in st */
static pr_tensor *run(pr_ctx *ctx, const titans_layer *l, const pr_config *c, pr_tensor **in, pr_tensor *M,
                      pr_tensor *S, pr_layer_state *st)
{
    if (!st) return op(ctx, l, c, in, M, S, NULL, NULL);
    int64_t T = in[0]->shape[1], whole = T / c->titans_chunk * c->titans_chunk;
    pr_tensor *o = NULL;
    if (whole > 0) {
        pr_tensor *part[PR_TITANS_N_IN];
        for (int i = 0; i < PR_TITANS_N_IN; i++) part[i] = whole == T ? in[i] : pr_slice(ctx, in[i], 1, 0, whole);
        o = op(ctx, l, c, part, M, S, &M, &S);
    }
    st->slot[PR_SLOT_TITANS_M] = M, st->slot[PR_SLOT_TITANS_S] = S;
    for (int i = 0; i < PR_TITANS_N_IN; i++) st->slot[PR_SLOT_TITANS_IN + i] = whole < T ? pr_slice(ctx, in[i], 1, whole, T - whole) : NULL;
    if (whole == T) return o;
    pr_tensor *rest = op(ctx, l, c, &st->slot[PR_SLOT_TITANS_IN], M, S, NULL, NULL);
    return o ? pr_concat(ctx, 2, (pr_tensor *[]){o, rest}, 1) : rest;
}

static pr_tensor *titans_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x,
                                 pr_layer_state *st)
{
    const titans_layer *l = layer;
    int64_t B = x->shape[0], T = x->shape[1], H = c->n_heads, K = l->M0->shape[1];
    pr_tensor *in[PR_TITANS_N_IN], *M, *S;
    inputs(ctx, l, c, x, in);
    int64_t open = st && st->slot[PR_SLOT_TITANS_IN] ? st->slot[PR_SLOT_TITANS_IN]->shape[1] : 0;   /* tokens of the open chunk */
    for (int i = 0; open && i < PR_TITANS_N_IN; i++) in[i] = pr_concat(ctx, 2, (pr_tensor *[]){st->slot[PR_SLOT_TITANS_IN + i], in[i]}, 1);
    if (st && st->slot[PR_SLOT_TITANS_M]) {
        M = st->slot[PR_SLOT_TITANS_M], S = st->slot[PR_SLOT_TITANS_S];
    } else {
        M = pr_repeat_dim(ctx, pr_reshape(ctx, l->M0, PR_DIMS(1, H, K, K)), 0, B);
        S = pr_zeros(ctx->step, x->dtype, x->device, PR_DIMS(B, H, K, K));
    }
    pr_tensor *o = run(ctx, l, c, in, M, S, st);
    if (open) o = pr_slice(ctx, o, 1, open, T);
    pr_tensor *z = pr_split_heads(ctx, pr_linear(ctx, x, l->proj.g_proj, NULL), H);
    return pr_linear(ctx, pr_merge_heads(ctx, pr_rmsnorm_gated(ctx, o, z, l->o_norm, c->norm_eps)), l->proj.o_proj, NULL);
}

const pr_mixer_def pr_mixer_titans = {
    .name = "titans",
    .summary = "Titans neural memory (linear memory, momentum, forgetting; fla op form)",
    .mlp = true,
    .build = titans_build,
    .forward = titans_forward,
};
