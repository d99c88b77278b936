/* tests/test_recurrence.c: the recurrence family on the CPU.
 *
 * - the reference file of tests/data, every rule, f64 and f32, per-token and chunked
 *   forms (chunks of 64 and of 16, so chunks cut through T = 50);
 * - the chunked form equals the per-token one to 1e-12 in f64 at T = 131,
 *   K != V, L = 0, 1, 3 and many chunk sizes, forward and backward (each
 *   form has its own backward);
 * - float64 central differences of every input's gradient, through both o
 *   and ht, at T = 1 and T not a multiple of the chunk;
 * - prism_core with L = 0 is gdn; misuse is fatal with a clear message.
 * Packing (cu_seqlens) and the state contract are in test_recurrence_state.c.
 */
#include "tests/test_recurrence_util.h"

#ifdef PRISM_HAVE_OPENMP
#include <omp.h>
#endif

/* ---- golden vectors ------------------------------------------------------------------ */

/* every rule of the table against its reference file: gla's is its own */
static void golden_case(pr_dtype dt, int chunk)
{
    const double tol = dt == PR_F64 ? 1e-10 : 1e-4;
    pr_arena *a = pr_arena_new("golden", 0);
    pr_safetensors files[2];
    const char *paths[2] = {pr_test_golden_path(), pr_test_gla_golden_path()};
    pr_err err;
    for (int f = 0; f < 2; f++)
        if (pr_safetensors_read(paths[f], a, &files[f], &err) != 0) fail_msg("%s", err.msg);
    pr_ctx *ctx = pr_ctx_new(0);
    int rules = 0;
    for (int r = 0; r < PR_NRULES; r++) {
        const char *rn = pr_rule_name((pr_rule)r);
        const pr_safetensors *st = &files[pr_rule_g_per_key((pr_rule)r) ? 1 : 0];
        char name[64];
        pr_tensor *in[REC_NIN];
        for (int i = 0; i < REC_NIN; i++) {
            snprintf(name, sizeof name, "%s.%s", rn, pr_rule_input_name((pr_rule)r, (pr_rec_input)i));
            pr_tensor *t = pr_safetensors_get(st, name);
            in[i] = t ? pr_to(ctx->step, t, dt, PR_CPU) : NULL;
            if (in[i]) pr_requires_grad_(in[i], true);
        }
        assert_non_null(in[0]);
        rules++;
#define REF(x) (snprintf(name, sizeof name, "%s.%s", rn, x), pr_safetensors_get(st, name))
        double *dout = rec_host(REF("do"), NULL), *dht = rec_host(REF("dht"), NULL);
        const pr_recurrence_opts opt = {.rule = (pr_rule)r, .chunk = chunk, .scale = pr_item(REF("scale"))};
        rec_out got = rec_run_opts(ctx, &opt, in, NULL, dout, dht), ref = {0};
        ref.o = rec_host(REF("o"), &ref.n_o);
        ref.ht = rec_host(REF("ht"), &ref.n_ht);
        for (int i = 0; i < REC_NIN; i++) {
            char dn[16];
            snprintf(dn, sizeof dn, "d%s", pr_rule_input_name((pr_rule)r, (pr_rec_input)i));
            if (in[i]) ref.d[i] = rec_host(REF(dn), &ref.n[i]);
        }
#undef REF
        char what[96];
        snprintf(what, sizeof what, "golden %s %s chunk %d", rn, pr_dtype_name(dt), chunk);
        rec_assert_same(what, &got, &ref, tol);
        rec_out_free(&got);
        rec_out_free(&ref);
        free(dout);
        free(dht);
        pr_step_reset(ctx);
    }
    assert_int_equal(rules, PR_NRULES);
    pr_ctx_free(ctx);
    pr_arena_free(a);
}

static void test_golden_f64_token(void **s) { (void)s; golden_case(PR_F64, 0); }
static void test_golden_f64_chunk64(void **s) { (void)s; golden_case(PR_F64, 64); }
static void test_golden_f64_chunk16(void **s) { (void)s; golden_case(PR_F64, 16); }
static void test_golden_f32_token(void **s) { (void)s; golden_case(PR_F32, 0); }
static void test_golden_f32_chunk64(void **s) { (void)s; golden_case(PR_F32, 64); }
static void test_golden_f32_chunk16(void **s) { (void)s; golden_case(PR_F32, 16); }

