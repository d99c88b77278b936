/* tests/test_ops_b.c: matmul, embedding, conv1d, reshape/transpose/slice/
 * concat/split and dropout on the CPU.
 *
 * Every op's example is checked in tests/test_ops_all.c; here: hand-computed values, matmul's BLAS path and plain-C
 * path against a naive triple loop for every transpose flag, round trips of
 * the shape ops, dropout's statistics and determinism, and the fatal errors.
 */
#include "tests/pr_test.h"

/* internal to ops/matmul.c */
bool pr_matmul_set_blas(bool on);
void pr_gemm_fallback_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                          const void *B, void *C, double beta);
void pr_gemm_ld_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                    const void *B, int64_t ldb, void *C, int64_t ldc, double beta);

static int setup(void **state)
{
    *state = pr_ctx_new(42);
    return 0;
}

static int teardown(void **state)
{
    pr_matmul_set_blas(true);
    pr_ctx_free(*state);
    return 0;
}


/* matmul's example again on the plain-C path */
static void test_op_matmul_fallback(void **state)
{
    pr_matmul_set_blas(false);
    pr_test_op_example(*state, PR_OP_matmul, 7);
}

/* ---- matmul ----------------------------------------------------------------------- */

static pr_tensor *from_f64(pr_ctx *ctx, int ndim, const int64_t *shape, const double *v)
{
    return pr_from_host(ctx->step, PR_F64, PR_CPU, ndim, shape, v);
}

static void test_matmul_2x3_3x2(void **state)
{
    pr_ctx *ctx = *state;
    double a[] = {1, 2, 3, 4, 5, 6}, b[] = {7, 8, 9, 10, 11, 12}, ref[] = {58, 64, 139, 154};
    double at[] = {1, 4, 2, 5, 3, 6}, bt[] = {7, 9, 11, 8, 10, 12}, got[4];
    for (int blas = 0; blas < 2; blas++) {
        pr_matmul_set_blas(blas);
        for (int f = 0; f < 4; f++) {
            bool ta = f & 1, tb = f & 2;
            pr_tensor *A = ta ? from_f64(ctx, PR_DIMS(3, 2), at) : from_f64(ctx, PR_DIMS(2, 3), a);
            pr_tensor *B = tb ? from_f64(ctx, PR_DIMS(2, 3), bt) : from_f64(ctx, PR_DIMS(3, 2), b);
            pr_tensor *C = pr_matmul(ctx, A, B, ta, tb);
            assert_int_equal(C->ndim, 2);
            assert_int_equal(C->shape[0], 2);
            assert_int_equal(C->shape[1], 2);
            pr_to_host_f64(C, got);
            pr_assert_allclose("2x3 @ 3x2", got, ref, 4, 0, 0);
        }
    }
}

/* naive op(a) @ op(b) per batch, the oracle for both gemm paths */
static void naive_matmul(const double *a, const double *b, double *c, int64_t batch, int64_t M, int64_t N,
                         int64_t K, bool ta, bool tb, bool shared)
{
    for (int64_t z = 0; z < batch; z++) {
        const double *az = a + z * M * K, *bz = b + (shared ? 0 : z * K * N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (ta ? az[k * M + i] : az[i * K + k]) * (tb ? bz[j * K + k] : bz[k * N + j]);
                c[(z * M + i) * N + j] = s;
            }
    }
}

/* inputs for batch [2,3] of op(a) [M,K] @ op(b) [K,N], b shared or batched */
static void matmul_inputs(pr_ctx *ctx, pr_rng *r, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                          bool shared, pr_tensor **a, pr_tensor **b)
{
    *a = ta ? pr_example_input(ctx, r, PR_F64, PR_DIMS(2, 3, K, M), -1, 1)
            : pr_example_input(ctx, r, PR_F64, PR_DIMS(2, 3, M, K), -1, 1);
    if (shared)
        *b = tb ? pr_example_input(ctx, r, PR_F64, PR_DIMS(N, K), -1, 1)
                : pr_example_input(ctx, r, PR_F64, PR_DIMS(K, N), -1, 1);
    else
        *b = tb ? pr_example_input(ctx, r, PR_F64, PR_DIMS(2, 3, N, K), -1, 1)
                : pr_example_input(ctx, r, PR_F64, PR_DIMS(2, 3, K, N), -1, 1);
}

