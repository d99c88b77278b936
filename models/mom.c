/* models/mom.c: Mixture-of-Memories (Du et al. 2025; fla MomAttention, BASELINES.md 9.3).
 *
 *   p = softmax(x W_router) [B,T,E];  each token picks the top-k of its E
 *   probabilities; w_j = p_j / sum of the k picked (the routing weights)
 *   memory e sees only the tokens routed to it: per batch row, those tokens in
 *   order form memory e's own sequence (packed along T, cu_seqlens)
 *     q = l2n(silu(conv(x Wq)))  k = l2n(silu(conv(x Wk_e)))  v = silu(conv(x Wv_e))
 *     g = -exp(A_log) * softplus(x Wa_e + dt_bias)   beta = sigmoid(x Wb_e)
 *     o_e = gdn recurrence over that sequence (scale K^-1/2)
 *   Wq, the three ShortConv weights, A_log and dt_bias are shared by the
 *   memories; the convolutions run within each memory's sequence
 *   o = sum_j w_j o_{e_j}  (+ the shared memory: the same gdn path over every
 *   token with Wq, Ws_k, Ws_v, Ws_a, Ws_b; mom.shared)
 *   y = concat_heads(rms(o) * silu(x Wg)) Wo   (gdn.gate; gdn.expand_v sets V)
 * mom.backend=gla: each memory is a GLA memory instead: no beta and no A_log,
 *   dt_bias; gk = logsigmoid(x Wgk_e) / gla.gate_normalizer [H,K] (a decay per
 *   key channel, Wgk_e [D,HK]: full rank, ours), rule gla (per-token form on CUDA)
 * Training adds fla's load-balancing loss: pr_router_stats below.
 *
 * mom.route=auto (the default) takes packed on the CPU and padded on CUDA
 * (pr_mom_routes_padded); the model is the same either way.
 * mom.route=packed: the routing is read on the host (top-k of the
 * probabilities), each memory's tokens packed back to back (varlen), then
 * every move of rows is a gather (pr_embedding), so the layer is made of ops
 * with CPU and CUDA kernels and the tape differentiates it.
 * mom.route=padded: the top-k and the slots are computed where the tensors
 * are (pr_route_padded, ops/route.h) and each memory's sequence of row b is
 * padded to T, a batch of E*B sequences: E/k times the routed rows, but no
 * value read on the host and every shape fixed, so the step can be captured
 * as a CUDA graph. The rows go to their slots and back by pr_route_scatter
 * and pr_route_gather. The pads follow every real token of their sequence, so
 * the causal convolutions and recurrences give the real tokens the packed
 * layout's values. A forward that keeps state (decoding) runs packed.
 * Padded is 1.5x packed's speed on CUDA in 31% less memory, 0.65x on the
 * CPU (docs/results/bf16-h200.md, sitting 5).
 *
 * State slots: 0..2 the routed q, k, v conv windows [E*B, W-1, C] (row e*B + b),
 * 3 the routed memories' states [E*B, H, K, V]; 4..6 the shared memory's conv
 * windows [B, W-1, C], 7 its state [B, H, K, V]. */
#include <math.h>
#include <string.h>

#include "models/models.h"
#include "models/slots.h"
#include "ops/route.h"


#define MOM_MAX_MEMORIES 64

typedef struct {
    pr_tensor *router, *q_proj;                       /* [D,E] [D,HK] */
    pr_tensor *k_proj[MOM_MAX_MEMORIES], *v_proj[MOM_MAX_MEMORIES];
    pr_tensor *a_proj[MOM_MAX_MEMORIES], *b_proj[MOM_MAX_MEMORIES];   /* gla: a_proj is gk_proj [D,HK], no b_proj */
    pr_tensor *shared_k, *shared_v, *shared_a, *shared_b;   /* mom.shared only; gla: shared_gk, no shared_b */
    pr_tensor *q_conv, *k_conv, *v_conv;              /* [HK,W] [HK,W] [HV,W] */
    pr_tensor *A_log, *dt_bias;                       /* [H] */
    pr_tensor *g_proj, *o_norm, *o_proj;
} mom_layer;

static bool is_gla(const pr_config *c) { return strcmp(c->mom_backend, "gla") == 0; }

