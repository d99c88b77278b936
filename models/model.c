/* models/model.c: pre-norm residual blocks and the two model heads.
 *
 *   block:  h = h + mixer(norm1(h));  h = h + mlp(norm2(h))   (no MLP: the first line only)
 *           each add fused with the norm that reads its sum (ops/norm.c's add_rmsnorm,
 *           add_layernorm): norm2, the next block's norm1, norm_f
 *   SwiGLU: (silu(x Wgate) * (x Wup)) Wdown;   GELU (ReLU): gelu(x Wup + bup) Wdown + bdown
 *   block = sasrec: SASRec's own blocks and learned positions (sasrec_hidden below)
 *   LM:     logits = norm_f(blocks(embed[ids])) (embed^T | lm_head); loss = CE, ignore_index
 *           (fused_loss: head and CE as one op in row chunks, ops/linear_ce.c; the same loss)
 *   rec:    scores = norm_f(blocks(item_embed[items]))[:, last] item_embed^T  (all items; id 0 pads)
 *           sampled: bce(s_pos, 1) + bce(s_neg, 0), each a mean, s = last . item_embed[id]
 * Paths: embed, layers.<i>.{norm1,norm2}.{w,b}, layers.<i>.mixer.*, layers.<i>.mlp.*, norm_f.*, lm_head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"

static bool config_has_mlp(const pr_config *c)
{
    const char *k = c->mlp;
    const pr_mixer_def *def = pr_mixer_by_name(c->mixer);
    return strcmp(k, "swiglu") == 0 || strcmp(k, "gelu") == 0 || strcmp(k, "relu") == 0 ||
           (strcmp(k, "auto") == 0 && def && def->mlp);
}

static bool has_mlp(const pr_model *m) { return config_has_mlp(&m->cfg); }

int64_t pr_config_mixer_params(const pr_config *c)
{
    pr_params *r = pr_params_new(PR_F32, PR_CPU);
    r->shapes_only = true;   /* the count needs no data */
    pr_params_push(r, "mixer");
    pr_mixer_by_name(c->mixer)->build(r, c);
    int64_t n = pr_params_count(r);
    pr_params_free(r);
    return n;
}

/* a block's parameters at MLP hidden width F: norm1, the mixer, and norm2 plus
 * the MLP when it has one (SwiGLU: 3DF; GELU/ReLU: 2DF and biases F + D) */
static int64_t block_params(const pr_config *c, int64_t mixer, int64_t F)
{
    int64_t D = c->d_model, norm = strcmp(c->norm, "layernorm") == 0 ? 2 * D : D;
    if (!config_has_mlp(c)) return norm + mixer;
    bool gelu = strcmp(c->mlp, "gelu") == 0 || strcmp(c->mlp, "relu") == 0;
    return 2 * norm + mixer + (gelu ? 2 * D * F + F + D : 3 * D * F);
}

/* match_attn (models/README.md): the blocks hold as many parameters as attn's.
 * A block without an MLP is about half a Transformer layer: twice the blocks,
 * as the Mamba papers stack them, unless that misses attn's blocks by more than
 * 10%. A block with an MLP gives back (or takes) the difference between its
 * mixer and attn's through the MLP's hidden width, while an eighth of the width
 * is left (less is no MLP to speak of). Where neither fits (a mixer that
 * outweighs attn's whole block), the block count that comes closest. */
pr_config pr_config_resolve(const pr_config *c)
{
    pr_config r = *c;
    r.match_attn = false;
    if (!c->match_attn) return r;
    pr_config attn = *c;
    snprintf(attn.mixer, sizeof attn.mixer, "attn");
    int64_t D = c->d_model, F = (int64_t)llround(c->mlp_mult * D), P_mixer = pr_config_mixer_params(c);
    int64_t P_attn = pr_config_mixer_params(&attn);
    double target = (double)c->n_layers * (double)block_params(&attn, P_attn, F);
    if (config_has_mlp(c)) {
        bool gelu = strcmp(c->mlp, "gelu") == 0 || strcmp(c->mlp, "relu") == 0;
        int64_t unit = gelu ? 2 * D + 1 : 3 * D;
        int64_t F2 = F - (int64_t)llround((double)(P_mixer - P_attn) / (double)unit);
        if (8 * F2 >= F) {
            r.mlp_mult = (double)F2 / (double)D;
            return r;
        }
    } else if (fabs(2.0 * c->n_layers * (double)block_params(c, P_mixer, F) - target) <= 0.1 * target) {
        r.n_layers = 2 * c->n_layers;
        return r;
    }
    long n = lround(target / (double)block_params(c, P_mixer, F));
    r.n_layers = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
    return r;
}

