/* tools/train.c: `prism train`, `prism eval` and `prism generate`, thin
 * shells over train/ (the trainer) that parse options and print the summary.
 * The last line train and eval print is one JSON object. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tasks/tasks.h"
#include "tools/tools.h"
#include "train/train.h"

static const char *const devices[] = {"auto", "cpu", "cuda", NULL};

/* device choice 0 auto, 1 cpu, 2 cuda; returns -1 when cuda is asked for and absent */
static int pick_device(int choice, pr_device *dev)
{
    if (choice == 2 && !pr_cuda_available()) return -1;
    *dev = choice == 1 ? PR_CPU : choice == 2 || pr_cuda_available() ? PR_CUDA : PR_CPU;
    return 0;
}

static int fail(const char *cmd, const char *msg)
{
    fprintf(stderr, "%s: %s\n", cmd, msg);
    return 1;
}

/* ---- prism train ------------------------------------------------------------------ */
static void train_usage(FILE *f)
{
    fprintf(f,
            "usage: prism train --model NAME --task TASK [--preset P] [--config F] [--set key=value]...\n"
            "                   [--steps N] [--seed S] [--data FILE] [--device auto|cpu|cuda] [--out DIR]\n"
            "                   [--resume | --overwrite] [--gpus N | --procs N] [--dist-file PATH]\n"
            "                   [--dist-timeout S] [--zero 0|1] [--bucket-mb MB]\n\n"
            "Trains a model on a task in a run directory (config.json, manifest.json, metrics.jsonl,\n"
            "checkpoints). The config is the defaults, then the task's preset (or --preset), then\n"
            "--config, then --model, then each --set in order, then --steps, --seed and --data.\n"
            "Probe tasks start from the `probe` preset sized for a quick CPU run: seq_len 64,\n"
            "init_std 0.2 (memory tasks: d_model 128, init_std 0.02), 1500 steps at train.lr=3e-3;\n"
            "lm sets vocab 256. --preset P replaces the task's preset with the model preset P\n"
            "(prism model --help); on a probe, --preset probe is the paper's Table 4 protocol\n"
            "(Algorithm 2: vocab 64, D 16, seq_len 128) and --preset probe-authors the authors'\n"
            "(probe.style=authors, vocab 32, 1 head, LayerNorm, D 16 at seq_len 128, or D 128 at\n"
            "64 for mqar, poly_recall and var_tracking), both 10000 steps of AdamW lr 1e-3 wd\n"
            "1e-4, clip 5, batch 32, scored on 8000 samples. Keys named train.<key> set the\n"
            "training options below (probe.style, rec.data and rec.negatives need no prefix);\n"
            "the others are the model's keys (prism model --help). --seed sets both the data seed\n"
            "and the model's init seed. --data is the lm task's text file (rec reads rec.data).\n"
            "--out defaults to runs/<model>-<task>-s<seed> with the --model given (sasrec runs are\n"
            "runs/sasrec-rec-s1); when that folder holds a run already, the next free name\n"
            "(runs/prism-parity-s1-2, -3, ...) is taken and said. A folder given with --out that\n"
            "holds a run is refused: --resume continues it, --overwrite replaces it (its\n"
            "checkpoints, metrics and config are removed first). One train at a time in a folder:\n"
            "a second one is refused, naming the first one's pid.\n"
            "rec starts from the rec-small preset, 600 steps, on rec.data=synthetic (1000 users\n"
            "and items); rec.n_items comes from the data; --model sasrec is the sasrec preset at\n"
            "the task's seq_len. Its metrics are Hit@10/200/500, NDCG@10/200/500 and AUC over\n"
            "all items, on the validation (val_) and test (test_) item of every user.\n"
            "--resume continues the run in --out from its latest checkpoint with the run's own\n"
            "config (only --steps, the new total, and --device may be given with it); the result\n"
            "is bit for bit the uninterrupted run's on the same device. A total below the\n"
            "checkpoint's step is refused; a run already at its total trains nothing, says so and\n"
            "evaluates it.\n\n"
            "tasks: %s %s %s %s %s %s %s %s %s (probes), lm (--data FILE), rec\n\n"
            "training keys:\n",
            pr_probe_names[0], pr_probe_names[1], pr_probe_names[2], pr_probe_names[3], pr_probe_names[4],
            pr_probe_names[5], pr_probe_names[6], pr_probe_names[7], pr_probe_names[8]);
    pr_train_print_help(f);
    fprintf(f, "\nSeveral GPUs (data parallel): --gpus N runs N processes on this host, one per GPU,\n"
               "NCCL between them (libnccl.so.2 is loaded at run time: $PRISM_NCCL_LIB, the library\n"
               "path, or a Python site-packages' nvidia/nccl/lib). --procs N does the same on the\n"
               "CPU through shared memory. Each rank takes train.batch/N rows of the same global\n"
               "batch (train.batch must be a multiple of N); grads are averaged over ranks in\n"
               "buckets of --bucket-mb MB (default 25) during the backward; rank 0 alone writes the\n"
               "run directory. --zero 1 shards the optimizer state (ZeRO-1; checkpoints still hold\n"
               "all of it, so --resume works with any N). Across hosts run one process per GPU\n"
               "with `mpirun -np N prism train ... --dist-file PATH` (or srun): rank and size come\n"
               "from OMPI_COMM_WORLD_*, PMI_* or SLURM_*, and rank 0 hands NCCL's id to the others\n"
               "through PATH on a filesystem they all see (MPI itself is not linked). A rank that\n"
               "dies stops the others; a collective that makes no progress for --dist-timeout\n"
               "seconds (default 300) fails naming the rank and operation.\n");
    fprintf(f, "\nThe last line printed is one JSON object: model, task, seed, steps, metrics,\n"
               "tokens_per_s, params, run_dir. Exit status 1 when training stops (a file, the\n"
               "NaN/Inf trap, which names the op, layer and step), 2 for a bad command line.\n");
}

