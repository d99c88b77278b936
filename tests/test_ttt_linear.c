/* tests/test_ttt_linear.c: TTT-Linear on the CPU.
 *
 * - the reference vectors of tests/data (T=48, mini-batch 16): outputs and every input
 *   grad of sum(o*do) + sum(ht*dht) + sum(hbt*dhbt), f64 to 1e-10 and f32 to
 *   1e-5, both relative to the reference's max-abs;
 * - float64 gradcheck of o, ht and hbt at a partial last mini-batch (T=11,
 *   mini-batch 4) and at mini-batch 1;
 * - an independent primal-form reference (per token W_t = W - eta_t sum_{j<=t}
 *   k_j^T gz_j, plain loops) for the partial last mini-batch;
 * - splitting: a run equals the chain of runs over its mini-batches (and, at
 *   mini-batch 1, over single tokens) passing ht, hbt on as h0, hb0;
 * - NULL h0/hb0 equal zeros; bad shapes and options are fatal with a message;
 * - bf16 data (q, k, v, eta bf16; w, b, h0, hb0 f32): every output and grad
 *   in its dtype, equal to the f64 run on the same rounded values up to the
 *   rounding of the result (bf16: 2^-8 of max|ref|, f32: 2^-24), for the
 *   grads once per backward pass (run() makes three).
 */
#include "tests/test_ttt_util.h"

/* forward; backward seeded with g[0..2] (do, dht, dhbt, any dtype; g NULL: no
 * backward); host copies. Input grads are cleared first. */
static run_out run(pr_ctx *ctx, const pr_ttt_opts *opt, pr_tensor *const *in, pr_tensor *const *g)
{
    for (int i = 0; i < NIN; i++)
        if (in[i]) in[i]->grad = NULL;
    pr_tensor *ht, *hbt, *o = pr_ttt_linear(ctx, opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], &ht, &hbt);
    pr_tensor *outs[3] = {o, ht, hbt};
    run_out r = {0};
    if (g) {
        /* input grads accumulate over passes: three passes give the grads of
         * sum(o*do) + sum(ht*dht) + sum(hbt*dhbt) */
        for (int i = 0; i < 3; i++) pr_backward_with(ctx, outs[i], g[i]);
        for (int i = 0; i < NIN; i++)
            if (in[i] && in[i]->requires_grad) r.d[i] = host(in[i]->grad, &r.n[i]);
        o->grad = ht->grad = hbt->grad = NULL; /* so a later backward skips this node */
    }
    for (int i = 0; i < 3; i++) r.out[i] = host(outs[i], &r.n_out[i]);
    return r;
}

static void assert_close(const char *what, const char *name, const double *got, const double *ref, int64_t n,
                         double tol)
{
    double e = rel_err(got, ref, n);
    fprintf(stderr, "  %s %-4s rel_err %.2e\n", what, name, e);
    if (!(e <= tol)) fail_msg("%s: %s rel_err %.3g > %.1g", what, name, e, tol);
}

/* ---- golden ------------------------------------------------------------------------ */

static void golden_case(pr_dtype dt)
{
    const double tol = dt == PR_F64 ? 1e-10 : 1e-5;
    pr_arena *a = pr_arena_new("golden", 0);
    pr_safetensors st;
    pr_err err;
    if (pr_safetensors_read(pr_test_golden_path(), a, &st, &err) != 0) fail_msg("%s", err.msg);
    pr_ctx *ctx = pr_ctx_new(0);
    char name[64];
#define REF(x) (snprintf(name, sizeof name, "ttt_linear.%s", x), pr_safetensors_get(&st, name))
    pr_tensor *in[NIN], *g[3];
    for (int i = 0; i < NIN; i++) {
        pr_tensor *t = REF(in_names[i]);
        if (!t) fail_msg("golden: %s missing", name);
        in[i] = pr_to(ctx->step, t, dt, PR_CPU);
        pr_requires_grad_(in[i], true);
    }
    const char *gn[3] = {"do", "dht", "dhbt"}, *on[3] = {"o", "ht", "hbt"};
    for (int i = 0; i < 3; i++) g[i] = pr_to(ctx->step, REF(gn[i]), dt, PR_CPU);
    const pr_ttt_opts opt = {.scale = pr_item(REF("scale")), .mini_batch = (int)pr_item(REF("mini_batch")),
                             .eps = pr_item(REF("eps"))};
    assert_int_equal(opt.mini_batch, 16);
    run_out got = run(ctx, &opt, in, g);
    char what[32];
    snprintf(what, sizeof what, "golden %s", pr_dtype_name(dt));
    for (int i = 0; i < 3; i++) {
        double *ref = host(REF(on[i]), NULL);
        assert_close(what, on[i], got.out[i], ref, got.n_out[i], tol);
        free(ref);
    }
    for (int i = 0; i < NIN; i++) {
        char dn[16];
        snprintf(dn, sizeof dn, "d%s", in_names[i]);
        double *ref = host(REF(dn), NULL);
        assert_non_null(got.d[i]);
        assert_close(what, dn, got.d[i], ref, got.n[i], tol);
        free(ref);
    }
#undef REF
    run_out_free(&got);
    pr_ctx_free(ctx);
    pr_arena_free(a);
}

