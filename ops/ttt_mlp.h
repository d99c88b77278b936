/* ops/ttt_mlp.h: TTT-MLP (Sun et al. 2024), the two-layer inner model in the
 * dual form of ops/ttt_linear.h.
 *
 * Per head the inner model is Z1 = x W1 + b1, X2 = gelu_tanh(Z1),
 * Z2 = X2 W2 + b2 with W1 [d,N], b1 [N], W2 [N,d], b2 [d] (N, the hidden size,
 * is read off w1; 4d is the usual choice). Token j's inner loss is
 * || LN(Z2_j) - (v_j - k_j) ||^2 / 2 with x = k_j (LN: weight w, bias b [H,d],
 * biased variance). Inside a mini-batch every gradient is taken at the
 * mini-batch's start weights; token i reads with those weights minus eta_i
 * times the sum of the gradients of tokens j <= i (all four weights), from
 * x = scale q_i, and o_i = Z2b_i + LN(Z2b_i). At the end of a mini-batch the
 * weights move by all its gradients, weighted by the last token's eta. A
 * shorter last mini-batch is allowed; mini_batch 1 is the token-by-token
 * (serial) form. q, k, v [B,T,H,d]; eta [B,T,H,1]; w1 [B,H,d,N],
 * b1 [B,H,1,N] (NULL: zeros), w2 [B,H,N,d], b2 [B,H,1,d] (NULL: zeros).
 * CPU: f32, f64 and bf16 (computed in double). CUDA: f32 and bf16 (computed
 * in f32). bf16 data: q, k, v, eta and o are bf16 (their grads too); w, b,
 * w1, b1, w2, b2 and the final states stay f32.
 */
#ifndef PR_TTT_MLP_H
#define PR_TTT_MLP_H

#include "ops/ttt_linear.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns o [B,T,H,d]; the final inner weights go to the non-NULL out
 * pointers: w1t [B,H,d,N], b1t [B,H,1,N], w2t [B,H,N,d], b2t [B,H,1,d].
 * opt as for ttt_linear (scale 0: d^-1/2, eps 0: 1e-6). */
pr_tensor *pr_ttt_mlp(pr_ctx *ctx, const pr_ttt_opts *opt, pr_tensor *q, pr_tensor *k, pr_tensor *v, pr_tensor *w,
                      pr_tensor *b, pr_tensor *eta, pr_tensor *w1, pr_tensor *b1, pr_tensor *w2, pr_tensor *b2,
                      pr_tensor **w1t, pr_tensor **b1t, pr_tensor **w2t, pr_tensor **b2t);

#ifdef __cplusplus
}
#endif
#endif
