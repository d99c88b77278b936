/* ops/linear_ce.c: linear_cross_entropy, the LM head's product fused with the
 * loss, so the [N, V] logits never exist at once.
 *
 * loss = (1/count) sum over kept rows r of lse(l_r) - l_r[t_r], l_r = x_r op(w),
 * op(w) = w^T for w [V, D] (trans_w: a tied embedding) or w for w [D, V] (an
 * untied head); count = the rows whose target != ignore_index (0 when none),
 * the same reduction as cross_entropy on the full logits.
 *
 * Rows go in chunks of pr_linear_ce_chunk_rows(V): a chunk's logits, its max
 * and lse (in double on the CPU, f32 on CUDA), its loss terms, and, when the
 * node is recorded, the gradient at once: the loss is terminal, so with
 * dl = (softmax(l) - onehot(t)) / count (0 on ignored rows)
 *   dx_c = dl op(w)^T        (saved[0], x's shape)
 *   dw  += dl^T x_c or x_c^T dl (saved[1], w's shape)
 * The backward only scales them by the upstream scalar and adds (each pass
 * of a re-walked tape adds again, as any op's backward does). Grad mode off,
 * or no input needing grad: the chunks compute the loss only.
 * Node: in = {x, w, targets}, iarg = {ignore_index, trans_w, chunk_rows}.
 */
#include <math.h>
#include <string.h>

#include "ops/ops.h"

void pr_gemm_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                 const void *B, void *C, double beta);

/* Rows per chunk: 16M logits (64 MB in f32; 512 rows at vocab 32000), 1/32
 * of the 2 GB that 16K tokens' logits take. Whatever its rows, a chunk reads
 * all of w twice (its logits, its dx) and reads and writes all of dw: 4 V D
 * elements, 390 MB in f32 at lm-130m (V = 32000, D = 768). Chunks of 4M
 * logits (128 rows) would move 50 GB a 16K-token step that way, ~10 ms of an
 * H200's memory time; chunks of 16M move 12.6 GB, about what the unfused
 * path's logits, softmax and logit grads move. Smaller chunks make the head
 * bound by those bytes; larger ones save little beside the activations. */
int64_t pr_linear_ce_chunk_rows(int64_t V)
{
    enum { BUDGET = 16 << 20, ALIGN = 32 };
    int64_t rows = BUDGET / (V > 0 ? V : 1);
    return rows >= ALIGN ? rows / ALIGN * ALIGN : ALIGN;
}

pr_tensor *pr_linear_cross_entropy(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, bool trans_w, pr_tensor *targets,
                                   int64_t ignore_index, int64_t chunk_rows)
{
    const char *op = "linear_cross_entropy";
    PR_CHECK(x && w && targets, "%s: NULL input", op);
    pr_tensor *xw[2] = {x, w};
    pr_autocast_all(ctx, 2, xw, PR_BF16);   /* the products in bf16, lse and loss in f32 */
    x = xw[0], w = xw[1];
    pr_check_float(op, x, "x");
    pr_check_same_kind(op, x, w);
    PR_CHECK(targets->dtype == PR_I32 || targets->dtype == PR_I64, "%s: targets must be int32 or int64, got %s", op,
             pr_dtype_name(targets->dtype));
    PR_CHECK(targets->device == x->device, "%s: x on %s but targets on %s", op, pr_device_name(x->device),
             pr_device_name(targets->device));
    PR_CHECK(chunk_rows >= 0, "%s: chunk_rows %lld is negative", op, (long long)chunk_rows);
    const int64_t D = x->ndim >= 1 ? x->shape[x->ndim - 1] : 0;
    bool ok = x->ndim >= 1 && D > 0 && w->ndim == 2 && w->shape[trans_w ? 1 : 0] == D && w->shape[trans_w ? 0 : 1] > 0 &&
              targets->ndim == x->ndim - 1;
    for (int d = 0; ok && d < targets->ndim; d++) ok = targets->shape[d] == x->shape[d];
    if (!ok) {
        char s1[96], s2[96], s3[96];
        pr_fatal("%s: x %s, w %s (%s) and targets %s do not fit: need x [..., D], w %s, targets [...]", op,
                 pr_shape_str(x, s1, sizeof s1), pr_shape_str(w, s2, sizeof s2), trans_w ? "[V, D]" : "[D, V]",
                 pr_shape_str(targets, s3, sizeof s3), trans_w ? "[V, D]" : "[D, V]");
    }
    pr_node n = pr_node_init(PR_OP_linear_cross_entropy, 3, (pr_tensor *[]){x, w, targets});
    n.iarg[0] = ignore_index;
    n.iarg[1] = trans_w;
    n.iarg[2] = chunk_rows;
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, pr_autocast_loss_dtype(ctx, x), x->device, 0, x->shape);
    if (pr_op_will_record(ctx, &n)) {   /* the grads the forward leaves for the backward */
        n.n_saved = 2;
        if (x->requires_grad) n.saved[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim, x->shape);
        if (w->requires_grad) n.saved[1] = pr_op_output(ctx, w->dtype, w->device, w->ndim, w->shape);
    }
    return pr_op_apply(ctx, &n);
}

