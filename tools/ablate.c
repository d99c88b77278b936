/* tools/ablate.c: `prism ablate`: its options, then lab/'s grid run
 * (lab/grid_run.c): every (model or variant) x task x seed cell of a grid
 * trained in its own run directory, resumably, by one process or by worker
 * processes or threads, then a table of mean ± std over seeds and a bar
 * chart of it. What stays here is the command's: the device, the number of
 * jobs and what runs them, the
 * folder's lock, and what a worker takes from the environment (its GPU from
 * CUDA_VISIBLE_DEVICES, its threads unless OMP_NUM_THREADS or
 * OPENBLAS_NUM_THREADS are set). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef PRISM_HAVE_OPENMP
#include <omp.h>
#endif

#include "lab/lab.h"
#include "models/models.h"
#include "tools/tools.h"
#include "train/train.h"

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
            "                    [--jobs N] [--workers processes|threads] [--only MODEL,...]\n"
            "                    [--tasks TASK,...] [--metric NAME] [--stale refuse|rerun|keep]\n"
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
            "steps here); a larger --steps continues every cell (constant schedule). A task the\n"
            "trainer cannot open is left out, saying why.\n"
            "Only a cell's own config is resumed: a cell whose folder holds a run made under\n"
            "another config than the grid gives it now (a key of the grid, a preset or --set\n"
            "changed, or the task's data generator: manifest.json's data_version) is stale, and\n"
            "ablate trains nothing until told what to do with it:\n"
            "  --stale refuse   (the default) name each stale cell's folder and the keys that\n"
            "                   differ, train nothing and exit 1\n"
            "  --stale rerun    move each stale cell's folder aside to <folder>.stale-<N> (nothing\n"
            "                   is deleted) and train the cell afresh\n"
            "  --stale keep     use it as it is: its result is read, an unfinished one continues\n"
            "                   under its own config.json; the table marks such cells \"stale config\"\n"
            "                   (results.md, report.html; results.csv and .json count them in\n"
            "                   stale_runs)\n"
            "Keys that change no result are not compared: train.ckpt_every, log_every,\n"
            "eval_every, cuda_graph, zero, bucket_mb; train.precision when it is auto (the device's\n"
            "choice); rec.n_items when 0 (the data's); train.steps under a constant schedule.\n\n"
            "  --jobs N         run N cells at a time, each in its own worker process (default: one\n"
            "                   per GPU on CUDA, one per core on the CPU); the table is the same as\n"
            "                   with one job. With --device cuda every worker has its own CUDA\n"
            "                   context; on a host with several GPUs worker j uses GPU j mod the GPU\n"
            "                   count, otherwise all share GPU 0 (taking turns: little faster than\n"
            "                   one job). On the CPU each worker gets cores/N OpenMP and OpenBLAS\n"
            "                   threads unless OMP_NUM_THREADS or OPENBLAS_NUM_THREADS is set.\n"
            "  --workers W      what runs the N cells: processes (default, as above) or threads of\n"
            "                   this one process, each cell with its own context and, on CUDA, each\n"
            "                   thread on its own CUDA stream with its own memory pool, so the cells'\n"
            "                   kernels run side by side on one GPU (processes only take turns):\n"
            "                   the lever for grids of small models, whose steps leave most of the\n"
            "                   GPU idle. Every thread uses the first visible GPU (default N with\n"
            "                   threads on CUDA: 8; CUDA_DEVICE_MAX_CONNECTIONS is 32 unless set).\n"
            "                   The table, folders and resuming are the same;\n"
            "                   a fatal error stops only its thread, its cell counted as failed\n"
            "                   (a GPU fault, which breaks the process's CUDA context, stops all).\n"
            "  --only M,...     only these models or variants of the grid (names as in its table; a\n"
            "                   model's name alone takes all its variants: --only gdn is table4's\n"
            "                   \"gdn paper-style\" and \"gdn authors-style\")\n"
            "  --tasks T,...    only these tasks of the grid\n"
            "  --dry-run        list every cell, its folder and what a run would do with it (done,\n"
            "                   resume from step K, new, or stale: KEY OLD -> NEW, the first three\n"
            "                   keys that differ and their count), checking each cell's config;\n"
            "                   train nothing\n"
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
    int n_sets, device, seeds, jobs, workers;   /* workers: 0 processes, 1 threads */
    int stale;                                  /* 0: refuse, 1: rerun, 2: keep (pr_stale_policy) */
    int64_t steps;
    bool steps_set, dry_run;
} ablate_args;

