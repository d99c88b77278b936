/* lab/bench_ttt2.c: TTT-MLP and Titans in `prism bench recurrence` (lab/lab.h), after
 * TTT-Linear: at the bench's B, T, H with d = 64 (TTT-MLP hidden 256), the
 * dual form (mini-batch / chunk 16) and the token-by-token form (1), forward
 * and forward + the CUDA backward called on the tape's node, f32, CUDA
 * events, median of reps after warm untimed runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "ops/ops.h"
#ifdef PRISM_HAVE_CUDA
#include "ops/cuda/ops_cuda.h"

static pr_tensor *ttt2_leaf(pr_arena *ar, pr_rng *r, int ndim, const int64_t *shape, int normal, double a, double b)
{
    pr_tensor *t = pr_empty(ar, PR_F32, PR_CUDA, ndim, shape);
    if (normal) pr_rand_normal_(t, r, a, b);
    else pr_rand_uniform_(t, r, a, b);
    t->requires_grad = true;
    t->grad = pr_zeros(ar, PR_F32, PR_CUDA, ndim, shape);
    return t;
}

/* the op (0 ttt_mlp, 1 titans) at mini-batch mb on in (a pr_bench_fwd_fn) */
typedef struct {
    int op, mb;
    pr_tensor *const *in;
} ttt2_run;

static pr_node *ttt2_apply(pr_ctx *ctx, void *arg)
{
    const ttt2_run *r = arg;
    pr_tensor *const *in = r->in;
    if (r->op == 0) {
        const pr_ttt_opts o = {.mini_batch = r->mb};
        pr_ttt_mlp(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], NULL, NULL, NULL, NULL);
    } else {
        const pr_titans_opts o = {.chunk = r->mb};
        pr_titans(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], NULL, NULL);
    }
    return &ctx->tape[ctx->n_tape - 1];
}

void pr_bench_ttt2(pr_ctx *ctx, pr_arena *ar, int64_t B, int64_t T, int64_t H, int warm, int reps, bool mlp, bool titans)
{
    const int64_t d = 64, N = 4 * d;
    const double sd = 1 / 8.0, tokens = (double)B * T;
    pr_rng r = pr_rng_init(7, 0);
    for (int op = 0; op < 2; op++) {
        const char *name = op == 0 ? "ttt_mlp" : "titans";
        if (!(op == 0 ? mlp : titans)) continue;
        pr_tensor *in[10], *dout[5];
        for (int i = 0; i < 3; i++) in[i] = ttt2_leaf(ar, &r, PR_DIMS(B, T, H, d), 1, 0, sd);
        in[3] = ttt2_leaf(ar, &r, PR_DIMS(H, d), 0, 0.5, 1.5);
        in[4] = ttt2_leaf(ar, &r, PR_DIMS(H, d), 1, 0, 0.1);
        if (op == 0) {
            in[5] = ttt2_leaf(ar, &r, PR_DIMS(B, T, H, 1), 0, 0.001, 0.01);
            in[6] = ttt2_leaf(ar, &r, PR_DIMS(B, H, d, N), 1, 0, sd);
            in[7] = ttt2_leaf(ar, &r, PR_DIMS(B, H, 1, N), 1, 0, 0.1);
            in[8] = ttt2_leaf(ar, &r, PR_DIMS(B, H, N, d), 1, 0, 1 / 16.0);
            in[9] = ttt2_leaf(ar, &r, PR_DIMS(B, H, 1, d), 1, 0, 0.1);
        } else {
            in[5] = ttt2_leaf(ar, &r, PR_DIMS(B, T, H, 1), 0, 0.001, 0.01);
            in[6] = ttt2_leaf(ar, &r, PR_DIMS(B, T, H, 1), 0, 0.001, 0.05);
            in[7] = ttt2_leaf(ar, &r, PR_DIMS(B, T, H, 1), 0, 0.5, 0.95);
            in[8] = ttt2_leaf(ar, &r, PR_DIMS(B, H, d, d), 1, 0, 0.1);
            in[9] = ttt2_leaf(ar, &r, PR_DIMS(B, H, d, d), 1, 0, 0.1);
        }
        ttt2_run shapes = {op, 16, in};
        pr_node *nd = ttt2_apply(ctx, &shapes); /* the outputs' shapes, for the upstream grads */
        for (int j = 0; j < nd->n_out; j++) dout[j] = pr_randn(ar, PR_F32, PR_CUDA, nd->out[j]->ndim, nd->out[j]->shape, &r);
        pr_step_reset(ctx);
        double fb16 = 0;
        for (int mb = 16; mb >= 1; mb = mb == 16 ? 1 : 0) {
            double fwd, fb;
            ttt2_run run = {op, mb, in};
            pr_bench_fused_ms(ctx, ttt2_apply, &run, dout, warm, reps, &fwd, &fb);
            char form[32];
            snprintf(form, sizeof form, "%s%d d=64", op == 0 ? "minibatch" : "chunk", mb);
            printf("%-11s %-13s %9.3f %9.3f %10.2f %9s %7s %8s %9s\n", name, form, fwd, fb, tokens / (fb * 1e-3) / 1e6,
                   "-", "-", mb == 1 ? "(ref)" : "", "");
            if (mb == 16) fb16 = fb;
            else
                printf("%-11s   %s16 is %.1fx faster than token by token\n", "", op == 0 ? "minibatch" : "chunk",
                       fb / fb16);
        }
    }
}
#endif
