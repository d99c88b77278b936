/* tests/test_models.c: the layers and models on the CPU.
 *
 * - float64 gradcheck of every layer (its input and every parameter), of
 *   the PRISM switches (gelu, shortconv, gain, knorm off; L = 1) in both
 *   forms, and of the LM around a layer (LayerNorm + GELU MLP + untied head;
 *   RMSNorm + SwiGLU + tied; prism in both forms; attn and linattn with their
 *   conv before the layer, in LayerNorm blocks);
 * - the prism layer with L = 0 in both forms and the gdn layer: the same
 *   paths, and bit-identical outputs and gradients in f32 from the same seed;
 * - every layer: the whole sequence equals a prefix then token-by-token
 *   decoding with the carried state; the LM does too, with its state kept
 *   across step resets;
 * - LM and rec models: a few SGD steps lower the loss without NaN.
 */
#include "tests/test_models_util.h"

/* ---- gradcheck: the example's inputs are x and up to 9 parameters; apply runs
 * the layer (the parameters are the registry's own tensors, perturbed in place) */
static const test_layer *gc_layer;

static pr_tensor *apply_layer(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return test_layer_forward(ctx, gc_layer, in[0], NULL);
}

static void gradcheck_layer(const pr_config *c)
{
    pr_ctx *ctx = pr_ctx_new(1);
    test_layer t = test_layer_new(c, PR_F64, PR_CPU);
    gc_layer = &t;
    pr_arena *a = pr_arena_new("test-x", 0);   /* x outlives the step resets between groups */
    pr_tensor *x = test_input(a, PR_F64, 2, 6, c->d_model, 3);
    char what[64];
    snprintf(what, sizeof what, "%s layer", c->mixer);
    gradcheck_params(ctx, what, t.params, &(pr_example){.apply = apply_layer, .n_in = 1, .in = {x}}, 12);
    pr_arena_free(a);
    test_layer_free(&t);
    pr_ctx_free(ctx);
}

static void test_gradcheck_layers(void **state)
{
    (void)state;
    for (int i = 0; i < N_TEST_MIXERS; i++) {
        pr_config c = test_config(i, 6, 2, 4, 4);
        gradcheck_layer(&c);
    }
}

static void test_gradcheck_prism_switches(void **state)
{
    (void)state;
    const char *sets[] = {"prism.gelu=off", "prism.shortconv=off", "prism.gain=off", "prism.L=1", "prism.knorm=off"};
    for (int form = 0; form < 2; form++)
        for (int i = 0; i < 5; i++) {
            pr_config c = test_config(form ? TEST_PRISM_PAPER : 0, 6, 2, 4, 4);
            pr_err err;
            assert_int_equal(pr_config_set(&c, sets[i], &err), 0);
            gradcheck_layer(&c);
        }
    pr_config c = test_config(4, 6, 2, 4, 4);  /* linear attention's other feature maps */
    snprintf(c.linattn_feature_map, sizeof c.linattn_feature_map, "elu");
    gradcheck_layer(&c);
}

/* the blocks and heads around a layer: the LM's logits, every parameter checked */
static const pr_model *gc_model;
static pr_tensor *gc_ids;

static pr_tensor *apply_lm(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)in, (void)ex;
    return pr_lm_logits(ctx, gc_model, gc_ids, NULL);
}

