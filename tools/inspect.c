/* tools/inspect.c: `prism inspect`: what a model's gradients and state
 * writes look like on a batch, for people learning how it works and for
 * checking a claim on real inputs:
 *   - per-parameter gradient norms over N steps (a table, and a CSV and an
 *     SVG plot on request): plain SGD on one batch for a fresh model, or a
 *     training run's own task, optimizer and schedule from its checkpoint;
 *   - the tape of the first step as text and as Graphviz DOT;
 *   - --rank: the numerical rank of every token's write B_t, per layer and
 *     head (the PRISM paper's Rank-L claim: 1 for gdn, up to L for prism's
 *     form paper, L + 1 for form augmented), read off the recurrence nodes
 *     the forward recorded;
 *   - --dump STEP: every activation and gradient of one step as safetensors.
 * The last line printed is one JSON object. This file reads the options and
 * says what the steps show; the session and its steps, the dump, the
 * norms' table, CSV and plot and the write ranks are lab/inspect.c's
 * (lab/lab.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "lab/lab.h"
#include "train/train.h"
#include "tools/tools.h"

#define MAX_SETS 64

typedef struct {
    const char *model, *preset, *config_file, *text_file, *run_dir;
    const char *sets[MAX_SETS];
    int n_sets;
    const char *tape_file, *dot_file, *plot_file, *csv_file, *dump_file;
    int steps, batch, seq_len, dump_step;
    double lr;
    uint64_t seed;
    bool seed_given, rank;
} inspect_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: prism inspect --model NAME [--preset P] [--config FILE] [--set key=value]...\n"
            "                     [--seed S] [--batch B] [--seq-len T] [--text FILE] [--lr LR] [what]\n"
            "       prism inspect --run DIR [what]\n"
            "  what: [--steps N] [--csv FILE] [--plot FILE] [--tape FILE] [--dot FILE] [--rank]\n"
            "        [--dump STEP [--dump-file FILE]]\n\n"
            "A fresh model (config: defaults, preset, file, then each --set, as in `prism\n"
            "model`) takes one batch and runs N steps of plain SGD on it. A run directory\n"
            "(`prism train --out DIR`) continues from its latest checkpoint with its own\n"
            "task, batches, optimizer and schedule, without writing to DIR. Each\n"
            "parameter's gradient norm is printed per step.\n\n"
            "  --seed S        init seed (the config key `seed`) and the batch's; default: the config's\n"
            "  --batch B       sequences in the batch (default 2)\n"
            "  --seq-len T     tokens per sequence (default 32)\n"
            "  --text FILE     the batch is FILE's first B*(T+1) bytes (an LM with vocab >= 256);\n"
            "                  default: random tokens (rec: random items)\n"
            "  --lr LR         SGD learning rate (default 0.1)\n"
            "  --run DIR       a training run: its config, task, optimizer and latest checkpoint\n"
            "  --steps N       steps (default 1); the gradient norms are those before each update.\n"
            "                  Steps count from 0, or from the checkpoint's step with --run (the\n"
            "                  run's metrics.jsonl numbers a step by the count done after it: one more)\n"
            "  --csv FILE      the gradient norms, one row per step, one column per parameter\n"
            "  --plot FILE     the gradient norms against the step as an SVG plot (log scale)\n"
            "  --tape FILE     the first step's tape as text, after backward ('-': stdout)\n"
            "  --dot FILE      the same tape as Graphviz DOT ('-': stdout)\n"
            "  --rank          the rank of every token's write B_t (singular values above %g of\n"
            "                  the largest) per layer and head, and their histogram\n"
            "  --dump S        every parameter, activation and gradient of the S-th step inspected\n"
            "                  (0: the first) to --dump-file (default inspect_step<S>.safetensors)\n",
            PR_INSPECT_RANK_TOL);
}

static int parse_options(int argc, char **argv, inspect_opts *o)
{
    *o = (inspect_opts){.steps = 1, .batch = 2, .seq_len = 32, .dump_step = -1, .lr = 0.1};
    bool fresh_only = false;   /* an option that shapes a fresh model or its batch */
    pr_args a = pr_args_begin("prism inspect", argc, argv);
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return usage(stdout), -1;
        if (pr_args_string(&a, "--model", &o->model) || pr_args_string(&a, "--tape", &o->tape_file) || pr_args_string(&a, "--dot", &o->dot_file) ||
            pr_args_string(&a, "--plot", &o->plot_file) || pr_args_string(&a, "--csv", &o->csv_file) ||
            pr_args_string(&a, "--dump-file", &o->dump_file) || pr_args_flag(&a, "--rank", &o->rank) ||
            pr_args_string(&a, "--run", &o->run_dir) || pr_args_int(&a, "--steps", 1, 100000, &o->steps) ||
            pr_args_int(&a, "--dump", 0, 100000, &o->dump_step))
            continue;
        if (pr_args_int(&a, "--batch", 1, 4096, &o->batch) || pr_args_int(&a, "--seq-len", 1, 1 << 20, &o->seq_len) ||
            pr_args_positive(&a, "--lr", &o->lr) || pr_args_string(&a, "--preset", &o->preset) ||
            pr_args_string(&a, "--config", &o->config_file) || pr_args_string(&a, "--text", &o->text_file)) {
            fresh_only = true;
            continue;
        }
        if (pr_args_u64(&a, "--seed", &o->seed)) {
            o->seed_given = fresh_only = true;
            continue;
        }
        const char *set = NULL;
        if (pr_args_string(&a, "--set", &set)) {
            if (set && o->n_sets == MAX_SETS) return pr_args_error(&a, "more than %d --set options", MAX_SETS);
            if (set) o->sets[o->n_sets++] = set;
            fresh_only = true;
            continue;
        }
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (o->run_dir && (o->model || fresh_only))
        return pr_args_error(&a, "--run DIR takes the run's model, data and optimizer: --model, --preset, --config, "
                                 "--set, --seed, --batch, --seq-len, --text and --lr apply to a fresh model only");
    if (!o->model && !o->run_dir)
        return pr_args_error(&a, "--model NAME or --run DIR is required (prism model --help lists the mixers)");
    if (o->seed_given && o->seed > 2147483647)
        return pr_args_error(&a, "--seed wants an integer from 0 to 2147483647 (the config key seed), not %llu",
                             (unsigned long long)o->seed);
    if (o->dump_file && o->dump_step < 0) return pr_args_error(&a, "--dump-file needs --dump STEP");
    if (o->dump_step >= o->steps)
        return pr_args_error(&a, "--dump %d is past the last step (--steps %d runs steps 0 to %d)", o->dump_step,
                             o->steps, o->steps - 1);
    return 0;
}

