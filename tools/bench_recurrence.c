/* tools/bench_recurrence.c: `prism bench recurrence`: its options (the
 * sizes, rules, forms, dtypes and the plan's forcing fields); what it
 * measures and prints is lab/bench_recurrence.c's. */
#include <stdio.h>

#include "lab/lab.h"
#include "ops/recurrence/recurrence.h"
#include "tools/tools.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: prism bench recurrence [--device cuda|cpu] [--dtype f32|f64|bf16] [--reps N] [--warmup N]\n"
            "                              [--size 1|2|all] [--rules LIST] [--chunks LIST] [--no-token]\n"
            "                              [--fp32] [--bf16-staged] [--force LIST] [--ttt-bwd fused|split|overlap]\n"
            "                              [--extras N] [--help]\n\n"
            "Times every rule of the recurrence op (linattn, ssd, delta, gdn, prism_core with one extra write:\n"
            "PRISM's paper form at L=2, gla), per-token\n"
            "and chunked form (C=64, prism_core C=32; TF32 products on f32 data, bf16 ones on bf16 data;\n"
            "gla's \"x fla\" needs fla's chunk_gla time measured in the same run: --fla-gla,\n"
            "tools/device/bench_gla.sh),\n"
            "TTT-Linear (mini-batch 16: TF32 and fp32 on f32 data, bf16 on bf16 data; mini-batch 1 as its\n"
            "serial form), and TTT-MLP and Titans at d=64 (mini-batch/chunk 16 and 1), forward and\n"
            "forward+backward, at B=8 T=2048 H=16 K=V=128 (size 1) and B=2 T=8192 H=16 K=V=128 (size 2),\n"
            "f32 and bf16 data, on the GPU. Prints ms,\n"
            "tokens/s, achieved TFLOP/s of the chunked and mini-batch forms against a cuBLAS TF32 8192^3 GEMM\n"
            "measured in the same run, GB/s (the least bytes a forward+backward moves), the ratio to fla's bf16\n"
            "time, and the chunked form's speedup over the per-token one; under each form its plan\n"
            "(pr_recurrence_plan) and the step memory of a no-grad and of a recorded forward; under\n"
            "TTT-Linear its backward's plan.\n"
            "  --device D   cuda (default) or cpu: the CPU reference forms at B=1 T=2048 H=4 K=V=64,\n"
            "               seconds, best of --reps (default 3, no warm-up), one chunk size\n"
            "  --dtype T    GPU: f32 or bf16 (default both, side by side); CPU: f64 (default), f32, bf16\n"
            "  --reps N     timed repetitions (GPU: median, default 5); --warmup N untimed runs first (2)\n"
            "  --size S     GPU only: 1, 2 or all (default all)\n"
            "  --shape B,T,H,K,V  GPU only: this size instead (prism_core L=2; no fla figure), e.g.\n"
            "               1,16384,8,96,96 for one long sequence (--force segments=1 turns segments off)\n"
            "  --rules L    comma-separated rules to run; on the GPU also ttt_linear, ttt_mlp, titans (default all)\n"
            "  --chunks L   comma-separated chunk sizes of the chunked form (default 64; the CUDA\n"
            "               kernels run 32 and 64)\n"
            "  --no-token   skip the per-token form (it is slow)\n"
            "  --fp32       GPU only: also time the chunked form with fp32 (non-tensor-core) products\n"
            "  --bf16-staged  GPU only: under each bf16 row a bf16s row, the same with every bf16 tensor\n"
            "               staged through f32 copies (force bf16_staged=on: the path before the passes\n"
            "               that read bf16 in place), to compare the two in one run\n"
            "  --fla-gla MS1[,MS2]  GPU only: fla's chunk_gla bf16 f+b ms at size 1 (and 2), as\n"
            "               tools/device/time_fla.py measures it on this GPU; gla's rows then show\n"
            "               \"x fla\" and, at size 1, issue 43's target (<= 1.0x fla)\n"
            "  --force L    GPU only: force fields of the chunked plan (pr_rec_force), comma-separated\n"
            "               name=value: segments, bv_state, bv_dstate, bk_grad, bk_wy, grad_bpw, grad_pieces\n"
            "               (numbers); prep, state, scores, dstate, wy (mma|wgmma); seg_fix, extras_apart,\n"
            "               x16, bf16_staged, gla_fast, bf16_mma (on|off). gla_fast (default on): gla's fast\n"
            "               chunked kernels, off the plain ones (with --rules gla). bf16_mma (default on): bf16\n"
            "               wgmma products in the passes that read bf16 in place (so far prep, output, dlocal),\n"
            "               off: TF32 there; =on where it cannot apply: the plan line says why. E.g. --force\n"
            "               state=mma,bv_state=32. A field the kernels cannot run at a size stops the run,\n"
            "               naming it; the per-token form takes none of them\n"
            "  --ttt-bwd F  GPU only: TTT-Linear's backward fused, split or overlap (default: its plan's)\n"
            "  --extras N   prism_core's extra writes (default 1: the paper form at L=2, whose first refinement\n"
            "               step is the core's write; 2: the augmented form at L=2)\n"
            "Reference (flash-linear-attention Triton, bf16, H200, fwd+bwd; size 1 / size 2): gated\n"
            "delta 3.54 / 3.53 ms, delta 2.62 / 2.92 ms, SSD 2.61 / 2.06 ms, TTT-Linear (mini-batch 16)\n"
            "4.53 / 10.8 ms. Targets (issue 13, size 1): gdn <= 3.0 ms, delta <= 2.5, ssd <= 2.0,\n"
            "linattn <= 1.8, prism_core (paper form, L=2: one extra) <= 1.3x gdn, ttt_linear <= 4.5.\n");
}