static void test_golden_f64(void **s) { (void)s, golden_case(PR_F64); }
static void test_golden_f32(void **s) { (void)s, golden_case(PR_F32); }

/* ---- gradcheck ----------------------------------------------------------------------- */

static void gradcheck_case(int mini_batch)
{
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng r = pr_rng_init(21, 0);
    pr_example ex = {0};
    pr_ttt_linear_example(ctx, &r, PR_F64, &ex);
    ex.iarg[0] = mini_batch;
    static const char *outs[3] = {"o", "ht", "hbt"};
    for (int which = 0; which < 3; which++) {
        ex.iarg[1] = which;
        char what[64];
        snprintf(what, sizeof what, "ttt_linear mb=%d out=%s", mini_batch, outs[which]);
        pr_gradcheck_result gc = pr_gradcheck(ctx, what, &ex, NULL);
        fprintf(stderr, "  %s: max abs err %.2e\n", what, gc.max_abs_err);
        if (!gc.ok) fail_msg("%s", gc.msg);
        pr_step_reset(ctx);
        pr_ttt_linear_example(ctx, &r, PR_F64, &ex); /* the reset took the inputs */
        ex.iarg[0] = mini_batch;
    }
    pr_ctx_free(ctx);
}

static void test_gradcheck_partial(void **s) { (void)s, gradcheck_case(4); }
static void test_gradcheck_token(void **s) { (void)s, gradcheck_case(1); }

/* ---- an independent primal-form reference ----------------------------------------------
 * Per (b,h), mini-batch by mini-batch: every gz_j at the start weights, then
 * token t reads W_t = W - eta_t sum_{j<=t} k_j^T gz_j, hb_t likewise, and the
 * end state is W_t at the last token with the last token's eta. */

static void ln(const double *x, int K, double eps, double *xh, double *s)
{
    double mu = 0, var = 0;
    for (int c = 0; c < K; c++) mu += x[c] / K;
    for (int c = 0; c < K; c++) var += (x[c] - mu) * (x[c] - mu) / K;
    *s = sqrt(var + eps);
    for (int c = 0; c < K; c++) xh[c] = (x[c] - mu) / *s;
}

