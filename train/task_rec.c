/* train/task_rec.c: the `rec` task. Users come from train `rec.data`
 * (tasks/rec.h: the synthetic generator or the Amazon / Yelp loaders with the
 * paper's filter). Training batch i holds users i*B .. i*B+B-1 of the order
 * pr_rec_order gives each epoch (from train.seed), each as the last seq_len+1
 * items of its training part. The loss is the rec model's: with
 * rec.negatives = 0 a softmax over every item at every position (the targets
 * a sequence holds; padding is left out), otherwise pr_rec_loss_sampled at
 * the last position against rec.negatives items drawn from (seed, batch).
 * Batches are a function of the batch index only, so --resume repeats them.
 * Data parallel: every rank builds the whole batch (users, targets, negatives:
 * cheap, on the host) and trains on its rows; its loss is scaled by its share
 * of what the whole batch averages over (its valid positions, or its rows for
 * the sampled loss) times the ranks, so the ranks' averaged gradients are the
 * one-process gradients of the whole batch.
 * Evaluation ranks every item for every user on the validation and the test
 * item (leave-one-out) and reports Hit@K, NDCG@K (K = 10, 200, 500) and AUC. */
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "tasks/rec.h"
#include "train/train.h"

enum { SYNTH_SMALL_USERS = 1000, SYNTH_SMALL_ITEMS = 1000, NEGATIVE_STREAM = 0x7265 };

typedef struct {
    pr_rec_data data;
    int B, T, negatives, ignore;
    int row0, rows, world;            /* this rank's rows of the batch; the ranks */
    uint64_t seed;
    int64_t *order, order_epoch;      /* the permutation of the current epoch */
    int64_t *users, *inputs, *targets, *negs, *last_target;
    int32_t *labels;
} rec_task;

/* rec.data: synthetic (small), synthetic:full (sized like Amazon Electronics),
 * or FORMAT:FILE (tasks/rec.h: amazon, amazon2014, amazon2018, amazon-json,
 * yelp); checked up front for what training and evaluation need */
static int load_data(const char *spec, pr_rec_data *d, pr_err *err)
{
    pr_rec_load_opts lo = {.filter = PR_REC_FILTER_PAPER, .skip_bad = false};
    pr_rec_load_report rep;
    pr_rec_format fmt;
    const char *file;
    if (strcmp(spec, "synthetic") == 0 || strcmp(spec, "synthetic:full") == 0) {
        pr_rec_synth_opts so = pr_rec_synth_default(1);
        if (strcmp(spec, "synthetic") == 0) so.n_users = SYNTH_SMALL_USERS, so.n_items = SYNTH_SMALL_ITEMS;
        *d = pr_rec_synth(so);
    } else if (pr_rec_format_of(spec, &fmt, &file) == 0) {
        if (pr_rec_load(file, fmt, lo, d, &rep, err)) return -1;
    } else {
        return pr_errf(err, "train.rec.data: '%s' is not %s", spec, PR_REC_DATA_CHOICES);
    }
    char what[1100];
    snprintf(what, sizeof what, "train.rec.data %s (after the filter: items >= %d, then users >= %d)", spec,
             lo.filter.min_item, lo.filter.min_user);
    if (pr_rec_check_trainable(d, what, err)) {
        pr_rec_data_free(d);
        return -1;
    }
    return 0;
}

/* the users of training batch `index`: consecutive slots of the epochs' orders */
static void batch_users(rec_task *k, int64_t index)
{
    int64_t n = k->data.n_users;
    for (int b = 0; b < k->B; b++) {
        int64_t slot = index * k->B + b, epoch = slot / n;
        if (epoch != k->order_epoch) {
            pr_rec_order(k->order, n, k->seed, (uint64_t)epoch);
            k->order_epoch = epoch;
        }
        k->users[b] = k->order[slot % n];
    }
}

static pr_tensor *ids_tensor(pr_ctx *ctx, const pr_model *m, const int64_t *ids, int B, int T)
{
    return pr_from_host(ctx->step, PR_I64, m->params->device, PR_DIMS(B, T), ids);
}

/* loss times this rank's share of the whole batch's average (part of whole) times
 * the ranks: the ranks' mean of it is the whole batch's loss. A factor of 1 (one
 * process, or an even share) leaves the loss as it is. */
