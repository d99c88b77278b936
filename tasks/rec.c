/* tasks/rec.c: the recommendation dataset: the filter, the synthetic
 * generator, training and evaluation batches, ranking metrics and
 * statistics (the file loaders are in tasks/rec_load.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tasks/rec.h"

const int pr_rec_ks[PR_REC_N_KS] = {10, 200, 500};

void pr_rec_data_free(pr_rec_data *d)
{
    free(d->start);
    free(d->items);
    *d = (pr_rec_data){0};
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    PR_CHECK(p, "rec: out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

/* ---- the filter ------------------------------------------------------------ */

/* renumbers the items that occur as 1..n in their old order; returns n */
static int renumber_items(pr_rec_data *d)
{
    int32_t *new_id = xcalloc((size_t)d->n_items + 1, sizeof *new_id);
    for (int64_t i = 0; i < d->n_interactions; i++) new_id[d->items[i]] = 1;
    int n = 0;
    for (int it = 1; it <= d->n_items; it++)
        if (new_id[it]) new_id[it] = ++n;
    for (int64_t i = 0; i < d->n_interactions; i++) d->items[i] = new_id[d->items[i]];
    free(new_id);
    return n;
}

/* one pass: rare items out, then short users out, in place; true if anything went */
static bool filter_pass(pr_rec_data *d, int min_item, int min_user)
{
    int64_t *count = xcalloc((size_t)d->n_items + 1, sizeof *count);
    for (int64_t i = 0; i < d->n_interactions; i++) count[d->items[i]]++;
    int64_t kept = 0, old_n = d->n_interactions, next = d->start[0];
    int users = 0, old_users = d->n_users;
    for (int u = 0; u < old_users; u++) {
        int64_t from = next, to = d->start[u + 1], begin = kept;
        next = to;
        for (int64_t i = from; i < to; i++)
            if (count[d->items[i]] >= min_item) d->items[kept++] = d->items[i];
        if (kept - begin < min_user) kept = begin;
        else d->start[users++] = begin;
    }
    free(count);
    d->start[users] = kept;
    d->n_users = users;
    d->n_interactions = kept;
    d->n_items = renumber_items(d);
    return kept != old_n || users != old_users;
}

void pr_rec_filter(pr_rec_data *d, pr_rec_filter_opts o)
{
    while (filter_pass(d, o.min_item, o.min_user) && o.iterate) {}
}

/* ---- the synthetic generator ---------------------------------------------- */

pr_rec_synth_opts pr_rec_synth_default(uint64_t seed)
{
    return (pr_rec_synth_opts){.seed = seed, .n_users = 1869, .n_items = 33135, .cluster_size = 128,
                               .max_interests = 4, .min_len = 40, .mean_len = 66, .max_len = 400, .max_step = 8,
                               .p_switch = 0.3, .p_popular = 0.3, .p_drift = 0.02};
}

/* one user's draws: element i of the Philox stream keyed by the seed, stream u */
typedef struct { uint64_t key; uint32_t user; uint64_t i; } synth_rng;

static double draw(synth_rng *r) { return pr_philox_uniform(r->key, r->user, r->i++); }
static int draw_below(synth_rng *r, int n) { return (int)(draw(r) * n) % n; }

static synth_rng user_rng(const pr_rec_synth_opts *o, int u)
{
    return (synth_rng){.key = o->seed ^ 0x7265632d73796e74ull, .user = (uint32_t)u, .i = 0};
}

static int user_length(const pr_rec_synth_opts *o, int u)
{
    synth_rng r = user_rng(o, u);
    double tail = -(o->mean_len - o->min_len) * log1p(-draw(&r));
    int len = o->min_len + (int)tail;
    return len < o->max_len ? len : o->max_len;
}

static int cluster_first(const pr_rec_synth_opts *o, int c) { return 1 + c * o->cluster_size; }
static int cluster_size(const pr_rec_synth_opts *o, int c)
{
    int left = o->n_items - c * o->cluster_size;
    return left < o->cluster_size ? left : o->cluster_size;
}

/* squaring a uniform favours low indices: low clusters and low items are the popular ones */
static int draw_popular(synth_rng *r, int n)
{
    double x = draw(r);
    return (int)(x * x * n) % n;
}

