/* lab/grid_run.c: running a grid (lab/lab.h): every (variant, task, seed)
 * cell trained through the trainer in its own run directory, then every
 * cell's result read back for the tables.
 *
 * Resumable: a cell whose run directory holds result.json for the same step
 * budget is read, not rerun; one with a checkpoint but no result continues
 * from it (the trainer's resume, bit for bit); any other starts afresh. A
 * stale cell, one whose run was made under another config than the grid
 * gives it now (lab/grid_stale.c), is neither read nor continued unless the
 * plan says so (pr_stale_policy).
 *
 * With several jobs, worker processes claim cells from a counter in shared
 * memory (no claim files, so a killed run leaves nothing that blocks the
 * next one; the cell a dead worker was in keeps its checkpoints and
 * resumes). The parent draws the progress line and, as with one job, reads
 * every cell's result.json for the table. The parent never touches CUDA: a
 * process that initialised it cannot pass it to forked children.
 *
 * With worker threads instead (pr_grid_exec.threads), the same claiming runs
 * in threads of this process, each cell with its own context and, on CUDA,
 * each thread on its own stream (pr_device_thread_begin): one process's
 * streams run kernels side by side, where processes sharing a GPU only take
 * turns. A fatal error in a thread (pr_fatal) jumps back to that thread's
 * worker, which names the cell as failed and stops claiming, as a dead
 * worker process would; what the cell held is not freed (the process ends
 * soon after) and its folder stays locked until then. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
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

#include "lab/lab.h"
#include "models/models.h"
#include "train/train.h"

/* ---- cells ----------------------------------------------------------------------------- */
int pr_grid_cells(const pr_grid *g) { return g->n_variants * g->n_tasks * g->seeds; }

void pr_grid_cell_axes(const pr_grid *g, int i, int *v, int *task, int *seed)
{
    *seed = i % g->seeds, *task = i / g->seeds % g->n_tasks, *v = i / g->seeds / g->n_tasks;
}

void pr_grid_cell_label(const pr_grid *g, int i, char *out, size_t n)
{
    int v, k, s;
    pr_grid_cell_axes(g, i, &v, &k, &s);
    snprintf(out, n, "%s %s s%d", g->variant[v].name, g->task[k], s + 1);
}

/* the config of cell (v, task, seed), in the order ablate's --help gives */
static int cell_config(const pr_grid_plan *p, int v, int task, int seed, pr_config *c, pr_train_opts *o,
                       pr_err *err)
{
    const pr_grid *g = p->g;
    *c = pr_config_default();
    *o = pr_train_defaults();
    snprintf(o->task, sizeof o->task, "%s", g->task[task]);
    const char *preset = g->variant[v].preset[0] ? g->variant[v].preset : NULL;
    if (pr_task_preset_as(c, o, o->task, preset, err)) return pr_errf(err, "grid %s: variant %s: %s", g->name,
                                                                       g->variant[v].name, err->msg);
    if (g->steps) o->steps = g->steps;
    o->ckpt_every = o->steps / 5 > 0 ? o->steps / 5 : 1;
    for (int i = 0; i < g->common.n_sets; i++)
        if (pr_grid_set(c, o, g->common.set[i], err)) return pr_errf(err, "grid %s: set: %s", g->name, err->msg);
    for (int i = 0; i < g->variant[v].n_sets; i++)
        if (pr_grid_set(c, o, g->variant[v].set[i], err))
            return pr_errf(err, "grid %s: variant %s: %s", g->name, g->variant[v].name, err->msg);
    for (int i = 0; i < p->n_sets; i++)
        if (pr_grid_set(c, o, p->sets[i], err)) return pr_errf(err, "--set: %s", err->msg);
    o->seed = seed, c->seed = seed;
    return pr_config_check(c, err);
}