static void *mom_build(pr_params *r, const pr_config *c)
{
    mom_layer *l = pr_arena_alloc(r->arena, sizeof *l);
    int64_t D = c->d_model, H = c->n_heads, HK = H * pr_config_head_dim(c), V = pr_config_value_dim(c);
    int64_t HV = H * V, W = c->conv_width, E = c->mom_memories;
    pr_init w = pr_init_std(c), one = {PR_INIT_CONST, 1, 0};
    l->router = pr_param_new(r, "router", w, true, PR_DIMS(D, E));
    l->q_proj = pr_param_new(r, "q_proj", w, true, PR_DIMS(D, HK));
    char name[32];
    for (int64_t e = 0; e < E; e++) {
        snprintf(name, sizeof name, "k_proj.%d", (int)e);
        l->k_proj[e] = pr_param_new(r, name, w, true, PR_DIMS(D, HK));
        snprintf(name, sizeof name, "v_proj.%d", (int)e);
        l->v_proj[e] = pr_param_new(r, name, w, true, PR_DIMS(D, HV));
        snprintf(name, sizeof name, is_gla(c) ? "gk_proj.%d" : "a_proj.%d", (int)e);
        l->a_proj[e] = pr_param_new(r, name, w, true, PR_DIMS(D, is_gla(c) ? HK : H));
        if (is_gla(c)) continue;
        snprintf(name, sizeof name, "b_proj.%d", (int)e);
        l->b_proj[e] = pr_param_new(r, name, w, true, PR_DIMS(D, H));
    }
    if (c->mom_shared) {
        l->shared_k = pr_param_new(r, "shared_k", w, true, PR_DIMS(D, HK));
        l->shared_v = pr_param_new(r, "shared_v", w, true, PR_DIMS(D, HV));
        l->shared_a = pr_param_new(r, is_gla(c) ? "shared_gk" : "shared_a", w, true, PR_DIMS(D, is_gla(c) ? HK : H));
        if (!is_gla(c)) l->shared_b = pr_param_new(r, "shared_b", w, true, PR_DIMS(D, H));
    }
    l->q_conv = pr_param_new(r, "q_conv", w, true, PR_DIMS(HK, W));
    l->k_conv = pr_param_new(r, "k_conv", w, true, PR_DIMS(HK, W));
    l->v_conv = pr_param_new(r, "v_conv", w, true, PR_DIMS(HV, W));
    if (!is_gla(c)) {
        l->A_log = pr_param_new(r, "A_log", (pr_init){PR_INIT_LOG_UNIFORM, 0, 16}, false, PR_DIMS(H));
        l->dt_bias = pr_param_new(r, "dt_bias", (pr_init){PR_INIT_DT_BIAS, 1e-3, 0.1}, false, PR_DIMS(H));
    }
    if (c->gdn_gate) l->g_proj = pr_param_new(r, "g_proj", w, true, PR_DIMS(D, HV));
    l->o_norm = pr_param_new(r, "o_norm", one, false, PR_DIMS(V));
    l->o_proj = pr_param_new(r, "o_proj", w, true, PR_DIMS(HV, D));
    return l;
}

/* ---- routing (host) ------------------------------------------------------------
 * Sequences s = e*B + b (memory-major), each the tokens of row b routed to e in
 * order; packed rows run through the sequences in that order, so memory e's
 * rows are contiguous. */
typedef struct {
    int64_t E, B, T, k, S, R;
    int64_t *n, *start;   /* [S] tokens of sequence s, its first packed row */
    int64_t *tok;         /* [R] the token b*T + t of each packed row */
    int64_t *row;         /* [B*T*k] the packed row of token bt's j-th pick */
    int64_t *pick;        /* [B*T*k] the memory of token bt's j-th pick */
    int64_t n_max;        /* the longest sequence */
} routing;

/* the k largest of p[0..E) (ties: the lower index), descending, into out */
static void top_k(const double *p, int64_t E, int64_t k, int64_t *out)
{
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j; i++) taken |= out[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        out[j] = best;
    }
}

