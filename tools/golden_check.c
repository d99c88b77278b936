/* tools/golden_check.c: `prism golden-check`, the recurrences against a
 * reference file of the golden format (../shared/golden/README.md).
 *
 * Every rule present in the file (whatever its sizes: B, T, H, K, V, L and
 * TTT's mini-batch are read off the shapes) runs forward and backward, the
 * backward seeded with `do` and `dht` (the scalar sum(o*do) + sum(ht*dht)),
 * and every output, final state and gradient is compared with the file's.
 * The error of a tensor is max|got - ref| / max|ref|; a rule's is the worst
 * of its tensors over the forms run.
 */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "ops/recurrence/recurrence.h"
#include "ops/ttt_linear.h"
#include "tools/golden_ops2.h"
#include "tools/tools.h"

typedef struct {
    pr_device dev;
    pr_dtype dt;
    int forms;       /* bit 0: per-token form, bit 1: chunked form */
    int chunk;
    double tol;      /* 0: the default for the device and dtype */
    bool verbose;
    bool tf32;       /* CUDA: ctx->matmul_tf32 = 1 */
} gc_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: prism golden-check FILE [options]\n"
            "Runs every recurrence rule and ops2 op (tools/golden_ops2.h) of a reference file\n"
            "(golden format: <rule>.<tensor>, float64) forward and backward, seeded with the\n"
            "file's upstream gradients (do, dht, ...), and compares the outputs,\n"
            "final states and gradients. Prints '<rule> ok|FAIL max_rel_err=<e>' per rule\n"
            "(error relative to the reference tensor's max-abs), then 'N passed, M failed'.\n"
            "Exit status 1 on any failure or an unreadable file.\n"
            "options:\n"
            "  --device cpu|cuda     where to run (default cpu)\n"
            "  --dtype f64|f32       compute dtype (default f64 on the CPU, f32 on CUDA)\n"
            "  --form recurrent|chunked|both   which form of the linear rules (default both)\n"
            "  --chunk C             chunk size of the chunked form (default 64)\n"
            "  --tf32                CUDA: allow TF32 tensor cores (ctx->matmul_tf32 = 1)\n"
            "  --tol E               tolerance (default 1e-9 f64, 1e-4 f32; 2e-3 with --tf32)\n"
            "  --verbose             print every tensor's error\n"
            "  --make OUT            write a reference file of the five linear rules, computed by\n"
            "                        the CPU per-token form in f64 (for other sizes; no ttt_linear)\n"
            "  --size B,T,H,K,V,L    its sizes (default 2,131,2,12,7,3)\n"
            "  -h, --help            this text\n");
}

/* ---- errors inside one rule become that rule's FAIL ------------------------------- */

static jmp_buf gc_jmp;
static void gc_on_fatal(const char *msg)
{
    (void)msg;
    longjmp(gc_jmp, 1);
}

/* ---- comparison ----------------------------------------------------------------------- */

static double max_abs(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* relative error of got against ref (max-abs scaled); inf on a size mismatch or NaN */
static double rel_err(const pr_tensor *got, const pr_tensor *ref)
{
    if (!got || got->numel != ref->numel) return INFINITY;
    const int64_t n = ref->numel;
    double *g = malloc(sizeof(double) * (size_t)(n + 1)), *r = malloc(sizeof(double) * (size_t)(n + 1));
    PR_CHECK(g && r, "golden-check: out of host memory");
    pr_to_host_f64(got, g);
    pr_to_host_f64(ref, r);
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs(g[i] - r[i]);
        e = isnan(d) ? INFINITY : fmax(e, d);
    }
    const double m = max_abs(r, n);
    free(g);
    free(r);
    return m > 0 ? e / m : e;
}

typedef struct {
    const pr_safetensors *st;
    const char *rule;
    pr_ctx *ctx;
    const gc_opts *o;
    const char *form;   /* for --verbose */
    double worst;
} gc_run;

