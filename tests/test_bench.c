/* tests/test_bench.c: what `prism bench ops`, `bench block` and `bench
 * fused` measure (lab/lab.h), run without the command on the CPU at tiny
 * sizes: every row of the kernel table timed, against the ceiling it names,
 * and no target judged off the GPU; one block's forward and
 * forward+backward timed; a block too large to fit reported as skipped,
 * never run; attention and the selective scan timed, with their rates;
 * bench recurrence's CPU table at a short T, for the rules asked only. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lab/lab.h"
#include "tests/pr_test.h"

static void test_ops_table(void **state)
{
    (void)state;
    FILE *out = fopen("/dev/null", "w");
    assert_non_null(out);
    pr_bench_ops_result r;
    pr_bench_ops_run(out, PR_CPU, true, 1, &r);
    fclose(out);
    /* the copy, then silu, add, swiglu, softmax, layernorm, rmsnorm and the
     * fused add + rmsnorm (fwd and bwd, add fwd only), then the product: fp32
     * alone on the CPU (and no bf16 rows: those are the GPU's) */
    assert_int_equal(r.n, 15);
    assert_false(r.judged);
    assert_int_equal(r.low, 0);
    assert_string_equal(r.row[0].name, "memcpy");
    assert_true(r.row[0].of_ceiling == 1);
    assert_string_equal(r.row[1].name, "silu fwd");
    assert_string_equal(r.row[11].name, "rmsnorm (w) bwd (dx)");
    assert_string_equal(r.row[12].name, "add+rmsnorm fused fwd");
    assert_string_equal(r.row[13].name, "add+rmsnorm fused bwd (dx)");
    assert_string_equal(r.row[14].name, "pr_matmul 64^3 fp32");
    assert_true(isnan(r.row[14].of_ceiling));   /* no bare GEMM to compare with on the CPU */
    for (int i = 0; i < r.n; i++) {
        assert_true(isfinite(r.row[i].ms) && r.row[i].ms > 0);
        assert_true(isfinite(r.row[i].rate) && r.row[i].rate > 0);
        assert_false(r.row[i].low);
        if (i > 0 && i < 14) assert_true(fabs(r.row[i].of_ceiling - r.row[i].rate / r.row[0].rate) < 1e-9);
    }
}

static pr_config block_config(const char *preset, const char *mixer)
{
    pr_config c = pr_config_default();
    pr_err err;
    char kv[64];
    snprintf(kv, sizeof kv, "mixer=%s", mixer);
    if (pr_config_preset(&c, preset, &err) || pr_config_set(&c, kv, &err)) fail_msg("%s", err.msg);
    return c;
}

static void test_block(void **state)
{
    (void)state;
    pr_config c = block_config("probe", "gdn");
    pr_bench_block_time t;
    assert_int_equal(pr_bench_block_one(&c, 1, 4, PR_CPU, PR_PREC_F32, 1, &t), 0);
    assert_true(isfinite(t.fwd_s) && t.fwd_s > 0);
    assert_true(isfinite(t.fwd_bwd_s) && t.fwd_bwd_s > 0);
    assert_true(t.skipped_bytes == 0);
    /* the block alone: fewer parameters than the one-layer model holding it */
    pr_config one = pr_config_resolve(&c);
    one.n_layers = 1;
    pr_model *shapes = pr_model_shapes(&one);
    int64_t model = pr_params_count(shapes->params);
    pr_model_free(shapes);
    assert_true(t.params > 0 && t.params < model);
}

static void test_block_too_large(void **state)
{
    (void)state;
    pr_config c = block_config("lm-130m", "atlas");
    pr_bench_block_time t;
    assert_int_equal(pr_bench_block_one(&c, 64, 1 << 20, PR_CPU, PR_PREC_F32, 1, &t), 1);
    assert_true(t.skipped_bytes > PR_BENCH_MAX_STEP_BYTES);
    assert_true(t.fwd_s == 0 && t.fwd_bwd_s == 0);
    /* hstu's T x T scores too: one block of 16 sequences of 16K tokens */
    c = block_config("lm-130m", "hstu");
    assert_int_equal(pr_bench_block_one(&c, 16, 1 << 14, PR_CPU, PR_PREC_F32, 1, &t), 1);
    assert_true(t.skipped_bytes > PR_BENCH_MAX_STEP_BYTES);
}

static void test_fused(void **state)
{
    (void)state;
    FILE *out = fopen("/dev/null", "w");
    assert_non_null(out);
    pr_bench_fused_time t[PR_BENCH_ATT_ROWS];
    assert_int_equal(pr_bench_attention(out, PR_CPU, 1, 16, 2, 8, 1, t), 1);   /* fp32 only off the GPU */
    /* the rate is the forward's 2 B H T^2 D operations per second, the backward's 2.5 times as many */
    assert_true(t[0].fwd_ms > 0 && t[0].bwd_ms > 0);
    assert_true(fabs(t[0].fwd_rate - 2.0 * 2 * 16 * 16 * 8 / (t[0].fwd_ms * 1e-3) / 1e12) < 1e-9 * t[0].fwd_rate);
    assert_true(fabs(t[0].bwd_rate - 5.0 * 2 * 16 * 16 * 8 / (t[0].bwd_ms * 1e-3) / 1e12) < 1e-9 * t[0].bwd_rate);
    pr_bench_fused_time s;
    pr_bench_selective_scan(out, PR_CPU, 1, 32, 8, 4, 1, &s);
    assert_true(s.fwd_ms > 0 && s.bwd_ms > 0 && isfinite(s.fwd_rate) && s.fwd_rate > 0);
    fclose(out);
}

static void test_recurrence_cpu(void **state)
{
    (void)state;
    pr_bench_rec_opts o = {.dt = PR_F64, .reps = 1, .rules = 1u << PR_RULE_GDN | 1u << PR_RULE_GLA, .nch = 1,
                           .chunks = {16}, .cpu_T = 48};
    pr_bench_rec_cpu_row rows[PR_NRULES] = {0};
    assert_int_equal(pr_bench_recurrence_cpu(&o, rows), 0);
    for (int r = 0; r < PR_NRULES; r++) {
        assert_int_equal(rows[r].ran, r == PR_RULE_GDN || r == PR_RULE_GLA);
        if (!rows[r].ran) continue;
        for (int k = 0; k < 4; k++) assert_true(isfinite(rows[r].seconds[k]) && rows[r].seconds[k] >= 0);
        /* a recorded forward keeps what its backward reads; one under no-grad keeps less */
        assert_true(rows[r].step_bytes[1] > rows[r].step_bytes[0]);
        assert_true(rows[r].step_bytes[3] > rows[r].step_bytes[2]);
    }
    o.no_token = true;   /* the per-token form left out: its columns stay unmeasured */
    assert_int_equal(pr_bench_recurrence_cpu(&o, rows), 0);
    assert_true(isinf(rows[PR_RULE_GDN].seconds[0]) && isfinite(rows[PR_RULE_GDN].seconds[2]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_table),
        cmocka_unit_test(test_block),
        cmocka_unit_test(test_block_too_large),
        cmocka_unit_test(test_fused),
        cmocka_unit_test(test_recurrence_cpu),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
