/* tasks/rec.h: sequential recommendation data and metrics.
 *
 * A dataset is a list of users, each a time-ordered sequence of item ids
 * 1..n_items (0 is padding and never an item). The split is leave-one-out:
 * a user's last item is the test target, the second-to-last the validation
 * target, the rest is training. Data comes from a seeded synthetic generator
 * (the default) or from the Amazon ratings CSVs and review JSON lines and
 * Yelp review.json, loaded with the paper's filter. Metrics rank the held-out item
 * against every item. Nothing here depends on models/ or the trainer. */
#ifndef PR_TASKS_REC_H
#define PR_TASKS_REC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* users in compressed rows: user u's items are items[start[u] .. start[u+1]) */
typedef struct {
    int n_users;
    int n_items;            /* ids 1..n_items; the score rows are n_items + 1 wide */
    int64_t n_interactions;
    int64_t *start;         /* [n_users + 1] */
    int32_t *items;         /* [n_interactions] */
} pr_rec_data;

void pr_rec_data_free(pr_rec_data *d);
static inline int64_t pr_rec_len(const pr_rec_data *d, int u) { return d->start[u + 1] - d->start[u]; }

/* ---- the filter -------------------------------------------------------------
 * Drops items with fewer than min_item interactions, then users with fewer
 * than min_user, then renumbers the remaining items 1..n densely (keeping
 * their order) and drops items that no longer occur. With iterate, repeats
 * until nothing changes, so both bounds hold at the end. The paper's rule is
 * one pass (iterate = false): its Amazon Electronics figures (123k
 * interactions over 33,135 items, 3.7 per item) are below the item bound,
 * which only a single items-then-users pass leaves. */
typedef struct { int min_item, min_user; bool iterate; } pr_rec_filter_opts;
#define PR_REC_FILTER_PAPER ((pr_rec_filter_opts){.min_item = 5, .min_user = 40, .iterate = false})
void pr_rec_filter(pr_rec_data *d, pr_rec_filter_opts o);

/* ---- the synthetic generator -----------------------------------------------
 * Items fall in clusters of cluster_size consecutive ids (one interest
 * each). A user holds 1..max_interests clusters and walks them: mostly the
 * next few items of the current cluster after the last one seen there,
 * sometimes a popular item of it, sometimes a switch to another of the
 * user's interests; now and then an interest drifts to a neighbouring
 * cluster. Lengths are min_len plus an exponential tail (mean mean_len),
 * capped at max_len. User u's sequence depends only on (seed, u), so a
 * smaller n_users gives a prefix of the same users. Back on an interest, a
 * user goes on from where they left it, which rewards a model that keeps
 * each interest in its state, not only the last item. On the default set
 * (seed 1), item-to-next-item counts reach Hit@10 .17 and Hit@200 .21 on
 * the test split, popularity .01 and .06 (tests/test_rec.c checks the gap). */
typedef struct {
    uint64_t seed;
    int n_users, n_items, cluster_size, max_interests;
    int min_len, mean_len, max_len;
    int max_step;           /* the next item of a cluster is 1..max_step ids after the last one */
    double p_switch;        /* per step: move to another of the user's interests */
    double p_popular;       /* per step: a popular item of the cluster, not the next ones */
    double p_drift;         /* per step: the current interest moves to a neighbouring cluster */
} pr_rec_synth_opts;
/* sized like the paper's Amazon Electronics: 1,869 users, 33,135 items, ~123k interactions */
pr_rec_synth_opts pr_rec_synth_default(uint64_t seed);
pr_rec_data pr_rec_synth(pr_rec_synth_opts o);

/* ---- the loaders ------------------------------------------------------------
 * The formats, by the name rec.data and `prism data rec --file` give them
 * (NAME:FILE):
 *   amazon2014   Amazon 2014 ratings CSV: user,item,rating,timestamp
 *   amazon2018   Amazon 2018 ratings CSV: item,user,rating,timestamp
 *   amazon-json  Amazon 5-core review JSON lines: reviewerID, asin, unixReviewTime
 *   yelp         Yelp review.json lines: user_id, business_id, date "YYYY-MM-DD HH:MM:SS"
 *   amazon       detected from the first lines: JSON lines by their keys, a
 *                CSV by a header naming its columns (user/reviewerID,
 *                item/asin, rating, ...) or by reviewer ids ('A' + 11 or
 *                more of [0-9A-Z]) in one column and ASINs (10 of them) in
 *                the other on every sampled line; anything else is refused
 *                with a message naming the formats (the two CSVs differ only
 *                in the order of their columns).
 * Ids are strings, times integers (the date's YYYYMMDDHHMMSS for Yelp). A
 * CSV's first line naming the fields is a header (refused when it names
 * them in the other format's order). Each user's items are sorted by time,
 * ties kept in file order; users are numbered in order of first appearance,
 * then the filter runs. Blank lines are ignored. A malformed line is an
 * error (-1, err = "FILE:LINE: field ...: what is wrong") unless skip_bad,
 * which skips it, counts it in n_bad and keeps the first one's message in
 * first_bad: a real dump with a damaged line should not lose hours of
 * loading, but it must not pass unnoticed either. A line longer than
 * max_line or a file longer than max_bytes is an error (0: the defaults),
 * so a device or a binary file cannot make the loader read forever. */
