/* ops/unary.c: elementwise ops y = f(x), CPU forward and backward.
 *
 * One forward and one backward loop serve every op here; the op id picks
 * f and its derivative. Values are computed in double and stored in the
 * tensor's dtype, so f32 results are f64 results rounded once.
 * Node: in[0] = x, out[0] = y, farg[0] = the scale factor (scale only).
 * Backward: dx += dy * f'(x), with f' written in terms of x and y where
 * that is cheaper (sigmoid' = y (1 - y), tanh' = 1 - y^2, exp' = y).
 * Where f' needs the same erf, tanh or exp as f (gelu, gelu_tanh, silu,
 * logsigmoid), a recorded forward computes both at once and saves f' in
 * double (saved[0]) for the backward, which then only multiplies: the same
 * numbers as recomputing f' there, for one transcendental call less.
 */
#include <math.h>

#include "ops/cpu_kit.h"

#define SQRT_2_OVER_PI 0.7978845608028654
#define GELU_TANH_C 0.044715

static inline double unary_f(pr_op_id op, double x, double s)
{
    switch (op) {
    case PR_OP_scale: return s * x;
    case PR_OP_neg: return -x;
    case PR_OP_exp: return exp(x);
    case PR_OP_log: return log(x);
    case PR_OP_sqrt: return sqrt(x);
    case PR_OP_sigmoid: return kit_sigmoid(x);
    case PR_OP_logsigmoid: return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x));
    case PR_OP_tanh: return tanh(x);
    case PR_OP_relu: return x > 0 ? x : 0;
    case PR_OP_silu: return x * kit_sigmoid(x);
    case PR_OP_gelu: return 0.5 * x * (1 + erf(x * M_SQRT1_2));
    case PR_OP_gelu_tanh: return 0.5 * x * (1 + tanh(SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x)));
    case PR_OP_softplus: return kit_softplus(x);
    default: pr_fatal("unary: op %d is not unary", (int)op);
    }
}

/* dy/dx given x and y = f(x), for the ops that do not save it */
static inline double unary_df(pr_op_id op, double x, double y, double s)
{
    switch (op) {
    case PR_OP_scale: return s;
    case PR_OP_neg: return -1;
    case PR_OP_exp: return y;
    case PR_OP_log: return 1 / x;
    case PR_OP_sqrt: return 0.5 / y;
    case PR_OP_sigmoid: return y * (1 - y);
    case PR_OP_tanh: return 1 - y * y;
    case PR_OP_relu: return x > 0 ? 1 : 0;
    case PR_OP_softplus: return kit_softplus_grad(x);
    default: pr_fatal("unary: op %d is not unary", (int)op);
    }
}

/* the ops whose forward saves f' */
static bool saves_df(pr_op_id op)
{
    return op == PR_OP_gelu || op == PR_OP_gelu_tanh || op == PR_OP_silu || op == PR_OP_logsigmoid;
}

/* f(x) of an op that saves f', and f'(x) into *df, sharing the costly call */
static inline double unary_f_df(pr_op_id op, double x, double *df)
{
    switch (op) {
    case PR_OP_gelu: {                                    /* Phi(x) + x phi(x) */
        double e = erf(x * M_SQRT1_2);
        *df = 0.5 * (1 + e) + x * exp(-0.5 * x * x) * 0.3989422804014327;
        return 0.5 * x * (1 + e);
    }
    case PR_OP_gelu_tanh: {
        double t = tanh(SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x));
        double du = SQRT_2_OVER_PI * (1 + 3 * GELU_TANH_C * x * x);
        *df = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
        return 0.5 * x * (1 + t);
    }
    case PR_OP_silu: {                                    /* s + x s (1 - s) */
        double sg = kit_sigmoid(x);
        *df = sg * (1 + x * (1 - sg));
        return x * sg;
    }
    case PR_OP_logsigmoid: {   /* f' = sigmoid(-x), from the exp that f takes */
        if (x >= 0) {
            double e = exp(-x);
            *df = e / (1 + e);
            return -log1p(e);
        }
        double e = exp(x);
        *df = 1 / (1 + e);
        return x - log1p(e);
    }
    default: pr_fatal("unary: op %d saves no derivative", (int)op);
    }
}

