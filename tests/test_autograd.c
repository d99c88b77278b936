/* tests/test_autograd.c: tape semantics, grad accumulation, no-grad mode,
 * arena release, inspection, and a gradcheck that must catch a wrong backward. */
#include "tests/pr_test.h"
#include "autograd/profile.h"

static pr_tensor *leaf(pr_arena *a, const double *v, int64_t n)
{
    pr_tensor *t = pr_from_host(a, PR_F64, PR_CPU, 1, &n, v);
    pr_requires_grad_(t, true);
    return t;
}

/* y = sum(x * x + exp(x)): x feeds two ops (three uses); dy/dx = 2x + e^x */
static void test_tensor_used_twice(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = leaf(ctx->grads, (double[]){0.5, -1.0, 2.0}, 3);
    pr_tensor *y = pr_sum_all(ctx, pr_add(ctx, pr_mul(ctx, x, x), pr_exp(ctx, x)));
    pr_backward(ctx, y);
    double g[3], ref[3] = {1 + exp(0.5), -2 + exp(-1.0), 4 + exp(2.0)};
    pr_to_host_f64(x->grad, g);
    pr_assert_allclose("dx", g, ref, 3, 1e-12, 1e-12);
    /* a second step accumulates into the parameter's grad until it is zeroed */
    pr_step_reset(ctx);
    y = pr_sum_all(ctx, pr_mul(ctx, x, x));
    pr_backward(ctx, y);
    pr_to_host_f64(x->grad, g);
    assert_true(fabs(g[0] - (1 + exp(0.5) + 1.0)) < 1e-12);
    pr_zero_grads(&x, 1);
    pr_to_host_f64(x->grad, g);
    assert_true(g[0] == 0 && g[1] == 0 && g[2] == 0);
    pr_ctx_free(ctx);
}

/* Activation gradients start unwritten (autograd.h): the first op writes
 * one whole, later ones add (y*y and y @ y^T: one tensor as both inputs), a
 * broadcast input's grad is zeroed first. y = 2x is an activation; with
 * L = sum(y*y) + sum(y @ y^T) + sum(y + c[3,1,2]):
 * dL/dy = 2y + 2 colsum(y) + 3, so dx = 2 dL/dy. */
static void test_unwritten_grads(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    double xv[4] = {0.5, -1.0, 2.0, 0.25};
    pr_tensor *x = pr_from_host(ctx->grads, PR_F64, PR_CPU, PR_DIMS(2, 2), xv);
    pr_requires_grad_(x, true);
    pr_tensor *y = pr_scale(ctx, x, 2.0);
    pr_tensor *c = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(3, 1, 2));
    pr_tensor *sq = pr_sum_all(ctx, pr_mul(ctx, y, y));
    pr_tensor *gram = pr_sum_all(ctx, pr_matmul(ctx, y, y, false, true));
    pr_tensor *bc = pr_sum_all(ctx, pr_add(ctx, y, c));
    pr_backward(ctx, pr_add(ctx, pr_add(ctx, sq, gram), bc));
    double g[4], ref[4];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            double yik = 2 * xv[i * 2 + k], col = 2 * (xv[k] + xv[2 + k]);
            ref[i * 2 + k] = 2 * (2 * yik + 2 * col + 3);
        }
    pr_to_host_f64(x->grad, g);
    pr_assert_allclose("dx", g, ref, 4, 1e-12, 1e-12);
    assert_false(y->grad->unwritten);
    pr_ctx_free(ctx);
}

