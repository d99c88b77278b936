/* tools/plot_runs.c: `prism plot RUN...`: one metric of several runs in one
 * SVG (lab/plot.c), read from their metrics.jsonl (lab/runs.c): a line
 * per run, its evaluations marked with dots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "tools/tools.h"

static void plot_usage(FILE *f)
{
    fprintf(f,
            "usage: prism plot RUN... [--metric NAME] [--x step|tokens|time] [--out FILE.svg]\n"
            "                  [--smooth N] [--y auto|log|linear] [--title TEXT]\n\n"
            "Draws one metric of every RUN (a run directory of prism train, ablate or compare)\n"
            "against the step as one SVG: a line per run, named in the legend by its directory\n"
            "(less the part all the runs share), with its evaluations marked by dots. Colours and\n"
            "dash patterns never repeat within a plot, however many runs it holds.\n\n"
            "  --metric NAME   what to draw (default loss): a key of the runs' metrics.jsonl, a\n"
            "                  training one (loss, lr, grad_norm, tokens_per_s) drawn as a line with\n"
            "                  the evaluations of the same name as dots, or one only evaluated (acc,\n"
            "                  bpb, test_ndcg@10, ...) drawn through its dots. An unknown name lists\n"
            "                  the metrics the runs have.\n"
            "  --x KIND        step (default), tokens (tokens trained on) or time (seconds of\n"
            "                  training; a resumed run's clock continues from where it stopped)\n"
            "  --out FILE      the SVG to write (default plot.svg)\n"
            "  --smooth N      a trailing mean over N logged points (the dots stay as measured)\n"
            "  --y SCALE       auto (default: log where the values span more than 1.5 decades),\n"
            "                  log or linear\n"
            "  --title TEXT    the plot's title (default: the metric against the x axis)\n\n"
            "Open the SVG in any browser. Exit status: 0 written, 1 a run could not be read,\n"
            "2 a bad command line (an unknown metric among them).\n");
}

typedef struct {
    const char *runs[256];
    int n_runs;
    const char *metric, *out, *title;
    int x, y_scale, smooth;
} plot_args;

static int parse_plot(pr_args *a, plot_args *t)
{
    static const char *const xs[] = {"step", "tokens", "time", NULL}, *const ys[] = {"auto", "log", "linear", NULL};
    while (pr_args_next(a)) {
        const char *arg = pr_args_current(a);
        if (pr_args_help(a)) return plot_usage(stdout), 0;
        if (pr_args_string(a, "--metric", &t->metric) || pr_args_string(a, "--out", &t->out) ||
            pr_args_string(a, "--title", &t->title) || pr_args_choice(a, "--x", xs, &t->x) ||
            pr_args_choice(a, "--y", ys, &t->y_scale) || pr_args_int(a, "--smooth", 1, 100000, &t->smooth))
            continue;
        if (arg[0] == '-' && arg[1]) return pr_args_unknown(a);
        if (t->n_runs == 256) return pr_args_error(a, "more than 256 runs");
        t->runs[t->n_runs++] = arg;
    }
    if (a->failed) return PR_EXIT_USAGE;
    if (!t->n_runs) return pr_args_error(a, "name at least one run directory (prism plot --help)");
    return -1;
}

/* the length of the leading directories every path shares ("runs/" of runs/a, runs/b) */
static size_t shared_dirs(const char *const *paths, int n)
{
    if (n < 2) return 0;
    size_t keep = 0;
    for (size_t i = 0;; i++) {
        char c = paths[0][i];
        for (int k = 1; k < n; k++)
            if (paths[k][i] != c) return keep;
        if (!c) return keep;
        if (c == '/') keep = i + 1;
    }
}

/* a run's legend name: its path less the shared directories and a trailing '/' */
static void legend_name(const char *path, size_t skip, char *out, size_t n)
{
    snprintf(out, n, "%s", path + (strlen(path) > skip ? skip : 0));
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') out[--len] = 0;
}

/* log where the values shown span more than 1.5 decades and are all positive */
static bool spans_decades(const pr_plot *p)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < p->n_series; k++) {
        const pr_plot_series *s = &p->series[k];
        for (int i = 0; i < s->n + s->n_marks; i++) {
            double v = i < s->n ? s->y[i] : s->my[i - s->n];
            if (!isfinite(v)) continue;
            if (v <= 0) return false;
            lo = fmin(lo, v), hi = fmax(hi, v);
        }
    }
    return lo < hi && hi / lo > pow(10, 1.5);
}

/* one run's line and dots, in arrays the plot reads at save time (freed by the caller) */
typedef struct {
    char name[256];
    double *x, *y, *mx, *my;
} run_series;

