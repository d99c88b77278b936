/* tests/test_ttt_mlp.c: TTT-MLP and Titans on the CPU.
 *
 * - golden vectors (tests/data/ops2.safetensors, T=48, mini-batch/chunk 16):
 *   every output and every input grad of sum over outputs of out * d<out>,
 *   f64 to 1e-10 and f32 to 1e-4, relative to the reference's max-abs;
 * - float64 gradcheck of every output at a partial last mini-batch (T=7,
 *   mini-batch 3) and token by token (mini-batch 1);
 * - the same math composed from primitive ops on the tape, in the primal
 *   form (token i reads W - eta_i sum_{j<=i} grad_j, the weights themselves),
 *   forward and backward, at B=1 T=5 H=1 and the examples' d (hidden 5);
 * - splitting: mini-batch 1 equals a chain of one-token runs (the serial
 *   form), and a run equals its chain of mini-batches;
 * - NULL initial state equals zeros; bad shapes and options are fatal;
 * - ttt_mlp on bf16 data (q, k, v, eta bf16; the rest f32): every output
 *   and grad in its dtype, equal to the f64 run on the same rounded values
 *   up to the one rounding of the result.
 */
#include "tests/test_ttt_ops2_util.h"

static void test_golden_mlp_f64(void **s) { (void)s, golden_case(&ttt_mlp_desc, PR_F64, PR_CPU, 1e-10); }
static void test_golden_mlp_f32(void **s) { (void)s, golden_case(&ttt_mlp_desc, PR_F32, PR_CPU, 1e-4); }
static void test_golden_titans_f64(void **s) { (void)s, golden_case(&titans_desc, PR_F64, PR_CPU, 1e-10); }
static void test_golden_titans_f32(void **s) { (void)s, golden_case(&titans_desc, PR_F32, PR_CPU, 1e-4); }

/* ---- gradcheck ------------------------------------------------------------------------ */

static void gradcheck_case(pr_example_fn make, int n_out, int mb)
{
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng r = pr_rng_init(21, 0);
    for (int which = 0; which < n_out; which++) {
        pr_example ex = {0};
        make(ctx, &r, PR_F64, &ex);
        ex.iarg[0] = mb, ex.iarg[1] = which;
        char what[64];
        snprintf(what, sizeof what, "%s mb=%d out=%d", make == pr_titans_example ? "titans" : "ttt_mlp", mb, which);
        pr_gradcheck_result gc = pr_gradcheck(ctx, what, &ex, NULL);
        fprintf(stderr, "  %s: max abs err %.2e\n", what, gc.max_abs_err);
        if (!gc.ok) fail_msg("%s", gc.msg);
        pr_step_reset(ctx);
    }
    pr_ctx_free(ctx);
}

static void test_gradcheck_mlp(void **s)
{
    (void)s;
    gradcheck_case(pr_ttt_mlp_example, 5, 3), gradcheck_case(pr_ttt_mlp_example, 5, 1);
}

static void test_gradcheck_titans(void **s)
{
    (void)s;
    gradcheck_case(pr_titans_example, 3, 3), gradcheck_case(pr_titans_example, 3, 1);
}

/* ---- composed from primitive ops ---------------------------------------------------------
 * B = H = 1: every [1,T,1,X] input is viewed as [T,X]; row i is [1,X]. */

static pr_tensor *rows(pr_ctx *c, pr_tensor *x, int64_t i, int64_t n) { return pr_slice(c, x, 0, i, n); }
static pr_tensor *cst(pr_ctx *c, double v) { return pr_full(c->step, PR_F64, PR_CPU, PR_DIMS(1), v); }
static pr_tensor *col(pr_ctx *c, pr_tensor *x) { return pr_reshape(c, x, PR_DIMS(x->shape[0], 1)); } /* [m] -> [m,1] */
/* [m,X] -> [1,X], the sum over rows */
static pr_tensor *col_sums(pr_ctx *c, pr_tensor *x) { return pr_reshape(c, pr_sum(c, pr_transpose(c, x, 0, 1)), PR_DIMS(1, -1)); }

