/* ops/shape.c: reshape, transpose, slice, concat, split.
 *
 * reshape is a view (no copy); the others materialize, since tensors are
 * contiguous. Every op here moves elements without arithmetic, so each
 * backward moves the output grad back to where the element came from and
 * adds it there. split is a run of slices and has no op of its own.
 */
#include <string.h>

#include "ops/ops.h"

/* dim counted from the end when negative; fatal when out of range */
static int norm_dim(const char *op, const pr_tensor *x, int dim)
{
    char s[64];
    int d = dim < 0 ? dim + x->ndim : dim;
    PR_CHECK(d >= 0 && d < x->ndim, "%s: dim %d out of range for x %s", op, dim, pr_shape_str(x, s, sizeof s));
    return d;
}

static int64_t prod(const int64_t *shape, int from, int to)
{
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= shape[i];
    return p;
}

/* dst += src or dst = src, n elements of a float dtype */
static void move(pr_dtype dt, void *dst, const void *src, int64_t n, bool acc)
{
    if (!acc) {
        memcpy(dst, src, (size_t)n * pr_dtype_size(dt));
        return;
    }
    PR_FLOAT_SWITCH(dt, T, {
        T *d = dst;
        const T *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    });
}

#define AT(p, dt, i) ((char *)(p) + (size_t)(i) * pr_dtype_size(dt))

/* ---- reshape ------------------------------------------------------------------ */

pr_tensor *pr_reshape(pr_ctx *ctx, pr_tensor *x, int ndim, const int64_t *shape)
{
    char s[64];
    pr_check_float("reshape", x, "x");
    int64_t known = 1, unknown = 0;
    bool ok = ndim >= 1 && ndim <= PR_MAX_DIMS;
    for (int i = 0; ok && i < ndim; i++) {
        if (shape[i] == -1) unknown++;
        else if (shape[i] >= 0) known *= shape[i];
        else ok = false;
    }
    ok = ok && (unknown ? unknown == 1 && known > 0 && x->numel % known == 0 : known == x->numel);
    if (!ok) {
        char req[96] = "[";
        for (int i = 0; i < ndim && i < PR_MAX_DIMS; i++)
            snprintf(req + strlen(req), sizeof req - strlen(req), "%s%lld", i ? "," : "", (long long)shape[i]);
        pr_fatal("reshape: cannot view x %s (%lld elements) as %s]", pr_shape_str(x, s, sizeof s),
                 (long long)x->numel, req);
    }
    pr_node n = pr_node_init(PR_OP_reshape, 1, (pr_tensor *[]){x});
    n.out[0] = pr_view(ctx->step, x, ndim, shape);   /* checks numel, resolves -1 */
    n.n_out = 1;
    pr_tensor *y = n.out[0], *base = x->grad_base ? x->grad_base : x;
    /* A recorded reshape of an op's output is no node: its gradient is a view
     * of that output's (of its base's when x is itself such a reshape), so the
     * ops that read it add straight into x's gradient and the backward has no
     * copy to make. Reshapes of leaves (parameters, inputs) stay nodes, so a
     * leaf's gradient keeps accumulating only through the tape. */
    if (!pr_op_will_record(ctx, &n) || base->tape_pos < 0) return pr_op_apply(ctx, &n);
    y->grad_base = base;
    y->requires_grad = true;
    y->tape_pos = base->tape_pos;
    return y;
}

/* the output shares x's data: nothing to do unless it was given its own buffer */
void pr_reshape_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0], *y = n->out[0];
    if (y->data != x->data) move(x->dtype, y->data, x->data, x->numel, false);
}

/* same elements in the same order: dx += dout, element by element */
void pr_reshape_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *dx = pr_in_grad(n, 0);
    if (dx) move(dx->dtype, dx->data, n->out[0]->grad->data, dx->numel, true);
}

static pr_tensor *reshape_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_reshape(ctx, in[0], PR_DIMS(5, -1));
}

/* [3, 5, 7] -> [5, 21] */
void pr_reshape_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 5, 7), -1, 1);
    ex->in[0]->name = "x";
    ex->apply = reshape_apply;
}

/* ---- transpose ------------------------------------------------------------------
 * With d0 < d1, x is [A, n0, M, n1, I] and out is [A, n1, M, n0, I]. */

typedef struct { int64_t A, n0, M, n1, I; } tr_dims;

static tr_dims tr_dims_of(const pr_tensor *x, int d0, int d1)
{
    return (tr_dims){prod(x->shape, 0, d0), x->shape[d0], prod(x->shape, d0 + 1, d1), x->shape[d1],
                     prod(x->shape, d1 + 1, x->ndim)};
}

