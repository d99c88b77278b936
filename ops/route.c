/* ops/route.c: MoM's padded routing on the CPU, and the dispatch (ops/route.h). */
#include "ops/route.h"

#include <string.h>

pr_routing pr_route_padded(pr_ctx *ctx, const pr_tensor *probs, int64_t k)
{
    char sp[64];
    pr_shape_str(probs, sp, sizeof sp);
    PR_CHECK(probs->ndim == 3, "route: probs %s must be [B, T, E]", sp);
    const int64_t B = probs->shape[0], T = probs->shape[1], E = probs->shape[2];
    PR_CHECK(E >= 1 && E <= 64, "route: %lld memories, 1..64 allowed", (long long)E);
    PR_CHECK(k >= 1 && k <= E, "route: top-%lld of %lld memories", (long long)k, (long long)E);
    PR_CHECK(probs->dtype == PR_F32 || (probs->dtype == PR_F64 && probs->device == PR_CPU),
             "route: probs must be f32 (or f64 on the CPU), got %s", pr_dtype_name(probs->dtype));
    const pr_device dev = probs->device;
    pr_routing r = {
        .at = pr_op_output(ctx, PR_I64, dev, PR_DIMS(B * T * k)),
        .slot = pr_op_output(ctx, PR_I64, dev, PR_DIMS(B * T, k)),
        .tok = pr_op_output(ctx, PR_I64, dev, PR_DIMS(E * B * T)),
        .count = pr_op_output(ctx, probs->dtype, dev, PR_DIMS(E)),
    };
    if (dev == PR_CUDA) {
#ifdef PRISM_HAVE_CUDA
        pr_route_padded_cuda(ctx, probs, k, &r, pr_op_output(ctx, PR_I64, dev, PR_DIMS(B, E)));
        return r;
#else
        pr_fatal("route: a CUDA tensor in a build without CUDA");
#endif
    }
    const float *p32 = probs->dtype == PR_F32 ? probs->data : NULL;
    const double *p64 = probs->dtype == PR_F64 ? probs->data : NULL;
    int64_t row_count[64], total[64] = {0};
    for (int64_t b = 0; b < B; b++) {
        pr_route_row(b, B, T, E, k, p32, p64, r.at->data, r.slot->data, r.tok->data, row_count);
        for (int64_t e = 0; e < E; e++) total[e] += row_count[e];
    }
    for (int64_t e = 0; e < E; e++) {
        if (p32) ((float *)r.count->data)[e] = (float)total[e];
        else ((double *)r.count->data)[e] = (double)total[e];
    }
    return r;
}
