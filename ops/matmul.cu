/* ops/matmul.cu: CUDA matmul, every case through cuBLAS (f32 or bf16).
 *
 * out[..., M, N] = op(a) @ op(b); b is shared by every batch (2-D) or batched
 * with a's leading dims. cuBLAS is column-major: a row-major X[r, c] is, to
 * cuBLAS, the column-major X^T with leading dimension c. So the row-major
 * C = X Y is computed as the column-major C^T = Y^T X^T: pass Y first.
 * Precision: ctx->matmul_tf32 picks fp32 math (0) or TF32 tensor cores (1).
 * bf16 a and b (both bf16, and so out and the grads): bf16 tensor-core
 * products with f32 accumulation (CUBLAS_COMPUTE_32F), each output rounded
 * to bf16 once; matmul_tf32 does not apply.
 * Backward accumulates (cuBLAS beta = 1: C = round(A B + C), one rounding),
 * except a shared b under a transposed a in bf16, whose batch of products is
 * summed in an f32 buffer and added to dB once (pr_cuda_cast), so dB too is
 * rounded once.
 */
#include <limits.h>

#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

/* row-major operand: data, its op (transposed as stored?), batch stride in elements */
typedef struct {
    const void *p;
    bool t;
    long long stride;
} rm_arg;

/* element types of a product: of the operands, and of C */
typedef struct {
    cudaDataType ab, c;
} rm_types;
static const rm_types RM_F32 = {CUDA_R_32F, CUDA_R_32F};

static size_t type_size(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }
/* element i of an array of type t */
static const void *elem_at(const void *p, cudaDataType t, long long i) { return (const char *)p + i * (long long)type_size(t); }

static int to_int(const char *what, int64_t v)
{
    PR_CHECK(v <= INT_MAX, "matmul: %s = %lld exceeds cuBLAS's int range", what, (long long)v);
    return (int)v;
}

/* Row-major C[M, N] = beta * C + opX(X)[M, K] opY(Y)[K, N], `batch` times with
 * the given strides. A stored X is [M, K] (ld K), or [K, M] (ld M) when x.t. */
static void rm_gemm(pr_ctx *ctx, rm_types ty, rm_arg x, rm_arg y, void *c, long long c_stride, int64_t M, int64_t N,
                    int64_t K, int64_t batch, float beta)
{
    if (M == 0 || N == 0 || batch == 0) return;
    if (K == 0) { /* an empty sum: C = beta C, and C may be uninitialized when beta = 0 */
        if (beta == 0.0f)
            PR_CUDA_CHECK(cudaMemsetAsync(c, 0, type_size(ty.c) * (size_t)(batch * (c_stride ? c_stride : M * N)),
                                          pr_cuda_stream(ctx)));
        return;
    }
    int m = to_int("M", M), nn = to_int("N", N), k = to_int("K", K), nb = to_int("batch", batch);
    int ldx = x.t ? m : k, ldy = y.t ? k : nn;
    if (ldx < 1) ldx = 1;
    if (ldy < 1) ldy = 1;
    const float alpha = 1.0f;
    /* bf16 operands: tensor-core products summed in f32 (the tf32 flag is for f32 data) */
    cublasComputeType_t compute =
        ctx->matmul_tf32 && ty.ab == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasHandle_t h = pr_cublas(ctx);
    cublasOperation_t oy = y.t ? CUBLAS_OP_T : CUBLAS_OP_N, ox = x.t ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (nb == 1)
        PR_CUBLAS_CHECK(cublasGemmEx(h, oy, ox, nn, m, k, &alpha, y.p, ty.ab, ldy, x.p, ty.ab, ldx,
                                     &beta, c, ty.c, nn, compute, CUBLAS_GEMM_DEFAULT));
    else
        PR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, oy, ox, nn, m, k, &alpha, y.p, ty.ab, ldy, y.stride,
                                                   x.p, ty.ab, ldx, x.stride, &beta, c, ty.c, nn,
                                                   c_stride, nb, compute, CUBLAS_GEMM_DEFAULT));
}

/* the node's element types: f32, or bf16 when a and b are both bf16 */
static rm_types mm_types(const pr_node *n)
{
    const pr_tensor *a = n->in[0], *b = n->in[1];
    PR_CHECK(a->dtype == b->dtype && (a->dtype == PR_F32 || a->dtype == PR_BF16),
             "matmul: CUDA takes a and b both f32 or both bf16, not %s and %s", pr_dtype_name(a->dtype),
             pr_dtype_name(b->dtype));
    if (a->dtype == PR_F32) return RM_F32;
    return {CUDA_R_16BF, CUDA_R_16BF};
}

/* sizes of one matmul node, read off its tensors */
typedef struct {
    int64_t M, N, K, batch;
    bool ta, tb, shared;
} mm_dims;

static mm_dims mm_dims_of(const pr_node *n)
{
    const pr_tensor *a = n->in[0], *b = n->in[1];
    mm_dims d;
    d.ta = n->iarg[0] != 0;
    d.tb = n->iarg[1] != 0;
    int64_t a0 = a->shape[a->ndim - 2], a1 = a->shape[a->ndim - 1];
    int64_t b0 = b->shape[b->ndim - 2], b1 = b->shape[b->ndim - 1];
    d.M = d.ta ? a1 : a0;
    d.K = d.ta ? a0 : a1;
    d.N = d.tb ? b0 : b1;
    d.batch = 1;
    for (int i = 0; i < a->ndim - 2; i++) d.batch *= a->shape[i];
    d.shared = b->ndim == 2;
    return d;
}