/* ---- chunked == per-token ---------------------------------------------------------------- */

/* H = 1 reads a chunk's rows (and extras) in place, H = 2 copies the extras;
 * without state, no h0 and ht outside the loss (the first chunk reads no
 * state, the last gets no state gradient) */
static void chunked_case(pr_rule rule, int64_t L, int64_t H, bool state)
{
    const int64_t B = 2, T = 131, K = 12, V = 7;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(42 + (uint64_t)rule, (uint32_t)L);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, rule, B, T, H, K, V, L, state);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(1, B * T * H * V), *dht = state ? rec_randn(2, B * H * K * V) : NULL;
    rec_out ref = rec_run(ctx, rule, 0, in, NULL, dout, dht);
    const int chunks[] = {64, 16, 7, 1, 65, 131, 200}   /* 65: a one-token last chunk */;
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        rec_out got = rec_run(ctx, rule, chunks[c], in, NULL, dout, dht);
        char what[96];
        snprintf(what, sizeof what, "%s L=%lld H=%lld%s chunk %d vs per-token", pr_rule_name(rule), (long long)L,
                 (long long)H, state ? "" : " no state", chunks[c]);
        rec_assert_same(what, &got, &ref, 1e-12);
        rec_out_free(&got);
    }
    rec_out_free(&ref);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

static void test_chunked_equals_recurrent(void **s)
{
    (void)s;
    for (int r = 0; r < PR_NRULES; r++)
        for (int64_t L = 0; L <= (pr_rule_has_extra((pr_rule)r) ? 3 : 0); L++) {
            chunked_case((pr_rule)r, L, 2, true);
            if (L == 0 || L == 3) chunked_case((pr_rule)r, L, 1, false);
        }
}

/* The (sequence, head) pairs on two OpenMP threads, the gemm asked for two
 * threads too (pr_blas_serial_enter holds it to one inside the loop): the
 * same results as one thread, each pair being computed alone either way. */
static void test_chunked_threaded(void **s)
{
    (void)s;
#ifdef PRISM_HAVE_OPENMP
    const int64_t B = 2, T = 64, H = 2, K = 16, V = 16, L = 2;   /* B T H K V >= 2^16: the loop runs threaded */
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(7, 0);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_PRISM_CORE, B, T, H, K, V, L, true);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(1, B * T * H * V), *dht = rec_randn(2, B * H * K * V);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    rec_out one = rec_run(ctx, PR_RULE_PRISM_CORE, 32, in, NULL, dout, dht);
    omp_set_num_threads(2);
    pr_blas_set_threads(2);
    rec_out two = rec_run(ctx, PR_RULE_PRISM_CORE, 32, in, NULL, dout, dht);
    pr_blas_set_threads(1);
    omp_set_num_threads(threads);
    rec_assert_same("prism_core chunk 32 on 2 threads vs 1", &two, &one, 1e-14);
    rec_out_free(&one);
    rec_out_free(&two);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
#else
    skip();
#endif
}

