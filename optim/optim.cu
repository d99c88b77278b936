/* optim/optim.cu: the optimizer update on the GPU.
 *
 * Two paths with the same arithmetic per element (optim_element: double, one
 * rounding on store, as optim/optim.c's CPU loop), so they give the same bits:
 *  - pr_optim_update_cuda: one launch for one parameter (its scalars by value);
 *  - the multi-tensor path: one launch updates every parameter from a device
 *    table of slices cut into chunks, and one reduction (two launches) gives
 *    the global grad norm. Its per-step scalars (lr, bias corrections, the
 *    grad scale) are read from device memory, so a captured CUDA graph reads
 *    each step's values when it is replayed.
 * Both are deterministic: the grid and every sum's order follow the sizes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "ops/cuda/ops_cuda.h"

/* one element of the update: w, m (and v) in, updated in place. Every
 * operation is an explicit round-to-nearest one, so nvcc fuses no multiply
 * into an add: both paths (and the CPU loop, in the same order) compute the
 * same doubles whatever the code around them. */
__device__ __forceinline__ void optim_element(float *p, const float *g, float *m, float *v, long long i,
                                              const pr_optim_update_args &a, double lr, double wd, double c1,
                                              double c2, double grad_scale)
{
    double w = p[i], gi = __dmul_rn((double)g[i], grad_scale), mi = m[i];
    if (a.kind == 0) {
        double vi = v[i];
        w = __dsub_rn(w, __dmul_rn(__dmul_rn(lr, wd), w));
        mi = __dadd_rn(__dmul_rn(a.beta1, mi), __dmul_rn(__dsub_rn(1.0, a.beta1), gi));
        vi = __dadd_rn(__dmul_rn(a.beta2, vi), __dmul_rn(__dmul_rn(__dsub_rn(1.0, a.beta2), gi), gi));
        double den = __dadd_rn(__dsqrt_rn(__ddiv_rn(vi, c2)), a.eps);
        w = __dsub_rn(w, __ddiv_rn(__dmul_rn(lr, __ddiv_rn(mi, c1)), den));
        v[i] = (float)vi;
    } else {
        gi = __dadd_rn(gi, __dmul_rn(wd, w));
        mi = __dadd_rn(__dmul_rn(a.momentum, mi), gi);
        w = __dsub_rn(w, __dmul_rn(lr, mi));
    }
    m[i] = (float)mi;
    p[i] = (float)w;
}

__global__ void optim_update(float *p, const float *g, float *m, float *v, int64_t n, pr_optim_update_args a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        optim_element(p, g, m, v, i, a, a.lr, a.wd, a.c1, a.c2, a.grad_scale);
}

extern "C" void pr_optim_update_cuda(pr_ctx *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                                     const pr_optim_update_args *a)
{
    if (n == 0) return;
    optim_update<<<pr_cuda_blocks(n, 256), 256, 0, pr_cuda_stream(ctx)>>>(p, g, m, v, n, *a);
    PR_CUDA_LAUNCH_CHECK();
}

/* ---- the multi-tensor path ----------------------------------------------------- */
#define MT_THREADS 256
#define MT_CHUNK 4096      /* elements a chunk: 16 per thread */
#define MT_MAX_BLOCKS 1024 /* the norm's partial sums: at most this many */

typedef struct {
    int slice;            /* index into the slice table */
    long long start, end; /* elements [start, end) of that slice */
} mt_chunk;

/* what the kernels read each step, in device memory */
typedef struct {
    double norm;          /* the last grad norm (pr_optim_multi_grad_norm) */
    double loss;          /* the last loss kept (pr_optim_multi_keep_loss) */
    pr_optim_step_scalars s;
} mt_dev;

struct pr_optim_multi {
    int n_update, n_norm;
    int n_update_chunks, n_norm_chunks;
    pr_optim_slice *update;   /* device: the update's slices */
    mt_chunk *update_chunks;  /* device */
    const float **norm_g;     /* device: the grads the norm covers */
    mt_chunk *norm_chunks;    /* device */
    double *partial;          /* device: one sum a block of the norm */
    mt_dev *dev;
    size_t bytes[6];
};

