/* ops/attention.h: causal softmax attention with grouped-query heads.
 *
 * q [B,T,H,D], k [B,T,Hkv,D], v [B,T,Hkv,Dv] -> o [B,T,H,Dv] with
 * o_i = sum_{j<=i} softmax_j(scale q_i . k_j) v_j, head h reading kv head
 * h / (H/Hkv) (H a multiple of Hkv). With cu_seqlens ([N+1] int32/int64 on
 * q's device, B = 1, sequences packed along T) a token attends only to the
 * earlier tokens of its own sequence. CPU: f32 and f64, computed in double.
 * CUDA: f32, D and Dv up to 128; tiled with an online softmax (no T x T
 * buffer), TF32 tensor cores when ctx->matmul_tf32, exact fp32 otherwise.
 * CUDA bf16: native flash-style kernels at D = Dv = 32, 64, 96 or 128 (bf16
 * tensor-core products, f32 softmax statistics, ops/attention_flash.cu); other
 * dims run the f32 kernels on staged copies. bf16 on the CPU is staged (f64 math, rounded once).
 */
#ifndef PR_ATTENTION_H
#define PR_ATTENTION_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* scale 0: D^-1/2. Differentiable in q, k, v. */
pr_tensor *pr_attention(pr_ctx *ctx, pr_tensor *q, pr_tensor *k, pr_tensor *v, double scale, pr_tensor *cu_seqlens);

/* Decoding: one new token per batch row attends to the first n_valid[b]
 * entries of its KV cache (n_valid NULL: all Tc; 1 <= n_valid[b] <= Tc; the
 * new token's own k, v already written into the cache). q [B,1,H,D],
 * k_cache [B,Tc,Hkv,D], v_cache [B,Tc,Hkv,Dv] -> [B,1,H,Dv]. No gradient:
 * not recorded on the tape. */
pr_tensor *pr_attention_decode(pr_ctx *ctx, pr_tensor *q, pr_tensor *k_cache, pr_tensor *v_cache,
                               const int64_t *n_valid, double scale);

#ifdef __cplusplus
}
#endif
#endif
