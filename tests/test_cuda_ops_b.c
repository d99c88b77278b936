/* tests/test_cuda_ops_b.c: CUDA matmul, embedding, conv1d (plain and silu), shape ops,
 * dropout and the evaluation's row scores against the CPU.
 *
 * Each case makes f64 inputs on the CPU, runs the op and its backward (with
 * one random output grad) on the CPU in f64 and f32 and on CUDA in f32, and
 * compares CUDA with CPU f32 (`atol + rtol*|ref|`) and with CPU f64, printing
 * every max error. Sizes are awkward on purpose: odd dims, T a prime, partial
 * tiles. Tolerances, and why:
 *  - shape ops and dropout move or scale elements: exact (0, 0), masks included;
 *  - embedding forward is a gather, exact; its backward sums up to ~600
 *    repeats of a row in another order than the CPU (grads ~ 15 in size; the
 *    CPU's own f32 sum is 7e-5 off f64): atol 2e-4, rtol 1e-5;
 *  - conv1d: out and dx are W-term sums; dw, dbias reduce over B*T <= 4106
 *    rows in another order (the CPU's sequential f32 sum alone is 2e-4 off
 *    f64 there): atol 1e-3, rtol 1e-4 against CPU f32, 5e-4 against f64;
 *  - matmul in fp32 math: error ~ sqrt(K) eps |a||b|, K <= 301: 1e-4;
 *    in TF32 math each input rounds to a 10-bit mantissa (relative 2^-11,
 *    2^-10 if truncated), so a K = 301 sum errs by ~2e-3..4e-3 (one std):
 *    atol 3e-2, rtol 1e-2. Wrong indexing gives errors of O(1).
 * The embedding and conv1d backwards are also run twice and must agree bit
 * for bit (no float atomics). Every case skips without a GPU.
 */
#include "tests/pr_test.h"

/* ---- the harness -------------------------------------------------------------- */

typedef struct {
    double atol, rtol;       /* CUDA vs CPU f32 */
    double atol64, rtol64;   /* CUDA vs CPU f64 */
} tols;

/* moves and scalings: exact against f32; against f64 only f32 rounding */
#define EXACT_INIT {0, 0, 1e-6, 1e-6}
static const tols EXACT = EXACT_INIT;

typedef struct {
    pr_tensor *out;
    pr_tensor *in[PR_MAX_IN];
} run_res;

/* copies of ex's inputs in dtype dt (float ones) on dev; forward; backward with gout */
static run_res run_on(pr_ctx *ctx, const pr_example *ex, pr_dtype dt, pr_device dev, const pr_tensor *gout)
{
    run_res r = {0};
    for (int i = 0; i < ex->n_in; i++) {
        const pr_tensor *t = ex->in[i];
        if (!t) continue;
        r.in[i] = pr_to(ctx->step, t, pr_dtype_is_float(t->dtype) ? dt : t->dtype, dev);
        r.in[i]->requires_grad = t->requires_grad;
    }
    r.out = ex->apply(ctx, r.in, ex);
    if (gout && r.out->requires_grad) pr_backward_with(ctx, r.out, gout);
    return r;
}

/* max |got - ref| and the number of elements outside atol + rtol |ref| */
static int compare(const char *what, const char *part, const pr_tensor *got, const pr_tensor *ref, double atol,
                   double rtol)
{
    char name[160];
    snprintf(name, sizeof name, "%s %s", what, part);
    if (!got || !ref) {
        if (got != ref) fprintf(stderr, "  %s: grad missing on one side\n", name);
        return got != ref;
    }
    assert_int_equal(got->numel, ref->numel);
    double *g = malloc(sizeof(double) * (size_t)(got->numel + 1)), *r = malloc(sizeof(double) * (size_t)(ref->numel + 1));
    pr_to_host_f64(got, g);
    pr_to_host_f64(ref, r);
    int bad;
    double err = pr_check_allclose(name, g, r, got->numel, atol, rtol, &bad);
    printf("    %-44s max|diff| %.3g (n %lld)\n", name, err, (long long)got->numel);
    free(g);
    free(r);
    return bad;
}

