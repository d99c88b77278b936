/* lab/throughput.c: a model's training throughput (lab/lab.h), as
 * `prism bench throughput` measures it: the median wall time of whole
 * training steps (forward, backward, the optimizer; with a communicator the
 * all-reduce in buckets too) on random tokens, and one profiled step's op
 * table on request; and the run's table of every model and length, printed
 * as it is measured, its CSV and its plot. tools/compare.c reads the
 * options and launches the ranks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/profile.h"
#include "lab/lab.h"
#include "models/models.h"
#include "optim/optim.h"
#include "train/train.h"

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* median seconds of one training step of model m on ids [B,T]; with ddp, the
 * grads are all-reduced over the ranks in buckets during the backward; mem
 * (NULL: not wanted): what the last step's tensors held, before its reset */
static double time_train_step(pr_ctx *ctx, pr_model *m, pr_optim *opt, pr_ddp *ddp, const int32_t *host_ids,
                              int64_t B, int64_t T, int warmup, int steps, pr_step_mem *mem)
{
    PR_CHECK(steps <= 64, "bench throughput: at most 64 timed steps");
    pr_device dev = m->params->device;
    double t[64];
    for (int i = -warmup; i < steps; i++) {
        pr_device_sync(dev);
        double t0 = pr_now_s();
        pr_params_zero_grads(m->params);
        pr_tensor *ids = pr_from_host(ctx->step, PR_I32, dev, PR_DIMS(B, T), host_ids);
        pr_tensor *targets = pr_from_host(ctx->step, PR_I32, dev, PR_DIMS(B, T), host_ids + 1);
        pr_tensor *loss = pr_lm_loss(ctx, m, ids, targets);
        if (ddp) pr_ddp_begin(ddp, ctx);
        pr_backward(ctx, loss);
        pr_err err;
        if (ddp && pr_ddp_end(ddp, ctx, &err)) pr_fatal("prism bench throughput: %s", err.msg);
        double t1 = ctx->profile ? pr_profile_clock(dev) : 0;
        pr_optim_step(ctx, opt, 1e-4, 1.0);
        if (ctx->profile) pr_profile_time(ctx->profile, "adamw", "optimizer", 0, pr_profile_clock(dev) - t1);
        if (mem) pr_step_memory(ctx, mem);
        pr_step_reset(ctx);
        pr_device_sync(dev);
        if (i >= 0) t[i] = pr_now_s() - t0;
    }
    qsort(t, (size_t)steps, sizeof t[0], cmp_double);
    return t[steps / 2];
}

/* whether the trainer's plan refuses a graph for this model (said on stderr) */
static bool graph_refused(const pr_config *c, pr_device dev, pr_comm *comm, const char *what)
{
    pr_train_opts o = pr_train_defaults();
    snprintf(o.cuda_graph, sizeof o.cuda_graph, "on");
    o.comm = comm;
    char note[320];
    if (pr_train_graph_plan(c, &o, dev, true, note, sizeof note)) return false;
    fprintf(stderr, "prism bench throughput: %s: cuda graph %s; not timed\n", what, note);
    return true;
}

/* the peak memory of the timed steps. CUDA: the caching allocator's
 * high-water mark of live bytes since the model was built (every tensor and
 * kernel scratch block; not cuBLAS's own workspace, the CUDA context, or
 * blocks cached but free). CPU: the arenas' high-water mark, parameters,
 * grads and optimizer state plus the step arena's peak. */
static size_t peak_memory(pr_ctx *ctx, const pr_model *m, const pr_optim *opt, pr_device dev)
{
    if (dev == PR_CUDA) {
        size_t current, peak;
        pr_device_mem_stats(dev, &current, &peak);
        return peak;
    }
    return pr_arena_used(m->params->arena) + pr_arena_used(ctx->grads) + pr_arena_used(opt->arena) +
           pr_arena_peak(ctx->step);
}

/* the graph path's inputs: ids and targets that outlive the step */
typedef struct {
    const pr_model *m;
    pr_tensor *ids, *targets;
} graph_inputs;

static pr_tensor *graph_loss(void *user, pr_ctx *ctx)
{
    graph_inputs *in = user;
    return pr_lm_loss(ctx, in->m, in->ids, in->targets);
}

/* time_train_step with the step as a CUDA graph (train/step_graph.c) after
 * the warm-up (two eager steps at least): each timed step copies the ids
 * in, writes the learning rate, replays and reads the loss and norm back, as
 * the trainer does (no clipping). NAN after saying why when the capture is
 * refused. */