int pr_grid_cell_open(const pr_grid_plan *p, int i, char *dir, size_t n, pr_config *c, pr_train_opts *o,
                      pr_err *err)
{
    int v, k, s;
    pr_grid_cell_axes(p->g, i, &v, &k, &s);
    if (dir) pr_grid_cell_dir(dir, n, p->root, p->g->variant[v].name, p->g->task[k], s + 1);
    return cell_config(p, v, k, s + 1, c, o, err);
}

static bool file_exists(const char *dir, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

bool pr_grid_read_result(const char *dir, int64_t steps, const char *task, const char *want, const char **metric,
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

int pr_grid_write_result(const char *dir, const pr_train_result *res, pr_err *err)
{
    cJSON *j = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(j, "metrics");
    cJSON_AddNumberToObject(j, "steps", (double)res->steps);
    for (int i = 0; i < res->metrics.n; i++) cJSON_AddNumberToObject(m, res->metrics.name[i], res->metrics.value[i]);
    cJSON_AddNumberToObject(j, "tokens_per_s", round(res->tokens_per_s));
    cJSON_AddNumberToObject(j, "params", (double)res->params);
    /* where a grid's time goes: training, or scoring (eager launches queue where many cells share a GPU) */
    cJSON_AddNumberToObject(j, "train_s", round(res->train_s * 10) / 10);
    cJSON_AddNumberToObject(j, "eval_s", round(res->eval_s * 10) / 10);
    char *text = cJSON_Print(j), path[1200];
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/result.json", dir);
    int rc = pr_write_file_atomic(path, text, err);
    free(text);
    return rc;
}

pr_cell_state pr_grid_cell_state(const pr_grid_plan *p, int i, char *dir, size_t ndir, char *what, size_t nwhat)
{
    pr_config c;
    pr_train_opts o;
    pr_err err;
    const char *metric;
    double value;
    if (pr_grid_cell_open(p, i, dir, ndir, &c, &o, &err))
        return snprintf(what, nwhat, "bad config: %s", err.msg), PR_CELL_BAD;
    pr_cell_diff d;
    pr_run_config_diff(dir, &c, &o, &d);
    if (d.n) return snprintf(what, nwhat, "stale: %s", d.text), PR_CELL_STALE;
    if (pr_grid_read_result(dir, o.steps, o.task, NULL, &metric, &value))
        return snprintf(what, nwhat, "done, %s %.4g", metric, value), PR_CELL_DONE;
    if (!file_exists(dir, "latest")) return snprintf(what, nwhat, "new, %lld steps", (long long)o.steps), PR_CELL_NEW;
    char path[1200], *text;
    snprintf(path, sizeof path, "%s/latest", dir);
    text = pr_read_text(path, &err);
    snprintf(what, nwhat, "resumes from step %lld of %lld", text ? atoll(text) : -1LL, (long long)o.steps);
    free(text);
    return PR_CELL_RESUME;
}

int pr_grid_dry_run(const pr_grid_plan *p, FILE *f)
{
    int count[5] = {0}, n_cells = pr_grid_cells(p->g);
    for (int i = 0; i < n_cells; i++) {
        char dir[1100], label[120], what[640];
        pr_grid_cell_label(p->g, i, label, sizeof label);
        count[pr_grid_cell_state(p, i, dir, sizeof dir, what, sizeof what)]++;
        fprintf(f, "%-36s %-36s %s\n", label, what, dir);
    }
    fprintf(f, "%d cells: %d done, %d to resume, %d new", n_cells, count[PR_CELL_DONE], count[PR_CELL_RESUME],
            count[PR_CELL_NEW]);
    if (count[PR_CELL_STALE]) fprintf(f, ", %d stale", count[PR_CELL_STALE]);
    if (count[PR_CELL_BAD]) fprintf(f, ", %d with a bad config", count[PR_CELL_BAD]);
    fprintf(f, "; nothing was run\n");
    return count[PR_CELL_BAD] ? -1 : 0;
}

int pr_grid_check_cells(const pr_grid_plan *p, pr_err *err)
{
    pr_config c;
    pr_train_opts o;
    for (int k = 0; k < p->g->n_tasks; k++)
        if (pr_grid_cell_open(p, k * p->g->seeds, NULL, 0, &c, &o, err)) return -1;
    return 0;
}

int pr_grid_drop_unavailable(const pr_grid_plan *p, pr_grid *g)
{
    PR_CHECK(p->g == g, "pr_grid_drop_unavailable: the plan is of another grid");
    int kept = 0;
    for (int k = 0; k < g->n_tasks; k++) {
        pr_config c;
        pr_train_opts o;
        pr_err err;
        pr_task *task = NULL;
        if (cell_config(p, 0, k, 1, &c, &o, &err) == 0 && pr_task_open(&task, &o, &c, &err) == 0) {
            pr_task_free(task);
            memmove(g->task[kept++], g->task[k], sizeof g->task[0]);
            continue;
        }
        fprintf(stderr, "prism ablate: task %s left out of the grid: %s\n", g->task[k], err.msg);
    }
    g->n_tasks = kept;
    return kept;
}

/* ---- the run's shared state and its progress line --------------------------------------- */
typedef struct {
    atomic_int cell;                 /* the cell it runs (index in table order), -1 when none */
    atomic_llong step, total;
} job_slot;

/* in memory shared by the parent and its workers (MAP_SHARED before fork) */
typedef struct {
    atomic_int next;                 /* the next cell to claim */
    atomic_int ran, reused, failed;
    atomic_int workers_done;         /* worker threads that have returned */
    job_slot slot[PR_GRID_MAX_JOBS];
} grid_board;

typedef struct {
    const pr_grid_plan *p;
    const pr_grid_exec *x;
    int n_cells, jobs;
    grid_board *board;
    bool draws;                      /* this process draws the progress line */
    bool tty;
    double t0, last_draw;
    pid_t parent;                    /* with worker processes: the process that started them */
} grid_run;

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
        pr_grid_cell_label(r->p->g, cell, label, sizeof label);
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
             r->p->g->name, ran + reused + failed, r->n_cells, now_running, ran, reused, failed, now - r->t0, eta);
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

/* a line on stderr about a cell, below the progress line */
static void say(const grid_run *r, const char *label, const char *dir, const char *what)
{
    if (r->tty) fputc('\n', stderr);
    fprintf(stderr, "prism ablate: cell %s (%s): %s\n", label, dir, what);
}

/* a stale cell by the plan's policy: 0 to go on with (c, o), now those of
 * the run to continue (keep: the run's own config, the grid's budget) or of
 * a fresh one (rerun: the folder moved aside); -1 with err */
static int handle_stale(const grid_run *r, const char *label, const char *dir, const pr_cell_diff *d,
                        pr_config *c, pr_train_opts *o, pr_err *err)
{
    char path[1200], what[2000];
    if (r->p->stale == PR_STALE_RERUN) {
        if (pr_grid_move_aside(dir, path, sizeof path, err)) return -1;
        snprintf(what, sizeof what, "stale: %s; moved to %s, trained afresh", d->text, path);
        say(r, label, dir, what);
        return 0;
    }
    if (r->p->stale != PR_STALE_KEEP)
        return pr_errf(err, "stale: %s (prism ablate --stale rerun or --stale keep)", d->text);
    if (!file_exists(dir, "latest")) return 0;   /* nothing kept to continue: a fresh run of the grid's config */
    pr_config run_c = pr_config_default();
    pr_train_opts run_o = pr_train_defaults();
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (pr_run_config_load(&run_c, &run_o, path, err)) return -1;
    run_o.steps = o->steps;   /* the table mixes no budgets */
    *c = run_c, *o = run_o;
    return 0;
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
    pr_grid_cell_label(r->p->g, i, label, sizeof label);
    const char *metric;
    double value;
    if (pr_grid_cell_open(r->p, i, dir, sizeof dir, &c, &o, &err)) goto failed;
    pr_cell_diff d;
    pr_run_config_diff(dir, &c, &o, &d);
    bool keep = d.n && r->p->stale == PR_STALE_KEEP;
    if (d.n && !keep && handle_stale(r, label, dir, &d, &c, &o, &err)) goto failed;
    if (pr_grid_read_result(dir, o.steps, o.task, NULL, &metric, &value)) {
        slot->cell = -1;
        r->board->reused++;
        if (r->draws) draw(r, true);
        return;
    }
    if (keep && handle_stale(r, label, dir, &d, &c, &o, &err)) goto failed;
    slot->total = o.steps;
    step_watch watch = {r, slot};
    o.on_step = on_step, o.on_step_user = &watch;
    pr_train_result res;
    /* a cell with a checkpoint continues (the trainer refuses one past this
     * budget: a table mixes no budgets); one without starts again */
    bool resume = file_exists(dir, "latest");
    o.overwrite = !resume;
    if (pr_train(&c, &o, dir, resume, r->x->dev, &res, &err)) goto failed;
    if (pr_grid_write_result(dir, &res, &err)) goto failed;
    slot->cell = -1;
    r->board->ran++;
    if (r->draws) draw(r, true);
    return;
failed:
    slot->cell = -1;
    r->board->failed++;
    say(r, label, dir, err.msg);
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

/* ---- workers ----------------------------------------------------------------------- */
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
                pr_grid_cell_label(r->p->g, cell, label, sizeof label);
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
 * run leaves no workers training and no lock held */
static void die_with_parent(pid_t parent)
{
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
    if (getppid() != parent) _exit(1);   /* it died before the line above */
}

/* runs the grid's cells in r->jobs worker processes */
static int run_parallel(grid_run *r)
{
    pid_t pid[PR_GRID_MAX_JOBS];
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
            if (r->x->worker_setup) r->x->worker_setup(r->x->user, j, r->jobs);
            run_cells(r, j);
            fflush(NULL);
            _exit(0);
        }
    }
    wait_for_workers(r, pid);
    return 0;
}

