/* ops/binary.c: add, sub, mul, div with numpy broadcasting.
 *
 * Shapes are aligned at their trailing dims; in each dim the sizes are equal
 * or one of them is 1 (a missing leading dim counts as 1). The output has the
 * broadcast shape. An input dim of size 1 gets stride 0 in the output's index
 * space, so the backward's `+=` at that offset sums the grad over the dims the
 * input was broadcast along: no separate reduction pass is needed.
 */
#include <string.h>

#include "ops/ops.h"

/* the output's shape and, for a and b, strides in the output's index space */
typedef struct {
    int nd;
    int64_t shape[PR_MAX_DIMS], sa[PR_MAX_DIMS], sb[PR_MAX_DIMS];
} pr_bcast;

/* strides of t (row-major) placed into nd output dims, 0 where t's dim is 1 or missing */
static void bcast_strides(const pr_tensor *t, int nd, int64_t *s)
{
    int64_t stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int td = d - (nd - t->ndim);
        if (td < 0) { s[d] = 0; continue; }
        s[d] = t->shape[td] == 1 ? 0 : stride;
        stride *= t->shape[td];
    }
}

static void bcast_init(const char *op, const pr_tensor *a, const pr_tensor *b, pr_bcast *bc)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    bc->nd = nd;
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
        int64_t sa = da < 0 ? 1 : a->shape[da], sb = db < 0 ? 1 : b->shape[db];
        if (sa != sb && sa != 1 && sb != 1) {
            char s1[96], s2[96];
            pr_fatal("%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", op,
                     pr_shape_str(a, s1, sizeof s1), pr_shape_str(b, s2, sizeof s2), d, (long long)sa,
                     (long long)sb);
        }
        bc->shape[d] = sa == 1 ? sb : sa;
    }
    bcast_strides(a, nd, bc->sa);
    bcast_strides(b, nd, bc->sb);
}

/* The same walk over fewer dims: dims of size 1 dropped, and a dim merged
 * into the next inner one wherever both inputs run on contiguously across
 * them. Same-shape inputs become one dim; a bias added to rows becomes
 * [rows, cols]. The innermost stride of each input is then 0 or 1. */
static void bcast_collapse(pr_bcast *bc)
{
    int nd = 0;
    for (int d = 0; d < bc->nd; d++) {
        if (bc->shape[d] == 1) continue;
        if (nd > 0 && bc->sa[nd - 1] == bc->sa[d] * bc->shape[d] && bc->sb[nd - 1] == bc->sb[d] * bc->shape[d]) {
            bc->shape[nd - 1] *= bc->shape[d];
            bc->sa[nd - 1] = bc->sa[d];
            bc->sb[nd - 1] = bc->sb[d];
            continue;
        }
        bc->shape[nd] = bc->shape[d], bc->sa[nd] = bc->sa[d], bc->sb[nd] = bc->sb[d];
        nd++;
    }
    if (nd == 0) bc->shape[0] = 1, bc->sa[0] = bc->sb[0] = 0, nd = 1;   /* one element */
    bc->nd = nd;
}

/* the inner run of PR_BCAST_LOOP with a's and b's strides fixed, so that
 * the compiler can vectorize it */
#define PR_BCAST_RUN(n, i0, a0, b0, da, db, body)                               \
    for (int64_t j_ = 0; j_ < (n); j_++) {                                      \
        const int64_t i = (i0) + j_, ia = (a0) + (da) * j_, ib = (b0) + (db) * j_; \
        (void)i, (void)ia, (void)ib; /* a grad's body uses two of the three */ \
        body;                                                                   \
    }

/* Walks the output in row-major order keeping the offsets ia, ib into a and b:
 * `body` runs for every output element i, in that order (so a broadcast
 * input's grad sums its terms in the same order whatever the shapes). The
 * innermost dim is one tight loop; the outer dims advance once per run. */
