/* tests/test_cuda_bf16.c: bf16 on CUDA: pr_cast against the CPU bit for bit,
 * and pr_recurrence on bf16 data (q, k, v, beta, kx, vx, o bf16; g, h0, ht
 * f32) against the CPU f64 reference on the same bf16-rounded inputs.
 *
 * Tolerance, as max|got - ref| / max|ref| per output and gradient: the GPU
 * reads the bf16 inputs exactly, computes in f32 and rounds o and the grads
 * of bf16 inputs to bf16 once, a relative error of at most 2^-8 (3.9e-3;
 * bf16 keeps 8 significant bits) of each element; the f32 kernels add at
 * most 2e-4 with fp32 products and 4e-3 with TF32 ones
 * (tests/test_cuda_recurrence.c). So 4.2e-3 (fp32) and 8e-3 (TF32). The
 * TF32 forms on bf16 data run the chunked kernels' bf16 products (operands
 * rounded to bf16, 2^-9 each, f32 sums); their worst error over every case
 * here measured 4.2e-3 on the H200, inside the 8e-3. Every rule, the
 * per-token form and chunks of 32 and 64 (each in fp32 and TF32), T not
 * a multiple of the chunk, K != V, V not a multiple of 4, L = 0, 1, 2, 3,
 * packed sequences with a state each; each chunked case is run twice and
 * must agree bit for bit; gla also through its fast kernels (force.gla_fast;
 * chunks of 64 with TF32, of 32 with fp32). test_bf16_mma: the same against the bf16 wgmma
 * products of force.bf16_mma (its bound and why there). Every test skips
 * without a GPU.
 */
#include "tests/test_recurrence_util.h"
#ifdef PRISM_HAVE_CUDA
#include "ops/cuda/ops_cuda.h"
#endif

/* ---- cast ------------------------------------------------------------------------------ */

/* random f32 values and exact bf16 ties, cast on both devices; the backward
 * of bf16 -> f32 rounds the grad on both the same way and accumulates */
static void test_cast_matches_cpu(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng r = pr_rng_init(9, 0);
    pr_tensor *x = pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(1000), &r);
    for (int i = 0; i < 8; i++) pr_set(x, i, (i % 2 ? -1.0 : 1.0) * (1.0 + ldexp(2 * i + 1, -8)));   /* ties */
    pr_tensor *xg = pr_to(ctx->step, x, PR_F32, PR_CUDA);
    pr_tensor *b_cpu = pr_cast(ctx, x, PR_BF16), *b_gpu = pr_cast(ctx, xg, PR_BF16);
    assert_int_equal(b_gpu->dtype, PR_BF16);
    pr_tensor *b_back = pr_to(ctx->step, b_gpu, PR_BF16, PR_CPU);
    assert_memory_equal(b_back->data, b_cpu->data, 2 * 1000);

    pr_requires_grad_(b_cpu, true);
    pr_tensor *bg = pr_to(ctx->step, b_cpu, PR_BF16, PR_CUDA);
    pr_requires_grad_(bg, true);
    pr_tensor *seed = pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(1000), &r);
    pr_fill_(pr_grad_of(ctx, b_cpu), 0.375);
    pr_fill_(pr_grad_of(ctx, bg), 0.375);
    pr_backward_with(ctx, pr_cast(ctx, b_cpu, PR_F32), seed);
    pr_backward_with(ctx, pr_cast(ctx, bg, PR_F32), seed);
    pr_tensor *g_back = pr_to(ctx->step, bg->grad, PR_BF16, PR_CPU);
    assert_memory_equal(g_back->data, b_cpu->grad->data, 2 * 1000);
    pr_ctx_free(ctx);
}

/* the conversion's two kernels: 16-byte accesses where both pointers are
 * aligned (with a scalar tail when n % 8 != 0), else element by element;
 * every pairing gives the CPU's bits, NaN payloads and infinities included */
static void test_cast_paths(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng r = pr_rng_init(10, 0);
    const int64_t sizes[] = {5, 8, 1003};
    for (int si = 0; si < 3; si++)
        for (int off = 0; off < 2; off++) {
            const int64_t n = sizes[si];
            pr_tensor *x = pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(n + 1), &r);
            uint32_t *bits = (uint32_t *)x->data;
            bits[1] = 0x7fa00001u, bits[2] = 0xff800000u, bits[3] = 0x3f808000u;   /* NaN payload, -inf, a tie */
            pr_tensor *xg = pr_to(ctx->step, x, PR_F32, PR_CUDA);
            pr_tensor *b_cpu = pr_cast(ctx, pr_view_rows(ctx->step, x, off, n), PR_BF16);
            pr_tensor *b_gpu = pr_to(ctx->step, pr_cast(ctx, pr_view_rows(ctx->step, xg, off, n), PR_BF16), PR_BF16, PR_CPU);
            assert_memory_equal(b_gpu->data, b_cpu->data, 2 * n);
            /* and back, from a bf16 tensor of n + 1 */
            pr_tensor *y = pr_cast(ctx, x, PR_BF16), *yg = pr_to(ctx->step, y, PR_BF16, PR_CUDA);
            pr_tensor *f_cpu = pr_cast(ctx, pr_view_rows(ctx->step, y, off, n), PR_F32);
            pr_tensor *f_gpu = pr_to(ctx->step, pr_cast(ctx, pr_view_rows(ctx->step, yg, off, n), PR_F32), PR_F32, PR_CPU);
            assert_memory_equal(f_gpu->data, f_cpu->data, 4 * n);
        }
    pr_ctx_free(ctx);
}

#ifdef PRISM_HAVE_CUDA
/* n values of t from element 0, and the same one element on (offset 1:
 * unaligned for 16-byte access), both on the GPU */
static void two_alignments(pr_ctx *ctx, const pr_tensor *t, int64_t n, pr_tensor **at0, pr_tensor **at1)
{
    const size_t es = t->dtype == PR_BF16 ? 2 : 4;
    pr_tensor *sh = pr_empty(ctx->step, t->dtype, PR_CPU, PR_DIMS(n + 1));
    memcpy((char *)sh->data + es, t->data, es * (size_t)n);
    *at0 = pr_to(ctx->step, t, t->dtype, PR_CUDA), *at1 = pr_to(ctx->step, sh, t->dtype, PR_CUDA);
}
#endif

/* accumulating casts (dst = round(dst + src)): the 16-byte kernel, aligned,
 * against the scalar one on the same values one element on, both
 * directions, with and without a tail */
