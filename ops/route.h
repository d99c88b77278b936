/* ops/route.h: top-k routing of tokens to E memories on the device, laid out
 * padded (MoM's mom.route=padded, models/mom.c). Internal to models/ and ops/.
 *
 * probs [B, T, E] (f32 or f64 on the CPU, f32 on CUDA). Token bt = b T + t
 * picks the k largest of its E probabilities (descending, ties to the lower
 * index), and each memory e keeps one sequence per batch row b, (e, b), of T
 * slots: its tokens in time order, then padding. For the j-th pick e_j of
 * token bt, p the number of row b's earlier tokens that picked e_j:
 *   at[bt k + j]   = bt E + e_j              the pick's probability, in probs flat
 *   slot[bt k + j] = (e_j B + b) T + p       its slot; no two picks share one, and
 *                                            the E B T - B T k slots no pick took are pads
 *   count[e]       = picks of memory e in the batch (probs' dtype, no gradient)
 * at [B T k] and slot [B T, k] are int64. Every shape is fixed by B, T, E, k, so a step that
 * routes this way can be captured as a CUDA graph: nothing is read on the host.
 *
 * The rows move between tokens and slots by two ops, each the other's adjoint:
 *   pr_route_scatter(x [N, D], slot [N, k], S) -> [S, D]: row slot[i, j] = x[i] for
 *       every j, pads zero; its backward dx[i] += sum over j of dout[slot[i, j]]
 *   pr_route_gather(y [S, C], slot [N, k]) -> [N, k, C]: [i, j] = y[slot[i, j]]; its
 *       backward dy[slot[i, j]] += dout[i, j], pads none
 * Slots are distinct, so every write has one writer: no sort, no atomics, the same
 * bits every run (a gather of the pads through pr_embedding summed thousands of
 * rows of grad into one pad row, serially). The slots must be distinct and below S:
 * checked where slot is on the CPU; on CUDA they are pr_route_padded's, trusted. */
#ifndef PR_OPS_ROUTE_H
#define PR_OPS_ROUTE_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    pr_tensor *at, *slot, *count;
} pr_routing;

pr_routing pr_route_padded(pr_ctx *ctx, const pr_tensor *probs, int64_t k);
pr_tensor *pr_route_scatter(pr_ctx *ctx, pr_tensor *x, pr_tensor *slot, int64_t S);
pr_tensor *pr_route_gather(pr_ctx *ctx, pr_tensor *y, pr_tensor *slot);

/* CUDA (ops/route.cu): the same, f32 probs; row_count: int64 scratch [B, E] */
void pr_route_padded_cuda(pr_ctx *ctx, const pr_tensor *probs, int64_t k, const pr_routing *r, pr_tensor *row_count);

/* one batch row b's picks, slots and its counts per memory (row_count[E]):
 * the CPU's loop and each CUDA thread's, so both route alike. E <= 64. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline void pr_route_row(int64_t b, int64_t B, int64_t T, int64_t E, int64_t k, const float *p32,
                                const double *p64, int64_t *at, int64_t *slot, int64_t *row_count)
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
            at[bt * k + j] = bt * E + best;
            slot[bt * k + j] = (best * B + b) * T + row_count[best]++;
        }
    }
}

#ifdef __cplusplus
}
#endif
#endif
