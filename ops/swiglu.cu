/* ops/swiglu.cu: CUDA forward and backward of y = silu(gate) * up
 * (ops/swiglu.c), f32 or bf16 (a template over the storage type T: loads
 * exact, f32 math, each stored element rounded once). Four elements a load
 * and a store where every pointer is 16-byte aligned, grid-stride loops.
 * With s = sigmoid(a): d gate += g up s (1 + a (1 - s)), d up += g a s.
 */
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

template <class T> __global__ void swiglu_forward_kernel(const T *a, const T *b, T *y, long long n, bool al)
{
    long long n4 = (n + 3) / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        long long j = 4 * i;
        bool v = al && j + 4 <= n;
        pr_f4 av = pr_ld4(a, j, n, v), bv = pr_ld4(b, j, n, v);
#pragma unroll
        for (int k = 0; k < 4; k++) av.v[k] = av.v[k] * pr_sigmoidf(av.v[k]) * bv.v[k];
        pr_st4(y, j, n, v, av);
    }
}

/* da, db may be NULL (no grad wanted) */
template <class T>
__global__ void swiglu_backward_kernel(const T *a, const T *b, const T *g, T *da, T *db, long long n, bool al)
{
    long long n4 = (n + 3) / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        long long j = 4 * i;
        bool v = al && j + 4 <= n;
        pr_f4 av = pr_ld4(a, j, n, v), bv = pr_ld4(b, j, n, v), gv = pr_ld4(g, j, n, v), add_a, add_b;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float s = pr_sigmoidf(av.v[k]);
            add_a.v[k] = gv.v[k] * bv.v[k] * s * (1.0f + av.v[k] * (1.0f - s));
            add_b.v[k] = gv.v[k] * av.v[k] * s;
        }
        if (da) pr_acc4(da, j, n, v, add_a);
        if (db) pr_acc4(db, j, n, v, add_b);
    }
}

template <class T> static void swiglu_forward(pr_ctx *ctx, pr_node *n)
{
    const pr_tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    long long N = y->numel;
    if (N == 0) return;
    bool al = pr_aligned16(a->data) && pr_aligned16(b->data) && pr_aligned16(y->data);
    swiglu_forward_kernel<<<pr_cuda_blocks((N + 3) / 4, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (const T *)a->data, (const T *)b->data, (T *)y->data, N, al);
    PR_CUDA_LAUNCH_CHECK();
}

template <class T> static void swiglu_backward(pr_ctx *ctx, pr_node *n)
{
    pr_tensor *ga = pr_in_grad(n, 0), *gb = pr_in_grad(n, 1);
    const pr_tensor *a = n->in[0], *b = n->in[1], *g = n->out[0]->grad;
    long long N = g->numel;
    if (N == 0 || (!ga && !gb)) return;
    T *da = ga ? (T *)ga->data : NULL, *db = gb ? (T *)gb->data : NULL;
    bool al = pr_aligned16(a->data) && pr_aligned16(b->data) && pr_aligned16(g->data) && (!da || pr_aligned16(da)) &&
              (!db || pr_aligned16(db));
    swiglu_backward_kernel<<<pr_cuda_blocks((N + 3) / 4, 256), 256, 0, pr_cuda_stream(ctx)>>>(
        (const T *)a->data, (const T *)b->data, (const T *)g->data, da, db, N, al);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_swiglu_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { swiglu_forward<decltype(t)>(ctx, n); });
}
extern "C" void pr_swiglu_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    pr_cuda_storage_switch(pr_cuda_storage(n), [&](auto t) { swiglu_backward<decltype(t)>(ctx, n); });
}
