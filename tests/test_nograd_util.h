/* tests/test_nograd_util.h: a forward under no-grad allocates nothing that
 * only the backward needs (issue 8, item 3). An op's example runs twice on
 * the same inputs, not recorded and recorded; the step arena must grow by
 * at least the bytes of the recorded nodes' saved tensors less in the first
 * run, and the outputs must be identical. */
#ifndef PR_TEST_NOGRAD_UTIL_H
#define PR_TEST_NOGRAD_UTIL_H

#include "tests/pr_test.h"

typedef struct {
    size_t step_bytes;   /* the step arena's growth during the forward */
    size_t saved_bytes;  /* tensors the new tape nodes saved that are no node's input or output */
    double *out;         /* the output, on the host */
    int64_t n;
} nograd_run;

static inline double *nograd_host(const pr_tensor *t, int64_t *n)
{
    double *p = malloc(sizeof(double) * (size_t)(t->numel + 1));
    assert_non_null(p);
    pr_to_host_f64(t, p);
    *n = t->numel;
    return p;
}

static inline bool nograd_is_io(const pr_ctx *ctx, int from, const pr_tensor *t)
{
    for (int p = from; p < ctx->n_tape; p++) {
        const pr_node *nd = &ctx->tape[p];
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] == t) return true;
        for (int i = 0; i < nd->n_out; i++)
            if (nd->out[i] == t) return true;
    }
    return false;
}

static inline nograd_run nograd_forward(pr_ctx *ctx, const pr_example *ex, pr_tensor *const *in, bool grad)
{
    nograd_run r = {0};
    const bool prev = pr_set_grad_enabled(ctx, grad);
    const int tape0 = ctx->n_tape;
    const size_t used0 = pr_arena_used(ctx->step);
    pr_tensor *y = ex->apply(ctx, in, ex);
    r.step_bytes = pr_arena_used(ctx->step) - used0;
    for (int p = tape0; p < ctx->n_tape; p++)
        for (int s = 0; s < ctx->tape[p].n_saved; s++) {
            const pr_tensor *t = ctx->tape[p].saved[s];
            if (t && !nograd_is_io(ctx, tape0, t)) r.saved_bytes += pr_nbytes(t);
        }
    r.out = nograd_host(y, &r.n);
    pr_set_grad_enabled(ctx, prev);
    return r;
}

/* op's example in dtype dt on dev, no-grad against recorded; returns the
 * bytes the recorded run saved (0 for ops that save nothing) */
static inline size_t nograd_check_op(pr_ctx *ctx, pr_op_id id, pr_device dev, pr_dtype dt)
{
    const pr_op_info *op = pr_op(id);
    pr_rng r = pr_rng_init(5, 1);
    pr_example ex = {0};
    op->example(ctx, &r, dt, &ex);
    pr_tensor *in[PR_MAX_IN] = {0};
    for (int i = 0; i < ex.n_in; i++) {
        in[i] = ex.in[i] && ex.in[i]->device != dev ? pr_to(ctx->step, ex.in[i], ex.in[i]->dtype, dev) : ex.in[i];
        if (in[i]) in[i]->requires_grad = ex.in[i]->requires_grad;
    }
    const pr_rng rng0 = ctx->rng;   /* dropout draws from it: the same mask in both runs */
    nograd_run a = nograd_forward(ctx, &ex, in, false);
    ctx->rng = rng0;
    nograd_run b = nograd_forward(ctx, &ex, in, true);
    if (a.step_bytes + b.saved_bytes > b.step_bytes)
        fail_msg("%s on %s: the no-grad forward took %zu step bytes, the recorded one %zu of which %zu saved",
                 op->name, pr_device_name(dev), a.step_bytes, b.step_bytes, b.saved_bytes);
    assert_int_equal(a.n, b.n);
    if (a.n && memcmp(a.out, b.out, sizeof(double) * (size_t)a.n) != 0)
        fail_msg("%s on %s: the no-grad output differs from the recorded one", op->name, pr_device_name(dev));
    free(a.out);
    free(b.out);
    pr_step_reset(ctx);
    return b.saved_bytes;
}

#endif
