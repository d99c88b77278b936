/* tests/test_cuda_bf16_ops.c: the native bf16 CUDA kernels of the GEMM,
 * elementwise and row ops against the CPU on the same bf16 values.
 *
 * Each case draws the op's inputs in f32 and rounds them to bf16. The
 * reference is the CPU f32 op on those rounded values (the CPU computes in
 * double and rounds to f32 once), its backward seeded with a bf16-rounded
 * upstream gradient. The bf16 grads start at random bf16 values g0 of the
 * contribution's size and must end at g0 + contribution (so the
 * accumulation, one rounding, is checked too). The CUDA side runs the same
 * node in bf16: the node is taken from the tape of an f32 CUDA run of the op (its
 * iargs, fargs and saved statistics), its float inputs, outputs and grads
 * swapped for bf16 ones, and the op's CUDA forward and backward called on it
 * directly. So the test reaches the bf16 kernels whatever the op's frontend
 * does with bf16 (autocast decides that), and it checks exactly the native
 * kernel: bf16 loads, f32 math, one rounding per stored element.
 *
 * Tolerance, as max|got - ref| / max|ref| per output and grad (normwise, so
 * a sum that cancels is not held to a relative bound it cannot meet):
 *  TOL = 4.2e-3: the one rounding of a stored bf16 element is at most 2^-8
 *  = 3.9e-3 of it (bf16 keeps 8 significant bits), and the f32 arithmetic
 *  and summation order add at most ~2e-4 (tests/test_cuda_ops.c holds the
 *  f32 kernels to 1e-4 relative of the CPU; the GEMMs' bf16 products are
 *  exact in f32). The kernels compute every grad from the bf16 inputs, never
 *  from a rounded output (unary.cu and softmax.cu recompute y from x in
 *  bf16), so nothing else enters.
 * Every case also runs twice on CUDA and must give the same bits. A last
 * test runs each of these ops through its public function on bf16 CUDA
 * inputs and requires that it was not staged (autograd/staging.c).
 * cross_entropy under bf16 autocast (bf16 logits read in place, an f32
 * loss) is also held to the bits of its widened path.
 * Every test skips without a GPU.
 */
#include "tests/pr_test.h"

#define TOL 4.2e-3

/* a copy of t (f32, CPU) with every element rounded to bf16 */
static pr_tensor *bf16_rounded(pr_ctx *ctx, const pr_tensor *t)
{
    pr_tensor *r = pr_to(ctx->step, pr_to(ctx->step, t, PR_BF16, PR_CPU), PR_F32, PR_CPU);
    r->requires_grad = t->requires_grad;
    return r;
}

/* max|got - ref| / max|ref| (both any dtype and device); 0 when both are all zero */
static double norm_err(const pr_tensor *got, const pr_tensor *ref)
{
    assert_int_equal(got->numel, ref->numel);
    int64_t n = ref->numel;
    double *g = malloc(sizeof(double) * (size_t)(n + 1)), *r = malloc(sizeof(double) * (size_t)(n + 1));
    pr_to_host_f64(got, g);
    pr_to_host_f64(ref, r);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(g[i] - r[i]);
        if (!(d <= num)) num = d;   /* a NaN makes the error NaN, which fails */
        if (fabs(r[i]) > den) den = fabs(r[i]);
    }
    free(g);
    free(r);
    return den > 0 ? num / den : num;
}

/* bytes equal, two tensors on any device */
static bool same_bytes(const pr_tensor *a, const pr_tensor *b)
{
    size_t n = pr_nbytes(a);
    char *ha = malloc(n + 1), *hb = malloc(n + 1);
    pr_device_memcpy(ha, PR_CPU, a->data, a->device, n);
    pr_device_memcpy(hb, PR_CPU, b->data, b->device, n);
    bool same = memcmp(ha, hb, n) == 0;
    free(ha);
    free(hb);
    return same;
}

/* one case: an example (f32 CPU inputs) and the tolerances of its output and grads */
typedef struct {
    const char *name;
    pr_example ex;
    double tol_out, tol_grad;
    pr_dtype out_dtype;   /* of out[0] in the bf16 node: PR_BF16, or PR_F32 for the losses */
} bf16_case;

typedef struct {
    pr_tensor *out;
    pr_tensor *grad[PR_MAX_IN];
} bf16_run;

/* the node of ex->apply on f32 CUDA copies of `in`: the tape's last node,
 * whose inputs must be exactly those copies */
static pr_node f32_cuda_node(pr_ctx *ctx, const pr_example *ex, pr_tensor *const *in)
{
    pr_tensor *cin[PR_MAX_IN] = {0};
    for (int i = 0; i < ex->n_in; i++) {
        if (!in[i]) continue;
        cin[i] = pr_to(ctx->step, in[i], in[i]->dtype, PR_CUDA);
        cin[i]->requires_grad = in[i]->requires_grad;
    }
    pr_rng saved = ctx->rng;
    ctx->rng = pr_rng_init(2024, 1);
    ex->apply(ctx, cin, ex);
    ctx->rng = saved;
    assert_true(ctx->n_tape > 0);
    pr_node n = ctx->tape[ctx->n_tape - 1];
    for (int i = 0; i < ex->n_in; i++) assert_ptr_equal(n.in[i], cin[i]);
    return n;
}

/* a failed launch named by its op (a CPU-only build never gets here: main skips) */
static void check_launch(const char *op)
{
#ifdef PRISM_HAVE_CUDA
    pr_cuda_check_last(op);
#else
    (void)op;
#endif
}

/* the f32 node f rerun with bf16 float inputs, outputs and grads: forward,
 * then backward with upstream gout and input grads starting at g0[i] */
