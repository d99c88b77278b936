/* tests/test_cuda_recurrence.c: the CUDA recurrence kernels against the CPU.
 *
 * Every rule, both forms (per-token, chunked with C = 32 and 64; gla's
 * chunked forms, per-key and per-value decay: gla_chunked.cu, gla_fast.cu, gla_value.cu), fp32 and
 * TF32 products, awkward sizes (T = 1, 63, 64, 65, 1000, 4096; K != V, K and
 * V not multiples of 32 or of 4; L = 0, 1, 3; K up to 256), packed sequences
 * (cu_seqlens with lengths 1, 64, 65, 170) with an initial state per sequence,
 * a grid wide enough for the serial passes' widest V tiles, and the serial
 * passes split into segments (forced by pr_rec_force.segments; T1000 and
 * T4096 segment on the plan's own choice). Forced plans (pr_rec_force) are
 * checked on the plan's fields (pr_rec_plan), then run.
 * Inputs are drawn in f64 on the CPU; the reference is the CPU per-token form
 * in f64 (pr_recurrence); CUDA runs on f32 copies. Each output and gradient
 * must agree to max|got - ref| / max|ref| <= tol:
 *  - fp32 products: 2e-4 (f32 rounding of sums over up to T*K terms with
 *    decays; the per-token kernels and the chunked ones in fp32 land near 1e-6);
 *  - TF32 products (chunked form only): inputs of the products round to
 *    10-bit mantissas (2^-11), products of chunk matrices compound that a
 *    few times: 4e-3.
 * Every case prints its worst error per tensor (the device log shows where a
 * bug is), and the chunked backward is run twice and must agree bit for bit.
 * Every kernel launch is preceded by NaN in every SM's shared memory
 * (pr_cuda_poison_shared, as in every CUDA test), so that a kernel reading
 * shared memory it never wrote fails here, not only under compute-sanitizer
 * (which changes what the last kernel left there).
 * Every test skips without a GPU.
 */
#include "tests/test_recurrence_util.h"

typedef struct {
    const char *name;
    int64_t B, T, H, K, V, L;
    bool h0;
    const int64_t *cu;   /* packed: N+1 offsets (B must be 1), or NULL */
    int ncu;
} rec_case;

static const int64_t cu_a[] = {0, 1, 65, 130, 300};

static const rec_case cases[] = {
    {"T1", 2, 1, 2, 32, 48, 1, true, NULL, 0},
    {"T63", 2, 63, 2, 32, 48, 3, true, NULL, 0},
    {"T64", 2, 64, 2, 32, 48, 0, false, NULL, 0},
    {"T65", 2, 65, 2, 32, 48, 1, true, NULL, 0},
    {"T1000", 1, 1000, 2, 32, 48, 1, true, NULL, 0},
    {"odd-dims", 2, 130, 2, 20, 13, 3, true, NULL, 0},
    {"K128-V96", 1, 200, 2, 128, 96, 1, true, NULL, 0},
    {"K256-V64", 1, 70, 1, 256, 64, 1, true, NULL, 0},
    {"packed", 1, 300, 2, 32, 48, 1, true, cu_a, 5},
    /* N*H = 144 sequence-heads: on a 132-SM GPU the serial passes take V tiles
     * 128 wide (one wave) rather than 64 (two), the benchmark's shape */
    {"wide-grid", 9, 70, 16, 32, 128, 1, true, NULL, 0},
};

static pr_ctx *g_ctx;

static int setup(void **state)
{
    (void)state;
    g_ctx = pr_ctx_new(1);
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    pr_ctx_free(g_ctx);
    return 0;
}

/* inputs of one case (CPU f64 leaves) and the upstream gradients */
typedef struct {
    pr_tensor *in[REC_NIN], *cu;
    int64_t N;
    double *dout, *dht;
} rec_inputs;

static rec_inputs make_inputs(pr_ctx *ctx, pr_rule rule, const rec_case *c, uint64_t seed)
{
    rec_inputs x = {0};
    pr_rng r = pr_rng_init(seed, 3);
    const int64_t L = pr_rule_has_extra(rule) ? c->L : 0;
    pr_recurrence_inputs in = pr_recurrence_random(ctx, &r, PR_F64, rule, c->B, c->T, c->H, c->K, c->V, L, false);
    if (pr_rule_has_extra(rule) && L == 0) in.kx = in.vx = NULL;
    rec_in_array(&in, x.in);
    x.N = c->cu ? c->ncu - 1 : c->B;
    if (c->h0) {
        x.in[7] = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(x.N, c->H, c->K, c->V), &r);
        for (int64_t i = 0; i < x.in[7]->numel; i++) ((double *)x.in[7]->data)[i] *= 0.5;
        pr_requires_grad_(x.in[7], true);
    }
    if (c->cu) x.cu = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(c->ncu), c->cu);
    x.dout = rec_randn(seed + 11, c->B * c->T * c->H * c->V);
    x.dht = rec_randn(seed + 12, x.N * c->H * c->K * c->V);
    return x;
}

/* CUDA f32 copies (requiring grad where the CPU leaf does) */
static void to_cuda(pr_ctx *ctx, const rec_inputs *x, pr_tensor **out, pr_tensor **cu)
{
    for (int i = 0; i < REC_NIN; i++) {
        out[i] = x->in[i] ? pr_to(ctx->step, x->in[i], PR_F32, PR_CUDA) : NULL;
        if (out[i]) pr_requires_grad_(out[i], true);
    }
    *cu = x->cu ? pr_to(ctx->step, x->cu, PR_I64, PR_CUDA) : NULL;
}


/* one rule over every case and form; returns the number of failures */
static int check_rule(pr_rule rule, int *n_runs)
{
    pr_ctx *ctx = g_ctx;
    int fails = 0;
    /* PR_TEST_CASE=wide-grid and PR_TEST_FORM=chunk32/tf32 (exact names) narrow
     * a rule's runs to one case and one form, e.g. under compute-sanitizer */
    const char *only_case = getenv("PR_TEST_CASE"), *only_form = getenv("PR_TEST_FORM");
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const rec_case *c = &cases[ci];
        if (!pr_rule_has_extra(rule) && (c->L == 3)) continue; /* same as L=1 for these rules */
        if (only_case && strcmp(only_case, c->name)) continue;
        rec_inputs x = make_inputs(ctx, rule, c, 100 + ci);
        rec_out ref = rec_run_seeded(ctx, rule, 0, x.in, x.cu, x.dout, x.dht);
        pr_tensor *xc[REC_NIN], *cu;
        to_cuda(ctx, &x, xc, &cu);
        struct { int chunk, tf32; double tol; const char *form; } forms[] = {
            {0, 0, 2e-4, "token"}, {64, 0, 2e-4, "chunk64/fp32"}, {64, 1, 4e-3, "chunk64/tf32"},
            {32, 0, 2e-4, "chunk32/fp32"}, {32, 1, 4e-3, "chunk32/tf32"},
        };
        for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
            if (only_form && strcmp(only_form, forms[f].form)) continue;
            char what[96];
            snprintf(what, sizeof what, "%s %s L=%lld %s", pr_rule_name(rule), c->name,
                     (long long)(pr_rule_has_extra(rule) ? c->L : 0), forms[f].form);
            /* the chunk asked for runs, or is refused naming shared memory (K = 256 at C = 64) */
            const pr_recurrence_opts po = {.rule = rule, .chunk = forms[f].chunk, .tf32 = forms[f].tf32};
            pr_rec_plan plan;
            char why[256];
            if (!pr_recurrence_plan(&po, PR_CUDA, x.N, c->T, c->H, c->K, c->V, pr_rule_has_extra(rule) ? c->L : 0,
                                    &plan, why, sizeof why)) {
                /* K = 256 at C = 64 */
                const bool expected = c->K > 128 && strstr(why, "shared memory");
                fprintf(stderr, "  %s %s: %s\n", expected ? "refused" : "FAIL", what, why);
                fails += !expected;
                continue;
            }
            ctx->matmul_tf32 = forms[f].tf32;
            rec_out got = rec_run_seeded(ctx, rule, forms[f].chunk, xc, cu, x.dout, x.dht);
            const double e = rec_report(what, &got, &ref);
            (*n_runs)++;
            if (!(e <= forms[f].tol)) {
                char line[512];
                pr_rec_plan_format(&plan, line, sizeof line);
                fprintf(stderr, "  FAIL %s: worst %.3g > %.1g\n    plan: %s\n", what, e, forms[f].tol, line);
                fails++;
            }
            if (forms[f].chunk && f <= 2) { /* determinism of the chunked backward */
                rec_out again = rec_run_seeded(ctx, rule, forms[f].chunk, xc, cu, x.dout, x.dht);
                if (!rec_same_bits(&got, &again)) {
                    fprintf(stderr, "  FAIL %s: two runs differ\n", what);
                    fails++;
                }
                rec_out_free(&again);
            }
            rec_out_free(&got);
        }
        ctx->matmul_tf32 = 0;
        rec_out_free(&ref);
        free(x.dout);
        free(x.dht);
        pr_step_reset(ctx);
    }
    return fails;
}

