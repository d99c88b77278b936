/* tests/test_cuda_models.c: every layer and the LM on CUDA against the CPU.
 *
 * The same config builds a layer in f64 on the CPU (the reference) and in f32
 * on CUDA; keyed init gives both the same values. Sizes are awkward: T = 37
 * (not a multiple of the chunk 32 nor of TTT's mini-batch 16), D = 20 with 3
 * heads of 8, Mamba-2 with 4 heads of 10 in 2 groups of state 12. Each output
 * and every gradient (input and parameters) must agree to
 * max|got - ref| / max|ref| <= 1e-3 (fp32 products, matmul_tf32 = 0; the
 * kernels alone land near 2e-4, a layer stacks a few of them). The CUDA
 * decoding (prefix, then token by token) must equal the CUDA whole sequence,
 * and the LM's loss and gradients must match the CPU's, as must SASRec's
 * sampled-negative loss and gradients (dropout off). PRISM's paper form has
 * cases of its own at odd sizes: D = 15 with 3 heads of 5, or one head of 7,
 * T = 37 against chunks of 32 and 64 or the per-token form, L = 1..3,
 * factorised projections, knorm off, the anchor without its conv. MoM
 * routed on the device (mom.route=padded) has its own case, with its
 * routing against the CPU's bit for bit. Skips without a GPU.
 */
#include "tests/test_models_util.h"
#include "ops/route.h"

static double rel_err(const pr_tensor *got, const pr_tensor *ref)
{
    int64_t n = ref->numel;
    double *g = malloc(sizeof(double) * (size_t)n), *r = malloc(sizeof(double) * (size_t)n), worst = 0, scale = 0;
    pr_to_host_f64(got, g);
    pr_to_host_f64(ref, r);
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(g[i] - r[i]);
        if (isnan(g[i])) e = INFINITY;
        if (e > worst) worst = e;
        if (fabs(r[i]) > scale) scale = fabs(r[i]);
    }
    free(g);
    free(r);
    return worst / (scale > 0 ? scale : 1);
}

static int check(const char *what, const char *name, const pr_tensor *got, const pr_tensor *ref, double tol)
{
    if (!got || !ref) {
        fprintf(stderr, "  FAIL %s %s: missing gradient\n", what, name);
        return 1;
    }
    double e = rel_err(got, ref);
    fprintf(stderr, "  %-12s %-28s %.2e%s\n", what, name, e, e <= tol ? "" : "  FAIL");
    return !(e <= tol);
}

/* a gradient that is zero in exact arithmetic: max|got| <= atol */
static int check_noise(const char *what, const char *name, const pr_tensor *got, double atol)
{
    double *g = malloc(sizeof(double) * (size_t)got->numel), worst = 0;
    pr_to_host_f64(got, g);
    for (int64_t i = 0; i < got->numel; i++) worst = isnan(g[i]) ? INFINITY : fmax(worst, fabs(g[i]));
    free(g);
    fprintf(stderr, "  %-12s %-28s |g| %.2e (zero in exact arithmetic)%s\n", what, name, worst, worst <= atol ? "" : "  FAIL");
    return !(worst <= atol);
}

static int layer_case_of(pr_config c)
{
    pr_err err;
    if (pr_config_check(&c, &err)) fail_msg("%s", err.msg);
    const int64_t B = 3, T = 37;
    pr_ctx *ctx = pr_ctx_new(1);
    ctx->matmul_tf32 = 0;
    test_layer ref = test_layer_new(&c, PR_F64, PR_CPU), dev = test_layer_new(&c, PR_F32, PR_CUDA);
    pr_tensor *x = test_input(ctx->step, PR_F64, B, T, c.d_model, 21);
    pr_tensor *xd = pr_to(ctx->step, x, PR_F32, PR_CUDA);
    pr_requires_grad_(xd, true);
    pr_tensor *y = test_layer_forward(ctx, &ref, x, NULL), *yd = test_layer_forward(ctx, &dev, xd, NULL);
    pr_rng r = pr_rng_init(4, 0);
    pr_tensor *w = pr_randn(ctx->step, PR_F64, PR_CPU, y->ndim, y->shape, &r);
    pr_backward_with(ctx, y, w);
    pr_backward_with(ctx, yd, pr_to(ctx->step, w, PR_F32, PR_CUDA));
    int fails = check(c.mixer, "y", yd, y, 1e-3) + check(c.mixer, "dx", xd->grad, x->grad, 1e-3);
    for (int p = 0; p < ref.params->n; p++) {
        const char *path = ref.params->p[p].path;
        const pr_tensor *g = dev.params->p[p].t->grad, *r = ref.params->p[p].t->grad;
        /* with top-1 routing each token's weight is p / p = 1, so the router's
         * gradient is zero in exact arithmetic (no balance loss on a layer) */
        if (strcmp(c.mixer, "mom") == 0 && c.mom_topk == 1 && strstr(path, "router")) fails += check_noise(c.mixer, path, g, 1e-6);
        else fails += check(c.mixer, path, g, r, 1e-3);
    }

    /* decoding on the device: a prefix of 21, then 16 single tokens */
    pr_layer_state st = {0};
    pr_tensor *joined = test_layer_forward(ctx, &dev, pr_slice(ctx, xd, 1, 0, 21), &st);
    for (int64_t t = 21; t < T; t++)
        joined = pr_concat(ctx, 2, (pr_tensor *[]){joined, test_layer_forward(ctx, &dev, pr_slice(ctx, xd, 1, t, 1), &st)}, 1);
    fails += check(c.mixer, "decode vs whole", joined, yd, 1e-4);
    test_layer_free(&ref);
    test_layer_free(&dev);
    pr_ctx_free(ctx);
    return fails;
}

