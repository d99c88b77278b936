/* tests/test_ops_a.c: binary (broadcasting), reductions, softmax, losses and
 * norms on the CPU.
 *
 * Every op's example is checked in tests/test_ops_all.c; here: hand-computed values, variants
 * with optional inputs left out, a fused op against its composition from
 * primitive ops, and the fatal errors with the op's name in the message.
 */
#include "tests/pr_test.h"

static int setup(void **state)
{
    *state = pr_ctx_new(42);
    return 0;
}

static int teardown(void **state)
{
    pr_ctx_free(*state);
    return 0;
}


/* ---- helpers ------------------------------------------------------------------------ */

static pr_tensor *f64(pr_ctx *ctx, int ndim, const int64_t *shape, const double *v)
{
    return pr_from_host(ctx->step, PR_F64, PR_CPU, ndim, shape, v);
}

static pr_tensor *leaf(pr_ctx *ctx, int ndim, const int64_t *shape, const double *v)
{
    pr_tensor *t = f64(ctx, ndim, shape, v);
    t->requires_grad = true;
    return t;
}

static void assert_values(const char *name, const pr_tensor *t, const double *ref, double tol)
{
    double *got = malloc(sizeof(double) * (size_t)(t->numel + 1));
    pr_to_host_f64(t, got);
    pr_assert_allclose(name, got, ref, t->numel, tol, tol);
    free(got);
}

static void assert_shape(const pr_tensor *t, int ndim, const int64_t *shape)
{
    assert_int_equal(t->ndim, ndim);
    for (int d = 0; d < ndim; d++) assert_int_equal(t->shape[d], shape[d]);
}

/* ---- binary ------------------------------------------------------------------------- */

/* [3,1,5] (op) [4,5] -> [3,4,5]; the grads of sum_all sum over the broadcast dims */
static void test_broadcast_values(void **state)
{
    pr_ctx *ctx = *state;
    double av[15], bv[20], ref[60];
    for (int i = 0; i < 15; i++) av[i] = i + 1;
    for (int i = 0; i < 20; i++) bv[i] = 0.1 * (i + 1);
    pr_tensor *a = leaf(ctx, PR_DIMS(3, 1, 5), av), *b = leaf(ctx, PR_DIMS(4, 5), bv);
    pr_tensor *y = pr_add(ctx, a, b);
    assert_shape(y, PR_DIMS(3, 4, 5));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 5; k++) ref[(i * 4 + j) * 5 + k] = av[i * 5 + k] + bv[j * 5 + k];
    assert_values("add", y, ref, 1e-15);
    pr_backward(ctx, pr_sum_all(ctx, y));
    double ga[15], gb[20];
    for (int i = 0; i < 15; i++) ga[i] = 4;  /* each a element is used by 4 rows of b */
    for (int i = 0; i < 20; i++) gb[i] = 3;  /* each b element by 3 blocks of a */
    assert_values("add da", a->grad, ga, 0);
    assert_values("add db", b->grad, gb, 0);

    /* mul: da[i,0,k] = sum_j b[j,k], db[j,k] = sum_i a[i,0,k] */
    pr_zero_(a->grad);
    pr_zero_(b->grad);
    pr_backward(ctx, pr_sum_all(ctx, pr_mul(ctx, a, b)));
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++) {
            ga[i * 5 + k] = 0;
            for (int j = 0; j < 4; j++) ga[i * 5 + k] += bv[j * 5 + k];
        }
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 5; k++) gb[j * 5 + k] = av[k] + av[5 + k] + av[10 + k];
    assert_values("mul da", a->grad, ga, 1e-14);
    assert_values("mul db", b->grad, gb, 1e-14);
}

/* [2,1] - [1,3] -> [2,3] (both broadcast); a 0-dim scalar divides anything */
static void test_broadcast_outer_and_scalar(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *a = f64(ctx, PR_DIMS(2, 1), (double[]){1, 2}), *b = f64(ctx, PR_DIMS(1, 3), (double[]){10, 20, 30});
    pr_tensor *y = pr_sub(ctx, a, b);
    assert_shape(y, PR_DIMS(2, 3));
    assert_values("sub", y, (double[]){-9, -19, -29, -8, -18, -28}, 0);
    pr_tensor *s = pr_from_host(ctx->step, PR_F64, PR_CPU, 0, NULL, (double[]){4});
    pr_tensor *q = pr_div(ctx, b, s);
    assert_shape(q, PR_DIMS(1, 3));
    assert_values("div", q, (double[]){2.5, 5, 7.5}, 0);
}