/* defaults, preset, file, mixer, the --set options, --seed; 0, 1 (the file cannot be read) or a usage error */
static int build_config(const inspect_opts *o, pr_config *c)
{
    if (o->config_file && pr_args_readable("prism inspect", o->config_file)) return 1;
    *c = pr_config_default();
    pr_err err;
    char kv[64];
    snprintf(kv, sizeof kv, "mixer=%s", o->model);
    int rc = (o->preset && pr_config_preset(c, o->preset, &err)) ||
             (o->config_file && pr_config_load(c, o->config_file, &err)) || pr_config_set(c, kv, &err);
    for (int i = 0; !rc && i < o->n_sets; i++) rc = pr_config_set(c, o->sets[i], &err);
    if (!rc && o->seed_given) c->seed = (int)o->seed;
    if (!rc) rc = pr_config_check(c, &err);
    if (rc) fprintf(stderr, "prism inspect: %s\n", err.msg);
    return rc ? PR_EXIT_USAGE : 0;
}

/* ---- what the steps run on ------------------------------------------------------------ */
/* a fresh model of the options' config and batch; 0, 1 (a file cannot be read) or a usage error */
static int open_fresh(const inspect_opts *o, pr_inspect_session *s)
{
    pr_config c;
    int rc = build_config(o, &c);
    if (rc) return rc;
    if (o->text_file && (c.vocab < 256 || c.task != PR_HEAD_LM)) {
        fprintf(stderr, "prism inspect: --text needs an LM with vocab >= 256 (bytes), not task %s vocab %d\n",
                pr_head_name(c.task), c.vocab);
        return PR_EXIT_USAGE;
    }
    pr_err err;
    if (pr_inspect_open_fresh(s, &c, o->lr, o->steps, o->batch, o->seq_len, o->text_file, &err))
        return fprintf(stderr, "prism inspect: %s\n", err.msg), 1;
    return 0;
}

static int open_run(const inspect_opts *o, pr_inspect_session *s, pr_ctx *ctx)
{
    pr_err err;
    if (pr_inspect_open_run(s, o->run_dir, ctx, &err)) return fprintf(stderr, "prism inspect: %s\n", err.msg), 1;
    printf("run %s: %s on %s, from the checkpoint of step %lld\n", o->run_dir, s->cfg.mixer, s->train.task,
           (long long)s->first_step);
    return 0;
}

/* ---- the tape and the dump ------------------------------------------------------------ */
static int with_file(const char *path, void (*write)(const pr_ctx *, FILE *), const pr_ctx *ctx)
{
    if (strcmp(path, "-") == 0) return write(ctx, stdout), 0;
    FILE *f = fopen(path, "w");
    if (!f) return fprintf(stderr, "prism inspect: %s: cannot write\n", path), 1;
    write(ctx, f);
    return fclose(f) ? fprintf(stderr, "prism inspect: %s: write failed\n", path), 1 : 0;
}

