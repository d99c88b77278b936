/* tools/compare.c: the options of `prism compare` (models head to head on
 * one task through the trainer: the same data order, budget and seed for
 * each) and of `prism bench throughput` (training tokens/s of the whole
 * step, forward, backward and AdamW, per model and sequence length at a
 * fixed number of tokens per batch: a table, a CSV and an SVG plot), and
 * the launch of its ranks. compare's runs, table and report page are
 * lab/compare.c's; the throughput measurement, its table, CSV and plot
 * lab/throughput.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "models/models.h"
#include "tools/tools.h"
#include "train/train.h"

#define MAX_MODELS PR_COMPARE_MAX_MODELS
static const char *const devices[] = {"auto", "cpu", "cuda", NULL};

/* "a,b,c" into names (pointers into buf, at most max), each a known mixer; -1 naming the bad one */
static int split_models(pr_args *a, const char *list, char *buf, size_t n, const char **names, int max, int *count)
{
    snprintf(buf, n, "%s", list);
    *count = 0;
    for (char *save = NULL, *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (!pr_mixer_by_name(s) && strcmp(s, "sasrec"))
            return pr_args_error(a, "--models: '%s' is not a mixer or sasrec (prism model --help)", s), -1;
        if (*count == max) return pr_args_error(a, "--models: more than %d models", max), -1;
        names[(*count)++] = s;
    }
    if (!*count) return pr_args_error(a, "--models wants a comma-separated list of mixers"), -1;
    return 0;
}

static int pick_device(pr_args *a, int choice, pr_device *dev)
{
    if (choice == 2 && !pr_cuda_available()) return pr_args_no_cuda(a->cmd);
    *dev = choice == 1 || !pr_cuda_available() ? PR_CPU : PR_CUDA;
    return 0;
}

static int apply_sets(pr_config *c, pr_train_opts *o, const char *const *sets, int n, pr_err *err)
{
    for (int i = 0; i < n; i++)
        if (pr_grid_set(c, o, sets[i], err)) return -1;
    return 0;
}

/* ---- prism compare ------------------------------------------------------------------- */
static void compare_usage(FILE *f)
{
    fprintf(f, "usage: prism compare --models a,b,... --task TASK [--steps N] [--seed S] [--set key=value]...\n"
               "                     [--data FILE] [--device auto|cpu|cuda] [--out DIR]\n\n"
               "Trains each model (a mixer, or sasrec on rec) on the task with the same config,\n"
               "data order, step budget and seed (a run each in DIR/<model>, DIR defaulting to\n"
               "runs/compare-<task>; a compare run again replaces them), then prints one table: the\n"
               "task's quality metric (probes: acc; rec: test_ndcg@10; lm: bpb), tokens/s,\n"
               "parameters and peak memory (on the GPU the device allocator's peak; on the CPU the\n"
               "step arena's: activations, saved tensors and the tape). The table is also written to\n"
               "DIR/compare.md and DIR/compare.csv, and shown with the runs' training curves in\n"
               "DIR/report.html (one page, no network or script needed; open it in a browser).\n");
}

