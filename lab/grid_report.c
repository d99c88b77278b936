/* lab/grid_report.c: what a grid's results become on disk (lab/lab.h): the
 * tables (Markdown, CSV, JSON), the bar chart and the report page, and where
 * each cell's run directory is, which the page's curves read. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"

void pr_grid_cell_dir(char *out, size_t n, const char *root, const char *variant, const char *task, int seed)
{
    char folder[48];
    pr_grid_folder(folder, sizeof folder, variant);
    snprintf(out, n, "%s/%s/%s/s%d", root, folder, task, seed);
}

/* stem: "results", or "results-<metric>" for --metric, which leaves the main tables as they are */
static int write_tables(const pr_grid_results *r, const char *root, const char *stem)
{
    void (*writers[3])(const pr_grid_results *, FILE *) = {pr_grid_write_markdown, pr_grid_write_csv,
                                                           pr_grid_write_json};
    const char *ext[3] = {"md", "csv", "json"};
    for (int i = 0; i < 3; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s.%s", root, stem, ext[i]);
        FILE *f = fopen(path, "w");
        if (!f) return fprintf(stderr, "prism ablate: %s: cannot create: %s\n", path, strerror(errno)), -1;
        writers[i](r, f);
        if (fclose(f) != 0) return fprintf(stderr, "prism ablate: %s: cannot write\n", path), -1;
    }
    printf("tables: %s/%s.md, %s.csv, %s.json\n", root, stem, stem, stem);
    return 0;
}

_Static_assert(PR_BARS_MAX_GROUPS >= PR_GRID_MAX_TASKS && PR_BARS_MAX_SERIES >= PR_GRID_MAX_VARIANTS,
               "a bar chart holds every task and variant of a grid");

/* acc and the rec metrics (test_ or val_ hit@K, ndcg@K, auc): at most 1 */
static bool is_fraction(const char *metric)
{
    const char *m = strncmp(metric, "test_", 5) == 0 ? metric + 5 : strncmp(metric, "val_", 4) == 0 ? metric + 4 : NULL;
    return strcmp(metric, "acc") == 0 ||
           (m && (strncmp(m, "ndcg@", 5) == 0 || strncmp(m, "hit@", 4) == 0 || strcmp(m, "auc") == 0));
}

/* the table as a bar chart: a group per task, a bar of mean ± std per variant
 * (mean and std: PR_GRID_MAX_VARIANTS * PR_GRID_MAX_TASKS each, read at drawing time) */
static pr_bars chart_of(const pr_grid_results *r, char *title, size_t title_size, double *mean, double *std)
{
    const pr_grid *g = r->g;
    snprintf(title, title_size, "ablate %s: mean ± std over %d seed%s", g->name, g->seeds, g->seeds > 1 ? "s" : "");
    pr_bars b = {.title = title, .n_groups = g->n_tasks, .n_series = g->n_variants};
    for (int t = 0; t < g->n_tasks; t++)
        b.group[t] = g->task[t], b.unit[t] = r->metric[t], b.unit_max[t] = is_fraction(r->metric[t]) ? 1 : 0;
    for (int v = 0; v < g->n_variants; v++) {
        b.series[v] = g->variant[v].name;
        for (int t = 0; t < g->n_tasks; t++)
            pr_grid_stats(r->value + ((int64_t)v * g->n_tasks + t) * g->seeds, g->seeds, &mean[v * g->n_tasks + t],
                          &std[v * g->n_tasks + t]);
    }
    b.mean = mean, b.spread = std;
    return b;
}

static int write_chart(const pr_grid_results *r, const char *root, const char *stem)
{
    char title[120], path[1200];
    double mean[PR_GRID_MAX_VARIANTS * PR_GRID_MAX_TASKS], std[PR_GRID_MAX_VARIANTS * PR_GRID_MAX_TASKS];
    pr_bars b = chart_of(r, title, sizeof title, mean, std);
    pr_err err;
    snprintf(path, sizeof path, "%s/%s.svg", root, stem);
    if (pr_bars_save(&b, path, &err)) return fprintf(stderr, "prism ablate: %s\n", err.msg), -1;
    printf("chart: %s\n", path);
    return 0;
}

/* the reference figure beside cell (v, t): where the grid has a table of
 * them and the metric tabulated is the table's; NAN otherwise */
static double reference(const pr_grid_results *r, int v, int t)
{
    const pr_grid *g = r->g;
    if (!g->refs.label || !r->metric[t] || strcmp(r->metric[t], g->refs.metric) != 0) return NAN;
    return pr_grid_ref_value(g, v, t);
}

/* the results table for the page: a column per task; where the grid has a
 * reference figure for a cell, it goes under ours ("paper 0.49"); cells point
 * into text ((n_tasks + 1) * (n_variants + 1) * 96 bytes) */
