/* lab/lab.h: the experiment machinery behind the `prism` command's
 * experiment subcommands (ablate, compare, plot, bench, golden-check,
 * inspect), as a library of its own (libprism_lab.a) that a test can link
 * without the command: experiment grids, their runs (cells, resume,
 * workers) and results tables, SVG plots and bar charts, runs read back
 * from metrics.jsonl, report pages, the benchmarks (their timing loop, the
 * tables of bench ops, block, fused, recurrence and throughput), golden-check, what
 * inspect runs and measures of a model's steps, and compare's runs, table
 * and report page. tools/ parses the options and calls in here; lab/ never
 * includes tools/. */
#ifndef PR_LAB_H
#define PR_LAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "autograd/autograd.h"
#include "dist/dist.h"
#include "ops/ops.h"
#include "tensor/tensor.h"
#include "train/train.h"

/* ---- experiment grids (lab/grid.c) ----
 * experiment grids for `prism ablate`: the axes (variants of a
 * model, tasks, seeds, a step budget), read from a JSON file in the config
 * format or taken from a built-in grid, and the results table (mean and
 * sample standard deviation over seeds per variant x task) as Markdown, CSV
 * and JSON. (ablate also draws the table as a bar chart, DIR/results.svg,
 * through the plots below.)
 *
 * A grid file:
 *   {"name": "mine",
 *    "models": ["prism", "gdn"],                       a variant per mixer, named after it
 *    "variants": [{"name": "prism-L1", "set": {"mixer": "prism", "prism.L": 1}},
 *                 {"name": "attn-authors", "preset": "probe-authors", "set": {"mixer": "attn"}}],
 *    "tasks": ["parity", "local_xor"],
 *    "seeds": 2, "steps": 300,                          steps 0 or absent: each task's default
 *    "set": {"train.batch": 16, "seq_len": 32}}         applied to every cell, before the variant's
 * A variant's `set` keys are model keys (prism model --help) or train.<key>.
 * A variant's `preset` replaces each task's preset in its cells, as prism
 * train --preset does (probe-authors: the authors' probe protocol, with the
 * sizes of each task). */

#define PR_GRID_MAX_VARIANTS 32
#define PR_GRID_MAX_TASKS 16
#define PR_GRID_MAX_SETS 16
#define PR_GRID_MAX_SEEDS 64

/* Reference figures: a published number a grid's cell is shown beside.
 * A grid's reference table holds one value per (row, task), a row being a
 * model as the publication names it ("Transformer"); a variant names its row
 * in `ref` (grid JSON: "ref": "Transformer"). ablate's results.md prints the
 * value in the cell after ours ("0.512 ± 0.034 (paper 0.49)"), results.csv
 * adds a column and results.json a "reference" member per cell, where the
 * metric tabulated is the table's (`metric`); report.html reads the same
 * through pr_grid_ref_value. A value may name a metric of its own (table3's
 * Hit@200, Hit@500 and AUC on one task). Only built-in grids carry a table
 * (table4: the paper's Table 4; table3: its Table 3). */
/* metric: what this value measures when it is not the table's (NULL: the table's) */
typedef struct { const char *row, *task; double value; const char *metric; } pr_grid_ref;
typedef struct {
    const char *label;                /* the column's name: "paper"; NULL: no table */
    const char *source;               /* where the numbers are from, in words */
    const char *metric;               /* what they measure: "acc" */
    int n;
    const pr_grid_ref *values;
} pr_grid_refs;

typedef struct {
    char name[48];
    char preset[24];                  /* "": each task's preset */
    char ref[24];                     /* its row in the grid's reference table; "": none */
    int n_sets;
    char set[PR_GRID_MAX_SETS][96];   /* key=value, in order */
} pr_grid_variant;

typedef struct {
    char name[48];
    int n_variants, n_tasks, seeds;
    int64_t steps;                    /* 0: each task's default */
    pr_grid_variant variant[PR_GRID_MAX_VARIANTS];
    char task[PR_GRID_MAX_TASKS][32];
    pr_grid_variant common;           /* the grid-wide `set` (its name unused) */
    pr_grid_refs refs;                /* reference figures (built-in grids); refs.label NULL: none */
} pr_grid;

/* the reference value of variant v's row for task t, NAN when there is none */
double pr_grid_ref_value(const pr_grid *g, int v, int t);

/* one `key=value` of a grid, --set or compare: train.<key>, rec.data,
 * rec.negatives and probe.style into the training options, any other key into the model's
 * config; -1 with err naming the key */
int pr_grid_set(pr_config *c, pr_train_opts *o, const char *kv, pr_err *err);
/* the metric a task's runs are judged by, as --help and the README promise:
 * lm bpb (bits per byte), rec test_ndcg@10, a probe acc */
const char *pr_grid_quality_metric(const char *task);

/* names of the built-in grids, NULL-terminated */
extern const char *const pr_grid_builtins[];
/* a grid from JSON text; -1 with err naming `what` and the key that is wrong.
 * Every key is checked against a scratch config, so a typo fails here, not
 * in the middle of a grid. */
int pr_grid_parse(pr_grid *g, const char *json, const char *what, pr_err *err);
/* a built-in grid by name, or a grid file by path (a name with no '/' or '.'
 * is a built-in); -1 with err */
int pr_grid_load(pr_grid *g, const char *name_or_path, pr_err *err);

/* a built-in grid's purpose, one line for --help; NULL for another name */
const char *pr_grid_purpose(const char *name);
/* the grid's axes in words, generated so --help cannot go stale:
 * "prism, linattn on parity; 2 seeds, 1000 steps" */
void pr_grid_describe(const pr_grid *g, char *out, size_t n);
/* the run folder of a variant: its name with every character other than
 * letters, digits, '_' and '-' made '-'. pr_grid_parse refuses two variants
 * whose folders are the same (ignoring case), naming both. */
