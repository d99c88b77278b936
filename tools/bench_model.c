/* tools/bench_model.c: `prism bench block`: the forward and forward+backward
 * time of one pre-norm block (norm, mixer, residual, norm, MLP, residual) per
 * mixer (lab/bench_block.c measures), at the size by default
 * (lm-130m: D 768, 8 heads; B 8, T 1024). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "models/models.h"
#include "tools/tools.h"

static void block_usage(FILE *f)
{
    fprintf(f, "usage: prism bench block [--mixer NAME] [--preset P] [--set key=value]... [--B N] [--T N]\n"
               "                         [--device cuda|cpu] [--iters N] [--precision f32|tf32|bf16]\n\n"
               "Times one block of each mixer (or of --mixer NAME) of the preset (default lm-130m)\n"
               "on random input [B,T,D] (default B 8, T 1024): forward alone and forward + backward\n"
               "(every parameter's and the input's gradient), median of --iters runs (default 10)\n"
               "after 2 warm-up runs, in --precision (default f32; as train.precision, prism train\n"
               "--help; --tf32 is --precision tf32). Prints a line per mixer; the last line is JSON.\n");
}

typedef struct {
    const char *mixer, *preset;
    const char *sets[32];
    int n_sets, iters;
    pr_precision precision;
    int64_t B, T;
    pr_device dev;
} block_opts;

static int bench_one(const block_opts *o, const char *mixer, char *json, size_t json_cap)
{
    pr_config c = pr_config_default();
    pr_err err;
    char kv[64];
    snprintf(kv, sizeof kv, "mixer=%s", mixer);
    int rc = pr_config_preset(&c, o->preset, &err);
    for (int i = 0; rc == 0 && i < o->n_sets; i++) rc = pr_config_set(&c, o->sets[i], &err);
    if (rc == 0) rc = pr_config_set(&c, kv, &err);
    if (rc == 0) rc = pr_config_check(&c, &err);
    if (rc) {
        fprintf(stderr, "prism bench block: %s\n", err.msg);
        return 2;
    }
    pr_bench_block_time t;
    if (pr_bench_block_one(&c, o->B, o->T, o->dev, o->precision, o->iters, &t)) {   /* a row that says so, not a crash */
        double gib = t.skipped_bytes / (1 << 30);
        const char *why;
        pr_mixer_big_step_bytes(&c, o->B, o->T, &why);
        printf("%-12s skipped: ~%.0f GiB for the backward at this size, %s\n", mixer, gib, why);
        size_t len = strlen(json);
        snprintf(json + len, json_cap - len, "%s\"%s\":{\"skipped_gib\":%.0f}", len > 1 ? "," : "", mixer, gib);
        return 0;
    }
    printf("%-12s %12lld %10.3f %12.3f %14.0f\n", mixer, (long long)t.params, 1e3 * t.fwd_s, 1e3 * t.fwd_bwd_s,
           (double)(o->B * o->T) / t.fwd_bwd_s);
    size_t len = strlen(json);
    snprintf(json + len, json_cap - len, "%s\"%s\":{\"fwd_ms\":%.4f,\"fwd_bwd_ms\":%.4f}", len > 1 ? "," : "", mixer,
             1e3 * t.fwd_s, 1e3 * t.fwd_bwd_s);
    return 0;
}

int pr_bench_block(int argc, char **argv)
{
    block_opts o = {.preset = "lm-130m", .iters = 10, .B = 8, .T = 1024, .dev = pr_cuda_available() ? PR_CUDA : PR_CPU};
    static const char *const devices[] = {"cpu", "cuda", NULL};
    pr_args a = pr_args_begin("prism bench block", argc, argv);
    while (pr_args_next(&a)) {
        const char *set = NULL;
        int B = 0, T = 0, dev = -1, prec = -1;
        static const char *const precisions[] = {"f32", "tf32", "bf16", NULL};   /* pr_precision's order */
        bool tf32 = false;
        if (pr_args_help(&a)) return block_usage(stdout), 0;
        if (pr_args_string(&a, "--mixer", &o.mixer) || pr_args_string(&a, "--preset", &o.preset) ||
            pr_args_int(&a, "--iters", 1, 1000000, &o.iters))
            continue;
        if (pr_args_string(&a, "--set", &set)) {
            if (set && o.n_sets == 32) return pr_args_error(&a, "at most 32 --set options");
            if (set) o.sets[o.n_sets++] = set;
        } else if (pr_args_int(&a, "--B", 1, 1 << 20, &B)) {
            o.B = B;
        } else if (pr_args_int(&a, "--T", 1, 1 << 24, &T)) {
            o.T = T;
        } else if (pr_args_flag(&a, "--tf32", &tf32)) {
            o.precision = PR_PREC_TF32;
        } else if (pr_args_choice(&a, "--precision", precisions, &prec)) {
            if (prec >= 0) o.precision = (pr_precision)prec;
        } else if (pr_args_choice(&a, "--device", devices, &dev)) {
            o.dev = dev == 1 ? PR_CUDA : PR_CPU;
        } else {
            return pr_args_unknown(&a);
        }
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (o.mixer && !pr_mixer_by_name(o.mixer)) return pr_args_error(&a, "unknown mixer '%s'", o.mixer);
    if (o.dev == PR_CUDA && !pr_cuda_available()) return pr_args_no_cuda("prism bench block");
    printf("one block, preset %s, B=%lld T=%lld, %s %s; median of %d\n", o.preset, (long long)o.B, (long long)o.T,
           pr_device_name(o.dev), pr_precision_name(o.precision), o.iters);
    printf("%-12s %12s %10s %12s %14s\n", "mixer", "params", "fwd ms", "fwd+bwd ms", "tokens/s");
    char json[2048] = "{";
    for (int i = 0; pr_mixers[i]; i++) {
        if (o.mixer && strcmp(o.mixer, pr_mixers[i]->name) != 0) continue;
        int rc = bench_one(&o, pr_mixers[i]->name, json, sizeof json - 2);
        if (rc) return rc;
    }
    strcat(json, "}");
    printf("%s\n", json);
    return 0;
}
