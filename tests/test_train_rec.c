/* tests/test_train_rec.c: the rec task through the trainer, on a tiny
 * Amazon-format file written here (12 users of 45 items over 30 items, so
 * the paper's filter keeps everything and evaluation takes milliseconds).
 *
 * - every mixer family (and SASRec) trains a few steps and reports the 14
 *   ranking metrics, finite and in [0, 1]; rec.n_items comes from the data;
 * - resuming a rec run (sampled negatives, so the negatives' stream is
 *   exercised too) ends bit for bit where the uninterrupted run ends;
 * - a bad rec.data, a missing file and a rec.n_items that contradicts the
 *   data are refused, naming the key or the file. */
#include <sys/stat.h>
#include <unistd.h>

#include "tests/test_models_util.h"
#include "train/train.h"

enum { N_USERS = 12, PER_USER = 45, N_ITEMS = 30 };
static char root[128], csv[192];

static void write_csv(void)
{
    FILE *f = fopen(csv, "w");
    assert_non_null(f);
    for (int u = 0; u < N_USERS; u++)
        for (int t = 0; t < PER_USER; t++)   /* each user walks the items with its own stride */
            fprintf(f, "u%d,i%d,5.0,%d\n", u, (u * 7 + t * (1 + u % 3)) % N_ITEMS, 1000 + t);
    fclose(f);
}

static void rec_opts(pr_train_opts *o, int64_t steps)
{
    *o = pr_train_defaults();
    snprintf(o->task, sizeof o->task, "rec");
    snprintf(o->rec_data, sizeof o->rec_data, "amazon2014:%s", csv);
    o->steps = steps;
    o->batch = 4;
    o->lr = 1e-2;
}

static char *run_dir(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", root, name);
    return buf;
}

static void expect_rec_metrics(const pr_metrics *m)
{
    static const char *const names[] = {"hit@10", "hit@200", "hit@500", "ndcg@10", "ndcg@200", "ndcg@500", "auc"};
    assert_int_equal(m->n, 14);
    for (int i = 0; i < m->n; i++) {
        char want[24];
        snprintf(want, sizeof want, "%s%s", i < 7 ? "val_" : "test_", names[i % 7]);
        assert_string_equal(m->name[i], want);
        if (!(m->value[i] >= 0 && m->value[i] <= 1)) fail_msg("%s = %g", m->name[i], m->value[i]);
    }
    /* 30 items: the target is always within the top 200 */
    assert_true(m->value[1] == 1.0 && m->value[8] == 1.0);
}

static void train_tiny(pr_config *c, const char *name)
{
    pr_train_opts o;
    rec_opts(&o, 3);
    o.overwrite = true;   /* test_mixers names some mixers twice (variants) */
    pr_train_result res;
    pr_err err;
    char dir[256];
    if (pr_train(c, &o, run_dir(dir, sizeof dir, name), false, PR_CPU, &res, &err))
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(res.steps, 3);
    expect_rec_metrics(&res.metrics);
    /* the resolved config records the data's item count; eval reads it back */
    pr_config back;
    pr_train_result ev;
    if (pr_eval_run(dir, PR_CPU, &back, &o, &ev, &err)) fail_msg("%s: eval: %s", name, err.msg);
    assert_int_equal(back.rec_n_items, N_ITEMS);
    assert_memory_equal(ev.metrics.value, res.metrics.value, sizeof(double) * 14);
}

static void test_every_mixer_trains_rec(void **state)
{
    (void)state;
    for (int i = 0; i < N_TEST_MIXERS; i++) {
        pr_config c = test_config(i, 6, 2, 4, 4);
        c.task = PR_HEAD_REC;
        c.seq_len = 8, c.rec_n_items = 0, c.init_std = 0.1;
        train_tiny(&c, test_mixers[i].name);
    }
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "sasrec", &err), 0);
    c.d_model = 8, c.seq_len = 8, c.rec_n_items = 0;
    train_tiny(&c, "sasrec");
}