/* GELU and ReLU MLPs carry biases; SwiGLU carries a gate instead */
static bool is_gelu_mlp(const pr_model *m) { return strcmp(m->cfg.mlp, "gelu") == 0 || strcmp(m->cfg.mlp, "relu") == 0; }
static bool is_sasrec(const pr_model *m) { return m->cfg.block == PR_BLOCK_SASREC; }

static void build_norm(pr_params *r, const pr_config *c, const char *name, pr_norm_params *n)
{
    pr_params_push(r, "%s", name);
    n->w = pr_param_new(r, "w", (pr_init){PR_INIT_CONST, 1, 0}, false, PR_DIMS(c->d_model));
    if (strcmp(c->norm, "layernorm") == 0)
        n->b = pr_param_new(r, "b", (pr_init){PR_INIT_CONST, 0, 0}, false, PR_DIMS(c->d_model));
    pr_params_pop(r);
}

static void build_mlp(pr_model *m, pr_block *b)
{
    pr_params *r = m->params;
    const pr_config *c = &m->cfg;
    int64_t D = c->d_model, F = (int64_t)llround(c->mlp_mult * D);
    pr_init w = pr_init_std(c), zero = {PR_INIT_CONST, 0, 0};
    pr_params_push(r, "mlp");
    b->w_up = pr_param_new(r, "w_up", w, true, PR_DIMS(D, F));
    if (is_gelu_mlp(m)) b->b_up = pr_param_new(r, "b_up", zero, false, PR_DIMS(F));
    else b->w_gate = pr_param_new(r, "w_gate", w, true, PR_DIMS(D, F));
    b->w_down = pr_param_new(r, "w_down", w, true, PR_DIMS(F, D));
    if (is_gelu_mlp(m)) b->b_down = pr_param_new(r, "b_down", zero, false, PR_DIMS(D));
    pr_params_pop(r);
}

static pr_model *model_build(const pr_config *c, pr_dtype dt, pr_device dev, bool shapes_only)
{
    pr_err err;
    if (pr_config_check(c, &err)) pr_fatal("%s", err.msg);
    pr_model *m = calloc(1, sizeof *m);
    PR_CHECK(m, "model: out of host memory");
    m->cfg = pr_config_resolve(c);
    c = &m->cfg;
    m->mixer = pr_mixer_by_name(c->mixer);
    m->params = pr_params_new(dt, dev);
    m->params->shapes_only = shapes_only;
    pr_params *r = m->params;
    bool rec = c->task == PR_HEAD_REC;
    int64_t rows = rec ? (int64_t)c->rec_n_items + 1 : c->vocab;
    m->embed = pr_param_new(r, "embed", pr_init_std(c), false, PR_DIMS(rows, c->d_model));
    if (is_sasrec(m)) m->pos_embed = pr_param_new(r, "pos_embed", pr_init_std(c), false, PR_DIMS(c->seq_len, c->d_model));
    m->blocks = pr_arena_alloc(r->arena, sizeof *m->blocks * (size_t)c->n_layers);
    for (int i = 0; i < c->n_layers; i++) {
        pr_block *b = &m->blocks[i];
        pr_params_push(r, "layers.%d", i);
        build_norm(r, c, "norm1", &b->norm1);
        pr_params_push(r, "mixer");
        b->mixer = m->mixer->build(r, c);
        pr_params_pop(r);
        if (has_mlp(m)) {
            build_norm(r, c, "norm2", &b->norm2);
            build_mlp(m, b);
        }
        pr_params_pop(r);
    }
    build_norm(r, c, "norm_f", &m->norm_f);
    if (!rec && !c->tie_embeddings)
        m->lm_head = pr_param_new(r, "lm_head", pr_init_std(c), true, PR_DIMS(c->d_model, c->vocab));
    return m;
}

pr_model *pr_model_new(const pr_config *c, pr_dtype dt, pr_device dev) { return model_build(c, dt, dev, false); }
pr_model *pr_model_shapes(const pr_config *c) { return model_build(c, PR_F32, PR_CPU, true); }

void pr_model_free(pr_model *m)
{
    if (!m) return;
    pr_params_free(m->params);
    free(m);
}

void pr_model_init(pr_model *m) { pr_params_init(m->params, (uint64_t)m->cfg.seed); }

