/* tools/ablate.c: `prism ablate`: every (model or variant) x task x seed cell
 * of a grid (lab/lab.h) trained through the trainer library, each in its
 * own run directory, then a table of mean ± std over seeds and a bar chart of it.
 *
 * Resumable: a cell whose run directory holds result.json for the same step
 * budget is read, not rerun; one with a checkpoint but no result continues
 * from it (the trainer's resume, bit for bit); any other starts afresh.
 *
 * --jobs N forks N workers that claim cells from a counter in shared memory
 * (no claim files, so a killed run leaves nothing that blocks the next one;
 * the cell a dead worker was in keeps its checkpoints and resumes). The
 * parent draws the progress line and, as with one job, reads every cell's
 * result.json for the table. The parent never touches CUDA: a process that
 * initialised it cannot pass it to forked children. */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cjson/cJSON.h>
#ifdef PRISM_HAVE_OPENMP
#include <omp.h>
#endif

#include "lab/lab.h"
#include "models/models.h"
#include "tools/tools.h"
#include "train/train.h"

#define MAX_JOBS 64

/* text at a hanging indent, wrapped before column 90 */
static void print_wrapped(FILE *f, const char *text, int indent)
{
    int col = indent;
    for (const char *p = text; *p;) {
        size_t word = strcspn(p, " ");
        if (col > indent && col + 1 + (int)word > 90) fprintf(f, "\n%*s", indent, ""), col = indent;
        else if (col > indent) fputc(' ', f), col++;
        fprintf(f, "%.*s", (int)word, p);
        col += (int)word;
        p += word;
        p += strspn(p, " ");
    }
    fputc('\n', f);
}

/* each built-in grid described from its parsed axes, so the text follows the table */
static void print_builtins(FILE *f)
{
    static pr_grid g;
    for (int i = 0; pr_grid_builtins[i]; i++) {
        pr_err err;
        char axes[400];
        if (pr_grid_load(&g, pr_grid_builtins[i], &err)) snprintf(axes, sizeof axes, "(broken: %.300s)", err.msg);
        else pr_grid_describe(&g, axes, sizeof axes);
        fprintf(f, "  %-16s", pr_grid_builtins[i]);
        print_wrapped(f, axes, 18);
        fprintf(f, "%18s", "");
        print_wrapped(f, pr_grid_purpose(pr_grid_builtins[i]), 18);
    }
}