/* offset into t (shape tshape, tnd dims) of output element i (shape oshape, ond dims) */
static int64_t bcast_offset(int64_t i, int ond, const int64_t *oshape, int tnd, const int64_t *tshape)
{
    int64_t off = 0, stride = 1;
    for (int d = ond - 1; d >= 0; d--) {
        int64_t c = i % oshape[d];
        i /= oshape[d];
        int td = d - (ond - tnd);
        if (td < 0) continue;
        if (tshape[td] != 1) off += c * stride;
        stride *= tshape[td];
    }
    return off;
}

/* mul over shape pairs that take each path of the broadcast walk (same
 * shape, a bias row, a column, both broadcast, size-1 dims in the middle, a
 * 0-dim scalar) against an element-by-element reference; the grads of
 * sum(a*b*w) too */
static void test_broadcast_shapes(void **state)
{
    pr_ctx *ctx = *state;
    static const struct { int na, nb; int64_t a[4], b[4]; } cases[] = {
        {3, 3, {2, 3, 4}, {2, 3, 4}}, {3, 1, {2, 3, 4}, {4}},        {3, 2, {2, 3, 4}, {3, 1}},
        {3, 3, {2, 1, 4}, {2, 3, 1}}, {1, 1, {5}, {1}},              {0, 2, {0}, {2, 3}},
        {4, 4, {2, 1, 3, 1}, {1, 4, 3, 5}}, {3, 3, {1, 1, 6}, {2, 3, 1}}, {2, 3, {1, 7}, {3, 2, 7}},
    };
    pr_rng rng = pr_rng_init(7, 0), *r = &rng;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pr_tensor *a = pr_randn(ctx->step, PR_F64, PR_CPU, cases[c].na, cases[c].a, r);
        pr_tensor *b = pr_randn(ctx->step, PR_F64, PR_CPU, cases[c].nb, cases[c].b, r);
        a->requires_grad = b->requires_grad = true;
        pr_tensor *y = pr_mul(ctx, a, b);
        pr_tensor *w = pr_randn(ctx->step, PR_F64, PR_CPU, y->ndim, y->shape, r);
        pr_backward(ctx, pr_sum_all(ctx, pr_mul(ctx, y, w)));
        const double *av = a->data, *bv = b->data, *wv = w->data;
        double *ref = calloc((size_t)y->numel, sizeof *ref);
        double *ga = calloc((size_t)a->numel, sizeof *ga), *gb = calloc((size_t)b->numel, sizeof *gb);
        for (int64_t i = 0; i < y->numel; i++) {
            int64_t ia = bcast_offset(i, y->ndim, y->shape, a->ndim, a->shape);
            int64_t ib = bcast_offset(i, y->ndim, y->shape, b->ndim, b->shape);
            ref[i] = av[ia] * bv[ib];
            ga[ia] += wv[i] * bv[ib];
            gb[ib] += wv[i] * av[ia];
        }
        assert_values("mul", y, ref, 0);
        assert_values("mul da", a->grad, ga, 1e-14);
        assert_values("mul db", b->grad, gb, 1e-14);
        free(ref), free(ga), free(gb);
        pr_step_reset(ctx);
    }
}

