/* tests/fuzz/fuzz_fla.c: fla's config.json as `convert --from-fla` reads it
 * (the folder holds no model.safetensors, so an accepted config stops at
 * the missing weights; the sizes, heads and options are what is fuzzed). */
#include "models/models.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[512], cfg[600], out_ckpt[512], out_cfg[512];
    fuzz_path("fla", dir, sizeof dir);
    mkdir(dir, 0700);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    fuzz_write(cfg, data, size);
    fuzz_path("out.safetensors", out_ckpt, sizeof out_ckpt);
    fuzz_path("out.json", out_cfg, sizeof out_cfg);
    pr_err err;
    if (pr_fla_import(dir, out_ckpt, out_cfg, &err) == 0) abort();   /* no weights: never a success */
    return 0;
}
