/* tensor/device.c: the one dispatch point for memory on a device. CPU memory
 * is plain malloc; CUDA goes to the caching allocator in tensor/cuda.cu. */
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

#ifdef PRISM_HAVE_CUDA
#define CUDA_OR_DIE(expr) do { expr; } while (0) /* one statement: `if (...) CUDA_OR_DIE(a; return)` */
#else
#define CUDA_OR_DIE(expr) pr_fatal("this prism was built without CUDA (configure with -DPRISM_CUDA=ON)")
#endif

/* per thread: each of a grid's worker threads reports its own run's bytes
 * (a thread frees what it allocated: a run's tensors never change thread) */
static _Thread_local size_t host_current, host_peak;

bool pr_cuda_available(void)
{
#ifdef PRISM_HAVE_CUDA
    return pr_cuda_device_count() > 0;
#else
    return false;
#endif
}

void *pr_device_alloc(pr_device dev, size_t bytes)
{
    if (dev == PR_CUDA) CUDA_OR_DIE(return pr_cuda_malloc(bytes));
    void *p = malloc(bytes ? bytes : 1);
    PR_CHECK(p, "out of host memory (%zu bytes)", bytes);
    host_current += bytes;
    if (host_current > host_peak) host_peak = host_current;
    return p;
}

void pr_device_free(pr_device dev, void *p, size_t bytes)
{
    if (!p) return;
    if (dev == PR_CUDA) CUDA_OR_DIE(pr_cuda_free(p, bytes); return);
    host_current -= bytes;
    free(p);
}

void pr_device_memcpy(void *dst, pr_device dst_dev, const void *src, pr_device src_dev, size_t bytes)
{
    if (!bytes) return;
    if (dst_dev == PR_CPU && src_dev == PR_CPU) {
        memmove(dst, src, bytes);
        return;
    }
    CUDA_OR_DIE(pr_cuda_memcpy(dst, src, bytes, dst_dev == PR_CUDA, src_dev == PR_CUDA));
}

void pr_device_memset0(pr_device dev, void *p, size_t bytes)
{
    if (!bytes) return;
    if (dev == PR_CUDA) CUDA_OR_DIE(pr_cuda_memset0(p, bytes); return);
    memset(p, 0, bytes);
}

void pr_device_sync(pr_device dev)
{
    if (dev == PR_CUDA) CUDA_OR_DIE(pr_cuda_sync());
}

void pr_device_thread_begin(pr_device dev)
{
    if (dev == PR_CUDA) CUDA_OR_DIE(pr_cuda_thread_begin());
}

void pr_device_thread_end(pr_device dev)
{
    if (dev == PR_CUDA) CUDA_OR_DIE(pr_cuda_thread_end());
}

void pr_device_trace_slow_calls(double ms)
{
#ifdef PRISM_HAVE_CUDA
    pr_cuda_trace_slow_calls(ms);
#else
    (void)ms;
#endif
}

void pr_device_mem_stats(pr_device dev, size_t *current, size_t *peak)
{
    if (dev == PR_CUDA) {
        CUDA_OR_DIE(size_t cached; pr_cuda_mem_stats(current, peak, &cached); return);
    }
    *current = host_current;
    *peak = host_peak;
}

void pr_device_mem_peak_reset(pr_device dev)
{
    if (dev == PR_CUDA) CUDA_OR_DIE(pr_cuda_alloc_peak_reset(); return);
    host_peak = host_current;
}

bool pr_device_capturing(void)
{
#ifdef PRISM_HAVE_CUDA
    return pr_cuda_capturing();
#else
    return false;
#endif
}

#ifndef PRISM_HAVE_CUDA
void pr_cuda_rand_fill(pr_tensor *t, uint64_t seed, uint32_t stream, uint64_t offset, int kind, double a,
                       double b)
{
    (void)t, (void)seed, (void)stream, (void)offset, (void)kind, (void)a, (void)b;
    CUDA_OR_DIE((void)0);
}
void pr_cuda_ctx_release(void *cuda_state) { (void)cuda_state; }
void pr_cuda_poison_shared(bool on) { (void)on; }
#endif