/* every flag pair, b shared and batched, both gemm paths, against the naive
 * loop; sizes past the fallback's 64-block so partial blocks are exercised */
static void test_matmul_flags_vs_naive(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(5, 0);
    int64_t M = 67, N = 70, K = 131;
    for (int f = 0; f < 8; f++) {
        bool ta = f & 1, tb = f & 2, shared = f & 4;
        pr_tensor *a, *b;
        matmul_inputs(ctx, &r, M, N, K, ta, tb, shared, &a, &b);
        double *ref = malloc(sizeof(double) * 6 * M * N);
        naive_matmul(a->data, b->data, ref, 6, M, N, K, ta, tb, shared);
        for (int blas = 0; blas < 2; blas++) {
            pr_matmul_set_blas(blas);
            pr_tensor *c = pr_matmul(ctx, a, b, ta, tb);
            assert_int_equal(c->ndim, 4);
            assert_int_equal(c->shape[2], M);
            assert_int_equal(c->shape[3], N);
            pr_assert_allclose(blas ? "matmul (blas)" : "matmul (fallback)", c->data, ref, c->numel, 1e-12, 1e-12);
        }
        free(ref);
        pr_step_reset(ctx);
    }
}

/* the fallback kernel directly: beta = 1 accumulates, beta = 0 overwrites garbage */
static void test_gemm_fallback_beta(void **state)
{
    (void)state;
    double a[] = {1, 2, 3, 4, 5, 6}, b[] = {7, 8, 9, 10, 11, 12}, c[] = {1, 1, 1, 1};
    double acc[] = {59, 65, 140, 155}, fresh[] = {58, 64, 139, 154};
    pr_gemm_fallback_cpu(PR_F64, false, false, 2, 2, 3, a, b, c, 1);
    pr_assert_allclose("beta=1", c, acc, 4, 0, 0);
    c[0] = NAN;
    pr_gemm_fallback_cpu(PR_F64, false, false, 2, 2, 3, a, b, c, 0);
    pr_assert_allclose("beta=0", c, fresh, 4, 0, 0);
    float af[] = {1, 4, 2, 5, 3, 6}, bf[] = {7, 9, 11, 8, 10, 12}, cf[4];
    pr_gemm_fallback_cpu(PR_F32, true, true, 2, 2, 3, af, bf, cf, 0);
    for (int i = 0; i < 4; i++) assert_true(cf[i] == (float)fresh[i]);
}

/* the gemm with row strides, on both paths and every transpose flag: a
 * product of sub-blocks of wider matrices lands in a sub-block of C, beta 1
 * accumulating and beta 0 overwriting, the cells outside C's block untouched */
static void test_gemm_ld(void **state)
{
    (void)state;
    enum { M = 3, N = 5, K = 4, LD = 9 };
    double A[LD * LD], B[LD * LD];
    for (int i = 0; i < LD * LD; i++) A[i] = sin(1.0 + i), B[i] = cos(2.0 + 0.5 * i);
    for (int blas = 0; blas < 2; blas++) {
        pr_matmul_set_blas(blas);
        for (int f = 0; f < 4; f++) {
            const bool ta = f & 1, tb = f & 2;
            for (int beta = 0; beta < 2; beta++) {
                double C[LD * LD], want[LD * LD];
                for (int i = 0; i < LD * LD; i++) C[i] = want[i] = 0.25 * i;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        double acc = beta ? want[m * LD + n] : 0;
                        for (int k = 0; k < K; k++)
                            acc += (ta ? A[k * LD + m] : A[m * LD + k]) * (tb ? B[n * LD + k] : B[k * LD + n]);
                        want[m * LD + n] = acc;
                    }
                pr_gemm_ld_cpu(PR_F64, ta, tb, M, N, K, A, LD, B, LD, C, LD, beta);
                pr_assert_allclose(blas ? "gemm ld (blas)" : "gemm ld (loop)", C, want, LD * LD, 1e-14, 1e-14);
            }
        }
    }
    pr_matmul_set_blas(true);
}

/* gradcheck for every flag pair, b shared and batched, on both paths */
static pr_tensor *mm_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_matmul(ctx, in[0], in[1], ex->iarg[0], ex->iarg[1]);
}