#define PR_BCAST_LOOP(bc, numel, body)                                          \
    do {                                                                        \
        const int nd_ = (bc)->nd;                                               \
        const int64_t n_ = (bc)->shape[nd_ - 1];                                \
        const int64_t da_ = (bc)->sa[nd_ - 1], db_ = (bc)->sb[nd_ - 1];         \
        int64_t idx_[PR_MAX_DIMS] = {0}, a0_ = 0, b0_ = 0;                      \
        for (int64_t i0_ = 0; i0_ < (numel); i0_ += n_) {                       \
            if (da_ && db_) PR_BCAST_RUN(n_, i0_, a0_, b0_, 1, 1, body)         \
            else if (da_) PR_BCAST_RUN(n_, i0_, a0_, b0_, 1, 0, body)           \
            else if (db_) PR_BCAST_RUN(n_, i0_, a0_, b0_, 0, 1, body)           \
            else PR_BCAST_RUN(n_, i0_, a0_, b0_, 0, 0, body)                    \
            for (int d_ = nd_ - 2; d_ >= 0; d_--) {                             \
                a0_ += (bc)->sa[d_]; b0_ += (bc)->sb[d_];                       \
                if (++idx_[d_] < (bc)->shape[d_]) break;                        \
                a0_ -= (bc)->sa[d_] * (bc)->shape[d_];                          \
                b0_ -= (bc)->sb[d_] * (bc)->shape[d_];                          \
                idx_[d_] = 0;                                                   \
            }                                                                   \
        }                                                                       \
    } while (0)

typedef enum { ADD, SUB, MUL, DIV } binop;

/* autocast of a mul: bf16 data times a broadcast f32 factor (fewer elements:
 * a per-channel weight, a per-head step size) keeps the data's bf16, the
 * factor lowered, as a norm lowers its w; an f32 copy of the data and of its
 * grad would be kept for the step otherwise. Else the pair promotes as for
 * every binary op. */
static void autocast_mul(pr_ctx *ctx, pr_tensor **a, pr_tensor **b)
{
    if ((*a)->dtype == PR_BF16 && (*b)->dtype == PR_F32 && (*b)->numel < (*a)->numel)
        *b = pr_autocast(ctx, *b, PR_BF16);
    else if ((*b)->dtype == PR_BF16 && (*a)->dtype == PR_F32 && (*a)->numel < (*b)->numel)
        *a = pr_autocast(ctx, *a, PR_BF16);
}

static pr_tensor *binary(pr_ctx *ctx, pr_op_id id, const char *op, pr_tensor *a, pr_tensor *b)
{
    PR_CHECK(a && b, "%s: NULL input", op);
    if (id == PR_OP_mul) autocast_mul(ctx, &a, &b);
    pr_tensor *ab[2] = {a, b};
    pr_autocast_promote(ctx, 2, ab);   /* bf16 with f32: f32 */
    a = ab[0], b = ab[1];
    pr_check_float(op, a, "a");
    pr_check_float(op, b, "b");
    pr_check_same_kind(op, a, b);
    pr_bcast bc;
    bcast_init(op, a, b, &bc);
    pr_node n = pr_node_init(id, 2, (pr_tensor *[]){a, b});
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, a->dtype, a->device, bc.nd, bc.shape);
    return pr_op_apply(ctx, &n);
}

pr_tensor *pr_add(pr_ctx *ctx, pr_tensor *a, pr_tensor *b) { return binary(ctx, PR_OP_add, "add", a, b); }
pr_tensor *pr_sub(pr_ctx *ctx, pr_tensor *a, pr_tensor *b) { return binary(ctx, PR_OP_sub, "sub", a, b); }
pr_tensor *pr_mul(pr_ctx *ctx, pr_tensor *a, pr_tensor *b) { return binary(ctx, PR_OP_mul, "mul", a, b); }
pr_tensor *pr_div(pr_ctx *ctx, pr_tensor *a, pr_tensor *b) { return binary(ctx, PR_OP_div, "div", a, b); }

static void binary_forward(pr_node *n, binop op)
{
    pr_tensor *a = n->in[0], *b = n->in[1], *out = n->out[0];
    pr_bcast bc;
    bcast_init("binary", a, b, &bc);
    bcast_collapse(&bc);
    PR_FLOAT_SWITCH(a->dtype, T, {
        const T *pa = a->data, *pb = b->data;
        T *po = out->data;
        switch (op) {
        case ADD: PR_BCAST_LOOP(&bc, out->numel, po[i] = pa[ia] + pb[ib]); break;
        case SUB: PR_BCAST_LOOP(&bc, out->numel, po[i] = pa[ia] - pb[ib]); break;
        case MUL: PR_BCAST_LOOP(&bc, out->numel, po[i] = pa[ia] * pb[ib]); break;
        case DIV: PR_BCAST_LOOP(&bc, out->numel, po[i] = pa[ia] / pb[ib]); break;
        }
    });
}

