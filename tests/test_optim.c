/* tests/test_optim.c: the optimizers against hand-computed updates.
 *
 * - AdamW: two steps (bias corrections of step 1 and 2) on a decayed and an
 *   undecayed parameter, against the formula worked by hand in double;
 * - the decay mask follows the registry, and decay_all overrides it;
 * - SGD with momentum and coupled decay, two steps;
 * - clipping: the scale, the optimizer's grad norm, and an update with it folded in;
 * - schedules: warmup, cosine and constant values at chosen steps;
 * - state: save, restore into a fresh optimizer, the next step is identical.
 */
#include <unistd.h>

#include "tests/pr_test.h"
#include "optim/optim.h"

static const double p0[3] = {0.5, -1.0, 2.0}, g1[3] = {0.1, -0.2, 0.3}, g2[3] = {-0.4, 0.05, 0.3};

/* "w" (decayed) and "norm.w" (not), both f64 [3] starting at p0 */
static pr_params *two_params(void)
{
    pr_params *r = pr_params_new(PR_F64, PR_CPU);
    pr_init zero = {PR_INIT_CONST, 0, 0};
    pr_param_new(r, "w", zero, true, 1, (int64_t[]){3});
    pr_param_new(r, "norm.w", zero, false, 1, (int64_t[]){3});
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < 3; j++) pr_set(r->p[i].t, j, p0[j]);
    return r;
}

static void set_grads(pr_ctx *ctx, pr_params *r, const double *g)
{
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < 3; j++) pr_set(pr_grad_of(ctx, r->p[i].t), j, g[j]);
}

static void expect_values(const pr_tensor *t, const double *want, double atol)
{
    double got[3];
    pr_to_host_f64(t, got);
    pr_assert_allclose(t->name ? t->name : "param", got, want, 3, atol, 0);
}

static pr_optim_opts adamw_opts(void)
{
    pr_optim_opts o = pr_optim_adamw_defaults();
    o.weight_decay = 0.5;
    return o;
}

static void test_adamw_by_hand(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_params *r = two_params();
    pr_optim_opts opts = adamw_opts();
    pr_optim *o = pr_optim_new(r, &opts);
    set_grads(ctx, r, g1);
    pr_optim_step(ctx, o, 0.1, 1.0);
    set_grads(ctx, r, g2);
    pr_optim_step(ctx, o, 0.1, 1.0);
    /* by hand: p -= lr wd p; m, v moments; p -= lr mhat / (sqrt(vhat) + eps), t = 1 then 2 */
    const double decayed[3] = {0.41220035698512836, -0.76055319085044681, 1.6100000065000004};
    const double plain[3] = {0.45595035748512835, -0.85305319110044686, 1.8000000066666673};
    expect_values(r->p[0].t, decayed, 1e-14);
    expect_values(r->p[1].t, plain, 1e-14);
    assert_int_equal(o->t, 2);
    pr_optim_free(o);

    /* decay_all: the norm weight decays as well */
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < 3; j++) pr_set(r->p[i].t, j, p0[j]);
    opts.decay_all = true;
    o = pr_optim_new(r, &opts);
    assert_true(pr_optim_decays(o, 1));
    set_grads(ctx, r, g1);
    pr_optim_step(ctx, o, 0.1, 1.0);
    set_grads(ctx, r, g2);
    pr_optim_step(ctx, o, 0.1, 1.0);
    expect_values(r->p[1].t, decayed, 1e-14);
    pr_optim_free(o);
    pr_params_free(r);
    pr_ctx_free(ctx);
}

