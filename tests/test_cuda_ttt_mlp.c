/* tests/test_cuda_ttt_mlp.c: TTT-MLP and Titans on CUDA (f32; TTT-MLP also bf16 data) against the CPU.
 *
 * Each case draws f64 inputs, runs forward and the backward of the sum over
 * outputs of sum(out * g) on the CPU in f64 and f32 and twice on CUDA in f32,
 * and compares CUDA with both (max|diff| over the reference's max-abs, 1e-4:
 * the CPU computes in double, so this is the kernels' f32 rounding); the two
 * CUDA runs must agree bit for bit (no float atomics). Sizes are awkward: T
 * not a multiple of the mini-batch, odd d, a mini-batch of 5, one token,
 * no optional inputs, and the model's d = 64 (hidden 256). The golden file
 * runs on CUDA too. TTT-MLP on bf16 data (q, k, v, eta bf16, the rest f32)
 * against the CPU in f64 on the same rounded values: each output and grad in
 * its dtype within its one rounding (bf16 2^-8, f32 2^-24 of max|ref|) plus
 * the kernels' 1e-4, and bit for bit on a rerun. Every case skips without a
 * GPU.
 */
#include "tests/test_ttt_ops2_util.h"

static void cuda_case(const op2_desc *op, int B, int T, int H, int d, int N, int mb, bool optional)
{
    PR_SKIP_WITHOUT_CUDA();
    const double tol = 1e-4;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[MAXIN], *g[MAXOUT], *o[MAXOUT];
    random_inputs(ctx, op, 100 + (uint64_t)(T * 131 + d), B, T, H, d, N, in);
    if (!optional) { /* ttt_mlp: b1, b2; titans: h0, s0 */
        in[op == &titans_desc ? 8 : 7] = in[9] = NULL;
    }
    pr_rng r = pr_rng_init(5, 1);
    op->apply(ctx, mb, 1e-6, in, o);
    for (int i = 0; i < op->n_out; i++) g[i] = pr_randu(ctx->step, PR_F64, PR_CPU, o[i]->ndim, o[i]->shape, &r, -1, 1);
    run_out c64 = run_op(ctx, op, mb, 1e-6, in, g, PR_F64, PR_CPU);
    run_out c32 = run_op(ctx, op, mb, 1e-6, in, g, PR_F32, PR_CPU);
    run_out gpu = run_op(ctx, op, mb, 1e-6, in, g, PR_F32, PR_CUDA);
    run_out gpu2 = run_op(ctx, op, mb, 1e-6, in, g, PR_F32, PR_CUDA);
    char what[128];
    snprintf(what, sizeof what, "%s B=%d T=%d H=%d d=%d N=%d mb=%d%s cuda vs cpu f32", op->name, B, T, H, d, N, mb,
             optional ? "" : " no optional");
    compare_runs(what, op, &gpu, &c32, tol);
    snprintf(what, sizeof what, "%s B=%d T=%d H=%d d=%d N=%d mb=%d cuda vs cpu f64", op->name, B, T, H, d, N, mb);
    compare_runs(what, op, &gpu, &c64, tol);
    for (int i = 0; i < op->n_out; i++) assert_memory_equal(gpu.out[i], gpu2.out[i], sizeof(double) * (size_t)gpu.n_out[i]);
    for (int i = 0; i < op->n_in; i++)
        if (gpu.d[i]) assert_memory_equal(gpu.d[i], gpu2.d[i], sizeof(double) * (size_t)gpu.n[i]);
    run_out_free(&c64), run_out_free(&c32), run_out_free(&gpu), run_out_free(&gpu2);
    pr_ctx_free(ctx);
}