/* a scalar denominator's grad sums every element's: d/ds sum(x/s) = -sum(x)/s^2 */
static void test_div_scalar_grad(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = leaf(ctx, PR_DIMS(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    pr_tensor *s = leaf(ctx, 0, NULL, (double[]){2});
    pr_backward(ctx, pr_sum_all(ctx, pr_div(ctx, x, s)));
    assert_values("div ds", s->grad, (double[]){-21.0 / 4}, 1e-15);
    assert_values("div dx", x->grad, (double[]){0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, 0);
}

/* ---- reductions ---------------------------------------------------------------------- */

static void test_reduce_values(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = leaf(ctx, PR_DIMS(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    pr_tensor *s = pr_sum(ctx, x), *m = pr_mean(ctx, x), *sa = pr_sum_all(ctx, x), *ma = pr_mean_all(ctx, x);
    assert_shape(s, PR_DIMS(2));
    assert_values("sum", s, (double[]){6, 15}, 0);
    assert_values("mean", m, (double[]){2, 5}, 0);
    assert_int_equal(sa->ndim, 0);
    assert_int_equal(sa->numel, 1);
    assert_int_equal(ma->ndim, 0);
    assert_true(pr_item(sa) == 21);
    assert_true(pr_item(ma) == 3.5);
    pr_tensor *v = f64(ctx, PR_DIMS(4), (double[]){1, 2, 3, 4});
    pr_tensor *v1 = pr_sum(ctx, v);
    assert_int_equal(v1->ndim, 0);
    assert_true(pr_item(v1) == 10);
    /* mean's grad is 1/N per element, summed over uses */
    pr_backward(ctx, pr_add(ctx, pr_sum_all(ctx, m), ma));
    double g = 1.0 / 3 + 1.0 / 6;
    assert_values("mean dx", x->grad, (double[]){g, g, g, g, g, g}, 1e-15);
}

/* ---- softmax ------------------------------------------------------------------------- */

static void test_softmax_values(void **state)
{
    pr_ctx *ctx = *state;
    /* row 2 is row 1 + 1000: the max subtraction keeps it finite and equal */
    pr_tensor *x = f64(ctx, PR_DIMS(2, 3), (double[]){1, 2, 3, 1001, 1002, 1003});
    double p[3] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
    double lp[3] = {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806};
    assert_values("softmax", pr_softmax(ctx, x), (double[]){p[0], p[1], p[2], p[0], p[1], p[2]}, 1e-14);
    assert_values("log_softmax", pr_log_softmax(ctx, x), (double[]){lp[0], lp[1], lp[2], lp[0], lp[1], lp[2]},
                  1e-12);
    pr_tensor *x32 = pr_to(ctx->step, x, PR_F32, PR_CPU);
    assert_values("softmax f32", pr_softmax(ctx, x32), (double[]){p[0], p[1], p[2], p[0], p[1], p[2]}, 1e-6);
    /* a row of one element is 1 (log 0), with zero grad */
    pr_tensor *one = leaf(ctx, PR_DIMS(2, 1), (double[]){-7, 50});
    pr_tensor *y = pr_softmax(ctx, one);
    assert_values("softmax D=1", y, (double[]){1, 1}, 0);
    pr_backward(ctx, pr_sum_all(ctx, y));
    assert_values("softmax D=1 dx", one->grad, (double[]){0, 0}, 0);
}

/* ---- losses -------------------------------------------------------------------------- */

static void test_cross_entropy_values(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = leaf(ctx, PR_DIMS(3, 3), (double[]){0, 0, 0, 1, 2, 3, 5, 5, 5});
    int32_t t32[3] = {0, 2, -100};
    pr_tensor *t = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(3), t32);
    pr_tensor *loss = pr_cross_entropy(ctx, x, t, -100);
    assert_int_equal(loss->ndim, 0);
    /* rows 0 and 1 count: (log 3 + (lse(1,2,3) - 3)) / 2 */
    double l0 = log(3.0), l1 = 0.4076059644443806;
    assert_values("cross_entropy", loss, (double[]){(l0 + l1) / 2}, 1e-14);
    pr_backward(ctx, loss);
    double p[3] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
    double ref[9] = {(1.0 / 3 - 1) / 2, 1.0 / 6, 1.0 / 6, p[0] / 2, p[1] / 2, (p[2] - 1) / 2, 0, 0, 0};
    assert_values("cross_entropy dx", x->grad, ref, 1e-14);

    /* int64 targets give the same loss */
    int64_t t64[3] = {0, 2, -100};
    pr_tensor *tl = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(3), t64);
    assert_values("cross_entropy i64", pr_cross_entropy(ctx, x, tl, -100), (double[]){(l0 + l1) / 2}, 1e-14);

    /* every row ignored: loss 0, grad 0 */
    pr_zero_(x->grad);
    int32_t all_ign[3] = {7, 7, 7};
    pr_tensor *ti = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(3), all_ign);
    pr_tensor *l2 = pr_cross_entropy(ctx, x, ti, 7);
    assert_true(pr_item(l2) == 0);
    pr_backward(ctx, l2);
    for (int i = 0; i < 9; i++) assert_true(pr_get(x->grad, i) == 0);
}

static void test_bce_logits_values(void **state)
{
    pr_ctx *ctx = *state;
    /* x = 0, t = 1: log 2; x = 100, t = 0: 100; x = -100, t = 0: log(1 + e^-100) ~ 3.7e-44 */
    pr_tensor *x = leaf(ctx, PR_DIMS(3), (double[]){0, 100, -100});
    pr_tensor *t = f64(ctx, PR_DIMS(3), (double[]){1, 0, 0});
    pr_tensor *loss = pr_bce_logits(ctx, x, t);
    assert_int_equal(loss->ndim, 0);
    assert_values("bce_logits", loss, (double[]){(log(2.0) + 100) / 3}, 1e-14);
    pr_backward(ctx, loss);
    /* (sigmoid(x) - t) / N */
    assert_values("bce_logits dx", x->grad, (double[]){-0.5 / 3, 1.0 / 3, 0}, 1e-14);
    /* f32 stays finite at large |x| */
    pr_tensor *x32 = pr_to(ctx->step, x, PR_F32, PR_CPU), *t32 = pr_to(ctx->step, t, PR_F32, PR_CPU);
    assert_values("bce_logits f32", pr_bce_logits(ctx, x32, t32), (double[]){(log(2.0) + 100) / 3}, 1e-6);
}

/* ---- norms --------------------------------------------------------------------------- */

/* score_rows: each row's loss against log-sum-exp written out, the first
 * argmax on a tie, ignored rows 0 and 0, a bad label named */
static void test_score_rows_values(void **state)
{
    pr_ctx *ctx = *state;
    const double x[4 * 3] = {1.0, 2.0, 2.0,    /* a tie at the top: column 1 is the argmax */
                             0.5, -1.0, 3.0,   /* ignored */
                             -2.0, 0.0, -2.0,  /* hit */
                             4.0, 4.0, 4.0};   /* all tied: column 0 */
    const int32_t labels[4] = {2, -7, 1, 0};
    double loss[4];
    int32_t hit[4];
    for (int dt = 0; dt < 2; dt++) {
        pr_tensor *t = f64(ctx, PR_DIMS(4, 3), x);
        if (dt) t = pr_cast(ctx, t, PR_F32);   /* every value is exact in f32 */
        pr_score_rows(ctx, t, labels, -7, loss, hit);
        for (int r = 0; r < 4; r++) {
            const double *row = x + 3 * r;
            double ref = r == 1 ? 0 : log(exp(row[0]) + exp(row[1]) + exp(row[2])) - row[labels[r]];
            assert_true(fabs(loss[r] - ref) <= 1e-14);
        }
        assert_int_equal(hit[0], 0);   /* label 2 ties the max at column 1: not a hit */
        assert_int_equal(hit[1], 0);
        assert_int_equal(hit[2], 1);
        assert_int_equal(hit[3], 1);
    }
    const int32_t bad[4] = {0, 3, 0, 0};
    PR_EXPECT_FATAL(pr_score_rows(ctx, f64(ctx, PR_DIMS(4, 3), x), bad, -7, loss, hit),
                    "score_rows: label 3 of row 1 is outside [0, 3)");
}

static void test_norm_values(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *x = f64(ctx, PR_DIMS(1, 4), (double[]){1, 2, 3, 4});
    pr_tensor *w = f64(ctx, PR_DIMS(4), (double[]){1, 2, 1, 0.5}), *b = f64(ctx, PR_DIMS(4), (double[]){0, 0, 1, 1});
    /* mean 2.5, biased var 1.25 */
    double r = 1 / sqrt(1.25 + 1e-5);
    assert_values("layernorm", pr_layernorm(ctx, x, w, b, 1e-5),
                  (double[]){-1.5 * r, -0.5 * r * 2, 0.5 * r + 1, 1.5 * r * 0.5 + 1}, 1e-14);
    assert_values("layernorm no w,b", pr_layernorm(ctx, x, NULL, NULL, 1e-5),
                  (double[]){-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r}, 1e-14);
    /* mean(x^2) = 7.5 */
    double q = 1 / sqrt(7.5);
    assert_values("rmsnorm", pr_rmsnorm(ctx, x, w, 0), (double[]){q, 4 * q, 3 * q, 2 * q}, 1e-14);
    /* gate z = 0 gives 0; z = 20 gives ~ z */
    pr_tensor *z = f64(ctx, PR_DIMS(1, 4), (double[]){0, 20, 0, 20});
    double s20 = 20 / (1 + exp(-20.0));
    assert_values("rmsnorm_gated", pr_rmsnorm_gated(ctx, x, z, NULL, 0), (double[]){0, 2 * q * s20, 0, 4 * q * s20},
                  1e-14);
    pr_tensor *v = f64(ctx, PR_DIMS(2, 2), (double[]){3, 4, 0, -2});
    assert_values("l2norm", pr_l2norm(ctx, v, 0), (double[]){0.6, 0.8, 0, -1}, 1e-15);
}

/* gradcheck of the norms with their optional inputs left out */
static pr_tensor *ln_plain(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_layernorm(ctx, in[0], NULL, NULL, ex->farg[0]);
}
static pr_tensor *ln_w_only(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_layernorm(ctx, in[0], in[1], NULL, ex->farg[0]);
}
static pr_tensor *rms_plain(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_rmsnorm(ctx, in[0], NULL, ex->farg[0]);
}
static pr_tensor *gated_plain(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_rmsnorm_gated(ctx, in[0], in[1], NULL, ex->farg[0]);
}

static void test_norm_optional_gradcheck(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(3, 3);
    pr_example ex = {.n_in = 1, .farg = {1e-5}};
    ex.in[0] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(4, 5), -2, 2);
    ex.apply = ln_plain;
    pr_test_gradcheck_ok(ctx, "layernorm no w,b", &ex);
    ex.apply = rms_plain;
    pr_test_gradcheck_ok(ctx, "rmsnorm no w", &ex);
    ex.n_in = 2;
    ex.in[1] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(5), 0.5, 1.5);
    ex.apply = ln_w_only;
    pr_test_gradcheck_ok(ctx, "layernorm no b", &ex);
    ex.in[1] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(4, 5), -3, 3);
    ex.apply = gated_plain;
    pr_test_gradcheck_ok(ctx, "rmsnorm_gated no w", &ex);
}

