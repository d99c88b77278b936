/* autograd/autograd.c: the context, op dispatch, the tape and backward.
 *
 * pr_op_apply is the one place an op meets a device: it picks the forward
 * for the inputs' device, decides whether the node is recorded (grad mode on
 * and some input requires grad; the forward sees it in n->recording and
 * saves residuals only then), runs it, and appends it to the tape if so. pr_backward walks the tape
 * from the loss's node down to the first, calling each node's backward for
 * the same device. Gradients accumulate, so a tensor used twice gets both
 * contributions. An op given bf16 tensors that its kernels do not take runs
 * on wider copies of them (autograd/staging.c) in both passes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "autograd/profile.h"

pr_ctx *pr_ctx_new(uint64_t seed)
{
    pr_ctx *ctx = calloc(1, sizeof *ctx);
    PR_CHECK(ctx, "context: out of host memory");
    ctx->step = pr_arena_new("step", 0);
    ctx->grads = pr_arena_new("grads", 0);
    ctx->grad_enabled = true;
    ctx->training = true;
    ctx->rng = pr_rng_init(seed, 1);
    return ctx;
}

void pr_ctx_free(pr_ctx *ctx)
{
    if (!ctx) return;
    pr_arena_free(ctx->step);
    pr_arena_free(ctx->grads);
    free(ctx->tape);
    free(ctx->cast_cache.src);
    free(ctx->cast_cache.dst);
    free(ctx->cast_cache.slot);
    pr_cuda_ctx_release(ctx->cuda);
    free(ctx);
}

void pr_step_reset(pr_ctx *ctx)
{
    pr_device_sync(ctx->cuda ? PR_CUDA : PR_CPU); /* kernels may still read step memory */
    pr_arena_reset(ctx->step);
    ctx->n_tape = 0;
    ctx->scope = NULL;   /* it lived in the step arena */
    pr_autocast_forget(ctx);   /* the casts lived there too */
}

void pr_autocast_forget(pr_ctx *ctx)
{
    ctx->cast_cache.n = 0;
    if (ctx->cast_cache.slot) memset(ctx->cast_cache.slot, 0, sizeof(int) * (size_t)ctx->cast_cache.nslot);
}

/* the fields alone: the cached casts stay valid for after the pause */
pr_precision_state pr_autocast_pause(pr_ctx *ctx)
{
    pr_precision_state s = {ctx->precision, ctx->matmul_tf32};
    ctx->precision = PR_PREC_F32, ctx->matmul_tf32 = 0;
    return s;
}

void pr_autocast_resume(pr_ctx *ctx, pr_precision_state s)
{
    ctx->precision = s.precision, ctx->matmul_tf32 = s.matmul_tf32;
}

static const char *const precision_names[] = {"f32", "tf32", "bf16"};

const char *pr_precision_name(pr_precision p)
{
    return (unsigned)p < sizeof precision_names / sizeof precision_names[0] ? precision_names[p] : "?";
}

int pr_precision_from_name(const char *name)
{
    for (int i = 0; i < (int)(sizeof precision_names / sizeof precision_names[0]); i++)
        if (strcmp(name, precision_names[i]) == 0) return i;
    return -1;
}

void pr_ctx_set_precision(pr_ctx *ctx, pr_precision p)
{
    PR_CHECK((unsigned)p <= PR_PREC_BF16, "context: unknown precision %d", (int)p);
    ctx->precision = p;
    /* bf16 values are exact in TF32, so the f32 kernels that stage bf16 lose nothing to TF32 products */
    ctx->matmul_tf32 = p != PR_PREC_F32;
    pr_autocast_forget(ctx);
}

void pr_ctx_set_scope(pr_ctx *ctx, const char *fmt, ...)
{
    if (!fmt) {
        ctx->scope = NULL;
        return;
    }
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *s = pr_arena_alloc(ctx->step, strlen(buf) + 1);
    memcpy(s, buf, strlen(buf) + 1);
    ctx->scope = s;
}

bool pr_all_finite(const pr_tensor *t)
{
    if (!pr_dtype_is_float(t->dtype) || t->numel == 0) return true;
    double *v = malloc(sizeof(double) * (size_t)t->numel);
    PR_CHECK(v, "finite check: out of host memory");
    pr_to_host_f64(t, v);
    bool ok = true;
    for (int64_t i = 0; i < t->numel && ok; i++) ok = isfinite(v[i]);
    free(v);
    return ok;
}

/* the NaN trap: remember the first op whose tensors went non-finite */
static void trap_nonfinite(pr_ctx *ctx, const pr_node *n, pr_tensor *const *ts, int count, const char *pass)
{
    if (!ctx->check_finite || ctx->nonfinite[0]) return;
    for (int i = 0; i < count; i++) {
        const pr_tensor *t = pass[0] == 'f' ? ts[i] : (ts[i] ? ts[i]->grad : NULL);
        if (t && !pr_all_finite(t)) {
            snprintf(ctx->nonfinite, sizeof ctx->nonfinite, "%s %s in %s", n->op->name, pass,
                     n->scope ? n->scope : "the model's top level");
            return;
        }
    }
}

