/* tools/plot.h: line plots as standalone SVG files (axes, "nice" ticks,
 * labels, a legend, log scale on either axis), for the commands that report
 * curves: gradient norms, throughput against sequence length. No dependency:
 * the SVG is written by hand and opens in any browser.
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

#endif