static pr_tensor *ref(const gc_run *g, const char *name)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", g->rule, name);
    return pr_safetensors_get(g->st, full);
}

/* an input of the file on the run's device and dtype, requiring grad; NULL if absent */
static pr_tensor *input(const gc_run *g, const char *name)
{
    pr_tensor *t = ref(g, name);
    if (!t) return NULL;
    pr_tensor *x = pr_to(g->ctx->step, t, g->o->dt, g->o->dev);
    pr_requires_grad_(x, true);
    return x;
}

static double scalar(const gc_run *g, const char *name, double dflt)
{
    pr_tensor *t = ref(g, name);
    return t ? pr_item(t) : dflt;
}

static void compare(gc_run *g, const char *name, const pr_tensor *got)
{
    pr_tensor *r = ref(g, name);
    if (!r) return;   /* the file does not check this one */
    const double e = rel_err(got, r);
    if (g->o->verbose) printf("  %s %-8s %-6s rel_err=%.3g\n", g->rule, g->form, name, e);
    g->worst = isnan(e) ? INFINITY : fmax(g->worst, e);
}

/* sum(out * <the file's upstream gradient `name`>) on the tape; the backward
 * of a sum of these is seeded with exactly those gradients */
static pr_tensor *dot_loss(const gc_run *g, pr_tensor *out, const char *name)
{
    pr_tensor *r = ref(g, name);
    PR_CHECK(r, "golden-check: %s.%s missing", g->rule, name);
    return pr_sum_all(g->ctx, pr_mul(g->ctx, out, pr_to(g->ctx->step, r, g->o->dt, g->o->dev)));
}

/* compare the grads of the inputs present with the file's d<name> */
static void compare_grads(gc_run *g, pr_tensor *const *in, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        char dn[16];
        snprintf(dn, sizeof dn, "d%s", names[i]);
        compare(g, dn, in[i]->grad);
    }
}

/* ---- the linear rules -------------------------------------------------------------------- */

static void run_linear(gc_run *g, int chunk)
{
    static const char *names[] = {"q", "k", "v", "g", "beta", "kx", "vx", "h0"};
    pr_tensor *in[8];
    for (int i = 0; i < 8; i++) in[i] = input(g, names[i]);
    pr_recurrence_opts opt = {.rule = (pr_rule)pr_rule_from_name(g->rule), .chunk = chunk,
                              .scale = scalar(g, "scale", 0)};
    pr_tensor *ht, *o = pr_recurrence(g->ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, &ht);
    compare(g, "o", o);
    compare(g, "ht", ht);
    pr_backward(g->ctx, pr_add(g->ctx, dot_loss(g, o, "do"), dot_loss(g, ht, "dht")));
    compare_grads(g, in, names, 8);
}

/* ---- TTT-Linear (ops/ttt_linear.h) -------------------------------------------------------- */

static void run_ttt(gc_run *g)
{
    static const char *names[] = {"q", "k", "v", "w", "b", "eta", "h0", "hb0"};
    pr_tensor *in[8];
    for (int i = 0; i < 8; i++) in[i] = input(g, names[i]);
    pr_ttt_opts opt = {.scale = scalar(g, "scale", 0), .mini_batch = (int)scalar(g, "mini_batch", 16),
                       .eps = scalar(g, "eps", 1e-6)};
    pr_tensor *ht, *hbt;
    pr_tensor *o = pr_ttt_linear(g->ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], &ht, &hbt);
    compare(g, "o", o);
    compare(g, "ht", ht);
    compare(g, "hbt", hbt);
    pr_tensor *loss = pr_add(g->ctx, dot_loss(g, o, "do"), dot_loss(g, ht, "dht"));
    pr_backward(g->ctx, pr_add(g->ctx, loss, dot_loss(g, hbt, "dhbt")));
    compare_grads(g, in, names, 8);
}