/* dst[a,j,m,i,:] (=|+=) src[a,i,m,j,:], src being [A, n0, M, n1, I] */
static void tr_move(pr_dtype dt, void *dst, const void *src, tr_dims d, bool acc)
{
    PR_FLOAT_SWITCH(dt, T, {
        T *y = dst;
        const T *x = src;
        for (int64_t a = 0; a < d.A; a++)
            for (int64_t i = 0; i < d.n0; i++)
                for (int64_t m = 0; m < d.M; m++)
                    for (int64_t j = 0; j < d.n1; j++) {
                        const T *s = x + (((a * d.n0 + i) * d.M + m) * d.n1 + j) * d.I;
                        T *o = y + (((a * d.n1 + j) * d.M + m) * d.n0 + i) * d.I;
                        for (int64_t c = 0; c < d.I; c++) o[c] = acc ? o[c] + s[c] : s[c];
                    }
    });
}

pr_tensor *pr_transpose(pr_ctx *ctx, pr_tensor *x, int d0, int d1)
{
    pr_check_float("transpose", x, "x");
    int a = norm_dim("transpose", x, d0), b = norm_dim("transpose", x, d1);
    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[a] = x->shape[b];
    shape[b] = x->shape[a];
    pr_node n = pr_node_init(PR_OP_transpose, 1, (pr_tensor *[]){x});
    n.iarg[0] = a < b ? a : b;
    n.iarg[1] = a < b ? b : a;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim, shape);
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

void pr_transpose_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0];
    tr_move(x->dtype, n->out[0]->data, x->data, tr_dims_of(x, n->iarg[0], n->iarg[1]), false);
}

/* the inverse move: dout is [A, n1, M, n0, I], so swap the roles of n0 and n1 */
void pr_transpose_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *dx = pr_in_grad(n, 0);
    if (!dx) return;
    tr_dims d = tr_dims_of(n->in[0], n->iarg[0], n->iarg[1]);
    int64_t t = d.n0;
    d.n0 = d.n1;
    d.n1 = t;
    tr_move(dx->dtype, dx->data, n->out[0]->grad->data, d, true);
}

static pr_tensor *transpose_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_transpose(ctx, in[0], (int)ex->iarg[0], (int)ex->iarg[1]);
}

/* [2, 3, 5, 7], dims 1 and -1 (a middle dim between them) */
void pr_transpose_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(2, 3, 5, 7), -1, 1);
    ex->iarg[0] = 1;
    ex->iarg[1] = -1;
    ex->in[0]->name = "x";
    ex->apply = transpose_apply;
}

/* ---- slice: x [O, D, I] -> out [O, len, I] rows start .. start+len-1 ------------ */

pr_tensor *pr_slice(pr_ctx *ctx, pr_tensor *x, int dim, int64_t start, int64_t len)
{
    char s[64];
    pr_check_float("slice", x, "x");
    int d = norm_dim("slice", x, dim);
    PR_CHECK(start >= 0 && len >= 1 && start + len <= x->shape[d],
             "slice: [%lld, %lld) out of range for dim %d of x %s", (long long)start,
             (long long)(start + len), dim, pr_shape_str(x, s, sizeof s));
    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = len;
    pr_node n = pr_node_init(PR_OP_slice, 1, (pr_tensor *[]){x});
    n.iarg[0] = d;
    n.iarg[1] = start;
    n.iarg[2] = len;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim, shape);
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

void pr_slice_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *x = n->in[0];
    int d = (int)n->iarg[0];
    int64_t O = prod(x->shape, 0, d), D = x->shape[d], I = prod(x->shape, d + 1, x->ndim);
    int64_t start = n->iarg[1], len = n->iarg[2];
    for (int64_t o = 0; o < O; o++)
        move(x->dtype, AT(n->out[0]->data, x->dtype, o * len * I), AT(x->data, x->dtype, (o * D + start) * I),
             len * I, false);
}

/* out rows are x rows start.. : dx[o, start+r, :] += dout[o, r, :] */
void pr_slice_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *dx = pr_in_grad(n, 0);
    if (!dx) return;
    int d = (int)n->iarg[0];
    int64_t O = prod(dx->shape, 0, d), D = dx->shape[d], I = prod(dx->shape, d + 1, dx->ndim);
    int64_t start = n->iarg[1], len = n->iarg[2];
    for (int64_t o = 0; o < O; o++)
        move(dx->dtype, AT(dx->data, dx->dtype, (o * D + start) * I),
             AT(n->out[0]->grad->data, dx->dtype, o * len * I), len * I, true);
}