static double time_graph_step(pr_ctx *ctx, pr_model *m, pr_optim *opt, const int32_t *host_ids, int64_t B, int64_t T,
                              int warmup, int steps, const char *what)
{
    pr_device dev = m->params->device;
    pr_arena *a = pr_arena_new("bench graph", 0);
    graph_inputs in = {m, pr_empty(a, PR_I32, dev, PR_DIMS(B, T)), pr_empty(a, PR_I32, dev, PR_DIMS(B, T))};
    size_t bytes = sizeof(int32_t) * (size_t)(B * T);
    /* the eager warm-up: max(warmup, 2) steps (as warm-up, not timed ones: --warmup goes to 100,
     * past the 64 timed steps time_train_step holds) */
    time_train_step(ctx, m, opt, NULL, host_ids, B, T, (warmup > 2 ? warmup : 2) - 1, 1, NULL);
    pr_cuda_graph *g = NULL;
    char why[256];
    double t[64], loss, norm, s = 0;
    for (int i = -1; i < steps && !isnan(s); i++) {   /* -1: the capture and its replay, untimed */
        pr_device_sync(dev);
        double t0 = pr_now_s();
        pr_device_memcpy(in.ids->data, dev, host_ids, PR_CPU, bytes);
        pr_device_memcpy(in.targets->data, dev, host_ids + 1, PR_CPU, bytes);
        if (pr_step_graph_run(&g, ctx, m->params, opt, graph_loss, &in, 1e-4, 0, &loss, &norm, why, sizeof why)) {
            fprintf(stderr, "prism bench throughput: %s: cuda graph off (the capture found %s); not timed\n", what, why);
            s = NAN;
        }
        if (i >= 0) t[i] = pr_now_s() - t0;
    }
    pr_step_graph_free(g);
    pr_arena_free(a);
    if (isnan(s)) return s;
    qsort(t, (size_t)steps, sizeof t[0], cmp_double);
    return t[steps / 2];
}

/* one profiled step of m after the timed ones: its op table and what its
 * tensors held (pr_step_memory) in DIR/breakdown-<mixer>-T<T>.md */
static void breakdown_one(pr_ctx *ctx, pr_model *m, pr_optim *opt, const int32_t *ids, int64_t B, int64_t T,
                          const char *mixer, const char *out)
{
    pr_profile *prof = calloc(1, sizeof *prof);
    PR_CHECK(prof, "bench throughput: out of host memory");
    ctx->profile = prof;
    pr_step_mem mem;
    double wall = time_train_step(ctx, m, opt, NULL, ids, B, T, 0, 1, &mem);
    ctx->profile = NULL;
    prof->steps = 1;
    char path[1200];
    snprintf(path, sizeof path, "%s/breakdown-%s-T%lld.md", out, mixer, (long long)T);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "# %s, T=%lld, %lld sequences a step: one profiled step, %.1f ms\n\n", mixer, (long long)T,
                (long long)B, 1e3 * wall);
        pr_profile_print(prof, wall, f);
        fprintf(f, "\n## what the step's tensors held (MiB)\n\n");
        pr_step_mem_print(&mem, f);
        fclose(f);
    } else {
        fprintf(stderr, "prism bench throughput: %s: cannot create: %s\n", path, strerror(errno));
    }
    free(prof);
}

double pr_bench_throughput_one(const pr_config *base, const char *mixer, int64_t T, int64_t tokens, pr_device dev,
                                int warmup, int steps, pr_precision precision, bool cuda_graph, pr_comm *comm,
                                const char *breakdown, int64_t *params, size_t *peak_bytes)
{
    *params = -1;
    *peak_bytes = 0;
    pr_config c = *base;
    pr_err err;
    char kv[2][64];
    snprintf(kv[0], sizeof kv[0], "mixer=%s", mixer);
    snprintf(kv[1], sizeof kv[1], "seq_len=%lld", (long long)T);
    if (pr_config_set(&c, kv[0], &err) || pr_config_set(&c, kv[1], &err) || pr_config_check(&c, &err)) {
        fprintf(stderr, "prism bench throughput: %s at T=%lld: %s\n", mixer, (long long)T, err.msg);
        return NAN;
    }
    int64_t B = tokens / T, world = comm ? comm->world : 1, rows = B / world;
    const char *why;
    double need = pr_mixer_big_step_bytes(&c, B, T, &why);
    if (need > PR_BENCH_MAX_STEP_BYTES) {
        fprintf(stderr, "prism bench throughput: %s at T=%lld skipped: ~%.0f GiB for the backward, %s\n", mixer,
                (long long)T, need / (1 << 30), why);
        return NAN;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * T + 1));
    PR_CHECK(ids, "bench throughput: out of host memory");
    for (int64_t i = 0; i < B * T + 1; i++) ids[i] = (int32_t)(pr_philox_uniform(1, 0, (uint64_t)i) * c.vocab);
    pr_device_mem_peak_reset(dev);   /* this model's peak, not an earlier one's */
    pr_model *m = pr_model_new(&c, PR_F32, dev);
    *params = pr_params_count(m->params);
    pr_model_init(m);
    pr_optim_opts oo = {.kind = PR_OPTIM_ADAMW, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    pr_optim *opt = pr_optim_new(m->params, &oo);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_ctx_set_precision(ctx, precision);
    pr_ddp *ddp = comm ? pr_ddp_new(comm, m->params, (size_t)25e6) : NULL;
    int64_t first = comm ? comm->rank * rows * T : 0;
    double s;
    char what[96];
    snprintf(what, sizeof what, "%s at T=%lld", mixer, (long long)T);
    if (cuda_graph && graph_refused(&c, dev, comm, what)) {
        s = NAN;
    } else if (cuda_graph) {
        s = time_graph_step(ctx, m, opt, ids + first, rows, T, warmup, steps, what);
    } else {
        s = time_train_step(ctx, m, opt, ddp, ids + first, rows, T, warmup, steps, NULL);
    }
    *peak_bytes = peak_memory(ctx, m, opt, dev);
    if (breakdown && !comm) breakdown_one(ctx, m, opt, ids, rows, T, mixer, breakdown);
    pr_ddp_free(ddp);
    pr_params_release_grads(m->params);
    pr_optim_free(opt);
    pr_model_free(m);
    pr_ctx_free(ctx);
    free(ids);
    return (double)(rows * world * T) / s;
}

