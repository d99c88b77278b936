/* ops/dropout.c: inverted dropout with a counter-based mask.
 *
 * Element i is kept when pr_philox_uniform(seed, stream, offset + i) >= p and
 * then scaled by 1/(1-p). The node stores (seed, stream, offset) in iarg, so
 * the mask is a pure function of the node: the backward (and a CUDA kernel)
 * recomputes it instead of saving it, and it is the same on every device.
 * Each call takes numel positions from ctx->rng. Identity (no tape entry)
 * when !ctx->training or p == 0.
 */
#include "ops/ops.h"

pr_tensor *pr_dropout(pr_ctx *ctx, pr_tensor *x, double p)
{
    pr_check_float("dropout", x, "x");
    PR_CHECK(p >= 0 && p < 1, "dropout: p = %g outside [0, 1)", p);
    if (!ctx->training || p == 0) return x;
    pr_node n = pr_node_init(PR_OP_dropout, 1, (pr_tensor *[]){x});
    n.farg[0] = p;
    n.iarg[0] = (int64_t)ctx->rng.seed;
    n.iarg[1] = ctx->rng.stream;
    n.iarg[2] = (int64_t)ctx->rng.offset;
    ctx->rng.offset += (uint64_t)x->numel;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim, x->shape);
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

/* dst (=|+=) keep_i * src / (1-p): the forward on x, the backward on dout (the
 * op is linear in x with the diagonal keep/(1-p), which is its own transpose) */
static void dropout_apply_mask(const pr_node *n, void *dst, const void *src, int64_t numel, pr_dtype dt, bool acc)
{
    double p = n->farg[0], scale = 1.0 / (1.0 - p);
    uint64_t seed = (uint64_t)n->iarg[0], offset = (uint64_t)n->iarg[2];
    uint32_t stream = (uint32_t)n->iarg[1];
    PR_FLOAT_SWITCH(dt, T, {
        T *y = dst;
        const T *x = src;
        for (int64_t i = 0; i < numel; i++) {
            T v = pr_philox_uniform(seed, stream, offset + (uint64_t)i) >= p ? x[i] * (T)scale : 0;
            y[i] = acc ? y[i] + v : v;
        }
    });
}

void pr_dropout_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0];
    dropout_apply_mask(n, n->out[0]->data, x->data, x->numel, x->dtype, false);
}

void pr_dropout_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *dx = pr_in_grad(n, 0);
    if (dx) dropout_apply_mask(n, dx->data, n->out[0]->grad->data, dx->numel, dx->dtype, true);
}

/* gradcheck re-runs the forward many times and needs the same mask each time:
 * apply draws from a fixed rng (seed, stream, offset in ex->iarg) in training
 * mode, and leaves ctx's rng and mode as it found them */
static pr_tensor *dropout_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_rng rng = ctx->rng;
    bool training = ctx->training;
    ctx->rng = (pr_rng){(uint64_t)ex->iarg[0], (uint32_t)ex->iarg[1], (uint64_t)ex->iarg[2]};
    ctx->training = true;
    pr_tensor *y = pr_dropout(ctx, in[0], ex->farg[0]);
    ctx->rng = rng;
    ctx->training = training;
    return y;
}

/* x [5, 13], p = 0.3 */
void pr_dropout_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(5, 13), -1, 1);
    ex->iarg[0] = 1234;
    ex->iarg[1] = 5;
    ex->iarg[2] = 17;
    ex->farg[0] = 0.3;
    ex->in[0]->name = "x";
    ex->apply = dropout_apply;
}