typedef struct {
    const char *model, *task, *preset, *config, *out, *data;
    const char *sets[64];
    int n_sets, device, steps_set, seed_set;
    int64_t steps;
    uint64_t seed;
    bool resume, overwrite;
    /* data parallel */
    int gpus, procs, zero;       /* zero: -1 unset */
    double bucket_mb, dist_timeout;
    const char *dist_file;
} train_args;

static int parse_train(pr_args *a, train_args *t)
{
    while (pr_args_next(a)) {
        const char *set = NULL;
        if (pr_args_help(a)) return train_usage(stdout), 0;
        if (pr_args_string(a, "--model", &t->model) || pr_args_string(a, "--task", &t->task) ||
            pr_args_string(a, "--preset", &t->preset) || pr_args_string(a, "--config", &t->config) ||
            pr_args_string(a, "--out", &t->out) ||
            pr_args_string(a, "--data", &t->data) || pr_args_flag(a, "--resume", &t->resume) ||
            pr_args_flag(a, "--overwrite", &t->overwrite) ||
            pr_args_choice(a, "--device", devices, &t->device))
            continue;
        if (pr_args_string(a, "--set", &set)) {
            if (set && t->n_sets == 64) return pr_args_error(a, "more than 64 --set options");
            if (set) t->sets[t->n_sets++] = set;
            continue;
        }
        if (pr_args_int(a, "--gpus", 1, 1024, &t->gpus) || pr_args_int(a, "--procs", 1, 1024, &t->procs) ||
            pr_args_int(a, "--zero", 0, 1, &t->zero) || pr_args_positive(a, "--bucket-mb", &t->bucket_mb) ||
            pr_args_positive(a, "--dist-timeout", &t->dist_timeout) || pr_args_string(a, "--dist-file", &t->dist_file))
            continue;
        int steps = 0;
        if (pr_args_int(a, "--steps", 0, 2000000000, &steps)) {
            t->steps = steps;
            t->steps_set = 1;
            continue;
        }
        if (pr_args_u64(a, "--seed", &t->seed)) {
            if (t->seed > 2147483647u) return pr_args_error(a, "--seed wants 0..2147483647, not %llu",
                                                            (unsigned long long)t->seed);
            t->seed_set = 1;
            continue;
        }
        return pr_args_unknown(a);
    }
    if (a->failed) return PR_EXIT_USAGE;
    if (t->resume && t->overwrite)
        return pr_args_error(a, "--resume continues the run in --out, --overwrite replaces it: give one");
    if (t->gpus && t->procs) return pr_args_error(a, "--gpus and --procs: give one (--gpus on CUDA, --procs on the CPU)");
    if (t->gpus && t->device == 1) return pr_args_error(a, "--gpus N runs on CUDA; --procs N trains on the CPU");
    if (t->procs && t->device == 2) return pr_args_error(a, "--procs N trains on the CPU; --gpus N runs on CUDA");
    return -1;
}