static void test_cast_acc_paths(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
#ifdef PRISM_HAVE_CUDA
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng r = pr_rng_init(11, 0);
    const int64_t sizes[] = {5, 8, 1003};
    for (int si = 0; si < 3; si++) {
        const int64_t n = sizes[si];
        pr_tensor *x = pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(n + 1), &r);
        pr_tensor *y = pr_cast(ctx, pr_randn(ctx->step, PR_F32, PR_CPU, PR_DIMS(n + 1), &r), PR_BF16);
        for (int dir = 0; dir < 2; dir++) {   /* 0: bf16 += f32; 1: f32 += bf16 */
            pr_tensor *d0, *d1, *s0, *s1;
            two_alignments(ctx, dir ? x : y, n, &d0, &d1);
            two_alignments(ctx, dir ? y : x, n, &s0, &s1);
            const pr_dtype dd = dir ? PR_F32 : PR_BF16, sd = dir ? PR_BF16 : PR_F32;
            const size_t es = dir ? 4 : 2, ss = dir ? 2 : 4;
            pr_cuda_cast(pr_cuda_stream(ctx), d0->data, dd, s0->data, sd, n, true);
            pr_cuda_cast(pr_cuda_stream(ctx), (char *)d1->data + es, dd, (const char *)s1->data + ss, sd, n, true);
            pr_tensor *h0 = pr_to(ctx->step, d0, dd, PR_CPU), *h1 = pr_to(ctx->step, d1, dd, PR_CPU);
            assert_memory_equal(h0->data, (char *)h1->data + es, es * (size_t)n);
        }
    }
    pr_ctx_free(ctx);
#endif
}

/* ---- recurrence ---------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int64_t B, T, H, K, V, L;
    const int64_t *cu;   /* packed: N+1 offsets (B must be 1), or NULL */
    int ncu;
} bf_case;

static const int64_t cu_a[] = {0, 1, 65, 130, 200};

static const bf_case cases[] = {
    {"T65-L1", 2, 65, 2, 32, 48, 1, NULL, 0},
    {"T63-L3", 1, 63, 2, 64, 32, 3, NULL, 0},
    {"T100-L0", 2, 100, 2, 32, 64, 0, NULL, 0},
    {"odd-dims", 1, 130, 2, 20, 13, 3, NULL, 0},
    {"packed", 1, 200, 2, 32, 48, 1, cu_a, 5},
    /* prism_core's wgmma extras apart (chunk 64, TF32): kx, vx and their
     * grads read and accumulated as bf16 in place (K, V multiples of 8),
     * and staged (K = 36) */
    {"T100-L2", 1, 100, 2, 64, 40, 2, NULL, 0},
    {"T70-L2-K36", 1, 70, 2, 36, 24, 2, NULL, 0},
};

/* the dtype an input has on bf16 data */
static pr_dtype bf_dtype(int i) { return i == PR_REC_G || i == PR_REC_H0 ? PR_F32 : PR_BF16; }

/* t's values rounded to dt, back as host doubles */
static double *rounded(pr_ctx *ctx, const double *v, int64_t n, pr_dtype dt)
{
    pr_tensor *t = pr_to(ctx->step, pr_from_host(ctx->step, PR_F64, PR_CPU, PR_DIMS(n), v), dt, PR_CPU);
    double *out = malloc(sizeof(double) * (size_t)(n + 1));
    pr_to_host_f64(t, out);
    return out;
}

/* forward and backward (tests/test_recurrence_util.h); o keeps the inputs'
 * dtype, ht is f32 for bf16 data, and every grad has its input's dtype */
static rec_out run_forced(pr_ctx *ctx, pr_rule rule, int chunk, pr_rec_force force, pr_tensor *const *in,
                          pr_tensor *cu, const double *dout, const double *dht)
{
    const pr_recurrence_opts opt = {.rule = rule, .chunk = chunk, .force = force};
    rec_out r = rec_run_seeded_opts(ctx, &opt, in, cu, dout, dht);
    assert_int_equal(r.dt_o, in[0]->dtype);
    assert_int_equal(r.dt_ht, in[0]->dtype == PR_BF16 ? PR_F32 : in[0]->dtype);
    for (int i = 0; i < REC_NIN; i++)
        if (in[i]) assert_int_equal(in[i]->grad->dtype, in[i]->dtype);
    return r;
}
static rec_out run(pr_ctx *ctx, pr_rule rule, int chunk, pr_tensor *const *in, pr_tensor *cu, const double *dout,
                   const double *dht)
{
    return run_forced(ctx, rule, chunk, (pr_rec_force){0}, in, cu, dout, dht);
}

