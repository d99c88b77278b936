/* tasks/rec_load.c: the recommendation data loaders: Amazon ratings CSVs
 * (2014: user,item,rating,timestamp; 2018: item,user,rating,timestamp), the
 * Amazon 5-core review JSON lines and Yelp review.json. Each reads a line at
 * a time (lines and the file bounded, so a device or a damaged file cannot
 * make it read forever) into (user, item, time) records with string ids
 * numbered by first appearance, sorts each user's records by time (file order
 * breaks ties), builds the dataset and applies the filter. The format is
 * named, or detected from the content and refused when it cannot be told. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tasks/rec.h"

/* ---- string ids to dense numbers: open addressing, FNV-1a ------------------------ */

typedef struct {
    char **keys;
    int32_t *ids;
    size_t cap, n;
} id_map;

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static void map_grow(id_map *m)
{
    id_map g = {.cap = m->cap ? 2 * m->cap : 1024, .n = m->n};
    g.keys = calloc(g.cap, sizeof *g.keys);
    g.ids = calloc(g.cap, sizeof *g.ids);
    PR_CHECK(g.keys && g.ids, "rec load: out of host memory for %zu ids", g.cap);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = fnv1a(m->keys[i]) & (g.cap - 1);
        while (g.keys[j]) j = (j + 1) & (g.cap - 1);
        g.keys[j] = m->keys[i];
        g.ids[j] = m->ids[i];
    }
    free(m->keys);
    free(m->ids);
    *m = g;
}

/* the id of s, a new one (0, 1, 2, ...) the first time it is seen */
static int32_t map_id(id_map *m, const char *s)
{
    if (2 * (m->n + 1) > m->cap) map_grow(m);
    size_t j = fnv1a(s) & (m->cap - 1);
    while (m->keys[j] && strcmp(m->keys[j], s) != 0) j = (j + 1) & (m->cap - 1);
    if (!m->keys[j]) {
        PR_CHECK(m->n < INT32_MAX, "rec load: more than %d distinct ids", INT32_MAX);
        m->keys[j] = strdup(s);
        PR_CHECK(m->keys[j], "rec load: out of host memory");
        m->ids[j] = (int32_t)m->n++;
    }
    return m->ids[j];
}

static void map_free(id_map *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->ids);
}

/* ---- records ------------------------------------------------------------------ */

typedef struct { int32_t user, item; int64_t time, seq; } record;
typedef struct { record *r; int64_t n, cap; } record_list;

static void records_push(record_list *l, record r)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4096;
        l->r = realloc(l->r, sizeof *l->r * (size_t)l->cap);
        PR_CHECK(l->r, "rec load: out of host memory for %lld records", (long long)l->cap);
    }
    l->r[l->n++] = r;
}

static int by_user_time_seq(const void *pa, const void *pb)
{
    const record *a = pa, *b = pb;
    if (a->user != b->user) return a->user < b->user ? -1 : 1;
    if (a->time != b->time) return a->time < b->time ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);   /* file order: the sort is stable */
}

static pr_rec_data build(record_list *l, int n_users, int n_items)
{
    if (l->n) qsort(l->r, (size_t)l->n, sizeof *l->r, by_user_time_seq);   /* an empty file has no array */
    pr_rec_data d = {.n_users = n_users, .n_items = n_items, .n_interactions = l->n};
    d.start = calloc((size_t)n_users + 1, sizeof *d.start);
    d.items = calloc((size_t)(l->n ? l->n : 1), sizeof *d.items);
    PR_CHECK(d.start && d.items, "rec load: out of host memory for %lld interactions", (long long)l->n);
    for (int64_t i = 0; i < l->n; i++) {
        d.start[l->r[i].user + 1]++;
        d.items[i] = l->r[i].item + 1;   /* item ids start at 1: 0 is padding */
    }
    for (int u = 0; u < n_users; u++) d.start[u + 1] += d.start[u];
    return d;
}

/* ---- parsing one line -------------------------------------------------------------
 * A parser fills user, item (strings that live until the next call) and time,
 * or writes what is wrong into why and returns -1. */
typedef struct {
    const char *user, *item;
    int64_t time;
    cJSON *json;            /* owns user and item for the JSON parser */
    int64_t line;
} parsed;
typedef int (*line_parser)(char *line, parsed *p, char *why, size_t n);

static bool parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) return false;
    *out = v;
    return true;
}

static bool one_of(const char *s, const char *const *names)
{
    for (; *names; names++)
        if (strcmp(s, *names) == 0) return true;
    return false;
}
static const char *const user_fields[] = {"user", "user_id", "reviewerID", NULL};
static const char *const item_fields[] = {"item", "item_id", "asin", "parent_asin", NULL};