/* run ex on CUDA and on the CPU and compare outputs and every input grad */
static void check_devices(const char *what, const pr_example *ex, tols t, int tf32)
{
    pr_ctx *ctx = pr_ctx_new(7);
    double s = ex->tol_scale > 1 ? ex->tol_scale : 1;
    run_res r64 = run_on(ctx, ex, PR_F64, PR_CPU, NULL);
    pr_rng gr = pr_rng_init(99, 3);
    pr_tensor *gout = pr_randu(ctx->step, PR_F64, PR_CPU, r64.out->ndim, r64.out->shape, &gr, -1, 1);
    if (r64.out->requires_grad) pr_backward_with(ctx, r64.out, gout);
    run_res r32 = run_on(ctx, ex, PR_F32, PR_CPU, gout);
    ctx->matmul_tf32 = tf32;
    run_res rcu = run_on(ctx, ex, PR_F32, PR_CUDA, gout);
    pr_device_sync(PR_CUDA);
    printf("  %s%s\n", what, tf32 ? " (tf32)" : "");
    int bad = compare(what, "out vs f32", rcu.out, r32.out, t.atol * s, t.rtol * s);
    bad += compare(what, "out vs f64", rcu.out, r64.out, t.atol64 * s, t.rtol64 * s);
    for (int i = 0; i < ex->n_in; i++) {
        if (!ex->in[i] || !ex->in[i]->requires_grad) continue;
        char part[48];
        snprintf(part, sizeof part, "grad %d vs f32", i);
        bad += compare(what, part, rcu.in[i]->grad, r32.in[i]->grad, t.atol * s, t.rtol * s);
        snprintf(part, sizeof part, "grad %d vs f64", i);
        bad += compare(what, part, rcu.in[i]->grad, r64.in[i]->grad, t.atol64 * s, t.rtol64 * s);
    }
    pr_ctx_free(ctx);
    assert_int_equal(bad, 0);
}

/* the CUDA backward twice on the same inputs: every grad equal bit for bit */
static void check_deterministic(const char *what, const pr_example *ex)
{
    pr_ctx *ctx = pr_ctx_new(7);
    run_res probe = run_on(ctx, ex, PR_F32, PR_CUDA, NULL);
    pr_rng gr = pr_rng_init(5, 5);
    pr_tensor *gout = pr_randu(ctx->step, PR_F32, PR_CUDA, probe.out->ndim, probe.out->shape, &gr, -1, 1);
    run_res a = run_on(ctx, ex, PR_F32, PR_CUDA, gout), b = run_on(ctx, ex, PR_F32, PR_CUDA, gout);
    int bad = 0;
    for (int i = 0; i < ex->n_in; i++) {
        if (!a.in[i] || !a.in[i]->grad) continue;
        size_t bytes = pr_nbytes(a.in[i]->grad);
        char *ha = malloc(bytes + 1), *hb = malloc(bytes + 1);
        pr_device_memcpy(ha, PR_CPU, a.in[i]->grad->data, PR_CUDA, bytes);
        pr_device_memcpy(hb, PR_CPU, b.in[i]->grad->data, PR_CUDA, bytes);
        if (memcmp(ha, hb, bytes)) {
            fprintf(stderr, "  %s: grad %d differs between two identical CUDA backwards\n", what, i);
            bad++;
        }
        free(ha);
        free(hb);
    }
    printf("  %s: two CUDA backwards %s\n", what, bad ? "DIFFER" : "agree bit for bit");
    pr_ctx_free(ctx);
    assert_int_equal(bad, 0);
}

/* an f64 CPU leaf in [-1, 1) that requires grad */
static pr_tensor *leaf(pr_ctx *ctx, pr_rng *r, int ndim, const int64_t *shape)
{
    return pr_example_input(ctx, r, PR_F64, ndim, shape, -1, 1);
}

/* ---- apply functions (ex->iarg carries the op's arguments) ---------------------- */

