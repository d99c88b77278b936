/* autograd/profile.c: the per-op time table (profile.h). */
#include "autograd/profile.h"

#include <stdlib.h>
#include <string.h>

double pr_profile_clock(pr_device dev)
{
    pr_device_sync(dev);
    return pr_now_s();
}

/* "layers.3.mixer.conv" -> "mixer.conv": layers differ only by number */
static void scope_kind(const char *scope, char *out, size_t n)
{
    if (!scope) scope = "model";   /* outside any layer: embedding, head, loss */
    if (strncmp(scope, "layers.", 7) == 0) {
        const char *dot = strchr(scope + 7, '.');
        scope = dot ? dot + 1 : "layers";
    }
    snprintf(out, n, "%s", scope);
}

void pr_profile_time(pr_profile *p, const char *op, const char *scope, int backward, double seconds)
{
    char where[40];
    scope_kind(scope, where, sizeof where);
    for (int i = 0; i < p->n; i++) {
        pr_profile_entry *e = &p->e[i];
        if (e->backward == backward && strcmp(e->op, op) == 0 && strcmp(e->where, where) == 0) {
            e->seconds += seconds, e->calls++;
            return;
        }
    }
    if (p->n == PR_PROFILE_MAX) return;   /* full: the table says so by its last row */
    pr_profile_entry *e = &p->e[p->n++];
    snprintf(e->op, sizeof e->op, "%s", op);
    snprintf(e->where, sizeof e->where, "%s", where);
    e->backward = backward, e->seconds = seconds, e->calls = 1;
}

static int heavier_first(const void *x, const void *y)
{
    double a = ((const pr_profile_entry *)x)->seconds, b = ((const pr_profile_entry *)y)->seconds;
    return (a < b) - (a > b);
}

void pr_profile_print(const pr_profile *p, double step_s, FILE *f)
{
    pr_profile_entry *e = malloc(sizeof *e * (size_t)(p->n ? p->n : 1));
    if (!e) return;
    memcpy(e, p->e, sizeof *e * (size_t)p->n);
    qsort(e, (size_t)p->n, sizeof *e, heavier_first);
    double total = 0;
    for (int i = 0; i < p->n; i++) total += e[i].seconds;
    const double steps = p->steps > 0 ? p->steps : 1, base = step_s > 0 ? step_s * steps : total;
    fprintf(f, "| op | where | pass | calls/step | ms/step | share |\n|---|---|---|---|---|---|\n");
    for (int i = 0; i < p->n; i++)
        fprintf(f, "| %s | %s | %s | %.0f | %.3f | %.1f%% |\n", e[i].op, e[i].where, e[i].backward ? "bwd" : "fwd",
                (double)e[i].calls / steps, 1e3 * e[i].seconds / steps, 100 * e[i].seconds / base);
    fprintf(f, "| (all ops) | | | | %.3f | %.1f%% |\n", 1e3 * total / steps, 100 * total / base);
    if (step_s > 0)
        fprintf(f, "| (between ops: host, launches, zeroing) | | | | %.3f | %.1f%% |\n", 1e3 * (base - total) / steps,
                100 * (base - total) / base);
    if (p->n == PR_PROFILE_MAX) fprintf(f, "(the table is full: later kinds of op were not counted)\n");
    free(e);
}
