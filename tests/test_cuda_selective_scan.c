/* tests/test_cuda_selective_scan.c: the selective scan on CUDA (f32) against
 * the CPU (f64).
 *
 * Each case runs y, ht and the backward of sum(y*dy) + sum(ht*dht) on the CPU
 * in f64 and twice on CUDA in f32 (the scan has no matmul: one tolerance,
 * 1e-4 of the reference's max-abs), and the two CUDA runs must agree bit for
 * bit. Cases: T not a multiple of the 32-token chunk, T = 1, N = 1, 5, 16,
 * 33 and 64 (every lane layout), D not a multiple of a block's channels,
 * packed sequences (lengths 1, 31, 32, 33, 3) with an h0 each, and without
 * the optional inputs. Every case skips without a GPU.
 */
#include "tests/test_cuda_ops2_util.h"

static const char *const names[11] = {"y", "ht", "du", "ddelta", "dA", "dB", "dC", "dD", "dz", "dbias", "dh0"};
static const char *const names_min[7] = {"y", "ht", "du", "ddelta", "dA", "dB", "dC"};

static void ss_fn(pr_ctx *ctx, pr_tensor *const *in, pr_tensor *cu, pr_tensor **outs)
{
    outs[0] = pr_selective_scan(ctx, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], cu, &outs[1]);
}

static void cuda_case(int B, int T, int D, int N, const int64_t *cu, int n_cu, bool optional)
{
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init((uint64_t)(T * 131 + D * 7 + N), 0);
    const int S = cu ? n_cu - 1 : B;
    const double lo[9] = {-1, -2, -1.5, -1, -1, -1, -2, -0.5, -0.5}, hi[9] = {1, 1, -0.05, 1, 1, 1, 2, 0.5, 0.5};
    const int64_t sh[9][3] = {{B, T, D}, {B, T, D}, {D, N}, {B, T, N}, {B, T, N}, {D}, {B, T, D}, {D}, {S, D, N}};
    const int nd[9] = {3, 3, 2, 3, 3, 1, 3, 1, 3};
    pr_tensor *in[9];
    for (int i = 0; i < 9; i++)
        in[i] = optional || i < 5 ? pr_randu(ctx->step, PR_F64, PR_CPU, nd[i], sh[i], &r, lo[i], hi[i]) : NULL;
    pr_tensor *g[2] = {pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, D), &r),
                       pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(S, D, N), &r)};
    char what[96];
    snprintf(what, sizeof what, "B=%d T=%d D=%d N=%d%s%s", B, T, D, N, cu ? " packed" : "", optional ? "" : " bare");
    host_run ref = run_on(ctx, ss_fn, 9, in, cu, n_cu, 2, g, PR_F64, PR_CPU, 0);
    host_run got = run_on(ctx, ss_fn, 9, in, cu, n_cu, 2, g, PR_F32, PR_CUDA, 0);
    host_run again = run_on(ctx, ss_fn, 9, in, cu, n_cu, 2, g, PR_F32, PR_CUDA, 0);
    compare_runs(what, &got, &ref, optional ? names : names_min, 1e-4);
    assert_bitwise(what, &got, &again);
    host_run_free(&ref), host_run_free(&got), host_run_free(&again);
    pr_ctx_free(ctx);
}

static void test_t_not_chunk(void **s) { (void)s, cuda_case(2, 77, 12, 16, NULL, 0, true); }
static void test_one_token(void **s) { (void)s, cuda_case(3, 1, 5, 5, NULL, 0, true); }
static void test_n1(void **s) { (void)s, cuda_case(1, 40, 70, 1, NULL, 0, true); }
static void test_n33_odd_d(void **s) { (void)s, cuda_case(2, 65, 9, 33, NULL, 0, true); }
static void test_n64(void **s) { (void)s, cuda_case(1, 100, 3, 64, NULL, 0, true); }
static void test_bare(void **s) { (void)s, cuda_case(2, 50, 20, 8, NULL, 0, false); }
static void test_packed(void **s)
{
    (void)s;
    const int64_t cu[6] = {0, 1, 32, 64, 97, 100};
    cuda_case(1, 100, 17, 16, cu, 6, true);
}
static void test_long(void **s) { (void)s, cuda_case(2, 1000, 40, 16, NULL, 0, true); }

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t_not_chunk), cmocka_unit_test(test_one_token), cmocka_unit_test(test_n1),
        cmocka_unit_test(test_n33_odd_d),   cmocka_unit_test(test_n64),       cmocka_unit_test(test_bare),
        cmocka_unit_test(test_packed),      cmocka_unit_test(test_long),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