static void ablate_usage(FILE *f)
{
    fprintf(f,
            "usage: prism ablate --grid NAME|FILE [--seeds N] [--steps N] [--device auto|cpu|cuda]\n"
            "                    [--jobs N] [--only MODEL,...] [--tasks TASK,...] [--metric NAME]\n"
            "                    [--out DIR] [--set key=value]... [--dry-run]\n\n"
            "Trains every (model or variant) x task x seed cell of a grid, each in its own run\n"
            "directory DIR/<model>/<task>/s<seed> (DIR defaults to runs/ablate-<grid>), and prints\n"
            "a Markdown table of the mean ± sample std over seeds of each task's quality metric\n"
            "(probes: acc; rec: test_ndcg@10; lm: bpb), also written as DIR/results.md, .csv and .json,\n"
            "and drawn as a bar chart in DIR/results.svg (a panel per metric, ± std as error bars).\n"
            "DIR/report.html puts the table (the paper's numbers beside ours where the grid has\n"
            "them, as table4 does), the chart and every cell's training curves on one page: open\n"
            "it in a browser (no network or script needed).\n"
            "Run it again to resume: finished cells are read, not rerun; an interrupted cell\n"
            "continues from its latest checkpoint (train.ckpt_every defaults to a fifth of the\n"
            "steps here). A task the trainer cannot open is left out, saying why.\n\n"
            "  --jobs N         run N cells at a time, each in its own worker process (default: one\n"
            "                   per GPU on CUDA, one per core on the CPU); the table is the same as\n"
            "                   with one job. With --device cuda every worker has its own CUDA\n"
            "                   context; on a host with several GPUs worker j uses GPU j mod the GPU\n"
            "                   count, otherwise all share GPU 0 (taking turns: little faster than\n"
            "                   one job). On the CPU each worker gets cores/N OpenMP and OpenBLAS\n"
            "                   threads unless OMP_NUM_THREADS or OPENBLAS_NUM_THREADS is set.\n"
            "  --only M,...     only these models or variants of the grid (names as in its table)\n"
            "  --tasks T,...    only these tasks of the grid\n"
            "  --dry-run        list every cell, its folder and what a run would do with it (done,\n"
            "                   resume from step K, new), checking each cell's config; train nothing\n"
            "  --metric NAME    tabulate this metric of each cell's result.json rather than the\n"
            "                   task's quality metric, e.g. test_hit@200 or test_auc on rec (a\n"
            "                   cell that does not report it shows -), into DIR/results-NAME.*\n\n"
            "Built-in grids:\n");
    print_builtins(f);
    fprintf(f,
            "\nA grid file is JSON: {\"name\": \"mine\", \"models\": [\"prism\", \"gdn\"],\n"
            "\"variants\": [{\"name\": \"prism-L1\", \"set\": {\"mixer\": \"prism\", \"prism.L\": 1}},\n"
            "{\"name\": \"attn-authors\", \"preset\": \"probe-authors\", \"set\": {\"mixer\": \"attn\"}}],\n"
            "\"tasks\": [\"parity\"], \"seeds\": 2, \"steps\": 300, \"set\": {\"train.batch\": 16}}.\n"
            "Keys in `set` are model keys (prism model --help), train.<key>, rec.data,\n"
            "rec.negatives or probe.style (prism train --help). A variant's preset replaces the\n"
            "task's preset in its cells, as prism train --preset does. Two variants may not share\n"
            "a run folder (their names with every character but letters, digits, _ and - made -).\n"
            "A cell's config: the task's preset (or the variant's), the grid's set, the variant's\n"
            "set, each --set, then --steps (or the grid's steps) and the seed (data and init).\n");
}

typedef struct {
    const char *grid, *out, *only, *tasks, *metric;
    const char *sets[32];
    int n_sets, device, seeds, jobs;
    int64_t steps;
    bool steps_set, dry_run;
} ablate_args;