static routing route(pr_ctx *ctx, const pr_tensor *probs, int64_t k)
{
    routing rt = {.B = probs->shape[0], .T = probs->shape[1], .E = probs->shape[2], .k = k};
    int64_t BT = rt.B * rt.T, E = rt.E;
    rt.S = E * rt.B, rt.R = BT * k;
    pr_arena *a = ctx->step;
    double *p = pr_arena_alloc(a, sizeof(double) * (size_t)(BT * E));
    pr_to_host_f64(probs, p);
    rt.pick = pr_arena_alloc(a, sizeof(int64_t) * (size_t)rt.R);
    rt.row = pr_arena_alloc(a, sizeof(int64_t) * (size_t)rt.R);
    rt.tok = pr_arena_alloc(a, sizeof(int64_t) * (size_t)rt.R);
    rt.n = pr_arena_alloc(a, sizeof(int64_t) * (size_t)rt.S);
    rt.start = pr_arena_alloc(a, sizeof(int64_t) * (size_t)rt.S);
    for (int64_t bt = 0; bt < BT; bt++) {
        top_k(p + bt * E, E, k, rt.pick + bt * k);
        for (int64_t j = 0; j < k; j++) rt.n[rt.pick[bt * k + j] * rt.B + bt / rt.T]++;
    }
    for (int64_t s = 0, at = 0; s < rt.S; s++) {
        rt.start[s] = at, at += rt.n[s];
        if (rt.n[s] > rt.n_max) rt.n_max = rt.n[s];
    }
    int64_t *fill = pr_arena_alloc(a, sizeof(int64_t) * (size_t)rt.S);
    for (int64_t bt = 0; bt < BT; bt++)   /* tokens in order: each sequence fills in time order */
        for (int64_t j = 0; j < k; j++) {
            int64_t s = rt.pick[bt * k + j] * rt.B + bt / rt.T, r = rt.start[s] + fill[s]++;
            rt.row[bt * k + j] = r;
            rt.tok[r] = bt;
        }
    return rt;
}

static pr_tensor *ids(pr_ctx *ctx, pr_device dev, int ndim, const int64_t *shape, const int64_t *host)
{
    return pr_from_host(ctx->step, PR_I64, dev, ndim, shape, host);
}

/* rows `idx` [n] of table [rows, C] (a differentiable gather) */
static pr_tensor *gather_rows(pr_ctx *ctx, pr_tensor *table, int64_t n, const int64_t *idx)
{
    return pr_embedding(ctx, table, ids(ctx, table->device, PR_DIMS(n), idx));
}

/* concat of n >= 1 tensors along dim 0, in groups (concat takes PR_MAX_IN at most) */
static pr_tensor *concat_rows(pr_ctx *ctx, int n, pr_tensor **xs)
{
    PR_CHECK(n >= 1, "mom: no token was routed to any memory");   /* every token picks top-k >= 1 */
    pr_tensor *out = xs[0];
    for (int i = 1; i < n;) {
        pr_tensor *group[PR_MAX_IN] = {out};
        int m = 1;
        while (i < n && m < PR_MAX_IN) group[m++] = xs[i++];
        out = pr_concat(ctx, m, group, 0);
    }
    return out;
}

/* rows x [R, D] through each memory's own map w[e] on its rows start[e] ..
 * start[e] + len[e] - 1 (contiguous, in memory order, covering x): [R, out] */
static pr_tensor *linear_per_memory(pr_ctx *ctx, pr_tensor *x, int64_t E, const int64_t *start, const int64_t *len,
                                    pr_tensor *const *w)
{
    pr_tensor *parts[MOM_MAX_MEMORIES] = {0};
    int n = 0;
    for (int64_t e = 0; e < E; e++)
        if (len[e]) parts[n++] = pr_linear(ctx, pr_slice(ctx, x, 0, start[e], len[e]), w[e], NULL);
    return concat_rows(ctx, n, parts);
}
/* the packed rows xp [R, D]: memory e's are its B sequences' */
static pr_tensor *project_per_memory(pr_ctx *ctx, const routing *rt, pr_tensor *xp, pr_tensor *const *w)
{
    int64_t start[MOM_MAX_MEMORIES] = {0}, len[MOM_MAX_MEMORIES] = {0};
    for (int64_t e = 0; e < rt->E; e++) {
        start[e] = rt->start[e * rt->B], len[e] = 0;
        for (int64_t b = 0; b < rt->B; b++) len[e] += rt->n[e * rt->B + b];
    }
    return linear_per_memory(ctx, xp, rt->E, start, len, w);
}