void pr_grid_folder(char *out, size_t n, const char *variant);
/* a slice of the grid: only the variants named in the comma-separated
 * `variants` and the tasks in `tasks` (NULL: all), in the grid's order; -1
 * with err naming the option (--only, --tasks) and a name not in the grid */
int pr_grid_keep(pr_grid *g, const char *variants, const char *tasks, pr_err *err);

/* mean and sample standard deviation (n - 1; 0 for one value) of the finite
 * values among x[0..n); returns how many were finite */
int pr_grid_stats(const double *x, int n, double *mean, double *std);

/* a table cell for the finite values among x[0..seeds): "-" for none, the
 * value alone for one (one seed has no spread to show), "mean ± std" for
 * more, and "(k of n seeds)" after it when some seeds gave nothing */
void pr_grid_cell_text(const double *x, int seeds, char *buf, size_t size);

/* results: value[(v * n_tasks + t) * seeds + s], NAN for a cell with none */
typedef struct {
    const pr_grid *g;
    const char *metric[PR_GRID_MAX_TASKS];   /* each task's quality metric (acc, bpb, ...) */
    const double *value;
    /* seeds of (v, t) whose result is of a stale run (kept with --stale keep):
     * the tables mark them "stale config" */
    int stale[PR_GRID_MAX_VARIANTS][PR_GRID_MAX_TASKS];
    /* the finished cells by the precision each trained in (its config.json:
     * `auto` resolves by device and task, so one grid can hold several) */
    int precision_cells[PR_PREC_BF16 + 1];
} pr_grid_results;
/* the mark after a cell with stale seeds, and the note under a table with one */
#define PR_GRID_STALE_MARK "†"
#define PR_GRID_STALE_NOTE                                                                                   \
    PR_GRID_STALE_MARK " stale config: some of the cell's seeds ran under another config than the grid "    \
                       "gives them now, kept by --stale keep (prism ablate --dry-run names the keys)."
bool pr_grid_any_stale(const pr_grid_results *r);
/* "tf32 (162 cells), bf16 (108 cells)": the precisions the finished cells trained in */
void pr_grid_precision_text(const pr_grid_results *r, char *buf, size_t size);
void pr_grid_write_markdown(const pr_grid_results *r, FILE *f);
void pr_grid_write_csv(const pr_grid_results *r, FILE *f);
void pr_grid_write_json(const pr_grid_results *r, FILE *f);

/* ---- a grid's results on disk (lab/grid_report.c) */
/* ROOT/<variant folder>/<task>/s<seed>: a cell's run directory (pr_grid_folder) */
void pr_grid_cell_dir(char *out, size_t n, const char *root, const char *variant, const char *task, int seed);
/* ROOT/<stem>.md, .csv, .json (the tables), ROOT/<stem>.svg (the bar chart)
 * and ROOT/report<stem after "results">.html (the page: table, chart, every
 * task's curves read from the cells' run directories). stem is "results" or
 * "results-<metric>". Prints each path written; -1 after a message naming a
 * file that could not be written. */
int pr_grid_write_outputs(const pr_grid_results *r, const char *root, const char *stem);

/* ---- running a grid (lab/grid_run.c) ----
 * What `prism ablate` does with a grid, without its command line: every
 * (variant, task, seed) cell trained through the trainer in its own run
 * directory (pr_grid_cell_dir), resumably: a cell whose result.json is for
 * the same step budget is read, not rerun; one with a checkpoint but no
 * result continues from it (bit for bit); any other starts afresh. Either
 * only when the run in the folder was made under the config the grid gives
 * the cell now; a stale one goes by the plan's policy (below). Cells are
 * numbered in table order: variant, then task, then seed.
 *
 *     pr_grid_plan p = {.g = &g, .root = "runs/ablate-quick"};
 *     pr_grid_tally n;
 *     if (pr_grid_check_cells(&p, &err)) ...;              a bad --set, before any cell runs
 *     if (pr_grid_stale_report(&p, stderr)) ...;            cells whose config changed: p.stale says
 *     pr_grid_run(&p, &(pr_grid_exec){.dev = PR_CPU, .jobs = 2}, &n);
 *     pr_grid_collect(&p, value, &res);                     then pr_grid_write_outputs
 */
#define PR_GRID_MAX_JOBS 64

/* A stale cell: its folder holds a run (finished or not) made under another
 * config than the grid gives the cell now (lab/grid_stale.c). pr_grid_run
 * never reuses one silently: by default it fails the cell, naming the keys
 * (prism ablate refuses the whole run first); PR_STALE_RERUN moves the folder
 * aside to <folder>.stale-<N> (nothing is deleted) and trains the cell
 * afresh; PR_STALE_KEEP reads its result as it is, or continues its
 * checkpoint under the run's own config.json (with the grid's step budget),
 * and the tables mark it. */
typedef enum { PR_STALE_REFUSE, PR_STALE_RERUN, PR_STALE_KEEP } pr_stale_policy;

typedef struct {
    const pr_grid *g;                 /* its steps (when set) are every cell's budget */
    const char *root;                 /* the grid's folder */
    const char *const *sets;          /* key=value for every cell after the grid's own (ablate's --set) */
    int n_sets;
    const char *metric;               /* tabulate this metric of result.json (NULL: each task's quality metric) */
    pr_stale_policy stale;            /* what pr_grid_run does with a stale cell (below) */
} pr_grid_plan;

int pr_grid_cells(const pr_grid *g);   /* variants x tasks x seeds */
/* cell i's variant, task and seed index (from 0; its run folder says s<seed + 1>) */
void pr_grid_cell_axes(const pr_grid *g, int i, int *v, int *task, int *seed);
/* "prism parity s1" */
void pr_grid_cell_label(const pr_grid *g, int i, char *out, size_t n);
/* cell i's run directory (dir NULL: not wanted) and its config: the task's
 * preset (or the variant's), the grid's set, the variant's set, the plan's
 * sets, the grid's steps and the seed (data and init); a checkpoint every
 * fifth of the steps. -1 with err naming the grid and variant, or --set. */
