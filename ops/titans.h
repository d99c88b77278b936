/* ops/titans.h: Titans' neural memory (Behrouz et al. 2024), linear memory
 * with momentum and forgetting, chunked like TTT's dual form.
 *
 * Per head, memory M and momentum S [d,d]; LayerNorm weight w and bias b
 * [H,d]; per token theta (inner learning rate), alpha (forgetting) and eta
 * (momentum decay) [B,T,H,1]. Inside a chunk every token's gradient is taken
 * at the chunk-start memory Mc: Z_t = k_t Mc and gZ_t = d/dZ of
 * || LN(Z_t) - (v_t - k_t) ||^2 / 2 (biased variance), then token by token
 *   S_t = eta_t S_{t-1} - 2 theta_t k_t^T gZ_t,  M_t = (1 - alpha_t) M_{t-1} + S_t,
 *   o_t = q_t M_t (no scale), and the output is o_t + LN(o_t).
 * chunk 1 is the fully serial rule. q, k, v [B,T,H,d]; h0, s0 [B,H,d,d]
 * (NULL: zeros). T need not be a multiple of chunk. CPU: f32 and f64 (both
 * computed in double). CUDA: f32.
 */
#ifndef PR_TITANS_H
#define PR_TITANS_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int chunk;     /* tokens whose gradients share the chunk-start memory (16 usual) */
    double eps;    /* LayerNorm eps; 0: 1e-6 */
} pr_titans_opts;

/* Returns the output [B,T,H,d]; *ht (M) and *st (S) [B,H,d,d] receive the
 * final memory and momentum when not NULL. */
pr_tensor *pr_titans(pr_ctx *ctx, const pr_titans_opts *opt, pr_tensor *q, pr_tensor *k, pr_tensor *v, pr_tensor *w,
                     pr_tensor *b, pr_tensor *theta, pr_tensor *alpha, pr_tensor *eta, pr_tensor *h0, pr_tensor *s0,
                     pr_tensor **ht, pr_tensor **st);

#ifdef __cplusplus
}
#endif
#endif