static int layer_case(int i)
{
    pr_config c = test_config(i, 20, 3, 8, 32);
    c.init_std = 0.2;
    if (strcmp(c.mixer, "mamba2") == 0) c.mamba2_head_dim = 10, c.mamba2_d_state = 12;
    if (strcmp(c.mixer, "ttt_linear") == 0) c.ttt_mini_batch = 16;
    return layer_case_of(c);
}

/* PRISM form paper at awkward sizes: D = 15 in 3 heads of 5 (the paper form needs
 * V = D / H), and one head of 7; T = 37 is no multiple of the chunks 32 and 64
 * (the CUDA chunked kernels take those two; chunk 0 is the per-token form) */
static void test_cuda_prism_paper(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    static const struct { int D, H, chunk; const char *sets[4]; } cases[] = {
        {15, 3, 64, {"prism.L=2"}},
        {15, 3, 32, {"prism.L=3", "prism.proj_rank=4", "prism.conv_width=5"}},
        {15, 3, 0, {"prism.L=1", "prism.knorm=off"}},
        {7, 1, 32, {"prism.L=2", "prism.shortconv=off", "prism.gain=off", "prism.gelu=off"}},
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pr_config c = test_config(TEST_PRISM_PAPER, cases[i].D, cases[i].H, 0, cases[i].chunk);
        c.init_std = 0.2, c.prism_chunk = cases[i].chunk;
        pr_err err;
        for (int j = 0; j < 4 && cases[i].sets[j]; j++) assert_int_equal(pr_config_set(&c, cases[i].sets[j], &err), 0);
        fails += layer_case_of(c);
    }
    assert_int_equal(fails, 0);
}

/* MoM routed on the device (mom.route=padded): the layer against the CPU's,
 * its decoding (which runs packed) against its whole sequence, and the
 * routing's slots and counts equal to the CPU's on the same f32 probabilities */
static void test_cuda_mom_padded(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    int fails = 0;
    for (int i = 0; i < N_TEST_MIXERS; i++) {
        if (strcmp(test_mixers[i].name, "mom") != 0) continue;
        for (int gla = 0; gla < 2; gla++) {
            pr_config c = test_config(i, 20, 3, 8, 32);
            c.init_std = 0.2;
            pr_err err;
            assert_int_equal(pr_config_set(&c, "mom.route=padded", &err), 0);
            if (gla) assert_int_equal(pr_config_set(&c, "mom.backend=gla", &err), 0);
            fails += layer_case_of(c);
        }
    }
    pr_ctx *ctx = pr_ctx_new(1);
    const int64_t B = 5, T = 37, E = 6, k = 3;
    pr_tensor *p = pr_to(ctx->step, pr_softmax(ctx, test_input(ctx->step, PR_F64, B, T, E, 9)), PR_F32, PR_CPU);
    pr_routing h = pr_route_padded(ctx, p, k), d = pr_route_padded(ctx, pr_to(ctx->step, p, PR_F32, PR_CUDA), k);
    const pr_tensor *ht[3] = {h.at, h.slot, h.count}, *dt[3] = {d.at, d.slot, d.count};
    for (int i = 0; i < 3; i++) {
        pr_tensor *back = pr_to(ctx->step, dt[i], dt[i]->dtype, PR_CPU);
        assert_memory_equal(back->data, ht[i]->data, pr_nbytes(ht[i]));
    }
    pr_ctx_free(ctx);
    assert_int_equal(fails, 0);
}

static void test_cuda_layers(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    int fails = 0;
    for (int i = 0; i < N_TEST_MIXERS; i++) fails += layer_case(i);
    assert_int_equal(fails, 0);
}

/* the whole LM: loss and every parameter's gradient (the f64 reference's loss
 * fused on the CPU; the device's fused or not, alternately) */
