/* tests/test_grid.c: experiment grids (lab/lab.h): a grid file read into
 * its axes, bad files refused with the key that is wrong, every built-in
 * grid valid and described from its axes, variants that would share a run
 * folder refused, slices of a grid, and the table's mean ± std against
 * values worked by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lab/lab.h"
#include "tests/pr_test.h"

static pr_grid grid;  /* large: kept off the stack */

static void test_good_file(void **state)
{
    (void)state;
    pr_err err;
    const char *json = "{\"name\":\"mine\",\"models\":[\"prism\",\"gdn\"],"
                       "\"variants\":[{\"name\":\"prism L=1\",\"set\":{\"mixer\":\"prism\",\"prism.L\":1,"
                       "\"prism.gelu\":false}}],\"tasks\":[\"parity\",\"local_xor\"],\"seeds\":3,\"steps\":40,"
                       "\"set\":{\"train.batch\":8,\"seq_len\":16}}";
    if (pr_grid_parse(&grid, json, "g.json", &err)) fail_msg("%s", err.msg);
    assert_string_equal(grid.name, "mine");
    assert_int_equal(grid.n_variants, 3);
    assert_string_equal(grid.variant[1].name, "gdn");
    assert_string_equal(grid.variant[1].set[0], "mixer=gdn");
    assert_string_equal(grid.variant[2].name, "prism L=1");
    assert_int_equal(grid.variant[2].n_sets, 3);
    assert_string_equal(grid.variant[2].set[1], "prism.L=1");
    assert_string_equal(grid.variant[2].set[2], "prism.gelu=false");
    assert_int_equal(grid.n_tasks, 2);
    assert_string_equal(grid.task[1], "local_xor");
    assert_int_equal(grid.seeds, 3);
    assert_int_equal(grid.steps, 40);
    assert_int_equal(grid.common.n_sets, 2);
    assert_string_equal(grid.common.set[0], "train.batch=8");
    /* rec.data and rec.negatives are training keys, as prism train reads them */
    if (pr_grid_parse(&grid, "{\"models\":[\"gdn\"],\"tasks\":[\"rec\"],\"set\":{\"rec.negatives\":8,"
                             "\"rec.data\":\"synthetic\",\"rec.n_items\":50}}", "rec.json", &err))
        fail_msg("%s", err.msg);
    assert_string_equal(grid.common.set[1], "rec.data=synthetic");
    /* a variant's preset, and probe.style as a training key */
    if (pr_grid_parse(&grid, "{\"variants\":[{\"name\":\"a\",\"preset\":\"probe-authors\",\"set\":{\"mixer\":"
                             "\"attn\",\"probe.style\":\"paper\"}}],\"tasks\":[\"mux\"]}", "p.json", &err))
        fail_msg("%s", err.msg);
    assert_string_equal(grid.variant[0].preset, "probe-authors");
    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    assert_int_equal(pr_grid_set(&c, &o, grid.variant[0].set[1], &err), 0);
    assert_string_equal(o.probe_style, "paper");
}

/* each bad grid fails with a message holding `needle` */
static void expect_bad(const char *json, const char *needle)
{
    pr_err err = {0};
    if (pr_grid_parse(&grid, json, "bad.json", &err) == 0) fail_msg("accepted: %s", json);
    if (!strstr(err.msg, needle) || !strstr(err.msg, "bad.json"))
        fail_msg("for %s\nthe message '%s' should name bad.json and hold '%s'", json, err.msg, needle);
}

