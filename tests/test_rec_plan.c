/* tests/test_rec_plan.c: the recurrence's plan as data, without a GPU
 * (ops/recurrence/plan.c):
 * - the CPU plan's fields for each form, and a CUDA plan refused (with its
 *   reason) where the build or the machine has no GPU;
 * - the text of a CUDA chunked plan, written from a plan filled by hand
 *   (the fields that make each part of it appear);
 * - the forcing fields read from text (`prism bench recurrence --force`):
 *   every kind of field, items over what is already set, and the errors;
 * - the ids under which a node keeps its forcing fields.
 * The CUDA planner's own choices are tested on the GPU
 * (tests/test_cuda_recurrence.c asserts on these fields).
 */
#include "tests/pr_test.h"

#include "ops/recurrence/recurrence.h"

static pr_rec_plan cpu_plan(pr_rule rule, int chunk)
{
    const pr_recurrence_opts opt = {.rule = rule, .chunk = chunk};
    pr_rec_plan plan;
    char why[256];
    assert_true(pr_recurrence_plan(&opt, PR_CPU, 2, 100, 2, 16, 8, 0, &plan, why, sizeof why));
    assert_string_equal(why, "");
    return plan;
}

static void test_cpu_plan_fields(void **state)
{
    (void)state;
    pr_rec_plan p = cpu_plan(PR_RULE_GDN, 0);
    assert_int_equal(p.device, PR_CPU);
    assert_int_equal(p.chunk, 0);
    assert_true(p.delta && p.has_g && !p.gla);
    p = cpu_plan(PR_RULE_SSD, 16);
    assert_int_equal(p.chunk, 16);
    assert_true(!p.delta && p.has_g && !p.gla);
    p = cpu_plan(PR_RULE_GLA, 16);
    assert_true(p.gla && p.has_g && !p.delta);
    char line[512];
    pr_rec_plan_format(&p, line, sizeof line);
    assert_non_null(strstr(line, "cpu chunked C=16: fwd pr_rec_gla_forward_chunked"));

    const pr_recurrence_opts bad = {.rule = PR_RULE_LINATTN, .chunk = -1};
    char why[256];
    assert_false(pr_recurrence_plan(&bad, PR_CPU, 1, 8, 1, 4, 4, 0, &p, why, sizeof why));
    assert_non_null(strstr(why, "chunk must be >= 0"));
    /* a CUDA plan needs a GPU (and a build with CUDA) */
    if (!pr_cuda_available()) {
        const pr_recurrence_opts opt = {.rule = PR_RULE_GDN, .chunk = 64};
        assert_false(pr_recurrence_plan(&opt, PR_CUDA, 1, 100, 2, 64, 64, 0, &p, why, sizeof why));
        assert_true(strstr(why, "built without CUDA") || strstr(why, "no CUDA device"));
    }
}

/* a CUDA chunked plan of a delta rule, as the planner fills it */
static pr_rec_plan cuda_plan(void)
{
    pr_rec_plan p = {.device = PR_CUDA, .chunk = 64, .delta = true, .has_g = true};
    p.pass[PR_REC_PASS_PREP] = (pr_rec_pass){.runs = true, .engine = PR_REC_WGMMA, .bv = 128, .bk = 0};
    p.pass[PR_REC_PASS_STATE] = (pr_rec_pass){.runs = true, .engine = PR_REC_WGMMA, .bv = 64, .bk = 0};
    p.pass[PR_REC_PASS_OUTPUT] = (pr_rec_pass){.runs = true, .engine = PR_REC_WGMMA, .bv = 64, .bk = 0};
    p.pass[PR_REC_PASS_DLOCAL] = (pr_rec_pass){.runs = true, .engine = PR_REC_WGMMA, .bv = 128, .bk = 0};
    p.pass[PR_REC_PASS_DSTATE] = (pr_rec_pass){.runs = true, .engine = PR_REC_MMA, .bv = 32, .bk = 0};
    p.pass[PR_REC_PASS_GRAD] = (pr_rec_pass){.runs = true, .engine = PR_REC_WGMMA, .bv = 32, .bk = 128};
    p.pass[PR_REC_PASS_WY] = (pr_rec_pass){.runs = true, .engine = PR_REC_WGMMA, .bv = 64, .bk = 64};
    p.segments = 1, p.grad_blocks = 4, p.grad_passes = 1, p.wy_extras = 1;
    return p;
}