static void test_decay_mask_of_a_model(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "probe", &err), 0);
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    pr_optim_opts opts = adamw_opts();
    pr_optim *o = pr_optim_new(m->params, &opts);
    int decayed = 0;
    for (int i = 0; i < m->params->n; i++) {
        const char *path = m->params->p[i].path;
        /* in this model: the matrices decay, vectors (norms, biases, the decay's bias a_bias) and the embedding not */
        bool want = m->params->p[i].t->ndim >= 2 && strcmp(path, "embed") != 0;
        if (want != pr_optim_decays(o, i)) fail_msg("%s: decay %d, want %d", path, pr_optim_decays(o, i), want);
        decayed += pr_optim_decays(o, i);
    }
    assert_true(decayed > 0);
    assert_false(pr_optim_decays(o, (int)(pr_params_find(m->params, "embed") - m->params->p)));
    assert_false(pr_optim_decays(o, (int)(pr_params_find(m->params, "layers.0.mixer.a_bias") - m->params->p)));
    assert_true(pr_optim_decays(o, (int)(pr_params_find(m->params, "layers.0.mixer.q_proj") - m->params->p)));
    pr_optim_free(o);
    pr_model_free(m);
}

static void test_sgd_momentum(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_params *r = two_params();
    pr_optim_opts opts = {.kind = PR_OPTIM_SGD, .momentum = 0.9, .weight_decay = 0.5};
    pr_optim *o = pr_optim_new(r, &opts);
    set_grads(ctx, r, g1);
    pr_optim_step(ctx, o, 0.1, 1.0);
    set_grads(ctx, r, g2);
    pr_optim_step(ctx, o, 0.1, 1.0);
    /* g += wd p; m = 0.9 m + g; p -= lr m */
    const double want[3] = {0.45025000000000004, -0.82550000000000001, 1.6295000000000002};
    expect_values(r->p[0].t, want, 1e-15);
    pr_optim_free(o);
    pr_params_free(r);
    pr_ctx_free(ctx);
}

static void test_clipping(void **state)
{
    (void)state;
    assert_true(fabs(pr_clip_scale(10, 5) - 5 / (10 + 1e-6)) < 1e-15);
    assert_true(pr_clip_scale(3, 5) == 1.0);
    assert_true(pr_clip_scale(1e9, 0) == 1.0);
    /* grads (0.3, 0.4, 0) and (0, 0, 1.2): global norm 1.3; clip at 0.65 halves them */
    pr_ctx *ctx = pr_ctx_new(1);
    pr_params *r = two_params();
    const double ga[3] = {0.3, 0.4, 0}, gb[3] = {0, 0, 1.2};
    for (int j = 0; j < 3; j++) {
        pr_set(pr_grad_of(ctx, r->p[0].t), j, ga[j]);
        pr_set(pr_grad_of(ctx, r->p[1].t), j, gb[j]);
    }
    double norm = pr_params_grad_norm(r);
    assert_true(fabs(norm - 1.3) < 1e-12);
    pr_optim_opts opts = {.kind = PR_OPTIM_SGD};
    pr_optim *o = pr_optim_new(r, &opts);
    assert_true(pr_optim_grad_norm(ctx, o) == norm);   /* the trainer's call: the same sum on the CPU */
    pr_optim_step(ctx, o, 1.0, pr_clip_scale(norm, 0.65));
    const double wa[3] = {0.5 - 0.15, -1.0 - 0.2, 2.0}, wb[3] = {0.5, -1.0, 2.0 - 0.6};
    expect_values(r->p[0].t, wa, 1e-6);
    expect_values(r->p[1].t, wb, 1e-6);
    pr_optim_free(o);
    pr_params_free(r);
    pr_ctx_free(ctx);
}