/* A ratings CSV whose user id is field user_col (0 or 1) and whose item id is
 * the other of the first two; a first line naming the fields is a header,
 * refused when it names them the other way round. */
static int parse_ratings_csv(char *line, parsed *p, char *why, size_t n, int user_col)
{
    const char *layout = user_col == 0 ? "user,item,rating,timestamp" : "item,user,rating,timestamp";
    char *field[4];
    int count = 0;
    for (char *s = line;; s++) {
        if (count < 4) field[count] = s;
        count++;
        s = strchr(s, ',');
        if (!s) break;
        *s = 0;
    }
    if (count != 4) return snprintf(why, n, "expected 4 comma-separated fields (%s), found %d", layout, count), -1;
    if (p->line == 1 && strcmp(field[2], "rating") == 0) {
        if (one_of(field[user_col], item_fields) || one_of(field[1 - user_col], user_fields))
            return snprintf(why, n, "the header names %s,%s: that is the %s layout, not %s", field[0], field[1],
                            user_col == 0 ? "amazon2018 (item,user,...)" : "amazon2014 (user,item,...)", layout), -1;
        return 1;
    }
    const char *names[4] = {user_col == 0 ? "user" : "item", user_col == 0 ? "item" : "user", "rating", "timestamp"};
    for (int i = 0; i < 4; i++)
        if (!*field[i]) return snprintf(why, n, "field %s is empty", names[i]), -1;
    char *end;
    double rating = strtod(field[2], &end);
    if (*end || !isfinite(rating)) return snprintf(why, n, "field rating: not a number ('%.40s')", field[2]), -1;
    if (!parse_i64(field[3], &p->time))
        return snprintf(why, n, "field timestamp: not an integer ('%.40s')", field[3]), -1;
    p->user = field[user_col], p->item = field[1 - user_col];
    return 0;
}

static int parse_amazon2014(char *line, parsed *p, char *why, size_t n)
{
    return parse_ratings_csv(line, p, why, n, 0);
}

static int parse_amazon2018(char *line, parsed *p, char *why, size_t n)
{
    return parse_ratings_csv(line, p, why, n, 1);
}

/* "YYYY-MM-DD HH:MM:SS" (or just the date) as the number YYYYMMDDHHMMSS, which sorts as time does */
static bool parse_date(const char *s, int64_t *out)
{
    int y, mo, d, h = 0, mi = 0, sec = 0, used = 0;
    if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &used) != 3 || used != 10) return false;
    if (s[used]) {
        int more = 0;
        if (sscanf(s + used, " %2d:%2d:%2d%n", &h, &mi, &sec, &more) != 3 || more != 9 || s[used + more])
            return false;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || h < 0 || mi < 0 || sec < 0)
        return false;
    *out = ((((y * 100LL + mo) * 100 + d) * 100 + h) * 100 + mi) * 100 + sec;
    return true;
}

static const char *json_string(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

static int parse_yelp(char *line, parsed *p, char *why, size_t n)
{
    p->json = cJSON_ParseWithOpts(line, NULL, true);
    if (!cJSON_IsObject(p->json)) return snprintf(why, n, "not a JSON object"), -1;
    static const char *const names[3] = {"user_id", "business_id", "date"};
    const char *value[3];
    for (int i = 0; i < 3; i++)
        if (!(value[i] = json_string(p->json, names[i])))
            return snprintf(why, n, "field %s: missing, empty or not a string", names[i]), -1;
    if (!parse_date(value[2], &p->time))
        return snprintf(why, n, "field date: '%.40s' is not \"YYYY-MM-DD HH:MM:SS\"", value[2]), -1;
    p->user = value[0], p->item = value[1];
    return 0;
}

/* the 5-core review JSON lines: reviewerID, asin, unixReviewTime (seconds) */
static int parse_amazon_json(char *line, parsed *p, char *why, size_t n)
{
    p->json = cJSON_ParseWithOpts(line, NULL, true);
    if (!cJSON_IsObject(p->json)) return snprintf(why, n, "not a JSON object"), -1;
    if (!(p->user = json_string(p->json, "reviewerID")))
        return snprintf(why, n, "field reviewerID: missing, empty or not a string"), -1;
    if (!(p->item = json_string(p->json, "asin"))) return snprintf(why, n, "field asin: missing, empty or not a string"), -1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p->json, "unixReviewTime");
    double x = cJSON_IsNumber(t) ? t->valuedouble : NAN;
    if (!(fabs(x) <= 9007199254740992.0) || x != floor(x))   /* checked before the cast */
        return snprintf(why, n, "field unixReviewTime: missing or not a whole number"), -1;
    p->time = (int64_t)x;
    return 0;
}

/* ---- formats ---------------------------------------------------------------------- */