pr_tensor *pr_model_norm(pr_ctx *ctx, const pr_model *m, const pr_norm_params *n, pr_tensor *x)
{
    if (n->b) return pr_layernorm(ctx, x, n->w, n->b, m->cfg.norm_eps);
    return pr_rmsnorm(ctx, x, n->w, m->cfg.norm_eps);
}

static pr_tensor *mlp_forward(pr_ctx *ctx, const pr_model *m, const pr_block *b, pr_tensor *x)
{
    if (b->w_gate) {
        pr_tensor *gate = pr_linear(ctx, x, b->w_gate, NULL);   /* silu(gate) * up in one op */
        return pr_linear(ctx, pr_swiglu(ctx, gate, pr_linear(ctx, x, b->w_up, NULL)), b->w_down, NULL);
    }
    pr_tensor *u = pr_linear(ctx, x, b->w_up, b->b_up);
    u = strcmp(m->cfg.mlp, "relu") == 0 ? pr_relu(ctx, u) : pr_gelu(ctx, u);
    return pr_linear(ctx, pr_dropout(ctx, u, m->cfg.dropout), b->w_down, b->b_down);
}

/* n(h + y) in one fused op (ops/norm.c's add_rmsnorm / add_layernorm), the
 * sum h + y (the new residual stream) into *h */
static pr_tensor *add_norm(pr_ctx *ctx, const pr_model *m, const pr_norm_params *n, pr_tensor **h, pr_tensor *y)
{
    if (n->b) return pr_add_layernorm(ctx, *h, y, n->w, n->b, m->cfg.norm_eps, h);
    return pr_add_rmsnorm(ctx, *h, y, n->w, m->cfg.norm_eps, h);
}

/* block i on h with x = norm1(h) already made: h + mixer(x), then + mlp(norm2(.)).
 * Each residual add is fused with the norm that reads its sum: norm2, and
 * `next` (the next block's norm1 or the final norm; its output into *x_next)
 * when given, else a plain add. Returns the new residual stream. */
static pr_tensor *block_body(pr_ctx *ctx, const pr_model *m, int i, pr_tensor *h, pr_tensor *x, pr_layer_state *st,
                             const pr_norm_params *next, pr_tensor **x_next)
{
    const pr_block *b = &m->blocks[i];
    /* scopes name the parameters' path prefix, so the NaN trap can say where */
    pr_ctx_set_scope(ctx, "layers.%d.mixer", i);
    pr_tensor *y = m->mixer->forward(ctx, b->mixer, &m->cfg, x, st);
    if (b->w_up) {
        pr_ctx_set_scope(ctx, "layers.%d.mlp", i);
        y = mlp_forward(ctx, m, b, add_norm(ctx, m, &b->norm2, &h, y));
    }
    if (next) {
        if (i + 1 < m->cfg.n_layers) pr_ctx_set_scope(ctx, "layers.%d.norm1", i + 1);
        else pr_ctx_set_scope(ctx, NULL);
        *x_next = add_norm(ctx, m, next, &h, y);
    } else {
        h = pr_add(ctx, h, y);
    }
    pr_ctx_set_scope(ctx, NULL);
    return h;
}

pr_tensor *pr_block_forward(pr_ctx *ctx, const pr_model *m, int i, pr_tensor *h, pr_layer_state *st)
{
    pr_ctx_set_scope(ctx, "layers.%d.norm1", i);
    pr_tensor *x = pr_model_norm(ctx, m, &m->blocks[i].norm1, h);
    return block_body(ctx, m, i, h, x, st, NULL, NULL);
}

/* [B,T,1]: 0 where ids is the padding item 0, else 1 (a lookup in a constant table) */
static pr_tensor *pad_mask(pr_ctx *ctx, const pr_model *m, pr_tensor *ids)
{
    int64_t rows = m->embed->shape[0];
    pr_tensor *table = pr_ones(ctx->step, PR_F64, PR_CPU, PR_DIMS(rows, 1));
    ((double *)table->data)[0] = 0;
    return pr_embedding(ctx, pr_to(ctx->step, table, m->embed->dtype, m->embed->device), ids);
}

/* SASRec (BASELINES.md 6.2): E = item_embed * sqrt(D) + pos, pads zeroed; per block
 * Q = ln1(E), E = Q + attn(query Q, keys/values E); E = ln2(E), E = E + ffn(E), pads
 * zeroed; out = ln_f(E). Dropout on the embedding and around the FFN's hidden layer. */
