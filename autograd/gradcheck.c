/* autograd/gradcheck.c: float64 central differences against the tape.
 *
 * The scalar checked is L = sum(out * w) for a fixed random w, so dL/dout = w
 * seeds the analytic backward, and the numeric gradient of input element x_j
 * is (L(x_j + eps) - L(x_j - eps)) / (2 eps). Perturbed forwards run in a
 * scratch context with grad mode off and the same RNG state as the analytic
 * run, so ops that draw random numbers (dropout) see the same draws. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"

pr_gradcheck_opts pr_gradcheck_defaults(void)
{
    return (pr_gradcheck_opts){.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3, .max_elems = 0};
}

static double weighted_sum(const pr_tensor *out, const double *w)
{
    double *v = malloc(sizeof(double) * (size_t)(out->numel ? out->numel : 1)), s = 0;
    PR_CHECK(v, "gradcheck: out of host memory");
    pr_to_host_f64(out, v);
    for (int64_t i = 0; i < out->numel; i++) s += v[i] * w[i];
    free(v);
    return s;
}

static double eval_at(pr_ctx *scratch, pr_rng rng, const pr_example *ex, const double *w)
{
    scratch->rng = rng;
    pr_tensor *out = ex->apply(scratch, ex->in, ex);
    double s = weighted_sum(out, w);
    pr_step_reset(scratch);
    return s;
}

/* the failure message: which input and element, both gradients, and why */
static void describe_element(pr_gradcheck_result *res, const char *what, int input, const pr_tensor *t,
                             int64_t j, double ana, double num, const char *why)
{
    snprintf(res->msg, sizeof res->msg, "gradcheck %s: input %d%s%s%s element %lld: analytic %.10g, numeric "
             "%.10g (%s)", what, input, t->name ? " (" : "", t->name ? t->name : "", t->name ? ")" : "",
             (long long)j, ana, num, why);
}

pr_gradcheck_result pr_gradcheck(pr_ctx *ctx, const char *what, const pr_example *ex,
                                 const pr_gradcheck_opts *opts)
{
    pr_gradcheck_opts o = opts ? *opts : pr_gradcheck_defaults();
    pr_gradcheck_result res = {.ok = true};
    for (int i = 0; i < ex->n_in; i++) {
        const pr_tensor *t = ex->in[i];
        if (t && t->requires_grad && (t->dtype != PR_F64 || t->device != PR_CPU)) {
            snprintf(res.msg, sizeof res.msg, "gradcheck %s: input %d is %s on %s; gradcheck needs f64 CPU "
                     "inputs", what, i, pr_dtype_name(t->dtype), pr_device_name(t->device));
            res.ok = false;
            return res;
        }
        if (t && t->grad) pr_zero_(t->grad);
    }

    /* analytic */
    pr_rng rng = ctx->rng;
    bool prev = pr_set_grad_enabled(ctx, true);
    pr_tensor *out = ex->apply(ctx, ex->in, ex);
    pr_rng wr = pr_rng_init(0x9e3779b97f4a7c15ull, 7);
    pr_tensor *w = pr_randu(ctx->step, PR_F64, PR_CPU, out->ndim, out->shape, &wr, -1.0, 1.0);
    if (out->requires_grad) pr_backward_with(ctx, out, w);
    pr_set_grad_enabled(ctx, prev);

    /* numeric */
    pr_ctx *scratch = pr_ctx_new(0);
    scratch->training = ctx->training;
    scratch->matmul_tf32 = 0;
    pr_set_grad_enabled(scratch, false);
    const double *wv = w->data;
    double worst = -1;
    for (int i = 0; i < ex->n_in && isfinite(res.max_abs_err); i++) {
        pr_tensor *t = ex->in[i];
        if (!t || !t->requires_grad) continue;
        double *x = t->data;
        int64_t n = t->numel, step = 1;
        if (o.max_elems > 0 && n > o.max_elems) step = (n + o.max_elems - 1) / o.max_elems;
        for (int64_t j = 0; j < n; j += step) {
            double x0 = x[j];
            x[j] = x0 + o.eps;
            double fp = eval_at(scratch, rng, ex, wv);
            x[j] = x0 - o.eps;
            double fm = eval_at(scratch, rng, ex, wv);
            x[j] = x0;
            double num = (fp - fm) / (2 * o.eps);
            double ana = t->grad ? ((const double *)t->grad->data)[j] : 0.0;
            /* NaN compares false with everything, so a non-finite gradient
             * would slip past the bound below: it fails here, and is final */
            if (!isfinite(ana) || !isfinite(num)) {
                res.ok = false;
                res.max_abs_err = INFINITY;
                describe_element(&res, what, i, t, j, ana, num, "not finite");
                break;
            }
            double err = fabs(ana - num), bound = o.atol + o.rtol * fabs(num);
            if (err > res.max_abs_err) res.max_abs_err = err;
            if (err / bound > worst) {
                worst = err / bound;
                if (err > bound) {
                    char why[64];
                    snprintf(why, sizeof why, "|diff| %.3g > %.3g", err, bound);
                    res.ok = false;
                    describe_element(&res, what, i, t, j, ana, num, why);
                }
            }
        }
    }
    pr_ctx_free(scratch);
    return res;
}