/* autocast: exponentials and logarithms in f32 (bf16 would lose what the
 * log-decays and softplus gates of the mixers need); the rest keep x's dtype */
static bool wants_f32(pr_op_id op)
{
    return op == PR_OP_exp || op == PR_OP_log || op == PR_OP_logsigmoid || op == PR_OP_softplus;
}

static pr_tensor *unary(pr_ctx *ctx, pr_op_id op, pr_tensor *x, double s)
{
    if (wants_f32(op)) x = pr_autocast(ctx, x, PR_F32);
    pr_check_float(pr_op(op)->name, x, "x");
    pr_node n = pr_node_init(op, 1, &x);
    n.farg[0] = s;
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim, x->shape);
    return pr_op_apply(ctx, &n);
}

/* One loop per op, so that f (inlined with the op a constant) is chosen once
 * per tensor rather than once per element. */
#define UNARY_CASES(LOOP)                                                                       \
    switch (op) {                                                                               \
    case PR_OP_scale: LOOP(PR_OP_scale); break;                                                 \
    case PR_OP_neg: LOOP(PR_OP_neg); break;                                                     \
    case PR_OP_exp: LOOP(PR_OP_exp); break;                                                     \
    case PR_OP_log: LOOP(PR_OP_log); break;                                                     \
    case PR_OP_sqrt: LOOP(PR_OP_sqrt); break;                                                   \
    case PR_OP_sigmoid: LOOP(PR_OP_sigmoid); break;                                             \
    case PR_OP_logsigmoid: LOOP(PR_OP_logsigmoid); break;                                       \
    case PR_OP_tanh: LOOP(PR_OP_tanh); break;                                                   \
    case PR_OP_relu: LOOP(PR_OP_relu); break;                                                   \
    case PR_OP_silu: LOOP(PR_OP_silu); break;                                                   \
    case PR_OP_gelu: LOOP(PR_OP_gelu); break;                                                   \
    case PR_OP_gelu_tanh: LOOP(PR_OP_gelu_tanh); break;                                         \
    case PR_OP_softplus: LOOP(PR_OP_softplus); break;                                           \
    default: pr_fatal("unary: op %d is not unary", (int)op);                                    \
    }

static void unary_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    pr_op_id op = pr_node_op(n);
    double s = n->farg[0];
    pr_tensor *in = n->in[0];
    int64_t N = in->numel;
    double *df = NULL;
    if (n->recording && saves_df(op)) {
        n->saved[0] = pr_empty(ctx->step, PR_F64, PR_CPU, in->ndim, in->shape);
        n->n_saved = 1;
        df = n->saved[0]->data;
    }
#define FORWARD(OP) for (int64_t i = 0; i < N; i++) y[i] = (T)unary_f(OP, x[i], s)
#define FORWARD_DF(OP) for (int64_t i = 0; i < N; i++) y[i] = (T)unary_f_df(OP, x[i], &df[i])
    PR_FLOAT_SWITCH(in->dtype, T, {
        const T *x = in->data;
        T *y = n->out[0]->data;
        if (df) {
            switch (op) {
            case PR_OP_gelu: FORWARD_DF(PR_OP_gelu); break;
            case PR_OP_gelu_tanh: FORWARD_DF(PR_OP_gelu_tanh); break;
            case PR_OP_silu: FORWARD_DF(PR_OP_silu); break;
            default: FORWARD_DF(PR_OP_logsigmoid); break;
            }
        } else {
            UNARY_CASES(FORWARD);
        }
    });
#undef FORWARD
#undef FORWARD_DF
}

