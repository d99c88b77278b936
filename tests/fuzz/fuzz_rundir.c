/* tests/fuzz/fuzz_rundir.c: reading a run folder back (what --resume and
 * inspect --run do). A valid checkpoint of a two-parameter model is written
 * once; each input replaces one of its files (the first byte picks which:
 * `latest`, the state file, the weights file, config.json) before the run
 * is read back and, when it loads, the optimizer takes a step as a resumed
 * run would; the file is restored afterwards. */
#include "models/models.h"
#include "optim/optim.h"
#include "train/train.h"
#include "tests/fuzz/fuzz.h"

static pr_params *params;
static pr_optim *optim;
static pr_ctx *ctx;
static char dir[512], files[4][600];
static uint8_t *saved[4];
static size_t saved_n[4];

static void slurp(const char *path, uint8_t **out, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc(*n + 1);
    if (!*out || fread(*out, 1, *n, f) != *n) abort();
    fclose(f);
}

static void setup(void)
{
    fuzz_path("run", dir, sizeof dir);
    mkdir(dir, 0700);
    params = pr_params_new(PR_F32, PR_CPU);
    pr_init normal = {PR_INIT_NORMAL, 0.02, 0};
    pr_param_new(params, "w", normal, true, 2, (int64_t[]){3, 4});
    pr_param_new(params, "norm.w", normal, false, 1, (int64_t[]){4});
    pr_optim_opts oo = pr_optim_adamw_defaults();
    optim = pr_optim_new(params, &oo);
    ctx = pr_ctx_new(1);
    pr_train_state s = {.step = 1, .data_pos = 1, .metrics_bytes = 0, .rng = pr_rng_init(1, 0)};
    pr_err err;
    if (pr_checkpoint_save(dir, params, optim, &s, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        abort();
    }
    snprintf(files[0], sizeof files[0], "%s/latest", dir);
    snprintf(files[1], sizeof files[1], "%s/ckpt-%08d.state.safetensors", dir, 1);
    snprintf(files[2], sizeof files[2], "%s/ckpt-%08d.weights.safetensors", dir, 1);
    snprintf(files[3], sizeof files[3], "%s/config.json", dir);
    pr_config c0 = pr_config_default();
    pr_train_opts o0 = pr_train_defaults();
    char *cfg = pr_run_config_json(&c0, &o0);
    fuzz_write(files[3], (const uint8_t *)cfg, strlen(cfg));
    free(cfg);
    for (int i = 0; i < 4; i++) slurp(files[i], &saved[i], &saved_n[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!params) setup();
    if (size < 1) return 0;
    int which = data[0] % 4;
    fuzz_write(files[which], data + 1, size - 1);
    pr_err err;
    int64_t step;
    if (pr_checkpoint_latest(dir, &step, &err) == 0) {
        pr_train_state s;
        if (pr_checkpoint_load(dir, step, params, optim, &s, &err) == 0)
            pr_optim_step(ctx, optim, 1e-3, 1.0);   /* what a resumed run does next (no grads: t moves on) */
    }
    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    pr_run_config_load(&c, &o, files[3], &err);
    fuzz_write(files[which], saved[which], saved_n[which]);
    return 0;
}