static void user_items(const pr_rec_synth_opts *o, int u, int32_t *out, int len)
{
    enum { MAX_INTERESTS = 16 };
    synth_rng r = user_rng(o, u);
    r.i = 1;   /* draw 0 was the length */
    int n_clusters = (o->n_items + o->cluster_size - 1) / o->cluster_size;
    int m = 1 + draw_below(&r, o->max_interests), cur = 0;
    int cluster[MAX_INTERESTS], cursor[MAX_INTERESTS];
    for (int j = 0; j < m; j++) {
        cluster[j] = draw_popular(&r, n_clusters);
        cursor[j] = draw_below(&r, cluster_size(o, cluster[j]));
    }
    for (int t = 0; t < len; t++) {
        if (m > 1 && draw(&r) < o->p_switch) cur = (cur + 1 + draw_below(&r, m - 1)) % m;
        if (draw(&r) < o->p_drift) cluster[cur] = (cluster[cur] + (draw(&r) < 0.5 ? 1 : n_clusters - 1)) % n_clusters;
        int c = cluster[cur], size = cluster_size(o, c);
        int idx = draw(&r) < o->p_popular ? draw_popular(&r, size) : (cursor[cur] + 1 + draw_below(&r, o->max_step)) % size;
        cursor[cur] = idx;
        out[t] = cluster_first(o, c) + idx;
    }
}

pr_rec_data pr_rec_synth(pr_rec_synth_opts o)
{
    PR_CHECK(o.n_users >= 1 && o.n_items >= 2, "rec synth: n_users must be >= 1 and n_items >= 2, got %d and %d",
             o.n_users, o.n_items);
    PR_CHECK(o.cluster_size >= 1 && o.cluster_size <= o.n_items, "rec synth: cluster_size must be in 1..n_items, got %d",
             o.cluster_size);
    PR_CHECK(o.max_step >= 1, "rec synth: max_step must be >= 1, got %d", o.max_step);
    PR_CHECK(o.max_interests >= 1 && o.max_interests <= 16, "rec synth: max_interests must be in 1..16, got %d",
             o.max_interests);
    PR_CHECK(o.min_len >= 3 && o.min_len <= o.mean_len && o.mean_len <= o.max_len,
             "rec synth: lengths need 3 <= min_len <= mean_len <= max_len, got %d, %d, %d", o.min_len, o.mean_len,
             o.max_len);
    pr_rec_data d = {.n_users = o.n_users, .n_items = o.n_items};
    d.start = xcalloc((size_t)o.n_users + 1, sizeof *d.start);
    for (int u = 0; u < o.n_users; u++) d.start[u + 1] = d.start[u] + user_length(&o, u);
    d.n_interactions = d.start[o.n_users];
    d.items = xcalloc((size_t)d.n_interactions, sizeof *d.items);
    for (int u = 0; u < o.n_users; u++) user_items(&o, u, d.items + d.start[u], (int)pr_rec_len(&d, u));
    return d;
}

/* ---- batches ------------------------------------------------------------------ */