int pr_cmd_compare(int argc, char **argv)
{
    pr_args a = pr_args_begin("prism compare", argc, argv);
    const char *models = NULL, *task = NULL, *out = NULL, *data = NULL, *sets[32];
    int n_sets = 0, device = 0, steps = 0;
    uint64_t seed = 1;
    while (pr_args_next(&a)) {
        const char *set = NULL;
        if (pr_args_help(&a)) return compare_usage(stdout), 0;
        if (pr_args_string(&a, "--models", &models) || pr_args_string(&a, "--task", &task) ||
            pr_args_string(&a, "--out", &out) || pr_args_string(&a, "--data", &data) ||
            pr_args_choice(&a, "--device", devices, &device) || pr_args_int(&a, "--steps", 1, 2000000000, &steps) ||
            pr_args_u64(&a, "--seed", &seed))
            continue;
        if (pr_args_string(&a, "--set", &set)) {
            if (set && n_sets == 32) return pr_args_error(&a, "more than 32 --set options");
            if (set) sets[n_sets++] = set;
            continue;
        }
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (!models || !task) return pr_args_error(&a, "--models a,b,... and --task TASK are required");
    if (seed > 2147483647u) return pr_args_error(&a, "--seed wants 0..2147483647, not %llu", (unsigned long long)seed);
    char buf[512];
    const char *names[MAX_MODELS];
    int n = 0;
    pr_device dev = PR_CPU;
    if (split_models(&a, models, buf, sizeof buf, names, MAX_MODELS, &n)) return PR_EXIT_USAGE;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], "sasrec") == 0 && pr_task_family_of(task) != PR_TASK_REC)
            return pr_args_error(&a, "--models sasrec: a rec model; give --task rec");
    if (pick_device(&a, device, &dev)) return PR_EXIT_NO_GPU;
    pr_compare_setup setup = {.task = task, .data = data, .sets = sets, .n_sets = n_sets, .steps = steps, .seed = seed};
    int64_t budget = 0;   /* the steps each model trains, for the report */
    for (int i = 0; i < n; i++) {   /* a bad --set fails before any model trains */
        pr_config c;
        pr_train_opts o;
        pr_err err;
        if (pr_compare_config(&setup, names[i], &c, &o, &err)) return pr_args_error(&a, "%s", err.msg);
        budget = o.steps;
    }
    char root[1024];
    snprintf(root, sizeof root, "%s", out ? out : "runs/compare-");
    if (!out) snprintf(root + strlen(root), sizeof root - strlen(root), "%s", task);

    pr_compare_row rows[MAX_MODELS] = {0};
    int failed = 0;
    for (int i = 0; i < n; i++) {
        rows[i].name = names[i];
        fprintf(stderr, "prism compare: %s (%d of %d)\n", names[i], i + 1, n);
        pr_compare_run_row(&rows[i], &setup, root, dev);
        failed += !rows[i].ok;
    }
    pr_compare_table(stdout, rows, n, false, dev);
    char md[1100], csv[1100], report[1100];
    snprintf(md, sizeof md, "%s/compare.md", root);
    snprintf(csv, sizeof csv, "%s/compare.csv", root);
    snprintf(report, sizeof report, "%s/report.html", root);
    pr_err err;
    if (pr_compare_write_table(md, rows, n, false, dev, &err) || pr_compare_write_table(csv, rows, n, true, dev, &err))
        return fprintf(stderr, "prism compare: %s\n", err.msg), 1;
    printf("tables: %s, %s\n", md, csv);
    if (pr_compare_write_report(report, root, task, budget, rows, n, dev, &err))
        return fprintf(stderr, "prism compare: %s\n", err.msg), 1;
    printf("report: %s\n", report);
    return failed ? 1 : 0;
}

/* ---- prism bench throughput ------------------------------------------------------------ */
static void throughput_usage(FILE *f)
{
    fprintf(f, "usage: prism bench throughput --models a,b,... --seq-lens T1,T2,... [--tokens-per-batch N]\n"
               "                              [--preset P] [--set key=value]... [--steps N] [--warmup N]\n"
               "                              [--device auto|cpu|cuda] [--precision auto|f32|tf32|bf16]\n"
               "                              [--breakdown] [--out DIR] [--gpus N | --procs N]\n\n"
               "Training tokens/s of the whole step (forward, LM loss, backward, AdamW) per model and\n"
               "sequence length, at --tokens-per-batch tokens a step (default 16384; the batch is\n"
               "N / T sequences), on random tokens with the preset's model (default lm-130m). Each\n"
               "figure is the median of --steps timed steps (default 3) after --warmup (default 1).\n"
               "Writes DIR/throughput.csv and DIR/throughput.svg (tokens/s against T, log x; DIR\n"
               "defaults to runs/throughput) and prints the table; each model's parameter count\n"
               "stands beside its figures (the table's params column, the CSV's last, the legend);\n"
               "with several lengths the last column is the last length's tokens/s over the\n"
               "first's (1.000: flat in T). The lm-130m and rec-small presets size every mixer\n"
               "like attn (match_attn, models/README.md).\n"
               "Beside each length's figure, MiB: the step's peak memory. On CUDA the caching\n"
               "allocator's high-water mark of live bytes from the model's creation to the last timed\n"
               "step (tensors and kernel scratch; not cuBLAS's workspace, the CUDA context or free\n"
               "cached blocks); on the CPU the arenas' (parameters, grads, optimizer state and the\n"
               "step arena's peak). The CSV's peak_bytes column holds it in bytes; '-' when the\n"
               "model did not run.\n"
               "train.cuda_graph (CUDA; auto = on where training would capture, e.g. not mom.route=packed): each step\n"
               "captured into a CUDA graph after the warm-up (two eager steps at least) and replayed, as\n"
               "training does; --set train.cuda_graph=off times eager steps. A model the capture refuses\n"
               "is said on stderr and not timed ('-'). The header says 'cuda graph on'.\n"
               "--precision: as train.precision (prism train --help): auto (the default) is bf16 on\n"
               "CUDA and f32 on the CPU; bf16 is mixed precision (bf16 products and activations, f32\n"
               "residual stream, losses and weights), tf32 f32 with CUDA products on TF32 tensor cores\n"
               "(the CPU computes it as f32). The precision heads the table and titles the plot.\n"
               "--tf32: --precision tf32.\n"
               "--breakdown: after the timed steps, one more step\n"
               "per model and length with the device idle between ops, and a table of where its time\n"
               "went (op, part of the model, forward or backward, ms and share of the step; the waits\n"
               "make that step slower than the timed ones), then what that step's tensors held by kind\n"
               "and dtype (outputs, autocast's casts, saved, bf16 staging copies, grads; MiB), printed\n"
               "and written to DIR/breakdown-<model>-T<T>.md (one process only).\n"
               "--gpus N: N processes, one per GPU, NCCL between them (prism train --help says where\n"
               "NCCL is looked for); each takes 1/N of the batch (N must divide every batch) and the\n"
               "grads are all-reduced in 25 MB buckets during the backward. Each figure is then the\n"
               "whole batch's tokens/s, beside the one-GPU figure measured in the same run (every\n"
               "GPU alone, the whole batch) and the scaling efficiency, N-GPU / (N x one-GPU); the\n"
               "CSV gains the columns ranks, tokens_per_s_1, efficiency (before params). --procs N:\n"
               "the same on the CPU (shared memory between the processes).\n");
}

