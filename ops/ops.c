/* ops/ops.c: the op table, generated from ops/ops.def, and the kit shared
 * by op implementations. */
#include <string.h>

#include "ops/ops.h"

#ifdef PRISM_HAVE_CUDA
#define CUDA_FWD_1(name) pr_##name##_forward_cuda
#define CUDA_BWD_1(name) pr_##name##_backward_cuda
#else
#define CUDA_FWD_1(name) NULL
#define CUDA_BWD_1(name) NULL
#endif
#define CUDA_FWD_0(name) NULL
#define CUDA_BWD_0(name) NULL

/* Every entry is a strong reference (the prototypes are in ops/ops.h): a
 * static libprism.a then pulls in every op's object file, and an op whose
 * file is missing fails at link time instead of at run time. */
static const pr_op_info op_table[PR_NOPS] = {
#define PR_OP(name, has_cuda, bf16_cpu, bf16_cuda)                                           \
    [PR_OP_##name] = {#name, pr_##name##_forward_cpu, pr_##name##_backward_cpu,              \
                      CUDA_FWD_##has_cuda(name), CUDA_BWD_##has_cuda(name), pr_##name##_example, \
                      {[PR_CPU] = bf16_cpu, [PR_CUDA] = bf16_cuda}, pr_cast_convert},
#include "ops/ops.def"
#undef PR_OP
};

/* the ops whose CPU backward claims each input gradient (pr_grad_claim) and
 * then writes it whole when it was unwritten (autograd/autograd.h) */
static const bool fills_unwritten[PR_NOPS] = {
    [PR_OP_add] = true, [PR_OP_sub] = true, [PR_OP_mul] = true, [PR_OP_div] = true,
    [PR_OP_matmul] = true,
    [PR_OP_scale] = true, [PR_OP_neg] = true, [PR_OP_exp] = true, [PR_OP_log] = true, [PR_OP_sqrt] = true,
    [PR_OP_sigmoid] = true, [PR_OP_logsigmoid] = true, [PR_OP_tanh] = true, [PR_OP_relu] = true,
    [PR_OP_silu] = true, [PR_OP_gelu] = true, [PR_OP_gelu_tanh] = true, [PR_OP_softplus] = true,
};

bool pr_op_fills_unwritten(const pr_op_info *op)
{
    ptrdiff_t id = op - op_table;
    return id >= 0 && id < PR_NOPS && fills_unwritten[id];
}

const pr_op_info *pr_op(pr_op_id id)
{
    PR_CHECK((unsigned)id < PR_NOPS, "unknown op id %d", (int)id);
    return &op_table[id];
}

const pr_op_info *pr_op_by_name(const char *name)
{
    for (int i = 0; i < PR_NOPS; i++)
        if (strcmp(op_table[i].name, name) == 0) return &op_table[i];
    return NULL;
}

int pr_op_count(void) { return PR_NOPS; }

void pr_check_float(const char *op, const pr_tensor *t, const char *arg)
{
    PR_CHECK(t, "%s: %s is missing", op, arg);
    PR_CHECK(pr_dtype_has_grad(t->dtype), "%s: %s has dtype %s; expected f32, f64 or bf16", op, arg,
             pr_dtype_name(t->dtype));
}

void pr_check_same_kind(const char *op, const pr_tensor *a, const pr_tensor *b)
{
    PR_CHECK(a->dtype == b->dtype, "%s: dtype mismatch (%s and %s)", op, pr_dtype_name(a->dtype),
             pr_dtype_name(b->dtype));
    PR_CHECK(a->device == b->device, "%s: device mismatch (%s and %s)", op, pr_device_name(a->device),
             pr_device_name(b->device));
}

void pr_check_same_shape(const char *op, const pr_tensor *a, const pr_tensor *b)
{
    char sa[96], sb[96];
    PR_CHECK(pr_same_shape(a, b), "%s: shape mismatch: %s vs %s", op, pr_shape_str(a, sa, sizeof sa),
             pr_shape_str(b, sb, sizeof sb));
}

pr_node pr_node_init(pr_op_id id, int n_in, pr_tensor *const *in)
{
    PR_ASSERT(n_in <= PR_MAX_IN);
    pr_node n = {.op = pr_op(id), .n_in = n_in};
    for (int i = 0; i < n_in; i++) n.in[i] = in[i];
    return n;
}

pr_tensor *pr_example_input(pr_ctx *ctx, pr_rng *r, pr_dtype dt, int ndim, const int64_t *shape, double lo,
                            double hi)
{
    pr_tensor *t = pr_randu(ctx->step, dt, PR_CPU, ndim, shape, r, lo, hi);
    t->requires_grad = true;
    return t;
}
