/* lab/golden_ops2.c: the golden checks of the fused ops in ops2.safetensors,
 * and the helpers every golden check (golden_check.c's recurrences too) uses.
 *
 * Each checker loads "<op>.<input>" tensors onto the run's device and dtype
 * (requiring grad), runs the op, compares every output with the file's, runs
 * the backward of sum over outputs of (output * d<output>) and compares every
 * input's grad with d<input>. The error of a tensor is max|got - ref| /
 * max|ref|. To add an op: write its checker and add one row to pr_golden_ops.
 */
#include "lab/lab.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

pr_tensor *pr_golden_ref(const pr_golden_run *g, const char *name)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", g->op, name);
    return pr_safetensors_get(g->st, full);
}

/* a reference the check needs; fatal (the check's FAIL) when the file lacks it */
static pr_tensor *expect(const pr_golden_run *g, const char *name)
{
    pr_tensor *t = pr_golden_ref(g, name);
    PR_CHECK(t, "golden-check: %s.%s is missing (a file entry needs every output, its upstream gradient "
                "and d<x> for every input x it gives)", g->op, name);
    return t;
}

/* relative error of got against r (max-abs scaled); inf on a size mismatch or NaN */
static double rel_err(const pr_tensor *got, const pr_tensor *r)
{
    if (!got || got->numel != r->numel) return INFINITY;
    const int64_t n = r->numel;
    double *a = malloc(sizeof(double) * (size_t)(n + 1)), *b = malloc(sizeof(double) * (size_t)(n + 1));
    PR_CHECK(a && b, "golden-check: out of host memory");
    pr_to_host_f64(got, a);
    pr_to_host_f64(r, b);
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs(a[i] - b[i]);
        e = isnan(d) ? INFINITY : fmax(e, d);
        m = fmax(m, fabs(b[i]));
    }
    free(a);
    free(b);
    return m > 0 ? e / m : e;
}

/* max|got - ref| / max|ref| against the file's `name`, kept in g->worst */
static void compare(pr_golden_run *g, const char *name, const pr_tensor *got)
{
    const pr_tensor *ref = expect(g, name);
    const double e = rel_err(got, ref);
    g->compared += ref->numel;
    if (g->verbose && g->form) printf("  %s %-8s %-6s rel_err=%.3g\n", g->op, g->form, name, e);
    else if (g->verbose) printf("  %s %-10s rel_err=%.3g\n", g->op, name, e);
    g->worst = isnan(e) ? INFINITY : fmax(g->worst, e);
}

/* "d<name>" */
static const char *grad_name(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "d%s", name);
    return buf;
}

/* the run's dtype, except that bf16 data keeps the linear rules' log-decay g
 * (gk when per key) and initial state h0 in f32 (as the recurrence op wants them) */
static pr_dtype input_dtype(const pr_golden_run *g, const char *name)
{
    const bool state = !strcmp(name, "g") || !strcmp(name, "gk") || !strcmp(name, "h0");
    return g->dt == PR_BF16 && state ? PR_F32 : g->dt;
}

void pr_golden_inputs(const pr_golden_run *g, const char *const *names, int n, pr_tensor **in)
{
    for (int i = 0; i < n; i++) {
        pr_tensor *t = pr_golden_ref(g, names[i]);
        in[i] = t ? pr_to(g->ctx->step, t, input_dtype(g, names[i]), g->dev) : NULL;
        if (in[i]) pr_requires_grad_(in[i], true);
    }
}

void pr_golden_compare_all(pr_golden_run *g, pr_tensor *const *out, const char *const *outs, int n_out,
                           pr_tensor *const *in, const char *const *ins, int n_in)
{
    char dn[48];
    enum { MAX_OUT = 8 };
    const pr_tensor *seed[MAX_OUT];
    PR_CHECK(n_out <= MAX_OUT, "golden-check: %s has more than %d outputs", g->op, MAX_OUT);
    for (int i = 0; i < n_out; i++) compare(g, outs[i], out[i]);
    /* the backward of sum_i(out[i] * d<outs[i]>): seeded with the file's upstream
     * gradients, which pr_backward_many converts to each output's dtype and device */
    for (int i = 0; i < n_out; i++) seed[i] = expect(g, grad_name(outs[i], dn, sizeof dn));
    pr_backward_many(g->ctx, n_out, out, seed);
    for (int i = 0; i < n_in; i++)
        if (in[i]) compare(g, grad_name(ins[i], dn, sizeof dn), in[i]->grad);
}