int pr_grid_cell_open(const pr_grid_plan *p, int i, char *dir, size_t n, pr_config *c, pr_train_opts *o,
                      pr_err *err);
/* every task's first cell's config, so a bad --set fails before any cell runs; -1 with err */
int pr_grid_check_cells(const pr_grid_plan *p, pr_err *err);
/* leaves out of g (the plan's grid) the tasks the trainer cannot open,
 * saying why on stderr; returns the tasks kept */
int pr_grid_drop_unavailable(const pr_grid_plan *p, pr_grid *g);

/* a finished cell's dir/result.json: false when absent, for another step
 * budget or without the task's quality metric. *value is the metric `want`
 * (NAN when the cell does not report it), or with want NULL the task's
 * quality metric, named in *metric. */
bool pr_grid_read_result(const char *dir, int64_t steps, const char *task, const char *want, const char **metric,
                         double *value);
/* {"steps", "metrics": {...}, "tokens_per_s", "params"} into dir/result.json, atomically */
int pr_grid_write_result(const char *dir, const pr_train_result *res, pr_err *err);

/* what a run would do with a cell (the index into the counts of pr_grid_dry_run) */
typedef enum { PR_CELL_BAD, PR_CELL_DONE, PR_CELL_RESUME, PR_CELL_NEW, PR_CELL_STALE } pr_cell_state;
/* cell i's state, its directory into dir, and in words into what: "done, acc
 * 0.5", "resumes from step 3 of 6", "new, 6 steps", "bad config: ...",
 * "stale: prism.conv_width 4 -> 5 (1 key differs)" */
pr_cell_state pr_grid_cell_state(const pr_grid_plan *p, int i, char *dir, size_t ndir, char *what, size_t nwhat);
/* ablate --dry-run: a line per cell (label, state, folder) and the counts
 * to f, reading the folder only; -1 when a cell's config is bad */
int pr_grid_dry_run(const pr_grid_plan *p, FILE *f);

/* ---- stale cells (lab/grid_stale.c) ----
 * How a run on disk differs from a config: n keys (0: the folder holds no
 * run, or one of this config), the first three in text with the count,
 * "prism.conv_width 4 -> 5, data_version 1 -> 2 (2 keys differ)". Keys are
 * named as --set names them (model keys bare, training keys train.<key>);
 * data_version is the task generator's (pr_task_data_version) against the
 * run's manifest.json (none recorded: 1). Keys that change no result are
 * left out (grid_stale.c lists them and why); a config.json that cannot be
 * read is one difference. precision: what the run trained in (its
 * config.json's resolved train.precision; -1 with no run or an unreadable
 * file), which the grid's tables count. */
typedef struct {
    int n;
    char text[640];
    int precision;
} pr_cell_diff;
void pr_run_config_diff(const char *dir, const pr_config *c, const pr_train_opts *o, pr_cell_diff *d);
/* cell i's folder (into dir) against its config now; -1 with err for a bad config */
int pr_grid_cell_diff(const pr_grid_plan *p, int i, char *dir, size_t ndir, pr_cell_diff *d, pr_err *err);
/* the stale cells of the grid, a line "  <folder>: <differences>" each to f
 * (NULL: none written); returns how many */
int pr_grid_stale_report(const pr_grid_plan *p, FILE *f);
/* renames dir to dir.stale-<N>, the first N free (named in moved); -1 with err */
int pr_grid_move_aside(const char *dir, char *moved, size_t n, pr_err *err);

typedef struct {
    pr_device dev;
    /* cells at a time: 1 in this process; more in that many forked worker
     * processes, which claim the next unclaimed cell from a counter in shared
     * memory, so a slow cell holds up no other (at most PR_GRID_MAX_JOBS).
     * With several, this process must not have touched CUDA: a forked child
     * cannot use a context its parent initialised. */
    int jobs;
    /* with jobs > 1: threads of this process instead of worker processes,
     * claiming cells the same way. On CUDA each thread has its own stream
     * and pool of device memory (pr_device_thread_begin), so the cells'
     * kernels overlap on one GPU (separate processes only take turns); the
     * cells' results are the same bits either way. A fatal error stops only
     * its thread, which counts its cell as failed (a GPU fault breaks the
     * process's CUDA context, so every thread's next call fails too, where
     * worker processes would lose one cell). This process may have used
     * CUDA already. */
    bool threads;
    /* in each worker (process or thread) before its first cell (NULL:
     * nothing); prism ablate gives a worker its GPU or its share of the
     * cores there */
    void (*worker_setup)(void *user, int worker, int jobs);
    void *user;
} pr_grid_exec;

typedef struct { int ran, reused, failed; } pr_grid_tally;

/* trains or reads every cell, with a progress line on stderr (redrawn on a
 * terminal, a line per finished cell otherwise); a cell that fails, or a
 * worker that dies in one, is named on stderr and counted as failed (its
 * checkpoints stay, so the next run resumes it). Workers die with this
 * process. The caller holds the folder (prism ablate locks
 * ROOT/.ablate.lock). -1 when the workers could not start. */
int pr_grid_run(const pr_grid_plan *p, const pr_grid_exec *x, pr_grid_tally *tally);
/* every cell's result as on disk, the same whichever process ran it:
 * value[i] (pr_grid_cells of them) for cell i, NAN for one unfinished, and
 * res (its g, value and each task's metric name, "-" where none) ready for
 * the tables; -1 after a message when p->metric names a metric that no
 * finished cell reports */
int pr_grid_collect(const pr_grid_plan *p, double *value, pr_grid_results *res);

