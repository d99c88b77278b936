/* lab/golden_check.c: what `prism golden-check` does (lab/lab.h): the
 * recurrences, TTT-Linear and the fused ops of lab/golden_ops2.c against a
 * reference file of the golden format (tests/data/README.md), and --make's
 * reference file of any size.
 *
 * Every rule present in the file (whatever its sizes: B, T, H, K, V, L and
 * TTT's mini-batch are read off the shapes) runs forward and backward, the
 * backward seeded with `do` and `dht` (the scalar sum(o*do) + sum(ht*dht)),
 * and every output, final state and gradient is compared with the file's.
 * The error of a tensor is max|got - ref| / max|ref|; a rule's is the worst
 * of its tensors over the forms run. A rule is in the file when any
 * <rule>.* tensor is; it then FAILs, naming the tensor, when a reference it
 * needs is missing (o, ht, do, dht, d<x> for every input x given) or a
 * tensor is not float64, so a partial file cannot pass by comparing nothing.
 * The linear rules and their inputs come from the rule table (rules.def).
 *
 * --dtype bf16 (the linear rules only; TTT-Linear and the ops2 ops are
 * skipped, they have no bf16 path): the file's inputs and `do` rounded to
 * bf16 (g, h0 and dht to f32), o and the grads of bf16 inputs returned in
 * bf16, compared with the file's f64 references of the unrounded inputs. The
 * tolerance is counted in units of bf16 rounding, u = 2^-8 (bf16 keeps 8
 * significant bits: the largest relative error of one rounding) and printed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "ops/ops.h"
#include "ops/recurrence/recurrence.h"
#include "ops/ttt_linear.h"


static double scalar(const pr_golden_run *g, const char *name, double dflt)
{
    pr_tensor *t = pr_golden_ref(g, name);
    return t ? pr_item(t) : dflt;
}

/* ---- the linear rules -------------------------------------------------------------------- */

static void run_linear(pr_golden_run *g, int chunk)
{
    static const char *outs[] = {"o", "ht"};
    const char *names[PR_REC_NIN];
    pr_tensor *in[PR_REC_NIN], *out[2];
    const pr_rule rule = (pr_rule)pr_rule_from_name(g->op);
    for (int i = 0; i < PR_REC_NIN; i++) names[i] = pr_rule_input_name(rule, (pr_rec_input)i);   /* gla: gk */
    pr_golden_inputs(g, names, PR_REC_NIN, in);
    pr_recurrence_opts opt = {.rule = rule, .chunk = chunk,
                              .scale = scalar(g, "scale", 0), .force = g->force};
    out[0] = pr_recurrence(g->ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, &out[1]);
    pr_golden_compare_all(g, out, outs, 2, in, names, PR_REC_NIN);
}

/* ---- TTT-Linear (ops/ttt_linear.h) -------------------------------------------------------- */

static void run_ttt(pr_golden_run *g)
{
    static const char *names[] = {"q", "k", "v", "w", "b", "eta", "h0", "hb0"}, *outs[] = {"o", "ht", "hbt"};
    pr_tensor *in[8], *out[3];
    pr_golden_inputs(g, names, 8, in);
    pr_ttt_opts opt = {.scale = scalar(g, "scale", 0), .mini_batch = (int)scalar(g, "mini_batch", 16),
                       .eps = scalar(g, "eps", 1e-6)};
    out[0] = pr_ttt_linear(g->ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], &out[1], &out[2]);
    pr_golden_compare_all(g, out, outs, 3, in, names, 8);
}

/* every <rule>.* tensor is float64, as the golden format stores them (fatal otherwise) */
static void check_dtypes(const pr_safetensors *st, const char *rule)
{
    const size_t n = strlen(rule);
    for (int i = 0; i < st->n; i++)
        if (!strncmp(st->names[i], rule, n) && st->names[i][n] == '.')
            PR_CHECK(st->tensors[i]->dtype == PR_F64, "golden-check: %s has dtype %s; golden files store float64",
                     st->names[i], pr_dtype_name(st->tensors[i]->dtype));
}