static pr_tensor *sasrec_hidden(pr_ctx *ctx, const pr_model *m, pr_tensor *ids)
{
    const pr_config *c = &m->cfg;
    int64_t T = ids->shape[1];
    PR_CHECK(T <= c->seq_len, "sasrec: sequence of %lld items is longer than seq_len %d (the learned positions)",
             (long long)T, c->seq_len);
    pr_tensor *mask = pad_mask(ctx, m, ids);
    pr_tensor *e = pr_scale(ctx, pr_embedding(ctx, m->embed, ids), sqrt((double)c->d_model));
    e = pr_add(ctx, e, pr_slice(ctx, m->pos_embed, 0, 0, T));
    e = pr_mul(ctx, pr_dropout(ctx, e, c->dropout), mask);
    for (int i = 0; i < c->n_layers; i++) {
        const pr_block *b = &m->blocks[i];
        pr_tensor *q = pr_model_norm(ctx, m, &b->norm1, e);
        e = pr_add(ctx, q, pr_attn_query_kv(ctx, b->mixer, c, q, e));
        e = pr_model_norm(ctx, m, &b->norm2, e);
        e = pr_add(ctx, e, pr_dropout(ctx, mlp_forward(ctx, m, b, e), c->dropout));
        e = pr_mul(ctx, e, mask);
    }
    return pr_model_norm(ctx, m, &m->norm_f, e);
}

pr_tensor *pr_model_hidden(pr_ctx *ctx, const pr_model *m, pr_tensor *ids, pr_model_state *st)
{
    PR_CHECK(ids->ndim == 2, "model: ids must be [B, T], got %d dims", ids->ndim);
    PR_CHECK(!st || st->n == m->cfg.n_layers, "model: state has %d layers, the model %d", st ? st->n : 0,
             m->cfg.n_layers);
    if (is_sasrec(m)) {
        PR_CHECK(!st, "sasrec: the model runs whole sequences only (no carried state)");
        return sasrec_hidden(ctx, m, ids);
    }
    /* the blocks pass on the residual h and its norm x for the next reader,
     * so every add meets the norm after it in one op (block_body) */
    pr_tensor *h = pr_embedding(ctx, m->embed, ids);
    const int L = m->cfg.n_layers;
    if (L == 0) return pr_model_norm(ctx, m, &m->norm_f, h);
    pr_ctx_set_scope(ctx, "layers.0.norm1");
    pr_tensor *x = pr_model_norm(ctx, m, &m->blocks[0].norm1, h);
    for (int i = 0; i < L; i++) {
        const pr_norm_params *next = i + 1 < L ? &m->blocks[i + 1].norm1 : &m->norm_f;
        h = block_body(ctx, m, i, h, x, st ? &st->layer[i] : NULL, next, &x);
    }
    return x;
}

static pr_tensor *lm_head(pr_ctx *ctx, const pr_model *m, pr_tensor *h)
{
    return m->lm_head ? pr_matmul(ctx, h, m->lm_head, false, false) : pr_matmul(ctx, h, m->embed, false, true);
}

pr_tensor *pr_lm_logits(pr_ctx *ctx, const pr_model *m, pr_tensor *ids, pr_model_state *st)
{
    return lm_head(ctx, m, pr_model_hidden(ctx, m, ids, st));
}

/* the hidden states for a loss, with the layers' auxiliary terms (MoM's router
 * balance) gathered into *rs */
static pr_tensor *hidden_for_loss(pr_ctx *ctx, const pr_model *m, pr_tensor *ids, pr_router_stats *rs)
{
    void *outer = ctx->loss_aux;
    ctx->loss_aux = rs;
    pr_tensor *h = pr_model_hidden(ctx, m, ids, NULL);
    ctx->loss_aux = outer;
    return h;
}

/* loss + the auxiliary terms the layers left in rs (none: loss itself) */
static pr_tensor *plus_aux(pr_ctx *ctx, pr_tensor *loss, const pr_router_stats *rs)
{
    return rs->prob_sum ? pr_add(ctx, loss, pr_router_aux_loss(ctx, rs)) : loss;
}

/* `fused_loss`: true, false, or auto: fused on the CPU (it never holds the
 * logits); unfused on CUDA, where the H200 ran lm-130m at 16K tokens 2% faster
 * unfused (fused held 14% less memory then, while the unfused loss still
 * widened bf16 logits to f32; cross_entropy reads them in place since cea598c) */
static bool fused_loss(const pr_config *c, pr_device dev)
{
    if (strcmp(c->fused_loss, "auto") == 0) return dev == PR_CPU;
    return strcmp(c->fused_loss, "true") == 0;
}