static pr_tensor *matmul_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_matmul(ctx, in[0], in[1], ex->iarg[0], ex->iarg[1]);
}
static pr_tensor *embedding_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_embedding(ctx, in[0], in[1]);
}
/* iarg[0]: the silu form */
static pr_tensor *conv1d_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return (ex->iarg[0] ? pr_conv1d_silu : pr_conv1d)(ctx, in[0], in[1], in[2]);
}
static pr_tensor *transpose_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_transpose(ctx, in[0], (int)ex->iarg[0], (int)ex->iarg[1]);
}
static pr_tensor *slice_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_slice(ctx, in[0], (int)ex->iarg[0], ex->iarg[1], ex->iarg[2]);
}
static pr_tensor *concat_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_concat(ctx, ex->n_in, in, (int)ex->iarg[0]);
}
/* reshape to iarg[1..iarg[0]], then a transpose so the view's grad passes
 * through a real kernel on both sides */
static pr_tensor *reshape_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_tensor *v = pr_reshape(ctx, in[0], (int)ex->iarg[0], ex->iarg + 1);
    return pr_transpose(ctx, v, 0, -1);
}
/* split into iarg[2..] sized pieces along iarg[0] (iarg[1] pieces); the pieces
 * are put back in reverse order with concat so every piece's grad is used */
static pr_tensor *split_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_tensor *parts[PR_MAX_IN], *rev[PR_MAX_IN];
    int n = (int)ex->iarg[1];
    pr_split(ctx, in[0], (int)ex->iarg[0], n, ex->iarg + 2, parts);
    for (int i = 0; i < n; i++) rev[i] = parts[n - 1 - i];
    return pr_concat(ctx, n, rev, (int)ex->iarg[0]);
}
/* dropout with a fixed rng state (seed, stream, offset in iarg), as training */
static pr_tensor *dropout_ap(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_rng saved = ctx->rng;
    ctx->rng = (pr_rng){(uint64_t)ex->iarg[0], (uint32_t)ex->iarg[1], (uint64_t)ex->iarg[2]};
    ctx->training = true;
    pr_tensor *y = pr_dropout(ctx, in[0], ex->farg[0]);
    ctx->rng = saved;
    return y;
}

/* ---- the ops' own examples -------------------------------------------------------- */

static void test_op_examples(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    static const struct { const char *name; tols t; } ops[] = {
        {"matmul", {1e-5, 1e-5, 1e-5, 1e-5}},   {"embedding", {1e-6, 1e-6, 1e-6, 1e-6}},
        {"conv1d", {1e-6, 1e-6, 1e-5, 1e-5}},   {"reshape", EXACT_INIT},
        {"transpose", EXACT_INIT},              {"slice", EXACT_INIT},
        {"concat", EXACT_INIT},                 {"dropout", EXACT_INIT},
    };
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        const pr_op_info *op = pr_op_by_name(ops[k].name);
        assert_non_null(op);
        assert_non_null(op->forward_cuda);
        assert_non_null(op->backward_cuda);
        pr_ctx *ctx = pr_ctx_new(1);
        pr_rng r = pr_rng_init(42 + k, 0);
        pr_example ex = {0};
        op->example(ctx, &r, PR_F64, &ex);
        char what[64];
        snprintf(what, sizeof what, "%s example", ops[k].name);
        check_devices(what, &ex, ops[k].t, 0);
        pr_ctx_free(ctx);
    }
}

/* ---- matmul: every transpose pair, 2-D, batched and shared b, fp32 and tf32 ------ */

static void matmul_case(int nb, const int64_t *batch, int64_t M, int64_t K, int64_t N, bool ta, bool tb,
                        bool shared, int tf32)
{
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng r = pr_rng_init((uint64_t)(M * 1000 + K * 10 + N + ta * 2 + tb), 1);
    int64_t sa[PR_MAX_DIMS], sb[PR_MAX_DIMS];
    for (int i = 0; i < nb; i++) sa[i] = sb[i] = batch[i];
    sa[nb] = ta ? K : M, sa[nb + 1] = ta ? M : K;
    int bo = shared ? 0 : nb;   /* a shared b keeps only its last two dims */
    sb[bo] = tb ? N : K, sb[bo + 1] = tb ? K : N;
    pr_example ex = {.n_in = 2, .apply = matmul_ap};
    ex.in[0] = leaf(ctx, &r, nb + 2, sa);
    ex.in[1] = leaf(ctx, &r, bo + 2, sb);
    ex.iarg[0] = ta;
    ex.iarg[1] = tb;
    char what[128];
    snprintf(what, sizeof what, "matmul %d batch dims%s, M %lld K %lld N %lld%s%s", nb,
             shared ? " (b shared)" : "", (long long)M, (long long)K, (long long)N, ta ? " a^T" : "",
             tb ? " b^T" : "");
    tols fp32 = {1e-4, 1e-4, 1e-4, 1e-4}, tf = {3e-2, 1e-2, 3e-2, 1e-2};
    check_devices(what, &ex, tf32 ? tf : fp32, tf32);
    pr_ctx_free(ctx);
}

