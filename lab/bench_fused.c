/* lab/bench_fused.c: what `prism bench fused` measures (lab/lab.h): the
 * fused mixer ops at model sizes, forward and backward.
 *
 * attention (causal, H = Hkv = 16, D = Dv = 128) at B=8 T=2048 and B=1
 * T=16384, and at D = Dv = 96 (lm-130m's head dim) at B=8 T=2048, fp32 and
 * TF32 math and bf16 data (the flash kernels): time, achieved TFLOP/s
 * (forward 2 B H T^2 D for the causal half of the two products, backward
 * 2.5 times that) and the device memory peak. The T=16384 case runs first
 * on a fresh allocator, so the peak printed after it is its own; a T x T
 * score buffer would be 16 GiB
 * per head-batch (printed beside it). selective_scan at B=8 T=2048 D=1536
 * N=16 with z, delta_bias and h0: time and the bytes it must move per
 * second. The kernels run on the node recorded by one call of the public
 * op, so the timed region holds only the op's own work. Median of the reps,
 * CUDA events. The command picks the sizes; with --device cpu small ones
 * (B=1 T=256 H=4 D=64; scan T=512 D=64) to exercise the path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "ops/ops.h"

/* median ms of reps runs of the node's kernel after one warm-up */
static double time_node(pr_bench_node *a, int reps)
{
    return pr_bench_time_ms(a->ctx, a->n.in[0]->device, pr_bench_run_node, a, 1, reps);
}

/* the last node on the tape (the op just called), ready to rerun */
static pr_bench_node last_node(pr_ctx *ctx)
{
    return (pr_bench_node){ctx, ctx->tape[ctx->n_tape - 1], false};
}

/* leaves requiring grad with a zero grad buffer, so the backward has somewhere to write */
static pr_tensor *leaf(pr_arena *ar, pr_device dev, int ndim, const int64_t *shape, pr_rng *r, double lo, double hi)
{
    pr_tensor *t = pr_randu(ar, PR_F32, dev, ndim, shape, r, lo, hi);
    t->requires_grad = true;
    t->grad = pr_zeros(ar, PR_F32, dev, ndim, shape);
    return t;
}

/* a bf16 leaf with the values of t rounded, and its bf16 grad buffer */
static pr_tensor *bf16_leaf(pr_arena *ar, const pr_tensor *t)
{
    pr_tensor *b = pr_to(ar, t, PR_BF16, t->device);
    b->requires_grad = true;
    b->grad = pr_zeros(ar, PR_BF16, t->device, t->ndim, t->shape);
    return b;
}

static void print_peak(FILE *out, pr_device dev)
{
    if (dev != PR_CUDA) return;
    size_t cur, peak;
    pr_device_mem_stats(dev, &cur, &peak);
    fprintf(out, "    device memory: %.1f MiB now, %.1f MiB peak so far\n", cur / 1048576.0, peak / 1048576.0);
}