/* two outputs seeded in one pass: dx = g1 e^x + g2 2x; a repeated output is refused */
static void test_backward_many(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = leaf(ctx->grads, (double[]){0.3, -0.7}, 2);
    pr_tensor *y1 = pr_exp(ctx, x), *y2 = pr_mul(ctx, x, x);
    pr_tensor *g1 = pr_from_host(ctx->step, PR_F64, PR_CPU, PR_DIMS(2), (double[]){1.0, 2.0});
    pr_tensor *g2 = pr_from_host(ctx->step, PR_F64, PR_CPU, PR_DIMS(2), (double[]){-3.0, 0.5});
    pr_backward_many(ctx, 2, (pr_tensor *[]){y1, y2}, (const pr_tensor *[]){g1, g2});
    double g[2], ref[2] = {exp(0.3) - 3 * 0.6, 2 * exp(-0.7) + 0.5 * -1.4};
    pr_to_host_f64(x->grad, g);
    pr_assert_allclose("dx", g, ref, 2, 1e-12, 1e-12);
    PR_EXPECT_FATAL(pr_backward_many(ctx, 2, (pr_tensor *[]){y1, y1}, (const pr_tensor *[]){g1, g1}),
                    "given twice");
    pr_ctx_free(ctx);
}

/* A tape walked twice: the intermediate exp(x) starts each pass from zero,
 * so with the leaf's grad zeroed between passes the second pass gives
 * exactly e^0.5 again (not 2 e^0.5); without zeroing, the leaf accumulates. */
static void test_second_backward_same_tape(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = leaf(ctx->grads, (double[]){0.5}, 1);
    pr_tensor *e = pr_exp(ctx, x), *y = pr_sum_all(ctx, e);
    double g;
    for (int pass = 0; pass < 2; pass++) {
        pr_zero_grads(&x, 1);
        pr_backward(ctx, y);
        pr_to_host_f64(x->grad, &g);
        assert_true(fabs(g - exp(0.5)) < 1e-12);
        assert_true(fabs(g - 1.6487212707) < 1e-9);
        pr_to_host_f64(e->grad, &g);
        assert_true(g == 1.0);
    }
    pr_backward(ctx, y);
    pr_to_host_f64(x->grad, &g);
    assert_true(fabs(g - 2 * exp(0.5)) < 1e-12);
    pr_ctx_free(ctx);
}

/* a reshape of an op's output is a view of its gradient, not a node: with
 * u = e^x used as itself and reshaped twice, loss = sum(r2 * r2) + sum(u),
 * dloss/dx = (2u + 1) u; the same on a second pass over the tape, and a
 * reshape of a leaf is still a node */
static void test_reshape_shares_grad(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    double xv[6] = {0.3, -0.4, 0.1, 0.7, -1.2, 0.5};
    pr_tensor *x = leaf(ctx->grads, xv, 6);
    pr_tensor *u = pr_exp(ctx, x);
    int n0 = ctx->n_tape;
    pr_tensor *r1 = pr_reshape(ctx, u, PR_DIMS(2, 3));
    pr_tensor *r2 = pr_reshape(ctx, r1, PR_DIMS(3, 2));
    assert_int_equal(ctx->n_tape, n0);          /* no node for either */
    assert_ptr_equal(r2->grad_base, u);         /* a reshape of a reshape shares the first base */
    pr_tensor *loss = pr_add(ctx, pr_sum_all(ctx, pr_mul(ctx, r2, r2)), pr_sum_all(ctx, u));
    for (int pass = 0; pass < 2; pass++) {
        pr_zero_grads(&x, 1);
        pr_backward(ctx, loss);
        double g[6];
        pr_to_host_f64(x->grad, g);
        for (int i = 0; i < 6; i++) {
            double e = exp(xv[i]);
            assert_true(fabs(g[i] - (2 * e + 1) * e) < 1e-12);
        }
        pr_to_host_f64(r2->grad, g);            /* the view reads u's gradient */
        for (int i = 0; i < 6; i++) assert_true(fabs(g[i] - (2 * exp(xv[i]) + 1)) < 1e-12);
    }
    int n1 = ctx->n_tape;
    pr_reshape(ctx, x, PR_DIMS(3, 2));
    assert_int_equal(ctx->n_tape, n1 + 1);
    pr_ctx_free(ctx);
}

/* two passes from different seeds through a shared intermediate u = e^x:
 * the second pass (b = sum(u*u)) must not see the first pass's du = 1 */
