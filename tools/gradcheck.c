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
    for (int i = 1; i < argc; i++) {
        if (pr_is_help(argv[i])) {
            gradcheck_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--all") == 0) {
            all = true;
        } else if (strcmp(argv[i], "--list") == 0) {
            list = true;
        } else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "prism gradcheck: unknown or incomplete option '%s'\n", argv[i]);
            gradcheck_usage(stderr);
            return 2;
        }
    }
    if (list) {
        for (int i = 0; i < pr_op_count(); i++) printf("%s\n", pr_op((pr_op_id)i)->name);
        return 0;
    }
    if (!all && !only) {
        gradcheck_usage(stderr);
        return 2;
    }
    if (only && !pr_op_by_name(only)) {
        fprintf(stderr, "prism gradcheck: unknown op '%s' (prism gradcheck --list names them)\n", only);
        return 2;
    }
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
