/* lab/grid_stale.c: stale cells (lab/lab.h). A cell's folder may hold a run
 * made under another config than the grid gives the cell now: the grid, a
 * preset or a data generator changed since it ran. Reusing its result, or
 * resuming its checkpoint under the new config, would put two protocols in
 * one table without a word; so each cell's run is compared with its config
 * now, key by key, and with the data generator's version (manifest.json).
 *
 * Both sides go through the same serializer (pr_run_config_json): the run's
 * config.json is read onto the defaults, as a resume reads it, so a key
 * added since it ran takes its default on both sides and only values are
 * compared, never formatting. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "lab/lab.h"
#include "tasks/tasks.h"
#include "train/train.h"

/* The keys that change nothing in a cell's result, given the run's values on
 * the grid's side so they never count as a difference:
 * - train.ckpt_every, train.log_every: how often the trainer writes, not what
 *   it computes (a resume continues bit for bit from any checkpoint; ablate
 *   makes ckpt_every a fifth of the steps, so a new budget changes it);
 * - train.eval_every: evaluations along the way draw nothing from the
 *   training stream and leave the weights alone; the result is the last one;
 * - train.cuda_graph: a replayed graph gives the eager step's bits;
 * - train.zero, train.bucket_mb: how a data-parallel run shares its work
 *   (ablate runs none);
 * - train.precision when the grid leaves it `auto`: that is the device's
 *   choice (config.json holds the name it resolved to), and the device is
 *   not compared: a grid trained on a GPU can be tabulated on the CPU;
 * - model rec.n_items when the grid leaves it 0: the data's item count,
 *   resolved in config.json; the data itself is compared (train.rec.data);
 * - train.steps under a constant schedule on both sides: the learning rate
 *   does not depend on the total, so a larger budget continues the run as a
 *   fresh run of that budget would go (ablate's documented extension; a
 *   result counts only for its own budget, pr_grid_read_result). Under a
 *   cosine schedule the total shapes every step's rate: compared. */
static void ignore_what_changes_no_result(pr_config *c, pr_train_opts *o, const pr_config *run_c,
                                          const pr_train_opts *run_o)
{
    o->ckpt_every = run_o->ckpt_every;
    o->log_every = run_o->log_every;
    o->eval_every = run_o->eval_every;
    memcpy(o->cuda_graph, run_o->cuda_graph, sizeof o->cuda_graph);
    o->zero = run_o->zero;
    o->bucket_mb = run_o->bucket_mb;
    if (strcmp(o->precision, "auto") == 0) memcpy(o->precision, run_o->precision, sizeof o->precision);
    if (c->rec_n_items == 0) c->rec_n_items = run_c->rec_n_items;
    if (strcmp(o->schedule, "constant") == 0 && strcmp(run_o->schedule, "constant") == 0) o->steps = run_o->steps;
}

/* a JSON scalar as a key=value would give it; long values cut */
static void value_text(const cJSON *it, char *out, size_t n)
{
    if (cJSON_IsBool(it)) snprintf(out, n, "%s", cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsString(it)) snprintf(out, n, "%.60s", it->valuestring[0] ? it->valuestring : "\"\"");
    else if (cJSON_IsNumber(it)) {
        snprintf(out, n, "%.15g", it->valuedouble);   /* the shortest that reads back */
        if (strtod(out, NULL) != it->valuedouble) snprintf(out, n, "%.17g", it->valuedouble);
    } else snprintf(out, n, "?");
}

/* one difference into d: the first three are spelled out */
static void add_difference(pr_cell_diff *d, const char *key, const char *was, const char *now)
{
    if (d->n++ >= 3) return;
    size_t at = strlen(d->text);
    snprintf(d->text + at, sizeof d->text - at, "%s%s %s -> %s", at ? ", " : "", key, was, now);
}

/* every leaf of `now` (the grid's) against the same key of `was` (the run's),
 * named as --set names it: prefix "" for model keys, "train." for training ones */
static void compare_objects(const cJSON *was, const cJSON *now, const char *prefix, pr_cell_diff *d)
{
    for (const cJSON *it = now->child; it; it = it->next) {
        char key[160], a[80], b[80];
        snprintf(key, sizeof key, "%s%s", prefix, it->string);
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(was, it->string);
        if (cJSON_IsObject(it)) {
            char nested[176];
            snprintf(nested, sizeof nested, "%s.", key);
            compare_objects(cJSON_IsObject(old) ? old : NULL, it, nested, d);
            continue;
        }
        if (old) value_text(old, a, sizeof a);
        else snprintf(a, sizeof a, "(none)");
        value_text(it, b, sizeof b);
        if (strcmp(a, b) != 0) add_difference(d, key, a, b);
    }
}