bool pr_set_grad_enabled(pr_ctx *ctx, bool on)
{
    bool prev = ctx->grad_enabled;
    ctx->grad_enabled = on;
    return prev;
}

void pr_requires_grad_(pr_tensor *t, bool on)
{
    PR_CHECK(!on || pr_dtype_has_grad(t->dtype), "requires_grad: %s tensor %s cannot require grad",
             pr_dtype_name(t->dtype), t->name ? t->name : "");
    t->requires_grad = on;
}

pr_tensor *pr_op_output(pr_ctx *ctx, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape)
{
    return pr_empty(ctx->step, dt, dev, ndim, shape);
}

static pr_device node_device(const pr_node *n)
{
    pr_device dev = PR_CPU;
    bool seen = false;
    for (int i = 0; i < n->n_in; i++) {
        if (!n->in[i]) continue;
        if (seen && n->in[i]->device != dev)
            pr_fatal("%s: inputs on different devices (input %d is on %s, an earlier one on %s)", n->op->name,
                     i, pr_device_name(n->in[i]->device), pr_device_name(dev));
        dev = n->in[i]->device;
        seen = true;
    }
    return dev;
}

static void push_node(pr_ctx *ctx, const pr_node *n)
{
    if (ctx->n_tape == ctx->cap_tape) {
        int cap = ctx->cap_tape ? 2 * ctx->cap_tape : 256;
        pr_node *t = realloc(ctx->tape, sizeof *t * (size_t)cap);
        PR_CHECK(t, "tape: out of host memory (%d nodes)", cap);
        ctx->tape = t;
        ctx->cap_tape = cap;
    }
    ctx->tape[ctx->n_tape++] = *n;
}

bool pr_op_will_record(const pr_ctx *ctx, const pr_node *n)
{
    bool record = false;
    if (ctx->grad_enabled)
        for (int i = 0; i < n->n_in; i++) record |= n->in[i] && n->in[i]->requires_grad;
    return record;
}

pr_tensor *pr_op_apply(pr_ctx *ctx, pr_node *n)
{
    pr_device dev = node_device(n);
    pr_op_fn fwd = dev == PR_CUDA ? n->op->forward_cuda : n->op->forward_cpu;
    PR_CHECK(fwd, "%s: no %s forward", n->op->name, dev == PR_CUDA ? "CUDA" : "CPU");
    n->recording = pr_op_will_record(ctx, n);   /* before the forward: it saves only when recorded */
    n->scope = ctx->scope;
    n->staged = NULL;
    double t0 = ctx->profile ? pr_profile_clock(dev) : 0;
    if (pr_node_needs_staging(n, dev)) pr_staged_forward(ctx, n, fwd);
    else fwd(ctx, n);
    if (ctx->profile) pr_profile_time(ctx->profile, n->op->name, n->scope, 0, pr_profile_clock(dev) - t0);
#ifdef PRISM_HAVE_CUDA
    if (dev == PR_CUDA) pr_cuda_check_last(n->op->name); /* a bad launch is named by its op */
#endif
    trap_nonfinite(ctx, n, n->out, n->n_out, "forward");
    if (n->recording) {
        for (int i = 0; i < n->n_out; i++) {
            n->out[i]->requires_grad = pr_dtype_has_grad(n->out[i]->dtype);
            n->out[i]->tape_pos = ctx->n_tape;
        }
        push_node(ctx, n);
    }
    return n->out[0];
}

pr_tensor *pr_grad_of(pr_ctx *ctx, pr_tensor *t)
{
    if (!t->grad && t->grad_base) {   /* a reshape: a view of its base's gradient */
        pr_arena *a = t->arena == ctx->step ? ctx->step : ctx->grads;
        t->grad = pr_view(a, pr_grad_of(ctx, t->grad_base), t->ndim, t->shape);
    }
    if (!t->grad) {
        pr_arena *a = t->arena == ctx->step ? ctx->step : ctx->grads;
        t->grad = pr_zeros(a, t->dtype, t->device, t->ndim, t->shape);
    }
    if (pr_grad_claim(t->grad)) pr_zero_(t->grad);
    return t->grad;
}

void pr_zero_grads(pr_tensor *const *ts, int n)
{
    for (int i = 0; i < n; i++)
        if (ts[i]->grad) pr_zero_(ts[i]->grad);
}

/* t is about to receive gradient in this pass: an intermediate (made by a
 * recorded op) starts the pass from zero, so a grad left by an earlier pass
 * over the same tape is not counted again; a leaf keeps accumulating. */
static void start_grad(pr_ctx *ctx, pr_tensor *t, unsigned pass)
{
    if (t->grad_base) {   /* the base starts the pass; the view shares its buffer */
        start_grad(ctx, t->grad_base, pass);
        pr_grad_of(ctx, t);
        t->backward_pass = pass;
        return;
    }
    bool fresh = t->grad == NULL;
    if (fresh && t->arena == ctx->step && t->device == PR_CPU) {   /* left unwritten: see autograd.h */
        t->grad = pr_empty(ctx->step, t->dtype, t->device, t->ndim, t->shape);
        t->grad->unwritten = true;
        t->backward_pass = pass;
        return;
    }
    pr_tensor *g = pr_grad_of(ctx, t);
    if (!fresh && t->tape_pos >= 0 && t->backward_pass != pass) pr_zero_(g);
    t->backward_pass = pass;
}

