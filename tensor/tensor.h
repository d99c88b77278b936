/* tensor/tensor.h: storage, dtype, shape, device, arenas, RNG, safetensors.
 *
 * A tensor is a contiguous row-major block of one dtype on one device, with
 * up to PR_MAX_DIMS dims written outermost first (as PyTorch and safetensors
 * write them). Every tensor lives in an arena and dies with it: there is no
 * per-tensor free. Views (reshape, leading-dim slices) share their base's data.
 */
#ifndef PR_TENSOR_H
#define PR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PR_MAX_DIMS 6

typedef enum { PR_F32, PR_F64, PR_BF16, PR_I32, PR_I64, PR_NDTYPES } pr_dtype;
typedef enum { PR_CPU, PR_CUDA } pr_device;

typedef struct pr_arena pr_arena;

typedef struct pr_tensor {
    pr_dtype dtype;
    pr_device device;
    int ndim;
    int64_t shape[PR_MAX_DIMS];
    int64_t numel;
    void *data;                 /* numel elements, contiguous */
    struct pr_tensor *grad;     /* same shape/dtype/device; NULL until backward */
    bool requires_grad;
    int tape_pos;               /* tape index of the op that made it, -1 for leaves */
    unsigned backward_pass;     /* the last backward pass that reached it (autograd's mark) */
    pr_arena *arena;            /* owner of this header (and of data, unless a view) */
    const char *name;           /* optional, for dumps and error messages */
    /* a reshape of a tensor that requires grad (autograd/autograd.h): its
     * gradient is a view of grad_base's, and no tape node stands for it */
    struct pr_tensor *grad_base;
    /* a gradient buffer that nothing has written yet: its data is garbage
     * and means zeros (autograd/autograd.h, pr_grad_claim) */
    bool unwritten;
} pr_tensor;

/* ---- errors -------------------------------------------------------------
 * Misuse (wrong shapes, wrong dtypes, unknown names) is fatal: pr_fatal prints
 * "prism: <message>" and calls the error handler (default: exit(1)). Tests
 * install a handler that longjmps so they can check the message. Recoverable
 * failures (files) return -1 and fill a pr_err instead. The handler and the
 * last message are the calling thread's: a thread that installs none exits
 * the process on a fatal error. */
typedef void (*pr_error_handler)(const char *msg);
void pr_set_error_handler(pr_error_handler h); /* this thread's; NULL restores the default */
const char *pr_last_error(void);               /* message of this thread's last pr_fatal */
void pr_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#define PR_CHECK(cond, ...) \
    do { if (!(cond)) pr_fatal(__VA_ARGS__); } while (0)
/* internal invariants: prints file:line and the condition */
#define PR_ASSERT(cond) \
    do { if (!(cond)) pr_fatal("%s:%d: assertion failed: %s", __FILE__, __LINE__, #cond); } while (0)

typedef struct { char msg[512]; } pr_err;
int pr_errf(pr_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3))); /* returns -1 */

/* seconds on the monotonic clock (for durations: timeouts, steps per second) */
double pr_now_s(void);

/* ---- dtype and shape helpers ----------------------------------------------- */
size_t pr_dtype_size(pr_dtype dt);
const char *pr_dtype_name(pr_dtype dt);       /* "f32", "f64", ... */
const char *pr_device_name(pr_device dev);    /* "cpu", "cuda" */
bool pr_dtype_is_float(pr_dtype dt);          /* f32, f64 (the dtypes every op computes in) */
/* f32, f64 and bf16: the dtypes a tensor may require grad in (a bf16
 * tensor's grad is bf16 too; ops compute bf16 wide, autograd/staging.c) */
bool pr_dtype_has_grad(pr_dtype dt);
size_t pr_nbytes(const pr_tensor *t);
bool pr_same_shape(const pr_tensor *a, const pr_tensor *b);
/* "[2,3,4]" into buf (returns buf) */
const char *pr_shape_str(const pr_tensor *t, char *buf, size_t n);
/* shape arguments: pr_zeros(a, PR_F32, PR_CPU, PR_DIMS(2, 3)) */
#define PR_NARGS_(_1, _2, _3, _4, _5, _6, N, ...) N
#define PR_NARGS(...) PR_NARGS_(__VA_ARGS__, 6, 5, 4, 3, 2, 1, 0)
#define PR_DIMS(...) PR_NARGS(__VA_ARGS__), (const int64_t[]){__VA_ARGS__}

/* ---- arenas ---------------------------------------------------------------
 * An arena owns tensor headers and data and is released in one call. Host
 * memory grows in blocks (capacity 0 = unbounded; otherwise overflow is fatal
 * with the bytes needed and available). Device data comes from the device
 * allocator and is returned to it on reset. Three lifetimes in practice:
 * parameters and optimizer state, the step (activations, tape), gradients. */