/* one rule, one case, every form; returns the number of failures */
static int check_case(pr_ctx *ctx, pr_rule rule, const bf_case *c, uint64_t seed)
{
    pr_rng r = pr_rng_init(seed, 3);
    const int64_t L = pr_rule_has_extra(rule) ? c->L : 0, N = c->cu ? c->ncu - 1 : c->B;
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &r, PR_F64, rule, c->B, c->T, c->H, c->K, c->V, L, false);
    if (pr_rule_has_extra(rule) && L == 0) ri.kx = ri.vx = NULL;
    ri.h0 = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(N, c->H, c->K, c->V), &r);
    pr_tensor *x[REC_NIN], *ref_in[REC_NIN], *gpu_in[REC_NIN];
    rec_in_array(&ri, x);
    for (int i = 0; i < REC_NIN; i++) {   /* the bf16 (f32) values, on both sides */
        pr_tensor *rnd = x[i] ? pr_to(ctx->step, x[i], bf_dtype(i), PR_CPU) : NULL;
        ref_in[i] = rnd ? pr_to(ctx->step, rnd, PR_F64, PR_CPU) : NULL;
        gpu_in[i] = rnd ? pr_to(ctx->step, rnd, rnd->dtype, PR_CUDA) : NULL;
        if (rnd) pr_requires_grad_(ref_in[i], true), pr_requires_grad_(gpu_in[i], true);
    }
    pr_tensor *cu = c->cu ? pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(c->ncu), c->cu) : NULL;
    pr_tensor *cu_gpu = cu ? pr_to(ctx->step, cu, PR_I64, PR_CUDA) : NULL;
    double *dout_raw = rec_randn(seed + 11, c->B * c->T * c->H * c->V), *dht_raw = rec_randn(seed + 12, N * c->H * c->K * c->V);
    double *dout = rounded(ctx, dout_raw, c->B * c->T * c->H * c->V, PR_BF16);
    double *dht = rounded(ctx, dht_raw, N * c->H * c->K * c->V, PR_F32);
    rec_out ref = run(ctx, rule, 0, ref_in, cu, dout, dht);
    /* fast: gla's fast chunked kernels (force.gla_fast), for gla only */
    struct { int chunk, tf32; double tol; const char *form; bool fast; } forms[] = {
        {0, 0, 4.2e-3, "token", false}, {64, 0, 4.2e-3, "chunk64/fp32", false}, {64, 1, 8e-3, "chunk64/tf32", false},
        {32, 0, 4.2e-3, "chunk32/fp32", false}, {32, 1, 8e-3, "chunk32/tf32", false},
        {64, 1, 8e-3, "chunk64/tf32/gla_fast", true}, {32, 0, 4.2e-3, "chunk32/fp32/gla_fast", true},
    };
    int fails = 0;
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        if (forms[f].fast && rule != PR_RULE_GLA) continue;
        const pr_rec_force force = {.gla_fast = forms[f].fast ? PR_REC_ON : PR_REC_OFF};
        char what[96];
        snprintf(what, sizeof what, "%s %s %s", pr_rule_name(rule), c->name, forms[f].form);
        ctx->matmul_tf32 = forms[f].tf32;
        /* a size the CUDA kernels refuse (shared memory) is a named limit, tested in
         * test_cuda_recurrence; here it only means this form has nothing to check */
        const pr_recurrence_opts popt = {.rule = rule, .chunk = forms[f].chunk, .tf32 = forms[f].tf32, .force = force};
        pr_rec_plan plan;
        char why[256];
        if (!pr_recurrence_plan(&popt, PR_CUDA, N, c->T, c->H, c->K, c->V, L, &plan, why, sizeof why)) {
            fprintf(stderr, "  skipped %s: %s\n", what, why);
            /* only chunks of 64 may be refused at these sizes */
            if (forms[f].chunk != 64) fails++;
            continue;
        }
        assert_true(plan.gla_fast == forms[f].fast);
        rec_out got = run_forced(ctx, rule, forms[f].chunk, force, gpu_in, cu_gpu, dout, dht);
        const double e = rec_report(what, &got, &ref);
        if (!(e <= forms[f].tol)) {
            fprintf(stderr, "  FAIL %s: worst %.3g > %.1g\n", what, e, forms[f].tol);
            fails++;
        }
        rec_out again = run_forced(ctx, rule, forms[f].chunk, force, gpu_in, cu_gpu, dout, dht);
        if (!rec_same_bits(&got, &again)) {
            fprintf(stderr, "  FAIL %s: two runs differ\n", what);
            fails++;
        }
        rec_out_free(&again);
        rec_out_free(&got);
    }
    ctx->matmul_tf32 = 0;
    rec_out_free(&ref);
    free(dout_raw), free(dht_raw), free(dout), free(dht);
    pr_step_reset(ctx);
    return fails;
}

static void test_recurrence_every_rule(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    int fails = 0;
    for (int rule = 0; rule < PR_NRULES; rule++)
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            if (!pr_rule_has_extra((pr_rule)rule) && cases[ci].L >= 2) continue;   /* as L = 1 for these */
            fails += check_case(ctx, (pr_rule)rule, &cases[ci], 200 + ci);
        }
    pr_ctx_free(ctx);
    assert_int_equal(fails, 0);
}

/* prism_core's bf16 kx and vx read and their grads accumulated in place by
 * the wgmma extras, and q, k, v (forward) and q, k, dO (backward) read in
 * place by them and by the core's passes (the plan says so), o written in
 * place by the output pass (adding the extras' f32 share before its one
 * rounding), give the same bits as staged through f32 (force.x16 off stages
 * them all): bf16 values are exact in f32 and TF32, and both round o and
 * each grad once. dq, dk, dv stay staged (the core and the extras add into
 * them). */
static void test_extras_in_place(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    const pr_recurrence_opts po = {.rule = PR_RULE_PRISM_CORE, .chunk = 64, .tf32 = 1};
    pr_rec_plan plan;
    char why[256];
    const bool ok = pr_recurrence_plan(&po, PR_CUDA, 2, 100, 2, 64, 40, 2, &plan, why, sizeof why);
    if (!ok) fail_msg("prism_core K=64 V=40 L=2 C=64 tf32: no plan: %s", why);
    pr_recurrence_opts pb = po;
    pb.bf16 = true;
    pr_rec_plan bp;
    if (plan.extras_apart && plan.extras == PR_REC_WGMMA) {
        if (!pr_recurrence_plan(&pb, PR_CUDA, 2, 100, 2, 64, 40, 2, &bp, why, sizeof why)) fail_msg("%s", why);
        const pr_rec_pass *ps = bp.pass;
        assert_true(ps[PR_REC_PASS_OUTPUT].bf16_in_place && ps[PR_REC_PASS_STATE].bf16_in_place &&
                    ps[PR_REC_PASS_PREP].bf16_in_place);
        assert_true(ps[PR_REC_PASS_DLOCAL].bf16_in_place && ps[PR_REC_PASS_DSTATE].bf16_in_place &&
                    ps[PR_REC_PASS_GRAD].bf16_in_place); /* q, dO, k read (dq, dk, dv stay staged) */
        pb.force.x16 = PR_REC_OFF;
        if (!pr_recurrence_plan(&pb, PR_CUDA, 2, 100, 2, 64, 40, 2, &bp, why, sizeof why)) fail_msg("%s", why);
        assert_false(bp.pass[PR_REC_PASS_OUTPUT].bf16_in_place);
    }
    if (!plan.extras_apart || plan.extras != PR_REC_WGMMA) {
        char line[512];
        pr_rec_plan_format(&plan, line, sizeof line);
        fprintf(stderr, "  skipped: this build has no wgmma extras (%s)\n", line);
        pr_ctx_free(ctx);
        skip();
    }
    pr_rng r = pr_rng_init(77, 3);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &r, PR_F64, PR_RULE_PRISM_CORE, 2, 100, 2, 64, 40, 2, false);
    pr_tensor *x[REC_NIN], *in[REC_NIN];
    rec_in_array(&ri, x);
    for (int i = 0; i < REC_NIN; i++) {
        in[i] = x[i] ? pr_to(ctx->step, x[i], bf_dtype(i), PR_CUDA) : NULL;
        if (in[i]) pr_requires_grad_(in[i], true);
    }
    double *dout_raw = rec_randn(78, 2 * 100 * 2 * 40), *dht = rec_randn(79, 2 * 2 * 64 * 40);
    double *dout = rounded(ctx, dout_raw, 2 * 100 * 2 * 40, PR_BF16);
    ctx->matmul_tf32 = 1;
    rec_out a = run(ctx, PR_RULE_PRISM_CORE, 64, in, NULL, dout, dht);
    const pr_recurrence_opts staged = {.rule = PR_RULE_PRISM_CORE, .chunk = 64, .force = {.x16 = PR_REC_OFF}};
    rec_out b = rec_run_seeded_opts(ctx, &staged, in, NULL, dout, dht);
    ctx->matmul_tf32 = 0;
    const bool same = rec_same_bits(&a, &b);
    if (!same) fprintf(stderr, "  FAIL prism_core bf16 extras in place vs staged: the bits differ\n");
    rec_report("prism_core bf16 in place vs staged", &a, &b);
    rec_out_free(&a), rec_out_free(&b);
    free(dout_raw), free(dout), free(dht);
    pr_ctx_free(ctx);
    assert_true(same);
}

