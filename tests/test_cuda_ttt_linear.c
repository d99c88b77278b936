/* tests/test_cuda_ttt_linear.c: TTT-Linear on CUDA (f32 and bf16 data) against the CPU.
 *
 * Each case draws f64 inputs on the CPU, runs forward and the backward of
 * sum(o*do) + sum(ht*dht) + sum(hbt*dhbt) on the CPU in f64 and f32 and on
 * CUDA in f32, and compares CUDA with both, per tensor, as max|diff| over the
 * reference's max-abs. Tolerance 1e-4: the CPU computes in double, so this is
 * the f32 kernel's own rounding, sums of at most K + 2 mb products per entry
 * through two LayerNorms (an H200 measured <= 7.1e-7). The CUDA
 * backward runs twice and must agree bit for bit (no float atomics). Cases:
 * T=37 with mini-batch 16 (partial last), T=1, K=64, K=128, odd K (the
 * kernels' scalar loops), mini-batches that are not a multiple of 4, and no
 * initial state; K > 128 and a mini-batch too large for shared memory are
 * fatal with a message. TF32 products (ctx->matmul_tf32; the kernels use
 * them in mini-batches whose sizes are multiples of 16): K=64 with a partial
 * last mini-batch, K=128, mini-batch 32 and odd K, within 2e-3 (an H200
 * measured <= 8.8e-4). bf16 data (q, k, v, eta bf16; w, b, h0, hb0 f32)
 * against the CPU in f64 on the same rounded values: every output and grad
 * in its dtype, within its one rounding (bf16 2^-8 of max|ref|, three for
 * the grads, which three backward passes round) plus the f32 kernels'
 * 1e-4; with tensor cores on, plus 2e-3 for TF32 products (K=64) or 8e-3
 * for bf16 ones (K=128: operands rounded to bf16, 4x TF32's rounding).
 * Every CUDA case runs the three plans of the backward
 * (pr_ttt_opts.bwd FUSED; SPLIT: a local kernel per mini-batch, then the
 * serial one; OVERLAP: both in one cooperative launch), each
 * against the CPU and bit-identical on a rerun; an unknown plan is fatal. A last case
 * times forward and forward+backward at B=8 T=256 H=16 K=128 mini-batch 16
 * (printed, not asserted; skipped when PRISM_SKIP_BENCH is set). Every case
 * skips without a GPU.
 */
#include <time.h>

#include "tests/test_ttt_util.h"

/* TF32 products round their inputs to 11 significant bits (2^-11 relative);
 * sums of K + 2 mb such products through two LayerNorms and the mini-batches'
 * chain of states */
#define TF32_TOL 2e-3
#define BF16_MM_TOL 8e-3

/* copies of src (f64, CPU) in dt on dev; forward; the three backward passes
 * (input grads accumulate over them) seeded with g (f64, CPU); host copies */
static run_out run_on(pr_ctx *ctx, const pr_ttt_opts *opt, pr_tensor *const *src, pr_tensor *const *g, pr_dtype dt,
                      pr_device dev, int tf32)
{
    ctx->matmul_tf32 = tf32;
    pr_tensor *in[NIN] = {0};
    for (int i = 0; i < NIN; i++)
        if (src[i]) {
            in[i] = pr_to(ctx->step, src[i], dt, dev);
            pr_requires_grad_(in[i], true);
        }
    pr_tensor *ht, *hbt, *o = pr_ttt_linear(ctx, opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], &ht, &hbt);
    pr_tensor *outs[3] = {o, ht, hbt};
    for (int i = 0; i < 3; i++) pr_backward_with(ctx, outs[i], pr_to(ctx->step, g[i], dt, dev));
    run_out r = {0};
    for (int i = 0; i < 3; i++) r.out[i] = host(outs[i], &r.n_out[i]);
    for (int i = 0; i < NIN; i++)
        if (in[i]) r.d[i] = host(in[i]->grad, &r.n[i]);
    ctx->matmul_tf32 = 0;
    return r;
}