/* the options; t holds what to measure */
typedef struct {
    pr_throughput_table t;
    const char *out, *sets[32];
    int n_sets, device;
    int precision;      /* index into precisions: 0 auto, else pr_precision + 1 */
    bool breakdown;
    int gpus, procs;    /* data parallel: ranks (0: one process) */
} throughput_args;

static const char *const precisions[] = {"auto", "f32", "tf32", "bf16", NULL};

static int parse_throughput(pr_args *a, throughput_args *o, char *buf, size_t n)
{
    pr_throughput_table *t = &o->t;
    const char *models = NULL;
    int tokens = 16384;
    while (pr_args_next(a)) {
        const char *set = NULL;
        if (pr_args_help(a)) return throughput_usage(stdout), 0;
        if (pr_args_string(a, "--models", &models) || pr_args_string(a, "--preset", &t->preset) ||
            pr_args_string(a, "--out", &o->out) || pr_args_choice(a, "--device", devices, &o->device) ||
            pr_args_int(a, "--steps", 1, 64, &t->steps) || pr_args_int(a, "--warmup", 0, 100, &t->warmup) ||
            pr_args_int(a, "--tokens-per-batch", 1, 1 << 30, &tokens) ||
            pr_args_choice(a, "--precision", precisions, &o->precision) ||
            pr_args_flag(a, "--breakdown", &o->breakdown) ||
            pr_args_int_list(a, "--seq-lens", 1, 1 << 24, PR_THROUGHPUT_MAX_LENS, t->lens, &t->n_lens) ||
            pr_args_int(a, "--gpus", 1, 1024, &o->gpus) || pr_args_int(a, "--procs", 1, 1024, &o->procs))
            continue;
        bool tf32 = false;
        if (pr_args_flag(a, "--tf32", &tf32)) {
            o->precision = 1 + PR_PREC_TF32;
            continue;
        }
        if (pr_args_string(a, "--set", &set)) {
            if (set && o->n_sets == 32) return pr_args_error(a, "more than 32 --set options");
            if (set) o->sets[o->n_sets++] = set;
            continue;
        }
        return pr_args_unknown(a);
    }
    if (a->failed) return PR_EXIT_USAGE;
    if (!models || !t->n_lens) return pr_args_error(a, "--models a,b,... and --seq-lens T1,T2,... are required");
    if (o->gpus && o->procs) return pr_args_error(a, "--gpus and --procs: give one (--gpus on CUDA, --procs on the CPU)");
    if (o->gpus && o->device == 1) return pr_args_error(a, "--gpus N runs on CUDA; --procs N runs on the CPU");
    if (o->procs && o->device == 2) return pr_args_error(a, "--procs N runs on the CPU; --gpus N runs on CUDA");
    if (o->gpus) o->device = 2;
    if (o->procs) o->device = 1;
    t->tokens = tokens;
    int world = o->gpus ? o->gpus : o->procs ? o->procs : 1;
    for (int i = 0; i < t->n_lens; i++)
        if (t->tokens / t->lens[i] % world)
            return pr_args_error(a, "--seq-lens %lld: a batch of %lld sequences does not split over %d ranks",
                                 (long long)t->lens[i], (long long)(t->tokens / t->lens[i]), world);
    for (int i = 0; i < t->n_lens; i++)
        if (t->lens[i] > t->tokens)
            return pr_args_error(a, "--seq-lens %lld is longer than --tokens-per-batch %lld (a batch holds one "
                                    "sequence at least)", (long long)t->lens[i], (long long)t->tokens);
    return split_models(a, models, buf, n, t->names, PR_THROUGHPUT_MAX_MODELS, &t->n_models) ? PR_EXIT_USAGE : -1;
}

