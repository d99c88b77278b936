/* tools/golden_ops2_ttt.c: golden-check of ttt_mlp and titans against
 * ops2.safetensors (tools/golden_ops2.h). Both ops have the same shape of
 * check: named inputs, named outputs, a mini-batch (chunk) and eps stored in
 * the file; one generic runner serves both. */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/golden_ops2.h"

enum { TTT2_MAXIN = 10, TTT2_MAXOUT = 5 };

typedef struct {
    const char *name, *mb_name;
    int n_in, n_out;
    const char *in[TTT2_MAXIN], *out[TTT2_MAXOUT];
    void (*apply)(pr_ctx *ctx, int mb, double eps, pr_tensor *const *in, pr_tensor **out);
} ttt2_op;

static void apply_ttt_mlp(pr_ctx *ctx, int mb, double eps, pr_tensor *const *in, pr_tensor **out)
{
    const pr_ttt_opts o = {.mini_batch = mb, .eps = eps};
    out[0] = pr_ttt_mlp(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1],
                        &out[2], &out[3], &out[4]);
}

static void apply_titans(pr_ctx *ctx, int mb, double eps, pr_tensor *const *in, pr_tensor **out)
{
    const pr_titans_opts o = {.chunk = mb, .eps = eps};
    out[0] = pr_titans(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1], &out[2]);
}

static const ttt2_op op_ttt_mlp = {"ttt_mlp", "mini_batch", 10, 5,
                                   {"q", "k", "v", "w", "b", "eta", "w1_0", "b1_0", "w2_0", "b2_0"},
                                   {"o", "w1_t", "b1_t", "w2_t", "b2_t"}, apply_ttt_mlp};
static const ttt2_op op_titans = {"titans", "chunk", 10, 3,
                                  {"q", "k", "v", "w", "b", "theta", "alpha", "eta", "h0", "s0"},
                                  {"o", "ht", "st"}, apply_titans};

static jmp_buf ttt2_jmp;
static void ttt2_on_fatal(const char *msg)
{
    (void)msg;
    longjmp(ttt2_jmp, 1);
}

static pr_tensor *file_tensor(const pr_safetensors *st, const ttt2_op *op, const char *prefix, const char *name)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s%s", op->name, prefix, name);
    pr_tensor *t = pr_safetensors_get(st, full);
    PR_CHECK(t, "golden-check: %s missing", full);
    return t;
}

/* max|got - ref| / max|ref|; inf on a size mismatch or NaN */
static double ttt2_rel_err(const pr_tensor *got, const pr_tensor *ref)
{
    if (!got || got->numel != ref->numel) return INFINITY;
    double *g = malloc(sizeof(double) * (size_t)ref->numel), *r = malloc(sizeof(double) * (size_t)ref->numel);
    PR_CHECK(g && r, "golden-check: out of host memory");
    pr_to_host_f64(got, g);
    pr_to_host_f64(ref, r);
    double e = 0, m = 0;
    for (int64_t i = 0; i < ref->numel; i++) {
        const double d = fabs(g[i] - r[i]);
        e = isnan(d) ? INFINITY : fmax(e, d);
        m = fmax(m, fabs(r[i]));
    }
    free(g), free(r);
    return m > 0 ? e / m : e;
}

static double ttt2_compare(const ttt2_op *op, const golden_ops2_opts *o, const char *name, const pr_tensor *got,
                           const pr_tensor *ref)
{
    const double e = ttt2_rel_err(got, ref);
    if (o->verbose) printf("  %s %-6s rel_err=%.3g\n", op->name, name, e);
    return e;
}

/* the whole check of one op on ctx; returns the worst error */
static double ttt2_run(pr_ctx *ctx, const pr_safetensors *st, const ttt2_op *op, const golden_ops2_opts *o)
{
    pr_tensor *in[TTT2_MAXIN], *out[TTT2_MAXOUT], *loss = NULL;
    for (int i = 0; i < op->n_in; i++) {
        in[i] = pr_to(ctx->step, file_tensor(st, op, "", op->in[i]), o->dt, o->dev);
        pr_requires_grad_(in[i], true);
    }
    const int mb = (int)pr_item(file_tensor(st, op, "", op->mb_name));
    op->apply(ctx, mb, pr_item(file_tensor(st, op, "", "eps")), in, out);
    double worst = 0;
    for (int i = 0; i < op->n_out; i++) {
        worst = fmax(worst, ttt2_compare(op, o, op->out[i], out[i], file_tensor(st, op, "", op->out[i])));
        pr_tensor *g = pr_to(ctx->step, file_tensor(st, op, "d", op->out[i]), o->dt, o->dev);
        pr_tensor *term = pr_sum_all(ctx, pr_mul(ctx, out[i], g));
        loss = loss ? pr_add(ctx, loss, term) : term;
    }
    pr_backward(ctx, loss);
    for (int i = 0; i < op->n_in; i++) {
        char dn[32];
        snprintf(dn, sizeof dn, "d%s", op->in[i]);
        worst = fmax(worst, ttt2_compare(op, o, dn, in[i]->grad, file_tensor(st, op, "d", op->in[i])));
    }
    return worst;
}

static int ttt2_check(const pr_safetensors *st, const ttt2_op *op, const golden_ops2_opts *o, double *max_rel_err,
                      char *why, size_t why_n)
{
    pr_ctx *ctx = pr_ctx_new(0);
    ctx->matmul_tf32 = o->tf32;
    why[0] = 0;
    pr_set_error_handler(ttt2_on_fatal);
    if (setjmp(ttt2_jmp) == 0) {
        *max_rel_err = ttt2_run(ctx, st, op, o);
    } else {
        snprintf(why, why_n, "%s", pr_last_error());
        *max_rel_err = INFINITY;
    }
    pr_set_error_handler(NULL);
    pr_ctx_free(ctx);
    return *max_rel_err <= o->tol;
}

int golden_check_ttt_mlp(const pr_safetensors *st, const golden_ops2_opts *o, double *max_rel_err, char *why,
                         size_t why_n)
{
    return ttt2_check(st, &op_ttt_mlp, o, max_rel_err, why, why_n);
}

int golden_check_titans(const pr_safetensors *st, const golden_ops2_opts *o, double *max_rel_err, char *why,
                        size_t why_n)
{
    return ttt2_check(st, &op_titans, o, max_rel_err, why, why_n);
}