/* every output and grad of got within tol of ref */
static void compare(const char *what, const run_out *got, const run_out *ref, double tol)
{
    static const char *const outs[3] = {"o", "ht", "hbt"};
    assert_runs_close(what, outs, 3, in_names, NIN, got, ref, tol);
}

static void random_inputs(pr_ctx *ctx, uint64_t seed, int B, int T, int H, int K, bool state, pr_tensor **in,
                          pr_tensor **g)
{
    pr_rng r = pr_rng_init(seed, 0);
    const int64_t sh[NIN][4] = {{B, T, H, K}, {B, T, H, K}, {B, T, H, K}, {H, K},
                                {H, K},       {B, T, H, 1}, {B, H, K, K}, {B, H, 1, K}};
    const int nd[NIN] = {4, 4, 4, 2, 2, 4, 4, 4};
    const double lo[NIN] = {-1, -1, -1, 0.5, -0.5, 0.01, -0.3, -0.3}, hi[NIN] = {1, 1, 1, 1.5, 0.5, 0.3, 0.3, 0.3};
    for (int i = 0; i < NIN; i++)
        in[i] = i < 6 || state ? pr_randu(ctx->step, PR_F64, PR_CPU, nd[i], sh[i], &r, lo[i], hi[i]) : NULL;
    g[0] = pr_randu(ctx->step, PR_F64, PR_CPU, 4, sh[0], &r, -1, 1);
    g[1] = pr_randu(ctx->step, PR_F64, PR_CPU, 4, sh[6], &r, -1, 1);
    g[2] = pr_randu(ctx->step, PR_F64, PR_CPU, 4, sh[7], &r, -1, 1);
}

/* the backward's plan (ops/ttt_linear.cu, plan_bwd): 0 fused, 1 split, 2 split overlapped */
#define NPLANS 3
static pr_ttt_opts with_plan(const pr_ttt_opts *opt, int plan)
{
    pr_ttt_opts o = *opt;
    o.bwd = (pr_ttt_bwd)(PR_TTT_BWD_FUSED + plan);
    return o;
}
static const char *const plan_names[NPLANS] = {"fused", "split", "overlapped"};

static void cuda_case_as(int B, int T, int H, int K, int mb, bool state, int tf32)
{
    PR_SKIP_WITHOUT_CUDA();
    const double tol = tf32 ? TF32_TOL : 1e-4;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[NIN], *g[3];
    random_inputs(ctx, 100 + (uint64_t)(T * 131 + K), B, T, H, K, state, in, g);
    const pr_ttt_opts opt = {.mini_batch = mb, .eps = 1e-6};
    run_out c64 = run_on(ctx, &opt, in, g, PR_F64, PR_CPU, 0);
    run_out c32 = run_on(ctx, &opt, in, g, PR_F32, PR_CPU, 0);
    for (int plan = 0; plan < NPLANS; plan++) {
        const pr_ttt_opts po = with_plan(&opt, plan);
        run_out gpu = run_on(ctx, &po, in, g, PR_F32, PR_CUDA, tf32);
        run_out gpu2 = run_on(ctx, &po, in, g, PR_F32, PR_CUDA, tf32);
        char what[112];
        const char *form = tf32 ? " tf32" : "", *h0 = state ? "" : " no h0";
        snprintf(what, sizeof what, "B=%d T=%d H=%d K=%d mb=%d%s%s %s cuda vs cpu f32", B, T, H, K, mb, h0, form,
                 plan_names[plan]);
        compare(what, &gpu, &c32, tol);
        snprintf(what, sizeof what, "B=%d T=%d H=%d K=%d mb=%d%s%s %s cuda vs cpu f64", B, T, H, K, mb, h0, form,
                 plan_names[plan]);
        compare(what, &gpu, &c64, tol);
        for (int i = 0; i < 3; i++) assert_memory_equal(gpu.out[i], gpu2.out[i], sizeof(double) * (size_t)gpu.n_out[i]);
        for (int i = 0; i < NIN; i++)
            if (gpu.d[i]) assert_memory_equal(gpu.d[i], gpu2.d[i], sizeof(double) * (size_t)gpu.n[i]);
        run_out_free(&gpu), run_out_free(&gpu2);
    }
    run_out_free(&c64), run_out_free(&c32);
    pr_ctx_free(ctx);
}

