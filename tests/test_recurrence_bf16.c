/* tests/test_recurrence_bf16.c: the CPU reference of pr_recurrence on bf16
 * data. q, k, v, beta, kx, vx and o are bf16; g, h0 and ht f32. The CPU
 * reads bf16 into double, computes, and rounds o and every grad once, so a
 * bf16 run must equal, bit for bit, the f64 run on the same (bf16-valued)
 * inputs and seeds with its results rounded: to bf16 for o and the grads of
 * bf16 inputs, to f32 for ht and the grads of g and h0. Every rule, both
 * forms, L = 3, an initial state, and packed sequences. */
#include "tests/test_recurrence_util.h"

/* forward, then backward seeded with dout (o) and dht (ht); the seeds are
 * converted to the outputs' dtypes. Returns o and ht; grads stay on in[]. */
static void run(pr_ctx *ctx, pr_rule rule, int chunk, pr_tensor *const *in, pr_tensor *cu, const pr_tensor *dout,
                const pr_tensor *dht, pr_tensor **o, pr_tensor **ht)
{
    const pr_recurrence_opts opt = {.rule = rule, .chunk = chunk};
    *o = pr_recurrence(ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], cu, ht);
    pr_tensor *outs[2] = {*o, *ht};
    const pr_tensor *seeds[2] = {dout, dht};
    pr_backward_many(ctx, 2, outs, seeds);
}

/* got equals ref rounded to got's dtype, element for element */
static void assert_rounded(const char *what, const pr_tensor *got, const pr_tensor *ref, pr_ctx *ctx)
{
    assert_int_equal(got->numel, ref->numel);
    const pr_tensor *r = pr_to(ctx->step, ref, got->dtype, PR_CPU);
    for (int64_t i = 0; i < got->numel; i++)
        if (pr_get(got, i) != pr_get(r, i))
            fail_msg("%s[%lld]: %.9g, expected %.9g (the f64 result %.12g rounded)", what, (long long)i,
                     pr_get(got, i), pr_get(r, i), pr_get(ref, (int64_t)i));
}

static void check_rule(pr_ctx *ctx, pr_rule rule, int chunk, int64_t B, int64_t T, const int64_t *cu_off, int ncu)
{
    const int64_t H = 2, K = 6, V = 5, L = 3, N = cu_off ? ncu - 1 : B;
    pr_rng rng = pr_rng_init(5 + (uint64_t)rule, 0);
    pr_recurrence_inputs bi = pr_recurrence_random(ctx, &rng, PR_BF16, rule, B, T, H, K, V, L, false);
    bi.h0 = pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(N, H, K, V), &rng);
    pr_requires_grad_(bi.h0, true);
    assert_int_equal(bi.q->dtype, PR_BF16);
    if (bi.g) assert_int_equal(bi.g->dtype, PR_F32);
    pr_tensor *in[REC_NIN], *ref[REC_NIN];
    rec_in_array(&bi, in);
    for (int i = 0; i < REC_NIN; i++) {
        ref[i] = in[i] ? pr_to(ctx->step, in[i], PR_F64, PR_CPU) : NULL;
        if (ref[i]) pr_requires_grad_(ref[i], true);
    }
    pr_tensor *cu = cu_off ? pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(ncu), cu_off) : NULL;
    /* the seeds as the bf16 run sees them: dout in bf16, dht in f32 */
    pr_tensor *dout = pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(B, T, H, V), &rng);
    dout = pr_to(ctx->step, dout, PR_BF16, PR_CPU);
    pr_tensor *dht = pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(N, H, K, V), &rng);

    pr_tensor *o, *ht, *o64, *ht64;
    run(ctx, rule, chunk, in, cu, dout, dht, &o, &ht);
    run(ctx, rule, chunk, ref, cu, dout, dht, &o64, &ht64);
    assert_int_equal(o->dtype, PR_BF16);
    assert_int_equal(ht->dtype, PR_F32);
    assert_rounded("o", o, o64, ctx);
    assert_rounded("ht", ht, ht64, ctx);
    for (int i = 0; i < REC_NIN; i++) {
        if (!in[i]) continue;
        assert_int_equal(in[i]->grad->dtype, in[i]->dtype);
        char what[64];
        snprintf(what, sizeof what, "%s chunk %d: d%s", pr_rule_name(rule), chunk, rec_in_names(i));
        assert_rounded(what, in[i]->grad, ref[i]->grad, ctx);
    }
    pr_step_reset(ctx);
}

static void test_every_rule_both_forms(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    for (int r = 0; r < PR_NRULES; r++)
        for (int chunk = 0; chunk <= 4; chunk += 4) check_rule(ctx, (pr_rule)r, chunk, 2, 11, NULL, 0);
    pr_ctx_free(ctx);
}

static void test_packed(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    const int64_t cu[4] = {0, 1, 6, 13};
    for (int chunk = 0; chunk <= 4; chunk += 4) check_rule(ctx, PR_RULE_PRISM_CORE, chunk, 1, 13, cu, 4);
    pr_ctx_free(ctx);
}

/* bf16 data keeps g and h0 in f32; the message says so */
static void test_dtype_checks(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(1, 0);
    pr_recurrence_inputs a = pr_recurrence_random(ctx, &rng, PR_BF16, PR_RULE_GDN, 1, 4, 2, 3, 2, 0, true);
    pr_tensor *g16 = pr_to(ctx->step, a.g, PR_BF16, PR_CPU), *v32 = pr_to(ctx->step, a.v, PR_F32, PR_CPU);
    const pr_recurrence_opts o = {.rule = PR_RULE_GDN};
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, g16, a.beta, NULL, NULL, NULL, NULL, NULL),
                    "g is bf16, expected f32 (q is bf16: g and h0 stay f32)");
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, v32, a.g, a.beta, NULL, NULL, NULL, NULL, NULL),
                    "v is f32, expected bf16");
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, a.beta, NULL, NULL, a.v, NULL, NULL),
                    "h0 is bf16, expected f32");
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_rule_both_forms),
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_dtype_checks),
    };
    return cmocka_run_group_tests_name("recurrence_bf16", tests, NULL, NULL);
}
