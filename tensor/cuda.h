/* tensor/cuda.h: the CUDA side of tensor/ (checks, device attributes, the
 * caching allocator, shared-memory opt-in, casts). Included only by CUDA
 * sources and by C files built with PRISM_HAVE_CUDA; the op kernels include
 * it through ops/cuda/ops_cuda.h, which adds a context's stream and cuBLAS
 * handle and the kernel kit.
 *
 * Every CUDA and cuBLAS call goes through a CHECK macro that names
 * file, line and the call.
 *
 * One stream: every kernel, cuBLAS call, copy, memset and random fill runs
 * on the legacy default stream (pr_cuda_stream(ctx) is that stream), so one
 * queue orders them all and a block the caching allocator hands out again is
 * only touched after every earlier use of it. A caller's own stream created
 * with cudaStreamNonBlocking is NOT ordered with prism's work: synchronize
 * (pr_device_sync) before touching prism's tensors from it. (While a CUDA
 * graph is captured, the work is recorded on a private stream instead and
 * replayed on the legacy one: tensor/cuda.cu.) A thread that called
 * pr_device_thread_begin has a stream and a pool of its own instead, which
 * keeps the same one-queue argument per thread (tensor/cuda.cu).
 */
#ifndef PR_CUDA_H
#define PR_CUDA_H

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PR_CUDA_CHECK(call)                                                              \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess)                                                           \
            pr_fatal("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)
#define PR_CUBLAS_CHECK(call)                                                            \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            pr_fatal("%s:%d: %s failed: cuBLAS status %d", __FILE__, __LINE__, #call, (int)s_); \
    } while (0)
/* after a kernel launch: catches bad launch configurations at once */
#define PR_CUDA_LAUNCH_CHECK() PR_CUDA_CHECK(cudaGetLastError())

/* attr of the device this process runs on, queried once: a process uses one
 * device (dist sets it before anything touches CUDA) */
int pr_cuda_attr(enum cudaDeviceAttr attr);

/* a context's CUDA state (its cuBLAS handle, made on first use): tensor/
 * owns it, ops/cuda/context.cu hands it out per context */
typedef struct {
    cublasHandle_t cublas; /* NULL until the first matmul */
    void *workspace;       /* cuBLAS's, ours (tensor/cuda.cu: a captured GEMM allocates nothing) */
    cudaStream_t stream;   /* the handle's: the legacy stream, or a capture's */
    bool stream_set;
} pr_cuda_state;
/* in a thread with its own stream (pr_device_thread_begin) the handle is the
 * thread's, shared by the contexts it runs one after another */
pr_cuda_state *pr_cuda_state_new(void);   /* fatal without a usable GPU */
cublasHandle_t pr_cuda_state_cublas(pr_cuda_state *st, bool tf32);
/* the stream every kernel, copy and cuBLAS call of this thread runs on: the
 * legacy default stream (or the thread's own, pr_device_thread_begin), or
 * while the thread captures a CUDA graph the capture's (tensor/cuda.cu) */
cudaStream_t pr_cuda_the_stream(void);

/* the caching allocator (pr_cuda_malloc / pr_cuda_free, declared in tensor.h);
 * these act on the calling thread's pool: the shared one, or the thread's
 * own after pr_device_thread_begin (its counts are then the thread's alone) */
void pr_cuda_empty_cache(void);
typedef struct {
    size_t current, peak;      /* bytes requested by live blocks, now and at most */
    size_t cached, reserved;   /* bytes in the free lists; bytes obtained from cudaMalloc */
    long long n_alloc, n_reuse; /* pr_cuda_malloc calls; those served from the cache */
    long long n_cuda_malloc, n_cuda_free;
} pr_cuda_alloc_stats;
void pr_cuda_alloc_stats_get(pr_cuda_alloc_stats *out);
void pr_cuda_alloc_peak_reset(void);   /* peak = current: the next peak is of what runs from here */
/* before launching a kernel with `bytes` of dynamic shared memory: allows
 * it (above 48 KB kernels must opt in), and after pr_cuda_poison_shared(true)
 * (tensor.h; the CUDA tests call it) first fills every SM's shared memory
 * with NaN, so that a kernel reading shared memory it never wrote fails in a
 * plain run, not only when a sanitizer happens to change what the kernel
 * before left there */
void pr_cuda_smem_prep(const void *kernel, size_t bytes);

static inline unsigned pr_cuda_blocks(long long n, int threads)
{
    long long b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 65535LL * 32 ? 65535LL * 32 : b));
}

/* dst = src (acc 0) or dst = round(dst + src), n elements, f32 and bf16 in
 * any pairing, on stream s: the f32 <-> bf16 conversions of pr_cast and of
 * the ops' bf16 paths (ops/cast.cu) */
void pr_cuda_cast(cudaStream_t s, void *dst, pr_dtype ddt, const void *src, pr_dtype sdt, long long n, bool acc);

/* float4 access is possible at p (cudaMalloc gives 256-byte alignment; views may not) */
static inline int pr_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

#ifdef __cplusplus
}
#endif
#ifdef __CUDACC__
/* ---- Philox4x32-10 on the device: tensor/rng.c's numbers, bit for bit ----
 * c is the counter (lo32(i), hi32(i), stream, 0) on entry and the 4 random
 * words on return; unit maps words to [0,1) exactly as the CPU does (the
 * product is exact: an integer below 2^53 times a power of two). */
__device__ __forceinline__ void pr_philox4x32_dev(uint64_t key, uint32_t c[4])
{
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
#pragma unroll
    for (int r = 0; r < 10; r++) {
        uint32_t lo0 = 0xD2511F53u * c[0], hi0 = __umulhi(0xD2511F53u, c[0]);
        uint32_t lo1 = 0xCD9E8D57u * c[2], hi1 = __umulhi(0xCD9E8D57u, c[2]);
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
}
__device__ __forceinline__ double pr_philox_unit_dev(uint32_t a, uint32_t b)
{
    uint64_t m = ((uint64_t)(a >> 5) << 26) | (b >> 6);
    return __dmul_rn((double)m, 1.0 / 9007199254740992.0);
}
/* pr_philox_uniform(seed, stream, i) */
__device__ __forceinline__ double pr_philox_uniform_dev(uint64_t seed, uint32_t stream, uint64_t i)
{
    uint32_t w[4] = {(uint32_t)i, (uint32_t)(i >> 32), stream, 0};
    pr_philox4x32_dev(seed, w);
    return pr_philox_unit_dev(w[0], w[1]);
}
#endif /* __CUDACC__ */
#endif
