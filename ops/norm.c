/* ops/norm.c: normalizations over the last dim D.
 *
 * layernorm      y = (x - mean) * rstd * w + b,   rstd = 1/sqrt(var + eps)
 * rmsnorm        y = x * rstd * w,                 rstd = 1/sqrt(mean(x^2) + eps)
 * rmsnorm_gated  y = x * rstd * w * silu(z)        (fla's FusedRMSNormGated: norm, then gate)
 * l2norm         y = x * rstd,                     rstd = 1/sqrt(sum(x^2) + eps)
 * w, b [D] are optional (NULL = 1, 0). The forwards save the per-row
 * statistics (mean, rstd: x's shape without the last dim) for the backwards.
 */
#include <math.h>
#include <string.h>

#include "ops/cpu_kit.h"

/* shared input checks; returns D */
static int64_t norm_check(const char *op, const pr_tensor *x)
{
    PR_CHECK(x, "%s: NULL input", op);
    pr_check_float(op, x, "x");
    PR_CHECK(x->ndim >= 1 && x->shape[x->ndim - 1] > 0, "%s: x needs a non-empty last dim", op);
    return x->shape[x->ndim - 1];
}

/* an optional per-feature parameter: NULL or [D] of x's kind */
static void param_check(const char *op, const pr_tensor *x, const pr_tensor *p, const char *arg)
{
    if (!p) return;
    pr_check_float(op, p, arg);
    pr_check_same_kind(op, x, p);
    if (p->ndim != 1 || p->shape[0] != x->shape[x->ndim - 1]) {
        char s1[96], s2[96];
        pr_fatal("%s: %s must be [D] with D = x's last dim; x %s, %s %s", op, arg, pr_shape_str(x, s1, sizeof s1),
                 arg, pr_shape_str(p, s2, sizeof s2));
    }
}

/* output of x's shape plus n_stats per-row statistics saved for the backward
 * (none when the node is not recorded: the forwards then skip the stores);
 * the statistics of bf16 data are kept in f32 (ops/norm.cu's bf16 kernels) */
static pr_tensor *norm_apply(pr_ctx *ctx, pr_node *n, pr_tensor *x, double eps, int n_stats)
{
    n->farg[0] = eps;
    n->n_out = n->out[1] ? 2 : 1;   /* add_norm's sum is out[1] */
    n->out[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim, x->shape);
    n->n_saved = pr_op_will_record(ctx, n) ? n_stats : 0;
    pr_dtype stats = x->dtype == PR_BF16 ? PR_F32 : x->dtype;
    for (int i = 0; i < n->n_saved; i++) n->saved[i] = pr_op_output(ctx, stats, x->device, x->ndim - 1, x->shape);
    return pr_op_apply(ctx, n);
}

/* ---- layernorm: in = {x, w, b}, saved = {mean, rstd}, farg[0] = eps ---- */

/* autocast: a norm keeps its data's dtype and takes w, b in it. An f32
 * residual stream is normalized in f32. bf16 data (a mixer's q, k or its
 * output) stays bf16: the kernels compute the statistics wide, keep them in
 * f32 and round y once, the very value the cast that lowers y for the next
 * product would give, and an f32 copy of x, y and their grads is not kept. */
pr_tensor *pr_layernorm(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *b, double eps)
{
    PR_CHECK(x, "layernorm: NULL input");
    w = pr_autocast(ctx, w, x->dtype), b = pr_autocast(ctx, b, x->dtype);
    norm_check("layernorm", x);
    param_check("layernorm", x, w, "w");
    param_check("layernorm", x, b, "b");
    pr_node n = pr_node_init(PR_OP_layernorm, 3, (pr_tensor *[]){x, w, b});
    return norm_apply(ctx, &n, x, eps, 2);
}

