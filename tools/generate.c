/* tools/generate.c: `prism generate`: continue a prompt with a byte-level LM
 * run, using the carried-state decoding: the prompt runs once, then each new
 * byte runs alone from the state the previous ones left. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "train/train.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: prism generate --run DIR --prompt TEXT [--tokens N] [--temperature T] [--top-k K]\n"
               "                      [--seed S] [--device auto|cpu|cuda]\n\n"
               "Continues TEXT with N bytes (default 200) from the latest checkpoint of an lm run.\n"
               "Temperature 0 takes the most likely byte; otherwise bytes are drawn from the\n"
               "softmax of logits / T (default 0.8) over the K most likely (0: all; default 0).\n"
               "Draws are seeded (--seed, default 1): one seed, one continuation. The prompt and\n"
               "the continuation are printed on stdout.\n");
}

/* the next byte from logits z[V]: greedy, or a draw u in [0,1) from the top k at temperature temp */
static int pick(const double *z, int V, double temp, int k, double u)
{
    int best = 0;
    for (int v = 1; v < V; v++)
        if (z[v] > z[best]) best = v;
    if (temp <= 0) return best;
    double *p = malloc(sizeof(double) * (size_t)V), kth = -INFINITY, total = 0;
    PR_CHECK(p, "generate: out of host memory");
    if (k > 0 && k < V) {  /* the k-th largest logit: a threshold (ties may let a few more in) */
        memcpy(p, z, sizeof(double) * (size_t)V);
        for (int i = 0; i < k; i++) {
            int m = i;
            for (int j = i + 1; j < V; j++)
                if (p[j] > p[m]) m = j;
            double t = p[i];
            p[i] = p[m];
            p[m] = t;
        }
        kth = p[k - 1];
    }
    for (int v = 0; v < V; v++) total += p[v] = z[v] >= kth ? exp((z[v] - z[best]) / temp) : 0;
    int out = best;
    for (int v = 0; v < V; v++) {
        u -= p[v] / total;
        if (p[v] > 0 && u < 0) {
            out = v;
            break;
        }
    }
    free(p);
    return out;
}

int pr_cmd_generate(int argc, char **argv)
{
    const char *cmd = "prism generate", *dir = NULL, *prompt = NULL;
    static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
    pr_args a = pr_args_begin(cmd, argc, argv);
    int tokens = 200, top_k = 0, device = 0;
    double temp = 0.8;
    uint64_t seed = 1;
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return usage(stdout), 0;
        if (pr_args_string(&a, "--run", &dir) || pr_args_string(&a, "--prompt", &prompt) ||
            pr_args_int(&a, "--tokens", 0, 1000000, &tokens) || pr_args_int(&a, "--top-k", 0, 1 << 24, &top_k) ||
            pr_args_u64(&a, "--seed", &seed) || pr_args_choice(&a, "--device", devices, &device))
            continue;
        const char *t = NULL;
        if (pr_args_string(&a, "--temperature", &t)) {
            char *end = NULL;
            if (t) temp = strtod(t, &end);
            if (t && (!*t || *end || !isfinite(temp) || temp < 0))
                return pr_args_error(&a, "--temperature wants a number >= 0, not '%s'", t);
            continue;
        }
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (!dir || !prompt || !*prompt) return pr_args_error(&a, "--run DIR and a non-empty --prompt TEXT are required");
    if (device == 2 && !pr_cuda_available()) return pr_args_no_cuda(cmd);
    pr_device dev = device == 1 ? PR_CPU : pr_cuda_available() ? PR_CUDA : PR_CPU;

    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    pr_err err;
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int64_t step;
    if (pr_run_config_load(&c, &o, path, &err) || pr_checkpoint_latest(dir, &step, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return 1;
    }
    if (pr_task_family_of(o.task) != PR_TASK_LM) {
        fprintf(stderr, "%s: %s was trained on task %s; generate needs a byte-level lm run\n", cmd, dir, o.task);
        return 1;
    }
    pr_model *m = pr_model_new(&c, PR_F32, dev);
    if (pr_checkpoint_load(dir, step, m->params, NULL, NULL, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        pr_model_free(m);
        return 1;
    }
    pr_ctx *ctx = pr_ctx_new(seed);
    pr_set_grad_enabled(ctx, false);
    ctx->training = false;
    pr_model_state *st = pr_model_state_new(m);
    pr_arena *keep[2] = {pr_arena_new("state a", 0), pr_arena_new("state b", 0)};
    int64_t n = (int64_t)strlen(prompt);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    double *z = malloc(sizeof(double) * (size_t)c.vocab);
    PR_CHECK(ids && z, "generate: out of host memory");
    for (int64_t i = 0; i < n; i++) ids[i] = (unsigned char)prompt[i];
    fputs(prompt, stdout);
    for (int i = 0; i < tokens; i++) {
        pr_tensor *x = pr_from_host(ctx->step, PR_I32, dev, PR_DIMS(1, i == 0 ? n : 1), ids);
        pr_tensor *logits = pr_lm_logits(ctx, m, x, st);
        pr_tensor *last = pr_view_rows(ctx->step, pr_view(ctx->step, logits, PR_DIMS(-1, c.vocab)),
                                       logits->numel / c.vocab - 1, 1);
        pr_to_host_f64(last, z);
        ids[0] = pick(z, c.vocab, temp, top_k, pr_philox_uniform(seed, 9, (uint64_t)i));
        putchar(ids[0]);
        fflush(stdout);
        pr_arena_reset(keep[i % 2]);        /* the other arena holds the state this step started from */
        pr_model_state_keep(st, keep[i % 2]);
        pr_step_reset(ctx);
    }
    putchar('\n');
    free(ids);
    free(z);
    pr_model_state_free(st);
    pr_arena_free(keep[0]);
    pr_arena_free(keep[1]);
    pr_ctx_free(ctx);
    pr_model_free(m);
    return 0;
}
