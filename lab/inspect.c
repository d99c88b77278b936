/* lab/inspect.c: what `prism inspect` measures and shows of a model's
 * steps, apart from the command's options: each parameter's gradient norm
 * per step (a table, a CSV file, an SVG plot with one series per parameter
 * name over the layers), and the numerical rank of every token's write B_t
 * read off the recurrence nodes a forward recorded on the tape (the PRISM
 * paper's Rank-L claim), per layer and head and as a histogram.
 * The norms are an array [steps][n_params], one row per step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "models/models.h"
#include "ops/recurrence/recurrence.h"

/* ---- gradient norms ---------------------------------------------------------------- */

void pr_inspect_grad_norms(const pr_params *r, double *row)
{
    for (int i = 0; i < r->n; i++) row[i] = r->p[i].t->grad ? pr_norm2(r->p[i].t->grad) : 0;
}

/* the first steps, then the last one */
void pr_inspect_print_norms(FILE *out, const pr_params *r, const double *norms, const double *losses, int steps,
                            int64_t first)
{
    int shown = steps < 6 ? steps : 6;
    fprintf(out, "%-36s", "gradient norm by step");
    for (int s = 0; s < shown; s++) fprintf(out, " %10lld", (long long)(first + (s == shown - 1 ? steps - 1 : s)));
    fprintf(out, "\n%-36s", "(loss)");
    for (int s = 0; s < shown; s++) fprintf(out, " %10.4g", losses[s == shown - 1 ? steps - 1 : s]);
    fprintf(out, "\n");
    for (int i = 0; i < r->n; i++) {
        fprintf(out, "%-36s", r->p[i].path);
        for (int s = 0; s < shown; s++)
            fprintf(out, " %10.3e", norms[(size_t)(s == shown - 1 ? steps - 1 : s) * r->n + i]);
        fprintf(out, "\n");
    }
}

int pr_inspect_write_norm_csv(const char *path, const pr_params *r, const double *norms, const double *losses,
                              int steps, int64_t first, pr_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f) return pr_errf(err, "%s: cannot write", path);
    fprintf(f, "step,loss");
    for (int i = 0; i < r->n; i++) fprintf(f, ",%s", r->p[i].path);
    fprintf(f, "\n");
    for (int s = 0; s < steps; s++) {
        fprintf(f, "%lld,%.9g", (long long)(first + s), losses[s]);
        for (int i = 0; i < r->n; i++) fprintf(f, ",%.9g", norms[(size_t)s * r->n + i]);
        fprintf(f, "\n");
    }
    return fclose(f) ? pr_errf(err, "%s: write failed", path) : 0;
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

int pr_inspect_write_norm_plot(const char *path, const char *model, const pr_params *r, const double *norms,
                               int steps, int64_t first, pr_err *err)
{
    if (r->n > 4096) return pr_errf(err, "--plot: more than 4096 parameters");
    char (*names)[96] = malloc(sizeof *names * (size_t)(r->n > 0 ? r->n : 1));
    int group[4096], n_groups = 0;
    for (int i = 0; i < r->n; i++) {
        char g[96];
        group_name(r->p[i].path, g, sizeof g);
        int k = 0;
        while (k < n_groups && strcmp(names[k], g) != 0) k++;
        if (k == n_groups) snprintf(names[n_groups++], 96, "%s", g);
        group[i] = k;
    }
    double *x = malloc(sizeof(double) * (size_t)steps), *y = calloc((size_t)(n_groups * steps), sizeof(double));
    for (int s = 0; s < steps; s++) {
        x[s] = (double)(first + s);
        for (int i = 0; i < r->n; i++) {
            double v = norms[(size_t)s * r->n + i];
            y[group[i] * steps + s] += v * v;
        }
    }
    char title[96];
    snprintf(title, sizeof title, "%s: gradient norm by step", model);
    /* steps are counts: no tick between two of them */
    pr_plot p = {.title = title, .xlabel = "step", .ylabel = "gradient L2 norm", .ylog = true, .xint = true};
    for (int k = 0; k < n_groups; k++) {
        for (int s = 0; s < steps; s++) y[k * steps + s] = sqrt(y[k * steps + s]);
        pr_plot_add(&p, names[k], steps, x, y + k * steps);
    }
    int rc = pr_plot_save(&p, path, err);
    pr_plot_free(&p);
    free(names), free(x), free(y);
    return rc;
}

/* ---- write ranks ------------------------------------------------------------------------ */