/* one cmocka test per rule of the table (rules.def) */
#define PR_RULE(name, NAME, has_g, has_beta, has_extra, g_per_key)                             \
    static void test_##name(void **state)                                            \
    {                                                                                \
        (void)state;                                                                 \
        PR_SKIP_WITHOUT_CUDA();                                                      \
        int runs = 0;                                                                \
        const int fails = check_rule(PR_RULE_##NAME, &runs);                         \
        fprintf(stderr, "  %s: %d runs, %d failures\n", #name, runs, fails);        \
        assert_int_equal(fails, 0);                                                  \
        assert_true(runs > 0); /* a filter that matched nothing is no pass */        \
    }
#include PR_RULES_DEF
#undef PR_RULE

/* the golden file, every rule, on CUDA: token and chunked in fp32 to 1e-4,
 * chunked with TF32 products to 2e-3 (golden-check runs fp32 math only) */
static void test_golden(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = g_ctx;
    pr_arena *a = pr_arena_new("golden", 0);
    pr_safetensors st;
    pr_err err;
    if (pr_safetensors_read(pr_test_golden_path(), a, &st, &err) != 0) {
        fprintf(stderr, "  skipped: %s\n", err.msg);
        pr_arena_free(a);
        skip();
    }
    int fails = 0;
    for (int r = 0; r < PR_NRULES; r++) {
        char name[64];
        pr_tensor *ref_in[REC_NIN], *xc[REC_NIN];
        for (int i = 0; i < REC_NIN; i++) {
            snprintf(name, sizeof name, "%s.%s", pr_rule_name((pr_rule)r), rec_in_names(i));
            ref_in[i] = pr_safetensors_get(&st, name);
            xc[i] = ref_in[i] ? pr_to(ctx->step, ref_in[i], PR_F32, PR_CUDA) : NULL;
            if (xc[i]) pr_requires_grad_(xc[i], true);
        }
        if (!ref_in[0]) continue;
        const char *outs[3] = {"o", "ht", "do"};
        pr_tensor *t_o, *t_ht, *t_do, *t_dht;
        snprintf(name, sizeof name, "%s.%s", pr_rule_name((pr_rule)r), outs[0]), t_o = pr_safetensors_get(&st, name);
        snprintf(name, sizeof name, "%s.%s", pr_rule_name((pr_rule)r), outs[1]), t_ht = pr_safetensors_get(&st, name);
        snprintf(name, sizeof name, "%s.%s", pr_rule_name((pr_rule)r), outs[2]), t_do = pr_safetensors_get(&st, name);
        snprintf(name, sizeof name, "%s.dht", pr_rule_name((pr_rule)r)), t_dht = pr_safetensors_get(&st, name);
        rec_out ref = {0};
        ref.o = rec_host(t_o, &ref.n_o);
        ref.ht = rec_host(t_ht, &ref.n_ht);
        for (int i = 0; i < REC_NIN; i++) {
            if (!ref_in[i]) continue;
            snprintf(name, sizeof name, "%s.d%s", pr_rule_name((pr_rule)r), rec_in_names(i));
            ref.d[i] = rec_host(pr_safetensors_get(&st, name), &ref.n[i]);
        }
        double *dout = rec_host(t_do, NULL), *dht = rec_host(t_dht, NULL);
        struct { int chunk, tf32; double tol; const char *form; } forms[] = {
            {0, 0, 1e-4, "token"}, {64, 0, 1e-4, "chunk64/fp32"}, {64, 1, 2e-3, "chunk64/tf32"},
            {32, 0, 1e-4, "chunk32/fp32"}, {32, 1, 2e-3, "chunk32/tf32"},
        };
        for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
            ctx->matmul_tf32 = forms[f].tf32;
            rec_out got = rec_run_seeded(ctx, (pr_rule)r, forms[f].chunk, xc, NULL, dout, dht);
            char what[96];
            snprintf(what, sizeof what, "golden %s %s", pr_rule_name((pr_rule)r), forms[f].form);
            const double e = rec_report(what, &got, &ref);
            if (!(e <= forms[f].tol)) fprintf(stderr, "  FAIL %s: worst %.3g > %.1g\n", what, e, forms[f].tol), fails++;
            rec_out_free(&got);
        }
        ctx->matmul_tf32 = 0;
        rec_out_free(&ref);
        free(dout);
        free(dht);
        pr_step_reset(ctx);
    }
    pr_arena_free(a);
    assert_int_equal(fails, 0);
}

/* a long sequence: T = 4096, gdn and prism_core, chunked TF32 against the CPU */
static void test_long(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = g_ctx;
    const rec_case c = {"T4096", 1, 4096, 2, 64, 64, 2, true, NULL, 0};
    int fails = 0;
    for (int r = PR_RULE_GDN; r <= PR_RULE_PRISM_CORE; r++) {
        rec_inputs x = make_inputs(ctx, (pr_rule)r, &c, 900 + r);
        rec_out ref = rec_run_seeded(ctx, (pr_rule)r, 0, x.in, x.cu, x.dout, x.dht);
        pr_tensor *xc[REC_NIN], *cu;
        to_cuda(ctx, &x, xc, &cu);
        for (int f = 0; f < 3; f++) {
            ctx->matmul_tf32 = f == 2;
            rec_out got = rec_run_seeded(ctx, (pr_rule)r, f ? 64 : 0, xc, cu, x.dout, x.dht);
            char what[96];
            snprintf(what, sizeof what, "%s T4096 %s", pr_rule_name((pr_rule)r), f == 0 ? "token" : f == 1 ? "chunk64/fp32" : "chunk64/tf32");
            const double e = rec_report(what, &got, &ref);
            if (!(e <= (f == 2 ? 4e-3 : 2e-4))) fprintf(stderr, "  FAIL %s\n", what), fails++;
            rec_out_free(&got);
        }
        ctx->matmul_tf32 = 0;
        rec_out_free(&ref);
        free(x.dout);
        free(x.dht);
        pr_step_reset(ctx);
    }
    assert_int_equal(fails, 0);
}

/* Segmented serial passes (ops/recurrence/cuda/segments.cu), forced at small
 * sizes by force.segments = P: every rule (prism_core at L = 1 and 2), C =
 * 32 with T = 200 (7 chunks: neither C nor any segment length divides T; P =
 * 5 gives segments of 1 and 2 chunks) and C = 64 (4 chunks), K != V, V = 13,
 * K = 20 (rows not float4), h0 and dht given, packed sequences (lengths 1, 64,
 * 65, 170: the shortest gets one segment). Each segmented run (o, ht, every
 * grad incl. dh0) must match the unsegmented CUDA run (P = 1) and the CPU f64
 * reference to the fp32 tolerance (2e-4; TF32: 4e-3 against the CPU), the plan
 * must segment and say how (seg_planned), and a rerun must be
 * bit-identical. seg-V13 (K > 2V) runs the delta rules' three-pass forward,
 * the others their two-pass one with the fix-up; one run a case forces the
 * last serial pass instead (force.seg_fix off). */
static const rec_case seg_cases[] = {
    {"seg-V13", 2, 200, 2, 32, 13, 1, true, NULL, 0},
    {"seg-K20-L2", 1, 200, 2, 20, 48, 2, true, NULL, 0},
    {"seg-packed", 1, 300, 2, 32, 48, 2, true, cu_a, 5},
};

/* force.segments = P (0: the plan's own choice), with nofix force.seg_fix
 * off (the forward's last serial pass instead of the fix-up), with narrow V
 * tiles of 32 in the serial passes (the plan widens them where it segments:
 * V = 48 runs one tile of 64 unless narrow) */
static pr_rec_force seg_force(int P, bool nofix, bool narrow)
{
    pr_rec_force f = {.segments = P, .seg_fix = nofix ? PR_REC_OFF : PR_REC_PLANNED};
    if (narrow) f.bv_state = f.bv_dstate = 32;
    return f;
}

/* one CUDA run under seg_force(P, nofix, narrow) */
static rec_out seg_run(pr_ctx *ctx, pr_rule rule, int chunk, int P, bool nofix, bool narrow, const rec_inputs *x,
                       pr_tensor **xc, pr_tensor *cu)
{
    const pr_recurrence_opts opt = {.rule = rule, .chunk = chunk, .force = seg_force(P, nofix, narrow)};
    return rec_run_seeded_opts(ctx, &opt, xc, cu, x->dout, x->dht);
}

/* the plan at P segments segments and says which forward runs: with the
 * fix-up (ops/recurrence/cuda/segments.cu) the delta rules make two serial
 * state passes where its per-chunk transitions fit (K <= 2V) and three
 * where not, the rules without beta one; without it one more */
static bool seg_planned(pr_rule rule, int chunk, int P, bool nofix, const rec_case *c, int64_t N)
{
    const bool fix = !nofix && (!pr_rule_has_beta(rule) || c->K <= 2 * c->V);
    char why[256], line[512];
    const pr_recurrence_opts po = {.rule = rule, .chunk = chunk, .force = seg_force(P, nofix, false)};
    pr_rec_plan plan;
    if (!pr_recurrence_plan(&po, PR_CUDA, N, c->T, c->H, c->K, c->V, c->L, &plan, why, sizeof why)) {
        fprintf(stderr, "  no plan: %s\n", why);
        return false;
    }
    pr_rec_plan_format(&plan, line, sizeof line);
    const bool segs = plan.segments == P && plan.seg_fix == fix;
    /* where V has room for one (V = 48), both serial passes take a tile of 64 */
    const bool wide = c->V <= 32 || (plan.pass[PR_REC_PASS_STATE].bv == 64 && plan.pass[PR_REC_PASS_DSTATE].bv == 64);
    if (!segs) fprintf(stderr, "  the plan \"%s\" has not %d segments with%s the fix-up\n", line, P, fix ? "" : "out");
    if (!wide) fprintf(stderr, "  the plan \"%s\" keeps V tiles of 32\n", line);
    return segs && wide;
}

static int check_segments(pr_rule rule, const rec_case *c, uint64_t seed)
{
    pr_ctx *ctx = g_ctx;
    int fails = 0;
    rec_inputs x = make_inputs(ctx, rule, c, seed);
    rec_out ref = rec_run_seeded(ctx, rule, 0, x.in, x.cu, x.dout, x.dht);
    pr_tensor *xc[REC_NIN], *cu;
    to_cuda(ctx, &x, xc, &cu);
    const long long L = pr_rule_has_extra(rule) ? c->L : 0;
    struct { int chunk, P, tf32, nofix, narrow; } runs[] = {{32, 2, 0, 0, 0}, {32, 3, 0, 0, 0}, {32, 5, 0, 0, 0},
                                                            {64, 3, 0, 0, 0}, {32, 3, 1, 0, 0}, {32, 3, 0, 1, 0},
                                                            {32, 3, 0, 0, 1}};
    for (int chunk = 32; chunk <= 64; chunk += 32) {
        ctx->matmul_tf32 = 0;
        rec_out base = seg_run(ctx, rule, chunk, 1, false, false, &x, xc, cu);
        for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
            if (runs[i].chunk != chunk) continue;
            char what[96];
            snprintf(what, sizeof what, "%s %s L=%lld C=%d P=%d%s%s%s", pr_rule_name(rule), c->name, L, chunk,
                     runs[i].P, runs[i].tf32 ? " tf32" : "", runs[i].nofix ? " no fix-up" : "",
                     runs[i].narrow ? " V tiles 32" : "");
            if (!seg_planned(rule, chunk, runs[i].P, runs[i].nofix, c, x.N))
                fprintf(stderr, "  FAIL %s: the plan does not segment\n", what), fails++;
            ctx->matmul_tf32 = runs[i].tf32;
            rec_out got = seg_run(ctx, rule, chunk, runs[i].P, runs[i].nofix, runs[i].narrow, &x, xc, cu);
            fails += rec_fails_tol(what, NULL, &got, &ref, runs[i].tf32 ? 4e-3 : 2e-4);
            if (!runs[i].tf32) {
                fails += rec_fails_tol(what, "vs unsegmented", &got, &base, 2e-4);
                rec_out again = seg_run(ctx, rule, chunk, runs[i].P, runs[i].nofix, runs[i].narrow, &x, xc, cu);
                fails += rec_fails_rerun(what, &got, &again);
                rec_out_free(&again);
            }
            rec_out_free(&got);
        }
        rec_out_free(&base);
    }
    ctx->matmul_tf32 = 0;
    rec_out_free(&ref);
    free(x.dout);
    free(x.dht);
    pr_step_reset(ctx);
    return fails;
}

