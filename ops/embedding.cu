/* ops/embedding.cu: CUDA embedding (f32 or bf16 weight, int32/int64 ids).
 *
 * Forward gathers rows. Backward is a deterministic scatter-add without float
 * atomics: a stable radix sort of (id, position) pairs groups the positions of
 * each vocabulary row in increasing order; a boundary pass marks each row's
 * segment [start, end) of the sorted list; then each row sums its positions'
 * grads in that fixed order. Same ids, same sums, bit for bit, on every run.
 * The public function (embedding.c) has already checked every id is in [0, V).
 * A bf16 table (a template over the storage type T): the gather copies bf16
 * exactly, the sums are f32 and each dw element is rounded once.
 */
#include <cub/cub.cuh>

#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

template <typename T, typename I>
__global__ void embedding_gather(T *out, const T *w, const I *ids, int64_t N, int64_t D)
{
    int64_t total = N * D;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / D, d = e - i * D;
        out[e] = w[(int64_t)ids[i] * D + d];
    }
}

template <class T> static void embedding_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *w = n->in[0], *ids = n->in[1];
    pr_tensor *out = n->out[0];
    int64_t N = ids->numel, D = w->shape[1];
    if (N * D == 0) return;
    cudaStream_t s = pr_cuda_stream(ctx);
    unsigned blocks = pr_cuda_blocks(N * D, 256);
    if (ids->dtype == PR_I32)
        embedding_gather<<<blocks, 256, 0, s>>>((T *)out->data, (const T *)w->data, (const int32_t *)ids->data, N, D);
    else
        embedding_gather<<<blocks, 256, 0, s>>>((T *)out->data, (const T *)w->data, (const int64_t *)ids->data, N, D);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_embedding_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { embedding_forward<decltype(t)>(ctx, n); });
}

/* keys = ids as uint32 (V < 2^31 is checked), values = positions 0..N-1 */
template <typename I>
__global__ void embedding_keys(uint32_t *keys, int32_t *pos, const I *ids, int64_t N)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        keys[i] = (uint32_t)ids[i];
        pos[i] = (int32_t)i;
    }
}

/* in the sorted keys, row v's positions are sorted[start[v] .. end[v]) (empty: 0, 0) */
__global__ void embedding_segments(int32_t *start, int32_t *end, const uint32_t *keys, int64_t N)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < N; j += (int64_t)gridDim.x * blockDim.x) {
        uint32_t k = keys[j];
        if (j == 0 || keys[j - 1] != k) start[k] = (int32_t)j;
        if (j == N - 1 || keys[j + 1] != k) end[k] = (int32_t)(j + 1);
    }
}

/* Block (32, 8): 32 columns at a time; the 8 thread rows take every 8th
 * position of the segment, then one row adds the 8 partials in order. Blocks
 * stride over vocabulary rows, skipping empty ones. */
enum { EG_X = 32, EG_Y = 8 };
template <class T>
__global__ void embedding_grad(T *dw, const T *g, const int32_t *pos, const int32_t *start, const int32_t *end,
                               int64_t V, int64_t D)
{
    __shared__ float part[EG_Y][EG_X];
    int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
        int32_t s = start[v], e = end[v];
        if (s == e) continue;   /* uniform across the block */
        for (int64_t d0 = 0; d0 < D; d0 += EG_X) {
            int64_t d = d0 + tx;
            float acc = 0.0f;
            if (d < D)
                for (int32_t j = s + ty; j < e; j += EG_Y) acc += pr_ld(g, (int64_t)pos[j] * D + d);
            part[ty][tx] = acc;
            __syncthreads();
            if (ty == 0 && d < D) {
                float sum = part[0][tx];
                for (int k = 1; k < EG_Y; k++) sum += part[k][tx];
                pr_acc(dw, v * D + d, sum);
            }
            __syncthreads();
        }
    }
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* out[i, :] = w[ids[i], :]  =>  dw[v, :] += sum over {i : ids[i] = v} of dout[i, :] */
template <class T> static void embedding_backward(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *dw = pr_in_grad(n, 0);
    const pr_tensor *ids = n->in[1];
    if (!dw) return;
    int64_t N = ids->numel, V = dw->shape[0], D = dw->shape[1];
    if (N == 0 || D == 0) return;
    PR_CHECK(N <= INT32_MAX && V <= INT32_MAX, "embedding: CUDA backward needs ids (%lld) and V (%lld) < 2^31",
             (long long)N, (long long)V);
    cudaStream_t s = pr_cuda_stream(ctx);
    int end_bit = 1;
    while (end_bit < 31 && (1LL << end_bit) < V) end_bit++;

    /* one scratch block: keys in/out, positions in/out, row starts/ends, CUB's temp */
    size_t sort_bytes = 0;
    PR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const uint32_t *)nullptr,
                                                  (uint32_t *)nullptr, (const int32_t *)nullptr,
                                                  (int32_t *)nullptr, (int)N, 0, end_bit, s));
    size_t nb = align256(sizeof(int32_t) * (size_t)N), vb = align256(sizeof(int32_t) * (size_t)V);
    size_t total = 4 * nb + 2 * vb + align256(sort_bytes);
    char *base = (char *)pr_cuda_malloc(total);
    uint32_t *keys = (uint32_t *)base, *keys_sorted = (uint32_t *)(base + nb);
    int32_t *pos = (int32_t *)(base + 2 * nb), *pos_sorted = (int32_t *)(base + 3 * nb);
    int32_t *start = (int32_t *)(base + 4 * nb), *end = (int32_t *)(base + 4 * nb + vb);
    void *temp = base + 4 * nb + 2 * vb;

    unsigned blocks = pr_cuda_blocks(N, 256);
    if (ids->dtype == PR_I32)
        embedding_keys<<<blocks, 256, 0, s>>>(keys, pos, (const int32_t *)ids->data, N);
    else
        embedding_keys<<<blocks, 256, 0, s>>>(keys, pos, (const int64_t *)ids->data, N);
    PR_CUDA_LAUNCH_CHECK();
    PR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, keys, keys_sorted, pos, pos_sorted, (int)N,
                                                  0, end_bit, s));
    PR_CUDA_CHECK(cudaMemsetAsync(start, 0, 2 * vb, s));   /* start and end are adjacent */
    embedding_segments<<<blocks, 256, 0, s>>>(start, end, keys_sorted, N);
    PR_CUDA_LAUNCH_CHECK();
    unsigned rows = (unsigned)(V < 4096 ? V : 4096);
    embedding_grad<<<rows, dim3(EG_X, EG_Y), 0, s>>>((T *)dw->data, (const T *)n->out[0]->grad->data, pos_sorted, start,
                                                     end, V, D);
    PR_CUDA_LAUNCH_CHECK();
    pr_cuda_free(base, total);
}

extern "C" void pr_embedding_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { embedding_backward<decltype(t)>(ctx, n); });
}