/* the sizes a node works on */
typedef struct { int64_t N, D, V, chunk, count; bool trans_w; } lce_dims;

static int64_t target_at(const pr_tensor *t, int64_t i)
{
    return t->dtype == PR_I32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* the class of row r, or -1 when ignored; an out-of-range class is fatal */
static int64_t lce_class(const pr_node *n, int64_t r, int64_t V)
{
    int64_t t = target_at(n->in[2], r);
    if (t == n->iarg[0]) return -1;
    PR_CHECK(t >= 0 && t < V,
             "linear_cross_entropy: target %lld at index %lld is out of range [0, %lld) (ignore_index %lld)",
             (long long)t, (long long)r, (long long)V, (long long)n->iarg[0]);
    return t;
}

static lce_dims lce_dims_of(const pr_node *n)
{
    const pr_tensor *x = n->in[0], *w = n->in[1];
    lce_dims d = {.D = x->shape[x->ndim - 1], .trans_w = n->iarg[1] != 0};
    d.N = x->numel / d.D;
    d.V = w->shape[d.trans_w ? 0 : 1];
    d.chunk = n->iarg[2] > 0 ? n->iarg[2] : pr_linear_ce_chunk_rows(d.V);
    for (int64_t r = 0; r < d.N; r++) d.count += lce_class(n, r, d.V) >= 0;
    return d;
}

/* the loss terms of rows [r0, r0+rows) whose logits are in l ([rows, V]); with
 * grad, l becomes dl = (softmax - onehot) / count in place (0 on ignored rows) */
#define LCE_ROWS(T)                                                                      \
    static double lce_rows_##T(const pr_node *n, const lce_dims *d, int64_t r0, int64_t rows, T *l, bool grad) \
    {                                                                                    \
        double loss = 0.0, inv = d->count ? 1.0 / (double)d->count : 0.0;               \
        for (int64_t i = 0; i < rows; i++) {                                             \
            T *lr = l + i * d->V;                                                        \
            int64_t t = lce_class(n, r0 + i, d->V);                                      \
            if (t < 0) {                                                                 \
                for (int64_t c = 0; grad && c < d->V; c++) lr[c] = 0;                     \
                continue;                                                                \
            }                                                                            \
            double mx = lr[0], sum = 0.0;                                                \
            for (int64_t c = 1; c < d->V; c++) mx = lr[c] > mx ? lr[c] : mx;             \
            for (int64_t c = 0; c < d->V; c++) sum += exp(lr[c] - mx);                   \
            loss += mx + log(sum) - lr[t];                                               \
            for (int64_t c = 0; grad && c < d->V; c++)                                   \
                lr[c] = (T)(inv * (exp(lr[c] - mx) / sum - (c == t)));                   \
        }                                                                                \
        return loss;                                                                     \
    }
LCE_ROWS(float)
LCE_ROWS(double)
#undef LCE_ROWS

void pr_linear_cross_entropy_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *x = n->in[0], *w = n->in[1], *dx = n->n_saved ? n->saved[0] : NULL, *dw = n->n_saved ? n->saved[1] : NULL;
    lce_dims d = lce_dims_of(n);
    const pr_dtype dt = x->dtype;
    PR_CHECK(dt == PR_F32 || dt == PR_F64, "linear_cross_entropy: the CPU kernel takes f32 or f64, not %s", pr_dtype_name(dt));
    const size_t es = pr_dtype_size(dt);
    const bool grad = dx || dw;
    int64_t cap = d.chunk < d.N ? d.chunk : d.N;
    /* in the step arena, so the step's peak memory counts it */
    void *l = pr_empty(ctx->step, dt, PR_CPU, PR_DIMS(cap > 0 ? cap : 1, d.V))->data;
    if (dw) memset(dw->data, 0, (size_t)dw->numel * es);
    double loss = 0.0;
    for (int64_t r0 = 0; r0 < d.N; r0 += d.chunk) {
        int64_t rows = d.N - r0 < d.chunk ? d.N - r0 : d.chunk;
        const char *xc = (const char *)x->data + (size_t)(r0 * d.D) * es;
        pr_gemm_cpu(dt, false, d.trans_w, rows, d.V, d.D, xc, w->data, l, 0);   /* l = x_c op(w) */
        loss += dt == PR_F32 ? lce_rows_float(n, &d, r0, rows, l, grad) : lce_rows_double(n, &d, r0, rows, l, grad);
        if (dx)   /* dx_c = dl op(w)^T */
            pr_gemm_cpu(dt, false, !d.trans_w, rows, d.D, d.V, l, w->data, (char *)dx->data + (size_t)(r0 * d.D) * es, 0);
        if (dw && d.trans_w)   /* dw [V, D] += dl^T x_c */
            pr_gemm_cpu(dt, true, false, d.V, d.D, rows, l, xc, dw->data, 1);
        else if (dw)           /* dw [D, V] += x_c^T dl */
            pr_gemm_cpu(dt, true, false, d.D, d.V, rows, xc, l, dw->data, 1);
    }
    PR_FLOAT_SWITCH(n->out[0]->dtype, T, { *(T *)n->out[0]->data = (T)(d.count ? loss / (double)d.count : 0.0); });
}