/* ---- SVG plots (lab/plot.c) ----
 * line plots and grouped bar charts as standalone SVG files
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

/* s written with the five XML specials (& < > " ') escaped: SVG and HTML text */
void pr_xml_text(FILE *f, const char *s);

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

/* ---- runs read back (lab/runs.c) ----
 * a run directory's metrics.jsonl read back as curves, for
 * `prism plot` and the report pages of ablate and compare.
 *
 * The trainer writes a line per logged step,
 *   {"step":10,"loss":0.69,"lr":0.001,"grad_norm":0.4,"tokens":5120,"tokens_per_s":812.5,"time_s":6.3}
 * and a line per evaluation, {"step":100,"eval":{"acc":0.51,"loss":0.69}}.
 * Each numeric key of a step line is a training curve (loss, lr, ...), each
 * key of an eval object an evaluation curve (acc, loss, bpb, ...); a null
 * (a non-finite value) is a NAN point, which breaks the line. tokens and
 * time_s are the x axes (pr_run_x), not curves. */

typedef struct {
    char name[48];
    bool eval;              /* from an "eval" object */
    int n, cap;
    double *step, *value;   /* n points in file order */
} pr_curve;

typedef enum { PR_X_STEP, PR_X_TOKENS, PR_X_TIME } pr_x_kind;

typedef struct {
    char dir[1024];
    int n_curves, cap;
    pr_curve *curves;
    /* the clock of the step lines: step -> tokens and seconds (a resumed
     * run's time_s starts again at 0: it is added to the time before) */
    int n_clock, clock_cap;
    double *clock_step, *clock_tokens, *clock_time;
} pr_run;

/* DIR/metrics.jsonl; -1 with err: "DIR: no metrics.jsonl (not a run
 * directory?)", or "DIR/metrics.jsonl:LINE: ..." for a line that is not a
 * JSON object with an integer "step". A last line without its newline (a
 * run being written) is left out. *r is zeroed first; pr_run_free it. */
int pr_run_read(pr_run *r, const char *dir, pr_err *err);
void pr_run_free(pr_run *r);

/* the curve named `name`, training (eval false) or evaluation; NULL if none */
const pr_curve *pr_run_curve(const pr_run *r, const char *name, bool eval);

/* "loss, lr, grad_norm, tokens_per_s, acc (eval), ..." appended to out: the
 * distinct curve names of n runs, for a message */
void pr_runs_list_metrics(const pr_run *runs, int n, char *out, size_t size);

/* the x of a step in the unit asked for: the step itself, tokens (from the
 * step lines' tokens, proportional to the step) or seconds (interpolated
 * between step lines). false when the run's lines do not carry it. */
bool pr_run_has_x(const pr_run *r, pr_x_kind kind);
double pr_run_x(const pr_run *r, double step, pr_x_kind kind);

/* trailing mean over `window` points of y[0..n) into out (window <= 1: a copy);
 * non-finite points are skipped and stay as they are */
void pr_smooth(const double *y, int n, int window, double *out);

/* ---- runs in one plot (lab/plot_runs.c): `prism plot` ---- */
/* whether the run has the metric as a training curve or an evaluation */
bool pr_run_has_metric(const pr_run *r, const char *metric);
typedef struct {
    const char *metric;   /* a training curve (a line, its evaluations as dots), or one only
                           * evaluated (a line through its dots) */
    pr_x_kind x;
    int smooth;           /* a trailing mean over this many logged points (1: none); the dots stay as measured */
    int y_scale;          /* 0 auto (log where the values span more than 1.5 decades, all positive), 1 log, 2 linear */
    const char *title;    /* NULL: "<metric> by <x>" and the smoothing */
} pr_runs_plot_opts;
/* the metric of every run that has it (the others left out), run k named
 * in the legend by paths[k] less the leading directories all the paths
 * share, saved as an SVG at out; *ylog: the scale drawn. -1 with err when no
 * run has the metric or the file cannot be written. */
int pr_runs_plot(const pr_runs_plot_opts *o, const pr_run *runs, const char *const *paths, int n, const char *out,
                 bool *ylog, pr_err *err);

/* ---- report pages (lab/report.c) ----
 * report pages: one self-contained HTML file per grid
 * (ablate) or comparison (compare) that opens in any browser with no network
 * and no script: a table, charts and training curves as inline SVG
 * (the plots above), styled so that the page fits a 1280-pixel window (every
 * picture scales down to the page's width).
 *
 *     pr_report_begin(f, "ablate quick", "models: prism, linattn; ...");
 *     pr_report_heading(f, "Results");
 *     pr_report_table(f, 3, 2, cells);
 *     pr_report_bars(f, &bars, &err);
 *     pr_report_curves(f, "loss", false, panels, n, &err);
 *     pr_report_end(f);
 * The page is well-formed XML as well as HTML. */

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

/* ---- benchmark timing (lab/bench_util.c) ----
 * what the benchmarks share: the median time of a
 * function over repetitions (CUDA events on the context's stream for a
 * device run, the wall clock on the CPU) and a prepared op node to rerun. */

typedef void (*pr_bench_fn)(void *arg);

/* the median of x[0..n) (sorts x) */
double pr_bench_median(double *x, int n);
/* median milliseconds of fn(arg) over reps runs, after warm untimed runs and a sync */
double pr_bench_time_ms(pr_ctx *ctx, pr_device dev, pr_bench_fn fn, void *arg, int warm, int reps);

/* one op's kernel, forward or backward, on a prepared node: nothing allocated, nothing taped */
typedef struct {
    pr_ctx *ctx;
    pr_node n;
    bool backward;
} pr_bench_node;

void pr_bench_run_node(void *arg);   /* arg: a pr_bench_node */