extern "C" void pr_matmul_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *a = n->in[0], *b = n->in[1];
    pr_tensor *out = n->out[0];
    rm_types ty = mm_types(n);
    mm_dims d = mm_dims_of(n);
    rm_arg x = {a->data, d.ta, (long long)(d.M * d.K)};
    rm_arg y = {b->data, d.tb, d.shared ? 0LL : (long long)(d.K * d.N)};
    if (d.shared && !d.ta) /* rows of every batch stack into one [batch*M, K] matrix */
        rm_gemm(ctx, ty, x, y, out->data, 0, d.batch * d.M, d.N, d.K, 1, 0.0f);
    else
        rm_gemm(ctx, ty, x, y, out->data, d.M * d.N, d.M, d.N, d.K, d.batch, 0.0f);
}

/* dB += sum over the batch of op(A_i)^T G_i (or G_i^T op(A_i) when B is
 * stored [N, K]), for a shared b under a transposed a: one gemm per batch,
 * accumulated in a fixed order. f32 accumulates in dB itself; bf16 sums in an
 * f32 buffer and adds it to dB once, so dB is rounded once, not per batch. */
static void shared_b_grad_batched(pr_ctx *ctx, rm_types ty, const mm_dims &d, const void *A, const void *G, void *dB)
{
    long long sA = d.M * d.K, sG = d.M * d.N;
    bool bf16 = ty.ab == CUDA_R_16BF;
    size_t nb = (size_t)(d.K * d.N);
    float *acc = bf16 ? (float *)pr_cuda_malloc(sizeof(float) * nb) : (float *)dB;
    rm_types tyc = {ty.ab, CUDA_R_32F};
    for (int64_t i = 0; i < d.batch; i++) {
        const void *Ai = elem_at(A, ty.ab, i * sA), *Gi = elem_at(G, ty.ab, i * sG);
        float beta = bf16 && i == 0 ? 0.0f : 1.0f;
        if (!d.tb) rm_gemm(ctx, tyc, {Ai, false, 0}, {Gi, false, 0}, acc, 0, d.K, d.N, d.M, 1, beta);
        else rm_gemm(ctx, tyc, {Gi, true, 0}, {Ai, true, 0}, acc, 0, d.N, d.K, d.M, 1, beta);
    }
    if (bf16) {
        if (d.batch == 0) PR_CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(float) * nb, pr_cuda_stream(ctx)));
        pr_cuda_cast(pr_cuda_stream(ctx), dB, PR_BF16, acc, PR_F32, (long long)nb, true);
        pr_cuda_free(acc, sizeof(float) * nb);
    }
}

/* C = op(A) op(B), G = dL/dC:
 *   dop(A) = G op(B)^T, so dA = G op(B)^T [M,K], or (A stored [K,M]) dA = op(B) G^T;
 *   dop(B) = op(A)^T G, so dB = op(A)^T G [K,N], or (B stored [N,K]) dB = G^T op(A).
 * A shared b sums dB over the batch: when a is not transposed the batch rows
 * stack into one gemm with inner size batch*M; otherwise the batch's gemms
 * accumulate one after another (shared_b_grad_batched), a fixed order. */
extern "C" void pr_matmul_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *a = n->in[0], *b = n->in[1];
    pr_tensor *ga = pr_in_grad(n, 0), *gb = pr_in_grad(n, 1);
    rm_types ty = mm_types(n);
    mm_dims d = mm_dims_of(n);
    const void *A = a->data, *B = b->data, *G = n->out[0]->grad->data;
    long long sA = d.M * d.K, sB = d.shared ? 0 : d.K * d.N, sG = d.M * d.N;
    if (ga) {
        void *dA = ga->data;
        if (!d.ta) {
            rm_arg x = {G, false, sG}, y = {B, !d.tb, sB};
            if (d.shared) rm_gemm(ctx, ty, x, y, dA, 0, d.batch * d.M, d.K, d.N, 1, 1.0f);
            else rm_gemm(ctx, ty, x, y, dA, sA, d.M, d.K, d.N, d.batch, 1.0f);
        } else {
            rm_arg x = {B, d.tb, sB}, y = {G, true, sG};
            rm_gemm(ctx, ty, x, y, dA, sA, d.K, d.M, d.N, d.batch, 1.0f);
        }
    }
    if (gb) {
        void *dB = gb->data;
        if (!d.shared) {
            if (!d.tb) rm_gemm(ctx, ty, {A, !d.ta, sA}, {G, false, sG}, dB, sB, d.K, d.N, d.M, d.batch, 1.0f);
            else rm_gemm(ctx, ty, {G, true, sG}, {A, d.ta, sA}, dB, sB, d.N, d.K, d.M, d.batch, 1.0f);
        } else if (!d.ta) { /* A and G as [batch*M, K] and [batch*M, N] */
            if (!d.tb) rm_gemm(ctx, ty, {A, true, 0}, {G, false, 0}, dB, 0, d.K, d.N, d.batch * d.M, 1, 1.0f);
            else rm_gemm(ctx, ty, {G, true, 0}, {A, false, 0}, dB, 0, d.N, d.K, d.batch * d.M, 1, 1.0f);
        } else {
            shared_b_grad_batched(ctx, ty, d, A, G, dB);
        }
    }
}