/* the fused rmsnorm_gated against rmsnorm(x; w) * silu(z) built from primitive ops:
 * same output, same grads for x, z and w */
static void test_rmsnorm_gated_vs_composed(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(8, 0);
    pr_tensor *x = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 5), -2, 2);
    pr_tensor *z = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 5), -3, 3);
    pr_tensor *w = pr_example_input(ctx, &r, PR_F64, PR_DIMS(5), 0.5, 1.5);
    pr_tensor *up = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(3, 5), &r);
    pr_tensor *in[3] = {x, z, w}, *fused[3];
    pr_tensor *yf = pr_rmsnorm_gated(ctx, x, z, w, 1e-6);
    pr_backward_with(ctx, yf, up);
    for (int i = 0; i < 3; i++) {
        fused[i] = pr_clone(ctx->step, in[i]->grad);
        pr_zero_(in[i]->grad);
    }
    pr_tensor *yc = pr_mul(ctx, pr_rmsnorm(ctx, x, w, 1e-6), pr_silu(ctx, z));
    pr_backward_with(ctx, yc, up);
    pr_assert_tensors_close("gated y", yf, yc, 1e-14, 1e-12);
    pr_assert_tensors_close("gated dx", fused[0], x->grad, 1e-14, 1e-12);
    pr_assert_tensors_close("gated dz", fused[1], z->grad, 1e-14, 1e-12);
    pr_assert_tensors_close("gated dw", fused[2], w->grad, 1e-14, 1e-12);
}

