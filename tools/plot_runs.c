/* tools/plot_runs.c: `prism plot RUN...`: its options and messages; the
 * runs are read by lab/runs.c and drawn in one SVG by lab/plot_runs.c: a
 * line per run, its evaluations marked with dots. */
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

/* the plot of the runs that have the metric (has[k]), said; a usage error when none has it */
static int draw(const plot_args *t, const pr_run *runs, const bool *has, pr_args *a)
{
    static const char *const x_names[] = {"step", "tokens", "seconds"};
    int n_drawn = 0;
    for (int k = 0; k < t->n_runs; k++) n_drawn += has[k];
    if (!n_drawn) {
        char list[2048] = "";
        pr_runs_list_metrics(runs, t->n_runs, list, sizeof list);
        return pr_args_error(a, "--metric %s: no run has it; the runs have: %s", t->metric, list[0] ? list : "none");
    }
    pr_runs_plot_opts o = {.metric = t->metric, .x = (pr_x_kind)t->x, .smooth = t->smooth, .y_scale = t->y_scale,
                           .title = t->title};
    const char *out = t->out ? t->out : "plot.svg";
    bool ylog;
    pr_err err;
    if (pr_runs_plot(&o, runs, t->runs, t->n_runs, out, &ylog, &err))
        return fprintf(stderr, "prism plot: %s\n", err.msg), 1;
    printf("wrote %s: %s of %d run%s against %s%s\n", out, t->metric, n_drawn, n_drawn > 1 ? "s" : "", x_names[t->x],
           ylog ? " (log scale)" : "");
    return 0;
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
        has[k] = rc < 0 && pr_run_has_metric(&runs[k], t.metric);
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
