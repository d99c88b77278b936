/* ops/autocast.c: bf16 autocast, the dtype policy the op frontends apply
 * when ctx->precision is PR_PREC_BF16 (torch.autocast's, in prism's ops).
 *
 *   lower to bf16   matmul, conv1d, attention, selective_scan; the data
 *                   inputs of recurrence and the TTT ops (their decays,
 *                   states and inner weights stay f32, as those ops take)
 *   f32             softmax, log_softmax, bce_logits, sum and mean, exp,
 *                   log, logsigmoid, softplus, titans
 *   f32 loss        cross_entropy: bf16 logits are not cast, its kernels
 *                   read them in place and work in f32; the loss is f32,
 *                   the logits' grad bf16 (the bits a widening cast gave,
 *                   without the [N, C] f32 copy)
 *   norms           layernorm, rmsnorm, rmsnorm_gated, l2norm: the data's
 *                   dtype (statistics wide, in f32), w and b lowered with it
 *                   (ops/norm.c says why)
 *   product + loss  linear_cross_entropy: x and w to bf16 (the products),
 *                   its logits, lse and loss in f32 (the loss is f32 out)
 *   promote         add, sub, mul, div, swiglu, concat: bf16 with bf16 stays bf16,
 *                   bf16 with f32 goes to f32
 *   add + norm      add_rmsnorm, add_layernorm: as given; a bf16 sublayer
 *                   output beside the f32 residual stream is read as it is
 *                   (the kernels widen it), s and n keep the residual's f32
 *   as given        every other op (unary elementwise, shape ops, dropout,
 *                   embedding) keeps its input's dtype
 *
 * A conversion is a pr_cast node, so gradients reach f32 tensors through
 * cast's backward. A tensor is cast to a dtype once a step: a leaf that
 * requires grad (a parameter), and anything in the step arena (an
 * activation read by several ops that lower it, as a norm's output by
 * every projection of a layer). The copy is reused by every later op until
 * the step arena is reset or the optimizer moves the parameters
 * (pr_autocast_forget); its grad sums all uses before one cast back. The
 * step arena frees nothing before the reset, so a cast made per use would
 * keep a copy and its grad per use. Outside bf16 precision, and for f64
 * tensors, nothing is converted (gradcheck runs as before).
 */
#include <stdint.h>
#include <stdlib.h>

#include "ops/ops.h"

static bool autocasting(const pr_ctx *ctx) { return ctx->precision == PR_PREC_BF16; }

/* The cache is a list (src[i] cast to dst[i]) with a hash index over the
 * sources, so a lookup costs the same however many casts a step makes (a
 * per-token loop makes thousands): slot[h] is an entry's position + 1, 0 an
 * empty slot; linear probing, at most half the slots full. */
static size_t slot_of(const pr_tensor *t, int nslot)
{
    return (size_t)(((uintptr_t)t >> 4) * (uintptr_t)0x9E3779B97F4A7C15ull) & (size_t)(nslot - 1);
}

static void index_entry(pr_ctx *ctx, int i)
{
    const int nslot = ctx->cast_cache.nslot;
    size_t h = slot_of(ctx->cast_cache.src[i], nslot);
    while (ctx->cast_cache.slot[h]) h = (h + 1) & (size_t)(nslot - 1);
    ctx->cast_cache.slot[h] = i + 1;
}

static void reindex(pr_ctx *ctx, int nslot)
{
    int *slot = calloc((size_t)nslot, sizeof *slot);
    PR_CHECK(slot, "autocast: out of host memory (%d cache slots)", nslot);
    free(ctx->cast_cache.slot);
    ctx->cast_cache.slot = slot, ctx->cast_cache.nslot = nslot;
    for (int i = 0; i < ctx->cast_cache.n; i++) index_entry(ctx, i);
}

/* the cached cast of t to `want`, if it is still the one an op would record now */
static pr_tensor *cached(const pr_ctx *ctx, const pr_tensor *t, pr_dtype want, bool recorded)
{
    const int nslot = ctx->cast_cache.nslot;
    if (!nslot) return NULL;
    for (size_t h = slot_of(t, nslot); ctx->cast_cache.slot[h]; h = (h + 1) & (size_t)(nslot - 1)) {
        int i = ctx->cast_cache.slot[h] - 1;
        pr_tensor *d = ctx->cast_cache.dst[i];
        if (ctx->cast_cache.src[i] == t && d->dtype == want && d->requires_grad == recorded) return d;
    }
    return NULL;
}

static void remember(pr_ctx *ctx, pr_tensor *src, pr_tensor *dst)
{
    if (ctx->cast_cache.n == ctx->cast_cache.cap) {
        int cap = ctx->cast_cache.cap ? 2 * ctx->cast_cache.cap : 64;
        pr_tensor **s = realloc(ctx->cast_cache.src, sizeof *s * (size_t)cap);
        if (s) ctx->cast_cache.src = s;
        pr_tensor **d = realloc(ctx->cast_cache.dst, sizeof *d * (size_t)cap);
        if (d) ctx->cast_cache.dst = d;
        PR_CHECK(s && d, "autocast: out of host memory (%d cached casts)", cap);
        ctx->cast_cache.cap = cap;
    }
    ctx->cast_cache.src[ctx->cast_cache.n] = src;
    ctx->cast_cache.dst[ctx->cast_cache.n++] = dst;
    const int nslot = ctx->cast_cache.nslot;
    if (2 * ctx->cast_cache.n > nslot) reindex(ctx, nslot ? 2 * nslot : 256);
    else index_entry(ctx, ctx->cast_cache.n - 1);
}

pr_tensor *pr_autocast(pr_ctx *ctx, pr_tensor *t, pr_dtype want)
{
    if (!t || !autocasting(ctx) || t->dtype == want) return t;
    if ((t->dtype != PR_F32 && t->dtype != PR_BF16) || (want != PR_F32 && want != PR_BF16)) return t;
    /* a parameter, or a tensor of this step (gone, with the cache, at the
     * reset); not other tensors, whose contents their owner may rewrite */
    const bool param = t->tape_pos < 0 && !t->grad_base && t->requires_grad;
    if (!param && t->arena != ctx->step) return pr_cast(ctx, t, want);
    const bool recorded = ctx->grad_enabled && t->requires_grad;   /* as pr_op_apply decides */
    pr_tensor *c = cached(ctx, t, want, recorded);
    if (c) return c;
    c = pr_cast(ctx, t, want);
    remember(ctx, t, c);
    return c;
}

void pr_autocast_promote(pr_ctx *ctx, int n, pr_tensor **ts)
{
    if (!autocasting(ctx)) return;
    bool any_f32 = false, any_bf16 = false;
    for (int i = 0; i < n; i++) {
        any_f32 |= ts[i] && ts[i]->dtype == PR_F32;
        any_bf16 |= ts[i] && ts[i]->dtype == PR_BF16;
    }
    if (any_f32 && any_bf16)
        for (int i = 0; i < n; i++) ts[i] = pr_autocast(ctx, ts[i], PR_F32);
}

pr_dtype pr_autocast_loss_dtype(const pr_ctx *ctx, const pr_tensor *in)
{
    return autocasting(ctx) && in->dtype == PR_BF16 ? PR_F32 : in->dtype;
}

void pr_autocast_all(pr_ctx *ctx, int n, pr_tensor **ts, pr_dtype want)
{
    for (int i = 0; i < n; i++) ts[i] = pr_autocast(ctx, ts[i], want);
}
