/* tests/test_plot.c: the SVG plots (lab/lab.h). Nice ticks on linear and
 * log axes, and the documents themselves (line plots, bar charts): read back
 * with a small XML checker (balanced tags, quoted attributes, escaped text),
 * the tick labels, legend entries and bars found where they belong; runs
 * read from their metrics.jsonl drawn in one plot as `prism plot` draws
 * them (named less their shared folders, log scale where they span
 * decades, a run without the metric left out). */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/lab.h"
#include "tests/pr_test.h"

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
 * text with entities; records each <text>'s content, place and size and its
 * group's class, and the picture's size */
typedef struct {
    char cls[16], anchor[8];
    double x, y, font;   /* NAN where the element does not say */
    bool turned;         /* a transform (the y axis label, turned upright) */
} tag_attrs;

typedef struct {
    int n;
    char group[256][16], text[256][96];
    double x[256], y[256], font[256];
    char anchor[256][8];
    bool turned[256];
    double width, height;
} texts;

static const char *parse_tag(const char *s, char *name, tag_attrs *at)
{
    int n = 0;
    while (*s && !strchr(" />", *s)) name[n++] = *s++;
    name[n] = 0;
    *at = (tag_attrs){.x = NAN, .y = NAN, .font = NAN};
    while (*s == ' ') {
        while (*s == ' ') s++;
        const char *attr = s;
        while (*s && *s != '=' && *s != '>' && *s != '/') s++;
        if (*s != '=') break;
        assert_true(s[1] == '"');                   /* every value quoted */
        const char *end = strchr(s + 2, '"');
        assert_non_null(end);
        for (const char *c = s + 2; c < end; c++) assert_true(*c != '<');
        int len = (int)(s - attr);
        if (len == 5 && strncmp(attr, "class", 5) == 0) snprintf(at->cls, 16, "%.*s", (int)(end - s - 2), s + 2);
        if (len == 11 && strncmp(attr, "text-anchor", 11) == 0) snprintf(at->anchor, 8, "%.*s", (int)(end - s - 2), s + 2);
        if ((len == 1 && *attr == 'x') || (len == 5 && strncmp(attr, "width", 5) == 0)) at->x = atof(s + 2);
        if ((len == 1 && *attr == 'y') || (len == 6 && strncmp(attr, "height", 6) == 0)) at->y = atof(s + 2);
        if (len == 9 && strncmp(attr, "font-size", 9) == 0) at->font = atof(s + 2);
        if (len == 9 && strncmp(attr, "transform", 9) == 0) at->turned = true;
        s = end + 1;
    }
    return s;
}

static void check_xml(const char *doc, texts *out)
{
    char stack[32][16];
    tag_attrs attrs[32];
    int depth = 0;
    memset(out, 0, sizeof *out);
    const char *s = doc;
    if (strncmp(s, "<?xml", 5) == 0) s = strstr(s, "?>") + 2;
    while (*s == '\n') s++;
    assert_true(strncmp(s, "<svg", 4) == 0);
    while (*s) {
        if (*s != '<') {   /* text: entities only, no raw specials */
            const char *end = strchr(s, '<');
            if (!end) end = s + strlen(s);
            for (const char *c = s; c < end; c++)
                if (*c == '&') assert_true(strncmp(c, "&amp;", 5) == 0 || strncmp(c, "&lt;", 4) == 0 ||
                                           strncmp(c, "&gt;", 4) == 0 || strncmp(c, "&quot;", 6) == 0 ||
                                           strncmp(c, "&apos;", 6) == 0);
            if (depth > 0 && strcmp(stack[depth - 1], "text") == 0 && out->n < 256) {
                const tag_attrs *t = &attrs[depth - 1], *g = depth > 1 ? &attrs[depth - 2] : NULL;
                int i = out->n++;
                snprintf(out->text[i], 96, "%.*s", (int)(end - s), s);
                snprintf(out->group[i], 16, "%s", g ? g->cls : "");
                snprintf(out->anchor[i], 8, "%s", t->anchor);
                out->x[i] = t->x, out->y[i] = t->y, out->turned[i] = t->turned;
                out->font[i] = isfinite(t->font) ? t->font : g && isfinite(g->font) ? g->font : 16;
            }
            s = end;
            continue;
        }
        char name[16];
        tag_attrs at;
        if (s[1] == '/') {
            s = parse_tag(s + 2, name, &at);
            assert_true(depth > 0);
            assert_string_equal(name, stack[--depth]);   /* closes the open element */
        } else {
            s = parse_tag(s + 1, name, &at);
            if (depth == 0) {
                assert_string_equal(name, "svg");
                out->width = at.x, out->height = at.y;
            }
            if (*s == '/') {
                s++;
            } else {
                assert_true(depth < 32);
                strcpy(stack[depth], name);
                attrs[depth++] = at;
            }
        }
        assert_true(*s == '>');
        s++;
    }
    assert_int_equal(depth, 0);
}