static int parse_ablate(pr_args *a, ablate_args *t)
{
    static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
    while (pr_args_next(a)) {
        const char *set = NULL;
        int steps = 0;
        if (pr_args_help(a)) return ablate_usage(stdout), 0;
        if (pr_args_string(a, "--grid", &t->grid) || pr_args_string(a, "--out", &t->out) ||
            pr_args_string(a, "--only", &t->only) || pr_args_string(a, "--tasks", &t->tasks) ||
            pr_args_string(a, "--metric", &t->metric) ||
            pr_args_choice(a, "--device", devices, &t->device) ||
            pr_args_int(a, "--seeds", 1, PR_GRID_MAX_SEEDS, &t->seeds) ||
            pr_args_int(a, "--jobs", 1, MAX_JOBS, &t->jobs) || pr_args_flag(a, "--dry-run", &t->dry_run))
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
    if (!t->grid) {
        char names[128] = "";
        for (int i = 0; pr_grid_builtins[i]; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", pr_grid_builtins[i]);
        return pr_args_error(a, "--grid NAME|FILE is required (built-in: %s)", names);
    }
    return -1;
}

/* ---- one cell ------------------------------------------------------------------------ */
/* the config of cell (v, task t, seed), in the order the help gives */
static int cell_config(const pr_grid *g, const ablate_args *t, int v, int task, int seed, pr_config *c,
                       pr_train_opts *o, pr_err *err)
{
    *c = pr_config_default();
    *o = pr_train_defaults();
    snprintf(o->task, sizeof o->task, "%s", g->task[task]);
    const char *preset = g->variant[v].preset[0] ? g->variant[v].preset : NULL;
    if (pr_task_preset_as(c, o, o->task, preset, err)) return pr_errf(err, "grid %s: variant %s: %s", g->name,
                                                                       g->variant[v].name, err->msg);
    if (g->steps) o->steps = g->steps;
    if (t->steps_set) o->steps = t->steps;
    o->ckpt_every = o->steps / 5 > 0 ? o->steps / 5 : 1;
    for (int i = 0; i < g->common.n_sets; i++)
        if (pr_grid_set(c, o, g->common.set[i], err)) return pr_errf(err, "grid %s: set: %s", g->name, err->msg);
    for (int i = 0; i < g->variant[v].n_sets; i++)
        if (pr_grid_set(c, o, g->variant[v].set[i], err))
            return pr_errf(err, "grid %s: variant %s: %s", g->name, g->variant[v].name, err->msg);
    for (int i = 0; i < t->n_sets; i++)
        if (pr_grid_set(c, o, t->sets[i], err)) return pr_errf(err, "--set: %s", err->msg);
    o->seed = seed, c->seed = seed;
    return pr_config_check(c, err);
}

static bool file_exists(const char *dir, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* a finished cell's result.json for `steps`; false when absent, for another
 * budget or without the task's quality metric. *value is the metric `want`
 * (NAN when the cell does not report it), or with want NULL the task's
 * quality metric, named in *metric. */
static bool read_result(const char *dir, int64_t steps, const char *task, const char *want, const char **metric,
                        double *value)
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
    const char *quality = pr_grid_quality_metric(task);
    bool ok = cJSON_IsNumber(st) && st->valuedouble == (double)steps &&   /* no cast of a damaged file's 1e30 */
              cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(m, quality));
    if (ok) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(m, want ? want : quality);
        *metric = want ? want : quality, *value = cJSON_IsNumber(w) ? w->valuedouble : NAN;
    }
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

/* ---- the grid's shared state and its progress line ---------------------------------- */
typedef struct {
    atomic_int cell;                 /* the cell it runs (index in table order), -1 when none */
    atomic_llong step, total;
} job_slot;

/* in memory shared by the parent and its workers (MAP_SHARED before fork) */
typedef struct {
    atomic_int next;                 /* the next cell to claim */
    atomic_int ran, reused, failed;
    job_slot slot[MAX_JOBS];
} grid_board;

typedef struct {
    const pr_grid *g;
    const ablate_args *t;
    const char *root;
    pr_device dev;
    int n_cells, jobs;
    grid_board *board;
    bool draws;                      /* this process draws the progress line */
    bool tty;
    double t0, last_draw;
    pid_t parent;                    /* with worker processes: the ablate that started them */
} grid_run;

/* cell i in table order: (variant, task, seed index) */
static void cell_axes(const pr_grid *g, int i, int *v, int *k, int *s)
{
    *s = i % g->seeds, *k = i / g->seeds % g->n_tasks, *v = i / g->seeds / g->n_tasks;
}

static void cell_label(const pr_grid *g, int i, char *out, size_t n)
{
    int v, k, s;
    cell_axes(g, i, &v, &k, &s);
    snprintf(out, n, "%s %s s%d", g->variant[v].name, g->task[k], s + 1);
}

/* cell i of the run: its run directory into dir and its config; -1 with err for a bad config */
static int cell_open(const grid_run *r, int i, char *dir, size_t n, pr_config *c, pr_train_opts *o, pr_err *err)
{
    int v, k, s;
    cell_axes(r->g, i, &v, &k, &s);
    pr_grid_cell_dir(dir, n, r->root, r->g->variant[v].name, r->g->task[k], s + 1);
    return cell_config(r->g, r->t, v, k, s + 1, c, o, err);
}

/* on a terminal, redrawn at most every 0.2 s; piped, a line per finished cell */
static void draw(grid_run *r, bool cell_finished)
{
    double now = pr_now_s();
    if (r->tty ? !cell_finished && now - r->last_draw < 0.2 : !cell_finished) return;
    r->last_draw = now;
    grid_board *b = r->board;
    int ran = b->ran, reused = b->reused, failed = b->failed, running = 0;
    double partial = 0;  /* the running cells' share of their steps */
    char now_running[200] = "";
    for (int j = 0; j < r->jobs; j++) {
        int cell = b->slot[j].cell;
        long long step = b->slot[j].step, total = b->slot[j].total;
        if (cell < 0) continue;
        running++;
        partial += total > 0 ? (double)step / (double)total : 0;
        if (r->jobs > 1) continue;
        char label[120];
        cell_label(r->g, cell, label, sizeof label);
        snprintf(now_running, sizeof now_running, ", now %s step %lld/%lld", label, step, total);
    }
    if (r->jobs > 1) snprintf(now_running, sizeof now_running, ", %d running", running);
    /* reused cells cost nothing, so the rate is of the cells that train */
    int to_train = r->n_cells - reused;
    double frac = to_train > 0 ? (ran + failed + partial) / to_train : 1;
    char eta[32] = "-";  /* until a step is done */
    if (frac > 0) snprintf(eta, sizeof eta, "%.0fs", (now - r->t0) * (1 - frac) / frac);
    char line[640];   /* room for every part at its longest: no truncation */
    snprintf(line, sizeof line, "ablate %s: %d/%d cells done%s  (%d run, %d reused, %d failed)  %.0fs, ETA %s",
             r->g->name, ran + reused + failed, r->n_cells, now_running, ran, reused, failed, now - r->t0, eta);
    if (r->tty) fprintf(stderr, "\r%-110s", line);
    else fprintf(stderr, "%s\n", line);
}

typedef struct {
    grid_run *r;
    job_slot *slot;
} step_watch;

static void on_step(void *user, int64_t step, int64_t total)
{
    step_watch *w = user;
    if (w->r->parent && getppid() != w->r->parent) _exit(1);   /* where there is no PR_SET_PDEATHSIG */
    w->slot->total = total;
    w->slot->step = step;
    if (w->r->draws) draw(w->r, false);
}

/* trains or reads cell i, claimed by job slot j (which it frees); a failure
 * is said and counted */
static void run_cell(grid_run *r, int j, int i)
{
    job_slot *slot = &r->board->slot[j];
    pr_config c;
    pr_train_opts o;
    pr_err err;
    char dir[1100], label[120];
    cell_label(r->g, i, label, sizeof label);
    const char *metric;
    double value;
    if (cell_open(r, i, dir, sizeof dir, &c, &o, &err)) goto failed;
    if (read_result(dir, o.steps, o.task, NULL, &metric, &value)) {
        slot->cell = -1;
        r->board->reused++;
        if (r->draws) draw(r, true);
        return;
    }
    slot->total = o.steps;
    step_watch watch = {r, slot};
    o.on_step = on_step, o.on_step_user = &watch;
    pr_train_result res;
    /* a cell with a checkpoint continues (the trainer refuses one past this
     * budget: a table mixes no budgets); one without starts again */
    bool resume = file_exists(dir, "latest");
    o.overwrite = !resume;
    if (pr_train(&c, &o, dir, resume, r->dev, &res, &err)) goto failed;
    if (write_result(dir, &res, &err)) goto failed;
    slot->cell = -1;
    r->board->ran++;
    if (r->draws) draw(r, true);
    return;
failed:
    slot->cell = -1;
    r->board->failed++;
    if (r->tty) fputc('\n', stderr);
    fprintf(stderr, "prism ablate: cell %s (%s): %s\n", label, dir, err.msg);
}

/* claims cells until none is left: with several jobs, the next unclaimed
 * one, so a slow cell holds up no other */
static void run_cells(grid_run *r, int j)
{
    job_slot *slot = &r->board->slot[j];
    for (int i; (i = atomic_fetch_add(&r->board->next, 1)) < r->n_cells;) {
        /* held from the claim on, so a worker that dies at any point names its cell */
        slot->step = 0;
        slot->total = 0;
        slot->cell = i;
        run_cell(r, j, i);
    }
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

/* One ablate at a time in a grid folder: two would train the same cells into
 * the same run directories. The lock lasts as long as this process or any
 * of its workers (which die with it) holds the file open. */
static int lock_grid_folder(const char *root, int *fd)
{
    pr_err err;
    if (pr_make_dirs(root, &err) || pr_dir_lock(root, ".ablate.lock", "prism ablate", fd, &err))
        return fprintf(stderr, "prism ablate: %s\n", err.msg), -1;
    return 0;
}

/* ---- workers ----------------------------------------------------------------------- */
/* the number of GPUs, asked by a child process so that this one never
 * initialises CUDA (the workers forked from it could not use it then) */
static int gpu_count_from_child(void)
{
#ifdef PRISM_HAVE_CUDA
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(pr_cuda_device_count() < 100 ? pr_cuda_device_count() : 100);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
    return WEXITSTATUS(status);
#else
    return 0;
#endif
}

/* worker j's GPU: entry j mod ngpus of CUDA_VISIBLE_DEVICES (or of 0..ngpus-1),
 * set before the worker's first CUDA call */
static void pick_gpu(int j, int ngpus)
{
    if (ngpus < 2) return;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    char pick[64];
    if (!visible || !visible[0]) snprintf(pick, sizeof pick, "%d", j % ngpus);
    else {
        const char *p = visible;
        for (int e = 0; e < j % ngpus && strchr(p, ','); e++) p = strchr(p, ',') + 1;
        snprintf(pick, sizeof pick, "%.*s", (int)strcspn(p, ","), p);
    }
    setenv("CUDA_VISIBLE_DEVICES", pick, 1);
}

/* the cores this process may run on */
static int cpu_cores(void)
{
#ifdef PRISM_HAVE_OPENMP
    return omp_get_num_procs();
#else
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
#endif
}

/* CPU workers share the cores rather than each starting a thread per core,
 * for our ops (OpenMP) and for the gemm (OpenBLAS) alike: threads beyond the
 * cores spin waiting for each other */
static void share_cores(int jobs)
{
    int cores = cpu_cores(), each = cores / jobs > 1 ? cores / jobs : 1;
#ifdef PRISM_HAVE_OPENMP
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(each);
#endif
    if (!getenv("OPENBLAS_NUM_THREADS")) pr_blas_set_threads(each);
}

/* waits for the workers, drawing the progress line; a worker that dies
 * (killed, crashed) leaves its cell to the next run, which resumes it */
static void wait_for_workers(grid_run *r, const pid_t *pid)
{
    int alive = r->jobs, last_done = 0;
    while (alive > 0) {
        int status;
        pid_t done = waitpid(-1, &status, WNOHANG);
        for (int j = 0; done > 0 && j < r->jobs; j++) {
            if (pid[j] != done) continue;
            alive--;
            int cell = r->board->slot[j].cell;
            if (cell < 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) break;
            char where[200] = "between cells", label[120];
            if (cell >= 0) {
                cell_label(r->g, cell, label, sizeof label);
                snprintf(where, sizeof where, "in cell %s; run again to resume it", label);
                r->board->failed++;
            }
            if (r->tty) fputc('\n', stderr);
            if (WIFSIGNALED(status))
                fprintf(stderr, "prism ablate: worker %d died of signal %d %s\n", j, WTERMSIG(status), where);
            else fprintf(stderr, "prism ablate: worker %d exited with status %d %s\n", j,
                         WIFEXITED(status) ? WEXITSTATUS(status) : -1, where);
            r->board->slot[j].cell = -1;
        }
        int finished = r->board->ran + r->board->reused + r->board->failed;
        draw(r, finished != last_done);
        last_done = finished;
        if (done <= 0) nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    }
}

/* a worker has no use once the parent that draws the table is gone: it ends
 * with it (SIGTERM, which a checkpoint's atomic writes survive), so a killed
 * ablate leaves no workers training and no lock held */
static void die_with_parent(pid_t parent)
{
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
    if (getppid() != parent) _exit(1);   /* it died before the line above */
}

/* runs the grid's cells in r->jobs worker processes */
static int run_parallel(grid_run *r, int ngpus)
{
    pid_t pid[MAX_JOBS];
    r->parent = getpid();
    fflush(NULL);  /* or each child would print the parent's buffered output again */
    for (int j = 0; j < r->jobs; j++) {
        pid[j] = fork();
        if (pid[j] < 0) {
            fprintf(stderr, "prism ablate: cannot start worker %d: %s\n", j, strerror(errno));
            for (int k = 0; k < j; k++) kill(pid[k], SIGTERM);
            for (int k = 0; k < j; k++) waitpid(pid[k], NULL, 0);
            return -1;
        }
        if (pid[j] == 0) {
            die_with_parent(r->parent);
            r->draws = false;
            if (r->dev == PR_CUDA) pick_gpu(j, ngpus);
            else share_cores(r->jobs);
            run_cells(r, j);
            fflush(NULL);
            _exit(0);
        }
    }
    wait_for_workers(r, pid);
    return 0;
}

/* --dry-run: what a run would do with each cell; -1 when a cell's config is bad */
static int dry_run(const grid_run *r)
{
    int done = 0, resume = 0, fresh = 0, bad = 0;
    for (int i = 0; i < r->n_cells; i++) {
        pr_config c;
        pr_train_opts o;
        pr_err err;
        char dir[1100], label[120], state[640];
        const char *metric;
        double value;
        cell_label(r->g, i, label, sizeof label);
        if (cell_open(r, i, dir, sizeof dir, &c, &o, &err)) {
            snprintf(state, sizeof state, "bad config: %s", err.msg), bad++;
        } else if (read_result(dir, o.steps, o.task, NULL, &metric, &value)) {
            snprintf(state, sizeof state, "done, %s %.4g", metric, value), done++;
        } else if (file_exists(dir, "latest")) {
            char path[1200], *text;
            snprintf(path, sizeof path, "%s/latest", dir);
            text = pr_read_text(path, &err);
            snprintf(state, sizeof state, "resumes from step %lld of %lld", text ? atoll(text) : -1LL,
                     (long long)o.steps);
            free(text), resume++;
        } else {
            snprintf(state, sizeof state, "new, %lld steps", (long long)o.steps), fresh++;
        }
        printf("%-36s %-36s %s\n", label, state, dir);
    }
    printf("%d cells: %d done, %d to resume, %d new", r->n_cells, done, resume, fresh);
    if (bad) printf(", %d with a bad config", bad);
    printf("; nothing was run\n");
    return bad ? -1 : 0;
}

/* every cell's result as written to disk, the same whichever process ran it;
 * -1 when --metric names a metric that no finished cell reports */
static int collect(const grid_run *r, double *value, pr_grid_results *res)
{
    int finished = 0, reported = 0;
    const pr_grid *g = r->g;
    for (int i = 0; i < r->n_cells; i++) {
        pr_config c;
        pr_train_opts o;
        pr_err err;
        char dir[1100];
        const char *metric = NULL;
        value[i] = NAN;
        if (cell_open(r, i, dir, sizeof dir, &c, &o, &err) ||
            !read_result(dir, o.steps, o.task, r->t->metric, &metric, &value[i]))
            continue;
        int v, k, s;
        cell_axes(g, i, &v, &k, &s);
        finished++, reported += isfinite(value[i]) ? 1 : 0;
        if (!res->metric[k] && isfinite(value[i])) res->metric[k] = metric;
    }
    for (int k = 0; k < g->n_tasks; k++)
        if (!res->metric[k]) res->metric[k] = "-";
    if (r->t->metric && finished && !reported) {
        fprintf(stderr, "prism ablate: --metric %s: no finished cell reports it (a cell's result.json lists "
                        "its metrics: acc, loss; test_ and val_ hit@K, ndcg@K, auc; bpb)\n", r->t->metric);
        return -1;
    }
    return 0;
}

int pr_cmd_ablate(int argc, char **argv)
{
    pr_args a = pr_args_begin("prism ablate", argc, argv);
    ablate_args t = {.jobs = 0};   /* 0: one per GPU, or one per core on the CPU */
    int rc = parse_ablate(&a, &t);
    if (rc >= 0) return rc;
    static pr_grid g;
    pr_err err;
    if (strpbrk(t.grid, "/.") && pr_args_readable(a.cmd, t.grid)) return 1;   /* a grid file, not a built-in name */
    if (pr_grid_load(&g, t.grid, &err) || pr_grid_keep(&g, t.only, t.tasks, &err))
        return fprintf(stderr, "prism ablate: %s\n", err.msg), PR_EXIT_USAGE;
    if (t.seeds) g.seeds = t.seeds;
    if (t.steps_set) g.steps = t.steps;   /* the same budget for every cell: the report says so */
    /* with one job cells train in this process; with more, no CUDA here (see the top) */
    int ngpus = t.device == 1 ? 0 : t.jobs != 1 ? gpu_count_from_child() : pr_cuda_available();
    if (t.device == 2 && !ngpus) return pr_args_no_cuda(a.cmd);
    pr_device dev = ngpus ? PR_CUDA : PR_CPU;
    if (!t.jobs) t.jobs = ngpus ? ngpus : cpu_cores();
    if (t.jobs > MAX_JOBS) t.jobs = MAX_JOBS;
    pr_config c;
    pr_train_opts o;
    for (int k = 0; k < g.n_tasks; k++)  /* a bad --set fails before any cell runs */
        if (cell_config(&g, &t, 0, k, 1, &c, &o, &err)) return fprintf(stderr, "prism ablate: %s\n", err.msg), 2;
    drop_unavailable_tasks(&g, &t);
    if (!g.n_tasks) return fprintf(stderr, "prism ablate: no task of grid %s can run\n", g.name), 1;
    char root[1024];
    if (t.out) snprintf(root, sizeof root, "%s", t.out);
    else snprintf(root, sizeof root, "runs/ablate-%s", g.name);
    if (t.dry_run) {   /* reads the folder only: no lock, no workers */
        grid_run dr = {.g = &g, .t = &t, .root = root, .n_cells = g.n_variants * g.n_tasks * g.seeds};
        return dry_run(&dr) ? 1 : 0;
    }
    int lock = -1;
    if (lock_grid_folder(root, &lock)) return 1;

    int n_cells = g.n_variants * g.n_tasks * g.seeds;
    grid_board *board = mmap(NULL, sizeof *board, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    PR_CHECK(board != MAP_FAILED, "prism ablate: cannot map the workers' shared state: %s", strerror(errno));
    for (int j = 0; j < MAX_JOBS; j++) board->slot[j].cell = -1;
    grid_run r = {.g = &g, .t = &t, .root = root, .dev = dev, .n_cells = n_cells, .board = board,
                  .jobs = t.jobs < n_cells ? t.jobs : n_cells, .draws = true, .tty = isatty(STDERR_FILENO),
                  .t0 = pr_now_s()};
    if (r.jobs == 1) run_cells(&r, 0);
    else if (run_parallel(&r, ngpus)) return munmap(board, sizeof *board), 1;
    if (r.tty) fputc('\n', stderr);

    pr_grid_results res = {.g = &g};
    double *value = malloc(sizeof(double) * (size_t)n_cells);
    PR_CHECK(value, "prism ablate: out of host memory");
    if (collect(&r, value, &res)) {
        rc = 1;
    } else {
        res.value = value;
        pr_grid_write_markdown(&res, stdout);
        char stem[64];
        snprintf(stem, sizeof stem, "results%s%s", t.metric ? "-" : "", t.metric ? t.metric : "");
        rc = pr_grid_write_outputs(&res, root, stem) ? 1 : 0;
    }
    int ran = board->ran, reused = board->reused, failed = board->failed;
    printf("%d cells: %d run, %d reused, %d failed\n", n_cells, ran, reused, failed);
    free(value);
    munmap(board, sizeof *board);
    pr_dir_unlock(lock, root, ".ablate.lock");
    return rc || failed ? 1 : 0;
}
