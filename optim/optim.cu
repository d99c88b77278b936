/* optim/optim.cu: the optimizer update on the GPU, one thread per element.
 * The same arithmetic as optim/optim.c's CPU loop (double, one rounding on
 * store), so a CUDA run follows the CPU one to f32 rounding. */
#include "optim/optim.h"
#include "tensor/cuda.h"

__global__ void optim_update(float *p, const float *g, float *m, float *v, int64_t n, pr_optim_update_args a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double w = p[i], gi = (double)g[i] * a.grad_scale, mi = m[i];
        if (a.kind == 0) {
            double vi = v[i];
            w -= a.lr * a.wd * w;
            mi = a.beta1 * mi + (1 - a.beta1) * gi;
            vi = a.beta2 * vi + (1 - a.beta2) * gi * gi;
            w -= a.lr * (mi / a.c1) / (sqrt(vi / a.c2) + a.eps);
            v[i] = (float)vi;
        } else {
            gi += a.wd * w;
            mi = a.momentum * mi + gi;
            w -= a.lr * mi;
        }
        m[i] = (float)mi;
        p[i] = (float)w;
    }
}

extern "C" void pr_optim_update_cuda(pr_ctx *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                                     const pr_optim_update_args *a)
{
    if (n == 0) return;
    optim_update<<<pr_cuda_blocks(n, 256), 256, 0, pr_cuda_stream(ctx)>>>(p, g, m, v, n, *a);
    PR_CUDA_LAUNCH_CHECK();
}
