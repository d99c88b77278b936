/* lab/plot_runs.c: one metric of several runs in one SVG (lab/lab.h), for
 * `prism plot`: a line per run, named by its folder less the directories
 * every run shares, its evaluations marked with dots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"

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

bool pr_run_has_metric(const pr_run *r, const char *metric)
{
    return pr_run_curve(r, metric, false) || pr_run_curve(r, metric, true);
}

/* one run's line and dots, in arrays the plot reads at save time (freed by the caller) */
typedef struct {
    char name[256];
    double *x, *y, *mx, *my;
} run_series;

static void series_of(const pr_run *r, const pr_runs_plot_opts *o, run_series *s, pr_plot *p)
{
    const pr_curve *line = pr_run_curve(r, o->metric, false), *dots = pr_run_curve(r, o->metric, true);
    if (!line) line = dots;   /* an evaluated metric: the line goes through its dots */
    s->x = malloc(sizeof(double) * (size_t)line->n), s->y = malloc(sizeof(double) * (size_t)line->n);
    PR_CHECK(s->x && s->y, "plot: out of host memory");
    for (int i = 0; i < line->n; i++) s->x[i] = pr_run_x(r, line->step[i], o->x);
    pr_smooth(line->value, line->n, line == dots ? 1 : o->smooth, s->y);
    pr_plot_add(p, s->name, line->n, s->x, s->y);
    if (!dots) return;
    s->mx = malloc(sizeof(double) * (size_t)dots->n), s->my = malloc(sizeof(double) * (size_t)dots->n);
    PR_CHECK(s->mx && s->my, "plot: out of host memory");
    for (int i = 0; i < dots->n; i++) s->mx[i] = pr_run_x(r, dots->step[i], o->x), s->my[i] = dots->value[i];
    pr_plot_mark(p, dots->n, s->mx, s->my);
}

int pr_runs_plot(const pr_runs_plot_opts *o, const pr_run *runs, const char *const *paths, int n, const char *out,
                 bool *ylog, pr_err *err)
{
    static const char *const x_names[] = {"step", "tokens", "seconds"};
    run_series *s = calloc((size_t)n, sizeof *s);
    PR_CHECK(s || !n, "plot: out of host memory");
    size_t skip = shared_dirs(paths, n);
    char title[256], ylabel[80];
    snprintf(title, sizeof title, "%s by %s", o->metric, x_names[o->x]);
    if (o->smooth > 1) snprintf(title + strlen(title), sizeof title - strlen(title), " (mean of %d points)", o->smooth);
    bool evaluated_only = true;
    for (int k = 0; k < n; k++) evaluated_only &= !pr_run_curve(&runs[k], o->metric, false);
    snprintf(ylabel, sizeof ylabel, "%s%s", o->metric, evaluated_only ? " (evaluation)" : "");
    pr_plot p = {.title = o->title ? o->title : title, .xlabel = x_names[o->x], .ylabel = ylabel,
                 .xint = o->x != PR_X_TIME};
    for (int k = 0; k < n; k++) {
        if (!pr_run_has_metric(&runs[k], o->metric)) continue;
        legend_name(paths[k], skip, s[k].name, sizeof s[k].name);
        series_of(&runs[k], o, &s[k], &p);
    }
    p.ylog = o->y_scale == 1 || (o->y_scale == 0 && spans_decades(&p));
    *ylog = p.ylog;
    int rc = p.n_series ? pr_plot_save(&p, out, err) : pr_errf(err, "no run has the metric %s", o->metric);
    for (int k = 0; k < n; k++) free(s[k].x), free(s[k].y), free(s[k].mx), free(s[k].my);
    free(s);
    pr_plot_free(&p);
    return rc;
}