/* the config of a new run, in the documented order */
static int resolve_config(const train_args *t, pr_config *c, pr_train_opts *o, pr_err *err)
{
    *c = pr_config_default();
    *o = pr_train_defaults();
    if (t->config) {  /* the file may name the task, whose preset comes first */
        pr_config scratch = *c;
        if (pr_run_config_load(&scratch, o, t->config, err)) return -1;
    }
    if (t->task) snprintf(o->task, sizeof o->task, "%s", t->task);
    if (pr_task_preset_as(c, o, o->task, t->preset, err) || (t->config && pr_run_config_load(c, o, t->config, err)))
        return -1;
    if (t->task) snprintf(o->task, sizeof o->task, "%s", t->task);
    char mixer[32];
    snprintf(mixer, sizeof mixer, "%s", c->mixer);
    if (pr_train_set_model(c, o->task, t->model ? t->model : mixer, err)) return -1;
    for (int i = 0; i < t->n_sets; i++) {
        /* rec.data, rec.negatives and probe.style are training keys; rec.n_items is the model's */
        if (pr_train_is_key(t->sets[i]) ? pr_train_set(o, t->sets[i], err) : pr_config_set(c, t->sets[i], err))
            return -1;
    }
    if (t->steps_set) o->steps = t->steps;
    if (t->seed_set) o->seed = (int64_t)t->seed, c->seed = (int)t->seed;
    pr_task_family family = pr_task_family_of(o->task);
    if (t->data && family != PR_TASK_LM)
        return pr_errf(err, "--data is the lm task's text file; task %s does not read it%s", o->task,
                       family != PR_TASK_REC ? "" : " (rec reads --set rec.data=amazon:FILE or yelp:FILE)");
    if (t->data) snprintf(o->data, sizeof o->data, "%s", t->data);
    return pr_config_check(c, err);
}

/* the model as the user named it: sasrec is attention in SASRec's blocks */
static const char *model_name(const train_args *t, const pr_config *c)
{
    return t->model ? t->model : pr_config_model_name(c);
}

/* the run folder: --out, refused when it holds a run and neither --resume nor
 * --overwrite was given (2); else runs/<model>-<task>-s<seed>, or the next
 * free name after it, said */
static int pick_out(pr_args *a, const train_args *t, const pr_config *c, const pr_train_opts *o, char *out, size_t n)
{
    if (t->out) {
        snprintf(out, n, "%s", t->out);
        if (!t->resume && !t->overwrite && pr_run_exists(out))
            return pr_args_error(a, "--out %s holds a run: give --resume to continue it, --overwrite to replace it, "
                                    "or another --out", out);
        return 0;
    }
    char base[1024];
    mkdir("runs", 0755);
    snprintf(base, sizeof base, "runs/%s-%s-s%lld", model_name(t, c), o->task, (long long)o->seed);
    if (pr_run_free_name(out, n, base))
        return pr_args_error(a, "every name from %s to %s-99999 holds a run", base, base);
    if (strcmp(out, base)) fprintf(stderr, "%s: %s holds a run; this one goes to %s\n", a->cmd, base, out);
    return 0;
}

/* --resume: the run's config, the new total checked against its checkpoint */
static int resume_config(pr_args *a, const train_args *t, pr_config *c, pr_train_opts *o)
{
    char path[1100];
    pr_err err;
    int64_t at = 0;
    snprintf(path, sizeof path, "%s/config.json", t->out);
    *c = pr_config_default();
    *o = pr_train_defaults();
    if (pr_run_config_load(c, o, path, &err)) return fail(a->cmd, err.msg);
    /* a config written before train.precision existed: its run trained in f32 */
    if (strcmp(o->precision, "auto") == 0) snprintf(o->precision, sizeof o->precision, "f32");
    if (t->steps_set) o->steps = t->steps;
    if (pr_checkpoint_latest(t->out, &at, &err)) return fail(a->cmd, err.msg);
    if (at > o->steps)
        return pr_args_error(a, "--steps %lld: the run in %s is at step %lld already; give a larger total",
                             (long long)o->steps, t->out, (long long)at);
    if (at == o->steps)
        fprintf(stderr, "%s: the run in %s is at step %lld, its total: nothing to train (give --steps N for a "
                        "larger total); evaluating it\n", a->cmd, t->out, (long long)at);
    return -1;
}

