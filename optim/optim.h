/* optim/optim.h: optimizers (SGD with momentum, AdamW), learning-rate
 * schedules and global gradient-norm clipping over a parameter registry.
 *
 * The update is elementwise and runs where the parameters live: a CPU loop
 * in double, or on CUDA one multi-tensor launch for every parameter (the
 * same arithmetic per element as the one-launch-per-parameter kernel, which
 * stays for comparison: per_param_cuda). Clipping is folded into the
 * update as a scale on every gradient, so no extra pass over the grads is
 * needed. Weight decay follows each parameter's `decay` flag in the registry
 * (norms, biases, embeddings, A_log, dt_bias, D have none) unless decay_all.
 * Optimizer state is saved as safetensors, tensor names = parameter path +
 * ".exp_avg" / ".exp_avg_sq" (AdamW) or ".momentum" (SGD).
 */
#ifndef PR_OPTIM_H
#define PR_OPTIM_H

#include "models/models.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PR_OPTIM_ADAMW, PR_OPTIM_SGD } pr_optim_kind;

typedef struct {
    pr_optim_kind kind;
    double weight_decay;   /* AdamW: decoupled (p -= lr wd p); SGD: coupled (g += wd p) */
    double beta1, beta2, eps;  /* AdamW */
    double momentum;       /* SGD (0: plain SGD) */
    bool decay_all;        /* decay every parameter, whatever the registry says */
} pr_optim_opts;

/* AdamW, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 */
pr_optim_opts pr_optim_adamw_defaults(void);

typedef struct pr_optim {
    pr_optim_opts opts;
    const pr_params *params;
    pr_arena *arena;       /* the state tensors, on the parameters' device */
    pr_tensor **m, **v;    /* per parameter: first moment (or momentum buffer), second moment (AdamW) */
    int64_t t;             /* updates taken */
    /* CUDA: the multi-tensor tables (optim/optim.cu), built at the first step
     * and again whenever the set of grads changes; NULL on the CPU */
    struct pr_optim_multi *multi;
    const float **multi_grads;  /* the grad pointers the tables were built for (host) */
    int n_multi_grads;
    bool multi_captured;   /* a CUDA graph reads the tables: rebuilding them would leave it reading freed memory */
    bool per_param_cuda;   /* one launch per parameter instead (the tests compare the two) */
} pr_optim;

pr_optim *pr_optim_new(const pr_params *params, const pr_optim_opts *opts);
/* ZeRO-1's shard: state (and updates) only for parameters with owned[i]
 * (NULL: all). A step leaves the others alone; restore reads only its own. */
pr_optim *pr_optim_new_owned(const pr_params *params, const pr_optim_opts *opts, const bool *owned);
void pr_optim_free(pr_optim *o);
/* one update of every parameter with a grad at learning rate lr; every grad is
 * multiplied by grad_scale first (clipping: pr_clip_scale) */
void pr_optim_step(pr_ctx *ctx, pr_optim *o, double lr, double grad_scale);
/* the global L2 norm of every parameter's grad. On CUDA one multi-tensor
 * reduction in double (a fixed order, so the same bits every run) and one
 * 8-byte read; on the CPU pr_params_grad_norm. */
double pr_optim_grad_norm(pr_ctx *ctx, pr_optim *o);
/* A step captured into a CUDA graph (train/train.c): prepare, on the host
 * before each replay, writes the scalars of the next update (t + 1, lr, the
 * clipping threshold); record, inside the capture, queues the loss kept on
 * the device, the grad norm and the update with the clip scale computed on
 * the device (a non-finite loss or norm leaves weights and state as they
 * were); result, after the replay, reads the loss and norm and counts the
 * update when both are finite. The same arithmetic as pr_optim_grad_norm
 * and pr_optim_step, so the bits match an eager step's. CUDA only: prepare
 * is fatal elsewhere. */
