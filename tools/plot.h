/* tools/plot.h: line plots and grouped bar charts as standalone SVG files
 * (axes, "nice" ticks, labels, a legend), for the commands that report
 * curves (gradient norms, throughput against sequence length; log scale on
 * either axis) or a table of means (ablate). No dependency: the SVG is
 * written by hand and opens in any browser.
 *
 *     pr_plot p = {.title = "grad norms", .xlabel = "step", .ylabel = "norm", .ylog = true};
 *     pr_plot_add(&p, "embed", n, xs, ys);
 *     if (pr_plot_save(&p, "grads.svg", &err)) ...;
 */
#ifndef PR_PLOT_H
#define PR_PLOT_H

#include <stdbool.h>
#include <stdio.h>

#include "tensor/tensor.h"

#define PR_PLOT_MAX_SERIES 32
#define PR_PLOT_MAX_TICKS 24

typedef struct {
    const char *name;      /* legend entry */
    int n;
    const double *x, *y;   /* n points; a non-finite y (or a value <= 0 on a log axis) breaks the line */
} pr_plot_series;

typedef struct {
    const char *title, *xlabel, *ylabel;
    bool xlog, ylog;
    int n_series;
    pr_plot_series series[PR_PLOT_MAX_SERIES];
} pr_plot;

/* append a series (the arrays are read at save time); false when full */
bool pr_plot_add(pr_plot *p, const char *name, int n, const double *x, const double *y);

/* Ticks of an axis holding [lo, hi]. Linear: multiples of 1, 2 or 5 x 10^k,
 * about five of them, spanning the data (*axis_lo, *axis_hi: the first and
 * last tick). Log: the powers of ten around the data (every k-th one when
 * there are many decades). Returns the number of ticks. */
int pr_plot_ticks(double lo, double hi, bool log_scale, double *ticks, double *axis_lo, double *axis_hi);

/* the SVG document; -1 with err when no series has a point the axes can show */
int pr_plot_write(const pr_plot *p, FILE *f, pr_err *err);
/* the same into a file; -1 with err naming the file */
int pr_plot_save(const pr_plot *p, const char *path, pr_err *err);

/* ---- grouped bar charts: a group of bars per x label, a bar (and a colour)
 * per series. Groups measured in different units are never drawn against
 * one axis: each distinct unit gets its own panel, stacked vertically, with
 * a y axis from zero. */
#define PR_BARS_MAX_GROUPS 16
#define PR_BARS_MAX_SERIES 32

typedef struct {
    const char *title;
    int n_groups, n_series;
    const char *group[PR_BARS_MAX_GROUPS];   /* x labels */
    const char *unit[PR_BARS_MAX_GROUPS];    /* what each group's values measure ("acc") */
    /* the largest value each group's unit can take (1 for a fraction), or 0
     * for no bound: the axis stops there, cutting error bars that pass it */
    double unit_max[PR_BARS_MAX_GROUPS];
    const char *series[PR_BARS_MAX_SERIES];  /* legend entries */
    /* [series * n_groups + group]: a non-finite mean draws no bar; an error
     * bar of mean ± spread where spread is finite and > 0 (spread may be NULL) */
    const double *mean, *spread;
} pr_bars;

/* the SVG document; -1 with err when the counts are out of range or no mean is finite */
int pr_bars_write(const pr_bars *b, FILE *f, pr_err *err);
/* the same into a file; -1 with err naming the file */
int pr_bars_save(const pr_bars *b, const char *path, pr_err *err);

#endif