static void test_segments(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    int fails = 0;
    for (int r = 0; r < PR_NRULES; r++)
        for (size_t ci = 0; ci < sizeof seg_cases / sizeof *seg_cases && !pr_rule_g_per_key((pr_rule)r); ci++) {
            fails += check_segments((pr_rule)r, &seg_cases[ci], 1300 + 10 * r + ci);
        }
    /* prism_core at L = 1 on the packed case too */
    rec_case c1 = seg_cases[2];
    c1.L = 1;
    fails += check_segments(PR_RULE_PRISM_CORE, &c1, 1399);
    assert_int_equal(fails, 0);
}

/* the products a forced field applies to */
typedef enum { FORCED_FP32_AND_TF32, FORCED_TF32_ONLY } forced_products;

/* What a plan must show: pass `pass` with engine (PR_REC_AUTO: either), V
 * tile bv and K tile bk (0: any); grad's blocks or pieces (0: any) and
 * passes (0: any, 1: one, 2: more than one); segments (0: any, 1: none);
 * apart: prism_core's extras apart, with engine apart_engine (AUTO: either). */
typedef struct {
    pr_rec_pass_id pass;
    pr_rec_engine engine;
    int bv, bk;
    int grad_blocks, grad_passes, segments;
    bool apart;
    pr_rec_engine apart_engine;
} plan_want;

static bool plan_shows(const pr_rec_plan *p, const plan_want *w)
{
    const pr_rec_pass *ps = &p->pass[w->pass];
    if (w->engine != PR_REC_AUTO && ps->engine != w->engine) return false;
    if ((w->bv && ps->bv != w->bv) || (w->bk && ps->bk != w->bk)) return false;
    if (w->grad_blocks && p->grad_blocks != w->grad_blocks) return false;
    if ((w->grad_passes == 1 && p->grad_passes != 1) || (w->grad_passes == 2 && p->grad_passes < 2)) return false;
    if (w->segments == 1 && p->segments != 1) return false;
    if (w->apart && !p->extras_apart) return false;
    return !w->apart || w->apart_engine == PR_REC_AUTO || p->extras == w->apart_engine;
}

/* the plan of opt at these sizes shows w (printed where not) */
static bool planned(const pr_recurrence_opts *opt, int64_t N, int64_t T, int64_t H, int64_t K, int64_t V, int64_t L,
                    const plan_want *w, const char *what)
{
    pr_rec_plan plan;
    char why[256], line[512];
    if (!pr_recurrence_plan(opt, PR_CUDA, N, T, H, K, V, L, &plan, why, sizeof why)) {
        fprintf(stderr, "  %s: no plan: %s\n", what, why);
        return false;
    }
    if (plan_shows(&plan, w)) return true;
    pr_rec_plan_format(&plan, line, sizeof line);
    fprintf(stderr, "  %s: the plan is not as wanted: %s\n", what, line);
    return false;
}

/* the forcing fields of text ("name=value,...", pr_rec_force_parse) */
static pr_rec_force force_of(const char *text)
{
    pr_rec_force f = {0};
    char err[256];
    if (!pr_rec_force_parse(text, &f, err, sizeof err)) fail_msg("%s", err);
    return f;
}

/* Fields forced (force, as text) at T = 100, H = 2, the given K, V = 40,
 * both chunk sizes, fp32 and TF32 products (or TF32 only: grad's wgmma
 * form): against the CPU f64 reference, against the run with the plan's
 * own choice (fp32: 2e-4), bit for bit on a rerun, and the plan must show
 * what was forced (shows). check_forced: V = 40. */
static int check_forced_v(pr_rule rule, int64_t K, int64_t V, int64_t L, uint64_t seed, const char *force,
                          const plan_want *shows, forced_products prods)
{
    pr_ctx *ctx = g_ctx;
    const rec_case c = {"forced", 1, 100, 2, K, V, L, true, NULL, 0};
    int fails = 0;
    rec_inputs x = make_inputs(ctx, rule, &c, seed);
    rec_out ref = rec_run_seeded(ctx, rule, 0, x.in, x.cu, x.dout, x.dht);
    pr_tensor *xc[REC_NIN], *cu;
    to_cuda(ctx, &x, xc, &cu);
    const int64_t Lr = pr_rule_has_extra(rule) ? L : 0;
    for (int chunk = 32; chunk <= 64; chunk += 32)
        for (int tf32 = prods == FORCED_TF32_ONLY; tf32 <= 1; tf32++) {
            char what[160];
            snprintf(what, sizeof what, "%s K=%lld L=%lld C=%d%s %s", pr_rule_name(rule), (long long)K,
                     (long long)Lr, chunk, tf32 ? " tf32" : "", force);
            ctx->matmul_tf32 = tf32;
            rec_out base = rec_run_seeded(ctx, rule, chunk, xc, cu, x.dout, x.dht);
            const pr_recurrence_opts po = {.rule = rule, .chunk = chunk, .tf32 = tf32, .force = force_of(force)};
            if (!planned(&po, x.N, c.T, c.H, c.K, c.V, Lr, shows, what))
                fprintf(stderr, "  FAIL %s: the plan does not show what was forced\n", what), fails++;
            rec_out got = rec_run_seeded_opts(ctx, &po, xc, cu, x.dout, x.dht);
            rec_out again = rec_run_seeded_opts(ctx, &po, xc, cu, x.dout, x.dht);
            const double tol = tf32 ? 4e-3 : 2e-4;
            fails += rec_fails_tol(what, NULL, &got, &ref, tol);
            fails += rec_fails_tol(what, "vs the plan's own choice", &got, &base, tol);
            fails += rec_fails_rerun(what, &got, &again);
            rec_out_free(&again);
            rec_out_free(&got);
            rec_out_free(&base);
        }
    ctx->matmul_tf32 = 0;
    rec_out_free(&ref);
    free(x.dout);
    free(x.dht);
    pr_step_reset(ctx);
    return fails;
}

static int check_forced(pr_rule rule, int64_t K, int64_t L, uint64_t seed, const char *force, const plan_want *shows,
                        forced_products prods)
{
    return check_forced_v(rule, K, 40, L, seed, force, shows, prods);
}

/* check_forced with prism_core's extras in the core kernels (extras_apart
 * off): the checks of those kernels' extra-key paths, which TF32 runs would
 * otherwise route around (test_extras_apart) */
