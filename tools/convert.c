/* tools/convert.c: `prism convert`: flash-linear-attention Hugging Face
 * checkpoints to and from prism's (models/fla.c does the mapping). */
#include <stdio.h>

#include "models/models.h"
#include "tools/tools.h"

static void convert_usage(FILE *f)
{
    fprintf(f, "usage: prism convert --from-fla DIR --checkpoint OUT.safetensors --config OUT.json\n"
               "       prism convert --to-fla DIR --checkpoint IN.safetensors --config IN.json\n\n"
               "DIR holds fla's config.json and model.safetensors (GatedDeltaNet, DeltaNet,\n"
               "linear attention, Mamba-2, Transformer, GLA, GSA, MoM). --from-fla writes\n"
               "prism's checkpoint (tensors named by parameter path) and config; --to-fla\n"
               "writes DIR from them. Tensors keep their dtype and bytes; models/README.md\n"
               "has the name table.\n");
}

int pr_cmd_convert(int argc, char **argv)
{
    const char *from = NULL, *to = NULL, *ckpt = NULL, *config = NULL;
    pr_args a = pr_args_begin("prism convert", argc, argv);
    while (pr_args_next(&a)) {
        if (pr_args_help(&a)) return convert_usage(stdout), 0;
        if (pr_args_string(&a, "--from-fla", &from) || pr_args_string(&a, "--to-fla", &to) ||
            pr_args_string(&a, "--checkpoint", &ckpt) || pr_args_string(&a, "--config", &config))
            continue;
        return pr_args_unknown(&a);
    }
    if (a.failed) return PR_EXIT_USAGE;
    if (!from == !to) return pr_args_error(&a, "give exactly one of --from-fla DIR and --to-fla DIR");
    if (!ckpt || !config) return pr_args_error(&a, "--checkpoint FILE and --config FILE are required");
    pr_err err;
    int rc = from ? pr_fla_import(from, ckpt, config, &err) : pr_fla_export(config, ckpt, to, &err);
    if (rc) {
        fprintf(stderr, "prism convert: %s\n", err.msg);
        return 1;
    }
    return 0;
}