static void test_matmul(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    const int64_t b1[] = {3}, b2[] = {2, 3};
    for (int tf32 = 0; tf32 <= 1; tf32++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            matmul_case(0, NULL, 37, 129, 65, ta, tb, true, tf32);       /* 2-D */
            matmul_case(1, b1, 17, 33, 9, ta, tb, false, tf32);          /* batched b */
            matmul_case(2, b2, 13, 301, 7, ta, tb, false, tf32);         /* 2 batch dims, long K */
            matmul_case(2, b2, 19, 31, 23, ta, tb, true, tf32);          /* shared b */
            matmul_case(1, b1, 1, 5, 1, ta, tb, true, tf32);             /* vectors */
        }
}

/* the precision switch: fp32 math must match the f64 reference far better
 * than TF32's 10-bit inputs allow; the TF32 error is printed for the record */
static void test_matmul_tf32_switch(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng r = pr_rng_init(11, 2);
    pr_tensor *a = pr_randu(ctx->step, PR_F64, PR_CPU, PR_DIMS(64, 256), &r, -1, 1);
    pr_tensor *b = pr_randu(ctx->step, PR_F64, PR_CPU, PR_DIMS(256, 96), &r, -1, 1);
    pr_tensor *ref = pr_matmul(ctx, a, b, false, false);
    double err[2];
    for (int tf32 = 0; tf32 <= 1; tf32++) {
        ctx->matmul_tf32 = tf32;
        pr_tensor *ac = pr_to(ctx->step, a, PR_F32, PR_CUDA), *bc = pr_to(ctx->step, b, PR_F32, PR_CUDA);
        pr_tensor *c = pr_matmul(ctx, ac, bc, false, false);
        double *g = malloc(sizeof(double) * (size_t)c->numel), *rv = malloc(sizeof(double) * (size_t)c->numel);
        pr_to_host_f64(c, g);
        pr_to_host_f64(ref, rv);
        err[tf32] = 0;
        for (int64_t i = 0; i < c->numel; i++) err[tf32] = fmax(err[tf32], fabs(g[i] - rv[i]));
        free(g);
        free(rv);
    }
    printf("  matmul [64,256]@[256,96] vs f64: fp32 math max|diff| %.3g, tf32 math %.3g\n", err[0], err[1]);
    assert_true(err[0] < 1e-4);
    assert_true(err[1] < 5e-2);
    pr_ctx_free(ctx);
}

/* ---- embedding ---------------------------------------------------------------------- */

/* ids: a hot id (0) at every third position, the rest spread over [0, V) */
static pr_example embedding_ex(pr_ctx *ctx, int64_t V, int64_t D, int nd, const int64_t *ishape, pr_dtype idt)
{
    pr_rng r = pr_rng_init((uint64_t)(V * 31 + D), 4);
    pr_example ex = {.n_in = 2, .apply = embedding_ap};
    ex.in[0] = leaf(ctx, &r, PR_DIMS(V, D));
    pr_tensor *ids = pr_empty(ctx->step, idt, PR_CPU, nd, ishape);
    for (int64_t i = 0; i < ids->numel; i++) {
        int64_t v = (int64_t)(pr_philox_uniform(9, 9, (uint64_t)i) * (double)V);
        pr_set(ids, i, i % 3 == 0 ? 0 : (double)v);
    }
    ex.in[1] = ids;
    return ex;
}