void pr_optim_graph_prepare(pr_optim *o, double lr, double max_norm);
void pr_optim_graph_record(pr_ctx *ctx, pr_optim *o, const pr_tensor *loss);
void pr_optim_graph_result(pr_optim *o, double *loss, double *norm);
/* whether parameter i is decayed under these options */
bool pr_optim_decays(const pr_optim *o, int i);

/* the state as safetensors: tensors named path + suffix and the metadata
 * "optim.t" plus the caller's (n_meta keys and values), written atomically */
int pr_optim_save(const pr_optim *o, const char *file, int n_meta, const char *const *keys,
                  const char *const *values, pr_err *err);
/* restore from a file read with pr_safetensors_read; -1 with err naming the
 * file and the missing or mis-shaped tensor */
int pr_optim_restore(pr_optim *o, const pr_safetensors *st, const char *file, pr_err *err);

/* ---- clipping ---------------------------------------------------------------
 * the factor that brings the global grad norm down to max_norm:
 * min(1, max_norm / (norm + 1e-6)); max_norm <= 0 disables clipping (1) */
double pr_clip_scale(double grad_norm, double max_norm);

/* ---- schedules --------------------------------------------------------------
 * linear warmup from lr/warmup to lr over `warmup` steps, then constant, or
 * cosine down to min_lr at step `total`. step counts from 0. */
typedef struct {
    double lr, min_lr;
    int64_t warmup, total;
    bool cosine;
} pr_schedule;
double pr_schedule_lr(const pr_schedule *s, int64_t step);

/* the CUDA update (optim/optim.cu): p, g, m, v f32 on the device, n elements.
 * kind 0 AdamW (c1, c2 the bias corrections 1 - beta^t), 1 SGD (v unused) */
typedef struct {
    int kind;
    double lr, wd, beta1, beta2, eps, momentum, grad_scale;
    double c1, c2;
} pr_optim_update_args;
void pr_optim_update_cuda(pr_ctx *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                          const pr_optim_update_args *a);

/* The multi-tensor CUDA path (optim/optim.cu). A slice is one parameter's
 * part of the update; the tables live on the device. The per-step scalars
 * are read from device memory by the kernels, so a CUDA graph that captured
 * the launches reads each step's values; with clip_on_device the grad scale
 * is pr_clip_scale(norm, max_norm) of the norm pr_optim_multi_grad_norm left
 * on the device, and a non-finite norm leaves everything untouched. */
typedef struct {
    float *p;
    const float *g;
    float *m, *v;
    int64_t n;
    double wd;
} pr_optim_slice;
typedef struct {
    double lr, c1, c2, grad_scale, max_norm;
    int clip_on_device;
} pr_optim_step_scalars;
typedef struct pr_optim_multi pr_optim_multi;
pr_optim_multi *pr_optim_multi_new(const pr_optim_slice *update, int n_update, const float *const *grads,
                                   const int64_t *sizes, int n_norm);
void pr_optim_multi_free(pr_optim_multi *mt);
void pr_optim_multi_grad_norm(pr_ctx *ctx, pr_optim_multi *mt);   /* async: the norm stays on the device */
double pr_optim_multi_read_norm(const pr_optim_multi *mt);       /* waits for it */
void pr_optim_multi_set_scalars(pr_optim_multi *mt, const pr_optim_step_scalars *s);
void pr_optim_multi_update(pr_ctx *ctx, pr_optim_multi *mt, const pr_optim_update_args *a);
/* keeps the loss (a CUDA f32 or bf16 scalar) on the device beside the norm,
 * so a replayed graph's result is read in one copy (pr_optim_multi_read) */
void pr_optim_multi_keep_loss(pr_ctx *ctx, pr_optim_multi *mt, const void *loss, int bf16);
void pr_optim_multi_read(const pr_optim_multi *mt, double *loss, double *norm);

#ifdef __cplusplus
}
#endif
#endif
