/* ops/loss.c: cross_entropy over class logits, binary cross-entropy on logits,
 * and the evaluation's per-row scores (score_rows, no gradient; ops.h).
 *
 * cross_entropy: logits [..., C], integer targets [...]; the mean of
 * logsumexp(x) - x[target] over the rows whose target != ignore_index (0 when
 * every row is ignored). bce_logits: the mean of the stable form
 * max(x,0) - x t + log(1 + e^-|x|). Both give a 0-dim scalar and sum in double.
 *
 * cross_entropy takes bf16 logits itself (ops/ops.def): under bf16 autocast
 * the LM head's bf16 logits are read in place and the loss is f32, with no
 * f32 copy of [N, C] (a widening cast makes 2 GB a step at 16K x 32K).
 * Outside autocast bf16 logits give a bf16 loss, as every op does.
 */
#include "ops/ops.h"
#include <math.h>
#include <stdlib.h>

/* ---- cross_entropy: in = {logits, targets}, iarg[0] = ignore_index ---- */

pr_tensor *pr_cross_entropy(pr_ctx *ctx, pr_tensor *logits, pr_tensor *targets, int64_t ignore_index)
{
    const char *op = "cross_entropy";
    PR_CHECK(logits && targets, "%s: NULL input", op);
    pr_check_float(op, logits, "logits");
    PR_CHECK(targets->dtype == PR_I32 || targets->dtype == PR_I64, "%s: targets must be int32 or int64, got %s", op,
             pr_dtype_name(targets->dtype));
    PR_CHECK(targets->device == logits->device, "%s: logits on %s but targets on %s", op,
             pr_device_name(logits->device), pr_device_name(targets->device));
    bool ok = logits->ndim >= 1 && targets->ndim == logits->ndim - 1 && logits->shape[logits->ndim - 1] > 0;
    for (int d = 0; ok && d < targets->ndim; d++) ok = targets->shape[d] == logits->shape[d];
    if (!ok) {
        char s1[96], s2[96];
        pr_fatal("%s: logits %s need targets of shape [...] = logits' shape without its last dim, got %s", op,
                 pr_shape_str(logits, s1, sizeof s1), pr_shape_str(targets, s2, sizeof s2));
    }
    pr_node n = pr_node_init(PR_OP_cross_entropy, 2, (pr_tensor *[]){logits, targets});
    n.iarg[0] = ignore_index;
    n.n_out = 1;
    /* bf16 logits stay as they are (no cast node): the kernels read them
     * wide, which is what widening them first gave */
    n.out[0] = pr_op_output(ctx, pr_autocast_loss_dtype(ctx, logits), logits->device, 0, logits->shape);
    return pr_op_apply(ctx, &n);
}

static int64_t target_at(const pr_tensor *t, int64_t i)
{
    return t->dtype == PR_I32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* the class of row r, or -1 when ignored; an out-of-range class is fatal */
static int64_t ce_class(const pr_node *n, int64_t r, int64_t C)
{
    int64_t t = target_at(n->in[1], r);
    if (t == n->iarg[0]) return -1;
    PR_CHECK(t >= 0 && t < C, "cross_entropy: target %lld at index %lld is out of range [0, %lld) (ignore_index %lld)",
             (long long)t, (long long)r, (long long)C, (long long)n->iarg[0]);
    return t;
}

static int64_t ce_count(const pr_node *n, int64_t R, int64_t C)
{
    int64_t count = 0;
    for (int64_t r = 0; r < R; r++) count += ce_class(n, r, C) >= 0;
    return count;
}

/* row r of x (f32, f64 or bf16) in double: exact for each */
static void ce_load_row(const pr_tensor *x, int64_t r, int64_t C, double *row)
{
    if (x->dtype == PR_BF16) {
        for (int64_t c = 0; c < C; c++) row[c] = pr_get(x, r * C + c);
        return;
    }
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *xr = (const T *)x->data + r * C;
        for (int64_t c = 0; c < C; c++) row[c] = xr[c];
    });
}

/* max over the row, and sum_c exp(row_c - max) */
static void ce_row_stats(const double *row, int64_t C, double *mx, double *sum)
{
    double m = row[0], s = 0.0;
    for (int64_t c = 1; c < C; c++) m = row[c] > m ? row[c] : m;
    for (int64_t c = 0; c < C; c++) s += exp(row[c] - m);
    *mx = m, *sum = s;
}