/* XML text back to what it shows, for measuring */
static void unescape(const char *in, char *out, size_t n)
{
    static const char *const ent[][2] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}};
    size_t k = 0;
    while (*in && k + 1 < n) {
        int e = 0;
        while (e < 5 && strncmp(in, ent[e][0], strlen(ent[e][0])) != 0) e++;
        if (e < 5) out[k++] = ent[e][1][0], in += strlen(ent[e][0]);
        else out[k++] = *in++;
    }
    out[k] = 0;
}

/* every label inside the picture, measured as the writer measures text: no
 * title, tick label or legend entry runs past an edge */
static void assert_nothing_clipped(const texts *t)
{
    assert_true(t->width > 0 && t->height > 0);
    for (int i = 0; i < t->n; i++) {
        char shown[96];
        unescape(t->text[i], shown, sizeof shown);
        double w = pr_plot_text_width(shown, t->font[i]), x0 = t->x[i];
        if (strcmp(t->anchor[i], "middle") == 0) x0 -= w / 2;
        else if (strcmp(t->anchor[i], "end") == 0) x0 -= w;
        if (!isfinite(x0)) fail_msg("text '%s' has no x", shown);
        if (t->turned[i]) {   /* upright, centred on y: it runs from y - w/2 to y + w/2 */
            if (t->x[i] - t->font[i] < 0 || t->y[i] - w / 2 < 0 || t->y[i] + w / 2 > t->height)
                fail_msg("upright text '%s' at (%.1f, %.1f) is cut off", shown, t->x[i], t->y[i]);
            continue;
        }
        if (x0 < 0 || x0 + w > t->width)
            fail_msg("text '%s' spans x %.1f..%.1f, outside the picture's 0..%g", shown, x0, x0 + w, t->width);
        if (t->y[i] - t->font[i] < 0 || t->y[i] > t->height)
            fail_msg("text '%s' at y %.1f, outside the picture's 0..%g", shown, t->y[i], t->height);
    }
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
    pr_plot_free(&p);
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
    pr_plot_free(&p);
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
                           "fill=\"#1f77b4\" fill-opacity=\"0.55\""));
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

/* an SVG written to a string */
static void assert_no_clipping_in(const pr_plot *p)
{
    char *doc = write_doc(p);
    texts t;
    check_xml(doc, &t);
    assert_nothing_clipped(&t);
    free(doc);
}