/* y = (x - mean) rstd w + b into n->out[0]; saved = {mean, rstd} */
static void ln_forward(pr_node *n, const pr_tensor *x, const pr_tensor *w, const pr_tensor *b)
{
    int64_t D = x->shape[x->ndim - 1], R = x->numel / D;
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *pw = w ? w->data : NULL, *pb = b ? b->data : NULL;
        for (int64_t r = 0; r < R; r++) {
            const T *xr = (const T *)x->data + r * D;
            T *y = (T *)n->out[0]->data + r * D;
            double mean = 0.0, var = 0.0;
            for (int64_t j = 0; j < D; j++) mean += xr[j];
            mean /= (double)D;
            for (int64_t j = 0; j < D; j++) var += (xr[j] - mean) * (xr[j] - mean);
            double rstd = 1.0 / sqrt(var / (double)D + n->farg[0]);
            for (int64_t j = 0; j < D; j++)
                y[j] = (T)((xr[j] - mean) * rstd * (pw ? pw[j] : 1) + (pb ? pb[j] : 0));
            if (n->n_saved) ((T *)n->saved[0]->data)[r] = (T)mean, ((T *)n->saved[1]->data)[r] = (T)rstd;
        }
    });
}

void pr_layernorm_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    ln_forward(n, n->in[0], n->in[1], n->in[2]);
}

/* With xh = (x - mean) rstd and dxh = g w (per row):
 *   dmean/dx_j = 1/D,  drstd/dx_j = -rstd^3 (x_j - mean)/D = -rstd^2 xh_j / D,
 * so dxh_i/dx_j = rstd (delta_ij - 1/D - xh_i xh_j / D) and
 *   dx_j = rstd (dxh_j - mean_i(dxh_i) - xh_j mean_i(dxh_i xh_i)).
 * dw_j += sum over rows of g_j xh_j;  db_j += sum over rows of g_j. */
static void ln_backward(pr_node *n, const pr_tensor *x, const pr_tensor *w, pr_tensor *gx, pr_tensor *gw,
                        pr_tensor *gb)
{
    int64_t D = x->shape[x->ndim - 1], R = x->numel / D;
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *pw = w ? w->data : NULL;
        for (int64_t r = 0; r < R; r++) {
            const T *xr = (const T *)x->data + r * D, *g = (const T *)n->out[0]->grad->data + r * D;
            double mean = ((const T *)n->saved[0]->data)[r], rstd = ((const T *)n->saved[1]->data)[r];
            double m1 = 0.0, m2 = 0.0;  /* mean(dxh), mean(dxh xh) */
            for (int64_t j = 0; j < D; j++) {
                double xh = (xr[j] - mean) * rstd, dxh = g[j] * (pw ? pw[j] : 1);
                m1 += dxh;
                m2 += dxh * xh;
                if (gw) ((T *)gw->data)[j] += (T)(g[j] * xh);
                if (gb) ((T *)gb->data)[j] += g[j];
            }
            m1 /= (double)D;
            m2 /= (double)D;
            if (!gx) continue;
            T *dx = (T *)gx->data + r * D;
            for (int64_t j = 0; j < D; j++) {
                double xh = (xr[j] - mean) * rstd, dxh = g[j] * (pw ? pw[j] : 1);
                dx[j] += (T)(rstd * (dxh - m1 - xh * m2));
            }
        }
    });
}

void pr_layernorm_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    ln_backward(n, n->in[0], n->in[1], pr_in_grad(n, 0), pr_in_grad(n, 1), pr_in_grad(n, 2));
}

/* ---- rmsnorm and rmsnorm_gated share one pair of loops (z = NULL: no gate) ---- */

pr_tensor *pr_rmsnorm(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, double eps)
{
    PR_CHECK(x, "rmsnorm: NULL input");
    w = pr_autocast(ctx, w, x->dtype);   /* autocast: as layernorm */
    norm_check("rmsnorm", x);
    param_check("rmsnorm", x, w, "w");
    pr_node n = pr_node_init(PR_OP_rmsnorm, 2, (pr_tensor *[]){x, w});
    return norm_apply(ctx, &n, x, eps, 1);
}