static void test_gradcheck_lm(void **state)
{
    (void)state;
    const char *variants[][3] = {{"norm=layernorm", "mlp=gelu", "tie_embeddings=false"},
                                 {"norm=rmsnorm", "mlp=swiglu", "tie_embeddings=true"},
                                 {"norm=rmsnorm", "mlp=swiglu", "tie_embeddings=true"},
                                 {"norm=layernorm", "mlp=gelu", "tie_embeddings=false"},
                                 {"norm=layernorm", "mixer=attn", "attn.shortconv=3"},
                                 {"norm=layernorm", "mixer=linattn", "linattn.shortconv=5"},
                                 {"norm=rmsnorm", "mlp=swiglu", "tie_embeddings=true"},
                                 {"norm=rmsnorm", "mlp=gelu", "tie_embeddings=false"}};
    /* gdn twice, prism augmented, prism paper, then attn and linattn by their sets, then gla and gsa (issue 43) */
    const int mixer[] = {1, 1, 0, TEST_PRISM_PAPER, 1, 1, test_mixer_index("gla"), test_mixer_index("gsa")};
    for (int v = 0; v < 8; v++) {
        pr_config c = test_config(mixer[v], 6, 2, 4, 4);
        c.vocab = 7;
        pr_err err;
        for (int j = 0; j < 3; j++) assert_int_equal(pr_config_set(&c, variants[v][j], &err), 0);
        pr_model *m = pr_model_new(&c, PR_F64, PR_CPU);
        pr_model_init(m);
        pr_arena *a = pr_arena_new("test-ids", 0);
        gc_ids = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2, 5), ((const int64_t[]){1, 4, 6, 0, 2, 3, 3, 5, 1, 0}));
        gc_model = m;
        pr_ctx *ctx = pr_ctx_new(1);
        char what[96];
        snprintf(what, sizeof what, "%s lm, %s", c.mixer, variants[v][0]);
        gradcheck_params(ctx, what, m->params, &(pr_example){.apply = apply_lm}, 10);
        pr_ctx_free(ctx);
        pr_arena_free(a);
        pr_model_free(m);
    }
}

/* ---- the LM loss fused with its head (fused_loss) equals the logits + cross_entropy ------ */
static pr_tensor *gc_targets;

static pr_tensor *apply_lm_loss(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)in, (void)ex;
    return pr_lm_loss(ctx, gc_model, gc_ids, gc_targets);
}

/* the loss, its parameters' grad norm, and copies of their grads in keep */
static double lm_loss_and_grads(pr_model *m, bool fused, pr_arena *keep, pr_tensor **grads, double *grad_norm)
{
    snprintf(m->cfg.fused_loss, sizeof m->cfg.fused_loss, "%s", fused ? "auto" : "false");   /* auto: fused on the CPU */
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *loss = pr_lm_loss(ctx, m, gc_ids, gc_targets);
    assert_string_equal(ctx->tape[loss->tape_pos].op->name, fused ? "linear_cross_entropy" : "cross_entropy");
    double v = pr_item(loss);
    pr_backward(ctx, loss);
    *grad_norm = pr_params_grad_norm(m->params);
    for (int i = 0; i < m->params->n; i++) grads[i] = pr_clone(keep, m->params->p[i].t->grad);
    pr_params_release_grads(m->params);
    pr_ctx_free(ctx);
    return v;
}

static void test_lm_fused_loss(void **state)
{
    (void)state;
    for (int tied = 0; tied < 2; tied++) {
        pr_config c = test_config(1, 6, 2, 4, 4);   /* gdn */
        c.vocab = 9, c.tie_embeddings = tied;
        pr_model *m = pr_model_new(&c, PR_F64, PR_CPU);
        pr_model_init(m);
        pr_arena *a = pr_arena_new("test-ids", 0);
        gc_ids = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2, 5), ((const int64_t[]){1, 4, 6, 0, 2, 3, 3, 5, 1, 0}));
        gc_targets = pr_from_host(a, PR_I32, PR_CPU, PR_DIMS(2, 5),
                                  ((const int32_t[]){4, 6, -100, 2, 3, 8, 5, 1, -100, 7}));
        gc_model = m;
        pr_tensor *want[64], *got_t[64];
        assert_true(m->params->n <= 64);
        double g_plain, g_fused, l_plain = lm_loss_and_grads(m, false, a, want, &g_plain);
        double l_fused = lm_loss_and_grads(m, true, a, got_t, &g_fused);
        print_message("lm loss (%s head): logits + cross_entropy %.17g, fused %.17g; grad norm %.17g, %.17g\n",
                      tied ? "tied" : "untied", l_plain, l_fused, g_plain, g_fused);
        assert_true(fabs(l_fused - l_plain) <= 1e-14 * fabs(l_plain));
        assert_true(fabs(g_fused - g_plain) <= 1e-14 * g_plain);
        for (int i = 0; i < m->params->n; i++) {
            double *got = malloc(sizeof(double) * (size_t)want[i]->numel), *ref = malloc(sizeof(double) * (size_t)want[i]->numel);
            pr_to_host_f64(got_t[i], got);
            pr_to_host_f64(want[i], ref);
            pr_assert_allclose(m->params->p[i].path, got, ref, want[i]->numel, 1e-12, 1e-15);
            free(got);
            free(ref);
        }
        pr_ctx *ctx = pr_ctx_new(1);   /* and the fused loss against finite differences */
        gradcheck_params(ctx, tied ? "fused lm loss, tied" : "fused lm loss, untied", m->params,
                         &(pr_example){.apply = apply_lm_loss}, 10);
        pr_ctx_free(ctx);
        pr_arena_free(a);
        pr_model_free(m);
    }
}