static void cuda_case(int B, int T, int H, int K, int mb, bool state) { cuda_case_as(B, T, H, K, mb, state, 0); }

static void test_partial_minibatch(void **s) { (void)s, cuda_case(2, 37, 3, 16, 16, true); }
static void test_one_token(void **s) { (void)s, cuda_case(2, 1, 2, 16, 16, false); }
static void test_k64(void **s) { (void)s, cuda_case(2, 37, 2, 64, 16, true); }
static void test_k128(void **s) { (void)s, cuda_case(1, 20, 2, 128, 16, true); }
static void test_odd_k(void **s) { (void)s, cuda_case(1, 11, 2, 5, 3, true); }
static void test_no_state(void **s) { (void)s, cuda_case(2, 37, 2, 32, 16, false); }
static void test_mb5(void **s) { (void)s, cuda_case(1, 13, 2, 16, 5, true); }
/* TF32 products (ctx->matmul_tf32) in the mini-batches whose sizes are
 * multiples of 16, fp32 in the rest: a partial last one (T=37), every one
 * (T=48), mini-batch 32 with a last of 8, and odd K (fp32 throughout) */
static void test_tf32_k64(void **s) { (void)s, cuda_case_as(2, 37, 2, 64, 16, true, 1); }
static void test_tf32_k128(void **s) { (void)s, cuda_case_as(1, 48, 2, 128, 16, true, 1); }
static void test_tf32_mb32(void **s) { (void)s, cuda_case_as(1, 40, 2, 32, 32, false, 1); }
static void test_tf32_odd_k(void **s) { (void)s, cuda_case_as(1, 11, 2, 5, 3, true, 1); }

/* the dtype of input i on bf16 data (ops/ttt_linear.h) */
static pr_dtype bf16_dtype(int i) { return i <= 2 || i == 5 ? PR_BF16 : PR_F32; }

/* forward and the three backward passes on inputs and seeds as given; host copies */
static run_out run_as_is(pr_ctx *ctx, const pr_ttt_opts *opt, pr_tensor *const *in, pr_tensor *const *g)
{
    for (int i = 0; i < NIN; i++) in[i]->grad = NULL;
    pr_tensor *ht, *hbt, *o = pr_ttt_linear(ctx, opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], &ht, &hbt);
    assert_int_equal(o->dtype, in[0]->dtype);
    assert_int_equal(ht->dtype, in[0]->dtype == PR_BF16 ? PR_F32 : in[0]->dtype);
    pr_tensor *outs[3] = {o, ht, hbt};
    for (int i = 0; i < 3; i++) pr_backward_with(ctx, outs[i], g[i]);
    run_out r = {0};
    for (int i = 0; i < 3; i++) r.out[i] = host(outs[i], &r.n_out[i]);
    for (int i = 0; i < NIN; i++) {
        assert_int_equal(in[i]->grad->dtype, in[i]->dtype);
        r.d[i] = host(in[i]->grad, &r.n[i]);
    }
    return r;
}