static int check_forced_native(pr_rule rule, int64_t K, int64_t L, uint64_t seed, const char *force,
                               const plan_want *shows, forced_products prods)
{
    char both[160];
    snprintf(both, sizeof both, "extras_apart=off,%s", force);
    return check_forced(rule, K, L, seed, both, shows, prods);
}

/* gdn's plan (C = 32, K = 96, TF32) with forcing fields f stops, naming needle */
static void expect_force_refused(pr_rec_force f, const char *needle)
{
    const pr_recurrence_opts po = {.rule = PR_RULE_GDN, .chunk = 32, .tf32 = 1, .force = f};
    pr_rec_plan plan;
    char why[256];
    PR_EXPECT_FATAL(pr_recurrence_plan(&po, PR_CUDA, 1, 100, 2, 96, 40, 0, &plan, why, sizeof why), needle);
}

/* the engine field of f named field (prep, state, scores, dstate or wy) */
static pr_rec_engine *engine_field(pr_rec_force *f, const char *field)
{
    if (!strcmp(field, "prep")) return &f->prep;
    if (!strcmp(field, "state")) return &f->state;
    if (!strcmp(field, "scores")) return &f->scores;
    if (!strcmp(field, "dstate")) return &f->dstate;
    assert_string_equal(field, "wy");
    return &f->wy;
}

/* wy's K tiles (ops/recurrence/cuda/wy.cu): the plan takes several only where the
 * whole K would keep a block alone on an SM (C = 64, K = 128: the K128-V96
 * case above), so force.bk_wy = 32 forces three at K = 96, for every delta
 * rule (prism_core at L = 3: two extras a product and then one, and at L =
 * 2). */
static void test_wy_ktiles(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    int fails = 0;
    const plan_want bk32 = {.pass = PR_REC_PASS_WY, .bk = 32};
    for (int r = 0; r < PR_NRULES; r++)
        if (pr_rule_has_beta((pr_rule)r))
            fails += check_forced_native((pr_rule)r, 96, 3, 1500 + r, "bk_wy=32", &bk32, FORCED_FP32_AND_TF32);
    fails += check_forced_native(PR_RULE_PRISM_CORE, 96, 2, 1599, "bk_wy=32", &bk32, FORCED_FP32_AND_TF32);
    /* a tile that does not divide K's padded width is refused naming the field */
    expect_force_refused((pr_rec_force){.bk_wy = 64}, "force.bk_wy");
    assert_int_equal(fails, 0);
}

/* grad's warp blocks in several passes (ops/recurrence/cuda/grad.cu): the plan makes
 * more than one only past 64 blocks (large L), so force.grad_bpw = 4
 * forces them on prism_core at L = 2, K = 32 (C = 64: 44 blocks, two
 * passes; C = 32: 16, one), and gdn takes 8 a warp (one pass, most of the
 * registers idle); force.bk_grad forces K tiles of 32. The wgmma form
 * (TF32 on a build for sm_90a): force.grad_pieces = 2 makes several
 * passes of gdn at K = 96 (C = 32: 7 pieces, some padded from 32 rows to
 * 64, and rows read past the tile's data) and of prism_core at L = 2, K =
 * 32 (C = 64: 11; C = 32: 6, each product padded). BPW forces the mma.sync form, so
 * the runs above compare it with the wgmma one where the build has it. */
static void test_grad_passes(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    const plan_want bpw4 = {.pass = PR_REC_PASS_GRAD, .engine = PR_REC_MMA, .grad_blocks = 4};
    const plan_want bpw8 = {.pass = PR_REC_PASS_GRAD, .engine = PR_REC_MMA, .grad_blocks = 8, .grad_passes = 1};
    const plan_want bk32 = {.pass = PR_REC_PASS_GRAD, .bk = 32};
    int fails = check_forced_native(PR_RULE_PRISM_CORE, 32, 2, 1601, "grad_bpw=4", &bpw4, FORCED_FP32_AND_TF32);
    fails += check_forced(PR_RULE_GDN, 96, 0, 1602, "grad_bpw=8", &bpw8, FORCED_FP32_AND_TF32);
    /* and K tiles of 32 (three at K = 96, each with its own partial dG) */
    fails += check_forced(PR_RULE_GDN, 96, 0, 1603, "bk_grad=32", &bk32, FORCED_FP32_AND_TF32);
    fails += check_forced_native(PR_RULE_PRISM_CORE, 96, 1, 1604, "bk_grad=32", &bk32, FORCED_FP32_AND_TF32);
    const pr_recurrence_opts p64 = {.rule = PR_RULE_PRISM_CORE, .chunk = 64, .force = {.grad_bpw = 4}};
    const plan_want two_passes = {.pass = PR_REC_PASS_GRAD, .engine = PR_REC_MMA, .grad_blocks = 4, .grad_passes = 2};
    if (!planned(&p64, 1, 100, 2, 32, 40, 2, &two_passes, "prism_core L=2 K=32 C=64 grad_bpw=4 (two passes)"))
        fails++;
    expect_force_refused((pr_rec_force){.grad_bpw = 5}, "force.grad_bpw");
    const pr_recurrence_opts tf = {.rule = PR_RULE_GDN, .chunk = 64, .tf32 = 1};
    const plan_want grad_wg = {.pass = PR_REC_PASS_GRAD, .engine = PR_REC_WGMMA};
    if (!planned(&tf, 1, 100, 2, 96, 40, 0, &grad_wg, "gdn K=96 C=64 tf32")) {
        fprintf(stderr, "  skipped grad's wgmma form: this build has none\n");
    } else {
        const plan_want two = {.pass = PR_REC_PASS_GRAD, .engine = PR_REC_WGMMA, .grad_blocks = 2, .grad_passes = 2};
        fails += check_forced(PR_RULE_GDN, 96, 0, 1605, "grad_pieces=2", &two, FORCED_TF32_ONLY);
        fails += check_forced_native(PR_RULE_PRISM_CORE, 32, 2, 1606, "grad_pieces=2", &two, FORCED_TF32_ONLY);
        expect_force_refused((pr_rec_force){.grad_pieces = 5}, "force.grad_pieces");
    }
    /* the two fields force different forms: both set is refused */
    expect_force_refused((pr_rec_force){.grad_bpw = 4, .grad_pieces = 2}, "force.grad_pieces");
    assert_int_equal(fails, 0);
}

/* gdn's TF32 plan (C = 64, K = 96, V = 40) runs the state pass's wgmma
 * form with V tiles of 32, else the test skips: this build (or GPU) has no
 * wgmma */
static void skip_without_wgmma(const char *what)
{
    const pr_recurrence_opts tf = {.rule = PR_RULE_GDN, .chunk = 64, .tf32 = 1};
    const plan_want w = {.pass = PR_REC_PASS_STATE, .engine = PR_REC_WGMMA, .bv = 32};
    if (!planned(&tf, 1, 100, 2, 96, 40, 0, &w, "gdn K=96 C=64 tf32")) {
        fprintf(stderr, "  skipped %s: this build has none\n", what);
        skip();
    }
}

/* The state pass's wgmma form (ops/recurrence/cuda/state.cu), which TF32
 * runs take where the build has it: force.state = mma forces the
 * mma.sync form, compared with it (and both with the CPU in f64) at
 * padded K (96 in two pieces of 64, 32 in one), with extras (prism_core L =
 * 2, where wgmma forces the form), without beta (ssd), at partial chunks and V
 * tiles (T = 100, V = 40). */
static void test_state_wg(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    skip_without_wgmma("the state pass's wgmma form");
    pr_rec_plan plan;
    char why[256];
    const plan_want mma = {.pass = PR_REC_PASS_STATE, .engine = PR_REC_MMA, .bv = 32, .segments = 1};
    const plan_want wg = {.pass = PR_REC_PASS_STATE, .engine = PR_REC_WGMMA, .bv = 32};
    int fails = check_forced(PR_RULE_GDN, 96, 0, 1701, "state=mma", &mma, FORCED_TF32_ONLY);
    /* prism_core keeps mma.sync unless forced (its extras' rows load unhidden) */
    fails += check_forced_native(PR_RULE_PRISM_CORE, 32, 2, 1702, "state=wgmma", &wg, FORCED_TF32_ONLY);
    fails += check_forced(PR_RULE_SSD, 128, 0, 1703, "state=mma", &mma, FORCED_TF32_ONLY);
    fails += check_forced(PR_RULE_DELTA, 64, 0, 1704, "state=mma", &mma, FORCED_TF32_ONLY);
    expect_force_refused((pr_rec_force){.state = (pr_rec_engine)3}, "force.state");
    /* insisting on the form where it cannot run (K > 128) stops, naming the field */
    const pr_recurrence_opts tf = {.rule = PR_RULE_GDN, .chunk = 64, .tf32 = 1, .force = {.state = PR_REC_WGMMA}};
    PR_EXPECT_FATAL(pr_recurrence_plan(&tf, PR_CUDA, 1, 100, 2, 160, 40, 0, &plan, why, sizeof why), "force.state");
    assert_int_equal(fails, 0);
}