static void test_embedding(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    tols t = {2e-4, 1e-5, 2e-4, 1e-5};
    pr_ctx *ctx = pr_ctx_new(1);
    pr_example e1 = embedding_ex(ctx, 1000, 130, PR_DIMS(4, 777), PR_I32);   /* 3108 ids, most rows empty */
    check_devices("embedding V1000 D130 ids i32 [4,777]", &e1, t, 0);
    check_deterministic("embedding V1000 D130", &e1);
    pr_example e2 = embedding_ex(ctx, 5, 33, PR_DIMS(3001), PR_I64);         /* ~600 repeats per row */
    check_devices("embedding V5 D33 ids i64 [3001]", &e2, t, 0);
    check_deterministic("embedding V5 D33", &e2);
    pr_example e3 = embedding_ex(ctx, 70001, 3, PR_DIMS(2, 3, 5), PR_I64);   /* V > 2^16: more sort bits */
    check_devices("embedding V70001 D3 ids i64 [2,3,5]", &e3, t, 0);
    pr_ctx_free(ctx);
}

/* ---- conv1d -------------------------------------------------------------------------- */

static void conv1d_case(int64_t B, int64_t T, int64_t C, int64_t W, bool bias, bool det, bool silu)
{
    pr_ctx *ctx = pr_ctx_new(1);
    pr_rng r = pr_rng_init((uint64_t)(B * T * C * W), 6);
    pr_example ex = {.n_in = 3, .iarg = {silu}, .apply = conv1d_ap};
    ex.in[0] = leaf(ctx, &r, PR_DIMS(B, T, C));
    ex.in[1] = leaf(ctx, &r, PR_DIMS(C, W));
    ex.in[2] = bias ? leaf(ctx, &r, PR_DIMS(C)) : NULL;
    char what[96];
    snprintf(what, sizeof what, "conv1d%s B%lld T%lld C%lld W%lld%s", silu ? "_silu" : "", (long long)B, (long long)T,
             (long long)C, (long long)W, bias ? " bias" : "");
    tols t = {1e-3, 1e-4, 5e-4, 1e-4};
    check_devices(what, &ex, t, 0);
    if (det) check_deterministic(what, &ex);
    pr_ctx_free(ctx);
}

static void test_conv1d(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    for (int silu = 0; silu <= 1; silu++) {
        conv1d_case(3, 517, 67, 4, true, true, silu);
        conv1d_case(1, 3, 5, 7, false, false, silu);      /* W > T: every output sees the padding */
        conv1d_case(2, 2053, 130, 1, true, true, silu);   /* W = 1, many chunks */
        conv1d_case(5, 1, 33, 3, true, false, silu);      /* T = 1 */
        conv1d_case(7, 5, 40, 4, true, true, silu);       /* runs of 16 rows cross several sequences */
        conv1d_case(3, 19, 35, 8, false, true, silu);     /* the widest run kernel */
        conv1d_case(2, 41, 9, 9, true, true, silu);       /* W = 9: the generic kernels */
    }
}

/* ---- shape ops ---------------------------------------------------------------------------- */

static void test_transpose(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    pr_rng r = pr_rng_init(77, 0);
    pr_tensor *x4 = leaf(ctx, &r, PR_DIMS(3, 5, 7, 11));
    for (int d0 = 0; d0 < 4; d0++)
        for (int d1 = d0 + 1; d1 < 4; d1++) {
            pr_example ex = {.n_in = 1, .apply = transpose_ap, .in = {x4}, .iarg = {d0, d1}};
            char what[64];
            snprintf(what, sizeof what, "transpose [3,5,7,11] dims %d,%d", d0, d1);
            check_devices(what, &ex, EXACT, 0);
        }
    /* partial 32x32 tiles on both sides, a middle dim, and negative dims */
    pr_tensor *x = leaf(ctx, &r, PR_DIMS(2, 67, 3, 129));
    pr_example ex = {.n_in = 1, .apply = transpose_ap, .in = {x}, .iarg = {-1, 1}};
    check_devices("transpose [2,67,3,129] dims -1,1", &ex, EXACT, 0);
    pr_ctx_free(ctx);
}