/* the table row (see packed_conv) of position p of sequence s's window-then-tokens */
static int64_t virtual_row(const routing *rt, int64_t s, int64_t p, int64_t W, bool has_win)
{
    int64_t win_rows = has_win ? rt->S * (W - 1) : 0;
    if (p >= W - 1) return win_rows + rt->start[s] + p - (W - 1);
    return has_win ? s * (W - 1) + p : win_rows + rt->R;   /* the window, or the zero row */
}

/* silu(causal depthwise conv with w [C,W]) of the packed rows x [R,C], within
 * each sequence, each starting from its window in *win [S,W-1,C] (NULL: zeros);
 * leaves the new windows there when win != NULL. Every tap is a gather from
 * the table [windows; x; a zero row]. */
static pr_tensor *packed_conv(pr_ctx *ctx, const routing *rt, pr_tensor *x, pr_tensor *w, pr_tensor **win)
{
    int64_t R = rt->R, S = rt->S, C = x->shape[1], W = w->shape[1];
    bool has_win = win && *win && W > 1;
    pr_tensor *parts[3];
    int n = 0;
    if (has_win) parts[n++] = pr_reshape(ctx, *win, PR_DIMS(S * (W - 1), C));
    parts[n++] = x;
    parts[n++] = pr_zeros(ctx->step, x->dtype, x->device, PR_DIMS(1, C));
    pr_tensor *table = pr_concat(ctx, n, parts, 0);
    int64_t *tap = pr_arena_alloc(ctx->step, sizeof(int64_t) * (size_t)(R * W));
    for (int64_t s = 0; s < S; s++)
        for (int64_t i = 0; i < rt->n[s]; i++)
            for (int64_t j = 0; j < W; j++) tap[(rt->start[s] + i) * W + j] = virtual_row(rt, s, i + j, W, has_win);
    pr_tensor *taps = pr_embedding(ctx, table, ids(ctx, x->device, PR_DIMS(R, W), tap));   /* [R,W,C] */
    pr_tensor *y = pr_sum(ctx, pr_mul(ctx, pr_transpose(ctx, taps, 1, 2), w));
    if (win && W > 1) {
        int64_t *last = pr_arena_alloc(ctx->step, sizeof(int64_t) * (size_t)(S * (W - 1)));
        for (int64_t s = 0; s < S; s++)
            for (int64_t m = 0; m < W - 1; m++) last[s * (W - 1) + m] = virtual_row(rt, s, rt->n[s] + m, W, has_win);
        *win = pr_reshape(ctx, gather_rows(ctx, table, S * (W - 1), last), PR_DIMS(S, W - 1, C));
    }
    return pr_silu(ctx, y);
}

/* [R, H*E] -> [1, R, H, E] */
static pr_tensor *packed_heads(pr_ctx *ctx, pr_tensor *x, int64_t H)
{
    return pr_reshape(ctx, x, PR_DIMS(1, x->shape[0], H, x->shape[1] / H));
}

/* a memory's gates from the pre-activations a = x Wa (and b = x Wb) of n tokens
 * laid out as `lead` [.., n]: gdn: g = -exp(A_log) softplus(a + dt_bias) and
 * beta = sigmoid(b), [lead.., H]; gla: gk = logsigmoid(a) / normalizer [lead.., H, K] */
static void memory_gates(pr_ctx *ctx, const mom_layer *l, const pr_config *c, pr_tensor *a, pr_tensor *b, int nlead,
                         const int64_t *lead, pr_tensor **g, pr_tensor **beta)
{
    int64_t H = c->n_heads, shape[PR_MAX_DIMS];
    memcpy(shape, lead, sizeof(int64_t) * (size_t)nlead);
    shape[nlead] = H;
    if (is_gla(c)) {
        shape[nlead + 1] = a->shape[a->ndim - 1] / H;
        *g = pr_reshape(ctx, pr_scale(ctx, pr_logsigmoid(ctx, a), 1.0 / c->gla_gate_normalizer), nlead + 2, shape);
        *beta = NULL;
        return;
    }
    *g = pr_reshape(ctx, pr_decay_gate(ctx, a, l->A_log, l->dt_bias), nlead + 1, shape);
    *beta = pr_reshape(ctx, pr_sigmoid(ctx, b), nlead + 1, shape);
}