static void test_bad_files(void **state)
{
    (void)state;
    expect_bad("{\"models\":[\"prism\"],", "malformed JSON");
    expect_bad("[1]", "a grid must be a JSON object");
    expect_bad("{\"models\":[\"prism\"],\"tasks\":[\"parity\"],\"seed\":2}", "unknown key 'seed'");
    expect_bad("{\"models\":[\"prism\",\"nosuch\"],\"tasks\":[\"parity\"]}", "'models[1]' is not a mixer");
    expect_bad("{\"models\":[\"prism\"],\"tasks\":[\"parity\",\"parrity\"]}", "'tasks[1]' is not a task");
    expect_bad("{\"models\":[\"prism\"],\"tasks\":[\"parity\"],\"seeds\":0}", "'seeds' must be an integer");
    expect_bad("{\"models\":[\"prism\"],\"tasks\":[\"parity\"],\"steps\":1.5}", "'steps' must be an integer");
    expect_bad("{\"models\":[\"prism\"],\"tasks\":[\"parity\"],\"set\":{\"train.lrr\":1}}", "train.lrr");
    expect_bad("{\"variants\":[{\"name\":\"a\",\"set\":{\"prism.Q\":1}}],\"tasks\":[\"parity\"]}", "prism.Q");
    expect_bad("{\"variants\":[{\"name\":\"a\",\"set\":{\"prism.L\":99}}],\"tasks\":[\"parity\"]}", "prism.L");
    expect_bad("{\"variants\":[{\"name\":\"a\",\"sett\":{}}],\"tasks\":[\"parity\"]}", "unknown key 'variants[0].sett'");
    expect_bad("{\"variants\":[{\"set\":{}}],\"tasks\":[\"parity\"]}", "'variants[0].name'");
    expect_bad("{\"variants\":[{\"name\":\"a\",\"set\":{\"prism.L\":[1]}}],\"tasks\":[\"parity\"]}",
               "'variants[0].set.prism.L' must be a number");
    expect_bad("{\"models\":[\"prism\",\"prism\"],\"tasks\":[\"parity\"]}", "'prism' is used twice");
    expect_bad("{\"models\":[\"prism\"],\"variants\":[{\"name\":\"Prism\"}],\"tasks\":[\"parity\"]}",
               "the variants 'prism' and 'Prism' would share the run folder 'prism'");
    expect_bad("{\"variants\":[{\"name\":\"prism L=1\"},{\"name\":\"prism-L-1\"}],\"tasks\":[\"parity\"]}",
               "the variants 'prism L=1' and 'prism-L-1' would share the run folder 'prism-L-1'");
    expect_bad("{\"variants\":[{\"name\":\"a\",\"ref\":1}],\"tasks\":[\"parity\"]}", "'variants[0].ref' must be a string");
    expect_bad("{\"variants\":[{\"name\":\"a\",\"preset\":\"huge\"}],\"tasks\":[\"parity\"]}",
               "'variants[0].preset' must name a preset");
    expect_bad("{\"variants\":[{\"name\":\"a\",\"set\":{\"probe.style\":\"both\"}}],\"tasks\":[\"parity\"]}",
               "train.probe.style: 'both' is not allowed");
    expect_bad("{\"tasks\":[\"parity\"]}", "no 'models' and no 'variants'");
    expect_bad("{\"models\":[\"gdn\"]}", "no 'tasks'");
}