/* dx = or += dy f'(x): = when dx is unwritten (pr_grad_claim) */
static void unary_backward_cpu(pr_node *n)
{
    pr_tensor *dx = pr_in_grad(n, 0);
    if (!dx) return;
    pr_op_id op = pr_node_op(n);
    double s = n->farg[0];
    int64_t N = n->in[0]->numel;
    PR_CHECK(!saves_df(op) || n->n_saved == 1, "%s: CPU backward without the forward's saved derivative", n->op->name);
    const double *df = saves_df(op) ? n->saved[0]->data : NULL;
    const bool write = pr_grad_claim(dx);
#define GRAD(expr)                                                   \
    do {                                                             \
        if (write) for (int64_t i = 0; i < N; i++) g[i] = (T)(expr);  \
        else for (int64_t i = 0; i < N; i++) g[i] += (T)(expr);       \
    } while (0)
#define BACKWARD(OP) GRAD(dy[i] * unary_df(OP, x[i], y[i], s))
    PR_FLOAT_SWITCH(n->in[0]->dtype, T, {
        const T *x = n->in[0]->data, *y = n->out[0]->data, *dy = n->out[0]->grad->data;
        T *g = dx->data;
        if (df) {
            GRAD(dy[i] * df[i]);
        } else {
            switch (op) {
            case PR_OP_scale: BACKWARD(PR_OP_scale); break;
            case PR_OP_neg: BACKWARD(PR_OP_neg); break;
            case PR_OP_exp: BACKWARD(PR_OP_exp); break;
            case PR_OP_log: BACKWARD(PR_OP_log); break;
            case PR_OP_sqrt: BACKWARD(PR_OP_sqrt); break;
            case PR_OP_sigmoid: BACKWARD(PR_OP_sigmoid); break;
            case PR_OP_tanh: BACKWARD(PR_OP_tanh); break;
            case PR_OP_relu: BACKWARD(PR_OP_relu); break;
            case PR_OP_softplus: BACKWARD(PR_OP_softplus); break;
            default: pr_fatal("unary: op %d is not unary", (int)op);
            }
        }
    });
#undef BACKWARD
#undef GRAD
}

static pr_tensor *unary_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return unary(ctx, (pr_op_id)ex->iarg[0], in[0], ex->farg[0]);
}

/* inputs of shape [3, 7] inside each op's smooth domain */
static void unary_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex, pr_op_id op)
{
    bool positive = op == PR_OP_log || op == PR_OP_sqrt;
    pr_tensor *x = pr_example_input(ctx, r, dt, PR_DIMS(3, 7), positive ? 0.5 : -2.5, positive ? 2.0 : 2.5);
    if (op == PR_OP_relu) /* keep clear of the kink at 0, where differences are meaningless */
        for (int64_t i = 0; i < x->numel; i++) pr_set(x, i, pr_get(x, i) + (pr_get(x, i) >= 0 ? 0.1 : -0.1));
    x->name = "x";
    ex->n_in = 1;
    ex->in[0] = x;
    ex->iarg[0] = op;
    ex->farg[0] = op == PR_OP_scale ? -1.7 : 0.0;
    ex->apply = unary_apply;
}

#define UNARY_OP(name)                                                                                   \
    pr_tensor *pr_##name(pr_ctx *ctx, pr_tensor *x) { return unary(ctx, PR_OP_##name, x, 0.0); }          \
    void pr_##name##_forward_cpu(pr_ctx *ctx, pr_node *n) { unary_forward_cpu(ctx, n); }                   \
    void pr_##name##_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx, unary_backward_cpu(n); }           \
    void pr_##name##_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)                        \
    {                                                                                                    \
        unary_example(ctx, r, dt, ex, PR_OP_##name);                                                     \
    }

pr_tensor *pr_scale(pr_ctx *ctx, pr_tensor *x, double s) { return unary(ctx, PR_OP_scale, x, s); }
void pr_scale_forward_cpu(pr_ctx *ctx, pr_node *n) { unary_forward_cpu(ctx, n); }
void pr_scale_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx, unary_backward_cpu(n); }
void pr_scale_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    unary_example(ctx, r, dt, ex, PR_OP_scale);
}
UNARY_OP(neg)
UNARY_OP(exp)
UNARY_OP(log)
UNARY_OP(sqrt)
UNARY_OP(sigmoid)
UNARY_OP(logsigmoid)
UNARY_OP(tanh)
UNARY_OP(relu)
UNARY_OP(silu)
UNARY_OP(gelu)
UNARY_OP(gelu_tanh)
UNARY_OP(softplus)