/* zeros in n's input gradients that are still unwritten */
static void zero_unwritten(pr_node *n)
{
    for (int i = 0; i < n->n_in; i++) {
        pr_tensor *g = n->in[i] ? n->in[i]->grad : NULL;
        if (g && pr_grad_claim(g)) pr_zero_(g);
    }
}

/* Walk the tape back from the last node that made one of the seeded outputs.
 * A node runs when one of its outputs was reached in this pass (marked with
 * the pass number), so nodes after the outputs, nodes they do not depend on,
 * and grads left by an earlier backward on the same tape contribute nothing. */
static void run_backward(pr_ctx *ctx, unsigned pass, int start)
{
    for (int p = start; p >= 0; p--) {
        pr_node *n = &ctx->tape[p];
        bool reached = false;
        for (int i = 0; i < n->n_out; i++) reached |= n->out[i]->backward_pass == pass;
        if (!reached) continue;
        for (int i = 0; i < n->n_out; i++)
            if (n->out[i]->backward_pass != pass) { /* an output this pass did not reach: no stale grad */
                pr_zero_(pr_grad_of(ctx, n->out[i]));
                n->out[i]->backward_pass = pass;
            }
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] && n->in[i]->requires_grad) start_grad(ctx, n->in[i], pass);
        pr_device dev = n->out[0]->device;
        pr_op_fn bwd = dev == PR_CUDA ? n->op->backward_cuda : n->op->backward_cpu;
        PR_CHECK(bwd, "%s: no %s backward", n->op->name, dev == PR_CUDA ? "CUDA" : "CPU");
        if (n->staged || dev != PR_CPU || !pr_op_fills_unwritten(n->op)) zero_unwritten(n);
        double t0 = ctx->profile ? pr_profile_clock(dev) : 0;
        if (n->staged) pr_staged_backward(ctx, n, bwd);
        else bwd(ctx, n);
        zero_unwritten(n);   /* gradients the kernel had nothing to add to */
        if (ctx->profile) pr_profile_time(ctx->profile, n->op->name, n->scope, 1, pr_profile_clock(dev) - t0);
#ifdef PRISM_HAVE_CUDA
        if (dev == PR_CUDA) pr_cuda_check_last(n->op->name);
#endif
        trap_nonfinite(ctx, n, n->in, n->n_in, "backward");
        if (ctx->on_node_backward) ctx->on_node_backward(ctx->on_node_backward_user, ctx, p);
    }
}

void pr_backward_many(pr_ctx *ctx, int n, pr_tensor *const *outs, const pr_tensor *const *grads)
{
    unsigned pass = ++ctx->backward_pass;
    int start = -1;
    for (int i = 0; i < n; i++) {
        pr_tensor *out = outs[i];
        PR_CHECK(out->requires_grad, "backward: output %d does not require grad (no input required grad, "
                                     "or grad mode was off)", i);
        PR_CHECK(out->tape_pos >= 0 && out->tape_pos < ctx->n_tape, "backward: output %d is not on this "
                                                                    "context's tape (reset since?)", i);
        PR_CHECK(out->numel == grads[i]->numel, "backward: grad %d has %lld elements, its output %lld", i,
                 (long long)grads[i]->numel, (long long)out->numel);
        pr_tensor *base = out->grad_base ? out->grad_base : out;   /* a reshape seeds its base */
        PR_CHECK(base->backward_pass != pass, "backward: output %d is given twice (or a reshape of another)", i);
        pr_copy_(pr_grad_of(ctx, out), grads[i]);   /* converts dtype and device */
        out->backward_pass = base->backward_pass = pass;
        if (out->tape_pos > start) start = out->tape_pos;
    }
    run_backward(ctx, pass, start);
}

void pr_backward_with(pr_ctx *ctx, pr_tensor *out, const pr_tensor *grad_out)
{
    pr_backward_many(ctx, 1, &out, &grad_out);
}

void pr_backward(pr_ctx *ctx, pr_tensor *loss)
{
    PR_CHECK(loss->numel == 1, "backward: the loss has %lld elements; use pr_backward_with for a "
                               "non-scalar output", (long long)loss->numel);
    pr_tensor *one = pr_full(ctx->step, loss->dtype, loss->device, loss->ndim, loss->shape, 1.0);
    pr_backward_with(ctx, loss, one);
}

double pr_norm2(const pr_tensor *t)
{
    double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1)), s = 0;
    PR_CHECK(v, "norm: out of host memory");
    pr_to_host_f64(t, v);
    for (int64_t i = 0; i < t->numel; i++) s += v[i] * v[i];
    free(v);
    return sqrt(s);
}