/* d/dz of || w LN(z) + b - (v - k) ||^2 / 2 for rows z [m,d] */
static pr_tensor *inner_grad(pr_ctx *c, pr_tensor *z, pr_tensor *w, pr_tensor *b, pr_tensor *v, pr_tensor *k, double eps)
{
    pr_tensor *xz = pr_layernorm(c, z, NULL, NULL, eps);
    pr_tensor *zc = pr_sub(c, z, col(c, pr_mean(c, z)));
    pr_tensor *s = pr_sqrt(c, pr_add(c, col(c, pr_mean(c, pr_mul(c, zc, zc))), cst(c, eps)));
    pr_tensor *G = pr_mul(c, w, pr_add(c, pr_sub(c, pr_add(c, pr_mul(c, w, xz), b), v), k));
    pr_tensor *num = pr_sub(c, pr_sub(c, G, col(c, pr_mean(c, G))), pr_mul(c, xz, col(c, pr_mean(c, pr_mul(c, G, xz)))));
    return pr_div(c, num, s);
}

/* gelu_tanh'(x) = (1 + t) / 2 + x (1 - t^2) u' / 2 */
static pr_tensor *gelu_d1(pr_ctx *c, pr_tensor *x)
{
    const double a = 0.044715, k = 0.7978845608028654;
    pr_tensor *x2 = pr_mul(c, x, x);
    pr_tensor *t = pr_tanh(c, pr_scale(c, pr_add(c, x, pr_scale(c, pr_mul(c, x2, x), a)), k));
    pr_tensor *du = pr_scale(c, pr_add(c, pr_scale(c, x2, 3 * a), cst(c, 1)), k);
    pr_tensor *one_m_t2 = pr_sub(c, cst(c, 1), pr_mul(c, t, t));
    return pr_add(c, pr_scale(c, pr_add(c, t, cst(c, 1)), 0.5), pr_scale(c, pr_mul(c, pr_mul(c, x, one_m_t2), du), 0.5));
}

static pr_tensor *mm(pr_ctx *c, pr_tensor *a, pr_tensor *b, bool ta) { return pr_matmul(c, a, b, ta, false); }

/* TTT-MLP in the primal form; in: q k v w b eta w1 b1 w2 b2 as [T,d], [d],
 * [T,1], [d,N], [1,N], [N,d], [1,d]; out: o [T,d] and the final weights */
static void mlp_composed(pr_ctx *c, pr_tensor *const *in, int T, int mb, double scale, double eps, pr_tensor **out)
{
    pr_tensor *W1 = in[6], *b1 = in[7], *W2 = in[8], *b2 = in[9], *os[16];
    int n_os = 0;
    for (int t0 = 0; t0 < T; t0 += mb) {
        int m = t0 + mb <= T ? mb : T - t0;
        pr_tensor *K = rows(c, in[1], t0, m), *V = rows(c, in[2], t0, m);
        pr_tensor *Z1 = pr_add(c, mm(c, K, W1, false), b1), *X2 = pr_gelu_tanh(c, Z1);
        pr_tensor *gZ2 = inner_grad(c, pr_add(c, mm(c, X2, W2, false), b2), in[3], in[4], V, K, eps);
        pr_tensor *gZ1 = pr_mul(c, pr_matmul(c, gZ2, W2, false, true), gelu_d1(c, Z1));
        for (int i = 0; i <= m; i++) { /* i == m: the end state, with the last token's eta */
            int n = i < m ? i + 1 : m;
            pr_tensor *e = rows(c, in[5], t0 + n - 1, 1);
            pr_tensor *Kn = rows(c, K, 0, n), *g1 = rows(c, gZ1, 0, n), *g2 = rows(c, gZ2, 0, n), *X2n = rows(c, X2, 0, n);
            pr_tensor *W1i = pr_sub(c, W1, pr_mul(c, e, mm(c, Kn, g1, true)));
            pr_tensor *b1i = pr_sub(c, b1, pr_mul(c, e, col_sums(c, g1)));
            pr_tensor *W2i = pr_sub(c, W2, pr_mul(c, e, mm(c, X2n, g2, true)));
            pr_tensor *b2i = pr_sub(c, b2, pr_mul(c, e, col_sums(c, g2)));
            if (i == m) {
                W1 = W1i, b1 = b1i, W2 = W2i, b2 = b2i;
                break;
            }
            pr_tensor *x = pr_scale(c, rows(c, in[0], t0 + i, 1), scale);
            pr_tensor *z2 = pr_add(c, mm(c, pr_gelu_tanh(c, pr_add(c, mm(c, x, W1i, false), b1i)), W2i, false), b2i);
            os[n_os++] = pr_add(c, z2, pr_layernorm(c, z2, in[3], in[4], eps));
        }
    }
    out[0] = pr_concat(c, n_os, os, 0);
    out[1] = W1, out[2] = b1, out[3] = W2, out[4] = b2;
}

