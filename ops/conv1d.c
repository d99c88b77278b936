/* ops/conv1d.c: causal depthwise convolution over time (Mamba's and GDN's
 * short conv), with zero left padding so token t sees tokens t-W+1 .. t.
 *
 * x [B, T, C], w [C, W], bias [C] or NULL -> out [B, T, C]:
 *   z[b,t,c] = sum_{i<W} w[c,i] x[b, t-W+1+i, c] + bias[c]   (x = 0 before t = 0)
 *   out = z, or silu(z) (iarg[0] = 1: pr_conv1d_silu).
 * The silu form's backward forms dz = dout silu'(z), then runs the plain
 * backward on dz. On the CPU a recorded forward saves silu'(z) in double, as
 * pr_silu does (recomputing it costs an exp an element, which on the CPU is
 * most of the op's time), and z, silu and dz are computed as pr_conv1d
 * followed by pr_silu computes them (z rounded to the dtype, silu in double),
 * so the two give the same bits. CUDA keeps nothing and recomputes z.
 */
#include "ops/cpu_kit.h"

static pr_tensor *conv1d_node(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *bias, bool silu)
{
    char sx[64], sw[64], sb[64] = "NULL";
    x = pr_autocast(ctx, x, PR_BF16), w = pr_autocast(ctx, w, PR_BF16), bias = pr_autocast(ctx, bias, PR_BF16);
    pr_check_float("conv1d", x, "x");
    pr_check_same_kind("conv1d", x, w);
    pr_shape_str(x, sx, sizeof sx);
    pr_shape_str(w, sw, sizeof sw);
    if (bias) {
        pr_check_same_kind("conv1d", x, bias);
        pr_shape_str(bias, sb, sizeof sb);
    }
    PR_CHECK(x->ndim == 3, "conv1d: x %s must be [B, T, C]", sx);
    PR_CHECK(w->ndim == 2 && w->shape[0] == x->shape[2] && w->shape[1] >= 1,
             "conv1d: w %s must be [C, W] with C = %lld (x %s)", sw, (long long)x->shape[2], sx);
    PR_CHECK(!bias || (bias->ndim == 1 && bias->shape[0] == x->shape[2]),
             "conv1d: bias %s must be [C] with C = %lld (x %s)", sb, (long long)x->shape[2], sx);

    pr_node n = pr_node_init(PR_OP_conv1d, 3, (pr_tensor *[]){x, w, bias});
    n.iarg[0] = silu;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, 3, x->shape);
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

pr_tensor *pr_conv1d(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *bias)
{
    return conv1d_node(ctx, x, w, bias, false);
}

pr_tensor *pr_conv1d_silu(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *bias)
{
    return conv1d_node(ctx, x, w, bias, true);
}

void pr_conv1d_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2], *out = n->out[0];
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[1];
    const bool silu = n->iarg[0];
    double *df = NULL;
    if (silu && n->recording) {
        n->saved[0] = pr_empty(ctx->step, PR_F64, PR_CPU, out->ndim, out->shape);
        n->n_saved = 1;
        df = n->saved[0]->data;
    }
    PR_FLOAT_SWITCH(x->dtype, F, {
        const F *xp = x->data, *wp = w->data, *bp = bias ? bias->data : NULL;
        F *op = out->data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                F *o = op + (b * T + t) * C;
                for (int64_t c = 0; c < C; c++) o[c] = bp ? bp[c] : 0;
                for (int64_t i = 0; i < W; i++) {
                    int64_t s = t - W + 1 + i;
                    if (s < 0) continue;
                    const F *xs = xp + (b * T + s) * C;
                    for (int64_t c = 0; c < C; c++) o[c] += wp[c * W + i] * xs[c];
                }
                if (!silu) continue;
                double *d = df ? df + (b * T + t) * C : NULL;
                for (int64_t c = 0; c < C; c++) {
                    const double z = o[c], s = kit_sigmoid(z);
                    if (d) d[c] = s * (1 + z * (1 - s));
                    o[c] = (F)(z * s);
                }
            }
    });
}

/* Each product w[c,i] x[b,s,c] (s = t-W+1+i) feeds z[b,t,c] once, so
 *   dx[b,s,c] += w[c,i] dz[b,t,c],  dw[c,i] += x[b,s,c] dz[b,t,c],
 *   dbias[c] += sum_{b,t} dz[b,t,c];
 * dz = dout, or with silu dout (s + z s (1 - s)), s = sigmoid(z). */
void pr_conv1d_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0], *w = n->in[1], *dout = n->out[0]->grad;
    pr_tensor *dx = pr_in_grad(n, 0), *dw = pr_in_grad(n, 1), *db = pr_in_grad(n, 2);
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[1], N = B * T * C;
    const bool silu = n->iarg[0];
    PR_CHECK(!silu || n->n_saved == 1, "conv1d: CPU backward of the silu form without the forward's saved silu'");
    PR_FLOAT_SWITCH(x->dtype, F, {
        const F *xp = x->data, *wp = w->data, *go = dout->data;
        F *dxp = dx ? dx->data : NULL, *dwp = dw ? dw->data : NULL, *dbp = db ? db->data : NULL;
        F *dz = NULL;
        if (silu) {
            const double *df = n->saved[0]->data;
            dz = malloc(sizeof(F) * (size_t)(N > 0 ? N : 1));
            PR_CHECK(dz, "conv1d: out of host memory for dz (%lld elements)", (long long)N);
            for (int64_t i = 0; i < N; i++) dz[i] = (F)(go[i] * df[i]);
            go = dz;
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                const F *g = go + (b * T + t) * C;
                if (dbp)
                    for (int64_t c = 0; c < C; c++) dbp[c] += g[c];
                for (int64_t i = 0; i < W; i++) {
                    int64_t s = t - W + 1 + i;
                    if (s < 0) continue;
                    if (dxp)
                        for (int64_t c = 0; c < C; c++) dxp[(b * T + s) * C + c] += wp[c * W + i] * g[c];
                    if (dwp)
                        for (int64_t c = 0; c < C; c++) dwp[c * W + i] += xp[(b * T + s) * C + c] * g[c];
                }
            }
        free(dz);
    });
}

/* iarg[0]: the silu form */
static pr_tensor *conv1d_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return (ex->iarg[0] ? pr_conv1d_silu : pr_conv1d)(ctx, in[0], in[1], in[2]);
}

/* x [2, 9, 5], w [5, 4] (W > 1 so the zero padding is exercised), bias [5];
 * the silu form, the one the models run (tests/test_ops_b.c checks the plain one) */
void pr_conv1d_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 3;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(2, 9, 5), -1, 1);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(5, 4), -1, 1);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(5), -1, 1);
    ex->in[0]->name = "x";
    ex->in[1]->name = "w";
    ex->in[2]->name = "bias";
    ex->iarg[0] = 1;
    ex->apply = conv1d_apply;
}
