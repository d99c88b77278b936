/* tests/test_rec.c: the recommendation data (tasks/rec.h): the loaders and
 * the filter on small files written here with known answers, malformed
 * lines, the leave-one-out split and batches, the synthetic generator, and
 * the metrics against values worked out by hand. */
#include <unistd.h>

#include "tests/pr_test.h"
#include "tasks/rec.h"

/* writes text to a new temporary file; path must hold 64 bytes */
static void write_temp(char *path, const char *text)
{
    strcpy(path, "/tmp/prism_test_rec_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void assert_user(const pr_rec_data *d, int u, const int32_t *want, int n)
{
    assert_int_equal(pr_rec_len(d, u), n);
    for (int i = 0; i < n; i++) {
        if (d->items[d->start[u] + i] != want[i])
            fail_msg("user %d item %d: got %d, expected %d", u, i, d->items[d->start[u] + i], want[i]);
    }
}

/* counts a3 b2 c2 d2 e1 x1 g2; u1's c and d tie at time 200; u3 is short
 * once e and x are gone, and without u3 the item g has one interaction */
static const char *amazon_csv = "user,item,rating,timestamp\n"
                                "u1,a,5.0,300\n"
                                "u1,b,4.0,100\n"
                                "u1,c,3.0,200\n"
                                "u1,d,1.0,200\n"
                                "u2,a,5.0,10\n"
                                "u2,b,5.0,20\n"
                                "u2,e,5.0,30\n"
                                "u2,c,5.0,40\r\n"
                                "u2,d,5.0,50\n"
                                "\n"
                                "u3,a,1,5\n"
                                "u3,x,1,6\n"
                                "u1,g,2,400\n"
                                "u3,g,2,1\n";

static void test_amazon_filter_once(void **state)
{
    (void)state;
    char path[64];
    write_temp(path, amazon_csv);
    pr_rec_data d;
    pr_rec_load_report rep;
    pr_err err;
    pr_rec_load_opts o = {.filter = {.min_item = 2, .min_user = 3, .iterate = false}};
    assert_int_equal(pr_rec_load_amazon(path, o, &d, &rep, &err), 0);
    assert_int_equal(rep.n_lines, 15);
    assert_int_equal(rep.n_raw_users, 3);
    assert_int_equal(rep.n_raw_items, 7);
    assert_int_equal(rep.n_raw_interactions, 13);
    assert_int_equal(rep.n_bad, 0);
    /* e and x go, then u3; items renumbered in first-seen order: a1 b2 c3 d4 g5 */
    assert_int_equal(d.n_users, 2);
    assert_int_equal(d.n_items, 5);
    assert_int_equal(d.n_interactions, 9);
    assert_user(&d, 0, (const int32_t[]){2, 3, 4, 1, 5}, 5);   /* b100 c200 d200 a300 g400 */
    assert_user(&d, 1, (const int32_t[]){1, 2, 3, 4}, 4);
    pr_rec_data_free(&d);
    unlink(path);
}

static void test_amazon_filter_iterated(void **state)
{
    (void)state;
    char path[64];
    write_temp(path, amazon_csv);
    pr_rec_data d;
    pr_err err;
    pr_rec_load_opts o = {.filter = {.min_item = 2, .min_user = 3, .iterate = true}};
    assert_int_equal(pr_rec_load_amazon(path, o, &d, NULL, &err), 0);
    /* a second pass drops g (one interaction left); the third changes nothing */
    assert_int_equal(d.n_users, 2);
    assert_int_equal(d.n_items, 4);
    assert_user(&d, 0, (const int32_t[]){2, 3, 4, 1}, 4);
    assert_user(&d, 1, (const int32_t[]){1, 2, 3, 4}, 4);
    pr_rec_data_free(&d);
    /* the paper's bounds leave nobody in so small a file */
    assert_int_equal(pr_rec_load_amazon(path, (pr_rec_load_opts){.filter = PR_REC_FILTER_PAPER}, &d, NULL, &err), 0);
    assert_int_equal(d.n_users, 0);
    assert_int_equal(d.n_interactions, 0);
    pr_rec_data_free(&d);
    unlink(path);
}

static void expect_load_error(int (*loader)(const char *, pr_rec_load_opts, pr_rec_data *, pr_rec_load_report *,
                                            pr_err *),
                              const char *text, const char *want)
{
    char path[64], full[600];
    write_temp(path, text);
    pr_rec_data d;
    pr_err err = {{0}};
    pr_rec_load_opts o = {.filter = {.min_item = 1, .min_user = 1}};
    assert_int_equal(loader(path, o, &d, NULL, &err), -1);
    snprintf(full, sizeof full, "%s%s", path, want);
    if (strcmp(err.msg, full) != 0) fail_msg("error \"%s\", expected \"%s\"", err.msg, full);
    assert_null(d.items);
    unlink(path);
}

static void test_amazon_malformed(void **state)
{
    (void)state;
    int (*load)(const char *, pr_rec_load_opts, pr_rec_data *, pr_rec_load_report *, pr_err *) = pr_rec_load_amazon;
    expect_load_error(load, "u1,a,5,1\nu1,b,five,2\n", ":2: field rating: not a number ('five')");
    expect_load_error(load, "u1,a,5,1\nu1,b,5\n",
                      ":2: expected 4 comma-separated fields (user,item,rating,timestamp), found 3");
    expect_load_error(load, "u1,a,5,1,x\n", ":1: expected 4 comma-separated fields (user,item,rating,timestamp), found 5");
    expect_load_error(load, "\nu1,a,5,1\n,b,5,2\n", ":3: field user is empty");
    expect_load_error(load, "u1,a,5,12x\n", ":1: field timestamp: not an integer ('12x')");
    /* skipped with skip_bad: counted, the first one named, the rest loaded */
    char path[64];
    write_temp(path, "u1,a,5,1\nu1,b,five,2\nu1,c,5,3\nu1,d\n");
    pr_rec_data d;
    pr_rec_load_report rep;
    pr_err err;
    pr_rec_load_opts o = {.filter = {.min_item = 1, .min_user = 1}, .skip_bad = true};
    assert_int_equal(pr_rec_load_amazon(path, o, &d, &rep, &err), 0);
    assert_int_equal(rep.n_bad, 2);
    assert_non_null(strstr(rep.first_bad, ":2: field rating"));
    assert_user(&d, 0, (const int32_t[]){1, 2}, 2);
    pr_rec_data_free(&d);
    unlink(path);
    /* a missing file is named */
    assert_int_equal(pr_rec_load_amazon("/nonexistent/ratings.csv", o, &d, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/ratings.csv: cannot open"));
}

static const char *yelp_json =
    "{\"review_id\":\"r1\",\"user_id\":\"U1\",\"business_id\":\"B1\",\"stars\":5,\"date\":\"2018-01-02 10:00:00\"}\n"
    "{\"user_id\":\"U1\",\"business_id\":\"B2\",\"date\":\"2017-12-31 23:59:59\"}\n"
    "{\"user_id\":\"U2\",\"business_id\":\"B1\",\"date\":\"2018-01-01 00:00:00\"}\n"
    "{\"user_id\":\"U2\",\"business_id\":\"B2\",\"date\":\"2018-01-01 00:00:00\"}\n"
    "{\"user_id\":\"U1\",\"business_id\":\"B3\",\"date\":\"2018-01-02 10:00:00\"}\n"
    "{\"user_id\":\"U2\",\"business_id\":\"B3\",\"date\":\"2016-05-04\"}\n";

static void test_yelp(void **state)
{
    (void)state;
    char path[64];
    write_temp(path, yelp_json);
    pr_rec_data d;
    pr_err err;
    pr_rec_load_opts o = {.filter = {.min_item = 1, .min_user = 1}};
    assert_int_equal(pr_rec_load_yelp(path, o, &d, NULL, &err), 0);
    assert_int_equal(d.n_users, 2);
    assert_int_equal(d.n_items, 3);
    assert_user(&d, 0, (const int32_t[]){2, 1, 3}, 3);   /* B1 and B3 tie: file order */
    assert_user(&d, 1, (const int32_t[]){3, 1, 2}, 3);   /* a date alone sorts at midnight */
    pr_rec_data_free(&d);
    /* every business has 2 reviews: an item bound of 3 leaves nobody */
    o.filter = (pr_rec_filter_opts){.min_item = 3, .min_user = 1};
    assert_int_equal(pr_rec_load_yelp(path, o, &d, NULL, &err), 0);
    assert_int_equal(d.n_users, 0);
    pr_rec_data_free(&d);
    unlink(path);
}

static void test_yelp_malformed(void **state)
{
    (void)state;
    int (*load)(const char *, pr_rec_load_opts, pr_rec_data *, pr_rec_load_report *, pr_err *) = pr_rec_load_yelp;
    const char *good = "{\"user_id\":\"U1\",\"business_id\":\"B1\",\"date\":\"2018-01-02 10:00:00\"}\n";
    char text[512];
    snprintf(text, sizeof text, "%s{\"user_id\":\"U1\",\"business_id\":", good);
    expect_load_error(load, text, ":2: not a JSON object");
    expect_load_error(load, "[1,2]\n", ":1: not a JSON object");
    snprintf(text, sizeof text, "%s%s{\"user_id\":\"U1\",\"date\":\"2018-01-02 10:00:00\"}\n", good, good);
    expect_load_error(load, text, ":3: field business_id: missing, empty or not a string");
    expect_load_error(load, "{\"user_id\":7,\"business_id\":\"B\",\"date\":\"2018-01-02\"}\n",
                      ":1: field user_id: missing, empty or not a string");
    expect_load_error(load, "{\"user_id\":\"U\",\"business_id\":\"B\",\"date\":\"2018-13-02 10:00:00\"}\n",
                      ":1: field date: '2018-13-02 10:00:00' is not \"YYYY-MM-DD HH:MM:SS\"");
    expect_load_error(load, "{\"user_id\":\"U\",\"business_id\":\"B\",\"date\":\"2018-01-02 10:00\"}\n",
                      ":1: field date: '2018-01-02 10:00' is not \"YYYY-MM-DD HH:MM:SS\"");
    expect_load_error(load, "{\"user_id\":\"U\",\"business_id\":\"B\",\"date\":\"2018-01-02\"} x\n",
                      ":1: not a JSON object");
    /* skipped with skip_bad */
    char path[64];
    snprintf(text, sizeof text, "%snot json\n%s", good, good);
    write_temp(path, text);
    pr_rec_data d;
    pr_rec_load_report rep;
    pr_err err;
    pr_rec_load_opts o = {.filter = {.min_item = 1, .min_user = 1}, .skip_bad = true};
    assert_int_equal(pr_rec_load_yelp(path, o, &d, &rep, &err), 0);
    assert_int_equal(rep.n_bad, 1);
    assert_non_null(strstr(rep.first_bad, ":2: not a JSON object"));
    assert_user(&d, 0, (const int32_t[]){1, 1}, 2);
    pr_rec_data_free(&d);
    unlink(path);
}

/* ---- issue 42 item 6, issue 45: the formats as the sources ship them -------------- */

/* loads text as fmt with no filter; returns 0 or -1 (err set) */
static int load_as(const char *text, pr_rec_format fmt, pr_rec_data *d, pr_rec_load_report *rep, pr_err *err,
                   char *path)
{
    write_temp(path, text);
    pr_rec_load_opts o = {.filter = {.min_item = 1, .min_user = 1}};
    int rc = pr_rec_load(path, fmt, o, d, rep, err);
    unlink(path);
    return rc;
}

/* The same three ratings as a 2014 CSV, a 2018 CSV and 5-core JSON lines:
 * AKM1MP6P0OYPR rated 0132793040 then B00004ZCJE; A2CX7LUOHB2NDG rated 0132793040. */
static const char *r2014 = "AKM1MP6P0OYPR,0132793040,5.0,100\nA2CX7LUOHB2NDG,0132793040,5.0,50\n"
                           "AKM1MP6P0OYPR,B00004ZCJE,4.0,200\n";
static const char *r2018 = "0132793040,AKM1MP6P0OYPR,5.0,100\n0132793040,A2CX7LUOHB2NDG,5.0,50\n"
                           "B00004ZCJE,AKM1MP6P0OYPR,4.0,200\n";
static const char *r5core =
    "{\"reviewerID\": \"AKM1MP6P0OYPR\", \"asin\": \"0132793040\", \"overall\": 5.0, \"unixReviewTime\": 100, "
    "\"reviewTime\": \"01 1, 1970\"}\n"
    "{\"reviewerID\": \"A2CX7LUOHB2NDG\", \"asin\": \"0132793040\", \"unixReviewTime\": 50}\n"
    "\n{\"reviewerID\": \"AKM1MP6P0OYPR\", \"asin\": \"B00004ZCJE\", \"unixReviewTime\": 200}\n";

static void expect_three_ratings(const char *text, pr_rec_format fmt, pr_rec_format want)
{
    char path[64];
    pr_rec_data d;
    pr_rec_load_report rep;
    pr_err err = {{0}};
    if (load_as(text, fmt, &d, &rep, &err, path)) fail_msg("%s as %s: %s", text, pr_rec_format_names[fmt], err.msg);
    assert_int_equal(rep.format, want);
    assert_int_equal(d.n_users, 2);   /* users and items not swapped */
    assert_int_equal(d.n_items, 2);
    assert_user(&d, 0, (const int32_t[]){1, 2}, 2);
    assert_user(&d, 1, (const int32_t[]){1}, 1);
    pr_rec_data_free(&d);
}

static void test_formats_named_and_detected(void **state)
{
    (void)state;
    expect_three_ratings(r2014, PR_REC_AMAZON2014, PR_REC_AMAZON2014);
    expect_three_ratings(r2018, PR_REC_AMAZON2018, PR_REC_AMAZON2018);
    expect_three_ratings(r5core, PR_REC_AMAZON_JSON, PR_REC_AMAZON_JSON);
    expect_three_ratings(r2014, PR_REC_DETECT, PR_REC_AMAZON2014);
    expect_three_ratings(r2018, PR_REC_DETECT, PR_REC_AMAZON2018);
    expect_three_ratings(r5core, PR_REC_DETECT, PR_REC_AMAZON_JSON);
    /* a header naming the columns decides, whatever the ids look like */
    expect_three_ratings("item,user,rating,timestamp\ni1,u1,5,100\ni1,u2,5,50\ni2,u1,4,200\n", PR_REC_DETECT,
                         PR_REC_AMAZON2018);
    expect_three_ratings("user,item,rating,timestamp\nu1,i1,5,100\nu2,i1,5,50\nu1,i2,4,200\n", PR_REC_DETECT,
                         PR_REC_AMAZON2014);
    /* names: the spec grammar of rec.data */
    pr_rec_format fmt;
    const char *file;
    assert_int_equal(pr_rec_format_of("amazon2018:/x.csv", &fmt, &file), 0);
    assert_int_equal(fmt, PR_REC_AMAZON2018);
    assert_string_equal(file, "/x.csv");
    assert_int_equal(pr_rec_format_of("amazon-json:a:b", &fmt, &file), 0);
    assert_int_equal(fmt, PR_REC_AMAZON_JSON);
    assert_string_equal(file, "a:b");
    assert_int_equal(pr_rec_format_of("amazon:", &fmt, &file), -1);
    assert_int_equal(pr_rec_format_of("amazon2019:x", &fmt, &file), -1);
    assert_int_equal(pr_rec_format_of("synthetic", &fmt, &file), -1);
}

static void test_undecidable_csv_refused(void **state)
{
    (void)state;
    char path[64];
    pr_rec_data d;
    pr_err err = {{0}};
    /* ids of one shape in both columns, a mixed sample, an unknown header: the format must be named */
    static const char *const texts[] = {
        "u1,a,5,1\nu2,b,5,2\n",
        "0132793040,AKM1MP6P0OYPR,5.0,100\nAKM1MP6P0OYPR,0132793040,5.0,100\n",
        "a,b,rating,timestamp\nAKM1MP6P0OYPR,0132793040,5.0,100\n",
        "{\"user\": \"u\", \"item\": \"i\"}\n",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        assert_int_equal(load_as(texts[i], PR_REC_DETECT, &d, NULL, &err, path), -1);
        if (!strstr(err.msg, "cannot tell the format") || !strstr(err.msg, "amazon2018:FILE (CSV item,user") ||
            !strstr(err.msg, "amazon-json:FILE") || !strstr(err.msg, path))
            fail_msg("text %zu: %s", i, err.msg);
    }
    /* named, the CSV loads; a header in the other order is refused */
    assert_int_equal(load_as(texts[0], PR_REC_AMAZON2018, &d, NULL, &err, path), 0);
    pr_rec_data_free(&d);
    assert_int_equal(load_as("item,user,rating,timestamp\ni,u,5,1\n", PR_REC_AMAZON2014, &d, NULL, &err, path), -1);
    assert_non_null(strstr(err.msg, ":1: the header names item,user: that is the amazon2018 (item,user,...) layout"));
    assert_int_equal(load_as("{\"reviewerID\":\"A\",\"asin\":\"B\",\"unixReviewTime\":1.5}\n", PR_REC_AMAZON_JSON, &d,
                             NULL, &err, path), -1);
    assert_non_null(strstr(err.msg, ":1: field unixReviewTime: missing or not a whole number"));
    assert_int_equal(load_as("{\"reviewerID\":\"A\",\"unixReviewTime\":1}\n", PR_REC_AMAZON_JSON, &d, NULL, &err,
                             path), -1);
    assert_non_null(strstr(err.msg, ":1: field asin: missing"));
}

/* Issue 45: an empty file sorted NULL (UBSan); /dev/zero was read forever;
 * a line or a file over the limits is an error naming them */
static void test_empty_and_unbounded_input(void **state)
{
    (void)state;
    char path[64];
    pr_rec_data d;
    pr_err err = {{0}};
    for (int f = PR_REC_AMAZON2014; f <= PR_REC_YELP; f++) {
        assert_int_equal(load_as("", (pr_rec_format)f, &d, NULL, &err, path), 0);
        assert_int_equal(d.n_users, 0);
        assert_int_equal(d.n_interactions, 0);
        assert_int_equal(pr_rec_check_trainable(&d, "empty", &err), -1);
        assert_non_null(strstr(err.msg, "empty: 0 users, 0 items and 0 interactions remain"));
        pr_rec_data_free(&d);
    }
    pr_rec_load_opts o = {.filter = {.min_item = 1, .min_user = 1}, .max_line = 4096};
    assert_int_equal(pr_rec_load("/dev/zero", PR_REC_AMAZON2014, o, &d, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "/dev/zero:1: a line longer than 4096 bytes"));
    assert_int_equal(pr_rec_load("/dev/zero", PR_REC_DETECT, o, &d, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "/dev/zero: cannot tell the format"));
    write_temp(path, r2014);
    o.max_bytes = 40;
    assert_int_equal(pr_rec_load(path, PR_REC_AMAZON2014, o, &d, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "more than 40 bytes"));
    unlink(path);
    /* users with fewer than 3 items cannot be split into train, validation and test */
    assert_int_equal(load_as(r2014, PR_REC_AMAZON2014, &d, NULL, &err, path), 0);
    assert_int_equal(pr_rec_check_trainable(&d, "tiny", &err), -1);
    assert_non_null(strstr(err.msg, "tiny: 2 users, 2 items and 3 interactions remain, 2 users with fewer than 3"));
    pr_rec_data_free(&d);
}

/* user 0: 5 6 7 8 | 9 (valid) | 10 (test); user 1: 1 | 2 | 3 */
static pr_rec_data small_data(void)
{
    static int64_t start[] = {0, 6, 9};
    static int32_t items[] = {5, 6, 7, 8, 9, 10, 1, 2, 3};
    return (pr_rec_data){.n_users = 2, .n_items = 10, .n_interactions = 9, .start = start, .items = items};
}

static void assert_i64(const char *name, const int64_t *got, const int64_t *want, int n)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("%s[%d]: got %lld, expected %lld", name, i, (long long)got[i], (long long)want[i]);
}

static void test_split_and_batches(void **state)
{
    (void)state;
    pr_rec_data d = small_data();
    int64_t users[2] = {0, 1}, in[10], tg[10], hist[6], held[2];
    pr_rec_train_batch(&d, users, 2, 3, in, tg);
    assert_i64("inputs T=3", in, (int64_t[]){5, 6, 7, 0, 0, 0}, 6);
    assert_i64("targets T=3", tg, (int64_t[]){6, 7, 8, 0, 0, 0}, 6);
    pr_rec_train_batch(&d, users, 2, 5, in, tg);
    assert_i64("inputs T=5", in, (int64_t[]){0, 0, 5, 6, 7, 0, 0, 0, 0, 0}, 10);
    assert_i64("targets T=5", tg, (int64_t[]){0, 0, 6, 7, 8, 0, 0, 0, 0, 0}, 10);
    pr_rec_train_batch(&d, users, 1, 2, in, tg);   /* the most recent pairs */
    assert_i64("inputs T=2", in, (int64_t[]){6, 7}, 2);
    assert_i64("targets T=2", tg, (int64_t[]){7, 8}, 2);

    pr_rec_eval_batch(&d, PR_REC_VALID, users, 2, 3, hist, held);
    assert_i64("valid history", hist, (int64_t[]){6, 7, 8, 0, 0, 1}, 6);
    assert_i64("valid target", held, (int64_t[]){9, 2}, 2);
    pr_rec_eval_batch(&d, PR_REC_TEST, users, 2, 3, hist, held);
    assert_i64("test history", hist, (int64_t[]){7, 8, 9, 0, 1, 2}, 6);
    assert_i64("test target", held, (int64_t[]){10, 3}, 2);

    int64_t bad = 2;
    PR_EXPECT_FATAL(pr_rec_eval_batch(&d, PR_REC_TEST, &bad, 1, 3, hist, held), "user 2 out of range (2 users)");
    static int64_t short_start[] = {0, 2};
    pr_rec_data two = {.n_users = 1, .n_items = 2, .n_interactions = 2, .start = short_start, .items = d.items};
    int64_t zero = 0;
    PR_EXPECT_FATAL(pr_rec_train_batch(&two, &zero, 1, 3, in, tg), "user 0 has 2 items; the split needs 3");

    pr_rec_stats s = pr_rec_data_stats(&d);
    assert_int_equal(s.n_users, 2);
    assert_int_equal(s.n_interactions, 9);
    assert_int_equal(s.min_len, 3);
    assert_int_equal(s.max_len, 6);
    assert_int_equal(s.n_items_seen, 9);   /* item 4 never occurs */
    assert_true(fabs(s.avg_len - 4.5) < 1e-12);
}

static void test_order(void **state)
{
    (void)state;
    enum { N = 100 };
    int64_t a[N], b[N], c[N], e[N];
    pr_rec_order(a, N, 7, 0);
    pr_rec_order(b, N, 7, 0);
    pr_rec_order(c, N, 7, 1);
    pr_rec_order(e, N, 8, 0);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    assert_memory_not_equal(a, e, sizeof a);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) seen[a[i]]++;
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
}

static pr_rec_synth_opts small_synth(uint64_t seed)
{
    pr_rec_synth_opts o = pr_rec_synth_default(seed);
    o.n_users = 300, o.n_items = 400, o.cluster_size = 20;
    o.min_len = 10, o.mean_len = 20, o.max_len = 60;
    return o;
}

static void test_synth_shape_and_determinism(void **state)
{
    (void)state;
    pr_rec_synth_opts o = small_synth(3);
    pr_rec_data a = pr_rec_synth(o), b = pr_rec_synth(o);
    assert_int_equal(a.n_users, 300);
    assert_int_equal(a.n_items, 400);
    assert_int_equal(a.n_interactions, b.n_interactions);
    assert_memory_equal(a.start, b.start, sizeof *a.start * 301);
    assert_memory_equal(a.items, b.items, sizeof *a.items * (size_t)a.n_interactions);
    for (int64_t i = 0; i < a.n_interactions; i++) assert_true(a.items[i] >= 1 && a.items[i] <= 400);
    pr_rec_stats s = pr_rec_data_stats(&a);
    assert_true(s.min_len >= 10 && s.max_len <= 60);
    assert_true(s.avg_len > 16 && s.avg_len < 24);
    /* fewer users: the same first users */
    o.n_users = 50;
    pr_rec_data p = pr_rec_synth(o);
    assert_memory_equal(p.start, a.start, sizeof *p.start * 51);
    assert_memory_equal(p.items, a.items, sizeof *p.items * (size_t)p.n_interactions);
    /* another seed: other sequences */
    pr_rec_data c = pr_rec_synth(small_synth(4));
    assert_true(c.n_interactions != a.n_interactions ||
                memcmp(c.items, a.items, sizeof *a.items * (size_t)a.n_interactions) != 0);
    pr_rec_data_free(&a);
    pr_rec_data_free(&b);
    pr_rec_data_free(&p);
    pr_rec_data_free(&c);

    /* the default is sized like Amazon Electronics: 1,869 / 33,135 / ~123k / ~66 */
    pr_rec_data full = pr_rec_synth(pr_rec_synth_default(1));
    s = pr_rec_data_stats(&full);
    assert_int_equal(s.n_users, 1869);
    assert_int_equal(s.n_items, 33135);
    assert_true(s.min_len >= 40);
    if (s.avg_len < 62 || s.avg_len > 70) fail_msg("average length %.1f, expected about 66", s.avg_len);
    pr_rec_data_free(&full);
}

/* The generator must hold sequential signal: on the test split, counts of
 * item-to-next-item transitions in the training parts (a first-order Markov
 * model, popularity breaking ties) beat popularity alone by a wide margin. */
static void test_synth_learnable(void **state)
{
    (void)state;
    pr_rec_data d = pr_rec_synth(small_synth(5));
    int n = d.n_items;
    float *trans = calloc((size_t)(n + 1) * (size_t)(n + 1), sizeof *trans);
    float *pop = calloc((size_t)n + 1, sizeof *pop), *row = calloc((size_t)n + 1, sizeof *row);
    for (int u = 0; u < d.n_users; u++) {
        const int32_t *seq = d.items + d.start[u];
        int64_t len = pr_rec_len(&d, u) - 2;
        for (int64_t t = 0; t < len; t++) {
            pop[seq[t]] += 1;
            if (t + 1 < len) trans[(int64_t)seq[t] * (n + 1) + seq[t + 1]] += 1;
        }
    }
    pr_rec_metrics by_pop = {0}, by_markov = {0};
    for (int64_t u = 0; u < d.n_users; u++) {
        int64_t hist, target;
        pr_rec_eval_batch(&d, PR_REC_TEST, &u, 1, 1, &hist, &target);
        for (int i = 0; i <= n; i++) row[i] = trans[hist * (n + 1) + i] + pop[i] * 1e-4f;
        pr_rec_metrics_add(&by_pop, pop, n, (int)target);
        pr_rec_metrics_add(&by_markov, row, n, (int)target);
    }
    pr_rec_metrics mp = pr_rec_metrics_mean(&by_pop), mm = pr_rec_metrics_mean(&by_markov);
    if (!(mm.hit[0] > 2 * mp.hit[0] && mm.ndcg[0] > 2 * mp.ndcg[0] && mm.auc > mp.auc))
        fail_msg("hit@10 %.3f vs popularity %.3f, ndcg@10 %.3f vs %.3f, auc %.3f vs %.3f", mm.hit[0], mp.hit[0],
                 mm.ndcg[0], mp.ndcg[0], mm.auc, mp.auc);
    free(trans);
    free(pop);
    free(row);
    pr_rec_data_free(&d);
}

static void assert_near(double got, double want)
{
    if (fabs(got - want) > 1e-12) fail_msg("got %.15g, expected %.15g", got, want);
}

static void test_metrics_by_hand(void **state)
{
    (void)state;
    /* index 0 is padding: its score must not count */
    const float s[6] = {99, 0.1f, 0.5f, 0.9f, 0.5f, 0.2f};
    double auc;
    assert_int_equal(pr_rec_rank(s, 5, 3, &auc), 1);
    assert_near(auc, 1.0);
    assert_int_equal(pr_rec_rank(s, 5, 2, &auc), 3);   /* above: 3; tied: 4 (counts against); below: 1, 5 */
    assert_near(auc, 2.5 / 4);
    assert_int_equal(pr_rec_rank(s, 5, 1, &auc), 5);
    assert_near(auc, 0);
    pr_rec_metrics m = {0};
    pr_rec_metrics_add_batch(&m, s, 1, 5, (int64_t[]){3});
    pr_rec_metrics_add(&m, s, 5, 2);
    pr_rec_metrics_add(&m, s, 5, 1);
    pr_rec_metrics mean = pr_rec_metrics_mean(&m);
    assert_int_equal(mean.n_users, 3);
    for (int k = 0; k < PR_REC_N_KS; k++) {
        assert_near(mean.hit[k], 1);
        assert_near(mean.ndcg[k], (1 + 0.5 + 1 / log2(6.0)) / 3);
    }
    assert_near(mean.auc, (1 + 0.625 + 0) / 3);

    /* all alike: last, AUC one half; a NaN target: last, AUC 0 */
    const float flat[4] = {0, 1, 1, 1};
    assert_int_equal(pr_rec_rank(flat, 3, 2, &auc), 3);
    assert_near(auc, 0.5);
    const float nan_row[4] = {0, 1, NAN, 2};
    assert_int_equal(pr_rec_rank(nan_row, 3, 2, &auc), 3);
    assert_near(auc, 0);
    assert_int_equal(pr_rec_rank(nan_row, 3, 3, &auc), 2);   /* a NaN elsewhere counts as higher */
    assert_near(auc, 0.5);
    PR_EXPECT_FATAL(pr_rec_rank(s, 5, 0, &auc), "target item 0 outside 1..5");
    PR_EXPECT_FATAL(pr_rec_metrics_add_batch(&m, s, 1, 5, (int64_t[]){6}), "target item 6 outside 1..5");
}

/* scores = item id over 600 items: item t has rank 601 - t; the edges of each K */
static void test_metrics_cutoffs(void **state)
{
    (void)state;
    enum { N = 600 };
    float s[N + 1];
    for (int i = 0; i <= N; i++) s[i] = (float)i;
    const struct { int target, rank, hit[3]; } cases[] = {
        {591, 10, {1, 1, 1}}, {590, 11, {0, 1, 1}}, {401, 200, {0, 1, 1}},
        {400, 201, {0, 0, 1}}, {101, 500, {0, 0, 1}}, {100, 501, {0, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pr_rec_metrics m = {0};
        pr_rec_metrics_add(&m, s, N, cases[c].target);
        double auc;
        assert_int_equal(pr_rec_rank(s, N, cases[c].target, &auc), cases[c].rank);
        assert_near(m.auc, (cases[c].target - 1) / (double)(N - 1));
        for (int k = 0; k < PR_REC_N_KS; k++) {
            assert_near(m.hit[k], cases[c].hit[k]);
            assert_near(m.ndcg[k], cases[c].hit[k] / log2(cases[c].rank + 1.0));
        }
    }
    pr_rec_metrics m = {0};
    pr_rec_metrics_add(&m, s, N, 591);
    pr_rec_metrics_add(&m, s, N, 100);
    char buf[400];
    const char *json = pr_rec_metrics_json(&m, buf, sizeof buf);
    assert_non_null(strstr(json, "{\"hit@10\":0.500000,\"ndcg@10\":0.144532,\"hit@200\":0.500000,"));
    assert_non_null(strstr(json, "\"auc\":0.575125,\"users\":2}"));   /* (590/599 + 99/599) / 2 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_amazon_filter_once),
        cmocka_unit_test(test_amazon_filter_iterated),
        cmocka_unit_test(test_amazon_malformed),
        cmocka_unit_test(test_yelp),
        cmocka_unit_test(test_yelp_malformed),
        cmocka_unit_test(test_formats_named_and_detected),
        cmocka_unit_test(test_undecidable_csv_refused),
        cmocka_unit_test(test_empty_and_unbounded_input),
        cmocka_unit_test(test_split_and_batches),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_synth_shape_and_determinism),
        cmocka_unit_test(test_synth_learnable),
        cmocka_unit_test(test_metrics_by_hand),
        cmocka_unit_test(test_metrics_cutoffs),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
