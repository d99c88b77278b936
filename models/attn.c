/* models/attn.c: the Transformer++ attention layer (BASELINES.md 6.1, fla Attention).
 *
 *   q = x Wq [B,T,H,K],  k = x Wk,  v = x Wv [B,T,Hkv,K]   (Hkv = attn.kv_heads; biases: attn.bias)
 *   q, k <- RoPE-half: pairs (i, i + K/2), angle p * theta^(-2i/K) at absolute position p (attn.rope)
 *   o = causal softmax(q k^T / sqrt(K)) v, head h reading kv head h / (H/Hkv)
 *   y = concat_heads(o) Wo (+ bo)
 * attn.shortconv = W > 0 first runs x through silu(depthwise causal conv of
 * width W, with bias) (pr_pre_conv: the authors' probe baselines, W = 3 for theirs).
 * SASRec's blocks call pr_attn_query_kv: queries and keys/values from different inputs.
 *
 * Decoding carries a KV cache: slot 0 the rotated keys [B,Tc,Hkv,K], slot 1 the
 * values, slot 2 the conv's window. A call on a fresh state runs the tape's attention op (so training
 * and prefill differentiate); a call that continues a cache appends its keys
 * and values and runs the decode op token by token (inference only: the
 * decode op records nothing on the tape). */
#include <math.h>

#include "models/models.h"
#include "models/slots.h"


typedef struct {
    pr_pre_conv_params pre_conv;                    /* attn.shortconv only */
    pr_tensor *q_proj, *k_proj, *v_proj, *o_proj;
    pr_tensor *q_bias, *k_bias, *v_bias, *o_bias;   /* attn.bias only */
} attn_layer;

static int64_t kv_heads(const pr_config *c) { return c->attn_kv_heads ? c->attn_kv_heads : c->n_heads; }

static void *attn_build(pr_params *r, const pr_config *c)
{
    attn_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    int64_t D = c->d_model, K = pr_config_head_dim(c), HK = c->n_heads * K, KV = kv_heads(c) * K;
    pr_init w = pr_init_std(c);
    l->pre_conv = pr_pre_conv_build(r, c, c->attn_shortconv);
    l->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    l->k_proj = pr_param_new(r, "k_proj", w, true, PR_DIMS(D, KV));
    l->v_proj = pr_param_new(r, "v_proj", w, true, PR_DIMS(D, KV));
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HK, D));
    if (c->attn_bias) {
        pr_init zero = {PR_INIT_CONST, 0, 0};
        l->q_bias = pr_param_new(r, "q_bias", zero, false, PR_DIMS(HK));
        l->k_bias = pr_param_new(r, "k_bias", zero, false, PR_DIMS(KV));
        l->v_bias = pr_param_new(r, "v_bias", zero, false, PR_DIMS(KV));
        l->o_bias = pr_param_new(r, "o_bias", zero, false, PR_DIMS(D));
    }
    return l;
}

/* cos or sin of the RoPE angles for positions start.. start+T-1: [T,1,K/2] */
static pr_tensor *rope_table(pr_ctx *ctx, const pr_tensor *like, int64_t T, int64_t half, int64_t start,
                             double theta, bool sine)
{
    pr_tensor *h = pr_empty(ctx->step, PR_F64, PR_CPU, PR_DIMS(T, 1, half));
    double *v = h->data;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            double angle = (double)(start + t) * pow(theta, -(double)i / (double)half);
            v[t * half + i] = sine ? sin(angle) : cos(angle);
        }
    return pr_to(ctx->step, h, like->dtype, like->device);
}

pr_tensor *pr_rope_half(pr_ctx *ctx, pr_tensor *x, int64_t start, double theta)
{
    int64_t T = x->shape[1], K = x->shape[3], half = K / 2;
    PR_CHECK(x->ndim == 4 && K % 2 == 0, "rope: x must be [B,T,H,K] with K even, got K=%lld", (long long)K);
    pr_tensor *cs = rope_table(ctx, x, T, half, start, theta, false);
    pr_tensor *sn = rope_table(ctx, x, T, half, start, theta, true);
    pr_tensor *ab[2];
    pr_split(ctx, x, 3, 2, (const int64_t[]){half, half}, ab);
    pr_tensor *a = pr_sub(ctx, pr_mul(ctx, ab[0], cs), pr_mul(ctx, ab[1], sn));
    pr_tensor *b = pr_add(ctx, pr_mul(ctx, ab[1], cs), pr_mul(ctx, ab[0], sn));
    return pr_concat(ctx, 2, (pr_tensor *[]){a, b}, 3);
}

