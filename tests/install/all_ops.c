/* tests/install/all_ops.c: built against the INSTALLED library (libprism.a
 * through prism::prism_static). Every op of the table must have its CPU pair
 * and example (and its CUDA pair when prism was built with CUDA), and pass a
 * float64 gradcheck: an archive that dropped an op's object fails here. */
#include <stdio.h>

#include "ops/ops.h"

static int check_entries(const pr_op_info *op)
{
    int ok = op->forward_cpu && op->backward_cpu && op->example;
#ifdef PRISM_HAVE_CUDA
    ok = ok && op->forward_cuda && op->backward_cuda;
#endif
    if (!ok) printf("%s: missing a forward, backward or example in the op table\n", op->name);
    return ok;
}

static int gradcheck_op(const pr_op_info *op)
{
    pr_ctx *ctx = pr_ctx_new(7);
    pr_rng r = pr_rng_init(7, 2);
    pr_example ex = {0};
    op->example(ctx, &r, PR_F64, &ex);
    pr_gradcheck_result res = pr_gradcheck(ctx, op->name, &ex, NULL);
    if (!res.ok) printf("%s: gradcheck failed: %s\n", op->name, res.msg);
    pr_ctx_free(ctx);
    return res.ok;
}

int main(void)
{
    int failed = 0;
    for (int i = 0; i < pr_op_count(); i++) {
        const pr_op_info *op = pr_op((pr_op_id)i);
        if (!check_entries(op) || !gradcheck_op(op)) failed++;
    }
    printf("all_ops: %d ops, %d failed\n", pr_op_count(), failed);
    return failed ? 1 : 0;
}
