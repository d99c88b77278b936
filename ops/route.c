/* ops/route.c: MoM's padded routing on the CPU and its dispatch, and the two
 * ops that move rows between tokens and slots (ops/route.h). */
#include "ops/route.h"

#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

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
        pr_route_row(b, B, T, E, k, p32, p64, r.at->data, r.slot->data, row_count);
        for (int64_t e = 0; e < E; e++) total[e] += row_count[e];
    }
    for (int64_t e = 0; e < E; e++) {
        if (p32) ((float *)r.count->data)[e] = (float)total[e];
        else ((double *)r.count->data)[e] = (double)total[e];
    }
    return r;
}

/* ---- pr_route_scatter, pr_route_gather ---------------------------------------- */

/* fatal unless slot is int64 [N, k] on rows' device with N rows, and, on the CPU,
 * its entries are distinct and in [0, S) */
static void check_slots(const char *op, const pr_tensor *rows, const pr_tensor *slot, int64_t N, int64_t S)
{
    char ss[64];
    pr_shape_str(slot, ss, sizeof ss);
    PR_CHECK(slot->dtype == PR_I64 && slot->ndim == 2 && slot->shape[0] == N,
             "%s: slot %s %s must be int64 [%lld, k]", op, ss, pr_dtype_name(slot->dtype), (long long)N);
    PR_CHECK(slot->device == rows->device, "%s: slot on %s, rows on %s", op, pr_device_name(slot->device),
             pr_device_name(rows->device));
    if (slot->device != PR_CPU) return;
    unsigned char *taken = calloc((size_t)S + 1, 1);
    PR_CHECK(taken, "%s: out of host memory checking %lld slots", op, (long long)S);
    const int64_t *sl = slot->data;
    for (int64_t i = 0; i < slot->numel; i++) {
        int64_t s = sl[i];
        if (s >= 0 && s < S && !taken[s]) {
            taken[s] = 1;
            continue;
        }
        free(taken);
        pr_fatal("%s: slot %lld at position %lld is %s", op, (long long)s, (long long)i,
                 s < 0 || s >= S ? "outside [0, S)" : "taken twice");
    }
    free(taken);
}

pr_tensor *pr_route_scatter(pr_ctx *ctx, pr_tensor *x, pr_tensor *slot, int64_t S)
{
    char sx[64];
    pr_check_float("route_scatter", x, "x");
    pr_shape_str(x, sx, sizeof sx);
    PR_CHECK(x->ndim == 2, "route_scatter: x %s must be [N, D]", sx);
    PR_CHECK(S >= 0, "route_scatter: %lld slots", (long long)S);
    check_slots("route_scatter", x, slot, x->shape[0], S);
    pr_node n = pr_node_init(PR_OP_route_scatter, 2, (pr_tensor *[]){x, slot});
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, PR_DIMS(S, x->shape[1]));
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

pr_tensor *pr_route_gather(pr_ctx *ctx, pr_tensor *y, pr_tensor *slot)
{
    char sy[64];
    pr_check_float("route_gather", y, "y");
    pr_shape_str(y, sy, sizeof sy);
    PR_CHECK(y->ndim == 2, "route_gather: y %s must be [S, C]", sy);
    PR_CHECK(slot->ndim == 2, "route_gather: slot must be [N, k]");
    check_slots("route_gather", y, slot, slot->shape[0], y->shape[0]);
    pr_node n = pr_node_init(PR_OP_route_gather, 2, (pr_tensor *[]){y, slot});
    n.out[0] = pr_op_output(ctx, y->dtype, y->device, PR_DIMS(slot->shape[0], slot->shape[1], y->shape[1]));
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

/* out [S, D]: zeros, then x[i] into each of row i's k slots */
void pr_route_scatter_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    const pr_tensor *x = n->in[0], *slot = n->in[1];
    pr_tensor *out = n->out[0];
    const int64_t k = slot->shape[1], D = x->shape[1];
    const size_t row = (size_t)D * pr_dtype_size(x->dtype);
    const int64_t *sl = slot->data;
    memset(out->data, 0, pr_nbytes(out));
    for (int64_t i = 0; i < slot->numel; i++)
        memcpy((char *)out->data + (size_t)sl[i] * row, (const char *)x->data + (size_t)(i / k) * row, row);
}

/* dx[i] += dout[slot[i, 0]] + ... + dout[slot[i, k-1]], in j's order */
void pr_route_scatter_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *dx = pr_in_grad(n, 0);
    if (!dx) return;
    const pr_tensor *slot = n->in[1], *dout = n->out[0]->grad;
    const int64_t k = slot->shape[1], D = dx->shape[1];
    const int64_t *sl = slot->data;
    PR_FLOAT_SWITCH(dx->dtype, T, {
        T *g = dx->data;
        const T *go = dout->data;
        for (int64_t i = 0; i < slot->numel; i++)
            for (int64_t d = 0; d < D; d++) g[(i / k) * D + d] += go[sl[i] * D + d];
    });
}

/* out[i, j] = y[slot[i, j]] */
void pr_route_gather_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    const pr_tensor *y = n->in[0], *slot = n->in[1];
    const size_t row = (size_t)y->shape[1] * pr_dtype_size(y->dtype);
    const int64_t *sl = slot->data;
    for (int64_t i = 0; i < slot->numel; i++)
        memcpy((char *)n->out[0]->data + (size_t)i * row, (const char *)y->data + (size_t)sl[i] * row, row);
}

/* dy[slot[i, j]] += dout[i, j]: one writer a row, the slots being distinct */
void pr_route_gather_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *dy = pr_in_grad(n, 0);
    if (!dy) return;
    const pr_tensor *slot = n->in[1], *dout = n->out[0]->grad;
    const int64_t C = dy->shape[1];
    const int64_t *sl = slot->data;
    PR_FLOAT_SWITCH(dy->dtype, T, {
        T *g = dy->data;
        const T *go = dout->data;
        for (int64_t i = 0; i < slot->numel; i++)
            for (int64_t c = 0; c < C; c++) g[sl[i] * C + c] += go[i * C + c];
    });
}

/* B = 2 rows of T = 5 tokens routed top-2 of E = 3 memories by random
 * probabilities: slot [10, 2] over S = 30 slots, 10 of them pads */
static pr_tensor *example_slots(pr_ctx *ctx, pr_rng *r, int64_t *S)
{
    const int64_t B = 2, T = 5, E = 3, k = 2;
    pr_tensor *probs = pr_example_input(ctx, r, PR_F64, PR_DIMS(B, T, E), 0, 1);
    *S = E * B * T;
    pr_tensor *slot = pr_route_padded(ctx, probs, k).slot;
    slot->name = "slot";
    return slot;
}

static pr_tensor *scatter_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_route_scatter(ctx, in[0], in[1], ex->iarg[0]);
}

/* x [10, 7] into 30 slots */
void pr_route_scatter_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 2;
    ex->in[1] = example_slots(ctx, r, &ex->iarg[0]);
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(ex->in[1]->shape[0], 7), -1, 1);
    ex->in[0]->name = "x";
    ex->apply = scatter_apply;
}

static pr_tensor *gather_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_route_gather(ctx, in[0], in[1]);
}

/* y [30, 5] back to [10, 2, 5] */
void pr_route_gather_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    int64_t S;
    ex->n_in = 2;
    ex->in[1] = example_slots(ctx, r, &S);
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(S, 5), -1, 1);
    ex->in[0]->name = "y";
    ex->apply = gather_apply;
}
