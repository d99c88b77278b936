/* tools/inspect.c: `prism inspect`: what a model's gradients and state
 * writes look like on a batch, for people learning how it works and for
 * checking a claim on real inputs:
 *   - per-parameter gradient norms over the first N steps of plain SGD
 *     (a table, and a CSV and an SVG plot on request);
 *   - the tape of the first step as text and as Graphviz DOT;
 *   - --rank: the numerical rank of every token's write B_t, per layer and
 *     head (the PRISM paper's Rank-L claim: 1 for gdn, up to L+1 for prism),
 *     read off the recurrence nodes the forward recorded;
 *   - --dump STEP: every activation and gradient of one step as safetensors.
 * The last line printed is one JSON object. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "tools/plot.h"
#include "tools/tools.h"

#define MAX_SETS 64
#define RANK_TOL 1e-6

typedef struct {
    const char *model, *preset, *config_file, *text_file;
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
            "                     [--seed S] [--batch B] [--seq-len T] [--text FILE]\n"
            "                     [--steps N] [--lr LR] [--csv FILE] [--plot FILE]\n"
            "                     [--tape FILE] [--dot FILE] [--rank] [--dump STEP [--dump-file FILE]]\n\n"
            "Builds a fresh model (config: defaults, preset, file, then each --set, as in\n"
            "`prism model`), takes one batch and runs N steps of plain SGD on it, printing\n"
            "each parameter's gradient norm per step.\n\n"
            "  --seed S        init seed (the config key `seed`) and the batch's; default: the config's\n"
            "  --batch B       sequences in the batch (default 2)\n"
            "  --seq-len T     tokens per sequence (default 32)\n"
            "  --text FILE     the batch is FILE's first B*(T+1) bytes (an LM with vocab >= 256);\n"
            "                  default: random tokens (rec: random items)\n"
            "  --steps N       SGD steps (default 1); gradient norms are those before each update\n"
            "  --lr LR         SGD learning rate (default 0.1)\n"
            "  --csv FILE      the gradient norms, one row per step, one column per parameter\n"
            "  --plot FILE     the gradient norms against the step as an SVG plot (log scale)\n"
            "  --tape FILE     the first step's tape as text, after backward ('-': stdout)\n"
            "  --dot FILE      the same tape as Graphviz DOT ('-': stdout)\n"
            "  --rank          the rank of every token's write B_t (singular values above %g of\n"
            "                  the largest) per layer and head, and their histogram\n"
            "  --dump STEP     every parameter, activation and gradient of step STEP (0-based)\n"
            "                  to --dump-file (default inspect_step<STEP>.safetensors)\n",
            RANK_TOL);
}

static int parse_options(int argc, char **argv, inspect_opts *o)
{
    *o = (inspect_opts){.steps = 1, .batch = 2, .seq_len = 32, .dump_step = -1, .lr = 0.1};
    pr_args a = pr_args_begin("prism inspect", argc, argv);
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return usage(stdout), -1;
        if (pr_args_string(&a, "--model", &o->model) || pr_args_string(&a, "--preset", &o->preset) ||
            pr_args_string(&a, "--config", &o->config_file) || pr_args_string(&a, "--text", &o->text_file) ||
            pr_args_string(&a, "--tape", &o->tape_file) || pr_args_string(&a, "--dot", &o->dot_file) ||
            pr_args_string(&a, "--plot", &o->plot_file) || pr_args_string(&a, "--csv", &o->csv_file) ||
            pr_args_string(&a, "--dump-file", &o->dump_file) || pr_args_flag(&a, "--rank", &o->rank) ||
            pr_args_int(&a, "--steps", 1, 100000, &o->steps) || pr_args_int(&a, "--batch", 1, 4096, &o->batch) ||
            pr_args_int(&a, "--seq-len", 1, 1 << 20, &o->seq_len) ||
            pr_args_int(&a, "--dump", 0, 100000, &o->dump_step) || pr_args_positive(&a, "--lr", &o->lr))
            continue;
        if (pr_args_u64(&a, "--seed", &o->seed)) {
            o->seed_given = true;
            continue;
        }
        const char *set = NULL;
        if (pr_args_string(&a, "--set", &set)) {
            if (set && o->n_sets == MAX_SETS) return pr_args_error(&a, "more than %d --set options", MAX_SETS);
            if (set) o->sets[o->n_sets++] = set;
            continue;
        }
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (!o->model) return pr_args_error(&a, "--model NAME is required (prism model --help lists the mixers)");
    if (o->seed_given && o->seed > 2147483647)
        return pr_args_error(&a, "--seed wants an integer from 0 to 2147483647 (the config key seed), not %llu",
                             (unsigned long long)o->seed);
    if (o->dump_file && o->dump_step < 0) return pr_args_error(&a, "--dump-file needs --dump STEP");
    if (o->dump_step >= o->steps)
        return pr_args_error(&a, "--dump %d is past the last step (--steps %d runs steps 0 to %d)", o->dump_step,
                             o->steps, o->steps - 1);
    return 0;
}

/* defaults, preset, file, mixer, the --set options, --seed; 0 or a usage error */
static int build_config(const inspect_opts *o, pr_config *c)
{
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

/* ---- the batch ------------------------------------------------------------------- */
typedef struct {
    pr_tensor *ids, *targets;   /* LM: ids, targets [B,T] (targets: the next token); rec: items [B,T], target [B] */
} batch;

static int read_text_tokens(const inspect_opts *o, const pr_config *c, int64_t n, int64_t *tok)
{
    if (c->vocab < 256 || strcmp(c->task, "lm") != 0) {
        fprintf(stderr, "prism inspect: --text needs an LM with vocab >= 256 (bytes), not task %s vocab %d\n",
                c->task, c->vocab);
        return PR_EXIT_USAGE;
    }
    FILE *f = fopen(o->text_file, "rb");
    if (!f) return fprintf(stderr, "prism inspect: %s: cannot open\n", o->text_file), 1;
    int64_t got = 0;
    for (int ch; got < n && (ch = fgetc(f)) != EOF;) tok[got++] = ch;
    fclose(f);
    if (got < n) {
        fprintf(stderr, "prism inspect: %s: %lld bytes, the batch needs B*(T+1) = %lld\n", o->text_file,
                (long long)got, (long long)n);
        return 1;
    }
    return 0;
}

static int make_batch(const inspect_opts *o, const pr_config *c, pr_arena *a, batch *b)
{
    int64_t B = o->batch, T = o->seq_len, n = B * (T + 1);
    bool rec = strcmp(c->task, "rec") == 0;
    int64_t *tok = malloc(sizeof(int64_t) * (size_t)n);
    uint64_t seed = (uint64_t)c->seed;
    for (int64_t i = 0; i < n; i++) {   /* rec: items 1..n_items (0 pads) */
        double u = pr_philox_uniform(seed, 0xba7c4, (uint64_t)i);
        tok[i] = rec ? 1 + (int64_t)(u * c->rec_n_items) : (int64_t)(u * c->vocab);
    }
    int rc = o->text_file ? read_text_tokens(o, c, n, tok) : 0;
    if (!rc) {
        b->ids = pr_empty(a, PR_I64, PR_CPU, PR_DIMS(B, T));
        b->targets = rec ? pr_empty(a, PR_I64, PR_CPU, PR_DIMS(B)) : pr_empty(a, PR_I64, PR_CPU, PR_DIMS(B, T));
        int64_t *ids = b->ids->data, *tg = b->targets->data;
        for (int64_t s = 0; s < B; s++) {
            for (int64_t t = 0; t < T; t++) {
                ids[s * T + t] = tok[s * (T + 1) + t];
                if (!rec) tg[s * T + t] = tok[s * (T + 1) + t + 1];
            }
            if (rec) tg[s] = tok[s * (T + 1) + T];
        }
    }
    free(tok);
    return rc;
}

static pr_tensor *model_loss(pr_ctx *ctx, const pr_model *m, const batch *b)
{
    if (strcmp(m->cfg.task, "rec") == 0) return pr_rec_loss(ctx, m, b->ids, b->targets);
    return pr_lm_loss(ctx, m, b->ids, b->targets);
}

/* ---- gradient norms ---------------------------------------------------------------- */
static void sgd_update(const pr_params *r, double lr)
{
    for (int i = 0; i < r->n; i++) {
        pr_tensor *w = r->p[i].t;
        if (!w->grad) continue;
        for (int64_t j = 0; j < w->numel; j++) pr_set(w, j, pr_get(w, j) - lr * pr_get(w->grad, j));
    }
}

/* norms [steps][n_params], steps in rows */
static void print_norm_table(const pr_params *r, const double *norms, const double *losses, int steps)
{
    int shown = steps < 6 ? steps : 6;   /* the first steps, then the last one */
    printf("%-36s", "gradient norm by step");
    for (int s = 0; s < shown; s++) printf(" %10d", s == shown - 1 ? steps - 1 : s);
    printf("\n%-36s", "(loss)");
    for (int s = 0; s < shown; s++) printf(" %10.4g", losses[s == shown - 1 ? steps - 1 : s]);
    printf("\n");
    for (int i = 0; i < r->n; i++) {
        printf("%-36s", r->p[i].path);
        for (int s = 0; s < shown; s++) printf(" %10.3e", norms[(size_t)(s == shown - 1 ? steps - 1 : s) * r->n + i]);
        printf("\n");
    }
}

static int write_norm_csv(const char *path, const pr_params *r, const double *norms, const double *losses, int steps)
{
    FILE *f = fopen(path, "w");
    if (!f) return fprintf(stderr, "prism inspect: %s: cannot write\n", path), 1;
    fprintf(f, "step,loss");
    for (int i = 0; i < r->n; i++) fprintf(f, ",%s", r->p[i].path);
    fprintf(f, "\n");
    for (int s = 0; s < steps; s++) {
        fprintf(f, "%d,%.9g", s, losses[s]);
        for (int i = 0; i < r->n; i++) fprintf(f, ",%.9g", norms[(size_t)s * r->n + i]);
        fprintf(f, "\n");
    }
    return fclose(f) ? fprintf(stderr, "prism inspect: %s: write failed\n", path), 1 : 0;
}

/* One series per parameter name with the layer index dropped
 * (`layers.*.mixer.q_proj`): the norm over every layer's copy, so the plot
 * stays readable for deep models. */
static void group_name(const char *path, char *out, size_t n)
{
    const char *rest = NULL;
    if (strncmp(path, "layers.", 7) == 0 && (rest = strchr(path + 7, '.')))
        snprintf(out, n, "layers.*%s", rest);
    else
        snprintf(out, n, "%s", path);
}

static int write_norm_plot(const char *path, const char *model, const pr_params *r, const double *norms, int steps)
{
    char names[PR_PLOT_MAX_SERIES][96];
    int group[4096], n_groups = 0;
    if (r->n > 4096) return fprintf(stderr, "prism inspect: --plot: more than 4096 parameters\n"), 1;
    for (int i = 0; i < r->n; i++) {
        char g[96];
        group_name(r->p[i].path, g, sizeof g);
        int k = 0;
        while (k < n_groups && strcmp(names[k], g) != 0) k++;
        if (k == n_groups && n_groups == PR_PLOT_MAX_SERIES) k = -1;   /* the rest are left out of the plot */
        else if (k == n_groups) snprintf(names[n_groups++], 96, "%s", g);
        group[i] = k;
    }
    double *x = malloc(sizeof(double) * (size_t)steps), *y = calloc((size_t)(n_groups * steps), sizeof(double));
    for (int s = 0; s < steps; s++) {
        x[s] = s;
        for (int i = 0; i < r->n; i++) {
            double v = norms[(size_t)s * r->n + i];
            if (group[i] >= 0) y[group[i] * steps + s] += v * v;
        }
    }
    char title[96];
    snprintf(title, sizeof title, "%s: gradient norm by step", model);
    pr_plot p = {.title = title, .xlabel = "step", .ylabel = "gradient L2 norm", .ylog = true};
    for (int k = 0; k < n_groups; k++) {
        for (int s = 0; s < steps; s++) y[k * steps + s] = sqrt(y[k * steps + s]);
        pr_plot_add(&p, names[k], steps, x, y + k * steps);
    }
    pr_err err;
    int rc = pr_plot_save(&p, path, &err);
    if (rc) fprintf(stderr, "prism inspect: %s\n", err.msg);
    free(x), free(y);
    return rc ? 1 : 0;
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

/* parameters, their grads, every recorded op's outputs and their grads */
static int dump_step(const char *path, const pr_ctx *ctx, const pr_model *m, const batch *b, int step)
{
    const pr_params *r = m->params;
    int cap = 2 * r->n + 2 * PR_MAX_OUT * ctx->n_tape + 2, n = 0;
    const char **names = calloc((size_t)cap, sizeof *names);
    const pr_tensor **ts = calloc((size_t)cap, sizeof *ts);
    char **own = calloc((size_t)cap, sizeof *own);
#define ADD(t_, ...)                                                                                        \
    do {                                                                                                    \
        own[n] = malloc(160);                                                                               \
        snprintf(own[n], 160, __VA_ARGS__);                                                                 \
        names[n] = own[n], ts[n++] = (t_);                                                                  \
    } while (0)
    ADD(b->ids, "batch.ids");
    ADD(b->targets, "batch.targets");
    for (int i = 0; i < r->n; i++) {
        ADD(r->p[i].t, "param.%s", r->p[i].path);
        if (r->p[i].t->grad) ADD(r->p[i].t->grad, "grad.%s", r->p[i].path);
    }
    for (int p = 0; p < ctx->n_tape; p++)
        for (int o = 0; o < ctx->tape[p].n_out; o++) {
            const pr_tensor *t = ctx->tape[p].out[o];
            ADD(t, "act.%04d.%s.%d", p, ctx->tape[p].op->name, o);
            if (t->grad) ADD(t->grad, "actgrad.%04d.%s.%d", p, ctx->tape[p].op->name, o);
        }
#undef ADD
    char step_s[16];
    snprintf(step_s, sizeof step_s, "%d", step);
    const char *keys[] = {"model", "step"}, *values[] = {m->cfg.mixer, step_s};
    pr_err err;
    int rc = pr_safetensors_write(path, n, names, ts, 2, keys, values, &err);
    if (rc) fprintf(stderr, "prism inspect: %s\n", err.msg);
    else printf("dumped %d tensors of step %d to %s\n", n, step, path);
    for (int i = 0; i < n; i++) free(own[i]);
    free(own), free(names), free(ts);
    return rc ? 1 : 0;
}

/* ---- write ranks ------------------------------------------------------------------------ */
#define MAX_RANK 257

typedef struct {
    int64_t hist[MAX_RANK];   /* over every layer, head and token */
    int max_possible, layers;
} rank_summary;

/* per layer and head: the histogram over tokens; the recurrence nodes come
 * in layer order, one per layer */
static void print_ranks(const pr_ctx *ctx, rank_summary *sum)
{
    *sum = (rank_summary){0};
    for (int p = 0; p < ctx->n_tape; p++) {
        const pr_node *n = &ctx->tape[p];
        if (strcmp(n->op->name, "recurrence") != 0) continue;
        const pr_tensor *k = n->in[PR_REC_K];
        int64_t BT = k->shape[0] * k->shape[1], H = k->shape[2];
        int *ranks = malloc(sizeof(int) * (size_t)(BT * H));
        int most = pr_recurrence_write_ranks(n, RANK_TOL, ranks);
        if (most > sum->max_possible) sum->max_possible = most;
        if (sum->layers == 0) printf("write rank of B_t per layer and head (tokens with each rank):\n");
        for (int64_t h = 0; h < H; h++) {
            int64_t count[MAX_RANK] = {0};
            for (int64_t t = 0; t < BT; t++) count[ranks[t * H + h]]++;
            printf("  layer %d head %lld (%s, at most %d):", sum->layers, (long long)h,
                   pr_rule_name((pr_rule)n->iarg[0]), most);
            for (int v = 0; v <= most; v++)
                if (count[v]) printf(" rank %d: %lld", v, (long long)count[v]);
            printf("\n");
            for (int v = 0; v <= most; v++) sum->hist[v] += count[v];
        }
        free(ranks);
        sum->layers++;
    }
}

static void print_rank_histogram(const char *model, const rank_summary *sum)
{
    if (sum->layers == 0) {
        printf("write rank: %s has no linear recurrence (no B_t to measure)\n", model);
        return;
    }
    int64_t total = 0;
    for (int v = 0; v <= sum->max_possible; v++) total += sum->hist[v];
    printf("write rank histogram, %s (%d layers; singular values > %g of the largest):\n", model, sum->layers,
           RANK_TOL);
    for (int v = 0; v <= sum->max_possible; v++) {
        int bar = (int)llround(40.0 * (double)sum->hist[v] / (double)total);
        printf("  rank %d: %8lld %5.1f%% ", v, (long long)sum->hist[v], 100.0 * (double)sum->hist[v] / (double)total);
        for (int i = 0; i < bar; i++) putchar('#');
        putchar('\n');
    }
}

/* ---- the command -------------------------------------------------------------------------- */
typedef struct {
    double *norms, *losses;
    rank_summary ranks;
} inspect_result;

/* step s: loss, backward, norms; the first step's tape/dot/rank; the dump */
static int run_step(const inspect_opts *o, pr_ctx *ctx, pr_model *m, const batch *b, int s, inspect_result *res)
{
    const pr_params *r = m->params;
    pr_tensor *loss = model_loss(ctx, m, b);
    pr_backward(ctx, loss);
    res->losses[s] = pr_item(loss);
    for (int i = 0; i < r->n; i++) res->norms[(size_t)s * r->n + i] = r->p[i].t->grad ? pr_norm2(r->p[i].t->grad) : 0;
    int rc = 0;
    if (s == 0 && o->tape_file) rc |= with_file(o->tape_file, pr_tape_dump, ctx);
    if (s == 0 && o->dot_file) rc |= with_file(o->dot_file, pr_tape_dot, ctx);
    if (s == 0 && o->rank) print_ranks(ctx, &res->ranks);
    if (s == o->dump_step) {
        char def[64];
        snprintf(def, sizeof def, "inspect_step%d.safetensors", s);
        rc |= dump_step(o->dump_file ? o->dump_file : def, ctx, m, b, s);
    }
    sgd_update(r, o->lr);
    pr_params_zero_grads(r);
    pr_step_reset(ctx);
    return rc;
}

static void print_json(const inspect_opts *o, const pr_model *m, const inspect_result *res)
{
    printf("{\"model\":\"%s\",\"seed\":%d,\"steps\":%d,\"params\":%lld,\"loss_first\":%.9g,\"loss_last\":%.9g",
           m->cfg.mixer, m->cfg.seed, o->steps, (long long)pr_params_count(m->params), res->losses[0],
           res->losses[o->steps - 1]);
    if (o->rank) {
        printf(",\"rank_layers\":%d,\"rank_max_possible\":%d,\"rank_hist\":[", res->ranks.layers,
               res->ranks.max_possible);
        for (int v = 0; v <= res->ranks.max_possible && res->ranks.layers; v++)
            printf("%s%lld", v ? "," : "", (long long)res->ranks.hist[v]);
        printf("]");
    }
    printf("}\n");
}

int pr_cmd_inspect(int argc, char **argv)
{
    inspect_opts o;
    pr_config c;
    int rc = parse_options(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = build_config(&o, &c))) return rc;
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    pr_model_init(m);
    pr_arena *data = pr_arena_new("inspect batch", 0);
    batch b;
    if ((rc = make_batch(&o, &c, data, &b))) goto done;
    pr_ctx *ctx = pr_ctx_new((uint64_t)c.seed);
    inspect_result res = {.norms = calloc((size_t)o.steps * m->params->n, sizeof(double)),
                          .losses = calloc((size_t)o.steps, sizeof(double))};
    for (int s = 0; s < o.steps; s++) rc |= run_step(&o, ctx, m, &b, s, &res);
    print_norm_table(m->params, res.norms, res.losses, o.steps);
    if (o.csv_file) rc |= write_norm_csv(o.csv_file, m->params, res.norms, res.losses, o.steps);
    if (o.plot_file) rc |= write_norm_plot(o.plot_file, c.mixer, m->params, res.norms, o.steps);
    if (o.rank) print_rank_histogram(c.mixer, &res.ranks);
    print_json(&o, m, &res);
    free(res.norms), free(res.losses);
    pr_params_release_grads(m->params);
    pr_ctx_free(ctx);
done:
    pr_arena_free(data);
    pr_model_free(m);
    return rc == PR_EXIT_USAGE ? rc : rc ? 1 : 0;   /* steps and writes OR their 1s together */
}