static pr_tensor *share_of_batch(rec_task *k, pr_ctx *ctx, pr_tensor *loss, int64_t part, int64_t whole)
{
    if (whole == 0 || part * k->world == whole) return loss;
    return pr_scale(ctx, loss, (double)part * k->world / (double)whole);
}

static pr_tensor *full_loss(rec_task *k, pr_ctx *ctx, const pr_model *m)
{
    int64_t n = (int64_t)k->B * k->T, lo = (int64_t)k->row0 * k->T, hi = lo + (int64_t)k->rows * k->T;
    int64_t valid = 0, mine = 0;
    for (int64_t i = 0; i < n; i++) {
        k->labels[i] = k->targets[i] ? (int32_t)k->targets[i] : k->ignore;
        valid += k->targets[i] != 0;
        mine += k->targets[i] != 0 && i >= lo && i < hi;
    }
    pr_tensor *h = pr_model_hidden(ctx, m, ids_tensor(ctx, m, k->inputs + lo, k->rows, k->T), NULL);
    pr_tensor *scores = pr_matmul(ctx, h, m->embed, false, true);      /* [rows, T, n_items + 1] */
    pr_tensor *labels = pr_from_host(ctx->step, PR_I32, m->params->device, PR_DIMS(k->rows, k->T), k->labels + lo);
    return share_of_batch(k, ctx, pr_cross_entropy(ctx, scores, labels, k->ignore), mine, valid);
}

/* negatives drawn uniformly from the items, never the target (for the whole
 * batch: a row's draws depend on the rows before it) */
static pr_tensor *sampled_loss(rec_task *k, pr_ctx *ctx, const pr_model *m, int64_t index)
{
    int n_items = k->data.n_items;
    uint64_t draw = (uint64_t)index * (uint64_t)k->B * (uint64_t)k->negatives * 2;
    for (int b = 0; b < k->B; b++) {
        k->last_target[b] = k->targets[(int64_t)b * k->T + k->T - 1];
        for (int j = 0; j < k->negatives; j++) {
            int64_t item;
            do item = 1 + (int64_t)(pr_philox_uniform(k->seed, NEGATIVE_STREAM, draw++) * n_items) % n_items;
            while (item == k->last_target[b] && n_items > 1);
            k->negs[(int64_t)b * k->negatives + j] = item;
        }
    }
    pr_device dev = m->params->device;
    int r0 = k->row0, R = k->rows;
    pr_tensor *target = pr_from_host(ctx->step, PR_I64, dev, PR_DIMS(R), k->last_target + r0);
    pr_tensor *negs = pr_from_host(ctx->step, PR_I64, dev, PR_DIMS(R, k->negatives), k->negs + (int64_t)r0 * k->negatives);
    pr_tensor *items = ids_tensor(ctx, m, k->inputs + (int64_t)r0 * k->T, R, k->T);
    return share_of_batch(k, ctx, pr_rec_loss_sampled(ctx, m, items, target, negs), R, k->B);
}

static pr_tensor *rec_loss(pr_task *t, pr_ctx *ctx, const pr_model *m, int64_t index)
{
    rec_task *k = t->data;
    batch_users(k, index);
    pr_rec_train_batch(&k->data, k->users, k->B, k->T, k->inputs, k->targets);
    return k->negatives ? sampled_loss(k, ctx, m, index) : full_loss(k, ctx, m);
}

/* every user's held-out item of one split, ranked against all items */
static pr_rec_metrics rank_split(rec_task *k, pr_ctx *ctx, const pr_model *m, pr_rec_split split)
{
    int n_items = k->data.n_items, B = k->B;
    double *z = malloc(sizeof(double) * (size_t)B * (size_t)(n_items + 1));
    float *scores = malloc(sizeof(float) * (size_t)B * (size_t)(n_items + 1));
    PR_CHECK(z && scores, "rec eval: out of host memory");
    pr_rec_metrics sum = {0};
    for (int64_t u0 = 0; u0 < k->data.n_users; u0 += B) {
        int nb = (int)(k->data.n_users - u0 < B ? k->data.n_users - u0 : B);
        for (int b = 0; b < nb; b++) k->users[b] = u0 + b;
        pr_rec_eval_batch(&k->data, split, k->users, nb, k->T, k->inputs, k->last_target);
        pr_to_host_f64(pr_rec_scores(ctx, m, ids_tensor(ctx, m, k->inputs, nb, k->T)), z);
        for (int64_t i = 0; i < (int64_t)nb * (n_items + 1); i++) scores[i] = (float)z[i];
        pr_rec_metrics_add_batch(&sum, scores, nb, n_items, k->last_target);
        pr_step_reset(ctx);
    }
    free(z);
    free(scores);
    return pr_rec_metrics_mean(&sum);
}