/* f32 runs in double internally: it agrees with f64 up to the inputs' rounding */
static void test_f32_close_to_f64(void **s)
{
    (void)s;
    const int64_t B = 1, T = 40, H = 2, K = 8, V = 5, L = 2;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r64 = pr_rng_init(9, 0), r32 = pr_rng_init(9, 0);
    pr_recurrence_inputs a = pr_recurrence_random(ctx, &r64, PR_F64, PR_RULE_PRISM_CORE, B, T, H, K, V, L, true);
    pr_recurrence_inputs b = pr_recurrence_random(ctx, &r32, PR_F32, PR_RULE_PRISM_CORE, B, T, H, K, V, L, true);
    assert_int_equal(b.q->dtype, PR_F32);
    pr_tensor *ia[REC_NIN], *ib[REC_NIN];
    rec_in_array(&a, ia);
    rec_in_array(&b, ib);
    double *dout = rec_randn(3, B * T * H * V), *dht = rec_randn(4, B * H * K * V);
    for (int chunk = 0; chunk <= 16; chunk += 16) {
        rec_out ref = rec_run(ctx, PR_RULE_PRISM_CORE, chunk, ia, NULL, dout, dht);
        rec_out got = rec_run(ctx, PR_RULE_PRISM_CORE, chunk, ib, NULL, dout, dht);
        assert_int_equal(ib[0]->grad->dtype, PR_F32);
        rec_assert_same("f32 vs f64", &got, &ref, 1e-5);
        rec_out_free(&ref);
        rec_out_free(&got);
    }
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

/* ---- float64 central differences ------------------------------------------------------------- */

/* sum(o*dout) + sum(ht*dht), no tape */
static double fd_loss(pr_ctx *ctx, pr_rule rule, int chunk, pr_tensor *const *in, const double *dout, const double *dht)
{
    bool prev = pr_set_grad_enabled(ctx, false);
    pr_recurrence_opts opt = {.rule = rule, .chunk = chunk};
    pr_tensor *ht, *o = pr_recurrence(ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, &ht);
    pr_set_grad_enabled(ctx, prev);
    double f = 0;
    const double *po = o->data, *ph = ht->data;
    for (int64_t i = 0; i < o->numel; i++) f += po[i] * dout[i];
    for (int64_t i = 0; i < ht->numel; i++) f += ph[i] * dht[i];
    return f;
}

static void gradcheck_case(pr_rule rule, int chunk, int64_t B, int64_t T, int64_t L, bool with_h0)
{
    const int64_t H = 2, K = 4, V = 3;
    const double eps = 1e-6, atol = 1e-8, rtol = 1e-6;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(7 + (uint64_t)T, (uint32_t)rule);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, rule, B, T, H, K, V, L, with_h0);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(5, B * T * H * V), *dht = rec_randn(6, B * H * K * V);
    rec_out an = rec_run(ctx, rule, chunk, in, NULL, dout, dht);
    for (int i = 0; i < REC_NIN; i++) {
        if (!in[i]) continue;
        double *x = in[i]->data;
        for (int64_t j = 0; j < in[i]->numel; j++) {
            const double x0 = x[j];
            x[j] = x0 + eps;
            const double fp = fd_loss(ctx, rule, chunk, in, dout, dht);
            x[j] = x0 - eps;
            const double fm = fd_loss(ctx, rule, chunk, in, dout, dht);
            x[j] = x0;
            const double num = (fp - fm) / (2 * eps), err = fabs(num - an.d[i][j]);
            if (!(err <= atol + rtol * fabs(num)))
                fail_msg("gradcheck %s chunk %d B=%lld T=%lld L=%lld: d%s[%lld] analytic %.12g, numeric %.12g",
                         pr_rule_name(rule), chunk, (long long)B, (long long)T, (long long)L, rec_in_names(i),
                         (long long)j, an.d[i][j], num);
        }
    }
    rec_out_free(&an);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

static void test_gradcheck_rules(void **s)
{
    (void)s;
    for (int r = 0; r < PR_NRULES; r++) {
        const pr_rule rule = (pr_rule)r;
        const int64_t L = pr_rule_has_extra(rule) ? 2 : 0;
        gradcheck_case(rule, 0, 1, 1, L, true);    /* T = 1 */
        gradcheck_case(rule, 0, 2, 5, L, true);
        gradcheck_case(rule, 2, 1, 5, L, true);    /* T not a multiple of the chunk */
        gradcheck_case(rule, 0, 1, 3, L, false);   /* no h0 */
    }
}

/* gla under strong decays: log-decays of -20 to -60 a token would overflow
 * exp(-G) of a factored chunk after a few tokens; the chunked form takes
 * every decay as factors exp(G_later - G_earlier) <= 1 (sub-chunks of 8),
 * so both forms stay finite and agree (chunks of 150 use the factored path
 * across nineteen sub-chunks).
 * Then the gradients at milder but still strong decays (-1 to -4). */
static void set_uniform(pr_tensor *t, uint64_t seed, double lo, double hi)
{
    double *x = t->data;
    for (int64_t i = 0; i < t->numel; i++) x[i] = lo + (hi - lo) * (0.5 + 0.5 * tanh(pr_philox_normal(seed, 3, (uint64_t)i)));
}

static void test_gla_strong_decay(void **s)
{
    (void)s;
    const int64_t B = 2, T = 150, H = 2, K = 6, V = 5;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(77, 1);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, B, T, H, K, V, 0, true);
    set_uniform(ri.g, 11, -60, -20);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(8, B * T * H * V), *dht = rec_randn(9, B * H * K * V);
    rec_out ref = rec_run(ctx, PR_RULE_GLA, 0, in, NULL, dout, dht);
    for (int64_t i = 0; i < ref.n[PR_REC_G]; i++) assert_true(isfinite(ref.d[PR_REC_G][i]));
    const int chunks[] = {64, 16, 150};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        rec_out got = rec_run(ctx, PR_RULE_GLA, chunks[c], in, NULL, dout, dht);
        for (int64_t i = 0; i < got.n_o; i++) assert_true(isfinite(got.o[i]));
        for (int i = 0; i < REC_NIN; i++)
            for (int64_t j = 0; got.d[i] && j < got.n[i]; j++) assert_true(isfinite(got.d[i][j]));
        char what[64];
        snprintf(what, sizeof what, "gla gk in [-60,-20] chunk %d vs per-token", chunks[c]);
        rec_assert_same(what, &got, &ref, 1e-12);
        rec_out_free(&got);
    }
    rec_out_free(&ref);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