static void test_matmul_gradcheck_flags(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(9, 0);
    for (int f = 0; f < 16; f++) {
        bool ta = f & 1, tb = f & 2, shared = f & 4;
        pr_matmul_set_blas(f & 8);
        pr_example ex = {.n_in = 2, .iarg = {ta, tb}, .apply = mm_apply};
        matmul_inputs(ctx, &r, 3, 4, 5, ta, tb, shared, &ex.in[0], &ex.in[1]);
        char what[64];
        snprintf(what, sizeof what, "matmul ta=%d tb=%d shared=%d blas=%d", ta, tb, shared, (f & 8) != 0);
        pr_test_gradcheck_ok(ctx, what, &ex);
        pr_step_reset(ctx);
    }
}

static void test_matmul_errors(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *a = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 3));
    pr_tensor *b = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(4, 2));
    PR_EXPECT_FATAL(pr_matmul(ctx, a, b, false, false), "matmul: inner dims differ: a [2,3] and b [4,2]");
    PR_EXPECT_FATAL(pr_matmul(ctx, a, b, false, true), "K 3 vs 2");
    pr_tensor *v = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(3));
    PR_EXPECT_FATAL(pr_matmul(ctx, v, b, false, false), "at least 2 dims");
    pr_tensor *a3 = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(5, 2, 3));
    pr_tensor *b3 = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(4, 3, 2));
    PR_EXPECT_FATAL(pr_matmul(ctx, a3, b3, false, false), "leading dims");
    pr_tensor *b4 = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(1, 5, 3, 2));
    PR_EXPECT_FATAL(pr_matmul(ctx, a3, b4, false, false), "must be 2-D or have a's 3 dims");
    pr_tensor *bf = pr_zeros(ctx->step, PR_F32, PR_CPU, PR_DIMS(3, 2));
    PR_EXPECT_FATAL(pr_matmul(ctx, a, bf, false, false), "matmul: dtype mismatch");
}

/* ---- embedding ------------------------------------------------------------------------ */

static void test_embedding_values(void **state)
{
    pr_ctx *ctx = *state;
    double wv[] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
    pr_tensor *w = from_f64(ctx, PR_DIMS(4, 3), wv);
    w->requires_grad = true;
    int32_t idv[] = {2, 0, 2, 3};
    pr_tensor *ids = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(2, 2), idv);
    pr_tensor *y = pr_embedding(ctx, w, ids);
    assert_int_equal(y->ndim, 3);
    assert_int_equal(y->shape[2], 3);
    double ref[] = {20, 21, 22, 0, 1, 2, 20, 21, 22, 30, 31, 32}, got[12];
    pr_to_host_f64(y, got);
    pr_assert_allclose("embedding", got, ref, 12, 0, 0);
    pr_backward_with(ctx, y, pr_ones(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 2, 3)));
    double gref[] = {1, 1, 1, 0, 0, 0, 2, 2, 2, 1, 1, 1};
    pr_to_host_f64(w->grad, got);
    pr_assert_allclose("embedding grad (repeated id adds)", got, gref, 12, 0, 0);
}

static void test_embedding_errors(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *w = pr_zeros(ctx->step, PR_F32, PR_CPU, PR_DIMS(4, 3));
    int64_t bad[] = {1, 4}, neg[] = {-1};
    PR_EXPECT_FATAL(pr_embedding(ctx, w, pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(2), bad)),
                    "embedding: id 4 at position 1 out of range [0, V=4)");
    PR_EXPECT_FATAL(pr_embedding(ctx, w, pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(1), neg)), "id -1");
    PR_EXPECT_FATAL(pr_embedding(ctx, w, pr_zeros(ctx->step, PR_F32, PR_CPU, PR_DIMS(2))),
                    "must be int32 or int64");
    PR_EXPECT_FATAL(pr_embedding(ctx, pr_zeros(ctx->step, PR_F32, PR_CPU, PR_DIMS(12)),
                                 pr_zeros(ctx->step, PR_I64, PR_CPU, PR_DIMS(2))),
                    "embedding: weight [12] must be [V, D]");
}

/* ---- conv1d ---------------------------------------------------------------------------- */