pr_tensor *pr_rmsnorm_gated(pr_ctx *ctx, pr_tensor *x, pr_tensor *z, pr_tensor *w, double eps)
{
    const char *op = "rmsnorm_gated";
    PR_CHECK(x, "%s: NULL input", op);
    PR_CHECK(z, "%s: NULL gate z", op);
    pr_tensor *xz[2] = {x, z};   /* autocast: the data promotes as add does, w follows it (as layernorm) */
    pr_autocast_promote(ctx, 2, xz);
    x = xz[0], z = xz[1], w = pr_autocast(ctx, w, x->dtype);
    norm_check(op, x);
    pr_check_float(op, z, "z");
    pr_check_same_kind(op, x, z);
    pr_check_same_shape(op, x, z);
    param_check(op, x, w, "w");
    pr_node n = pr_node_init(PR_OP_rmsnorm_gated, 3, (pr_tensor *[]){x, z, w});
    return norm_apply(ctx, &n, x, eps, 1);
}

/* y = x rstd w silu(z); saved[0] = rstd */
static void rms_forward(pr_node *n, const pr_tensor *x, const pr_tensor *z, const pr_tensor *w)
{
    int64_t D = x->shape[x->ndim - 1], R = x->numel / D;
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *pw = w ? w->data : NULL;
        for (int64_t r = 0; r < R; r++) {
            const T *xr = (const T *)x->data + r * D, *zr = z ? (const T *)z->data + r * D : NULL;
            T *y = (T *)n->out[0]->data + r * D;
            double ss = 0.0;
            for (int64_t j = 0; j < D; j++) ss += (double)xr[j] * xr[j];
            double rstd = 1.0 / sqrt(ss / (double)D + n->farg[0]);
            for (int64_t j = 0; j < D; j++) {
                double v = xr[j] * rstd * (pw ? pw[j] : 1);
                y[j] = (T)(zr ? v * zr[j] * kit_sigmoid(zr[j]) : v);
            }
            if (n->n_saved) ((T *)n->saved[0]->data)[r] = (T)rstd;
        }
    });
}

/* rmsnorm: xh = x rstd, drstd/dx_j = -rstd^3 x_j / D = -rstd^2 xh_j / D, so with
 * dxh = g w:  dx_j = rstd (dxh_j - xh_j mean_i(dxh_i xh_i));  dw_j += g_j xh_j.
 * gated: y = o silu(z) with o = xh w. The gate sees dz = g o silu'(z), where
 * silu'(z) = s (1 + z (1 - s)), s = sigmoid(z); the norm sees g' = g silu(z)
 * in place of g in the rmsnorm backward above. */
static void rms_backward(pr_node *n, const pr_tensor *x, const pr_tensor *z, const pr_tensor *w, pr_tensor *gx,
                         pr_tensor *gz, pr_tensor *gw)
{
    int64_t D = x->shape[x->ndim - 1], R = x->numel / D;
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *pw = w ? w->data : NULL;
        for (int64_t r = 0; r < R; r++) {
            const T *xr = (const T *)x->data + r * D, *g = (const T *)n->out[0]->grad->data + r * D;
            const T *zr = z ? (const T *)z->data + r * D : NULL;
            double rstd = ((const T *)n->saved[0]->data)[r], m2 = 0.0;
            for (int64_t j = 0; j < D; j++) {
                double xh = xr[j] * rstd, wj = pw ? pw[j] : 1, gj = g[j];
                if (zr) {
                    double s = kit_sigmoid(zr[j]);
                    if (gz) ((T *)gz->data)[r * D + j] += (T)(gj * xh * wj * s * (1 + zr[j] * (1 - s)));
                    gj *= zr[j] * s;
                }
                m2 += gj * wj * xh;
                if (gw) ((T *)gw->data)[j] += (T)(gj * xh);
            }
            m2 /= (double)D;
            if (!gx) continue;
            T *dx = (T *)gx->data + r * D;
            for (int64_t j = 0; j < D; j++) {
                double xh = xr[j] * rstd, gj = zr ? g[j] * zr[j] * kit_sigmoid(zr[j]) : g[j];
                dx[j] += (T)(rstd * (gj * (pw ? pw[j] : 1) - xh * m2));
            }
        }
    });
}

