/* tools/model.c: `prism model`: builds a model from a preset, a config file
 * and key=value overrides, and prints its parameter table by path. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "tools/tools.h"

static void model_usage(FILE *f)
{
    fprintf(f, "usage: prism model --model NAME [--preset P] [--config FILE] [--set key=value]...\n"
               "                   [--checkpoint FILE] [--save FILE] [--logits T0,T1,...]\n"
               "       prism model --keys-markdown     (the config keys as a Markdown table)\n\n"
               "Builds the model and prints each parameter's path, shape and size, then the\n"
               "total; the last line is one JSON object {\"model\", \"preset\", \"params\", \"config\"}.\n"
               "The config is the defaults, then the preset, then the file, then each --set in\n"
               "order; --model NAME is the same as --set mixer=NAME (--config alone may name it).\n"
               "--logits runs the LM (float64, CPU) on the tokens and prints one line of logits\n"
               "per position instead, from --checkpoint's values (else the seeded init).\n"
               "--save writes those values as a checkpoint (safetensors, names = paths).\n\nmixers:\n");
    for (int i = 0; pr_mixers[i]; i++) fprintf(f, "  %-12s %s\n", pr_mixers[i]->name, pr_mixers[i]->summary);
    fprintf(f, "  %-12s %s\n", "sla", "the PRISM paper's name for linattn (the same layer)");
    fprintf(f, "\npresets:");
    for (int i = 0; pr_config_presets[i]; i++) fprintf(f, " %s", pr_config_presets[i]);
    fprintf(f, "\n\nconfig keys (JSON nests dotted keys: {\"prism\": {\"L\": 2}}):\n");
    pr_config_print_help(f);
}

static int fail(const char *msg)
{
    fprintf(stderr, "prism model: %s\n", msg);
    return PR_EXIT_USAGE;
}

/* the LM's logits for one token sequence, one line per position (float64 on
 * the CPU, from the checkpoint's values), then {"model", "tokens", "vocab"} */
static int print_logits(pr_model *m, const int64_t *tokens, int n)
{
    for (int i = 0; i < n; i++)
        if (tokens[i] >= m->cfg.vocab) {
            fprintf(stderr, "prism model: --logits token %lld is not below vocab %d\n", (long long)tokens[i],
                    m->cfg.vocab);
            return PR_EXIT_USAGE;
        }
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *ids = pr_empty(ctx->step, PR_I64, PR_CPU, PR_DIMS(1, n));
    for (int i = 0; i < n; i++) ((int64_t *)ids->data)[i] = tokens[i];
    pr_tensor *logits = pr_lm_logits(ctx, m, ids, NULL);
    const double *v = logits->data;
    for (int t = 0; t < n; t++)
        for (int j = 0; j < m->cfg.vocab; j++)
            printf("%.17g%c", v[(size_t)t * m->cfg.vocab + j], j + 1 == m->cfg.vocab ? '\n' : ' ');
    printf("{\"model\":\"%s\",\"tokens\":%d,\"vocab\":%d}\n", m->cfg.mixer, n, m->cfg.vocab);
    pr_ctx_free(ctx);
    return 0;
}

static void print_table(const pr_model *m, const char *preset)
{
    const pr_params *r = m->params;
    char shape[64];
    for (int i = 0; i < r->n; i++)
        printf("%-40s %-16s %12lld\n", r->p[i].path, pr_shape_str(r->p[i].t, shape, sizeof shape),
               (long long)r->p[i].t->numel);
    long long total = (long long)pr_params_count(r);
    printf("total %lld parameters in %d tensors\n", total, r->n);
    char *json = pr_config_to_json(&m->cfg);
    printf("{\"model\":\"%s\",\"preset\":\"%s\",\"params\":%lld,\"config\":%s}\n", m->cfg.mixer,
           preset ? preset : "", total, json);
    free(json);
}

int pr_cmd_model(int argc, char **argv)
{
    const char *model = NULL, *preset = NULL, *file = NULL, *ckpt = NULL, *save = NULL;
    const char *sets[64];
    int n_sets = 0, n_tokens = 0;
    int64_t tokens[4096];
    bool keys_markdown = false;
    pr_args a = pr_args_begin("prism model", argc, argv);
    while (pr_args_next(&a)) {
        const char *set = NULL;
        if (pr_args_help(&a)) return model_usage(stdout), 0;
        if (pr_args_flag(&a, "--keys-markdown", &keys_markdown) || pr_args_string(&a, "--model", &model) ||
            pr_args_string(&a, "--preset", &preset) || pr_args_string(&a, "--config", &file) ||
            pr_args_string(&a, "--checkpoint", &ckpt) || pr_args_string(&a, "--save", &save) ||
            pr_args_int_list(&a, "--logits", 0, INT32_MAX, 4096, tokens, &n_tokens))
            continue;
        if (!pr_args_string(&a, "--set", &set)) return pr_args_unknown(&a);
        if (set && n_sets == 64) return pr_args_error(&a, "at most 64 --set options");
        if (set) sets[n_sets++] = set;
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (keys_markdown) return pr_config_print_markdown(stdout), 0;
    if (!model && !file) return fail("--model NAME or --config FILE is required (prism model --help lists the mixers)");
    if (file && pr_args_readable("prism model", file)) return 1;
    pr_config c = pr_config_default();
    pr_err err;
    char mixer[64];
    snprintf(mixer, sizeof mixer, "mixer=%s", model ? model : "");
    if ((preset && pr_config_preset(&c, preset, &err)) || (file && pr_config_load(&c, file, &err)) ||
        (model && pr_config_set(&c, mixer, &err)))
        return fail(err.msg);
    for (int i = 0; i < n_sets; i++)
        if (pr_config_set(&c, sets[i], &err)) return fail(err.msg);
    if (pr_config_check(&c, &err)) return fail(err.msg);
    if (n_tokens && strcmp(c.task, "lm") != 0) return fail("--logits needs task lm");

    pr_model *m = pr_model_new(&c, n_tokens ? PR_F64 : PR_F32, PR_CPU);
    int rc = 0;
    if (!ckpt) pr_model_init(m);
    if ((ckpt && pr_params_load(m->params, ckpt, &err)) || (save && pr_params_save(m->params, save, &err))) {
        fprintf(stderr, "prism model: %s\n", err.msg);
        rc = 1;
    } else if (n_tokens) {
        rc = print_logits(m, tokens, n_tokens);
    } else {
        print_table(m, preset);
    }
    pr_model_free(m);
    return rc;
}