/* the recurrence's options for T tokens a sequence (gla: the per-token form on CUDA, where the
 * routed memories' packed sequences have not yet been run through gla's chunked kernels) */
static pr_recurrence_opts memory_opts(const pr_config *c, const pr_tensor *x, int64_t T)
{
    pr_recurrence_opts o = pr_config_recurrence(c, is_gla(c) ? PR_RULE_GLA : PR_RULE_GDN, T, 0);
    if (is_gla(c) && x->device == PR_CUDA) o.chunk = 0;
    return o;
}

/* the routed memories over their packed sequences: o [R, H*V] */
static pr_tensor *routed_memories(pr_ctx *ctx, const mom_layer *l, const pr_config *c, const routing *rt,
                                  pr_tensor *xp, pr_layer_state *st)
{
    int64_t H = c->n_heads, S = rt->S, R = rt->R;
    pr_tensor **win = st ? &st->slot[PR_SLOT_MOM_WIN] : NULL;
    pr_tensor *q = packed_conv(ctx, rt, pr_linear(ctx, xp, l->q_proj, NULL), l->q_conv, win ? &win[0] : NULL);
    pr_tensor *k = packed_conv(ctx, rt, project_per_memory(ctx, rt, xp, l->k_proj), l->k_conv, win ? &win[1] : NULL);
    pr_tensor *v = packed_conv(ctx, rt, project_per_memory(ctx, rt, xp, l->v_proj), l->v_conv, win ? &win[2] : NULL);
    q = pr_l2norm(ctx, packed_heads(ctx, q, H), 1e-6);
    k = pr_l2norm(ctx, packed_heads(ctx, k, H), 1e-6);
    v = packed_heads(ctx, v, H);
    pr_tensor *g, *beta;
    memory_gates(ctx, l, c, project_per_memory(ctx, rt, xp, l->a_proj),
                 is_gla(c) ? NULL : project_per_memory(ctx, rt, xp, l->b_proj), 2, (const int64_t[]){1, R}, &g, &beta);

    /* the sequences that have tokens (cu_seqlens must grow strictly) */
    int64_t *live = pr_arena_alloc(ctx->step, sizeof(int64_t) * (size_t)S), *cu = pr_arena_alloc(ctx->step, sizeof(int64_t) * (size_t)(S + 1));
    int64_t N = 0;
    for (int64_t s = 0; s < S; s++)
        if (rt->n[s]) live[N] = s, cu[N + 1] = cu[N] + rt->n[s], N++;
    int64_t HKV = H * k->shape[3] * v->shape[3];
    pr_tensor *old = st ? st->slot[PR_SLOT_MOM_H] : NULL, *h0 = NULL, *ht = NULL;
    if (old) h0 = pr_reshape(ctx, gather_rows(ctx, pr_reshape(ctx, old, PR_DIMS(S, HKV)), N, live),
                             PR_DIMS(N, H, k->shape[3], v->shape[3]));
    pr_recurrence_opts opt = memory_opts(c, xp, rt->n_max);
    pr_tensor *o = pr_recurrence(ctx, &opt, q, k, v, g, beta, NULL, NULL, h0, ids(ctx, xp->device, PR_DIMS(N + 1), cu),
                                 st ? &ht : NULL);
    if (st) {   /* the new states: ht where a sequence ran, the old state (or zeros) elsewhere */
        pr_tensor *before = old ? pr_reshape(ctx, old, PR_DIMS(S, HKV)) : pr_zeros(ctx->step, ht->dtype, ht->device, PR_DIMS(S, HKV));
        pr_tensor *table = pr_concat(ctx, 2, (pr_tensor *[]){before, pr_reshape(ctx, ht, PR_DIMS(N, HKV))}, 0);
        int64_t *pick = pr_arena_alloc(ctx->step, sizeof(int64_t) * (size_t)S);
        for (int64_t s = 0, i = 0; s < S; s++) pick[s] = rt->n[s] ? S + i++ : s;
        st->slot[PR_SLOT_MOM_H] = pr_reshape(ctx, gather_rows(ctx, table, S, pick), PR_DIMS(S, H, k->shape[3], v->shape[3]));
    }
    return pr_reshape(ctx, o, PR_DIMS(R, o->shape[2] * o->shape[3]));
}