static void test_builtins(void **state)
{
    (void)state;
    pr_err err;
    for (int i = 0; pr_grid_builtins[i]; i++) {
        if (pr_grid_load(&grid, pr_grid_builtins[i], &err)) fail_msg("%s: %s", pr_grid_builtins[i], err.msg);
        assert_string_equal(grid.name, pr_grid_builtins[i]);
    }
    assert_int_equal(pr_grid_load(&grid, "probe", &err), 0);
    assert_int_equal(grid.n_variants, 15);
    assert_int_equal(grid.n_tasks, 9);
    assert_int_equal(pr_grid_load(&grid, "prism-ablation", &err), 0);
    assert_int_equal(grid.n_variants, 7);
    assert_int_equal(pr_grid_load(&grid, "nosuch", &err), -1);
    assert_non_null(strstr(err.msg, "unknown grid 'nosuch'"));
    /* table4: six models in two probe styles, the paper's figure for every
     * task of every variant that names a row of its table */
    assert_int_equal(pr_grid_load(&grid, "table4", &err), 0);
    assert_int_equal(grid.n_variants, 12);
    assert_int_equal(grid.n_tasks, 9);
    assert_int_equal(grid.seeds, 3);
    int with_ref = 0;
    for (int v = 0; v < grid.n_variants; v++) {
        const pr_grid_variant *x = &grid.variant[v];
        bool authors = strstr(x->name, "authors-style") != NULL;
        assert_string_equal(x->preset, authors ? "probe-authors" : "probe");
        for (int t = 0; t < grid.n_tasks; t++)
            if (x->ref[0] && !isfinite(pr_grid_ref_value(&grid, v, t)))
                fail_msg("table4: %s has no paper figure for %s", x->name, grid.task[t]);
        with_ref += x->ref[0] != 0;
        if (authors && strncmp(x->name, "attn ", 5) == 0) assert_string_equal(x->set[1], "attn.shortconv=3");
        if (authors && strncmp(x->name, "linattn ", 8) == 0) assert_string_equal(x->set[1], "linattn.shortconv=5");
        if (strncmp(x->name, "linattn ", 8) == 0)   /* the authors' LA is elu+1; the paper style keeps fla's */
            assert_int_equal(x->n_sets, authors ? 3 : 1);
        if (authors && strncmp(x->name, "linattn ", 8) == 0) assert_string_equal(x->set[2], "linattn.feature_map=elu");
        if (authors && strncmp(x->name, "prism", 5) == 0) assert_string_equal(x->set[2], "prism.conv_width=5");
        if (!authors) assert_null(strstr(x->set[x->n_sets - 1], "shortconv"));
        if (!authors) assert_null(strstr(x->set[x->n_sets - 1], "conv_width"));
    }
    assert_int_equal(with_ref, 8);   /* Transformer, LA, MoM and PRISM in each style */
    assert_true(pr_grid_ref_value(&grid, 6, 6) == 0.99);   /* PRISM, palindrome */
    assert_string_equal(grid.variant[6].name, "prism paper-style");
    assert_string_equal(grid.task[6], "palindrome");
    assert_true(isnan(pr_grid_ref_value(&grid, 8, 0)));             /* gdn: not in the paper's table */
    assert_int_equal(pr_grid_load(&grid, "/nonexistent/g.json", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/g.json"));
}

/* --help describes each built-in grid from its parsed axes: the words follow the table */
static void test_descriptions(void **state)
{
    (void)state;
    pr_err err;
    char text[400];
    for (int i = 0; pr_grid_builtins[i]; i++) assert_non_null(pr_grid_purpose(pr_grid_builtins[i]));
    assert_null(pr_grid_purpose("nosuch"));
    assert_int_equal(pr_grid_load(&grid, "quick", &err), 0);
    pr_grid_describe(&grid, text, sizeof text);
    char want[400];
    snprintf(want, sizeof want, "models: %s, %s; tasks: %s; %d seeds, %lld steps", grid.variant[0].name,
             grid.variant[1].name, grid.task[0], grid.seeds, (long long)grid.steps);
    assert_int_equal(grid.n_variants, 2);
    assert_int_equal(grid.n_tasks, 1);
    assert_string_equal(text, want);
    assert_int_equal(pr_grid_load(&grid, "probe", &err), 0);
    pr_grid_describe(&grid, text, sizeof text);
    assert_string_equal(text, "models: prism, gdn, mamba2, ... (15 in all); tasks: mqar, poly_recall, var_tracking, "
                              "... (9 in all); 3 seeds, each task's default steps");
}

/* --only and --tasks: a slice in the grid's order; a name not in the grid is refused, naming those it has */
static void test_keep(void **state)
{
    (void)state;
    pr_err err;
    assert_int_equal(pr_grid_load(&grid, "prism-ablation", &err), 0);
    if (pr_grid_keep(&grid, "prism L=1,prism", "rec,parity", &err)) fail_msg("%s", err.msg);
    assert_int_equal(grid.n_variants, 2);
    assert_string_equal(grid.variant[0].name, "prism");
    assert_string_equal(grid.variant[1].name, "prism L=1");
    assert_string_equal(grid.variant[0].set[1], "prism.form=paper");
    assert_string_equal(grid.variant[1].set[2], "prism.L=1");
    assert_int_equal(grid.n_tasks, 2);
    assert_string_equal(grid.task[0], "parity");
    assert_string_equal(grid.task[1], "rec");
    /* table3: the same variants on rec alone, every one in form paper but the last */
    assert_int_equal(pr_grid_load(&grid, "table3", &err), 0);
    assert_int_equal(grid.n_variants, 7);
    assert_int_equal(grid.n_tasks, 1);
    assert_string_equal(grid.task[0], "rec");
    assert_int_equal(grid.seeds, 3);
    for (int v = 0; v < 6; v++) assert_string_equal(grid.variant[v].set[1], "prism.form=paper");
    assert_string_equal(grid.variant[5].set[2], "prism.L=0");
    assert_string_equal(grid.variant[6].set[1], "prism.form=augmented");
    /* the paper's Table 3 beside the variants it names, one figure per metric */
    assert_string_equal(grid.variant[1].ref, "no refinement");
    assert_true(pr_grid_ref_value(&grid, 0, 0) == .1409);   /* the table's metric: Hit@200 */
    assert_true(isnan(pr_grid_ref_value(&grid, 5, 0)));      /* L=0 is not in the paper's table */
    assert_int_equal(pr_grid_load(&grid, "probe", &err), 0);
    assert_int_equal(pr_grid_keep(&grid, NULL, "mux", &err), 0);
    assert_int_equal(grid.n_variants, 15);
    assert_int_equal(grid.n_tasks, 1);
    assert_int_equal(pr_grid_keep(&grid, "gdn,sasrec", NULL, &err), -1);
    assert_string_equal(err.msg, "--only: 'sasrec' is not a model or variant of grid probe (it has 'prism', 'gdn', "
                                 "'mamba2', 'deltanet', 'linattn', 'ttt_linear', 'ttt_mlp', 'titans', 'attn', "
                                 "'mamba', 'mom', 'hstu', 'gla', 'gsa', 'atlas')");
    assert_int_equal(pr_grid_keep(&grid, NULL, "mux,", &err), -1);
    assert_string_equal(err.msg, "--tasks: '' is not a task of grid probe (it has 'mux')");
    /* a model's name alone keeps every variant it begins as a word: table4's two styles of gdn and
     * of prism, not prism-augmented's */
    assert_int_equal(pr_grid_load(&grid, "table4", &err), 0);
    if (pr_grid_keep(&grid, "gdn,prism", NULL, &err)) fail_msg("%s", err.msg);
    assert_int_equal(grid.n_variants, 4);
    assert_string_equal(grid.variant[0].name, "prism paper-style");
    assert_string_equal(grid.variant[1].name, "prism authors-style");
    assert_string_equal(grid.variant[2].name, "gdn paper-style");
    assert_string_equal(grid.variant[3].name, "gdn authors-style");
    assert_int_equal(pr_grid_keep(&grid, "gd", NULL, &err), -1);
}

static void test_stats(void **state)
{
    (void)state;
    double mean, std;
    /* 1..4: mean 2.5, squared deviations 2.25+0.25+0.25+2.25 = 5, sample variance 5/3 */
    assert_int_equal(pr_grid_stats((double[]){1, 2, 3, 4}, 4, &mean, &std), 4);
    assert_true(fabs(mean - 2.5) < 1e-15 && fabs(std - sqrt(5.0 / 3.0)) < 1e-15);
    /* a failed seed (NAN) is left out: 0.5 and 1 give mean 0.75, std sqrt(0.125) */
    assert_int_equal(pr_grid_stats((double[]){0.5, NAN, 1}, 3, &mean, &std), 2);
    assert_true(fabs(mean - 0.75) < 1e-15 && fabs(std - sqrt(0.125)) < 1e-15);
    assert_int_equal(pr_grid_stats((double[]){0.9}, 1, &mean, &std), 1);
    assert_true(mean == 0.9 && std == 0);
    assert_int_equal(pr_grid_stats((double[]){NAN}, 1, &mean, &std), 0);
}

/* the three files of a 2 x 2 grid with 3 seeds */
static void test_tables(void **state)
{
    (void)state;
    pr_err err;
    assert_int_equal(pr_grid_parse(&grid, "{\"name\":\"t\",\"models\":[\"prism\",\"gdn\"],"
                                          "\"tasks\":[\"parity\",\"lm\"],\"seeds\":3}", "t", &err), 0);
    /* prism parity: 0.8, 0.9, 1.0 -> 0.900 ± 0.100; prism lm: 2, 2, 2 -> 2.000 ± 0.000;
     * gdn parity: 0.5, 0.6, failed -> 0.550 ± 0.071 (2 of 3); gdn lm: none */
    double v[12] = {0.8, 0.9, 1.0, 2, 2, 2, 0.5, 0.6, NAN, NAN, NAN, NAN};
    pr_grid_results r = {.g = &grid, .metric = {"acc", "bpb"}, .value = v, .precision_cells = {[PR_PREC_TF32] = 4,
                                                                                             [PR_PREC_BF16] = 1}};
    char buf[4096];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    pr_grid_write_markdown(&r, f);
    fclose(f);
    assert_non_null(strstr(buf, "| model | parity (acc) | lm (bpb) |"));
    assert_non_null(strstr(buf, "\nPrecision: tf32 (4 cells), bf16 (1 cell).\n"));   /* what the cells trained in */
    assert_non_null(strstr(buf, "| prism | 0.900 ± 0.100 | 2.000 ± 0.000 |"));
    assert_non_null(strstr(buf, "| gdn | 0.550 ± 0.071 (2 of 3 seeds) | - |"));
    f = fmemopen(buf, sizeof buf, "w");
    pr_grid_write_csv(&r, f);
    fclose(f);
    assert_non_null(strstr(buf, "model,task,metric,mean,std,n,seed1,seed2,seed3\n"));
    assert_non_null(strstr(buf, "prism,parity,acc,0.9,0.1,3,0.8,0.9,1\n"));
    assert_non_null(strstr(buf, "gdn,lm,bpb,,,0,,,\n"));
    f = fmemopen(buf, sizeof buf, "w");
    pr_grid_write_json(&r, f);
    fclose(f);
    assert_non_null(strstr(buf, "\"mean\":\t0.55"));
    assert_non_null(strstr(buf, "\"values\":\t[0.5, 0.6, null]"));
    assert_non_null(strstr(buf, "\"tf32\":\t4"));
    assert_null(strstr(buf, "\"f32\""));
    assert_null(strstr(buf, "reference"));
}

/* a grid with reference figures: each beside ours where the metric is theirs */
static void test_reference_column(void **state)
{
    (void)state;
    pr_err err;
    static const pr_grid_ref values[] = {{"T", "parity", 0.25, NULL}, {"T", "mux", 0.5, NULL}};
    assert_int_equal(pr_grid_parse(&grid, "{\"variants\":[{\"name\":\"a\",\"ref\":\"T\",\"set\":{\"mixer\":"
                                          "\"attn\"}},{\"name\":\"b\"}],\"tasks\":[\"parity\",\"lm\"]}", "r", &err),
                     0);
    grid.refs = (pr_grid_refs){"paper", "a test table", "acc", 2, values};
    double v[4] = {0.5, 2, NAN, 3};
    pr_grid_results r = {.g = &grid, .metric = {"acc", "bpb"}, .value = v};
    char buf[4096];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    pr_grid_write_markdown(&r, f);
    fclose(f);
    assert_non_null(strstr(buf, "| a | 0.500 (paper 0.25) | 2.000 |"));   /* one seed: no spread shown */
    assert_non_null(strstr(buf, "| b | - | 3.000 |"));
    char cell[64];
    pr_grid_cell_text((double[]){NAN, 0.25, NAN}, 3, cell, sizeof cell);
    assert_string_equal(cell, "0.250 (1 of 3 seeds)");
    pr_grid_cell_text((double[]){NAN, NAN}, 2, cell, sizeof cell);
    assert_string_equal(cell, "-");
    assert_non_null(strstr(buf, "(paper x.xx): a test table."));
    f = fmemopen(buf, sizeof buf, "w");
    pr_grid_write_csv(&r, f);
    fclose(f);
    assert_non_null(strstr(buf, "model,task,metric,mean,std,n,seed1,paper\n"));
    assert_non_null(strstr(buf, "a,parity,acc,0.5,0,1,0.5,0.25\n"));
    assert_non_null(strstr(buf, "a,lm,bpb,2,0,1,2,\n"));
    f = fmemopen(buf, sizeof buf, "w");
    pr_grid_write_json(&r, f);
    fclose(f);
    assert_non_null(strstr(buf, "\"reference\":\t0.25"));
    assert_non_null(strstr(buf, "\"source\":\t\"a test table\""));
    /* another metric tabulated (--metric loss): no figure beside it */
    r.metric[0] = "loss";
    f = fmemopen(buf, sizeof buf, "w");
    pr_grid_write_markdown(&r, f);
    fclose(f);
    assert_null(strstr(buf, "paper"));
}

/* the files a grid's results become, written without the command, and the
 * cell folders the page reads */
static void test_outputs(void **state)
{
    (void)state;
    pr_err err;
    char dir[] = "/tmp/prism_test_grid_XXXXXX", path[256], cell[256];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(pr_grid_parse(&grid, "{\"name\":\"t\",\"models\":[\"prism\",\"gdn\"],"
                                          "\"tasks\":[\"parity\",\"lm\"],\"seeds\":3}", "t", &err), 0);
    double v[12] = {0.8, 0.9, 1.0, 2, 2, 2, 0.5, 0.6, NAN, NAN, NAN, NAN};
    pr_grid_results r = {.g = &grid, .metric = {"acc", "bpb"}, .value = v};
    assert_int_equal(pr_grid_write_outputs(&r, dir, "results"), 0);
    const char *names[] = {"results.md", "results.csv", "results.json", "results.svg", "report.html"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char buf[8192] = {0};
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        assert_true(got > 0);
        if (i == 4) assert_non_null(strstr(buf, "0.900 ± 0.100")), assert_non_null(strstr(buf, "<svg"));
        unlink(path);
    }
    assert_int_equal(rmdir(dir), 0);
    /* a folder that is not there: an error, not a silent pass */
    assert_int_equal(pr_grid_write_outputs(&r, "/nonexistent/prism", "results"), -1);
    pr_grid_cell_dir(cell, sizeof cell, "R", "prism-L1", "parity", 2);
    assert_string_equal(cell, "R/prism-L1/parity/s2");
    pr_grid_cell_dir(cell, sizeof cell, "R", "a b/c", "lm", 1);
    assert_string_equal(cell, "R/a-b-c/lm/s1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_file), cmocka_unit_test(test_bad_files), cmocka_unit_test(test_builtins),
        cmocka_unit_test(test_descriptions), cmocka_unit_test(test_keep), cmocka_unit_test(test_stats),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_reference_column), cmocka_unit_test(test_outputs),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