/* A pass's engine field (prep, state, scores, dstate or wy) against the
 * plan: gdn's TF32 plan at the benchmark's two sizes (K = V = 128, H = 16;
 * N = 8 T = 2048 and N = 2 T = 8192) shows sizes[0] and sizes[1]; the
 * field = wgmma then forces the form (the plan shows on) and = mma the
 * mma.sync one (off; only where V <= off_v) for each case, each compared
 * with the plan's own choice, the CPU in f64 and a rerun (check_forced_v,
 * seeds from seed); a value outside the enum is refused, and wgmma with
 * extra writes (prism_core, L = 2) stops, naming the field and L. */
typedef struct {
    pr_rule rule;
    int64_t K, V;
} wg_case;
static int check_wg_force(const char *field, const plan_want sizes[2], const plan_want *on, const plan_want *off,
                          int64_t off_v, const wg_case *fc, int n, uint64_t seed)
{
    pr_rec_plan plan;
    char why[256], text[64], needle[64];
    volatile int fails = 0;   /* PR_EXPECT_FATAL longjmps back into this frame */
    const pr_recurrence_opts tf = {.rule = PR_RULE_GDN, .chunk = 64, .tf32 = 1};
    const int64_t NT[2][2] = {{8, 2048}, {2, 8192}};
    for (int i = 0; i < 2; i++) {
        char what[96];
        snprintf(what, sizeof what, "gdn N=%lld T=%lld H=16 K=V=128 (%s)", (long long)NT[i][0], (long long)NT[i][1],
                 field);
        if (!planned(&tf, NT[i][0], NT[i][1], 16, 128, 128, 0, &sizes[i], what)) fails++;
    }
    for (int i = 0; i < n; i++) {
        snprintf(text, sizeof text, "%s=wgmma", field);
        fails += check_forced_v(fc[i].rule, fc[i].K, fc[i].V, 0, seed + i, text, on, FORCED_TF32_ONLY);
        snprintf(text, sizeof text, "%s=mma", field);
        if (fc[i].V <= off_v)
            fails += check_forced_v(fc[i].rule, fc[i].K, fc[i].V, 0, seed + 10 + i, text, off, FORCED_TF32_ONLY);
    }
    snprintf(needle, sizeof needle, "force.%s", field);
    pr_rec_force bad = {0};
    *engine_field(&bad, field) = (pr_rec_engine)3;
    expect_force_refused(bad, needle);
    /* apart, the extras leave the core's kernels at L = 0: keep them in */
    snprintf(text, sizeof text, "extras_apart=off,%s=wgmma", field);
    const pr_recurrence_opts pc = {.rule = PR_RULE_PRISM_CORE, .chunk = 64, .tf32 = 1, .force = force_of(text)};
    PR_EXPECT_FATAL(pr_recurrence_plan(&pc, PR_CUDA, 1, 100, 2, 32, 40, 2, &plan, why, sizeof why), "L = 2");
    PR_EXPECT_FATAL(pr_recurrence_plan(&pc, PR_CUDA, 1, 100, 2, 32, 40, 2, &plan, why, sizeof why), needle);
    return fails;
}

/* The dstate pass's wgmma form (ops/recurrence/cuda/dstate.cu): the
 * plan takes it where it keeps as many SMs at work as mma.sync, with V
 * tiles of 128 at the benchmark's size 1 and of 32 at its size 2 (32 heads:
 * 128 blocks); each form forced at padded K (96 in two pieces of 64; 32
 * and 64 in one), with and without beta, at partial chunks (T = 100) and
 * partial V tiles (V = 40 in tiles of 32: the second tile's second
 * warpgroup all past V; V = 96), and each V tile forced: 64 (V = 40: the
 * second warpgroup's columns partly past V) and 128 (V = 130: a second
 * tile of two columns, odd widths without vector loads). */
static void test_dstate_wg(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    skip_without_wgmma("the wgmma forms");
    const plan_want sizes[2] = {{.pass = PR_REC_PASS_DSTATE, .engine = PR_REC_WGMMA, .bv = 128},
                                {.pass = PR_REC_PASS_DSTATE, .engine = PR_REC_WGMMA, .bv = 32}};
    const plan_want off = {.pass = PR_REC_PASS_DSTATE, .engine = PR_REC_MMA, .bv = 32, .segments = 1};
    const wg_case fc[] = {{PR_RULE_GDN, 96, 40}, {PR_RULE_SSD, 128, 40}, {PR_RULE_DELTA, 64, 40},
                          {PR_RULE_LINATTN, 32, 40}, {PR_RULE_GDN, 128, 96}};
    int fails = check_wg_force("dstate", sizes, &sizes[1], &off, INT64_MAX, fc, 5, 1801);
    const plan_want bv64 = {.pass = PR_REC_PASS_DSTATE, .engine = PR_REC_WGMMA, .bv = 64};
    const plan_want bv128 = {.pass = PR_REC_PASS_DSTATE, .engine = PR_REC_WGMMA, .bv = 128};
    fails += check_forced_v(PR_RULE_GDN, 96, 40, 0, 1821, "bv_dstate=64", &bv64, FORCED_TF32_ONLY);
    fails += check_forced_v(PR_RULE_SSD, 64, 40, 0, 1822, "bv_dstate=64", &bv64, FORCED_TF32_ONLY);
    fails += check_forced_v(PR_RULE_DELTA, 128, 130, 0, 1823, "bv_dstate=128", &bv128, FORCED_TF32_ONLY);
    fails += check_forced_v(PR_RULE_LINATTN, 38, 130, 0, 1824, "bv_dstate=128", &bv128, FORCED_TF32_ONLY);
    assert_int_equal(fails, 0);
}

/* The scores kernels' wgmma form (ops/recurrence/cuda/scores.cu): the
 * plan takes it for TF32 runs without extra writes at both benchmark sizes;
 * each form forced at both chunk sizes (C = 32 leaves half of its 64 rows
 * empty), padded K (96 and 128 in four pieces of 32, 32 and 38 in two), with
 * and without beta and g, partial chunks (T = 100), partial V tiles (V = 40;
 * V = 96: the output's second tile partial; V = 130: odd widths, no vector
 * loads, three output tiles; mma.sync's dlocal tile is 64 up to V = 96). */
static void test_scores_wg(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    skip_without_wgmma("the wgmma forms");
    /* the output's V tiles of 64 (and dlocal's of 128 with it, the same engine field) */
    const plan_want wg = {.pass = PR_REC_PASS_OUTPUT, .engine = PR_REC_WGMMA, .bv = 64};
    const plan_want sizes[2] = {wg, wg};
    const plan_want off = {.pass = PR_REC_PASS_DLOCAL, .engine = PR_REC_MMA, .bv = 64};
    const wg_case fc[] = {{PR_RULE_GDN, 96, 40},     {PR_RULE_SSD, 128, 40}, {PR_RULE_DELTA, 64, 40},
                          {PR_RULE_LINATTN, 32, 40}, {PR_RULE_GDN, 128, 96}, {PR_RULE_DELTA, 38, 130}};
    int fails = check_wg_force("scores", sizes, &wg, &off, 96, fc, 6, 1901);
    const pr_recurrence_opts tf = {.rule = PR_RULE_GDN, .chunk = 64, .tf32 = 1};
    const plan_want dloc = {.pass = PR_REC_PASS_DLOCAL, .engine = PR_REC_WGMMA, .bv = 128};
    if (!planned(&tf, 8, 2048, 16, 128, 128, 0, &dloc, "gdn size 1 dlocal")) fails++;
    assert_int_equal(fails, 0);
}

/* wy's wgmma form (ops/recurrence/cuda/wy.cu): the plan takes it for
 * TF32 delta rules without extra writes at both benchmark sizes; forced at
 * both chunk sizes, K in one tile of 64 (32, 64) and two (96: the second
 * partial; 128), odd K without vector loads (38), partial chunks (T = 100)
 * and V tiles (V = 40; 96: the second partial; 130: three). mma.sync's wy
 * with TF32 stays covered by prism_core's extra writes. */
static void test_wy_wg(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    skip_without_wgmma("the wgmma forms");
    const plan_want wg = {.pass = PR_REC_PASS_WY, .engine = PR_REC_WGMMA, .bk = 64, .bv = 64};
    const plan_want sizes[2] = {wg, wg};
    const wg_case fc[] = {{PR_RULE_GDN, 96, 40},  {PR_RULE_DELTA, 64, 40}, {PR_RULE_GDN, 128, 96},
                          {PR_RULE_DELTA, 38, 130}, {PR_RULE_GDN, 32, 40}};
    int fails = check_wg_force("wy", sizes, &wg, NULL, 0, fc, 5, 2001);
    /* a K tile forced for wy is mma.sync's: insisting on wgmma too stops, naming both */
    pr_rec_plan plan;
    char why[256];
    const pr_recurrence_opts tf = {.rule = PR_RULE_GDN, .chunk = 64, .tf32 = 1,
                                   .force = {.bk_wy = 32, .wy = PR_REC_WGMMA}};
    PR_EXPECT_FATAL(pr_recurrence_plan(&tf, PR_CUDA, 1, 100, 2, 64, 40, 0, &plan, why, sizeof why), "force.bk_wy");
    assert_int_equal(fails, 0);
}

/* prep's wgmma form (ops/recurrence/cuda/prep.cu): the plan takes it for
 * TF32 delta rules without extra writes at both benchmark sizes; forced at
 * both chunk sizes (C = 32 leaves T''s rows and columns 32..63 zero), K in
 * two pieces of 32 (32, 38: odd, no vector loads; 64) and four (96, 128),
 * partial chunks (T = 100), V of one partial tile (40, 72, 96); V > 128
 * keeps mma.sync, and insisting stops, naming V. */
