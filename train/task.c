/* train/task.c: the tasks as the trainer sees them. Probes and lm are token
 * tasks: a batch is ids and labels [B,T] (labels = the ignore index where
 * nothing is supervised) into the LM loss; evaluation runs the eval split and
 * scores every supervised position: mean cross-entropy, argmax accuracy and,
 * for bytes, bits per byte. The `rec` task is train/task_rec.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tasks/tasks.h"
#include "train/train.h"

void pr_metrics_add(pr_metrics *m, const char *name, double value)
{
    PR_CHECK(m->n < PR_MAX_METRICS, "metrics: more than %d", PR_MAX_METRICS);
    snprintf(m->name[m->n], sizeof m->name[m->n], "%s", name);
    m->value[m->n++] = value;
}

typedef struct {
    bool is_text;
    pr_probe probe;
    pr_text text;
    int B, T, ignore;       /* B: the global batch (evaluation runs it whole) */
    int row0, rows;         /* training: this rank's rows of each global batch */
    int64_t eval_batches;
    int32_t *ids, *labels;   /* host, [B,T] */
    /* the staged batch (a CUDA graph's input): [rows,T] on the model's device */
    pr_arena *staged;
    pr_tensor *staged_ids, *staged_labels;
} token_task;

/* rows [row0, row0 + rows) of global batch batch_index into ids and labels */
static void fill_batch(token_task *k, int split, int64_t batch_index, int row0, int rows)
{
    for (int b = 0; b < rows; b++) {
        int64_t index = batch_index * k->B + row0 + b;
        int32_t *ids = k->ids + (int64_t)b * k->T, *labels = k->labels + (int64_t)b * k->T;
        if (k->is_text) {
            pr_text_window(&k->text, split, index, ids, labels);
            continue;
        }
        int answer = pr_probe_sample(&k->probe, split, index, ids);
        for (int t = 0; t < k->T; t++) labels[t] = k->ignore;
        labels[k->T - 1] = answer;
    }
}

static void batch_tensors(token_task *k, pr_ctx *ctx, const pr_model *m, int rows, pr_tensor **ids,
                          pr_tensor **labels)
{
    pr_device dev = m->params->device;
    *ids = pr_from_host(ctx->step, PR_I32, dev, PR_DIMS(rows, k->T), k->ids);
    *labels = pr_from_host(ctx->step, PR_I32, dev, PR_DIMS(rows, k->T), k->labels);
}

static pr_tensor *token_loss(pr_task *t, pr_ctx *ctx, const pr_model *m, int64_t index)
{
    token_task *k = t->data;
    fill_batch(k, 0, index, k->row0, k->rows);
    pr_tensor *ids, *labels;
    batch_tensors(k, ctx, m, k->rows, &ids, &labels);
    return pr_lm_loss(ctx, m, ids, labels);
}

/* A captured step or evaluation skips the embedding's and the loss's range
 * checks (they read the device), so the host batch (rows of k->ids and
 * k->labels) is checked where it is on the host anyway */
static void check_batch(const pr_task *t, const pr_model *m, int rows)
{
    const token_task *k = t->data;
    for (int64_t i = 0; i < (int64_t)rows * k->T; i++) {
        PR_CHECK(k->ids[i] >= 0 && k->ids[i] < m->cfg.vocab, "task %s: token id %d at %lld is outside the vocab [0, %d)",
                 t->name, k->ids[i], (long long)i, m->cfg.vocab);
        PR_CHECK(k->labels[i] == k->ignore || (k->labels[i] >= 0 && k->labels[i] < m->cfg.vocab),
                 "task %s: label %d at %lld is outside the vocab [0, %d) and not the ignore index %d", t->name,
                 k->labels[i], (long long)i, m->cfg.vocab, k->ignore);
    }
}

