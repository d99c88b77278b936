/* tools/golden_ops2.c: the golden checks of the fused ops in ops2.safetensors.
 *
 * Each checker loads "<op>.<input>" tensors onto the run's device and dtype
 * (requiring grad), runs the op, compares every output with the file's, runs
 * the backward of sum over outputs of (output * d<output>) and compares every
 * input's grad with d<input>. The error of a tensor is max|got - ref| /
 * max|ref|. To add an op: write its checker and add one row to pr_golden_ops.
 */
#include "tools/golden_ops2.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

static pr_tensor *ref(const pr_golden_run *g, const char *name)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", g->op, name);
    return pr_safetensors_get(g->st, full);
}

/* the file's input on the run's device and dtype, requiring grad; NULL if absent */
static pr_tensor *input(const pr_golden_run *g, const char *name)
{
    pr_tensor *t = ref(g, name);
    if (!t) return NULL;
    pr_tensor *x = pr_to(g->ctx->step, t, g->dt, g->dev);
    pr_requires_grad_(x, true);
    return x;
}

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

static void compare(pr_golden_run *g, const char *name, const pr_tensor *got)
{
    pr_tensor *r = ref(g, name);
    PR_CHECK(r, "golden-check: %s.%s missing: nothing to compare against", g->op, name);
    const double e = rel_err(got, r);
    if (g->verbose) printf("  %s %-10s rel_err=%.3g\n", g->op, name, e);
    g->worst = isnan(e) ? INFINITY : fmax(g->worst, e);
}

/* sum(out * the file's upstream gradient `name`) */
static pr_tensor *dot_loss(const pr_golden_run *g, pr_tensor *out, const char *name)
{
    pr_tensor *r = ref(g, name);
    PR_CHECK(r, "golden-check: %s.%s missing", g->op, name);
    return pr_sum_all(g->ctx, pr_mul(g->ctx, out, pr_to(g->ctx->step, r, g->dt, g->dev)));
}

static void compare_grads(pr_golden_run *g, pr_tensor *const *in, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        char dn[48];
        snprintf(dn, sizeof dn, "d%s", names[i]);
        compare(g, dn, in[i]->grad);
    }
}

/* ---- the checkers ---------------------------------------------------------------- */

static void check_attention(pr_golden_run *g)
{
    static const char *names[] = {"q", "k", "v"};
    pr_tensor *in[3];
    for (int i = 0; i < 3; i++) in[i] = input(g, names[i]);
    pr_tensor *s = ref(g, "scale");
    pr_tensor *o = pr_attention(g->ctx, in[0], in[1], in[2], s ? pr_item(s) : 0, NULL);
    compare(g, "o", o);
    pr_backward(g->ctx, dot_loss(g, o, "do"));
    compare_grads(g, in, names, 3);
}

static void check_selective_scan(pr_golden_run *g)
{
    static const char *names[] = {"u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0"};
    pr_tensor *in[9];
    for (int i = 0; i < 9; i++) in[i] = input(g, names[i]);
    pr_tensor *ht, *y = pr_selective_scan(g->ctx, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8],
                                          NULL, &ht);
    compare(g, "y", y);
    compare(g, "ht", ht);
    pr_backward(g->ctx, pr_add(g->ctx, dot_loss(g, y, "dy"), dot_loss(g, ht, "dht")));
    compare_grads(g, in, names, 9);
}

/* a scalar the file stores (mini-batch, chunk, eps) */
static double stored(const pr_golden_run *g, const char *name)
{
    pr_tensor *t = ref(g, name);
    PR_CHECK(t, "golden-check: %s.%s missing", g->op, name);
    return pr_item(t);
}

/* sum over outputs of (output * the file's d<output>) */
static pr_tensor *dot_losses(const pr_golden_run *g, pr_tensor *const *out, const char *const *names, int n)
{
    pr_tensor *loss = NULL;
    for (int i = 0; i < n; i++) {
        char dn[48];
        snprintf(dn, sizeof dn, "d%s", names[i]);
        pr_tensor *term = dot_loss(g, out[i], dn);
        loss = loss ? pr_add(g->ctx, loss, term) : term;
    }
    return loss;
}

static void check_ttt_mlp(pr_golden_run *g)
{
    static const char *names[] = {"q", "k", "v", "w", "b", "eta", "w1_0", "b1_0", "w2_0", "b2_0"};
    static const char *outs[] = {"o", "w1_t", "b1_t", "w2_t", "b2_t"};
    pr_tensor *in[10], *out[5];
    for (int i = 0; i < 10; i++) in[i] = input(g, names[i]);
    const pr_ttt_opts o = {.mini_batch = (int)stored(g, "mini_batch"), .eps = stored(g, "eps")};
    out[0] = pr_ttt_mlp(g->ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1],
                        &out[2], &out[3], &out[4]);
    for (int i = 0; i < 5; i++) compare(g, outs[i], out[i]);
    pr_backward(g->ctx, dot_losses(g, out, outs, 5));
    compare_grads(g, in, names, 10);
}

static void check_titans(pr_golden_run *g)
{
    static const char *names[] = {"q", "k", "v", "w", "b", "theta", "alpha", "eta", "h0", "s0"};
    static const char *outs[] = {"o", "ht", "st"};
    pr_tensor *in[10], *out[3];
    for (int i = 0; i < 10; i++) in[i] = input(g, names[i]);
    const pr_titans_opts o = {.chunk = (int)stored(g, "chunk"), .eps = stored(g, "eps")};
    out[0] = pr_titans(g->ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1],
                       &out[2]);
    for (int i = 0; i < 3; i++) compare(g, outs[i], out[i]);
    pr_backward(g->ctx, dot_losses(g, out, outs, 3));
    compare_grads(g, in, names, 10);
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

double pr_golden_run_op(const pr_golden_op *op, const pr_safetensors *st, pr_ctx *ctx, pr_device dev, pr_dtype dt,
                        bool verbose, char *why, size_t why_n)
{
    pr_golden_run g = {.st = st, .op = op->name, .ctx = ctx, .dev = dev, .dt = dt, .verbose = verbose, .worst = 0};
    why[0] = 0;
    pr_set_error_handler(golden_on_fatal);
    if (setjmp(golden_jmp) == 0) {
        op->fn(&g);
    } else {
        snprintf(why, why_n, "%s", pr_last_error());
        g.worst = INFINITY;
    }
    pr_set_error_handler(NULL);
    pr_step_reset(ctx);
    return g.worst;
}
