/* models/estimate.c: what a training step of a config would hold in memory,
 * known before anything is allocated, and what the device has free, so a
 * config too big for the machine stops with both numbers rather than
 * swapping or being killed part way (`--set d_model=65536` grew to 3.4 GB in
 * 20 s before).
 *
 * The parameter count is exact: the model's registry is built with shapes
 * and no data (pr_model_shapes). The activations are an estimate: a step
 * keeps about `floats` floats of width d_model per token and layer (inputs,
 * outputs and saved tensors of the norms, projections, mixer and MLP, and
 * their grads), per mixer: the step arena's peak on the CPU at d_model 64
 * and 128, batch 8, seq_len 64, 2 layers (it grows linearly in each), over
 * B*T*D*L, rounded up; plus LOGIT_COPIES floats per token and output row
 * (the logits, their softmax and its grad). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "models/models.h"

enum { LOGIT_COPIES = 3, OTHER_MIXER_FLOATS = 128 };

static const struct {
    const char *mixer;
    int floats;   /* measured: prism 89, gdn 73, mamba2 127, deltanet 69, linattn 73, ttt_linear 84, ttt_mlp 128,
                     titans 76, attn 70, mamba 77, mom 330, hstu 106 */
} act_floats[] = {{"prism", 96},    {"gdn", 80},      {"mamba2", 136}, {"deltanet", 80},
                  {"linattn", 80},  {"ttt_linear", 96}, {"ttt_mlp", 136}, {"titans", 80},
                  {"attn", 80},     {"mamba", 80},    {"mom", 336},    {"hstu", 112}};

static int floats_per_width(const char *mixer)
{
    for (size_t i = 0; i < sizeof act_floats / sizeof act_floats[0]; i++)
        if (strcmp(act_floats[i].mixer, mixer) == 0) return act_floats[i].floats;
    return OTHER_MIXER_FLOATS;
}

void pr_model_estimate_step(const pr_config *c, int64_t batch, int64_t scored, int optim_slots,
                            pr_model_estimate *out)
{
    pr_model *m = pr_model_shapes(c);
    int64_t n = pr_params_count(m->params), blocks = m->cfg.n_layers;   /* as built (match_attn) */
    pr_model_free(m);
    bool rec = c->task == PR_HEAD_REC;
    double rows = scored > 0 ? (double)scored : rec ? (double)c->rec_n_items + 1 : (double)c->vocab;
    double tokens = (double)batch * (double)c->seq_len, f32 = 4;
    *out = (pr_model_estimate){.params = n, .param_bytes = f32 * (double)n, .grad_bytes = f32 * (double)n,
                               .optim_bytes = f32 * (double)n * optim_slots};
    double width = (double)floats_per_width(c->mixer) * c->d_model * (double)blocks;
    /* atlas's per-token memories grow with K^2 (degree 2), hstu's scores with T^2, not with d_model: their own */
    out->activation_bytes = f32 * tokens * (width + LOGIT_COPIES * rows) + pr_atlas_step_bytes(c, batch, c->seq_len) +
                            pr_hstu_step_bytes(c, batch, c->seq_len);
    out->total_bytes = out->param_bytes + out->grad_bytes + out->optim_bytes + out->activation_bytes;
}

double pr_mixer_big_step_bytes(const pr_config *c, int64_t B, int64_t T, const char **why)
{
    const double atlas = pr_atlas_step_bytes(c, B, T), hstu = pr_hstu_step_bytes(c, B, T);
    if (why)
        *why = hstu > atlas ? "its T x T scores (try shorter lengths or fewer tokens a step)"
                            : "its per-token form (try --set atlas.degree=1 or shorter lengths)";
    return hstu > atlas ? hstu : atlas;
}

const char *pr_bytes_text(char *buf, size_t n, double bytes)
{
    const char *unit[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (bytes >= 1000 && u < 5) bytes /= 1000, u++;
    snprintf(buf, n, "%.3g %s", bytes, unit[u]);
    return buf;
}

/* MemAvailable in /proc/meminfo (what can be had without swapping), else the free pages */
static double host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb >= 0) return (double)kb * 1024.0;
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 1e300;   /* unknown: no limit */
}

double pr_device_free_bytes(pr_device dev)
{
#ifdef PRISM_HAVE_CUDA
    if (dev == PR_CUDA) {
        size_t free_bytes = 0, total = 0, cached = 0;
        pr_cuda_mem_info(&free_bytes, &total);
        pr_cuda_mem_stats(NULL, NULL, &cached);   /* blocks prism's allocator holds are free to it */
        return (double)free_bytes + (double)cached;
    }
#endif
    (void)dev;
    return host_available();
}