/* ---- kernel speed against the machine's ceilings (lab/bench_ops.c) ----
 * `prism bench ops`: the copy bandwidth (and on CUDA a bare cuBLAS GEMM),
 * then silu, add, swiglu, softmax, layernorm, rmsnorm and the fused residual
 * add + rmsnorm forward and backward as a fraction of the copy's bytes per
 * second, and pr_matmul as a fraction of the bare GEMM, a row each; on CUDA
 * each again in bf16. */
#define PR_BENCH_OPS_MAX_ROWS 40
typedef struct {
    char name[48];
    double ms;           /* median */
    double rate;         /* GB/s (the copy, the memory-bound ops) or TFLOP/s (the products) */
    double of_ceiling;   /* a fraction of the copy or of the bare GEMM; NAN: none to compare with */
    bool low;            /* judged and under its target (70% of copy, 90% of cuBLAS) */
} pr_bench_ops_row;
typedef struct {
    int n, low;
    bool judged;         /* the targets apply to the GPU kernels at full size only */
    pr_bench_ops_row row[PR_BENCH_OPS_MAX_ROWS];
} pr_bench_ops_result;
/* every row timed on dev and printed to out: 256 MiB tensors and 8192^3
 * products on CUDA, 16 MiB and 1024^3 on the CPU, or with quick [64,1024]
 * and 64^3 and one repetition (a check that each kernel runs); reps 0: the
 * default (20 on CUDA, 5 on the CPU) */
void pr_bench_ops_run(FILE *out, pr_device dev, bool quick, int reps, pr_bench_ops_result *res);

/* the benchmarks skip a model whose step would keep more than this for the
 * backward by a known estimate (atlas's per-token memories, hstu's T x T
 * scores: pr_mixer_big_step_bytes) */
#define PR_BENCH_MAX_STEP_BYTES (64.0 * (1 << 30))

/* ---- one block's time (lab/bench_block.c) ---- */
typedef struct {
    double fwd_s, fwd_bwd_s;   /* medians */
    int64_t params;            /* the block's (the model's less its embedding and final norm) */
    double skipped_bytes;      /* > 0: not run, its step would keep this much (PR_BENCH_MAX_STEP_BYTES) */
} pr_bench_block_time;
/* one pre-norm block of config (resolved as the preset sizes it, one
 * layer) on random input [B,T,D] on dev: forward alone and forward +
 * backward (every parameter's and the input's gradient), medians of iters
 * runs after 2 warm-up runs, in the context precision given. 0, or 1 when
 * the size cannot fit and nothing ran (out->skipped_bytes). */
int pr_bench_block_one(const pr_config *config, int64_t B, int64_t T, pr_device dev, pr_precision precision, int iters,
                       pr_bench_block_time *out);

/* tokens/s of training `mixer` on the base config at sequence length T,
 * tokens/T sequences a step (lab/throughput.c): the median of `steps` timed
 * steps after `warmup` untimed ones; *params its parameter count (-1 when
 * the config does not hold). NAN, after a message, when the config does not
 * hold or the step would not fit (PR_BENCH_MAX_STEP_BYTES). With a
 * communicator, this rank's share of the batch, all-reduced; the tokens
 * counted are the whole batch's (every rank's). breakdown: the folder for one
 * profiled step's table and its tensors' bytes by kind (pr_step_memory),
 * breakdown-<mixer>-T<T>.md (NULL: none; one process only).
 * precision: the context's (f32 weights and AdamW state in every one; bf16
 * is autocast, autograd/autograd.h). *peak_bytes: the step's peak memory
 * (CUDA: the caching allocator's high-water mark of live bytes from the
 * model's creation on; the CPU: the arenas', parameters, grads, optimizer
 * state and the step arena's peak; 0 when nothing ran). cuda_graph: the
 * step captured into a CUDA graph after the warm-up (two eager steps at
 * least) and replayed, as train.cuda_graph=on trains; NAN after a message
 * where the trainer's plan or the capture refuses it (the CPU included) */
double pr_bench_throughput_one(const pr_config *base, const char *mixer, int64_t T, int64_t tokens, pr_device dev,
                               int warmup, int steps, pr_precision precision, bool cuda_graph, pr_comm *comm,
                               const char *breakdown, int64_t *params, size_t *peak_bytes);

/* ---- bench throughput's table (lab/throughput.c) ----
 * Every (model, length) of a `prism bench throughput` run, [model * n_lens
 * + length]: the caller fills what to measure, pr_throughput_run the rest.
 * With ranks > 1 a cell also holds the one-rank figure of the same run
 * (every rank alone on the whole batch) and the table gains its columns
 * and the scaling efficiency; with one rank and several lengths, the last
 * length's tokens/s over the first's (1.000: flat in T). */
#define PR_THROUGHPUT_MAX_MODELS 16
#define PR_THROUGHPUT_MAX_LENS 32
typedef struct {
    const char *names[PR_THROUGHPUT_MAX_MODELS];   /* mixers, or sasrec */
    int n_models, n_lens, warmup, steps;
    int64_t lens[PR_THROUGHPUT_MAX_LENS], tokens;  /* tokens: a step's, every rank's together */
    const char *preset;                            /* for the plot's title */
    pr_precision prec;
    bool graph;                                    /* CUDA graphs asked (train.cuda_graph not off) */
    /* measured */
    int ranks;
    double tps[PR_THROUGHPUT_MAX_MODELS * PR_THROUGHPUT_MAX_LENS];    /* NAN: did not run */
    double tps1[PR_THROUGHPUT_MAX_MODELS * PR_THROUGHPUT_MAX_LENS];   /* one rank's (ranks > 1) */
    int64_t params[PR_THROUGHPUT_MAX_MODELS];
    size_t peak[PR_THROUGHPUT_MAX_MODELS * PR_THROUGHPUT_MAX_LENS];   /* bytes; 0: unknown */
} pr_throughput_table;
/* measures every cell of t on the base config (pr_bench_throughput_one),
 * with comm's ranks when given (NULL: one process), and prints the
 * precision line and the Markdown table to out as it goes, a cell at a
 * time (NULL: silent, as ranks other than 0 are). With t->graph a model's
 * steps are captured where the trainer's plan for opts (the train options
 * the --sets made) would capture them, else timed eagerly, saying why on
 * stderr; with comm never (the plan refuses data-parallel steps), the
 * one-rank cells included, so that the efficiency compares eager with eager. breakdown: the folder of each cell's profiled step (NULL: none;
 * one process only). The number of cells that did not run. */