static void test_prep_wg(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    skip_without_wgmma("the wgmma forms");
    const plan_want wg = {.pass = PR_REC_PASS_PREP, .engine = PR_REC_WGMMA, .bv = 128};
    const plan_want sizes[2] = {wg, wg};
    const wg_case fc[] = {{PR_RULE_GDN, 96, 40},  {PR_RULE_DELTA, 64, 40}, {PR_RULE_GDN, 128, 96},
                          {PR_RULE_DELTA, 38, 72}, {PR_RULE_GDN, 32, 40}};
    int fails = check_wg_force("prep", sizes, &wg, NULL, 0, fc, 5, 2101);
    pr_rec_plan plan;
    char why[256];
    const pr_recurrence_opts tf = {.rule = PR_RULE_GDN, .chunk = 64, .tf32 = 1};
    const plan_want mma = {.pass = PR_REC_PASS_PREP, .engine = PR_REC_MMA};
    if (!planned(&tf, 1, 100, 2, 64, 130, 0, &mma, "gdn K=64 V=130 (prep's mma.sync form)")) fails++;
    const pr_recurrence_opts insist = {.rule = PR_RULE_GDN, .chunk = 64, .tf32 = 1, .force = {.prep = PR_REC_WGMMA}};
    PR_EXPECT_FATAL(pr_recurrence_plan(&insist, PR_CUDA, 1, 100, 2, 64, 130, 0, &plan, why, sizeof why), "V = 130");
    assert_int_equal(fails, 0);
}

/* prism_core's extras apart (ops/recurrence/cuda/extras.cu): by
 * default at C = 64 (their wgmma forms), not at 32; force.extras_apart on takes
 * them for TF32 runs at both benchmark sizes and both chunk sizes; forced
 * at both chunk sizes, L = 1 and 2, K in one tile of 32 and several (96:
 * the core's wgmma pieces padded; 128), odd K and V without vector loads
 * (38, 130: three V tiles of the extras' forward; V = 130 keeps the
 * mma.sync forms at C = 64, every other case takes the wgmma ones there),
 * partial chunks (T = 100), each against the CPU in f64, the plan's own
 * choice and a rerun. A value outside the enum is refused; on stops, naming the field, where the
 * core has no wgmma forms (K = 160) or the extras' backward no room (C = 64
 * at L = 3). */
static void test_extras_apart(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    skip_without_wgmma("the wgmma forms");
    pr_rec_plan plan;
    char why[256];
    int fails = 0;
    const int64_t NT[2][2] = {{8, 2048}, {2, 8192}};
    for (int chunk = 32; chunk <= 64; chunk += 32)
        for (int i = 0; i < 2; i++) {
            const pr_recurrence_opts po = {.rule = PR_RULE_PRISM_CORE, .chunk = chunk, .tf32 = 1,
                                           .force = {.extras_apart = PR_REC_ON}};
            /* at C = 64 their wgmma forms, at 32 the mma.sync ones */
            const plan_want w = {.apart = true, .apart_engine = chunk == 64 ? PR_REC_WGMMA : PR_REC_MMA};
            char what[96];
            snprintf(what, sizeof what, "prism_core C=%d N=%lld T=%lld H=16 K=V=128 L=2 extras_apart=on", chunk,
                     (long long)NT[i][0], (long long)NT[i][1]);
            if (!planned(&po, NT[i][0], NT[i][1], 16, 128, 128, 2, &w, what)) fails++;
        }
    /* the plan's own choice: apart exactly where the wgmma extras run (C = 64) */
    for (int chunk = 32; chunk <= 64; chunk += 32) {
        const pr_recurrence_opts po = {.rule = PR_RULE_PRISM_CORE, .chunk = chunk, .tf32 = 1};
        const bool ok = pr_recurrence_plan(&po, PR_CUDA, 8, 2048, 16, 128, 128, 2, &plan, why, sizeof why);
        const bool apart = ok && plan.extras_apart;
        if (!ok || apart != (chunk == 64))
            fprintf(stderr, "  FAIL prism_core C=%d by default: extras %s%s\n", chunk, apart ? "apart" : "not apart",
                    ok ? "" : why), fails++;
    }
    const struct {
        int64_t K, V, L;
    } xc[] = {{32, 40, 2}, {38, 130, 1}, {96, 40, 2}, {128, 96, 2}, {64, 72, 1}};
    const plan_want apart = {.apart = true};
    for (int i = 0; i < 5; i++)
        fails += check_forced_v(PR_RULE_PRISM_CORE, xc[i].K, xc[i].V, xc[i].L, 2201 + i, "extras_apart=on", &apart,
                                FORCED_TF32_ONLY);
    pr_recurrence_opts p32 = {.rule = PR_RULE_PRISM_CORE, .chunk = 32, .tf32 = 1,
                              .force = {.extras_apart = (pr_rec_switch)3}};
    PR_EXPECT_FATAL(pr_recurrence_plan(&p32, PR_CUDA, 1, 100, 2, 96, 40, 2, &plan, why, sizeof why),
                    "force.extras_apart");
    p32.force.extras_apart = PR_REC_ON;
    const pr_recurrence_opts p64 = {.rule = PR_RULE_PRISM_CORE, .chunk = 64, .tf32 = 1,
                                    .force = {.extras_apart = PR_REC_ON}};
    PR_EXPECT_FATAL(pr_recurrence_plan(&p32, PR_CUDA, 1, 100, 2, 160, 40, 2, &plan, why, sizeof why),
                    "force.extras_apart");
    PR_EXPECT_FATAL(pr_recurrence_plan(&p64, PR_CUDA, 1, 100, 2, 96, 40, 3, &plan, why, sizeof why), "L = 3");
    assert_int_equal(fails, 0);
}

/* The plan: chunk is a size (the chunked form runs chunks of exactly the
 * chunk asked for), and what the kernels cannot run is an error naming the
 * limit, never a silent fallback to another form or size. */
static void test_plan(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    char why[256], line[640];
    pr_rec_plan plan;
    for (int r = 0; r < PR_NRULES; r++) {
        for (int chunk = 0; chunk <= 64; chunk += 32) {
            const pr_recurrence_opts o = {.rule = (pr_rule)r, .chunk = chunk};
            if (!pr_recurrence_plan(&o, PR_CUDA, 8, 2048, 16, 128, 128, 2, &plan, why, sizeof why))
                fail_msg("%s chunk %d at the bench size: %s", pr_rule_name((pr_rule)r), chunk, why);
            assert_int_equal(plan.chunk, chunk);
            pr_rec_plan_format(&plan, line, sizeof line);
            fprintf(stderr, "  %-10s %s\n", pr_rule_name((pr_rule)r), line);
        }
        const pr_recurrence_opts bad = {.rule = (pr_rule)r, .chunk = 16};
        assert_false(pr_recurrence_plan(&bad, PR_CUDA, 8, 2048, 16, 128, 128, 2, &plan, why, sizeof why));
        assert_non_null(strstr(why, "32 or 64"));
    }
    /* prism_core at K = V = 256 with 4 extra writes: as asked, or refused naming shared memory */
    for (int chunk = 32; chunk <= 64; chunk += 32) {
        const pr_recurrence_opts o = {.rule = PR_RULE_PRISM_CORE, .chunk = chunk};
        if (pr_recurrence_plan(&o, PR_CUDA, 8, 2048, 16, 256, 256, 4, &plan, why, sizeof why)) {
            assert_int_equal(plan.chunk, chunk);
            pr_rec_plan_format(&plan, line, sizeof line);
            fprintf(stderr, "  prism_core K=V=256 L=4: %s\n", line);
        } else {
            assert_non_null(strstr(why, "shared memory"));
            fprintf(stderr, "  prism_core K=V=256 L=4 chunk %d: %s\n", chunk, why);
        }
    }
    /* the serial passes segment on their own where heads x V tiles leave most
     * SMs idle: one sequence of 16K tokens, 8 heads of 96 (24 blocks), and
     * then take V tiles wider than 32 (test_segments runs both tile widths,
     * with the fix-up and with a last serial pass) */
    for (int r = 0; r < PR_NRULES; r++) {
        if (pr_rule_g_per_key((pr_rule)r)) continue;   /* gla's chunked passes do not segment */
        const pr_recurrence_opts o = {.rule = (pr_rule)r, .chunk = 32};
        if (!pr_recurrence_plan(&o, PR_CUDA, 1, 16384, 8, 96, 96, 2, &plan, why, sizeof why))
            fail_msg("%s at B=1 T=16384 H=8 K=V=96: %s", pr_rule_name((pr_rule)r), why);
        pr_rec_plan_format(&plan, line, sizeof line);
        fprintf(stderr, "  %-10s B=1 T=16384 H=8 K=V=96: %s\n", pr_rule_name((pr_rule)r), line);
        assert_true(plan.segments > 1);
        assert_int_not_equal(plan.pass[PR_REC_PASS_STATE].bv, 32);
    }
    /* where the unsegmented passes' wgmma forms run, they win over segments
     * that save less than their steps do: linattn at B=2
     * T=8192 H=16 K=V=128 (32 heads) stays whole with TF32, segments in fp32;
     * at B=1 (16 heads) the segments save more and stay */
    for (int tf32 = 0; tf32 <= 1; tf32++)
        for (int n = 1; n <= 2; n++) {
            const pr_recurrence_opts o = {.rule = PR_RULE_LINATTN, .chunk = 64, .tf32 = tf32};
            if (!pr_recurrence_plan(&o, PR_CUDA, n, 8192, 16, 128, 128, 0, &plan, why, sizeof why))
                fail_msg("linattn at B=%d T=8192 H=16 K=V=128: %s", n, why);
            pr_rec_plan_format(&plan, line, sizeof line);
            fprintf(stderr, "  linattn B=%d T=8192 H=16 K=V=128 %s: %s\n", n, tf32 ? "tf32" : "fp32", line);
            /* an sm_90a build on sm_90 */
            const bool wg = tf32 && plan.pass[PR_REC_PASS_OUTPUT].engine == PR_REC_WGMMA;
            if (wg && n == 2) {
                assert_int_equal(plan.segments, 1);
                assert_int_equal(plan.pass[PR_REC_PASS_DSTATE].engine, PR_REC_WGMMA);
                assert_int_equal(plan.pass[PR_REC_PASS_DSTATE].bv, 32);
            } else {
                assert_true(plan.segments > 1);
            }
        }
    /* gla's chunks: K <= 128 at C = 64, K <= 256 at C = 32, beyond that refused naming shared memory */
    const pr_recurrence_opts g64 = {.rule = PR_RULE_GLA, .chunk = 64}, g32 = {.rule = PR_RULE_GLA, .chunk = 32};
    assert_true(pr_recurrence_plan(&g64, PR_CUDA, 8, 2048, 16, 128, 128, 0, &plan, why, sizeof why));
    assert_true(plan.gla && plan.chunk == 64);
    pr_rec_plan_format(&plan, line, sizeof line);
    assert_non_null(strstr(line, "gla_state"));
    assert_true(pr_recurrence_plan(&g32, PR_CUDA, 1, 100, 2, 256, 64, 0, &plan, why, sizeof why));
    assert_false(pr_recurrence_plan(&g64, PR_CUDA, 1, 100, 2, 256, 64, 0, &plan, why, sizeof why));
    assert_non_null(strstr(why, "shared memory"));
    assert_non_null(strstr(why, "chunk = 32 needs less"));
    /* the call itself stops with the same message */
    pr_ctx *ctx = g_ctx;
    pr_rng r = pr_rng_init(5, 0);
    pr_recurrence_inputs in = pr_recurrence_random(ctx, &r, PR_F32, PR_RULE_GDN, 1, 8, 1, 8, 8, 0, false);
    pr_tensor *x[REC_NIN];
    rec_in_array(&in, x);
    for (int i = 0; i < REC_NIN; i++)
        if (x[i]) x[i] = pr_to(ctx->step, x[i], PR_F32, PR_CUDA);
    const pr_recurrence_opts o = {.rule = PR_RULE_GDN, .chunk = 16};
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, x[0], x[1], x[2], x[3], x[4], NULL, NULL, NULL, NULL, NULL), "32 or 64");
    pr_step_reset(ctx);
}