static void bf16_case(int B, int T, int H, int K, int mb, int tf32)
{
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(0);
    /* the kernels' own error: fp32 products, TF32 ones, or (K > 64) bf16 ones,
     * whose operands round 4x coarser than TF32's */
    const double mm_tol = !tf32 ? 1e-4 : K > 64 ? BF16_MM_TOL : TF32_TOL;
    pr_tensor *raw[NIN], *raw_g[3], *ref[NIN], *gpu[NIN], *gref[3], *ggpu[3];
    random_inputs(ctx, 300 + (uint64_t)(T * 7 + K), B, T, H, K, true, raw, raw_g);
    for (int i = 0; i < NIN; i++) {
        pr_tensor *lo = pr_to(ctx->step, raw[i], bf16_dtype(i), PR_CPU);
        ref[i] = pr_to(ctx->step, lo, PR_F64, PR_CPU), gpu[i] = pr_to(ctx->step, lo, lo->dtype, PR_CUDA);
        pr_requires_grad_(ref[i], true), pr_requires_grad_(gpu[i], true);
    }
    for (int i = 0; i < 3; i++) {
        pr_tensor *lo = pr_to(ctx->step, raw_g[i], i == 0 ? PR_BF16 : PR_F32, PR_CPU);
        gref[i] = pr_to(ctx->step, lo, PR_F64, PR_CPU), ggpu[i] = pr_to(ctx->step, lo, lo->dtype, PR_CUDA);
    }
    const pr_ttt_opts opt = {.mini_batch = mb, .eps = 1e-6};
    run_out want = run_as_is(ctx, &opt, ref, gref);
    ctx->matmul_tf32 = tf32;
    for (int plan = 0; plan < NPLANS; plan++) {
        const pr_ttt_opts po = with_plan(&opt, plan);
        run_out got = run_as_is(ctx, &po, gpu, ggpu), again = run_as_is(ctx, &po, gpu, ggpu);
        char what[80];
        snprintf(what, sizeof what, "B=%d T=%d H=%d K=%d mb=%d bf16 data%s %s", B, T, H, K, mb, tf32 ? " tf32" : "",
                 plan_names[plan]);
        static const char *outs[3] = {"o", "ht", "hbt"};
        for (int i = 0; i < 3; i++) {
            const double e = rel_err(got.out[i], want.out[i], want.n_out[i]), tol = (i == 0 ? 0x1p-8 : 0) + mm_tol;
            fprintf(stderr, "  %s %-4s rel_err %.2e\n", what, outs[i], e);
            if (!(e <= tol)) fail_msg("%s: %s rel_err %.3g > %.3g", what, outs[i], e, tol);
            assert_memory_equal(got.out[i], again.out[i], sizeof(double) * (size_t)got.n_out[i]);
        }
        for (int i = 0; i < NIN; i++) {
            const double e = rel_err(got.d[i], want.d[i], want.n[i]);
            const double tol = (bf16_dtype(i) == PR_BF16 ? 3 * 0x1p-8 : 0) + mm_tol;
            fprintf(stderr, "  %s d%-3s rel_err %.2e\n", what, in_names[i], e);
            if (!(e <= tol)) fail_msg("%s: d%s rel_err %.3g > %.3g", what, in_names[i], e, tol);
            assert_memory_equal(got.d[i], again.d[i], sizeof(double) * (size_t)got.n[i]);
        }
        run_out_free(&got), run_out_free(&again);
    }
    run_out_free(&want);
    pr_ctx_free(ctx);
}

static void test_bf16_k64(void **s) { (void)s, bf16_case(2, 37, 2, 64, 16, 0); }
static void test_bf16_odd(void **s) { (void)s, bf16_case(1, 13, 2, 5, 5, 0); }
/* tensor cores on: TF32 products at K = 64, bf16 ones at K = 128 (a partial
 * last mini-batch in both) */
static void test_bf16_tf32_k64(void **s) { (void)s, bf16_case(2, 37, 2, 64, 16, 1); }
static void test_bf16_k128_bf16mm(void **s) { (void)s, bf16_case(1, 40, 2, 128, 16, 1); }