void pr_rmsnorm_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    rms_forward(n, n->in[0], NULL, n->in[1]);
}
void pr_rmsnorm_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    rms_backward(n, n->in[0], NULL, n->in[1], pr_in_grad(n, 0), NULL, pr_in_grad(n, 1));
}
void pr_rmsnorm_gated_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    rms_forward(n, n->in[0], n->in[1], n->in[2]);
}
void pr_rmsnorm_gated_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    rms_backward(n, n->in[0], n->in[1], n->in[2], pr_in_grad(n, 0), pr_in_grad(n, 1), pr_in_grad(n, 2));
}

/* ---- l2norm: in = {x}, saved = {rstd}, farg[0] = eps ---- */

pr_tensor *pr_l2norm(pr_ctx *ctx, pr_tensor *x, double eps)
{
    norm_check("l2norm", x);   /* autocast: x as given (as layernorm) */
    pr_node n = pr_node_init(PR_OP_l2norm, 1, &x);
    return norm_apply(ctx, &n, x, eps, 1);
}

void pr_l2norm_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0];
    int64_t D = x->shape[x->ndim - 1], R = x->numel / D;
    PR_FLOAT_SWITCH(x->dtype, T, {
        for (int64_t r = 0; r < R; r++) {
            const T *xr = (const T *)x->data + r * D;
            T *y = (T *)n->out[0]->data + r * D;
            double ss = 0.0;
            for (int64_t j = 0; j < D; j++) ss += (double)xr[j] * xr[j];
            double rstd = 1.0 / sqrt(ss + n->farg[0]);
            for (int64_t j = 0; j < D; j++) y[j] = (T)(xr[j] * rstd);
            if (n->n_saved) ((T *)n->saved[0]->data)[r] = (T)rstd;
        }
    });
}

/* y = x rstd, drstd/dx_j = -rstd^3 x_j, so
 *   dx_j = rstd g_j - rstd^3 x_j sum_i g_i x_i = rstd (g_j - y_j sum_i g_i y_i). */
void pr_l2norm_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0], *gx = pr_in_grad(n, 0);
    if (!gx) return;
    int64_t D = x->shape[x->ndim - 1], R = x->numel / D;
    PR_FLOAT_SWITCH(x->dtype, T, {
        for (int64_t r = 0; r < R; r++) {
            const T *xr = (const T *)x->data + r * D, *g = (const T *)n->out[0]->grad->data + r * D;
            T *dx = (T *)gx->data + r * D;
            double rstd = ((const T *)n->saved[0]->data)[r], dot = 0.0;
            for (int64_t j = 0; j < D; j++) dot += g[j] * (xr[j] * rstd);
            for (int64_t j = 0; j < D; j++) dx[j] += (T)(rstd * (g[j] - xr[j] * rstd * dot));
        }
    });
}

/* ---- add_rmsnorm, add_layernorm: s = x + y, n = norm(s) in one op ----
 * in = {x, y, w} / {x, y, w, b}, out = {n, s}, saved as the norm's, farg[0] = eps.
 * The pre-norm residual step: s is the new residual stream, n the next
 * sublayer's input. Fused, the sum is written once and never read back for
 * the statistics, and the backward gives x and y one gradient:
 * ds = (the norm's backward of dn) + (s's own grad), dx = dy = ds.
 * y may be bf16 beside an f32 x (a bf16 sublayer output into the f32
 * residual stream): s, n, w, b are x's dtype, y is read as it is and its
 * grad rounded to bf16 once, the bits an f32 copy of y (a cast) would give,
 * without that copy and its grad held for the step. */