static bool is_blank(const char *s)
{
    while (isspace((unsigned char)*s)) s++;
    return !*s;
}

const char *const pr_rec_format_names[] = {"amazon", "amazon2014", "amazon2018", "amazon-json", "yelp", NULL};
static const line_parser parsers[] = {NULL, parse_amazon2014, parse_amazon2018, parse_amazon_json, parse_yelp};

int pr_rec_format_of(const char *spec, pr_rec_format *fmt, const char **file)
{
    for (int i = 0; pr_rec_format_names[i]; i++) {
        size_t len = strlen(pr_rec_format_names[i]);
        if (strncmp(spec, pr_rec_format_names[i], len) == 0 && spec[len] == ':' && spec[len + 1]) {
            *fmt = (pr_rec_format)i;
            *file = spec + len + 1;
            return 0;
        }
    }
    return -1;
}

/* One line of at most max_line bytes (the newline dropped) into *buf; 1 a
 * line, 0 the end of the file, -1 a line too long. *total counts the bytes. */
static int read_line(FILE *f, char **buf, size_t *cap, size_t *len, size_t max_line, int64_t *total)
{
    *len = 0;
    int c = EOF;
    while ((c = getc_unlocked(f)) != EOF && c != '\n') {
        if (*len == max_line) return -1;
        if (*len + 1 >= *cap) {
            *cap = *cap ? 2 * *cap : 256;
            *buf = realloc(*buf, *cap);
            PR_CHECK(*buf, "rec load: out of host memory for a %zu-byte line", *cap);
        }
        (*buf)[(*len)++] = (char)c;
    }
    *total += (int64_t)*len + (c == '\n');
    if (c == EOF && *len == 0) return 0;
    if (!*buf) {
        *buf = malloc(*cap = 256);
        PR_CHECK(*buf, "rec load: out of host memory");
    }
    (*buf)[*len] = 0;
    return 1;
}

/* an Amazon ASIN: ten of [0-9A-Z]; a reviewer id: 'A' and 11 or more of them */
static bool id_chars(const char *s, size_t from)
{
    for (s += from; *s; s++)
        if (!isdigit((unsigned char)*s) && !isupper((unsigned char)*s)) return false;
    return true;
}
static bool asin_like(const char *s) { return strlen(s) == 10 && id_chars(s, 0); }
static bool reviewer_like(const char *s) { return s[0] == 'A' && strlen(s) >= 12 && id_chars(s, 1); }

enum { DETECT_LINES = 20 };

/* which column of a ratings CSV line holds the user: 0, 1, or -1 unknown;
 * *header: the line is a header naming the columns */
static int csv_user_column(char *line, bool first, bool *header)
{
    char *f[4];
    int count = 0;
    for (char *s = line; s && count < 4; count++) {
        f[count] = s;
        if ((s = strchr(s, ','))) *s++ = 0;
    }
    if (count < 2) return -1;
    if (first && count == 4 && strcmp(f[2], "rating") == 0) {   /* a header naming the columns */
        *header = true;
        if (one_of(f[0], user_fields) && one_of(f[1], item_fields)) return 0;
        if (one_of(f[0], item_fields) && one_of(f[1], user_fields)) return 1;
        return -1;
    }
    if (reviewer_like(f[0]) && asin_like(f[1])) return 0;
    if (asin_like(f[0]) && reviewer_like(f[1])) return 1;
    return -1;
}

/* The format of an Amazon or Yelp file from its first lines: JSON lines by
 * their keys; a CSV by a header naming its columns, or when every sampled
 * line has a reviewer id in one column and an ASIN in the other. */
static int detect(const char *path, pr_rec_load_opts o, pr_rec_format *fmt, pr_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0, len;
    int64_t total = 0, lineno = 0, seen = 0;
    int vote = -2, r;   /* -2: no line yet; -1: undecided */
    pr_rec_format found = PR_REC_DETECT;
    while (seen < DETECT_LINES && (r = read_line(f, &line, &cap, &len, o.max_line, &total)) > 0) {
        lineno++;
        if (is_blank(line)) continue;
        seen++;
        const char *s = line + strspn(line, " \t");
        if (*s == '{') {
            cJSON *j = cJSON_Parse(s);
            if (json_string(j, "reviewerID") && json_string(j, "asin")) found = PR_REC_AMAZON_JSON;
            else if (json_string(j, "user_id") && json_string(j, "business_id")) found = PR_REC_YELP;
            cJSON_Delete(j);
            break;
        }
        bool header = false;
        int col = csv_user_column(line, lineno == 1, &header);
        if (header) { vote = col; break; }   /* a header decides, or leaves it unknown */
        vote = vote == -2 || vote == col ? col : -1;
        if (vote < 0) break;
    }
    fclose(f);
    free(line);
    if (found == PR_REC_DETECT && vote >= 0) found = vote == 0 ? PR_REC_AMAZON2014 : PR_REC_AMAZON2018;
    if (found == PR_REC_DETECT)
        return pr_errf(err, "%s: cannot tell the format from the first lines (which column holds the users?); "
                            "name it: amazon2014:FILE (CSV user,item,rating,timestamp), amazon2018:FILE (CSV "
                            "item,user,rating,timestamp), amazon-json:FILE (5-core reviews: reviewerID, asin, "
                            "unixReviewTime) or yelp:FILE (review.json)", path);
    *fmt = found;
    return 0;
}

