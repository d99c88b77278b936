/* tests/test_recurrence_util.h: what the recurrence tests share: one run of
 * pr_recurrence forward and backward (seeded with given upstream gradients)
 * copied to host doubles, and comparisons relative to the reference's max-abs. */
#ifndef PR_TEST_RECURRENCE_UTIL_H
#define PR_TEST_RECURRENCE_UTIL_H

#include "tests/pr_test.h"
#include "ops/recurrence/recurrence.h"

enum { REC_NIN = PR_REC_NIN };   /* q k v g beta kx vx h0, the node's order */
#define rec_in_names(i) pr_rec_input_name((pr_rec_input)(i))

static inline void rec_in_array(const pr_recurrence_inputs *in, pr_tensor **out)
{
    pr_tensor *x[REC_NIN] = {in->q, in->k, in->v, in->g, in->beta, in->kx, in->vx, in->h0};
    memcpy(out, x, sizeof x);
}

/* host copies of a run's outputs and input gradients (and the outputs' dtypes) */
typedef struct {
    double *o, *ht, *d[REC_NIN];
    int64_t n_o, n_ht, n[REC_NIN];
    pr_dtype dt_o, dt_ht;
} rec_out;

static inline double *rec_host(const pr_tensor *t, int64_t *n)
{
    double *p = malloc(sizeof(double) * (size_t)(t->numel + 1));
    pr_to_host_f64(t, p);
    if (n) *n = t->numel;
    return p;
}

static inline void rec_out_free(rec_out *r)
{
    free(r->o);
    free(r->ht);
    for (int i = 0; i < REC_NIN; i++) free(r->d[i]);
    memset(r, 0, sizeof *r);
}

/* deterministic normal numbers, for upstream gradients */
static inline double *rec_randn(uint64_t seed, int64_t n)
{
    double *p = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) p[i] = pr_philox_normal(seed, 7, (uint64_t)i);
    return p;
}

/* a tensor of in's dtype holding host doubles */
static inline pr_tensor *rec_tensor_like(pr_ctx *ctx, const pr_tensor *like, int ndim, const int64_t *shape,
                                         const double *host)
{
    pr_tensor *t = pr_from_host(ctx->step, PR_F64, PR_CPU, ndim, shape, host);
    return like->dtype == PR_F64 ? t : pr_to(ctx->step, t, like->dtype, PR_CPU);
}

/* sum(x * w) for a host array w of x's size, on the tape */
static inline pr_tensor *rec_dot_loss(pr_ctx *ctx, pr_tensor *x, const double *w)
{
    return pr_sum_all(ctx, pr_mul(ctx, x, rec_tensor_like(ctx, x, x->ndim, x->shape, w)));
}

/* forward, then backward of sum(o*dout) + sum(ht*dht) (dht NULL: ht not in
 * the loss, so no gradient reaches it); returns host copies.
 * Input grads are cleared first, so one set of inputs serves many runs. */
static inline rec_out rec_run_opts(pr_ctx *ctx, const pr_recurrence_opts *opt, pr_tensor *const *in,
                                   pr_tensor *cu, const double *dout, const double *dht)
{
    for (int i = 0; i < REC_NIN; i++)
        if (in[i]) in[i]->grad = NULL;
    pr_tensor *ht, *o = pr_recurrence(ctx, opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], cu, &ht);
    pr_tensor *loss = rec_dot_loss(ctx, o, dout);
    pr_backward(ctx, dht ? pr_add(ctx, loss, rec_dot_loss(ctx, ht, dht)) : loss);
    rec_out r = {0};
    r.o = rec_host(o, &r.n_o);
    r.ht = rec_host(ht, &r.n_ht);
    for (int i = 0; i < REC_NIN; i++)
        if (in[i]) r.d[i] = rec_host(in[i]->grad, &r.n[i]);
    return r;
}

static inline rec_out rec_run(pr_ctx *ctx, pr_rule rule, int chunk, pr_tensor *const *in, pr_tensor *cu,
                              const double *dout, const double *dht)
{
    const pr_recurrence_opts opt = {.rule = rule, .chunk = chunk};
    return rec_run_opts(ctx, &opt, in, cu, dout, dht);
}

/* the same, seeded through pr_backward_many (the seeds are converted to the
 * outputs' dtype and device, so it runs on any device and dtype), adding into
 * the inputs' grads as they are (a second backward reads them back) */
static inline rec_out rec_run_seeded_adding(pr_ctx *ctx, const pr_recurrence_opts *opt, pr_tensor *const *in,
                                            pr_tensor *cu, const double *dout, const double *dht)
{
    pr_tensor *ht, *o = pr_recurrence(ctx, opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], cu, &ht);
    pr_tensor *outs[2] = {o, ht};
    const pr_tensor *seeds[2] = {pr_from_host(ctx->step, PR_F64, PR_CPU, o->ndim, o->shape, dout),
                                 pr_from_host(ctx->step, PR_F64, PR_CPU, ht->ndim, ht->shape, dht)};
    pr_backward_many(ctx, 2, outs, seeds);
    rec_out r = {0};
    r.o = rec_host(o, &r.n_o);
    r.ht = rec_host(ht, &r.n_ht);
    r.dt_o = o->dtype, r.dt_ht = ht->dtype;
    for (int i = 0; i < REC_NIN; i++)
        if (in[i]) r.d[i] = rec_host(in[i]->grad, &r.n[i]);
    return r;
}