/* row r's class (-1: ignored, nothing loaded), else the row in row[] and its stats */
static int64_t ce_scored_row(const pr_node *n, int64_t r, int64_t C, double *row, double *mx, double *sum)
{
    int64_t t = ce_class(n, r, C);
    if (t < 0) return t;
    ce_load_row(n->in[0], r, C, row);
    ce_row_stats(row, C, mx, sum);
    return t;
}

static double *ce_row_buffer(int64_t C)
{
    double *row = malloc(sizeof(double) * (size_t)C);
    PR_CHECK(row, "cross_entropy: out of host memory (%lld doubles)", (long long)C);
    return row;
}

void pr_cross_entropy_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0];
    int64_t C = x->shape[x->ndim - 1], R = x->numel / C, count = ce_count(n, R, C);
    double loss = 0.0, *row = ce_row_buffer(C);
    for (int64_t r = 0; r < R; r++) {
        double mx, sum;
        int64_t t = ce_scored_row(n, r, C, row, &mx, &sum);
        if (t >= 0) loss += mx + log(sum) - row[t];
    }
    free(row);
    pr_set(n->out[0], 0, count ? loss / (double)count : 0.0);   /* one rounding to the loss's dtype */
}

/* dx_r += d; a bf16 grad gets old + d rounded once (pr_set's rounding, as
 * the backward of pr_cast adds a grad into bf16) */
static void ce_add_row(pr_tensor *gx, int64_t r, int64_t C, const double *d)
{
    if (gx->dtype == PR_BF16) {
        for (int64_t c = 0; c < C; c++) pr_set(gx, r * C + c, pr_get(gx, r * C + c) + d[c]);
        return;
    }
    PR_FLOAT_SWITCH(gx->dtype, T, {
        T *dx = (T *)gx->data + r * C;
        for (int64_t c = 0; c < C; c++) dx[c] += (T)d[c];
    });
}

/* loss = (1/count) sum_r (lse(x_r) - x_r[t_r]); dlse/dx_c = softmax_c, so
 * dx_rc = g/count (softmax(x_r)_c - [c == t_r]) for kept rows, 0 for ignored ones.
 * With an f32 loss each dx_rc is first rounded to f32: bf16 logits under
 * autocast then get the bits that widening them to f32 gave (the f32
 * kernel's dx, rounded into the bf16 grad by the cast's backward). */
void pr_cross_entropy_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0], *gx = pr_in_grad(n, 0);
    if (!gx) return;
    int64_t C = x->shape[x->ndim - 1], R = x->numel / C, count = ce_count(n, R, C);
    if (!count) return;
    const bool f32 = n->out[0]->dtype == PR_F32;
    double gs = pr_get(n->out[0]->grad, 0) / (double)count, *row = ce_row_buffer(C);
    for (int64_t r = 0; r < R; r++) {
        double mx, sum;
        int64_t t = ce_scored_row(n, r, C, row, &mx, &sum);
        if (t < 0) continue;
        for (int64_t c = 0; c < C; c++) {   /* row becomes dx_r in place */
            double d = gs * (exp(row[c] - mx) / sum - (c == t));
            row[c] = f32 ? (double)(float)d : d;
        }
        ce_add_row(gx, r, C, row);
    }
    free(row);
}

/* ---- bce_logits: in = {logits, targets} ---- */

pr_tensor *pr_bce_logits(pr_ctx *ctx, pr_tensor *logits, pr_tensor *targets)
{
    const char *op = "bce_logits";
    PR_CHECK(logits && targets, "%s: NULL input", op);
    logits = pr_autocast(ctx, logits, PR_F32);   /* the loss is f32 */
    targets = pr_autocast(ctx, targets, PR_F32);
    pr_check_float(op, logits, "logits");
    pr_check_float(op, targets, "targets");
    pr_check_same_kind(op, logits, targets);
    pr_check_same_shape(op, logits, targets);
    PR_CHECK(logits->numel > 0, "%s: logits are empty", op);
    pr_node n = pr_node_init(PR_OP_bce_logits, 2, (pr_tensor *[]){logits, targets});
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, logits->dtype, logits->device, 0, logits->shape);
    return pr_op_apply(ctx, &n);
}