static void primal(const double *const *in, int B, int T, int H, int K, int mb, double scale, double eps,
                   double *o, double *ht, double *hbt)
{
    double *W = malloc(sizeof(double) * (size_t)(K * K)), *hb = malloc(sizeof(double) * (size_t)K);
    double *gz = malloc(sizeof(double) * (size_t)(mb * K)), z[256], xh[256], G[256], sg;
    assert_true(K <= 256);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const double *w = in[3] + h * K, *bb = in[4] + h * K;
            int bh = b * H + h;
            for (int i = 0; i < K * K; i++) W[i] = in[6] ? in[6][bh * K * K + i] : 0;
            for (int c = 0; c < K; c++) hb[c] = in[7] ? in[7][bh * K + c] : 0;
            for (int t0 = 0; t0 < T; t0 += mb) {
                int m = t0 + mb <= T ? mb : T - t0;
#define ROW(x, t) ((x) + (((size_t)b * T + (t)) * H + h) * K)
#define ETA(t) (in[5][((size_t)b * T + (t)) * H + h])
                for (int j = 0; j < m; j++) { /* gz_j: the LN+L2 gradient at the start weights */
                    const double *k = ROW(in[1], t0 + j), *v = ROW(in[2], t0 + j);
                    for (int c = 0; c < K; c++) {
                        z[c] = hb[c];
                        for (int a = 0; a < K; a++) z[c] += k[a] * W[a * K + c];
                    }
                    ln(z, K, eps, xh, &sg);
                    double m1 = 0, m2 = 0;
                    for (int c = 0; c < K; c++) {
                        G[c] = w[c] * (w[c] * xh[c] + bb[c] - (v[c] - k[c]));
                        m1 += G[c] / K, m2 += G[c] * xh[c] / K;
                    }
                    for (int c = 0; c < K; c++) gz[j * K + c] = (G[c] - m1 - xh[c] * m2) / sg;
                }
                for (int t = 0; t <= m; t++) { /* t == m: the end state, with the last eta */
                    double e = t < m ? ETA(t0 + t) : ETA(t0 + m - 1);
                    int upto = t < m ? t : m - 1;
                    if (t == m) {
                        for (int j = 0; j <= upto; j++)
                            for (int a = 0; a < K; a++) {
                                const double *k = ROW(in[1], t0 + j);
                                for (int c = 0; c < K; c++) W[a * K + c] -= e * k[a] * gz[j * K + c];
                            }
                        for (int j = 0; j <= upto; j++)
                            for (int c = 0; c < K; c++) hb[c] -= e * gz[j * K + c];
                        break;
                    }
                    const double *q = ROW(in[0], t0 + t);
                    for (int c = 0; c < K; c++) {
                        z[c] = hb[c];
                        for (int a = 0; a < K; a++) {
                            double wt = W[a * K + c];
                            for (int j = 0; j <= upto; j++) wt -= e * ROW(in[1], t0 + j)[a] * gz[j * K + c];
                            z[c] += scale * q[a] * wt;
                        }
                        for (int j = 0; j <= upto; j++) z[c] -= e * gz[j * K + c];
                    }
                    ln(z, K, eps, xh, &sg);
                    double *ot = ROW(o, t0 + t);
                    for (int c = 0; c < K; c++) ot[c] = z[c] + w[c] * xh[c] + bb[c];
                }
#undef ROW
#undef ETA
            }
            memcpy(ht + bh * K * K, W, sizeof(double) * (size_t)(K * K));
            memcpy(hbt + bh * K, hb, sizeof(double) * (size_t)K);
        }
    free(W), free(hb), free(gz);
}

static void random_inputs(pr_ctx *ctx, uint64_t seed, int B, int T, int H, int K, pr_tensor **in)
{
    pr_rng r = pr_rng_init(seed, 0);
    const int64_t sh[NIN][4] = {{B, T, H, K}, {B, T, H, K}, {B, T, H, K}, {H, K},
                                {H, K},       {B, T, H, 1}, {B, H, K, K}, {B, H, 1, K}};
    const int nd[NIN] = {4, 4, 4, 2, 2, 4, 4, 4};
    const double lo[NIN] = {-1, -1, -1, 0.5, -0.5, 0.02, -0.4, -0.4}, hi[NIN] = {1, 1, 1, 1.5, 0.5, 0.4, 0.4, 0.4};
    for (int i = 0; i < NIN; i++) in[i] = pr_randu(ctx->step, PR_F64, PR_CPU, nd[i], sh[i], &r, lo[i], hi[i]);
}

static void test_primal_reference(void **s)
{
    (void)s;
    const int B = 2, T = 11, H = 2, K = 6;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[NIN];
    random_inputs(ctx, 5, B, T, H, K, in);
    const double *hin[NIN];
    for (int i = 0; i < NIN; i++) hin[i] = in[i]->data;
    double *o = malloc(sizeof(double) * B * T * H * K), *ht = malloc(sizeof(double) * B * H * K * K);
    double *hbt = malloc(sizeof(double) * B * H * K);
    const int mbs[3] = {4, 1, 16}; /* partial last, token by token, one short mini-batch */
    for (int i = 0; i < 3; i++) {
        const pr_ttt_opts opt = {.mini_batch = mbs[i], .eps = 1e-6};
        run_out got = run(ctx, &opt, in, NULL);
        primal(hin, B, T, H, K, mbs[i], 1 / sqrt((double)K), 1e-6, o, ht, hbt);
        char what[32];
        snprintf(what, sizeof what, "primal mb=%d", mbs[i]);
        assert_close(what, "o", got.out[0], o, got.n_out[0], 1e-12);
        assert_close(what, "ht", got.out[1], ht, got.n_out[1], 1e-12);
        assert_close(what, "hbt", got.out[2], hbt, got.n_out[2], 1e-12);
        run_out_free(&got);
    }
    free(o), free(ht), free(hbt);
    pr_ctx_free(ctx);
}

/* ---- splitting into chained runs ------------------------------------------------------ */

