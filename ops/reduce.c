/* ops/reduce.c: sum and mean over the last dim, and over everything.
 *
 * sum, mean: x [..., N] -> [...] (a 1-D x gives a 0-dim scalar).
 * sum_all, mean_all: x any shape -> 0-dim scalar (ndim 0, numel 1).
 * Sums accumulate in double, for f32 too. The backward spreads the output's
 * grad back over the reduced elements (divided by the count for the means).
 */
#include "ops/ops.h"

static pr_tensor *reduce_last(pr_ctx *ctx, pr_op_id id, const char *op, pr_tensor *x)
{
    PR_CHECK(x, "%s: NULL input", op);
    x = pr_autocast(ctx, x, PR_F32);   /* sums in f32 */
    pr_check_float(op, x, "x");
    PR_CHECK(x->ndim >= 1, "%s: x must have at least 1 dim, got a 0-dim tensor", op);
    PR_CHECK(x->shape[x->ndim - 1] > 0, "%s: last dim of x is empty", op);
    pr_node n = pr_node_init(id, 1, &x);
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim - 1, x->shape);
    return pr_op_apply(ctx, &n);
}

static pr_tensor *reduce_all(pr_ctx *ctx, pr_op_id id, const char *op, pr_tensor *x)
{
    PR_CHECK(x, "%s: NULL input", op);
    x = pr_autocast(ctx, x, PR_F32);   /* sums in f32 */
    pr_check_float(op, x, "x");
    PR_CHECK(x->numel > 0, "%s: x is empty", op);
    pr_node n = pr_node_init(id, 1, &x);
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, 0, x->shape);
    return pr_op_apply(ctx, &n);
}

pr_tensor *pr_sum(pr_ctx *ctx, pr_tensor *x) { return reduce_last(ctx, PR_OP_sum, "sum", x); }
pr_tensor *pr_mean(pr_ctx *ctx, pr_tensor *x) { return reduce_last(ctx, PR_OP_mean, "mean", x); }
pr_tensor *pr_sum_all(pr_ctx *ctx, pr_tensor *x) { return reduce_all(ctx, PR_OP_sum_all, "sum_all", x); }
pr_tensor *pr_mean_all(pr_ctx *ctx, pr_tensor *x) { return reduce_all(ctx, PR_OP_mean_all, "mean_all", x); }

/* out[r] = sum_j x[r, j] (divided by N for a mean) over R rows of N */
static void rows_forward(pr_node *n, int64_t N, bool mean)
{
    pr_tensor *x = n->in[0], *out = n->out[0];
    int64_t R = x->numel / N;
    double scale = mean ? 1.0 / (double)N : 1.0;
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *px = x->data;
        T *po = out->data;
        for (int64_t r = 0; r < R; r++) {
            double acc = 0.0;
            for (int64_t j = 0; j < N; j++) acc += px[r * N + j];
            po[r] = (T)(acc * scale);
        }
    });
}

/* dx[r, j] += dout[r] (divided by N for a mean) */
static void rows_backward(pr_node *n, int64_t N, bool mean)
{
    pr_tensor *x = n->in[0], *gx = pr_in_grad(n, 0);
    if (!gx) return;
    int64_t R = x->numel / N;
    double scale = mean ? 1.0 / (double)N : 1.0;
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *g = n->out[0]->grad->data;
        T *dx = gx->data;
        for (int64_t r = 0; r < R; r++) {
            T gr = (T)(g[r] * scale);
            for (int64_t j = 0; j < N; j++) dx[r * N + j] += gr;
        }
    });
}

static int64_t last_dim(const pr_node *n) { return n->in[0]->shape[n->in[0]->ndim - 1]; }

void pr_sum_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; rows_forward(n, last_dim(n), false); }
void pr_sum_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; rows_backward(n, last_dim(n), false); }
void pr_mean_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; rows_forward(n, last_dim(n), true); }
void pr_mean_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; rows_backward(n, last_dim(n), true); }
void pr_sum_all_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; rows_forward(n, n->in[0]->numel, false); }
void pr_sum_all_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; rows_backward(n, n->in[0]->numel, false); }
void pr_mean_all_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; rows_forward(n, n->in[0]->numel, true); }
void pr_mean_all_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; rows_backward(n, n->in[0]->numel, true); }

/* ---- examples: x [3,5,7] ---- */
static pr_tensor *sum_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_sum(ctx, in[0]);
}
static pr_tensor *mean_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_mean(ctx, in[0]);
}
static pr_tensor *sum_all_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_sum_all(ctx, in[0]);
}
static pr_tensor *mean_all_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_mean_all(ctx, in[0]);
}

static void reduce_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex,
                           pr_tensor *(*apply)(pr_ctx *, pr_tensor *const *, const pr_example *))
{
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 5, 7), -1.0, 1.0);
    ex->apply = apply;
}

void pr_sum_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    reduce_example(ctx, r, dt, ex, sum_apply);
}
void pr_mean_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    reduce_example(ctx, r, dt, ex, mean_apply);
}
void pr_sum_all_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    reduce_example(ctx, r, dt, ex, sum_all_apply);
}
void pr_mean_all_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    reduce_example(ctx, r, dt, ex, mean_all_apply);
}