int pr_throughput_run(pr_throughput_table *t, const pr_config *base, const pr_train_opts *opts, pr_device dev,
                      pr_comm *comm, const char *breakdown, FILE *out);
/* DIR/throughput.csv (a row per cell; with ranks > 1 the one-rank figure
 * and the efficiency too) and DIR/throughput.svg (tokens/s against T, a
 * line per model, its size in the legend); 0, or -1 with err */
int pr_throughput_write(const pr_throughput_table *t, const char *dir, const char *dev_name, pr_err *err);
/* each cell's DIR/breakdown-<model>-T<T>.md that exists, printed to out after a blank line */
void pr_throughput_print_breakdowns(FILE *out, const pr_throughput_table *t, const char *dir);

/* ---- the fused ops at model sizes (lab/bench_fused.c) ----
 * Each op runs once to record its node, then the node's forward and its
 * backward are timed (median ms of reps after one warm-up): rate is TFLOP/s
 * for attention (forward 2 B H T^2 D, the causal half of its two products;
 * backward 2.5 times that), GB/s of the fewest bytes moved for the scan.
 * Lines to out, and on CUDA the allocator's peak after each. */
typedef struct { double fwd_ms, bwd_ms, fwd_rate, bwd_rate; } pr_bench_fused_time;
/* causal attention, q, k, v [B,T,H,D]: fp32 into t[0] and, on CUDA, TF32
 * into t[1], bf16 data into t[2]; returns the rows filled */
#define PR_BENCH_ATT_ROWS 3
int pr_bench_attention(FILE *out, pr_device dev, int64_t B, int64_t T, int64_t H, int64_t D, int reps,
                       pr_bench_fused_time t[PR_BENCH_ATT_ROWS]);
/* the selective scan at [B,T,D], N states, with z, delta_bias and h0 */
void pr_bench_selective_scan(FILE *out, pr_device dev, int64_t B, int64_t T, int64_t D, int64_t N, int reps,
                             pr_bench_fused_time *t);

#ifdef PRISM_HAVE_CUDA
/* A fused op's forward: runs the op on arg's inputs and returns its tape node. */
typedef pr_node *(*pr_bench_fwd_fn)(pr_ctx *ctx, void *arg);
/* median ms of the forward, and of the forward plus the op's CUDA backward on
 * that node seeded with dout (one per output), over reps runs after warm
 * untimed ones; CUDA events on the context's stream, the step reset after each */
void pr_bench_fused_ms(pr_ctx *ctx, pr_bench_fwd_fn fwd, void *arg, pr_tensor *const *dout, int warm, int reps,
                       double *fwd_ms, double *fb_ms);
/* bench recurrence's rows of TTT-MLP and Titans (lab/bench_ttt2.c), after
 * TTT-Linear's: at B, T, H with d = 64 (TTT-MLP hidden 256), the dual form
 * (mini-batch or chunk 16) and token by token, forward and forward + the
 * CUDA backward, printed */
void pr_bench_ttt2(pr_ctx *ctx, pr_arena *ar, int64_t B, int64_t T, int64_t H, int warm, int reps, bool mlp,
                   bool titans);
#endif

/* ---- the recurrence kernels' speed (lab/bench_recurrence.c) ----
 * `prism bench recurrence`: on the GPU every rule's per-token and chunked
 * forms, forward and forward+backward, f32 and bf16 data, at the issue's
 * sizes (B=8 T=2048 and B=2 T=8192, H=16 K=V=128, prism_core at L=2) or one
 * --shape, with TFLOP/s against a bare TF32 GEMM, GB/s, the ratio to fla's
 * bf16 time, the chunked form's error against the per-token one, each
 * form's plan and step memory; TTT-Linear, TTT-MLP and Titans after them.
 * On the CPU the reference forms at B=1 T=2048 H=4 K=V=64, seconds, best of
 * the repetitions. The options are the command line's, with the device's
 * defaults filled in (tools/bench_recurrence.c). */
typedef struct {
    bool cuda;
    pr_dtype dt;
    int reps, warm;
    int sizes;          /* GPU: bit 0 size 1, bit 1 size 2, bit 2 the --shape size */
    int nshape;
    int64_t shape[5];   /* --shape B,T,H,K,V */
    unsigned rules;     /* bit r: rule r; bits PR_NRULES..+2: ttt_linear, ttt_mlp, titans */
    bool no_token, fp32;
    bool bf16_staged;   /* GPU: each bf16 row again with every bf16 tensor staged (force bf16_staged=on) */
    int gpu_dtypes;     /* GPU: bit 0 f32, bit 1 bf16 */
    int nch;
    int64_t chunks[4];
    int nfla_gla;
    double fla_gla[2];  /* --fla-gla: fla's chunk_gla f+b ms at sizes 1 and 2 */
    pr_rec_force force; /* --force */
    pr_ttt_bwd ttt_bwd; /* --ttt-bwd */
    int64_t cpu_T;      /* the CPU's T (0: 2048); no option sets it, a test does */
    int extras;         /* --extras: prism_core's extra writes (0: 1, PRISM's paper form at L = 2) */
} pr_bench_rec_opts;

/* one rule on the CPU: best seconds of the per-token forward and backward,
 * then the chunked form's (INFINITY: not run); the step arena's bytes after
 * a no-grad and a recorded forward of each form, in the same order */
