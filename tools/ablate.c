/* tools/ablate.c: `prism ablate`: every (model or variant) x task x seed cell
 * of a grid (tools/grid.h) trained through the trainer library, each in its
 * own run directory, then a table of mean ± std over seeds.
 *
 * Resumable: a cell whose run directory holds result.json for the same step
 * budget is read, not rerun; one with a checkpoint but no result continues
 * from it (the trainer's resume, bit for bit); any other starts afresh. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "models/models.h"
#include "tools/grid.h"
#include "tools/tools.h"
#include "train/train.h"

static void ablate_usage(FILE *f)
{
    fprintf(f,
            "usage: prism ablate --grid NAME|FILE [--seeds N] [--steps N] [--device auto|cpu|cuda]\n"
            "                    [--out DIR] [--set key=value]...\n\n"
            "Trains every (model or variant) x task x seed cell of a grid, each in its own run\n"
            "directory DIR/<model>/<task>/s<seed> (DIR defaults to runs/ablate-<grid>), and prints\n"
            "a Markdown table of the mean ± sample std over seeds of each task's quality metric\n"
            "(probes: acc; rec: test_ndcg@10; lm: bpb), also written as DIR/results.md, .csv and .json.\n"
            "Run it again to resume: finished cells are read, not rerun; an interrupted cell\n"
            "continues from its latest checkpoint (train.ckpt_every defaults to a fifth of the\n"
            "steps here). A task the trainer cannot open is left out, saying why.\n\n"
            "Built-in grids:\n"
            "  probe           every mixer x the nine probes, 3 seeds\n"
            "  prism-ablation  PRISM full, L=0, L=1, gelu off, shortconv off, gain off on parity,\n"
            "                  local_xor and rec, 3 seeds\n"
            "  rec             every mixer, and SASRec, on rec, 3 seeds\n"
            "  quick           prism, linattn, gdn on parity and local_xor at 32 tokens, 2 seeds,\n"
            "                  300 steps (a few minutes on two CPU cores)\n\n"
            "A grid file is JSON: {\"name\": \"mine\", \"models\": [\"prism\", \"gdn\"],\n"
            "\"variants\": [{\"name\": \"prism-L1\", \"set\": {\"mixer\": \"prism\", \"prism.L\": 1}}],\n"
            "\"tasks\": [\"parity\"], \"seeds\": 2, \"steps\": 300, \"set\": {\"train.batch\": 16}}.\n"
            "Keys in `set` are model keys (prism model --help), train.<key>, rec.data or\n"
            "rec.negatives (prism train --help).\n"
            "A cell's config: the task's preset, the grid's set, the variant's set, each --set,\n"
            "then --steps (or the grid's steps) and the seed (data and init).\n");
}

typedef struct {
    const char *grid, *out;
    const char *sets[32];
    int n_sets, device, seeds;
    int64_t steps;
    bool steps_set;
} ablate_args;

static int parse_ablate(pr_args *a, ablate_args *t)
{
    static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
    while (pr_args_next(a)) {
        const char *set = NULL;
        int steps = 0;
        if (pr_args_help(a)) return ablate_usage(stdout), 0;
        if (pr_args_string(a, "--grid", &t->grid) || pr_args_string(a, "--out", &t->out) ||
            pr_args_choice(a, "--device", devices, &t->device) ||
            pr_args_int(a, "--seeds", 1, PR_GRID_MAX_SEEDS, &t->seeds))
            continue;
        if (pr_args_string(a, "--set", &set)) {
            if (set && t->n_sets == 32) return pr_args_error(a, "more than 32 --set options");
            if (set) t->sets[t->n_sets++] = set;
            continue;
        }
        if (pr_args_int(a, "--steps", 1, 2000000000, &steps)) {
            t->steps = steps, t->steps_set = true;
            continue;
        }
        return pr_args_unknown(a);
    }
    if (a->failed) return PR_EXIT_USAGE;
    if (!t->grid) return pr_args_error(a, "--grid NAME|FILE is required (built-in: probe, prism-ablation, rec, quick)");
    return -1;
}

/* ---- one cell ------------------------------------------------------------------------ */
static int apply_set(pr_config *c, pr_train_opts *o, const char *kv, pr_err *err)
{
    return pr_grid_set(c, o, kv, err);
}

/* the config of cell (v, task t, seed), in the order the help gives */
static int cell_config(const pr_grid *g, const ablate_args *t, int v, int task, int seed, pr_config *c,
                       pr_train_opts *o, pr_err *err)
{
    *c = pr_config_default();
    *o = pr_train_defaults();
    snprintf(o->task, sizeof o->task, "%s", g->task[task]);
    if (pr_task_preset(c, o, o->task, err)) return -1;
    if (g->steps) o->steps = g->steps;
    if (t->steps_set) o->steps = t->steps;
    o->ckpt_every = o->steps / 5 > 0 ? o->steps / 5 : 1;
    for (int i = 0; i < g->common.n_sets; i++)
        if (apply_set(c, o, g->common.set[i], err)) return pr_errf(err, "grid %s: set: %s", g->name, err->msg);
    for (int i = 0; i < g->variant[v].n_sets; i++)
        if (apply_set(c, o, g->variant[v].set[i], err))
            return pr_errf(err, "grid %s: variant %s: %s", g->name, g->variant[v].name, err->msg);
    for (int i = 0; i < t->n_sets; i++)
        if (apply_set(c, o, t->sets[i], err)) return pr_errf(err, "--set: %s", err->msg);
    o->seed = seed, c->seed = seed;
    return pr_config_check(c, err);
}