/* the plan of rule at (K, V), C = chunk, T = 100, two heads: whether its
 * pass reads or writes bf16 in place (output: q and o, and k, v with prep
 * and state; dlocal, dstate: q, dO, k, and without beta dv; grad: dq, dk,
 * and q, dO, k, and without beta v; wy: dv, dk, and k) */
static bool pass_in_place(pr_rec_pass_id pass, pr_rule rule, int chunk, int tf32, bool bf16, pr_rec_switch staged,
                          int K, int V)
{
    const pr_recurrence_opts po = {.rule = rule, .chunk = chunk, .tf32 = tf32, .bf16 = bf16,
                                   .force = {.bf16_staged = staged}};
    pr_rec_plan plan;
    char why[256];
    if (!pr_recurrence_plan(&po, PR_CUDA, 2, 100, 2, K, V, 0, &plan, why, sizeof why))
        fail_msg("%s K=%d V=%d C=%d: no plan: %s", pr_rule_name(rule), K, V, chunk, why);
    return plan.pass[pass].bf16_in_place;
}
static bool output_in_place(pr_rule rule, int chunk, int tf32, bool bf16, pr_rec_switch staged, int K, int V)
{
    return pass_in_place(PR_REC_PASS_OUTPUT, rule, chunk, tf32, bf16, staged, K, V);
}

/* rec_run_seeded_opts twice, the grads kept between the two backwards: the
 * second adds into nonzero grads (what the in-place adds read back) */
static rec_out run_twice(pr_ctx *ctx, const pr_recurrence_opts *opt, pr_tensor *const *in, const double *dout,
                         const double *dht)
{
    rec_out first = rec_run_seeded_opts(ctx, opt, in, NULL, dout, dht);
    rec_out_free(&first);
    return rec_run_seeded_adding(ctx, opt, in, NULL, dout, dht);
}

/* one case of the in-place tests: rule at (C, K, V), two sequences of 100
 * tokens, two heads, TF32 on or off, random bf16 inputs and output grads
 * from seed (seed + 100, + 200), run_twice with opt as given (in place where
 * the plan has it) and again with force.bf16_staged on; 1 where the bits
 * differ (said on stderr as what), else 0 */
static int in_place_case(pr_ctx *ctx, pr_rule rule, int C, int K, int V, int tf32, uint64_t seed,
                         pr_recurrence_opts opt, const char *what)
{
    pr_rng r = pr_rng_init(seed, 3);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &r, PR_F64, rule, 2, 100, 2, K, V, 0, false);
    pr_tensor *x[REC_NIN], *in[REC_NIN];
    rec_in_array(&ri, x);
    for (int i = 0; i < REC_NIN; i++) {
        in[i] = x[i] ? pr_to(ctx->step, x[i], bf_dtype(i), PR_CUDA) : NULL;
        if (in[i]) pr_requires_grad_(in[i], true);
    }
    double *dout_raw = rec_randn(seed + 100, 2 * 100 * 2 * V), *dht = rec_randn(seed + 200, 2 * 2 * K * V);
    double *dout = rounded(ctx, dout_raw, 2 * 100 * 2 * V, PR_BF16);
    ctx->matmul_tf32 = tf32;
    opt.rule = rule, opt.chunk = C;
    rec_out a = run_twice(ctx, &opt, in, dout, dht);
    opt.force.bf16_staged = PR_REC_ON;
    rec_out b = run_twice(ctx, &opt, in, dout, dht);
    ctx->matmul_tf32 = 0;
    rec_report(what, &a, &b);
    const bool same = rec_same_bits(&a, &b);
    if (!same) fprintf(stderr, "  FAIL %s: in place and staged differ\n", what);
    rec_out_free(&a), rec_out_free(&b);
    free(dout_raw), free(dout), free(dht);
    pr_step_reset(ctx);
    return same ? 0 : 1;
}

/* On bf16 data the output pass reads q and writes o in place, where prep,
 * state and output run their wgmma forms the forward reads k and v in place
 * too (copied as bf16 into the f32 tiles, widened there), where dlocal,
 * dstate, grad and wy run theirs (TF32 on) the backward reads q, dO and k,
 * and without beta v, in place the same way (and without beta dlocal and
 * dstate add into dv in place), and with
 * TF32 on grad accumulates dq and dk, and (delta rules) wy dv and the rest
 * of dk in place (no staged copies): the plan says so for bf16 data only,
 * force.bf16_staged turns it off, and both paths give the same bits in o,
 * ht and every grad (bound 0: bf16 -> f32 is exact, and o, dq, dk and dv
 * are rounded once from the same f32
 * sums by the cast's rule), in both forms of each pass (output: wgmma with
 * TF32 at K <= 128, mma.sync with bf16 products or in fp32; grad, wy: wgmma
 * and mma.sync), at C = 64 and 32, K a multiple of 8 or only of 4, V of 40
 * and 20, T = 100 (a partial last chunk); each run's second backward adds
 * into the grads of its first */
