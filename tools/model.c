/* tools/model.c: `prism model`: builds a model from a preset, a config file
 * and key=value overrides, and prints its parameter table by path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "tools/tools.h"

static void model_usage(FILE *f)
{
    fprintf(f, "usage: prism model --model NAME [--preset P] [--config FILE] [--set key=value]...\n"
               "       prism model --keys-markdown     (the config keys as a Markdown table)\n\n"
               "Builds the model and prints each parameter's path, shape and size, then the\n"
               "total; the last line is one JSON object {\"model\", \"preset\", \"params\", \"config\"}.\n"
               "The config is the defaults, then the preset, then the file, then each --set in\n"
               "order; --model NAME is the same as --set mixer=NAME.\n\nmixers:\n");
    for (int i = 0; pr_mixers[i]; i++) fprintf(f, "  %-12s %s\n", pr_mixers[i]->name, pr_mixers[i]->summary);
    fprintf(f, "\npresets:");
    for (int i = 0; pr_config_presets[i]; i++) fprintf(f, " %s", pr_config_presets[i]);
    fprintf(f, "\n\nconfig keys (JSON nests dotted keys: {\"prism\": {\"L\": 2}}):\n");
    pr_config_print_help(f);
}

static int fail(const char *msg)
{
    fprintf(stderr, "prism model: %s\n", msg);
    return 2;
}

int pr_cmd_model(int argc, char **argv)
{
    const char *model = NULL, *preset = NULL, *file = NULL;
    const char *sets[64];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        bool has_value = i + 1 < argc;
        if (pr_is_help(argv[i])) {
            model_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--keys-markdown") == 0) {
            pr_config_print_markdown(stdout);
            return 0;
        } else if (strcmp(argv[i], "--model") == 0 && has_value) {
            model = argv[++i];
        } else if (strcmp(argv[i], "--preset") == 0 && has_value) {
            preset = argv[++i];
        } else if (strcmp(argv[i], "--config") == 0 && has_value) {
            file = argv[++i];
        } else if (strcmp(argv[i], "--set") == 0 && has_value && n_sets < 64) {
            sets[n_sets++] = argv[++i];
        } else {
            fprintf(stderr, "prism model: unknown or incomplete option '%s'\n", argv[i]);
            model_usage(stderr);
            return 2;
        }
    }
    if (!model) return fail("--model NAME is required (prism model --help lists the mixers)");
    pr_config c = pr_config_default();
    pr_err err;
    char mixer[64];
    snprintf(mixer, sizeof mixer, "mixer=%s", model);
    if ((preset && pr_config_preset(&c, preset, &err)) || (file && pr_config_load(&c, file, &err)) ||
        pr_config_set(&c, mixer, &err))
        return fail(err.msg);
    for (int i = 0; i < n_sets; i++)
        if (pr_config_set(&c, sets[i], &err)) return fail(err.msg);
    if (pr_config_check(&c, &err)) return fail(err.msg);

    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    const pr_params *r = m->params;
    char shape[64];
    for (int i = 0; i < r->n; i++)
        printf("%-40s %-16s %12lld\n", r->p[i].path, pr_shape_str(r->p[i].t, shape, sizeof shape),
               (long long)r->p[i].t->numel);
    long long total = (long long)pr_params_count(r);
    printf("total %lld parameters in %d tensors\n", total, r->n);
    char *json = pr_config_to_json(&c);
    printf("{\"model\":\"%s\",\"preset\":\"%s\",\"params\":%lld,\"config\":%s}\n", c.mixer, preset ? preset : "",
           total, json);
    free(json);
    pr_model_free(m);
    return 0;
}
