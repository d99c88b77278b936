/* tests/test_ttt_ops2_util.h: what the CPU and CUDA tests of ttt_mlp and
 * titans share: a table describing each op (its input and output names as in
 * tests/data/ops2.safetensors and a call of its public function), one run
 * of it and the comparison of two runs. */
#ifndef PR_TEST_TTT_OPS2_UTIL_H
#define PR_TEST_TTT_OPS2_UTIL_H

#include "tests/test_ops2_util.h"

typedef struct {
    const char *name;
    int n_in, n_out;
    const char *in_names[MAXIN], *out_names[MAXOUT];
    /* the op on in (optional inputs may be NULL), outputs into out */
    void (*apply)(pr_ctx *ctx, int mb, double eps, pr_tensor *const *in, pr_tensor **out);
} op2_desc;

static inline void ttt_mlp_apply(pr_ctx *ctx, int mb, double eps, pr_tensor *const *in, pr_tensor **out)
{
    const pr_ttt_opts o = {.mini_batch = mb, .eps = eps};
    out[0] = pr_ttt_mlp(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1],
                        &out[2], &out[3], &out[4]);
}

static inline void titans_apply(pr_ctx *ctx, int mb, double eps, pr_tensor *const *in, pr_tensor **out)
{
    const pr_titans_opts o = {.chunk = mb, .eps = eps};
    out[0] = pr_titans(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], &out[1], &out[2]);
}

static const op2_desc ttt_mlp_desc = {"ttt_mlp", 10, 5,
                                      {"q", "k", "v", "w", "b", "eta", "w1_0", "b1_0", "w2_0", "b2_0"},
                                      {"o", "w1_t", "b1_t", "w2_t", "b2_t"}, ttt_mlp_apply};
static const op2_desc titans_desc = {"titans", 10, 3,
                                     {"q", "k", "v", "w", "b", "theta", "alpha", "eta", "h0", "s0"},
                                     {"o", "ht", "st"}, titans_apply};

/* forward of copies of src (any dtype, CPU) in dt on dev; with g (upstream
 * grads per output, CPU), the backward of sum_i sum(out_i * g_i); host copies */
static inline run_out run_op(pr_ctx *ctx, const op2_desc *op, int mb, double eps, pr_tensor *const *src,
                             pr_tensor *const *g, pr_dtype dt, pr_device dev)
{
    pr_tensor *in[MAXIN] = {0}, *out[MAXOUT] = {0};
    for (int i = 0; i < op->n_in; i++)
        if (src[i]) {
            in[i] = pr_to(ctx->step, src[i], dt, dev);
            pr_requires_grad_(in[i], g != NULL);
        }
    op->apply(ctx, mb, eps, in, out);
    run_out r = {0};
    if (g) {
        pr_tensor *loss = NULL;
        for (int i = 0; i < op->n_out; i++) {
            pr_tensor *term = pr_sum_all(ctx, pr_mul(ctx, out[i], pr_to(ctx->step, g[i], dt, dev)));
            loss = loss ? pr_add(ctx, loss, term) : term;
        }
        pr_backward(ctx, loss);
        for (int i = 0; i < op->n_in; i++)
            if (in[i]) r.d[i] = host(in[i]->grad, &r.n[i]);
    }
    for (int i = 0; i < op->n_out; i++) r.out[i] = host(out[i], &r.n_out[i]);
    return r;
}

/* the dtype of ttt_mlp's input i on bf16 data (ops/ttt_mlp.h) */
static inline pr_dtype mlp_bf16_dtype(int i) { return i <= 2 || i == 5 ? PR_BF16 : PR_F32; }

/* ttt_mlp on bf16 data: src (f64, CPU) rounded to each input's dtype on bf16
 * data, run on dev in those dtypes, or (as_f64) in f64 on the CPU: the
 * reference on the same values; the backward of sum_i sum(out_i * g_i) in one
 * pass (pr_backward_many), g rounded to each output's dtype. Checks every
 * output's and grad's dtype; host copies. */
static inline run_out run_mlp_bf16(pr_ctx *ctx, int mb, double eps, pr_tensor *const *src, pr_tensor *const *g,
                                   pr_device dev, bool as_f64)
{
    const op2_desc *op = &ttt_mlp_desc;
    pr_tensor *in[MAXIN] = {0}, *out[MAXOUT] = {0};
    const pr_tensor *seeds[MAXOUT];
    for (int i = 0; i < op->n_in; i++)
        if (src[i]) {
            pr_tensor *lo = pr_to(ctx->step, src[i], mlp_bf16_dtype(i), PR_CPU);
            in[i] = pr_to(ctx->step, lo, as_f64 ? PR_F64 : lo->dtype, dev);
            pr_requires_grad_(in[i], true);
        }
    op->apply(ctx, mb, eps, in, out);
    for (int i = 0; i < op->n_out; i++)
        seeds[i] = pr_to(ctx->step, pr_to(ctx->step, g[i], i ? PR_F32 : PR_BF16, PR_CPU), PR_F64, PR_CPU);
    pr_backward_many(ctx, op->n_out, out, seeds);
    run_out r = {0};
    for (int i = 0; i < op->n_out; i++) {
        if (!as_f64) assert_int_equal(out[i]->dtype, i ? PR_F32 : PR_BF16);
        r.out[i] = host(out[i], &r.n_out[i]);
    }
    for (int i = 0; i < op->n_in; i++)
        if (in[i]) {
            assert_int_equal(in[i]->grad->dtype, in[i]->dtype);
            r.d[i] = host(in[i]->grad, &r.n[i]);
        }
    return r;
}