/* ---- the table of a `prism bench throughput` run ---------------------------------------- */
/* the flatness column (one rank, several lengths): the last length's tokens/s over the first's */
static bool has_ratio(const pr_throughput_table *t) { return t->ranks == 1 && t->n_lens > 1; }

/* the precision line, then the table's header: per T one column, or with
 * ranks > 1 three (1 rank, N ranks, efficiency), each with its MiB; then the
 * flatness column */
static void print_header(FILE *out, const pr_throughput_table *t)
{
    /* data-parallel steps are never captured (graph_fits) */
    const bool graph = t->graph && t->ranks == 1;
    fprintf(out, "precision %s%s\n\n| model | params |", pr_precision_name(t->prec), graph ? ", cuda graph on" : "");
    for (int i = 0; i < t->n_lens; i++)
        if (t->ranks > 1) fprintf(out, " T=%lld 1 rank | %d ranks | eff | MiB |", (long long)t->lens[i], t->ranks);
        else fprintf(out, " T=%lld | MiB |", (long long)t->lens[i]);
    bool ratio = has_ratio(t);
    if (ratio) fprintf(out, " T=%lld / T=%lld |", (long long)t->lens[t->n_lens - 1], (long long)t->lens[0]);
    fprintf(out, "\n|---|");
    for (int i = 0; i < 1 + t->n_lens * (t->ranks > 1 ? 4 : 2) + ratio; i++) fprintf(out, "---|");
    fprintf(out, "\n");
}

/* cell k's figures (and its row's start before the first length) */
static void print_cell(FILE *out, const pr_throughput_table *t, int m, int i)
{
    int k = m * t->n_lens + i;
    if (i == 0) fprintf(out, t->params[m] >= 0 ? "| %s | %lld |" : "| %s | - |", t->names[m], (long long)t->params[m]);
    if (t->ranks > 1)
        fprintf(out, isfinite(t->tps[k]) ? " %.0f | %.0f | %.2f |" : " - | - | - |", t->tps1[k], t->tps[k],
                t->tps[k] / (t->ranks * t->tps1[k]));
    else fprintf(out, isfinite(t->tps[k]) ? " %.0f |" : " - |", t->tps[k]);
    if (t->peak[k]) fprintf(out, " %.1f |", (double)t->peak[k] / (1 << 20));
    else fprintf(out, " - |");
    fflush(out);
}

/* whether training would capture this model's step (train.cuda_graph auto or on); says why not.
 * comm: the run's ranks (NULL: one process), which the plan refuses (NCCL in the backward): the
 * N-rank cells run eager steps, and so do their one-rank cells, so that the efficiency compares
 * like with like */
static bool graph_fits(const pr_config *c, const pr_train_opts *o, const char *mixer, pr_device dev, pr_comm *comm)
{
    pr_config mc = *c;
    snprintf(mc.mixer, sizeof mc.mixer, "%s", mixer);
    pr_train_opts on = *o;
    snprintf(on.cuda_graph, sizeof on.cuda_graph, "on");
    on.comm = comm;
    char note[200];
    bool fits = pr_train_graph_plan(&mc, &on, dev, true, note, sizeof note);
    if (!fits) fprintf(stderr, "prism bench throughput: %s runs eager steps: cuda graph %s\n", mixer, note);
    return fits;
}

