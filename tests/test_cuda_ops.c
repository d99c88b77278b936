/* tests/test_cuda_ops.c: every op with CUDA kernels against the CPU.
 *
 * For each op in the table with forward_cuda and an example: the example is
 * built in f32 on the CPU, its inputs copied to CUDA with pr_to; apply runs
 * on both devices (ctx->rng rewound, so dropout draws the same mask), then
 * the backward with one random upstream gradient. Output and every input
 * grad must satisfy |cuda - cpu| <= atol + rtol |cpu| with atol = 1e-5,
 * rtol = 1e-4, both times ex->tol_scale: the CPU computes in double and
 * rounds once, CUDA in f32 with its own reduction order, so f32 rounding
 * (~1e-7 relative) times the depth of a reduction stays well inside. The max
 * error per op is printed. A second test runs the CUDA forward and backward
 * twice and requires identical bits (no float atomics).
 * A third group runs the kernels' other paths on larger, odd shapes: long
 * rows (a block per row, rows longer than the register slots), misaligned
 * views, every broadcast map, column sums split into chunks. Where the CPU
 * reference itself sums thousands of terms in f32 (the grad of a broadcast
 * input, dw over many rows: ~sqrt(R) eps |partial sum| of its own rounding),
 * the case's tol_scale is 5 to 20.
 * linear_cross_entropy at awkward sizes has a test of its own.
 * Every case skips without a GPU.
 */
#include "tests/pr_test.h"

#define ATOL 1e-5
#define RTOL 1e-4

typedef struct {
    pr_tensor *out;
    pr_tensor *in[PR_MAX_IN];
} run_res;

/* copies of ex's inputs on dev; forward (rng rewound); backward with gout when given */
static run_res run_on(pr_ctx *ctx, const pr_example *ex, pr_device dev, const pr_tensor *gout)
{
    run_res r = {0};
    for (int i = 0; i < ex->n_in; i++) {
        const pr_tensor *t = ex->in[i];
        if (!t) continue;
        r.in[i] = pr_to(ctx->step, t, t->dtype, dev);
        r.in[i]->requires_grad = t->requires_grad;
    }
    pr_rng saved = ctx->rng;
    ctx->rng = pr_rng_init(2024, 1);
    r.out = ex->apply(ctx, r.in, ex);
    ctx->rng = saved;
    if (gout && r.out->requires_grad) pr_backward_with(ctx, r.out, gout);
    return r;
}

/* compare one tensor pair; prints and returns the max error, counts failures */
static double compare(const char *what, const char *part, const pr_tensor *got, const pr_tensor *ref, double s,
                      int *bad)
{
    if (!got || !ref) {
        if (got != ref) {
            fprintf(stderr, "  %s %s: grad missing on one side\n", what, part);
            (*bad)++;
        }
        return 0;
    }
    assert_int_equal(got->numel, ref->numel);
    double *g = malloc(sizeof(double) * (size_t)(got->numel + 1)), *r = malloc(sizeof(double) * (size_t)(ref->numel + 1));
    pr_to_host_f64(got, g);
    pr_to_host_f64(ref, r);
    char name[128];
    snprintf(name, sizeof name, "%s %s", what, part);
    int nb;
    double err = pr_check_allclose(name, g, r, got->numel, ATOL * s, RTOL * s, &nb);
    *bad += nb;
    free(g);
    free(r);
    return err;
}

/* CUDA against the CPU on ex (f32 CPU inputs): output and every input grad */
static void check_against_cpu(const char *what, const pr_example *ex)
{
    pr_ctx *ctx = pr_ctx_new(7);
    double s = ex->tol_scale > 1 ? ex->tol_scale : 1;
    run_res cpu = run_on(ctx, ex, PR_CPU, NULL);
    pr_rng gr = pr_rng_init(99, 3);
    pr_tensor *gout = pr_randu(ctx->step, PR_F32, PR_CPU, cpu.out->ndim, cpu.out->shape, &gr, -1, 1);
    if (cpu.out->requires_grad) pr_backward_with(ctx, cpu.out, gout);
    run_res cu = run_on(ctx, ex, PR_CUDA, gout);
    pr_device_sync(PR_CUDA);
    int bad = 0;
    double e_out = compare(what, "out", cu.out, cpu.out, s, &bad), e_grad = 0;
    for (int i = 0; i < ex->n_in; i++) {
        if (!ex->in[i] || !ex->in[i]->requires_grad) continue;
        char part[32];
        snprintf(part, sizeof part, "grad %d", i);
        double e = compare(what, part, cu.in[i]->grad, cpu.in[i]->grad, s, &bad);
        e_grad = e > e_grad ? e : e_grad;
    }
    printf("  %-28s max|diff| out %.2e  grads %.2e%s\n", what, e_out, e_grad, bad ? "  FAIL" : "");
    pr_ctx_free(ctx);
    assert_int_equal(bad, 0);
}