/* f64 tensors on CUDA are refused with a clear message */
static void test_f64_refused(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = g_ctx;
    pr_rng r = pr_rng_init(5, 0);
    pr_recurrence_inputs in = pr_recurrence_random(ctx, &r, PR_F64, PR_RULE_GDN, 1, 8, 1, 8, 8, 0, false);
    pr_tensor *x[REC_NIN];
    rec_in_array(&in, x);
    for (int i = 0; i < REC_NIN; i++)
        if (x[i]) x[i] = pr_to(ctx->step, x[i], PR_F64, PR_CUDA);
    pr_recurrence_opts o = {.rule = PR_RULE_GDN, .chunk = 64};
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, x[0], x[1], x[2], x[3], x[4], NULL, NULL, NULL, NULL, NULL), "f32");
    pr_step_reset(ctx);
}

/* gla under strong per-key decays, log-decays in [-8, -2] (logsigmoid / 16
 * of gates far below zero; a chunk of 64 sums to about -320, so an
 * unfactored e^{-G} would overflow), and at odd K, V with mild and strong
 * decays, with h0 and packed sequences: o, ht and every gradient within
 * 2e-4 of the CPU's f64 (per-token and chunked fp32 forms; 4e-3 with TF32
 * products), and the kernels deterministic. dg comes from reverse sums of
 * q.dq - k.dk whose terms are far larger than dg under strong decays (as in
 * fla's chunk_gla), so this measures how much that costs in f32 against the
 * largest dg. */
/* one gla case: log-decays uniform-ish in [glo, ghi], every form against the CPU's f64 per-token run;
 * fast: the chunked forms in the fast kernels (force.gla_fast, its plan asserted), the per-token form left out */
static int gla_case_forced(const rec_case *c, double glo, double ghi, uint64_t seed, bool fast)
{
    pr_ctx *ctx = g_ctx;
    rec_inputs x = make_inputs(ctx, PR_RULE_GLA, c, seed);
    double *g = x.in[PR_REC_G]->data;
    for (int64_t i = 0; i < x.in[PR_REC_G]->numel; i++)
        g[i] = ghi + (glo - ghi) * (0.5 + 0.5 * tanh(pr_philox_normal(seed, 1, (uint64_t)i)));
    rec_out ref = rec_run_seeded(ctx, PR_RULE_GLA, 0, x.in, x.cu, x.dout, x.dht);
    pr_tensor *xc[REC_NIN], *cu;
    to_cuda(ctx, &x, xc, &cu);
    /* TF32: 1e-2, not the delta rules' 4e-3: on the H200 (2026-12-05) every output and
     * gradient but dg stayed within 5.3e-4, and dg, a reverse sum of q.dq - k.dk whose
     * terms are far larger than dg under log-decays in [-8, -2], reached 4.6e-3 (per
     * key) and 7.3e-3 (per value): TF32's 2^-11 rounding of those terms, amplified by the
     * cancellation; the fp32 forms give 5e-6 on the same cases */
    const struct { int chunk, tf32; double tol; } forms[] = {{0, 0, 2e-4}, {64, 0, 2e-4}, {32, 0, 2e-4}, {64, 1, 1e-2},
                                                              {32, 1, 1e-2}};
    int fails = 0;
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        if (fast && !forms[f].chunk) continue;
        if (c->K > 128 && forms[f].chunk == 64) continue;   /* chunks of 64 take K <= 128 (shared memory) */
        ctx->matmul_tf32 = forms[f].tf32;
        const pr_recurrence_opts o = {.rule = PR_RULE_GLA, .chunk = forms[f].chunk,
                                      .force = {.gla_fast = fast ? PR_REC_ON : PR_REC_OFF}};
        if (fast) { /* the plan of this call runs the fast kernels */
            char why[256];
            pr_rec_plan plan;
            assert_true(pr_recurrence_plan(&o, PR_CUDA, c->cu ? c->ncu - 1 : c->B, c->T, c->H, c->K, c->V, 0, &plan,
                                           why, sizeof why));
            assert_true(plan.gla_fast && plan.chunk == forms[f].chunk);
        }
        rec_out got = rec_run_seeded_opts(ctx, &o, xc, cu, x.dout, x.dht);
        rec_out again = rec_run_seeded_opts(ctx, &o, xc, cu, x.dout, x.dht);
        char what[112];
        snprintf(what, sizeof what, "gla %s gk in [%g,%g] chunk %d%s%s", c->name, glo, ghi, forms[f].chunk,
                 forms[f].tf32 ? " tf32" : "", fast ? " fast" : "");
        const double e = rec_report(what, &got, &ref);
        if (!rec_same_bits(&got, &again)) fprintf(stderr, "  FAIL %s: two runs differ\n", what), fails++;
        if (!(e <= forms[f].tol)) fprintf(stderr, "  FAIL %s: worst %.3g > %.1g\n", what, e, forms[f].tol), fails++;
        rec_out_free(&got);
        rec_out_free(&again);
    }
    ctx->matmul_tf32 = 0;
    rec_out_free(&ref);
    free(x.dout);
    free(x.dht);
    pr_step_reset(ctx);
    return fails;
}

static int gla_case(const rec_case *c, double glo, double ghi, uint64_t seed)
{
    return gla_case_forced(c, glo, ghi, seed, false);
}

static void test_gla_strong_decay(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    static const int64_t cu_s[] = {0, 37, 300}, cu_o[] = {0, 1, 17, 80, 213};
    const rec_case strong = {"packed", 1, 300, 3, 40, 24, 0, true, cu_s, 3};
    /* odd K and V (not multiples of 4: element-wise tiles), sequences of 1, 16, 63 and 133 tokens */
    const rec_case odd = {"odd-packed", 1, 213, 2, 37, 21, 0, true, cu_o, 5};
    int fails = gla_case(&strong, -8, -2, 1901);
    fails += gla_case(&odd, -0.5, -0.01, 1902);
    fails += gla_case(&odd, -8, -2, 1903);
    assert_int_equal(fails, 0);
}

