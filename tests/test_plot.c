/* tests/test_plot.c: the SVG plots (tools/plot.h). Nice ticks on linear and
 * log axes, and the documents themselves (line plots, bar charts): read back
 * with a small XML checker (balanced tags, quoted attributes, escaped text),
 * the tick labels, legend entries and bars found where they belong. */
#include "tests/pr_test.h"
#include "tools/plot.h"

static void assert_ticks(const double *got, int n, const double *want, int n_want)
{
    if (n != n_want) fail_msg("got %d ticks, expected %d (first %g)", n, n_want, got[0]);
    pr_assert_allclose("ticks", got, want, n, 1e-12, 1e-12);
}

static void test_linear_ticks(void **state)
{
    (void)state;
    double t[PR_PLOT_MAX_TICKS], lo, hi;
    assert_ticks(t, pr_plot_ticks(0.3, 9.2, false, t, &lo, &hi), (double[]){0, 2, 4, 6, 8, 10}, 6);
    assert_true(lo == 0 && hi == 10);
    assert_ticks(t, pr_plot_ticks(-0.013, 0.041, false, t, &lo, &hi),
                 (double[]){-0.02, -0.01, 0, 0.01, 0.02, 0.03, 0.04, 0.05}, 8);
    assert_ticks(t, pr_plot_ticks(1000, 16000, false, t, &lo, &hi), (double[]){0, 5000, 10000, 15000, 20000}, 5);
    /* one value: a window around it rather than a zero-width axis */
    int n = pr_plot_ticks(3, 3, false, t, &lo, &hi);
    assert_true(n >= 2 && lo < 3 && hi > 3);
}

static void test_log_ticks(void **state)
{
    (void)state;
    double t[PR_PLOT_MAX_TICKS], lo, hi;
    assert_ticks(t, pr_plot_ticks(0.003, 42, true, t, &lo, &hi), (double[]){1e-3, 1e-2, 1e-1, 1, 10, 100}, 6);
    assert_ticks(t, pr_plot_ticks(1, 100, true, t, &lo, &hi), (double[]){1, 10, 100}, 3);
    assert_ticks(t, pr_plot_ticks(5, 5, true, t, &lo, &hi), (double[]){1, 10}, 2);
    /* twenty decades: every third power of ten, still spanning the data */
    int n = pr_plot_ticks(1e-12, 1e8, true, t, &lo, &hi);
    assert_true(n <= 9 && lo <= 1e-12 && hi >= 1e8);
    for (int i = 1; i < n; i++) assert_true(fabs(log10(t[i] / t[i - 1]) - 3) < 1e-9);
}

/* ---- a checker for the XML the plots use: elements, quoted attributes,
 * text with entities; records each <text>'s content and its group's class */
typedef struct {
    int n;
    char group[64][16], text[64][48];
} texts;

static const char *parse_tag(const char *s, char *name, char *cls)
{
    int n = 0;
    while (*s && !strchr(" />", *s)) name[n++] = *s++;
    name[n] = 0;
    cls[0] = 0;
    while (*s == ' ') {
        while (*s == ' ') s++;
        const char *attr = s;
        while (*s && *s != '=' && *s != '>' && *s != '/') s++;
        if (*s != '=') break;
        assert_true(s[1] == '"');                   /* every value quoted */
        const char *end = strchr(s + 2, '"');
        assert_non_null(end);
        for (const char *c = s + 2; c < end; c++) assert_true(*c != '<');
        if (strncmp(attr, "class=", 6) == 0) snprintf(cls, 16, "%.*s", (int)(end - s - 2), s + 2);
        s = end + 1;
    }
    return s;
}

