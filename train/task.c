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

/* Evaluation scores each batch on the model's device (pr_score_rows) and
 * reads the scores back once a chunk of batches: 12 bytes a row come back
 * once, where the logits of every batch came back with a wait each. (Under
 * a grid of 16 cells on one GPU that did not shorten a cell's scoring: the
 * time there is a thread held up as it begins, NOTES.md v59.) The forward
 * is a CUDA graph where allowed (captured at the first batch, its input
 * refreshed by a device copy), else eager, a launch an op. */
enum { EVAL_CHUNK_ROWS = 1 << 20 };   /* rows scored before a read back: 17 MB of buffers */

typedef struct {
    int64_t rows, batches;                  /* rows a batch (B T); batches a chunk */
    pr_arena *keep;                         /* what outlives the steps: the chunk's buffers, the graph's */
    int32_t *ids_h, *labels_h, *hit_h;      /* host, [batches * rows] */
    double *loss_h;
    pr_tensor *ids, *labels, *loss, *hit;   /* the same on the model's device */
    pr_tensor *graph_ids, *graph_logits;
    pr_cuda_graph *graph;
    bool refused;                           /* no graph: the forward runs eagerly */
} scoring;

static void scoring_open(scoring *s, const token_task *k, pr_device dev, bool graph)
{
    *s = (scoring){.rows = (int64_t)k->B * k->T, .refused = !graph || dev != PR_CUDA};
    s->batches = EVAL_CHUNK_ROWS / s->rows;
    if (s->batches > k->eval_batches) s->batches = k->eval_batches;
    if (s->batches < 1) s->batches = 1;
    const int64_t n = s->batches * s->rows;
    s->keep = pr_arena_new("evaluation", 0);
    s->ids = pr_empty(s->keep, PR_I32, dev, PR_DIMS(n));
    s->labels = pr_empty(s->keep, PR_I32, dev, PR_DIMS(n));
    s->loss = pr_empty(s->keep, PR_F64, dev, PR_DIMS(n));
    s->hit = pr_empty(s->keep, PR_I32, dev, PR_DIMS(n));
    s->ids_h = malloc(sizeof(int32_t) * (size_t)n);
    s->labels_h = malloc(sizeof(int32_t) * (size_t)n);
    s->hit_h = malloc(sizeof(int32_t) * (size_t)n);
    s->loss_h = malloc(sizeof(double) * (size_t)n);
    PR_CHECK(s->ids_h && s->labels_h && s->hit_h && s->loss_h, "eval: out of host memory");
}

static void scoring_close(scoring *s)
{
    pr_step_graph_free(s->graph);
    pr_arena_free(s->keep);
    free(s->ids_h);
    free(s->labels_h);
    free(s->hit_h);
    free(s->loss_h);
}

typedef struct {
    const pr_model *m;
    pr_tensor *ids;
} logits_of;

static pr_tensor *record_logits(void *user, pr_ctx *ctx)
{
    logits_of *a = user;
    return pr_lm_logits(ctx, a->m, a->ids, NULL);
}

/* the logits of the chunk's batch e: by the graph, or eagerly where it is refused */
static pr_tensor *batch_logits(const token_task *k, scoring *s, pr_ctx *ctx, const pr_model *m, int64_t e)
{
    const pr_device dev = m->params->device;
    const int32_t *ids = (const int32_t *)s->ids->data + e * s->rows;
    const size_t bytes = sizeof(int32_t) * (size_t)s->rows;
    if (!s->refused) {
        if (!s->graph_ids) s->graph_ids = pr_empty(s->keep, PR_I32, dev, PR_DIMS(k->B, k->T));
        pr_device_memcpy(s->graph_ids->data, dev, ids, dev, bytes);   /* queued in order: no wait */
        char why[256];
        logits_of a = {m, s->graph_ids};
        if (!pr_forward_graph_run(&s->graph, ctx, record_logits, &a, s->keep, &s->graph_logits, why, sizeof why))
            return s->graph_logits;
        fprintf(stderr, "prism: the evaluation's cuda graph was refused (the capture found %s); it runs eagerly\n", why);
        s->refused = true;
    }
    pr_tensor *x = pr_empty(ctx->step, PR_I32, dev, PR_DIMS(k->B, k->T));
    pr_device_memcpy(x->data, dev, ids, dev, bytes);
    return pr_lm_logits(ctx, m, x, NULL);
}

/* batches [first, first + n) of the eval split into the sums */
static void score_chunk(const pr_task *t, scoring *s, pr_ctx *ctx, const pr_model *m, int64_t first, int64_t n,
                        double *loss, int64_t *hits, int64_t *count)
{
    token_task *k = t->data;
    const pr_device dev = m->params->device;
    const size_t n_rows = (size_t)(n * s->rows);
    for (int64_t e = 0; e < n; e++) {
        fill_batch(k, 1, first + e, 0, k->B);
        check_batch(t, m, k->B);   /* the device trusts them: the embedding and the scores read no labels back */
        memcpy(s->ids_h + e * s->rows, k->ids, sizeof(int32_t) * (size_t)s->rows);
        memcpy(s->labels_h + e * s->rows, k->labels, sizeof(int32_t) * (size_t)s->rows);
    }
    pr_device_memcpy(s->ids->data, dev, s->ids_h, PR_CPU, sizeof(int32_t) * n_rows);
    pr_device_memcpy(s->labels->data, dev, s->labels_h, PR_CPU, sizeof(int32_t) * n_rows);
    for (int64_t e = 0; e < n; e++) {
        const int64_t at = e * s->rows;
        pr_score_rows(ctx, batch_logits(k, s, ctx, m, e), (const int32_t *)s->labels->data + at, k->ignore,
                      (double *)s->loss->data + at, (int32_t *)s->hit->data + at);
        pr_step_reset(ctx);
    }
    pr_device_memcpy(s->loss_h, PR_CPU, s->loss->data, dev, sizeof(double) * n_rows);
    pr_device_memcpy(s->hit_h, PR_CPU, s->hit->data, dev, sizeof(int32_t) * n_rows);
    for (size_t i = 0; i < n_rows; i++) {
        if (s->labels_h[i] == k->ignore) continue;
        *loss += s->loss_h[i];
        *hits += s->hit_h[i];
        (*count)++;
    }
}

static void token_evaluate(pr_task *t, pr_ctx *ctx, const pr_model *m, pr_metrics *out)
{
    token_task *k = t->data;
    scoring s;
    scoring_open(&s, k, m->params->device, t->eval_graph);
    double loss = 0;
    int64_t n = 0, hits = 0;
    for (int64_t first = 0; first < k->eval_batches; first += s.batches) {
        int64_t left = k->eval_batches - first;
        score_chunk(t, &s, ctx, m, first, left < s.batches ? left : s.batches, &loss, &hits, &n);
    }
    t->eval_graph_ran = s.graph != NULL;
    scoring_close(&s);
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