static void add_split(pr_metrics *out, const char *prefix, const pr_rec_metrics *r)
{
    char name[24];
    for (int i = 0; i < PR_REC_N_KS; i++) {
        snprintf(name, sizeof name, "%shit@%d", prefix, pr_rec_ks[i]);
        pr_metrics_add(out, name, r->hit[i]);
    }
    for (int i = 0; i < PR_REC_N_KS; i++) {
        snprintf(name, sizeof name, "%sndcg@%d", prefix, pr_rec_ks[i]);
        pr_metrics_add(out, name, r->ndcg[i]);
    }
    snprintf(name, sizeof name, "%sauc", prefix);
    pr_metrics_add(out, name, r->auc);
}

static void rec_evaluate(pr_task *t, pr_ctx *ctx, const pr_model *m, pr_metrics *out)
{
    rec_task *k = t->data;
    pr_rec_metrics valid = rank_split(k, ctx, m, PR_REC_VALID), test = rank_split(k, ctx, m, PR_REC_TEST);
    add_split(out, "val_", &valid);
    add_split(out, "test_", &test);
}

static void rec_free(pr_task *t)
{
    rec_task *k = t->data;
    pr_rec_data_free(&k->data);
    free(k->order);
    free(k->users);
    free(k->inputs);
    free(k->targets);
    free(k->negs);
    free(k->last_target);
    free(k->labels);
    free(k);
}

int pr_task_open_rec(pr_task **out, const pr_train_opts *o, const pr_config *c, pr_err *err)
{
    *out = NULL;
    if (c->task != PR_HEAD_REC)
        return pr_errf(err, "task rec: needs model.task=rec, not '%s'", pr_head_name(c->task));
    rec_task *k = calloc(1, sizeof *k);
    PR_CHECK(k, "task rec: out of host memory");
    *k = (rec_task){.B = o->batch, .T = c->seq_len, .negatives = (int)o->rec_negatives, .ignore = c->ignore_index,
                    .row0 = 0, .rows = o->batch, .world = 1, .seed = (uint64_t)o->seed, .order_epoch = -1};
    if (o->comm && o->comm->world > 1) {
        k->world = o->comm->world;
        if (pr_dist_shard(o->batch, o->comm->rank, k->world, &k->row0, &k->rows, err)) {
            free(k);
            return -1;
        }
    }
    if (load_data(o->rec_data, &k->data, err)) {
        free(k);
        return -1;
    }
    size_t bt = (size_t)k->B * (size_t)k->T;
    k->order = malloc(sizeof(int64_t) * (size_t)k->data.n_users);
    k->users = malloc(sizeof(int64_t) * (size_t)k->B);
    k->inputs = malloc(sizeof(int64_t) * bt);
    k->targets = malloc(sizeof(int64_t) * bt);
    k->negs = malloc(sizeof(int64_t) * (size_t)k->B * (size_t)(k->negatives ? k->negatives : 1));
    k->last_target = malloc(sizeof(int64_t) * (size_t)k->B);
    k->labels = malloc(sizeof(int32_t) * bt);
    pr_task *t = calloc(1, sizeof *t);
    PR_CHECK(k->order && k->users && k->inputs && k->targets && k->negs && k->last_target && k->labels && t,
             "task rec: out of host memory");
    *t = (pr_task){.name = "rec", .tokens_per_batch = (int64_t)bt, .n_items = k->data.n_items, .loss = rec_loss,
                   .evaluate = rec_evaluate, .free = rec_free, .data = k};
    *out = t;
    return 0;
}
