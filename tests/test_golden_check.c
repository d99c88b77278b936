/* tests/test_golden_check.c: golden-check (lab/golden_check.c, without the
 * command) cannot pass a file that checks nothing (issue 8, item 8). A
 * small reference file made as `golden-check --make` makes it passes; copies of it written with the project's
 * safetensors writer, each broken one way, must fail naming the problem:
 * a rule with inputs but no outputs or gradients, one missing gradient, a
 * missing upstream gradient, a tensor of the wrong dtype. */
#include <stdio.h>
#include <unistd.h>

#include "lab/lab.h"
#include "ops/recurrence/recurrence.h"
#include "tests/pr_test.h"

static char g_dir[64];

/* golden-check of FILE on the CPU in f64, both forms; returns its exit status, its lines in out */
static int golden_check(const char *file, char *out, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    pr_golden_opts o = {.dev = PR_CPU, .dt = PR_F64, .forms = 3, .chunk = 64};
    const int rc = pr_golden_check_file(f, file, &o);
    fclose(f);
    snprintf(out, n, "%s", text);
    free(text);
    return rc;
}

/* drop: tensors left out (by full name); as_f32: one tensor converted to f32 */
static void write_variant(const pr_safetensors *st, const char *path, const char *const *drop, int n_drop,
                          const char *as_f32, pr_arena *a)
{
    const char **names = malloc(sizeof *names * (size_t)st->n);
    const pr_tensor **ts = malloc(sizeof *ts * (size_t)st->n);
    int n = 0;
    for (int i = 0; i < st->n; i++) {
        bool skip = false;
        for (int j = 0; j < n_drop; j++) skip |= !strcmp(st->names[i], drop[j]);
        if (skip) continue;
        names[n] = st->names[i];
        ts[n++] = as_f32 && !strcmp(st->names[i], as_f32) ? pr_to(a, st->tensors[i], PR_F32, PR_CPU) : st->tensors[i];
    }
    pr_err err;
    if (pr_safetensors_write(path, n, names, ts, 0, NULL, NULL, &err) != 0) fail_msg("%s", err.msg);
    free(names);
    free(ts);
}

static void expect_fail(const char *path, const char *line_start, const char *needle)
{
    char out[8192];
    const int rc = golden_check(path, out, sizeof out);
    if (rc != 1 || !strstr(out, line_start) || !strstr(out, needle))
        fail_msg("golden-check %s: exit %d, expected 1 with \"%s\" and \"%s\"; output:\n%s", path, rc, line_start,
                 needle, out);
}

static void test_broken_files_fail(void **state)
{
    (void)state;
    char ref[128], bad[128], out[8192];
    snprintf(ref, sizeof ref, "%s/ref.safetensors", g_dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", g_dir);
    FILE *quiet = fopen("/dev/null", "w");
    assert_int_equal(pr_golden_make_reference(quiet, ref, (int64_t[]){1, 9, 2, 4, 3, 2}), 0);
    fclose(quiet);
    assert_int_equal(golden_check(ref, out, sizeof out), 0);   /* the whole file passes */

    pr_arena *a = pr_arena_new("golden-test", 0);
    pr_safetensors st;
    pr_err err;
    if (pr_safetensors_read(ref, a, &st, &err) != 0) fail_msg("%s", err.msg);

    /* linattn with its inputs and upstream gradients only: nothing to compare */
    const char *no_refs[] = {"linattn.o", "linattn.ht", "linattn.dq", "linattn.dk", "linattn.dv", "linattn.dh0"};
    write_variant(&st, bad, no_refs, 6, NULL, a);
    expect_fail(bad, "linattn FAIL", "linattn.o is missing");
    /* one gradient missing: every rule's d<x> of an input it takes */
    for (int r = 0; r < PR_NRULES; r++)
        for (int i = 0; i < PR_REC_NIN; i++) {
            if (!pr_rule_takes((pr_rule)r, (pr_rec_input)i)) continue;
            char dn[64], line[64];
            snprintf(dn, sizeof dn, "%s.d%s", pr_rule_name((pr_rule)r), pr_rule_input_name((pr_rule)r, (pr_rec_input)i));
            snprintf(line, sizeof line, "%s FAIL", pr_rule_name((pr_rule)r));
            const char *drop[] = {dn};
            write_variant(&st, bad, drop, 1, NULL, a);
            expect_fail(bad, line, dn);
        }
    /* an upstream gradient missing */
    const char *no_dht[] = {"gdn.dht"};
    write_variant(&st, bad, no_dht, 1, NULL, a);
    expect_fail(bad, "gdn FAIL", "gdn.dht is missing");
    /* Issue 45: every linattn tensor empty (batch 0) passed with nothing compared */
    {
        const char **names = malloc(sizeof *names * (size_t)st.n);
        const pr_tensor **ts = malloc(sizeof *ts * (size_t)st.n);
        int n = 0;
        for (int i = 0; i < st.n; i++) {
            if (strncmp(st.names[i], "linattn.", 8) != 0) continue;
            const pr_tensor *t = st.tensors[i];
            int64_t shape[PR_MAX_DIMS];
            memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            if (strcmp(st.names[i], "linattn.scale") != 0) shape[0] = 0;
            names[n] = st.names[i];
            ts[n++] = pr_zeros(a, PR_F64, PR_CPU, t->ndim, shape);
        }
        if (pr_safetensors_write(bad, n, names, ts, 0, NULL, NULL, &err) != 0) fail_msg("%s", err.msg);
        free(names);
        free(ts);
        expect_fail(bad, "linattn FAIL", "nothing compared: every reference tensor of linattn is empty");
    }
    /* a tensor stored as f32 */
    write_variant(&st, bad, NULL, 0, "ssd.k", a);
    expect_fail(bad, "ssd FAIL", "ssd.k has dtype f32; golden files store float64");
    pr_arena_free(a);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/prism_golden_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_broken_files_fail)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