static void test_conv1d_values(void **state)
{
    pr_ctx *ctx = *state;
    /* C = 2 channels: channel 0 is 1..5 with taps (1,2,3) and bias 0.5;
     * channel 1 is all ones with taps (0,0,1) (identity) and bias -1 */
    double xv[] = {1, 1, 2, 1, 3, 1, 4, 1, 5, 1}, wv[] = {1, 2, 3, 0, 0, 1}, bv[] = {0.5, -1};
    pr_tensor *x = from_f64(ctx, PR_DIMS(1, 5, 2), xv), *w = from_f64(ctx, PR_DIMS(2, 3), wv);
    pr_tensor *bias = from_f64(ctx, PR_DIMS(2), bv);
    /* out[t] = 1 x[t-2] + 2 x[t-1] + 3 x[t]: 3, 8, 14, 20, 26 */
    double ref[] = {3.5, 0, 8.5, 0, 14.5, 0, 20.5, 0, 26.5, 0}, got[10];
    pr_to_host_f64(pr_conv1d(ctx, x, w, bias), got);
    pr_assert_allclose("conv1d", got, ref, 10, 0, 0);
    double ref0[] = {3, 1, 8, 1, 14, 1, 20, 1, 26, 1};
    pr_to_host_f64(pr_conv1d(ctx, x, w, NULL), got);
    pr_assert_allclose("conv1d without bias", got, ref0, 10, 0, 0);
}

static pr_tensor *conv_nobias_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_conv1d(ctx, in[0], in[1], NULL);
}

/* no bias, and a window longer than the sequence */
static void test_conv1d_gradcheck_variants(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(3, 0);
    pr_example ex = {.n_in = 2, .apply = conv_nobias_apply};
    ex.in[0] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 4, 3), -1, 1);
    ex.in[1] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 6), -1, 1);
    pr_test_gradcheck_ok(ctx, "conv1d W > T, no bias", &ex);
}

/* the silu form against pr_silu(pr_conv1d(..)): the same bits forward and
 * in every grad, in f64 and f32 (the op rounds z to the dtype and takes silu
 * and its derivative in double, as the two ops do); and its gradcheck with
 * no bias and a window longer than the sequence */
static pr_tensor *conv_silu_nobias_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_conv1d_silu(ctx, in[0], in[1], NULL);
}

static void test_conv1d_silu_as_two_ops(void **state)
{
    pr_ctx *ctx = *state;
    const pr_dtype dts[2] = {PR_F64, PR_F32};
    for (int d = 0; d < 2; d++) {
        pr_rng r = pr_rng_init(11 + d, 0);
        pr_tensor *in[3] = {pr_example_input(ctx, &r, dts[d], PR_DIMS(3, 23, 6), -2, 2),
                            pr_example_input(ctx, &r, dts[d], PR_DIMS(6, 4), -1, 1),
                            pr_example_input(ctx, &r, dts[d], PR_DIMS(6), -1, 1)};
        pr_tensor *gout = pr_example_input(ctx, &r, dts[d], PR_DIMS(3, 23, 6), -1, 1);
        double got[3][3 * 23 * 6], ref[3][3 * 23 * 6], y1[3 * 23 * 6], y2[3 * 23 * 6];
        for (int form = 0; form < 2; form++) {
            pr_zero_grads(in, 3);
            pr_tensor *y = form ? pr_silu(ctx, pr_conv1d(ctx, in[0], in[1], in[2])) : pr_conv1d_silu(ctx, in[0], in[1], in[2]);
            pr_to_host_f64(y, form ? y2 : y1);
            pr_backward_with(ctx, y, gout);
            for (int i = 0; i < 3; i++) pr_to_host_f64(in[i]->grad, form ? ref[i] : got[i]);
        }
        pr_assert_allclose("conv1d_silu forward", y1, y2, 3 * 23 * 6, 0, 0);
        pr_assert_allclose("conv1d_silu dx", got[0], ref[0], 3 * 23 * 6, 0, 0);
        pr_assert_allclose("conv1d_silu dw", got[1], ref[1], 6 * 4, 0, 0);
        pr_assert_allclose("conv1d_silu dbias", got[2], ref[2], 6, 0, 0);
    }
    pr_rng r = pr_rng_init(5, 0);
    pr_example ex = {.n_in = 2, .apply = conv_silu_nobias_apply};
    ex.in[0] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(2, 4, 3), -1, 1);
    ex.in[1] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 6), -1, 1);
    pr_test_gradcheck_ok(ctx, "conv1d_silu W > T, no bias", &ex);
}

/* ---- decay_gate ---------------------------------------------------------------------------- */