/* Titans; in: q k v w b theta alpha eta h0 s0 as [T,d], [d], [T,1], [d,d] */
static void titans_composed(pr_ctx *c, pr_tensor *const *in, int T, int ch, double eps, pr_tensor **out)
{
    pr_tensor *M = in[8], *S = in[9], *os[16];
    int n_os = 0;
    for (int t0 = 0; t0 < T; t0 += ch) {
        int m = t0 + ch <= T ? ch : T - t0;
        pr_tensor *K = rows(c, in[1], t0, m);
        pr_tensor *gZ = inner_grad(c, mm(c, K, M, false), in[3], in[4], rows(c, in[2], t0, m), K, eps);
        for (int i = 0; i < m; i++) {
            pr_tensor *th = rows(c, in[5], t0 + i, 1), *al = rows(c, in[6], t0 + i, 1), *et = rows(c, in[7], t0 + i, 1);
            pr_tensor *u = pr_mul(c, pr_scale(c, th, -2), mm(c, rows(c, K, i, 1), rows(c, gZ, i, 1), true));
            S = pr_add(c, pr_mul(c, et, S), u);
            M = pr_add(c, pr_mul(c, pr_sub(c, cst(c, 1), al), M), S);
            pr_tensor *o = mm(c, rows(c, in[0], t0 + i, 1), M, false);
            os[n_os++] = pr_add(c, o, pr_layernorm(c, o, in[3], in[4], eps));
        }
    }
    out[0] = pr_concat(c, n_os, os, 0);
    out[1] = M, out[2] = S;
}

/* the op and its composition on the same leaves (the composition reads
 * [T,X] views of them, B = H = 1); forward and the backward of
 * sum_i sum(out_i * g_i) must agree to 1e-12 */
