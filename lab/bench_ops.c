/* lab/bench_ops.c: what `prism bench ops` measures (lab/lab.h): the speed
 * of the basic kernels against the machine's own ceilings, measured in the
 * same run.
 *
 * CUDA: the ceilings are a device-to-device cudaMemcpy of 256 MiB (bytes
 * read + written per second) and a bare cuBLAS GEMM of 8192^3 (fp32 and
 * tf32 math, same call as ops/matmul.cu makes). Each memory-bound op runs on
 * 256 MiB tensors ([65536, 1024] f32) and is reported as a fraction of the
 * copy bandwidth, counting the fewest bytes it must move (each input read
 * once, each output written once); pr_matmul as a fraction of the bare GEMM.
 * The ops' kernels are called through the op table on prepared nodes, so no
 * allocation falls inside a timed region. On the GPU every memory-bound row
 * is measured again in bf16 (the native bf16 kernels: the same [65536, 1024]
 * elements, half the bytes), and the product in bf16 against a bare bf16
 * cublasGemmEx with f32 accumulation. Timing: CUDA events, warm-up,
 * median of the repetitions. CPU: the same table, smaller sizes, wall clock.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "ops/ops.h"
#ifdef PRISM_HAVE_CUDA
#include "ops/cuda/ops_cuda.h"
#endif

/* ---- the cases ------------------------------------------------------------------------ */

typedef struct {
    pr_ctx *ctx;
    pr_tensor *a, *b;
} mm_arg;

/* One training-step-like call: the previous output goes back to the caching
 * allocator first (the device is idle here: the last rep was synchronized),
 * so the output is a cache hit as in a steady step, not a fresh cudaMalloc
 * whose host time the events would count as GPU idle time. */
static void run_matmul(void *p)
{
    mm_arg *m = p;
    pr_step_reset(m->ctx);
    pr_matmul(m->ctx, m->a, m->b, false, false);
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    pr_device dev;
} copy_arg;

static void run_copy(void *p)
{
    copy_arg *c = p;
    pr_device_memcpy(c->dst, c->dev, c->src, c->dev, c->bytes);
}

#ifdef PRISM_HAVE_CUDA
typedef struct {
    pr_ctx *ctx;
    const void *a, *b;
    void *c;
    int n;
    cudaDataType type;   /* of a, b and c: CUDA_R_32F or CUDA_R_16BF */
} gemm_arg;

/* what ops/matmul.cu issues for a row-major [n,n] @ [n,n], with no library around it */
static void run_cublas(void *p)
{
    gemm_arg *g = p;
    const float alpha = 1.0f, beta = 0.0f;
    cublasHandle_t h = pr_cublas(g->ctx);
    cublasComputeType_t ct =
        g->ctx->matmul_tf32 && g->type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    PR_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &alpha, g->b, g->type, g->n, g->a,
                                 g->type, g->n, &beta, g->c, g->type, g->n, ct, CUBLAS_GEMM_DEFAULT));
}
#endif

/* a node for op with inputs in (NULL allowed) and output/saved tensors ready */
static pr_bench_node make_node(pr_ctx *ctx, pr_op_id id, int n_in, pr_tensor *const *in, pr_tensor *out, int n_saved,
                          pr_tensor *const *saved, double eps)
{
    pr_bench_node a = {ctx, pr_node_init(id, n_in, in), false};
    a.n.n_out = 1;
    a.n.out[0] = out;
    a.n.n_saved = n_saved;
    for (int i = 0; i < n_saved; i++) a.n.saved[i] = saved[i];
    a.n.farg[0] = eps;
    return a;
}

typedef struct {
    FILE *out;
    double copy_gbs;
    pr_bench_ops_result *res;
} bench_state;

/* a row of the result; a table longer than PR_BENCH_OPS_MAX_ROWS is a bug here, not a row lost */
static pr_bench_ops_row *add_row(bench_state *st, const char *name, double ms, double rate, double of_ceiling,
                                 bool low)
{
    pr_bench_ops_result *r = st->res;
    PR_ASSERT(r->n < PR_BENCH_OPS_MAX_ROWS);
    pr_bench_ops_row *row = &r->row[r->n++];
    *row = (pr_bench_ops_row){.ms = ms, .rate = rate, .of_ceiling = of_ceiling, .low = low};
    snprintf(row->name, sizeof row->name, "%.47s", name);   /* names are short; the bound keeps -Wall quiet */
    r->low += low;
    return row;
}

static void report_mem(bench_state *st, const char *name, double ms, double bytes, bool target)
{
    double gbs = bytes / (ms * 1e-3) / 1e9, frac = gbs / st->copy_gbs;
    bool low = st->res->judged && target && frac < 0.70;
    add_row(st, name, ms, gbs, frac, low);
    fprintf(st->out, "%-26s %9.3f ms %9.1f GB/s %7.1f%% of copy%s\n", name, ms, gbs, 100 * frac, low ? "  LOW" : "");
}

