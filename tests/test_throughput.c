/* tests/test_throughput.c: the training-throughput measurement of
 * `prism bench throughput` (lab/lab.h), run without the command: a figure,
 * a parameter count and a peak memory above weights, grads and AdamW's
 * moments for a model that fits, the profiled step's table
 * where asked, and NAN for a config that does not hold and for a CUDA graph
 * asked on the CPU. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lab/lab.h"
#include "tests/pr_test.h"

static pr_config probe_config(void)
{
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "probe", &err), 0);
    return c;
}

/* gdn at T=8, four sequences a step, one timed step on the CPU */
static void test_measures(void **state)
{
    (void)state;
    pr_config c = probe_config();
    int64_t params = 0;
    size_t peak = 0;
    double tps = pr_bench_throughput_one(&c, "gdn", 8, 32, PR_CPU, 0, 1, PR_PREC_F32, false, NULL, NULL, &params, &peak);
    assert_true(isfinite(tps) && tps > 0);
    assert_true(params > 0);
    /* f32 weights, grads and AdamW's two moments at least; and the activations on top */
    assert_true(peak > (size_t)(16 * params));
    assert_true(peak < ((size_t)1 << 30));
}

/* one profiled step after the timed ones: its table in DIR/breakdown-<mixer>-T<T>.md */
static void test_breakdown(void **state)
{
    (void)state;
    pr_config c = probe_config();
    char dir[] = "/tmp/prism_test_throughput_XXXXXX", path[128], line[128] = {0};
    assert_non_null(mkdtemp(dir));
    int64_t params = 0;
    size_t peak = 0;
    double tps = pr_bench_throughput_one(&c, "linattn", 8, 16, PR_CPU, 0, 1, PR_PREC_F32, false, NULL, dir, &params, &peak);
    assert_true(isfinite(tps) && tps > 0);
    snprintf(path, sizeof path, "%s/breakdown-linattn-T8.md", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_non_null(strstr(line, "# linattn, T=8, 2 sequences a step"));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* a mixer no config takes: NAN and no parameter count, never a figure */
static void test_bad_config(void **state)
{
    (void)state;
    pr_config c = probe_config();
    int64_t params = 0;
    size_t peak = 1;
    assert_true(isnan(pr_bench_throughput_one(&c, "nosuch", 8, 32, PR_CPU, 0, 1, PR_PREC_F32, false, NULL, NULL, &params, &peak)));
    assert_int_equal(params, -1);
    assert_int_equal(peak, 0);
    /* a CUDA graph on the CPU: refused, never timed as if it ran */
    c = probe_config();
    assert_true(isnan(pr_bench_throughput_one(&c, "gdn", 8, 32, PR_CPU, 0, 1, PR_PREC_F32, true, NULL, NULL, &params, &peak)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_measures),
        cmocka_unit_test(test_breakdown),
        cmocka_unit_test(test_bad_config),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