/* the step's tensors (pr_inspect_dump), said */
static int dump_step(const char *path, const pr_ctx *ctx, const pr_inspect_session *s, int step)
{
    pr_err err;
    int n;
    if (pr_inspect_dump(path, ctx, s->m, &s->b, step, &n, &err)) return fprintf(stderr, "prism inspect: %s\n", err.msg), 1;
    printf("dumped %d tensors of step %d to %s\n", n, step, path);
    return 0;
}

/* ---- the command -------------------------------------------------------------------------- */
typedef struct {
    double *norms, *losses;
    pr_rank_summary ranks;
} inspect_result;

/* step s: loss, backward, norms; the first step's tape/dot/rank; the dump; the update */
static int run_step(const inspect_opts *o, pr_ctx *ctx, pr_inspect_session *ses, int s, inspect_result *res)
{
    res->losses[s] = pr_inspect_forward_backward(ctx, ses, s, res->norms + (size_t)s * ses->m->params->n);
    int rc = 0;
    if (s == 0 && o->tape_file) rc |= with_file(o->tape_file, pr_tape_dump, ctx);
    if (s == 0 && o->dot_file) rc |= with_file(o->dot_file, pr_tape_dot, ctx);
    if (s == 0 && o->rank) pr_inspect_ranks(stdout, ctx, &res->ranks);
    if (s == o->dump_step) {
        char def[64];
        snprintf(def, sizeof def, "inspect_step%d.safetensors", s);
        rc |= dump_step(o->dump_file ? o->dump_file : def, ctx, ses, s);
    }
    pr_inspect_update(ctx, ses, s);
    return rc;
}

/* a JSON number, or null for a loss that went non-finite (JSON has no nan) */
static const char *json_number(char buf[40], double v)
{
    if (!isfinite(v)) return "null";
    snprintf(buf, 40, "%.9g", v);
    return buf;
}

static void print_json(const inspect_opts *o, const pr_inspect_session *s, const inspect_result *res)
{
    char first[40], last[40];
    printf("{\"model\":\"%s\",\"seed\":%d,\"first_step\":%lld,\"steps\":%d,\"params\":%lld,\"loss_first\":%s,"
           "\"loss_last\":%s",
           s->cfg.mixer, s->cfg.seed, (long long)s->first_step, o->steps, (long long)pr_params_count(s->m->params),
           json_number(first, res->losses[0]), json_number(last, res->losses[o->steps - 1]));
    if (o->rank) {
        printf(",\"rank_layers\":%d,\"rank_max_possible\":%d,\"rank_hist\":[", res->ranks.layers,
               res->ranks.max_possible);
        for (int v = 0; v <= res->ranks.max_possible && res->ranks.layers; v++)
            printf("%s%lld", v ? "," : "", (long long)res->ranks.hist[v]);
        printf("]");
    }
    printf("}\n");
}

/* a lab/ error, as the command reports it: 1 */
static int failed(const pr_err *err)
{
    fprintf(stderr, "prism inspect: %s\n", err->msg);
    return 1;
}

static int report(const inspect_opts *o, const pr_inspect_session *s, const inspect_result *res)
{
    const pr_params *r = s->m->params;
    int rc = 0;
    pr_err err;
    pr_inspect_print_norms(stdout, r, res->norms, res->losses, o->steps, s->first_step);
    int64_t first = s->first_step;
    if (o->csv_file && pr_inspect_write_norm_csv(o->csv_file, r, res->norms, res->losses, o->steps, first, &err))
        rc |= failed(&err);
    if (o->plot_file && pr_inspect_write_norm_plot(o->plot_file, s->cfg.mixer, r, res->norms, o->steps, first, &err))
        rc |= failed(&err);
    if (o->rank) pr_inspect_rank_histogram(stdout, s->cfg.mixer, &res->ranks);
    print_json(o, s, res);
    return rc;
}

int pr_cmd_inspect(int argc, char **argv)
{
    inspect_opts o;
    int rc = parse_options(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    pr_inspect_session ses = {0};
    pr_ctx *ctx = pr_ctx_new(1);
    rc = o.run_dir ? open_run(&o, &ses, ctx) : open_fresh(&o, &ses);
    if (rc == 0) {
        inspect_result res = {.norms = calloc((size_t)o.steps * ses.m->params->n, sizeof(double)),
                              .losses = calloc((size_t)o.steps, sizeof(double))};
        for (int s = 0; s < o.steps; s++) rc |= run_step(&o, ctx, &ses, s, &res);
        rc |= report(&o, &ses, &res);
        free(res.norms), free(res.losses);
    }
    pr_inspect_session_free(&ses);
    pr_ctx_free(ctx);
    return rc == PR_EXIT_USAGE ? rc : rc ? 1 : 0;   /* steps and writes OR their 1s together */
}