/* the op against the five ops it replaces, in f64: forward and every grad to
 * 1e-13 relative, with some z = a + dt_bias past 20 (softplus's linear
 * branch); and its shape errors */
static void test_decay_gate_as_five_ops(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(17, 0);
    pr_tensor *in[3] = {pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 11, 4), -6, 6),
                        pr_example_input(ctx, &r, PR_F64, PR_DIMS(4), -2, 2),
                        pr_example_input(ctx, &r, PR_F64, PR_DIMS(4), -1, 1)};
    for (int i = 0; i < 5; i++) pr_set(in[0], 4 * i + 1, 19.5 + i);   /* head 1: z past 20 from the second row */
    pr_tensor *gout = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 11, 4), -1, 1);
    double y[2][132], grad[2][3][132];
    for (int form = 0; form < 2; form++) {
        pr_zero_grads(in, 3);
        pr_tensor *g = form ? pr_mul(ctx, pr_neg(ctx, pr_exp(ctx, in[1])), pr_softplus(ctx, pr_add(ctx, in[0], in[2])))
                            : pr_decay_gate(ctx, in[0], in[1], in[2]);
        pr_to_host_f64(g, y[form]);
        pr_backward_with(ctx, g, gout);
        for (int i = 0; i < 3; i++) pr_to_host_f64(in[i]->grad, grad[form][i]);
    }
    pr_assert_allclose("decay_gate forward", y[0], y[1], 132, 1e-13, 1e-13);
    pr_assert_allclose("decay_gate da", grad[0][0], grad[1][0], 132, 1e-13, 1e-13);
    pr_assert_allclose("decay_gate dA_log", grad[0][1], grad[1][1], 4, 1e-13, 1e-13);
    pr_assert_allclose("decay_gate ddt_bias", grad[0][2], grad[1][2], 4, 1e-13, 1e-13);
    PR_EXPECT_FATAL(pr_decay_gate(ctx, in[0], pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(5)), in[2]),
                    "decay_gate: A_log [5] and dt_bias [4] must be [H] with H = 4 (a [3,11,4])");
}

static void test_conv1d_errors(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 5, 3));
    PR_EXPECT_FATAL(pr_conv1d(ctx, x, pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(4, 2)), NULL),
                    "conv1d: w [4,2] must be [C, W] with C = 3 (x [2,5,3])");
    pr_tensor *w = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(3, 2));
    PR_EXPECT_FATAL(pr_conv1d(ctx, x, w, pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(4))), "conv1d: bias [4]");
    PR_EXPECT_FATAL(pr_conv1d(ctx, pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(5, 3)), w, NULL),
                    "conv1d: x [5,3] must be [B, T, C]");
}

/* ---- shape ops --------------------------------------------------------------------------- */

static void test_reshape_shares_data(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(1, 0);
    pr_tensor *x = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 5, 7), -1, 1);
    pr_tensor *y = pr_reshape(ctx, x, PR_DIMS(5, -1));
    assert_ptr_equal(y->data, x->data);
    assert_int_equal(y->ndim, 2);
    assert_int_equal(y->shape[1], 21);
    pr_tensor *g = pr_arange(ctx->step, PR_F64, PR_CPU, 105);
    pr_backward_with(ctx, y, g);
    pr_backward_with(ctx, y, g); /* accumulates */
    for (int64_t i = 0; i < 105; i++) assert_true(pr_get(x->grad, i) == 2.0 * i);
    PR_EXPECT_FATAL(pr_reshape(ctx, x, PR_DIMS(4, -1)), "reshape: cannot view x [3,5,7] (105 elements) as [4,-1]");
    PR_EXPECT_FATAL(pr_reshape(ctx, x, PR_DIMS(3, 5, 8)), "reshape: cannot view");
}