static void test_passes_share_an_intermediate(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = leaf(ctx->grads, (double[]){0.3, -0.4}, 2);
    pr_tensor *u = pr_exp(ctx, x);
    pr_tensor *a = pr_sum_all(ctx, u), *b = pr_sum_all(ctx, pr_mul(ctx, u, u));
    pr_backward(ctx, a);
    pr_zero_grads(&x, 1);
    pr_backward(ctx, b);
    double g[2], du[2], ref[2] = {2 * exp(0.6), 2 * exp(-0.8)}, ref_du[2] = {2 * exp(0.3), 2 * exp(-0.4)};
    pr_to_host_f64(x->grad, g);
    pr_to_host_f64(u->grad, du);
    pr_assert_allclose("dx", g, ref, 2, 1e-12, 1e-12);
    pr_assert_allclose("du", du, ref_du, 2, 1e-12, 1e-12);
    /* and backward_many over the same tape afterwards: both seeds, one pass */
    pr_zero_grads(&x, 1);
    pr_tensor *one = pr_full(ctx->step, PR_F64, PR_CPU, PR_DIMS(1), 1.0);
    pr_backward_many(ctx, 2, (pr_tensor *[]){a, b}, (const pr_tensor *[]){one, one});
    pr_to_host_f64(x->grad, g);
    for (int i = 0; i < 2; i++) ref[i] += ((const double *)u->data)[i];
    pr_assert_allclose("dx (a and b)", g, ref, 2, 1e-12, 1e-12);
    pr_ctx_free(ctx);
}

static void test_no_grad(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = leaf(ctx->grads, (double[]){1, 2}, 2);
    bool prev = pr_set_grad_enabled(ctx, false);
    assert_true(prev);
    pr_tensor *y = pr_sum_all(ctx, pr_exp(ctx, x));
    assert_int_equal(ctx->n_tape, 0);
    assert_false(y->requires_grad);
    PR_EXPECT_FATAL(pr_backward(ctx, y), "does not require grad");
    pr_set_grad_enabled(ctx, true);
    y = pr_sum_all(ctx, pr_exp(ctx, x));
    assert_int_equal(ctx->n_tape, 2);
    /* a leaf that requires no grad gets none */
    pr_tensor *c = pr_from_host(ctx->step, PR_F64, PR_CPU, PR_DIMS(2), (double[]){3, 4});
    pr_backward(ctx, pr_sum_all(ctx, pr_mul(ctx, x, c)));
    assert_null(c->grad);
    assert_non_null(x->grad);
    PR_EXPECT_FATAL(pr_backward(ctx, pr_exp(ctx, x)), "use pr_backward_with");
    pr_ctx_free(ctx);
}

/* many steps through the step arena: usage returns to zero and LSan sees no leak */
static void test_step_arena_release(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_rng r = pr_rng_init(5, 0);
    pr_tensor *w = pr_randn(ctx->grads, PR_F32, PR_CPU, PR_DIMS(33, 17), &r);
    pr_requires_grad_(w, true);
    for (int step = 0; step < 20; step++) {
        pr_tensor *x = pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(9, 33), &r);
        pr_tensor *loss = pr_mean_all(ctx, pr_tanh(ctx, pr_matmul(ctx, x, w, false, false)));
        pr_backward(ctx, loss);
        assert_true(pr_arena_used(ctx->step) > 0);
        pr_step_reset(ctx);
        assert_int_equal(pr_arena_used(ctx->step), 0);
        assert_int_equal(ctx->n_tape, 0);
    }
    assert_non_null(w->grad);
    pr_ctx_free(ctx);
}