static void test_schedules(void **state)
{
    (void)state;
    pr_schedule s = {.lr = 1.0, .min_lr = 0.1, .warmup = 4, .total = 12, .cosine = true};
    const int64_t steps[] = {0, 1, 3, 4, 8, 12, 20};
    const double cosine[] = {0.25, 0.5, 1.0, 1.0, 0.55, 0.1, 0.1};
    for (int i = 0; i < 7; i++)
        if (fabs(pr_schedule_lr(&s, steps[i]) - cosine[i]) > 1e-12)
            fail_msg("cosine lr at step %lld: %g, want %g", (long long)steps[i], pr_schedule_lr(&s, steps[i]),
                     cosine[i]);
    s.cosine = false;
    assert_true(pr_schedule_lr(&s, 1) == 0.5);
    assert_true(pr_schedule_lr(&s, 11) == 1.0);
    s.warmup = 0;
    assert_true(pr_schedule_lr(&s, 0) == 1.0);
}

static void test_state_roundtrip(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_params *a = two_params(), *b = two_params();
    pr_optim_opts opts = adamw_opts();
    pr_optim *oa = pr_optim_new(a, &opts), *ob = pr_optim_new(b, &opts);
    set_grads(ctx, a, g1);
    pr_optim_step(ctx, oa, 0.1, 1.0);
    char path[64];
    snprintf(path, sizeof path, "/tmp/prism_optim_%d.safetensors", (int)getpid());
    pr_err err;
    const char *k[] = {"train.step"}, *v[] = {"1"};
    assert_int_equal(pr_optim_save(oa, path, 1, k, v, &err), 0);
    pr_arena *ar = pr_arena_new("read", 0);
    pr_safetensors st;
    assert_int_equal(pr_safetensors_read(path, ar, &st, &err), 0);
    assert_non_null(pr_safetensors_get(&st, "w.exp_avg_sq"));
    assert_string_equal(pr_safetensors_meta(&st, "train.step"), "1");
    assert_int_equal(pr_optim_restore(ob, &st, path, &err), 0);
    for (int i = 0; i < a->n; i++) pr_copy_(b->p[i].t, a->p[i].t);
    set_grads(ctx, a, g2);
    set_grads(ctx, b, g2);
    pr_optim_step(ctx, oa, 0.1, 1.0);
    pr_optim_step(ctx, ob, 0.1, 1.0);
    for (int i = 0; i < a->n; i++) assert_memory_equal(a->p[i].t->data, b->p[i].t->data, pr_nbytes(a->p[i].t));
    /* an SGD optimizer cannot restore an AdamW file: the missing tensor is named */
    pr_optim_opts sgd = {.kind = PR_OPTIM_SGD};
    pr_optim *os = pr_optim_new(b, &sgd);
    assert_int_equal(pr_optim_restore(os, &st, path, &err), -1);
    assert_non_null(strstr(err.msg, "w.momentum missing"));
    /* Issue 45: a huge optim.t overflowed t++ (UBSan); a bad one is named */
    static const char *const bad_t[] = {"9223372036854775807", "9007199254740993", "-1", "12abc", "1e3", "", " 5"};
    for (int i = 0; i < st.n_meta; i++) {
        if (strcmp(st.meta_keys[i], "optim.t") != 0) continue;
        for (size_t j = 0; j < sizeof bad_t / sizeof bad_t[0]; j++) {
            st.meta_values[i] = (char *)bad_t[j];
            assert_int_equal(pr_optim_restore(ob, &st, path, &err), -1);
            if (!strstr(err.msg, "optim.t") || !strstr(err.msg, bad_t[j])) fail_msg("message: %s", err.msg);
        }
        st.meta_values[i] = (char *)"9007199254740992";
        assert_int_equal(pr_optim_restore(ob, &st, path, &err), 0);
        assert_true(ob->t == (int64_t)1 << 53);
    }
    unlink(path);
    pr_arena_free(ar);
    pr_optim_free(os);
    pr_optim_free(oa);
    pr_optim_free(ob);
    pr_params_free(a);
    pr_params_free(b);
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_by_hand),     cmocka_unit_test(test_decay_mask_of_a_model),
        cmocka_unit_test(test_sgd_momentum),      cmocka_unit_test(test_clipping),
        cmocka_unit_test(test_schedules),         cmocka_unit_test(test_state_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
