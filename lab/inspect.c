/* lab/inspect.c: what `prism inspect` measures and shows of a model's
 * steps, apart from the command's options: each parameter's gradient norm
 * per step (a table, a CSV file, an SVG plot with one series per parameter
 * name over the layers), and the numerical rank of every token's write B_t
 * read off the recurrence nodes a forward recorded on the tape (the PRISM
 * paper's Rank-L claim), per layer and head and as a histogram.
 * The norms are an array [steps][n_params], one row per step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "models/models.h"
#include "ops/recurrence/recurrence.h"

/* ---- gradient norms ---------------------------------------------------------------- */

void pr_inspect_grad_norms(const pr_params *r, double *row)
{
    for (int i = 0; i < r->n; i++) row[i] = r->p[i].t->grad ? pr_norm2(r->p[i].t->grad) : 0;
}

/* the first steps, then the last one */
void pr_inspect_print_norms(FILE *out, const pr_params *r, const double *norms, const double *losses, int steps,
                            int64_t first)
{
    int shown = steps < 6 ? steps : 6;
    fprintf(out, "%-36s", "gradient norm by step");
    for (int s = 0; s < shown; s++) fprintf(out, " %10lld", (long long)(first + (s == shown - 1 ? steps - 1 : s)));
    fprintf(out, "\n%-36s", "(loss)");
    for (int s = 0; s < shown; s++) fprintf(out, " %10.4g", losses[s == shown - 1 ? steps - 1 : s]);
    fprintf(out, "\n");
    for (int i = 0; i < r->n; i++) {
        fprintf(out, "%-36s", r->p[i].path);
        for (int s = 0; s < shown; s++)
            fprintf(out, " %10.3e", norms[(size_t)(s == shown - 1 ? steps - 1 : s) * r->n + i]);
        fprintf(out, "\n");
    }
}

int pr_inspect_write_norm_csv(const char *path, const pr_params *r, const double *norms, const double *losses,
                              int steps, int64_t first, pr_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f) return pr_errf(err, "%s: cannot write", path);
    fprintf(f, "step,loss");
    for (int i = 0; i < r->n; i++) fprintf(f, ",%s", r->p[i].path);
    fprintf(f, "\n");
    for (int s = 0; s < steps; s++) {
        fprintf(f, "%lld,%.9g", (long long)(first + s), losses[s]);
        for (int i = 0; i < r->n; i++) fprintf(f, ",%.9g", norms[(size_t)s * r->n + i]);
        fprintf(f, "\n");
    }
    return fclose(f) ? pr_errf(err, "%s: write failed", path) : 0;
}

/* One series per parameter name with the layer index dropped
 * (`layers.*.mixer.q_proj`): the norm over every layer's copy, so the plot
 * stays readable for deep models. */
static void group_name(const char *path, char *out, size_t n)
{
    const char *rest = NULL;
    if (strncmp(path, "layers.", 7) == 0 && (rest = strchr(path + 7, '.')))
        snprintf(out, n, "layers.*%s", rest);
    else
        snprintf(out, n, "%s", path);
}

int pr_inspect_write_norm_plot(const char *path, const char *model, const pr_params *r, const double *norms,
                               int steps, int64_t first, pr_err *err)
{
    if (r->n > 4096) return pr_errf(err, "--plot: more than 4096 parameters");
    char (*names)[96] = malloc(sizeof *names * (size_t)(r->n > 0 ? r->n : 1));
    int group[4096], n_groups = 0;
    for (int i = 0; i < r->n; i++) {
        char g[96];
        group_name(r->p[i].path, g, sizeof g);
        int k = 0;
        while (k < n_groups && strcmp(names[k], g) != 0) k++;
        if (k == n_groups) snprintf(names[n_groups++], 96, "%s", g);
        group[i] = k;
    }
    double *x = malloc(sizeof(double) * (size_t)steps), *y = calloc((size_t)(n_groups * steps), sizeof(double));
    for (int s = 0; s < steps; s++) {
        x[s] = (double)(first + s);
        for (int i = 0; i < r->n; i++) {
            double v = norms[(size_t)s * r->n + i];
            y[group[i] * steps + s] += v * v;
        }
    }
    char title[96];
    snprintf(title, sizeof title, "%s: gradient norm by step", model);
    /* steps are counts: no tick between two of them */
    pr_plot p = {.title = title, .xlabel = "step", .ylabel = "gradient L2 norm", .ylog = true, .xint = true};
    for (int k = 0; k < n_groups; k++) {
        for (int s = 0; s < steps; s++) y[k * steps + s] = sqrt(y[k * steps + s]);
        pr_plot_add(&p, names[k], steps, x, y + k * steps);
    }
    int rc = pr_plot_save(&p, path, err);
    pr_plot_free(&p);
    free(names), free(x), free(y);
    return rc;
}

/* ---- write ranks ------------------------------------------------------------------------ */

/* per layer and head: the histogram over tokens; the recurrence nodes come
 * in layer order, one per layer */
void pr_inspect_ranks(FILE *out, const pr_ctx *ctx, pr_rank_summary *sum)
{
    *sum = (pr_rank_summary){0};
    for (int p = 0; p < ctx->n_tape; p++) {
        const pr_node *n = &ctx->tape[p];
        if (strcmp(n->op->name, "recurrence") != 0) continue;
        const pr_tensor *k = n->in[PR_REC_K];
        int64_t BT = k->shape[0] * k->shape[1], H = k->shape[2];
        int *ranks = malloc(sizeof(int) * (size_t)(BT * H));
        int most = pr_recurrence_write_ranks(n, PR_INSPECT_RANK_TOL, ranks);
        if (most > sum->max_possible) sum->max_possible = most;
        if (sum->layers == 0) fprintf(out, "write rank of B_t per layer and head (tokens with each rank):\n");
        for (int64_t h = 0; h < H; h++) {
            int64_t count[PR_INSPECT_MAX_RANK] = {0};
            for (int64_t t = 0; t < BT; t++) count[ranks[t * H + h]]++;
            fprintf(out, "  layer %d head %lld (%s, at most %d):", sum->layers, (long long)h,
                    pr_rule_name((pr_rule)n->iarg[0]), most);
            for (int v = 0; v <= most; v++)
                if (count[v]) fprintf(out, " rank %d: %lld", v, (long long)count[v]);
            fprintf(out, "\n");
            for (int v = 0; v <= most; v++) sum->hist[v] += count[v];
        }
        free(ranks);
        sum->layers++;
    }
}

void pr_inspect_rank_histogram(FILE *out, const char *model, const pr_rank_summary *sum)
{
    if (sum->layers == 0) {
        fprintf(out, "write rank: %s has no linear recurrence (no B_t to measure)\n", model);
        return;
    }
    int64_t total = 0;
    for (int v = 0; v <= sum->max_possible; v++) total += sum->hist[v];
    fprintf(out, "write rank histogram, %s (%d layers; singular values > %g of the largest):\n", model, sum->layers,
            PR_INSPECT_RANK_TOL);
    for (int v = 0; v <= sum->max_possible; v++) {
        int bar = (int)llround(40.0 * (double)sum->hist[v] / (double)total);
        fprintf(out, "  rank %d: %8lld %5.1f%% ", v, (long long)sum->hist[v],
                100.0 * (double)sum->hist[v] / (double)total);
        for (int i = 0; i < bar; i++) fputc('#', out);
        fputc('\n', out);
    }
}