/* x + y and its norm (sum: s, may be NULL); the shared frontend */
static pr_tensor *add_norm(pr_ctx *ctx, pr_op_id id, pr_tensor *x, pr_tensor *y, pr_tensor *w, pr_tensor *b,
                           double eps, pr_tensor **sum)
{
    const char *op = pr_op(id)->name;
    const bool layer = id == PR_OP_add_layernorm;
    PR_CHECK(x && y, "%s: NULL input", op);
    if (x->dtype == PR_BF16 && y->dtype == PR_F32) {   /* the sum is symmetric: the f32 one is x */
        pr_tensor *t = x;
        x = y, y = t;
    }
    /* autocast: x and y of one dtype, or y bf16 beside an f32 x (above),
     * stay as they are; the residual keeps its dtype (f32 in every model,
     * since the embedding and the adds are f32), the norm keeps the sum's as
     * every norm does (pr_layernorm), and w, b are taken in it */
    w = pr_autocast(ctx, w, x->dtype), b = pr_autocast(ctx, b, x->dtype);
    norm_check(op, x);
    pr_check_float(op, y, "y");
    PR_CHECK(y->dtype == x->dtype || (x->dtype == PR_F32 && y->dtype == PR_BF16),
             "%s: dtype mismatch (x %s, y %s; y may be bf16 beside an f32 x)", op, pr_dtype_name(x->dtype),
             pr_dtype_name(y->dtype));
    PR_CHECK(x->device == y->device, "%s: device mismatch (%s and %s)", op, pr_device_name(x->device),
             pr_device_name(y->device));
    pr_check_same_shape(op, x, y);
    param_check(op, x, w, "w");
    if (layer) param_check(op, x, b, "b");
    pr_node n = pr_node_init(id, layer ? 4 : 3, (pr_tensor *[]){x, y, w, b});
    n.out[1] = pr_op_output(ctx, x->dtype, x->device, x->ndim, x->shape);
    pr_tensor *normed = norm_apply(ctx, &n, x, eps, layer ? 2 : 1);
    if (sum) *sum = n.out[1];
    return normed;
}

pr_tensor *pr_add_rmsnorm(pr_ctx *ctx, pr_tensor *x, pr_tensor *y, pr_tensor *w, double eps, pr_tensor **sum)
{
    return add_norm(ctx, PR_OP_add_rmsnorm, x, y, w, NULL, eps, sum);
}

pr_tensor *pr_add_layernorm(pr_ctx *ctx, pr_tensor *x, pr_tensor *y, pr_tensor *w, pr_tensor *b, double eps,
                            pr_tensor **sum)
{
    return add_norm(ctx, PR_OP_add_layernorm, x, y, w, b, eps, sum);
}

/* s = x + y as add computes it, then the norm's own loops on s: in f64 the
 * fused op gives the bits of add followed by the norm */
static void add_norm_forward(pr_node *n)
{
    const pr_tensor *x = n->in[0], *y = n->in[1];
    pr_tensor *s = n->out[1];
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *px = x->data, *py = y->data;
        T *ps = s->data;
        for (int64_t i = 0; i < s->numel; i++) ps[i] = px[i] + py[i];
    });
    if (pr_node_op(n) == PR_OP_add_layernorm) ln_forward(n, s, n->in[2], n->in[3]);
    else rms_forward(n, s, NULL, n->in[2]);
}

/* ds = s's grad plus the norm's backward of n's grad, gathered in a scratch
 * tensor (the CPU is the reference here, not the fast path; its own arena,
 * so a rerun node, as the bench's, does not grow the step arena); then
 * dx += ds and dy += ds */
static void add_norm_backward(pr_node *n)
{
    const pr_tensor *s = n->out[1];
    pr_tensor *gx = pr_in_grad(n, 0), *gy = pr_in_grad(n, 1), *gw = pr_in_grad(n, 2);
    pr_arena *scratch = (gx || gy) ? pr_arena_new("add_norm ds", 0) : NULL;
    pr_tensor *ds = scratch ? pr_empty(scratch, s->dtype, s->device, s->ndim, s->shape) : NULL;
    if (ds) memcpy(ds->data, s->grad->data, pr_nbytes(ds));
    if (pr_node_op(n) == PR_OP_add_layernorm) ln_backward(n, s, n->in[2], ds, gw, pr_in_grad(n, 3));
    else rms_backward(n, s, NULL, n->in[2], ds, NULL, gw);
    if (!ds) return;
    PR_FLOAT_SWITCH(s->dtype, T, {
        const T *pd = ds->data;
        for (int64_t i = 0; i < ds->numel; i++) {
            if (gx) ((T *)gx->data)[i] += pd[i];
            if (gy) ((T *)gy->data)[i] += pd[i];
        }
    });
    pr_arena_free(scratch);
}

