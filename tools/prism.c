/* tools/prism.c: the `prism` command: one table of subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} pr_command;

static const pr_command commands[] = {
    {"gradcheck", pr_cmd_gradcheck, "float64 finite-difference check of every op's backward"},
    {"golden-check", pr_cmd_golden_check, "the recurrences against a reference file (golden format)"},
    {"bench", pr_cmd_bench, "kernel speed against the machine's measured ceilings (bench ops, ...)"},
    {"model", pr_cmd_model, "a model's parameter table by path (--model NAME --preset P --set k=v)"},
    {"inspect", pr_cmd_inspect, "gradient norms, the tape, write ranks and dumps of a model on a batch"},
    {"convert", pr_cmd_convert, "flash-linear-attention checkpoints in and out (--from-fla DIR, --to-fla DIR)"},
    {"data", pr_cmd_data, "a dataset's statistics (data rec: synthetic, --amazon FILE, --yelp FILE)"},
    {"train", pr_cmd_train, "train a model on a task in a run directory (--model NAME --task TASK)"},
    {"eval", pr_cmd_eval, "evaluate a run's latest checkpoint (--run DIR)"},
    {"ablate", pr_cmd_ablate, "a grid of models x tasks x seeds, resumable, as a mean ± std table (--grid NAME)"},
    {"plot", pr_cmd_plot, "one metric of several runs against the step as an SVG (loss, acc, bpb, ...)"},
    {"compare", pr_cmd_compare, "models head to head on one task: quality, tokens/s, parameters, memory"},
    {"generate", pr_cmd_generate, "continue a prompt with a byte-level LM run (--run DIR --prompt TEXT)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: prism <command> [options]   (prism <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nenvironment: PRISM_CUDA_SLOW_MS=N names on stderr each CUDA driver call (allocation, graph\n"
               "capture, stream) that took N ms or more: where a grid's threads wait\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || pr_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *slow = getenv("PRISM_CUDA_SLOW_MS");   /* a trace of where CUDA threads wait (tensor.h) */
    if (slow) pr_device_trace_slow_calls(atof(slow));
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "prism: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
