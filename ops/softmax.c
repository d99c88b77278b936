/* ops/softmax.c: softmax and log_softmax over the last dim.
 *
 * x [..., D] -> y of x's shape. Both subtract the row max before exp, so no
 * exp overflows, and sum in double. The backwards need only y (the output).
 */
#include "ops/ops.h"
#include <math.h>

static pr_tensor *softmax_op(pr_ctx *ctx, pr_op_id id, const char *op, pr_tensor *x)
{
    PR_CHECK(x, "%s: NULL input", op);
    x = pr_autocast(ctx, x, PR_F32);
    pr_check_float(op, x, "x");
    PR_CHECK(x->ndim >= 1 && x->shape[x->ndim - 1] > 0, "%s: x needs a non-empty last dim", op);
    pr_node n = pr_node_init(id, 1, &x);
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim, x->shape);
    return pr_op_apply(ctx, &n);
}

pr_tensor *pr_softmax(pr_ctx *ctx, pr_tensor *x) { return softmax_op(ctx, PR_OP_softmax, "softmax", x); }
pr_tensor *pr_log_softmax(pr_ctx *ctx, pr_tensor *x) { return softmax_op(ctx, PR_OP_log_softmax, "log_softmax", x); }

/* y = softmax(x), or x - logsumexp(x) when logp, row by row */
static void softmax_forward(pr_node *n, bool logp)
{
    pr_tensor *x = n->in[0], *y = n->out[0];
    int64_t D = x->shape[x->ndim - 1], R = x->numel / D;
    PR_FLOAT_SWITCH(x->dtype, T, {
        for (int64_t r = 0; r < R; r++) {
            const T *xr = (const T *)x->data + r * D;
            T *yr = (T *)y->data + r * D;
            double mx = xr[0], sum = 0.0;
            for (int64_t j = 1; j < D; j++) mx = xr[j] > mx ? xr[j] : mx;
            for (int64_t j = 0; j < D; j++) sum += exp(xr[j] - mx);
            double lse = mx + log(sum);
            for (int64_t j = 0; j < D; j++) yr[j] = (T)(logp ? xr[j] - lse : exp(xr[j] - mx) / sum);
        }
    });
}

void pr_softmax_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; softmax_forward(n, false); }
void pr_log_softmax_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; softmax_forward(n, true); }

/* softmax: y_i = e^{x_i} / sum_k e^{x_k}, so dy_i/dx_j = y_i (delta_ij - y_j) and
 *   dx_j = sum_i g_i y_i (delta_ij - y_j) = y_j (g_j - sum_i g_i y_i).
 * log_softmax: y_i = x_i - lse(x), dlse/dx_j = softmax_j = e^{y_j}, so
 *   dx_j = g_j - e^{y_j} sum_i g_i. */
static void softmax_backward(pr_node *n, bool log_form)
{
    pr_tensor *y = n->out[0], *gx = pr_in_grad(n, 0);
    if (!gx) return;
    int64_t D = y->shape[y->ndim - 1], R = y->numel / D;
    PR_FLOAT_SWITCH(y->dtype, T, {
        for (int64_t r = 0; r < R; r++) {
            const T *yr = (const T *)y->data + r * D, *g = (const T *)y->grad->data + r * D;
            T *dx = (T *)gx->data + r * D;
            double s = 0.0;   /* sum g (log form), sum g y */
            for (int64_t j = 0; j < D; j++) s += log_form ? (double)g[j] : (double)g[j] * yr[j];
            for (int64_t j = 0; j < D; j++) dx[j] += (T)(log_form ? g[j] - exp(yr[j]) * s : yr[j] * (g[j] - s));
        }
    });
}

void pr_softmax_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; softmax_backward(n, false); }
void pr_log_softmax_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; softmax_backward(n, true); }

/* ---- examples: x [3,4,7] in [-3, 3] ---- */
static pr_tensor *softmax_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_softmax(ctx, in[0]);
}
static pr_tensor *log_softmax_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_log_softmax(ctx, in[0]);
}

void pr_softmax_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 4, 7), -3.0, 3.0);
    ex->apply = softmax_apply;
}
void pr_log_softmax_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 4, 7), -3.0, 3.0);
    ex->apply = log_softmax_apply;
}