void pr_add_rmsnorm_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    add_norm_forward(n);
}
void pr_add_rmsnorm_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    add_norm_backward(n);
}
void pr_add_layernorm_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    add_norm_forward(n);
}
void pr_add_layernorm_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    add_norm_backward(n);
}

/* ---- examples: odd D, w near 1, gate z spanning silu's bend ---- */

static pr_tensor *layernorm_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_layernorm(ctx, in[0], in[1], in[2], ex->farg[0]);
}
static pr_tensor *rmsnorm_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_rmsnorm(ctx, in[0], in[1], ex->farg[0]);
}
static pr_tensor *rmsnorm_gated_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_rmsnorm_gated(ctx, in[0], in[1], in[2], ex->farg[0]);
}
static pr_tensor *l2norm_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_l2norm(ctx, in[0], ex->farg[0]);
}

/* x [3,2,7], w [7], b [7] */
void pr_layernorm_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 3;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 2, 7), -2.0, 2.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(7), 0.5, 1.5);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(7), -1.0, 1.0);
    ex->farg[0] = 1e-5;
    ex->apply = layernorm_apply;
}

/* x [5,9], w [9] */
void pr_rmsnorm_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 2;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(5, 9), -2.0, 2.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(9), 0.5, 1.5);
    ex->farg[0] = 1e-5;
    ex->apply = rmsnorm_apply;
}

/* x, z [2,3,7], w [7] */
void pr_rmsnorm_gated_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 3;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(2, 3, 7), -2.0, 2.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(2, 3, 7), -3.0, 3.0);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(7), 0.5, 1.5);
    ex->farg[0] = 1e-5;
    ex->apply = rmsnorm_gated_apply;
}

/* x [4,11] */
void pr_l2norm_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(4, 11), -1.0, 1.0);
    ex->farg[0] = 1e-6;
    ex->apply = l2norm_apply;
}

/* n and s flattened side by side, so every check covers both outputs */
static pr_tensor *both_outputs(pr_ctx *ctx, pr_tensor *normed, pr_tensor *sum)
{
    pr_tensor *flat[2] = {pr_reshape(ctx, normed, PR_DIMS(-1)), pr_reshape(ctx, sum, PR_DIMS(-1))};
    return pr_concat(ctx, 2, flat, 0);
}
static pr_tensor *add_rmsnorm_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_tensor *s, *n = pr_add_rmsnorm(ctx, in[0], in[1], in[2], ex->farg[0], &s);
    return both_outputs(ctx, n, s);
}
static pr_tensor *add_layernorm_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_tensor *s, *n = pr_add_layernorm(ctx, in[0], in[1], in[2], in[3], ex->farg[0], &s);
    return both_outputs(ctx, n, s);
}

/* x, y [3,5,9], w [9] */
void pr_add_rmsnorm_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 3;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 5, 9), -2.0, 2.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(3, 5, 9), -1.0, 1.0);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(9), 0.5, 1.5);
    ex->farg[0] = 1e-5;
    ex->apply = add_rmsnorm_apply;
}

/* x, y [7,6], w [6], b [6] */
void pr_add_layernorm_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 4;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(7, 6), -2.0, 2.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(7, 6), -1.0, 1.0);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(6), 0.5, 1.5);
    ex->in[3] = pr_example_input(ctx, r, dt, PR_DIMS(6), -1.0, 1.0);
    ex->farg[0] = 1e-5;
    ex->apply = add_layernorm_apply;
}