static void read_file(const char *path, unsigned char **buf, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)*n + 1);
    assert_int_equal(fread(*buf, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
}

static void test_rec_resume_is_bit_identical(void **state)
{
    (void)state;
    pr_config c = test_config(0, 6, 2, 4, 4);
    c.task = PR_HEAD_REC;
    c.seq_len = 8, c.rec_n_items = 0, c.init_std = 0.1;
    pr_train_opts o;
    rec_opts(&o, 6);
    o.rec_negatives = 3;
    o.ckpt_every = 3;
    o.batch = 5;   /* 12 users: batches straddle the epochs */
    pr_train_result whole, part;
    pr_err err;
    char a[256], b[256], fa[300], fb[300];
    assert_int_equal(pr_train(&c, &o, run_dir(a, sizeof a, "whole"), false, PR_CPU, &whole, &err), 0);
    o.steps = 3;
    assert_int_equal(pr_train(&c, &o, run_dir(b, sizeof b, "part"), false, PR_CPU, &part, &err), 0);
    o.steps = 6;
    pr_config resolved;
    pr_train_opts ro;
    pr_train_result ignored;
    assert_int_equal(pr_eval_run(b, PR_CPU, &resolved, &ro, &ignored, &err), 0);
    if (pr_train(&resolved, &o, b, true, PR_CPU, &part, &err)) fail_msg("%s", err.msg);
    assert_int_equal(part.steps, 6);
    snprintf(fa, sizeof fa, "%s/ckpt-00000006.weights.safetensors", a);
    snprintf(fb, sizeof fb, "%s/ckpt-00000006.weights.safetensors", b);
    unsigned char *x, *y;
    long nx, ny;
    read_file(fa, &x, &nx);
    read_file(fb, &y, &ny);
    assert_int_equal(nx, ny);
    if (memcmp(x, y, (size_t)nx) != 0) fail_msg("the resumed rec run's weights differ from the whole run's");
    free(x);
    free(y);
    assert_memory_equal(whole.metrics.value, part.metrics.value, sizeof(double) * 14);
}

static void expect_refused(pr_config *c, pr_train_opts *o, const char *name, const char *words)
{
    pr_train_result res;
    pr_err err;
    char dir[256];
    assert_int_equal(pr_train(c, o, run_dir(dir, sizeof dir, name), false, PR_CPU, &res, &err), -1);
    if (!strstr(err.msg, words)) fail_msg("'%s' does not name '%s'", err.msg, words);
}

static void test_rec_errors_name_the_key_or_file(void **state)
{
    (void)state;
    pr_config c = test_config(1, 6, 2, 4, 4);
    c.task = PR_HEAD_REC;
    c.seq_len = 8, c.rec_n_items = 0;
    pr_train_opts o;
    rec_opts(&o, 1);
    snprintf(o.rec_data, sizeof o.rec_data, "movielens:x.csv");
    expect_refused(&c, &o, "bad", "train.rec.data: 'movielens:x.csv'");
    char missing[256];
    snprintf(missing, sizeof missing, "%s/none.json", root);
    snprintf(o.rec_data, sizeof o.rec_data, "yelp:%s", missing);
    expect_refused(&c, &o, "missing", missing);
    rec_opts(&o, 1);
    c.rec_n_items = 31;
    expect_refused(&c, &o, "items", "rec.n_items: set to 31, but the data (train.rec.data) has 30 items");
    c.rec_n_items = N_ITEMS;   /* the data's own count is accepted */
    pr_train_result res;
    pr_err err;
    char dir[256];
    assert_int_equal(pr_train(&c, &o, run_dir(dir, sizeof dir, "same"), false, PR_CPU, &res, &err), 0);
}

/* Issue 45: a set of one item trained the whole budget, then evaluation had
 * nothing to rank it against; refused when the data is loaded, with counts */
static void test_rec_too_few_items_refused_up_front(void **state)
{
    (void)state;
    char one[256];
    snprintf(one, sizeof one, "%s/one_item.csv", root);
    FILE *f = fopen(one, "w");
    assert_non_null(f);
    for (int u = 0; u < 2; u++)
        for (int t = 0; t < 45; t++) fprintf(f, "u%d,i0,5.0,%d\n", u, t);
    fclose(f);
    pr_config c = test_config(1, 6, 2, 4, 4);
    c.task = PR_HEAD_REC;
    c.seq_len = 8, c.rec_n_items = 0;
    pr_train_opts o;
    rec_opts(&o, 1000000);
    snprintf(o.rec_data, sizeof o.rec_data, "amazon2014:%s", one);
    expect_refused(&c, &o, "one", "2 users, 1 items and 90 interactions remain");
    expect_refused(&c, &o, "one", "training needs at least 1 user, 2 items");
}

static int make_root(void **state)
{
    (void)state;
    if (pr_test_make_root(root, sizeof root, "test_train_rec")) return -1;
    snprintf(csv, sizeof csv, "%s/ratings.csv", root);
    write_csv();
    return 0;
}

static int remove_root(void **state)
{
    (void)state;
    return pr_test_remove_root(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_mixer_trains_rec),
        cmocka_unit_test(test_rec_resume_is_bit_identical),
        cmocka_unit_test(test_rec_errors_name_the_key_or_file),
        cmocka_unit_test(test_rec_too_few_items_refused_up_front),
    };
    return cmocka_run_group_tests(tests, make_root, remove_root);
}