/* DIR/<variant>/<task>/s<seed>, the variant's name made safe for a path */
static void cell_dir(char *out, size_t n, const char *root, const char *variant, const char *task, int seed)
{
    char slug[48];
    snprintf(slug, sizeof slug, "%s", variant);
    for (char *p = slug; *p; p++)
        if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') && !(*p >= '0' && *p <= '9') && *p != '_' &&
            *p != '-')
            *p = '-';
    snprintf(out, n, "%s/%s/%s/s%d", root, slug, task, seed);
}

static bool file_exists(const char *dir, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* the quality metric of a finished cell: the first of these it reports */
static const char *quality_metric(const cJSON *metrics)
{
    const char *const *prefer = pr_grid_quality_metrics;
    for (int i = 0; prefer[i]; i++)
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(metrics, prefer[i]))) return prefer[i];
    return NULL;
}

/* a finished cell's result.json for `steps`; false when absent or for another budget */
static bool read_result(const char *dir, int64_t steps, const char **metric, double *value)
{
    char path[1200];
    pr_err err;
    snprintf(path, sizeof path, "%s/result.json", dir);
    if (access(path, F_OK) != 0) return false;
    char *text = pr_read_text(path, &err);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "steps");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "metrics");
    const char *name = m ? quality_metric(m) : NULL;
    bool ok = cJSON_IsNumber(st) && (int64_t)st->valuedouble == steps && name;
    if (ok) *metric = name, *value = cJSON_GetObjectItemCaseSensitive(m, name)->valuedouble;
    cJSON_Delete(j);
    return ok;
}

static int write_result(const char *dir, const pr_train_result *res, pr_err *err)
{
    cJSON *j = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(j, "metrics");
    cJSON_AddNumberToObject(j, "steps", (double)res->steps);
    for (int i = 0; i < res->metrics.n; i++) cJSON_AddNumberToObject(m, res->metrics.name[i], res->metrics.value[i]);
    cJSON_AddNumberToObject(j, "tokens_per_s", round(res->tokens_per_s));
    cJSON_AddNumberToObject(j, "params", (double)res->params);
    char *text = cJSON_Print(j), path[1200];
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/result.json", dir);
    int rc = pr_write_file_atomic(path, text, err);
    free(text);
    return rc;
}

/* ---- the grid's progress line ---------------------------------------------------------- */
typedef struct {
    const char *grid;
    int cell, n_cells, ran, reused, failed;
    char label[96];
    bool tty;
    double t0, last_draw;
} grid_progress;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void draw(grid_progress *p, int64_t step, int64_t total, bool end_of_cell)
{
    double now = now_s();
    if (p->tty && !end_of_cell && now - p->last_draw < 0.2) return;
    if (!p->tty && !end_of_cell) return;  /* piped: a line per cell */
    p->last_draw = now;
    /* the share of the grid done, counting the current cell's steps; reused cells count as done */
    double done = ((double)p->cell - 1 + (total ? (double)step / (double)total : 1)) / p->n_cells;
    double eta = done > 0 ? (now - p->t0) * (1 - done) / done : 0;
    char line[240];
    snprintf(line, sizeof line,
             "ablate %s: cell %d/%d %s  step %lld/%lld  (%d run, %d reused, %d failed)  %.0fs, ETA %.0fs", p->grid,
             p->cell, p->n_cells, p->label, (long long)step, (long long)total, p->ran, p->reused, p->failed,
             now - p->t0, eta);
    if (p->tty) fprintf(stderr, "\r%-110s", line);
    else fprintf(stderr, "%s\n", line);
}

static void on_step(void *user, int64_t step, int64_t total)
{
    draw(user, step, total, false);
}

/* runs or reads one cell; NAN (having said why) when it fails */
static double run_cell(const pr_grid *g, const ablate_args *t, const char *root, pr_device dev, int v, int task,
                       int seed, const char **metric, grid_progress *p)
{
    pr_config c;
    pr_train_opts o;
    pr_err err;
    char dir[1100];
    cell_dir(dir, sizeof dir, root, g->variant[v].name, g->task[task], seed);
    snprintf(p->label, sizeof p->label, "%s %s s%d", g->variant[v].name, g->task[task], seed);
    double value = NAN;
    if (cell_config(g, t, v, task, seed, &c, &o, &err)) goto failed;
    if (read_result(dir, o.steps, metric, &value)) {
        p->reused++;
        draw(p, o.steps, o.steps, true);
        return value;
    }
    o.on_step = on_step, o.on_step_user = p;
    pr_train_result res;
    bool resume = file_exists(dir, "latest");
    if (pr_train(&c, &o, dir, resume, dev, &res, &err)) goto failed;
    if (res.steps != o.steps) {  /* its checkpoint is past this budget: a table mixes no budgets */
        pr_errf(&err, "its checkpoint is at step %lld, past --steps %lld (give another --out)", (long long)res.steps,
                (long long)o.steps);
        goto failed;
    }
    if (write_result(dir, &res, &err)) goto failed;
    p->ran++;
    draw(p, o.steps, o.steps, true);
    return read_result(dir, o.steps, metric, &value) ? value : NAN;
failed:
    p->failed++;
    if (p->tty) fputc('\n', stderr);
    fprintf(stderr, "prism ablate: cell %s (%s): %s\n", p->label, dir, err.msg);
    return NAN;
}