/* t in dtype dt (t itself when f32) */
static pr_tensor *in_dtype(pr_arena *ar, pr_tensor *t, pr_dtype dt)
{
    return dt == PR_F32 ? t : pr_to(ar, t, dt, t->device);
}

/* elementwise, softmax and norms on [R, D] of dtype dt (f32, or bf16 on the
 * GPU: the norms' statistics stay f32), forward and backward */
static void bench_memory_ops(bench_state *st, pr_ctx *ctx, pr_arena *ar, pr_device dev, int64_t R, int64_t D, int reps,
                             pr_dtype dt)
{
    pr_rng r = pr_rng_init(42, 0);
    pr_tensor *x = in_dtype(ar, pr_randn(ar, PR_F32, dev, PR_DIMS(R, D), &r), dt);
    pr_tensor *x2 = in_dtype(ar, pr_randn(ar, PR_F32, dev, PR_DIMS(R, D), &r), dt);
    pr_tensor *y = pr_zeros(ar, dt, dev, PR_DIMS(R, D));
    pr_tensor *w = in_dtype(ar, pr_randu(ar, PR_F32, dev, PR_DIMS(D), &r, 0.5, 1.5), dt);
    pr_tensor *b = in_dtype(ar, pr_randn(ar, PR_F32, dev, PR_DIMS(D), &r), dt);
    pr_tensor *mean = pr_zeros(ar, PR_F32, dev, PR_DIMS(R)), *rstd = pr_zeros(ar, PR_F32, dev, PR_DIMS(R));
    /* grads for the backwards: dy (read) and dx (accumulated: read and written) */
    y->grad = in_dtype(ar, pr_randn(ar, PR_F32, dev, PR_DIMS(R, D), &r), dt);
    x->grad = pr_zeros(ar, dt, dev, PR_DIMS(R, D));
    x->requires_grad = true;
    /* the fused residual add + rmsnorm's sum; its upstream grad reads dy's buffer */
    pr_tensor *sum = pr_zeros(ar, dt, dev, PR_DIMS(R, D));
    sum->grad = y->grad;
    double T = (double)R * D * (double)pr_dtype_size(dt); /* bytes of one tensor */
    struct {
        const char *name;
        pr_op_id id;
        int n_in;
        pr_tensor *in[3];
        int n_saved;
        double fwd_tensors, bwd_tensors; /* tensors moved: inputs + outputs */
        pr_tensor *sum;                  /* out[1] of the fused add + norm, else NULL */
    } cases[] = {
        /* the CPU's backward reads f' (f64) as the recorded forward saved it, not x */
        {"silu", PR_OP_silu, 1, {x}, 0, 2, dev == PR_CPU && dt == PR_F32 ? 5 : 4, NULL},
        {"add (same shape)", PR_OP_add, 2, {x, x2}, 0, 3, 0, NULL},
        {"swiglu", PR_OP_swiglu, 2, {x, x2}, 0, 3, 5, NULL},
        {"softmax", PR_OP_softmax, 1, {x}, 0, 2, 4, NULL},
        {"layernorm (w, b)", PR_OP_layernorm, 3, {x, w, b}, 2, 2, 4, NULL},
        {"rmsnorm (w)", PR_OP_rmsnorm, 2, {x, w}, 1, 2, 4, NULL},
        /* beside add + rmsnorm above: x, y in, s, n out; back: s, dn, ds in, dx read and written */
        {"add+rmsnorm fused", PR_OP_add_rmsnorm, 3, {x, x2, w}, 1, 4, 5, sum},
    };
    pr_tensor *saved_ln[2] = {mean, rstd}, *saved_rms[1] = {rstd};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pr_tensor **saved = cases[i].n_saved == 2 ? saved_ln : saved_rms;
        pr_bench_node a = make_node(ctx, cases[i].id, cases[i].n_in, cases[i].in, y, cases[i].n_saved, saved, 1e-5);
        if (cases[i].sum) a.n.n_out = 2, a.n.out[1] = cases[i].sum;
        char name[64];
        const char *suffix = dt == PR_F32 ? "" : " bf16";
        snprintf(name, sizeof name, "%s fwd%s", cases[i].name, suffix);
        report_mem(st, name, pr_bench_time_ms(ctx, dev, pr_bench_run_node, &a, 3, reps), cases[i].fwd_tensors * T,
                   true);
        if (cases[i].bwd_tensors == 0) continue;
        a.backward = true; /* dx only: w and b need no grad here */
        if (dev == PR_CPU) {   /* what a recorded forward saves for the backward (silu's f') */
            a.n.recording = true;
            a.n.op->forward_cpu(ctx, &a.n);
        }
        snprintf(name, sizeof name, "%s bwd (dx)%s", cases[i].name, suffix);
        report_mem(st, name, pr_bench_time_ms(ctx, dev, pr_bench_run_node, &a, 3, reps), cases[i].bwd_tensors * T,
                   true);
    }
}