void pr_rec_order(int64_t *order, int64_t n, uint64_t seed, uint64_t epoch)
{
    uint64_t key = (seed ^ 0x7265632d6f726465ull) + (epoch >> 32) * 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {   /* Fisher-Yates */
        int64_t j = (int64_t)(pr_philox_uniform(key, (uint32_t)epoch, (uint64_t)i) * (double)(i + 1));
        if (j > i) j = i;
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void check_user(const pr_rec_data *d, int64_t u)
{
    PR_CHECK(u >= 0 && u < d->n_users, "rec batch: user %lld out of range (%d users)", (long long)u, d->n_users);
    PR_CHECK(pr_rec_len(d, (int)u) >= 3, "rec batch: user %lld has %lld items; the split needs 3", (long long)u,
             (long long)pr_rec_len(d, (int)u));
}

void pr_rec_train_batch(const pr_rec_data *d, const int64_t *users, int B, int T, int64_t *inputs,
                        int64_t *targets)
{
    PR_CHECK(T >= 1, "rec batch: T must be >= 1, got %d", T);
    memset(inputs, 0, sizeof *inputs * (size_t)B * (size_t)T);
    memset(targets, 0, sizeof *targets * (size_t)B * (size_t)T);
    for (int b = 0; b < B; b++) {
        check_user(d, users[b]);
        const int32_t *seq = d->items + d->start[users[b]];
        int64_t n_pairs = pr_rec_len(d, (int)users[b]) - 3;   /* training part: all but the last two */
        int64_t m = n_pairs < T ? n_pairs : T, first = n_pairs - m, pad = T - m;
        for (int64_t k = 0; k < m; k++) {
            inputs[(int64_t)b * T + pad + k] = seq[first + k];
            targets[(int64_t)b * T + pad + k] = seq[first + k + 1];
        }
    }
}

void pr_rec_eval_batch(const pr_rec_data *d, pr_rec_split split, const int64_t *users, int B, int T,
                       int64_t *history, int64_t *target)
{
    PR_CHECK(T >= 1, "rec batch: T must be >= 1, got %d", T);
    memset(history, 0, sizeof *history * (size_t)B * (size_t)T);
    for (int b = 0; b < B; b++) {
        check_user(d, users[b]);
        const int32_t *seq = d->items + d->start[users[b]];
        int64_t held = pr_rec_len(d, (int)users[b]) - (split == PR_REC_TEST ? 1 : 2);
        int64_t m = held < T ? held : T;
        for (int64_t k = 0; k < m; k++) history[(int64_t)b * T + T - m + k] = seq[held - m + k];
        target[b] = seq[held];
    }
}

/* ---- metrics ------------------------------------------------------------------ */

int64_t pr_rec_rank(const float *scores, int n_items, int target, double *auc)
{
    PR_CHECK(n_items >= 2, "rec metrics: ranking needs at least 2 items, got %d", n_items);
    PR_CHECK(target >= 1 && target <= n_items, "rec metrics: target item %d outside 1..%d", target, n_items);
    float s = scores[target];
    int64_t below = 0, tied = 0;
    for (int i = 1; i <= n_items; i++) {
        if (i == target) continue;
        below += scores[i] < s;
        tied += scores[i] == s;
    }
    if (auc) *auc = (below + 0.5 * tied) / (n_items - 1);
    return n_items - below;   /* 1 + everything not strictly below (higher, tied or NaN) */
}

void pr_rec_metrics_add(pr_rec_metrics *m, const float *scores, int n_items, int target)
{
    double auc;
    int64_t rank = pr_rec_rank(scores, n_items, target, &auc);
    for (int k = 0; k < PR_REC_N_KS; k++) {
        if (rank > pr_rec_ks[k]) continue;
        m->hit[k] += 1;
        m->ndcg[k] += 1 / log2((double)rank + 1);
    }
    m->auc += auc;
    m->n_users++;
}

void pr_rec_metrics_add_batch(pr_rec_metrics *m, const float *scores, int B, int n_items, const int64_t *targets)
{
    for (int b = 0; b < B; b++) {
        PR_CHECK(targets[b] >= 1 && targets[b] <= n_items, "rec metrics: target item %lld outside 1..%d",
                 (long long)targets[b], n_items);
        pr_rec_metrics_add(m, scores + (int64_t)b * (n_items + 1), n_items, (int)targets[b]);
    }
}

pr_rec_metrics pr_rec_metrics_mean(const pr_rec_metrics *m)
{
    pr_rec_metrics r = *m;
    double n = m->n_users ? (double)m->n_users : 1;
    for (int k = 0; k < PR_REC_N_KS; k++) r.hit[k] /= n, r.ndcg[k] /= n;
    r.auc /= n;
    return r;
}

const char *pr_rec_metrics_json(const pr_rec_metrics *m, char *buf, size_t n)
{
    pr_rec_metrics mean = pr_rec_metrics_mean(m);
    size_t used = (size_t)snprintf(buf, n, "{");
    for (int k = 0; k < PR_REC_N_KS && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, "\"hit@%d\":%.6f,\"ndcg@%d\":%.6f,", pr_rec_ks[k],
                                 mean.hit[k], pr_rec_ks[k], mean.ndcg[k]);
    if (used < n) snprintf(buf + used, n - used, "\"auc\":%.6f,\"users\":%lld}", mean.auc, (long long)m->n_users);
    return buf;
}

/* ---- statistics ----------------------------------------------------------------- */

pr_rec_stats pr_rec_data_stats(const pr_rec_data *d)
{
    pr_rec_stats s = {.n_users = d->n_users, .n_items = d->n_items, .n_interactions = d->n_interactions};
    s.avg_len = d->n_users ? (double)d->n_interactions / d->n_users : 0;
    for (int u = 0; u < d->n_users; u++) {
        int len = (int)pr_rec_len(d, u);
        if (u == 0 || len < s.min_len) s.min_len = len;
        if (len > s.max_len) s.max_len = len;
    }
    bool *seen = xcalloc((size_t)d->n_items + 1, sizeof *seen);
    for (int64_t i = 0; i < d->n_interactions; i++) seen[d->items[i]] = true;
    for (int it = 1; it <= d->n_items; it++) s.n_items_seen += seen[it];
    free(seen);
    return s;
}