static void series_of(const pr_run *r, const plot_args *t, run_series *s, pr_plot *p)
{
    const pr_curve *line = pr_run_curve(r, t->metric, false), *dots = pr_run_curve(r, t->metric, true);
    if (!line) line = dots;   /* an evaluated metric: the line goes through its dots */
    s->x = malloc(sizeof(double) * (size_t)line->n), s->y = malloc(sizeof(double) * (size_t)line->n);
    for (int i = 0; i < line->n; i++) s->x[i] = pr_run_x(r, line->step[i], (pr_x_kind)t->x);
    pr_smooth(line->value, line->n, line == dots ? 1 : t->smooth, s->y);
    pr_plot_add(p, s->name, line->n, s->x, s->y);
    if (!dots) return;
    s->mx = malloc(sizeof(double) * (size_t)dots->n), s->my = malloc(sizeof(double) * (size_t)dots->n);
    for (int i = 0; i < dots->n; i++) s->mx[i] = pr_run_x(r, dots->step[i], (pr_x_kind)t->x), s->my[i] = dots->value[i];
    pr_plot_mark(p, dots->n, s->mx, s->my);
}

static int draw(const plot_args *t, pr_run *runs, bool *has, pr_args *a)
{
    static const char *const x_names[] = {"step", "tokens", "seconds"};
    int n_drawn = 0;
    for (int k = 0; k < t->n_runs; k++) n_drawn += has[k];
    if (!n_drawn) {
        char list[2048] = "";
        pr_runs_list_metrics(runs, t->n_runs, list, sizeof list);
        return pr_args_error(a, "--metric %s: no run has it; the runs have: %s", t->metric, list[0] ? list : "none");
    }
    run_series *s = calloc((size_t)t->n_runs, sizeof *s);
    size_t skip = shared_dirs(t->runs, t->n_runs);
    char title[256], ylabel[80];
    snprintf(title, sizeof title, "%s by %s", t->metric, x_names[t->x]);
    if (t->smooth > 1) snprintf(title + strlen(title), sizeof title - strlen(title), " (mean of %d points)", t->smooth);
    bool evaluated_only = true;
    for (int k = 0; k < t->n_runs; k++) evaluated_only &= !has[k] || !pr_run_curve(&runs[k], t->metric, false);
    snprintf(ylabel, sizeof ylabel, "%s%s", t->metric, evaluated_only ? " (evaluation)" : "");
    pr_plot p = {.title = t->title ? t->title : title, .xlabel = x_names[t->x], .ylabel = ylabel,
                 .xint = t->x != PR_X_TIME};
    for (int k = 0; k < t->n_runs; k++) {
        if (!has[k]) continue;
        legend_name(t->runs[k], skip, s[k].name, sizeof s[k].name);
        series_of(&runs[k], t, &s[k], &p);
    }
    p.ylog = t->y_scale == 1 || (t->y_scale == 0 && spans_decades(&p));
    pr_err err;
    const char *out = t->out ? t->out : "plot.svg";
    int rc = pr_plot_save(&p, out, &err);
    if (rc) fprintf(stderr, "prism plot: %s\n", err.msg);
    else printf("wrote %s: %s of %d run%s against %s%s\n", out, t->metric, n_drawn, n_drawn > 1 ? "s" : "",
                x_names[t->x], p.ylog ? " (log scale)" : "");
    for (int k = 0; k < t->n_runs; k++) free(s[k].x), free(s[k].y), free(s[k].mx), free(s[k].my);
    free(s);
    pr_plot_free(&p);
    return rc ? 1 : 0;
}

int pr_cmd_plot(int argc, char **argv)
{
    pr_args a = pr_args_begin("prism plot", argc, argv);
    plot_args t = {.metric = "loss", .smooth = 1};
    int rc = parse_plot(&a, &t);
    if (rc >= 0) return rc;
    pr_run *runs = calloc((size_t)t.n_runs, sizeof *runs);
    bool has[256] = {false};
    for (int k = 0; k < t.n_runs && rc < 0; k++) {
        pr_err err;
        if (pr_run_read(&runs[k], t.runs[k], &err)) {
            fprintf(stderr, "prism plot: %s\n", err.msg);
            rc = 1;
        } else if (!pr_run_has_x(&runs[k], (pr_x_kind)t.x)) {
            fprintf(stderr, "prism plot: %s: its metrics.jsonl has no %s (written before the trainer recorded it); "
                            "use --x step\n", t.runs[k], t.x == PR_X_TOKENS ? "tokens" : "time_s");
            rc = 1;
        }
        has[k] = rc < 0 && (pr_run_curve(&runs[k], t.metric, false) || pr_run_curve(&runs[k], t.metric, true));
    }
    int n_has = 0;
    for (int k = 0; k < t.n_runs; k++) n_has += has[k];
    if (rc < 0) {
        for (int k = 0; k < t.n_runs && n_has; k++)
            if (!has[k]) fprintf(stderr, "prism plot: %s has no metric '%s'; left out\n", t.runs[k], t.metric);
        rc = draw(&t, runs, has, &a);
    }
    for (int k = 0; k < t.n_runs; k++) pr_run_free(&runs[k]);
    free(runs);
    return rc;
}