static bf16_run run_bf16(pr_ctx *ctx, const pr_node *f, pr_dtype out_dtype, const pr_tensor *gout,
                         pr_tensor *const *g0)
{
    pr_node n = *f;
    n.recording = true;
    for (int i = 0; i < n.n_in; i++) {
        const pr_tensor *t = f->in[i];
        if (!t || t->dtype != PR_F32) continue;
        n.in[i] = pr_to(ctx->step, t, PR_BF16, PR_CUDA);
        n.in[i]->requires_grad = t->requires_grad;
    }
    for (int i = 0; i < n.n_out; i++) {
        const pr_tensor *t = f->out[i];
        pr_dtype dt = i == 0 ? out_dtype : t->dtype == PR_F32 ? PR_BF16 : t->dtype;
        n.out[i] = pr_zeros(ctx->step, dt, PR_CUDA, t->ndim, t->shape);
    }
    n.op->forward_cuda(ctx, &n);
    check_launch(n.op->name);
    bf16_run r = {.out = n.out[0]};
    n.out[0]->grad = pr_to(ctx->step, gout, n.out[0]->dtype, PR_CUDA);
    for (int i = 1; i < n.n_out; i++) n.out[i]->grad = pr_zeros_like(ctx->step, n.out[i]);
    for (int i = 0; i < n.n_in; i++)
        if (n.in[i] && n.in[i]->requires_grad) n.in[i]->grad = r.grad[i] = pr_to(ctx->step, g0[i], PR_BF16, PR_CUDA);
    n.op->backward_cuda(ctx, &n);
    check_launch(n.op->name);
    pr_device_sync(PR_CUDA);
    return r;
}

/* max |t| */
static double max_abs(const pr_tensor *t)
{
    double m = 0;
    for (int64_t i = 0; i < t->numel; i++) m = fabs(pr_get(t, i)) > m ? fabs(pr_get(t, i)) : m;
    return m;
}

static void check_case(const bf16_case *c)
{
    const pr_example *ex = &c->ex;
    pr_ctx *ctx = pr_ctx_new(7);
    pr_rng gr = pr_rng_init(99, 3);
    pr_tensor *in[PR_MAX_IN] = {0}, *g0[PR_MAX_IN] = {0}, *gref[PR_MAX_IN] = {0};
    for (int i = 0; i < ex->n_in; i++) {
        const pr_tensor *t = ex->in[i];
        if (!t) continue;
        in[i] = t->dtype == PR_F32 ? bf16_rounded(ctx, t) : pr_clone(ctx->step, t);
        in[i]->requires_grad = t->requires_grad;
    }
    /* the CPU reference on the rounded values: the output, and each input's
     * grad contribution (its grad starts at zero) */
    pr_rng saved = ctx->rng;
    ctx->rng = pr_rng_init(2024, 1);
    pr_tensor *ref = ex->apply(ctx, in, ex);
    ctx->rng = saved;
    pr_tensor *gout = bf16_rounded(ctx, pr_randu(ctx->step, PR_F32, PR_CPU, ref->ndim, ref->shape, &gr, -1, 1));
    if (ref->requires_grad) pr_backward_with(ctx, ref, gout);
    /* the bf16 grads start at g0, random bf16 values of the contribution's
     * size (so the sum checks the accumulation without drowning the
     * contribution); their reference is g0 + contribution */
    for (int i = 0; i < ex->n_in; i++) {
        if (!in[i] || !in[i]->requires_grad || !in[i]->grad) continue;
        double m = max_abs(in[i]->grad);
        m = m > 0 ? m : 0.5;
        g0[i] = bf16_rounded(ctx, pr_randu(ctx->step, PR_F32, PR_CPU, in[i]->ndim, in[i]->shape, &gr, -0.5 * m, 0.5 * m));
        gref[i] = pr_clone(ctx->step, g0[i]);
        for (int64_t j = 0; j < gref[i]->numel; j++) pr_set(gref[i], j, pr_get(g0[i], j) + pr_get(in[i]->grad, j));
    }

    pr_node f = f32_cuda_node(ctx, ex, in);
    bf16_run a = run_bf16(ctx, &f, c->out_dtype, gout, g0), b = run_bf16(ctx, &f, c->out_dtype, gout, g0);
    int bad = 0;
    double e_out = norm_err(a.out, ref), e_grad = 0;
    if (!(e_out <= c->tol_out)) fprintf(stderr, "  %s: output error %.3e > %.2e\n", c->name, e_out, c->tol_out), bad++;
    if (!same_bytes(a.out, b.out)) fprintf(stderr, "  %s: output differs between two runs\n", c->name), bad++;
    for (int i = 0; i < ex->n_in; i++) {
        if (!g0[i]) continue;
        double e = norm_err(a.grad[i], gref[i]), tol = c->tol_grad;
        if (!(e <= tol)) fprintf(stderr, "  %s: grad %d error %.3e > %.2e\n", c->name, i, e, tol), bad++;
        if (!same_bytes(a.grad[i], b.grad[i])) fprintf(stderr, "  %s: grad %d differs between two runs\n", c->name, i), bad++;
        e_grad = e > e_grad ? e : e_grad;
    }
    printf("  %-36s out %.2e  grads %.2e%s\n", c->name, e_out, e_grad, bad ? "  FAIL" : "");
    pr_ctx_free(ctx);
    assert_int_equal(bad, 0);
}

/* a case from an op's own example */
static bf16_case example_case(pr_ctx *ctx, pr_op_id id, double tol_grad)
{
    bf16_case c = {.name = pr_op(id)->name, .tol_out = TOL, .tol_grad = tol_grad, .out_dtype = PR_BF16};
    pr_rng r = pr_rng_init(99, 0);
    pr_op(id)->example(ctx, &r, PR_F32, &c.ex);
    return c;
}

/* inputs of the given shapes, uniform in [lo, hi), all requiring grad */
static void fill_inputs(pr_ctx *ctx, pr_example *ex, int n_in, const int *nd, const int64_t (*shape)[4],
                        const double *lo, const double *hi)
{
    pr_rng r = pr_rng_init(5, 0);
    ex->n_in = n_in;
    for (int i = 0; i < n_in; i++) ex->in[i] = pr_example_input(ctx, &r, PR_F32, nd[i], shape[i], lo[i], hi[i]);
}

/* ---- matmul ------------------------------------------------------------------------------ */