/* the shared memory: the gdn path over every token, with the shared q map and convs */
static pr_tensor *shared_memory(pr_ctx *ctx, const mom_layer *l, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    int64_t H = c->n_heads;
    pr_tensor **win = st ? &st->slot[PR_SLOT_MOM_SHARED_WIN] : NULL;
    pr_tensor *q = pr_shortconv_silu(ctx, pr_linear(ctx, x, l->q_proj, NULL), l->q_conv, NULL, win ? &win[0] : NULL);
    pr_tensor *k = pr_shortconv_silu(ctx, pr_linear(ctx, x, l->shared_k, NULL), l->k_conv, NULL, win ? &win[1] : NULL);
    pr_tensor *v = pr_shortconv_silu(ctx, pr_linear(ctx, x, l->shared_v, NULL), l->v_conv, NULL, win ? &win[2] : NULL);
    q = pr_l2norm(ctx, pr_split_heads(ctx, q, H), 1e-6);
    k = pr_l2norm(ctx, pr_split_heads(ctx, k, H), 1e-6);
    pr_tensor *g, *beta;
    memory_gates(ctx, l, c, pr_linear(ctx, x, l->shared_a, NULL), l->shared_b ? pr_linear(ctx, x, l->shared_b, NULL) : NULL,
                 2, x->shape, &g, &beta);
    pr_recurrence_opts opt = memory_opts(c, x, x->shape[1]);
    return pr_recurrence(ctx, &opt, q, k, pr_split_heads(ctx, v, H), g, beta, NULL, NULL,
                         st ? st->slot[PR_SLOT_MOM_SHARED_H] : NULL, NULL, st ? &st->slot[PR_SLOT_MOM_SHARED_H] : NULL);
}

/* the routing weights [BT, k]: the picked probabilities (at [BT k]: their
 * indices in probs flat, on probs' device) over their sum */
static pr_tensor *weights_of(pr_ctx *ctx, pr_tensor *probs, int64_t BT, int64_t k, pr_tensor *at)
{
    pr_tensor *flat = pr_reshape(ctx, probs, PR_DIMS(probs->numel, 1));
    pr_tensor *w = pr_reshape(ctx, pr_embedding(ctx, flat, at), PR_DIMS(BT, k));
    return pr_div(ctx, w, pr_reshape(ctx, pr_sum(ctx, w), PR_DIMS(BT, 1)));
}
static pr_tensor *routing_weights(pr_ctx *ctx, pr_tensor *probs, const routing *rt)
{
    int64_t BT = rt->B * rt->T, k = rt->k;
    int64_t *at = pr_arena_alloc(ctx->step, sizeof(int64_t) * (size_t)(BT * k));
    for (int64_t i = 0; i < BT * k; i++) at[i] = (i / k) * rt->E + rt->pick[i];
    return weights_of(ctx, probs, BT, k, ids(ctx, probs->device, PR_DIMS(BT * k), at));
}

/* ---- padded routing (mom.route=padded) -------------------------------------------
 * Sequence s = e*B + b holds row b's tokens routed to e in its first slots,
 * then pads (rows of zeros in; what they give out is never read). */

/* the padded rows xs [E*n, D] (memory e's are rows e*n ..) through every map
 * a memory applies, q (shared), k, v, a and b (gdn; gla: q, k, v, gk), in one
 * batched product: each memory's maps side by side [D, F], the memories
 * stacked [E, D, F], then the columns split into out[i] [E*n, width of map
 * i]. One product and a split where a product and a slice a map a memory
 * made the probe-sized step (D = 16, 4 memories) launch-bound */