static void test_transpose_values(void **state)
{
    pr_ctx *ctx = *state;
    double xv[] = {1, 2, 3, 4, 5, 6}, ref[] = {1, 4, 2, 5, 3, 6}, got[6];
    pr_tensor *y = pr_transpose(ctx, from_f64(ctx, PR_DIMS(2, 3), xv), 0, 1);
    assert_int_equal(y->shape[0], 3);
    pr_to_host_f64(y, got);
    pr_assert_allclose("transpose 2x3", got, ref, 6, 0, 0);
    /* [2,3,4,5] dims 3 and 1 -> [2,5,4,3]: out[a,l,k,j] = x[a,j,k,l] */
    pr_tensor *x = pr_arange(ctx->step, PR_F64, PR_CPU, 120);
    x = pr_reshape(ctx, x, PR_DIMS(2, 3, 4, 5));
    pr_tensor *t = pr_transpose(ctx, x, -1, 1);
    assert_int_equal(t->shape[1], 5);
    assert_int_equal(t->shape[3], 3);
    for (int a = 0; a < 2; a++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 5; l++)
                    assert_true(pr_get(t, ((a * 5 + l) * 4 + k) * 3 + j) == ((a * 3 + j) * 4 + k) * 5 + l);
    PR_EXPECT_FATAL(pr_transpose(ctx, x, 0, 4), "transpose: dim 4 out of range for x [2,3,4,5]");
}

/* split into slices then concat gives x back, along the first, a middle and the last dim */
static void test_slice_concat_round_trip(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(2, 0);
    pr_tensor *x = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 7, 5), -1, 1);
    int dims[] = {0, 1, -1};
    int64_t sizes[3][3] = {{1, 2, 0}, {2, 4, 1}, {3, 2, 0}};
    int ns[] = {2, 3, 2};
    for (int c = 0; c < 3; c++) {
        pr_tensor *parts[3];
        pr_split(ctx, x, dims[c], ns[c], sizes[c], parts);
        pr_tensor *y = pr_concat(ctx, ns[c], parts, dims[c]);
        assert_true(pr_same_shape(x, y));
        pr_assert_tensors_close("split+concat", y, x, 0, 0);
    }
    /* slice values: x[:, 2:6, :] */
    pr_tensor *s = pr_slice(ctx, x, 1, 2, 4);
    for (int64_t o = 0; o < 3; o++)
        for (int64_t i = 0; i < 4; i++)
            for (int64_t k = 0; k < 5; k++)
                assert_true(pr_get(s, (o * 4 + i) * 5 + k) == pr_get(x, (o * 7 + 2 + i) * 5 + k));
    /* a slice's grad lands in its rows only */
    pr_backward_with(ctx, s, pr_ones(ctx->step, PR_F64, PR_CPU, PR_DIMS(3, 4, 5)));
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t row = i / 5 % 7;
        assert_true(pr_get(x->grad, i) == (row >= 2 && row < 6 ? 1.0 : 0.0));
    }
}

static pr_tensor *split_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    /* a weighted sum of split's pieces through concat in another order */
    pr_tensor *p[3];
    pr_split(ctx, in[0], -1, 3, (const int64_t[]){2, 1, 4}, p);
    return pr_concat(ctx, 3, (pr_tensor *[]){p[2], p[0], p[1]}, -1);
}

static void test_split_gradcheck(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(4, 0);
    pr_example ex = {.n_in = 1, .apply = split_apply};
    ex.in[0] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 5, 7), -1, 1);
    pr_test_gradcheck_ok(ctx, "split", &ex);
}

static void test_shape_errors(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(3, 7, 5));
    PR_EXPECT_FATAL(pr_slice(ctx, x, 1, 5, 3), "slice: [5, 8) out of range for dim 1 of x [3,7,5]");
    PR_EXPECT_FATAL(pr_slice(ctx, x, 3, 0, 1), "slice: dim 3 out of range");
    pr_tensor *y = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(3, 7, 4));
    PR_EXPECT_FATAL(pr_concat(ctx, 2, (pr_tensor *[]){x, y}, 1),
                    "concat: xs[1] [3,7,4] does not match xs[0] [3,7,5] outside dim 1");
    pr_tensor *z = pr_zeros(ctx->step, PR_F32, PR_CPU, PR_DIMS(3, 7, 5));
    PR_EXPECT_FATAL(pr_concat(ctx, 2, (pr_tensor *[]){x, z}, 0), "concat: dtype mismatch");
    pr_tensor *many[PR_MAX_IN + 1];
    for (int i = 0; i <= PR_MAX_IN; i++) many[i] = x;
    PR_EXPECT_FATAL(pr_concat(ctx, PR_MAX_IN + 1, many, 0), "concat: 11 inputs");
    pr_tensor *outs[2];
    PR_EXPECT_FATAL(pr_split(ctx, x, 1, 2, (const int64_t[]){3, 3}, outs), "split: 2 sizes sum to 6, dim 1");
}

