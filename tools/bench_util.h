/* tools/bench_util.h: what the benchmarks share: the median time of a
 * function over repetitions (CUDA events on the context's stream for a
 * device run, the wall clock on the CPU) and a prepared op node to rerun. */
#ifndef PR_BENCH_UTIL_H
#define PR_BENCH_UTIL_H

#include "ops/ops.h"

typedef void (*pr_bench_fn)(void *arg);

/* the median of x[0..n) (sorts x) */
double pr_bench_median(double *x, int n);
/* median milliseconds of fn(arg) over reps runs, after warm untimed runs and a sync */
double pr_bench_time_ms(pr_ctx *ctx, pr_device dev, pr_bench_fn fn, void *arg, int warm, int reps);

/* one op's kernel, forward or backward, on a prepared node: nothing allocated, nothing taped */
typedef struct {
    pr_ctx *ctx;
    pr_node n;
    bool backward;
} pr_bench_node;

void pr_bench_run_node(void *arg);   /* arg: a pr_bench_node */

#ifdef PRISM_HAVE_CUDA
/* A fused op's forward: runs the op on arg's inputs and returns its tape node. */
typedef pr_node *(*pr_bench_fwd_fn)(pr_ctx *ctx, void *arg);
/* median ms of the forward, and of the forward plus the op's CUDA backward on
 * that node seeded with dout (one per output), over reps runs after warm
 * untimed ones; CUDA events on the context's stream, the step reset after each */
void pr_bench_fused_ms(pr_ctx *ctx, pr_bench_fwd_fn fwd, void *arg, pr_tensor *const *dout, int warm, int reps,
                       double *fwd_ms, double *fb_ms);
#endif

#endif