static void test_gla_gradcheck_strong(void **s)
{
    (void)s;
    const int64_t B = 1, T = 9, H = 1, K = 3, V = 2;
    const double eps = 1e-6;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(78, 1);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, B, T, H, K, V, 0, true);
    set_uniform(ri.g, 12, -4, -1);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(10, B * T * H * V), *dht = rec_randn(11, B * H * K * V);
    for (int chunk = 0; chunk <= 4; chunk += 4) {
        rec_out an = rec_run(ctx, PR_RULE_GLA, chunk, in, NULL, dout, dht);
        for (int i = 0; i < REC_NIN; i++) {
            double *x = in[i] ? in[i]->data : NULL;
            for (int64_t j = 0; x && j < in[i]->numel; j++) {
                const double x0 = x[j];
                x[j] = x0 + eps;
                const double fp = fd_loss(ctx, PR_RULE_GLA, chunk, in, dout, dht);
                x[j] = x0 - eps;
                const double fm = fd_loss(ctx, PR_RULE_GLA, chunk, in, dout, dht);
                x[j] = x0;
                const double num = (fp - fm) / (2 * eps);
                if (!(fabs(num - an.d[i][j]) <= 1e-8 + 1e-6 * fabs(num)))
                    fail_msg("gla strong decay chunk %d: d%s[%lld] analytic %.12g, numeric %.12g", chunk,
                             rec_in_names(i), (long long)j, an.d[i][j], num);
            }
        }
        rec_out_free(&an);
    }
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

/* ---- gla with a per-value decay (gsa's first pass) ------------------------------------------------
 * h = h diag(exp(g_t)) + k_t v_t^T, o_t = h^T (scale q_t), g [B,T,H,V]: a plain
 * loop here is the reference for o and ht, central differences for every
 * gradient (decays from mild to strong, with and without h0); asking for it
 * of another rule is refused by name. */
static void gv_reference(pr_tensor *const *in, int64_t B, int64_t T, int64_t H, int64_t K, int64_t V,
                         double scale, double *o, double *ht)
{
    const double *q = in[PR_REC_Q]->data, *k = in[PR_REC_K]->data, *v = in[PR_REC_V]->data, *g = in[PR_REC_G]->data;
    const double *h0 = in[PR_REC_H0] ? in[PR_REC_H0]->data : NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            double *S = ht + (b * H + h) * K * V;
            for (int64_t e = 0; e < K * V; e++) S[e] = h0 ? h0[(b * H + h) * K * V + e] : 0;
            for (int64_t t = 0; t < T; t++) {
                const int64_t r = (b * T + t) * H + h;
                for (int64_t i = 0; i < K; i++)
                    for (int64_t j = 0; j < V; j++)
                        S[i * V + j] = exp(g[r * V + j]) * S[i * V + j] + k[r * K + i] * v[r * V + j];
                for (int64_t j = 0; j < V; j++) {
                    double acc = 0;
                    for (int64_t i = 0; i < K; i++) acc += S[i * V + j] * q[r * K + i];
                    o[r * V + j] = scale * acc;
                }
            }
        }
}

static double gv_loss(pr_ctx *ctx, const pr_recurrence_opts *opt, pr_tensor *const *in, const double *dout,
                      const double *dht)
{
    bool prev = pr_set_grad_enabled(ctx, false);
    pr_tensor *ht, *o = pr_recurrence(ctx, opt, in[0], in[1], in[2], in[3], NULL, NULL, NULL, in[7], NULL, &ht);
    pr_set_grad_enabled(ctx, prev);
    double f = 0;
    for (int64_t i = 0; i < o->numel; i++) f += ((double *)o->data)[i] * dout[i];
    for (int64_t i = 0; i < ht->numel; i++) f += ((double *)ht->data)[i] * dht[i];
    return f;
}

