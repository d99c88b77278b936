/* tools/tools.h: the subcommands of the `prism` command. Each one is
 * `int pr_cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand's
 * name), prints its own --help, and returns the process exit status. */
#ifndef PR_TOOLS_H
#define PR_TOOLS_H

#include <stdbool.h>
#include <string.h>

int pr_cmd_gradcheck(int argc, char **argv);
int pr_cmd_golden_check(int argc, char **argv);
int pr_cmd_bench(int argc, char **argv);        /* dispatches to the bench_* below */
int pr_bench_ops(int argc, char **argv);
int pr_bench_recurrence(int argc, char **argv);
#ifdef PR_OPS_H /* tools/bench_ttt2.c: ttt_mlp and titans beside ttt_linear (CUDA builds) */
void pr_bench_ttt2(pr_ctx *ctx, pr_arena *ar, int64_t B, int64_t T, int64_t H, int warm, int reps, const char *rules);
#endif

static inline bool pr_is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "help") == 0;
}

#endif
