/* tests/test_cuda_attention.c: attention on CUDA (f32) against the CPU (f64).
 *
 * Each case draws inputs on the CPU, runs o and the backward of sum(o*do) on
 * the CPU in f64 and on CUDA in f32 with exact fp32 math (tolerance 1e-4) and
 * with TF32 tensor cores (2e-3, as the recurrences), every tensor as max|diff|
 * over the reference's max-abs; the TF32 run is repeated and must agree bit
 * for bit (no atomics). Cases: T not a multiple of the 64-row tiles, T = 1,
 * odd D and Dv, D = Dv = 128, Dv != D, Hkv < H and Hkv = H, packed sequences
 * (cu_seqlens with lengths 1, 63, 64, 65, 7). Decoding on CUDA equals the
 * CPU's, with a per-row n_valid. Every case skips without a GPU.
 */
#include "tests/test_cuda_ops2_util.h"

static const char *const names[4] = {"o", "dq", "dk", "dv"};

static void att_fn(pr_ctx *ctx, pr_tensor *const *in, pr_tensor *cu, pr_tensor **outs)
{
    outs[0] = pr_attention(ctx, in[0], in[1], in[2], 0, cu);
}

static void cuda_case(int B, int T, int H, int Hkv, int D, int Dv, const int64_t *cu, int n_cu)
{
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init((uint64_t)(T * 977 + D * 31 + Dv), 0);
    pr_tensor *in[3] = {pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, H, D), &r),
                        pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, Hkv, D), &r),
                        pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, Hkv, Dv), &r)};
    pr_tensor *g[1] = {pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, H, Dv), &r)};
    char what[96];
    snprintf(what, sizeof what, "B=%d T=%d H=%d Hkv=%d D=%d Dv=%d%s", B, T, H, Hkv, D, Dv, cu ? " packed" : "");
    host_run ref = run_on(ctx, att_fn, 3, in, cu, n_cu, 1, g, PR_F64, PR_CPU, 0);
    host_run f32 = run_on(ctx, att_fn, 3, in, cu, n_cu, 1, g, PR_F32, PR_CUDA, 0);
    host_run tf = run_on(ctx, att_fn, 3, in, cu, n_cu, 1, g, PR_F32, PR_CUDA, 1);
    host_run tf2 = run_on(ctx, att_fn, 3, in, cu, n_cu, 1, g, PR_F32, PR_CUDA, 1);
    char w2[128];
    snprintf(w2, sizeof w2, "%s fp32", what);
    compare_runs(w2, &f32, &ref, names, 1e-4);
    snprintf(w2, sizeof w2, "%s tf32", what);
    compare_runs(w2, &tf, &ref, names, 2e-3);
    assert_bitwise(what, &tf, &tf2);
    host_run_free(&ref), host_run_free(&f32), host_run_free(&tf), host_run_free(&tf2);
    pr_ctx_free(ctx);
}

static void test_odd_dims(void **s) { (void)s, cuda_case(2, 77, 4, 2, 5, 3, NULL, 0); }
static void test_one_token(void **s) { (void)s, cuda_case(3, 1, 2, 1, 16, 8, NULL, 0); }
static void test_d128(void **s) { (void)s, cuda_case(1, 130, 6, 2, 128, 128, NULL, 0); }
static void test_dv_ne_d(void **s) { (void)s, cuda_case(2, 65, 3, 3, 33, 97, NULL, 0); }
static void test_packed(void **s)
{
    (void)s;
    const int64_t cu[6] = {0, 1, 64, 128, 193, 200};
    cuda_case(1, 200, 4, 1, 64, 40, cu, 6);
}

static void test_decode(void **s)
{
    (void)s;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(21, 0);
    const int64_t B = 3, Tc = 300, H = 8, Hkv = 2, D = 72, Dv = 100, nv[3] = {1, 177, 300};
    pr_tensor *q = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, 1, H, D), &r);
    pr_tensor *k = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, Tc, Hkv, D), &r);
    pr_tensor *v = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, Tc, Hkv, Dv), &r);
    pr_tensor *ref = pr_attention_decode(ctx, q, k, v, nv, 0);
    pr_tensor *got = pr_attention_decode(ctx, pr_to(ctx->step, q, PR_F32, PR_CUDA), pr_to(ctx->step, k, PR_F32, PR_CUDA),
                                         pr_to(ctx->step, v, PR_F32, PR_CUDA), nv, 0);
    assert_rel("decode cuda vs cpu", got, ref, 1e-5);
    pr_ctx_free(ctx);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_dims), cmocka_unit_test(test_one_token), cmocka_unit_test(test_d128),
        cmocka_unit_test(test_dv_ne_d),  cmocka_unit_test(test_packed),    cmocka_unit_test(test_decode),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
