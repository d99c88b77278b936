/* tensor/cuda.cu: the CUDA side of tensor/: the caching allocator, copies,
 * a context's CUDA state (its cuBLAS handle), and the Philox fill.
 *
 * Allocator: sizes round up to a size class (512-byte steps up to 4 KiB,
 * then 8 classes per power of two, so at most 12.5% slack); a freed block
 * goes onto its class's free list and the next request of that class takes
 * it back, so a steady training step makes no cudaMalloc or cudaFree. The
 * cache is returned to the driver only by pr_cuda_empty_cache, or when a
 * cudaMalloc fails (then the allocation is retried once).
 *
 * Ordering: everything (kernels, cuBLAS, copies, memsets, the random fill)
 * runs on the legacy default stream, so a block freed on the host can be
 * handed out again at once: any later use of it is queued after every
 * earlier use. (Another stream would need the allocator to record an event
 * per freed block; one stream keeps it simple and correct.)
 *
 * Threads (pr_cuda_thread_begin, for ablate's worker threads): a thread may
 * take a stream of its own (non-blocking, so it never waits for the legacy
 * stream or other threads) and then also a pool of its own, an allocator
 * instance used only by that thread. The one-stream argument above then
 * holds per pool: every block of a pool is only ever used on its thread's
 * stream, so blocks never move between streams and no event is needed. A
 * thread must free what it allocated (a training run's tensors never change
 * thread); a free into the wrong pool is refused as an unknown pointer.
 * Synchronizations and copies of such a thread wait for its stream only, so
 * the threads' kernels run side by side; its cuBLAS handle is the thread's
 * (pr_cuda_state_cublas), and a graph's constants go back to its pool, so a
 * thread frees nothing to the driver until it ends (a cudaFree waits for the
 * whole device). The capture state below is per thread as well; captures use relaxed mode, which leaves other threads'
 * allocations and launches free to go on during a capture. The driver gate
 * (below) keeps the threads' replays from starving one thread's
 * allocations and captures. Without begin
 * nothing changes: the legacy stream and the shared pool, as before.
 *
 * CUDA graphs (pr_cuda_graph_*): while a step is captured, the stream is a
 * private non-blocking one in relaxed capture mode, so the work is recorded,
 * not run, and the captured graph is replayed on the legacy stream, in order
 * with everything else. Inside the capture:
 *  - a host-to-device copy is a constant of the step (RoPE tables, masks):
 *    its bytes go at once into a device buffer the graph owns, and the graph
 *    copies them from there at every replay. Data that changes between steps
 *    (the batch) must be copied in before the replay (the trainer's stage);
 *  - a device-to-host copy or a synchronization cannot be captured: the
 *    capture is marked broken with the reason, and the caller throws the
 *    graph away and runs the step eagerly (the copy returns what the memory
 *    holds meanwhile; nothing of the step ran, so no state changed);
 *  - every block the allocator hands out belongs to the graph from then on:
 *    freed, it goes back to the graph, never to the shared cache, so a
 *    replay never writes over memory someone else was given. Destroying the
 *    graph returns its blocks to the cache.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/cuda.h"

/* this thread's own stream: NULL is stream 0, the legacy default stream
 * (nvcc's default; prism is not built with --default-stream per-thread),
 * unless pr_cuda_thread_begin gave the thread one */
static thread_local cudaStream_t t_stream = NULL;
/* while this thread captures a graph, the capture's private stream */
static thread_local cudaStream_t g_capture_stream = NULL;
static thread_local bool g_capturing = false;
static thread_local std::chrono::steady_clock::time_point g_capture_t0;   /* PRISM_CUDA_SLOW_MS */
extern "C" cudaStream_t pr_cuda_the_stream(void) { return g_capturing ? g_capture_stream : t_stream; }
#define PR_THE_STREAM pr_cuda_the_stream()

/* pr_device_trace_slow_calls(ms) (the command's PRISM_CUDA_SLOW_MS) names on
 * stderr every driver call below that took ms or more, with its thread's
 * stream and the seconds since the library was loaded: the calls that may
 * wait for other threads' work (an allocation or a free, a capture's begin
 * and end, a graph's instantiation, launch and destruction, a stream's
 * creation and destruction, a cuBLAS handle), and each capture whole, from
 * begin to end (a kernel's first launch, which loads its module, happens
 * inside one). For finding where a grid's threads wait. */
