/* tools/model.c: `prism model`: builds a model from a preset, a config file
 * and key=value overrides, and prints its parameter table by path. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>
#include "models/models.h"
#include "tools/tools.h"

enum { DEFAULT_BATCH = 32 };   /* train.batch's default */

static void model_usage(FILE *f)
{
    fprintf(f, "usage: prism model --model NAME [--preset P] [--config FILE] [--set key=value]...\n"
               "                   [--checkpoint FILE] [--save FILE] [--logits T0,T1,...] [--batch B]\n"
               "       prism model --keys-markdown     (the config keys as a Markdown table)\n\n"
               "Builds the model and prints each parameter's path, shape and size, then the\n"
               "total, and the memory a training step would take (f32 parameters, grads, AdamW's\n"
               "state, the activations of --batch sequences of seq_len, default batch %d), known\n"
               "before anything is allocated; the last line is one JSON object {\"model\", \"preset\",\n"
               "\"params\", \"config\"}. A config whose parameters do not fit in memory is refused for\n"
               "--checkpoint, --save and --logits, which need their values.\n"
               "The config is the defaults, then the preset, then the file, then each --set in\n"
               "order; --model NAME is the same as --set mixer=NAME (--config alone may name it).\n"
               "--logits runs the LM (float64, CPU) on the tokens and prints one line of logits\n"
               "per position instead, from --checkpoint's values (else the seeded init).\n"
               "--save writes those values as a checkpoint (safetensors, names = paths).\n\nmixers:\n",
            DEFAULT_BATCH);
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

static void print_estimate(const pr_model_estimate *e, int batch, int seq_len)
{
    char p[32], g[32], o[32], a[32], t[32];
    printf("training step (f32, AdamW, batch %d x seq_len %d): parameters %s, grads %s, optimizer state %s, "
           "activations about %s; total about %s\n", batch, seq_len, pr_bytes_text(p, sizeof p, e->param_bytes),
           pr_bytes_text(g, sizeof g, e->grad_bytes), pr_bytes_text(o, sizeof o, e->optim_bytes),
           pr_bytes_text(a, sizeof a, e->activation_bytes), pr_bytes_text(t, sizeof t, e->total_bytes));
}

/* what the sizes came from: PRISM's form, and the blocks or MLP width match_attn chose */
static void print_sizing(const pr_model *m, const pr_config *asked)
{
    const pr_config *c = &m->cfg;
    if (strcmp(c->mixer, "prism") == 0)
        printf("prism layer: form %s, L = %d (docs/PRISM.md)\n", c->prism_form, c->prism_L);
    if (!asked->match_attn) return;
    if (c->n_layers == 2 * asked->n_layers)
        printf("match_attn: %d blocks, twice n_layers %d (no MLP in a block)\n", c->n_layers, asked->n_layers);
    else if (c->n_layers != asked->n_layers)
        printf("match_attn: %d blocks for n_layers %d, to hold attn's parameters\n", c->n_layers, asked->n_layers);
    else
        printf("match_attn: MLP width %lld (%lld unmatched) to hold attn's parameters a block\n",
               llround(c->mlp_mult * c->d_model), llround(asked->mlp_mult * asked->d_model));
}

static void print_table(const pr_model *m, const pr_config *asked, const char *preset, int batch)
{
    const pr_params *r = m->params;
    char shape[64];
    for (int i = 0; i < r->n; i++)
        printf("%-40s %-16s %12lld\n", r->p[i].path, pr_shape_str(r->p[i].t, shape, sizeof shape),
               (long long)r->p[i].t->numel);
    print_sizing(m, asked);
    long long total = (long long)pr_params_count(r);
    printf("total %lld parameters in %d tensors\n", total, r->n);
    pr_model_estimate e;
    pr_model_estimate_step(&m->cfg, batch, 0, 2, &e);
    print_estimate(&e, batch, m->cfg.seq_len);
    char *json = pr_config_to_json(&m->cfg);
    printf("{\"model\":\"%s\",\"preset\":\"%s\",\"params\":%lld,\"config\":%s}\n", m->cfg.mixer,
           preset ? preset : "", total, json);
    free(json);
}

int pr_cmd_model(int argc, char **argv)
{
    const char *model = NULL, *preset = NULL, *file = NULL, *ckpt = NULL, *save = NULL;
    const char *sets[64];
    int n_sets = 0, n_tokens = 0, batch = DEFAULT_BATCH;
    int64_t tokens[4096];
    bool keys_markdown = false;
    pr_args a = pr_args_begin("prism model", argc, argv);
    while (pr_args_next(&a)) {
        const char *set = NULL;
        if (pr_args_help(&a)) return model_usage(stdout), 0;
        if (pr_args_flag(&a, "--keys-markdown", &keys_markdown) || pr_args_string(&a, "--model", &model) ||
            pr_args_string(&a, "--preset", &preset) || pr_args_string(&a, "--config", &file) ||
            pr_args_string(&a, "--checkpoint", &ckpt) || pr_args_string(&a, "--save", &save) ||
            pr_args_int_list(&a, "--logits", 0, INT32_MAX, 4096, tokens, &n_tokens) ||
            pr_args_int(&a, "--batch", 1, 1 << 24, &batch))
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
    if (n_tokens && c.task != PR_HEAD_LM) return fail("--logits needs task lm");

    if (!ckpt && !save && !n_tokens) {   /* the table needs shapes only: nothing allocated, whatever the size */
        pr_model *shapes = pr_model_shapes(&c);
        print_table(shapes, &c, preset, batch);
        pr_model_free(shapes);
        return 0;
    }
    pr_model_estimate e;
    pr_model_estimate_step(&c, 1, 0, 0, &e);
    double need = e.param_bytes * (n_tokens ? 2 : 1), have = pr_device_free_bytes(PR_CPU);   /* --logits: f64 */
    if (need > have) {
        char x[32], y[32];
        fprintf(stderr, "prism model: the %lld parameters need %s, more than the %s the host has available; make "
                        "d_model or n_layers smaller\n", (long long)e.params, pr_bytes_text(x, sizeof x, need),
                pr_bytes_text(y, sizeof y, have));
        return PR_EXIT_USAGE;
    }
    pr_model *m = pr_model_new(&c, n_tokens ? PR_F64 : PR_F32, PR_CPU);
    int rc = 0;
    if (!ckpt) pr_model_init(m);
    if ((ckpt && pr_params_load(m->params, ckpt, &err)) || (save && pr_params_save(m->params, save, &err))) {
        fprintf(stderr, "prism model: %s\n", err.msg);
        rc = 1;
    } else if (n_tokens) {
        rc = print_logits(m, tokens, n_tokens);
    } else {
        print_table(m, &c, preset, batch);
    }
    pr_model_free(m);
    return rc;
}
