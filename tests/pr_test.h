/* tests/pr_test.h: what every cmocka test of prism shares.
 *
 * Debian 12's cmocka (1.1.5) has no assert_double_equal and no CMake target,
 * so comparisons of float arrays go through pr_assert_allclose, which prints
 * the first mismatches and the max error before failing. PR_EXPECT_FATAL runs
 * a statement that must hit pr_fatal and checks the message. */
#ifndef PR_TEST_H
#define PR_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ops/ops.h"

/* the reference vectors kept in the repository (tests/data/README.md) */
#define PR_TEST_DATA_DIR PRISM_SOURCE_DIR "/tests/data"

/* a suite's scratch folder /tmp/prism_<name>_<pid>: its path into root (n
 * bytes) and made; then removed with everything in it (cmocka's group
 * setup and teardown, which return 0 for success) */
static inline int pr_test_make_root(char *root, size_t n, const char *name)
{
    snprintf(root, n, "/tmp/prism_%s_%d", name, (int)getpid());
    return mkdir(root, 0755);
}
static inline int pr_test_remove_root(const char *root)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* the recurrence family's reference file */
static inline const char *pr_test_golden_path(void) { return PR_TEST_DATA_DIR "/recurrences.safetensors"; }
/* the per-key-decay rule's (gla) reference file */
static inline const char *pr_test_gla_golden_path(void) { return PR_TEST_DATA_DIR "/gla.safetensors"; }

/* |got - ref| <= atol + rtol * |ref| elementwise; returns the max abs error */
static inline double pr_check_allclose(const char *name, const double *got, const double *ref, int64_t n,
                                       double atol, double rtol, int *n_bad)
{
    double max_err = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs(got[i] - ref[i]);
        if (isnan(got[i]) != isnan(ref[i])) err = INFINITY;
        if (err > max_err) max_err = err;
        if (err > atol + rtol * fabs(ref[i]) || isnan(err)) {
            if (bad < 5)
                fprintf(stderr, "  %s[%lld]: got %.10g, expected %.10g (|diff| %.3g)\n", name, (long long)i,
                        got[i], ref[i], err);
            bad++;
        }
    }
    if (bad) fprintf(stderr, "  %s: %d of %lld elements off, max |diff| %.3g (atol %.1g, rtol %.1g)\n", name, bad,
                     (long long)n, max_err, atol, rtol);
    if (n_bad) *n_bad = bad;
    return max_err;
}

static inline void pr_assert_allclose(const char *name, const double *got, const double *ref, int64_t n,
                                      double atol, double rtol)
{
    int bad;
    pr_check_allclose(name, got, ref, n, atol, rtol, &bad);
    assert_int_equal(bad, 0);
}

/* two tensors of any dtype/device, same numel */
static inline void pr_assert_tensors_close(const char *name, const pr_tensor *got, const pr_tensor *ref,
                                           double atol, double rtol)
{
    assert_non_null(got);
    assert_non_null(ref);
    if (got->numel != ref->numel) fprintf(stderr, "  %s: %lld elements, expected %lld\n", name,
                                          (long long)got->numel, (long long)ref->numel);
    assert_int_equal(got->numel, ref->numel);
    double *g = malloc(sizeof(double) * (size_t)(got->numel + 1)), *r = malloc(sizeof(double) * (size_t)(ref->numel + 1));
    pr_to_host_f64(got, g);
    pr_to_host_f64(ref, r);
    int bad;
    pr_check_allclose(name, g, r, got->numel, atol, rtol, &bad);
    free(g);
    free(r);
    assert_int_equal(bad, 0);
}

/* catching pr_fatal */
static jmp_buf pr_test_jmp;
__attribute__((unused)) static void pr_test_on_fatal(const char *msg)
{
    (void)msg;
    longjmp(pr_test_jmp, 1);
}
/* run stmt; it must call pr_fatal with a message containing `needle` */
#define PR_EXPECT_FATAL(stmt, needle)                                                        \
    do {                                                                                     \
        pr_set_error_handler(pr_test_on_fatal);                                              \
        if (setjmp(pr_test_jmp) == 0) {                                                      \
            stmt;                                                                            \
            pr_set_error_handler(NULL);                                                      \
            fail_msg("expected a fatal error containing \"%s\"", needle);                    \
        }                                                                                    \
        pr_set_error_handler(NULL);                                                          \
        if (!strstr(pr_last_error(), needle))                                                \
            fail_msg("fatal error \"%s\" does not contain \"%s\"", pr_last_error(), needle); \
    } while (0)

/* gradcheck passes, with every element within 1e-6 */
static inline void pr_test_gradcheck_ok(pr_ctx *ctx, const char *what, const pr_example *ex)
{
    pr_gradcheck_result g = pr_gradcheck(ctx, what, ex, NULL);
    if (!g.ok) fprintf(stderr, "  %s\n", g.msg);
    assert_true(g.ok);
    assert_true(g.max_abs_err < 1e-6);
}