static std::atomic<double> g_slow_ms{0};
extern "C" void pr_cuda_trace_slow_calls(double ms) { g_slow_ms = ms; }
static double slow_call_ms(void) { return g_slow_ms.load(std::memory_order_relaxed); }
static const auto g_t0 = std::chrono::steady_clock::now();
static double seconds_since(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
static void report_slow(const char *what, double took_s)
{
    if (took_s * 1e3 >= slow_call_ms())
        fprintf(stderr, "prism cuda: %.3f s: %s took %.1f ms (stream %p)\n", seconds_since(g_t0), what, took_s * 1e3,
                (void *)t_stream);
}

/* The driver gate. A graph's launch and the calls that change the context
 * (an allocation or a free, a capture's begin and end, an instantiation, a
 * stream, a cuBLAS handle) wait for one another inside the driver, and not
 * in turn: on an H100, with sixteen threads replaying training steps back
 * to back, a thread that started a cell (allocate, capture, instantiate)
 * waited until other cells' trainings ended, over half of a grid's thread
 * time; in a test program a thread's one cudaMalloc waited more than 290 s
 * while fifteen others replayed (ops/recurrence/NOTES.md, v60). So prism
 * keeps its own gate in front that lets the rare caller in first: launches
 * pass together; a context call waits for the launches already inside to
 * leave, holds new ones off until it returns, and nests (a capture holds it
 * from begin to instantiation, its own calls inside). */
namespace {
struct driver_gate {
    std::mutex mu;
    std::condition_variable cv;
    int launching = 0, waiting = 0;
    bool held = false;
};
driver_gate g_gate;
thread_local int t_gate_depth = 0;   /* this thread's nested holds */
} // namespace
static void gate_hold(void)
{
    if (t_gate_depth++ > 0) return;
    std::unique_lock<std::mutex> l(g_gate.mu);
    g_gate.waiting++;
    g_gate.cv.wait(l, [] { return g_gate.launching == 0 && !g_gate.held; });
    g_gate.waiting--;
    g_gate.held = true;
}
static void gate_release(void)
{
    if (t_gate_depth <= 0 || --t_gate_depth > 0) return;   /* none (a fatal error let it go) or nested */
    std::lock_guard<std::mutex> l(g_gate.mu);
    g_gate.held = false;
    g_gate.cv.notify_all();
}
static void gate_launch_enter(void)
{
    if (t_gate_depth > 0) return;   /* inside this thread's own hold */
    std::unique_lock<std::mutex> l(g_gate.mu);
    g_gate.cv.wait(l, [] { return g_gate.waiting == 0 && !g_gate.held; });
    g_gate.launching++;
}
static void gate_launch_leave(void)
{
    if (t_gate_depth > 0) return;
    std::lock_guard<std::mutex> l(g_gate.mu);
    if (--g_gate.launching == 0 && g_gate.waiting) g_gate.cv.notify_all();
}

/* pr_fatal's: a thread whose error handler jumps out of a capture lets the
 * gate go, or every other thread would wait for it forever */
extern "C" void pr_cuda_on_fatal(void)
{
    if (t_gate_depth <= 0) return;
    t_gate_depth = 1;
    gate_release();
}

template <class F> static auto timed_call(const char *what, F f) -> decltype(f())
{
    if (slow_call_ms() <= 0) return f();
    const auto t = std::chrono::steady_clock::now();
    auto r = f();
    report_slow(what, seconds_since(t));
    return r;
}
/* a context call: through the gate, and named by the slow-call trace */
template <class F> static auto gated_call(const char *what, F f) -> decltype(f())
{
    gate_hold();
    auto r = timed_call(what, f);
    gate_release();
    return r;
}
#define PR_GATED(call) gated_call(#call, [&] { return call; })

/* waits for this thread's work: the whole device on the legacy stream (as
 * ever), only its own stream for a thread that has one, so that other
 * threads' kernels keep running */
static cudaError_t sync_own(void)
{
    return t_stream ? cudaStreamSynchronize(t_stream) : cudaDeviceSynchronize();
}

/* ---- size classes ------------------------------------------------------------ */

enum { PR_SMALL_LIMIT = 4096, PR_SMALL_STEP = 512, PR_STEPS_PER_OCTAVE = 8, PR_NCLASS = 8 + 52 * 8 };

/* class index and rounded size of a request of `bytes` (> 0) */
static int size_class(size_t bytes, size_t *rounded)
{
    if (bytes <= PR_SMALL_LIMIT) {
        size_t k = (bytes + PR_SMALL_STEP - 1) / PR_SMALL_STEP; /* 1..8 */
        *rounded = k * PR_SMALL_STEP;
        return (int)k - 1;
    }
    int k = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^k < bytes <= 2^(k+1) */
    size_t base = (size_t)1 << k, step = base / PR_STEPS_PER_OCTAVE;
    size_t m = (bytes - base + step - 1) / step; /* 1..8 */
    *rounded = base + m * step;
    return 8 + (k - 12) * PR_STEPS_PER_OCTAVE + (int)m - 1;
}

namespace {
struct block_info {
    size_t requested, rounded;
    int cls;
};

struct allocator {
    std::mutex mu;
    std::vector<void *> free_list[PR_NCLASS];
    std::unordered_map<void *, block_info> live;
    std::unordered_map<void *, size_t> cached_size; /* free blocks: rounded size */
    pr_cuda_alloc_stats st;
    /* CUDA graphs: blocks handed out while capturing (during a capture), and
     * blocks that belong to a finished graph (their owner): freed, they wait
     * in the graph's own list until the graph is destroyed */
    std::vector<void *> captured;
    std::unordered_map<void *, block_info> graph_free;
    std::unordered_map<void *, pr_cuda_graph *> graph_owned;
};

allocator &shared_allocator()
{
    static allocator *a = new allocator(); /* never destroyed: frees may come from atexit */
    return *a;
}

thread_local allocator *t_pool = NULL;   /* this thread's own pool (pr_cuda_thread_begin) */

/* the pool of this thread's stream */
allocator &the_allocator() { return t_pool ? *t_pool : shared_allocator(); }
} // namespace

/* return every cached block to the driver; the caller holds the lock */
static void empty_cache_locked(allocator &A)
{
    for (int c = 0; c < PR_NCLASS; c++) {
        for (void *p : A.free_list[c]) {
            cudaError_t e = PR_GATED(cudaFree(p)); /* a failure here leaves a sticky error the next check reports */
            (void)e;
            A.st.n_cuda_free++;
            size_t sz = A.cached_size[p];
            A.cached_size.erase(p);
            A.st.cached -= sz;
            A.st.reserved -= sz;
        }
        A.free_list[c].clear();
    }
}

extern "C" void pr_cuda_empty_cache(void)
{
    PR_CUDA_CHECK(sync_own()); /* queued kernels may still use cached blocks (only this stream's use this pool) */
    allocator &A = the_allocator();
    std::lock_guard<std::mutex> g(A.mu);
    empty_cache_locked(A);
}

/* Failures are reported after the lock is released: pr_fatal may longjmp (tests). */
extern "C" void *pr_cuda_malloc(size_t bytes)
{
    if (bytes == 0) return NULL;
    allocator &A = the_allocator();
    size_t rounded;
    int cls = size_class(bytes, &rounded);
    void *p = NULL;
    cudaError_t e = cudaSuccess;
    size_t in_use = 0, cached = 0;
    {
        std::lock_guard<std::mutex> g(A.mu);
        if (!A.free_list[cls].empty()) {
            p = A.free_list[cls].back();
            A.free_list[cls].pop_back();
            A.cached_size.erase(p);
            A.st.cached -= rounded;
            A.st.n_reuse++;
        } else {
            e = PR_GATED(cudaMalloc(&p, rounded));
            /* give the cache back and try once more; not inside a capture: the
             * cache then holds blocks the recorded work names (freed during the
             * capture, adopted by the graph at its end), and a synchronization
             * cannot be captured. There the failure stops the run, loudly. */
            if (e == cudaErrorMemoryAllocation && !g_capturing) {
                (void)cudaGetLastError();
                if (sync_own() == cudaSuccess) {
                    empty_cache_locked(A);
                    e = PR_GATED(cudaMalloc(&p, rounded));
                }
            }
            if (e == cudaSuccess) {
                A.st.n_cuda_malloc++;
                A.st.reserved += rounded;
            } else {
                (void)cudaGetLastError();
                in_use = A.st.current, cached = A.st.cached;
            }
        }
        if (e == cudaSuccess) {
            if (g_capturing) A.captured.push_back(p);
            A.live[p] = block_info{bytes, rounded, cls};
            A.st.n_alloc++;
            A.st.current += bytes;
            if (A.st.current > A.st.peak) A.st.peak = A.st.current;
        }
    }
    if (e != cudaSuccess)
        pr_fatal("%s:%d: cudaMalloc(%zu bytes) failed: %s (in use %zu bytes, cached %zu)", __FILE__, __LINE__,
                 rounded, cudaGetErrorString(e), in_use, cached);
    return p;
}

extern "C" void pr_cuda_free(void *p, size_t bytes)
{
    if (!p) return;
    allocator &A = the_allocator();
    size_t had = 0;
    int status = 0; /* 1: unknown pointer, 2: size mismatch */
    {
        std::lock_guard<std::mutex> g(A.mu);
        auto it = A.live.find(p);
        if (it == A.live.end()) {
            status = 1;
        } else if (bytes != 0 && bytes != it->second.requested) { /* the caller's size must name the block */
            status = 2;
            had = it->second.requested;
        } else {
            block_info b = it->second;
            A.live.erase(it);
            A.st.current -= b.requested;
            if (g_capturing) A.captured.push_back(p);   /* recorded work may still use it at replay */
            if (A.graph_owned.count(p)) {   /* a graph's: only the graph may use it again */
                A.graph_free[p] = b;
            } else {
                A.free_list[b.cls].push_back(p);
                A.cached_size[p] = b.rounded;
                A.st.cached += b.rounded;
            }
        }
    }
    PR_CHECK(status != 1, "pr_cuda_free: %p was not allocated by pr_cuda_malloc (or was freed twice)", p);
    PR_CHECK(status != 2, "pr_cuda_free: %p holds %zu bytes but was freed as %zu", p, had, bytes);
}

extern "C" void pr_cuda_mem_stats(size_t *current, size_t *peak, size_t *cached)
{
    allocator &A = the_allocator();
    std::lock_guard<std::mutex> g(A.mu);
    if (current) *current = A.st.current;
    if (peak) *peak = A.st.peak;
    if (cached) *cached = A.st.cached;
}

extern "C" void pr_cuda_mem_info(size_t *free_bytes, size_t *total)
{
    PR_CUDA_CHECK(cudaMemGetInfo(free_bytes, total));
}

extern "C" void pr_cuda_alloc_stats_get(pr_cuda_alloc_stats *out)
{
    allocator &A = the_allocator();
    std::lock_guard<std::mutex> g(A.mu);
    *out = A.st;
}

extern "C" void pr_cuda_alloc_peak_reset(void)
{
    allocator &A = the_allocator();
    std::lock_guard<std::mutex> g(A.mu);
    A.st.peak = A.st.current;
}

/* ---- copies and device queries ---------------------------------------------- */

static void capture_constant(void *dst, const void *src, size_t bytes);
static void capture_break(const char *why);

extern "C" void pr_cuda_memcpy(void *dst, const void *src, size_t bytes, int dst_is_dev, int src_is_dev)
{
    if (!bytes) return;
    cudaMemcpyKind kind = dst_is_dev ? (src_is_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                     : (src_is_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    if (g_capturing && kind == cudaMemcpyHostToDevice) return capture_constant(dst, src, bytes);
    /* a read inside a capture gets what the memory holds now (an input staged
     * before it, or an earlier step's values: the legacy stream does not wait
     * for the capture's), so host checks see plausible data, not zeros, on the
     * way to the refusal */
    if (g_capturing && kind == cudaMemcpyDeviceToHost)
        capture_break("a read of device values on the host inside the step");
    /* a device-to-device copy is queued in order; the others return when done */
    if (kind == cudaMemcpyDeviceToDevice) {
        PR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, PR_THE_STREAM));
    } else if (t_stream) {   /* cudaMemcpy runs on the legacy stream, which a non-blocking stream does not wait for */
        PR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, t_stream));
        PR_CUDA_CHECK(cudaStreamSynchronize(t_stream));
    } else {
        PR_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
    }
}

