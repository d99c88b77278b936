/* tools/report.h: report pages: one self-contained HTML file per grid
 * (ablate) or comparison (compare) that opens in any browser with no network
 * and no script: a table, charts and training curves as inline SVG
 * (tools/plot.h), styled so that the page fits a 1280-pixel window (every
 * picture scales down to the page's width).
 *
 *     pr_report_begin(f, "ablate quick", "models: prism, linattn; ...");
 *     pr_report_heading(f, "Results");
 *     pr_report_table(f, 3, 2, cells);
 *     pr_report_bars(f, &bars, &err);
 *     pr_report_curves(f, "loss", false, panels, n, &err);
 *     pr_report_end(f);
 * The page is well-formed XML as well as HTML. */
#ifndef PR_REPORT_H
#define PR_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "tools/plot.h"

void pr_report_begin(FILE *f, const char *title, const char *lead);   /* lead: a paragraph under the title, or NULL */
void pr_report_heading(FILE *f, const char *text);
void pr_report_paragraph(FILE *f, const char *text);
/* n_rows rows of n_cols cells, row-major, row 0 the header; a NULL cell is
 * empty; a cell's second line (after a '\n') is set apart under the first, as
 * a published figure beside ours ("0.512 ± 0.034\npaper 0.49") */
void pr_report_table(FILE *f, int n_rows, int n_cols, const char *const *cells);
int pr_report_plot(FILE *f, const pr_plot *p, pr_err *err);
int pr_report_bars(FILE *f, const pr_bars *b, pr_err *err);
void pr_report_end(FILE *f);

/* one small plot of the curves of several runs of one model (its seeds),
 * all in the model's colour (look `color` of pr_plot_style), told apart by
 * their dash pattern */
typedef struct {
    const char *title;          /* the model */
    int color;                  /* -1: a look per run instead (pr_plot_style's k-th for run k) */
    int n_runs;
    const char *const *runs;    /* run directories; one that does not exist yet is left out */
    const char *const *labels;  /* legend entries ("s1") */
} pr_report_panel;

/* small multiples: a panel per model, the metric (a training curve, or with
 * eval the evaluations) against the step, every panel on the same y axis.
 * A run that cannot be read is named in a note on the page and left out.
 * Returns the number of curves drawn (0: nothing written, as when no run has
 * more than one point: evaluated at the end only). */
int pr_report_curves(FILE *f, const char *metric, bool eval, const pr_report_panel *panels, int n_panels);

#endif