/* bytes of a CUDA tensor equal between two runs */
static int same_bits(const char *what, const char *part, const pr_tensor *a, const pr_tensor *b)
{
    if (!a || !b) return a != b;
    size_t n = pr_nbytes(a);
    char *ha = malloc(n + 1), *hb = malloc(n + 1);
    pr_device_memcpy(ha, PR_CPU, a->data, a->device, n);
    pr_device_memcpy(hb, PR_CPU, b->data, b->device, n);
    int differ = memcmp(ha, hb, n) != 0;
    if (differ) fprintf(stderr, "  %s: %s differs between two identical CUDA runs\n", what, part);
    free(ha);
    free(hb);
    return differ;
}

static void check_deterministic(const char *what, const pr_example *ex)
{
    pr_ctx *ctx = pr_ctx_new(7);
    run_res probe = run_on(ctx, ex, PR_CUDA, NULL);
    pr_rng gr = pr_rng_init(5, 5);
    pr_tensor *gout = pr_randu(ctx->step, PR_F32, PR_CUDA, probe.out->ndim, probe.out->shape, &gr, -1, 1);
    run_res a = run_on(ctx, ex, PR_CUDA, gout), b = run_on(ctx, ex, PR_CUDA, gout);
    int bad = same_bits(what, "output", a.out, b.out);
    for (int i = 0; i < ex->n_in; i++) {
        char part[32];
        snprintf(part, sizeof part, "grad %d", i);
        if (a.in[i] && a.in[i]->requires_grad) bad += same_bits(what, part, a.in[i]->grad, b.in[i]->grad);
    }
    pr_ctx_free(ctx);
    assert_int_equal(bad, 0);
}

/* ---- every op of the table ----------------------------------------------------------- */

static void test_op_vs_cpu(void **state)
{
    PR_SKIP_WITHOUT_CUDA();
    const pr_op_info *op = *state;
    pr_ctx *ctx = pr_ctx_new(11);
    pr_rng r = pr_rng_init(99, 0);
    pr_example ex = {0};
    op->example(ctx, &r, PR_F32, &ex);
    check_against_cpu(op->name, &ex);
    check_deterministic(op->name, &ex);
    pr_ctx_free(ctx);
}

/* ---- other kernel paths ------------------------------------------------------------------- */

static pr_tensor *ap_softmax(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_softmax(c, in[0]); }
static pr_tensor *ap_log_softmax(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_log_softmax(c, in[0]); }
static pr_tensor *ap_layernorm(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_layernorm(c, in[0], in[1], in[2], ex->farg[0]); }
static pr_tensor *ap_rmsnorm(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_rmsnorm(c, in[0], in[1], ex->farg[0]); }
static pr_tensor *ap_rmsnorm_gated(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_rmsnorm_gated(c, in[0], in[1], in[2], ex->farg[0]); }
static pr_tensor *ap_l2norm(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_l2norm(c, in[0], ex->farg[0]); }
/* the fused residual add + norm: n and s side by side, so both are compared and seeded */
static pr_tensor *both(pr_ctx *c, pr_tensor *n, pr_tensor *s)
{
    return pr_concat(c, 2, (pr_tensor *[]){pr_reshape(c, n, PR_DIMS(-1)), pr_reshape(c, s, PR_DIMS(-1))}, 0);
}
static pr_tensor *ap_add_rmsnorm(pr_ctx *c, pr_tensor *const *in, const pr_example *ex)
{
    pr_tensor *s, *n = pr_add_rmsnorm(c, in[0], in[1], in[2], ex->farg[0], &s);
    return both(c, n, s);
}
static pr_tensor *ap_add_layernorm(pr_ctx *c, pr_tensor *const *in, const pr_example *ex)
{
    pr_tensor *s, *n = pr_add_layernorm(c, in[0], in[1], in[2], in[3], ex->farg[0], &s);
    return both(c, n, s);
}
static pr_tensor *ap_add(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_add(c, in[0], in[1]); }
static pr_tensor *ap_sub(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_sub(c, in[0], in[1]); }
static pr_tensor *ap_mul(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_mul(c, in[0], in[1]); }
static pr_tensor *ap_div(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_div(c, in[0], in[1]); }
static pr_tensor *ap_sum(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_sum(c, in[0]); }
static pr_tensor *ap_mean_all(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_mean_all(c, in[0]); }
static pr_tensor *ap_gelu(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_gelu(c, in[0]); }
static pr_tensor *ap_ce(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_cross_entropy(c, in[0], in[1], ex->iarg[0]); }
static pr_tensor *ap_bce(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_bce_logits(c, in[0], in[1]); }
/* rows 1.. of in[0]: a view whose data is not 16-byte aligned (a leaf of its
 * own, so the backward runs on it too; only the output is compared) */