/* An op's example, checked three ways: float64 gradcheck (max error < 1e-6);
 * f32 against f64 on the same inputs, output and every input grad (atol
 * 1e-5 * tol_scale, rtol 1e-4); and the backward accumulates: the f64 grads
 * start at 0.5 and must end at 0.5 + the f32 grads. */
static inline void pr_test_op_example(pr_ctx *ctx, pr_op_id id, uint64_t seed)
{
    const pr_op_info *op = pr_op(id);
    pr_rng r = pr_rng_init(seed, 3);
    pr_example ex = {0};
    op->example(ctx, &r, PR_F64, &ex);
    pr_test_gradcheck_ok(ctx, op->name, &ex);

    /* a fresh tape, the same example, and its f32 copy (integer inputs stay) */
    pr_step_reset(ctx);
    r = pr_rng_init(seed, 3);
    ex = (pr_example){0};
    op->example(ctx, &r, PR_F64, &ex);
    pr_example ex32 = ex;
    for (int i = 0; i < ex.n_in; i++) {
        pr_tensor *t = ex.in[i];
        if (!t || !pr_dtype_is_float(t->dtype)) continue;
        ex32.in[i] = pr_to(ctx->step, t, PR_F32, PR_CPU);
        ex32.in[i]->requires_grad = t->requires_grad;
    }
    pr_rng rng0 = ctx->rng;
    pr_tensor *y64 = ex.apply(ctx, ex.in, &ex);
    ctx->rng = rng0;
    pr_tensor *y32 = ex32.apply(ctx, ex32.in, &ex32);
    assert_int_equal(y32->dtype, PR_F32);
    double tol = 1e-5 * (ex.tol_scale > 0 ? ex.tol_scale : 1);
    pr_assert_tensors_close(op->name, y32, y64, tol, 1e-4);
    pr_rng wr = pr_rng_init(11, 0);
    pr_tensor *w = pr_randn(ctx->step, PR_F64, PR_CPU, y64->ndim, y64->shape, &wr);
    for (int i = 0; i < ex.n_in; i++)
        if (ex.in[i] && ex.in[i]->requires_grad) pr_fill_(pr_grad_of(ctx, ex.in[i]), 0.5);
    pr_backward_with(ctx, y32, w);
    pr_backward_with(ctx, y64, w);
    for (int i = 0; i < ex.n_in; i++) {
        if (!ex.in[i] || !ex.in[i]->requires_grad) continue;
        int64_t n = ex.in[i]->numel;
        double *g32 = malloc(sizeof(double) * (size_t)n), *g64 = malloc(sizeof(double) * (size_t)n);
        assert_non_null(ex32.in[i]->grad);
        pr_to_host_f64(ex32.in[i]->grad, g32);
        pr_to_host_f64(ex.in[i]->grad, g64);
        for (int64_t j = 0; j < n; j++) g64[j] -= 0.5;
        pr_assert_allclose(op->name, g32, g64, n, tol, 1e-4);
        free(g32);
        free(g64);
    }
    pr_step_reset(ctx);
}

/* ctest's "skipped" exit status: CMakeLists.txt gives the CUDA tests
 * SKIP_RETURN_CODE 77, so a machine without a GPU reports them as skipped */
/* the loss of every logged training step of a run (not eval lines), from
 * DIR/metrics.jsonl, into loss[0..max); returns how many */
static inline int pr_test_read_losses(const char *dir, double *loss, int max)
{
    char path[300], line[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        const char *l = strstr(line, "\"loss\":");
        if (l && !strstr(line, "\"eval\"")) loss[n++] = strtod(l + 7, NULL);
    }
    fclose(f);
    return n;
}

#define PR_TEST_SKIP_CODE 77

/* The first line of a CUDA test binary's main: with no usable GPU (or a
 * build without CUDA) the whole binary exits with the skip code, so it can
 * never be reported as passed on a machine that ran none of its cases.
 * Otherwise the kernels run with shared memory poisoned
 * (pr_cuda_poison_shared): NaN in every SM's shared memory before each
 * kernel with dynamic shared memory, so that one reading what it never wrote
 * fails here (tensor/cuda.h, pr_cuda_smem_prep). */
#define PR_EXIT_SKIPPED_WITHOUT_CUDA()                                                       \
    do {                                                                                     \
        if (!pr_cuda_available()) {                                                          \
            fprintf(stderr, "skipped: no CUDA device (or built without CUDA)\n");             \
            return PR_TEST_SKIP_CODE;                                                        \
        }                                                                                    \
        pr_cuda_poison_shared(true);                                                         \
    } while (0)

/* cmocka returns the number of failed cases; any failure exits 1, so a count
 * of 77 cannot pass for the skip code */
static inline int pr_test_exit_status(int n_failed) { return n_failed ? 1 : 0; }

/* CUDA test cases call this first: skips with a message when no GPU is present */
#define PR_SKIP_WITHOUT_CUDA()                                                 \
    do {                                                                       \
        if (!pr_cuda_available()) {                                            \
            fprintf(stderr, "  skipped: no CUDA device (or built without CUDA)\n"); \
            skip();                                                            \
        }                                                                      \
    } while (0)

#endif