/* one rule, every form asked for */
static void check_rule(pr_golden_run *g)
{
    check_dtypes(g->st, g->op);
    if (!strcmp(g->op, "ttt_linear")) {
        g->form = "dual";
        run_ttt(g);
        return;
    }
    for (int f = 0; f < 2; f++) {
        if (!(g->forms & (1 << f))) continue;
        g->form = f ? "chunked" : "token";
        run_linear(g, f ? g->chunk : 0);
        pr_step_reset(g->ctx);
    }
}

/* runs one check if the file has its tensors, prints its line and counts it */
static void check_one(FILE *out, pr_golden_run g, const char *name, void (*check)(pr_golden_run *g), double tol,
                      int *passed, int *failed, int *skipped)
{
    char why[512];
    if (!pr_golden_present(g.st, name)) return;
    if (g.dt == PR_BF16 && pr_rule_from_name(name) < 0) {   /* only the linear rules have a bf16 path */
        fprintf(out, "%s skip (no bf16 path)\n", name);
        ++*skipped;
        return;
    }
    g.op = name;
    g.compared = 0;
    double e = pr_golden_try(&g, check, why, sizeof why);
    if (g.compared == 0 && !why[0]) {   /* every reference empty: a pass would mean nothing */
        e = INFINITY;
        snprintf(why, sizeof why, "nothing compared: every reference tensor of %s is empty", name);
    }
    const bool ok = e <= tol;
    fprintf(out, "%s %s max_rel_err=%.3g%s%s\n", name, ok ? "ok" : "FAIL", e, why[0] ? "  " : "", why);
    ok ? ++*passed : ++*failed;
}

/* bf16: units of u = 2^-8, the largest relative error of one rounding. The
 * inputs, do and each output and grad are rounded once each, and a grad is
 * a sum of products of several rounded inputs; the CPU, which adds no error
 * of its own, measured at most 1.85 u (7.2e-3, ssd's dq) on
 * tests/data/recurrences.safetensors: 4 u leaves room for the GPU's f32 sums. */
#define GC_BF16_UNITS 4
/* TF32: units of 2^-11, the rounding of one TF32 operand. Products of two
 * rounded operands summed with cancellation reached 4.2 u (2.03e-3, prism_core's
 * dg over 5 tokens at C = 64, where f32 gives 1.0e-6): 6 u. */
#define GC_TF32_UNITS 6
double pr_golden_default_tol(const pr_golden_opts *o)
{
    /* TF32 on bf16 data adds about 2e-3 = 0.5 u of bf16: 2 u more */
    if (o->dt == PR_BF16) return (GC_BF16_UNITS + (o->tf32 ? 2 : 0)) * ldexp(1.0, -8);
    if (o->dt == PR_F64) return 1e-9;
    return o->tf32 ? GC_TF32_UNITS * ldexp(1.0, -11) : 1e-4;
}

int pr_golden_check_file(FILE *out, const char *path, const pr_golden_opts *o)
{
    pr_arena *a = pr_arena_new("golden", 0);
    pr_safetensors st;
    pr_err err;
    if (pr_safetensors_read(path, a, &st, &err) != 0) {
        fprintf(stderr, "prism golden-check: %s\n", err.msg);
        pr_arena_free(a);
        return 1;
    }
    const double tol = o->tol > 0 ? o->tol : pr_golden_default_tol(o);
    if (o->dt == PR_BF16)
        fprintf(out, "bf16: inputs and do rounded to bf16 (g, h0, dht to f32); tolerance %.3g (%.4g units of bf16 "
                "rounding, 2^-8)\n", tol, tol * 256);
    pr_ctx *ctx = pr_ctx_new(0);
    ctx->matmul_tf32 = o->tf32;
    const pr_golden_run g = {.st = &st, .ctx = ctx, .dev = o->dev, .dt = o->dt, .verbose = o->verbose,
                             .forms = o->forms, .chunk = o->chunk, .force = o->force};
    int passed = 0, failed = 0, skipped = 0;
    for (int r = 0; r < PR_NRULES; r++)
        check_one(out, g, pr_rule_name((pr_rule)r), check_rule, tol, &passed, &failed, &skipped);
    check_one(out, g, "ttt_linear", check_rule, tol, &passed, &failed, &skipped);
    for (int i = 0; i < pr_golden_n_ops; i++) /* the fused ops of lab/golden_ops2.c */
        check_one(out, g, pr_golden_ops[i].name, pr_golden_ops[i].fn, tol, &passed, &failed, &skipped);
    pr_ctx_free(ctx);
    pr_arena_free(a);
    if (passed + failed == 0 && skipped)
        fprintf(stderr, "prism golden-check: nothing in %s runs with these options (the skip lines say why)\n", path);
    else if (passed + failed == 0) fprintf(stderr, "prism golden-check: %s holds no known rule (<rule>.<tensor>)\n", path);
    fprintf(out, "%d passed, %d failed\n", passed, failed);
    return failed || passed == 0 ? 1 : 0;
}