static void check_xml(const char *doc, texts *out)
{
    char stack[32][16], classes[32][16];
    int depth = 0;
    out->n = 0;
    const char *s = doc;
    assert_true(strncmp(s, "<?xml", 5) == 0);
    s = strstr(s, "?>") + 2;
    while (*s) {
        if (*s != '<') {   /* text: entities only, no raw specials */
            const char *end = strchr(s, '<');
            if (!end) end = s + strlen(s);
            for (const char *c = s; c < end; c++)
                if (*c == '&') assert_true(strncmp(c, "&amp;", 5) == 0 || strncmp(c, "&lt;", 4) == 0 ||
                                           strncmp(c, "&gt;", 4) == 0 || strncmp(c, "&quot;", 6) == 0 ||
                                           strncmp(c, "&apos;", 6) == 0);
            if (depth > 0 && strcmp(stack[depth - 1], "text") == 0 && out->n < 64) {
                snprintf(out->text[out->n], 48, "%.*s", (int)(end - s), s);
                snprintf(out->group[out->n++], 16, "%s", depth > 1 ? classes[depth - 2] : "");
            }
            s = end;
            continue;
        }
        char name[16], cls[16];
        if (s[1] == '/') {
            s = parse_tag(s + 2, name, cls);
            assert_true(depth > 0);
            assert_string_equal(name, stack[--depth]);   /* closes the open element */
        } else {
            s = parse_tag(s + 1, name, cls);
            if (*s == '/') {
                s++;
            } else {
                assert_true(depth < 32);
                if (depth == 0) assert_string_equal(name, "svg");
                strcpy(stack[depth], name);
                strcpy(classes[depth++], cls);
            }
        }
        assert_true(*s == '>');
        s++;
    }
    assert_int_equal(depth, 0);
}

static bool has_text(const texts *t, const char *group, const char *text)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->group[i], group) == 0 && strcmp(t->text[i], text) == 0) return true;
    return false;
}

/* what was written to the temporary file f, as a string; closes f */
static char *read_back(FILE *f)
{
    long len = ftell(f);
    char *doc = calloc((size_t)len + 1, 1);
    rewind(f);
    assert_int_equal(fread(doc, 1, (size_t)len, f), len);
    fclose(f);
    return doc;
}

static int count(const char *doc, const char *what)
{
    int n = 0;
    for (const char *s = doc; (s = strstr(s, what)); s++) n++;
    return n;
}

static char *write_doc(const pr_plot *p)
{
    FILE *f = tmpfile();
    pr_err err;
    if (pr_plot_write(p, f, &err)) fail_msg("%s", err.msg);
    return read_back(f);
}

static void test_svg_document(void **state)
{
    (void)state;
    double x[5] = {1, 2, 3, 4, 5}, a[5] = {0.5, 0.05, 0.002, NAN, 3e-4}, b[5] = {2, 1, 0.1, 0.01, -1};
    pr_plot p = {.title = "norms <by> step & layer", .xlabel = "step", .ylabel = "|grad|", .ylog = true};
    pr_plot_add(&p, "layers.0.mixer.q_proj", 5, x, a);
    pr_plot_add(&p, "w_k & w_p", 5, x, b);
    char *doc = write_doc(&p);
    texts t;
    check_xml(doc, &t);
    const char *yt[] = {"0.0001", "0.001", "0.01", "0.1", "1", "10"};
    for (int i = 0; i < 6; i++)
        if (!has_text(&t, "yticks", yt[i])) fail_msg("no y tick '%s'", yt[i]);
    for (int i = 1; i <= 5; i++) {
        char lab[8];
        snprintf(lab, sizeof lab, "%d", i);
        if (!has_text(&t, "xticks", lab)) fail_msg("no x tick '%s'", lab);
    }
    assert_true(has_text(&t, "legend", "layers.0.mixer.q_proj"));
    assert_true(has_text(&t, "legend", "w_k &amp; w_p"));
    assert_true(has_text(&t, "", "norms &lt;by&gt; step &amp; layer"));
    /* the NaN in a, and the -1 of b on a log axis, each break a line: 2 + 1 polylines */
    assert_int_equal(count(doc, "<polyline"), 3);
    free(doc);
}