static void gv_case(int64_t B, int64_t T, int chunk, bool with_h0, double glo, double ghi, uint64_t seed)
{
    const int64_t H = 2, K = 3, V = 4;
    const double eps = 1e-6;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(seed, 5);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, B, T, H, K, V, 0, with_h0);
    /* g per value channel: [B,T,H,V] */
    pr_recurrence_inputs rg = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, B, T, H, V, V, 0, false);
    ri.g = rg.g;
    set_uniform(ri.g, seed, glo, ghi);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    const pr_recurrence_opts opt = {.rule = PR_RULE_GLA, .scale = 0.7, .chunk = chunk, .g_per_value = true};
    double *dout = rec_randn(seed + 1, B * T * H * V), *dht = rec_randn(seed + 2, B * H * K * V);
    rec_out an = rec_run_opts(ctx, &opt, in, NULL, dout, dht);
    double *o = malloc(sizeof(double) * (size_t)(B * T * H * V)), *ht = malloc(sizeof(double) * (size_t)(B * H * K * V));
    gv_reference(in, B, T, H, K, V, 0.7, o, ht);
    rec_assert_close("gla per-value", "o", an.o, o, an.n_o, 1e-13);
    rec_assert_close("gla per-value", "ht", an.ht, ht, an.n_ht, 1e-13);
    for (int i = 0; i < REC_NIN; i++) {
        double *x = in[i] ? in[i]->data : NULL;
        for (int64_t j = 0; x && j < in[i]->numel; j++) {
            const double x0 = x[j];
            x[j] = x0 + eps;
            const double fp = gv_loss(ctx, &opt, in, dout, dht);
            x[j] = x0 - eps;
            const double fm = gv_loss(ctx, &opt, in, dout, dht);
            x[j] = x0;
            const double num = (fp - fm) / (2 * eps);
            if (!(fabs(num - an.d[i][j]) <= 1e-8 + 1e-6 * fabs(num)))
                fail_msg("gla per-value chunk %d g in [%g,%g]: d%s[%lld] analytic %.12g, numeric %.12g", chunk,
                         glo, ghi, rec_in_names(i), (long long)j, an.d[i][j], num);
        }
    }
    rec_out_free(&an);
    free(o);
    free(ht);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

static void test_gla_per_value(void **s)
{
    (void)s;
    gv_case(2, 7, 0, true, -0.3, -0.01, 31);
    gv_case(1, 9, 0, false, -4, -1, 32);
    gv_case(1, 1, 0, true, -0.5, -0.1, 33);
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(34, 0);
    pr_recurrence_inputs a = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, 1, 4, 2, 3, 3, 0, false);
    pr_recurrence_opts o = {.rule = PR_RULE_GLA, .chunk = 16, .g_per_value = true};
    char why[256];
    pr_rec_plan plan;
    assert_true(pr_recurrence_plan(&o, PR_CPU, 1, 4, 2, 3, 3, 0, &plan, why, sizeof why));
    char line[512];
    pr_rec_plan_format(&plan, line, sizeof line);
    assert_non_null(strstr(line, "pr_rec_gla_forward_chunked (per-value decay"));
    o.rule = PR_RULE_SSD, o.chunk = 0;
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, NULL, NULL, NULL, NULL, NULL, NULL),
                    "a form of rule gla, not of ssd");
    o.rule = PR_RULE_GLA;
    pr_recurrence_inputs w = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, 1, 4, 2, 3, 2, 0, false);
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, w.q, w.k, w.v, w.g, NULL, NULL, NULL, NULL, NULL, NULL),
                    "g (a log-decay per value channel) has shape [1,4,2,3], expected [1,4,2,2]");
    pr_ctx_free(ctx);
}

/* the chunked per-value form: central differences of every input through it
 * (T not a multiple of the chunk, chunks across sub-chunks of 8, decays mild
 * to strong, with and without h0), then against the per-token form at 1e-12:
 * several chunk sizes, packed sequences with h0, and log-decays of -60 to -20
 * a token, where a factored exp(-B) would overflow within a few tokens;
 * then the transposition that does not hold, and the dg identity of gv_dv. */