extern "C" void pr_cuda_memset0(void *p, size_t bytes)
{
    if (bytes) PR_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, PR_THE_STREAM));
}

extern "C" void pr_cuda_sync(void)
{
    if (g_capturing) return capture_break("a device synchronization inside the step");
    PR_CUDA_CHECK(sync_own());
}

/* 0, not an error, without a driver or a GPU: a CUDA build runs on the CPU */
extern "C" int pr_cuda_device_count(void)
{
    static const int count = [] {   /* asked once, by whichever thread comes first */
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        (void)cudaGetLastError(); /* a failed query must not poison the next check */
        return n;
    }();
    return count;
}

extern "C" int pr_cuda_attr(enum cudaDeviceAttr attr)
{
    /* asked at launches, by every thread: lock-free reads of entries that are
     * published (n_seen) only once written, the lock only to add one */
    static struct {
        cudaDeviceAttr attr;
        int value;
    } seen[16];
    static std::atomic<int> n_seen{0};
    static std::mutex mu;
    for (int i = 0, n = n_seen.load(std::memory_order_acquire); i < n; i++)
        if (seen[i].attr == attr) return seen[i].value;
    int dev = 0, v = 0;
    PR_CUDA_CHECK(cudaGetDevice(&dev));
    PR_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, dev));
    std::lock_guard<std::mutex> g(mu);
    int n = n_seen.load(std::memory_order_relaxed);
    for (int i = 0; i < n; i++)
        if (seen[i].attr == attr) return v;   /* another thread added it meanwhile */
    if (n < 16) {
        seen[n].attr = attr, seen[n].value = v;
        n_seen.store(n + 1, std::memory_order_release);
    }
    return v;
}

