/* tests/test_ops_all.c: every op of the table, on its own example:
 * float64 gradcheck, and f32 against f64 (outputs and every input grad),
 * errors relative to the f64 tensor's max-abs: <= 1e-4 * tol_scale. */
#include "tests/pr_test.h"

static double max_rel_err(const pr_tensor *got, const pr_tensor *ref)
{
    int64_t n = ref->numel;
    double *g = malloc(sizeof(double) * (size_t)(n + 1)), *r = malloc(sizeof(double) * (size_t)(n + 1));
    pr_to_host_f64(got, g);
    pr_to_host_f64(ref, r);
    double maxabs = 0, err = 0;
    for (int64_t i = 0; i < n; i++) {
        maxabs = fmax(maxabs, fabs(r[i]));
        err = fmax(err, fabs(g[i] - r[i]));
        if (isnan(g[i]) != isnan(r[i])) err = INFINITY;
    }
    free(g);
    free(r);
    return maxabs > 0 ? err / maxabs : err;
}

static void test_op(void **state)
{
    const pr_op_info *op = *state;
    pr_ctx *ctx = pr_ctx_new(11);
    pr_rng r = pr_rng_init(99, 0);
    pr_example ex = {0};
    op->example(ctx, &r, PR_F64, &ex);
    pr_gradcheck_result gc = pr_gradcheck(ctx, op->name, &ex, NULL);
    if (!gc.ok) fail_msg("%s", gc.msg);

    /* f64 run and f32 run on the same inputs, same upstream gradient */
    pr_tensor *in32[PR_MAX_IN] = {0};
    for (int i = 0; i < ex.n_in; i++) {
        pr_tensor *t = ex.in[i];
        if (!t) continue;
        if (t->grad) pr_zero_(t->grad);
        in32[i] = pr_dtype_is_float(t->dtype) ? pr_to(ctx->step, t, PR_F32, PR_CPU) : t;
        in32[i]->requires_grad = t->requires_grad;
    }
    pr_rng rng0 = ctx->rng;
    pr_tensor *o64 = ex.apply(ctx, ex.in, &ex);
    ctx->rng = rng0;
    pr_tensor *o32 = ex.apply(ctx, in32, &ex);
    pr_rng wr = pr_rng_init(5, 5);
    pr_tensor *w = pr_randu(ctx->step, PR_F64, PR_CPU, o64->ndim, o64->shape, &wr, -1, 1);
    pr_backward_with(ctx, o64, w);
    pr_backward_with(ctx, o32, w);
    double tol = 1e-4 * (ex.tol_scale > 0 ? ex.tol_scale : 1);
    double e = max_rel_err(o32, o64);
    if (e > tol) fail_msg("%s: f32 output off by %.3g relative (tol %.1g)", op->name, e, tol);
    for (int i = 0; i < ex.n_in; i++) {
        if (!ex.in[i] || !ex.in[i]->requires_grad) continue;
        assert_non_null(in32[i]->grad);
        e = max_rel_err(in32[i]->grad, ex.in[i]->grad);
        if (e > tol) fail_msg("%s: f32 grad of input %d off by %.3g relative (tol %.1g)", op->name, i, e, tol);
    }
    pr_ctx_free(ctx);
}

int main(void)
{
    struct CMUnitTest tests[PR_NOPS];
    int n = 0;
    for (int i = 0; i < pr_op_count(); i++) {
        const pr_op_info *op = pr_op((pr_op_id)i);
        if (!op->example) continue;
        tests[n++] = (struct CMUnitTest){.name = op->name, .test_func = test_op, .initial_state = (void *)op};
    }
    return _cmocka_run_group_tests("ops_all", tests, (size_t)n, NULL, NULL);
}