/* ---- dropout ---------------------------------------------------------------------------------- */

static void test_dropout_statistics(void **state)
{
    pr_ctx *ctx = *state;
    int64_t n = 20000;
    double p = 0.3;
    pr_tensor *x = pr_ones(ctx->step, PR_F32, PR_CPU, PR_DIMS(n));
    pr_rng r0 = ctx->rng;
    pr_tensor *y = pr_dropout(ctx, x, p);
    assert_int_equal(ctx->rng.offset, r0.offset + (uint64_t)n);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = pr_get(y, i);
        bool keep = pr_philox_uniform(r0.seed, r0.stream, r0.offset + (uint64_t)i) >= p;
        assert_true(v == (keep ? (double)(float)(1.0 / (1 - p)) : 0.0));
        kept += v != 0;
    }
    /* 1-p kept: the binomial's std is sqrt(p(1-p)/n) = 0.0032; allow 5 of them */
    double frac = (double)kept / (double)n;
    if (fabs(frac - (1 - p)) > 0.016) fprintf(stderr, "  kept %.4f, expected %.2f\n", frac, 1 - p);
    assert_true(fabs(frac - (1 - p)) <= 0.016);
    /* the mean is kept in expectation */
    double mean = 0;
    for (int64_t i = 0; i < n; i++) mean += pr_get(y, i) / (double)n;
    assert_true(fabs(mean - 1) < 0.025);
}

static void test_dropout_identity(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = pr_ones(ctx->step, PR_F64, PR_CPU, PR_DIMS(7, 3));
    x->requires_grad = true;
    int n_tape = ctx->n_tape;
    assert_ptr_equal(pr_dropout(ctx, x, 0.0), x);
    ctx->training = false;
    pr_rng r0 = ctx->rng;
    assert_ptr_equal(pr_dropout(ctx, x, 0.5), x);
    assert_int_equal(ctx->rng.offset, r0.offset); /* no draw in eval mode */
    assert_int_equal(ctx->n_tape, n_tape);
    ctx->training = true;
    PR_EXPECT_FATAL(pr_dropout(ctx, x, 1.0), "dropout: p = 1 outside [0, 1)");
    PR_EXPECT_FATAL(pr_dropout(ctx, x, -0.1), "dropout: p = -0.1 outside [0, 1)");
}

/* same seed, same mask; the next call draws a fresh one; the grad uses the forward's mask */
static void test_dropout_determinism(void **state)
{
    pr_ctx *ctx = *state, *other = pr_ctx_new(42), *third = pr_ctx_new(43);
    pr_rng r = pr_rng_init(8, 0);
    pr_tensor *x = pr_example_input(ctx, &r, PR_F64, PR_DIMS(9, 11), -1, 1);
    pr_tensor *a = pr_dropout(ctx, x, 0.5), *b = pr_dropout(other, x, 0.5);
    pr_tensor *c = pr_dropout(ctx, x, 0.5), *d = pr_dropout(third, x, 0.5);
    pr_assert_tensors_close("same seed", a, b, 0, 0);
    int same_c = 0, same_d = 0;
    for (int64_t i = 0; i < x->numel; i++) {
        same_c += (pr_get(a, i) == 0) == (pr_get(c, i) == 0);
        same_d += (pr_get(a, i) == 0) == (pr_get(d, i) == 0);
    }
    assert_true(same_c < x->numel && same_d < x->numel);
    pr_backward_with(ctx, a, pr_ones(ctx->step, PR_F64, PR_CPU, PR_DIMS(9, 11)));
    for (int64_t i = 0; i < x->numel; i++)
        assert_true(pr_get(x->grad, i) == (pr_get(a, i) == 0 ? 0.0 : 2.0));
    pr_ctx_free(other);
    pr_ctx_free(third);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_op_matmul_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_matmul_2x3_3x2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_matmul_flags_vs_naive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gemm_fallback_beta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gemm_ld, setup, teardown),
        cmocka_unit_test_setup_teardown(test_matmul_gradcheck_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_matmul_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedding_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedding_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conv1d_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conv1d_gradcheck_variants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conv1d_silu_as_two_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_decay_gate_as_five_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conv1d_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reshape_shares_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transpose_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slice_concat_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_gradcheck, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shape_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropout_statistics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropout_identity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropout_determinism, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