static rec_out gv_run(pr_ctx *ctx, int chunk, pr_tensor *const *in, pr_tensor *cu, const double *dout,
                      const double *dht)
{
    const pr_recurrence_opts opt = {.rule = PR_RULE_GLA, .scale = 0.6, .chunk = chunk, .g_per_value = true};
    return rec_run_opts(ctx, &opt, in, cu, dout, dht);
}

static void gv_chunked_vs_token(int64_t B, int64_t T, const int64_t *cu_off, int64_t N, double glo, double ghi,
                                uint64_t seed)
{
    const int64_t H = 2, K = 5, V = 6;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(seed, 1);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, B, T, H, K, V, 0, false);
    ri.g = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, B, T, H, V, V, 0, false).g;
    ri.h0 = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, N, 1, H, K, V, 0, true).h0;
    set_uniform(ri.g, seed, glo, ghi);
    pr_tensor *cu = NULL;
    if (cu_off) {
        cu = pr_zeros(ctx->step, PR_I64, PR_CPU, 1, (int64_t[]){N + 1});
        for (int64_t i = 0; i <= N; i++) pr_set(cu, i, (double)cu_off[i]);
    }
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(seed + 1, B * T * H * V), *dht = rec_randn(seed + 2, N * H * K * V);
    rec_out ref = gv_run(ctx, 0, in, cu, dout, dht);
    const int chunks[] = {16, 8, 24, 64};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        rec_out got = gv_run(ctx, chunks[c], in, cu, dout, dht);
        for (int64_t i = 0; i < got.n_o; i++) assert_true(isfinite(got.o[i]));
        for (int i = 0; i < REC_NIN; i++)
            for (int64_t j = 0; got.d[i] && j < got.n[i]; j++) assert_true(isfinite(got.d[i][j]));
        char what[96];
        snprintf(what, sizeof what, "gla per-value g in [%g,%g] chunk %d%s vs per-token", glo, ghi, chunks[c],
                 cu ? " packed" : "");
        rec_assert_same(what, &got, &ref, 1e-12);
        rec_out_free(&got);
    }
    rec_out_free(&ref);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

/* Why the per-key code cannot serve: transposed, the per-value state is the
 * per-key state of (k, v) swapped (checked here on ht), but o reads that
 * state along its other axis, so the two forms' outputs differ. */
static void gv_transpose_state_only(void)
{
    const int64_t T = 11, H = 1, K = 3, V = 4;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(90, 1);
    pr_recurrence_inputs a = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, 1, T, H, K, V, 0, false);
    pr_recurrence_inputs b = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, 1, T, H, V, K, 0, false);
    set_uniform(b.g, 91, -1, -0.1);   /* b: k' = v of a, v' = k of a, g [.., V] for both */
    memcpy(b.k->data, a.v->data, sizeof(double) * (size_t)a.v->numel);
    memcpy(b.v->data, a.k->data, sizeof(double) * (size_t)a.k->numel);
    const pr_recurrence_opts pv = {.rule = PR_RULE_GLA, .chunk = 8, .g_per_value = true, .scale = 1};
    const pr_recurrence_opts pk = {.rule = PR_RULE_GLA, .chunk = 8, .scale = 1};
    pr_tensor *hv, *hk;
    pr_tensor *ov = pr_recurrence(ctx, &pv, a.q, a.k, a.v, b.g, NULL, NULL, NULL, NULL, NULL, &hv);
    pr_recurrence(ctx, &pk, b.q, b.k, b.v, b.g, NULL, NULL, NULL, NULL, NULL, &hk);
    const double *sv = hv->data, *sk = hk->data;
    for (int64_t i = 0; i < K; i++)
        for (int64_t j = 0; j < V; j++) assert_true(fabs(sv[i * V + j] - sk[j * K + i]) <= 1e-13);
    assert_int_equal(ov->shape[3], V);   /* o has V entries; the per-key form of b would give K = 3 */
    pr_ctx_free(ctx);
}

/* The identity the CUDA chunked backward (gv_dv) takes dg from: o and ht
 * are linear in v and h0, so per value channel j
 *   dg_t[j] = sum_{s>=t} (o_s[j] do_s[j] - v_s[j] dv_s[j]) + sum_i ht[i][j] dht[i][j]. */
