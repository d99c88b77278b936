/* ops/cast.c: pr_cast, a differentiable dtype change (CPU side and the op's
 * public function).
 *
 * Pairs: f32 <-> bf16 (CPU and CUDA), f32 <-> f64 (CPU), and a dtype to
 * itself (a copy, so the output never aliases x and the example can
 * check the node in f64). Narrowing rounds to nearest, ties to even, once
 * (pr_set's rounding). The backward casts the grad back to x's dtype and adds
 * it: dx = round_x(dx + dy), computed in double on the CPU.
 * Node: in[0] = x, out[0] = y (the target dtype), iarg[0] = the target dtype.
 */
#include <string.h>

#include "ops/ops.h"

/* whether pr_cast converts between a and b on dev */
static bool cast_supported(pr_dtype a, pr_dtype b, pr_device dev)
{
    if (!pr_dtype_has_grad(a) || !pr_dtype_has_grad(b)) return false;
    if (dev == PR_CUDA && (a == PR_F64 || b == PR_F64)) return false;   /* the CUDA kernels are f32/bf16 */
    if (a == b) return true;
    const bool f32_bf16 = (a == PR_F32 && b == PR_BF16) || (a == PR_BF16 && b == PR_F32);
    const bool f32_f64 = (a == PR_F32 && b == PR_F64) || (a == PR_F64 && b == PR_F32);
    return f32_bf16 || (f32_f64 && dev == PR_CPU);
}

pr_tensor *pr_cast(pr_ctx *ctx, pr_tensor *x, pr_dtype dtype)
{
    PR_CHECK(x, "cast: x is missing");
    PR_CHECK(cast_supported(x->dtype, dtype, x->device),
             "cast: %s -> %s on %s is not supported (f32 <-> bf16 on cpu and cuda, f32 <-> f64 on cpu)",
             pr_dtype_name(x->dtype), pr_dtype_name(dtype), pr_device_name(x->device));
    pr_node n = pr_node_init(PR_OP_cast, 1, &x);
    n.iarg[0] = dtype;
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, dtype, x->device, x->ndim, x->shape);
    return pr_op_apply(ctx, &n);
}

/* dst = src (acc false) or dst = dst + src, each element rounded once to dst's dtype */
static void cast_into(pr_tensor *dst, const pr_tensor *src, bool acc)
{
    for (int64_t i = 0; i < dst->numel; i++) pr_set(dst, i, (acc ? pr_get(dst, i) : 0.0) + pr_get(src, i));
}

void pr_cast_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    cast_into(n->out[0], n->in[0], false);
}

void pr_cast_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *dx = pr_in_grad(n, 0);
    if (dx) cast_into(dx, n->out[0]->grad, true);
}

void pr_cast_convert(pr_ctx *ctx, pr_tensor *dst, pr_tensor *src, bool acc)
{
    const pr_op_info *cast = pr_op(PR_OP_cast);
    const bool cuda = dst->device == PR_CUDA;
    pr_node c = {.op = cast, .n_in = 1, .n_out = 1};
    if (!acc) {
        c.in[0] = src, c.out[0] = dst, c.iarg[0] = dst->dtype;
        (cuda ? cast->forward_cuda : cast->forward_cpu)(ctx, &c);
        return;
    }
    pr_tensor x = *dst, y = *src;   /* headers only: the backward adds y.grad into x.grad */
    x.requires_grad = true, x.grad = dst;
    y.grad = src;
    c.in[0] = &x, c.out[0] = &y;
    (cuda ? cast->backward_cuda : cast->backward_cpu)(ctx, &c);
}

static pr_tensor *example_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_cast(ctx, in[0], in[0]->dtype);
}

/* a copy in the example's own dtype: gradcheck then checks the node's
 * forward and its accumulating backward in f64 (the narrowing casts have
 * their own tests: their rounding defeats finite differences) */
void pr_cast_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    memset(ex, 0, sizeof *ex);
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 5), -2, 2);
    ex->apply = example_apply;
}