static void bf16_case(int B, int T, int H, int d, int N, int mb)
{
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[MAXIN], *g[MAXOUT], *o[MAXOUT];
    random_inputs(ctx, &ttt_mlp_desc, 400 + (uint64_t)(T * 7 + d), B, T, H, d, N, in);
    ttt_mlp_apply(ctx, mb, 1e-6, in, o);
    pr_rng r = pr_rng_init(6, 1);
    for (int i = 0; i < ttt_mlp_desc.n_out; i++) g[i] = pr_randu(ctx->step, PR_F64, PR_CPU, o[i]->ndim, o[i]->shape, &r, -1, 1);
    run_out want = run_mlp_bf16(ctx, mb, 1e-6, in, g, PR_CPU, true);
    run_out got = run_mlp_bf16(ctx, mb, 1e-6, in, g, PR_CUDA, false), again = run_mlp_bf16(ctx, mb, 1e-6, in, g, PR_CUDA, false);
    char what[96];
    snprintf(what, sizeof what, "ttt_mlp B=%d T=%d H=%d d=%d N=%d mb=%d bf16 data cuda", B, T, H, d, N, mb);
    compare_bf16(what, &got, &want, 1e-4);
    for (int i = 0; i < ttt_mlp_desc.n_out; i++) assert_memory_equal(got.out[i], again.out[i], sizeof(double) * (size_t)got.n_out[i]);
    for (int i = 0; i < ttt_mlp_desc.n_in; i++)
        if (got.d[i]) assert_memory_equal(got.d[i], again.d[i], sizeof(double) * (size_t)got.n[i]);
    run_out_free(&want), run_out_free(&got), run_out_free(&again);
    pr_ctx_free(ctx);
}

static void test_mlp_bf16(void **s) { (void)s, bf16_case(2, 37, 3, 16, 64, 16); }
static void test_mlp_bf16_odd(void **s) { (void)s, bf16_case(1, 13, 2, 5, 7, 5); }

static void test_mlp_partial(void **s) { (void)s, cuda_case(&ttt_mlp_desc, 2, 37, 3, 16, 64, 16, true); }
static void test_mlp_odd(void **s) { (void)s, cuda_case(&ttt_mlp_desc, 1, 13, 2, 5, 7, 5, true); }
static void test_mlp_token(void **s) { (void)s, cuda_case(&ttt_mlp_desc, 2, 1, 2, 16, 64, 16, false); }
static void test_mlp_serial(void **s) { (void)s, cuda_case(&ttt_mlp_desc, 1, 9, 2, 8, 32, 1, false); }
static void test_mlp_d64(void **s) { (void)s, cuda_case(&ttt_mlp_desc, 1, 20, 2, 64, 256, 16, true); }
static void test_titans_partial(void **s) { (void)s, cuda_case(&titans_desc, 2, 37, 3, 16, 0, 16, true); }
static void test_titans_odd(void **s) { (void)s, cuda_case(&titans_desc, 1, 13, 2, 5, 0, 5, true); }
static void test_titans_token(void **s) { (void)s, cuda_case(&titans_desc, 2, 1, 2, 16, 0, 16, false); }
static void test_titans_serial(void **s) { (void)s, cuda_case(&titans_desc, 1, 9, 2, 8, 0, 1, false); }
static void test_titans_d64(void **s) { (void)s, cuda_case(&titans_desc, 1, 20, 2, 64, 0, 16, true); }

static void test_golden(void **s)
{
    (void)s;
    PR_SKIP_WITHOUT_CUDA();
    golden_case(&ttt_mlp_desc, PR_F32, PR_CUDA, 1e-4);
    golden_case(&titans_desc, PR_F32, PR_CUDA, 1e-4);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_partial),    cmocka_unit_test(test_mlp_odd),
        cmocka_unit_test(test_mlp_token),      cmocka_unit_test(test_mlp_serial),
        cmocka_unit_test(test_mlp_d64),        cmocka_unit_test(test_titans_partial),
        cmocka_unit_test(test_titans_odd),     cmocka_unit_test(test_titans_token),
        cmocka_unit_test(test_titans_serial),  cmocka_unit_test(test_titans_d64),
        cmocka_unit_test(test_golden),         cmocka_unit_test(test_mlp_bf16),
        cmocka_unit_test(test_mlp_bf16_odd),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