/* the options of both devices; returns -1 to go on, else the exit status */
static int parse_options(int argc, char **argv, pr_bench_rec_opts *o)
{
    static const char *const devices[] = {"cpu", "cuda", NULL}, *const dtypes[] = {"f64", "f32", "bf16", NULL};
    static const char *const sizes[] = {"1", "2", "all", NULL};
    static const char *const ttt_bwds[] = {"fused", "split", "overlap", NULL};
    const char *rules[PR_NRULES + 4];   /* bits: the rules, then ttt_linear, ttt_mlp, titans */
    for (int r = 0; r < PR_NRULES; r++) rules[r] = pr_rule_name((pr_rule)r);
    rules[PR_NRULES] = "ttt_linear", rules[PR_NRULES + 1] = "ttt_mlp", rules[PR_NRULES + 2] = "titans";
    rules[PR_NRULES + 3] = NULL;
    int dev = 1, dtype = -1, size = -1, ttt_bwd = -1;
    const char *force = NULL;
    *o = (pr_bench_rec_opts){.reps = -1, .warm = -1, .chunks = {64}};   /* chunks[0]: the CPU default */
    pr_args a = pr_args_begin("prism bench recurrence", argc, argv);
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return usage(stdout), 0;
        if (pr_args_choice(&a, "--device", devices, &dev) || pr_args_choice(&a, "--dtype", dtypes, &dtype)) continue;
        if (pr_args_int(&a, "--reps", 1, 100000, &o->reps) || pr_args_int(&a, "--warmup", 0, 100000, &o->warm)) continue;
        if (pr_args_choice(&a, "--size", sizes, &size) || pr_args_choice_list(&a, "--rules", rules, &o->rules)) continue;
        if (pr_args_int_list(&a, "--chunks", 1, 1024, 4, o->chunks, &o->nch)) continue;
        if (pr_args_int_list(&a, "--shape", 1, 1 << 20, 5, o->shape, &o->nshape)) continue;
        if (pr_args_flag(&a, "--no-token", &o->no_token) || pr_args_flag(&a, "--fp32", &o->fp32)) continue;
        if (pr_args_flag(&a, "--bf16-staged", &o->bf16_staged)) continue;
        if (pr_args_positive_list(&a, "--fla-gla", 2, o->fla_gla, &o->nfla_gla)) continue;
        if (pr_args_string(&a, "--force", &force) || pr_args_choice(&a, "--ttt-bwd", ttt_bwds, &ttt_bwd)) continue;
        if (pr_args_int(&a, "--extras", 1, 8, &o->extras)) continue;
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    char err[256];
    if (force && !pr_rec_force_parse(force, &o->force, err, sizeof err)) return pr_args_error(&a, "--%s", err);
    o->ttt_bwd = ttt_bwd < 0 ? PR_TTT_BWD_PLANNED : (pr_ttt_bwd)(PR_TTT_BWD_FUSED + ttt_bwd);
    o->cuda = dev == 1;
    if (o->cuda) {   /* no --chunks: chunks of 64 */
        if (dtype == 0) return pr_args_error(&a, "--dtype f64 needs --device cpu: the GPU runs f32 and bf16");
        o->gpu_dtypes = dtype == 1 ? 1 : dtype == 2 ? 2 : 3;
        if (!o->rules) o->rules = (1u << (PR_NRULES + 3)) - 1;
        o->dt = PR_F32;
        if (o->nshape && o->nshape != 5) return pr_args_error(&a, "--shape wants five sizes B,T,H,K,V");
        if (o->nshape && size >= 0) return pr_args_error(&a, "--shape and --size pick the size: give one");
        o->sizes = o->nshape ? 4 : size < 0 ? 3 : size + 1;
        if (o->reps < 0) o->reps = 5;
        if (o->warm < 0) o->warm = 2;
        return -1;
    }
    if (size >= 0) return pr_args_error(&a, "--size picks a GPU size; --device cpu runs B=1 T=2048 H=4 K=V=64");
    if (o->nshape) return pr_args_error(&a, "--shape picks a GPU size; --device cpu runs B=1 T=2048 H=4 K=V=64");
    if (o->fp32) return pr_args_error(&a, "--fp32 applies to --device cuda only");
    if (o->bf16_staged) return pr_args_error(&a, "--bf16-staged applies to --device cuda only");
    if (o->nfla_gla) return pr_args_error(&a, "--fla-gla applies to --device cuda only");
    if (force) return pr_args_error(&a, "--force applies to --device cuda only (the CUDA chunked plan)");
    if (ttt_bwd >= 0) return pr_args_error(&a, "--ttt-bwd applies to --device cuda only");
    if (o->rules >> PR_NRULES) return pr_args_error(&a, "--rules: the TTT ops have no CPU timing here");
    if (!o->rules) o->rules = (1u << PR_NRULES) - 1;
    if (o->nch > 1) return pr_args_error(&a, "--chunks takes one chunk size with --device cpu");
    if (!o->nch) o->nch = 1;
    o->dt = dtype == 1 ? PR_F32 : dtype == 2 ? PR_BF16 : PR_F64;
    if (o->reps < 0) o->reps = 3;
    if (o->warm < 0) o->warm = 0;
    return -1;
}

int pr_bench_recurrence(int argc, char **argv)
{
    pr_bench_rec_opts o;
    const int rc = parse_options(argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.cuda) return pr_bench_recurrence_cpu(&o, NULL);
#ifdef PRISM_HAVE_CUDA
    if (pr_cuda_available()) return pr_bench_recurrence_cuda(&o);
#endif
    return pr_args_no_cuda("prism bench recurrence");
}