static void composed_case(const op2_desc *op, pr_example_fn make, int mb)
{
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(77, 0);
    pr_example ex = {0};
    make(ctx, &r, PR_F64, &ex);
    pr_tensor *src[MAXIN], *g[MAXOUT], *view[MAXIN], *out[MAXOUT];
    const int T = 5, d = (int)ex.in[0]->shape[3];
    for (int i = 0; i < op->n_in; i++) { /* the example's shapes at B = H = 1, T = 5 */
        pr_tensor *e = ex.in[i];
        int64_t sh[4] = {e->shape[0], e->shape[1], e->shape[2], e->shape[3]};
        if (e->ndim == 2) sh[0] = 1;
        else if (i < 3 || sh[3] == 1) sh[1] = T, sh[2] = 1;
        else sh[1] = 1;
        src[i] = pr_randu(ctx->step, PR_F64, PR_CPU, e->ndim, sh, &r, i == 3 ? 0.5 : -0.5, i == 3 ? 1.5 : 0.5);
    }
    if (op == &titans_desc) pr_fill_(src[7], 0.8), pr_fill_(src[6], 0.1); /* eta near 1 keeps momentum alive */
    else pr_fill_(src[5], 0.3);
    pr_tensor *shapes[MAXOUT]; /* a forward for the output shapes, then random upstream grads */
    op->apply(ctx, mb, 1e-6, src, shapes);
    for (int i = 0; i < op->n_out; i++)
        g[i] = pr_randu(ctx->step, PR_F64, PR_CPU, shapes[i]->ndim, shapes[i]->shape, &r, -1, 1);
    run_out got = run_op(ctx, op, mb, 1e-6, src, g, PR_F64, PR_CPU);
    pr_tensor *leaf[MAXIN];
    for (int i = 0; i < op->n_in; i++) {
        leaf[i] = pr_to(ctx->step, src[i], PR_F64, PR_CPU);
        pr_requires_grad_(leaf[i], true);
        int64_t last = leaf[i]->shape[leaf[i]->ndim - 1];
        view[i] = i == 3 || i == 4 ? pr_reshape(ctx, pr_slice(ctx, leaf[i], 0, 0, 1), PR_DIMS(last))
                                   : pr_reshape(ctx, leaf[i], PR_DIMS(-1, last));
    }
    if (op == &titans_desc) titans_composed(ctx, view, T, mb, 1e-6, out);
    else mlp_composed(ctx, view, T, mb, 1 / sqrt((double)d), 1e-6, out);
    pr_tensor *loss = NULL;
    for (int i = 0; i < op->n_out; i++) {
        pr_tensor *flat = pr_reshape(ctx, out[i], PR_DIMS(-1));
        pr_tensor *term = pr_sum_all(ctx, pr_mul(ctx, flat, pr_reshape(ctx, g[i], PR_DIMS(-1))));
        loss = loss ? pr_add(ctx, loss, term) : term;
    }
    pr_backward(ctx, loss);
    run_out ref = {0};
    for (int i = 0; i < op->n_out; i++) ref.out[i] = host(out[i], &ref.n_out[i]);
    for (int i = 0; i < op->n_in; i++) ref.d[i] = host(leaf[i]->grad, &ref.n[i]);
    char what[64];
    snprintf(what, sizeof what, "composed %s mb=%d", op->name, mb);
    compare_runs(what, op, &got, &ref, 1e-12);
    run_out_free(&got), run_out_free(&ref);
    pr_ctx_free(ctx);
}

static void test_composed_mlp(void **s)
{
    (void)s;
    composed_case(&ttt_mlp_desc, pr_ttt_mlp_example, 2), composed_case(&ttt_mlp_desc, pr_ttt_mlp_example, 1);
}

static void test_composed_titans(void **s)
{
    (void)s;
    composed_case(&titans_desc, pr_titans_example, 2), composed_case(&titans_desc, pr_titans_example, 1);
}

/* ---- splitting, NULL state, errors ------------------------------------------------------ */

/* tokens [t0, t0+len) of a [1,T,H,X] tensor, as a [1,len,H,X] view */
static pr_tensor *tokens(pr_ctx *ctx, pr_tensor *x, int64_t t0, int64_t len)
{
    pr_tensor *v = pr_view(ctx->step, x, 3, (const int64_t[]){x->shape[1], x->shape[2], x->shape[3]});
    v = pr_view_rows(ctx->step, v, t0, len);
    return pr_view(ctx->step, v, 4, (const int64_t[]){1, len, x->shape[2], x->shape[3]});
}

/* a run at mini-batch mb equals the chain of runs over segments of seg
 * tokens, each starting from the previous one's final state */