extern "C" void pr_cuda_check_last(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) pr_fatal("%s: CUDA error: %s", what, cudaGetErrorString(e));
}

/* every SM's shared memory filled with NaN: kernels that read shared memory
 * they never wrote then give NaN instead of whatever the last kernel left
 * (often finite, so the bug hides until timing or a sanitizer changes it).
 * One block of the largest size an SM, on the legacy stream. */
__global__ static void poison_shared_kernel(int n)
{
    extern __shared__ unsigned poison_smem[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) poison_smem[i] = 0x7fc00000u; /* a quiet NaN */
}
static void poison_shared(void)
{
    const int bytes = pr_cuda_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    PR_CUDA_CHECK(cudaFuncSetAttribute(poison_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    /* on the thread's own stream, never a capture's: the poison runs now, it is not part of a step */
    poison_shared_kernel<<<pr_cuda_attr(cudaDevAttrMultiProcessorCount), 1024, bytes, t_stream>>>(bytes / 4);
    PR_CUDA_LAUNCH_CHECK();
}
static std::atomic<bool> poison_on;   /* set by a test, read by every thread */
extern "C" void pr_cuda_poison_shared(bool on) { poison_on = on; }
/* A kernel's dynamic shared-memory allowance is process-wide, so with
 * threads launching one kernel at several sizes, setting it to each launch's
 * size could shrink it under another thread's launch. It only ever grows
 * instead: an allowance above what a launch asks for changes nothing. */
extern "C" void pr_cuda_smem_prep(const void *kernel, size_t bytes)
{
    if (poison_on) poison_shared();
    /* what this thread has seen allowed stays allowed: most launches need no lock */
    static thread_local std::unordered_map<const void *, size_t> known;
    auto k = known.find(kernel);
    if (k != known.end() && bytes <= k->second) return;
    static std::mutex mu;
    static std::unordered_map<const void *, size_t> allowed;
    cudaError_t e = cudaSuccess;
    size_t now = 0;
    {
        std::lock_guard<std::mutex> g(mu);
        size_t &have = allowed[kernel];
        if (bytes > have) {
            e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
            if (e == cudaSuccess) have = bytes;
        }
        now = have;
    }
    known[kernel] = now;
    if (e != cudaSuccess)   /* after the lock: pr_fatal may longjmp */
        pr_fatal("%s:%d: cudaFuncSetAttribute(%zu bytes of dynamic shared memory) failed: %s", __FILE__, __LINE__,
                 bytes, cudaGetErrorString(e));
}

/* ---- per-context state (ops/cuda/context.cu ties it to a pr_ctx) ---------------- */

/* cuBLAS's workspace, set by us so that a captured GEMM allocates nothing
 * (32 MiB: what cuBLAS takes by itself on Hopper, so the same kernels run) */
#define PR_CUBLAS_WORKSPACE ((size_t)32 << 20)

extern "C" pr_cuda_state *pr_cuda_state_new(void)
{
    PR_CHECK(pr_cuda_device_count() > 0, "CUDA op on a machine without a usable GPU");
    pr_cuda_state *s = (pr_cuda_state *)calloc(1, sizeof(pr_cuda_state));
    PR_CHECK(s, "out of host memory");
    return s;
}

/* A thread with its own stream keeps one cuBLAS handle (and workspace) for
 * every context it runs, bound to its stream: a grid's cells come and go in
 * a thread, and creating and destroying a handle per cell would allocate
 * and free device memory (cudaFree waits for the whole device) while other
 * threads capture graphs. Made on first use (or taken from a thread that
 * ended); pr_cuda_thread_end leaves it for the next thread instead of
 * destroying it, as cublasDestroy synchronizes the whole device (cuBLAS's
 * documentation), which would wait for every other thread's kernels and is
 * refused while another thread captures a graph. */
static thread_local pr_cuda_state t_blas;
static std::mutex idle_blas_mu;
static std::vector<pr_cuda_state> idle_blas;   /* handles of ended threads, their streams idle */

/* a handle an ended thread left, into *st (false: none left) */
static bool take_idle_blas(pr_cuda_state *st)
{
    std::lock_guard<std::mutex> g(idle_blas_mu);
    if (idle_blas.empty()) return false;
    *st = idle_blas.back();
    idle_blas.pop_back();
    return true;
}

/* the thread's handle, for the next thread; the caller has waited for its stream */
static void leave_idle_blas(pr_cuda_state *st)
{
    if (!st->cublas) return;
    st->stream_set = false;   /* its stream is about to go: the next user binds its own */
    std::lock_guard<std::mutex> g(idle_blas_mu);
    idle_blas.push_back(*st);
    *st = pr_cuda_state{};
}

/* The math mode is set from tf32 on every call, so flipping a context's
 * matmul_tf32 takes effect at the next matmul: CUBLAS_TF32_TENSOR_OP_MATH
 * lets cuBLAS round fp32 inputs to tf32 (10-bit mantissa) on the tensor
 * cores; CUBLAS_DEFAULT_MATH keeps full fp32 products. (GemmEx callers also
 * pick a compute type, which decides for that call.) */
extern "C" cublasHandle_t pr_cuda_state_cublas(pr_cuda_state *ctx_state, bool tf32)
{
    pr_cuda_state *st = t_stream ? &t_blas : ctx_state;
    if (!st->cublas && !(st == &t_blas && take_idle_blas(st))) {
        PR_CUBLAS_CHECK(PR_GATED(cublasCreate(&st->cublas)));
        PR_CUDA_CHECK(PR_GATED(cudaMalloc(&st->workspace, PR_CUBLAS_WORKSPACE)));
    }
    if (!st->stream_set || st->stream != PR_THE_STREAM) {   /* a capture's stream, or the thread's own */
        st->stream = PR_THE_STREAM;
        st->stream_set = true;
        PR_CUBLAS_CHECK(cublasSetStream(st->cublas, st->stream));
        /* after the stream: setting a stream puts cuBLAS back on its own workspace */
        PR_CUBLAS_CHECK(cublasSetWorkspace(st->cublas, st->workspace, PR_CUBLAS_WORKSPACE));
    }
    PR_CUBLAS_CHECK(cublasSetMathMode(st->cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return st->cublas;
}

static void cublas_state_free(pr_cuda_state *st)
{
    if (st->cublas) PR_CUBLAS_CHECK(cublasDestroy(st->cublas));
    if (st->workspace) PR_CUDA_CHECK(cudaFree(st->workspace));
    *st = pr_cuda_state{};
}

extern "C" void pr_cuda_ctx_release(void *cuda_state_ptr)
{
    pr_cuda_state *st = (pr_cuda_state *)cuda_state_ptr;
    if (!st) return;
    PR_CUDA_CHECK(sync_own());
    cublas_state_free(st);   /* nothing in a thread with its own stream: its handle is the thread's */
    free(st);
}

/* ---- Philox fill ----------------------------------------------------------------
 * The same numbers as tensor/rng.c: the same rounds, counter and bit
 * selection, then the same double arithmetic with explicit round-to-nearest
 * operations so nvcc cannot fuse a multiply and an add the CPU keeps apart.
 * log and cos come from CUDA's libm (within 2 ulp in double, against glibc's
 * < 1 ulp), so a normal can differ from the CPU's in the last double bit,
 * which after rounding to f32 is almost never visible. */

__global__ static void rand_fill_kernel(float *out, long long n, uint64_t seed, uint32_t stream,
                                        uint64_t offset, int kind, double a, double b)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        uint64_t idx = offset + (uint64_t)i;
        uint32_t w[4] = {(uint32_t)idx, (uint32_t)(idx >> 32), stream, 0};
        pr_philox4x32_dev(seed, w);
        double x;
        if (kind == 0) {
            x = __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), pr_philox_unit_dev(w[0], w[1])));
        } else {
            double u1 = __dsub_rn(1.0, pr_philox_unit_dev(w[0], w[1]));
            double u2 = pr_philox_unit_dev(w[2], w[3]);
            double r = __dsqrt_rn(__dmul_rn(-2.0, log(u1)));
            double z = __dmul_rn(r, cos(__dmul_rn(6.283185307179586, u2)));
            x = __dadd_rn(a, __dmul_rn(b, z));
        }
        out[i] = (float)x; /* round to nearest, as the CPU's store */
    }
}

