/* lab/bench_util.c: the benchmarks' timing loop and node runner
 * (lab/lab.h). */
#include "lab/lab.h"

#include <stdlib.h>

#ifdef PRISM_HAVE_CUDA
#include "ops/cuda/ops_cuda.h"
#endif

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pr_bench_median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    return x[n / 2];
}

double pr_bench_time_ms(pr_ctx *ctx, pr_device dev, pr_bench_fn fn, void *arg, int warm, int reps)
{
    for (int i = 0; i < warm; i++) fn(arg);
    pr_device_sync(dev);
    double *t = malloc(sizeof(double) * (size_t)reps);
    PR_CHECK(t, "bench: out of host memory");
#ifdef PRISM_HAVE_CUDA
    cudaEvent_t e[2];
    for (int i = 0; dev == PR_CUDA && i < 2; i++) PR_CUDA_CHECK(cudaEventCreate(&e[i]));
#endif
    for (int i = 0; i < reps; i++) {
#ifdef PRISM_HAVE_CUDA
        if (dev == PR_CUDA) {
            cudaStream_t s = pr_cuda_stream(ctx);
            PR_CUDA_CHECK(cudaEventRecord(e[0], s));
            fn(arg);
            PR_CUDA_CHECK(cudaEventRecord(e[1], s));
            PR_CUDA_CHECK(cudaEventSynchronize(e[1]));
            float ms;
            PR_CUDA_CHECK(cudaEventElapsedTime(&ms, e[0], e[1]));
            t[i] = ms;
            continue;
        }
#endif
        (void)ctx; /* the stream's owner, in CUDA builds */
        const double t0 = pr_now_s() * 1e3;
        fn(arg);
        t[i] = pr_now_s() * 1e3 - t0;
    }
#ifdef PRISM_HAVE_CUDA
    for (int i = 0; dev == PR_CUDA && i < 2; i++) PR_CUDA_CHECK(cudaEventDestroy(e[i]));
#endif
    const double m = pr_bench_median(t, reps);
    free(t);
    return m;
}

#ifdef PRISM_HAVE_CUDA
void pr_bench_fused_ms(pr_ctx *ctx, pr_bench_fwd_fn fwd, void *arg, pr_tensor *const *dout, int warm, int reps,
                       double *fwd_ms, double *fb_ms)
{
    cudaEvent_t e[3];
    for (int i = 0; i < 3; i++) PR_CUDA_CHECK(cudaEventCreate(&e[i]));
    double *tf = malloc(sizeof(double) * (size_t)reps), *tb = malloc(sizeof(double) * (size_t)reps);
    PR_CHECK(tf && tb, "bench: out of host memory");
    const cudaStream_t st = pr_cuda_stream(ctx);
    for (int i = -warm; i < reps; i++) {
        PR_CUDA_CHECK(cudaEventRecord(e[0], st));
        pr_node *nd = fwd(ctx, arg);
        PR_CUDA_CHECK(cudaEventRecord(e[1], st));
        for (int j = 0; j < nd->n_out; j++) nd->out[j]->grad = dout[j];
        nd->op->backward_cuda(ctx, nd);
        PR_CUDA_CHECK(cudaEventRecord(e[2], st));
        PR_CUDA_CHECK(cudaEventSynchronize(e[2]));
        float a, b;
        PR_CUDA_CHECK(cudaEventElapsedTime(&a, e[0], e[1]));
        PR_CUDA_CHECK(cudaEventElapsedTime(&b, e[0], e[2]));
        if (i >= 0) tf[i] = a, tb[i] = b;
        pr_step_reset(ctx);
    }
    *fwd_ms = pr_bench_median(tf, reps), *fb_ms = pr_bench_median(tb, reps);
    free(tf), free(tb);
    for (int i = 0; i < 3; i++) PR_CUDA_CHECK(cudaEventDestroy(e[i]));
}
#endif

void pr_bench_run_node(void *arg)
{
    pr_bench_node *a = arg;
    const pr_op_info *op = a->n.op;
    const bool cuda = a->n.in[0]->device == PR_CUDA;
    pr_op_fn f = a->backward ? (cuda ? op->backward_cuda : op->backward_cpu)
                             : (cuda ? op->forward_cuda : op->forward_cpu);
    f(a->ctx, &a->n);
}