static void split_case(const op2_desc *op, int mb, int seg)
{
    const int T = 11, H = 2, d = 4, n_tok = op == &titans_desc ? 8 : 6; /* inputs with a token axis */
    pr_ctx *ctx = pr_ctx_new(0);
    pr_set_grad_enabled(ctx, false);
    pr_tensor *in[MAXIN];
    random_inputs(ctx, op, 9, 1, T, H, d, 2 * d, in);
    run_out full = run_op(ctx, op, mb, 1e-6, in, NULL, PR_F64, PR_CPU);
    double *o = malloc(sizeof(double) * T * H * d);
    pr_tensor *part[MAXIN], *out[MAXOUT];
    memcpy(part, in, sizeof part);
    for (int t0 = 0; t0 < T; t0 += seg) {
        int len = t0 + seg <= T ? seg : T - t0;
        for (int i = 0; i < n_tok; i++)
            if (i != 3 && i != 4) part[i] = tokens(ctx, in[i], t0, len);
        op->apply(ctx, mb, 1e-6, part, out);
        pr_to_host_f64(out[0], o + t0 * H * d);
        for (int i = 1; i < op->n_out; i++) part[n_tok + i - 1] = out[i];
    }
    char what[48];
    snprintf(what, sizeof what, "split %s mb=%d seg=%d", op->name, mb, seg);
    fprintf(stderr, "  %s\n", what);
    pr_assert_allclose("o", o, full.out[0], full.n_out[0], 1e-14, 1e-13);
    for (int i = 1; i < op->n_out; i++) {
        double *st = host(out[i], NULL);
        pr_assert_allclose(op->out_names[i], st, full.out[i], full.n_out[i], 1e-14, 1e-13);
        free(st);
    }
    free(o);
    run_out_free(&full);
    pr_ctx_free(ctx);
}

/* mini-batch 1 is the token-by-token serial form: one run per token */
static void test_split_mlp(void **s) { (void)s, split_case(&ttt_mlp_desc, 1, 1), split_case(&ttt_mlp_desc, 4, 4); }
static void test_split_titans(void **s) { (void)s, split_case(&titans_desc, 1, 1), split_case(&titans_desc, 4, 8); }

/* the optional inputs (ttt_mlp's b1, b2; titans' h0, s0) as NULL equal zeros */
static void null_case(const op2_desc *op, const int *opt_idx)
{
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[MAXIN], *g[MAXOUT], *o[MAXOUT];
    random_inputs(ctx, op, 13, 2, 9, 2, 3, 6, in);
    pr_rng r = pr_rng_init(3, 3);
    for (int j = 0; j < 2; j++) pr_fill_(in[opt_idx[j]], 0);
    op->apply(ctx, 4, 1e-6, in, o);
    for (int i = 0; i < op->n_out; i++) g[i] = pr_randu(ctx->step, PR_F64, PR_CPU, o[i]->ndim, o[i]->shape, &r, -1, 1);
    run_out zero = run_op(ctx, op, 4, 1e-6, in, g, PR_F64, PR_CPU);
    for (int j = 0; j < 2; j++) in[opt_idx[j]] = NULL;
    run_out none = run_op(ctx, op, 4, 1e-6, in, g, PR_F64, PR_CPU);
    for (int j = 0; j < 2; j++) free(zero.d[opt_idx[j]]), zero.d[opt_idx[j]] = NULL;
    compare_runs("null state", op, &none, &zero, 0);
    run_out_free(&zero), run_out_free(&none);
    pr_ctx_free(ctx);
}

static void test_null_state(void **s)
{
    (void)s;
    null_case(&ttt_mlp_desc, (const int[]){7, 9});
    null_case(&titans_desc, (const int[]){8, 9});
}

