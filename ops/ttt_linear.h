/* ops/ttt_linear.h: TTT-Linear (Sun et al. 2024) in flash-linear-attention's form.
 *
 * Per head: inner weights W [K,K] and bias hb [K]; LayerNorm weight w and bias
 * b [H,K]; per-token inner learning rate eta [B,T,H,1]. Inner loss of token i:
 * || LN(k_i W + hb) - (v_i - k_i) ||^2 / 2. Inside a mini-batch every token's
 * gradient is taken at the mini-batch's starting weights (dual form); token
 * t predicts with those weights minus eta_t times the sum of the gradients of
 * tokens <= t; at the end W, hb move by all the mini-batch's gradients, each
 * weighted by the last token's eta. z_t = (scale q_t) W' + hb'; o_t = z_t + LN(z_t).
 * q, k, v [B,T,H,K] (V = K); h0 [B,H,K,K], hb0 [B,H,1,K] optional (zeros).
 * T need not be a multiple of mini_batch: the last mini-batch is shorter and
 * its last token's eta moves the state. CPU: f32, f64 and bf16 (computed in
 * double). CUDA: f32 and bf16 (computed in f32; with ctx->matmul_tf32 the
 * products of mini-batches whose sizes are multiples of 16 use tensor cores:
 * TF32, or bf16 ones on bf16 data at K > 64), K <= 128, and about (2K(K+4) + 9 mini_batch (K+4)) floats of shared
 * memory per (b,h) (K = 128 with mini_batch 16 fits an H100/H200). Where B H
 * would leave most SMs idle (long sequences at a small batch) the backward
 * runs split: a block per mini-batch beside the serial chain over them
 * (one cooperative launch), with four f32 [B,T,H,K] scratch buffers
 * (pr_ttt_linear_cuda_plan says which). bf16 data: q, k, v, eta and o are bf16
 * (their grads too); w, b, h0, hb0, ht and hbt stay f32.
 */
#ifndef PR_TTT_LINEAR_H
#define PR_TTT_LINEAR_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the CUDA backward's form: the plan's choice (by B H against the SM
 * count), or forced (tests, comparisons) */
typedef enum { PR_TTT_BWD_PLANNED = 0, PR_TTT_BWD_FUSED, PR_TTT_BWD_SPLIT, PR_TTT_BWD_OVERLAP } pr_ttt_bwd;

typedef struct {
    double scale;     /* 0: K^-1/2 */
    int mini_batch;   /* tokens per mini-batch (16 in fla); 1 = token by token */
    double eps;       /* LayerNorm eps; 0: 1e-6 */
    pr_ttt_bwd bwd;   /* CUDA: force the backward fused, split or split overlapped */
} pr_ttt_opts;

/* Returns o [B,T,H,K]; *ht [B,H,K,K] and *hbt [B,H,1,K] receive the final
 * inner weights when not NULL. */
pr_tensor *pr_ttt_linear(pr_ctx *ctx, const pr_ttt_opts *opt, pr_tensor *q, pr_tensor *k, pr_tensor *v,
                         pr_tensor *w, pr_tensor *b, pr_tensor *eta, pr_tensor *h0, pr_tensor *hb0,
                         pr_tensor **ht, pr_tensor **hbt);

/* CUDA builds: the backward's plan at these sizes on the current device, as
 * one line into line[n] (fused, or split into local halves and serial
 * chains, overlapped where the device has cooperative launch; bwd forces
 * one, as pr_ttt_opts.bwd does) */
void pr_ttt_linear_cuda_plan(int B, int T, int H, int mini_batch, pr_ttt_bwd bwd, char *line, size_t n);

#ifdef __cplusplus
}
#endif
#endif