static void test_output_in_place(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    assert_true(pass_in_place(PR_REC_PASS_GRAD, PR_RULE_GDN, 64, 1, true, PR_REC_PLANNED, 64, 40));
    assert_false(pass_in_place(PR_REC_PASS_GRAD, PR_RULE_GDN, 64, 0, true, PR_REC_PLANNED, 64, 40)); /* fp32 */
    assert_false(pass_in_place(PR_REC_PASS_GRAD, PR_RULE_GDN, 64, 1, true, PR_REC_ON, 64, 40));
    assert_true(pass_in_place(PR_REC_PASS_WY, PR_RULE_DELTA, 64, 1, true, PR_REC_PLANNED, 64, 40));
    assert_false(pass_in_place(PR_REC_PASS_WY, PR_RULE_DELTA, 64, 0, true, PR_REC_PLANNED, 64, 40)); /* fp32 */
    assert_false(pass_in_place(PR_REC_PASS_WY, PR_RULE_SSD, 64, 1, true, PR_REC_PLANNED, 64, 40));   /* no wy */
    assert_true(pass_in_place(PR_REC_PASS_GRAD, PR_RULE_SSD, 64, 1, true, PR_REC_PLANNED, 64, 40));  /* dq, dk */
    assert_true(output_in_place(PR_RULE_GDN, 64, 1, true, PR_REC_PLANNED, 64, 40));
    assert_false(output_in_place(PR_RULE_GDN, 64, 1, true, PR_REC_ON, 64, 40));
    assert_false(output_in_place(PR_RULE_GDN, 64, 1, false, PR_REC_PLANNED, 64, 40));
    assert_true(output_in_place(PR_RULE_LINATTN, 32, 0, true, PR_REC_OFF, 36, 20));
    assert_false(output_in_place(PR_RULE_LINATTN, 32, 0, true, PR_REC_PLANNED, 34, 20)); /* K % 4 != 0: staged */
    /* k and v: where prep (delta rules), state and output run their wgmma forms */
    assert_true(pass_in_place(PR_REC_PASS_STATE, PR_RULE_GDN, 64, 1, true, PR_REC_PLANNED, 64, 40));
    assert_true(pass_in_place(PR_REC_PASS_PREP, PR_RULE_GDN, 32, 1, true, PR_REC_PLANNED, 36, 20));
    assert_true(pass_in_place(PR_REC_PASS_STATE, PR_RULE_LINATTN, 64, 1, true, PR_REC_PLANNED, 64, 40));
    assert_true(pass_in_place(PR_REC_PASS_STATE, PR_RULE_SSD, 32, 1, true, PR_REC_PLANNED, 36, 40));
    assert_false(pass_in_place(PR_REC_PASS_STATE, PR_RULE_GDN, 64, 1, true, PR_REC_ON, 64, 40));
    assert_false(pass_in_place(PR_REC_PASS_STATE, PR_RULE_GDN, 64, 0, true, PR_REC_PLANNED, 64, 40));  /* fp32 */
    assert_false(pass_in_place(PR_REC_PASS_STATE, PR_RULE_GDN, 64, 1, true, PR_REC_PLANNED, 160, 40)); /* mma.sync */
    /* the backward's q, dO (k, v): where dlocal, dstate and grad run their wgmma forms */
    assert_true(pass_in_place(PR_REC_PASS_DSTATE, PR_RULE_GDN, 64, 1, true, PR_REC_PLANNED, 64, 40));
    assert_true(pass_in_place(PR_REC_PASS_DLOCAL, PR_RULE_LINATTN, 64, 1, true, PR_REC_PLANNED, 64, 40));
    assert_false(pass_in_place(PR_REC_PASS_DSTATE, PR_RULE_GDN, 64, 1, true, PR_REC_ON, 64, 40));
    assert_false(pass_in_place(PR_REC_PASS_DSTATE, PR_RULE_GDN, 64, 0, true, PR_REC_PLANNED, 64, 40));  /* fp32 */
    assert_false(pass_in_place(PR_REC_PASS_DLOCAL, PR_RULE_GDN, 64, 1, true, PR_REC_PLANNED, 160, 40)); /* mma.sync */
    pr_ctx *ctx = pr_ctx_new(1);
    static const struct {
        pr_rule rule;
        int chunk, tf32, K, V, mma; /* mma: 1 force grad's and wy's mma.sync forms, 2 the state pass's (then the
                                       output reads q in place, k and v staged) */
    } cases[] = {
        {PR_RULE_GDN, 64, 1, 64, 40, 0},  {PR_RULE_GDN, 32, 1, 36, 20, 0},   {PR_RULE_LINATTN, 64, 1, 64, 40, 0},
        {PR_RULE_SSD, 64, 0, 36, 40, 0},  {PR_RULE_DELTA, 32, 0, 64, 20, 0}, {PR_RULE_GDN, 64, 1, 160, 40, 0},
        {PR_RULE_GDN, 64, 1, 64, 40, 1},  {PR_RULE_SSD, 32, 1, 36, 40, 0},  {PR_RULE_LINATTN, 64, 1, 64, 40, 2},
    };
    int fails = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const pr_rule rule = cases[ci].rule;
        const int C = cases[ci].chunk, K = cases[ci].K, V = cases[ci].V;
        char what[96];
        snprintf(what, sizeof what, "%s C=%d K=%d V=%d %s%s", pr_rule_name(rule), C, K, V,
                 cases[ci].tf32 ? "tf32" : "fp32",
                 cases[ci].mma == 1 ? " grad, wy mma.sync" : cases[ci].mma == 2 ? " state mma.sync" : "");
        if (!output_in_place(rule, C, cases[ci].tf32, true, PR_REC_PLANNED, K, V)) {
            fprintf(stderr, "  FAIL %s: the plan stages q and o\n", what);
            fails++;
            continue;
        }
        /* bf16_mma off: its bf16 products run in place only, so the staged path could not match them */
        pr_recurrence_opts opt = {.force = {.bf16_mma = PR_REC_OFF}};
        if (cases[ci].mma == 1) opt.force.grad_bpw = 4, opt.force.wy = PR_REC_MMA;
        if (cases[ci].mma == 2) opt.force.state = PR_REC_MMA;
        fails += in_place_case(ctx, rule, C, K, V, cases[ci].tf32, 500 + ci, opt, what);
    }
    pr_ctx_free(ctx);
    assert_int_equal(fails, 0);
}

/* whether gla's plan at (K, V), C = chunk, T = 100, two heads, reads and
 * writes bf16 in place in its fast kernels */
static bool gla_in_place(int chunk, int tf32, bool bf16, pr_rec_force f, int K, int V)
{
    const pr_recurrence_opts po = {.rule = PR_RULE_GLA, .chunk = chunk, .tf32 = tf32, .bf16 = bf16, .force = f};
    pr_rec_plan plan;
    char why[256];
    if (!pr_recurrence_plan(&po, PR_CUDA, 2, 100, 2, K, V, 0, &plan, why, sizeof why))
        fail_msg("gla K=%d V=%d C=%d: no plan: %s", K, V, chunk, why);
    assert_true(!plan.gla_in_place || plan.gla_fast);
    return plan.gla_in_place;
}

