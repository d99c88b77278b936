/* tests/test_cast.c: pr_cast on the CPU: round to nearest even at bf16 ties,
 * f64 rounded to bf16 once (not through f32), the backward casting the grad
 * back and accumulating, and the pairs it refuses. The f64 gradcheck of its
 * example is in tests/test_ops_all.c. */
#include "tests/pr_test.h"

/* 1 + m 2^-e, exactly */
static double one_plus(double m, int e) { return 1.0 + ldexp(m, -e); }

static pr_tensor *f32_leaf(pr_ctx *ctx, int64_t n, const double *v)
{
    pr_tensor *t = pr_empty(ctx->step, PR_F32, PR_CPU, PR_DIMS(n));
    for (int64_t i = 0; i < n; i++) pr_set(t, i, v[i]);
    pr_requires_grad_(t, true);
    return t;
}

/* bf16 keeps 7 fraction bits: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 */
static void test_f32_to_bf16_ties_to_even(void **state)
{
    pr_ctx *ctx = *state;
    const double in[6] = {one_plus(1, 8), one_plus(3, 8), -one_plus(3, 8), one_plus(1, 8) + ldexp(1, -20),
                          one_plus(1, 8) - ldexp(1, -20), 3.0};
    const double want[6] = {1.0, one_plus(1, 6), -one_plus(1, 6), one_plus(1, 7), 1.0, 3.0};
    pr_tensor *y = pr_cast(ctx, f32_leaf(ctx, 6, in), PR_BF16);
    assert_int_equal(y->dtype, PR_BF16);
    for (int i = 0; i < 6; i++) assert_true(pr_get(y, i) == want[i]);
}

/* 1 + 2^-8 + 2^-40 is above the tie, but its nearest f32 is the tie itself:
 * rounding through f32 would give 1, rounding once gives 1 + 2^-7 */
static void test_f64_to_bf16_rounds_once(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = pr_empty(ctx->step, PR_F64, PR_CPU, PR_DIMS(3));
    pr_set(x, 0, one_plus(1, 8) + ldexp(1, -40));
    pr_set(x, 1, one_plus(1, 8) - ldexp(1, -40));
    pr_set(x, 2, -(one_plus(3, 8) - ldexp(1, -40)));
    pr_tensor *b = pr_to(ctx->step, x, PR_BF16, PR_CPU);
    assert_true(pr_get(b, 0) == one_plus(1, 7));
    assert_true(pr_get(b, 1) == 1.0);
    assert_true(pr_get(b, 2) == -one_plus(1, 7));
}

/* f32 -> bf16: the bf16 grad comes back exactly (it fits f32) and adds to
 * what x's grad held; bf16 -> f32: the f32 grad is rounded to bf16 once */
static void test_backward_casts_back(void **state)
{
    pr_ctx *ctx = *state;
    const double in[2] = {0.1, -7.3};
    pr_tensor *x = f32_leaf(ctx, 2, in);
    pr_tensor *y = pr_cast(ctx, x, PR_BF16);
    pr_fill_(pr_grad_of(ctx, x), 0.5);
    pr_tensor *w = pr_empty(ctx->step, PR_F64, PR_CPU, PR_DIMS(2));
    pr_set(w, 0, 0.25), pr_set(w, 1, -3.0);
    pr_backward_with(ctx, y, w);
    assert_true(pr_get(x->grad, 0) == 0.75);
    assert_true(pr_get(x->grad, 1) == -2.5);

    pr_tensor *xb = pr_to(ctx->step, x, PR_BF16, PR_CPU);
    pr_requires_grad_(xb, true);
    pr_tensor *z = pr_cast(ctx, xb, PR_F32);
    assert_true(pr_get(z, 0) == pr_get(xb, 0));
    pr_tensor *wz = pr_empty(ctx->step, PR_F32, PR_CPU, PR_DIMS(2));
    pr_set(wz, 0, one_plus(3, 8)), pr_set(wz, 1, one_plus(1, 8));
    pr_backward_with(ctx, z, wz);
    assert_int_equal(xb->grad->dtype, PR_BF16);
    assert_true(pr_get(xb->grad, 0) == one_plus(1, 6));
    assert_true(pr_get(xb->grad, 1) == 1.0);
}

static void test_f64_f32_round_trip(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = pr_empty(ctx->step, PR_F64, PR_CPU, PR_DIMS(1));
    pr_set(x, 0, 0.1);
    pr_requires_grad_(x, true);
    pr_tensor *y = pr_cast(ctx, x, PR_F32);
    assert_int_equal(y->dtype, PR_F32);
    assert_true(pr_get(y, 0) == (double)0.1f);
    pr_backward(ctx, pr_sum_all(ctx, pr_scale(ctx, y, 3.0)));
    assert_true(pr_get(x->grad, 0) == 3.0);
}

static void test_errors(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2));
    PR_EXPECT_FATAL(pr_cast(ctx, x, PR_BF16), "cast: f64 -> bf16 on cpu is not supported");
    PR_EXPECT_FATAL(pr_cast(ctx, x, PR_I32), "cast: f64 -> i32 on cpu is not supported");
    PR_EXPECT_FATAL(pr_cast(ctx, NULL, PR_F32), "cast: x is missing");
}

static int setup(void **state)
{
    *state = pr_ctx_new(7);
    return 0;
}

static int teardown(void **state)
{
    pr_ctx_free(*state);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_f32_to_bf16_ties_to_even, setup, teardown),
        cmocka_unit_test_setup_teardown(test_f64_to_bf16_rounds_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backward_casts_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_f64_f32_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
    };
    return cmocka_run_group_tests_name("cast", tests, NULL, NULL);
}