static int parse_ablate(pr_args *a, ablate_args *t)
{
    static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
    static const char *const workers[] = {"processes", "threads", NULL};
    static const char *const stale[] = {"refuse", "rerun", "keep", NULL};   /* refuse: as with no --stale */
    _Static_assert(PR_STALE_REFUSE == 0 && PR_STALE_RERUN == 1 && PR_STALE_KEEP == 2, "--stale's choices in order");
    while (pr_args_next(a)) {
        const char *set = NULL;
        int steps = 0;
        if (pr_args_help(a)) return ablate_usage(stdout), 0;
        if (pr_args_string(a, "--grid", &t->grid) || pr_args_string(a, "--out", &t->out) ||
            pr_args_string(a, "--only", &t->only) || pr_args_string(a, "--tasks", &t->tasks) ||
            pr_args_string(a, "--metric", &t->metric) ||
            pr_args_choice(a, "--device", devices, &t->device) ||
            pr_args_choice(a, "--workers", workers, &t->workers) || pr_args_choice(a, "--stale", stale, &t->stale) ||
            pr_args_int(a, "--seeds", 1, PR_GRID_MAX_SEEDS, &t->seeds) ||
            pr_args_int(a, "--jobs", 1, PR_GRID_MAX_JOBS, &t->jobs) || pr_args_flag(a, "--dry-run", &t->dry_run))
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

typedef struct { pr_device dev; int ngpus; bool threads; } worker_env;

/* a worker's GPU (CUDA) or its share of the cores (CPU), before its first
 * cell; a worker thread keeps the process's GPU (CUDA_VISIBLE_DEVICES is the
 * whole process's), and OpenMP's thread count is per thread */
static void setup_worker(void *user, int worker, int jobs)
{
    const worker_env *w = user;
    if (w->dev == PR_CUDA) {
        if (!w->threads) pick_gpu(worker, w->ngpus);
    } else {
        share_cores(jobs);
    }
}

/* stale cells stop the run before it trains anything, unless --stale says
 * what to do with them; -1 after saying which and how to go on */
static int check_stale(const pr_grid_plan *p)
{
    int n = pr_grid_stale_report(p, NULL);
    if (!n) return 0;
    if (p->stale == PR_STALE_KEEP) {
        fprintf(stderr, "prism ablate: %d stale cell%s kept as %s (--stale keep); the table marks them\n", n,
                n == 1 ? "" : "s", n == 1 ? "it is" : "they are");
        return 0;
    }
    if (p->stale == PR_STALE_RERUN) return 0;   /* each is moved aside and named as it runs */
    fprintf(stderr, "prism ablate: %d cell%s of %s ran under another config than grid %s gives %s now (stale):\n", n,
            n == 1 ? "" : "s", p->root, p->g->name, n == 1 ? "it" : "them");
    pr_grid_stale_report(p, stderr);
    fprintf(stderr, "Nothing was trained: reusing stale cells would mix two protocols in one table. Run again with\n"
                    "  --stale rerun   to move each folder aside to <folder>.stale-<N> and train the cell afresh, or\n"
                    "  --stale keep    to use them as they are (the table marks them \"stale config\").\n");
    return -1;
}

/* the cells run, the table printed and written with its chart and report page */
static int run_grid(const pr_grid_plan *p, pr_device dev, int jobs, int ngpus, bool threads)
{
    worker_env w = {dev, ngpus, threads};
    pr_grid_tally n;
    pr_grid_exec x = {.dev = dev, .jobs = jobs, .threads = threads, .worker_setup = setup_worker, .user = &w};
    if (pr_grid_run(p, &x, &n)) return 1;
    int n_cells = pr_grid_cells(p->g), rc;
    pr_grid_results res;
    double *value = malloc(sizeof(double) * (size_t)n_cells);
    PR_CHECK(value, "prism ablate: out of host memory");
    if (pr_grid_collect(p, value, &res)) {
        rc = 1;
    } else {
        pr_grid_write_markdown(&res, stdout);
        char stem[64];
        snprintf(stem, sizeof stem, "results%s%s", p->metric ? "-" : "", p->metric ? p->metric : "");
        rc = pr_grid_write_outputs(&res, p->root, stem) ? 1 : 0;
    }
    printf("%d cells: %d run, %d reused, %d failed\n", n_cells, n.ran, n.reused, n.failed);
    free(value);
    return rc || n.failed ? 1 : 0;
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
    /* with one job cells train in this process; with more, no CUDA here (pr_grid_exec.jobs) */
    int ngpus = t.device == 1 ? 0 : t.jobs != 1 ? gpu_count_from_child() : pr_cuda_available();
    if (t.device == 2 && !ngpus) return pr_args_no_cuda(a.cmd);
    pr_device dev = ngpus ? PR_CUDA : PR_CPU;
    bool threads = t.workers == 1;
    if (!t.jobs) t.jobs = ngpus ? (threads ? 8 : ngpus) : cpu_cores();
    /* threads on one GPU: a hardware queue for each thread's stream, where
     * the driver's default of 8 queues makes streams share them and wait on
     * each other's kernels. Read when the CUDA context is made, which with
     * more than one job happens in the workers; a value already set stays */
    if (threads && dev == PR_CUDA && t.jobs > 1) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    char root[1024];
    if (t.out) snprintf(root, sizeof root, "%s", t.out);
    else snprintf(root, sizeof root, "runs/ablate-%s", g.name);
    pr_grid_plan p = {.g = &g, .root = root, .sets = t.sets, .n_sets = t.n_sets, .metric = t.metric,
                      .stale = (pr_stale_policy)t.stale};
    if (pr_grid_check_cells(&p, &err)) return fprintf(stderr, "prism ablate: %s\n", err.msg), PR_EXIT_USAGE;
    if (!pr_grid_drop_unavailable(&p, &g))
        return fprintf(stderr, "prism ablate: no task of grid %s can run\n", g.name), 1;
    if (t.dry_run) return pr_grid_dry_run(&p, stdout) ? 1 : 0;   /* reads the folder only: no lock, no workers */
    int lock = -1;
    if (lock_grid_folder(root, &lock)) return 1;
    rc = check_stale(&p) ? 1 : run_grid(&p, dev, t.jobs, ngpus, threads);
    pr_dir_unlock(lock, root, ".ablate.lock");
    return rc;
}