static void test_inspection(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = leaf(ctx->grads, (double[]){1, 2, 3}, 3);
    x->name = "x";
    pr_backward(ctx, pr_sum_all(ctx, pr_silu(ctx, x)));
    char buf[2048] = {0};
    FILE *f = fmemopen(buf, sizeof buf, "w");
    pr_tape_dump(ctx, f);
    fclose(f);
    assert_non_null(strstr(buf, "silu"));
    assert_non_null(strstr(buf, "x:[3]"));
    assert_non_null(strstr(buf, "|grad|="));
    memset(buf, 0, sizeof buf);
    f = fmemopen(buf, sizeof buf, "w");
    pr_tape_dot(ctx, f);
    fclose(f);
    assert_non_null(strstr(buf, "digraph tape"));
    assert_non_null(strstr(buf, "op0 -> op1"));
    pr_ctx_free(ctx);
}

/* the same graph built twice, at other addresses, gives the same DOT: node
 * ids are tape positions, not pointers; a leaf used twice is one node */
static void dot_of_graph(char *buf, size_t n, pr_arena *keep)
{
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = leaf(keep, (double[]){1, 2, 3}, 3);
    x->name = "x";
    pr_backward(ctx, pr_sum_all(ctx, pr_mul(ctx, pr_silu(ctx, x), x)));
    memset(buf, 0, n);
    FILE *f = fmemopen(buf, n, "w");
    pr_tape_dot(ctx, f);
    fclose(f);
    pr_ctx_free(ctx);
}

static void test_dot_is_stable(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("a", 0), *b = pr_arena_new("b", 0);
    char one[2048], two[2048];
    dot_of_graph(one, sizeof one, a);
    dot_of_graph(two, sizeof two, b);
    assert_string_equal(one, two);
    assert_non_null(strstr(one, "leaf0 [shape=ellipse, label=\"x:[3]\"];\n  leaf0 -> op0;"));
    assert_non_null(strstr(one, "leaf0 -> op1;"));
    assert_null(strstr(one, "leaf1"));
    pr_arena_free(a);
    pr_arena_free(b);
}

/* the op profiler counts each op once per pass, by scope without the layer number */
static void test_profile(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_profile *prof = calloc(1, sizeof *prof);
    ctx->profile = prof;
    pr_tensor *x = leaf(ctx->grads, (double[]){1, 2, 3}, 3);
    pr_ctx_set_scope(ctx, "layers.0.mixer");
    pr_tensor *y = pr_silu(ctx, x);
    pr_ctx_set_scope(ctx, "layers.1.mixer");
    y = pr_silu(ctx, y);
    pr_ctx_set_scope(ctx, NULL);
    pr_backward(ctx, pr_sum_all(ctx, y));
    ctx->profile = NULL;
    assert_int_equal(prof->n, 4);   /* silu and sum_all, forward and backward */
    for (int i = 0; i < prof->n; i++) {
        const pr_profile_entry *e = &prof->e[i];
        bool silu = strcmp(e->op, "silu") == 0;
        assert_string_equal(e->where, silu ? "mixer" : "model");
        assert_int_equal(e->calls, silu ? 2 : 1);
        assert_true(e->seconds >= 0);
    }
    char buf[2048] = {0};
    FILE *f = fmemopen(buf, sizeof buf, "w");
    prof->steps = 1;
    pr_profile_print(prof, 0, f);
    fclose(f);
    assert_non_null(strstr(buf, "| silu | mixer | bwd | 2 |"));
    free(prof);
    pr_ctx_free(ctx);
}

/* an op whose backward is off by a factor: gradcheck must fail and name it */
static void as_tanh(pr_ctx *ctx, pr_node *n, bool backward)
{
    pr_node m = *n;
    m.op = pr_op(PR_OP_tanh); /* the kernels read the op id from the table entry */
    (backward ? m.op->backward_cpu : m.op->forward_cpu)(ctx, &m);
}
static void tanh_forward(pr_ctx *ctx, pr_node *n) { as_tanh(ctx, n, false); }
static void wrong_backward(pr_ctx *ctx, pr_node *n)
{
    as_tanh(ctx, n, true);
    as_tanh(ctx, n, true); /* twice: gradient doubled */
}

