/* lab/compare.c: what `prism compare` writes of its models' runs: the
 * results table (Markdown or CSV: the task's quality metric, tokens/s,
 * parameters, peak memory; a failed model keeps its row) and the report page
 * (the table, the quality metric as bars, every run's training loss and
 * evaluations). tools/compare.c reads the options and trains the models. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lab/lab.h"
#ifdef PRISM_HAVE_CUDA
#include "tensor/cuda.h"
#endif

/* the task's quality metric among a run's final metrics */
const char *pr_compare_quality(const pr_metrics *m, const char *task, double *value)
{
    const char *want = pr_grid_quality_metric(task);
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->name[i], want) == 0) return *value = m->value[i], want;
    return *value = NAN, "-";
}


void pr_compare_table(FILE *f, const pr_compare_row *rows, int n, bool csv, pr_device dev)
{
    const char *metric = "-", *peak = dev == PR_CUDA ? "device peak MiB" : "step arena peak MiB";
    for (int i = 0; i < n; i++)
        if (rows[i].ok) metric = rows[i].metric;
    if (csv) fprintf(f, "model,%s,tokens_per_s,params,%s\n", metric, peak);
    else fprintf(f, "| model | %s | tokens/s | params | %s |\n|---|---|---|---|---|\n", metric, peak);
    for (int i = 0; i < n; i++) {
        const pr_compare_row *r = &rows[i];
        if (!r->ok) fprintf(f, csv ? "%s,,,,\n" : "| %s | failed | | | |\n", r->name);
        else if (csv) fprintf(f, "%s,%.6g,%.0f,%lld,%.2f\n", r->name, r->quality, r->tokens_per_s, (long long)r->params,
                              r->peak_mib);
        else fprintf(f, "| %s | %.4f | %.0f | %lld | %.1f |\n", r->name, r->quality, r->tokens_per_s,
                     (long long)r->params, r->peak_mib);
    }
}

int pr_compare_write_table(const char *path, const pr_compare_row *rows, int n, bool csv, pr_device dev, pr_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f) return pr_errf(err, "%s: cannot create: %s", path, strerror(errno));
    pr_compare_table(f, rows, n, csv, dev);
    return fclose(f) == 0 ? 0 : pr_errf(err, "%s: write failed", path);
}

/* the report page (DIR/report.html): the table, the quality metric as bars, and every model's
 * training loss and evaluations in one plot each */