/* ---- prism L = 0 is gdn, in both forms ---------------------------------------------------- */
static void prism_l0_is_gdn(const char *form)
{
    pr_config cp = test_config(0, 16, 2, 8, 8), cg = cp;
    cp.prism_L = 0;
    snprintf(cp.prism_form, sizeof cp.prism_form, "%s", form);
    snprintf(cg.mixer, sizeof cg.mixer, "gdn");
    test_layer lp = test_layer_new(&cp, PR_F32, PR_CPU), lg = test_layer_new(&cg, PR_F32, PR_CPU);
    assert_int_equal(lp.params->n, lg.params->n);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = test_input(ctx->step, PR_F32, 2, 13, 16, 5);
    pr_tensor *yp = test_layer_forward(ctx, &lp, x, NULL), *yg = test_layer_forward(ctx, &lg, x, NULL);
    assert_memory_equal(yp->data, yg->data, pr_nbytes(yp));
    pr_rng r = pr_rng_init(9, 0);
    pr_tensor *w = pr_randn(ctx->step, PR_F32, PR_CPU, yp->ndim, yp->shape, &r);
    pr_backward_with(ctx, yp, w);
    pr_tensor *gx = pr_clone(ctx->step, x->grad);
    pr_zero_(x->grad);
    pr_backward_with(ctx, yg, w);
    assert_memory_equal(gx->data, x->grad->data, pr_nbytes(gx));
    for (int i = 0; i < lp.params->n; i++) {
        const pr_param *a = &lp.params->p[i], *b = &lg.params->p[i];
        assert_string_equal(a->path, b->path);
        assert_memory_equal(a->t->data, b->t->data, pr_nbytes(a->t));
        assert_non_null(a->t->grad);
        assert_memory_equal(a->t->grad->data, b->t->grad->data, pr_nbytes(a->t->grad));
    }
    pr_ctx_free(ctx);
    test_layer_free(&lp);
    test_layer_free(&lg);
}

static void test_prism_l0_is_gdn(void **state)
{
    (void)state;
    prism_l0_is_gdn("augmented");
    prism_l0_is_gdn("paper");
}

/* ---- whole sequence == prefix + token-by-token decoding ------------------------------- */
static void decode_case(const pr_config *c, int64_t T, int64_t prefix)
{
    pr_ctx *ctx = pr_ctx_new(1);
    test_layer t = test_layer_new(c, PR_F64, PR_CPU);
    const int64_t B = 2, D = c->d_model;
    pr_tensor *x = test_input(ctx->step, PR_F64, B, T, D, 11);
    pr_tensor *whole = test_layer_forward(ctx, &t, x, NULL);
    pr_layer_state st = {0};
    pr_tensor *parts[32];
    int n = 0;
    parts[n++] = test_layer_forward(ctx, &t, pr_slice(ctx, x, 1, 0, prefix), &st);
    for (int64_t i = prefix; i < T; i++) parts[n++] = test_layer_forward(ctx, &t, pr_slice(ctx, x, 1, i, 1), &st);
    /* concat takes at most PR_MAX_IN pieces: join them in groups */
    pr_tensor *joined = parts[0];
    for (int i = 1; i < n; i++) joined = pr_concat(ctx, 2, (pr_tensor *[]){joined, parts[i]}, 1);
    pr_assert_tensors_close(c->mixer, joined, whole, 1e-11, 1e-9);
    test_layer_free(&t);
    pr_ctx_free(ctx);
}

