/* tools/tools.h: the subcommands of the `prism` command. Each one is
 * `int pr_cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand's
 * name), prints its own --help, and returns the process exit status. */
#ifndef PR_TOOLS_H
#define PR_TOOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dist/dist.h"

int pr_cmd_gradcheck(int argc, char **argv);
int pr_cmd_golden_check(int argc, char **argv);
int pr_cmd_bench(int argc, char **argv);
int pr_cmd_model(int argc, char **argv);        /* dispatches to the bench_* below */
int pr_cmd_data(int argc, char **argv);         /* prism data rec */
int pr_cmd_inspect(int argc, char **argv);      /* tools/inspect.c */
int pr_cmd_convert(int argc, char **argv);      /* fla checkpoints in and out */
int pr_cmd_train(int argc, char **argv);
int pr_cmd_eval(int argc, char **argv);
int pr_cmd_generate(int argc, char **argv);
int pr_cmd_ablate(int argc, char **argv);       /* tools/ablate.c */
int pr_cmd_compare(int argc, char **argv);      /* tools/compare.c */
int pr_cmd_plot(int argc, char **argv);         /* tools/plot_runs.c */
int pr_bench_throughput(int argc, char **argv); /* tools/compare.c */
int pr_bench_ops(int argc, char **argv);
int pr_bench_recurrence(int argc, char **argv);
int pr_bench_block(int argc, char **argv);
int pr_bench_fused(int argc, char **argv);      /* attention, selective_scan */

/* tools/dist_env.c: rank, world and rendezvous file from the launchers' variables in the
 * environment (pr_dist_env_parse), and where NCCL is looked for
 * (PRISM_NCCL_LIB, HOME, VIRTUAL_ENV, CONDA_PREFIX); -1 with err */
int pr_dist_env_read(pr_dist_env *e, const char *dist_file, pr_err *err);

static inline bool pr_is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "help") == 0;
}

/* ---- options (tools/args.c): one parser, one wording, for every subcommand ----
 *
 *     pr_args a = pr_args_begin("prism gradcheck", argc, argv);
 *     while (pr_args_next(&a)) {
 *         if (pr_args_help(&a)) return usage(stdout), 0;
 *         if (pr_args_flag(&a, "--all", &all)) continue;
 *         if (pr_args_u64(&a, "--seed", &seed)) continue;
 *         return pr_args_unknown(&a);
 *     }
 *     if (a.failed) return PR_EXIT_USAGE;
 *
 * A matcher returns true when the current argument is its option; it then
 * has stored the value, or printed "<cmd>: <option> wants ..., not '<value>'"
 * and set a.failed. Numbers are parsed whole and range-checked. */
enum {
    PR_EXIT_USAGE = 2,    /* a bad command line */
    PR_EXIT_NO_GPU = 77,  /* --device cuda with no usable GPU: ctest's skip code, a failure to a shell */
};

typedef struct {
    const char *cmd;    /* "prism bench ops": the start of every message */
    int argc;
    char **argv;
    int i;              /* the argument being read */
    bool failed;        /* a message was printed; exit with PR_EXIT_USAGE */
} pr_args;

pr_args pr_args_begin(const char *cmd, int argc, char **argv);   /* argv[0] is the subcommand */
bool pr_args_next(pr_args *a);              /* to the next argument; false at the end or after an error */
const char *pr_args_current(const pr_args *a);
bool pr_args_help(const pr_args *a);        /* -h, --help or help */
bool pr_args_flag(pr_args *a, const char *name, bool *out);                  /* sets *out = true */
bool pr_args_string(pr_args *a, const char *name, const char **out);
bool pr_args_int(pr_args *a, const char *name, int lo, int hi, int *out);    /* lo <= value <= hi */
bool pr_args_u64(pr_args *a, const char *name, uint64_t *out);
bool pr_args_positive(pr_args *a, const char *name, double *out);            /* finite, > 0 */
/* one of choices (NULL-terminated): *out is its index */
bool pr_args_choice(pr_args *a, const char *name, const char *const *choices, int *out);
/* a comma-separated list of choices: bit k of *mask set for choices[k] */
bool pr_args_choice_list(pr_args *a, const char *name, const char *const *choices, unsigned *mask);
/* 1 to max_n comma-separated integers in [lo, hi] into out, *n of them */
bool pr_args_int_list(pr_args *a, const char *name, long long lo, long long hi, int max_n, int64_t *out, int *n);
/* 1 to max_n comma-separated finite numbers > 0 into out, *n of them */
bool pr_args_positive_list(pr_args *a, const char *name, int max_n, double *out, int *n);
int pr_args_unknown(pr_args *a);            /* "unknown option '<arg>'"; returns PR_EXIT_USAGE */
int pr_args_error(pr_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));  /* "<cmd>: <msg>" */
int pr_args_no_cuda(const char *cmd);       /* says so; returns PR_EXIT_NO_GPU */
/* 0 when the file an option names can be opened; else says why and returns 1
 * (a file that cannot be read is exit 1, what is in it a usage error, 2) */
int pr_args_readable(const char *cmd, const char *path);

#endif
