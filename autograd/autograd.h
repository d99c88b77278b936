/* autograd/autograd.h: the context, the tape, backward, gradcheck, inspection.
 *
 * Every op call appends one node to the context's tape (a Wengert list in
 * execution order) when grad mode is on and an input requires grad. A node
 * holds its op (name and backward functions), inputs, outputs, the tensors
 * the backward needs (saved) and a small fixed block of scalar arguments.
 * pr_backward walks the tape in reverse. Activations, saved tensors and the
 * tape live in the step arena and go in one pr_step_reset.
 */
#ifndef PR_AUTOGRAD_H
#define PR_AUTOGRAD_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PR_MAX_IN 10
#define PR_MAX_OUT 5
#define PR_MAX_SAVED 8
#define PR_MAX_IARGS 8
#define PR_MAX_FARGS 4

typedef struct pr_ctx pr_ctx;
typedef struct pr_node pr_node;
typedef struct pr_op_info pr_op_info;
typedef struct pr_profile pr_profile;

/* A forward fills n->out (already allocated) from n->in and may set n->saved.
 * A backward reads n->out[i]->grad (always allocated) and ACCUMULATES into
 * n->in[j]->grad for every input with a non-NULL grad. */
typedef void (*pr_op_fn)(pr_ctx *ctx, pr_node *n);

/* A ready-to-run instance of an op on random inputs, for gradcheck and the
 * cross-device / cross-dtype tests. `apply` calls the op's public function on
 * `in` (which may be copies of ex->in on another device or dtype). */
typedef struct pr_example {
    int n_in;
    pr_tensor *in[PR_MAX_IN];
    int64_t iarg[PR_MAX_IARGS];
    double farg[PR_MAX_FARGS];
    pr_tensor *(*apply)(pr_ctx *ctx, pr_tensor *const *in, const struct pr_example *ex);
    double tol_scale;   /* >1 loosens f32 comparisons for ops with long reductions (0 = 1) */
} pr_example;
/* fill ex with random inputs of dtype dt on the CPU (leaves; float inputs require grad) */
typedef void (*pr_example_fn)(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex);

struct pr_op_info {
    const char *name;
    pr_op_fn forward_cpu, backward_cpu, forward_cuda, backward_cuda;
    pr_example_fn example;  /* NULL: not checkable in isolation */
    /* whether the op's kernels take bf16 tensors themselves, per device
     * (indexed by pr_device; ops/ops.def's last two columns). Where not,
     * pr_op_apply stages bf16 through a wider dtype (autograd/staging.c)
     * with `convert`: dst = round(src), or with acc dst = round(dst + src),
     * on dst's device (pr_cast's kernels, the same in every row) */
    bool bf16_native[2];
    void (*convert)(pr_ctx *ctx, pr_tensor *dst, pr_tensor *src, bool acc);
};

struct pr_node {
    const pr_op_info *op;
    int n_in, n_out, n_saved;
    /* set by pr_op_apply before the forward runs: the node goes on the tape.
     * A forward saves (allocates) what only its backward needs only then. */
    bool recording;
    pr_tensor *in[PR_MAX_IN];     /* NULL entries allowed (optional inputs) */
    pr_tensor *out[PR_MAX_OUT];
    pr_tensor *saved[PR_MAX_SAVED];
    int64_t iarg[PR_MAX_IARGS];
    double farg[PR_MAX_FARGS];
    const char *scope;            /* ctx->scope when the op ran (NULL: outside any layer) */
    /* bf16 staging (autograd/staging.c): the node the kernels really ran on,
     * with wider copies of the bf16 tensors; NULL when the op ran as is */
    pr_node *staged;
};

/* The numeric precision of a context, as `train.precision` names it.
 * f32: f32 everywhere, exact fp32 products on CUDA. tf32: the same, with
 * CUDA products on TF32 tensor cores (the CPU has none: it computes as f32).
 * bf16: autocast (ops/autocast.c): the op frontends run products in bf16,
 * keep bf16 activations bf16 (norms and elementwise ops included) and keep
 * softmax, losses, reductions, states and the residual stream in f32;
 * parameters stay f32 and are cast to bf16 once a step where an op lowers
 * them. */
typedef enum { PR_PREC_F32, PR_PREC_TF32, PR_PREC_BF16 } pr_precision;
const char *pr_precision_name(pr_precision p);       /* "f32", "tf32", "bf16" */
int pr_precision_from_name(const char *name);        /* -1 if unknown */