/* per layer and head: the histogram over tokens; the recurrence nodes come
 * in layer order, one per layer */
void pr_inspect_ranks(FILE *out, const pr_ctx *ctx, pr_rank_summary *sum)
{
    *sum = (pr_rank_summary){0};
    for (int p = 0; p < ctx->n_tape; p++) {
        const pr_node *n = &ctx->tape[p];
        if (strcmp(n->op->name, "recurrence") != 0) continue;
        const pr_tensor *k = n->in[PR_REC_K];
        int64_t BT = k->shape[0] * k->shape[1], H = k->shape[2];
        int *ranks = malloc(sizeof(int) * (size_t)(BT * H));
        int most = pr_recurrence_write_ranks(n, PR_INSPECT_RANK_TOL, ranks);
        if (most > sum->max_possible) sum->max_possible = most;
        if (sum->layers == 0) fprintf(out, "write rank of B_t per layer and head (tokens with each rank):\n");
        for (int64_t h = 0; h < H; h++) {
            int64_t count[PR_INSPECT_MAX_RANK] = {0};
            for (int64_t t = 0; t < BT; t++) count[ranks[t * H + h]]++;
            fprintf(out, "  layer %d head %lld (%s, at most %d):", sum->layers, (long long)h,
                    pr_rule_name((pr_rule)n->iarg[0]), most);
            for (int v = 0; v <= most; v++)
                if (count[v]) fprintf(out, " rank %d: %lld", v, (long long)count[v]);
            fprintf(out, "\n");
            for (int v = 0; v <= most; v++) sum->hist[v] += count[v];
        }
        free(ranks);
        sum->layers++;
    }
}

void pr_inspect_rank_histogram(FILE *out, const char *model, const pr_rank_summary *sum)
{
    if (sum->layers == 0) {
        fprintf(out, "write rank: %s has no linear recurrence (no B_t to measure)\n", model);
        return;
    }
    int64_t total = 0;
    for (int v = 0; v <= sum->max_possible; v++) total += sum->hist[v];
    fprintf(out, "write rank histogram, %s (%d layers; singular values > %g of the largest):\n", model, sum->layers,
            PR_INSPECT_RANK_TOL);
    for (int v = 0; v <= sum->max_possible; v++) {
        int bar = (int)llround(40.0 * (double)sum->hist[v] / (double)total);
        fprintf(out, "  rank %d: %8lld %5.1f%% ", v, (long long)sum->hist[v],
                100.0 * (double)sum->hist[v] / (double)total);
        for (int i = 0; i < bar; i++) fputc('#', out);
        fputc('\n', out);
    }
}

/* ---- what the steps run on ---------------------------------------------------------- */
/* the batch's tokens: FILE's first n bytes; -1 with err when it is shorter */
static int read_text_tokens(const char *path, int64_t n, int64_t *tok, pr_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return pr_errf(err, "%s: cannot open", path);
    int64_t got = 0;
    for (int ch; got < n && (ch = fgetc(f)) != EOF;) tok[got++] = ch;
    fclose(f);
    if (got < n)
        return pr_errf(err, "%s: %lld bytes, the batch needs B*(T+1) = %lld", path, (long long)got, (long long)n);
    return 0;
}