static void test_cuda_plan_text(void **state)
{
    (void)state;
    char line[512];
    pr_rec_plan p = cuda_plan();
    pr_rec_plan_format(&p, line, sizeof line);
    assert_string_equal(line, "cuda chunked C=64: fwd prep(bv 128, wgmma) state(bv 64, wgmma) scores(bv 64, wgmma); "
                              "bwd dlocal(bv 128, wgmma) dstate(bv 32) grad(bk 128, bv 32, wgmma, 4 pieces a "
                              "warpgroup) wy(bk 64, bv 64, wgmma)");
    /* segments with the fix-up, grad's mma.sync form in two passes, wy's extras in twos, extras apart */
    p.segments = 8, p.seg_fix = true, p.bv_fix = 32;
    p.pass[PR_REC_PASS_GRAD].engine = PR_REC_MMA, p.grad_blocks = 8, p.grad_passes = 2;
    p.pass[PR_REC_PASS_WY].engine = PR_REC_MMA, p.wy_extras = 2;
    p.extras_apart = true, p.extras = PR_REC_WGMMA;
    pr_rec_plan_format(&p, line, sizeof line);
    assert_string_equal(line, "cuda chunked C=64: fwd extras(apart, wgmma) prep(bv 128, wgmma) state(bv 64, wgmma, "
                              "segments 8, 2 passes) segfix(bv 32) scores(bv 64, wgmma); bwd dlocal(bv 128, wgmma) "
                              "dstate(bv 32, segments 8) grad(bk 128, bv 32, 8 blocks a warp, 2 passes) wy(bk 64, "
                              "bv 64, extras in 2s) extras(apart, wgmma)");
    /* bf16 data: the passes in place and each pass's products, after the kernels */
    p = cuda_plan();
    p.bf16 = true;
    for (int i = 0; i < PR_REC_NPASS; i++) p.pass[i].prod = PR_REC_PROD_TF32;
    p.pass[PR_REC_PASS_DSTATE].prod = PR_REC_PROD_BF16;
    pr_rec_plan_format(&p, line, sizeof line);
    assert_non_null(strstr(line, "wy(bk 64, bv 64, wgmma); bf16 data: in place none, products prep tf32 state tf32 "
                                 "output tf32 dlocal tf32 dstate bf16 grad tf32 wy tf32"));
    p.pass[PR_REC_PASS_OUTPUT].bf16_in_place = true;
    p.pass[PR_REC_PASS_WY].runs = false; /* a pass that does not run is named nowhere */
    p.pass[PR_REC_PASS_WY].bf16_in_place = true;
    pr_rec_plan_format(&p, line, sizeof line);
    assert_non_null(strstr(line, "; bf16 data: in place output, products prep tf32"));
    assert_null(strstr(line, "wy tf32"));
    /* force.bf16_mma refused: the line ends with why (none taken: NULL, nothing said) */
    assert_null(strstr(line, "bf16_mma"));
    p.bf16_mma_refused = "f32 data (bf16 data only)";
    pr_rec_plan_format(&p, line, sizeof line);
    assert_non_null(strstr(line, "dstate bf16 grad tf32; bf16_mma refused: f32 data (bf16 data only)"));
    p.bf16_mma_refused = NULL;
    /* no beta: no prep or wy, the final sums of dg (none without g) */
    p = cuda_plan();
    p.delta = false, p.pass[PR_REC_PASS_PREP].runs = p.pass[PR_REC_PASS_WY].runs = false;
    pr_rec_plan_format(&p, line, sizeof line);
    assert_non_null(strstr(line, "fwd state(bv 64, wgmma)"));
    assert_non_null(strstr(line, "warpgroup) dg"));
    p.has_g = false;
    pr_rec_plan_format(&p, line, sizeof line);
    assert_non_null(strstr(line, "warpgroup) (no dg)"));
    /* the per-token forms */
    pr_rec_plan t = {.device = PR_CUDA, .delta = true};
    pr_rec_plan_format(&t, line, sizeof line);
    assert_string_equal(line, "cuda per-token: fwd tok_fwd; bwd tok_rev, tok_dq, tok_sum_slices");
    t.gla = true;
    pr_rec_plan_format(&t, line, sizeof line);
    assert_non_null(strstr(line, "fwd gla_fwd; bwd gla_fwd (dq)"));
    t.g_per_value = true;
    pr_rec_plan_format(&t, line, sizeof line);
    assert_non_null(strstr(line, "(per-value decay, per-token form)"));
    /* gla's chunked kernels: no passes to plan */
    const pr_rec_plan gc = {.device = PR_CUDA, .chunk = 64, .gla = true, .has_g = true};
    pr_rec_plan_format(&gc, line, sizeof line);
    assert_string_equal(line, "cuda chunked C=64: fwd gla_state(bv 32) gla_out; bwd gla_dstate(bv 32) gla_dv gla_dqk "
                              "(per-key decay, sub-chunks of 16)");
    pr_rec_plan fast = gc; /* force.gla_fast on */
    fast.gla_fast = true;
    pr_rec_plan_format(&fast, line, sizeof line);
    assert_string_equal(line, "cuda chunked C=64: fwd gla_cumsum gla_state(bk 64, bv 32) gla_out(bk 64, A saved); "
                              "bwd gla_cumsum gla_dstate(bk 64, bv 32) gla_dv(A read) gla_dqk(bk 64, bv 16) "
                              "(per-key decay, sub-chunks of 16; fast: decays summed once, dg summed in shared "
                              "memory)");
    fast.bf16 = fast.gla_in_place = true; /* bf16 data read and written in place by the fast kernels */
    pr_rec_plan_format(&fast, line, sizeof line);
    assert_non_null(strstr(line, "dg summed in shared memory; bf16 in place)"));
    pr_rec_plan gvc = gc;
    gvc.g_per_value = true;
    pr_rec_plan_format(&gvc, line, sizeof line);
    assert_string_equal(line, "cuda chunked C=64: fwd gv_state(bv 32) gv_out; bwd gv_dstate(bv 32) gv_dv gv_dqk "
                              "(per-value decay, sub-chunks of 16)");
}

