/* tools/golden_check.c: `prism golden-check`: its options; the checks are
 * lab/golden_check.c's (lab/lab.h). */
#include <stdio.h>

#include "lab/lab.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: prism golden-check FILE [options]\n"
            "Runs every recurrence rule and ops2 op (lab/golden_ops2.c) of a reference file\n"
            "(golden format: <rule>.<tensor>, float64) forward and backward, seeded with the\n"
            "file's upstream gradients (do, dht, ...), and compares the outputs,\n"
            "final states and gradients. Prints '<rule> ok|FAIL max_rel_err=<e>' per rule\n"
            "(error relative to the reference tensor's max-abs), then 'N passed, M failed'.\n"
            "The fused ops of lab/golden_ops2.c (attention, selective_scan) in the file are\n"
            "checked the same way (every output and input gradient).\n"
            "Exit status 1 on any failure or an unreadable file.\n"
            "options:\n"
            "  --device cpu|cuda     where to run (default cpu)\n"
            "  --dtype f64|f32|bf16  compute dtype (default f64 on the CPU, f32 on CUDA); bf16: the\n"
            "                        linear rules on bf16 data (g, h0, ht f32), the tolerance\n"
            "                        set by bf16 rounding (printed)\n"
            "  --form recurrent|chunked|both   which form of the linear rules (default both)\n"
            "  --chunk C             chunk size of the chunked form (default 64)\n"
            "  --tf32                CUDA: allow TF32 tensor cores (ctx->matmul_tf32 = 1)\n"
            "  --tol E               tolerance (default 1e-9 f64, 1e-4 f32, 6 x 2^-11 = 2.9e-3 with\n"
            "                        --tf32; bf16: 4 x 2^-8 = 1.6e-2, 6 x 2^-8 with --tf32)\n"
            "  --force LIST          CUDA: force fields of the linear rules' chunked plan, as `prism bench\n"
            "                        recurrence --force` takes them (e.g. gla_fast=off: gla's plain kernels,\n"
            "                        bf16_mma=off: TF32 where the passes that read bf16 in place multiply bf16;\n"
            "                        a field a rule's kernels cannot run stops the check, naming it)\n"
            "  --verbose             print every tensor's error\n"
            "  --make OUT            write a reference file of the linear rules (gla's decay as gk), computed by\n"
            "                        the CPU per-token form in f64 (for other sizes; no ttt_linear)\n"
            "  --size B,T,H,K,V,L    its sizes (default 2,131,2,12,7,3)\n"
            "  -h, --help            this text\n");
}

/* ---- the subcommand -------------------------------------------------------------------------- */

int pr_cmd_golden_check(int argc, char **argv)
{
    static const char *const devices[] = {"cpu", "cuda", NULL}, *const dtypes[] = {"f64", "f32", "bf16", NULL};
    static const char *const forms[] = {"recurrent", "chunked", "both", NULL};
    pr_golden_opts o = {.chunk = 64};
    int dev = 0, dtype = -1, form = 2, n_size = 0;
    const char *path = NULL, *make = NULL, *force = NULL;
    int64_t size[6] = {2, 131, 2, 12, 7, 3};
    pr_args a = pr_args_begin("prism golden-check", argc, argv);
    int checking = 0; /* arguments only a check uses (FILE included): --make takes none */
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return usage(stdout), 0;
        if (pr_args_string(&a, "--make", &make)) continue;
        if (pr_args_int_list(&a, "--size", 0, 1 << 20, 6, size, &n_size)) continue;
        checking++;
        if (pr_args_flag(&a, "--verbose", &o.verbose) || pr_args_flag(&a, "--tf32", &o.tf32)) continue;
        if (pr_args_choice(&a, "--device", devices, &dev) || pr_args_choice(&a, "--dtype", dtypes, &dtype)) continue;
        if (pr_args_choice(&a, "--form", forms, &form) || pr_args_int(&a, "--chunk", 1, 4096, &o.chunk)) continue;
        if (pr_args_positive(&a, "--tol", &o.tol) || pr_args_string(&a, "--force", &force)) continue;
        if (pr_args_current(&a)[0] == '-' || path) return pr_args_unknown(&a);
        path = pr_args_current(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (n_size && (n_size != 6 || size[0] < 1 || size[1] < 1 || size[2] < 1 || size[3] < 1 || size[4] < 1))
        return pr_args_error(&a, "--size wants B,T,H,K,V,L (L >= 0, the others >= 1)");
    if (make && checking)
        return pr_args_error(&a, "--make writes a reference file; it takes only --size, no FILE or check options");
    if (n_size && !make) return pr_args_error(&a, "--size sets the sizes of --make OUT; give --make too");
    if (make) return pr_golden_make_reference(stdout, make, size);
    if (!path) {
        usage(stderr);
        return PR_EXIT_USAGE;
    }
    o.dev = dev ? PR_CUDA : PR_CPU;
    o.dt = dtype == 0 ? PR_F64 : dtype == 2 ? PR_BF16 : dtype == 1 || o.dev == PR_CUDA ? PR_F32 : PR_F64; /* the GPU computes in f32 */
    o.forms = form + 1;
    if (o.tf32 && o.dev != PR_CUDA) return pr_args_error(&a, "--tf32 applies to --device cuda only");
    char err[256];
    if (force && o.dev != PR_CUDA) return pr_args_error(&a, "--force applies to --device cuda only (the CUDA chunked plan)");
    if (force && !pr_rec_force_parse(force, &o.force, err, sizeof err)) return pr_args_error(&a, "--%s", err);
    if (o.dev == PR_CUDA && !pr_cuda_available()) return pr_args_no_cuda(a.cmd);
    return pr_golden_check_file(stdout, path, &o);
}