extern "C" void pr_cuda_rand_fill(pr_tensor *t, uint64_t seed, uint32_t stream, uint64_t offset, int kind,
                                  double a, double b)
{
    PR_CHECK(t->device == PR_CUDA && t->dtype == PR_F32, "random fill on CUDA: f32 only (got %s)",
             pr_dtype_name(t->dtype));
    if (t->numel == 0) return;
    rand_fill_kernel<<<pr_cuda_blocks(t->numel, 256), 256, 0, PR_THE_STREAM>>>((float *)t->data, t->numel, seed,
                                                                                stream, offset, kind, a, b);
    PR_CUDA_LAUNCH_CHECK();
}

/* ---- CUDA graphs: capture a step once, replay it ---------------------------------- */

struct pr_cuda_graph {
    cudaGraphExec_t exec;
    std::vector<void *> constants;   /* cudaMalloc'd: the step's host-to-device constants */
    std::vector<size_t> constant_sizes;   /* each one's size class, so a pool can take it back */
};

/* this thread's capture (each thread captures its own steps) */
static thread_local pr_cuda_graph *g_building;   /* the graph being captured */
static thread_local char g_broken[256];          /* why the capture cannot stand ("" while it can) */

extern "C" bool pr_cuda_capturing(void) { return g_capturing; }