/* whether grad g of input t (of an op with output out) is written rather
 * than added into: it is unwritten (pr_grad_claim) and t has out's shape;
 * an unwritten grad of a broadcast input, whose elements sum several
 * terms, is zeroed here and added into */
static bool writes_whole(pr_tensor *g, const pr_tensor *t, const pr_tensor *out)
{
    if (!g || !pr_grad_claim(g)) return false;
    if (t->numel == out->numel) return true;
    memset(g->data, 0, pr_nbytes(g));
    return false;
}

/* dst = expr or dst += expr over the broadcast walk */
#define GRAD_LOOP(write, dst, expr)                                             \
    do {                                                                        \
        if (write) PR_BCAST_LOOP(&bc, out->numel, dst = (expr));                \
        else PR_BCAST_LOOP(&bc, out->numel, dst += (expr));                     \
    } while (0)

/* d(a+b) = (1, 1); d(a-b) = (1, -1); d(ab) = (b, a); d(a/b) = (1/b, -a/b^2).
 * da is claimed and written before db: when a and b are one tensor, db adds. */
static void binary_backward(pr_node *n, binop op)
{
    pr_tensor *a = n->in[0], *b = n->in[1], *out = n->out[0];
    pr_tensor *ga = pr_in_grad(n, 0), *gb = pr_in_grad(n, 1);
    pr_bcast bc;
    bcast_init("binary", a, b, &bc);
    bcast_collapse(&bc);
    PR_FLOAT_SWITCH(a->dtype, T, {
        const T *pa = a->data, *pb = b->data, *g = out->grad->data;
        T *da = ga ? ga->data : NULL, *db = gb ? gb->data : NULL;
        if (da) {
            bool w = writes_whole(ga, a, out);
            switch (op) {
            case ADD: case SUB: GRAD_LOOP(w, da[ia], g[i]); break;
            case MUL: GRAD_LOOP(w, da[ia], g[i] * pb[ib]); break;
            case DIV: GRAD_LOOP(w, da[ia], g[i] / pb[ib]); break;
            }
        }
        if (db) {
            bool w = writes_whole(gb, b, out);
            switch (op) {
            case ADD: GRAD_LOOP(w, db[ib], g[i]); break;
            case SUB: GRAD_LOOP(w, db[ib], -g[i]); break;
            case MUL: GRAD_LOOP(w, db[ib], g[i] * pa[ia]); break;
            case DIV: GRAD_LOOP(w, db[ib], -(g[i] * pa[ia] / (pb[ib] * pb[ib]))); break;
            }
        }
    });
}
#undef GRAD_LOOP

void pr_add_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; binary_forward(n, ADD); }
void pr_sub_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; binary_forward(n, SUB); }
void pr_mul_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; binary_forward(n, MUL); }
void pr_div_forward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; binary_forward(n, DIV); }
void pr_add_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; binary_backward(n, ADD); }
void pr_sub_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; binary_backward(n, SUB); }
void pr_mul_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; binary_backward(n, MUL); }
void pr_div_backward_cpu(pr_ctx *ctx, pr_node *n) { (void)ctx; binary_backward(n, DIV); }

/* ---- examples: a [3,1,5] (op) b [4,5] -> [3,4,5]; both inputs broadcast ---- */
static pr_tensor *add_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_add(ctx, in[0], in[1]);
}
static pr_tensor *sub_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_sub(ctx, in[0], in[1]);
}
static pr_tensor *mul_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_mul(ctx, in[0], in[1]);
}
static pr_tensor *div_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_div(ctx, in[0], in[1]);
}

/* b_lo, b_hi: div keeps its denominator away from the pole at 0 */
static void binary_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex, double b_lo, double b_hi)
{
    ex->n_in = 2;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 1, 5), -1.0, 1.0);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(4, 5), b_lo, b_hi);
}

void pr_add_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    binary_example(ctx, r, dt, ex, -1.0, 1.0);
    ex->apply = add_apply;
}
void pr_sub_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    binary_example(ctx, r, dt, ex, -1.0, 1.0);
    ex->apply = sub_apply;
}
void pr_mul_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    binary_example(ctx, r, dt, ex, -1.0, 1.0);
    ex->apply = mul_apply;
}
void pr_div_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    binary_example(ctx, r, dt, ex, 0.5, 1.5);
    ex->apply = div_apply;
}