/* ---- worker threads ------------------------------------------------------------- */
typedef struct {
    grid_run *r;
    int j;
    jmp_buf on_fatal;
} thread_worker;

static _Thread_local thread_worker *this_worker;

/* the thread's error handler: back to its worker (tensor.h's handler is per thread) */
static void fatal_in_thread(const char *msg)
{
    (void)msg;
    longjmp(this_worker->on_fatal, 1);
}

/* a thread stopped by a fatal error: its cell counts as failed, as a worker
 * process that died in it does */
static void thread_failed(grid_run *r, int j, const char *msg)
{
    int cell = r->board->slot[j].cell;
    char where[200] = "between cells", label[120];
    if (cell >= 0) {
        pr_grid_cell_label(r->p->g, cell, label, sizeof label);
        snprintf(where, sizeof where, "in cell %s; run again to resume it", label);
        r->board->failed++;
    }
    if (r->tty) fputc('\n', stderr);
    fprintf(stderr, "prism ablate: worker thread %d stopped %s: %s\n", j, where, msg);
    r->board->slot[j].cell = -1;
}

static void *thread_main(void *arg)
{
    thread_worker *w = arg;
    grid_run *r = w->r;
    this_worker = w;
    pr_set_error_handler(fatal_in_thread);
    if (setjmp(w->on_fatal) == 0) {
        if (r->x->worker_setup) r->x->worker_setup(r->x->user, w->j, r->jobs);
        pr_device_thread_begin(r->x->dev);
        run_cells(r, w->j);
        pr_device_thread_end(r->x->dev);
    } else {
        /* the device state of this thread is unknown: its stream and pool are left as they are */
        thread_failed(r, w->j, pr_last_error());
    }
    pr_set_error_handler(NULL);
    r->board->workers_done++;
    return NULL;
}

