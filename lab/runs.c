/* lab/runs.c: a run's metrics.jsonl as curves (lab/lab.h). Each line is
 * parsed on its own, so a bad one is named by its number. */
#include "lab/lab.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* doubles the arrays behind *cap when n reached it; false when out of memory */
static bool grow(int n, int *cap, double **a, double **b, double **c)
{
    if (n < *cap) return true;
    int want = *cap ? 2 * *cap : 64;
    double **arrays[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        if (!arrays[i]) continue;
        double *g = realloc(*arrays[i], sizeof(double) * (size_t)want);
        if (!g) return false;
        *arrays[i] = g;
    }
    *cap = want;
    return true;
}

static pr_curve *curve_for(pr_run *r, const char *name, bool eval)
{
    for (int i = 0; i < r->n_curves; i++)
        if (r->curves[i].eval == eval && strcmp(r->curves[i].name, name) == 0) return &r->curves[i];
    if (r->n_curves == r->cap) {
        int cap = r->cap ? 2 * r->cap : 8;
        pr_curve *g = realloc(r->curves, sizeof *g * (size_t)cap);
        if (!g) return NULL;
        r->curves = g, r->cap = cap;
    }
    pr_curve *c = &r->curves[r->n_curves++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->eval = eval;
    return c;
}

static int add_point(pr_run *r, const char *name, bool eval, double step, double value, pr_err *err)
{
    pr_curve *c = curve_for(r, name, eval);
    if (!c || !grow(c->n, &c->cap, &c->step, &c->value, NULL))
        return pr_errf(err, "%s: out of memory reading metrics.jsonl", r->dir);
    c->step[c->n] = step, c->value[c->n++] = value;
    return 0;
}

/* tokens and time_s of a step line; time_s restarts at 0 in a resumed run,
 * so a drop adds the time reached before it */
static int add_clock(pr_run *r, double step, const cJSON *tokens, const cJSON *time_s, double *time_base,
                     pr_err *err)
{
    if (!cJSON_IsNumber(tokens) && !cJSON_IsNumber(time_s)) return 0;
    if (!grow(r->n_clock, &r->clock_cap, &r->clock_step, &r->clock_tokens, &r->clock_time))
        return pr_errf(err, "%s: out of memory reading metrics.jsonl", r->dir);
    double t = cJSON_IsNumber(time_s) ? time_s->valuedouble : NAN;
    int n = r->n_clock;
    if (n && isfinite(t) && t + *time_base < r->clock_time[n - 1]) *time_base = r->clock_time[n - 1];
    r->clock_step[n] = step;
    r->clock_tokens[n] = cJSON_IsNumber(tokens) ? tokens->valuedouble : NAN;
    r->clock_time[n] = t + *time_base;
    r->n_clock++;
    return 0;
}

/* a number, or NAN for the null the trainer writes for a non-finite value (a break in the line) */
static double value_of(const cJSON *it) { return cJSON_IsNumber(it) ? it->valuedouble : NAN; }

static bool is_clock(const char *key) { return strcmp(key, "tokens") == 0 || strcmp(key, "time_s") == 0; }

/* one line: a step line, an eval line, or a nonfinite note (skipped) */
static int read_line(pr_run *r, const char *path, int line_no, const char *text, double *time_base, pr_err *err)
{
    cJSON *j = cJSON_Parse(text);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    if (!cJSON_IsObject(j) || !cJSON_IsNumber(step) || step->valuedouble != floor(step->valuedouble)) {
        cJSON_Delete(j);
        return pr_errf(err, "%s:%d: %s", path, line_no,
                       !j ? "not JSON" : "not a metrics object (a JSON object with an integer \"step\")");
    }
    int rc = 0;
    const cJSON *eval = cJSON_GetObjectItemCaseSensitive(j, "eval");
    if (cJSON_IsObject(eval)) {
        for (const cJSON *it = eval->child; it && !rc; it = it->next)
            if (cJSON_IsNumber(it) || cJSON_IsNull(it)) rc = add_point(r, it->string, true, step->valuedouble, value_of(it), err);
    } else if (!cJSON_GetObjectItemCaseSensitive(j, "nonfinite")) {
        for (const cJSON *it = j->child; it && !rc; it = it->next)
            if ((cJSON_IsNumber(it) || cJSON_IsNull(it)) && it != step && !is_clock(it->string))
                rc = add_point(r, it->string, false, step->valuedouble, value_of(it), err);
        if (!rc)
            rc = add_clock(r, step->valuedouble, cJSON_GetObjectItemCaseSensitive(j, "tokens"),
                           cJSON_GetObjectItemCaseSensitive(j, "time_s"), time_base, err);
    }
    cJSON_Delete(j);
    return rc;
}

int pr_run_read(pr_run *r, const char *dir, pr_err *err)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT) return pr_errf(err, "%s: no metrics.jsonl (not a run directory?)", dir);
    if (!f) return pr_errf(err, "%s: cannot read: %s", path, strerror(errno));
    char *line = NULL;
    size_t size = 0;
    ssize_t len;
    int line_no = 0, rc = 0;
    double time_base = 0;
    while (!rc && (len = getline(&line, &size, f)) > 0) {
        line_no++;
        bool whole = line[len - 1] == '\n';
        if (!whole && feof(f)) break;   /* being written: the next read sees it whole */
        if (memchr(line, '\0', (size_t)len))
            rc = pr_errf(err, "%s:%d: NUL bytes in the line (the file was padded or damaged)", path, line_no);
        else if (strspn(line, " \t\r\n") != (size_t)len)
            rc = read_line(r, path, line_no, line, &time_base, err);
    }
    if (!rc && ferror(f)) rc = pr_errf(err, "%s: read failed: %s", path, strerror(errno));
    free(line);
    fclose(f);
    if (rc) pr_run_free(r);
    return rc;
}