static void gv_dg_identity(void)
{
    const int64_t T = 23, H = 2, K = 3, V = 5;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(92, 1);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, 1, T, H, K, V, 0, true);
    ri.g = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GLA, 1, T, H, V, V, 0, false).g;
    set_uniform(ri.g, 93, -2, -0.05);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(94, T * H * V), *dht = rec_randn(95, H * K * V);
    rec_out r = gv_run(ctx, 8, in, NULL, dout, dht);
    const double *v = ri.v->data;
    for (int64_t h = 0; h < H; h++)
        for (int64_t j = 0; j < V; j++) {
            double run = 0;
            for (int64_t i = 0; i < K; i++) run += r.ht[(h * K + i) * V + j] * dht[(h * K + i) * V + j];
            for (int64_t t = T - 1; t >= 0; t--) {
                const int64_t x = (t * H + h) * V + j;
                run += r.o[x] * dout[x] - v[x] * r.d[PR_REC_V][x];
                if (!(fabs(run - r.d[PR_REC_G][x]) <= 1e-12 * (1 + fabs(run))))
                    fail_msg("gla per-value dg identity: t %lld h %lld j %lld: %.15g vs dg %.15g", (long long)t,
                             (long long)h, (long long)j, run, r.d[PR_REC_G][x]);
            }
        }
    rec_out_free(&r);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

static void test_gla_per_value_chunked(void **s)
{
    (void)s;
    gv_case(1, 21, 16, true, -0.3, -0.01, 41);   /* two chunks, the second short */
    gv_case(1, 9, 4, false, -4, -1, 42);
    gv_case(2, 5, 8, true, -0.5, -0.1, 43);      /* one short chunk */
    gv_case(1, 37, 37, true, -0.4, -0.05, 44);   /* one chunk of five sub-chunks */
    gv_chunked_vs_token(2, 45, NULL, 2, -0.5, -0.01, 45);
    gv_chunked_vs_token(1, 70, (const int64_t[]){0, 1, 19, 70}, 3, -2, -0.1, 46);
    gv_chunked_vs_token(1, 150, NULL, 1, -60, -20, 47);
    gv_transpose_state_only();
    gv_dg_identity();
}

static void test_gradcheck_prism_core_L(void **s)
{
    (void)s;
    for (int64_t L = 0; L <= 3; L += (L == 1 ? 2 : 1)) {   /* L = 0, 1, 3 */
        gradcheck_case(PR_RULE_PRISM_CORE, 0, 1, 6, L, true);
        gradcheck_case(PR_RULE_PRISM_CORE, 4, 1, 6, L, true);
    }
}

/* the op's registered example passes the library's gradcheck */
static void test_example_gradcheck(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(3, 2);
    pr_example ex;
    pr_op(PR_OP_recurrence)->example(ctx, &r, PR_F64, &ex);
    pr_gradcheck_result res = pr_gradcheck(ctx, "recurrence", &ex, NULL);
    if (!res.ok) fail_msg("%s", res.msg);
    pr_ctx_free(ctx);
}

/* ---- prism_core with L = 0 is gdn -------------------------------------------------------------- */

static void test_prism_core_L0_is_gdn(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(11, 0);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_PRISM_CORE, 2, 19, 2, 6, 5, 0, true);
    assert_int_equal(ri.kx->numel, 0);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(1, ri.v->numel), *dht = rec_randn(2, ri.h0->numel);
    for (int chunk = 0; chunk <= 8; chunk += 8) {
        rec_out pc = rec_run(ctx, PR_RULE_PRISM_CORE, chunk, in, NULL, dout, dht);
        in[5] = in[6] = NULL;   /* no extras at all */
        rec_out pn = rec_run(ctx, PR_RULE_PRISM_CORE, chunk, in, NULL, dout, dht);
        rec_out gd = rec_run(ctx, PR_RULE_GDN, chunk, in, NULL, dout, dht);
        rec_assert_same("prism_core L=0 vs gdn", &pc, &gd, 0.0);
        rec_assert_same("prism_core without kx/vx vs gdn", &pn, &gd, 0.0);
        rec_out_free(&pc);
        rec_out_free(&pn);
        rec_out_free(&gd);
        in[5] = ri.kx, in[6] = ri.vx;
    }
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

/* ---- misuse ------------------------------------------------------------------------------------- */