/* ---- several processes ------------------------------------------------------------ */
/* --gpus N / --procs N: checks what would fail in every rank alike, then runs them */
static int launch(pr_args *a, const train_args *t, const pr_train_opts *o, const pr_dist_env *env, int world)
{
    pr_err err;
    int first, rows;
    if (pr_dist_shard(o->batch, 0, world, &first, &rows, &err)) return pr_args_error(a, "%s", err.msg);
    bool few_gpus;
    int rc = pr_dist_launch_self(a->cmd, world, t->gpus, &env->nccl, t->dist_file, NULL, a->argc, a->argv,
                                 &few_gpus, &err);
    if (rc < 0 && few_gpus) return fprintf(stderr, "%s: %s\n", a->cmd, err.msg), PR_EXIT_NO_GPU;
    return rc < 0 ? fail(a->cmd, err.msg) : rc;
}

/* tests only (tests/test_dist.sh): PRISM_TEST_EXIT_AT=R:S makes rank R exit
 * (status 3) after step S, to show that a dying rank stops the run */
static void exit_at_step(void *user, int rank, int64_t step)
{
    const int *at = user;
    if (rank != at[0] || step != at[1]) return;
    fprintf(stderr, "rank %d: PRISM_TEST_EXIT_AT: exiting after step %d\n", rank, at[1]);
    _exit(3);
}

static void set_test_exit(pr_train_opts *o)
{
    static int at[2];
    const char *text = getenv("PRISM_TEST_EXIT_AT");
    if (text && sscanf(text, "%d:%d", &at[0], &at[1]) == 2) o->hooks.after_step = exit_at_step, o->hooks.user = at;
}

/* the header line: what trains, where, in which precision */
static void print_header(const pr_config *c, const pr_train_opts *o, pr_device dev, const char *out)
{
    pr_precision p = pr_train_precision(o, dev);
    fprintf(stderr, "prism train: %s on %s, %s, precision %s%s, in %s\n", pr_config_model_name(c), o->task,
            pr_device_name(dev), pr_precision_name(p),
            p == PR_PREC_TF32 && dev == PR_CPU ? " (no TF32 on the CPU: computed as f32)" : "", out);
    if (dev != PR_CUDA) return;
    char note[320];   /* the plan; a capture the GPU refuses is said when it happens */
    pr_train_graph_plan(c, o, dev, pr_task_family_of(o->task) != PR_TASK_REC, note, sizeof note);
    fprintf(stderr, "prism train: cuda graph %s\n", note);
}

