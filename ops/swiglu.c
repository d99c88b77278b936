/* ops/swiglu.c: the SwiGLU product y = silu(gate) * up, one fused op (the
 * MLP's elementwise step, models/model.c), CPU forward and backward.
 *
 * Fused, it reads gate and up once and writes y once, where silu then mul
 * write and reread the silu output (and keep it for the backward). Values
 * are computed in double and stored in the tensor's dtype, so f32 is the
 * f64 result rounded once. Node: in = {gate, up} (one shape), out[0] = y.
 * With s = sigmoid(a), silu(a) = a s and silu'(a) = s (1 + a (1 - s)):
 *   d gate += g up s (1 + a (1 - s)),   d up += g a s.
 */
#include <math.h>

#include "ops/cpu_kit.h"

pr_tensor *pr_swiglu(pr_ctx *ctx, pr_tensor *gate, pr_tensor *up)
{
    PR_CHECK(gate && up, "swiglu: NULL input");
    pr_tensor *gu[2] = {gate, up};
    pr_autocast_promote(ctx, 2, gu);   /* bf16 with f32: f32 */
    gate = gu[0], up = gu[1];
    pr_check_float("swiglu", gate, "gate");
    pr_check_same_kind("swiglu", gate, up);
    pr_check_same_shape("swiglu", gate, up);
    pr_node n = pr_node_init(PR_OP_swiglu, 2, (pr_tensor *[]){gate, up});
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, gate->dtype, gate->device, gate->ndim, gate->shape);
    return pr_op_apply(ctx, &n);
}

void pr_swiglu_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    int64_t N = n->out[0]->numel;
    PR_FLOAT_SWITCH(n->in[0]->dtype, T, {
        const T *a = n->in[0]->data, *b = n->in[1]->data;
        T *y = n->out[0]->data;
        for (int64_t i = 0; i < N; i++) y[i] = (T)((double)a[i] * kit_sigmoid(a[i]) * b[i]);
    });
}

void pr_swiglu_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *ga = pr_in_grad(n, 0), *gb = pr_in_grad(n, 1);
    int64_t N = n->out[0]->numel;
    PR_FLOAT_SWITCH(n->in[0]->dtype, T, {
        const T *a = n->in[0]->data, *b = n->in[1]->data, *g = n->out[0]->grad->data;
        T *da = ga ? ga->data : NULL, *db = gb ? gb->data : NULL;
        for (int64_t i = 0; i < N; i++) {
            double s = kit_sigmoid(a[i]);
            if (da) da[i] += (T)((double)g[i] * b[i] * s * (1 + a[i] * (1 - s)));
            if (db) db[i] += (T)((double)g[i] * a[i] * s);
        }
    });
}

static pr_tensor *swiglu_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_swiglu(ctx, in[0], in[1]);
}

/* gate and up [3, 7] */
void pr_swiglu_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 2;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 7), -3.0, 3.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(3, 7), -1.0, 1.0);
    ex->in[0]->name = "gate";
    ex->in[1]->name = "up";
    ex->apply = swiglu_apply;
}