/* gla's fast kernels read q, k, v and dO, write o and accumulate dq, dk and
 * dv as bf16 in place (copied into the f32 tiles' slots and widened there,
 * o and the grads rounded once by the cast's rule): the plan says so for
 * bf16 data where the fast form runs and K, V are multiples of 4,
 * force.bf16_staged on or the plain kernels stage them, and both paths
 * give the same bits in o, ht and every grad (bound 0, as
 * test_output_in_place), with TF32 on (bf16 products) and off (fp32), at
 * C = 64 and 32, K = 64 and 36 (a K tile of 4 real columns past 32),
 * V = 40 and 20, T = 100 (a partial last chunk); each run's second
 * backward adds into the grads of its first */
static void test_gla_in_place(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    const pr_rec_force none = {0}, staged = {.bf16_staged = PR_REC_ON}, plain = {.gla_fast = PR_REC_OFF};
    assert_true(gla_in_place(64, 1, true, none, 64, 40));
    assert_true(gla_in_place(32, 0, true, none, 36, 20));
    assert_false(gla_in_place(64, 1, false, none, 64, 40)); /* f32 data */
    assert_false(gla_in_place(64, 1, true, staged, 64, 40));
    assert_false(gla_in_place(64, 1, true, plain, 64, 40));
    assert_false(gla_in_place(64, 1, true, none, 34, 40)); /* K % 4 != 0: staged */
    assert_false(gla_in_place(64, 1, true, none, 64, 42)); /* V % 4 != 0 */
    pr_ctx *ctx = pr_ctx_new(1);
    static const struct {
        int chunk, tf32, K, V;
    } cases[] = {{64, 1, 64, 40}, {32, 1, 36, 20}, {64, 0, 36, 40}, {32, 0, 64, 20}};
    int fails = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int C = cases[ci].chunk, K = cases[ci].K, V = cases[ci].V;
        char what[96];
        snprintf(what, sizeof what, "gla C=%d K=%d V=%d %s", C, K, V, cases[ci].tf32 ? "tf32" : "fp32");
        fails += in_place_case(ctx, PR_RULE_GLA, C, K, V, cases[ci].tf32, 800 + ci, (pr_recurrence_opts){0}, what);
    }
    pr_ctx_free(ctx);
    assert_int_equal(fails, 0);
}

/* ---- force.bf16_mma: bf16 wgmma products ------------------------------------------------------ */

/* the plan of rule at (K, V, L), C = chunk, T = 100, two sequences of two
 * heads, on bf16 data (or f32), with force fields f */
static pr_rec_plan bf_plan(pr_rule rule, int chunk, int tf32, bool bf16, pr_rec_force f, int K, int V, int L)
{
    const pr_recurrence_opts po = {.rule = rule, .chunk = chunk, .tf32 = tf32, .bf16 = bf16, .force = f};
    pr_rec_plan plan;
    char why[256];
    if (!pr_recurrence_plan(&po, PR_CUDA, 2, 100, 2, K, V, L, &plan, why, sizeof why))
        fail_msg("%s K=%d V=%d C=%d: no plan: %s", pr_rule_name(rule), K, V, chunk, why);
    return plan;
}
/* the pass multiplies bf16 tiles with bf16 wgmma */
static bool bf_wgmma(const pr_rec_pass *ps) { return ps->engine == PR_REC_WGMMA && ps->prod == PR_REC_PROD_BF16; }
/* bf16 wgmma ran where the plan put it and nowhere else: prep's (delta
 * rules) and the output's where the forward reads k and v in place (the
 * state pass's in-place flag), dlocal's where the backward reads q, dO and
 * k in place (dstate's), and no other wgmma pass multiplies bf16; returns
 * the number of passes that take it */
static int bf_passes(const pr_rec_plan *p)
{
    const pr_rec_pass *ps = p->pass;
    /* bf16 wgmma only: a pass in its mma.sync form multiplies bf16 on bf16 data anyway (rec_bf_products) */
    const bool out = bf_wgmma(&ps[PR_REC_PASS_OUTPUT]);
    const bool dloc = bf_wgmma(&ps[PR_REC_PASS_DLOCAL]);
    const bool prep = ps[PR_REC_PASS_PREP].runs && bf_wgmma(&ps[PR_REC_PASS_PREP]);
    /* (with the extras apart the core's passes read q, k, dO in place but keep their TF32 forms, so far) */
    const bool xa = p->extras_apart;
    const bool kv = ps[PR_REC_PASS_STATE].bf16_in_place && ps[PR_REC_PASS_OUTPUT].bf16_in_place && !xa;
    if (ps[PR_REC_PASS_OUTPUT].engine == PR_REC_WGMMA) assert_int_equal(out, kv);
    if (ps[PR_REC_PASS_PREP].runs && ps[PR_REC_PASS_PREP].engine == PR_REC_WGMMA) assert_int_equal(prep, kv);
    if (ps[PR_REC_PASS_DLOCAL].engine == PR_REC_WGMMA)
        assert_int_equal(dloc, ps[PR_REC_PASS_DSTATE].bf16_in_place && !xa);
    for (int i = 0; i < PR_REC_NPASS; i++)
        if (i != PR_REC_PASS_OUTPUT && i != PR_REC_PASS_DLOCAL && i != PR_REC_PASS_PREP && ps[i].runs) {
            assert_false(ps[i].engine == PR_REC_WGMMA && ps[i].prod == PR_REC_PROD_BF16);
        }
    assert_true((out || dloc || prep) == (p->bf16_mma_refused == NULL));
    return out + dloc + prep;
}
/* force.bf16_mma on, refused (NULL plan field: taken) with a reason containing why */
static void assert_bf_refused(pr_rule rule, int chunk, int tf32, bool bf16, pr_rec_force f, int K, int V, int L,
                              const char *why)
{
    f.bf16_mma = PR_REC_ON;
    const pr_rec_plan p = bf_plan(rule, chunk, tf32, bf16, f, K, V, L);
    assert_int_equal(bf_passes(&p), 0);
    assert_non_null(p.bf16_mma_refused);
    if (!strstr(p.bf16_mma_refused, why)) fail_msg("refused for '%s', expected '%s'", p.bf16_mma_refused, why);
    char line[1024];
    pr_rec_plan_format(&p, line, sizeof line);
    assert_non_null(strstr(line, "; bf16_mma refused: "));
}

static const int64_t cu_mma[] = {0, 1, 65, 130};