static void token_stage(pr_task *t, pr_ctx *ctx, const pr_model *m, int64_t index)
{
    (void)ctx;
    token_task *k = t->data;
    fill_batch(k, 0, index, k->row0, k->rows);
    if (!k->staged) {
        k->staged = pr_arena_new("staged batch", 0);
        k->staged_ids = pr_empty(k->staged, PR_I32, m->params->device, PR_DIMS(k->rows, k->T));
        k->staged_labels = pr_empty(k->staged, PR_I32, m->params->device, PR_DIMS(k->rows, k->T));
    }
    check_batch(t, m, k->rows);
    size_t bytes = sizeof(int32_t) * (size_t)k->rows * k->T;
    pr_device_memcpy(k->staged_ids->data, k->staged_ids->device, k->ids, PR_CPU, bytes);
    pr_device_memcpy(k->staged_labels->data, k->staged_labels->device, k->labels, PR_CPU, bytes);
}

static pr_tensor *token_staged_loss(pr_task *t, pr_ctx *ctx, const pr_model *m)
{
    token_task *k = t->data;
    PR_CHECK(k->staged, "task %s: staged_loss before any stage", t->name);
    return pr_lm_loss(ctx, m, k->staged_ids, k->staged_labels);
}

/* cross-entropy and argmax hit of one row of logits against its label */
static double row_loss(const double *z, int V, int label, bool *hit)
{
    int best = 0;
    double mx = z[0], s = 0;
    for (int v = 1; v < V; v++)
        if (z[v] > z[best]) best = v, mx = z[v];
    for (int v = 0; v < V; v++) s += exp(z[v] - mx);
    *hit = best == label;
    return log(s) + mx - z[label];
}

/* Evaluation by a CUDA graph: the batch's ids staged into a device tensor,
 * the forward captured at the first batch and replayed for the others,
 * where an eager forward is a launch per op (the probes' protocol scores
 * 250 batches). Under a grid of 16 cells on one GPU a cell's scoring still
 * took a median 15 s against 0.3-0.6 s alone (ops/recurrence/NOTES.md v58):
 * the graph removed the launches, not the wait per batch. */
typedef struct {
    pr_arena *keep;
    pr_tensor *ids, *logits;
    pr_cuda_graph *graph;
    bool refused;
} eval_graph;

typedef struct {
    const pr_model *m;
    pr_tensor *ids;
} logits_of;

static pr_tensor *record_logits(void *user, pr_ctx *ctx)
{
    logits_of *a = user;
    return pr_lm_logits(ctx, a->m, a->ids, NULL);
}

/* the logits of the batch in k->ids by the graph; NULL where it was refused */
static pr_tensor *graph_logits(const pr_task *t, eval_graph *g, pr_ctx *ctx, const pr_model *m)
{
    token_task *k = t->data;
    if (g->refused) return NULL;
    check_batch(t, m, k->B);
    if (!g->keep) {
        g->keep = pr_arena_new("eval graph", 0);
        g->ids = pr_empty(g->keep, PR_I32, m->params->device, PR_DIMS(k->B, k->T));
    }
    pr_device_memcpy(g->ids->data, g->ids->device, k->ids, PR_CPU, pr_nbytes(g->ids));
    char why[256];
    logits_of a = {m, g->ids};
    if (pr_forward_graph_run(&g->graph, ctx, record_logits, &a, g->keep, &g->logits, why, sizeof why)) {
        fprintf(stderr, "prism: the evaluation's cuda graph was refused (the capture found %s); it runs eagerly\n", why);
        g->refused = true;
        return NULL;
    }
    return g->logits;
}

static void token_evaluate(pr_task *t, pr_ctx *ctx, const pr_model *m, pr_metrics *out)
{
    token_task *k = t->data;
    int V = m->cfg.vocab;
    double loss = 0;
    int64_t n = 0, hits = 0;
    double *z = malloc(sizeof(double) * (size_t)k->B * k->T * V);
    PR_CHECK(z, "eval: out of host memory");
    eval_graph g = {.refused = !t->eval_graph || m->params->device != PR_CUDA};
    for (int64_t e = 0; e < k->eval_batches; e++) {
        fill_batch(k, 1, e, 0, k->B);
        pr_tensor *logits = graph_logits(t, &g, ctx, m);
        if (!logits) {
            pr_tensor *ids, *labels;
            batch_tensors(k, ctx, m, k->B, &ids, &labels);
            logits = pr_lm_logits(ctx, m, ids, NULL);
        }
        pr_to_host_f64(logits, z);
        for (int64_t i = 0; i < (int64_t)k->B * k->T; i++) {
            if (k->labels[i] == k->ignore) continue;
            bool hit;
            loss += row_loss(z + i * V, V, k->labels[i], &hit);
            hits += hit;
            n++;
        }
        pr_step_reset(ctx);
    }
    t->eval_graph_ran = g.graph != NULL;
    pr_step_graph_free(g.graph);
    pr_arena_free(g.keep);
    free(z);
    pr_metrics_add(out, "acc", n ? (double)hits / (double)n : 0);
    pr_metrics_add(out, "loss", n ? loss / (double)n : 0);
    if (k->is_text) pr_metrics_add(out, "bpb", n ? loss / (double)n / log(2.0) : 0);
}