static pr_tensor *wrong_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    static pr_op_info bad;
    bad = *pr_op(PR_OP_tanh);
    bad.name = "bad_tanh";
    bad.forward_cpu = tanh_forward;
    bad.backward_cpu = wrong_backward;
    pr_node n = pr_node_init(PR_OP_tanh, 1, in);
    n.op = &bad;
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, in[0]->dtype, in[0]->device, in[0]->ndim, in[0]->shape);
    return pr_op_apply(ctx, &n);
}

static void test_gradcheck_catches_errors(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_rng r = pr_rng_init(3, 0);
    pr_example ex = {0};
    pr_op(PR_OP_tanh)->example(ctx, &r, PR_F64, &ex);
    pr_gradcheck_result ok = pr_gradcheck(ctx, "tanh", &ex, NULL);
    assert_true(ok.ok);
    ex.apply = wrong_apply;
    pr_gradcheck_result bad = pr_gradcheck(ctx, "bad_tanh", &ex, NULL);
    assert_false(bad.ok);
    assert_non_null(strstr(bad.msg, "bad_tanh"));
    assert_non_null(strstr(bad.msg, "input 0 (x) element"));
    pr_ctx_free(ctx);
}

static pr_tensor *log_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_log(ctx, in[0]);
}

/* NaN compares false with any bound: gradcheck must still fail and name the
 * element, whether the numeric side (log at x = -1) or the analytic side (a
 * backward that writes NaN) is not finite */
static void nan_backward(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_fill_(n->in[0]->grad, NAN);
}
static pr_tensor *nan_grad_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    static pr_op_info bad;
    bad = *pr_op(PR_OP_tanh);
    bad.name = "nan_tanh";
    bad.forward_cpu = tanh_forward;
    bad.backward_cpu = nan_backward;
    pr_node n = pr_node_init(PR_OP_tanh, 1, in);
    n.op = &bad;
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, in[0]->dtype, in[0]->device, in[0]->ndim, in[0]->shape);
    return pr_op_apply(ctx, &n);
}

static void test_gradcheck_fails_on_nan(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_example ex = {.n_in = 1, .in = {leaf(ctx->grads, (double[]){-1.0}, 1)}, .apply = log_apply};
    pr_gradcheck_result g = pr_gradcheck(ctx, "log", &ex, NULL);
    fprintf(stderr, "  %s\n", g.msg);
    assert_false(g.ok);
    assert_true(isinf(g.max_abs_err));
    assert_non_null(strstr(g.msg, "gradcheck log: input 0 element 0: analytic"));
    assert_non_null(strstr(g.msg, "not finite"));

    ex.in[0] = leaf(ctx->grads, (double[]){0.5, -1.0, 2.0}, 3);
    ex.apply = nan_grad_apply;
    g = pr_gradcheck(ctx, "nan_tanh", &ex, NULL);
    fprintf(stderr, "  %s\n", g.msg);
    assert_false(g.ok);
    assert_non_null(strstr(g.msg, "input 0 element 0: analytic nan"));
    pr_ctx_free(ctx);
}

static void test_mixed_devices_and_dtypes(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *i = pr_arange(ctx->step, PR_I64, PR_CPU, 3);
    PR_EXPECT_FATAL(pr_exp(ctx, i), "exp: x has dtype i64");
    PR_EXPECT_FATAL(pr_requires_grad_(i, true), "cannot require grad");
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_used_twice), cmocka_unit_test(test_backward_many),
        cmocka_unit_test(test_unwritten_grads),
        cmocka_unit_test(test_second_backward_same_tape),
        cmocka_unit_test(test_reshape_shares_grad), cmocka_unit_test(test_passes_share_an_intermediate),
        cmocka_unit_test(test_no_grad), cmocka_unit_test(test_gradcheck_fails_on_nan),
        cmocka_unit_test(test_step_arena_release), cmocka_unit_test(test_inspection), cmocka_unit_test(test_dot_is_stable),
        cmocka_unit_test(test_profile),
        cmocka_unit_test(test_gradcheck_catches_errors), cmocka_unit_test(test_mixed_devices_and_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