static void capture_break(const char *why)
{
    if (!g_broken[0]) snprintf(g_broken, sizeof g_broken, "%s", why);
}

static void capture_constant(void *dst, const void *src, size_t bytes)
{
    void *c = NULL;
    size_t rounded;
    (void)size_class(bytes, &rounded);   /* a class's size: a thread's pool takes it back (pr_cuda_graph_free) */
    cudaError_t e = PR_GATED(cudaMalloc(&c, rounded));   /* relaxed capture mode allows it */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return capture_break("cudaMalloc of a step constant failed");
    }
    g_building->constants.push_back(c);
    g_building->constant_sizes.push_back(rounded);
    /* runs now, not in the capture (c is new, so no other stream's work can
     * touch it). A copy from pageable memory may return before its DMA is
     * done: on the legacy stream the replay (there too) queues after it; a
     * thread that replays on its own stream must wait for its copy itself. */
    if (t_stream) {
        PR_CUDA_CHECK(cudaMemcpyAsync(c, src, bytes, cudaMemcpyHostToDevice, t_stream));
        PR_CUDA_CHECK(cudaStreamSynchronize(t_stream));
    } else {
        PR_CUDA_CHECK(cudaMemcpy(c, src, bytes, cudaMemcpyHostToDevice));
    }
    PR_CUDA_CHECK(cudaMemcpyAsync(dst, c, bytes, cudaMemcpyDeviceToDevice, g_capture_stream));
}