static pr_tensor *ap_matmul(pr_ctx *c, pr_tensor *const *in, const pr_example *ex)
{
    return pr_matmul(c, in[0], in[1], ex->iarg[0], ex->iarg[1]);
}

/* every transpose pairing, b shared (2-D) or batched, odd sizes; K = 1 and a
 * long K (f32 sums of many bf16 products) */
static void test_matmul(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    bf16_case c = example_case(ctx, PR_OP_matmul, TOL);
    check_case(&c);
    const struct { int64_t batch, M, N, K; bool shared; } sz[] = {
        {1, 37, 29, 53, true}, {3, 5, 7, 11, true}, {3, 5, 7, 11, false}, {2, 9, 1, 1, false}, {1, 3, 65, 2049, true},
    };
    for (int s = 0; s < 5; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t B = sz[s].batch, M = sz[s].M, N = sz[s].N, K = sz[s].K;
            int nd[2] = {3, sz[s].shared ? 2 : 3};
            int64_t shape[2][4] = {{B, ta ? K : M, ta ? M : K}, {B, tb ? N : K, tb ? K : N}};
            if (sz[s].shared) shape[1][0] = tb ? N : K, shape[1][1] = tb ? K : N;
            char name[96];
            snprintf(name, sizeof name, "matmul b%lld %lldx%lldx%lld%s%s%s", (long long)B, (long long)M,
                     (long long)N, (long long)K, sz[s].shared ? " shared" : "", ta ? " ta" : "", tb ? " tb" : "");
            bf16_case k = {.name = name, .tol_out = TOL, .tol_grad = TOL, .out_dtype = PR_BF16};
            fill_inputs(ctx, &k.ex, 2, nd, shape, (double[]){-1, -1}, (double[]){1, 1});
            k.ex.iarg[0] = ta, k.ex.iarg[1] = tb;
            k.ex.apply = ap_matmul;
            check_case(&k);
        }
    pr_ctx_free(ctx);
}

/* ---- elementwise ------------------------------------------------------------------------- */

static pr_tensor *ap_add(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_add(c, in[0], in[1]); }
static pr_tensor *ap_mul(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_mul(c, in[0], in[1]); }
static pr_tensor *ap_div(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_div(c, in[0], in[1]); }
static pr_tensor *ap_silu(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_silu(c, in[0]); }
static pr_tensor *ap_swiglu(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_swiglu(c, in[0], in[1]); }
static pr_tensor *ap_tanh(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_tanh(c, in[0]); }

/* a case of n_in inputs of the given shapes, uniform in [lo, hi) */
typedef struct {
    const char *name;
    pr_tensor *(*apply)(pr_ctx *, pr_tensor *const *, const pr_example *);
    int n_in;
    int nd[3];
    int64_t shape[3][4];
    double lo[3], hi[3];
    double farg, tol_grad;
} shaped_case;

static void check_shaped(pr_ctx *ctx, const shaped_case *sc)
{
    bf16_case c = {.name = sc->name, .tol_out = TOL, .tol_grad = sc->tol_grad, .out_dtype = PR_BF16};
    fill_inputs(ctx, &c.ex, sc->n_in, sc->nd, (const int64_t(*)[4])sc->shape, sc->lo, sc->hi);
    c.ex.farg[0] = sc->farg;
    c.ex.apply = sc->apply;
    check_case(&c);
}

/* every unary op, binary op and swiglu on its example, then the kernels' paths:
 * lengths not a multiple of 4 (the scalar tail), every broadcast map of the
 * binary ops (same shape, suffix, prefix, general) with their grads' column
 * and row sums */