static void test_slice_concat_split(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    pr_rng r = pr_rng_init(78, 0);
    pr_tensor *x = leaf(ctx, &r, PR_DIMS(3, 13, 8));   /* rows of 8: the float4 path */
    pr_tensor *y = leaf(ctx, &r, PR_DIMS(3, 13, 7));   /* rows of 7: the scalar path */
    struct { pr_tensor *t; int64_t dim, start, len; const char *what; } sl[] = {
        {x, 1, 4, 5, "slice [3,13,8] dim 1 [4,9)"}, {y, 1, 3, 9, "slice [3,13,7] dim 1 [3,12)"},
        {y, 0, 1, 2, "slice [3,13,7] dim 0 [1,3)"}, {y, -1, 2, 3, "slice [3,13,7] dim -1 [2,5)"},
        {x, 2, 4, 4, "slice [3,13,8] dim 2 [4,8)"},
    };
    for (size_t k = 0; k < sizeof sl / sizeof sl[0]; k++) {
        pr_example ex = {.n_in = 1, .apply = slice_ap, .in = {sl[k].t}, .iarg = {sl[k].dim, sl[k].start, sl[k].len}};
        check_devices(sl[k].what, &ex, EXACT, 0);
    }
    for (int dim = 0; dim < 3; dim++) {
        int64_t s1[3] = {3, 13, 7}, s2[3] = {3, 13, 7}, s3[3] = {3, 13, 7};
        s1[dim] = 2, s2[dim] = 5, s3[dim] = 1;
        pr_example ex = {.n_in = 3, .apply = concat_ap, .iarg = {dim}};
        ex.in[0] = leaf(ctx, &r, 3, s1);
        ex.in[1] = leaf(ctx, &r, 3, s2);
        ex.in[2] = leaf(ctx, &r, 3, s3);
        char what[64];
        snprintf(what, sizeof what, "concat 3 inputs dim %d", dim);
        check_devices(what, &ex, EXACT, 0);
    }
    pr_example sp = {.n_in = 1, .apply = split_ap, .in = {y}, .iarg = {1, 3, 4, 1, 8}};
    check_devices("split [3,13,7] dim 1 into 4,1,8 (reversed concat)", &sp, EXACT, 0);
    pr_example rs = {.n_in = 1, .apply = reshape_ap, .in = {y}, .iarg = {2, 39, -1}};
    check_devices("reshape [3,13,7] -> [39,7] -> transpose", &rs, EXACT, 0);
    pr_ctx_free(ctx);
}

/* ---- dropout ---------------------------------------------------------------------------------- */

static void test_dropout(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    pr_rng r = pr_rng_init(79, 0);
    pr_tensor *x = leaf(ctx, &r, PR_DIMS(7, 1429));   /* 10003 elements */
    const double ps[] = {0.1, 0.5, 0.9};
    for (int k = 0; k < 3; k++) {
        /* a 64-bit seed and an offset whose draw crosses 2^32: the counter's high word changes */
        pr_example ex = {.n_in = 1, .apply = dropout_ap, .in = {x}};
        ex.iarg[0] = (int64_t)0x9e3779b97f4a7c15ull;
        ex.iarg[1] = 3 + k;
        ex.iarg[2] = (int64_t)(0xffffffffull - 5000);
        ex.farg[0] = ps[k];
        char what[64];
        snprintf(what, sizeof what, "dropout p %.1f", ps[k]);
        check_devices(what, &ex, EXACT, 0);
    }
    pr_ctx_free(ctx);
}

/* two contexts with one rng state draw the same mask, through ctx->rng, on
 * either device, and advance their rng alike */
static void test_dropout_same_mask(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *cpu = pr_ctx_new(1234), *gpu = pr_ctx_new(1234);
    cpu->training = gpu->training = true;
    pr_rng r = pr_rng_init(80, 0);
    pr_tensor *x = pr_randu(cpu->step, PR_F32, PR_CPU, PR_DIMS(3, 5, 667), &r, 0.5, 1.5);   /* never 0 */
    pr_tensor *xc = pr_to(gpu->step, x, PR_F32, PR_CUDA);
    int64_t kept = 0, n = 0;
    for (int rep = 0; rep < 3; rep++) {   /* successive calls take successive offsets */
        pr_tensor *yc = pr_dropout(cpu, x, 0.3), *yg = pr_dropout(gpu, xc, 0.3);
        assert_int_equal(cpu->rng.offset, gpu->rng.offset);
        double *hc = malloc(sizeof(double) * (size_t)x->numel), *hg = malloc(sizeof(double) * (size_t)x->numel);
        pr_to_host_f64(yc, hc);
        pr_to_host_f64(yg, hg);
        int64_t diff = 0;
        for (int64_t i = 0; i < x->numel; i++) {
            diff += (hc[i] == 0) != (hg[i] == 0) || hc[i] != hg[i];
            kept += hc[i] != 0;
        }
        n += x->numel;
        free(hc);
        free(hg);
        printf("  dropout ctx->rng call %d: %lld of %lld elements differ between CPU and CUDA\n", rep,
               (long long)diff, (long long)x->numel);
        assert_int_equal(diff, 0);
    }
    double frac = (double)kept / (double)n;
    printf("  dropout p 0.3: kept fraction %.4f\n", frac);
    assert_true(fabs(frac - 0.7) < 0.02);
    pr_ctx_free(cpu);
    pr_ctx_free(gpu);
}