pr_arena *pr_arena_new(const char *name, size_t capacity);
void pr_arena_free(pr_arena *a);              /* NULL ok */
void pr_arena_reset(pr_arena *a);             /* drop everything, keep one block of the peak */
size_t pr_arena_used(const pr_arena *a);      /* bytes handed out, host + device */
size_t pr_arena_peak(const pr_arena *a);
const char *pr_arena_name(const pr_arena *a);
size_t pr_arena_blocks_made(const pr_arena *a); /* host blocks allocated since pr_arena_new */
void *pr_arena_alloc(pr_arena *a, size_t bytes);  /* host, 64-byte aligned, zeroed */
/* host, 64-byte aligned, contents undefined (all 0xff bytes, NaN, unless NDEBUG) */
void *pr_arena_alloc_uninit(pr_arena *a, size_t bytes);
void *pr_arena_alloc_device(pr_arena *a, pr_device dev, size_t bytes); /* any device, not zeroed */

/* ---- creation ----------------------------------------------------------------
 * pr_empty's data is not initialised: the caller writes every element before
 * anything reads it (debug builds fill host data with NaN to catch a reader). */
pr_tensor *pr_empty(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape);
pr_tensor *pr_zeros(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape);
pr_tensor *pr_full(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape, double value);
pr_tensor *pr_ones(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape);
pr_tensor *pr_arange(pr_arena *a, pr_dtype dt, pr_device dev, int64_t n); /* 0..n-1, 1-D */
pr_tensor *pr_empty_like(pr_arena *a, const pr_tensor *t);
pr_tensor *pr_zeros_like(pr_arena *a, const pr_tensor *t);
/* a copy of host data (layout: t's dtype, contiguous) onto any device */
pr_tensor *pr_from_host(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape,
                        const void *host_data);

/* copies: into a new tensor of another dtype and/or device (never a view) */
pr_tensor *pr_to(pr_arena *a, const pr_tensor *t, pr_dtype dt, pr_device dev);
pr_tensor *pr_clone(pr_arena *a, const pr_tensor *t);
void pr_copy_(pr_tensor *dst, const pr_tensor *src);   /* same shape; converts dtype/device */
void pr_fill_(pr_tensor *t, double value);
void pr_zero_(pr_tensor *t);
/* host copy as double (any dtype/device); n = numel */
void pr_to_host_f64(const pr_tensor *t, double *out);
double pr_item(const pr_tensor *t);                    /* one-element tensor */
/* element i (flat index) as double; host tensors only */
double pr_get(const pr_tensor *t, int64_t i);
void pr_set(pr_tensor *t, int64_t i, double v);

/* views: share data with t. Reshape keeps numel (one dim may be -1). */
pr_tensor *pr_view(pr_arena *a, pr_tensor *t, int ndim, const int64_t *shape);
pr_tensor *pr_view_rows(pr_arena *a, pr_tensor *t, int64_t start, int64_t len); /* dim 0 slice */

/* printing: shape, dtype, device and up to `max_elems` values (0 = default) */
void pr_print(FILE *f, const pr_tensor *t, const char *name, int max_elems);

/* ---- random numbers -------------------------------------------------------
 * Philox4x32-10, counter based: element i of a draw is a pure function of
 * (seed, stream, offset + i), so the same seed gives the same numbers on any
 * device and thread count. A pr_rng advances its offset by numel per draw. */
typedef struct { uint64_t seed; uint32_t stream; uint64_t offset; } pr_rng;
pr_rng pr_rng_init(uint64_t seed, uint32_t stream);
void pr_philox4x32(uint64_t key, const uint32_t ctr[4], uint32_t out[4]);
double pr_philox_uniform(uint64_t seed, uint32_t stream, uint64_t i); /* [0,1) */
double pr_philox_normal(uint64_t seed, uint32_t stream, uint64_t i);  /* N(0,1) */
void pr_rand_uniform_(pr_tensor *t, pr_rng *r, double lo, double hi);
void pr_rand_normal_(pr_tensor *t, pr_rng *r, double mean, double std);
pr_tensor *pr_randn(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape, pr_rng *r);
pr_tensor *pr_randu(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape, pr_rng *r,
                    double lo, double hi);

/* ---- device memory --------------------------------------------------------
 * The one place host/device traffic happens. In a CPU-only build the CUDA
 * entries are fatal ("built without CUDA"). */
bool pr_cuda_available(void);                  /* built with CUDA and a GPU present */
void *pr_device_alloc(pr_device dev, size_t bytes);
void pr_device_free(pr_device dev, void *p, size_t bytes);
void pr_device_memcpy(void *dst, pr_device dst_dev, const void *src, pr_device src_dev, size_t bytes);
void pr_device_memset0(pr_device dev, void *p, size_t bytes);
void pr_device_sync(pr_device dev);            /* wait for queued device work */
/* bytes held by tensors now, and the most ever held (peak), on a device:
 * counted per thread (host memory, and CUDA memory of a thread that has its
 * own stream), so each of a grid's worker threads sees its own run's */