/* runs the grid's cells in r->jobs threads of this process, drawing the
 * progress line here */
static int run_threads(grid_run *r)
{
    thread_worker *w = calloc((size_t)r->jobs, sizeof *w);   /* jmp_bufs: kept off the stack */
    PR_CHECK(w, "prism ablate: out of host memory");
    pthread_t tid[PR_GRID_MAX_JOBS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)64 << 20);   /* a training's deep stack, with room for ASan's larger frames */
    r->draws = false;   /* the threads leave the line to this one */
    int started = 0;
    for (; started < r->jobs; started++) {
        w[started] = (thread_worker){.r = r, .j = started};
        int e = pthread_create(&tid[started], &attr, thread_main, &w[started]);
        if (e) {
            fprintf(stderr, "prism ablate: cannot start worker thread %d: %s\n", started, strerror(e));
            break;
        }
    }
    pthread_attr_destroy(&attr);
    for (int last_done = 0;;) {   /* drawn once more after the last thread is done */
        bool all_done = r->board->workers_done == started;
        int finished = r->board->ran + r->board->reused + r->board->failed;
        draw(r, finished != last_done);
        last_done = finished;
        if (all_done) break;
        nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    }
    for (int j = 0; j < started; j++) pthread_join(tid[j], NULL);
    free(w);
    r->draws = true;
    return started > 0 ? 0 : -1;   /* the threads that started ran every cell */
}

