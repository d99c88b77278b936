/* ops/autocast.c: bf16 autocast, the dtype policy the op frontends apply
 * when ctx->precision is PR_PREC_BF16 (torch.autocast's, in prism's ops).
 *
 *   lower to bf16   matmul, conv1d, attention, selective_scan; the data
 *                   inputs of recurrence and the TTT ops (their decays,
 *                   states and inner weights stay f32, as those ops take)
 *   f32             softmax, log_softmax, the losses, the norms, sum and
 *                   mean, exp, log, logsigmoid, softplus, titans
 *   product + loss  linear_cross_entropy: x and w to bf16 (the products),
 *                   its logits, lse and loss in f32 (the loss is f32 out)
 *   promote         add, sub, mul, div, swiglu, concat: bf16 with bf16 stays bf16,
 *                   bf16 with f32 goes to f32
 *   add + norm      add_rmsnorm, add_layernorm: the sum promotes as add (it is
 *                   the residual stream), the norm is f32; x and y both bf16
 *                   run as add then the norm (ops/norm.c says why)
 *   as given        every other op (unary elementwise, shape ops, dropout,
 *                   embedding) keeps its input's dtype
 *
 * A conversion is a pr_cast node, so gradients reach f32 tensors through
 * cast's backward. A leaf that requires grad (a parameter) is cast once and
 * the copy reused by every op that lowers it until the step arena is reset
 * or the optimizer moves the parameters (pr_autocast_forget): its bf16 grad
 * then sums all uses before one cast back to f32. Outside bf16 precision,
 * and for f64 tensors, nothing is converted (gradcheck runs as before).
 */
#include <stdlib.h>

#include "ops/ops.h"

static bool autocasting(const pr_ctx *ctx) { return ctx->precision == PR_PREC_BF16; }

/* the cached cast of leaf t, if it is still the one an op would record now */
static pr_tensor *cached(const pr_ctx *ctx, const pr_tensor *t, bool recorded)
{
    for (int i = 0; i < ctx->cast_cache.n; i++)
        if (ctx->cast_cache.src[i] == t && ctx->cast_cache.dst[i]->requires_grad == recorded)
            return ctx->cast_cache.dst[i];
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
}

pr_tensor *pr_autocast(pr_ctx *ctx, pr_tensor *t, pr_dtype want)
{
    if (!t || !autocasting(ctx) || t->dtype == want) return t;
    if ((t->dtype != PR_F32 && t->dtype != PR_BF16) || (want != PR_F32 && want != PR_BF16)) return t;
    /* leaves only: anything an op made may be rewritten by the next step's ops */
    const bool leaf = t->tape_pos < 0 && !t->grad_base && t->requires_grad && t->arena != ctx->step;
    if (!leaf) return pr_cast(ctx, t, want);
    const bool recorded = ctx->grad_enabled;   /* t requires grad: the cast is recorded exactly then */
    pr_tensor *c = cached(ctx, t, recorded);
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

void pr_autocast_all(pr_ctx *ctx, int n, pr_tensor **ts, pr_dtype want)
{
    for (int i = 0; i < n; i++) ts[i] = pr_autocast(ctx, ts[i], want);
}
