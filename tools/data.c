/* tools/data.c: `prism data rec`: builds the recommendation dataset the
 * trainer would use (synthetic, an Amazon or Yelp file: tasks/rec.h) and
 * prints its statistics as a table, then as one JSON line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tasks/rec.h"
#include "tools/tools.h"

static void rec_usage(FILE *f)
{
    pr_rec_synth_opts s = pr_rec_synth_default(1);
    fprintf(f, "usage: prism data rec [--synthetic | --file FORMAT:FILE | --amazon FILE | --yelp FILE] [options]\n\n"
               "Builds the sequential-recommendation dataset and prints users, items,\n"
               "interactions and sequence lengths; the last line is one JSON object.\n\n"
               "  --synthetic       seeded multi-interest users (the default), sized like\n"
               "                    Amazon Electronics: %d users, %d items\n"
               "  --seed S          the generator's seed (default 1)\n"
               "  --users N         the generator's number of users\n"
               "  --items N         the generator's number of items\n"
               "  --file FORMAT:FILE  a file of a named format (train's rec.data names them):\n"
               "                    amazon2014  ratings CSV user,item,rating,timestamp\n"
               "                    amazon2018  ratings CSV item,user,rating,timestamp\n"
               "                    amazon-json 5-core review JSON lines: reviewerID, asin,\n"
               "                                unixReviewTime\n"
               "                    yelp        review.json lines: user_id, business_id,\n"
               "                                date \"YYYY-MM-DD HH:MM:SS\"\n"
               "                    amazon      one of the Amazon three, detected from the\n"
               "                                first lines (a header naming the columns, or\n"
               "                                reviewer ids and ASINs); refused when unsure\n"
               "  --amazon FILE     the same as --file amazon:FILE\n"
               "  --yelp FILE       the same as --file yelp:FILE\n"
               "  --min-item N      the filter's item bound (default 5)\n"
               "  --min-user N      the filter's user bound (default 40)\n"
               "  --iterate         repeat the filter until both bounds hold (the paper's\n"
               "                    rule is one pass: items, then users)\n"
               "  --skip-bad        skip malformed lines, count them and name the first\n"
               "                    (default: the first one is an error naming FILE:LINE)\n",
            s.n_users, s.n_items);
}

typedef struct {
    bool synthetic, iterate, skip_bad;
    const char *amazon, *yelp, *file;
    uint64_t seed;
    int users, items, min_item, min_user;
    bool seed_set;
} rec_options;

static int parse_options(pr_args *a, rec_options *o)
{
    while (pr_args_next(a)) {
        if (pr_args_help(a)) return rec_usage(stdout), -1;
        if (pr_args_flag(a, "--synthetic", &o->synthetic) || pr_args_flag(a, "--iterate", &o->iterate) ||
            pr_args_flag(a, "--skip-bad", &o->skip_bad))
            continue;
        if (pr_args_string(a, "--amazon", &o->amazon) || pr_args_string(a, "--yelp", &o->yelp) ||
            pr_args_string(a, "--file", &o->file))
            continue;
        if (pr_args_u64(a, "--seed", &o->seed)) {
            o->seed_set = true;
            continue;
        }
        if (pr_args_int(a, "--users", 1, 10000000, &o->users) || pr_args_int(a, "--items", 2, 100000000, &o->items) ||
            pr_args_int(a, "--min-item", 1, 1000000, &o->min_item) ||
            pr_args_int(a, "--min-user", 1, 1000000, &o->min_user))
            continue;
        return pr_args_unknown(a);
    }
    if (a->failed) return PR_EXIT_USAGE;
    if (o->synthetic + !!o->amazon + !!o->yelp + !!o->file > 1)
        return pr_args_error(a, "--synthetic, --file, --amazon and --yelp exclude each other");
    pr_rec_format fmt;
    const char *path;
    if (o->file && pr_rec_format_of(o->file, &fmt, &path) != 0)
        return pr_args_error(a, "--file '%s' is not FORMAT:FILE with FORMAT amazon, amazon2014, amazon2018, "
                                "amazon-json or yelp", o->file);
    bool from_file = o->amazon || o->yelp || o->file;
    if (from_file && (o->seed_set || o->users || o->items))
        return pr_args_error(a, "--seed, --users and --items apply to --synthetic only");
    if (!from_file && (o->min_item || o->min_user || o->iterate || o->skip_bad))
        return pr_args_error(a, "--min-item, --min-user, --iterate and --skip-bad apply to files only");
    return 0;
}

/* a synthetic set of other sizes keeps the default shape per user and item */
static pr_rec_data make_synthetic(const rec_options *o)
{
    pr_rec_synth_opts s = pr_rec_synth_default(o->seed);
    if (o->users) s.n_users = o->users;
    if (o->items) s.n_items = o->items;
    if (s.cluster_size > s.n_items) s.cluster_size = s.n_items;
    return pr_rec_synth(s);
}