extern "C" void pr_cuda_graph_begin(void)
{
    PR_CHECK(!g_capturing, "CUDA graph: a capture is already under way");
    PR_CUDA_CHECK(sync_own());   /* what the step reads was written before it */
    if (!g_capture_stream) PR_CUDA_CHECK(PR_GATED(cudaStreamCreateWithFlags(&g_capture_stream, cudaStreamNonBlocking)));
    g_building = new pr_cuda_graph();
    g_building->exec = NULL;
    g_broken[0] = '\0';
    {
        allocator &A = the_allocator();
        std::lock_guard<std::mutex> g(A.mu);
        A.captured.clear();
    }
    /* relaxed: the capture's own cudaMalloc of constants is allowed, and
     * other threads' cudaMalloc and launches never invalidate it (only a
     * capture begun in global mode restricts other threads) */
    gate_hold();   /* the whole capture, to its instantiation: its launches too meet the driver's lock */
    PR_CUDA_CHECK(PR_GATED(cudaStreamBeginCapture(g_capture_stream, cudaStreamCaptureModeRelaxed)));   /* on failure pr_fatal lets the hold go */
    g_capturing = true;
    g_capture_t0 = std::chrono::steady_clock::now();
}

/* the blocks handed out during the capture become the graph's; those free
 * now leave the shared cache at once */
static void adopt_captured(pr_cuda_graph *gr)
{
    allocator &A = the_allocator();
    std::lock_guard<std::mutex> g(A.mu);
    for (void *p : A.captured) {
        if (A.graph_owned.count(p)) continue;
        A.graph_owned[p] = gr;
        auto c = A.cached_size.find(p);
        if (c == A.cached_size.end()) continue;   /* live: freed later, into the graph's list */
        size_t rounded = c->second;
        size_t ignored;
        int cls = size_class(rounded, &ignored);
        auto &fl = A.free_list[cls];
        for (size_t i = 0; i < fl.size(); i++)
            if (fl[i] == p) {
                fl.erase(fl.begin() + (long)i);
                break;
            }
        A.cached_size.erase(c);
        A.st.cached -= rounded;
        A.graph_free[p] = block_info{0, rounded, cls};
    }
    A.captured.clear();
}

extern "C" int pr_cuda_graph_end(pr_cuda_graph **out, char *why, size_t n)
{
    PR_CHECK(g_capturing, "CUDA graph: no capture under way");
    cudaGraph_t graph = NULL;
    cudaError_t e = PR_GATED(cudaStreamEndCapture(g_capture_stream, &graph));
    g_capturing = false;
    if (slow_call_ms() > 0) report_slow("a capture, begin to end", seconds_since(g_capture_t0));
    pr_cuda_graph *gr = g_building;
    g_building = NULL;
    adopt_captured(gr);   /* even a failed capture's blocks: its recorded work may name them */
    if (e == cudaSuccess && !g_broken[0]) e = PR_GATED(cudaGraphInstantiate(&gr->exec, graph, 0));
    if (graph) (void)cudaGraphDestroy(graph);
    gate_release();   /* pr_cuda_graph_begin's */
    if (e != cudaSuccess || g_broken[0]) {
        if (e != cudaSuccess) (void)cudaGetLastError();
        snprintf(why, n, "%s", g_broken[0] ? g_broken : cudaGetErrorString(e));
        gr->exec = NULL;
        pr_cuda_graph_free(gr);
        *out = NULL;
        return -1;
    }
    *out = gr;
    return 0;
}