static void test_force_parse(void **state)
{
    (void)state;
    pr_rec_force f = {0};
    char err[256];
    assert_true(pr_rec_force_parse("segments=4,seg_fix=off,bv_state=32,bv_dstate=64,bk_grad=32,bk_wy=32,grad_bpw=8,"
                                   "grad_pieces=2,prep=mma,state=wgmma,scores=mma,dstate=wgmma,wy=mma,"
                                   "extras_apart=on,x16=off,bf16_staged=on,gla_fast=on,bf16_mma=on",
                                   &f, err, sizeof err));
    assert_string_equal(err, "");
    assert_int_equal(f.segments, 4);
    assert_int_equal(f.seg_fix, PR_REC_OFF);
    assert_int_equal(f.bv_state, 32);
    assert_int_equal(f.bv_dstate, 64);
    assert_int_equal(f.bk_grad, 32);
    assert_int_equal(f.bk_wy, 32);
    assert_int_equal(f.grad_bpw, 8);
    assert_int_equal(f.grad_pieces, 2);
    assert_int_equal(f.prep, PR_REC_MMA);
    assert_int_equal(f.state, PR_REC_WGMMA);
    assert_int_equal(f.scores, PR_REC_MMA);
    assert_int_equal(f.dstate, PR_REC_WGMMA);
    assert_int_equal(f.wy, PR_REC_MMA);
    assert_int_equal(f.extras_apart, PR_REC_ON);
    assert_int_equal(f.x16, PR_REC_OFF);
    assert_int_equal(f.bf16_staged, PR_REC_ON);
    assert_int_equal(f.gla_fast, PR_REC_ON);
    assert_int_equal(f.bf16_mma, PR_REC_ON);
    /* items go over what is set; the rest stays */
    assert_true(pr_rec_force_parse("segments=1", &f, err, sizeof err));
    assert_int_equal(f.segments, 1);
    assert_int_equal(f.bv_state, 32);

    /* errors name the item and leave *f as it was */
    const pr_rec_force before = f;
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"segs=2", "unknown field in 'segs=2'"},
        {"segments=0", "segments needs =a whole number >= 1, got 'segments=0'"},
        {"segments=2x", "segments needs =a whole number >= 1"},
        {"segments", "segments needs =a whole number >= 1, got 'segments'"},
        {"state=tf32", "state needs =mma or wgmma, got 'state=tf32'"},
        {"seg_fix=1", "seg_fix needs =on or off"},
        {"bv_state=32,wy=fast", "wy needs =mma or wgmma"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(pr_rec_force_parse(bad[i].text, &f, err, sizeof err));
        if (!strstr(err, bad[i].msg)) fail_msg("'%s': error \"%s\" lacks \"%s\"", bad[i].text, err, bad[i].msg);
        assert_memory_equal(&f, &before, sizeof f);
    }
}

static void test_force_ids(void **state)
{
    (void)state;
    const pr_rec_force none = {0}, a = {.segments = 4}, b = {.state = PR_REC_MMA, .bv_state = 32};
    assert_int_equal(pr_rec_force_id(&none), 0);
    const int64_t ia = pr_rec_force_id(&a), ib = pr_rec_force_id(&b);
    assert_true(ia > 0 && ib > 0 && ia != ib);
    assert_int_equal(pr_rec_force_id(&a), ia); /* equal fields, one id */
    assert_memory_equal(pr_rec_force_of(ia), &a, sizeof a);
    assert_memory_equal(pr_rec_force_of(ib), &b, sizeof b);
    assert_memory_equal(pr_rec_force_of(0), &none, sizeof none);
    PR_EXPECT_FATAL(pr_rec_force_of(ib + 100), "no forcing fields with id");
}

/* a recorded node keeps its call's forcing fields (iarg[3]); the CPU forms
 * ignore them */
static void test_node_keeps_force(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(3, 0);
    pr_recurrence_inputs in = pr_recurrence_random(ctx, &r, PR_F64, PR_RULE_GDN, 1, 8, 1, 4, 4, 0, false);
    pr_recurrence_opts opt = {.rule = PR_RULE_GDN, .chunk = 4, .force = {.segments = 2, .wy = PR_REC_WGMMA}};
    pr_tensor *o = pr_recurrence(ctx, &opt, in.q, in.k, in.v, in.g, in.beta, NULL, NULL, NULL, NULL, NULL);
    assert_non_null(o);
    const pr_node *n = &ctx->tape[ctx->n_tape - 1];
    assert_memory_equal(pr_rec_force_of(n->iarg[3]), &opt.force, sizeof opt.force);
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_plan_fields), cmocka_unit_test(test_cuda_plan_text),
        cmocka_unit_test(test_force_parse),     cmocka_unit_test(test_force_ids),
        cmocka_unit_test(test_node_keeps_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