static pr_tensor *slice_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_slice(ctx, in[0], (int)ex->iarg[0], ex->iarg[1], ex->iarg[2]);
}

/* [3, 7, 5], dim 1, rows 2..5 */
void pr_slice_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 1;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 7, 5), -1, 1);
    ex->iarg[0] = 1;
    ex->iarg[1] = 2;
    ex->iarg[2] = 4;
    ex->in[0]->name = "x";
    ex->apply = slice_apply;
}

/* ---- concat: xs[k] [O, D_k, I] -> out [O, sum D_k, I] --------------------------- */

pr_tensor *pr_concat(pr_ctx *ctx, int n_in, pr_tensor *const *given, int dim)
{
    char s0[64], sk[64];
    PR_CHECK(n_in >= 1 && n_in <= PR_MAX_IN, "concat: %d inputs (1 to %d allowed)", n_in, PR_MAX_IN);
    pr_tensor *xs[PR_MAX_IN];
    memcpy(xs, given, sizeof xs[0] * (size_t)n_in);
    pr_autocast_promote(ctx, n_in, xs);   /* bf16 beside f32: all f32 */
    pr_tensor *x = xs[0];
    pr_check_float("concat", x, "xs[0]");
    int d = norm_dim("concat", x, dim);
    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = 0;
    for (int k = 0; k < n_in; k++) {
        pr_tensor *y = xs[k];
        pr_check_same_kind("concat", x, y);
        bool ok = y->ndim == x->ndim;
        for (int i = 0; ok && i < x->ndim; i++) ok = i == d || y->shape[i] == x->shape[i];
        PR_CHECK(ok, "concat: xs[%d] %s does not match xs[0] %s outside dim %d", k,
                 pr_shape_str(y, sk, sizeof sk), pr_shape_str(x, s0, sizeof s0), dim);
        shape[d] += y->shape[d];
    }
    pr_node n = pr_node_init(PR_OP_concat, n_in, xs);
    n.iarg[0] = d;
    n.out[0] = pr_op_output(ctx, x->dtype, x->device, x->ndim, shape);
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

/* copy each input's [D_k, I] block of every outer row to its offset in out (or,
 * with back, add out's grad block into the input's grad) */
static void concat_move(pr_node *n, bool back)
{
    pr_tensor *out = back ? n->out[0]->grad : n->out[0];
    pr_dtype dt = out->dtype;
    int d = (int)n->iarg[0];
    int64_t O = prod(out->shape, 0, d), D = out->shape[d], I = prod(out->shape, d + 1, out->ndim);
    int64_t off = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t Dk = n->in[k]->shape[d];
        pr_tensor *x = back ? pr_in_grad(n, k) : n->in[k];
        for (int64_t o = 0; x && o < O; o++) {
            void *xo = AT(x->data, dt, o * Dk * I), *yo = AT(out->data, dt, (o * D + off) * I);
            if (back)
                move(dt, xo, yo, Dk * I, true);
            else
                move(dt, yo, xo, Dk * I, false);
        }
        off += Dk;
    }
}

void pr_concat_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    concat_move(n, false);
}

void pr_concat_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    concat_move(n, true);
}

static pr_tensor *concat_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_concat(ctx, ex->n_in, in, (int)ex->iarg[0]);
}

/* [3, 2, 5], [3, 5, 5], [3, 1, 5] along dim 1 */
void pr_concat_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 3;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 2, 5), -1, 1);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(3, 5, 5), -1, 1);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(3, 1, 5), -1, 1);
    ex->iarg[0] = 1;
    ex->in[0]->name = "xs[0]";
    ex->in[1]->name = "xs[1]";
    ex->in[2]->name = "xs[2]";
    ex->apply = concat_apply;
}

/* ---- split ------------------------------------------------------------------------ */

void pr_split(pr_ctx *ctx, pr_tensor *x, int dim, int n, const int64_t *sizes, pr_tensor **outs)
{
    char s[64];
    int d = norm_dim("split", x, dim);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    PR_CHECK(n >= 1 && total == x->shape[d], "split: %d sizes sum to %lld, dim %d of x %s is %lld", n,
             (long long)total, dim, pr_shape_str(x, s, sizeof s), (long long)x->shape[d]);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        outs[i] = pr_slice(ctx, x, d, off, sizes[i]);
        off += sizes[i];
    }
}