/* tokens [t0, t0+len) of a [1,T,H,X] tensor, as a [1,len,H,X] view */
static pr_tensor *tokens(pr_ctx *ctx, pr_tensor *x, int64_t t0, int64_t len)
{
    pr_tensor *v = pr_view(ctx->step, x, 3, (const int64_t[]){x->shape[1], x->shape[2], x->shape[3]});
    v = pr_view_rows(ctx->step, v, t0, len);
    return pr_view(ctx->step, v, 4, (const int64_t[]){1, len, x->shape[2], x->shape[3]});
}

static void split_case(int mb, int seg)
{
    const int T = 11, H = 2, K = 5;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_set_grad_enabled(ctx, false);
    pr_tensor *in[NIN];
    random_inputs(ctx, 9, 1, T, H, K, in);
    const pr_ttt_opts opt = {.mini_batch = mb};
    run_out full = run(ctx, &opt, in, NULL);
    double *o = malloc(sizeof(double) * T * H * K);
    pr_tensor *h = in[6], *hb = in[7];
    for (int t0 = 0; t0 < T; t0 += seg) {
        int len = t0 + seg <= T ? seg : T - t0;
        pr_tensor *ht, *hbt, *part[NIN] = {0};
        for (int i = 0; i < NIN; i++) part[i] = i == 3 || i == 4 ? in[i] : i < 6 ? tokens(ctx, in[i], t0, len) : NULL;
        pr_tensor *ot = pr_ttt_linear(ctx, &opt, part[0], part[1], part[2], part[3], part[4], part[5], h, hb, &ht, &hbt);
        pr_to_host_f64(ot, o + t0 * H * K);
        h = ht, hb = hbt;
    }
    double *ht = host(h, NULL), *hbt = host(hb, NULL);
    char what[32];
    snprintf(what, sizeof what, "split mb=%d seg=%d", mb, seg);
    assert_close(what, "o", o, full.out[0], full.n_out[0], 1e-14);
    assert_close(what, "ht", ht, full.out[1], full.n_out[1], 1e-14);
    assert_close(what, "hbt", hbt, full.out[2], full.n_out[2], 1e-14);
    free(o), free(ht), free(hbt);
    run_out_free(&full);
    pr_ctx_free(ctx);
}

/* mini-batch 1 is the token-by-token serial form: one run per token */
static void test_split_tokens(void **s) { (void)s, split_case(1, 1); }
static void test_split_minibatches(void **s) { (void)s, split_case(4, 4); }

/* ---- NULL initial state, errors ------------------------------------------------------- */

static void test_null_state_is_zero(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[NIN];
    random_inputs(ctx, 13, 2, 9, 2, 4, in);
    pr_fill_(in[6], 0), pr_fill_(in[7], 0);
    for (int i = 0; i < NIN; i++) pr_requires_grad_(in[i], true);
    pr_tensor *g[3];
    pr_rng r = pr_rng_init(3, 3);
    g[0] = pr_randu(ctx->step, PR_F64, PR_CPU, 4, in[0]->shape, &r, -1, 1);
    g[1] = pr_randu(ctx->step, PR_F64, PR_CPU, 4, in[6]->shape, &r, -1, 1);
    g[2] = pr_randu(ctx->step, PR_F64, PR_CPU, 4, in[7]->shape, &r, -1, 1);
    const pr_ttt_opts opt = {.mini_batch = 4};
    run_out zero = run(ctx, &opt, in, g);
    pr_tensor *in0[NIN];
    memcpy(in0, in, sizeof in0);
    in0[6] = in0[7] = NULL;
    run_out none = run(ctx, &opt, in0, g);
    for (int i = 0; i < 3; i++) assert_close("null state", "out", none.out[i], zero.out[i], zero.n_out[i], 0);
    for (int i = 0; i < 6; i++) assert_close("null state", in_names[i], none.d[i], zero.d[i], zero.n[i], 0);
    run_out_free(&zero), run_out_free(&none);
    pr_ctx_free(ctx);
}