/* the fused residual add + norm against add then the norm: in f64 the same
 * bits for n and s (the same loops run), and the same grads for x, y, w, b
 * with both outputs seeded (s feeds the next residual add, n the sublayer);
 * then x added to itself (one tensor as both inputs gets both grads) */
static pr_tensor *add_norm_fused(pr_ctx *ctx, pr_tensor *x, pr_tensor *y, pr_tensor *w, pr_tensor *b, pr_tensor **s)
{
    return b ? pr_add_layernorm(ctx, x, y, w, b, 1e-6, s) : pr_add_rmsnorm(ctx, x, y, w, 1e-6, s);
}
static pr_tensor *add_norm_composed(pr_ctx *ctx, pr_tensor *x, pr_tensor *y, pr_tensor *w, pr_tensor *b, pr_tensor **s)
{
    *s = pr_add(ctx, x, y);
    return b ? pr_layernorm(ctx, *s, w, b, 1e-6) : pr_rmsnorm(ctx, *s, w, 1e-6);
}

static void check_add_norm(pr_ctx *ctx, bool layer, bool same_input)
{
    pr_rng r = pr_rng_init(9, layer);
    pr_tensor *x = pr_example_input(ctx, &r, PR_F64, PR_DIMS(2, 3, 7), -2, 2);
    pr_tensor *y = same_input ? x : pr_example_input(ctx, &r, PR_F64, PR_DIMS(2, 3, 7), -1, 1);
    pr_tensor *w = pr_example_input(ctx, &r, PR_F64, PR_DIMS(7), 0.5, 1.5);
    pr_tensor *b = layer ? pr_example_input(ctx, &r, PR_F64, PR_DIMS(7), -1, 1) : NULL;
    const pr_tensor *seeds[2] = {pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 3, 7), &r),
                                 pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 3, 7), &r)};
    pr_tensor *in[4] = {x, y, w, b}, *grads[2][4] = {{0}}, *outs[2][2];
    for (int pass = 0; pass < 2; pass++) {
        pr_tensor *s, *n = (pass ? add_norm_composed : add_norm_fused)(ctx, x, y, w, b, &s);
        outs[pass][0] = n, outs[pass][1] = s;
        pr_backward_many(ctx, 2, outs[pass], seeds);
        for (int i = 0; i < 4; i++) {
            if (!in[i] || (i == 1 && same_input)) continue;
            grads[pass][i] = pr_clone(ctx->step, in[i]->grad);
            pr_zero_(in[i]->grad);
        }
    }
    pr_assert_tensors_close("add_norm n", outs[0][0], outs[1][0], 0, 0);
    pr_assert_tensors_close("add_norm s", outs[0][1], outs[1][1], 0, 0);
    const char *names[4] = {"add_norm dx", "add_norm dy", "add_norm dw", "add_norm db"};
    for (int i = 0; i < 4; i++)
        if (grads[0][i]) pr_assert_tensors_close(names[i], grads[0][i], grads[1][i], 1e-14, 1e-12);
}