/* ---- the checkers ---------------------------------------------------------------- */

static void check_attention(pr_golden_run *g)
{
    static const char *names[] = {"q", "k", "v"}, *outs[] = {"o"};
    pr_tensor *in[3], *out[1];
    pr_golden_inputs(g, names, 3, in);
    pr_tensor *s = pr_golden_ref(g, "scale");
    out[0] = pr_attention(g->ctx, in[0], in[1], in[2], s ? pr_item(s) : 0, NULL);
    pr_golden_compare_all(g, out, outs, 1, in, names, 3);
}

static void check_selective_scan(pr_golden_run *g)
{
    static const char *names[] = {"u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0"}, *outs[] = {"y", "ht"};
    pr_tensor *in[9], *out[2];
    pr_golden_inputs(g, names, 9, in);
    out[0] = pr_selective_scan(g->ctx, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], NULL, &out[1]);
    pr_golden_compare_all(g, out, outs, 2, in, names, 9);
}

/* a scalar the file stores (mini-batch, chunk, eps) */
static double stored(const pr_golden_run *g, const char *name)
{
    return pr_item(expect(g, name));
}

static void check_ttt_mlp(pr_golden_run *g)
{
    static const char *names[] = {"q", "k", "v", "w", "b", "eta", "w1_0", "b1_0", "w2_0", "b2_0"};
    static const char *outs[] = {"o", "w1_t", "b1_t", "w2_t", "b2_t"};
    pr_tensor *in[10], *out[5];
    pr_golden_inputs(g, names, 10, in);
    const pr_ttt_opts o = {.mini_batch = (int)stored(g, "mini_batch"), .eps = stored(g, "eps")};
    out[0] = pr_ttt_mlp(g->ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1],
                        &out[2], &out[3], &out[4]);
    pr_golden_compare_all(g, out, outs, 5, in, names, 10);
}

static void check_titans(pr_golden_run *g)
{
    static const char *names[] = {"q", "k", "v", "w", "b", "theta", "alpha", "eta", "h0", "s0"};
    static const char *outs[] = {"o", "ht", "st"};
    pr_tensor *in[10], *out[3];
    pr_golden_inputs(g, names, 10, in);
    const pr_titans_opts o = {.chunk = (int)stored(g, "chunk"), .eps = stored(g, "eps")};
    out[0] = pr_titans(g->ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1],
                       &out[2]);
    pr_golden_compare_all(g, out, outs, 3, in, names, 10);
}

const pr_golden_op pr_golden_ops[] = {
    {"attention", check_attention},
    {"selective_scan", check_selective_scan},
    {"ttt_mlp", check_ttt_mlp},
    {"titans", check_titans},
};

const int pr_golden_n_ops = (int)(sizeof pr_golden_ops / sizeof pr_golden_ops[0]);

/* ---- running one ------------------------------------------------------------------ */

bool pr_golden_present(const pr_safetensors *st, const char *name)
{
    const size_t n = strlen(name);
    for (int i = 0; i < st->n; i++)
        if (!strncmp(st->names[i], name, n) && st->names[i][n] == '.') return true;
    return false;
}

static jmp_buf golden_jmp;
static void golden_on_fatal(const char *msg)
{
    (void)msg;
    longjmp(golden_jmp, 1);
}

double pr_golden_try(pr_golden_run *g, void (*check)(pr_golden_run *g), char *why, size_t why_n)
{
    g->worst = 0;
    why[0] = 0;
    pr_set_error_handler(golden_on_fatal);
    if (setjmp(golden_jmp) == 0) {
        check(g);
    } else {
        snprintf(why, why_n, "%s", pr_last_error());
        g->worst = INFINITY;
    }
    pr_set_error_handler(NULL);
    pr_step_reset(g->ctx);
    return g->worst;
}
