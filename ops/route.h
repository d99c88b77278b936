/* ops/route.h: top-k routing of tokens to E memories on the device, laid out
 * padded (MoM's mom.route=padded, models/mom.c). Internal to models/ and ops/.
 *
 * probs [B, T, E] (f32 or f64 on the CPU, f32 on CUDA). Token bt = b T + t
 * picks the k largest of its E probabilities (descending, ties to the lower
 * index), and each memory e keeps one sequence per batch row b, (e, b), of T
 * slots: its tokens in time order, then padding. For the j-th pick e_j of
 * token bt, p the number of row b's earlier tokens that picked e_j:
 *   at[bt k + j]        = bt E + e_j              the pick's probability, in probs flat
 *   slot[bt k + j]      = (e_j B + b) T + p       its slot
 *   tok[(e B + b) T + p] = bt, and B T (past the last token: a zero row) for a pad
 *   count[e]            = picks of memory e in the batch (probs' dtype, no gradient)
 * at [B T k], slot [B T, k], tok [E B T] are int64. Every shape is fixed by B, T, E, k, so a step that
 * routes this way can be captured as a CUDA graph: nothing is read on the host. */
#ifndef PR_OPS_ROUTE_H
#define PR_OPS_ROUTE_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    pr_tensor *at, *slot, *tok, *count;
} pr_routing;

pr_routing pr_route_padded(pr_ctx *ctx, const pr_tensor *probs, int64_t k);

/* CUDA (ops/route.cu): the same, f32 probs; row_count: int64 scratch [B, E] */
void pr_route_padded_cuda(pr_ctx *ctx, const pr_tensor *probs, int64_t k, const pr_routing *r, pr_tensor *row_count);

/* one batch row b's picks, slots, pads and its counts per memory (row_count[E]):
 * the CPU's loop and each CUDA thread's, so both route alike. E <= 64. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline void pr_route_row(int64_t b, int64_t B, int64_t T, int64_t E, int64_t k, const float *p32,
                                const double *p64, int64_t *at, int64_t *slot, int64_t *tok, int64_t *row_count)
{
    for (int64_t e = 0; e < E; e++) row_count[e] = 0;
    for (int64_t t = 0; t < T; t++) {
        const int64_t bt = b * T + t;
        unsigned long long taken = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            double top = 0;
            for (int64_t e = 0; e < E; e++) {
                if (taken >> e & 1ull) continue;
                const double v = p32 ? (double)p32[bt * E + e] : p64[bt * E + e];
                if (best < 0 || v > top) best = e, top = v;
            }
            taken |= 1ull << best;
            const int64_t s = (best * B + b) * T + row_count[best]++;
            at[bt * k + j] = bt * E + best;
            slot[bt * k + j] = s;
            tok[s] = bt;
        }
    }
    for (int64_t e = 0; e < E; e++)
        for (int64_t p = row_count[e]; p < T; p++) tok[(e * B + b) * T + p] = B * T;
}

#ifdef __cplusplus
}
#endif
#endif