static pr_tensor *misaligned(pr_ctx *c, pr_tensor *x)
{
    pr_tensor *v = pr_view_rows(c->step, x, 1, x->shape[0] - 1);
    v->requires_grad = true;
    return v;
}
static pr_tensor *ap_silu_view(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_silu(c, misaligned(c, in[0])); }
static pr_tensor *ap_softmax_view(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_softmax(c, misaligned(c, in[0])); }

typedef struct {
    const char *name;
    pr_tensor *(*apply)(pr_ctx *, pr_tensor *const *, const pr_example *);
    int n_in;
    int nd[4];
    int64_t shape[4][4];
    double lo[4], hi[4];
    double eps, tol_scale;
} path_case;

static const path_case cases[] = {
    {"softmax warp D=1000", ap_softmax, 1, {2}, {{37, 1000}}, {-4}, {4}, 0, 1},
    {"softmax block D=3001", ap_softmax, 1, {2}, {{9, 3001}}, {-4}, {4}, 0, 1},
    {"log_softmax D=20000 (past slots)", ap_log_softmax, 1, {2}, {{3, 20000}}, {-4}, {4}, 0, 1},
    {"softmax misaligned view", ap_softmax_view, 1, {2}, {{9, 6}}, {-2}, {2}, 0, 1},
    {"layernorm R=4096 D=64", ap_layernorm, 3, {2, 1, 1}, {{4096, 64}, {64}, {64}}, {-2, 0.5, -1}, {2, 1.5, 1}, 1e-5, 20},
    {"layernorm D=2048", ap_layernorm, 3, {2, 1, 1}, {{13, 2048}, {2048}, {2048}}, {-2, 0.5, -1}, {2, 1.5, 1}, 1e-5, 2},
    {"layernorm D=20001", ap_layernorm, 3, {2, 1, 1}, {{3, 20001}, {20001}, {20001}}, {-2, 0.5, -1}, {2, 1.5, 1}, 1e-5, 4},
    {"rmsnorm R=3000 D=128", ap_rmsnorm, 2, {2, 1}, {{3000, 128}, {128}}, {-2, 0.5}, {2, 1.5}, 1e-5, 20},
    {"rmsnorm D=9000", ap_rmsnorm, 2, {2, 1}, {{5, 9000}, {9000}}, {-2, 0.5}, {2, 1.5}, 1e-5, 2},
    {"rmsnorm_gated D=256", ap_rmsnorm_gated, 3, {3, 3, 1}, {{4, 50, 256}, {4, 50, 256}, {256}}, {-2, -3, 0.5}, {2, 3, 1.5}, 1e-5, 2},
    {"rmsnorm_gated D=17000", ap_rmsnorm_gated, 3, {2, 2, 1}, {{2, 17000}, {2, 17000}, {17000}}, {-2, -3, 0.5}, {2, 3, 1.5}, 1e-5, 4},
    {"l2norm D=4096", ap_l2norm, 1, {2}, {{7, 4096}}, {-1}, {1}, 1e-6, 1},
    /* each register-slot count of the warp kernels (1, 2, 4, 8: D up to 128, 256, 512, 1024),
     * rows of a head (96) and rows not a multiple of 4 */
    {"l2norm D=96 (1 slot)", ap_l2norm, 1, {3}, {{5, 301, 96}}, {-1}, {1}, 1e-6, 2},
    {"l2norm D=13 (1 slot, scalar)", ap_l2norm, 1, {2}, {{777, 13}}, {-1}, {1}, 1e-6, 2},
    {"rmsnorm_gated D=96 (1 slot)", ap_rmsnorm_gated, 3, {3, 3, 1}, {{3, 333, 96}, {3, 333, 96}, {96}}, {-2, -3, 0.5}, {2, 3, 1.5}, 1e-5, 2},
    {"rmsnorm D=201 (2 slots, scalar)", ap_rmsnorm, 2, {2, 1}, {{301, 201}, {201}}, {-2, 0.5}, {2, 1.5}, 1e-5, 4},
    {"layernorm D=509 (4 slots, scalar)", ap_layernorm, 3, {2, 1, 1}, {{65, 509}, {509}, {509}}, {-2, 0.5, -1}, {2, 1.5, 1}, 1e-5, 4},
    /* the fused residual add + norm: odd rows, D not a multiple of 4 (scalar
     * loads), each warp slot count, a block a row, rows past a block's slots */
    {"add_rmsnorm [3,7,13] (1 slot, scalar)", ap_add_rmsnorm, 3, {3, 3, 1}, {{3, 7, 13}, {3, 7, 13}, {13}}, {-2, -1, 0.5}, {2, 1, 1.5}, 1e-5, 2},
    {"add_rmsnorm [777,96] (1 slot)", ap_add_rmsnorm, 3, {2, 2, 1}, {{777, 96}, {777, 96}, {96}}, {-2, -1, 0.5}, {2, 1, 1.5}, 1e-5, 20},
    {"add_rmsnorm [301,201] (2 slots, scalar)", ap_add_rmsnorm, 3, {2, 2, 1}, {{301, 201}, {301, 201}, {201}}, {-2, -1, 0.5}, {2, 1, 1.5}, 1e-5, 4},
    {"add_rmsnorm [5,9000] (block)", ap_add_rmsnorm, 3, {2, 2, 1}, {{5, 9000}, {5, 9000}, {9000}}, {-2, -1, 0.5}, {2, 1, 1.5}, 1e-5, 2},
    {"add_rmsnorm [2,17001] (past slots)", ap_add_rmsnorm, 3, {2, 2, 1}, {{2, 17001}, {2, 17001}, {17001}}, {-2, -1, 0.5}, {2, 1, 1.5}, 1e-5, 4},
    {"add_layernorm [65,509] (4 slots, scalar)", ap_add_layernorm, 4, {2, 2, 1, 1}, {{65, 509}, {65, 509}, {509}, {509}}, {-2, -1, 0.5, -1}, {2, 1, 1.5, 1}, 1e-5, 4},
    {"add_layernorm [9,1030] (block, scalar)", ap_add_layernorm, 4, {2, 2, 1, 1}, {{9, 1030}, {9, 1030}, {1030}, {1030}}, {-2, -1, 0.5, -1}, {2, 1, 1.5, 1}, 1e-5, 2},
    {"add_layernorm [1001,64] (1 slot)", ap_add_layernorm, 4, {2, 2, 1, 1}, {{1001, 64}, {1001, 64}, {64}, {64}}, {-2, -1, 0.5, -1}, {2, 1, 1.5, 1}, 1e-5, 20},
    {"add_layernorm [3,20001] (past slots)", ap_add_layernorm, 4, {2, 2, 1, 1}, {{3, 20001}, {3, 20001}, {20001}, {20001}}, {-2, -1, 0.5, -1}, {2, 1, 1.5, 1}, 1e-5, 4},
    {"softmax D=300 (4 slots)", ap_softmax, 1, {2}, {{257, 300}}, {-4}, {4}, 0, 1},
    {"log_softmax D=7 (1 slot, scalar)", ap_log_softmax, 1, {2}, {{1001, 7}}, {-4}, {4}, 0, 1},
    {"add bias [512,256]+[256]", ap_add, 2, {2, 1}, {{512, 256}, {256}}, {-1, -1}, {1, 1}, 0, 5},
    {"mul rows [512,256]*[512,1]", ap_mul, 2, {2, 2}, {{512, 256}, {512, 1}}, {-1, -1}, {1, 1}, 0, 5},
    {"sub general [4,1,6,1]-[3,1,5]", ap_sub, 2, {4, 3}, {{4, 1, 6, 1}, {3, 1, 5}}, {-1, -1}, {1, 1}, 0, 1},
    /* a middle-dim bias (Mamba-2's D): few grad rows, 2^18 terms each */
    {"mul general [8,512,6,64]*[6,1]", ap_mul, 2, {4, 2}, {{8, 512, 6, 64}, {6, 1}}, {-1, -1}, {1, 1}, 0, 20},
    {"div scalar [1001,3]/[1]", ap_div, 2, {2, 1}, {{1001, 3}, {1}}, {-1, 0.5}, {1, 1.5}, 0, 10},
    {"mul same shape odd n", ap_mul, 2, {1, 1}, {{100003}, {100003}}, {-1, -1}, {1, 1}, 0, 1},
    {"sum D=5000", ap_sum, 1, {2}, {{6, 5000}}, {-1}, {1}, 0, 1},
    {"mean_all n=1e6", ap_mean_all, 1, {1}, {{1000003}}, {-1}, {1}, 0, 1},
    {"gelu n=1e6+3", ap_gelu, 1, {1}, {{1000003}}, {-3}, {3}, 0, 1},
    {"silu misaligned view", ap_silu_view, 1, {2}, {{9, 7}}, {-3}, {3}, 0, 1},
    {"bce_logits n=1e5", ap_bce, 2, {1, 1}, {{100000}, {100000}}, {-5, 0}, {5, 1}, 0, 1},
};