void pr_run_free(pr_run *r)
{
    for (int i = 0; i < r->n_curves; i++) free(r->curves[i].step), free(r->curves[i].value);
    free(r->curves), free(r->clock_step), free(r->clock_tokens), free(r->clock_time);
    r->curves = NULL, r->clock_step = r->clock_tokens = r->clock_time = NULL;
    r->n_curves = r->cap = r->n_clock = r->clock_cap = 0;
}

const pr_curve *pr_run_curve(const pr_run *r, const char *name, bool eval)
{
    for (int i = 0; i < r->n_curves; i++)
        if (r->curves[i].eval == eval && strcmp(r->curves[i].name, name) == 0) return &r->curves[i];
    return NULL;
}

void pr_runs_list_metrics(const pr_run *runs, int n, char *out, size_t size)
{
    size_t at = strlen(out);
    bool first = true;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < runs[k].n_curves; i++) {
            const pr_curve *c = &runs[k].curves[i];
            bool seen = false;   /* listed already, by an earlier run or curve */
            for (int k2 = 0; k2 <= k && !seen; k2++)
                for (int i2 = 0; i2 < (k2 < k ? runs[k2].n_curves : i) && !seen; i2++)
                    seen = strcmp(runs[k2].curves[i2].name, c->name) == 0 && runs[k2].curves[i2].eval == c->eval;
            if (seen || at >= size) continue;
            snprintf(out + at, size - at, "%s%s%s", first ? "" : ", ", c->name, c->eval ? " (eval)" : "");
            at = strlen(out), first = false;
        }
}

bool pr_run_has_x(const pr_run *r, pr_x_kind kind)
{
    if (kind == PR_X_STEP) return true;
    const double *v = kind == PR_X_TOKENS ? r->clock_tokens : r->clock_time;
    for (int i = 0; i < r->n_clock; i++)
        if (isfinite(v[i])) return true;
    return false;
}

double pr_run_x(const pr_run *r, double step, pr_x_kind kind)
{
    if (kind == PR_X_STEP) return step;
    const double *v = kind == PR_X_TOKENS ? r->clock_tokens : r->clock_time;
    /* the step lines around `step` (an eval shares its step with a step line, or falls between two) */
    int hi = 0;
    while (hi < r->n_clock && r->clock_step[hi] < step) hi++;
    if (hi < r->n_clock && r->clock_step[hi] == step) return v[hi];
    if (kind == PR_X_TOKENS) {   /* tokens grow in proportion to the step */
        int k = hi < r->n_clock ? hi : r->n_clock - 1;
        return k >= 0 && r->clock_step[k] > 0 ? v[k] / r->clock_step[k] * step : NAN;
    }
    if (hi == 0 || hi == r->n_clock) return r->n_clock ? v[hi ? hi - 1 : 0] : NAN;
    double s0 = r->clock_step[hi - 1], s1 = r->clock_step[hi];
    return v[hi - 1] + (v[hi] - v[hi - 1]) * (step - s0) / (s1 - s0);
}

void pr_smooth(const double *y, int n, int window, double *out)
{
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i]) || window <= 1) {
            out[i] = y[i];
            continue;
        }
        double sum = 0;
        int k = 0;
        for (int j = i; j >= 0 && i - j < window; j--)
            if (isfinite(y[j])) sum += y[j], k++;
        out[i] = sum / k;
    }
}