/* --gpus N / --procs N: the ranks are this command again, N times */
static int launch_throughput(pr_args *a, const throughput_args *o, const pr_dist_env *env, int world)
{
    pr_err err;
    bool few_gpus;
    int rc = pr_dist_launch_self(a->cmd, world, o->gpus, &env->nccl, NULL, "bench", a->argc, a->argv, &few_gpus,
                                 &err);
    if (rc < 0) fprintf(stderr, "%s: %s\n", a->cmd, err.msg);
    return rc >= 0 ? rc : few_gpus ? PR_EXIT_NO_GPU : 1;
}

/* a rank of a launched benchmark: its GPU and the communicator */
static int open_rank(const pr_dist_env *env, pr_device dev, pr_comm **comm)
{
    pr_err err;
    int rc = dev == PR_CUDA ? pr_dist_set_device(env->local_rank, &err) || pr_comm_nccl_open(comm, env, 300, &err)
                            : pr_comm_shm_open(comm, env, 300, &err);
    if (rc) fprintf(stderr, "prism bench throughput: rank %d: %s\n", env->rank, err.msg);
    return rc ? -1 : 0;
}

int pr_bench_throughput(int argc, char **argv)
{
    pr_args a = pr_args_begin("prism bench throughput", argc, argv);
    static throughput_args o = {.t = {.preset = "lm-130m", .steps = 3, .warmup = 1}, .out = "runs/throughput"};
    pr_throughput_table *t = &o.t;
    char buf[512];
    int rc = parse_throughput(&a, &o, buf, sizeof buf);
    if (rc >= 0) return rc;
    pr_device dev = PR_CPU;
    if (pick_device(&a, o.device, &dev)) return PR_EXIT_NO_GPU;
    pr_config c = pr_config_default();
    pr_train_opts unused = pr_train_defaults();
    pr_err err;
    if (pr_config_preset(&c, t->preset, &err) || apply_sets(&c, &unused, o.sets, o.n_sets, &err))
        return pr_args_error(&a, "%s", err.msg);
    snprintf(unused.task, sizeof unused.task, "lm");   /* the step trains on random tokens: an LM's precision */
    if (o.precision) snprintf(unused.precision, sizeof unused.precision, "%s", precisions[o.precision]);
    t->prec = pr_train_precision(&unused, dev);   /* --precision, else --set train.precision, else the device's */
    t->graph = dev == PR_CUDA && strcmp(unused.cuda_graph, "off") != 0;   /* per model in the run, as training decides */
    for (int m = 0; m < t->n_models; m++) {   /* a config no model can take is a bad --set: said before any run */
        pr_config mc = c;
        char kv[64];
        snprintf(kv, sizeof kv, "mixer=%s", t->names[m]);
        if (pr_config_set(&mc, kv, &err) || pr_config_check(&mc, &err))
            return pr_args_error(&a, "%s: %s", t->names[m], err.msg);
    }
    int world = o.gpus ? o.gpus : o.procs ? o.procs : 1;
    pr_dist_env env;
    if (pr_dist_env_read(&env, NULL, &err)) return fprintf(stderr, "%s: %s\n", a.cmd, err.msg), 1;
    if (world > 1 && env.world == 1 && !getenv("PRISM_RANK")) return launch_throughput(&a, &o, &env, world);
    pr_comm *comm = NULL;
    if (env.world > 1 && open_rank(&env, dev, &comm)) return 1;
    /* ranks other than 0 measure alike but stay silent */
    bool talk = !comm || comm->rank == 0;
    /* the output folder and its parents, as --out runs/x/y expects; with other ranks waiting on
     * this one, go on: the CSV will fail */
    if (talk && pr_make_dirs(o.out, &err)) {
        fprintf(stderr, "prism bench throughput: %s\n", err.msg);
        if (!comm) return 1;
    }
    int failed = pr_throughput_run(t, &c, &unused, dev, comm, o.breakdown ? o.out : NULL, talk ? stdout : NULL);
    if (comm) {
        if (comm->barrier(comm, &err)) return fprintf(stderr, "%s: %s\n", a.cmd, err.msg), 1;
        pr_comm_free(comm);
    }
    if (!talk) return failed ? 1 : 0;
    if (o.breakdown && t->ranks == 1) pr_throughput_print_breakdowns(stdout, t, o.out);
    if (pr_throughput_write(t, o.out, pr_device_name(dev), &err))
        return fprintf(stderr, "prism bench throughput: %s\n", err.msg), 1;
    printf("wrote %s/throughput.csv, %s/throughput.svg\n", o.out, o.out);
    return failed ? 1 : 0;
}