static void test_decode_equals_whole(void **state)
{
    (void)state;
    for (int i = 0; i < N_TEST_MIXERS; i++) {
        pr_config c = test_config(i, 6, 2, 4, 4);
        decode_case(&c, 11, 5);   /* ttt (mini-batch 4): the prefix leaves an open mini-batch */
        decode_case(&c, 9, 1);
        decode_case(&c, 8, 8);
    }
}

/* the LM: logits of a whole sequence == prefill + decoding, the state kept across resets */
static void lm_decode_with_resets(int mixer)
{
    pr_config c = test_config(mixer, 8, 2, 4, 4);
    c.n_layers = 2;
    pr_model *m = pr_model_new(&c, PR_F64, PR_CPU);
    pr_model_init(m);
    pr_ctx *ctx = pr_ctx_new(1);
    const int64_t B = 2, T = 7, prefix = 3;
    int64_t ids_host[14];
    for (int i = 0; i < B * T; i++) ids_host[i] = (i * 5 + 3) % c.vocab;
    pr_arena *keep = pr_arena_new("test-keep", 0);
    pr_tensor *ids = pr_from_host(keep, PR_I64, PR_CPU, PR_DIMS(B, T), ids_host);
    pr_tensor *whole = pr_clone(keep, pr_lm_logits(ctx, m, ids, NULL));
    pr_step_reset(ctx);

    pr_model_state *st = pr_model_state_new(m);
    pr_arena *arenas[2] = {pr_arena_new("state-a", 0), pr_arena_new("state-b", 0)};
    double *got = malloc(sizeof(double) * (size_t)whole->numel), *ref = malloc(sizeof(double) * (size_t)whole->numel);
    pr_to_host_f64(whole, ref);
    int64_t V = c.vocab;
    for (int64_t t0 = 0, step = 0; t0 < T; step++) {
        int64_t len = t0 == 0 ? prefix : 1;
        int64_t piece[6];
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < len; j++) piece[b * len + j] = ids_host[b * T + t0 + j];
        pr_tensor *pid = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(B, len), piece);
        pr_tensor *lg = pr_lm_logits(ctx, m, pid, st);
        double *h = malloc(sizeof(double) * (size_t)lg->numel);
        pr_to_host_f64(lg, h);
        for (int64_t b = 0; b < B; b++) memcpy(got + (b * T + t0) * V, h + b * len * V, sizeof(double) * (size_t)(len * V));
        free(h);
        pr_arena *a = arenas[step % 2];
        pr_arena_reset(a);
        pr_model_state_keep(st, a);
        pr_step_reset(ctx);
        t0 += len;
    }
    pr_assert_allclose("lm logits", got, ref, whole->numel, 1e-11, 1e-9);
    free(got);
    free(ref);
    pr_model_state_free(st);
    pr_arena_free(arenas[0]);
    pr_arena_free(arenas[1]);
    pr_arena_free(keep);
    pr_ctx_free(ctx);
    pr_model_free(m);
}

static void test_lm_decode_with_resets(void **state)
{
    (void)state;
    lm_decode_with_resets(0);                  /* prism, form augmented */
    lm_decode_with_resets(TEST_PRISM_PAPER);   /* prism, form paper */
}

/* ---- training: a few SGD steps lower the loss ------------------------------------------ */
static double sgd_steps(pr_model *m, pr_tensor *(*loss_fn)(pr_ctx *, const pr_model *, pr_tensor *, pr_tensor *),
                        pr_tensor *in, pr_tensor *target, int steps, double lr, double *first)
{
    pr_ctx *ctx = pr_ctx_new(1);
    double loss = 0;
    for (int s = 0; s < steps; s++) {
        pr_params_zero_grads(m->params);
        pr_tensor *l = loss_fn(ctx, m, in, target);
        loss = pr_item(l);
        assert_false(isnan(loss));
        if (s == 0) *first = loss;
        pr_backward(ctx, l);
        assert_true(isfinite(pr_params_grad_norm(m->params)));
        for (int i = 0; i < m->params->n; i++) {
            pr_tensor *p = m->params->p[i].t;
            if (!p->grad) continue;
            for (int64_t j = 0; j < p->numel; j++) pr_set(p, j, pr_get(p, j) - lr * pr_get(p->grad, j));
        }
        pr_step_reset(ctx);
    }
    pr_params_release_grads(m->params);   /* they die with ctx; the model lives on */
    pr_ctx_free(ctx);
    return loss;
}