int pr_bench_attention(FILE *out, pr_device dev, int64_t B, int64_t T, int64_t H, int64_t D, int reps,
                       pr_bench_fused_time t[PR_BENCH_ATT_ROWS])
{
    static const char *const row_names[PR_BENCH_ATT_ROWS] = {"fp32", "tf32", "bf16"};
    pr_ctx *ctx = pr_ctx_new(1);
    pr_arena *ar = pr_arena_new("bench-attn", 0);
    pr_rng r = pr_rng_init(7, 0);
    pr_tensor *in[3] = {leaf(ar, dev, PR_DIMS(B, T, H, D), &r, -1, 1), leaf(ar, dev, PR_DIMS(B, T, H, D), &r, -1, 1),
                        leaf(ar, dev, PR_DIMS(B, T, H, D), &r, -1, 1)};
    const double fwd_flop = 2.0 * B * H * T * T * D;
    fprintf(out, "attention B=%lld T=%lld H=%lld D=%lld (a T x T fp32 score buffer would be %.1f GiB)\n",
            (long long)B, (long long)T, (long long)H, (long long)D, (double)B * H * T * T * 4 / 1073741824.0);
    const int rows = dev == PR_CUDA ? PR_BENCH_ATT_ROWS : 1; /* the CPU computes every dtype in double */
    for (int row = 0; row < rows; row++) {
        const bool bf16 = row >= 2;
        ctx->matmul_tf32 = row == 1;
        pr_tensor *x[3];
        for (int i = 0; i < 3; i++) x[i] = bf16 ? bf16_leaf(ctx->step, in[i]) : in[i];
        pr_tensor *o = pr_attention(ctx, x[0], x[1], x[2], 0, NULL);
        o->grad = pr_to(ctx->step, pr_randu(ctx->step, PR_F32, dev, o->ndim, o->shape, &r, -1, 1), o->dtype, dev);
        pr_bench_node a = last_node(ctx);
        double f = time_node(&a, reps);
        a.backward = true;
        double b = time_node(&a, reps);
        t[row] = (pr_bench_fused_time){f, b, fwd_flop / (f * 1e-3) / 1e12, 2.5 * fwd_flop / (b * 1e-3) / 1e12};
        fprintf(out, "  %s fwd %9.3f ms %7.1f TFLOP/s   bwd %9.3f ms %7.1f TFLOP/s   fwd+bwd %9.3f ms\n",
                row_names[row], f, t[row].fwd_rate, b, t[row].bwd_rate, f + b);
        print_peak(out, dev);
        pr_step_reset(ctx);
    }
    pr_arena_free(ar);
    pr_ctx_free(ctx);
    return rows;
}

void pr_bench_selective_scan(FILE *out, pr_device dev, int64_t B, int64_t T, int64_t D, int64_t N, int reps,
                             pr_bench_fused_time *t)
{
    pr_ctx *ctx = pr_ctx_new(1);
    pr_arena *ar = pr_arena_new("bench-scan", 0);
    pr_rng r = pr_rng_init(8, 0);
    pr_tensor *u = leaf(ar, dev, PR_DIMS(B, T, D), &r, -1, 1), *dl = leaf(ar, dev, PR_DIMS(B, T, D), &r, -3, 0);
    pr_tensor *A = leaf(ar, dev, PR_DIMS(D, N), &r, -2, -0.1), *Bm = leaf(ar, dev, PR_DIMS(B, T, N), &r, -1, 1);
    pr_tensor *Cm = leaf(ar, dev, PR_DIMS(B, T, N), &r, -1, 1), *Dk = leaf(ar, dev, PR_DIMS(D), &r, -1, 1);
    pr_tensor *z = leaf(ar, dev, PR_DIMS(B, T, D), &r, -1, 1), *bias = leaf(ar, dev, PR_DIMS(D), &r, -1, 0);
    pr_tensor *h0 = leaf(ar, dev, PR_DIMS(B, D, N), &r, -1, 1), *ht;
    pr_tensor *y = pr_selective_scan(ctx, u, dl, A, Bm, Cm, Dk, z, bias, h0, NULL, &ht);
    y->grad = pr_randu(ctx->step, PR_F32, dev, y->ndim, y->shape, &r, -1, 1);
    ht->grad = pr_zeros(ctx->step, PR_F32, dev, ht->ndim, ht->shape);
    pr_bench_node a = last_node(ctx);
    double f = time_node(&a, reps);
    a.backward = true;
    double b = time_node(&a, reps);
    /* fewest bytes: fwd reads u, delta, z, B, C and writes y; bwd also reads dy
     * and writes du, ddelta, dz, dB, dC */
    const double btd = 4.0 * B * T * D, btn = 4.0 * B * T * N;
    *t = (pr_bench_fused_time){f, b, (4 * btd + 2 * btn) / (f * 1e-3) / 1e9, (8 * btd + 4 * btn) / (b * 1e-3) / 1e9};
    fprintf(out, "selective_scan B=%lld T=%lld D=%lld N=%lld\n  fwd %9.3f ms %7.1f GB/s   bwd %9.3f ms %7.1f GB/s\n",
            (long long)B, (long long)T, (long long)D, (long long)N, f, t->fwd_rate, b, t->bwd_rate);
    print_peak(out, dev);
    pr_arena_free(ar);
    pr_ctx_free(ctx);
}