static void report_table(const pr_grid_results *r, const char **cells, char *text)
{
    const pr_grid *g = r->g;
    int n_cols = g->n_tasks + 1;
    char *at = text;
#define CELL(row, col, ...) (snprintf(at, 96, __VA_ARGS__), cells[(row) * n_cols + (col)] = at, at += 96)
    CELL(0, 0, "model");
    for (int v = 0; v < g->n_variants; v++) CELL(v + 1, 0, "%s", g->variant[v].name);
    for (int t = 0; t < g->n_tasks; t++) {
        CELL(0, t + 1, "%s (%s)", g->task[t], r->metric[t]);
        for (int v = 0; v < g->n_variants; v++) {
            double ref = reference(r, v, t);
            char ours[64], theirs[32] = "";
            pr_grid_cell_text(r->value + ((int64_t)v * g->n_tasks + t) * g->seeds, g->seeds, ours, sizeof ours);
            if (isfinite(ref)) snprintf(theirs, sizeof theirs, "\n%s %.2f", g->refs.label, ref);
            CELL(v + 1, t + 1, "%s%s%s", ours, r->stale[v][t] ? " " PR_GRID_STALE_MARK : "", theirs);
        }
    }
#undef CELL
}

/* each task's training loss and quality metric, a panel per variant with its seeds */
static void report_curves(FILE *f, const pr_grid_results *r, const char *root, int t)
{
    const pr_grid *g = r->g;
    pr_report_panel panels[PR_GRID_MAX_VARIANTS];
    char (*dirs)[1100] = malloc(sizeof *dirs * (size_t)(g->n_variants * g->seeds));
    const char **runs = malloc(sizeof *runs * (size_t)(g->n_variants * g->seeds));
    static char seed_names[PR_GRID_MAX_SEEDS][16];
    const char *labels[PR_GRID_MAX_SEEDS];
    for (int s = 0; s < g->seeds; s++) snprintf(seed_names[s], 16, "s%d", s + 1), labels[s] = seed_names[s];
    for (int v = 0; v < g->n_variants; v++) {
        for (int s = 0; s < g->seeds; s++) {
            int i = v * g->seeds + s;
            pr_grid_cell_dir(dirs[i], sizeof dirs[i], root, g->variant[v].name, g->task[t], s + 1);
            runs[i] = dirs[i];
        }
        panels[v] = (pr_report_panel){.title = g->variant[v].name, .color = v, .n_runs = g->seeds,
                                      .runs = runs + v * g->seeds, .labels = labels};
    }
    char heading[160];
    snprintf(heading, sizeof heading, "%s: training loss, a panel per model (seeds dashed apart)", g->task[t]);
    pr_report_heading(f, heading);
    if (!pr_report_curves(f, "loss", false, panels, g->n_variants))
        pr_report_paragraph(f, "No cell of this task has logged a step yet.");
    if (strcmp(r->metric[t], "-") != 0) {
        snprintf(heading, sizeof heading, "%s: %s during training", g->task[t], r->metric[t]);
        pr_report_heading(f, heading);
        if (!pr_report_curves(f, r->metric[t], true, panels, g->n_variants))
            pr_report_paragraph(f, "Evaluated at the end of each run only (the table above); a grid's \"set\": "
                                   "{\"train.eval_every\": N} adds evaluations during training.");
    }
    free(dirs), free(runs);
}

/* DIR/report.html (report-<metric>.html for --metric): the table beside the
 * grid's reference figures, the chart and every task's curves on one page */
static int write_report(const pr_grid_results *r, const char *root, const char *stem)
{
    const pr_grid *g = r->g;
    char path[1200], title[120], axes[400], lead[800];
    snprintf(path, sizeof path, "%s/report%s.html", root, stem + strlen("results"));
    FILE *f = fopen(path, "w");
    if (!f) return fprintf(stderr, "prism ablate: %s: cannot create: %s\n", path, strerror(errno)), -1;
    pr_grid_describe(g, axes, sizeof axes);
    snprintf(title, sizeof title, "prism ablate %s", g->name);
    snprintf(lead, sizeof lead, "%s. Mean ± sample std over seeds; each cell's run directory is under %s.", axes, root);
    pr_report_begin(f, title, lead);
    pr_report_heading(f, "Results");
    int rows = g->n_variants + 1, cols = g->n_tasks + 1;
    const char **cells = calloc((size_t)(rows * cols), sizeof *cells);
    char *text = malloc((size_t)(rows * cols) * 96);
    report_table(r, cells, text);
    pr_report_table(f, rows, cols, cells);
    free(cells), free(text);
    if (pr_grid_any_stale(r)) pr_report_paragraph(f, PR_GRID_STALE_NOTE);
    char prec[160], line[200];
    pr_grid_precision_text(r, prec, sizeof prec);
    if (prec[0]) {
        snprintf(line, sizeof line, "Precision: %s.", prec);
        pr_report_paragraph(f, line);
    }
    double mean[PR_GRID_MAX_VARIANTS * PR_GRID_MAX_TASKS], std[PR_GRID_MAX_VARIANTS * PR_GRID_MAX_TASKS];
    char chart_title[120];
    pr_bars b = chart_of(r, chart_title, sizeof chart_title, mean, std);
    pr_err err;
    if (pr_report_bars(f, &b, &err)) pr_report_paragraph(f, err.msg);
    for (int t = 0; t < g->n_tasks; t++) report_curves(f, r, root, t);
    pr_report_end(f);
    if (fclose(f) != 0) return fprintf(stderr, "prism ablate: %s: cannot write\n", path), -1;
    printf("report: %s\n", path);
    return 0;
}

int pr_grid_write_outputs(const pr_grid_results *r, const char *root, const char *stem)
{
    return write_tables(r, root, stem) || write_chart(r, root, stem) || write_report(r, root, stem) ? -1 : 0;
}