/* With force.bf16_mma on, prep (delta rules), the output and dlocal
 * multiply bf16 tiles with bf16 wgmma (m64nNk16, f32 sums) on bf16 data
 * read in place; the plan takes it only there (asserted on its fields),
 * refuses it elsewhere and says why when asked, and the default takes
 * it (off: TF32). Against the CPU f64 reference on the same bf16 inputs, o, ht and
 * every grad within 8e-3 of max|ref|: test_recurrence_every_rule's bound
 * for the TF32 forms on bf16 data, whose mma.sync passes (rec_bf_products)
 * already round every operand of their products to bf16 (2^-9 each, f32
 * sums): the states h, the scores S, T', e^G o K, R, V, dO. The new forms
 * round the same operands the same way (q, k, v, dO are bf16 already) and
 * keep every sum, state and reduction f32, and o and the grads of bf16
 * inputs are rounded to bf16 once (2^-8) as before, so the same bound
 * holds. Sizes: C = 64 and 32, K = 36, 64 and 128 (one and two sub-tiles
 * of 64 keys), V = 20, 40, 64 and 68 (a last output V tile of 4 columns),
 * T not a multiple of C, h0 and ht, packed sequences (cu_seqlens, one of a
 * single token); each rule without beta (linattn, ssd) and with (delta,
 * gdn). Each run is repeated (the same bits), and on must change off's
 * o bits (the output's bf16 form ran) and dv's (dlocal's: without beta
 * it is the backward's only pass that changes); ht comes from the state
 * pass, which the switch leaves alone, and with beta from prep's W and R0,
 * so its bits must equal off's without beta and differ with beta
 * (prep's bf16 form ran). */
static void test_bf16_mma(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    const pr_rec_force on = {.bf16_mma = PR_REC_ON}, none = {0};
    /* taken: prep, output and dlocal where the forward and backward read bf16 in place */
    const pr_rec_plan a = bf_plan(PR_RULE_GDN, 64, 1, true, on, 64, 40, 0);
    if (a.pass[PR_REC_PASS_OUTPUT].engine != PR_REC_WGMMA) {
        fprintf(stderr, "  skipped: this build has no wgmma forms\n");
        skip();
    }
    assert_int_equal(bf_passes(&a), 3);
    assert_int_equal(a.pass[PR_REC_PASS_PREP].prod, PR_REC_PROD_BF16);
    assert_int_equal(a.pass[PR_REC_PASS_OUTPUT].prod, PR_REC_PROD_BF16);
    assert_int_equal(a.pass[PR_REC_PASS_DLOCAL].prod, PR_REC_PROD_BF16);
    const pr_rec_plan a32 = bf_plan(PR_RULE_LINATTN, 32, 1, true, on, 36, 20, 0);
    assert_int_equal(bf_passes(&a32), 2);
    /* the default takes it as on does; off: TF32, nothing said either way */
    for (int s = 0; s < 2; s++) {
        const pr_rec_force f = {.bf16_mma = s ? PR_REC_OFF : PR_REC_PLANNED};
        const pr_rec_plan d = bf_plan(PR_RULE_GDN, 64, 1, true, f, 64, 40, 0);
        const pr_rec_prod want = s ? PR_REC_PROD_TF32 : PR_REC_PROD_BF16;
        assert_int_equal(d.pass[PR_REC_PASS_PREP].prod, want);
        assert_int_equal(d.pass[PR_REC_PASS_OUTPUT].prod, want);
        assert_int_equal(d.pass[PR_REC_PASS_DLOCAL].prod, want);
        assert_null(d.bf16_mma_refused);
    }
    assert_null(bf_plan(PR_RULE_GDN, 64, 1, false, none, 64, 40, 0).bf16_mma_refused); /* refused only when asked */
    /* the state pass forced to mma.sync: the forward stages k, v (prep and output TF32), the backward still reads
     * them in place */
    const pr_rec_plan sm = bf_plan(PR_RULE_GDN, 64, 1, true, (pr_rec_force){.bf16_mma = PR_REC_ON, .state = PR_REC_MMA},
                                   64, 40, 0);
    assert_int_equal(bf_passes(&sm), 1);
    assert_int_equal(sm.pass[PR_REC_PASS_OUTPUT].prod, PR_REC_PROD_TF32);
    assert_int_equal(sm.pass[PR_REC_PASS_PREP].prod, PR_REC_PROD_TF32);
    assert_int_equal(sm.pass[PR_REC_PASS_DLOCAL].prod, PR_REC_PROD_BF16);
    /* refused, with why */
    assert_bf_refused(PR_RULE_GDN, 64, 1, false, none, 64, 40, 0, "f32 data");
    assert_bf_refused(PR_RULE_GDN, 64, 0, true, none, 64, 40, 0, "TF32 off");
    assert_bf_refused(PR_RULE_GDN, 0, 1, true, none, 64, 40, 0, "per-token");
    assert_bf_refused(PR_RULE_GDN, 64, 1, true, none, 160, 40, 0, "mma.sync");
    assert_bf_refused(PR_RULE_GDN, 64, 1, true, (pr_rec_force){.bf16_staged = PR_REC_ON}, 64, 40, 0, "staged");
    assert_bf_refused(PR_RULE_GDN, 64, 1, true, (pr_rec_force){.segments = 2}, 64, 40, 0, "segments");
    assert_bf_refused(PR_RULE_PRISM_CORE, 64, 1, true, none, 64, 40, 2, "extra writes");
    assert_bf_refused(PR_RULE_GLA, 64, 1, true, none, 64, 40, 0, "gla");

    static const struct {
        int64_t B, T, K, V;
        int chunk;
        const int64_t *cu;
        int ncu;
    } cs[] = {
        {2, 100, 64, 40, 64, NULL, 0},
        {2, 100, 36, 20, 32, NULL, 0},
        {1, 130, 128, 68, 64, cu_mma, 4},
        {2, 70, 128, 64, 32, NULL, 0},
    };
    static const pr_rule rules[] = {PR_RULE_LINATTN, PR_RULE_SSD, PR_RULE_DELTA, PR_RULE_GDN};
    pr_ctx *ctx = pr_ctx_new(1);
    int fails = 0;
    for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++)
        for (size_t ri = 0; ri < sizeof rules / sizeof *rules; ri++) {
            const pr_rule rule = rules[ri];
            const int64_t B = cs[ci].B, T = cs[ci].T, H = 2, K = cs[ci].K, V = cs[ci].V;
            const int64_t N = cs[ci].cu ? cs[ci].ncu - 1 : B;
            char what[96];
            snprintf(what, sizeof what, "%s C=%d K=%d V=%d T=%d%s bf16_mma", pr_rule_name(rule), cs[ci].chunk, (int)K,
                     (int)V, (int)T, cs[ci].cu ? " packed" : "");
            const pr_recurrence_opts po = {.rule = rule, .chunk = cs[ci].chunk, .tf32 = 1, .bf16 = true, .force = on};
            pr_rec_plan plan;
            char why[256];
            if (!pr_recurrence_plan(&po, PR_CUDA, N, T, H, K, V, 0, &plan, why, sizeof why))
                fail_msg("%s: no plan: %s", what, why);
            const int taken = bf_passes(&plan), want = pr_rule_has_beta(rule) ? 3 : 2;
            if (taken != want) {
                char line[1024];
                pr_rec_plan_format(&plan, line, sizeof line);
                fprintf(stderr, "  FAIL %s: bf16 wgmma in %d of %d passes (prep, output, dlocal: %s)\n", what, taken,
                        want, line);
                fails++;
            }
            pr_rng r = pr_rng_init(900 + 10 * ci + ri, 3);
            pr_recurrence_inputs in0 = pr_recurrence_random(ctx, &r, PR_F64, rule, B, T, H, K, V, 0, false);
            in0.h0 = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(N, H, K, V), &r);
            pr_tensor *x[REC_NIN], *ref_in[REC_NIN], *gpu_in[REC_NIN];
            rec_in_array(&in0, x);
            for (int i = 0; i < REC_NIN; i++) {
                pr_tensor *rnd = x[i] ? pr_to(ctx->step, x[i], bf_dtype(i), PR_CPU) : NULL;
                ref_in[i] = rnd ? pr_to(ctx->step, rnd, PR_F64, PR_CPU) : NULL;
                gpu_in[i] = rnd ? pr_to(ctx->step, rnd, rnd->dtype, PR_CUDA) : NULL;
                if (rnd) pr_requires_grad_(ref_in[i], true), pr_requires_grad_(gpu_in[i], true);
            }
            pr_tensor *cu = cs[ci].cu ? pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(cs[ci].ncu), cs[ci].cu) : NULL;
            pr_tensor *cu_gpu = cu ? pr_to(ctx->step, cu, PR_I64, PR_CUDA) : NULL;
            double *dout_raw = rec_randn(950 + ci, B * T * H * V), *dht_raw = rec_randn(960 + ci, N * H * K * V);
            double *dout = rounded(ctx, dout_raw, B * T * H * V, PR_BF16);
            double *dht = rounded(ctx, dht_raw, N * H * K * V, PR_F32);
            const pr_recurrence_opts ro = {.rule = rule};
            rec_out ref = rec_run_seeded_opts(ctx, &ro, ref_in, cu, dout, dht);
            ctx->matmul_tf32 = 1;
            const pr_recurrence_opts go = {.rule = rule, .chunk = cs[ci].chunk, .force = on};
            const pr_recurrence_opts tf = {.rule = rule, .chunk = cs[ci].chunk, .force = {.bf16_mma = PR_REC_OFF}};
            rec_out got = rec_run_seeded_opts(ctx, &go, gpu_in, cu_gpu, dout, dht);
            rec_out again = rec_run_seeded_opts(ctx, &go, gpu_in, cu_gpu, dout, dht);
            rec_out off = rec_run_seeded_opts(ctx, &tf, gpu_in, cu_gpu, dout, dht);
            ctx->matmul_tf32 = 0;
            fails += rec_fails_tol(what, NULL, &got, &ref, 8e-3);
            fails += rec_fails_rerun(what, &got, &again);
            rec_report("  off (TF32) vs CPU", &off, &ref);
            if (!memcmp(got.o, off.o, sizeof(double) * (size_t)got.n_o)) {
                fprintf(stderr, "  FAIL %s: o has off's bits: the bf16 form did not run\n", what);
                fails++;
            }
            if (!memcmp(got.d[2], off.d[2], sizeof(double) * (size_t)got.n[2])) { /* d[2]: dv (q k v ...) */
                fprintf(stderr, "  FAIL %s: dv has off's bits: dlocal's bf16 form did not run\n", what);
                fails++;
            }
            const bool ht_same = !memcmp(got.ht, off.ht, sizeof(double) * (size_t)got.n_ht);
            if (ht_same == pr_rule_has_beta(rule)) {
                fprintf(stderr, "  FAIL %s: ht %s off's bits (%s)\n", what, ht_same ? "has" : "differs from",
                        ht_same ? "prep's bf16 form did not run" : "the switch changed the state pass");
                fails++;
            }
            rec_out_free(&ref), rec_out_free(&got), rec_out_free(&again), rec_out_free(&off);
            free(dout_raw), free(dout), free(dht_raw), free(dht);
            pr_step_reset(ctx);
        }
    pr_ctx_free(ctx);
    assert_int_equal(fails, 0);
}