static void test_elementwise(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    const pr_op_id ops[] = {PR_OP_scale, PR_OP_neg, PR_OP_exp, PR_OP_log, PR_OP_sqrt, PR_OP_sigmoid,
                            PR_OP_logsigmoid, PR_OP_tanh, PR_OP_relu, PR_OP_silu, PR_OP_gelu, PR_OP_gelu_tanh,
                            PR_OP_softplus, PR_OP_add, PR_OP_sub, PR_OP_mul, PR_OP_div, PR_OP_swiglu};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        pr_op_id id = ops[i];
        bf16_case c = example_case(ctx, id, TOL);
        check_case(&c);
    }
    const shaped_case cases[] = {
        {"silu n=1001", ap_silu, 1, {1}, {{1001}}, {-6}, {6}, 0, TOL},
        {"swiglu [7,143]", ap_swiglu, 2, {2, 2}, {{7, 143}, {7, 143}}, {-6, -2}, {6, 2}, 0, TOL},
        {"tanh [7,13]", ap_tanh, 1, {2}, {{7, 13}}, {-3}, {3}, 0, TOL},
        {"add same shape [5,203]", ap_add, 2, {2, 2}, {{5, 203}, {5, 203}}, {-1, -1}, {1, 1}, 0, TOL},
        {"add suffix [301,12]+[12]", ap_add, 2, {2, 1}, {{301, 12}, {12}}, {-1, -1}, {1, 1}, 0, TOL},
        {"mul suffix [67,7]*[7]", ap_mul, 2, {2, 1}, {{67, 7}, {7}}, {-1, -1}, {1, 1}, 0, TOL},
        {"mul prefix [37,64]*[37,1]", ap_mul, 2, {2, 2}, {{37, 64}, {37, 1}}, {-1, -1}, {1, 1}, 0, TOL},
        {"div prefix [9,11]/[9,1]", ap_div, 2, {2, 2}, {{9, 11}, {9, 1}}, {-1, 0.5}, {1, 2}, 0, TOL},
        {"mul general [2,5,3,6]*[3,1]", ap_mul, 2, {4, 2}, {{2, 5, 3, 6}, {3, 1}}, {-1, -1}, {1, 1}, 0, TOL},
        {"add general [3,1,5]+[4,1]", ap_add, 2, {3, 2}, {{3, 1, 5}, {4, 1}}, {-1, -1}, {1, 1}, 0, TOL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_shaped(ctx, &cases[i]);
    pr_ctx_free(ctx);
}

/* ---- norms --------------------------------------------------------------------------------- */

static pr_tensor *ap_layernorm(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_layernorm(c, in[0], in[1], in[2], ex->farg[0]); }
static pr_tensor *ap_rmsnorm(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_rmsnorm(c, in[0], in[1], ex->farg[0]); }
static pr_tensor *ap_rmsnorm_gated(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_rmsnorm_gated(c, in[0], in[1], in[2], ex->farg[0]); }
static pr_tensor *ap_l2norm(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_l2norm(c, in[0], ex->farg[0]); }

/* each norm on its example, then rows of every kernel shape: a warp with 1
 * and 8 register slots, D not a multiple of 4 (scalar loads), a block per
 * row, and rows longer than a block's slots (re-read from memory); dw and db
 * are column sums over many rows */
static void test_norms(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    const pr_op_id ops[] = {PR_OP_layernorm, PR_OP_rmsnorm, PR_OP_rmsnorm_gated, PR_OP_l2norm};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        bf16_case c = example_case(ctx, ops[i], TOL);
        check_case(&c);
    }
    const shaped_case cases[] = {
        {"layernorm [301,13]", ap_layernorm, 3, {2, 1, 1}, {{301, 13}, {13}, {13}}, {-2, 0.5, -1}, {2, 1.5, 1}, 1e-5, TOL},
        {"layernorm [9,1000]", ap_layernorm, 3, {2, 1, 1}, {{9, 1000}, {1000}, {1000}}, {-2, 0.5, -1}, {2, 1.5, 1}, 1e-5, TOL},
        {"layernorm [5,3001]", ap_layernorm, 3, {2, 1, 1}, {{5, 3001}, {3001}, {3001}}, {-2, 0.5, -1}, {2, 1.5, 1}, 1e-5, TOL},
        {"rmsnorm [777,96]", ap_rmsnorm, 2, {2, 1}, {{777, 96}, {96}}, {-2, 0.5}, {2, 1.5}, 1e-5, TOL},
        {"rmsnorm [3,9001]", ap_rmsnorm, 2, {2, 1}, {{3, 9001}, {9001}}, {-2, 0.5}, {2, 1.5}, 1e-5, TOL},
        {"rmsnorm_gated [4,7,61]", ap_rmsnorm_gated, 3, {3, 3, 1}, {{4, 7, 61}, {4, 7, 61}, {61}}, {-2, -3, 0.5}, {2, 3, 1.5}, 1e-5, TOL},
        {"rmsnorm_gated [2,17001]", ap_rmsnorm_gated, 3, {2, 2, 1}, {{2, 17001}, {2, 17001}, {17001}}, {-2, -3, 0.5}, {2, 3, 1.5}, 1e-5, TOL},
        {"l2norm [5,31,96]", ap_l2norm, 1, {3}, {{5, 31, 96}}, {-1}, {1}, 1e-6, TOL},
        {"l2norm [7,4099]", ap_l2norm, 1, {2}, {{7, 4099}}, {-1}, {1}, 1e-6, TOL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_shaped(ctx, &cases[i]);
    pr_ctx_free(ctx);
}

/* ---- the fused residual add + norm ----------------------------------------------------------
 * Two outputs (n, and the sum s), which the one-output harness above does
 * not cover: the public function on bf16 CUDA inputs (native: not staged)
 * against the same call on the CPU (staged through f64, each result rounded
 * once), both outputs seeded; n, s and the grads of x, y, w, b within TOL,
 * and two CUDA runs give the same bits. Odd rows, D not a multiple of 4 or 8,
 * each kernel shape (a warp with 1, 2 and 8 slots, a block, rows past a
 * block's slots). Mixed: x, w, b f32 and y bf16 (autocast's bf16 sublayer
 * output into the f32 residual stream, the <f32, bf16> kernels): n, s and
 * the f32 grads within 1e-4 (test_cuda_ops' f32 bound), y's bf16 grad
 * within TOL. */

typedef struct {
    pr_tensor *n, *s, *grad[4];
} add_norm_run;

static add_norm_run add_norm_on(pr_ctx *ctx, bool layer, bool mixed, pr_tensor *const *in16,
                                const pr_tensor *const *seeds, pr_device dev)
{
    pr_tensor *in[4] = {0};
    for (int i = 0; i < (layer ? 4 : 3); i++) {
        in[i] = pr_to(ctx->step, in16[i], mixed && i != 1 ? PR_F32 : PR_BF16, dev);
        in[i]->requires_grad = true;
    }
    add_norm_run r = {0};
    r.n = layer ? pr_add_layernorm(ctx, in[0], in[1], in[2], in[3], 1e-5, &r.s)
                : pr_add_rmsnorm(ctx, in[0], in[1], in[2], 1e-5, &r.s);
    const pr_node *node = &ctx->tape[r.n->tape_pos];
    assert_string_equal(node->op->name, layer ? "add_layernorm" : "add_rmsnorm");
    if (dev == PR_CUDA && node->staged) fprintf(stderr, "  %s: bf16 on CUDA was staged\n", node->op->name);
    if (dev == PR_CUDA) assert_null(node->staged);
    const pr_dtype out = mixed ? PR_F32 : PR_BF16;
    const pr_tensor *g[2] = {pr_to(ctx->step, seeds[0], out, dev), pr_to(ctx->step, seeds[1], out, dev)};
    pr_backward_many(ctx, 2, (pr_tensor *[]){r.n, r.s}, g);
    for (int i = 0; i < 4; i++) r.grad[i] = in[i] ? in[i]->grad : NULL;
    pr_device_sync(dev);
    return r;
}

static void check_add_norm(bool layer, bool mixed, int64_t R, int64_t D)
{
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng r = pr_rng_init((uint64_t)(R * 7 + D), layer);
    const double lo[4] = {-2, -1, 0.5, -1}, hi[4] = {2, 1, 1.5, 1};
    pr_tensor *in16[4] = {0};
    for (int i = 0; i < (layer ? 4 : 3); i++) {
        pr_tensor *t = i < 2 ? pr_randu(ctx->step, PR_F32, PR_CPU, PR_DIMS(R, D), &r, lo[i], hi[i])
                             : pr_randu(ctx->step, PR_F32, PR_CPU, PR_DIMS(D), &r, lo[i], hi[i]);
        in16[i] = pr_to(ctx->step, t, PR_BF16, PR_CPU);
    }
    const pr_tensor *seeds[2] = {pr_randu(ctx->step, PR_F32, PR_CPU, PR_DIMS(R, D), &r, -1, 1),
                                 pr_randu(ctx->step, PR_F32, PR_CPU, PR_DIMS(R, D), &r, -1, 1)};
    add_norm_run cpu = add_norm_on(ctx, layer, mixed, in16, seeds, PR_CPU);
    add_norm_run a = add_norm_on(ctx, layer, mixed, in16, seeds, PR_CUDA);
    add_norm_run b = add_norm_on(ctx, layer, mixed, in16, seeds, PR_CUDA);
    char name[64];
    snprintf(name, sizeof name, "%s%s [%lld,%lld]", layer ? "add_layernorm" : "add_rmsnorm", mixed ? " mixed" : "",
             (long long)R, (long long)D);
    const char *parts[6] = {"n", "s", "grad x", "grad y", "grad w", "grad b"};
    const pr_tensor *got[6] = {a.n, a.s, a.grad[0], a.grad[1], a.grad[2], a.grad[3]};
    const pr_tensor *again[6] = {b.n, b.s, b.grad[0], b.grad[1], b.grad[2], b.grad[3]};
    const pr_tensor *ref[6] = {cpu.n, cpu.s, cpu.grad[0], cpu.grad[1], cpu.grad[2], cpu.grad[3]};
    int bad = 0;
    double worst = 0;
    for (int k = 0; k < 6; k++) {
        if (!ref[k]) continue;
        double e = norm_err(got[k], ref[k]), tol = got[k]->dtype == PR_F32 ? 1e-4 : TOL;
        if (mixed) assert_int_equal(got[k]->dtype, k == 3 ? PR_BF16 : PR_F32);
        if (!(e <= tol)) fprintf(stderr, "  %s: %s error %.3e > %.2e\n", name, parts[k], e, tol), bad++;
        if (!same_bytes(got[k], again[k])) fprintf(stderr, "  %s: %s differs between two runs\n", name, parts[k]), bad++;
        worst = e > worst ? e : worst;
    }
    printf("  %-36s worst %.2e%s\n", name, worst, bad ? "  FAIL" : "");
    pr_ctx_free(ctx);
    assert_int_equal(bad, 0);
}

static void test_add_norm(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    const struct { int64_t R, D; } sz[] = {{301, 13}, {777, 96}, {9, 201}, {33, 1000}, {5, 3001}, {3, 9001}, {2, 17001}};
    for (int mixed = 0; mixed < 2; mixed++)
        for (int layer = 0; layer < 2; layer++)
            for (size_t k = 0; k < sizeof sz / sizeof sz[0]; k++) check_add_norm(layer, mixed, sz[k].R, sz[k].D);
}

/* ---- softmax and losses -------------------------------------------------------------------- */

static pr_tensor *ap_softmax(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_softmax(c, in[0]); }
static pr_tensor *ap_log_softmax(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_log_softmax(c, in[0]); }
static pr_tensor *ap_ce(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_cross_entropy(c, in[0], in[1], ex->iarg[0]); }
static pr_tensor *ap_bce(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_bce_logits(c, in[0], in[1]); }

static void test_softmax(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    bf16_case c = example_case(ctx, PR_OP_softmax, TOL);
    check_case(&c);
    c = example_case(ctx, PR_OP_log_softmax, TOL);
    check_case(&c);
    const shaped_case cases[] = {
        {"softmax [37,1000]", ap_softmax, 1, {2}, {{37, 1000}}, {-4}, {4}, 0, TOL},
        {"softmax [9,3001]", ap_softmax, 1, {2}, {{9, 3001}}, {-4}, {4}, 0, TOL},
        {"softmax [3,20001]", ap_softmax, 1, {2}, {{3, 20001}}, {-4}, {4}, 0, TOL},
        {"log_softmax [5,7,13]", ap_log_softmax, 1, {3}, {{5, 7, 13}}, {-4}, {4}, 0, TOL},
        {"log_softmax [3,20001]", ap_log_softmax, 1, {2}, {{3, 20001}}, {-4}, {4}, 0, TOL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_shaped(ctx, &cases[i]);
    pr_ctx_free(ctx);
}

/* the losses read bf16 logits (and bce's bf16 targets) and give an f32 loss;
 * cross_entropy on its example (int64 targets, ignored rows) and on rows of
 * every kernel shape with int32 targets, one of them ignored */
static void test_losses(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    const pr_op_id ops[] = {PR_OP_cross_entropy, PR_OP_bce_logits};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        bf16_case c = example_case(ctx, ops[i], TOL);
        c.out_dtype = PR_F32;
        check_case(&c);
    }
    const int64_t Cs[] = {7, 1000, 3001, 20001};
    for (int k = 0; k < 4; k++) {
        const int64_t R = 11, C = Cs[k];
        char name[64];
        snprintf(name, sizeof name, "cross_entropy [%lld,%lld] int32", (long long)R, (long long)C);
        bf16_case c = {.name = name, .tol_out = TOL, .tol_grad = TOL, .out_dtype = PR_F32};
        pr_rng r = pr_rng_init(8, 0);
        c.ex.n_in = 2;
        c.ex.in[0] = pr_example_input(ctx, &r, PR_F32, PR_DIMS(R, C), -4, 4);
        int32_t t[11];
        for (int i = 0; i < R; i++) t[i] = (int32_t)((i * 7919 + 13) % C);
        t[3] = -1;
        c.ex.in[1] = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(R), t);
        c.ex.iarg[0] = -1;
        c.ex.apply = ap_ce;
        check_case(&c);
    }
    bf16_case b = {.name = "bce_logits [3,1001]", .tol_out = TOL, .tol_grad = TOL, .out_dtype = PR_F32};
    fill_inputs(ctx, &b.ex, 2, (int[]){2, 2}, (const int64_t[][4]){{3, 1001}, {3, 1001}}, (double[]){-6, 0},
                (double[]){6, 1});
    b.ex.apply = ap_bce;
    check_case(&b);
    pr_ctx_free(ctx);
}

/* ---- cross_entropy reading bf16 logits in place ------------------------------------------- */

/* a leaf of vals (bf16, CPU) on dev, its grad starting at g0 when given */
static pr_tensor *ce_leaf(pr_ctx *ctx, const pr_tensor *vals, const pr_tensor *g0, pr_device dev)
{
    pr_tensor *x = pr_to(ctx->step, vals, PR_BF16, dev);
    pr_requires_grad_(x, true);
    if (g0) x->grad = pr_to(ctx->step, g0, PR_BF16, dev);
    return x;
}

/* cross_entropy of x, its backward seeded with 0.6875 (exact in every dtype) */
static pr_tensor *ce_run(pr_ctx *ctx, pr_tensor *x, pr_tensor *t)
{
    pr_tensor *loss = pr_cross_entropy(ctx, x, t, -100);
    pr_backward_with(ctx, loss, pr_full(ctx->step, loss->dtype, loss->device, 0, NULL, 0.6875));
    return loss;
}

/* the elements of bf16 a and b that differ, or -1 if one is more than one
 * bf16 ulp (2^-7 of the larger's binade) from the other */
static int64_t bf16_ulp_diffs(const pr_tensor *a, const pr_tensor *b)
{
    int64_t n = a->numel, diffs = 0;
    double *ha = malloc(sizeof(double) * (size_t)n), *hb = malloc(sizeof(double) * (size_t)n);
    pr_to_host_f64(a, ha);
    pr_to_host_f64(b, hb);
    for (int64_t i = 0; i < n && diffs >= 0; i++) {
        if (ha[i] == hb[i]) continue;
        int e;
        frexp(fmax(fabs(ha[i]), fabs(hb[i])), &e);   /* the larger is in [2^(e-1), 2^e) */
        diffs = fabs(ha[i] - hb[i]) <= ldexp(1.0, e - 8) ? diffs + 1 : -1;
    }
    free(ha);
    free(hb);
    return diffs;
}

/* Under bf16 autocast cross_entropy reads bf16 CUDA logits in place (no
 * cast node, not staged) and gives the bits of the device's own widened path
 * (pr_cast to f32, the f32 kernels, the cast's backward rounding dlogits into
 * bf16): the bf16 instance loads exactly, does the f32 kernel's math and
 * rounds g0 + dx once as the cast does. Against the CPU on the same bf16
 * values: the f32 loss to 1e-6 relative, and each dlogit equal or one bf16
 * ulp apart, not bitwise: CUDA's dlogit is computed in f32 (expf, its own
 * sum order), a few f32 ulps from the CPU's double one rounded to f32, and
 * where a bf16 rounding boundary falls between the two they round to
 * neighbours. Rows of a warp (C = 129, no float4 loads), of a block (3000,
 * float4 loads) and of 1024 threads past their register slots (20001);
 * ignored rows; the first case's grads start at nonzero g0. */
static void test_cross_entropy_in_place(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    const int64_t sizes[3][2] = {{37, 129}, {9, 3000}, {3, 20001}};
    for (int k = 0; k < 3; k++) {
        const int64_t N = sizes[k][0], C = sizes[k][1];
        pr_ctx *ctx = pr_ctx_new(1);
        pr_ctx_set_precision(ctx, PR_PREC_BF16);
        pr_rng r = pr_rng_init(31, (uint64_t)k);
        pr_tensor *vals = pr_to(ctx->step, pr_randu(ctx->step, PR_F32, PR_CPU, PR_DIMS(N, C), &r, -4, 4), PR_BF16, PR_CPU);
        int32_t tg[37];
        for (int64_t i = 0; i < N; i++) tg[i] = i % 5 == 2 ? -100 : (int32_t)((i * 7919 + 13) % C);
        pr_tensor *t = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(N), tg);
        pr_tensor *td = pr_to(ctx->step, t, PR_I32, PR_CUDA);
        pr_tensor *g0 = k ? NULL
                          : pr_to(ctx->step, pr_randu(ctx->step, PR_F32, PR_CPU, PR_DIMS(N, C), &r, -1e-4, 1e-4),
                                  PR_BF16, PR_CPU);

        pr_tensor *xa = ce_leaf(ctx, vals, g0, PR_CUDA), *xb = ce_leaf(ctx, vals, g0, PR_CUDA);
        pr_tensor *la = ce_run(ctx, xa, td);
        const pr_node *na = &ctx->tape[la->tape_pos];
        assert_int_equal(la->dtype, PR_F32);
        assert_int_equal(xa->grad->dtype, PR_BF16);
        assert_ptr_equal(na->in[0], xa);
        assert_null(na->staged);
        for (int i = 0; i < ctx->n_tape; i++) assert_int_not_equal(pr_node_op(&ctx->tape[i]), PR_OP_cast);
        pr_tensor *lb = ce_run(ctx, pr_cast(ctx, xb, PR_F32), td);   /* the widened path */
        pr_device_sync(PR_CUDA);
        int bad = 0;
        if (!same_bytes(la, lb)) fprintf(stderr, "  [%lld,%lld]: loss differs from the widened path\n", (long long)N, (long long)C), bad++;
        if (!same_bytes(xa->grad, xb->grad))
            fprintf(stderr, "  [%lld,%lld]: dlogits differ from the widened path\n", (long long)N, (long long)C), bad++;

        pr_tensor *xc = ce_leaf(ctx, vals, g0, PR_CPU), *lc = ce_run(ctx, xc, t);
        double got = pr_item(la), ref = pr_item(lc), rel = fabs(got - ref) / fabs(ref);
        int64_t diffs = bf16_ulp_diffs(xa->grad, xc->grad);
        if (!(rel <= 1e-6)) fprintf(stderr, "  [%lld,%lld]: loss %.9g, CPU %.9g\n", (long long)N, (long long)C, got, ref), bad++;
        if (diffs < 0) fprintf(stderr, "  [%lld,%lld]: a dlogit more than one bf16 ulp from the CPU's\n", (long long)N, (long long)C), bad++;
        printf("  cross_entropy bf16 in place [%lld,%lld]  loss rel %.1e  dlogits one ulp off %lld of %lld%s\n",
               (long long)N, (long long)C, rel, (long long)diffs, (long long)(N * C), bad ? "  FAIL" : "");
        pr_ctx_free(ctx);
        assert_int_equal(bad, 0);
    }
}

/* ---- reductions and shape ops --------------------------------------------------------------- */

static pr_tensor *ap_sum(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_sum(c, in[0]); }
static pr_tensor *ap_mean_all(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_mean_all(c, in[0]); }
static pr_tensor *ap_transpose(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_transpose(c, in[0], (int)ex->iarg[0], (int)ex->iarg[1]); }
static pr_tensor *ap_slice(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_slice(c, in[0], (int)ex->iarg[0], ex->iarg[1], ex->iarg[2]); }
static pr_tensor *ap_concat3(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { return pr_concat(c, 3, in, (int)ex->iarg[0]); }

/* sums in double, each output rounded once to bf16, or to f32 where the
 * frontend makes the sum f32 (both are kernels' cases); rows of a warp, of a
 * block, and the whole tensor; the backward spreads the grad */
static void test_reductions(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    const pr_op_id ops[] = {PR_OP_sum, PR_OP_mean, PR_OP_sum_all, PR_OP_mean_all};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int f32 = 0; f32 < 2; f32++) {
            bf16_case c = example_case(ctx, ops[i], TOL);
            char name[64];
            snprintf(name, sizeof name, "%s -> %s", c.name, f32 ? "f32" : "bf16");
            c.name = name;
            c.out_dtype = f32 ? PR_F32 : PR_BF16;
            check_case(&c);
        }
    const shaped_case cases[] = {
        {"sum [13,3001]", ap_sum, 1, {2}, {{13, 3001}}, {-1}, {1}, 0, TOL},
        {"sum [777,5]", ap_sum, 1, {2}, {{777, 5}}, {-1}, {1}, 0, TOL},
        {"mean_all [3,10007]", ap_mean_all, 1, {2}, {{3, 10007}}, {-1}, {1}, 0, TOL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_shaped(ctx, &cases[i]);
    pr_ctx_free(ctx);
}

/* the forward copies bf16 elements exactly (tolerance 0); the backward adds
 * dout into a grad that already holds g0, one rounding (TOL). Transposes by
 * the 32x32 tile (last dim kept 1) and element by element; slices and
 * concats with 16-byte runs (sizes multiples of 8 bf16) and without */
static void test_shape(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    const pr_op_id ops[] = {PR_OP_reshape, PR_OP_transpose, PR_OP_slice, PR_OP_concat};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        bf16_case c = example_case(ctx, ops[i], TOL);
        c.tol_out = 0;
        check_case(&c);
    }
    const struct {
        const char *name;
        pr_tensor *(*apply)(pr_ctx *, pr_tensor *const *, const pr_example *);
        int n_in, nd;
        int64_t shape[3][4];
        int64_t iarg[3];
    } cases[] = {
        {"transpose tile [3,37,45] 1,2", ap_transpose, 1, 3, {{3, 37, 45}}, {1, 2}},
        {"transpose [5,6,7] 0,1", ap_transpose, 1, 3, {{5, 6, 7}}, {0, 1}},
        {"slice [4,64,8] dim 1 8:+32", ap_slice, 1, 3, {{4, 64, 8}}, {1, 8, 32}},
        {"slice [3,7,5] dim 1 1:+3", ap_slice, 1, 3, {{3, 7, 5}}, {1, 1, 3}},
        {"concat [2,8|16|24,8] dim 1", ap_concat3, 3, 3, {{2, 8, 8}, {2, 16, 8}, {2, 24, 8}}, {1}},
        {"concat [3,5,1|2|3] dim 2", ap_concat3, 3, 3, {{3, 5, 1}, {3, 5, 2}, {3, 5, 3}}, {2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bf16_case c = {.name = cases[i].name, .tol_out = 0, .tol_grad = TOL, .out_dtype = PR_BF16};
        int nd[3] = {cases[i].nd, cases[i].nd, cases[i].nd};
        fill_inputs(ctx, &c.ex, cases[i].n_in, nd, (const int64_t(*)[4])cases[i].shape, (double[]){-1, -1, -1},
                    (double[]){1, 1, 1});
        for (int k = 0; k < 3; k++) c.ex.iarg[k] = cases[i].iarg[k];
        c.ex.apply = cases[i].apply;
        check_case(&c);
    }
    pr_ctx_free(ctx);
}

/* ---- dropout, embedding, conv1d ---------------------------------------------------------------- */

static pr_tensor *ap_embedding(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_embedding(c, in[0], in[1]); }
static pr_tensor *ap_conv1d(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_conv1d(c, in[0], in[1], in[2]); }
static pr_tensor *ap_conv1d_silu(pr_ctx *c, pr_tensor *const *in, const pr_example *ex) { (void)ex; return pr_conv1d_silu(c, in[0], in[1], in[2]); }

/* dropout keeps the CPU's mask (the f32 product rounded to bf16 once);
 * embedding gathers rows of a bf16 table exactly (tolerance 0) and
 * scatter-adds repeated ids in f32; conv1d by the run kernels (W <= 8, T
 * not a multiple of their runs, sequences crossing run boundaries) and by
 * the generic ones (W = 9), plain and in the silu form (the op's example) */
static void test_dropout_embedding_conv1d(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    bf16_case c = example_case(ctx, PR_OP_dropout, TOL);
    check_case(&c);
    c = example_case(ctx, PR_OP_embedding, TOL);
    c.tol_out = 0;
    check_case(&c);
    c = example_case(ctx, PR_OP_conv1d, TOL);
    check_case(&c);

    /* 300 int32 ids into 37 rows of 45: every row repeated, D not a multiple of the 32 columns a block takes */
    bf16_case e = {.name = "embedding [37,45] ids int32 [300]", .tol_out = 0, .tol_grad = TOL, .out_dtype = PR_BF16};
    pr_rng r = pr_rng_init(4, 0);
    int32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = (int32_t)((i * 13 + i / 7) % 37);
    e.ex.n_in = 2;
    e.ex.in[0] = pr_example_input(ctx, &r, PR_F32, PR_DIMS(37, 45), -1, 1);
    e.ex.in[1] = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(300), ids);
    e.ex.apply = ap_embedding;
    check_case(&e);

    const shaped_case cases[] = {
        {"conv1d [3,50,37] W=4", ap_conv1d, 3, {3, 2, 1}, {{3, 50, 37}, {37, 4}, {37}}, {-1, -1, -1}, {1, 1, 1}, 0, TOL},
        {"conv1d [2,300,5] W=1", ap_conv1d, 3, {3, 2, 1}, {{2, 300, 5}, {5, 1}, {5}}, {-1, -1, -1}, {1, 1, 1}, 0, TOL},
        {"conv1d [2,7,33] W=8", ap_conv1d, 3, {3, 2, 1}, {{2, 7, 33}, {33, 8}, {33}}, {-1, -1, -1}, {1, 1, 1}, 0, TOL},
        {"conv1d [2,40,6] W=9", ap_conv1d, 3, {3, 2, 1}, {{2, 40, 6}, {6, 9}, {6}}, {-1, -1, -1}, {1, 1, 1}, 0, TOL},
        {"conv1d_silu [3,50,37] W=4", ap_conv1d_silu, 3, {3, 2, 1}, {{3, 50, 37}, {37, 4}, {37}}, {-1, -1, -1}, {1, 1, 1}, 0, TOL},
        {"conv1d_silu [2,40,6] W=9", ap_conv1d_silu, 3, {3, 2, 1}, {{2, 40, 6}, {6, 9}, {6}}, {-1, -1, -1}, {1, 1, 1}, 0, TOL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_shaped(ctx, &cases[i]);
    pr_ctx_free(ctx);
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

/* every op this file covers runs its own bf16 kernels through its public
 * function (ops/ops.def marks it native on CUDA): bf16 CUDA inputs give a
 * tape node that was not staged, and its backward runs */
static void test_native_dispatch(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    static const pr_op_id ids[] = {
        PR_OP_scale, PR_OP_neg, PR_OP_exp, PR_OP_log, PR_OP_sqrt, PR_OP_sigmoid, PR_OP_logsigmoid, PR_OP_tanh,
        PR_OP_relu, PR_OP_silu, PR_OP_gelu, PR_OP_gelu_tanh, PR_OP_softplus, PR_OP_swiglu, PR_OP_add, PR_OP_sub,
        PR_OP_mul, PR_OP_div, PR_OP_sum, PR_OP_sum_all, PR_OP_mean, PR_OP_mean_all, PR_OP_softmax,
        PR_OP_log_softmax, PR_OP_cross_entropy, PR_OP_bce_logits, PR_OP_layernorm, PR_OP_rmsnorm,
        PR_OP_rmsnorm_gated, PR_OP_l2norm, PR_OP_matmul, PR_OP_embedding, PR_OP_conv1d, PR_OP_reshape,
        PR_OP_transpose, PR_OP_slice, PR_OP_concat, PR_OP_dropout,
    };
    pr_ctx *ctx = pr_ctx_new(1);
    int checked = 0;
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        const pr_op_info *op = pr_op(ids[k]);
        if (!op->bf16_native[PR_CUDA]) fprintf(stderr, "  %s: not marked native in bf16 on CUDA\n", op->name);
        assert_true(op->bf16_native[PR_CUDA]);
        pr_rng r = pr_rng_init(99, 0);
        pr_example ex = {0};
        op->example(ctx, &r, PR_F32, &ex);
        pr_tensor *in[PR_MAX_IN] = {0};
        for (int i = 0; i < ex.n_in; i++) {
            pr_tensor *t = ex.in[i];
            if (!t) continue;
            in[i] = pr_to(ctx->step, t, t->dtype == PR_F32 ? PR_BF16 : t->dtype, PR_CUDA);
            in[i]->requires_grad = t->requires_grad;
        }
        pr_tensor *y = ex.apply(ctx, in, &ex);
        assert_true(ctx->n_tape > 0);
        const pr_node *n = &ctx->tape[ctx->n_tape - 1];
        if (n->op != op || n->staged) fprintf(stderr, "  %s: bf16 on CUDA did not run natively\n", op->name);
        assert_ptr_equal(n->op, op);
        assert_null(n->staged);
        if (y->requires_grad) {
            pr_rng gr = pr_rng_init(3, 0);
            pr_tensor *g = pr_to(ctx->step, pr_randu(ctx->step, PR_F32, PR_CPU, y->ndim, y->shape, &gr, -1, 1), y->dtype,
                                 PR_CUDA);
            pr_backward_with(ctx, y, g);
        }
        pr_device_sync(PR_CUDA);
        checked++;
        pr_step_reset(ctx);
    }
    printf("  %d ops run natively in bf16 on CUDA\n", checked);
    assert_int_equal(checked, (int)(sizeof ids / sizeof ids[0]));
    pr_ctx_free(ctx);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_add_norm),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_cross_entropy_in_place),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_dropout_embedding_conv1d),
        cmocka_unit_test(test_native_dispatch),
    };
    return pr_test_exit_status(cmocka_run_group_tests_name("cuda_bf16_ops", tests, NULL, NULL));
}