static void test_add_norm_vs_composed(void **state)
{
    pr_ctx *ctx = *state;
    for (int layer = 0; layer < 2; layer++) {
        check_add_norm(ctx, layer, false);
        check_add_norm(ctx, layer, true);
    }
}

/* the fused op's gradcheck with w (and b) left out, and without *sum */
static pr_tensor *add_rms_plain(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_add_rmsnorm(ctx, in[0], in[1], NULL, ex->farg[0], NULL);
}
static pr_tensor *add_ln_plain(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_add_layernorm(ctx, in[0], in[1], NULL, NULL, ex->farg[0], NULL);
}

static void test_add_norm_optional_gradcheck(void **state)
{
    pr_ctx *ctx = *state;
    pr_rng r = pr_rng_init(4, 4);
    pr_example ex = {.n_in = 2, .farg = {1e-5}};
    ex.in[0] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 5), -2, 2);
    ex.in[1] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(3, 5), -1, 1);
    ex.apply = add_rms_plain;
    pr_test_gradcheck_ok(ctx, "add_rmsnorm no w", &ex);
    ex.apply = add_ln_plain;
    pr_test_gradcheck_ok(ctx, "add_layernorm no w,b", &ex);
}

/* ---- fatal errors -------------------------------------------------------------------- */

static void test_errors(void **state)
{
    pr_ctx *ctx = *state;
    pr_tensor *a = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(3, 4));
    pr_tensor *b = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(5));
    pr_tensor *c = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 3, 4));
    pr_tensor *a32 = pr_zeros(ctx->step, PR_F32, PR_CPU, PR_DIMS(3, 4));
    PR_EXPECT_FATAL(pr_add(ctx, a, b), "add: shapes [3,4] and [5] do not broadcast");
    PR_EXPECT_FATAL(pr_div(ctx, b, a), "div: shapes [5] and [3,4]");
    pr_tensor *d = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 1, 3));
    PR_EXPECT_FATAL(pr_mul(ctx, c, d), "mul: shapes [2,3,4] and [2,1,3] do not broadcast (dim 2: 4 vs 3)");
    PR_EXPECT_FATAL(pr_sub(ctx, a, a32), "sub: dtype mismatch");
    PR_EXPECT_FATAL(pr_sum(ctx, pr_zeros(ctx->step, PR_F64, PR_CPU, 0, NULL)), "sum: x must have at least 1 dim");
    PR_EXPECT_FATAL(pr_softmax(ctx, pr_zeros(ctx->step, PR_I64, PR_CPU, PR_DIMS(3))), "softmax: x has dtype i64");

    /* cross_entropy: a target out of [0, C) that is not ignore_index names the index */
    int64_t tv[3] = {1, 4, -100};
    pr_tensor *t = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(3), tv);
    PR_EXPECT_FATAL(pr_cross_entropy(ctx, a, t, -100), "cross_entropy: target 4 at index 1 is out of range [0, 4)");
    int64_t tn[3] = {1, 0, -1};
    pr_tensor *tneg = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(3), tn);
    PR_EXPECT_FATAL(pr_cross_entropy(ctx, a, tneg, -100), "cross_entropy: target -1 at index 2");
    PR_EXPECT_FATAL(pr_cross_entropy(ctx, a, pr_zeros(ctx->step, PR_I64, PR_CPU, PR_DIMS(4)), -100),
                    "cross_entropy: logits [3,4]");
    PR_EXPECT_FATAL(pr_cross_entropy(ctx, a, pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(3)), -100),
                    "cross_entropy: targets must be int32 or int64");
    PR_EXPECT_FATAL(pr_bce_logits(ctx, a, c), "bce_logits: shape mismatch");

    /* norms: parameters of the wrong size, a gate of the wrong shape */
    PR_EXPECT_FATAL(pr_layernorm(ctx, a, b, NULL, 1e-5), "layernorm: w must be [D]");
    PR_EXPECT_FATAL(pr_layernorm(ctx, a, NULL, b, 1e-5), "layernorm: b must be [D]");
    PR_EXPECT_FATAL(pr_rmsnorm(ctx, a, a, 1e-5), "rmsnorm: w must be [D]");
    PR_EXPECT_FATAL(pr_rmsnorm_gated(ctx, a, c, NULL, 1e-5), "rmsnorm_gated: shape mismatch");
    PR_EXPECT_FATAL(pr_l2norm(ctx, pr_zeros(ctx->step, PR_I32, PR_CPU, PR_DIMS(3)), 1e-6), "l2norm: x has dtype i32");
    PR_EXPECT_FATAL(pr_add_rmsnorm(ctx, a, c, NULL, 1e-5, NULL), "add_rmsnorm: shape mismatch");
    PR_EXPECT_FATAL(pr_add_rmsnorm(ctx, a, a, b, 1e-5, NULL), "add_rmsnorm: w must be [D]");
    PR_EXPECT_FATAL(pr_add_layernorm(ctx, a, a, NULL, b, 1e-5, NULL), "add_layernorm: b must be [D]");
    PR_EXPECT_FATAL(pr_add_layernorm(ctx, a, a32, NULL, NULL, 1e-5, NULL), "add_layernorm: dtype mismatch");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_broadcast_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_outer_and_scalar, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_shapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_div_scalar_grad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reduce_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_softmax_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_entropy_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_score_rows_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bce_logits_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_norm_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_norm_optional_gradcheck, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rmsnorm_gated_vs_composed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_norm_vs_composed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_norm_optional_gradcheck, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
    };
    return cmocka_run_group_tests_name("ops_a", tests, NULL, NULL);
}
