/* tools/plot.h: line plots and grouped bar charts as standalone SVG files
 * (axes, "nice" ticks, labels, a legend), for the commands that report
 * curves (gradient norms, throughput against sequence length; log scale on
 * either axis) or a table of means (ablate). No dependency: the SVG is
 * written by hand and opens in any browser.
 *
 *     pr_plot p = {.title = "grad norms", .xlabel = "step", .ylabel = "norm", .ylog = true};
 *     pr_plot_add(&p, "embed", n, xs, ys);
 *     if (pr_plot_save(&p, "grads.svg", &err)) ...;
 *     pr_plot_free(&p);
 */
#ifndef PR_PLOT_H
#define PR_PLOT_H

#include <stdbool.h>
#include <stdio.h>

#include "tensor/tensor.h"

#define PR_PLOT_MAX_TICKS 24

typedef struct {
    const char *name;      /* legend entry */
    int n;
    const double *x, *y;   /* n points; a non-finite y (or a value <= 0 on a log axis) breaks the line */
    int n_marks;           /* points marked with a dot (evaluations), not joined: pr_plot_mark */
    const double *mx, *my;
    int look;              /* 0: the look of its index (pr_plot_style); k > 0: look k - 1 */
} pr_plot_series;

typedef struct {
    const char *title, *xlabel, *ylabel;
    bool xlog, ylog;
    bool xint;             /* x counts something (steps, tokens): ticks at whole numbers only */
    int plot_w, plot_h;    /* the plot area in pixels (0: 480 x 340); the margins are measured around it */
    bool y_fixed;          /* the y axis spans [y_lo, y_hi] (and more to reach nice ticks) whatever the data */
    double y_lo, y_hi;
    int n_series, cap;
    pr_plot_series *series;   /* grown by pr_plot_add, released by pr_plot_free */
} pr_plot;

/* append a series (the arrays are read at save time); false when out of memory */
bool pr_plot_add(pr_plot *p, const char *name, int n, const double *x, const double *y);
/* dots at n points of the last series added (in its colour), e.g. its evaluations */
void pr_plot_mark(pr_plot *p, int n, const double *x, const double *y);
void pr_plot_free(pr_plot *p);

/* Series k's look: a colour and a stroke-dasharray ("none" for solid). The
 * pair never repeats: ten hues, then each hue again with the next dash
 * pattern, for any number of series. */
void pr_plot_style(int k, const char **color, char *dash, size_t dash_size);

/* the width in pixels of text at a font size, measured generously for a
 * sans-serif face (wide letters wider), so a box sized by it holds the text */
double pr_plot_text_width(const char *s, double font_size);

/* a tick label: an integer in full up to 99999, then with k, M, G (1.5M);
 * other values in %g */
void pr_plot_tick_label(double v, char *out, size_t n);

/* Ticks of an axis holding [lo, hi]. Linear: multiples of 1, 2 or 5 x 10^k,
 * about five of them, spanning the data (*axis_lo, *axis_hi: the first and
 * last tick). Log: the powers of ten around the data (every k-th one when
 * there are many decades). Returns the number of ticks. */
int pr_plot_ticks(double lo, double hi, bool log_scale, double *ticks, double *axis_lo, double *axis_hi);
/* the same on a linear axis of counts: never a step below 1 (no tick at 2.5 steps) */
int pr_plot_int_ticks(double lo, double hi, double *ticks, double *axis_lo, double *axis_hi);

/* the <svg> element (no XML declaration: it can sit inside HTML); -1 with
 * err when no series has a point the axes can show */
int pr_plot_write(const pr_plot *p, FILE *f, pr_err *err);
/* a standalone SVG file; -1 with err naming the file */
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

/* the <svg> element; -1 with err when the counts are out of range or no mean is finite */
int pr_bars_write(const pr_bars *b, FILE *f, pr_err *err);
/* the same into a file; -1 with err naming the file */
int pr_bars_save(const pr_bars *b, const char *path, pr_err *err);

#endif