extern "C" void pr_cuda_graph_replay(pr_cuda_graph *gr)
{
    gate_launch_enter();
    cudaError_t e = timed_call("cudaGraphLaunch", [&] { return cudaGraphLaunch(gr->exec, t_stream); });
    gate_launch_leave();
    PR_CUDA_CHECK(e);   /* after the gate: a failure may longjmp */
}

extern "C" void pr_cuda_graph_free(pr_cuda_graph *gr)
{
    if (!gr) return;
    PR_CUDA_CHECK(sync_own());   /* a replay may still run (on this thread's stream) */
    if (gr->exec) PR_CUDA_CHECK(PR_GATED(cudaGraphExecDestroy(gr->exec)));
    /* a thread with its own pool keeps the constants as cached blocks: a
     * cudaFree at every cell's end would wait for the whole device, other
     * threads' captures included */
    if (!t_pool)
        for (void *c : gr->constants) PR_CUDA_CHECK(PR_GATED(cudaFree(c)));
    allocator &A = the_allocator();
    {
        std::lock_guard<std::mutex> g(A.mu);
        for (size_t i = 0; t_pool && i < gr->constants.size(); i++) {
            size_t rounded = gr->constant_sizes[i], ignored;
            A.free_list[size_class(rounded, &ignored)].push_back(gr->constants[i]);
            A.cached_size[gr->constants[i]] = rounded;
            A.st.cached += rounded;
            A.st.reserved += rounded;
        }
        for (auto it = A.graph_owned.begin(); it != A.graph_owned.end();) {
            if (it->second != gr) {
                ++it;
                continue;
            }
            void *p = it->first;
            auto f = A.graph_free.find(p);
            if (f != A.graph_free.end()) {   /* back to the shared cache; a live one is freed there later */
                A.free_list[f->second.cls].push_back(p);
                A.cached_size[p] = f->second.rounded;
                A.st.cached += f->second.rounded;
                A.graph_free.erase(f);
            }
            it = A.graph_owned.erase(it);
        }
    }
    delete gr;
}

/* ---- threads with their own stream and pool ------------------------------------------ */

extern "C" void pr_cuda_thread_begin(void)
{
    PR_CHECK(!t_stream, "pr_cuda_thread_begin: this thread already has its own stream");
    PR_CHECK(pr_cuda_device_count() > 0, "CUDA on a machine without a usable GPU");
    PR_CUDA_CHECK(PR_GATED(cudaStreamCreateWithFlags(&t_stream, cudaStreamNonBlocking)));
    t_pool = new allocator();
}

/* the pool's free blocks join the shared cache (the stream has finished with
 * them, so the legacy stream may use them at once); the pool itself is kept
 * only while blocks of it are still live, which a correct run never leaves */
static void retire_pool(allocator *pool)
{
    allocator &S = shared_allocator();
    bool empty;
    {
        std::lock_guard<std::mutex> g(pool->mu);
        std::lock_guard<std::mutex> gs(S.mu);
        for (int c = 0; c < PR_NCLASS; c++) {
            for (void *p : pool->free_list[c]) {
                size_t sz = pool->cached_size[p];
                S.free_list[c].push_back(p);
                S.cached_size[p] = sz;
                S.st.cached += sz;
                S.st.reserved += sz;
            }
            pool->free_list[c].clear();
        }
        pool->cached_size.clear();
        empty = pool->live.empty() && pool->graph_owned.empty();
    }
    if (empty) delete pool;
}

extern "C" void pr_cuda_thread_end(void)
{
    if (!t_stream) return;
    if (g_capturing) {   /* a capture left open (a failed step): drop it */
        char why[64];
        pr_cuda_graph *gr = NULL;
        (void)pr_cuda_graph_end(&gr, why, sizeof why);
        pr_cuda_graph_free(gr);
    }
    PR_CUDA_CHECK(cudaStreamSynchronize(t_stream));
    allocator *pool = t_pool;
    t_pool = NULL;
    retire_pool(pool);
    leave_idle_blas(&t_blas);
    if (g_capture_stream) PR_CUDA_CHECK(PR_GATED(cudaStreamDestroy(g_capture_stream)));
    g_capture_stream = NULL;
    PR_CUDA_CHECK(PR_GATED(cudaStreamDestroy(t_stream)));
    t_stream = NULL;
}
