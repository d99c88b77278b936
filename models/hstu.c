/* models/hstu.c: the HSTU layer (Zhai et al. 2024, "Actions Speak Louder than
 * Words"; BASELINES.md 9.4): pointwise SiLU attention with a relative position
 * bias, for the rec task and the LM.
 *
 *   [u | v | q | k] = silu(x W_uvqk + b_uvqk)             [B,T,H,K] each
 *   A_ij = silu(q_i . k_j + rab[bucket(i - j)]) / N       j <= i (causal), else 0
 *   y = (LN(concat_heads(A v)) * u) W_o + b_o             LN without weights, over H*K
 * N = seq_len (a constant, so a prefix and then single tokens give the same
 * outputs as the whole sequence); rab [hstu.buckets] is shared by the heads;
 * bucket(d) = min(buckets - 1, floor(ln(max(d, 1)) / 0.301)), the logarithmic
 * bucketing of HSTU's reference code (it applies it to time gaps; we apply it
 * to the distance in positions; distances 0 and 1 share bucket 0).
 * Made of matmuls and pointwise ops (no kernel of its own): the scores are a
 * [B,H,T,T] tensor, so memory grows with T^2 as in the reference code.
 * Decoding keeps a KV cache: slot 0 the keys, slot 1 the values [B,Tc,H,K]. */
#include <math.h>
#include <string.h>

#include "models/models.h"
#include "models/slots.h"


typedef struct {
    pr_tensor *uvqk, *uvqk_bias;   /* [D, 4HK], [4HK] */
    pr_tensor *rab;                /* [buckets, 1] */
    pr_tensor *o_proj, *o_bias;    /* [HK, D], [D] */
} hstu_layer;

static void *hstu_build(pr_params *r, const pr_config *c)
{
    hstu_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    int64_t D = c->d_model, HK = c->n_heads * pr_config_head_dim(c);
    pr_init w = pr_init_std(c), zero = {PR_INIT_CONST, 0, 0};
    l->uvqk = pr_param_new(r, "uvqk", w, true, PR_DIMS(D, 4 * HK));
    l->uvqk_bias = pr_param_new(r, "uvqk_bias", zero, false, PR_DIMS(4 * HK));
    l->rab = pr_param_new(r, "rab", w, false, PR_DIMS(c->hstu_buckets, 1));
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HK, D));
    l->o_bias = pr_param_new(r, "o_bias", zero, false, PR_DIMS(D));
    return l;
}

static int64_t bucket(int64_t d, int64_t buckets)
{
    int64_t b = (int64_t)floor(log((double)(d > 1 ? d : 1)) / 0.301);
    return b < buckets - 1 ? b : buckets - 1;
}

/* queries at positions start..start+T-1 against keys 0..Tk-1: the relative
 * bias rab[bucket(i - j)] and the causal mask / N, both [T, Tk] */
static void bias_and_mask(pr_ctx *ctx, const hstu_layer *l, const pr_config *c, int64_t T, int64_t Tk, int64_t start,
                          pr_tensor **bias, pr_tensor **mask)
{
    int64_t *id = pr_arena_alloc(ctx->step, sizeof(int64_t) * (size_t)(T * Tk));
    pr_tensor *m = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(T, Tk));
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j <= start + i && j < Tk; j++) {
            id[i * Tk + j] = bucket(start + i - j, l->rab->shape[0]);
            ((double *)m->data)[i * Tk + j] = 1.0 / c->seq_len;
        }
    pr_tensor *ids = pr_from_host(ctx->step, PR_I64, l->rab->device, PR_DIMS(T, Tk), id);
    *bias = pr_reshape(ctx, pr_embedding(ctx, l->rab, ids), PR_DIMS(T, Tk));
    *mask = pr_to(ctx->step, m, l->rab->dtype, l->rab->device);
}

/* [B,T,H,K] -> [B,H,T,K] */
static pr_tensor *heads_first(pr_ctx *ctx, pr_tensor *x) { return pr_transpose(ctx, x, 1, 2); }

static pr_tensor *hstu_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    const hstu_layer *l = layer;
    int64_t H = c->n_heads, HK = H * pr_config_head_dim(c), T = x->shape[1];
    pr_tensor *parts[4];   /* u, v, q, k */
    pr_split(ctx, pr_silu(ctx, pr_linear(ctx, x, l->uvqk, l->uvqk_bias)), 2, 4, (const int64_t[]){HK, HK, HK, HK}, parts);
    pr_tensor *v = pr_split_heads(ctx, parts[1], H), *k = pr_split_heads(ctx, parts[3], H);
    pr_tensor *cache_k = st ? st->slot[PR_SLOT_HSTU_K] : NULL;
    int64_t start = cache_k ? cache_k->shape[1] : 0;
    if (cache_k) {
        k = pr_concat(ctx, 2, (pr_tensor *[]){cache_k, k}, 1);
        v = pr_concat(ctx, 2, (pr_tensor *[]){st->slot[PR_SLOT_HSTU_V], v}, 1);
    }
    if (st) st->slot[PR_SLOT_HSTU_K] = k, st->slot[PR_SLOT_HSTU_V] = v;
    pr_tensor *bias, *mask;
    bias_and_mask(ctx, l, c, T, k->shape[1], start, &bias, &mask);
    pr_tensor *q = heads_first(ctx, pr_split_heads(ctx, parts[2], H));
    pr_tensor *s = pr_add(ctx, pr_matmul(ctx, q, heads_first(ctx, k), false, true), bias);   /* [B,H,T,Tk] */
    pr_tensor *a = pr_mul(ctx, pr_silu(ctx, s), mask);
    pr_tensor *av = pr_merge_heads(ctx, pr_transpose(ctx, pr_matmul(ctx, a, heads_first(ctx, v), false, false), 1, 2));
    pr_tensor *n = pr_layernorm(ctx, av, NULL, NULL, c->norm_eps);
    return pr_linear(ctx, pr_mul(ctx, n, parts[0]), l->o_proj, l->o_bias);
}

double pr_hstu_step_bytes(const pr_config *c, int64_t B, int64_t T)
{
    if (strcmp(c->mixer, "hstu") != 0) return 0;
    const pr_config r = pr_config_resolve(c);   /* the blocks as built */
    /* the tape keeps ~11 floats a score (the product, the bias added, SiLU's input
     * and output, the mask and 1/N, and their grads): 42-45 bytes measured by the
     * CPU's step arena at T = 64..512; 12 floats here */
    return 12.0 * 4.0 * (double)B * (double)r.n_heads * (double)T * (double)T * (double)r.n_layers;
}

const pr_mixer_def pr_mixer_hstu = {
    .name = "hstu",
    .summary = "HSTU: pointwise SiLU attention with a relative position bias (Zhai et al. 2024)",
    .mlp = false,
    .build = hstu_build,
    .forward = hstu_forward,
};