typedef struct {
    bool ran;
    double seconds[4];
    size_t step_bytes[4];
} pr_bench_rec_cpu_row;
/* the CPU table printed (and into rows[rule] where rows is not NULL, PR_NRULES of them); 0 */
int pr_bench_recurrence_cpu(const pr_bench_rec_opts *o, pr_bench_rec_cpu_row *rows);
#ifdef PRISM_HAVE_CUDA
/* the GPU table printed; 0 */
int pr_bench_recurrence_cuda(const pr_bench_rec_opts *o);
#endif

/* ---- golden checks (lab/golden_ops2.c) ----
 * what golden-check's checks share (loading a file's
 * inputs, comparing with its references, seeding the backward, catching a
 * check's fatal errors) and the per-op checkers of the fused ops of
 * ops2.safetensors (attention, selective_scan, ...). lab/golden_check.c runs the
 * recurrences with these helpers, then every entry of pr_golden_ops whose
 * tensors are in the file. */

/* one check: reads "<op>.<name>" tensors, keeps the worst relative error */
typedef struct {
    const pr_safetensors *st;
    const char *op;
    pr_ctx *ctx;
    pr_device dev;
    pr_dtype dt;
    bool verbose;
    const char *form;   /* the form run, for --verbose; NULL for an op of one form */
    int forms, chunk;   /* the recurrences: bit 0 per-token, bit 1 chunked form; its chunk */
    pr_rec_force force; /* the recurrences' forcing fields (pr_golden_opts.force) */
    double worst;
    int64_t compared;   /* reference elements compared: a check of none has checked nothing */
} pr_golden_run;

typedef struct {
    const char *name;
    void (*fn)(pr_golden_run *g);   /* forward, backward, compare */
} pr_golden_op;

extern const pr_golden_op pr_golden_ops[];
extern const int pr_golden_n_ops;

/* true when the file holds a tensor named "<name>.*" */
bool pr_golden_present(const pr_safetensors *st, const char *name);
/* the file's "<op>.<name>"; NULL if absent */
pr_tensor *pr_golden_ref(const pr_golden_run *g, const char *name);
/* in[i] = the file's names[i] on the run's device and dtype, requiring
 * grad (NULL if absent), for i < n */
void pr_golden_inputs(const pr_golden_run *g, const char *const *names, int n, pr_tensor **in);
/* compares every out[i] with the file's outs[i] (error max|got - ref| /
 * max|ref|, the worst kept in g->worst; a missing reference is fatal), runs the backward of
 * sum_i(out[i] * the file's d<outs[i]>), then compares the grad of every
 * input present with the file's d<ins[i]> */
void pr_golden_compare_all(pr_golden_run *g, pr_tensor *const *out, const char *const *outs, int n_out,
                           pr_tensor *const *in, const char *const *ins, int n_in);
/* run check(g) on g->op; returns its worst error (inf after a fatal error,
 * whose message goes to why) */
double pr_golden_try(pr_golden_run *g, void (*check)(pr_golden_run *g), char *why, size_t why_n);

/* ---- golden-check (lab/golden_check.c) ----
 * Every recurrence rule, TTT-Linear and fused op present in a reference
 * file runs forward and backward, seeded with the file's upstream
 * gradients, and every output, final state and gradient is compared with
 * the file's: a line per rule, "<rule> ok|FAIL max_rel_err=<e>", then "N
 * passed, M failed". A rule whose references are missing, empty or not
 * float64 fails, naming the tensor; a file that holds nothing known, or
 * nothing that runs with these options, fails. */
typedef struct {
    pr_device dev;
    pr_dtype dt;     /* bf16: the linear rules on bf16 data, the tolerance in units of bf16 rounding */
    int forms;       /* bit 0: per-token form, bit 1: chunked form */
    int chunk;
    double tol;      /* 0: pr_golden_default_tol */
    bool verbose;    /* every tensor's error */
    bool tf32;       /* CUDA: ctx->matmul_tf32 = 1 */
    pr_rec_force force; /* CUDA: the chunked plan's forcing fields for the linear rules (--force) */
} pr_golden_opts;
/* 1e-9 in f64, 1e-4 in f32, 6 x 2^-11 with TF32; bf16: 4 x 2^-8 (6 with TF32) */
double pr_golden_default_tol(const pr_golden_opts *o);
/* the file checked, lines to out (a file that cannot be read: a message on
 * stderr); the exit status: 0 all passed, 1 otherwise */
int pr_golden_check_file(FILE *out, const char *path, const pr_golden_opts *o);
/* a reference file of the linear rules at sizes B,T,H,K,V,L (size[6]),
 * computed by the CPU per-token form in f64; 0, or 1 after a message */
int pr_golden_make_reference(FILE *out, const char *path, const int64_t *size);

/* ---- what `prism inspect` measures (lab/inspect.c) ----
 * Each parameter's gradient norm per step, kept as an array
 * norms[steps][n_params] (one row per step; losses[steps] beside it), shown
 * as a table (the first steps and the last), a CSV file (step, loss, a
 * column per parameter) and an SVG plot (log scale, one series per
 * parameter name over the layers: layers.*.mixer.q_proj). And the numerical
 * rank of every token's write B_t (singular values above
 * PR_INSPECT_RANK_TOL of the largest), read off the recurrence nodes a
 * forward recorded on ctx's tape: per layer and head, then as a histogram
 * (the PRISM paper's Rank-L claim: 1 for gdn, up to L for prism). */
#define PR_INSPECT_RANK_TOL 1e-6
#define PR_INSPECT_MAX_RANK 257

typedef struct {
    int64_t hist[PR_INSPECT_MAX_RANK];   /* tokens with each rank, over every layer and head */
    int max_possible, layers;            /* layers 0: no recurrence on the tape */
} pr_rank_summary;