static void test_cuda_lm(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    int fails = 0;
    for (int i = 0; i < N_TEST_MIXERS; i++) {
        pr_config c = test_config(i, 20, 3, 8, 32);
        c.init_std = 0.2, c.vocab = 50, c.n_layers = 2, c.tie_embeddings = i % 2 == 0;
        if (strcmp(c.mixer, "mamba2") == 0) c.mamba2_head_dim = 10, c.mamba2_d_state = 12;
        /* the device's loss fused with its head (linear_cross_entropy) for every
         * other pair of mixers, so tied and untied heads both run it */
        pr_config cd = c;
        snprintf(cd.fused_loss, sizeof cd.fused_loss, "%s", (i / 2) % 2 ? "true" : "false");
        pr_model *ref = pr_model_new(&c, PR_F64, PR_CPU), *dev = pr_model_new(&cd, PR_F32, PR_CUDA);
        pr_model_init(ref);
        pr_model_init(dev);
        pr_ctx *ctx = pr_ctx_new(1);
        ctx->matmul_tf32 = 0;
        int32_t ids[2 * 29], tg[2 * 29];
        for (int j = 0; j < 2 * 29; j++) ids[j] = (j * 13 + 5) % c.vocab, tg[j] = j % 7 == 3 ? -100 : (j * 3) % c.vocab;
        pr_tensor *in = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(2, 29), ids);
        pr_tensor *target = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(2, 29), tg);
        pr_tensor *l = pr_lm_loss(ctx, ref, in, target);
        pr_tensor *ld = pr_lm_loss(ctx, dev, pr_to(ctx->step, in, PR_I32, PR_CUDA), pr_to(ctx->step, target, PR_I32, PR_CUDA));
        pr_backward(ctx, l);
        pr_backward(ctx, ld);
        fails += check(c.mixer, "lm loss", ld, l, 1e-4);
        for (int p = 0; p < ref->params->n; p++)
            fails += check(c.mixer, ref->params->p[p].path, dev->params->p[p].t->grad, ref->params->p[p].t->grad, 2e-3);
        pr_ctx_free(ctx);
        pr_model_free(ref);
        pr_model_free(dev);
    }
    assert_int_equal(fails, 0);
}

/* SASRec (block = sasrec) on its preset, shrunk: loss on sampled negatives and every gradient */
static void test_cuda_sasrec(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "sasrec", &err), 0);
    c.d_model = 20, c.n_heads = 2, c.seq_len = 40, c.rec_n_items = 57, c.init_std = 0.2, c.dropout = 0;
    pr_model *ref = pr_model_new(&c, PR_F64, PR_CPU), *dev = pr_model_new(&c, PR_F32, PR_CUDA);
    pr_model_init(ref);
    pr_model_init(dev);
    pr_ctx *ctx = pr_ctx_new(1);
    ctx->matmul_tf32 = 0;
    int64_t items[3 * 37], next[3], negs[3 * 2];
    for (int j = 0; j < 3 * 37; j++) items[j] = j % 37 < 9 * (j / 37) ? 0 : (j * 11 + 3) % 57 + 1;   /* left pads */
    for (int b = 0; b < 3; b++) next[b] = b * 17 + 2, negs[2 * b] = b + 1, negs[2 * b + 1] = 50 - b;
    pr_tensor *in = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(3, 37), items);
    pr_tensor *tg = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(3), next);
    pr_tensor *ng = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(3, 2), negs);
    pr_tensor *l = pr_rec_loss_sampled(ctx, ref, in, tg, ng);
    pr_tensor *ld = pr_rec_loss_sampled(ctx, dev, pr_to(ctx->step, in, PR_I64, PR_CUDA),
                                        pr_to(ctx->step, tg, PR_I64, PR_CUDA), pr_to(ctx->step, ng, PR_I64, PR_CUDA));
    pr_backward(ctx, l);
    pr_backward(ctx, ld);
    int fails = check("sasrec", "loss", ld, l, 1e-4);
    for (int p = 0; p < ref->params->n; p++) {
        const char *path = ref->params->p[p].path;
        const pr_tensor *g = dev->params->p[p].t->grad, *r = ref->params->p[p].t->grad;
        /* a key bias adds q.b to every score of a row, which the softmax ignores: its
         * gradient is zero in exact arithmetic (the f64 reference holds ~1e-17), so
         * the device's must be rounding noise, not a relative match */
        if (strstr(path, "k_bias")) fails += check_noise("sasrec", path, g, 1e-6);
        else fails += check("sasrec", path, g, r, 2e-3);
    }
    pr_ctx_free(ctx);
    pr_model_free(ref);
    pr_model_free(dev);
    assert_int_equal(fails, 0);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_layers),
        cmocka_unit_test(test_cuda_prism_paper),
        cmocka_unit_test(test_cuda_mom_padded),
        cmocka_unit_test(test_cuda_lm),
        cmocka_unit_test(test_cuda_sasrec),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