static void test_paths(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const path_case *c = &cases[k];
        pr_ctx *ctx = pr_ctx_new(11);
        pr_rng r = pr_rng_init(1000 + k, 0);
        pr_example ex = {0};
        ex.n_in = c->n_in;
        for (int i = 0; i < c->n_in; i++)
            ex.in[i] = pr_example_input(ctx, &r, PR_F32, c->nd[i], c->shape[i], c->lo[i], c->hi[i]);
        ex.farg[0] = c->eps;
        ex.tol_scale = c->tol_scale;
        ex.apply = c->apply;
        check_against_cpu(c->name, &ex);
        check_deterministic(c->name, &ex);
        pr_ctx_free(ctx);
    }
}

/* cross_entropy on long rows (C = 50000, block per row) with int32 targets, and a bad target */
static void test_cross_entropy_paths(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(11);
    pr_rng r = pr_rng_init(77, 0);
    enum { R = 9, C = 50000 };
    pr_example ex = {0};
    ex.n_in = 2;
    ex.in[0] = pr_example_input(ctx, &r, PR_F32, PR_DIMS(R, C), -3, 3);
    int32_t t[R];
    for (int i = 0; i < R; i++) t[i] = (int32_t)((i * 7919) % C);
    t[3] = -1; /* ignored */
    ex.in[1] = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(R), t);
    ex.iarg[0] = -1;
    ex.apply = ap_ce;
    check_against_cpu("cross_entropy C=50000 int32", &ex);
    check_deterministic("cross_entropy C=50000 int32", &ex);
    /* every row ignored: loss 0, no grad */
    for (int i = 0; i < R; i++) t[i] = -1;
    ex.in[1] = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(R), t);
    check_against_cpu("cross_entropy all ignored", &ex);
    /* an out-of-range target is fatal on CUDA too, with the CPU's message */
    t[5] = C;
    pr_tensor *bad = pr_from_host(ctx->step, PR_I32, PR_CUDA, PR_DIMS(R), t);
    pr_tensor *x = pr_to(ctx->step, ex.in[0], PR_F32, PR_CUDA);
    PR_EXPECT_FATAL(pr_cross_entropy(ctx, x, bad, -1), "target 50000 at index 5 is out of range");
    pr_ctx_free(ctx);
}