/* cross-entropy of the head's logits; fused, the logits are made a chunk of
 * rows at a time and the head's gradients with the loss */
static pr_tensor *lm_head_loss(pr_ctx *ctx, const pr_model *m, pr_tensor *h, pr_tensor *targets)
{
    const bool fused = fused_loss(&m->cfg, h->device);
    if (!fused) return pr_cross_entropy(ctx, lm_head(ctx, m, h), targets, m->cfg.ignore_index);
    return m->lm_head ? pr_linear_cross_entropy(ctx, h, m->lm_head, false, targets, m->cfg.ignore_index, 0)
                      : pr_linear_cross_entropy(ctx, h, m->embed, true, targets, m->cfg.ignore_index, 0);
}

pr_tensor *pr_lm_loss(pr_ctx *ctx, const pr_model *m, pr_tensor *ids, pr_tensor *targets)
{
    pr_router_stats rs = {0};
    return plus_aux(ctx, lm_head_loss(ctx, m, hidden_for_loss(ctx, m, ids, &rs), targets), &rs);
}

/* the last position's hidden state against every item */
static pr_tensor *last_scores(pr_ctx *ctx, const pr_model *m, pr_tensor *h)
{
    int64_t B = h->shape[0], T = h->shape[1], D = h->shape[2];
    pr_tensor *last = pr_reshape(ctx, pr_slice(ctx, h, 1, T - 1, 1), PR_DIMS(B, D));
    return pr_matmul(ctx, last, m->embed, false, true);
}

pr_tensor *pr_rec_scores(pr_ctx *ctx, const pr_model *m, pr_tensor *items)
{
    return last_scores(ctx, m, pr_model_hidden(ctx, m, items, NULL));
}

pr_tensor *pr_rec_loss(pr_ctx *ctx, const pr_model *m, pr_tensor *items, pr_tensor *target)
{
    pr_router_stats rs = {0};
    pr_tensor *scores = last_scores(ctx, m, hidden_for_loss(ctx, m, items, &rs));
    return plus_aux(ctx, pr_cross_entropy(ctx, scores, target, m->cfg.ignore_index), &rs);
}

pr_tensor *pr_rec_loss_sampled(pr_ctx *ctx, const pr_model *m, pr_tensor *items, pr_tensor *target,
                               pr_tensor *negatives)
{
    PR_CHECK(negatives->ndim == 2 && negatives->shape[0] == items->shape[0],
             "rec: negatives must be [B, N] with B = %lld, got %d dims", (long long)items->shape[0], negatives->ndim);
    pr_router_stats rs = {0};
    pr_tensor *h = hidden_for_loss(ctx, m, items, &rs);
    int64_t B = h->shape[0], T = h->shape[1], D = h->shape[2];
    pr_tensor *last = pr_reshape(ctx, pr_slice(ctx, h, 1, T - 1, 1), PR_DIMS(B, 1, D));
    pr_tensor *pos = pr_embedding(ctx, m->embed, pr_view(ctx->step, target, PR_DIMS(B, 1)));   /* [B,1,D] */
    pr_tensor *neg = pr_embedding(ctx, m->embed, negatives);                                   /* [B,N,D] */
    pr_tensor *s_pos = pr_matmul(ctx, last, pos, false, true), *s_neg = pr_matmul(ctx, last, neg, false, true);
    pr_tensor *ones = pr_ones(ctx->step, s_pos->dtype, s_pos->device, s_pos->ndim, s_pos->shape);
    pr_tensor *zeros = pr_zeros(ctx->step, s_neg->dtype, s_neg->device, s_neg->ndim, s_neg->shape);
    return plus_aux(ctx, pr_add(ctx, pr_bce_logits(ctx, s_pos, ones), pr_bce_logits(ctx, s_neg, zeros)), &rs);
}

pr_model_state *pr_model_state_new(const pr_model *m)
{
    pr_model_state *s = calloc(1, sizeof *s);
    PR_CHECK(s, "model: out of host memory");
    s->n = m->cfg.n_layers;
    s->layer = calloc((size_t)s->n, sizeof *s->layer);
    PR_CHECK(s->layer, "model: out of host memory");
    return s;
}

void pr_model_state_keep(pr_model_state *s, pr_arena *a)
{
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < PR_STATE_SLOTS; j++)
            if (s->layer[i].slot[j]) s->layer[i].slot[j] = pr_clone(a, s->layer[i].slot[j]);
}

void pr_model_state_free(pr_model_state *s)
{
    if (!s) return;
    free(s->layer);
    free(s);
}
