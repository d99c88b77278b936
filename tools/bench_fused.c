/* tools/bench_fused.c: `prism bench fused`: its options and the sizes it
 * runs (the model sizes on CUDA, small ones on the CPU); the measuring is
 * lab/bench_fused.c's. */
#include <stdio.h>

#include "lab/lab.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: prism bench fused [--device cuda|cpu] [--reps N] [--sdpa-ms MS] [--sdpa96-ms MS] [--help]\n\n"
               "Times causal attention (H=16, D=128; B=8 T=2048 and B=1 T=16384; and D=96,\n"
               "lm-130m's head dim, at B=8 T=2048) forward and backward in fp32 and TF32 math\n"
               "and in bf16 (the flash kernels) with TFLOP/s and peak device memory, and the\n"
               "selective scan at B=8 T=2048 D=1536 N=16.\n"
               "--device cpu: small sizes, fp32 only.\n"
               "  --reps N       timed repetitions, median (default 10 on the GPU, 3 on the CPU)\n"
               "  --sdpa-ms MS   torch SDPA's bf16 forward+backward at B=8 T=2048 H=16 D=128 causal,\n"
               "                 measured on this GPU (tools/device/bench_attention.sh does both):\n"
               "                 prints bf16 fwd+bwd over it against the target of at most 2x\n"
               "  --sdpa96-ms MS the same at D=96\n");
}

/* the bf16 row of t (just timed) over torch SDPA's time at its shape, when given */
static void print_sdpa_ratio(const pr_bench_fused_time t[PR_BENCH_ATT_ROWS], double sdpa_ms)
{
    if (sdpa_ms <= 0) return;
    const double fb = t[2].fwd_ms + t[2].bwd_ms, ratio = fb / sdpa_ms;
    printf("  bf16 fwd+bwd %.3f ms / torch SDPA bf16 %.3f ms = %.2fx (target <= 2x: %s)\n", fb, sdpa_ms, ratio,
           ratio <= 2 ? "met" : "missed");
}

int pr_bench_fused(int argc, char **argv)
{
    static const char *const devices[] = {"cpu", "cuda", NULL};
    int dev_k = pr_cuda_available(), reps = 0;
    double sdpa_ms = 0, sdpa96_ms = 0;
    pr_args a = pr_args_begin("prism bench fused", argc, argv);
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return usage(stdout), 0;
        if (pr_args_choice(&a, "--device", devices, &dev_k) || pr_args_int(&a, "--reps", 1, 100000, &reps) ||
            pr_args_positive(&a, "--sdpa-ms", &sdpa_ms) || pr_args_positive(&a, "--sdpa96-ms", &sdpa96_ms))
            continue;
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    pr_device dev = dev_k ? PR_CUDA : PR_CPU;
    if (dev == PR_CUDA && !pr_cuda_available()) return pr_args_no_cuda(a.cmd);
    if (reps <= 0) reps = dev == PR_CUDA ? 10 : 3;
    printf("prism bench fused (%s)\n", pr_device_name(dev));
    pr_bench_fused_time t[PR_BENCH_ATT_ROWS];
    if (dev == PR_CUDA) {
        pr_bench_attention(stdout, dev, 1, 16384, 16, 128, reps, t);
        pr_bench_attention(stdout, dev, 8, 2048, 16, 128, reps, t);
        print_sdpa_ratio(t, sdpa_ms);
        pr_bench_attention(stdout, dev, 8, 2048, 16, 96, reps, t);
        print_sdpa_ratio(t, sdpa96_ms);
        pr_bench_selective_scan(stdout, dev, 8, 2048, 1536, 16, reps, t);
    } else {
        pr_bench_attention(stdout, dev, 1, 256, 4, 64, reps, t);
        pr_bench_selective_scan(stdout, dev, 1, 512, 64, 16, reps, t);
    }
    return 0;
}