static pr_tensor *ap_lce(pr_ctx *c, pr_tensor *const *in, const pr_example *ex)
{
    return pr_linear_cross_entropy(c, in[0], in[1], ex->iarg[1], in[2], ex->iarg[0], ex->iarg[2]);
}

/* linear_cross_entropy at awkward sizes: D and V not multiples of 4 (scalar
 * loads), V of each row-kernel kind (a warp, a block, rows past a block's
 * slots), ragged last chunks, the default chunk and chunks of 37 rows, both
 * head layouts, int32 targets with ignored rows, every row ignored, a bad target */
static void test_linear_ce_paths(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    const struct { int64_t N, D, V, chunk; int trans_w; } cs[] = {
        {301, 67, 509, 37, 1}, {301, 67, 509, 0, 0}, {130, 33, 5003, 37, 0}, {1000, 64, 20001, 0, 1}, {77, 16, 12, 5, 1},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        pr_ctx *ctx = pr_ctx_new(11);
        pr_rng r = pr_rng_init(500 + k, 0);
        const int64_t N = cs[k].N, D = cs[k].D, V = cs[k].V;
        pr_example ex = {.n_in = 3, .apply = ap_lce, .tol_scale = 10};
        ex.in[0] = pr_example_input(ctx, &r, PR_F32, PR_DIMS(N, D), -1, 1);
        ex.in[1] = cs[k].trans_w ? pr_example_input(ctx, &r, PR_F32, PR_DIMS(V, D), -0.5, 0.5)
                                 : pr_example_input(ctx, &r, PR_F32, PR_DIMS(D, V), -0.5, 0.5);
        int32_t t[1000];   /* on the stack: a heap buffer freed after the setjmp below made gcc warn */
        assert_true(N <= (int64_t)(sizeof t / sizeof t[0]));
        for (int64_t i = 0; i < N; i++) t[i] = i % 7 == 3 ? -1 : (int32_t)((i * 7919) % V);
        ex.in[2] = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(N), t);
        ex.iarg[0] = -1, ex.iarg[1] = cs[k].trans_w, ex.iarg[2] = cs[k].chunk;
        char name[96];
        snprintf(name, sizeof name, "linear_cross_entropy N=%lld D=%lld V=%lld chunk=%lld %s", (long long)N, (long long)D,
                 (long long)V, (long long)cs[k].chunk, cs[k].trans_w ? "w [V,D]" : "w [D,V]");
        check_against_cpu(name, &ex);
        check_deterministic(name, &ex);
        if (k == 0) {
            for (int64_t i = 0; i < N; i++) t[i] = -1;   /* every row ignored: loss 0, grads 0 */
            ex.in[2] = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(N), t);
            check_against_cpu("linear_cross_entropy all ignored", &ex);
            t[5] = (int32_t)V;   /* an out-of-range target: the CPU's message */
            pr_tensor *bad = pr_from_host(ctx->step, PR_I32, PR_CUDA, PR_DIMS(N), t);
            pr_tensor *x = pr_to(ctx->step, ex.in[0], PR_F32, PR_CUDA), *w = pr_to(ctx->step, ex.in[1], PR_F32, PR_CUDA);
            PR_EXPECT_FATAL(pr_linear_cross_entropy(ctx, x, w, true, bad, -1, 37), "target 509 at index 5 is out of range");
        }
        pr_ctx_free(ctx);
    }
}