/* ---- --make: a reference file of any size from the CPU per-token form ------------------------ */

int pr_golden_make_reference(FILE *out, const char *path, const int64_t *sz)
{
    const int64_t B = sz[0], T = sz[1], H = sz[2], K = sz[3], V = sz[4], L = sz[5];
    enum { MAXT = PR_NRULES * 24 };
    static char names[MAXT][48];
    const char *name_p[MAXT];
    const pr_tensor *ts[MAXT];
    int n = 0;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(2024, 0);
#define ADD(rule, nm, t) (snprintf(names[n], sizeof names[n], "%s.%s", rule, nm), name_p[n] = names[n], ts[n++] = (t))
    for (int r = 0; r < PR_NRULES; r++) {
        const char *rn = pr_rule_name((pr_rule)r);
        pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, (pr_rule)r, B, T, H, K, V, L, true);
        pr_tensor *in[PR_REC_NIN] = {ri.q, ri.k, ri.v, ri.g, ri.beta, ri.kx, ri.vx, ri.h0};
        pr_recurrence_opts opt = {.rule = (pr_rule)r};
        pr_tensor *ht, *o = pr_recurrence(ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, &ht);
        pr_tensor *dout = pr_randn(ctx->step, PR_F64, PR_CPU, o->ndim, o->shape, &rng);
        pr_tensor *dht = pr_randn(ctx->step, PR_F64, PR_CPU, ht->ndim, ht->shape, &rng);
        pr_backward(ctx, pr_add(ctx, pr_sum_all(ctx, pr_mul(ctx, o, dout)), pr_sum_all(ctx, pr_mul(ctx, ht, dht))));
        pr_tensor *scale = pr_full(ctx->step, PR_F64, PR_CPU, PR_DIMS(1), 1.0 / sqrt((double)K));
        for (int i = 0; i < PR_REC_NIN; i++)
            if (in[i]) ADD(rn, pr_rule_input_name((pr_rule)r, (pr_rec_input)i), in[i]);
        ADD(rn, "o", o), ADD(rn, "ht", ht), ADD(rn, "do", dout), ADD(rn, "dht", dht), ADD(rn, "scale", scale);
        for (int i = 0; i < PR_REC_NIN; i++) {
            if (!in[i]) continue;
            char dn[16];
            snprintf(dn, sizeof dn, "d%s", pr_rule_input_name((pr_rule)r, (pr_rec_input)i));
            ADD(rn, dn, in[i]->grad);
        }
    }
#undef ADD
    char shape[128];
    snprintf(shape, sizeof shape, "B=%lld T=%lld H=%lld K=%lld V=%lld L=%lld", (long long)B, (long long)T,
             (long long)H, (long long)K, (long long)V, (long long)L);
    const char *mk[] = {"shape", "made_by"}, *mv[] = {shape, "prism golden-check --make (CPU per-token form, f64)"};
    pr_err err;
    const int rc = pr_safetensors_write(path, n, name_p, ts, 2, mk, mv, &err);
    if (rc != 0) fprintf(stderr, "prism golden-check: %s\n", err.msg);
    else fprintf(out, "wrote %s (%d tensors, %s)\n", path, n, shape);
    pr_ctx_free(ctx);
    return rc ? 1 : 0;
}