static void test_errors(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[NIN];
    random_inputs(ctx, 1, 1, 5, 2, 4, in);
    pr_ttt_opts opt = {.mini_batch = 4};
    pr_tensor *bad_eta = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(1, 5, 2));
    PR_EXPECT_FATAL(pr_ttt_linear(ctx, &opt, in[0], in[1], in[2], in[3], in[4], bad_eta, NULL, NULL, NULL, NULL),
                    "ttt_linear: eta has shape [1,5,2]; expected [1,5,2,1]");
    PR_EXPECT_FATAL(pr_ttt_linear(ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[7], NULL, NULL, NULL),
                    "ttt_linear: h0 has shape");
    pr_tensor *k32 = pr_to(ctx->step, in[1], PR_F32, PR_CPU);
    PR_EXPECT_FATAL(pr_ttt_linear(ctx, &opt, in[0], k32, in[2], in[3], in[4], in[5], NULL, NULL, NULL, NULL),
                    "ttt_linear: dtype mismatch");
    opt.mini_batch = 0;
    PR_EXPECT_FATAL(pr_ttt_linear(ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], NULL, NULL, NULL, NULL),
                    "ttt_linear: mini_batch must be >= 1");
    pr_ctx_free(ctx);
}

/* ---- bf16 data ------------------------------------------------------------------------- */

/* the dtype of input i on bf16 data (ops/ttt_linear.h) */
static pr_dtype bf16_dtype(int i) { return i <= 2 || i == 5 ? PR_BF16 : PR_F32; }

static void test_bf16(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *raw[NIN], *lo[NIN], *ref[NIN];
    random_inputs(ctx, 9, 2, 11, 2, 6, raw);
    for (int i = 0; i < NIN; i++) {
        lo[i] = pr_to(ctx->step, raw[i], bf16_dtype(i), PR_CPU);
        ref[i] = pr_to(ctx->step, lo[i], PR_F64, PR_CPU);
        pr_requires_grad_(lo[i], true), pr_requires_grad_(ref[i], true);
    }
    pr_rng r = pr_rng_init(10, 0);
    const pr_dtype gdt[3] = {PR_BF16, PR_F32, PR_F32};
    pr_tensor *g[3], *glo[3];
    const int64_t gsh[3][4] = {{2, 11, 2, 6}, {2, 2, 6, 6}, {2, 2, 1, 6}};
    for (int i = 0; i < 3; i++) {
        glo[i] = pr_to(ctx->step, pr_randu(ctx->step, PR_F64, PR_CPU, 4, gsh[i], &r, -1, 1), gdt[i], PR_CPU);
        g[i] = pr_to(ctx->step, glo[i], PR_F64, PR_CPU);
    }
    const pr_ttt_opts opt = {.mini_batch = 4, .eps = 1e-6};
    pr_tensor *ht, *hbt, *o = pr_ttt_linear(ctx, &opt, lo[0], lo[1], lo[2], lo[3], lo[4], lo[5], lo[6], lo[7], &ht, &hbt);
    assert_int_equal(o->dtype, PR_BF16);
    assert_int_equal(ht->dtype, PR_F32);
    assert_int_equal(hbt->dtype, PR_F32);
    run_out got = run(ctx, &opt, lo, glo), want = run(ctx, &opt, ref, g);
    for (int i = 0; i < NIN; i++) assert_int_equal(lo[i]->grad->dtype, bf16_dtype(i));
    static const char *outs[3] = {"o", "ht", "hbt"};
    for (int i = 0; i < 3; i++)
        assert_close("bf16 data", outs[i], got.out[i], want.out[i], want.n_out[i], i == 0 ? 0x1p-8 : 0x1p-24);
    for (int i = 0; i < NIN; i++) {
        char dn[16];
        snprintf(dn, sizeof dn, "d%s", in_names[i]);
        assert_close("bf16 data", dn, got.d[i], want.d[i], want.n[i], 3 * (bf16_dtype(i) == PR_BF16 ? 0x1p-8 : 0x1p-24));
    }
    run_out_free(&got), run_out_free(&want);
    /* w in bf16 beside bf16 data: named */
    pr_tensor *w16 = pr_to(ctx->step, lo[3], PR_BF16, PR_CPU);
    PR_EXPECT_FATAL(pr_ttt_linear(ctx, &opt, lo[0], lo[1], lo[2], w16, lo[4], lo[5], NULL, NULL, NULL, NULL),
                    "ttt_linear: dtype mismatch: w is bf16, expected f32 (q is bf16: w, b, h0 and hb0 stay f32)");
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_f64),        cmocka_unit_test(test_golden_f32),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_gradcheck_partial), cmocka_unit_test(test_gradcheck_token),
        cmocka_unit_test(test_primal_reference),  cmocka_unit_test(test_split_tokens),
        cmocka_unit_test(test_split_minibatches), cmocka_unit_test(test_null_state_is_zero),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