void pr_bce_logits_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0], *t = n->in[1];
    int64_t N = x->numel;
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *px = x->data, *pt = t->data;
        double loss = 0.0;
        for (int64_t i = 0; i < N; i++) {
            double xi = px[i];
            loss += (xi > 0 ? xi : 0) - xi * pt[i] + log1p(exp(-fabs(xi)));
        }
        *(T *)n->out[0]->data = (T)(loss / (double)N);
    });
}

/* max(x,0) + log(1 + e^-|x|) = softplus(x), whose derivative is sigmoid(x):
 * dx = g/N (sigmoid(x) - t), dt = -g/N x. */
void pr_bce_logits_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0], *t = n->in[1], *gx = pr_in_grad(n, 0), *gt = pr_in_grad(n, 1);
    int64_t N = x->numel;
    PR_FLOAT_SWITCH(x->dtype, T, {
        const T *px = x->data, *pt = t->data;
        double gs = *(const T *)n->out[0]->grad->data / (double)N;
        for (int64_t i = 0; i < N; i++) {
            double xi = px[i], e = exp(-fabs(xi));
            double sig = xi >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
            if (gx) ((T *)gx->data)[i] += (T)(gs * (sig - pt[i]));
            if (gt) ((T *)gt->data)[i] += (T)(-gs * xi);
        }
    });
}

/* ---- score_rows (ops.h) ---- */

void pr_score_rows(pr_ctx *ctx, const pr_tensor *logits, const int32_t *labels, int32_t ignore, double *loss,
                   int32_t *hit)
{
    PR_CHECK(logits && labels && loss && hit, "score_rows: NULL input");
    pr_check_float("score_rows", logits, "logits");
    PR_CHECK(logits->ndim >= 1 && logits->shape[logits->ndim - 1] > 0, "score_rows: logits need a last dim (classes)");
    if (logits->device == PR_CUDA) {
#ifdef PRISM_HAVE_CUDA
        return pr_score_rows_cuda(ctx, logits, labels, ignore, loss, hit);
#else
        pr_fatal("score_rows: a CUDA tensor in a build without CUDA");
#endif
    }
    (void)ctx;
    int64_t C = logits->shape[logits->ndim - 1], R = logits->numel / C;
    for (int64_t r = 0; r < R; r++)   /* before the buffer: a fatal error leaves nothing allocated */
        PR_CHECK(labels[r] == ignore || (labels[r] >= 0 && labels[r] < C),
                 "score_rows: label %d of row %lld is outside [0, %lld) and not the ignore index %d", labels[r],
                 (long long)r, (long long)C, ignore);
    double *row = ce_row_buffer(C);
    for (int64_t r = 0; r < R; r++) {
        int32_t t = labels[r];
        loss[r] = 0, hit[r] = 0;
        if (t == ignore) continue;
        double mx, sum;
        ce_load_row(logits, r, C, row);
        ce_row_stats(row, C, &mx, &sum);
        int64_t best = 0;
        for (int64_t c = 1; c < C; c++) best = row[c] > row[best] ? c : best;
        loss[r] = log(sum) + mx - row[t];
        hit[r] = best == t;
    }
    free(row);
}

/* ---- examples ---- */

static pr_tensor *cross_entropy_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_cross_entropy(ctx, in[0], in[1], ex->iarg[0]);
}

/* logits [2,3,5]; targets [2,3] int64, random classes, two rows ignored */
void pr_cross_entropy_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    enum { B = 2, L = 3, C = 5 };
    ex->n_in = 2;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(B, L, C), -2.0, 2.0);
    pr_tensor *u = pr_randu(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, L), r, 0.0, C);
    int64_t t[B * L];
    for (int i = 0; i < B * L; i++) t[i] = (int64_t)floor(pr_get(u, i));
    t[1] = t[4] = -100;
    ex->in[1] = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(B, L), t);
    ex->iarg[0] = -100;
    ex->apply = cross_entropy_apply;
}

static pr_tensor *bce_logits_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_bce_logits(ctx, in[0], in[1]);
}

/* logits [3,7] in [-3, 3], targets [3,7] in [0, 1] (both get grads) */
void pr_bce_logits_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 2;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 7), -3.0, 3.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(3, 7), 0.0, 1.0);
    ex->apply = bce_logits_apply;
}