/* ---- the loader ------------------------------------------------------------------- */

static int load(const char *path, line_parser parse, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep,
                pr_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
    id_map users = {0}, items = {0};
    record_list list = {0};
    char *line = NULL, why[400];
    size_t cap = 0, len;
    int64_t total = 0;
    int rc = 0, got;
    while ((got = read_line(f, &line, &cap, &len, o.max_line, &total)) != 0) {
        rep->n_lines++;
        if (got < 0) {   /* a device such as /dev/zero, or not a text file */
            rc = pr_errf(err, "%s:%lld: a line longer than %zu bytes: not a ratings or review file?", path,
                         (long long)rep->n_lines, o.max_line);
            break;
        }
        if (total > o.max_bytes) {
            rc = pr_errf(err, "%s: more than %lld bytes (the limit; pr_rec_load_opts.max_bytes)", path,
                         (long long)o.max_bytes);
            break;
        }
        while (len > 0 && line[len - 1] == '\r') line[--len] = 0;
        if (is_blank(line)) continue;
        parsed p = {.line = rep->n_lines};
        int r = strlen(line) != len ? (snprintf(why, sizeof why, "a NUL byte in the line"), -1)
                                    : parse(line, &p, why, sizeof why);
        if (r == 0) {
            int32_t u = map_id(&users, p.user), it = map_id(&items, p.item);
            records_push(&list, (record){.user = u, .item = it, .time = p.time, .seq = list.n});
        }
        cJSON_Delete(p.json);
        if (r >= 0) continue;
        if (!o.skip_bad) {
            rc = pr_errf(err, "%s:%lld: %s", path, (long long)rep->n_lines, why);
            break;
        }
        if (!rep->n_bad++) snprintf(rep->first_bad, sizeof rep->first_bad, "%s:%lld: %s", path,
                                    (long long)rep->n_lines, why);
    }
    if (!rc && ferror(f)) rc = pr_errf(err, "%s:%lld: read error: %s", path, (long long)rep->n_lines, strerror(errno));
    free(line);
    fclose(f);
    if (!rc) {
        rep->n_raw_users = (int64_t)users.n, rep->n_raw_items = (int64_t)items.n, rep->n_raw_interactions = list.n;
        *out = build(&list, (int)users.n, (int)items.n);
        pr_rec_filter(out, o.filter);
    }
    map_free(&users);
    map_free(&items);
    free(list.r);
    return rc;
}

int pr_rec_load(const char *path, pr_rec_format fmt, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep,
                pr_err *err)
{
    pr_rec_load_report local;
    if (!rep) rep = &local;
    *rep = (pr_rec_load_report){0};
    *out = (pr_rec_data){0};
    if (!o.max_line) o.max_line = PR_REC_MAX_LINE;
    if (!o.max_bytes) o.max_bytes = PR_REC_MAX_BYTES;
    if ((int)fmt < 0 || fmt > PR_REC_YELP) return pr_errf(err, "%s: unknown rec data format %d", path, (int)fmt);
    if (fmt == PR_REC_DETECT && detect(path, o, &fmt, err)) return -1;
    rep->format = fmt;
    return load(path, parsers[fmt], o, out, rep, err);
}

int pr_rec_load_amazon(const char *path, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep, pr_err *err)
{
    return pr_rec_load(path, PR_REC_AMAZON2014, o, out, rep, err);
}

int pr_rec_load_yelp(const char *path, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep, pr_err *err)
{
    return pr_rec_load(path, PR_REC_YELP, o, out, rep, err);
}

int pr_rec_check_trainable(const pr_rec_data *d, const char *what, pr_err *err)
{
    int short_users = 0;
    for (int u = 0; u < d->n_users; u++) short_users += pr_rec_len(d, u) < 3;
    if (d->n_users >= 1 && d->n_items >= 2 && short_users == 0) return 0;
    return pr_errf(err, "%s: %d users, %d items and %lld interactions remain, %d users with fewer than 3; "
                        "training needs at least 1 user, 2 items and 3 interactions a user (train, validate, test)",
                   what, d->n_users, d->n_items, (long long)d->n_interactions, short_users);
}
