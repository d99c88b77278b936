/* ops/selective_scan.h: Mamba-1's selective scan, mamba_ssm's semantics in a
 * token-major layout.
 *
 * Per channel d (of D) and token t, with an N-dim state s:
 *   dt_t = softplus(delta_t + delta_bias)     (x > 20: x)
 *   s_t  = exp(dt_t A[d,:]) * s_{t-1} + dt_t u_t B_t
 *   y_t  = s_t . C_t + Dskip u_t,  then y_t *= silu(z_t) when z is given.
 * u, delta, z [B,T,D]; A [D,N]; Bm, Cm [B,T,N] (shared by the channels);
 * Dskip, delta_bias [D]; h0, ht [S,D,N] where S = B, or the number of packed
 * sequences when cu_seqlens ([S+1] int32/int64 on u's device, B = 1) is given.
 * z, Dskip, delta_bias, h0, cu_seqlens may be NULL (no gate, zeros). CPU: f32
 * and f64, computed in double. CUDA: f32, a chunked scan parallel over T.
 */
#ifndef PR_SELECTIVE_SCAN_H
#define PR_SELECTIVE_SCAN_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns y [B,T,D]; *ht [S,D,N] receives the final state when not NULL.
 * Both are differentiable in every float input. */
pr_tensor *pr_selective_scan(pr_ctx *ctx, pr_tensor *u, pr_tensor *delta, pr_tensor *A, pr_tensor *Bm, pr_tensor *Cm,
                             pr_tensor *Dskip, pr_tensor *z, pr_tensor *delta_bias, pr_tensor *h0,
                             pr_tensor *cu_seqlens, pr_tensor **ht);

/* internal: tokens per chunk of the CUDA scan; the forward saves the state
 * at the start of every chunk ([chunks, D, N]) for the backward */
#define PR_SS_CHUNK 32

#ifdef __cplusplus
}
#endif
#endif
