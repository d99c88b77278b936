/* tools/bench.c: `prism bench <what>` and `prism bench ops`'s options; the
 * measuring is lab/bench_ops.c's. recurrence is in tools/bench_recurrence.c,
 * fused in tools/bench_fused.c, block in tools/bench_model.c, throughput in
 * tools/compare.c. */
#include <stdio.h>
#include <string.h>

#include "lab/lab.h"
#include "tools/tools.h"

static void bench_ops_usage(FILE *f)
{
    fprintf(f, "usage: prism bench ops [--device cuda|cpu] [--reps N] [--quick] [--help]\n\n"
               "Times the copy bandwidth and GEMM rate of the device, then elementwise ops (swiglu too),\n"
               "softmax, layernorm and rmsnorm on 256 MiB tensors ([65536,1024] f32; 16 MiB on\n"
               "the CPU) and pr_matmul at 8192^3 (1024^3 on the CPU), forward and backward,\n"
               "and prints each as a fraction of the measured ceiling; on the GPU each again in\n"
               "bf16 (the native bf16 kernels, against a bare bf16 GEMM). Default device: cuda\n"
               "when a GPU is present. Targets, on the GPU only: norm and elementwise >= 70%% of\n"
               "copy bandwidth, pr_matmul >= 90%% of the bare cuBLAS call (marked LOW when missed).\n"
               "  --reps N   timed repetitions, median (default 20 on the GPU, 5 on the CPU)\n"
               "  --quick    tiny sizes and one repetition: checks that every kernel runs\n");
}

int pr_bench_ops(int argc, char **argv)
{
    static const char *const devices[] = {"cpu", "cuda", NULL};
    int dev_k = pr_cuda_available(), reps = 0;
    bool quick = false;
    pr_args a = pr_args_begin("prism bench ops", argc, argv);
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return bench_ops_usage(stdout), 0;
        if (pr_args_choice(&a, "--device", devices, &dev_k) || pr_args_int(&a, "--reps", 1, 100000, &reps)) continue;
        if (pr_args_flag(&a, "--quick", &quick)) continue;
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    pr_device dev = dev_k ? PR_CUDA : PR_CPU;
    if (dev == PR_CUDA && !pr_cuda_available()) return pr_args_no_cuda(a.cmd);
    pr_bench_ops_result res;
    pr_bench_ops_run(stdout, dev, quick, reps, &res);
    return 0;
}

int pr_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || pr_is_help(argv[1])) {
        fprintf(argc < 2 ? stderr : stdout, "usage: prism bench <ops|recurrence|fused|block|throughput> [options]   (--help for each)\n");
        return argc < 2 ? 2 : 0;
    }
    int rc;
    if (strcmp(argv[1], "ops") == 0) rc = pr_bench_ops(argc - 1, argv + 1);
    else if (strcmp(argv[1], "recurrence") == 0) rc = pr_bench_recurrence(argc - 1, argv + 1);
    else if (strcmp(argv[1], "fused") == 0) rc = pr_bench_fused(argc - 1, argv + 1);
    else if (strcmp(argv[1], "block") == 0) rc = pr_bench_block(argc - 1, argv + 1);
    else if (strcmp(argv[1], "throughput") == 0) rc = pr_bench_throughput(argc - 1, argv + 1);
    else {
        fprintf(stderr, "prism bench: unknown benchmark '%s' (ops, recurrence, fused, block, throughput)\n", argv[1]);
        return PR_EXIT_USAGE;
    }
    if (pr_cuda_available() && !pr_is_help(argc > 2 ? argv[2] : "")) {
        size_t cur, peak;
        pr_device_mem_stats(PR_CUDA, &cur, &peak);
        if (peak > 0)   /* a bench that ran on the CPU has nothing to report (and keeps its JSON line last) */
            printf("device memory: %.1f MiB held by tensors now, %.1f MiB peak\n", cur / 1048576.0, peak / 1048576.0);
    }
    return rc;
}