static void test_nothing_to_draw(void **state)
{
    (void)state;
    double x[2] = {1, 2}, y[2] = {0, -1};
    pr_plot p = {.title = "empty", .ylog = true};
    pr_plot_add(&p, "s", 2, x, y);
    pr_err err;
    FILE *f = fopen("/dev/null", "w");
    assert_int_equal(pr_plot_write(&p, f, &err), -1);
    fclose(f);
    assert_non_null(strstr(err.msg, "plot 'empty': no point to draw"));
    assert_int_equal(pr_plot_save(&p, "/nonexistent/dir/p.svg", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/p.svg"));
}

static char *write_bars_doc(const pr_bars *b)
{
    FILE *f = tmpfile();
    pr_err err;
    if (pr_bars_write(b, f, &err)) fail_msg("%s", err.msg);
    return read_back(f);
}

/* 3 variants x 3 tasks, two units; [variant * 3 + task] */
static pr_bars three_by_three(double *mean, double *spread)
{
    static const double m[9] = {0.9, 0.5, 2.5, 0.8, NAN, 3.1, 0.1, 0.45, 2.0};
    static const double e[9] = {0.3, 0.0, 0.2, 0.05, 0.1, NAN, 0.02, 0.01, 0.4};
    memcpy(mean, m, sizeof m), memcpy(spread, e, sizeof e);
    return (pr_bars){.title = "grid <g> & \"co\"", .n_groups = 3, .n_series = 3,
                     .group = {"parity", "mux", "lm"}, .unit = {"acc", "acc", "bpb"}, .unit_max = {1, 1, 0},
                     .series = {"prism L=0", "a<b & c", "gdn \"x\""}, .mean = mean, .spread = spread};
}

static void test_bar_chart(void **state)
{
    (void)state;
    double mean[9], spread[9];
    pr_bars b = three_by_three(mean, spread);
    char *doc = write_bars_doc(&b);
    texts t;
    check_xml(doc, &t);
    /* a bar per finite mean (8 of 9); an error bar where the spread is > 0 and finite (6 of them) */
    assert_int_equal(count(doc, "class=\"bar\""), 8);
    assert_int_equal(count(doc, "class=\"err\""), 6);
    assert_null(strstr(doc, "<title>a&lt;b &amp; c, mux"));   /* the missing cell */
    assert_non_null(strstr(doc, "<title>a&lt;b &amp; c, parity: 0.8 ± 0.05</title>"));
    /* acc and bpb never share an axis: two panels, each with its y label */
    assert_int_equal(count(doc, "class=\"yticks\""), 2);
    assert_true(has_text(&t, "", "acc") && has_text(&t, "", "bpb"));
    assert_true(has_text(&t, "xticks", "parity") && has_text(&t, "xticks", "(acc)") && has_text(&t, "xticks", "(bpb)"));
    /* acc stops at its bound 1 though 0.9 + 0.3 passes it; bpb reaches past 3.1 */
    assert_true(has_text(&t, "yticks", "1") && !has_text(&t, "yticks", "1.2"));
    assert_true(has_text(&t, "yticks", "3.5") || has_text(&t, "yticks", "4"));
    assert_true(has_text(&t, "legend", "prism L=0"));
    assert_true(has_text(&t, "legend", "a&lt;b &amp; c"));
    assert_true(has_text(&t, "legend", "gdn &quot;x&quot;"));
    assert_true(has_text(&t, "", "grid &lt;g&gt; &amp; &quot;co&quot;"));
    free(doc);
    /* every series past the ten hues keeps a look of its own */
    assert_non_null(strstr(doc = write_bars_doc(&(pr_bars){.n_groups = 1, .n_series = 11, .mean = (double[11]){
                                                               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}),
                           "fill=\"#1f77b4\" fill-opacity=\"0.45\""));
    free(doc);
}

static void test_bars_nothing_to_draw(void **state)
{
    (void)state;
    double mean[9], spread[9];
    pr_bars b = three_by_three(mean, spread);
    for (int i = 0; i < 9; i++) mean[i] = NAN;
    pr_err err;
    FILE *f = fopen("/dev/null", "w");
    assert_int_equal(pr_bars_write(&b, f, &err), -1);
    assert_non_null(strstr(err.msg, "no bar to draw"));
    b.n_series = 0;
    assert_int_equal(pr_bars_write(&b, f, &err), -1);
    assert_non_null(strstr(err.msg, "0 series"));
    fclose(f);
    b = three_by_three(mean, spread);
    assert_int_equal(pr_bars_save(&b, "/nonexistent/dir/b.svg", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/b.svg"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_ticks),
        cmocka_unit_test(test_log_ticks),
        cmocka_unit_test(test_svg_document),
        cmocka_unit_test(test_nothing_to_draw),
        cmocka_unit_test(test_bar_chart),
        cmocka_unit_test(test_bars_nothing_to_draw),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
