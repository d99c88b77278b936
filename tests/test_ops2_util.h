/* tests/test_ops2_util.h: what the tests of the fused ops (attention,
 * selective scan, the TTT family) share: the ops2 reference file, host copies
 * of one run and a relative-error check. */
#ifndef PR_TEST_OPS2_UTIL_H
#define PR_TEST_OPS2_UTIL_H

#include "tests/pr_test.h"

#define OPS2_FILE PRISM_SOURCE_DIR "/tests/data/ops2.safetensors"
enum { MAXIN = 10, MAXOUT = 5 };

static inline double *host(const pr_tensor *t, int64_t *n)
{
    double *p = malloc(sizeof(double) * (size_t)(t->numel + 1));
    pr_to_host_f64(t, p);
    if (n) *n = t->numel;
    return p;
}

/* host copies of one run: outputs and input grads (NULL where none) */
typedef struct {
    double *out[MAXOUT], *d[MAXIN];
    int64_t n_out[MAXOUT], n[MAXIN];
} run_out;

static inline void run_out_free(run_out *r)
{
    for (int i = 0; i < MAXOUT; i++) free(r->out[i]);
    for (int i = 0; i < MAXIN; i++) free(r->d[i]);
}

/* max|got - ref| / max|ref| */
static inline double rel_err(const double *got, const double *ref, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        e = isnan(d) ? INFINITY : fmax(e, d);
        m = fmax(m, fabs(ref[i]));
    }
    return m > 0 ? e / m : e;
}

/* every output (named outs) and input grad (d<ins>) of got within tol of
 * ref's, relative to its max-abs; those ref lacks are skipped. Prints one
 * line; returns the worst error. */
static inline double assert_runs_close(const char *what, const char *const *outs, int n_out, const char *const *ins,
                                       int n_in, const run_out *got, const run_out *ref, double tol)
{
    double worst = 0;
    char line[768] = "";
    for (int i = 0; i < n_out + n_in; i++) {
        const bool is_out = i < n_out;
        const int j = is_out ? i : i - n_out;
        const double *g = is_out ? got->out[j] : got->d[j], *r = is_out ? ref->out[j] : ref->d[j];
        const char *nm = is_out ? outs[j] : ins[j], *pre = is_out ? "" : "d";
        if (!r) continue;
        assert_non_null(g);
        const double e = rel_err(g, r, is_out ? ref->n_out[j] : ref->n[j]);
        snprintf(line + strlen(line), sizeof line - strlen(line), " %s%s %.1e", pre, nm, e);
        if (!(e <= tol)) fail_msg("%s: %s%s rel_err %.3g > %.1g", what, pre, nm, e, tol);
        worst = fmax(worst, e);
    }
    fprintf(stderr, "  %s:%s\n", what, line);
    return worst;
}

/* the same for two tensors (any dtype, device) */
static inline double tensor_rel_err(const pr_tensor *got, const pr_tensor *ref)
{
    assert_non_null(got);
    assert_int_equal(got->numel, ref->numel);
    double *g = host(got, NULL), *r = host(ref, NULL), e = rel_err(g, r, ref->numel);
    free(g), free(r);
    return e;
}

static inline void assert_rel(const char *what, const pr_tensor *got, const pr_tensor *ref, double tol)
{
    double e = tensor_rel_err(got, ref);
    fprintf(stderr, "  %-28s rel_err %.2e\n", what, e);
    if (!(e <= tol)) fail_msg("%s: rel_err %.3g > %.1g", what, e, tol);
}

/* the ops2 file's tensor "<op>.<name>"; fails the test when absent */
static inline pr_tensor *ops2_ref(const pr_safetensors *st, const char *op, const char *name)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s", op, name);
    pr_tensor *t = pr_safetensors_get(st, full);
    if (!t) fail_msg("%s missing from %s", full, OPS2_FILE);
    return t;
}

/* the op on in (its inputs in the file's order), outputs into out */
typedef void (*ops2_apply_fn)(pr_ctx *ctx, const pr_safetensors *st, pr_tensor *const *in, pr_tensor **out);

/* op's golden case in the ops2 file, run in dt on the CPU: the file's inputs
 * ins, apply, then the backward seeded with the file's d<out> of every output;
 * every output and input grad (d<in>) must match the file's to 1e-10 in f64,
 * 1e-5 in f32, relative to its max-abs */
static inline void ops2_golden_case(const char *op, const char *const *ins, int n_in, const char *const *outs,
                                    int n_out, ops2_apply_fn apply, pr_dtype dt)
{
    const double tol = dt == PR_F64 ? 1e-10 : 1e-5;
    pr_arena *a = pr_arena_new("golden", 0);
    pr_safetensors st;
    pr_err err;
    if (pr_safetensors_read(OPS2_FILE, a, &st, &err) != 0) fail_msg("%s", err.msg);
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *in[MAXIN], *out[MAXOUT];
    const pr_tensor *g[MAXOUT];
    char name[48];
    for (int i = 0; i < n_in; i++) {
        in[i] = pr_to(ctx->step, ops2_ref(&st, op, ins[i]), dt, PR_CPU);
        pr_requires_grad_(in[i], true);
    }
    apply(ctx, &st, in, out);
    for (int i = 0; i < n_out; i++) {
        snprintf(name, sizeof name, "golden %s", outs[i]);
        assert_rel(name, out[i], ops2_ref(&st, op, outs[i]), tol);
        snprintf(name, sizeof name, "d%s", outs[i]);
        g[i] = pr_to(ctx->step, ops2_ref(&st, op, name), dt, PR_CPU);
    }
    pr_backward_many(ctx, n_out, out, g);
    for (int i = 0; i < n_in; i++) {
        snprintf(name, sizeof name, "d%s", ins[i]);
        assert_rel(name, in[i]->grad, ops2_ref(&st, op, name), tol);
    }
    pr_ctx_free(ctx);
    pr_arena_free(a);
}

static inline pr_tensor *cu_tensor(pr_ctx *ctx, const int64_t *cu, int64_t n, pr_device dev)
{
    pr_tensor *t = pr_zeros(ctx->step, PR_I64, PR_CPU, 1, &n);
    for (int64_t i = 0; i < n; i++) pr_set(t, i, (double)cu[i]);
    return dev == PR_CPU ? t : pr_to(ctx->step, t, PR_I64, dev);
}

#endif
