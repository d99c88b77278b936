/* ops/ops.h: every differentiable op. Shapes are written outermost first.
 *
 * Each op is one public function that checks its inputs (a misuse is fatal
 * with a message naming the op and the problem), allocates its output in the
 * context's step arena and runs through pr_op_apply, which dispatches on the
 * inputs' device and records the op on the tape. The kernels live in
 * ops/<file>.c (CPU, f32 and f64) and ops/<file>.cu (CUDA, f32; the GEMM,
 * elementwise, norm, softmax, loss, reduce, shape, dropout, embedding and
 * conv1d kernels also bf16: bf16 loads, f32 math, one rounding per store).
 *
 * bf16: every op accepts bf16 tensors (computed wide, rounded once, its
 * output and input grads bf16). Which kernels pr_op_apply hands bf16 to is
 * the last two columns of ops/ops.def, per device; the others run staged
 * through f64 (CPU) or f32 (CUDA) copies (autograd/staging.c). With
 * ctx->precision PR_PREC_BF16, each frontend first converts its inputs by
 * the autocast policy (ops/autocast.c, docs/ARCHITECTURE.md "Precision").
 */
#ifndef PR_OPS_H
#define PR_OPS_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* op ids and table, generated from ops/ops.def */
typedef enum {
#define PR_OP(name, has_cuda, bf16_cpu, bf16_cuda) PR_OP_##name,
#include "ops/ops.def"
#undef PR_OP
    PR_NOPS
} pr_op_id;
const pr_op_info *pr_op(pr_op_id id);
const pr_op_info *pr_op_by_name(const char *name);  /* NULL if unknown */
int pr_op_count(void);