/* got against the f64 reference on bf16 data: each output and grad within
 * its one rounding (bf16 2^-8 of max|ref|, f32 2^-24) plus extra */
static inline void compare_bf16(const char *what, const run_out *got, const run_out *want, double extra)
{
    const op2_desc *op = &ttt_mlp_desc;
    for (int i = 0; i < op->n_out + op->n_in; i++) {
        const bool is_out = i < op->n_out;
        const int j = is_out ? i : i - op->n_out;
        const double *gv = is_out ? got->out[j] : got->d[j], *wv = is_out ? want->out[j] : want->d[j];
        if (!wv) continue;
        const bool bf = is_out ? j == 0 : mlp_bf16_dtype(j) == PR_BF16;
        const double e = rel_err(gv, wv, is_out ? want->n_out[j] : want->n[j]), tol = (bf ? 0x1p-8 : 0x1p-24) + extra;
        fprintf(stderr, "  %s %s%s rel_err %.2e\n", what, is_out ? "" : "d", is_out ? op->out_names[j] : op->in_names[j], e);
        if (!(e <= tol)) fail_msg("%s: %s%s rel_err %.3g > %.3g", what, is_out ? "" : "d",
                                  is_out ? op->out_names[j] : op->in_names[j], e, tol);
    }
}

/* random f64 inputs at B, T, H, d and hidden N (ttt_mlp; titans ignores it),
 * in the examples' ranges */
static inline void random_inputs(pr_ctx *ctx, const op2_desc *op, uint64_t seed, int B, int T, int H, int d, int N,
                                 pr_tensor **in)
{
    pr_rng r = pr_rng_init(seed, 0);
    const bool ti = op == &titans_desc;
    for (int i = 0; i < op->n_in; i++) {
        int64_t sh[4] = {B, T, H, d};
        int nd = 4;
        if (i == 3 || i == 4) nd = 2, sh[0] = H, sh[1] = d;
        else if (i >= 5 && i < (ti ? 8 : 6)) sh[3] = 1;
        else if (i >= 6) {
            const int64_t rows_of[4] = {d, 1, N, 1}, cols_of[4] = {N, N, d, d};
            sh[1] = H, sh[2] = ti ? d : rows_of[i - 6], sh[3] = ti ? d : cols_of[i - 6];
        }
        const double lo = i == 3 ? 0.5 : i == 5 || (ti && i < 8 && i > 5) ? 0.05 : -0.5;
        in[i] = pr_randu(ctx->step, PR_F64, PR_CPU, nd, sh, &r, lo, i == 3 ? 1.5 : i >= 5 && i < 8 ? 0.4 : 0.5);
    }
}

/* every output and input grad of got within tol of ref (test_ops2_util.h) */
static inline double compare_runs(const char *what, const op2_desc *op, const run_out *got, const run_out *ref,
                                  double tol)
{
    return assert_runs_close(what, op->out_names, op->n_out, op->in_names, op->n_in, got, ref, tol);
}

/* the file's inputs, upstream grads and expected results for op: runs the
 * op in dt on dev and compares everything within tol */
static inline void golden_case(const op2_desc *op, pr_dtype dt, pr_device dev, double tol)
{
    pr_arena *a = pr_arena_new("golden", 0);
    pr_safetensors st;
    pr_err err;
    if (pr_safetensors_read(OPS2_FILE, a, &st, &err) != 0) fail_msg("%s", err.msg);
    pr_ctx *ctx = pr_ctx_new(0);
    char name[64];
#define REF(x) (snprintf(name, sizeof name, "%s.%s", op->name, x), pr_safetensors_get(&st, name))
    pr_tensor *in[MAXIN] = {0}, *g[MAXOUT] = {0};
    run_out ref = {0};
    for (int i = 0; i < op->n_in; i++) {
        if (!(in[i] = REF(op->in_names[i]))) fail_msg("golden: %s missing", name);
        char dn[32];
        snprintf(dn, sizeof dn, "d%s", op->in_names[i]);
        if (!REF(dn)) fail_msg("golden: %s missing", name);
        ref.d[i] = host(REF(dn), &ref.n[i]);
    }
    for (int i = 0; i < op->n_out; i++) {
        char dn[32];
        snprintf(dn, sizeof dn, "d%s", op->out_names[i]);
        if (!(g[i] = REF(dn))) fail_msg("golden: %s missing", name);
        ref.out[i] = host(REF(op->out_names[i]), &ref.n_out[i]);
    }
    pr_tensor *mb = REF(op == &titans_desc ? "chunk" : "mini_batch");
    assert_non_null(mb);
    run_out got = run_op(ctx, op, (int)pr_item(mb), pr_item(REF("eps")), in, g, dt, dev);
#undef REF
    char what[64];
    snprintf(what, sizeof what, "golden %s %s %s", op->name, pr_dtype_name(dt), dev == PR_CPU ? "cpu" : "cuda");
    compare_runs(what, op, &got, &ref, tol);
    run_out_free(&got), run_out_free(&ref);
    pr_ctx_free(ctx);
    pr_arena_free(a);
}

#endif
