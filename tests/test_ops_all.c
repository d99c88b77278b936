/* tests/test_ops_all.c: every op of the table on its own example: float64
 * gradcheck, f32 against f64 (output and every input grad), and a check that
 * the backward accumulates (pr_test_op_example in tests/pr_test.h). */
#include "tests/pr_test.h"

static void test_op(void **state)
{
    const pr_op_info *op = *state;
    pr_ctx *ctx = pr_ctx_new(11);
    pr_test_op_example(ctx, (pr_op_id)(op - pr_op((pr_op_id)0)), 99);
    pr_ctx_free(ctx);
}

int main(void)
{
    struct CMUnitTest tests[PR_NOPS];
    int n = 0;
    for (int i = 0; i < pr_op_count(); i++) {
        const pr_op_info *op = pr_op((pr_op_id)i);
        if (!op->example) continue;
        tests[n++] = (struct CMUnitTest){.name = op->name, .test_func = test_op, .initial_state = (void *)op};
    }
    return _cmocka_run_group_tests("ops_all", tests, (size_t)n, NULL, NULL);
}