static void maps_padded(pr_ctx *ctx, const mom_layer *l, pr_tensor *xs, int64_t E, pr_tensor **out)
{
    pr_tensor *const *per[5] = {NULL, l->k_proj, l->v_proj, l->a_proj, l->b_proj};
    int nmaps = l->b_proj[0] ? 5 : 4;
    int64_t D = xs->shape[1], n = xs->shape[0] / E, F = 0, width[5];
    pr_tensor *stack[MOM_MAX_MEMORIES];
    for (int64_t e = 0; e < E; e++) {
        pr_tensor *side[5] = {l->q_proj};
        for (int i = 1; i < nmaps; i++) side[i] = per[i][e];
        pr_tensor *w = pr_concat(ctx, nmaps, side, 1);
        F = w->shape[1];
        stack[e] = pr_reshape(ctx, w, PR_DIMS(1, D, F));
    }
    pr_tensor *y = pr_matmul(ctx, pr_reshape(ctx, xs, PR_DIMS(E, n, D)), concat_rows(ctx, (int)E, stack), false, false);
    width[0] = l->q_proj->shape[1];
    for (int i = 1; i < nmaps; i++) width[i] = per[i][0]->shape[1];
    pr_split(ctx, y, 2, nmaps, width, out);
    for (int i = 0; i < nmaps; i++) out[i] = pr_reshape(ctx, out[i], PR_DIMS(E * n, width[i]));
}

/* silu(causal depthwise conv) of [S*T, C] within each of the S sequences: [S, T, C] */
static pr_tensor *padded_conv(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, int64_t S, int64_t T)
{
    return pr_shortconv_silu(ctx, pr_reshape(ctx, x, PR_DIMS(S, T, x->shape[1])), w, NULL, NULL);
}

/* each token's k memories' outputs, [BT, k, HV], the memories run over their padded sequences */
static pr_tensor *routed_padded(pr_ctx *ctx, const mom_layer *l, const pr_config *c, const pr_routing *r, pr_tensor *x)
{
    int64_t B = x->shape[0], T = x->shape[1], D = x->shape[2], H = c->n_heads, E = c->mom_memories, S = E * B;
    pr_tensor *xs = pr_route_scatter(ctx, pr_reshape(ctx, x, PR_DIMS(B * T, D)), r->slot, S * T);   /* [S*T, D] */
    pr_tensor *m[5] = {0};   /* q, k, v, a, b */
    maps_padded(ctx, l, xs, E, m);
    pr_tensor *q = padded_conv(ctx, m[0], l->q_conv, S, T);
    pr_tensor *kk = padded_conv(ctx, m[1], l->k_conv, S, T);
    pr_tensor *v = padded_conv(ctx, m[2], l->v_conv, S, T);
    q = pr_l2norm(ctx, pr_split_heads(ctx, q, H), 1e-6);
    kk = pr_l2norm(ctx, pr_split_heads(ctx, kk, H), 1e-6);
    pr_tensor *g, *beta;
    memory_gates(ctx, l, c, m[3], m[4], 2, (const int64_t[]){S, T}, &g, &beta);
    pr_recurrence_opts opt = memory_opts(c, x, T);
    pr_tensor *o = pr_recurrence(ctx, &opt, q, kk, pr_split_heads(ctx, v, H), g, beta, NULL, NULL, NULL, NULL, NULL);
    o = pr_reshape(ctx, o, PR_DIMS(S * T, o->shape[2] * o->shape[3]));
    return pr_route_gather(ctx, o, r->slot);
}

bool pr_mom_routes_padded(const pr_config *c, pr_device dev)
{
    return strcmp(c->mom_route, "padded") == 0 || (strcmp(c->mom_route, "auto") == 0 && dev == PR_CUDA);
}

/* the router's statistics for the balance loss, when a loss asked for them:
 * count [E] the layer's picks of each memory (probs' dtype and device) */
static void add_router_stats(pr_ctx *ctx, const pr_config *c, pr_tensor *probs, pr_tensor *count)
{
    pr_router_stats *rs = ctx->loss_aux;
    if (!rs) return;
    int64_t E = probs->shape[2], BT = probs->numel / E;
    pr_tensor *sum = pr_sum(ctx, pr_transpose(ctx, pr_reshape(ctx, probs, PR_DIMS(BT, E)), 0, 1));   /* [E] */
    PR_CHECK(!rs->prob_sum || rs->E == E, "mom: router statistics of %d and %lld memories", rs->E, (long long)E);
    rs->prob_sum = rs->prob_sum ? pr_add(ctx, rs->prob_sum, sum) : sum;
    rs->count_sum = rs->count_sum ? pr_add(ctx, rs->count_sum, count) : count;
    rs->E = (int)E;
    rs->scale = c->mom_aux_loss_scale;
    rs->tokens += (double)BT;
}