/* one rank of a data-parallel run: its GPU, the communicator, training; rank 0 prints the summary */
static int train_rank(const train_args *t, const pr_config *c, pr_train_opts *o, const char *out, pr_device dev,
                      const pr_dist_env *env)
{
    char cmd[64];
    snprintf(cmd, sizeof cmd, "prism train: rank %d", env->rank);
    pr_err err;
    pr_comm *comm;
    double timeout = t->dist_timeout > 0 ? t->dist_timeout : 300;
    if (dev == PR_CUDA && pr_dist_set_device(env->local_rank, &err)) return fail(cmd, err.msg);
    int rc = dev == PR_CUDA ? pr_comm_nccl_open(&comm, env, timeout, &err) : pr_comm_shm_open(&comm, env, timeout, &err);
    if (rc) return fail(cmd, err.msg);
    o->comm = comm;
    set_test_exit(o);
    if (env->rank == 0) print_header(c, o, dev, out);
    pr_train_result res;
    if (pr_train(c, o, out, t->resume, dev, &res, &err) || comm->barrier(comm, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        comm->abort(comm);   /* the others' waits fail at once, naming this rank */
        return 1;
    }
    if (env->rank == 0) pr_print_summary(stdout, c, o, &res, out);
    pr_comm_free(comm);
    return 0;
}

int pr_cmd_train(int argc, char **argv)
{
    const char *cmd = "prism train";
    pr_args a = pr_args_begin(cmd, argc, argv);
    train_args t = {.zero = -1};
    int rc = parse_train(&a, &t);
    if (rc >= 0) return rc;
    pr_config c;
    pr_train_opts o;
    pr_err err;
    pr_dist_env env;
    if (pr_dist_env_read(&env, t.dist_file, &err)) return fail(cmd, err.msg);
    int asked = t.gpus ? t.gpus : t.procs;
    /* the launcher itself trains nothing: it checks GPUs and NCCL for its ranks */
    bool launcher = asked > 1 && !getenv("PRISM_RANK") && env.world == 1;
    pr_device dev = PR_CPU;
    if (t.gpus) t.device = 2;
    if (t.procs) t.device = 1;
    if (!launcher && pick_device(t.device, &dev)) return pr_args_no_cuda(cmd);
    char out[1024];
    if (t.resume) {
        if (!t.out) return pr_args_error(&a, "--resume needs --out DIR (the run to continue)");
        if (t.model || t.task || t.preset || t.config || t.n_sets || t.seed_set || t.data)
            return pr_args_error(&a, "--resume takes the run's own config: give only --out, --steps, --device "
                                     "and the data-parallel options");
        if ((rc = resume_config(&a, &t, &c, &o)) >= 0) return rc;
    } else {
        if (t.config && pr_args_readable(cmd, t.config)) return 1;
        /* a config too big for the machine is a bad value: said before anything is allocated (ranks
         * check in the trainer, once on their own GPU) */
        bool check_memory = !launcher && env.world == 1;
        if (resolve_config(&t, &c, &o, &err) || (check_memory && pr_train_fits(&c, &o, dev, &err))) {
            fprintf(stderr, "%s: %s\n", cmd, err.msg);
            return PR_EXIT_USAGE;
        }
    }
    if (t.zero >= 0) o.zero = t.zero;
    if (t.bucket_mb > 0) o.bucket_mb = t.bucket_mb;
    o.overwrite = t.overwrite;
    /* the launcher picks the folder and hands it to its ranks; ranks started by
     * mpirun or srun leave a folder that holds a run to the trainer, which refuses it */
    const char *handed = getenv("PRISM_TRAIN_OUT");
    if (env.world > 1) snprintf(out, sizeof out, "%s", t.out ? t.out : handed ? handed : "runs/unnamed");
    else if (pick_out(&a, &t, &c, &o, out, sizeof out)) return PR_EXIT_USAGE;
    if (launcher) setenv("PRISM_TRAIN_OUT", out, 1);
    if (launcher) return launch(&a, &t, &o, &env, asked);
    if (asked && env.world > 1 && asked != env.world)
        return pr_args_error(&a, "--%s %d, but the launcher started %d ranks", t.gpus ? "gpus" : "procs", asked,
                             env.world);
    if (env.world > 1) return train_rank(&t, &c, &o, out, dev, &env);
    pr_train_result res;
    print_header(&c, &o, dev, out);
    rc = pr_train(&c, &o, out, t.resume, dev, &res, &err);
    if (rc) fprintf(stderr, "%s: %s\n", cmd, err.msg);
    if (!rc || res.nonfinite[0]) pr_print_summary(stdout, &c, &o, &res, out);
    return rc ? 1 : 0;
}

/* ---- prism eval -------------------------------------------------------------------- */
static void eval_usage(FILE *f)
{
    fprintf(f, "usage: prism eval --run DIR [--device auto|cpu|cuda]\n\n"
               "Evaluates the latest checkpoint of a run on its task's evaluation split (the run's\n"
               "config.json says which). The last line printed is one JSON object: model, task,\n"
               "seed, steps, metrics, tokens_per_s, params, run_dir.\n");
}

int pr_cmd_eval(int argc, char **argv)
{
    const char *cmd = "prism eval", *dir = NULL;
    pr_args a = pr_args_begin(cmd, argc, argv);
    int device = 0;
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return eval_usage(stdout), 0;
        if (pr_args_string(&a, "--run", &dir) || pr_args_choice(&a, "--device", devices, &device)) continue;
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (!dir) return pr_args_error(&a, "--run DIR is required");
    pr_device dev;
    if (pick_device(device, &dev)) return pr_args_no_cuda(cmd);
    pr_config c;
    pr_train_opts o;
    pr_train_result res;
    pr_err err;
    if (pr_eval_run(dir, dev, &c, &o, &res, &err)) return fail(cmd, err.msg);
    pr_print_summary(stdout, &c, &o, &res, dir);
    return 0;
}