static void print_stats(const char *source, const pr_rec_data *d, cJSON *json)
{
    pr_rec_stats s = pr_rec_data_stats(d);
    printf("%-14s %s\n%-14s %d\n%-14s %d (%d occur)\n%-14s %lld\n%-14s %.2f (min %d, max %d)\n", "dataset", source,
           "users", s.n_users, "items", s.n_items, s.n_items_seen, "interactions", (long long)s.n_interactions,
           "avg len", s.avg_len, s.min_len, s.max_len);
    cJSON_AddNumberToObject(json, "users", s.n_users);
    cJSON_AddNumberToObject(json, "items", s.n_items);
    cJSON_AddNumberToObject(json, "interactions", (double)s.n_interactions);
    cJSON_AddNumberToObject(json, "avg_len", round(s.avg_len * 100) / 100);
    cJSON_AddNumberToObject(json, "min_len", s.min_len);
    cJSON_AddNumberToObject(json, "max_len", s.max_len);
}

static void print_report(const pr_rec_load_report *r, const pr_rec_filter_opts *f, cJSON *json)
{
    printf("%-14s %lld users, %lld items, %lld interactions, %lld lines\n", "read", (long long)r->n_raw_users,
           (long long)r->n_raw_items, (long long)r->n_raw_interactions, (long long)r->n_lines);
    printf("%-14s items >= %d, users >= %d, %s\n", "filter", f->min_item, f->min_user,
           f->iterate ? "repeated until both hold" : "one pass");
    if (r->n_bad) printf("%-14s %lld malformed lines skipped; the first: %s\n", "skipped", (long long)r->n_bad,
                         r->first_bad);
    cJSON_AddNumberToObject(json, "raw_users", (double)r->n_raw_users);
    cJSON_AddNumberToObject(json, "raw_items", (double)r->n_raw_items);
    cJSON_AddNumberToObject(json, "raw_interactions", (double)r->n_raw_interactions);
    cJSON_AddNumberToObject(json, "bad_lines", (double)r->n_bad);
}

static int data_rec(int argc, char **argv)
{
    rec_options o = {.seed = 1};
    pr_args a = pr_args_begin("prism data rec", argc, argv);
    int rc = parse_options(&a, &o);
    if (rc) return rc < 0 ? 0 : rc;
    cJSON *json = cJSON_CreateObject();
    pr_rec_data d;
    pr_rec_format fmt = o.yelp ? PR_REC_YELP : PR_REC_DETECT;
    const char *file = o.amazon ? o.amazon : o.yelp;
    if (o.file) pr_rec_format_of(o.file, &fmt, &file);   /* checked by parse_options */
    if (!file) {
        d = make_synthetic(&o);
        cJSON_AddStringToObject(json, "dataset", "synthetic");
        char source[64];
        snprintf(source, sizeof source, "%llu", (unsigned long long)o.seed);
        cJSON_AddRawToObject(json, "seed", source);   /* every digit of a 64-bit seed */
        snprintf(source, sizeof source, "synthetic (seed %llu)", (unsigned long long)o.seed);
        print_stats(source, &d, json);
    } else {
        pr_rec_load_opts lo = {.filter = PR_REC_FILTER_PAPER, .skip_bad = o.skip_bad};
        if (o.min_item) lo.filter.min_item = o.min_item;
        if (o.min_user) lo.filter.min_user = o.min_user;
        lo.filter.iterate = o.iterate;
        pr_rec_load_report rep;
        pr_err err;
        if (pr_rec_load(file, fmt, lo, &d, &rep, &err)) {
            fprintf(stderr, "prism data rec: %s\n", err.msg);
            cJSON_Delete(json);
            return 1;
        }
        const char *name = pr_rec_format_names[rep.format];
        printf("%-14s %s%s\n", "format", name, fmt == PR_REC_DETECT ? " (detected)" : "");
        cJSON_AddStringToObject(json, "dataset", strncmp(name, "amazon", 6) == 0 ? "amazon" : "yelp");
        cJSON_AddStringToObject(json, "format", name);
        cJSON_AddStringToObject(json, "file", file);
        print_report(&rep, &lo.filter, json);
        print_stats(file, &d, json);
    }
    char *line = cJSON_PrintUnformatted(json);
    printf("%s\n", line);
    free(line);
    cJSON_Delete(json);
    pr_rec_data_free(&d);
    return 0;
}

int pr_cmd_data(int argc, char **argv)
{
    if (argc < 2 || pr_is_help(argv[1])) {
        fprintf(argc < 2 ? stderr : stdout, "usage: prism data rec [options]   (prism data rec --help)\n");
        return argc < 2 ? PR_EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "rec") == 0) return data_rec(argc - 1, argv + 1);
    fprintf(stderr, "prism data: unknown dataset '%s' (rec)\n", argv[1]);
    return PR_EXIT_USAGE;
}