typedef enum { PR_REC_DETECT, PR_REC_AMAZON2014, PR_REC_AMAZON2018, PR_REC_AMAZON_JSON, PR_REC_YELP } pr_rec_format;
extern const char *const pr_rec_format_names[];   /* by pr_rec_format, NULL-terminated */
#define PR_REC_MAX_LINE ((size_t)1 << 20)
#define PR_REC_MAX_BYTES ((int64_t)16 << 30)
typedef struct {
    pr_rec_filter_opts filter;
    bool skip_bad;
    size_t max_line;
    int64_t max_bytes;
} pr_rec_load_opts;
typedef struct {
    int64_t n_lines, n_bad;         /* lines read (blank ones included), malformed lines skipped */
    int64_t n_raw_users, n_raw_items, n_raw_interactions;   /* before the filter */
    pr_rec_format format;           /* the one read (detected for PR_REC_DETECT) */
    char first_bad[512];
} pr_rec_load_report;
/* "NAME:FILE" with NAME one of pr_rec_format_names: 0, else -1 */
#define PR_REC_DATA_CHOICES "synthetic, synthetic:full, amazon:FILE (detected), amazon2014:FILE, amazon2018:FILE, " \
                            "amazon-json:FILE or yelp:FILE"
int pr_rec_format_of(const char *spec, pr_rec_format *fmt, const char **file);
int pr_rec_load(const char *path, pr_rec_format fmt, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep,
                pr_err *err);
/* the amazon2014 and yelp formats */
int pr_rec_load_amazon(const char *path, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep,
                       pr_err *err);
int pr_rec_load_yelp(const char *path, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep,
                     pr_err *err);
/* what training and leave-one-out evaluation need: a user, 2 items, and 3
 * interactions for every user; -1 with err naming the counts (what: the source) */
int pr_rec_check_trainable(const pr_rec_data *d, const char *what, pr_err *err);

/* ---- batches ----------------------------------------------------------------
 * pr_rec_order: a permutation of 0..n-1 from (seed, epoch), the training order.
 * pr_rec_train_batch: for each user, the last T+1 items of its training part
 * (everything before the validation item) give inputs[b] = items t..t+T-1
 * and targets[b] = items t+1..t+T, left-padded with 0 (0 = ignore) when
 * shorter. pr_rec_eval_batch: history[b] = the last T items before the
 * held-out one (left-padded), target[b] = the held-out item: the
 * second-to-last (PR_REC_VALID) or the last (PR_REC_TEST). Users need at
 * least 3 items (the filter guarantees 40). */
typedef enum { PR_REC_VALID, PR_REC_TEST } pr_rec_split;
void pr_rec_order(int64_t *order /*[n]*/, int64_t n, uint64_t seed, uint64_t epoch);
void pr_rec_train_batch(const pr_rec_data *d, const int64_t *users /*[B]*/, int B, int T,
                        int64_t *inputs /*[B,T]*/, int64_t *targets /*[B,T]*/);
void pr_rec_eval_batch(const pr_rec_data *d, pr_rec_split split, const int64_t *users /*[B]*/, int B, int T,
                       int64_t *history /*[B,T]*/, int64_t *target /*[B]*/);

/* ---- metrics ------------------------------------------------------------------
 * From a row of scores[0..n_items] (index 0, padding, is ignored), the
 * held-out item's rank among all n_items items: 1 + the number of other
 * items scored higher or equal (ties count against the target, so a model
 * that scores everything alike ranks last, not first; a NaN score counts as
 * higher). Items in the user's history are ranked like any other.
 * Hit@K = [rank <= K], NDCG@K = [rank <= K] / log2(rank + 1),
 * AUC = (items below + half the ties) / (n_items - 1); each averaged over
 * users. */
#define PR_REC_N_KS 3
extern const int pr_rec_ks[PR_REC_N_KS];     /* 10, 200, 500 */
typedef struct {
    int64_t n_users;
    double hit[PR_REC_N_KS], ndcg[PR_REC_N_KS], auc;   /* sums; pr_rec_metrics_mean divides */
} pr_rec_metrics;
int64_t pr_rec_rank(const float *scores, int n_items, int target, double *auc);
void pr_rec_metrics_add(pr_rec_metrics *m, const float *scores /*[n_items+1]*/, int n_items, int target);
void pr_rec_metrics_add_batch(pr_rec_metrics *m, const float *scores /*[B, n_items+1]*/, int B, int n_items,
                              const int64_t *targets /*[B]*/);
pr_rec_metrics pr_rec_metrics_mean(const pr_rec_metrics *m);
/* {"hit@10":..,"ndcg@10":..,...,"auc":..} of the means, into buf */
const char *pr_rec_metrics_json(const pr_rec_metrics *m, char *buf, size_t n);

/* ---- statistics ------------------------------------------------------------- */
typedef struct {
    int n_users, n_items, min_len, max_len, n_items_seen;
    int64_t n_interactions;
    double avg_len;
} pr_rec_stats;
pr_rec_stats pr_rec_data_stats(const pr_rec_data *d);

#ifdef __cplusplus
}
#endif
#endif