void pr_device_mem_stats(pr_device dev, size_t *current, size_t *peak);
/* peak = current on dev: the next peak is of what runs from here */
void pr_device_mem_peak_reset(pr_device dev);
/* whether work is being captured into a CUDA graph now (never on the CPU
 * or without CUDA): host-side checks of device values skip themselves */
bool pr_device_capturing(void);
/* A thread that runs a training of its own beside others (ablate --workers
 * threads) brackets its work with these. On CUDA, begin gives the calling
 * thread its own non-blocking stream and its own pool of cached blocks, so
 * its kernels overlap other threads' and no block moves between streams;
 * end waits for that stream and gives the pool's free blocks to the shared
 * cache. On the CPU they do nothing. Without begin a thread uses the legacy
 * stream and the shared pool, as a single-threaded program does. */
void pr_device_thread_begin(pr_device dev);
void pr_device_thread_end(pr_device dev);
/* For finding where threads wait: from now on every CUDA driver call that
 * may wait for other streams' work (tensor/cuda.cu lists them), and every
 * graph capture, that takes ms milliseconds or more is named on stderr; 0
 * turns it off; nothing on the CPU. The command sets it from the variable
 * PRISM_CUDA_SLOW_MS (tools/prism.c). */
void pr_device_trace_slow_calls(double ms);

/* bridges into tensor/cuda.cu (C-callable, defined only in CUDA builds;
 * tensor/device.c is their one caller from C, but for pr_fatal's
 * pr_cuda_on_fatal: a thread's hold on the driver gate is let go) */
void *pr_cuda_malloc(size_t bytes);
void pr_cuda_free(void *p, size_t bytes);
void pr_cuda_memcpy(void *dst, const void *src, size_t bytes, int dst_is_dev, int src_is_dev);
void pr_cuda_memset0(void *p, size_t bytes);
void pr_cuda_sync(void);
void pr_cuda_thread_begin(void);
void pr_cuda_trace_slow_calls(double ms);
void pr_cuda_thread_end(void);
void pr_cuda_on_fatal(void);
int pr_cuda_device_count(void);
void pr_cuda_mem_stats(size_t *current, size_t *peak, size_t *cached);
void pr_cuda_mem_info(size_t *free_bytes, size_t *total);   /* the current GPU's (cudaMemGetInfo) */
void pr_cuda_alloc_peak_reset(void);
/* CUDA graphs (tensor/cuda.cu says what a capture allows): begin recording
 * the work queued from here; end: 0 and the graph, or -1 and why it cannot
 * be used (nothing ran: the step is still to be done); replay on the legacy
 * stream; free returns the graph's memory to the cache */
typedef struct pr_cuda_graph pr_cuda_graph;
bool pr_cuda_capturing(void);
void pr_cuda_graph_begin(void);
int pr_cuda_graph_end(pr_cuda_graph **out, char *why, size_t n);
void pr_cuda_graph_replay(pr_cuda_graph *g);
void pr_cuda_graph_free(pr_cuda_graph *g);
void pr_cuda_ctx_release(void *cuda_state);   /* frees a pr_ctx's stream and handles */
/* on: before each kernel with dynamic shared memory, fill every SM's shared
 * memory with NaN (tensor/cuda.h, pr_cuda_smem_prep); the CUDA tests turn it on.
 * No effect in a build without CUDA. */
void pr_cuda_poison_shared(bool on);
void pr_cuda_check_last(const char *what);    /* fatal, naming `what`, if a launch failed */
/* fill a CUDA f32 tensor with the Philox stream: kind 0 uniform [a,b), 1 normal (mean a, std b) */
void pr_cuda_rand_fill(pr_tensor *t, uint64_t seed, uint32_t stream, uint64_t offset, int kind,
                       double a, double b);

/* ---- safetensors ----------------------------------------------------------
 * read: every tensor of the file into arena `a` (on the CPU, dtype as stored);
 * returns 0, or -1 with err naming the file and the problem. */
typedef struct {
    int n;
    char **names;
    pr_tensor **tensors;
    int n_meta;
    char **meta_keys, **meta_values;
} pr_safetensors;
int pr_safetensors_read(const char *path, pr_arena *a, pr_safetensors *out, pr_err *err);
pr_tensor *pr_safetensors_get(const pr_safetensors *st, const char *name); /* NULL if absent */
const char *pr_safetensors_meta(const pr_safetensors *st, const char *key);
/* write atomically (temp file, fsync, rename); device tensors are copied to host */
int pr_safetensors_write(const char *path, int n, const char *const *names, const pr_tensor *const *tensors,
                         int n_meta, const char *const *meta_keys, const char *const *meta_values,
                         pr_err *err);

#ifdef __cplusplus
}
#endif
#endif