/* the forward left dx and dw for an upstream grad of 1: scale by g and add */
void pr_linear_cross_entropy_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    PR_CHECK(n->n_saved == 2, "linear_cross_entropy: backward of a forward that kept no gradients");
    PR_FLOAT_SWITCH(n->in[0]->dtype, T, {
        const double g = *(const T *)n->out[0]->grad->data;
        for (int i = 0; i < 2; i++) {
            pr_tensor *gi = pr_in_grad(n, i), *s = n->saved[i];
            if (!gi || !s) continue;
            T *dst = gi->data;
            const T *src = s->data;
            for (int64_t k = 0; k < gi->numel; k++) dst[k] += (T)(g * src[k]);
        }
    });
}

/* ---- example ---- */

static pr_tensor *linear_ce_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_linear_cross_entropy(ctx, in[0], in[1], ex->iarg[1], in[2], ex->iarg[0], ex->iarg[2]);
}

/* x [2,5,6], w [11,6] (tied form), int64 targets with two ignored rows, chunks
 * of 3 rows: 10 rows make three full chunks and a ragged one */
void pr_linear_cross_entropy_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    enum { B = 2, L = 5, D = 6, V = 11 };
    ex->n_in = 3;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(B, L, D), -1.0, 1.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(V, D), -1.0, 1.0);
    pr_tensor *u = pr_randu(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, L), r, 0.0, V);
    int64_t t[B * L];
    for (int i = 0; i < B * L; i++) t[i] = (int64_t)floor(pr_get(u, i));
    t[2] = t[7] = -100;
    ex->in[2] = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(B, L), t);
    ex->iarg[0] = -100;
    ex->iarg[1] = 1;
    ex->iarg[2] = 3;
    ex->apply = linear_ce_apply;
}