static void test_lm_trains(void **state)
{
    (void)state;
    for (int i = 0; i < N_TEST_MIXERS; i++) {
        pr_config c = test_config(i, 6, 2, 4, 4);
        c.init_std = 0.1;
        pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
        pr_model_init(m);
        pr_arena *a = pr_arena_new("test-data", 0);
        const int64_t B = 2, T = 9;
        int32_t ids[18], tg[18];
        for (int j = 0; j < B * T; j++) ids[j] = (j * 7 + 1) % c.vocab, tg[j] = j % 5 == 4 ? -100 : (ids[j] + 1) % c.vocab;
        pr_tensor *in = pr_from_host(a, PR_I32, PR_CPU, PR_DIMS(B, T), ids);
        pr_tensor *target = pr_from_host(a, PR_I32, PR_CPU, PR_DIMS(B, T), tg);
        double first, last = sgd_steps(m, pr_lm_loss, in, target, 6, 0.5, &first);
        if (!(last < first)) fprintf(stderr, "  %s: loss %g -> %g\n", c.mixer, first, last);
        assert_true(last < first);
        pr_arena_free(a);
        pr_model_free(m);
    }
}

static pr_tensor *neg_batch;
static pr_tensor *rec_sampled(pr_ctx *ctx, const pr_model *m, pr_tensor *in, pr_tensor *target)
{
    return pr_rec_loss_sampled(ctx, m, in, target, neg_batch);
}

static void test_rec_trains(void **state)
{
    (void)state;
    pr_config c = test_config(0, 8, 2, 4, 4);
    c.init_std = 0.1;
    c.task = PR_HEAD_REC;
    c.rec_n_items = 13;
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    assert_int_equal(m->embed->shape[0], 14);
    assert_null(m->lm_head);
    pr_model_init(m);
    pr_arena *a = pr_arena_new("test-data", 0);
    int64_t items[3 * 5] = {0, 0, 3, 4, 5, 1, 2, 3, 4, 5, 0, 7, 8, 9, 10}, next[3] = {6, 6, 11};
    pr_tensor *in = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(3, 5), items);
    pr_tensor *target = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(3), next);
    double first, last = sgd_steps(m, pr_rec_loss, in, target, 6, 0.5, &first);
    assert_true(last < first);

    /* sampled negatives: the loss by hand from the full scores, then training */
    int64_t neg_ids[3 * 2] = {1, 2, 12, 13, 5, 4};
    pr_tensor *neg = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(3, 2), neg_ids);
    pr_ctx *ctx = pr_ctx_new(1);
    double got = pr_item(pr_rec_loss_sampled(ctx, m, in, target, neg)), want = 0;
    pr_tensor *s = pr_rec_scores(ctx, m, in);
    for (int b = 0; b < 3; b++) {
        want += log1p(exp(-pr_get(s, b * 14 + next[b]))) / 3;
        for (int j = 0; j < 2; j++) want += log1p(exp(pr_get(s, b * 14 + neg_ids[b * 2 + j]))) / 6;
    }
    pr_assert_allclose("sampled loss", &got, &want, 1, 1e-5, 1e-5);
    pr_params_release_grads(m->params);
    pr_ctx_free(ctx);
    neg_batch = neg;
    last = sgd_steps(m, rec_sampled, in, target, 6, 0.5, &first);
    assert_true(last < first);
    pr_arena_free(a);
    pr_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_layers),
        cmocka_unit_test(test_gradcheck_prism_switches),
        cmocka_unit_test(test_gradcheck_lm),
        cmocka_unit_test(test_lm_fused_loss),
        cmocka_unit_test(test_prism_l0_is_gdn),
        cmocka_unit_test(test_decode_equals_whole),
        cmocka_unit_test(test_lm_decode_with_resets),
        cmocka_unit_test(test_lm_trains),
        cmocka_unit_test(test_rec_trains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