/* row[i]: the L2 norm of parameter i's grad (0 without one) */
void pr_inspect_grad_norms(const pr_params *r, double *row);
/* steps numbered from first */
void pr_inspect_print_norms(FILE *out, const pr_params *r, const double *norms, const double *losses, int steps,
                            int64_t first);
/* 0, or -1 with err set (the file cannot be written) */
int pr_inspect_write_norm_csv(const char *path, const pr_params *r, const double *norms, const double *losses,
                              int steps, int64_t first, pr_err *err);
int pr_inspect_write_norm_plot(const char *path, const char *model, const pr_params *r, const double *norms,
                               int steps, int64_t first, pr_err *err);
/* prints each layer's and head's counts to out and sums them into sum */
void pr_inspect_ranks(FILE *out, const pr_ctx *ctx, pr_rank_summary *sum);
void pr_inspect_rank_histogram(FILE *out, const char *model, const pr_rank_summary *sum);

/* What inspect's steps run on: a fresh model on the CPU taking plain SGD at
 * a constant rate on one fixed batch, or a training run continued from its
 * latest checkpoint with its own task, optimizer, schedule and clipping
 * (nothing written to the run). Step i counts from the session's
 * first_step (0, or the checkpoint's step). */
typedef struct {
    pr_tensor *ids, *targets;   /* LM: ids, targets [B,T] (the next token); rec: items [B,T], target [B] */
} pr_inspect_batch;

typedef struct {
    pr_config cfg;
    pr_train_opts train;   /* a run's options */
    pr_model *m;
    pr_optim *opt;
    pr_task *task;         /* a run's batches; NULL: the one fixed batch b */
    pr_arena *data;
    pr_inspect_batch b;
    pr_schedule sched;
    double clip;           /* max global grad norm; 0: none */
    int64_t first_step;
} pr_inspect_session;

/* B sequences of T tokens drawn from c's seed (rec: items 1..n_items), or
 * text_file's first B*(T+1) bytes (an LM of bytes, vocab >= 256; fatal
 * otherwise); -1 with err naming the file when it cannot be read or is too
 * short */
int pr_inspect_make_batch(pr_inspect_batch *b, const pr_config *c, int64_t B, int64_t T, const char *text_file,
                          pr_arena *a, pr_err *err);
/* a fresh model of c: SGD at lr over `steps` on one batch (pr_inspect_make_batch); -1 with err */
int pr_inspect_open_fresh(pr_inspect_session *s, const pr_config *c, double lr, int steps, int64_t B, int64_t T,
                          const char *text_file, pr_err *err);
/* run_dir's config, task and latest checkpoint (weights, optimizer state
 * and ctx's RNG); -1 with err */
int pr_inspect_open_run(pr_inspect_session *s, const char *run_dir, pr_ctx *ctx, pr_err *err);
void pr_inspect_session_free(pr_inspect_session *s);
/* step i's loss recorded on ctx and its backward (the tape stays for a
 * look); every parameter's grad norm into norms_row; returns the loss */
double pr_inspect_forward_backward(pr_ctx *ctx, const pr_inspect_session *s, int i, double *norms_row);
/* step i's update at the schedule's rate (clipped as the run clips), the
 * grads zeroed and the step reset */
void pr_inspect_update(pr_ctx *ctx, pr_inspect_session *s, int i);
/* the batch (b may be NULL), every parameter and its grad, and every
 * recorded op's outputs and their grads as safetensors (metadata: model,
 * step); *n_tensors written; -1 with err */
int pr_inspect_dump(const char *path, const pr_ctx *ctx, const pr_model *m, const pr_inspect_batch *b, int step,
                    int *n_tensors, pr_err *err);

/* ---- what `prism compare` writes (lab/compare.c) ----
 * One row per model, in the order given; ok false: its run failed (the row
 * says so, and the report's bars leave it out). Peak memory is the device
 * allocator's on the GPU, the step arena's on the CPU (dev says which). */
#define PR_COMPARE_MAX_MODELS 16

typedef struct {
    const char *name, *metric;   /* the model; the quality metric's name ("-": none found) */
    double quality, tokens_per_s, peak_mib;
    int64_t params;
    bool ok;
} pr_compare_row;

/* what compare gives every model: the task's preset, the model, each set
 * (as a grid's), the step budget (0: the task's), lm's text file (NULL:
 * the default) and the seed of data and init */
typedef struct {
    const char *task, *data, *const *sets;
    int n_sets, steps;
    uint64_t seed;
} pr_compare_setup;
/* one model's config, in prism train's order; -1 with err naming what is wrong */
int pr_compare_config(const pr_compare_setup *s, const char *model, pr_config *c, pr_train_opts *o, pr_err *err);
/* trains row->name in root/<name> (replacing a run there) and fills the row:
 * quality, tokens/s, parameters, peak memory, ok; a failure is said on
 * stderr and leaves row->ok false */
void pr_compare_run_row(pr_compare_row *row, const pr_compare_setup *s, const char *root, pr_device dev);
/* the task's quality metric (pr_grid_quality_metric) among a run's final
 * metrics: its name, its value in *value; "-" and NAN when absent */
const char *pr_compare_quality(const pr_metrics *m, const char *task, double *value);
/* the table as Markdown, or as CSV */
void pr_compare_table(FILE *f, const pr_compare_row *rows, int n, bool csv, pr_device dev);
/* the same to a file; 0, or -1 with err set */
int pr_compare_write_table(const char *path, const pr_compare_row *rows, int n, bool csv, pr_device dev, pr_err *err);
/* the report page at path: the table, the bars, and the curves of the runs
 * in root/<model> (steps: each model's budget, for the lead); 0, or -1 */
int pr_compare_write_report(const char *path, const char *root, const char *task, int64_t steps,
                            const pr_compare_row *rows, int n, pr_device dev, pr_err *err);

#endif