/* score_rows (the evaluation's scores) on CUDA against the CPU on the same
 * f32 or bf16 logits: a warp a row sums in another order than the CPU's loop,
 * in double, so losses agree to 1e-12; argmax hits exactly, ties included
 * (rows copied from their neighbour's max put the max twice) */
static void test_score_rows(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(7);
    const int64_t shapes[][2] = {{301, 37}, {5, 1000}, {64, 1}};
    for (int si = 0; si < 3; si++) {
        const int64_t R = shapes[si][0], C = shapes[si][1];
        pr_rng r = pr_rng_init(90 + (uint64_t)si, 0);
        pr_tensor *x = pr_randu(ctx->step, PR_F64, PR_CPU, PR_DIMS(R, C), &r, -4.0, 4.0);
        double *xv = x->data;
        for (int64_t i = 0; i < R; i += 3) xv[i * C + C - 1] = xv[i * C];   /* ties, some at the max */
        int32_t *labels = malloc(sizeof(int32_t) * (size_t)R);
        for (int64_t i = 0; i < R; i++) labels[i] = i % 4 == 1 ? -100 : (int32_t)((i * 7) % C);
        for (int bf = 0; bf < 2; bf++) {
            pr_dtype dt = bf ? PR_BF16 : PR_F32;
            pr_tensor *xh = pr_to(ctx->step, x, dt, PR_CPU), *xd = pr_to(ctx->step, x, dt, PR_CUDA);
            pr_tensor *ld = pr_empty(ctx->step, PR_I32, PR_CUDA, PR_DIMS(R));
            pr_tensor *lossd = pr_empty(ctx->step, PR_F64, PR_CUDA, PR_DIMS(R));
            pr_tensor *hitd = pr_empty(ctx->step, PR_I32, PR_CUDA, PR_DIMS(R));
            pr_device_memcpy(ld->data, PR_CUDA, labels, PR_CPU, sizeof(int32_t) * (size_t)R);
            double *lc = malloc(sizeof(double) * (size_t)R), *lg = malloc(sizeof(double) * (size_t)R);
            int32_t *hc = malloc(sizeof(int32_t) * (size_t)R), *hg = malloc(sizeof(int32_t) * (size_t)R);
            pr_score_rows(ctx, xh, labels, -100, lc, hc);
            pr_score_rows(ctx, xd, ld->data, -100, lossd->data, hitd->data);
            pr_device_memcpy(lg, PR_CPU, lossd->data, PR_CUDA, sizeof(double) * (size_t)R);
            pr_device_memcpy(hg, PR_CPU, hitd->data, PR_CUDA, sizeof(int32_t) * (size_t)R);
            double err = 0;
            int64_t hits = 0, hit_diff = 0;
            for (int64_t i = 0; i < R; i++) {
                err = fmax(err, fabs(lg[i] - lc[i]) / fmax(1.0, fabs(lc[i])));
                hit_diff += hg[i] != hc[i];
                hits += hc[i];
            }
            printf("  score_rows [%lld,%lld] %s: loss max rel err %.3g, %lld hits, %lld differ\n", (long long)R,
                   (long long)C, pr_dtype_name(dt), err, (long long)hits, (long long)hit_diff);
            assert_true(err <= 1e-12);
            assert_int_equal(hit_diff, 0);
            free(lc), free(lg), free(hc), free(hg);
        }
        free(labels);
        pr_step_reset(ctx);
    }
    pr_ctx_free(ctx);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_examples),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_tf32_switch),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_conv1d),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_slice_concat_split),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_dropout_same_mask),
        cmocka_unit_test(test_score_rows),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