struct pr_ctx {
    pr_arena *step;      /* activations, saved tensors: reset every step */
    pr_arena *grads;     /* grads of tensors that outlive the step (parameters) */
    pr_node *tape;
    int n_tape, cap_tape;
    bool grad_enabled;
    bool training;       /* dropout active */
    pr_rng rng;          /* dropout and other in-graph randomness */
    void *cuda;          /* CUDA state (cuBLAS handle); NULL until first use */
    /* set both through pr_ctx_set_precision. matmul_tf32 is what the CUDA
     * products read: 0 = fp32, 1 = tf32 tensor cores (1 for tf32 and bf16, where
     * the f32 kernels that remain may round their products too) */
    pr_precision precision;
    int matmul_tf32;
    /* bf16 autocast's casts of parameters and of the step's tensors, made
     * once a step and reused by every op that converts the same tensor, with
     * a hash index over src (slot); emptied by pr_step_reset and
     * pr_autocast_forget (ops/autocast.c fills it) */
    struct { pr_tensor **src, **dst; int n, cap; int *slot, nslot; } cast_cache;
    unsigned backward_pass; /* counts pr_backward calls; marks what each one reached */
    /* the NaN/Inf trap: with check_finite on, every op's outputs (forward) and
     * its inputs' grads (backward) are checked after it runs, and the first
     * non-finite one is described in `nonfinite` ("matmul forward in
     * layers.1.mixer"); later ones leave it alone. Copies to the host: a
     * diagnostic mode, not for every step on a GPU. */
    bool check_finite;
    char nonfinite[256];
    const char *scope;   /* where ops are being recorded now ("layers.3.mixer"); pr_ctx_set_scope */
    pr_profile *profile; /* non-NULL: time every op (autograd/profile.h); the caller owns it */
    /* when set, called after each node's backward has run, with its tape
     * position (data-parallel training starts a parameter's all-reduce once
     * the last node that adds to its grad is done: dist/ddp.c) */
    void (*on_node_backward)(void *user, pr_ctx *ctx, int tape_pos);
    void *on_node_backward_user;
    /* where layers leave what a training loss adds beyond the task's own term
     * (models/: MoM's router statistics, pr_router_stats); set by the model's
     * loss functions while they run the model, NULL otherwise */
    void *loss_aux;
};

pr_ctx *pr_ctx_new(uint64_t seed);
void pr_ctx_free(pr_ctx *ctx);
void pr_step_reset(pr_ctx *ctx);          /* free activations and the tape */
/* the context's precision (and matmul_tf32, which follows from it) */
void pr_ctx_set_precision(pr_ctx *ctx, pr_precision p);
/* drop autocast's cached casts: their sources changed (the optimizer calls it) */
void pr_autocast_forget(pr_ctx *ctx);
/* Exact f32 for a stretch of ops, as torch.autocast(enabled=False) (and no
 * TF32 products): ops take their inputs as given, so cast them to f32 first.
 * For the few products whose rounding changes a discrete choice (a router's
 * top-k). pr_autocast_resume restores what pause returned. */
typedef struct { pr_precision precision; int matmul_tf32; } pr_precision_state;
pr_precision_state pr_autocast_pause(pr_ctx *ctx);
void pr_autocast_resume(pr_ctx *ctx, pr_precision_state s);
bool pr_set_grad_enabled(pr_ctx *ctx, bool on);   /* returns the previous mode */
/* name the part of the model that records the next ops (printf format; the
 * string is copied into the step arena; NULL clears). Models set it per layer,
 * so the NaN trap and tape dumps can say where an op belongs. */
