/* tools/gradcheck.c: `prism gradcheck`: every registered op's example,
 * float64 central differences against its backward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tools/tools.h"

static void gradcheck_usage(FILE *f)
{
    fprintf(f, "usage: prism gradcheck (--all | --op NAME) [--seed N] [--list]\n\n"
               "Runs each op on small random float64 inputs of awkward sizes and compares the\n"
               "backward with central differences (eps 1e-6; an element passes when\n"
               "|analytic - numeric| <= 1e-5 + 1e-3 |numeric|). Prints one line per op and,\n"
               "last, 'N passed, M failed'; exits non-zero on any failure.\n");
}

/* 1 passed, 0 failed, -1 not checkable */
static int check_op(const pr_op_info *op, uint64_t seed)
{
    if (!op->example) return -1;
    pr_ctx *ctx = pr_ctx_new(seed);
    pr_rng r = pr_rng_init(seed, 2);
    pr_example ex = {0};
    op->example(ctx, &r, PR_F64, &ex);
    pr_gradcheck_result res = pr_gradcheck(ctx, op->name, &ex, NULL);
    if (res.ok) printf("%-16s ok   max_abs_err=%.2e\n", op->name, res.max_abs_err);
    else printf("%-16s FAIL %s\n", op->name, res.msg);
    fflush(stdout);
    pr_ctx_free(ctx);
    return res.ok;
}

int pr_cmd_gradcheck(int argc, char **argv)
{
    const char *only = NULL;
    bool all = false, list = false;
    uint64_t seed = 1234;
    pr_args a = pr_args_begin("prism gradcheck", argc, argv);
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return gradcheck_usage(stdout), 0;
        if (pr_args_flag(&a, "--all", &all) || pr_args_flag(&a, "--list", &list)) continue;
        if (pr_args_string(&a, "--op", &only) || pr_args_u64(&a, "--seed", &seed)) continue;
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (all && only) return pr_args_error(&a, "--all and --op exclude each other");
    if (list) {
        for (int i = 0; i < pr_op_count(); i++) printf("%s\n", pr_op((pr_op_id)i)->name);
        return 0;
    }
    if (!all && !only) {
        gradcheck_usage(stderr);
        return PR_EXIT_USAGE;
    }
    if (only && !pr_op_by_name(only))
        return pr_args_error(&a, "--op wants an op's name, not '%s' (prism gradcheck --list names them)", only);
    int passed = 0, failed = 0;
    for (int i = 0; i < pr_op_count(); i++) {
        const pr_op_info *op = pr_op((pr_op_id)i);
        if (only && strcmp(op->name, only) != 0) continue;
        int r = check_op(op, seed);
        if (r < 0) printf("%-16s skip (no example)\n", op->name);
        passed += r == 1, failed += r == 0;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
