/* tests/test_ttt_util.h: what the CPU and CUDA TTT-Linear tests share: host
 * copies of one run's outputs and input grads, and their comparison. */
#ifndef PR_TEST_TTT_UTIL_H
#define PR_TEST_TTT_UTIL_H

#include "tests/pr_test.h"
#include "ops/ttt_linear.h"

enum { NIN = 8 };
static const char *const in_names[NIN] = {"q", "k", "v", "w", "b", "eta", "h0", "hb0"};

/* host copies of one run: outputs o, ht, hbt and the input grads */
typedef struct {
    double *out[3], *d[NIN];
    int64_t n_out[3], n[NIN];
} run_out;

static inline double *host(const pr_tensor *t, int64_t *n)
{
    double *p = malloc(sizeof(double) * (size_t)(t->numel + 1));
    pr_to_host_f64(t, p);
    if (n) *n = t->numel;
    return p;
}

static inline void run_out_free(run_out *r)
{
    for (int i = 0; i < 3; i++) free(r->out[i]);
    for (int i = 0; i < NIN; i++) free(r->d[i]);
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

#endif