/* bf16 g or f32 v next to bf16 q: refused on CUDA as on the CPU */
static void test_recurrence_dtype_checks(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(1);
    pr_rng r = pr_rng_init(2, 0);
    pr_recurrence_inputs a = pr_recurrence_random(ctx, &r, PR_BF16, PR_RULE_GDN, 1, 8, 2, 32, 32, 0, false);
    pr_tensor *q = pr_to(ctx->step, a.q, PR_BF16, PR_CUDA), *k = pr_to(ctx->step, a.k, PR_BF16, PR_CUDA);
    pr_tensor *v = pr_to(ctx->step, a.v, PR_BF16, PR_CUDA), *b = pr_to(ctx->step, a.beta, PR_BF16, PR_CUDA);
    pr_tensor *g16 = pr_to(ctx->step, a.g, PR_BF16, PR_CUDA), *v32 = pr_to(ctx->step, a.v, PR_F32, PR_CUDA);
    const pr_recurrence_opts o = {.rule = PR_RULE_GDN, .chunk = 64};
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, q, k, v, g16, b, NULL, NULL, NULL, NULL, NULL), "g is bf16, expected f32");
    PR_EXPECT_FATAL(pr_recurrence(ctx, &o, q, k, v32, g16, b, NULL, NULL, NULL, NULL, NULL), "v is f32, expected bf16");
    pr_ctx_free(ctx);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cast_matches_cpu),
        cmocka_unit_test(test_cast_paths),
        cmocka_unit_test(test_cast_acc_paths),
        cmocka_unit_test(test_recurrence_every_rule),
        cmocka_unit_test(test_recurrence_dtype_checks),
        cmocka_unit_test(test_extras_in_place),
        cmocka_unit_test(test_output_in_place),
        cmocka_unit_test(test_gla_in_place),
        cmocka_unit_test(test_bf16_mma),
    };
    /* PR_TEST_FILTER=test_extras_in_place (a glob) runs a part, e.g. under compute-sanitizer */
    if (getenv("PR_TEST_FILTER")) cmocka_set_test_filter(getenv("PR_TEST_FILTER"));
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
