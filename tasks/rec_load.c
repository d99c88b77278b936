/* tasks/rec_load.c: the Amazon 2014 ratings CSV and Yelp review.json
 * loaders. Both read a line at a time into (user, item, time) records with
 * string ids numbered by first appearance, sort each user's records by time
 * (file order breaks ties), build the dataset and apply the filter. */
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
    qsort(l->r, (size_t)l->n, sizeof *l->r, by_user_time_seq);
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

/* `user,item,rating,timestamp`; a first line naming the fields is a header */
static int parse_amazon(char *line, parsed *p, char *why, size_t n)
{
    char *field[4];
    int count = 0;
    for (char *s = line;; s++) {
        if (count < 4) field[count] = s;
        count++;
        s = strchr(s, ',');
        if (!s) break;
        *s = 0;
    }
    if (count != 4)
        return snprintf(why, n, "expected 4 comma-separated fields (user,item,rating,timestamp), found %d", count),
               -1;
    if (p->line == 1 && strcmp(field[2], "rating") == 0) return 1;
    static const char *const names[4] = {"user", "item", "rating", "timestamp"};
    for (int i = 0; i < 4; i++)
        if (!*field[i]) return snprintf(why, n, "field %s is empty", names[i]), -1;
    char *end;
    double rating = strtod(field[2], &end);
    if (*end || !isfinite(rating)) return snprintf(why, n, "field rating: not a number ('%.40s')", field[2]), -1;
    if (!parse_i64(field[3], &p->time))
        return snprintf(why, n, "field timestamp: not an integer ('%.40s')", field[3]), -1;
    p->user = field[0], p->item = field[1];
    return 0;
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

/* ---- the loader ------------------------------------------------------------------- */

static bool is_blank(const char *s)
{
    while (isspace((unsigned char)*s)) s++;
    return !*s;
}

static int load(const char *path, line_parser parse, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep,
                pr_err *err)
{
    pr_rec_load_report local;
    if (!rep) rep = &local;
    *rep = (pr_rec_load_report){0};
    *out = (pr_rec_data){0};
    FILE *f = fopen(path, "r");
    if (!f) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
    id_map users = {0}, items = {0};
    record_list list = {0};
    char *line = NULL, why[400];
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        rep->n_lines++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (is_blank(line)) continue;
        parsed p = {.line = rep->n_lines};
        int r = strlen(line) != (size_t)len ? (snprintf(why, sizeof why, "a NUL byte in the line"), -1)
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

int pr_rec_load_amazon(const char *path, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep, pr_err *err)
{
    return load(path, parse_amazon, o, out, rep, err);
}

int pr_rec_load_yelp(const char *path, pr_rec_load_opts o, pr_rec_data *out, pr_rec_load_report *rep, pr_err *err)
{
    return load(path, parse_yelp, o, out, rep, err);
}