static void token_free(pr_task *t)
{
    token_task *k = t->data;
    pr_text_free(&k->text);
    pr_arena_free(k->staged);
    free(k->ids);
    free(k->labels);
    free(k);
}

int pr_task_open(pr_task **out, const pr_train_opts *o, const pr_config *c, pr_err *err)
{
    *out = NULL;
    int probe = pr_probe_by_name(o->task);
    pr_task_family family = pr_task_family_of(o->task);
    bool text = family == PR_TASK_LM;
    if (family == PR_TASK_REC) return pr_task_open_rec(out, o, c, err);
    if (family == PR_TASK_UNKNOWN) return pr_errf(err, "unknown task '%s' (prism train --help lists them)", o->task);
    if (c->task != PR_HEAD_LM)
        return pr_errf(err, "task %s: needs model.task=lm, not '%s'", o->task, pr_head_name(c->task));
    token_task *k = calloc(1, sizeof *k);
    PR_CHECK(k, "task: out of host memory");
    *k = (token_task){.is_text = text, .B = o->batch, .T = c->seq_len, .ignore = c->ignore_index,
                      .eval_batches = o->eval_batches};
    k->rows = o->batch;
    int rc = o->comm ? pr_dist_shard(o->batch, o->comm->rank, o->comm->world, &k->row0, &k->rows, err) : 0;
    if (rc) {
        /* the message says it */
    } else if (text) {
        rc = o->data[0] ? pr_text_load(&k->text, o->data, c->seq_len, (uint64_t)o->seed, err)
                        : pr_errf(err, "task lm: no text file (--data FILE or --set train.data=FILE)");
        if (!rc && c->vocab < 256) rc = pr_errf(err, "task lm: vocab %d is under the 256 byte values", c->vocab);
    } else {
        int style = pr_probe_style_by_name(o->probe_style);
        rc = style < 0 ? pr_errf(err, "train.probe.style: '%s' is not paper or authors", o->probe_style)
                       : pr_probe_init(&k->probe, (pr_probe_kind)probe, (pr_probe_style)style, c->vocab, c->seq_len,
                                       (uint64_t)o->seed, err);
    }
    if (rc) {
        free(k);
        return -1;
    }
    k->ids = malloc(sizeof(int32_t) * (size_t)k->B * k->T);
    k->labels = malloc(sizeof(int32_t) * (size_t)k->B * k->T);
    pr_task *t = calloc(1, sizeof *t);
    PR_CHECK(k->ids && k->labels && t, "task: out of host memory");
    *t = (pr_task){.name = text ? "lm" : pr_probe_names[probe], .tokens_per_batch = (int64_t)k->B * k->T,
                   .loss = token_loss, .evaluate = token_evaluate, .free = token_free, .data = k,
                   .stage = token_stage, .staged_loss = token_staged_loss};
    *out = t;
    return 0;
}

void pr_task_free(pr_task *t)
{
    if (!t) return;
    t->free(t);
    free(t);
}

int pr_task_fit_config(const pr_task *t, pr_config *c, pr_err *err)
{
    if (!t->n_items) return 0;
    if (c->rec_n_items == 0) c->rec_n_items = t->n_items;
    if (c->rec_n_items != t->n_items)
        return pr_errf(err, "rec.n_items: set to %d, but the data (train.rec.data) has %d items; leave it unset",
                       c->rec_n_items, t->n_items);
    return 0;
}