/* the chunks of n slices of sizes size(i), written to host memory (caller frees) */
template <class S> static mt_chunk *make_chunks(int n, S size, int *n_chunks)
{
    long long total = 0;
    for (int i = 0; i < n; i++) total += (size(i) + MT_CHUNK - 1) / MT_CHUNK;
    mt_chunk *c = (mt_chunk *)calloc((size_t)total + 1, sizeof *c);
    PR_CHECK(c, "optim: out of host memory");
    int k = 0;
    for (int i = 0; i < n; i++)
        for (long long s = 0; s < size(i); s += MT_CHUNK)
            c[k++] = (mt_chunk){i, s, s + MT_CHUNK < size(i) ? s + MT_CHUNK : size(i)};
    *n_chunks = k;
    return c;
}

static void *to_device(const void *host, size_t bytes, size_t *kept)
{
    *kept = bytes ? bytes : 1;
    void *d = pr_cuda_malloc(*kept);
    if (bytes) pr_cuda_memcpy(d, host, bytes, 1, 0);
    return d;
}

extern "C" pr_optim_multi *pr_optim_multi_new(const pr_optim_slice *update, int n_update, const float *const *grads,
                                              const int64_t *sizes, int n_norm)
{
    pr_optim_multi *mt = (pr_optim_multi *)calloc(1, sizeof *mt);
    PR_CHECK(mt, "optim: out of host memory");
    mt->n_update = n_update, mt->n_norm = n_norm;
    mt_chunk *uc = make_chunks(n_update, [&](int i) { return (long long)update[i].n; }, &mt->n_update_chunks);
    mt_chunk *nc = make_chunks(n_norm, [&](int i) { return (long long)sizes[i]; }, &mt->n_norm_chunks);
    mt->update = (pr_optim_slice *)to_device(update, sizeof *update * (size_t)n_update, &mt->bytes[0]);
    mt->update_chunks = (mt_chunk *)to_device(uc, sizeof *uc * (size_t)mt->n_update_chunks, &mt->bytes[1]);
    mt->norm_g = (const float **)to_device(grads, sizeof *grads * (size_t)n_norm, &mt->bytes[2]);
    mt->norm_chunks = (mt_chunk *)to_device(nc, sizeof *nc * (size_t)mt->n_norm_chunks, &mt->bytes[3]);
    mt->bytes[4] = sizeof(double) * MT_MAX_BLOCKS;
    mt->partial = (double *)pr_cuda_malloc(mt->bytes[4]);
    mt_dev zero;
    memset(&zero, 0, sizeof zero);
    mt->dev = (mt_dev *)to_device(&zero, sizeof zero, &mt->bytes[5]);
    free(uc);
    free(nc);
    return mt;
}

extern "C" void pr_optim_multi_free(pr_optim_multi *mt)
{
    if (!mt) return;
    void *ptrs[6] = {mt->update, mt->update_chunks, (void *)mt->norm_g, mt->norm_chunks, mt->partial, mt->dev};
    for (int i = 0; i < 6; i++) pr_cuda_free(ptrs[i], mt->bytes[i]);
    free(mt);
}

static int norm_blocks(const pr_optim_multi *mt)
{
    int nb = mt->n_norm_chunks < MT_MAX_BLOCKS ? mt->n_norm_chunks : MT_MAX_BLOCKS;
    return nb < 1 ? 1 : nb;
}

/* block b sums the squares of chunks b, b + nb, ... in a fixed order */
__global__ void mt_sumsq_kernel(const float *const *g, const mt_chunk *chunks, int n_chunks, double *partial)
{
    double acc = 0.0;
    for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const mt_chunk ch = chunks[c];
        const float *x = g[ch.slice];
        for (long long i = ch.start + threadIdx.x; i < ch.end; i += MT_THREADS) {
            double v = __ldg(x + i);   /* a pointer from the table: a global load, said so */
            acc += v * v;
        }
    }
    acc = pr_group_reduce<MT_THREADS>(acc, pr_op_sum());
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void mt_norm_finish_kernel(const double *partial, int np, mt_dev *dev)
{
    double acc = 0.0;
    for (int i = threadIdx.x; i < np; i += MT_THREADS) acc += partial[i];
    acc = pr_group_reduce<MT_THREADS>(acc, pr_op_sum());
    if (threadIdx.x == 0) dev->norm = sqrt(acc);
}