static void test_errors(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *m[MAXIN], *t[MAXIN];
    random_inputs(ctx, &ttt_mlp_desc, 1, 1, 5, 2, 4, 8, m);
    random_inputs(ctx, &titans_desc, 1, 1, 5, 2, 4, 4, t);
    pr_ttt_opts mo = {.mini_batch = 4};
    pr_titans_opts to = {.chunk = 4};
    PR_EXPECT_FATAL(pr_ttt_mlp(ctx, &mo, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[6], m[9], NULL, NULL, NULL, NULL),
                    "ttt_mlp: w2 has shape [1,2,4,8]; expected [1,2,8,4]");
    PR_EXPECT_FATAL(pr_ttt_mlp(ctx, &mo, m[0], m[1], m[2], m[3], m[4], m[0], m[6], m[7], m[8], m[9], NULL, NULL, NULL, NULL),
                    "ttt_mlp: eta has shape");
    PR_EXPECT_FATAL(pr_ttt_mlp(ctx, &mo, m[0], m[1], m[2], m[3], m[4], m[5], NULL, m[7], m[8], m[9], NULL, NULL, NULL, NULL),
                    "ttt_mlp: w1 is NULL");
    pr_tensor *k32 = pr_to(ctx->step, t[1], PR_F32, PR_CPU);
    PR_EXPECT_FATAL(pr_titans(ctx, &to, t[0], k32, t[2], t[3], t[4], t[5], t[6], t[7], NULL, NULL, NULL, NULL),
                    "titans: dtype mismatch");
    PR_EXPECT_FATAL(pr_titans(ctx, &to, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[0], NULL, NULL, NULL),
                    "titans: h0 has shape");
    PR_EXPECT_FATAL(pr_titans(ctx, &to, t[0], t[1], t[2], t[3], t[4], t[5], t[0], t[7], NULL, NULL, NULL, NULL),
                    "titans: alpha has shape");
    to.chunk = 0, mo.mini_batch = 0;
    PR_EXPECT_FATAL(pr_titans(ctx, &to, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], NULL, NULL, NULL, NULL),
                    "titans: chunk must be >= 1");
    PR_EXPECT_FATAL(pr_ttt_mlp(ctx, &mo, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], NULL, NULL, NULL, NULL),
                    "ttt_mlp: mini_batch must be >= 1");
    pr_ctx_free(ctx);
}

static void test_bf16_mlp(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[MAXIN], *g[MAXOUT], *o[MAXOUT];
    random_inputs(ctx, &ttt_mlp_desc, 17, 2, 11, 2, 6, 5, in);
    ttt_mlp_apply(ctx, 4, 1e-6, in, o);
    pr_rng r = pr_rng_init(18, 0);
    for (int i = 0; i < ttt_mlp_desc.n_out; i++) g[i] = pr_randu(ctx->step, PR_F64, PR_CPU, o[i]->ndim, o[i]->shape, &r, -1, 1);
    run_out want = run_mlp_bf16(ctx, 4, 1e-6, in, g, PR_CPU, true), got = run_mlp_bf16(ctx, 4, 1e-6, in, g, PR_CPU, false);
    compare_bf16("ttt_mlp bf16 data cpu", &got, &want, 0);
    run_out_free(&got), run_out_free(&want);
    pr_tensor *w1 = pr_to(ctx->step, in[6], PR_BF16, PR_CPU), *lo[MAXIN];
    for (int i = 0; i < ttt_mlp_desc.n_in; i++) lo[i] = pr_to(ctx->step, in[i], mlp_bf16_dtype(i), PR_CPU);
    const pr_ttt_opts opt = {.mini_batch = 4};
    PR_EXPECT_FATAL(pr_ttt_mlp(ctx, &opt, lo[0], lo[1], lo[2], lo[3], lo[4], lo[5], w1, lo[7], lo[8], lo[9], NULL, NULL,
                               NULL, NULL),
                    "ttt_mlp: dtype mismatch: w1 is bf16, expected f32 (q is bf16: w, b, w1, b1, w2 and b2 stay f32)");
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_mlp_f64),    cmocka_unit_test(test_golden_mlp_f32),
        cmocka_unit_test(test_golden_titans_f64), cmocka_unit_test(test_golden_titans_f32),
        cmocka_unit_test(test_gradcheck_mlp),     cmocka_unit_test(test_gradcheck_titans),
        cmocka_unit_test(test_composed_mlp),      cmocka_unit_test(test_composed_titans),
        cmocka_unit_test(test_split_mlp),         cmocka_unit_test(test_split_titans),
        cmocka_unit_test(test_null_state),        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bf16_mlp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