/* ... into fresh grads */
static inline rec_out rec_run_seeded_opts(pr_ctx *ctx, const pr_recurrence_opts *opt, pr_tensor *const *in,
                                          pr_tensor *cu, const double *dout, const double *dht)
{
    for (int i = 0; i < REC_NIN; i++)
        if (in[i]) in[i]->grad = NULL;
    return rec_run_seeded_adding(ctx, opt, in, cu, dout, dht);
}

static inline rec_out rec_run_seeded(pr_ctx *ctx, pr_rule rule, int chunk, pr_tensor *const *in, pr_tensor *cu,
                                     const double *dout, const double *dht)
{
    const pr_recurrence_opts opt = {.rule = rule, .chunk = chunk};
    return rec_run_seeded_opts(ctx, &opt, in, cu, dout, dht);
}

/* max|got - ref| / max|ref| (absolute when ref is all zeros) */
static inline double rec_rel_err(const double *got, const double *ref, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs(got[i] - ref[i]);
        e = isnan(d) ? INFINITY : fmax(e, d);
        m = fmax(m, fabs(ref[i]));
    }
    return m > 0 ? e / m : e;
}

static inline void rec_assert_close(const char *what, const char *name, const double *got, const double *ref,
                                    int64_t n, double tol)
{
    const double e = rec_rel_err(got, ref, n);
    if (!(e <= tol)) fail_msg("%s: %s rel_err %.3g > %.1g", what, name, e, tol);
}

/* prints the relative error of every output and gradient of got against
 * ref on one line; returns the worst (a missing grad or NaN: infinity) */
static inline double rec_report(const char *what, const rec_out *got, const rec_out *ref)
{
    double worst = rec_rel_err(got->o, ref->o, ref->n_o);
    char line[512];
    int n = snprintf(line, sizeof line, "  %-34s o=%.1e", what, worst);
    const double eh = rec_rel_err(got->ht, ref->ht, ref->n_ht);
    n += snprintf(line + n, sizeof line - n, " ht=%.1e", eh);
    worst = fmax(worst, eh);
    for (int i = 0; i < REC_NIN; i++) {
        if (!ref->d[i]) continue;
        const double e = got->d[i] ? rec_rel_err(got->d[i], ref->d[i], ref->n[i]) : INFINITY;
        n += snprintf(line + n, sizeof line - n, " d%s=%.1e", rec_in_names(i), e);
        worst = fmax(worst, isnan(e) ? INFINITY : e);
    }
    fprintf(stderr, "%s\n", line);
    return worst;
}

/* two runs agree bit for bit */
static inline bool rec_same_bits(const rec_out *a, const rec_out *b)
{
    bool same = !memcmp(a->o, b->o, sizeof(double) * (size_t)a->n_o) &&
                !memcmp(a->ht, b->ht, sizeof(double) * (size_t)a->n_ht);
    for (int i = 0; i < REC_NIN; i++)
        if (a->d[i]) same = same && !memcmp(a->d[i], b->d[i], sizeof(double) * (size_t)a->n[i]);
    return same;
}

/* got against ref (rec_report under what, then vs when ref is not the
 * reference itself, e.g. "vs P=1"): 1 with a FAIL line when the worst
 * error exceeds tol, else 0 */
static inline int rec_fails_tol(const char *what, const char *vs, const rec_out *got, const rec_out *ref, double tol)
{
    char label[160];
    snprintf(label, sizeof label, vs ? "  %s" : "%s", vs ? vs : what);
    const double e = rec_report(label, got, ref);
    if (e <= tol) return 0;
    fprintf(stderr, "  FAIL %s %s: worst %.3g > %.1g\n", what, vs ? vs : "vs CPU", e, tol);
    return 1;
}
/* 1 with a FAIL line when a rerun differs from got in any bit, else 0 */
static inline int rec_fails_rerun(const char *what, const rec_out *got, const rec_out *again)
{
    if (rec_same_bits(got, again)) return 0;
    fprintf(stderr, "  FAIL %s: two runs differ\n", what);
    return 1;
}

/* every output and gradient of two runs agree to tol */
static inline void rec_assert_same(const char *what, const rec_out *got, const rec_out *ref, double tol)
{
    assert_int_equal(got->n_o, ref->n_o);
    assert_int_equal(got->n_ht, ref->n_ht);
    rec_assert_close(what, "o", got->o, ref->o, ref->n_o, tol);
    rec_assert_close(what, "ht", got->ht, ref->ht, ref->n_ht, tol);
    for (int i = 0; i < REC_NIN; i++) {
        if (!ref->d[i]) continue;
        assert_non_null(got->d[i]);
        assert_int_equal(got->n[i], ref->n[i]);
        char dn[16];
        snprintf(dn, sizeof dn, "d%s", rec_in_names(i));
        rec_assert_close(what, dn, got->d[i], ref->d[i], ref->n[i], tol);
    }
}

#endif