/* manifest.json's data_version; 1 where it records none (runs from before
 * versions were recorded, whose generators were all at version 1) */
static int run_data_version(const char *dir)
{
    char path[1200];
    pr_err err;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = access(path, F_OK) == 0 ? pr_read_text(path, &err) : NULL;
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "data_version");
    int version = cJSON_IsNumber(v) ? v->valueint : 1;
    cJSON_Delete(j);
    free(text);
    return version;
}

static void count_text(pr_cell_diff *d)
{
    size_t at = strlen(d->text);
    snprintf(d->text + at, sizeof d->text - at, " (%d key%s differ%s)", d->n, d->n == 1 ? "" : "s",
             d->n == 1 ? "s" : "");
}

static bool has_file(const char *dir, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

void pr_run_config_diff(const char *dir, const pr_config *c, const pr_train_opts *o, pr_cell_diff *d)
{
    memset(d, 0, sizeof *d);
    d->precision = -1;
    if (!pr_run_exists(dir) && !has_file(dir, "result.json")) return;   /* nothing there yet */
    pr_config run_c = pr_config_default(), now_c = *c;
    pr_train_opts run_o = pr_train_defaults(), now_o = *o;
    pr_err err;
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (pr_run_config_load(&run_c, &run_o, path, &err)) {
        d->n = 1;
        snprintf(d->text, sizeof d->text, "config.json unreadable (%.200s)", err.msg);
        return;
    }
    d->precision = pr_precision_from_name(run_o.precision);
    ignore_what_changes_no_result(&now_c, &now_o, &run_c, &run_o);
    char *was_text = pr_run_config_json(&run_c, &run_o), *now_text = pr_run_config_json(&now_c, &now_o);
    cJSON *was = cJSON_Parse(was_text), *now = cJSON_Parse(now_text);
    free(was_text), free(now_text);
    PR_CHECK(was && now, "stale check: the config's own JSON does not parse");
    compare_objects(cJSON_GetObjectItemCaseSensitive(was, "model"), cJSON_GetObjectItemCaseSensitive(now, "model"),
                    "", d);
    compare_objects(cJSON_GetObjectItemCaseSensitive(was, "train"), cJSON_GetObjectItemCaseSensitive(now, "train"),
                    "train.", d);
    cJSON_Delete(was), cJSON_Delete(now);
    int had = run_data_version(dir), wants = pr_task_data_version(o->task, o->probe_style);
    if (had != wants) {
        char a[16], b[16];
        snprintf(a, sizeof a, "%d", had), snprintf(b, sizeof b, "%d", wants);
        add_difference(d, "data_version", a, b);
    }
    if (d->n) count_text(d);
}

int pr_grid_cell_diff(const pr_grid_plan *p, int i, char *dir, size_t ndir, pr_cell_diff *d, pr_err *err)
{
    pr_config c;
    pr_train_opts o;
    memset(d, 0, sizeof *d);
    if (pr_grid_cell_open(p, i, dir, ndir, &c, &o, err)) return -1;
    pr_run_config_diff(dir, &c, &o, d);
    return 0;
}

int pr_grid_stale_report(const pr_grid_plan *p, FILE *f)
{
    int stale = 0;
    for (int i = 0; i < pr_grid_cells(p->g); i++) {
        char dir[1100];
        pr_cell_diff d;
        pr_err err;
        if (pr_grid_cell_diff(p, i, dir, sizeof dir, &d, &err) || !d.n) continue;
        if (f) fprintf(f, "  %s: %s\n", dir, d.text);
        stale++;
    }
    return stale;
}

int pr_grid_move_aside(const char *dir, char *moved, size_t n, pr_err *err)
{
    for (int k = 1; k < 1000; k++) {
        snprintf(moved, n, "%s.stale-%d", dir, k);
        if (access(moved, F_OK) == 0) continue;
        if (rename(dir, moved) == 0) return 0;
        return pr_errf(err, "%s: cannot move it aside to %s: %s", dir, moved, strerror(errno));
    }
    return pr_errf(err, "%s: %s.stale-1 to -999 are all taken", dir, dir);
}
