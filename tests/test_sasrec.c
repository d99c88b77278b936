/* tests/test_sasrec.c: SASRec (BASELINES.md 6.2) as the rec model with block = sasrec.
 *
 * - the `sasrec` preset has the paper's parameters: scaled item embeddings,
 *   learned positions, per block two LayerNorms, MHA with in/out biases and a
 *   [d,d] ReLU FFN with biases, a final LayerNorm; the count by formula;
 * - float64 gradcheck of the scores in every parameter;
 * - padded positions are zeroed: the padding item's embedding cannot reach the scores;
 * - dropout acts only while training;
 * - a few SGD steps on sampled negatives lower the loss;
 * - block = sasrec with an LM task is refused, naming the fields.
 */
#include "tests/test_models_util.h"

#include <math.h>
#include <string.h>

static pr_config tiny(void)
{
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "sasrec", &err), 0);
    c.d_model = 4, c.n_heads = 2, c.seq_len = 6, c.rec_n_items = 9, c.init_std = 0.5, c.seed = 3, c.dropout = 0;
    assert_int_equal(pr_config_check(&c, &err), 0);
    return c;
}

static const int64_t items[2 * 5] = {0, 0, 3, 4, 5, 1, 2, 3, 4, 5}, next[2] = {6, 7};

static void test_preset_parameters(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "sasrec", &err), 0);
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    const int64_t d = 50, n = c.rec_n_items, maxlen = 200;
    const char *paths[] = {"embed", "pos_embed", "layers.0.norm1.b", "layers.1.mixer.q_bias", "layers.1.mixer.o_bias",
                           "layers.0.norm2.w", "layers.0.mlp.w_up", "layers.0.mlp.b_down", "norm_f.b"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (!pr_params_find(m->params, paths[i])) fail_msg("no parameter '%s'", paths[i]);
    assert_int_equal(pr_params_find(m->params, "layers.0.mlp.w_up")->t->shape[1], d);
    assert_int_equal(pr_params_find(m->params, "pos_embed")->t->shape[0], maxlen);
    int64_t block = 2 * 2 * d + 4 * (d * d + d) + 2 * (d * d + d);
    assert_int_equal(pr_params_count(m->params), (n + 1) * d + maxlen * d + 2 * block + 2 * d);
    assert_null(m->lm_head);
    assert_true(c.norm_eps == 1e-8);
    pr_model_free(m);
}

static const pr_model *gc_model;
static pr_tensor *gc_items;

static pr_tensor *apply_scores(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)in, (void)ex;
    return pr_rec_scores(ctx, gc_model, gc_items);
}

static void test_gradcheck(void **state)
{
    (void)state;
    pr_config c = tiny();
    pr_model *m = pr_model_new(&c, PR_F64, PR_CPU);
    pr_model_init(m);
    pr_arena *a = pr_arena_new("test-items", 0);
    gc_items = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2, 5), items);
    gc_model = m;
    pr_ctx *ctx = pr_ctx_new(1);
    gradcheck_params(ctx, "sasrec", m->params, &(pr_example){.apply = apply_scores}, 8);
    pr_ctx_free(ctx);
    pr_arena_free(a);
    pr_model_free(m);
}

static void test_pads_are_zeroed(void **state)
{
    (void)state;
    pr_config c = tiny();
    pr_model *m = pr_model_new(&c, PR_F64, PR_CPU);
    pr_model_init(m);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *in = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(2, 5), items);
    pr_tensor *before = pr_clone(ctx->step, pr_rec_scores(ctx, m, in));
    for (int64_t j = 0; j < c.d_model; j++) pr_set(m->embed, j, pr_get(m->embed, j) + 3.0);   /* row 0 */
    pr_tensor *after = pr_rec_scores(ctx, m, in);
    /* the scores against item 0 move with its embedding; every other score stays */
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 1; i <= c.rec_n_items; i++) {
            int64_t k = b * (c.rec_n_items + 1) + i;
            assert_true(fabs(pr_get(after, k) - pr_get(before, k)) < 1e-12);
        }
    pr_ctx_free(ctx);
    pr_model_free(m);
}

static void test_dropout_only_while_training(void **state)
{
    (void)state;
    pr_config c = tiny();
    c.dropout = 0.5;
    pr_model *m = pr_model_new(&c, PR_F64, PR_CPU);
    pr_model_init(m);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *in = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(2, 5), items);
    ctx->training = false;
    pr_tensor *eval1 = pr_clone(ctx->step, pr_rec_scores(ctx, m, in));
    pr_tensor *eval2 = pr_rec_scores(ctx, m, in);
    assert_memory_equal(eval1->data, eval2->data, pr_nbytes(eval1));
    ctx->training = true;
    pr_tensor *train = pr_rec_scores(ctx, m, in);
    double diff = 0;
    for (int64_t k = 0; k < train->numel; k++) diff += fabs(pr_get(train, k) - pr_get(eval1, k));
    assert_true(diff > 1e-6);
    pr_ctx_free(ctx);
    pr_model_free(m);
}

static void test_trains_on_sampled_negatives(void **state)
{
    (void)state;
    pr_config c = tiny();
    c.init_std = 0.1;
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    pr_model_init(m);
    pr_arena *a = pr_arena_new("test-data", 0);
    const int64_t negs[2] = {1, 2};
    pr_tensor *in = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2, 5), items);
    pr_tensor *target = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2), next);
    pr_tensor *neg = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2, 1), negs);
    pr_ctx *ctx = pr_ctx_new(1);
    double first = 0, loss = 0;
    for (int s = 0; s < 8; s++) {
        pr_params_zero_grads(m->params);
        pr_tensor *l = pr_rec_loss_sampled(ctx, m, in, target, neg);
        loss = pr_item(l);
        assert_true(isfinite(loss));
        if (s == 0) first = loss;
        pr_backward(ctx, l);
        for (int i = 0; i < m->params->n; i++) {
            pr_tensor *p = m->params->p[i].t;
            for (int64_t j = 0; p->grad && j < p->numel; j++) pr_set(p, j, pr_get(p, j) - 0.2 * pr_get(p->grad, j));
        }
        pr_step_reset(ctx);
    }
    if (!(loss < first)) fprintf(stderr, "  sasrec: loss %g -> %g\n", first, loss);
    assert_true(loss < first);
    pr_params_release_grads(m->params);
    pr_ctx_free(ctx);
    pr_arena_free(a);
    pr_model_free(m);
}

static void test_lm_task_refused(void **state)
{
    (void)state;
    pr_config c = tiny();
    pr_err err;
    assert_int_equal(pr_config_set(&c, "task=lm", &err), 0);
    assert_int_equal(pr_config_check(&c, &err), -1);
    assert_non_null(strstr(err.msg, "block sasrec needs task rec"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_parameters),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_pads_are_zeroed),
        cmocka_unit_test(test_dropout_only_while_training),
        cmocka_unit_test(test_trains_on_sampled_negatives),
        cmocka_unit_test(test_lm_task_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