static void bench_matmul(bench_state *st, pr_ctx *ctx, pr_arena *ar, pr_device dev, int64_t n, int reps)
{
    pr_rng r = pr_rng_init(43, 0);
    pr_tensor *a = pr_randn(ar, PR_F32, dev, PR_DIMS(n, n), &r), *b = pr_randn(ar, PR_F32, dev, PR_DIMS(n, n), &r);
    double flop = 2.0 * n * n * n;
    bool was = pr_set_grad_enabled(ctx, false);
    for (int tf32 = 0; tf32 <= (dev == PR_CUDA); tf32++) {
        ctx->matmul_tf32 = tf32;
        double ref = 0, ms;
        mm_arg m = {ctx, a, b};
#ifdef PRISM_HAVE_CUDA
        if (dev == PR_CUDA) {
            /* the bare call and the library's, alternately, so clock and power
             * drift over the run (a TF32 GEMM draws the card's full power)
             * falls on both alike; medians of each */
            pr_tensor *c = pr_empty(ar, PR_F32, dev, PR_DIMS(n, n));
            gemm_arg g = {ctx, a->data, b->data, c->data, (int)n, CUDA_R_32F};
            double *tb = malloc(sizeof(double) * (size_t)reps), *tl = malloc(sizeof(double) * (size_t)reps);
            pr_bench_time_ms(ctx, dev, run_cublas, &g, 2, 1);
            pr_bench_time_ms(ctx, dev, run_matmul, &m, 2, 1);
            for (int i = 0; i < reps; i++) {
                tb[i] = pr_bench_time_ms(ctx, dev, run_cublas, &g, 0, 1);
                tl[i] = pr_bench_time_ms(ctx, dev, run_matmul, &m, 0, 1);
            }
            ms = pr_bench_median(tl, reps);
            const double bare = pr_bench_median(tb, reps);
            ref = flop / (bare * 1e-3) / 1e12;
            add_row(st, tf32 ? "cuBLAS tf32" : "cuBLAS fp32", bare, ref, NAN, false);
            fprintf(st->out, "%-26s %9.3f ms %9.1f TFLOP/s (bare cublasGemmEx, %s)\n",
                    tf32 ? "cuBLAS tf32" : "cuBLAS fp32", bare, ref,
                    tf32 ? "CUBLAS_COMPUTE_32F_FAST_TF32" : "CUBLAS_COMPUTE_32F");
            free(tb);
            free(tl);
        } else
#endif
            ms = pr_bench_time_ms(ctx, dev, run_matmul, &m, 2, reps);
        pr_step_reset(ctx);
        double rate = flop / (ms * 1e-3) / 1e12;
        char name[48];
        snprintf(name, sizeof name, "pr_matmul %lld^3 %s", (long long)n, tf32 ? "tf32" : "fp32");
        if (ref > 0) {
            bool low = st->res->judged && rate < 0.9 * ref;
            add_row(st, name, ms, rate, rate / ref, low);
            fprintf(st->out, "%-26s %9.3f ms %9.1f TFLOP/s %6.1f%% of cuBLAS%s\n", name, ms, rate, 100 * rate / ref,
                    low ? "  LOW" : "");
        } else {
            add_row(st, name, ms, rate, NAN, false);
            fprintf(st->out, "%-26s %9.3f ms %9.3f TFLOP/s\n", name, ms, rate);
        }
    }
    ctx->matmul_tf32 = 0;
    pr_set_grad_enabled(ctx, was);
}

#ifdef PRISM_HAVE_CUDA
/* the bf16 product: matmul's CUDA forward on a prepared bf16 node (f32
 * accumulation) against the same bare cublasGemmEx in bf16, alternately */