int pr_throughput_run(pr_throughput_table *t, const pr_config *base, const pr_train_opts *opts, pr_device dev,
                      pr_comm *comm, const char *breakdown, FILE *out)
{
    t->ranks = comm ? comm->world : 1;
    if (out) print_header(out, t);
    int failed = 0;
    for (int m = 0; m < t->n_models; m++) {
        bool graph = t->graph && graph_fits(base, opts, t->names[m], dev, comm);
        for (int i = 0; i < t->n_lens; i++) {
            int k = m * t->n_lens + i;
            int64_t n = -1;
            /* one rank: every rank at once on its own device, the whole batch, no messages */
            if (t->ranks > 1)
                t->tps1[k] = pr_bench_throughput_one(base, t->names[m], t->lens[i], t->tokens, dev, t->warmup, t->steps,
                                                     t->prec, graph, NULL, NULL, &n, &t->peak[k]);
            t->tps[k] = pr_bench_throughput_one(base, t->names[m], t->lens[i], t->tokens, dev, t->warmup, t->steps,
                                                t->prec, graph, comm, breakdown && !comm ? breakdown : NULL, &n,
                                                &t->peak[k]);
            if (i == 0) t->params[m] = n;   /* the same at every length */
            failed += !isfinite(t->tps[k]);
            if (out) print_cell(out, t, m, i);
        }
        if (out && has_ratio(t)) {
            double r = t->tps[m * t->n_lens + t->n_lens - 1] / t->tps[m * t->n_lens];
            fprintf(out, isfinite(r) ? " %.3f |" : " - |", r);
        }
        if (out) fprintf(out, "\n");
    }
    return failed;
}

static int write_csv(const pr_throughput_table *t, const char *path, pr_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f) return pr_errf(err, "%s: cannot create: %s", path, strerror(errno));
    fprintf(f, "model,seq_len,batch,tokens_per_s%s,peak_bytes,params\n",
            t->ranks > 1 ? ",ranks,tokens_per_s_1,efficiency" : "");
    for (int m = 0; m < t->n_models; m++)
        for (int i = 0; i < t->n_lens; i++) {
            int k = m * t->n_lens + i;
            fprintf(f, "%s,%lld,%lld,%.1f", t->names[m], (long long)t->lens[i], (long long)(t->tokens / t->lens[i]),
                    t->tps[k]);
            if (t->ranks > 1) fprintf(f, ",%d,%.1f,%.4f", t->ranks, t->tps1[k], t->tps[k] / (t->ranks * t->tps1[k]));
            if (t->peak[k]) fprintf(f, ",%zu", t->peak[k]);
            else fprintf(f, ",-");
            fprintf(f, ",%lld\n", (long long)t->params[m]);
        }
    return fclose(f) != 0 ? pr_errf(err, "%s: cannot write", path) : 0;
}

int pr_throughput_write(const pr_throughput_table *t, const char *dir, const char *dev_name, pr_err *err)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/throughput.csv", dir);
    if (write_csv(t, path, err)) return -1;
    char title[160];
    snprintf(title, sizeof title, "training tokens/s, %s, %lld tokens a step (%s, %s, %d rank%s)", t->preset,
             (long long)t->tokens, dev_name, pr_precision_name(t->prec), t->ranks, t->ranks > 1 ? "s" : "");
    pr_plot p = {.title = title, .xlabel = "sequence length T", .ylabel = "tokens/s", .xlog = true};
    double xs[PR_THROUGHPUT_MAX_LENS];
    for (int i = 0; i < t->n_lens; i++) xs[i] = (double)t->lens[i];
    char labels[PR_THROUGHPUT_MAX_MODELS][96];   /* the legend names each model's size */
    for (int m = 0; m < t->n_models; m++) {
        double n = (double)t->params[m];
        if (n >= 1e6) snprintf(labels[m], sizeof labels[m], "%s (%.1fM params)", t->names[m], n / 1e6);
        else snprintf(labels[m], sizeof labels[m], "%s (%.1fk params)", t->names[m], n / 1e3);
        pr_plot_add(&p, labels[m], t->n_lens, xs, t->tps + m * t->n_lens);
    }
    snprintf(path, sizeof path, "%s/throughput.svg", dir);
    int rc = pr_plot_save(&p, path, err);
    pr_plot_free(&p);
    return rc ? -1 : 0;
}

void pr_throughput_print_breakdowns(FILE *out, const pr_throughput_table *t, const char *dir)
{
    for (int m = 0; m < t->n_models; m++)
        for (int i = 0; i < t->n_lens; i++) {
            if (!isfinite(t->tps[m * t->n_lens + i])) continue;
            char path[1200], line[512];
            snprintf(path, sizeof path, "%s/breakdown-%s-T%lld.md", dir, t->names[m], (long long)t->lens[i]);
            FILE *f = fopen(path, "r");
            if (!f) continue;   /* breakdown_one said why */
            fprintf(out, "\n");
            while (fgets(line, sizeof line, f)) fputs(line, out);
            fclose(f);
        }
}