int pr_compare_write_report(const char *path, const char *root, const char *task, int64_t steps,
                            const pr_compare_row *rows, int n, pr_device dev, pr_err *err)
{
    char title[160], lead[200], cells[(PR_COMPARE_MAX_MODELS + 1) * 5][48];
    const char *cell[(PR_COMPARE_MAX_MODELS + 1) * 5], *metric = "-";
    if (n > PR_COMPARE_MAX_MODELS) return pr_errf(err, "%s: more than %d models", path, PR_COMPARE_MAX_MODELS);
    FILE *f = fopen(path, "w");
    if (!f) return pr_errf(err, "%s: cannot create: %s", path, strerror(errno));
    snprintf(title, sizeof title, "prism compare on %s", task);
    snprintf(lead, sizeof lead, "%d models, %lld steps each with the same config, data order and seed, on the %s; "
                                "each run's directory is under %s.", n, (long long)steps, dev == PR_CUDA ? "GPU" : "CPU",
             root);
    pr_report_begin(f, title, lead);
    for (int i = 0; i < n; i++)
        if (rows[i].ok) metric = rows[i].metric;
    const char *head[5] = {"model", metric, "tokens/s", "params", dev == PR_CUDA ? "device peak MiB" : "step arena peak MiB"};
    for (int c = 0; c < 5; c++) cell[c] = head[c];
    double quality[PR_COMPARE_MAX_MODELS];
    pr_bars b = {.title = title, .n_groups = 1, .n_series = n, .group = {task}, .unit = {metric},
                 .unit_max = {strcmp(metric, "acc") == 0 ? 1 : 0}, .mean = quality};
    for (int i = 0; i < n; i++) {
        const pr_compare_row *r = &rows[i];
        char (*row)[48] = &cells[(i + 1) * 5];
        snprintf(row[0], 48, "%s", r->name);
        snprintf(row[1], 48, r->ok ? "%.4f" : "failed", r->quality);
        snprintf(row[2], 48, r->ok ? "%.0f" : "", r->tokens_per_s);
        snprintf(row[3], 48, r->ok ? "%lld" : "", (long long)r->params);
        snprintf(row[4], 48, r->ok ? "%.1f" : "", r->peak_mib);
        for (int c = 0; c < 5; c++) cell[(i + 1) * 5 + c] = row[c];
        b.series[i] = r->name;
        quality[i] = r->ok ? r->quality : NAN;
    }
    pr_report_heading(f, "Results");
    pr_report_table(f, n + 1, 5, cell);
    pr_err bars_err;
    if (pr_report_bars(f, &b, &bars_err)) pr_report_paragraph(f, bars_err.msg);
    char dirs[PR_COMPARE_MAX_MODELS][1100];
    const char *runs[PR_COMPARE_MAX_MODELS], *names[PR_COMPARE_MAX_MODELS];
    for (int i = 0; i < n; i++)
        snprintf(dirs[i], sizeof dirs[i], "%s/%s", root, rows[i].name), runs[i] = dirs[i], names[i] = rows[i].name;
    /* one panel each, a colour per model */
    pr_report_panel loss = {.title = "training loss", .color = -1, .n_runs = n, .runs = runs, .labels = names};
    pr_report_panel evals = loss;
    evals.title = metric;
    pr_report_heading(f, "Training curves");
    if (!pr_report_curves(f, "loss", false, &loss, 1)) pr_report_paragraph(f, "No run logged a step.");
    if (strcmp(metric, "-") != 0 && !pr_report_curves(f, metric, true, &evals, 1))
        pr_report_paragraph(f, "Evaluated at the end of each run only (the table above); --set "
                               "train.eval_every=N adds evaluations during training.");
    pr_report_end(f);
    return fclose(f) != 0 ? pr_errf(err, "%s: cannot write", path) : 0;
}

/* ---- a model's run ---------------------------------------------------------------------- */
int pr_compare_config(const pr_compare_setup *s, const char *model, pr_config *c, pr_train_opts *o, pr_err *err)
{
    *c = pr_config_default();
    *o = pr_train_defaults();
    snprintf(o->task, sizeof o->task, "%s", s->task);
    if (pr_task_preset(c, o, s->task, err) || pr_train_set_model(c, s->task, model, err)) return -1;
    for (int i = 0; i < s->n_sets; i++)
        if (pr_grid_set(c, o, s->sets[i], err)) return -1;
    if (s->steps) o->steps = s->steps;
    if (s->data && pr_task_family_of(s->task) != PR_TASK_LM)
        return pr_errf(err, "--data is the lm task's text file; task %s does not read it", s->task);
    if (s->data) snprintf(o->data, sizeof o->data, "%s", s->data);
    o->seed = (int64_t)s->seed, c->seed = (int)s->seed;
    return pr_config_check(c, err);
}

void pr_compare_run_row(pr_compare_row *row, const pr_compare_setup *s, const char *root, pr_device dev)
{
    pr_config c;
    pr_train_opts ro;
    pr_err err;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/%s", root, row->name);
    pr_train_result res;
#ifdef PRISM_HAVE_CUDA
    if (dev == PR_CUDA) pr_cuda_alloc_peak_reset();
#endif
    int rc = pr_compare_config(s, row->name, &c, &ro, &err);
    ro.overwrite = true;   /* DIR/<model> holds this compare's run of the model: a new compare replaces it */
    if (rc || pr_train(&c, &ro, dir, false, dev, &res, &err)) {
        fprintf(stderr, "prism compare: %s: %s\n", row->name, err.msg);
        return;
    }
    size_t cur, peak = res.step_peak_bytes;
    if (dev == PR_CUDA) pr_device_mem_stats(PR_CUDA, &cur, &peak);
    row->metric = pr_compare_quality(&res.metrics, s->task, &row->quality);
    row->tokens_per_s = res.tokens_per_s;
    row->params = res.params;
    row->peak_mib = (double)peak / 1048576.0;
    row->ok = true;
}
