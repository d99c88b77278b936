/* lab/report.c: report pages (lab/lab.h). The page's style sheet is
 * inline; pictures are <svg> elements written by lab/plot.c, each allowed
 * to shrink to the page's width, so no window of 1280 pixels scrolls
 * sideways. Small multiples read every run's metrics.jsonl (lab/lab.h). */
#include "lab/lab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void element(FILE *f, const char *tag, const char *cls, const char *text)
{
    fprintf(f, "<%s%s%s%s>", tag, cls ? " class=\"" : "", cls ? cls : "", cls ? "\"" : "");
    pr_xml_text(f, text);
    fprintf(f, "</%s>\n", tag);
}

void pr_report_begin(FILE *f, const char *title, const char *lead)
{
    fputs("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
          "<meta charset=\"utf-8\"/>\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n",
          f);
    element(f, "title", NULL, title);
    fputs("<style>\n"
          "body { font-family: sans-serif; color: #222; margin: 16px auto; padding: 0 16px; max-width: 1240px; }\n"
          "h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px; }\n"
          "p.lead { color: #555; margin-top: 0; } p.note { color: #a33; }\n"
          "table { border-collapse: collapse; margin: 8px 0; }\n"
          /* a table of many columns wraps inside its cells rather than run past the page */
          "th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; overflow-wrap: anywhere; }\n"
          "th { background: #f3f3f3; } th:first-child, td:first-child { text-align: left; }\n"
          "span.ref { color: #666; font-style: italic; font-size: 90%; }\n"
          "div.chart { overflow: hidden; } svg { max-width: 100%; height: auto; }\n"
          "div.panels { display: flex; flex-wrap: wrap; gap: 8px; }\n"
          "div.panels > svg { flex: 0 1 auto; min-width: 0; }\n"
          "</style>\n</head>\n<body>\n",
          f);
    element(f, "h1", NULL, title);
    if (lead) element(f, "p", "lead", lead);
}

void pr_report_heading(FILE *f, const char *text) { element(f, "h2", NULL, text); }
void pr_report_paragraph(FILE *f, const char *text) { element(f, "p", NULL, text); }

void pr_report_table(FILE *f, int n_rows, int n_cols, const char *const *cells)
{
    fputs("<table>\n", f);
    for (int r = 0; r < n_rows; r++) {
        fputs("<tr>", f);
        for (int c = 0; c < n_cols; c++) {
            const char *cell = cells[r * n_cols + c];
            const char *second = cell ? strchr(cell, '\n') : NULL;
            fprintf(f, "<%s>", r ? "td" : "th");
            if (!second) {
                pr_xml_text(f, cell ? cell : "");
            } else {   /* a published figure under ours */
                fprintf(f, "%.*s<br/><span class=\"ref\">", (int)(second - cell), cell);
                pr_xml_text(f, second + 1);
                fputs("</span>", f);
            }
            fprintf(f, "</%s>", r ? "td" : "th");
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

int pr_report_plot(FILE *f, const pr_plot *p, pr_err *err)
{
    fputs("<div class=\"chart\">\n", f);
    int rc = pr_plot_write(p, f, err);
    fputs("</div>\n", f);
    return rc;
}

int pr_report_bars(FILE *f, const pr_bars *b, pr_err *err)
{
    fputs("<div class=\"chart\">\n", f);
    int rc = pr_bars_write(b, f, err);
    fputs("</div>\n", f);
    return rc;
}

void pr_report_end(FILE *f) { fputs("</body>\n</html>\n", f); }

/* ---- small multiples ------------------------------------------------------------------ */
enum { PANEL_W = 260, PANEL_H = 150 };

/* the curve a panel draws of run r */
static const pr_curve *panel_curve(const pr_run *r, const char *metric, bool eval)
{
    return r->dir[0] ? pr_run_curve(r, metric, eval) : NULL;
}

/* the range of every curve's finite values; false when there is none */
static bool values_range(const pr_run *runs, int n, const char *metric, bool eval, double *lo, double *hi)
{
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        const pr_curve *c = panel_curve(&runs[i], metric, eval);
        for (int j = 0; c && j < c->n; j++)
            if (isfinite(c->value[j])) *lo = fmin(*lo, c->value[j]), *hi = fmax(*hi, c->value[j]);
    }
    return *lo <= *hi;
}

/* reads every panel's runs into runs[] (a run not there yet stays empty); a
 * run that cannot be read is named on the page */
static void read_runs(FILE *f, const pr_report_panel *panels, int n_panels, pr_run *runs)
{
    int i = 0;
    for (int p = 0; p < n_panels; p++)
        for (int k = 0; k < panels[p].n_runs; k++, i++) {
            pr_err err;
            char path[1100];
            snprintf(path, sizeof path, "%s/metrics.jsonl", panels[p].runs[k]);
            FILE *probe = fopen(path, "r");
            if (!probe) continue;   /* a cell that has not run */
            fclose(probe);
            if (pr_run_read(&runs[i], panels[p].runs[k], &err)) element(f, "p", "note", err.msg);
        }
}

int pr_report_curves(FILE *f, const char *metric, bool eval, const pr_report_panel *panels, int n_panels)
{
    int total = 0, drawn = 0;
    for (int p = 0; p < n_panels; p++) total += panels[p].n_runs;
    pr_run *runs = calloc((size_t)(total ? total : 1), sizeof *runs);
    read_runs(f, panels, n_panels, runs);
    double lo, hi;
    int most = 0;   /* evaluations at the end only draw no curve: a dot each is the table again */
    for (int i = 0; i < total; i++) {
        const pr_curve *c = panel_curve(&runs[i], metric, eval);
        if (c && c->n > most) most = c->n;
    }
    if (most > 1 && values_range(runs, total, metric, eval, &lo, &hi)) {
        bool log_y = lo > 0 && hi / lo > pow(10, 1.5);   /* as prism plot decides */
        char ylabel[80];
        snprintf(ylabel, sizeof ylabel, "%s%s", metric, eval ? " (evaluation)" : "");
        fputs("<div class=\"panels\">\n", f);
        for (int p = 0, i = 0; p < n_panels; i += panels[p].n_runs, p++) {
            pr_plot plot = {.title = panels[p].title, .xlabel = "step", .ylabel = ylabel, .ylog = log_y,
                            .xint = true, .plot_w = PANEL_W, .plot_h = PANEL_H, .y_fixed = true, .y_lo = lo,
                            .y_hi = hi};
            for (int k = 0; k < panels[p].n_runs; k++) {
                const pr_curve *c = panel_curve(&runs[i + k], metric, eval);
                if (!c || !pr_plot_add(&plot, panels[p].labels[k], c->n, c->step, c->value)) continue;
                /* the model's colour; a dash pattern per seed */
                plot.series[plot.n_series - 1].look = panels[p].color < 0 ? 1 + k : 1 + panels[p].color % 10 + 10 * k;
                if (eval) pr_plot_mark(&plot, c->n, c->step, c->value);
            }
            pr_err err;
            if (plot.n_series && pr_plot_write(&plot, f, &err) == 0) drawn += plot.n_series;
            pr_plot_free(&plot);
        }
        fputs("</div>\n", f);
    }
    for (int i = 0; i < total; i++) pr_run_free(&runs[i]);
    free(runs);
    return drawn;
}
