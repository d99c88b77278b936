/* tests/test_nograd.c: on the CPU, every op's forward under no-grad saves
 * nothing for a backward and gives the recorded forward's output bit for bit
 * (tests/test_nograd_util.h); the recurrence at a size where its saved states
 * dominate, every rule and both forms. */
#include "ops/recurrence/recurrence.h"
#include "tests/test_nograd_util.h"

static void test_every_op(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(3);
    int savers = 0;
    for (int i = 0; i < pr_op_count(); i++) {
        if (!pr_op((pr_op_id)i)->example) continue;
        for (int d = 0; d < 2; d++) savers += nograd_check_op(ctx, (pr_op_id)i, PR_CPU, d ? PR_F32 : PR_F64) > 0;
    }
    /* the norms, the recurrence and TTT save: the check above is not vacuous */
    assert_true(savers >= 2 * 6);
    pr_ctx_free(ctx);
}

/* the recurrence alone: the saved states are most of its step memory */
static void test_recurrence_saves_only_when_recorded(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(3);
    for (int r = 0; r < PR_NRULES; r++)
        for (int chunk = 0; chunk <= 16; chunk += 16) {
            pr_rng rng = pr_rng_init(8, (uint32_t)r);
            const pr_rule rule = (pr_rule)r;
            pr_recurrence_inputs x = pr_recurrence_random(ctx, &rng, PR_F32, rule, 2, 96, 2, 16, 16, 2, true);
            const pr_recurrence_opts o = {.rule = rule, .chunk = chunk};
            size_t used[2];
            double *out[2];
            int64_t n = 0;
            for (int rec = 0; rec < 2; rec++) {
                const bool prev = pr_set_grad_enabled(ctx, rec);
                const size_t u0 = pr_arena_used(ctx->step);
                pr_tensor *y = pr_recurrence(ctx, &o, x.q, x.k, x.v, x.g, x.beta, x.kx, x.vx, x.h0, NULL, NULL);
                used[rec] = pr_arena_used(ctx->step) - u0;
                out[rec] = nograd_host(y, &n);
                pr_set_grad_enabled(ctx, prev);
            }
            /* states every chunk (or every PR_REC_CKPT tokens), f64 [K,V] per (sequence, head) */
            const size_t ck = chunk ? (size_t)chunk : 64, states = 2 * 2 * ((96 + ck - 1) / ck) * 16 * 16 * 8;
            if (used[0] + states > used[1])
                fail_msg("%s chunk %d: no-grad %zu bytes, recorded %zu (states %zu)", pr_rule_name(rule), chunk,
                         used[0], used[1], states);
            assert_memory_equal(out[0], out[1], sizeof(double) * (size_t)n);
            free(out[0]);
            free(out[1]);
            pr_step_reset(ctx);
        }
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op),
        cmocka_unit_test(test_recurrence_saves_only_when_recorded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