/* gla's fast chunked kernels (force.gla_fast on: cumulative decays summed once, the serial
 * passes in K tiles of 64, the own sub-chunk's pairs a thread a pair, A stored by the forward
 * and read by gla_dv_a, dg summed in shared memory) on test_gla_strong_decay's cases, and at
 * K = 100, V = 40 (two K tiles, the second of 36 real rows; two V tiles) with a sequence of
 * 200 tokens (chunks of 64 and 32 with a partial last one) beside shorter ones, a batch of
 * two at K = 128, K = 200 in chunks of 32 (four K tiles, the last of 8 real rows), and K = 75,
 * V = 21 (two K tiles, the second of 11 real rows, with rows not multiples of 4: element-wise
 * loads and stores at a K tile's offset): the same bounds against the CPU's f64,
 * deterministic, the plan asserted to run them; a per-value decay refuses the field naming it; the
 * default plan takes them for per-key decays, off and per-value decays the plain kernels. */
static void test_gla_fast(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    static const int64_t cu_s[] = {0, 37, 300}, cu_o[] = {0, 1, 17, 80, 213}, cu_w[] = {0, 200, 263};
    const rec_case strong = {"packed", 1, 300, 3, 40, 24, 0, true, cu_s, 3};
    const rec_case odd = {"odd-packed", 1, 213, 2, 37, 21, 0, true, cu_o, 5};
    const rec_case wide = {"ktiles", 1, 263, 2, 100, 40, 0, true, cu_w, 3};
    const rec_case batch = {"batch", 2, 150, 2, 128, 36, 0, true, NULL, 0};
    const rec_case wide_k = {"k200", 1, 100, 2, 200, 24, 0, true, NULL, 0};   /* chunks of 32: K tiles 64, 64, 64, 8 */
    const rec_case odd_k = {"odd-ktiles", 1, 213, 2, 75, 21, 0, true, cu_o, 5};   /* K tiles 64, 11 */
    int fails = gla_case_forced(&strong, -8, -2, 1901, true);
    fails += gla_case_forced(&odd, -0.5, -0.01, 1902, true);
    fails += gla_case_forced(&odd, -8, -2, 1903, true);
    fails += gla_case_forced(&wide, -8, -2, 1904, true);
    fails += gla_case_forced(&wide, -0.3, -0.01, 1905, true);
    fails += gla_case_forced(&batch, -3, -0.01, 1906, true);
    fails += gla_case_forced(&wide_k, -8, -2, 1907, true);
    fails += gla_case_forced(&odd_k, -8, -2, 1908, true);
    assert_int_equal(fails, 0);
    const pr_recurrence_opts gv = {.rule = PR_RULE_GLA, .g_per_value = true, .chunk = 64,
                                   .force = {.gla_fast = PR_REC_ON}};
    char why[256];
    pr_rec_plan plan;
    PR_EXPECT_FATAL(pr_recurrence_plan(&gv, PR_CUDA, 1, 64, 1, 32, 32, 0, &plan, why, sizeof why), "gla_fast");
    /* the default takes the fast kernels for per-key decays, off the plain ones; per-value decays never */
    const pr_recurrence_opts dflt = {.rule = PR_RULE_GLA, .chunk = 64}, off = {.rule = PR_RULE_GLA, .chunk = 64,
                                                                             .force = {.gla_fast = PR_REC_OFF}};
    assert_true(pr_recurrence_plan(&dflt, PR_CUDA, 8, 2048, 16, 128, 128, 0, &plan, why, sizeof why));
    assert_true(plan.gla_fast);
    assert_true(pr_recurrence_plan(&off, PR_CUDA, 8, 2048, 16, 128, 128, 0, &plan, why, sizeof why));
    assert_false(plan.gla_fast);
    const pr_recurrence_opts gv_dflt = {.rule = PR_RULE_GLA, .g_per_value = true, .chunk = 64};
    assert_true(pr_recurrence_plan(&gv_dflt, PR_CUDA, 1, 64, 1, 32, 32, 0, &plan, why, sizeof why));
    assert_false(plan.gla_fast);
}

/* gla with a per-value decay (gsa's first pass): the per-token form and the
 * chunked one (gv_* kernels of gla_value.cu, C = 64 and 32, fp32 and
 * TF32 products) at odd K and V (one partial V tile), at V = 40 (two V
 * tiles), with h0 and packed sequences, decays mild and strong (log-decays
 * in [-3, -0.01] and [-8, -2]): o, ht and every gradient within 2e-4 of the
 * CPU's f64 per-token run (4e-3 with TF32), deterministic. */
static int gv_cuda_case(const rec_case *c, double glo, double ghi, uint64_t seed)
{
    pr_ctx *ctx = g_ctx;
    rec_inputs x = make_inputs(ctx, PR_RULE_GLA, c, seed);
    pr_tensor *g = pr_empty(ctx->step, PR_F64, PR_CPU, PR_DIMS(c->B, c->T, c->H, c->V));
    for (int64_t i = 0; i < g->numel; i++)
        ((double *)g->data)[i] = ghi + (glo - ghi) * (0.5 + 0.5 * tanh(pr_philox_normal(seed, 1, (uint64_t)i)));
    pr_requires_grad_(g, true);
    x.in[PR_REC_G] = g;
    const pr_recurrence_opts opt = {.rule = PR_RULE_GLA, .g_per_value = true};
    rec_out ref = rec_run_seeded_opts(ctx, &opt, x.in, x.cu, x.dout, x.dht);
    pr_tensor *xc[REC_NIN], *cu;
    to_cuda(ctx, &x, xc, &cu);
    /* TF32: 1e-2, not the delta rules' 4e-3: on the H200 (2026-12-05) every output and
     * gradient but dg stayed within 5.3e-4, and dg, a reverse sum of q.dq - k.dk whose
     * terms are far larger than dg under log-decays in [-8, -2], reached 4.6e-3 (per
     * key) and 7.3e-3 (per value): TF32's 2^-11 rounding of those terms, amplified by the
     * cancellation; the fp32 forms give 5e-6 on the same cases */
    const struct { int chunk, tf32; double tol; } forms[] = {{0, 0, 2e-4}, {64, 0, 2e-4}, {32, 0, 2e-4}, {64, 1, 1e-2},
                                                              {32, 1, 1e-2}};
    int fails = 0;
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        ctx->matmul_tf32 = forms[f].tf32;
        const pr_recurrence_opts o = {.rule = PR_RULE_GLA, .g_per_value = true, .chunk = forms[f].chunk};
        rec_out got = rec_run_seeded_opts(ctx, &o, xc, cu, x.dout, x.dht);
        rec_out again = rec_run_seeded_opts(ctx, &o, xc, cu, x.dout, x.dht);
        char what[96];
        snprintf(what, sizeof what, "gla %s gv in [%g,%g] chunk %d%s", c->name, glo, ghi, forms[f].chunk,
                 forms[f].tf32 ? " tf32" : "");
        const double e = rec_report(what, &got, &ref);
        if (!rec_same_bits(&got, &again)) fprintf(stderr, "  FAIL %s: two runs differ\n", what), fails++;
        if (!(e <= forms[f].tol)) fprintf(stderr, "  FAIL %s: worst %.3g > %.1g\n", what, e, forms[f].tol), fails++;
        rec_out_free(&got);
        rec_out_free(&again);
    }
    ctx->matmul_tf32 = 0;
    rec_out_free(&ref);
    free(x.dout);
    free(x.dht);
    pr_step_reset(ctx);
    return fails;
}

static void test_gla_per_value(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    static const int64_t cu_s[] = {0, 1, 70, 213}, cu_w[] = {0, 37, 300};
    const rec_case odd = {"gla-gv", 1, 213, 3, 37, 21, 0, true, cu_s, 4};
    const rec_case wide = {"gla-gv-wide", 1, 300, 2, 40, 40, 0, true, cu_w, 3};
    int fails = gv_cuda_case(&odd, -3, -0.01, 1903);
    fails += gv_cuda_case(&wide, -8, -2, 1904);
    const pr_recurrence_opts chk = {.rule = PR_RULE_GLA, .g_per_value = true, .chunk = 64};
    char why[256], line[512];
    pr_rec_plan plan;
    assert_true(pr_recurrence_plan(&chk, PR_CUDA, 3, 213, 3, 37, 21, 0, &plan, why, sizeof why));
    pr_rec_plan_format(&plan, line, sizeof line);
    assert_non_null(strstr(line, "gv_state"));
    assert_int_equal(fails, 0);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
#define PR_RULE(name, NAME, has_g, has_beta, has_extra, g_per_key) cmocka_unit_test(test_##name),
#include PR_RULES_DEF
#undef PR_RULE
        cmocka_unit_test(test_long),        cmocka_unit_test(test_segments), cmocka_unit_test(test_wy_ktiles),
        cmocka_unit_test(test_grad_passes), cmocka_unit_test(test_state_wg),
        cmocka_unit_test(test_dstate_wg),
        cmocka_unit_test(test_scores_wg),
        cmocka_unit_test(test_wy_wg),
        cmocka_unit_test(test_prep_wg),
        cmocka_unit_test(test_extras_apart),
        cmocka_unit_test(test_f64_refused), cmocka_unit_test(test_plan),
        cmocka_unit_test(test_gla_strong_decay), cmocka_unit_test(test_gla_fast),
        cmocka_unit_test(test_gla_per_value),
    };
    /* PR_TEST_FILTER=test_gdn (a glob) runs a part, e.g. under compute-sanitizer */
    if (getenv("PR_TEST_FILTER")) cmocka_set_test_filter(getenv("PR_TEST_FILTER"));
    return pr_test_exit_status(cmocka_run_group_tests(tests, setup, teardown));
}