static void bench_matmul_bf16(bench_state *st, pr_ctx *ctx, pr_arena *ar, int64_t n, int reps)
{
    pr_rng r = pr_rng_init(43, 0);
    pr_tensor *a = pr_to(ar, pr_randn(ar, PR_F32, PR_CUDA, PR_DIMS(n, n), &r), PR_BF16, PR_CUDA);
    pr_tensor *b = pr_to(ar, pr_randn(ar, PR_F32, PR_CUDA, PR_DIMS(n, n), &r), PR_BF16, PR_CUDA);
    pr_tensor *c = pr_empty(ar, PR_BF16, PR_CUDA, PR_DIMS(n, n)), *out = pr_empty(ar, PR_BF16, PR_CUDA, PR_DIMS(n, n));
    pr_bench_node m = make_node(ctx, PR_OP_matmul, 2, (pr_tensor *[]){a, b}, out, 0, NULL, 0);
    gemm_arg g = {ctx, a->data, b->data, c->data, (int)n, CUDA_R_16BF};
    double flop = 2.0 * n * n * n;
    double *tb = malloc(sizeof(double) * (size_t)reps), *tl = malloc(sizeof(double) * (size_t)reps);
    pr_bench_time_ms(ctx, PR_CUDA, run_cublas, &g, 2, 1);
    pr_bench_time_ms(ctx, PR_CUDA, pr_bench_run_node, &m, 2, 1);
    for (int i = 0; i < reps; i++) {
        tb[i] = pr_bench_time_ms(ctx, PR_CUDA, run_cublas, &g, 0, 1);
        tl[i] = pr_bench_time_ms(ctx, PR_CUDA, pr_bench_run_node, &m, 0, 1);
    }
    const double bare = pr_bench_median(tb, reps), ms = pr_bench_median(tl, reps);
    const double ref = flop / (bare * 1e-3) / 1e12, rate = flop / (ms * 1e-3) / 1e12;
    add_row(st, "cuBLAS bf16", bare, ref, NAN, false);
    fprintf(st->out, "%-26s %9.3f ms %9.1f TFLOP/s (bare cublasGemmEx, CUDA_R_16BF, CUBLAS_COMPUTE_32F)\n",
            "cuBLAS bf16", bare, ref);
    bool low = st->res->judged && rate < 0.9 * ref;
    char name[48];
    snprintf(name, sizeof name, "matmul %lld^3 bf16", (long long)n);
    add_row(st, name, ms, rate, rate / ref, low);
    fprintf(st->out, "%-26s %9.3f ms %9.1f TFLOP/s %6.1f%% of cuBLAS%s\n", name, ms, rate, 100 * rate / ref,
            low ? "  LOW" : "");
    free(tb);
    free(tl);
}
#endif

void pr_bench_ops_run(FILE *out, pr_device dev, bool quick, int reps, pr_bench_ops_result *res)
{
    bool cuda = dev == PR_CUDA;
    if (reps <= 0) reps = quick ? 1 : cuda ? 20 : 5;
    int64_t R = quick ? 64 : cuda ? 65536 : 4096, D = 1024, n = quick ? 64 : cuda ? 8192 : 1024;
    pr_ctx *ctx = pr_ctx_new(1);
    pr_arena *ar = pr_arena_new("bench", 0);
    *res = (pr_bench_ops_result){.judged = cuda && !quick};   /* the targets apply to the GPU kernels at full size */
    bench_state st = {.out = out, .res = res};
#ifdef PRISM_HAVE_CUDA
    if (cuda) {
        struct cudaDeviceProp p;
        PR_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
        fprintf(out, "prism bench ops: %s, %d SMs, %.0f MiB L2 (cuda)\n", p.name, p.multiProcessorCount,
                p.l2CacheSize / 1048576.0);
    }
#endif
    if (!cuda) fprintf(out, "prism bench ops: cpu\n");
    if (quick) fprintf(out, "--quick: [64,1024] tensors and 64^3 products; the numbers mean nothing\n");
    size_t bytes = (size_t)R * D * 4;
    void *src = pr_device_alloc(dev, bytes), *dst = pr_device_alloc(dev, bytes);
    pr_device_memset0(dev, src, bytes);
    copy_arg c = {dst, src, bytes, dev};
    double ms = pr_bench_time_ms(ctx, dev, run_copy, &c, 3, reps);
    st.copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
    add_row(&st, cuda ? "copy D2D" : "memcpy", ms, st.copy_gbs, 1, false);
    fprintf(out, "%-26s %9.3f ms %9.1f GB/s (read + write; the ceiling below)\n", cuda ? "copy D2D" : "memcpy", ms,
            st.copy_gbs);
    pr_device_free(dev, src, bytes);
    pr_device_free(dev, dst, bytes);
    bench_memory_ops(&st, ctx, ar, dev, R, D, reps, PR_F32);
    if (cuda) bench_memory_ops(&st, ctx, ar, dev, R, D, reps, PR_BF16);
    bench_matmul(&st, ctx, ar, dev, n, quick ? 1 : cuda ? 10 : 3);
#ifdef PRISM_HAVE_CUDA
    if (cuda) bench_matmul_bf16(&st, ctx, ar, n, quick ? 1 : 10);
#endif
    if (!res->judged) fprintf(out, "no target judged: they apply to the GPU kernels at full size only\n");
    else fprintf(out, "%s\n", res->low ? "some kernels are under their target (LOW)" : "every kernel meets its target");
    pr_arena_free(ar);
    pr_ctx_free(ctx);
}