/* one rule, every form asked for; returns its worst error (inf on a fatal error) */
static double check_rule(const pr_safetensors *st, const char *rule, pr_ctx *ctx, const gc_opts *o, char *why,
                         size_t why_n)
{
    gc_run g = {.st = st, .rule = rule, .ctx = ctx, .o = o, .worst = 0};
    why[0] = 0;
    pr_set_error_handler(gc_on_fatal);
    if (setjmp(gc_jmp) == 0) {
        if (!strcmp(rule, "ttt_linear")) {
            g.form = "dual";
            run_ttt(&g);
        } else {
            for (int f = 0; f < 2; f++) {
                if (!(o->forms & (1 << f))) continue;
                g.form = f ? "chunked" : "token";
                run_linear(&g, f ? o->chunk : 0);
                pr_step_reset(ctx);
            }
        }
    } else {
        snprintf(why, why_n, "%s", pr_last_error());
        g.worst = INFINITY;
    }
    pr_set_error_handler(NULL);
    pr_step_reset(ctx);
    return g.worst;
}

static int golden_check(const char *path, const gc_opts *o)
{
    pr_arena *a = pr_arena_new("golden", 0);
    pr_safetensors st;
    pr_err err;
    if (pr_safetensors_read(path, a, &st, &err) != 0) {
        fprintf(stderr, "prism golden-check: %s\n", err.msg);
        pr_arena_free(a);
        return 1;
    }
    static const char *rules[] = {"linattn", "ssd", "delta", "gdn", "prism_core", "ttt_linear"};
    const double tol = o->tol > 0 ? o->tol : o->dt == PR_F64 ? 1e-9 : o->tf32 ? 2e-3 : 1e-4;
    pr_ctx *ctx = pr_ctx_new(0);
    ctx->matmul_tf32 = o->tf32;
    int passed = 0, failed = 0;
    for (size_t r = 0; r < sizeof rules / sizeof *rules; r++) {
        char qn[64], why[512];
        snprintf(qn, sizeof qn, "%s.q", rules[r]);
        if (!pr_safetensors_get(&st, qn)) continue;
        const double e = check_rule(&st, rules[r], ctx, o, why, sizeof why);
        const bool ok = e <= tol;
        printf("%s %s max_rel_err=%.3g%s%s\n", rules[r], ok ? "ok" : "FAIL", e, why[0] ? "  " : "", why);
        ok ? passed++ : failed++;
    }
    golden_check_ops2(&st, &(golden_ops2_opts){o->dev, o->dt, o->tf32, o->verbose, tol}, &passed, &failed);
    pr_ctx_free(ctx);
    pr_arena_free(a);
    if (passed + failed == 0) fprintf(stderr, "prism golden-check: %s holds no known rule (<rule>.q)\n", path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed || passed == 0 ? 1 : 0;
}

/* ---- --make: a reference file of any size from the CPU per-token form ------------------------ */

static int make_reference(const char *path, const int64_t *sz)
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
        pr_tensor *in[8] = {ri.q, ri.k, ri.v, ri.g, ri.beta, ri.kx, ri.vx, ri.h0};
        static const char *in_names[8] = {"q", "k", "v", "g", "beta", "kx", "vx", "h0"};
        pr_recurrence_opts opt = {.rule = (pr_rule)r};
        pr_tensor *ht, *o = pr_recurrence(ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, &ht);
        pr_tensor *dout = pr_randn(ctx->step, PR_F64, PR_CPU, o->ndim, o->shape, &rng);
        pr_tensor *dht = pr_randn(ctx->step, PR_F64, PR_CPU, ht->ndim, ht->shape, &rng);
        pr_backward(ctx, pr_add(ctx, pr_sum_all(ctx, pr_mul(ctx, o, dout)), pr_sum_all(ctx, pr_mul(ctx, ht, dht))));
        pr_tensor *scale = pr_full(ctx->step, PR_F64, PR_CPU, PR_DIMS(1), 1.0 / sqrt((double)K));
        for (int i = 0; i < 8; i++)
            if (in[i]) ADD(rn, in_names[i], in[i]);
        ADD(rn, "o", o), ADD(rn, "ht", ht), ADD(rn, "do", dout), ADD(rn, "dht", dht), ADD(rn, "scale", scale);
        for (int i = 0; i < 8; i++) {
            if (!in[i]) continue;
            char dn[16];
            snprintf(dn, sizeof dn, "d%s", in_names[i]);
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
    else printf("wrote %s (%d tensors, %s)\n", path, n, shape);
    pr_ctx_free(ctx);
    return rc ? 1 : 0;
}

/* ---- the subcommand -------------------------------------------------------------------------- */

int pr_cmd_golden_check(int argc, char **argv)
{
    gc_opts o = {.dev = PR_CPU, .dt = PR_F64, .forms = 3, .chunk = 64};
    bool dtype_given = false;
    const char *path = NULL, *make = NULL;
    int64_t size[6] = {2, 131, 2, 12, 7, 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (pr_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--verbose")) {
            o.verbose = true;
        } else if (!strcmp(a, "--tf32")) {
            o.tf32 = true;
        } else if (!strcmp(a, "--device") && val) {
            i++;
            if (!strcmp(val, "cpu")) o.dev = PR_CPU;
            else if (!strcmp(val, "cuda")) o.dev = PR_CUDA;
            else return fprintf(stderr, "prism golden-check: --device must be cpu or cuda, not %s\n", val), 2;
        } else if (!strcmp(a, "--dtype") && val) {
            i++;
            if (!strcmp(val, "f64")) o.dt = PR_F64;
            else if (!strcmp(val, "f32")) o.dt = PR_F32;
            else return fprintf(stderr, "prism golden-check: --dtype must be f64 or f32, not %s\n", val), 2;
            dtype_given = true;
        } else if (!strcmp(a, "--form") && val) {
            i++;
            o.forms = !strcmp(val, "recurrent") ? 1 : !strcmp(val, "chunked") ? 2 : !strcmp(val, "both") ? 3 : 0;
            if (!o.forms)
                return fprintf(stderr, "prism golden-check: --form must be recurrent, chunked or both\n"), 2;
        } else if (!strcmp(a, "--chunk") && val) {
            o.chunk = atoi(argv[++i]);
            if (o.chunk <= 0) return fprintf(stderr, "prism golden-check: --chunk must be > 0\n"), 2;
        } else if (!strcmp(a, "--make") && val) {
            make = argv[++i];
        } else if (!strcmp(a, "--size") && val) {
            long long x[6];
            if (sscanf(argv[++i], "%lld,%lld,%lld,%lld,%lld,%lld", &x[0], &x[1], &x[2], &x[3], &x[4], &x[5]) != 6 ||
                x[0] < 1 || x[1] < 1 || x[2] < 1 || x[3] < 1 || x[4] < 1 || x[5] < 0)
                return fprintf(stderr, "prism golden-check: --size wants B,T,H,K,V,L (L >= 0, others >= 1)\n"), 2;
            for (int j = 0; j < 6; j++) size[j] = x[j];
        } else if (!strcmp(a, "--tol") && val) {
            o.tol = atof(argv[++i]);
        } else if (a[0] == '-') {
            fprintf(stderr, "prism golden-check: unknown or incomplete option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "prism golden-check: one FILE only (got %s and %s)\n", path, a);
            return 2;
        }
    }
    if (o.dev == PR_CUDA && !dtype_given) o.dt = PR_F32; /* the GPU computes in f32 */
    if (o.dev == PR_CUDA && !pr_cuda_available()) {
        fprintf(stderr, "prism golden-check: --device cuda, but no CUDA device (or built without CUDA)\n");
        return 77; /* "skipped" to ctest (SKIP_RETURN_CODE), a failure to a shell */
    }
    if (make) return make_reference(make, size);
    if (!path) {
        usage(stderr);
        return 2;
    }
    return golden_check(path, &o);
}