/* a packed routing's picks of each memory, as add_router_stats takes them */
static pr_tensor *pick_counts(pr_ctx *ctx, const routing *rt, const pr_tensor *probs)
{
    double n[MOM_MAX_MEMORIES] = {0};
    for (int64_t i = 0; i < rt->B * rt->T * rt->k; i++) n[rt->pick[i]] += 1;
    return pr_to(ctx->step, pr_from_host(ctx->step, PR_F64, PR_CPU, PR_DIMS(rt->E), n), probs->dtype, probs->device);
}

pr_tensor *pr_router_aux_loss(pr_ctx *ctx, const pr_router_stats *rs)
{
    /* E * sum_e f_e P_e, f_e = count_e / tokens, P_e = prob_sum_e / tokens */
    pr_tensor *f = pr_scale(ctx, rs->count_sum, 1.0 / rs->tokens);
    return pr_scale(ctx, pr_sum(ctx, pr_mul(ctx, rs->prob_sum, f)), rs->scale * rs->E / rs->tokens);
}

static pr_tensor *mom_forward(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st)
{
    const mom_layer *l = layer;
    int64_t B = x->shape[0], T = x->shape[1], D = x->shape[2], H = c->n_heads, k = c->mom_topk;
    /* the router in exact f32 under bf16 autocast, as Switch Transformers keep
     * theirs: a product rounded to bf16 flips close top-k choices */
    pr_tensor *x32 = pr_autocast(ctx, x, PR_F32);
    pr_precision_state prec = pr_autocast_pause(ctx);
    pr_tensor *probs = pr_softmax(ctx, pr_linear(ctx, x32, l->router, NULL));   /* [B,T,E] */
    pr_autocast_resume(ctx, prec);
    pr_tensor *picked, *w;   /* [BT,k,HV] each token's memories' outputs, [BT,k] their weights */
    if (!st && pr_mom_routes_padded(c, x->device)) {
        pr_routing r = pr_route_padded(ctx, probs, k);
        add_router_stats(ctx, c, probs, r.count);
        picked = routed_padded(ctx, l, c, &r, x);
        w = weights_of(ctx, probs, B * T, k, r.at);
    } else {
        routing rt = route(ctx, probs, k);
        if (ctx->loss_aux) add_router_stats(ctx, c, probs, pick_counts(ctx, &rt, probs));   /* counts uploaded only for a loss */
        pr_tensor *xp = gather_rows(ctx, pr_reshape(ctx, x, PR_DIMS(B * T, D)), rt.R, rt.tok);
        pr_tensor *o = routed_memories(ctx, l, c, &rt, xp, st);   /* [R, HV] */
        picked = pr_embedding(ctx, o, ids(ctx, x->device, PR_DIMS(B * T, k), rt.row));
        w = routing_weights(ctx, probs, &rt);
    }
    pr_tensor *o = pr_matmul(ctx, pr_reshape(ctx, w, PR_DIMS(B * T, 1, k)), picked, false, false);
    o = pr_reshape(ctx, o, PR_DIMS(B, T, H, picked->shape[2] / H));
    if (l->shared_k) o = pr_add(ctx, o, shared_memory(ctx, l, c, x, st));
    pr_tensor *n;
    if (l->g_proj) n = pr_rmsnorm_gated(ctx, o, pr_split_heads(ctx, pr_linear(ctx, x, l->g_proj, NULL), H), l->o_norm, c->norm_eps);
    else n = pr_rmsnorm(ctx, o, l->o_norm, c->norm_eps);
    return pr_linear(ctx, pr_merge_heads(ctx, n), l->o_proj, NULL);
}

static int mom_check(const pr_config *c, pr_err *err)
{
    if (c->mom_topk > c->mom_memories)
        return pr_errf(err, "config: mom.topk %d is more than mom.memories %d", c->mom_topk, c->mom_memories);
    return 0;
}

const pr_mixer_def pr_mixer_mom = {
    .name = "mom",
    .summary = "Mixture-of-Memories: top-k routed gated delta rule memories (fla MomAttention)",
    .mlp = true,
    .expands_v = true,
    .check = mom_check,
    .build = mom_build,
    .forward = mom_forward,
};