static void test_limits(void **s)
{
    (void)s;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[NIN], *g[3], *c[NIN];
    random_inputs(ctx, 7, 1, 3, 1, 132, true, in, g);
    for (int i = 0; i < NIN; i++) c[i] = pr_to(ctx->step, in[i], PR_F32, PR_CUDA);
    pr_ttt_opts opt = {.mini_batch = 16};
    PR_EXPECT_FATAL(pr_ttt_linear(ctx, &opt, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], NULL, NULL),
                    "ttt_linear: CUDA supports K <= 128");
    random_inputs(ctx, 7, 1, 3, 1, 128, true, in, g);
    for (int i = 0; i < NIN; i++) c[i] = pr_to(ctx->step, in[i], PR_F32, PR_CUDA);
    opt.mini_batch = 64;
    PR_EXPECT_FATAL(pr_ttt_linear(ctx, &opt, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], NULL, NULL),
                    "bytes of shared memory");
    opt.mini_batch = 16;
    for (int i = 0; i < NIN; i++) pr_requires_grad_(c[i], true);
    opt.bwd = (pr_ttt_bwd)4; /* a recorded forward asks the backward's plan (whether it overlaps) */
    PR_EXPECT_FATAL(pr_ttt_linear(ctx, &opt, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], NULL, NULL),
                    "ttt_linear: bwd must be PR_TTT_BWD_PLANNED, _FUSED, _SPLIT or _OVERLAP, got 4");
    pr_ctx_free(ctx);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* the benchmark size; a report, not an assertion */
static void test_timing(void **s)
{
    (void)s;
    PR_SKIP_WITHOUT_CUDA();
    if (getenv("PRISM_SKIP_BENCH")) skip(); /* e.g. under compute-sanitizer */
    const int B = 8, T = 256, H = 16, K = 128, reps = 5;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_arena *a = pr_arena_new("ttt-bench", 0);
    pr_rng r = pr_rng_init(1, 0);
    pr_tensor *in[NIN];
    const int64_t sh[NIN][4] = {{B, T, H, K}, {B, T, H, K}, {B, T, H, K}, {H, K},
                                {H, K},       {B, T, H, 1}, {B, H, K, K}, {B, H, 1, K}};
    const int nd[NIN] = {4, 4, 4, 2, 2, 4, 4, 4};
    const double lo[NIN] = {-1, -1, -1, 0.5, -0.5, 0.01, -0.1, -0.1}, hi[NIN] = {1, 1, 1, 1.5, 0.5, 0.1, 0.1, 0.1};
    for (int i = 0; i < NIN; i++) {
        in[i] = pr_randu(a, PR_F32, PR_CUDA, nd[i], sh[i], &r, lo[i], hi[i]);
        pr_requires_grad_(in[i], true);
    }
    pr_tensor *dout = pr_randu(a, PR_F32, PR_CUDA, 4, sh[0], &r, -1, 1);
    const pr_ttt_opts opt = {.mini_batch = 16, .eps = 1e-6};
    double fwd = 0, both = 0;
    for (int it = 0; it <= reps; it++) { /* iteration 0 warms up */
        pr_device_sync(PR_CUDA);
        double t0 = now_ms();
        pr_tensor *o = pr_ttt_linear(ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, NULL);
        pr_device_sync(PR_CUDA);
        double t1 = now_ms();
        pr_backward_with(ctx, o, dout);
        pr_device_sync(PR_CUDA);
        double t2 = now_ms();
        if (it > 0) fwd += t1 - t0, both += t2 - t0;
        pr_step_reset(ctx);
    }
    fprintf(stderr, "  ttt_linear cuda f32 B=%d T=%d H=%d K=%d mb=16: forward %.3f ms, forward+backward %.3f ms "
            "(mean of %d)\n", B, T, H, K, fwd / reps, both / reps, reps);
    pr_ctx_free(ctx);
    pr_arena_free(a);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_minibatch), cmocka_unit_test(test_one_token),
        cmocka_unit_test(test_k64),               cmocka_unit_test(test_k128),
        cmocka_unit_test(test_odd_k),             cmocka_unit_test(test_no_state),
        cmocka_unit_test(test_mb5),               cmocka_unit_test(test_limits),
        cmocka_unit_test(test_tf32_k64),          cmocka_unit_test(test_tf32_k128),
        cmocka_unit_test(test_tf32_mb32),         cmocka_unit_test(test_tf32_odd_k),
        cmocka_unit_test(test_bf16_k64),          cmocka_unit_test(test_bf16_odd),
        cmocka_unit_test(test_bf16_tf32_k64),     cmocka_unit_test(test_bf16_k128_bf16mm),
        cmocka_unit_test(test_timing),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
