/* tests/test_cuda_nograd.c: on the GPU, every op's forward under no-grad
 * saves nothing for a backward and gives the recorded forward's output bit
 * for bit (tests/test_nograd_util.h); the recurrence's live device memory
 * after a no-grad forward is smaller than after a recorded one by at least
 * its residuals (chunk-start states; for the delta rules also R, W, R0, T'). */
#include "ops/recurrence/recurrence.h"
#include "tests/test_nograd_util.h"
#ifdef PRISM_HAVE_CUDA
#include "ops/cuda/ops_cuda.h"
#endif

static void test_every_op(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(3);
    int savers = 0;
    for (int i = 0; i < pr_op_count(); i++) {
        const pr_op_info *op = pr_op((pr_op_id)i);
        if (op->example && op->forward_cuda) savers += nograd_check_op(ctx, (pr_op_id)i, PR_CUDA, PR_F32) > 0;
    }
    assert_true(savers >= 6);   /* norms, cross_entropy, recurrence, TTT */
    pr_ctx_free(ctx);
}

/* bytes of live blocks of the caching allocator, once queued work is done */
static size_t live_device_bytes(void)
{
    pr_device_sync(PR_CUDA);
#ifdef PRISM_HAVE_CUDA
    pr_cuda_alloc_stats s;
    pr_cuda_alloc_stats_get(&s);
    return s.current;
#else
    return 0;   /* not reached: the test skips without CUDA */
#endif
}

static void recurrence_case(pr_rule rule, int chunk)
{
    const int64_t B = 2, T = 512, H = 4, K = 64, V = 64, L = 2;
    pr_ctx *ctx = pr_ctx_new(3);
    pr_rng rng = pr_rng_init(8, (uint32_t)rule);
    pr_recurrence_inputs x = pr_recurrence_random(ctx, &rng, PR_F32, rule, B, T, H, K, V, L, true);
    pr_tensor *in[8] = {x.q, x.k, x.v, x.g, x.beta, x.kx, x.vx, x.h0};
    for (int i = 0; i < 8; i++)
        if (in[i]) in[i] = pr_to(ctx->step, in[i], PR_F32, PR_CUDA), pr_requires_grad_(in[i], true);
    const pr_recurrence_opts o = {.rule = rule, .chunk = chunk};
    size_t live[2];
    double *out[2];
    int64_t n = 0;
    for (int rec = 0; rec < 2; rec++) {
        const bool prev = pr_set_grad_enabled(ctx, rec);
        const size_t before = live_device_bytes();
        pr_tensor *y = pr_recurrence(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, NULL);
        live[rec] = live_device_bytes() - before;
        out[rec] = nograd_host(y, &n);
        pr_set_grad_enabled(ctx, prev);
    }
    /* the smallest residual: the per-token delta rules' r [B,T,H,V]; the
     * chunked form's chunk-start states [B*T/C,H,K,V] */
    const bool delta = pr_rule_has_beta(rule);
    const size_t resid = chunk ? (size_t)(B * ((T + chunk - 1) / chunk) * H * K * V) * 4
                         : delta ? (size_t)(B * T * H * V) * 4 : 0;
    fprintf(stderr, "  %-10s chunk %2d: live device bytes after the forward: no-grad %zu, recorded %zu\n",
            pr_rule_name(rule), chunk, live[0], live[1]);
    if (live[0] + resid > live[1])
        fail_msg("%s chunk %d: no-grad forward left %zu device bytes, recorded %zu (residuals >= %zu)",
                 pr_rule_name(rule), chunk, live[0], live[1], resid);
    assert_memory_equal(out[0], out[1], sizeof(double) * (size_t)n);
    free(out[0]);
    free(out[1]);
    pr_ctx_free(ctx);
}

static void test_recurrence_device_memory(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    for (int r = 0; r < PR_NRULES; r++) {
        recurrence_case((pr_rule)r, 0);
        recurrence_case((pr_rule)r, pr_rule_has_extra((pr_rule)r) ? 32 : 64);
    }
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op),
        cmocka_unit_test(test_recurrence_device_memory),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
