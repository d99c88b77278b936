/* ops/seqlens.h: packed sequences (cu_seqlens) for the fused ops that take
 * them (attention, selective_scan). Internal to ops/. */
#ifndef PR_SEQLENS_H
#define PR_SEQLENS_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cu_seqlens [N+1] (int32 or int64, any device) as int64 on the host,
 * checked against T: starts at 0, strictly increasing, ends at T; fatal with a
 * message naming op otherwise. Returns N; *out is malloc'd. cu == NULL: the B
 * sequences of a [B,T,...] batch, offsets b*T over the flattened B*T rows. */
int64_t pr_seqlens_read(const char *op, const pr_tensor *cu, int64_t B, int64_t T, int64_t **out);

#ifdef __cplusplus
}
#endif
#endif