int pr_grid_run(const pr_grid_plan *p, const pr_grid_exec *x, pr_grid_tally *tally)
{
    int n_cells = pr_grid_cells(p->g);
    grid_board *board = mmap(NULL, sizeof *board, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    PR_CHECK(board != MAP_FAILED, "prism ablate: cannot map the workers' shared state: %s", strerror(errno));
    for (int j = 0; j < PR_GRID_MAX_JOBS; j++) board->slot[j].cell = -1;
    int jobs = x->jobs < 1 ? 1 : x->jobs > PR_GRID_MAX_JOBS ? PR_GRID_MAX_JOBS : x->jobs;
    grid_run r = {.p = p, .x = x, .n_cells = n_cells, .board = board, .jobs = jobs < n_cells ? jobs : n_cells,
                  .draws = true, .tty = isatty(STDERR_FILENO), .t0 = pr_now_s()};
    int rc = 0;
    if (x->threads && r.jobs > 1) rc = run_threads(&r);
    else if (r.jobs <= 1) run_cells(&r, 0);
    else rc = run_parallel(&r);
    if (r.tty) fputc('\n', stderr);
    *tally = (pr_grid_tally){.ran = board->ran, .reused = board->reused, .failed = board->failed};
    munmap(board, sizeof *board);
    return rc;
}

/* ---- the results ------------------------------------------------------------------- */
int pr_grid_collect(const pr_grid_plan *p, double *value, pr_grid_results *res)
{
    int finished = 0, reported = 0;
    const pr_grid *g = p->g;
    *res = (pr_grid_results){.g = g, .value = value};
    for (int i = 0; i < pr_grid_cells(g); i++) {
        pr_config c;
        pr_train_opts o;
        pr_err err;
        char dir[1100];
        const char *metric = NULL;
        value[i] = NAN;
        if (pr_grid_cell_open(p, i, dir, sizeof dir, &c, &o, &err) ||
            !pr_grid_read_result(dir, o.steps, o.task, p->metric, &metric, &value[i]))
            continue;
        int v, k, s;
        pr_grid_cell_axes(g, i, &v, &k, &s);
        pr_cell_diff d;
        pr_run_config_diff(dir, &c, &o, &d);
        res->stale[v][k] += d.n ? 1 : 0;
        if (d.precision >= 0) res->precision_cells[d.precision]++;
        finished++, reported += isfinite(value[i]) ? 1 : 0;
        if (!res->metric[k] && isfinite(value[i])) res->metric[k] = metric;
    }
    for (int k = 0; k < g->n_tasks; k++)
        if (!res->metric[k]) res->metric[k] = "-";
    if (p->metric && finished && !reported) {
        fprintf(stderr, "prism ablate: --metric %s: no finished cell reports it (a cell's result.json lists "
                        "its metrics: acc, loss; test_ and val_ hit@K, ndcg@K, auc; bpb)\n", p->metric);
        return -1;
    }
    return 0;
}