/* 40 series: every one has a colour and dash pair of its own, in the document too */
static void test_forty_series_never_share_a_look(void **state)
{
    (void)state;
    enum { N = 40 };
    double x[3] = {1, 2, 3}, y[N][3];
    char names[N][16];
    pr_plot p = {.title = "forty", .xint = true};
    for (int k = 0; k < N; k++) {
        for (int i = 0; i < 3; i++) y[k][i] = k + i;
        snprintf(names[k], sizeof names[k], "run %d", k);
        assert_true(pr_plot_add(&p, names[k], 3, x, y[k]));
    }
    char *doc = write_doc(&p);
    char seen[N][64];
    int n = 0;
    for (const char *at = doc; (at = strstr(at, "<g class=\"series\" stroke=\"")); at++) {
        assert_true(n < N);
        const char *v = at + strlen("<g class=\"series\" stroke=\"");
        snprintf(seen[n], sizeof seen[n], "%.*s", (int)(strstr(v, " fill=") - v), v);
        for (int j = 0; j < n; j++)
            if (strcmp(seen[j], seen[n]) == 0) fail_msg("series %d and %d share '%s'", j, n, seen[n]);
        n++;
    }
    assert_int_equal(n, N);
    texts t;
    check_xml(doc, &t);
    assert_nothing_clipped(&t);
    for (int k = 0; k < N; k++) assert_true(has_text(&t, "legend", names[k]));
    free(doc);
    pr_plot_free(&p);
    /* and far past any fixed list of patterns */
    for (int k = 0; k < 1000; k++)
        for (int j = k + 1; j < 1000; j += 37) {
            const char *ck, *cj;
            char dk[32], dj[32];
            pr_plot_style(k, &ck, dk, sizeof dk);
            pr_plot_style(j, &cj, dj, sizeof dj);
            if (strcmp(ck, cj) == 0 && strcmp(dk, dj) == 0) fail_msg("series %d and %d share a look", k, j);
        }
}

/* the step axis of a short run (inspect --plot over 3 steps): ticks at whole steps only */
static void test_step_ticks_are_whole(void **state)
{
    (void)state;
    double t[PR_PLOT_MAX_TICKS], lo, hi;
    assert_ticks(t, pr_plot_int_ticks(0, 2, t, &lo, &hi), (double[]){0, 1, 2}, 3);
    assert_ticks(t, pr_plot_int_ticks(1, 3, t, &lo, &hi), (double[]){1, 2, 3}, 3);
    assert_ticks(t, pr_plot_int_ticks(5, 5, t, &lo, &hi), (double[]){4, 5, 6}, 3);
    assert_ticks(t, pr_plot_int_ticks(0, 1000, t, &lo, &hi), (double[]){0, 200, 400, 600, 800, 1000}, 6);
    double x[3] = {0, 1, 2}, y[3] = {1, 0.1, 0.01};
    pr_plot p = {.title = "prism: gradient norm by step", .xlabel = "step", .ylog = true, .xint = true};
    pr_plot_add(&p, "embed", 3, x, y);
    char *doc = write_doc(&p);
    texts tx;
    check_xml(doc, &tx);
    for (int i = 0; i < tx.n; i++)
        if (strcmp(tx.group[i], "xticks") == 0 && strchr(tx.text[i], '.')) fail_msg("x tick '%s'", tx.text[i]);
    assert_true(has_text(&tx, "xticks", "0") && has_text(&tx, "xticks", "1") && has_text(&tx, "xticks", "2"));
    free(doc);
    pr_plot_free(&p);
    char label[32];
    pr_plot_tick_label(1500000, label, sizeof label);
    assert_string_equal(label, "1.5M");
    pr_plot_tick_label(20000, label, sizeof label);
    assert_string_equal(label, "20000");
}

/* long titles, names and tick labels widen the picture rather than run off it */
static void test_labels_fit(void **state)
{
    (void)state;
    double x[2] = {0, 2.5e6}, y[2] = {123456.5, 0.000123}, y2[2] = {1, 2};
    pr_plot p = {.title = "a title far longer than the plot area is wide, with WWWWW MMMMM in it to be sure",
                 .xlabel = "tokens", .ylabel = "a y label", .xint = true, .plot_w = 200, .plot_h = 120};
    pr_plot_add(&p, "runs/ablate-quick/prism/parity/s1 with a long legend name", 2, x, y);
    pr_plot_add(&p, "b", 2, x, y2);
    pr_plot_mark(&p, 2, x, y2);
    assert_no_clipping_in(&p);
    p.ylog = true;
    assert_no_clipping_in(&p);
    pr_plot_free(&p);
    /* the quick grid's chart: one task, two models, a title wider than the bars */
    double mean[2] = {0.98, 0.5}, spread[2] = {0.01, 0.02};
    pr_bars b = {.title = "ablate quick: mean ± std over 2 seeds", .n_groups = 1, .n_series = 2,
                 .group = {"parity"}, .unit = {"acc"}, .unit_max = {1}, .series = {"prism", "linattn"},
                 .mean = mean, .spread = spread};
    char *doc = write_bars_doc(&b);
    texts t;
    check_xml(doc, &t);
    assert_nothing_clipped(&t);
    assert_true(has_text(&t, "", "ablate quick: mean ± std over 2 seeds"));
    free(doc);
}