extern "C" void pr_optim_multi_grad_norm(pr_ctx *ctx, pr_optim_multi *mt)
{
    cudaStream_t s = pr_cuda_stream(ctx);
    int nb = norm_blocks(mt);
    if (mt->n_norm_chunks) {
        mt_sumsq_kernel<<<nb, MT_THREADS, 0, s>>>(mt->norm_g, mt->norm_chunks, mt->n_norm_chunks, mt->partial);
        PR_CUDA_LAUNCH_CHECK();
    } else {
        PR_CUDA_CHECK(cudaMemsetAsync(mt->partial, 0, sizeof(double), s));
    }
    mt_norm_finish_kernel<<<1, MT_THREADS, 0, s>>>(mt->partial, mt->n_norm_chunks ? nb : 1, mt->dev);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" double pr_optim_multi_read_norm(const pr_optim_multi *mt)
{
    double norm;
    pr_cuda_memcpy(&norm, &mt->dev->norm, sizeof norm, 0, 1);
    return norm;
}

__global__ void mt_keep_loss_kernel(const void *loss, bool bf16, mt_dev *dev)
{
    dev->loss = bf16 ? (double)pr_ld((const pr_bf16 *)loss, 0) : (double)*(const float *)loss;
}

extern "C" void pr_optim_multi_keep_loss(pr_ctx *ctx, pr_optim_multi *mt, const void *loss, int bf16)
{
    mt_keep_loss_kernel<<<1, 1, 0, pr_cuda_stream(ctx)>>>(loss, bf16 != 0, mt->dev);
    PR_CUDA_LAUNCH_CHECK();
}

extern "C" void pr_optim_multi_read(const pr_optim_multi *mt, double *loss, double *norm)
{
    double both[2];   /* norm, loss: adjacent at the head of mt_dev */
    pr_cuda_memcpy(both, &mt->dev->norm, sizeof both, 0, 1);
    *norm = both[0], *loss = both[1];
}

extern "C" void pr_optim_multi_set_scalars(pr_optim_multi *mt, const pr_optim_step_scalars *s)
{
    pr_cuda_memcpy(&mt->dev->s, s, sizeof *s, 1, 0);
}

/* pr_clip_scale on the device, from the norm the reduction left */
__device__ __forceinline__ double mt_grad_scale(const mt_dev *d)
{
    if (!d->s.clip_on_device) return d->s.grad_scale;
    double norm = d->norm, max_norm = d->s.max_norm;
    if (max_norm <= 0 || norm <= max_norm) return 1.0;
    return max_norm / (norm + 1e-6);
}

__global__ void mt_update_kernel(const pr_optim_slice *slices, const mt_chunk *chunks, int n_chunks,
                                 const mt_dev *dev, pr_optim_update_args a)
{
    /* a replayed step whose grads went non-finite leaves every weight and
     * moment as it was, as the eager loop does (it never calls the update) */
    if (dev->s.clip_on_device && !(isfinite(dev->norm) && isfinite(dev->loss))) return;
    const double lr = dev->s.lr, c1 = dev->s.c1, c2 = dev->s.c2, scale = mt_grad_scale(dev);
    for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const mt_chunk ch = chunks[c];
        const pr_optim_slice sl = slices[ch.slice];
        for (long long i = ch.start + threadIdx.x; i < ch.end; i += MT_THREADS)
            optim_element(sl.p, sl.g, sl.m, sl.v, i, a, lr, sl.wd, c1, c2, scale);
    }
}

extern "C" void pr_optim_multi_update(pr_ctx *ctx, pr_optim_multi *mt, const pr_optim_update_args *a)
{
    if (!mt->n_update_chunks) return;
    int nb = mt->n_update_chunks < 65535 ? mt->n_update_chunks : 65535;
    mt_update_kernel<<<nb, MT_THREADS, 0, pr_cuda_stream(ctx)>>>(mt->update, mt->update_chunks, mt->n_update_chunks,
                                                                mt->dev, *a);
    PR_CUDA_LAUNCH_CHECK();
}
