/* tests/test_cuda_ops2_util.h: running a fused op on the CPU (f64) and on
 * CUDA (f32, fp32 or TF32 math) from the same inputs, and comparing every
 * output and input gradient; shared by the attention and selective-scan
 * CUDA tests. */
#ifndef PR_TEST_CUDA_OPS2_UTIL_H
#define PR_TEST_CUDA_OPS2_UTIL_H

#include "tests/test_ops2_util.h"

#define MAXT 12

/* the op under test: fills outs[0..n_out) from in (cu on the inputs' device) */
typedef void (*op_fn)(pr_ctx *ctx, pr_tensor *const *in, pr_tensor *cu, pr_tensor **outs);

typedef struct {
    int n;                 /* outputs then input grads */
    double *v[MAXT];
    int64_t len[MAXT];
} host_run;

static inline void host_run_free(host_run *r)
{
    for (int i = 0; i < r->n; i++) free(r->v[i]);
}

/* copies of src (f64, CPU; NULL entries stay NULL) in dt on dev; forward;
 * the backward seeded with g (one per output); host copies of the outputs and
 * of the grads of the inputs */
static inline host_run run_on(pr_ctx *ctx, op_fn fn, int n_in, pr_tensor *const *src, const int64_t *cu, int n_cu,
                              int n_out, pr_tensor *const *g, pr_dtype dt, pr_device dev, int tf32)
{
    pr_tensor *in[MAXT] = {0}, *outs[MAXT] = {0};
    for (int i = 0; i < n_in; i++)
        if (src[i]) {
            in[i] = pr_to(ctx->step, src[i], dt, dev);
            pr_requires_grad_(in[i], true);
        }
    ctx->matmul_tf32 = tf32;
    fn(ctx, in, cu ? cu_tensor(ctx, cu, n_cu, dev) : NULL, outs);
    const pr_tensor *gs[MAXT];
    for (int i = 0; i < n_out; i++) gs[i] = pr_to(ctx->step, g[i], dt, dev);
    pr_backward_many(ctx, n_out, outs, gs);
    host_run r = {0};
    for (int i = 0; i < n_out; i++) r.v[r.n] = host(outs[i], &r.len[r.n]), r.n++;
    for (int i = 0; i < n_in; i++)
        if (in[i]) r.v[r.n] = host(in[i]->grad, &r.len[r.n]), r.n++;
    ctx->matmul_tf32 = 0;
    return r;
}

/* every tensor of got within tol of ref (max|diff| / max|ref|); names label them */
static inline void compare_runs(const char *what, const host_run *got, const host_run *ref, const char *const *names,
                                double tol)
{
    assert_int_equal(got->n, ref->n);
    char line[512] = "";
    for (int i = 0; i < ref->n; i++) {
        assert_int_equal(got->len[i], ref->len[i]);
        const double e = rel_err(got->v[i], ref->v[i], ref->len[i]);
        snprintf(line + strlen(line), sizeof line - strlen(line), " %s %.1e", names[i], e);
        if (!(e <= tol)) fail_msg("%s: %s rel_err %.3g > %.1g", what, names[i], e, tol);
    }
    fprintf(stderr, "  %s:%s\n", what, line);
}

static inline void assert_bitwise(const char *what, const host_run *a, const host_run *b)
{
    for (int i = 0; i < a->n; i++)
        if (memcmp(a->v[i], b->v[i], sizeof(double) * (size_t)a->len[i]))
            fail_msg("%s: tensor %d differs between two CUDA runs", what, i);
}

#endif