/* ---- unary.c: elementwise, any shape, out has x's shape ------------------- */
pr_tensor *pr_scale(pr_ctx *ctx, pr_tensor *x, double s);    /* s * x */
pr_tensor *pr_neg(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_exp(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_log(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_sqrt(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_sigmoid(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_logsigmoid(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_tanh(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_relu(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_silu(pr_ctx *ctx, pr_tensor *x);               /* x * sigmoid(x) */
pr_tensor *pr_gelu(pr_ctx *ctx, pr_tensor *x);               /* exact erf form */
pr_tensor *pr_gelu_tanh(pr_ctx *ctx, pr_tensor *x);          /* tanh approximation */
pr_tensor *pr_softplus(pr_ctx *ctx, pr_tensor *x);           /* log(1+e^x), = x for x > 20 */

/* ---- cast.c: x in another dtype, same shape and device; differentiable (the
 * grad is cast back). f32 <-> bf16 on the CPU and CUDA, f32 <-> f64 on the
 * CPU; narrowing rounds to nearest even. The same dtype gives a copy. */
pr_tensor *pr_cast(pr_ctx *ctx, pr_tensor *x, pr_dtype dtype);
/* no node: dst = round(src), or with acc dst = round(dst + src), elementwise
 * on dst's device (the pairs pr_cast's kernels convert; any float pair on the
 * CPU). bf16 staging's conversions (pr_op_info.convert). */
void pr_cast_convert(pr_ctx *ctx, pr_tensor *dst, pr_tensor *src, bool acc);

/* ---- binary.c: a (op) b with numpy broadcasting: shapes aligned at the
 * trailing dims, each dim equal or 1 in one of them; out has the broadcast shape */
pr_tensor *pr_add(pr_ctx *ctx, pr_tensor *a, pr_tensor *b);
pr_tensor *pr_sub(pr_ctx *ctx, pr_tensor *a, pr_tensor *b);
pr_tensor *pr_mul(pr_ctx *ctx, pr_tensor *a, pr_tensor *b);
pr_tensor *pr_div(pr_ctx *ctx, pr_tensor *a, pr_tensor *b);

/* ---- swiglu.c: silu(gate) * up, gate and up of one shape, fused (one read
 * of each, one write; the MLP's SwiGLU step) -------------------------------- */
pr_tensor *pr_swiglu(pr_ctx *ctx, pr_tensor *gate, pr_tensor *up);

/* ---- reduce.c ---------------------------------------------------------------
 * x [..., N] -> [...] (last dim removed; a 1-D x gives a 0-dim scalar)      */
pr_tensor *pr_sum(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_mean(pr_ctx *ctx, pr_tensor *x);
/* x any shape -> 0-dim scalar */
pr_tensor *pr_sum_all(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_mean_all(pr_ctx *ctx, pr_tensor *x);

/* ---- softmax.c: over the last dim, out has x's shape ----------------------- */
pr_tensor *pr_softmax(pr_ctx *ctx, pr_tensor *x);
pr_tensor *pr_log_softmax(pr_ctx *ctx, pr_tensor *x);

/* ---- loss.c -----------------------------------------------------------------
 * cross_entropy: logits [N, C] (or [..., C]), targets int32/int64 [N] (or [...]);
 * mean over targets != ignore_index (0 if none); 0-dim scalar in the logits'
 * dtype, but f32 under bf16 autocast, which reads bf16 logits in place.
 * bce_logits: logits and float targets of one shape; mean of
 * max(x,0) - x*t + log(1 + e^-|x|); 0-dim scalar. */
pr_tensor *pr_cross_entropy(pr_ctx *ctx, pr_tensor *logits, pr_tensor *targets, int64_t ignore_index);
pr_tensor *pr_bce_logits(pr_ctx *ctx, pr_tensor *logits, pr_tensor *targets);

/* score_rows, for evaluation (no gradient, no node): logits [..., C] (R rows)
 * against int32 labels, per row r: loss[r] = logsumexp(x_r) - x_r[label_r]
 * in double, hit[r] = 1 when x_r's first argmax is label_r; a row labelled
 * `ignore` gets 0 and 0. labels, loss and hit hold R values in the memory of
 * the logits' device. The CPU checks each label; CUDA trusts them (the
 * caller checked them on the host) and queues its kernel on the thread's
 * stream, reading nothing back, so scores of many batches cost one wait. */
void pr_score_rows(pr_ctx *ctx, const pr_tensor *logits, const int32_t *labels, int32_t ignore, double *loss,
                   int32_t *hit);
void pr_score_rows_cuda(pr_ctx *ctx, const pr_tensor *logits, const int32_t *labels, int32_t ignore, double *loss,
                        int32_t *hit);

/* ---- linear_ce.c: cross_entropy(x op(w), targets) without the logits: x [..., D],
 * w [V, D] with trans_w (a tied embedding: logits = x w^T) or [D, V] without
 * (an untied head: logits = x w), targets int32/int64 [...]; the mean over
 * targets != ignore_index (0 if none), as pr_cross_entropy on the logits;
 * 0-dim scalar in x's dtype (f32 under bf16 autocast). Rows run in chunks of chunk_rows
 * (0: pr_linear_ce_chunk_rows(V)); when recorded, the gradients are computed
 * with the loss (it is a scalar: the backward only scales them by its grad). */
pr_tensor *pr_linear_cross_entropy(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, bool trans_w, pr_tensor *targets,
                                   int64_t ignore_index, int64_t chunk_rows);
/* the default rows per chunk for V classes: about 16M logits (64 MB f32) a chunk */
int64_t pr_linear_ce_chunk_rows(int64_t V);

/* ---- norm.c: over the last dim D ------------------------------------------
 * layernorm: (x - mean) / sqrt(var_biased + eps) * w + b; w, b [D] or NULL
 * rmsnorm: x / sqrt(mean(x^2) + eps) * w; w [D] or NULL
 * rmsnorm_gated: rmsnorm(x; w) * silu(z); z has x's shape (fla's FusedRMSNormGated)
 * l2norm: x / sqrt(sum(x^2) + eps)   (eps inside the sqrt, as fla)
 * add_rmsnorm, add_layernorm: the pre-norm residual step fused: n = norm(x + y)
 *   returned, the sum s = x + y (the new residual stream) in *sum (NULL: not
 *   wanted); x, y of one shape, one read of each and one write of s and n;
 *   the grads of x and y are equal (ds plus the norm's backward) */
pr_tensor *pr_layernorm(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *b, double eps);
pr_tensor *pr_rmsnorm(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, double eps);
pr_tensor *pr_rmsnorm_gated(pr_ctx *ctx, pr_tensor *x, pr_tensor *z, pr_tensor *w, double eps);
pr_tensor *pr_l2norm(pr_ctx *ctx, pr_tensor *x, double eps);
pr_tensor *pr_add_rmsnorm(pr_ctx *ctx, pr_tensor *x, pr_tensor *y, pr_tensor *w, double eps, pr_tensor **sum);
pr_tensor *pr_add_layernorm(pr_ctx *ctx, pr_tensor *x, pr_tensor *y, pr_tensor *w, pr_tensor *b, double eps,
                            pr_tensor **sum);

/* ---- matmul.c -----------------------------------------------------------------
 * op(a) @ op(b), op = transpose of the last two dims when the flag is set.
 * a [..., M, K] (or [..., K, M] transposed), b [K, N] (shared by every batch)
 * or [..., K, N] with the same leading dims as a. out [..., M, N].
 * CUDA runs every case through cuBLAS; ctx->matmul_tf32 picks its precision:
 * 0 = full fp32 math (matches the CPU to ~1e-6 relative), 1 = TF32 tensor
 * cores (inputs rounded to a 10-bit mantissa: ~1e-3 relative error, several
 * times faster). It applies to the forward and the backward alike; the CPU
 * ignores it. */
pr_tensor *pr_matmul(pr_ctx *ctx, pr_tensor *a, pr_tensor *b, bool trans_a, bool trans_b);
/* the CPU gemm's worker threads (OpenBLAS); nothing in a build without BLAS */
void pr_blas_set_threads(int n);
/* one gemm thread between enter and leave, for callers inside their own
 * parallel region (nested, counted; see matmul.c) */
void pr_blas_serial_enter(void);
void pr_blas_serial_leave(void);

/* ---- embedding.c: weight [V, D], ids int32/int64 any shape -> [..., D]; an id
 * out of [0, V) is fatal. Backward scatter-adds into weight's grad. */
pr_tensor *pr_embedding(pr_ctx *ctx, pr_tensor *weight, pr_tensor *ids);

/* ---- gate.c: Gated DeltaNet's log-decay gate in one op (fla's form):
 * a [..., H], A_log [H], dt_bias [H] -> g = -exp(A_log) * softplus(a + dt_bias)
 * [..., H], f32 (bf16 a widened) or f64 */
pr_tensor *pr_decay_gate(pr_ctx *ctx, pr_tensor *a, pr_tensor *A_log, pr_tensor *dt_bias);

/* ---- conv1d.c: causal depthwise convolution over time, zero left padding.
 * x [B, T, C], w [C, W], bias [C] or NULL -> [B, T, C];
 * out[b,t,c] = sum_{i<W} w[c,i] x[b, t-W+1+i, c] (+ bias[c]).
 * conv1d_silu: silu(out) in the same op (the models' short convolutions): one
 * pass instead of two; on CUDA no pre-activation is kept for the backward,
 * which recomputes it (the same numbers as pr_silu(pr_conv1d(..)) on the CPU). */
pr_tensor *pr_conv1d(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *bias);
pr_tensor *pr_conv1d_silu(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *bias);

/* ---- shape.c --------------------------------------------------------------------
 * reshape: a view sharing x's data (numel kept; one dim may be -1).
 * transpose: swap dims d0 and d1 (negative counts from the end); materializes.
 * slice: x[..., start:start+len, ...] along dim; materializes.
 * concat: along dim; all other dims equal; n <= PR_MAX_IN.
 * split: n consecutive slices of the given sizes along dim, into outs. */
pr_tensor *pr_reshape(pr_ctx *ctx, pr_tensor *x, int ndim, const int64_t *shape);
pr_tensor *pr_transpose(pr_ctx *ctx, pr_tensor *x, int d0, int d1);
pr_tensor *pr_slice(pr_ctx *ctx, pr_tensor *x, int dim, int64_t start, int64_t len);
pr_tensor *pr_concat(pr_ctx *ctx, int n, pr_tensor *const *xs, int dim);
void pr_split(pr_ctx *ctx, pr_tensor *x, int dim, int n, const int64_t *sizes, pr_tensor **outs);

/* ---- dropout.c: zeroes each element with probability p and scales the rest by
 * 1/(1-p) when ctx->training; identity otherwise. The mask is drawn from
 * ctx->rng (Philox), so it is the same on every device. */
pr_tensor *pr_dropout(pr_ctx *ctx, pr_tensor *x, double p);

/* ---- recurrence/ and ttt_linear.c: see their headers (included at the end) */

/* ---- autocast.c: the bf16 policy the frontends apply (no-ops unless
 * ctx->precision is PR_PREC_BF16; only f32 <-> bf16 is ever converted) ---- */
/* t in dtype want (a recorded pr_cast; a parameter's cast is made once a
 * step and reused); t itself when NULL, already want, or not f32/bf16 */
pr_tensor *pr_autocast(pr_ctx *ctx, pr_tensor *t, pr_dtype want);
/* ts[i] = pr_autocast(ts[i], want) for i < n (NULL entries stay NULL) */
void pr_autocast_all(pr_ctx *ctx, int n, pr_tensor **ts, pr_dtype want);
/* mixed bf16 and f32 among ts[0..n): every one to f32; otherwise unchanged */
void pr_autocast_promote(pr_ctx *ctx, int n, pr_tensor **ts);
/* a loss's dtype from its input's: f32 under autocast for bf16 input (the
 * kernels read it as it is and sum wide), else the input's, as every op */
pr_dtype pr_autocast_loss_dtype(const pr_ctx *ctx, const pr_tensor *in);

/* ---- kit for op implementations --------------------------------------------- */
/* run `body` with T typedef'd to the C type of a float dtype */
#define PR_FLOAT_SWITCH(dt, T, ...)                                              \
    switch (dt) {                                                               \
    case PR_F32: { typedef float T; __VA_ARGS__; } break;                       \
    case PR_F64: { typedef double T; __VA_ARGS__; } break;                      \
    default: pr_fatal("%s: dtype %s not supported", __func__, pr_dtype_name(dt)); \
    }
/* fatal unless t is a float tensor (f32, f64 or bf16) */
void pr_check_float(const char *op, const pr_tensor *t, const char *arg);
/* fatal unless a and b have the same dtype and device */
void pr_check_same_kind(const char *op, const pr_tensor *a, const pr_tensor *b);
/* fatal unless a and b have the same shape */
void pr_check_same_shape(const char *op, const pr_tensor *a, const pr_tensor *b);
/* a node for op id with the given inputs (NULL allowed), no outputs yet */
pr_node pr_node_init(pr_op_id id, int n_in, pr_tensor *const *in);
/* the op id of a node */
static inline pr_op_id pr_node_op(const pr_node *n) { return (pr_op_id)(n->op - pr_op((pr_op_id)0)); }
/* the grad buffer of input i during a backward, or NULL when it needs none */
static inline pr_tensor *pr_in_grad(const pr_node *n, int i)
{
    return n->in[i] && n->in[i]->requires_grad ? n->in[i]->grad : NULL;
}
/* an example input: random in [lo, hi), requires grad */
pr_tensor *pr_example_input(pr_ctx *ctx, pr_rng *r, pr_dtype dt, int ndim, const int64_t *shape,
                            double lo, double hi);

#define PR_OP(name, has_cuda, bf16_cpu, bf16_cuda)             \
    void pr_##name##_forward_cpu(pr_ctx *ctx, pr_node *n);     \
    void pr_##name##_backward_cpu(pr_ctx *ctx, pr_node *n);    \
    void pr_##name##_forward_cuda(pr_ctx *ctx, pr_node *n);    \
    void pr_##name##_backward_cuda(pr_ctx *ctx, pr_node *n);   \
    void pr_##name##_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex);
#include "ops/ops.def"
#undef PR_OP

#ifdef __cplusplus
}
#endif

#include "ops/recurrence/recurrence.h"
#include "ops/ttt_linear.h"
#include "ops/attention.h"
#include "ops/selective_scan.h"
#include "ops/ttt_mlp.h"
#include "ops/titans.h"
#endif