/* a bar chart's 32 series (a grid's most) each keep a fill of their own */
static void test_bars_32_series_distinct(void **state)
{
    (void)state;
    double mean[32];
    pr_bars b = {.n_groups = 1, .n_series = 32, .mean = mean};
    for (int s = 0; s < 32; s++) mean[s] = 1, b.series[s] = "v";
    char *doc = write_bars_doc(&b);
    char fills[32][64];
    int n = 0;
    for (const char *at = doc; (at = strstr(at, "<rect class=\"bar\"")); at++) {
        const char *f = strstr(at, " fill=");
        snprintf(fills[n], sizeof fills[n], "%.*s", (int)(strstr(f, " stroke=") - f), f);
        for (int j = 0; j < n; j++)
            if (strcmp(fills[j], fills[n]) == 0) fail_msg("bars %d and %d share%s", j, n, fills[n]);
        n++;
    }
    assert_int_equal(n, 32);
    free(doc);
}

/* a run folder dir/name whose metrics.jsonl holds text */
static void write_run(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_runs_in_one_plot(void **state)
{
    (void)state;
    char dir[] = "/tmp/prism_test_plot_runs_XXXXXX", paths[3][600], svg[600];
    assert_non_null(mkdtemp(dir));
    write_run(dir, "a", "{\"step\":1,\"loss\":10}\n{\"step\":2,\"loss\":0.01}\n{\"step\":2,\"eval\":{\"acc\":0.5}}\n");
    write_run(dir, "b", "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":1}\n");
    write_run(dir, "c", "{\"step\":1,\"lr\":0.1}\n");
    pr_run runs[3];
    const char *names[3];
    pr_err err;
    for (int k = 0; k < 3; k++) {
        snprintf(paths[k], sizeof paths[k], "%s/%c/", dir, 'a' + k);
        names[k] = paths[k];
        if (pr_run_read(&runs[k], paths[k], &err)) fail_msg("%s", err.msg);
    }
    assert_true(pr_run_has_metric(&runs[0], "acc") && !pr_run_has_metric(&runs[1], "acc"));
    snprintf(svg, sizeof svg, "%s/loss.svg", dir);
    pr_runs_plot_opts o = {.metric = "loss", .x = PR_X_STEP, .smooth = 1};
    bool ylog = false;
    assert_int_equal(pr_runs_plot(&o, runs, names, 3, svg, &ylog, &err), 0);
    assert_true(ylog);   /* 10 down to 0.01: three decades */
    FILE *f = fopen(svg, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    char *doc = read_back(f);
    texts t;
    check_xml(doc, &t);
    assert_true(has_text(&t, "legend", "a") && has_text(&t, "legend", "b"));
    assert_false(has_text(&t, "legend", "c"));   /* it has no loss */
    assert_true(has_text(&t, "", "loss by step"));
    free(doc);
    o.y_scale = 2;
    assert_int_equal(pr_runs_plot(&o, runs, names, 3, svg, &ylog, &err), 0);
    assert_false(ylog);
    o.metric = "bpb";
    assert_int_equal(pr_runs_plot(&o, runs, names, 3, svg, &ylog, &err), -1);
    assert_non_null(strstr(err.msg, "no run has the metric bpb"));
    for (int k = 0; k < 3; k++) pr_run_free(&runs[k]);
    assert_int_equal(pr_test_remove_root(dir), 0);
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
        cmocka_unit_test(test_forty_series_never_share_a_look),
        cmocka_unit_test(test_step_ticks_are_whole),
        cmocka_unit_test(test_labels_fit),
        cmocka_unit_test(test_bars_32_series_distinct),
        cmocka_unit_test(test_runs_in_one_plot),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
