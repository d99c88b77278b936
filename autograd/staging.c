/* autograd/staging.c: bf16 for every op, through the kernels it has.
 *
 * An op whose kernels for a device do not take bf16 (pr_op_info.bf16_native,
 * ops/ops.def's last two columns) still accepts bf16 tensors: pr_op_apply
 * gives its kernels a shadow node whose bf16 tensors are replaced by copies
 * in the staging dtype S (f64 on the CPU, f32 on CUDA), and rounds what they
 * produce back into the node's bf16 outputs once. On the CPU the f32 tensors
 * of a staged node go to f64 too, so its kernel sees one dtype and computes
 * in double, as every CPU kernel does; results are rounded once to the
 * tensor's own dtype.
 *
 *   forward:  x_S = x (exact), y_S = f(x_S), y = round(y_S)
 *   backward: dy_S = dy (exact), dx_S = 0, dx_S += f'(...) dy_S,
 *             dx = round(dx + dx_S)          (one rounding per pass)
 *
 * This is what a kernel that loads bf16, computes wide and stores bf16 does,
 * so the CPU gives the numerics a native CUDA bf16 kernel should match, and
 * CUDA gets a correct (slower) bf16 path for every op until it has native
 * ones. The shadow node keeps the forward's copies and saved tensors for the
 * backward (n->staged); all of it lives in the step arena. Conversions run
 * through the op table's `convert` (pr_cast's kernels), which rounds to
 * nearest even on both devices.
 */
#include <string.h>

#include "autograd/autograd.h"

static pr_dtype staging_dtype(pr_device dev) { return dev == PR_CPU ? PR_F64 : PR_F32; }

/* whether a tensor of dtype dt is replaced by an S copy in a staged node */
static bool restaged(pr_dtype dt, pr_dtype S) { return dt != S && (dt == PR_BF16 || dt == PR_F32); }

bool pr_node_needs_staging(const pr_node *n, pr_device dev)
{
    if (n->op->bf16_native[dev]) return false;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && n->in[i]->dtype == PR_BF16) return true;
    return false;
}

/* a tensor of t's shape in dtype S in the step arena (t's values when copy) */
static pr_tensor *wide_copy(pr_ctx *ctx, const pr_node *n, pr_tensor *t, pr_dtype S, bool copy)
{
    pr_tensor *w = pr_empty(ctx->step, S, t->device, t->ndim, t->shape);
    w->name = t->name;
    w->requires_grad = t->requires_grad;
    if (copy) n->op->convert(ctx, w, t, false);
    return w;
}

void pr_staged_forward(pr_ctx *ctx, pr_node *n, pr_op_fn fwd)
{
    const pr_device dev = n->out[0]->device;
    const pr_dtype S = staging_dtype(dev);
    pr_node *sh = pr_arena_alloc(ctx->step, sizeof *sh);
    *sh = *n;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && restaged(n->in[i]->dtype, S)) sh->in[i] = wide_copy(ctx, n, n->in[i], S, true);
    for (int i = 0; i < n->n_out; i++)
        if (restaged(n->out[i]->dtype, S)) sh->out[i] = wide_copy(ctx, n, n->out[i], S, false);
    for (int i = 0; i < n->n_saved; i++)   /* buffers a frontend sized in its inputs' dtype */
        if (n->saved[i] && restaged(n->saved[i]->dtype, S)) sh->saved[i] = wide_copy(ctx, n, n->saved[i], S, false);
    fwd(ctx, sh);
    for (int i = 0; i < n->n_out; i++)
        if (sh->out[i] != n->out[i]) n->op->convert(ctx, n->out[i], sh->out[i], false);
    n->n_saved = sh->n_saved;   /* what the forward kept, visible on the node as usual */
    memcpy(n->saved, sh->saved, sizeof n->saved);
    n->staged = sh;
}

void pr_staged_backward(pr_ctx *ctx, pr_node *n, pr_op_fn bwd)
{
    pr_node *sh = n->staged;
    const pr_dtype S = staging_dtype(n->out[0]->device);
    for (int i = 0; i < n->n_out; i++) {
        if (sh->out[i] == n->out[i]) continue;
        sh->out[i]->grad = pr_empty(ctx->step, S, n->out[i]->device, n->out[i]->ndim, n->out[i]->shape);
        n->op->convert(ctx, sh->out[i]->grad, n->out[i]->grad, false);
    }
    for (int i = 0; i < n->n_in; i++) {   /* fresh zeros each pass: the kernel adds into them */
        if (!n->in[i] || sh->in[i] == n->in[i]) continue;
        sh->in[i]->requires_grad = n->in[i]->requires_grad;
        sh->in[i]->grad = n->in[i]->requires_grad ? pr_zeros_like(ctx->step, sh->in[i]) : NULL;
    }
    bwd(ctx, sh);
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && sh->in[i] != n->in[i] && sh->in[i]->grad) n->op->convert(ctx, n->in[i]->grad, sh->in[i]->grad, true);
}