/* a CUDA op on f64 tensors is refused with the op's name */
static void test_f32_only(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = pr_zeros(ctx->step, PR_F64, PR_CUDA, PR_DIMS(4));
    PR_EXPECT_FATAL(pr_exp(ctx, x), "exp: CUDA kernels are f32 or bf16 only");
    pr_ctx_free(ctx);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    struct CMUnitTest tests[PR_NOPS + 4];
    int n = 0;
    for (int i = 0; i < pr_op_count(); i++) {
        const pr_op_info *op = pr_op((pr_op_id)i);
        if (!op->forward_cuda || !op->example) continue;
        tests[n++] = (struct CMUnitTest){.name = op->name, .test_func = test_op_vs_cpu, .initial_state = (void *)op};
    }
    tests[n++] = (struct CMUnitTest){.name = "kernel paths", .test_func = test_paths};
    tests[n++] = (struct CMUnitTest){.name = "cross_entropy paths", .test_func = test_cross_entropy_paths};
    tests[n++] = (struct CMUnitTest){.name = "linear_cross_entropy paths", .test_func = test_linear_ce_paths};
    tests[n++] = (struct CMUnitTest){.name = "f32 only", .test_func = test_f32_only};
    return pr_test_exit_status(_cmocka_run_group_tests("cuda_ops", tests, (size_t)n, NULL, NULL));
}
