/* tests/test_rope.c: the attn layer's RoPE-half (models/attn.c).
 *
 * - values: pair (i, i + K/2) of head h at position start + t turns by
 *   (start + t) * theta^(-2i/K), checked element by element against the
 *   formula (fla's rotate-half layout, not the interleaved one);
 * - norms per pair are kept, and position 0 is the identity;
 * - float64 gradcheck of the rotation.
 */
#include "tests/pr_test.h"
#include "models/models.h"

#include <math.h>

static void test_rope_values(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    const int64_t B = 2, T = 3, H = 2, K = 6, start = 5;
    const double theta = 100.0;
    pr_rng r = pr_rng_init(9, 0);
    pr_tensor *x = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, H, K), &r);
    pr_tensor *y = pr_rope_half(ctx, x, start, theta);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < K / 2; i++) {
                    int64_t base = ((b * T + t) * H + h) * K;
                    double angle = (double)(start + t) * pow(theta, -2.0 * (double)i / (double)K);
                    double a = pr_get(x, base + i), c = pr_get(x, base + i + K / 2);
                    double want_a = a * cos(angle) - c * sin(angle), want_c = c * cos(angle) + a * sin(angle);
                    assert_true(fabs(pr_get(y, base + i) - want_a) < 1e-12);
                    assert_true(fabs(pr_get(y, base + i + K / 2) - want_c) < 1e-12);
                }
    pr_tensor *y0 = pr_rope_half(ctx, x, 0, theta);   /* position 0 of the first token: unchanged */
    for (int64_t j = 0; j < K; j++) assert_true(fabs(pr_get(y0, j) - pr_get(x, j)) < 1e-15);
    pr_ctx_free(ctx);
}

static pr_tensor *apply_rope(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_rope_half(ctx, in[0], 7, 10000.0);
}

static void test_rope_gradcheck(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_arena *a = pr_arena_new("test-x", 0);   /* x outlives the gradcheck's step resets */
    pr_rng r = pr_rng_init(2, 0);
    pr_tensor *x = pr_randn(a, PR_F64, PR_CPU, PR_DIMS(2, 4, 3, 8), &r);
    pr_requires_grad_(x, true);
    pr_example ex = {.apply = apply_rope, .n_in = 1, .in = {x}};
    pr_gradcheck_opts o = pr_gradcheck_defaults();
    pr_gradcheck_result g = pr_gradcheck(ctx, "rope_half", &ex, &o);
    if (!g.ok) fprintf(stderr, "  %s\n", g.msg);
    assert_true(g.ok);
    pr_arena_free(a);
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_values),
        cmocka_unit_test(test_rope_gradcheck),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
