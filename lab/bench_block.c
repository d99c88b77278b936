/* lab/bench_block.c: what `prism bench block` measures (lab/lab.h): the
 * forward and forward+backward time of one pre-norm block (norm, mixer,
 * residual, norm, MLP, residual) of a config, on random input. */
#include <stdio.h>
#include <stdlib.h>

#include "lab/lab.h"
#include "models/models.h"

/* median seconds of one block's forward (backward too when with_backward), after 2 warm-up runs */
static double time_block(pr_ctx *ctx, const pr_model *m, pr_tensor *x, pr_tensor *w, int iters, bool with_backward)
{
    double *t = malloc(sizeof(double) * (size_t)iters);
    PR_CHECK(t, "bench block: out of host memory");
    for (int i = -2; i < iters; i++) {
        pr_device_sync(x->device);
        double t0 = pr_now_s();
        pr_tensor *y = pr_block_forward(ctx, m, 0, x, NULL);
        if (with_backward) pr_backward_with(ctx, y, w);
        pr_device_sync(x->device);
        if (i >= 0) t[i] = pr_now_s() - t0;
        pr_step_reset(ctx);
    }
    double med = pr_bench_median(t, iters);
    free(t);
    return med;
}

int pr_bench_block_one(const pr_config *config, int64_t B, int64_t T, pr_device dev, pr_precision precision, int iters,
                       pr_bench_block_time *out)
{
    pr_config c = pr_config_resolve(config);   /* one block as the preset sizes it (match_attn) */
    c.n_layers = 1;
    *out = (pr_bench_block_time){.skipped_bytes = pr_mixer_big_step_bytes(&c, B, T, NULL)};
    if (out->skipped_bytes > PR_BENCH_MAX_STEP_BYTES) return 1;   /* a size that cannot fit */
    out->skipped_bytes = 0;
    pr_model *m = pr_model_new(&c, PR_F32, dev);
    pr_model_init(m);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_ctx_set_precision(ctx, precision);
    pr_arena *a = pr_arena_new("bench-input", 0);
    pr_rng r = pr_rng_init(3, 0);
    pr_tensor *x = pr_randn(a, PR_F32, dev, PR_DIMS(B, T, c.d_model), &r);
    pr_tensor *w = pr_randn(a, PR_F32, dev, PR_DIMS(B, T, c.d_model), &r);
    pr_requires_grad_(x, true);
    out->fwd_s = time_block(ctx, m, x, w, iters, false);
    out->fwd_bwd_s = time_block(ctx, m, x, w, iters, true);
    out->params = pr_params_count(m->params) - m->embed->numel - c.d_model;   /* less embed, norm_f */
    pr_params_release_grads(m->params);
    pr_ctx_free(ctx);
    pr_arena_free(a);
    pr_model_free(m);
    return 0;
}