/* the new tokens q [B,T,H,K] against a cache that already holds them (its last T
 * entries), one token at a time */
static pr_tensor *attend_cached(pr_ctx *ctx, pr_tensor *q, pr_tensor *kc, pr_tensor *vc)
{
    int64_t B = q->shape[0], T = q->shape[1], Tc = kc->shape[1];
    int64_t *n_valid = pr_arena_alloc(ctx->step, sizeof *n_valid * (size_t)B);
    pr_tensor *out = NULL;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t b = 0; b < B; b++) n_valid[b] = Tc - T + t + 1;
        pr_tensor *o = pr_attention_decode(ctx, pr_slice(ctx, q, 1, t, 1), kc, vc, n_valid, 0);
        out = out ? pr_concat(ctx, 2, (pr_tensor *[]){out, o}, 1) : o;
    }
    return out;
}

typedef struct { pr_tensor *q, *k, *v; } qkv;

/* queries from xq, keys and values from xkv, RoPE'd from position start (attn.rope) */
static qkv project(pr_ctx *ctx, const attn_layer *l, const pr_config *c, pr_tensor *xq, pr_tensor *xkv, int64_t start)
{
    qkv p;
    p.q = pr_split_heads(ctx, pr_linear(ctx, xq, l->q_proj, l->q_bias), c->n_heads);
    p.k = pr_split_heads(ctx, pr_linear(ctx, xkv, l->k_proj, l->k_bias), kv_heads(c));
    p.v = pr_split_heads(ctx, pr_linear(ctx, xkv, l->v_proj, l->v_bias), kv_heads(c));
    if (c->attn_rope) {
        p.q = pr_rope_half(ctx, p.q, start, c->attn_rope_theta);
        p.k = pr_rope_half(ctx, p.k, start, c->attn_rope_theta);
    }
    return p;
}

static pr_tensor *output(pr_ctx *ctx, const attn_layer *l, pr_tensor *o)
{
    return pr_linear(ctx, pr_merge_heads(ctx, o), l->o_proj, l->o_bias);
}

pr_tensor *pr_attn_query_kv(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *xq, pr_tensor *xkv)
{
    qkv p = project(ctx, layer, c, xq, xkv, 0);
    return output(ctx, layer, pr_attention(ctx, p.q, p.k, p.v, 0, NULL));
}

static pr_tensor *attn_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    const attn_layer *l = layer;
    pr_tensor *cache_k = st ? st->slot[PR_SLOT_ATTN_K] : NULL, *cache_v = st ? st->slot[PR_SLOT_ATTN_V] : NULL;
    x = pr_pre_conv(ctx, x, &l->pre_conv, st ? &st->slot[PR_SLOT_ATTN_CONV] : NULL);
    qkv p = project(ctx, l, c, x, x, cache_k ? cache_k->shape[1] : 0);
    pr_tensor *o;
    if (!cache_k) {
        o = pr_attention(ctx, p.q, p.k, p.v, 0, NULL);
        if (st) st->slot[PR_SLOT_ATTN_K] = p.k, st->slot[PR_SLOT_ATTN_V] = p.v;
    } else {
        st->slot[PR_SLOT_ATTN_K] = pr_concat(ctx, 2, (pr_tensor *[]){cache_k, p.k}, 1);
        st->slot[PR_SLOT_ATTN_V] = pr_concat(ctx, 2, (pr_tensor *[]){cache_v, p.v}, 1);
        o = attend_cached(ctx, p.q, st->slot[PR_SLOT_ATTN_K], st->slot[PR_SLOT_ATTN_V]);
    }
    return output(ctx, l, o);
}

/* whole query groups per key/value head; RoPE rotates pairs of dims */
static int attn_check(const pr_config *c, pr_err *err)
{
    if (c->attn_kv_heads && c->n_heads % c->attn_kv_heads)
        return pr_errf(err, "config: attn.kv_heads %d does not divide n_heads %d", c->attn_kv_heads, c->n_heads);
    if (pr_config_head_dim(c) % 2)
        return pr_errf(err, "config: attn needs an even head dim for RoPE, got %lld",
                       (long long)pr_config_head_dim(c));
    return 0;
}

const pr_mixer_def pr_mixer_attn = {
    .name = "attn",
    .summary = "Transformer++ attention: RoPE, causal softmax, GQA (fla Attention)",
    .mlp = true,
    .check = attn_check,
    .build = attn_build,
    .forward = attn_forward,
};
