/* tests/test_write_rank.c: singular values by Jacobi against known values,
 * the numerical rank of planted matrices, and the rank of each token's
 * write B_t of recorded recurrences: 1 for gdn and ssd, L+1 for prism_core
 * on random inputs, and less when a planted extra key repeats k. */
#include "tests/pr_test.h"

static void test_singular_values(void **state)
{
    (void)state;
    /* [[3,0],[4,5]]: A^T A = [[25,20],[20,25]], eigenvalues 45 and 5 */
    double a[4] = {3, 0, 4, 5}, s[2];
    pr_singular_values(a, 2, 2, s);
    pr_assert_allclose("sv", s, (double[]){sqrt(45), sqrt(5)}, 2, 1e-14, 1e-14);
    /* a wide matrix (its transpose is worked on): [[1,0,0],[0,0,2]] */
    double w[6] = {1, 0, 0, 0, 0, 2};
    pr_singular_values(w, 2, 3, s);
    pr_assert_allclose("sv wide", s, (double[]){2, 1}, 2, 1e-14, 1e-14);
}

static void test_planted_ranks(void **state)
{
    (void)state;
    enum { M = 7, N = 5 };
    double a[M * N], u[3][M], v[3][N];
    for (int l = 0; l < 3; l++) {
        for (int i = 0; i < M; i++) u[l][i] = pr_philox_normal(3, 1, (uint64_t)(l * 100 + i));
        for (int j = 0; j < N; j++) v[l][j] = pr_philox_normal(3, 2, (uint64_t)(l * 100 + j));
    }
    for (int terms = 0; terms <= 3; terms++) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                a[i * N + j] = 0;
                for (int l = 0; l < terms; l++) a[i * N + j] += u[l][i] * v[l][j];
            }
        assert_int_equal(pr_matrix_rank(a, M, N, 1e-6), terms);
        double at[N * M];   /* the transpose: a wide matrix */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) at[j * M + i] = a[i * N + j];
        assert_int_equal(pr_matrix_rank(at, N, M, 1e-6), terms);
    }
    /* singular values 1, 1e-3, 1e-9: the last is below 1e-6 of the largest */
    double d[9] = {1, 0, 0, 0, 1e-3, 0, 0, 0, 1e-9};
    assert_int_equal(pr_matrix_rank(d, 3, 3, 1e-6), 2);
    assert_int_equal(pr_matrix_rank(d, 3, 3, 1e-12), 3);
}

/* runs the rule on random inputs (planted: kx_0 := k) and checks every rank */
static void check_write_ranks(pr_rule rule, int64_t L, bool plant, int want, int want_max)
{
    enum { B = 2, T = 5, H = 2, K = 6, V = 4 };
    pr_ctx *ctx = pr_ctx_new(1);
    pr_rng r = pr_rng_init(11, 0);
    pr_recurrence_inputs in = pr_recurrence_random(ctx, &r, PR_F64, rule, B, T, H, K, V, L, false);
    if (plant)
        for (int64_t th = 0; th < B * T * H; th++)
            for (int64_t i = 0; i < K; i++) pr_set(in.kx, (th * L + 0) * K + i, pr_get(in.k, th * K + i));
    pr_recurrence_opts opt = {.rule = rule, .chunk = 0};
    pr_recurrence(ctx, &opt, in.q, in.k, in.v, in.g, in.beta, in.kx, in.vx, NULL, NULL, NULL);
    assert_int_equal(ctx->n_tape, 1);
    int ranks[B * T * H];
    assert_int_equal(pr_recurrence_write_ranks(&ctx->tape[0], 1e-6, ranks), want_max);
    for (int i = 0; i < B * T * H; i++)
        if (ranks[i] != want) fail_msg("%s L=%lld: (token, head) %d has rank %d, expected %d", pr_rule_name(rule),
                                       (long long)L, i, ranks[i], want);
    pr_ctx_free(ctx);
}

static void test_write_ranks(void **state)
{
    (void)state;
    check_write_ranks(PR_RULE_GDN, 0, false, 1, 1);
    check_write_ranks(PR_RULE_SSD, 0, false, 1, 1);
    check_write_ranks(PR_RULE_PRISM_CORE, 1, false, 2, 2);
    check_write_ranks(PR_RULE_PRISM_CORE, 2, false, 3, 3);
    check_write_ranks(PR_RULE_PRISM_CORE, 2, true, 2, 3);   /* kx_0 = k: k (beta v + vx_0)^T + kx_1 vx_1^T */
    check_write_ranks(PR_RULE_PRISM_CORE, 5, false, 4, 4);   /* capped by V = 4 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_singular_values),
        cmocka_unit_test(test_planted_ranks),
        cmocka_unit_test(test_write_ranks),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
