/* train/step_graph.c: a training step as a CUDA graph (train.h), for the
 * trainer (train.cuda_graph) and `bench throughput --set train.cuda_graph=on`.
 *
 * The first call captures the step whole: the grads zeroed, the loss of the
 * inputs the caller staged into device tensors that outlive the step, the
 * backward, the loss kept on the device, the multi-tensor grad norm and the
 * update, whose clipping scale is computed on the device and which leaves
 * weights and state alone on a non-finite loss or norm (the trainer's NaN
 * trap then reruns the step eagerly from the same state). Nothing runs while
 * capturing; every call, the first included, writes the step's learning rate
 * and bias corrections to device memory, replays the graph and reads the
 * loss and norm back. A capture the CUDA layer refuses (tensor/cuda.cu: a
 * host read or a synchronization inside the step) or that drew random
 * numbers (their seeds would be frozen) is thrown away before anything ran. */
#include <string.h>

#include "train/train.h"

typedef struct {
    pr_task *task;
    const pr_model *m;
} staged;

/* the staged batch's loss, for the capture */
static pr_tensor *staged_loss(void *user, pr_ctx *ctx)
{
    staged *s = user;
    return s->task->staged_loss(s->task, ctx, s->m);
}

int pr_train_graph_step(pr_train_graph *tg, pr_task *task, pr_ctx *ctx, const pr_model *m, pr_optim *opt,
                        int64_t index, const pr_schedule *sched, double clip, double *loss, double *norm, double *lr)
{
    if (!tg->wanted || tg->eager_steps < 2) {
        tg->eager_steps++;
        return 1;
    }
    char why[256];
    staged s = {task, m};
    *lr = pr_schedule_lr(sched, index);
    task->stage(task, ctx, m, index);
    if (!pr_step_graph_run(&tg->graph, ctx, m->params, opt, staged_loss, &s, *lr, clip, loss, norm, why, sizeof why))
        return 0;
    tg->wanted = false;
    snprintf(tg->note, tg->note_n, "off from step %lld (the capture found %s)", (long long)index + 1, why);
    if (tg->talk) fprintf(stderr, "prism train: cuda graph %s; the steps run eagerly\n", tg->note);
    return 1;
}

#ifdef PRISM_HAVE_CUDA
/* the capture's two ends around what the caller records: a cast cached
 * before the capture would be read by the graph, never refreshed (the
 * replays would run on the weights of the step before it), so the cache
 * starts empty; a capture that drew random numbers is refused (their seeds
 * would be frozen) and the draws are undone */
static void capture_begin(pr_ctx *ctx, pr_rng *rng)
{
    *rng = ctx->rng;
    pr_autocast_forget(ctx);
    pr_cuda_graph_begin();
}

static int capture_end(pr_cuda_graph **g, pr_ctx *ctx, const pr_rng *rng, char *why, size_t n)
{
    int rc = pr_cuda_graph_end(g, why, n);
    pr_step_reset(ctx);
    if (!rc && memcmp(rng, &ctx->rng, sizeof *rng) != 0) {
        pr_cuda_graph_free(*g);
        *g = NULL;
        snprintf(why, n, "a random draw inside the step");
        rc = -1;
    }
    ctx->rng = *rng;
    return rc;
}

static int capture(pr_cuda_graph **g, pr_ctx *ctx, const pr_params *params, pr_optim *opt, pr_record_fn loss_fn,
                   void *user, char *why, size_t n)
{
    pr_rng rng;
    capture_begin(ctx, &rng);
    pr_params_zero_grads(params);
    pr_tensor *loss = loss_fn(user, ctx);
    pr_backward(ctx, loss);
    pr_optim_graph_record(ctx, opt, loss);
    int rc = capture_end(g, ctx, &rng, why, n);
    if (rc) opt->multi_captured = false;   /* no graph reads the tables: eager steps may rebuild them */
    return rc;
}

int pr_forward_graph_run(pr_cuda_graph **g, pr_ctx *ctx, pr_record_fn fn, void *user, pr_arena *keep, pr_tensor **out,
                         char *why, size_t n)
{
    if (!*g) {
        pr_rng rng;
        capture_begin(ctx, &rng);
        pr_tensor *y = fn(user, ctx);
        *out = pr_empty(keep, y->dtype, y->device, y->ndim, y->shape);   /* its block outlives the step's */
        pr_copy_(*out, y);
        if (capture_end(g, ctx, &rng, why, n)) return -1;
    }
    pr_cuda_graph_replay(*g);
    return 0;
}

int pr_step_graph_run(pr_cuda_graph **g, pr_ctx *ctx, const pr_params *params, pr_optim *opt, pr_record_fn loss_fn,
                      void *user, double lr, double max_norm, double *loss, double *norm, char *why, size_t n)
{
    pr_optim_graph_prepare(opt, lr, max_norm);
    if (!*g && capture(g, ctx, params, opt, loss_fn, user, why, n)) return -1;
    pr_cuda_graph_replay(*g);
    pr_optim_graph_result(opt, loss, norm);
    return 0;
}

void pr_step_graph_free(pr_cuda_graph *g) { pr_cuda_graph_free(g); }
#else
int pr_step_graph_run(pr_cuda_graph **g, pr_ctx *ctx, const pr_params *params, pr_optim *opt, pr_record_fn loss_fn,
                      void *user, double lr, double max_norm, double *loss, double *norm, char *why, size_t n)
{
    (void)g, (void)ctx, (void)params, (void)opt, (void)loss_fn, (void)user, (void)lr, (void)max_norm;
    *loss = *norm = 0;
    snprintf(why, n, "a build without CUDA");
    return -1;
}

int pr_forward_graph_run(pr_cuda_graph **g, pr_ctx *ctx, pr_record_fn fn, void *user, pr_arena *keep, pr_tensor **out,
                         char *why, size_t n)
{
    (void)g, (void)ctx, (void)fn, (void)user, (void)keep, (void)out;
    snprintf(why, n, "a build without CUDA");
    return -1;
}

void pr_step_graph_free(pr_cuda_graph *g) { (void)g; }
#endif