void pr_ctx_set_scope(pr_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* every element finite (any dtype/device; integers are always finite) */
bool pr_all_finite(const pr_tensor *t);

/* Run n's forward on its inputs' device and record it on the tape when
 * needed. Inputs must share one device. Returns n->out[0]. */
pr_tensor *pr_op_apply(pr_ctx *ctx, pr_node *n);
/* whether pr_op_apply will record n: grad mode on and some input requires
 * grad. For ops that allocate saved tensors before calling pr_op_apply. */
bool pr_op_will_record(const pr_ctx *ctx, const pr_node *n);
/* bf16 staging (autograd/staging.c), pr_op_apply's and backward's: whether
 * n has a bf16 input its op's kernels on dev do not take; then the forward
 * and backward running n's kernels on wider copies (f64 on the CPU, f32 on
 * CUDA) and rounding what they give back to bf16 once */
bool pr_node_needs_staging(const pr_node *n, pr_device dev);
void pr_staged_forward(pr_ctx *ctx, pr_node *n, pr_op_fn fwd);
void pr_staged_backward(pr_ctx *ctx, pr_node *n, pr_op_fn bwd);
/* an output tensor for a node, in the step arena */
pr_tensor *pr_op_output(pr_ctx *ctx, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape);

/* backward: loss must have one element (seeded with 1) unless grad_out is
 * given; pr_backward_many seeds several outputs at once (e.g. a recurrence's
 * o and final state), like torch.autograd.backward(outputs, grads). Each
 * call is one pass: only what its seeds reach gets gradient.
 *
 * A tape may be walked any number of times (as torch with retain_graph=True).
 * Each pass starts the grads of intermediates (outputs of recorded ops) from
 * zero, seeds included, so after a pass they hold that pass's gradient only.
 * Leaves (tensors no recorded op made: parameters, inputs) accumulate across
 * passes and steps until pr_zero_grads.
 *
 * A reshape of an op's output records no node: it is a view whose gradient
 * is a view of that output's gradient (pr_tensor.grad_base), so what its
 * readers add lands in the base directly, as torch's views share storage. */
void pr_backward(pr_ctx *ctx, pr_tensor *loss);
void pr_backward_with(pr_ctx *ctx, pr_tensor *out, const pr_tensor *grad_out);
void pr_backward_many(pr_ctx *ctx, int n, pr_tensor *const *outs, const pr_tensor *const *grads);
/* grad of t, allocated (zeros) on first use in the arena that matches t's life */
pr_tensor *pr_grad_of(pr_ctx *ctx, pr_tensor *t);
/* Inside a backward, the gradient of a CPU activation (a step tensor that
 * is not a view) starts unwritten: no zeros are stored in it. The first op
 * to add into it writes it whole instead, if its CPU backward is listed by
 * pr_op_fills_unwritten (ops/ops.c); before any other op's backward, and
 * after every backward for what it left unwritten, the engine zeroes it.
 * Memory traffic saved: a zero fill, and a read of those zeros, per
 * activation gradient. A listed kernel calls pr_grad_claim right before
 * writing a gradient: true means write, not add (and every element must be
 * written, so an input broadcast into the output zeroes its gradient first). */
bool pr_op_fills_unwritten(const pr_op_info *op);
static inline bool pr_grad_claim(pr_tensor *g)
{
    bool unwritten = g->unwritten;
    g->unwritten = false;
    return unwritten;
}
void pr_zero_grads(pr_tensor *const *ts, int n);
void pr_requires_grad_(pr_tensor *t, bool on);

/* inspection */
void pr_tape_dump(const pr_ctx *ctx, FILE *f);   /* op, input shapes -> output shape, |grad| */
void pr_tape_dot(const pr_ctx *ctx, FILE *f);    /* Graphviz DOT */
double pr_norm2(const pr_tensor *t);              /* L2 norm, any device/dtype */

/* ---- step memory (autograd/memory.c) -----------------------------------------
 * The bytes of the step arena's tensors the tape reaches, after a backward,
 * by kind and dtype; each buffer once. untracked: the arena's peak less
 * them (kernel scratch, nodes). cuda_staged: the bf16 staging copies CUDA
 * makes too (ops staged on both devices), at f32's size, so that
 * pr_step_mem_cuda_bytes tells from a CPU step what the same step holds on
 * CUDA (the CPU stages more ops, and through f64). */
enum { PR_MEM_OUTPUT, PR_MEM_CAST, PR_MEM_PARAM_CAST, PR_MEM_SAVED, PR_MEM_STAGED, PR_MEM_GRAD, PR_MEM_NKINDS };
typedef struct {
    size_t bytes[PR_MEM_NKINDS][PR_NDTYPES];
    size_t total, cuda_staged, arena_peak, untracked;
} pr_step_mem;
void pr_step_memory(const pr_ctx *ctx, pr_step_mem *m);
size_t pr_step_mem_cuda_bytes(const pr_step_mem *m);   /* total, staging as CUDA does it */
void pr_step_mem_print(const pr_step_mem *m, FILE *f); /* a Markdown table in MiB */

/* ---- gradcheck --------------------------------------------------------------
 * Float64 central differences against the tape's backward for every input
 * that requires grad. The scalar checked is sum(out * w) for a fixed random
 * w. Defaults (torch's): eps 1e-6, atol 1e-5, rtol 1e-3; element passes when
 * |analytic - numeric| <= atol + rtol * |numeric|. A NaN or Inf in either
 * gradient fails at once, naming the element, with max_abs_err = inf. */
typedef struct {
    double eps, atol, rtol;
    int64_t max_elems;     /* per input, checked elements (0 = all) */
} pr_gradcheck_opts;
typedef struct {
    bool ok;
    double max_abs_err;    /* over every checked element */
    char msg[512];         /* on failure: op, input, worst element */
} pr_gradcheck_result;
pr_gradcheck_opts pr_gradcheck_defaults(void);
pr_gradcheck_result pr_gradcheck(pr_ctx *ctx, const char *what, const pr_example *ex,
                                 const pr_gradcheck_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