/* ---- the grid -------------------------------------------------------------------------- */
/* leaves out the tasks the trainer cannot open (rec until it is wired in), saying why */
static void drop_unavailable_tasks(pr_grid *g, const ablate_args *t)
{
    int kept = 0;
    for (int k = 0; k < g->n_tasks; k++) {
        pr_config c;
        pr_train_opts o;
        pr_err err;
        pr_task *task = NULL;
        if (cell_config(g, t, 0, k, 1, &c, &o, &err) == 0 && pr_task_open(&task, &o, &c, &err) == 0) {
            pr_task_free(task);
            memmove(g->task[kept++], g->task[k], sizeof g->task[0]);
            continue;
        }
        fprintf(stderr, "prism ablate: task %s left out of the grid: %s\n", g->task[k], err.msg);
    }
    g->n_tasks = kept;
}

static int write_tables(const pr_grid_results *r, const char *root)
{
    void (*writers[3])(const pr_grid_results *, FILE *) = {pr_grid_write_markdown, pr_grid_write_csv,
                                                           pr_grid_write_json};
    const char *names[3] = {"results.md", "results.csv", "results.json"};
    for (int i = 0; i < 3; i++) {
        char path[1100];
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        FILE *f = fopen(path, "w");
        if (!f) return fprintf(stderr, "prism ablate: %s: cannot create: %s\n", path, strerror(errno)), -1;
        writers[i](r, f);
        if (fclose(f) != 0) return fprintf(stderr, "prism ablate: %s: cannot write\n", path), -1;
    }
    printf("tables: %s/results.md, results.csv, results.json\n", root);
    return 0;
}

int pr_cmd_ablate(int argc, char **argv)
{
    pr_args a = pr_args_begin("prism ablate", argc, argv);
    ablate_args t = {0};
    int rc = parse_ablate(&a, &t);
    if (rc >= 0) return rc;
    if (t.device == 2 && !pr_cuda_available()) return pr_args_no_cuda(a.cmd);
    pr_device dev = t.device == 1 || !pr_cuda_available() ? PR_CPU : PR_CUDA;
    static pr_grid g;
    pr_err err;
    if (pr_grid_load(&g, t.grid, &err)) return fprintf(stderr, "prism ablate: %s\n", err.msg), PR_EXIT_USAGE;
    if (t.seeds) g.seeds = t.seeds;
    pr_config c;
    pr_train_opts o;
    for (int k = 0; k < g.n_tasks; k++)  /* a bad --set fails before any cell runs */
        if (cell_config(&g, &t, 0, k, 1, &c, &o, &err)) return fprintf(stderr, "prism ablate: %s\n", err.msg), 2;
    drop_unavailable_tasks(&g, &t);
    if (!g.n_tasks) return fprintf(stderr, "prism ablate: no task of grid %s can run\n", g.name), 1;
    char root[1024];
    if (t.out) snprintf(root, sizeof root, "%s", t.out);
    else snprintf(root, sizeof root, "runs/ablate-%s", g.name);

    pr_grid_results r = {.g = &g};
    double *value = malloc(sizeof(double) * (size_t)(g.n_variants * g.n_tasks * g.seeds));
    PR_CHECK(value, "prism ablate: out of host memory");
    grid_progress p = {.grid = g.name, .n_cells = g.n_variants * g.n_tasks * g.seeds, .tty = isatty(STDERR_FILENO),
                       .t0 = now_s()};
    for (int v = 0; v < g.n_variants; v++)
        for (int k = 0; k < g.n_tasks; k++)
            for (int s = 0; s < g.seeds; s++) {
                const char *metric = NULL;
                p.cell++;
                value[(v * g.n_tasks + k) * g.seeds + s] = run_cell(&g, &t, root, dev, v, k, s + 1, &metric, &p);
                if (metric && !r.metric[k]) r.metric[k] = metric;
            }
    if (p.tty) fputc('\n', stderr);
    for (int k = 0; k < g.n_tasks; k++)
        if (!r.metric[k]) r.metric[k] = "-";
    r.value = value;
    pr_grid_write_markdown(&r, stdout);
    rc = write_tables(&r, root) ? 1 : 0;
    printf("%d cells: %d run, %d reused, %d failed\n", p.n_cells, p.ran, p.reused, p.failed);
    free(value);
    return rc || p.failed ? 1 : 0;
}
