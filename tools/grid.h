/* tools/grid.h: experiment grids for `prism ablate`: the axes (variants of a
 * model, tasks, seeds, a step budget), read from a JSON file in the config
 * format or taken from a built-in grid, and the results table (mean and
 * sample standard deviation over seeds per variant x task) as Markdown, CSV
 * and JSON. (ablate also draws the table as a bar chart, DIR/results.svg,
 * through tools/plot.h.)
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
#ifndef PR_GRID_H
#define PR_GRID_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "train/train.h"

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

/* results: value[(v * n_tasks + t) * seeds + s], NAN for a cell with none */
typedef struct {
    const pr_grid *g;
    const char *metric[PR_GRID_MAX_TASKS];   /* each task's quality metric (acc, bpb, ...) */
    const double *value;
} pr_grid_results;
void pr_grid_write_markdown(const pr_grid_results *r, FILE *f);
void pr_grid_write_csv(const pr_grid_results *r, FILE *f);
void pr_grid_write_json(const pr_grid_results *r, FILE *f);

#endif
