/* tests/test_compare.c: what `prism compare` does (lab/lab.h), without the
 * command: the quality metric picked from a run's metrics, the table as
 * Markdown and CSV (a failed model keeps its row), the report page, and the
 * error for a file that cannot be created; each model's config in prism
 * train's order, a tiny model's run filling its row, the same compare run
 * again replacing its runs, and a model that cannot run left failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab/lab.h"
#include "tests/pr_test.h"

static const pr_compare_row rows[2] = {
    {.name = "gdn", .metric = "acc", .quality = 0.75, .tokens_per_s = 1234, .peak_mib = 2.5, .params = 4321, .ok = true},
    {.name = "prism"},   /* its run failed */
};

static void read_all(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    buf[fread(buf, 1, n - 1, f)] = 0;
    fclose(f);
}

static void test_quality(void **state)
{
    (void)state;
    pr_metrics m = {.n = 2, .name = {"loss", "acc"}, .value = {0.5, 0.875}};
    double v = 0;
    assert_string_equal(pr_compare_quality(&m, "parity", &v), "acc");
    assert_true(v == 0.875);
    m.n = 1;
    assert_string_equal(pr_compare_quality(&m, "parity", &v), "-");
    assert_true(isnan(v));
}

static void test_tables_and_report(void **state)
{
    (void)state;
    char dir[] = "/tmp/prism_test_compare_XXXXXX", path[128], text[1 << 16];
    assert_non_null(mkdtemp(dir));
    pr_err err;
    snprintf(path, sizeof path, "%s/compare.md", dir);
    assert_int_equal(pr_compare_write_table(path, rows, 2, false, PR_CPU, &err), 0);
    read_all(path, text, sizeof text);
    assert_non_null(strstr(text, "| model | acc | tokens/s | params | step arena peak MiB |"));
    assert_non_null(strstr(text, "| gdn | 0.7500 | 1234 | 4321 | 2.5 |"));
    assert_non_null(strstr(text, "| prism | failed | | | |"));
    unlink(path);

    snprintf(path, sizeof path, "%s/compare.csv", dir);
    assert_int_equal(pr_compare_write_table(path, rows, 2, true, PR_CUDA, &err), 0);
    read_all(path, text, sizeof text);
    assert_non_null(strstr(text, "model,acc,tokens_per_s,params,device peak MiB\ngdn,0.75,1234,4321,2.50\nprism,,,,\n"));
    unlink(path);

    /* no run folders under dir: the page says no run logged a step */
    snprintf(path, sizeof path, "%s/report.html", dir);
    assert_int_equal(pr_compare_write_report(path, dir, "parity", 30, rows, 2, PR_CPU, &err), 0);
    read_all(path, text, sizeof text);
    assert_non_null(strstr(text, "prism compare on parity"));
    assert_non_null(strstr(text, "2 models, 30 steps each"));
    assert_non_null(strstr(text, "<svg"));
    assert_non_null(strstr(text, "No run logged a step."));
    unlink(path);

    snprintf(path, sizeof path, "%s/no/dir/compare.md", dir);
    assert_int_not_equal(pr_compare_write_table(path, rows, 2, false, PR_CPU, &err), 0);
    assert_non_null(strstr(err.msg, "cannot create"));
    assert_int_not_equal(pr_compare_write_report(path, dir, "parity", 30, rows, 2, PR_CPU, &err), 0);
    assert_non_null(strstr(err.msg, "cannot create"));
    rmdir(dir);
}

static const char *const tiny[] = {"d_model=8", "seq_len=16", "train.batch=4", "train.eval_batches=1"};

static void test_config(void **state)
{
    (void)state;
    pr_compare_setup s = {.task = "parity", .sets = tiny, .n_sets = 4, .steps = 3, .seed = 5};
    pr_config c;
    pr_train_opts o;
    pr_err err;
    assert_int_equal(pr_compare_config(&s, "gdn", &c, &o, &err), 0);
    assert_string_equal(c.mixer, "gdn");
    assert_int_equal(c.d_model, 8), assert_int_equal(o.batch, 4);
    assert_int_equal(o.steps, 3), assert_int_equal(o.seed, 5), assert_int_equal(c.seed, 5);
    s.data = "text.txt";   /* only lm reads a text file */
    assert_int_equal(pr_compare_config(&s, "gdn", &c, &o, &err), -1);
    assert_non_null(strstr(err.msg, "--data is the lm task's text file; task parity does not read it"));
}

static void test_run_rows(void **state)
{
    (void)state;
    char root[] = "/tmp/prism_test_compare_run_XXXXXX";
    assert_non_null(mkdtemp(root));
    pr_compare_setup s = {.task = "parity", .sets = tiny, .n_sets = 4, .steps = 2, .seed = 1};
    for (int again = 0; again < 2; again++) {   /* a second compare in the same folder replaces the runs */
        pr_compare_row row = {.name = "gdn"};
        pr_compare_run_row(&row, &s, root, PR_CPU);
        assert_true(row.ok);
        assert_string_equal(row.metric, "acc");
        assert_true(row.quality >= 0 && row.quality <= 1);
        assert_true(row.tokens_per_s > 0 && row.params > 0 && row.peak_mib > 0);
    }
    pr_compare_row bad = {.name = "sasrec"};   /* a rec model on a probe */
    pr_compare_run_row(&bad, &s, root, PR_CPU);
    assert_false(bad.ok);
    assert_int_equal(pr_test_remove_root(root), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quality),
        cmocka_unit_test(test_tables_and_report),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_run_rows),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
