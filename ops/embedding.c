/* ops/embedding.c: rows of a weight table picked by integer ids.
 *
 * weight [V, D], ids int32/int64 of any shape -> out [..., D]. The ids are
 * checked in the public function (on any device) so an out-of-range id is
 * fatal before any kernel runs. ids are not differentiable; the backward
 * scatter-adds the output grad into weight's grad (repeated ids add up).
 */
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

static int64_t id_at(const pr_tensor *ids, int64_t i)
{
    return ids->dtype == PR_I32 ? ((const int32_t *)ids->data)[i] : ((const int64_t *)ids->data)[i];
}

/* fatal on the first id outside [0, V) */
static void check_ids(const pr_tensor *ids, int64_t V)
{
    if (ids->device == PR_CPU) {
        for (int64_t i = 0; i < ids->numel; i++) {
            int64_t id = id_at(ids, i);
            PR_CHECK(id >= 0 && id < V, "embedding: id %lld at position %lld out of range [0, V=%lld)",
                     (long long)id, (long long)i, (long long)V);
        }
        return;
    }
    if (pr_device_capturing()) return;   /* a CUDA graph's capture: the ids are the eager steps' to check */
    double *h = malloc((size_t)ids->numel * sizeof(double));
    PR_CHECK(h, "embedding: out of host memory checking %lld ids", (long long)ids->numel);
    pr_to_host_f64(ids, h);
    for (int64_t i = 0; i < ids->numel; i++) {
        if (h[i] >= 0 && h[i] < (double)V) continue;
        long long id = (long long)h[i];
        free(h);
        pr_fatal("embedding: id %lld at position %lld out of range [0, V=%lld)", id, (long long)i,
                 (long long)V);
    }
    free(h);
}

pr_tensor *pr_embedding(pr_ctx *ctx, pr_tensor *weight, pr_tensor *ids)
{
    char sw[64], si[64];
    pr_check_float("embedding", weight, "weight");
    pr_shape_str(weight, sw, sizeof sw);
    pr_shape_str(ids, si, sizeof si);
    PR_CHECK(weight->ndim == 2, "embedding: weight %s must be [V, D]", sw);
    PR_CHECK(ids->dtype == PR_I32 || ids->dtype == PR_I64, "embedding: ids %s must be int32 or int64, not %s",
             si, pr_dtype_name(ids->dtype));
    PR_CHECK(ids->device == weight->device, "embedding: ids on %s, weight on %s",
             pr_device_name(ids->device), pr_device_name(weight->device));
    PR_CHECK(ids->ndim < PR_MAX_DIMS, "embedding: ids %s have too many dims (max %d)", si, PR_MAX_DIMS - 1);
    check_ids(ids, weight->shape[0]);

    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = weight->shape[1];
    pr_node n = pr_node_init(PR_OP_embedding, 2, (pr_tensor *[]){weight, ids});
    n.out[0] = pr_op_output(ctx, weight->dtype, weight->device, ids->ndim + 1, shape);
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

void pr_embedding_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *w = n->in[0], *ids = n->in[1], *out = n->out[0];
    int64_t D = w->shape[1];
    size_t row = (size_t)D * pr_dtype_size(w->dtype);
    for (int64_t i = 0; i < ids->numel; i++)
        memcpy((char *)out->data + (size_t)i * row, (const char *)w->data + (size_t)id_at(ids, i) * row, row);
}

/* out[i, :] = w[ids[i], :]  =>  dw[ids[i], :] += dout[i, :] */
void pr_embedding_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *dw = pr_in_grad(n, 0), *ids = n->in[1], *dout = n->out[0]->grad;
    if (!dw) return;
    int64_t D = dw->shape[1];
    PR_FLOAT_SWITCH(dw->dtype, T, {
        T *g = dw->data;
        const T *go = dout->data;
        for (int64_t i = 0; i < ids->numel; i++) {
            T *gi = g + id_at(ids, i) * D;
            for (int64_t j = 0; j < D; j++) gi[j] += go[i * D + j];
        }
    });
}

static pr_tensor *embedding_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_embedding(ctx, in[0], in[1]);
}

/* weight [11, 7]; ids int64 [3, 5] drawn from [0, 11), so some repeat */
void pr_embedding_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    int64_t V = 11, ids[15];
    for (int i = 0; i < 15; i++) ids[i] = (int64_t)(pr_philox_uniform(r->seed, r->stream, r->offset + i) * V);
    r->offset += 15;
    ex->n_in = 2;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(V, 7), -1, 1);
    ex->in[1] = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(3, 5), ids);
    ex->in[0]->name = "weight";
    ex->in[1]->name = "ids";
    ex->apply = embedding_apply;
}