int pr_inspect_make_batch(pr_inspect_batch *b, const pr_config *c, int64_t B, int64_t T, const char *text_file,
                          pr_arena *a, pr_err *err)
{
    int64_t n = B * (T + 1);
    bool rec = c->task == PR_HEAD_REC;
    PR_CHECK(!text_file || (!rec && c->vocab >= 256), "inspect: a batch of text needs an LM of bytes (vocab >= 256)");
    int64_t *tok = malloc(sizeof(int64_t) * (size_t)n);
    PR_CHECK(tok, "inspect: out of host memory");
    uint64_t seed = (uint64_t)c->seed;
    for (int64_t i = 0; i < n; i++) {   /* rec: items 1..n_items (0 pads) */
        double u = pr_philox_uniform(seed, 0xba7c4, (uint64_t)i);
        tok[i] = rec ? 1 + (int64_t)(u * c->rec_n_items) : (int64_t)(u * c->vocab);
    }
    int rc = text_file ? read_text_tokens(text_file, n, tok, err) : 0;
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

void pr_inspect_session_free(pr_inspect_session *s)
{
    if (s->m) pr_params_release_grads(s->m->params);
    pr_task_free(s->task);
    pr_optim_free(s->opt);
    pr_model_free(s->m);
    pr_arena_free(s->data);
    memset(s, 0, sizeof *s);
}

int pr_inspect_open_fresh(pr_inspect_session *s, const pr_config *c, double lr, int steps, int64_t B, int64_t T,
                          const char *text_file, pr_err *err)
{
    *s = (pr_inspect_session){.cfg = *c};
    s->m = pr_model_new(&s->cfg, PR_F32, PR_CPU);
    pr_model_init(s->m);
    s->data = pr_arena_new("inspect batch", 0);
    s->opt = pr_optim_new(s->m->params, &(pr_optim_opts){.kind = PR_OPTIM_SGD});
    s->sched = (pr_schedule){.lr = lr, .min_lr = lr, .total = steps};
    return pr_inspect_make_batch(&s->b, &s->cfg, B, T, text_file, s->data, err);
}

int pr_inspect_open_run(pr_inspect_session *s, const char *run_dir, pr_ctx *ctx, pr_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", run_dir);
    *s = (pr_inspect_session){.cfg = pr_config_default(), .train = pr_train_defaults()};
    pr_train_state st;
    int64_t step;
    if (pr_run_config_load(&s->cfg, &s->train, path, err) || pr_config_check(&s->cfg, err) ||
        pr_task_open(&s->task, &s->train, &s->cfg, err))
        return -1;
    s->m = pr_model_new(&s->cfg, PR_F32, PR_CPU);
    pr_model_init(s->m);
    pr_optim_opts oo = pr_train_optim_opts(&s->train);
    s->opt = pr_optim_new(s->m->params, &oo);
    if (pr_checkpoint_latest(run_dir, &step, err) || pr_checkpoint_load(run_dir, step, s->m->params, s->opt, &st, err))
        return -1;
    ctx->rng = st.rng;
    s->first_step = st.step;
    s->sched = (pr_schedule){.lr = s->train.lr, .min_lr = s->train.min_lr, .warmup = s->train.warmup,
                             .total = s->train.steps, .cosine = strcmp(s->train.schedule, "cosine") == 0};
    s->clip = s->train.clip;
    return 0;
}

double pr_inspect_forward_backward(pr_ctx *ctx, const pr_inspect_session *s, int i, double *norms_row)
{
    const pr_model *m = s->m;
    int64_t step = s->first_step + i;
    pr_tensor *loss = s->task ? s->task->loss(s->task, ctx, m, step)
                      : m->cfg.task == PR_HEAD_REC ? pr_rec_loss(ctx, m, s->b.ids, s->b.targets)
                                                   : pr_lm_loss(ctx, m, s->b.ids, s->b.targets);
    pr_backward(ctx, loss);
    pr_inspect_grad_norms(m->params, norms_row);
    return pr_item(loss);
}

void pr_inspect_update(pr_ctx *ctx, pr_inspect_session *s, int i)
{
    const pr_params *r = s->m->params;
    double scale = pr_clip_scale(pr_params_grad_norm(r), s->clip);
    pr_optim_step(ctx, s->opt, pr_schedule_lr(&s->sched, s->first_step + i), scale);
    pr_params_zero_grads(r);
    pr_step_reset(ctx);
}

/* ---- one step's tensors to a file ------------------------------------------------------ */
int pr_inspect_dump(const char *path, const pr_ctx *ctx, const pr_model *m, const pr_inspect_batch *b, int step,
                    int *n_tensors, pr_err *err)
{
    const pr_params *r = m->params;
    int cap = 2 * r->n + 2 * PR_MAX_OUT * ctx->n_tape + 2, n = 0;
    const char **names = calloc((size_t)cap, sizeof *names);
    const pr_tensor **ts = calloc((size_t)cap, sizeof *ts);
    char **own = calloc((size_t)cap, sizeof *own);
    PR_CHECK(names && ts && own, "inspect: out of host memory");
#define ADD(t_, ...)                                                                                        \
    do {                                                                                                    \
        own[n] = malloc(160);                                                                               \
        snprintf(own[n], 160, __VA_ARGS__);                                                                 \
        names[n] = own[n], ts[n++] = (t_);                                                                  \
    } while (0)
    if (b && b->ids) ADD(b->ids, "batch.ids");
    if (b && b->targets) ADD(b->targets, "batch.targets");
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
    int rc = pr_safetensors_write(path, n, names, ts, 2, keys, values, err);
    *n_tensors = n;
    for (int i = 0; i < n; i++) free(own[i]);
    free(own), free(names), free(ts);
    return rc ? -1 : 0;
}