static void test_input_checks(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(1, 0);
    pr_recurrence_inputs a = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_PRISM_CORE, 1, 4, 2, 3, 2, 1, true);
    pr_recurrence_inputs f = pr_recurrence_random(ctx, &rng, PR_F32, PR_RULE_GDN, 1, 4, 2, 3, 2, 0, true);
    pr_recurrence_opts o = {.rule = PR_RULE_SSD};
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, a.beta, NULL, NULL, NULL, NULL, NULL),
                    "rule ssd does not use beta");
    o.rule = PR_RULE_GDN;
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, NULL, a.beta, NULL, NULL, NULL, NULL, NULL),
                    "rule gdn needs g");
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, a.beta, a.kx, a.vx, NULL, NULL, NULL),
                    "does not use kx");
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.v, a.v, a.g, a.beta, NULL, NULL, NULL, NULL, NULL),
                    "k has shape [1,4,2,2], expected [1,4,2,3]");
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, f.g, a.beta, NULL, NULL, NULL, NULL, NULL),
                    "dtype mismatch");
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, a.beta, NULL, NULL, a.q, NULL, NULL),
                    "h0 has shape");
    o.rule = PR_RULE_PRISM_CORE;
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, a.beta, a.kx, NULL, NULL, NULL, NULL),
                    "kx and vx go together");
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, a.beta, a.vx, a.vx, NULL, NULL, NULL),
                    "kx has shape");
    o.chunk = -1;
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, a.beta, a.kx, a.vx, NULL, NULL, NULL),
                    "chunk must be >= 0");
    /* gla's decay is per key channel: a per-head g [B,T,H] names the shape it wants */
    const pr_recurrence_opts gla = {.rule = PR_RULE_GLA};
    PR_EXPECT_FATAL(pr_recurrence(ctx, &gla, a.q, a.k, a.v, a.g, NULL, NULL, NULL, NULL, NULL, NULL),
                    "g (a log-decay per key channel) has shape [1,4,2], expected [1,4,2,3]");
    pr_ctx_free(ctx);
}

/* ---- the plan ------------------------------------------------------------------------- */

/* on the CPU chunk is the chunk size, any C; a CUDA plan without a GPU is refused with a reason */
static void test_plan_cpu(void **s)
{
    (void)s;
    char why[256], line[320];
    pr_rec_plan plan;
    for (int r = 0; r < PR_NRULES; r++)
        for (int chunk = 0; chunk <= 24; chunk += 12) {
            const pr_recurrence_opts o = {.rule = (pr_rule)r, .chunk = chunk};
            assert_true(pr_recurrence_plan(&o, PR_CPU, 2, 50, 2, 16, 8, 2, &plan, why, sizeof why));
            assert_int_equal(plan.device, PR_CPU);
            assert_int_equal(plan.chunk, chunk);
            pr_rec_plan_format(&plan, line, sizeof line);
            assert_non_null(strstr(line, chunk ? "cpu chunked C=" : "cpu per-token"));
        }
    const pr_recurrence_opts neg = {.rule = PR_RULE_GDN, .chunk = -1};
    assert_false(pr_recurrence_plan(&neg, PR_CPU, 2, 50, 2, 16, 8, 0, &plan, why, sizeof why));
    assert_non_null(strstr(why, "chunk must be >= 0"));
    if (!pr_cuda_available()) {
        const pr_recurrence_opts o = {.rule = PR_RULE_GDN, .chunk = 64};
        assert_false(pr_recurrence_plan(&o, PR_CUDA, 2, 50, 2, 16, 8, 0, &plan, why, sizeof why));
        assert_true(why[0] != 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_f64_token),   cmocka_unit_test(test_golden_f64_chunk64),
        cmocka_unit_test(test_golden_f64_chunk16), cmocka_unit_test(test_golden_f32_token),
        cmocka_unit_test(test_golden_f32_chunk64), cmocka_unit_test(test_golden_f32_chunk16),
        cmocka_unit_test(test_chunked_equals_recurrent), cmocka_unit_test(test_chunked_threaded),
        cmocka_unit_test(test_f32_close_to_f64),
        cmocka_unit_test(test_plan_cpu),          cmocka_unit_test(test_gradcheck_rules),    cmocka_unit_test(test_gradcheck_prism_core_L),
        cmocka_unit_test(test_example_gradcheck),  cmocka_unit_test(test_prism_core_L0_is_gdn),
        cmocka_unit_test(test_input_checks),       cmocka_unit_test(test_gla_strong_decay),
        cmocka_unit_test(test_gla_gradcheck_strong), cmocka_unit_test(test_gla_per_value),
        cmocka_unit_test(test_gla_per_value_chunked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
