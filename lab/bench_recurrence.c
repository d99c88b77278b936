/* lab/bench_recurrence.c: what `prism bench recurrence` measures (lab/lab.h):
 * the recurrence kernels' speed, per rule and form, forward and
 * forward+backward, on the GPU, and the CPU's reference forms.
 *
 * Sizes: B=8 T=2048 H=16 K=V=128 and B=2 T=8192 H=16 K=V=128 (prism_core with
 * one extra write, PRISM's paper form at L=2; --extras N), f32 data. The per-token (recurrent) form and the chunked form (C=64,
 * TF32 tensor-core products; --fp32 adds the fp32-math run) are timed in the
 * same run, so speedups are ratios of same-run numbers. Achieved TFLOP/s
 * counts the matrix products of the chunked algorithm (ops/recurrence/
 * chunked_*.cu) and of TTT-Linear's mini-batches (ttt_macs), 2 flops per
 * multiply-add, against a bare cuBLAS TF32 GEMM of
 * 8192^3 measured here. Timing: CUDA events around the op's forward and its
 * CUDA backward called on the tape's node (upstream gradients prepared
 * outside), 2 warm-up runs, median of --reps runs (default 5). With the
 * per-token form on, each chunked run is also checked against it: "err" is
 * the worst over o, ht and every gradient of max|diff| / max|per-token|
 * ("!" past 1e-2 with TF32, 1e-4 with fp32 products).
 * Under every timed form: its plan (pr_recurrence_plan: form, chunk size,
 * kernels and tiles; a plan the device refuses is printed and not run) and
 * the step memory of one forward not recorded (no-grad) and recorded: the
 * bytes the step arena keeps after it (a layer's share until the step ends)
 * and, on the GPU, the allocator's peak during it (scratch included).
 * The chunked form runs chunks of 64 tokens (prism_core too since its
 * extras run apart as wgmma there, its fastest form), unless --chunks says
 * otherwise.
 * bf16 (on the GPU by default beside f32; --dtype picks one): q, k, v,
 * beta, kx, vx, o and do in bf16 (g, h0, ht, dht f32), tensor cores on (the
 * chunked and mini-batch products then run as bf16 mma), one row under each
 * chunked TF32 row. Every chunked row also gives "x fla", its
 * f+b time over flash-linear-attention's bf16 figure for the rule and size
 * (issue 13's table, one H200 run), and GB/s: the bytes a forward+backward
 * must move at least (fb_bytes) over the f+b time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/lab.h"
#include "ops/ops.h"
#include "ops/recurrence/recurrence.h"
#ifdef PRISM_HAVE_CUDA
#include "ops/cuda/ops_cuda.h"
#endif

/* ---- the CPU: the reference forms at B=1 T=2048 H=4 K=V=64 (prism_core: --extras) ---- */




static void print_seconds(double s)
{
    if (isinf(s)) printf(" %9s", "-");
    else printf(" %9.4f", s);
}

static double mb(size_t bytes) { return (double)bytes / 1e6; }

/* the step arena's growth in a forward; grad mode as given, restored after */
static size_t forward_step_bytes(pr_ctx *ctx, bool grad, const pr_recurrence_opts *opt, const pr_recurrence_inputs *in)
{
    const bool prev = pr_set_grad_enabled(ctx, grad);
    const size_t u0 = pr_arena_used(ctx->step);
    pr_recurrence(ctx, opt, in->q, in->k, in->v, in->g, in->beta, in->kx, in->vx, in->h0, NULL, NULL);
    const size_t used = pr_arena_used(ctx->step) - u0;
    pr_set_grad_enabled(ctx, prev);
    return used;
}

/* prism_core's extra writes: --extras, else one (PRISM's paper form at L =
 * 2: its first refinement step is the core's write, the second the extra) */
static int64_t bench_extras(const pr_bench_rec_opts *o) { return o->extras > 0 ? o->extras : 1; }

int pr_bench_recurrence_cpu(const pr_bench_rec_opts *o, pr_bench_rec_cpu_row *rows)
{
    const int64_t B = 1, T = o->cpu_T > 0 ? o->cpu_T : 2048, H = 4, K = 64, V = 64, L = bench_extras(o);
    const int chunk = (int)o->chunks[0];
    const pr_dtype dt = o->dt;
    pr_ctx *ctx = pr_ctx_new(0);
    printf("B=%lld T=%lld H=%lld K=%lld V=%lld (prism_core: %lld extra write%s), cpu %s, chunk %d; seconds, best of %d;\n"
           "step memory of one forward (MB the step arena holds after it), no-grad / recorded\n",
           (long long)B, (long long)T, (long long)H, (long long)K, (long long)V, (long long)L, L == 1 ? "" : "s",
           pr_dtype_name(dt), chunk,
           o->reps);
    printf("%-11s %9s %9s %9s %9s %15s %15s\n", "rule", "tok fwd", "tok bwd", "chk fwd", "chk bwd", "tok MB ng/rec",
           "chk MB ng/rec");
    for (int r = 0; r < PR_NRULES; r++) {
        if (!(o->rules & 1u << r)) continue;
        double best[2][2] = {{INFINITY, INFINITY}, {INFINITY, INFINITY}};
        size_t mem[2][2] = {{0, 0}, {0, 0}};
        for (int rep = -o->warm; rep < o->reps; rep++)
            for (int f = o->no_token; f < 2; f++) {
                pr_rng rng = pr_rng_init(1, 0);
                pr_recurrence_inputs in = pr_recurrence_random(ctx, &rng, dt, (pr_rule)r, B, T, H, K, V, L, true);
                pr_recurrence_opts opt = {.rule = (pr_rule)r, .chunk = f ? chunk : 0};
                if (rep == 0) {
                    mem[f][0] = forward_step_bytes(ctx, false, &opt, &in);
                    mem[f][1] = forward_step_bytes(ctx, true, &opt, &in);
                }
                pr_tensor *dout = pr_full(ctx->step, dt, PR_CPU, PR_DIMS(B, T, H, V), 1.0);
                double t0 = pr_now_s();
                pr_tensor *out = pr_recurrence(ctx, &opt, in.q, in.k, in.v, in.g, in.beta, in.kx, in.vx, in.h0, NULL, NULL);
                double t1 = pr_now_s();
                pr_backward_with(ctx, out, dout);
                double t2 = pr_now_s();
                if (rep >= 0) {
                    best[f][0] = fmin(best[f][0], t1 - t0);
                    best[f][1] = fmin(best[f][1], t2 - t1);
                }
                pr_step_reset(ctx);
            }
        if (rows) {
            pr_bench_rec_cpu_row *row = &rows[r];
            row->ran = true;
            for (int k = 0; k < 4; k++) row->seconds[k] = best[k / 2][k % 2], row->step_bytes[k] = mem[k / 2][k % 2];
        }
        printf("%-11s", pr_rule_name((pr_rule)r));
        for (int k = 0; k < 4; k++) print_seconds(best[k / 2][k % 2]);
        printf(" %7.1f/%-7.1f %7.1f/%-7.1f\n", mb(mem[0][0]), mb(mem[0][1]), mb(mem[1][0]), mb(mem[1][1]));
    }
    /* the CPU's plan depends on the rule only through a per-key decay's chunked form (gla) */
    for (int f = 0; f < 3; f++) {
        const pr_recurrence_opts opt = {.rule = f == 2 ? PR_RULE_GLA : PR_RULE_PRISM_CORE, .chunk = f ? chunk : 0};
        if (f == 2 && !(o->rules & 1u << PR_RULE_GLA)) continue;
        pr_rec_plan plan;
        char why[256], line[640];
        if (pr_recurrence_plan(&opt, PR_CPU, B, T, H, K, V, L, &plan, why, sizeof why))
            pr_rec_plan_format(&plan, line, sizeof line), printf("plan: %s\n", line);
        else
            printf("plan: %s\n", why);
    }
    pr_ctx_free(ctx);
    return 0;
}

#ifdef PRISM_HAVE_CUDA
/* the run's forcing fields (--force, --ttt-bwd), set once by bench_gpu and
 * read by every form's options */
static pr_rec_force bench_force;
static pr_ttt_bwd bench_ttt_bwd;

typedef struct {
    int64_t B, T, H, K, V, L;
} bench_size;

/* multiply-adds of the chunked algorithm per (chunk, head), forward and backward */
static void chunk_macs(pr_rule r, const bench_size *s, int C, double *fwd, double *bwd)
{
    const double K = (double)s->K, V = (double)s->V, L = pr_rule_has_extra(r) ? (double)s->L : 0, c = C;
    const double CL = c * L, NA = c + CL;
    const bool delta = pr_rule_has_beta(r);
    double f = 0, b = 0;
    if (delta) f += c * c * K + c * CL * K + c * K * c + c * V * CL + c * V * c; /* prep */
    f += (delta ? c * V * K : 0) + K * V * NA;                                 /* state */
    f += c * NA * K + c * V * K + c * V * NA;                                  /* scores */
    b += c * NA * K + NA * V * c;                                              /* dlocal */
    b += NA * V * K + K * V * c + (delta ? K * V * c : 0);                     /* dstate */
    b += c * K * V + c * NA * V + NA * K * V + (delta ? c * K * V : 0) + c * K * NA + NA * K * c; /* grad */
    if (delta)
        b += c * CL * K + 3 * c * V * c + 2 * c * CL * V + 4 * c * K * c + c * K * CL + CL * K * c; /* wy */
    *fwd = f, *bwd = b;
}

typedef struct {
    double fwd, fb; /* median ms */
} bench_times;

/* a recurrence form on its inputs (a pr_bench_fwd_fn) */
typedef struct {
    pr_recurrence_opts opt;
    pr_tensor *const *x;
} rule_run;

static pr_node *rule_apply(pr_ctx *ctx, void *arg)
{
    const rule_run *r = arg;
    pr_tensor *ht, *const *x = r->x;
    pr_recurrence(ctx, &r->opt, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], NULL, &ht);
    return &ctx->tape[ctx->n_tape - 1];
}

/* forward, then the CUDA backward on the tape's node; medians over reps */
static bench_times time_rule(pr_ctx *ctx, pr_rule r, int chunk, pr_tensor *const *x, pr_tensor *dout, pr_tensor *dht,
                             int warm, int reps)
{
    rule_run run = {{.rule = r, .chunk = chunk, .force = bench_force}, x};
    pr_tensor *const seeds[2] = {dout, dht};
    bench_times t;
    pr_bench_fused_ms(ctx, rule_apply, &run, seeds, warm, reps, &t.fwd, &t.fb);
    return t;
}

/* one forward+backward of a form; host copies of o, ht and the input grads
 * (out[0], out[1], out[2 + i]); grads zeroed first */
static void run_host(pr_ctx *ctx, pr_rule r, int chunk, pr_tensor *const *x, pr_tensor *dout, pr_tensor *dht,
                     double **out, int64_t *n)
{
    for (int i = 0; i < 8; i++)
        if (x[i]) pr_zero_(x[i]->grad);
    pr_recurrence_opts opt = {.rule = r, .chunk = chunk, .force = bench_force};
    pr_tensor *ht, *o = pr_recurrence(ctx, &opt, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], NULL, &ht);
    pr_node *nd = &ctx->tape[ctx->n_tape - 1];
    nd->out[0]->grad = dout;
    nd->out[1]->grad = dht;
    pr_op(PR_OP_recurrence)->backward_cuda(ctx, nd);
    const pr_tensor *t[10] = {o, ht};
    for (int i = 0; i < 8; i++) t[2 + i] = x[i] ? x[i]->grad : NULL;
    for (int i = 0; i < 10; i++) {
        free(out[i]);
        out[i] = NULL, n[i] = 0;
        if (!t[i]) continue;
        n[i] = t[i]->numel;
        out[i] = malloc(sizeof(double) * (size_t)(n[i] + 1));
        pr_to_host_f64(t[i], out[i]);
    }
    pr_step_reset(ctx);
}

/* worst over o, ht and the grads of max|a - b| / max|b| */
static double worst_rel_err(double *const *a, double *const *b, const int64_t *n)
{
    double w = 0;
    for (int i = 0; i < 10; i++) {
        if (!a[i] || !b[i]) continue;
        double e = 0, m = 0;
        for (int64_t j = 0; j < n[i]; j++) {
            const double d = fabs(a[i][j] - b[i][j]);
            e = isnan(d) ? INFINITY : fmax(e, d);
            m = fmax(m, fabs(b[i][j]));
        }
        w = fmax(w, m > 0 ? e / m : e);
    }
    return w;
}

/* TF32 tensor-core rate of a bare cuBLAS GEMM, n^3, TFLOP/s */
static double tf32_peak(pr_ctx *ctx, pr_arena *ar, int n)
{
    pr_rng r = pr_rng_init(7, 0);
    pr_tensor *a = pr_randn(ar, PR_F32, PR_CUDA, PR_DIMS(n, n), &r), *b = pr_randn(ar, PR_F32, PR_CUDA, PR_DIMS(n, n), &r);
    pr_tensor *c = pr_zeros(ar, PR_F32, PR_CUDA, PR_DIMS(n, n));
    cublasHandle_t h = pr_cublas(ctx);
    const float one = 1.f, zero = 0.f;
    cudaEvent_t e0, e1;
    PR_CUDA_CHECK(cudaEventCreate(&e0));
    PR_CUDA_CHECK(cudaEventCreate(&e1));
    double best[7];
    for (int i = -2; i < 7; i++) {
        PR_CUDA_CHECK(cudaEventRecord(e0, pr_cuda_stream(ctx)));
        PR_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b->data, CUDA_R_32F, n, a->data,
                                     CUDA_R_32F, n, &zero, c->data, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32,
                                     CUBLAS_GEMM_DEFAULT));
        PR_CUDA_CHECK(cudaEventRecord(e1, pr_cuda_stream(ctx)));
        PR_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        PR_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 0) best[i] = ms;
    }
    PR_CUDA_CHECK(cudaEventDestroy(e0));
    PR_CUDA_CHECK(cudaEventDestroy(e1));
    return 2.0 * n * (double)n * n / (pr_bench_median(best, 7) * 1e-3) / 1e12;
}

/* the inputs of every rule at one size, on the GPU, with grads ready */
typedef struct {
    pr_tensor *q, *k, *v, *g, *gk, *beta, *kx, *vx, *h0, *dout, *dht;   /* gk: gla's per-key decay */
    pr_tensor *q16, *k16, *v16, *beta16, *kx16, *vx16, *dout16;   /* bf16 copies */
} bench_inputs;

static pr_tensor *leaf(pr_arena *ar, pr_rng *r, int ndim, const int64_t *shape, int normal, double a, double b)
{
    pr_tensor *t = pr_empty(ar, PR_F32, PR_CUDA, ndim, shape);
    if (normal) pr_rand_normal_(t, r, a, b);
    else pr_rand_uniform_(t, r, a, b);
    t->requires_grad = true;
    t->grad = pr_zeros(ar, PR_F32, PR_CUDA, ndim, shape);
    return t;
}

/* t rounded to bf16 on the GPU; a leaf with its grad ready, as t */
static pr_tensor *bf16_copy(pr_arena *ar, const pr_tensor *t)
{
    pr_tensor *b = pr_empty(ar, PR_BF16, PR_CUDA, t->ndim, t->shape);
    pr_cuda_cast(NULL, b->data, PR_BF16, t->data, PR_F32, t->numel, false);   /* the legacy default stream */
    b->requires_grad = true;
    b->grad = pr_zeros(ar, PR_BF16, PR_CUDA, t->ndim, t->shape);
    return b;
}

static bench_inputs make_inputs(pr_arena *ar, const bench_size *s)
{
    pr_rng r = pr_rng_init(1234, 0);
    bench_inputs x;
    const double sk = 1.0 / sqrt((double)s->K); /* |k| ~ 1, so the delta rules stay contractive */
    x.q = leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->K), 1, 0, sk);
    x.k = leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->K), 1, 0, sk);
    x.v = leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->V), 1, 0, 1);
    x.g = leaf(ar, &r, PR_DIMS(s->B, s->T, s->H), 0, -0.3, -0.01);
    x.gk = leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->K), 0, -0.3, -0.01);
    x.beta = leaf(ar, &r, PR_DIMS(s->B, s->T, s->H), 0, 0.1, 0.9);
    x.kx = leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->L, s->K), 1, 0, sk);
    x.vx = leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->L, s->V), 1, 0, 0.5);
    x.h0 = leaf(ar, &r, PR_DIMS(s->B, s->H, s->K, s->V), 1, 0, 0.5);
    x.dout = pr_empty(ar, PR_F32, PR_CUDA, PR_DIMS(s->B, s->T, s->H, s->V));
    pr_rand_normal_(x.dout, &r, 0, 1);
    x.dht = pr_empty(ar, PR_F32, PR_CUDA, PR_DIMS(s->B, s->H, s->K, s->V));
    pr_rand_normal_(x.dht, &r, 0, 1);
    x.q16 = bf16_copy(ar, x.q), x.k16 = bf16_copy(ar, x.k), x.v16 = bf16_copy(ar, x.v);
    x.beta16 = bf16_copy(ar, x.beta), x.kx16 = bf16_copy(ar, x.kx), x.vx16 = bf16_copy(ar, x.vx);
    x.dout16 = bf16_copy(ar, x.dout);
    x.dout16->requires_grad = false, x.dout16->grad = NULL;
    return x;
}

/* flash-linear-attention's bf16 TTT-Linear (mini-batch 16), forward+backward
 * in ms at size si, as issue 13 measured it in one run with the rules'
 * figures (0: none, --shape) */
static double fla_ttt_ms(int si) { return si == 0 ? 4.53 : si == 1 ? 10.8 : 0; }

/* TTT-Linear at mini-batch mb on its inputs (a pr_bench_fwd_fn) */
typedef struct {
    int mb;
    pr_tensor *const *in;
} ttt_run;

static pr_node *ttt_apply(pr_ctx *ctx, void *arg)
{
    const ttt_run *r = arg;
    const pr_ttt_opts opt = {.mini_batch = r->mb, .bwd = bench_ttt_bwd};
    pr_tensor *const *in = r->in;
    pr_ttt_linear(ctx, &opt, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, NULL);
    return &ctx->tape[ctx->n_tape - 1];
}

/* TTT-Linear's multiply-adds, forward + backward, per (b, h) and mini-batch
 * of m tokens: the kernels' products against the K x K state (Z, Zb and
 * the update forward; Z, Zb, P, the dk, dq and dZ terms and the two state
 * grads backward: 11 m K^2) and between the rows (Attn and cm gz forward;
 * Attn, cb gz, D, cb^T dZb, ED^T q, ED k backward: 8 m^2 K) */
static double ttt_macs(const bench_size *s, int mb)
{
    const double K = (double)s->K, m = mb, nmb = ceil((double)s->T / mb);
    return (11 * m * K * K + 8 * m * m * K) * nmb * (double)(s->B * s->H);
}

/* TTT-Linear at one size: mini-batch 16 (fla's form) on f32 data with TF32
 * and with fp32 products, on bf16 data (q, k, v, eta, o; ops/ttt_linear.h)
 * with tensor cores on (bf16 products), and mini-batch 1 (token by token: the serial baseline),
 * forward and forward + the CUDA backward */
static void bench_ttt(pr_ctx *ctx, pr_arena *ar, const bench_size *s, int si, double peak, int warm, int reps)
{
    pr_rng r = pr_rng_init(99, 0);
    const double sk = 1.0 / sqrt((double)s->K);
    pr_tensor *in[8] = {
        leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->K), 1, 0, sk), leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->K), 1, 0, sk),
        leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, s->K), 1, 0, sk), leaf(ar, &r, PR_DIMS(s->H, s->K), 0, 0.5, 1.5),
        leaf(ar, &r, PR_DIMS(s->H, s->K), 1, 0, 0.1),         leaf(ar, &r, PR_DIMS(s->B, s->T, s->H, 1), 0, 0.001, 0.01),
        leaf(ar, &r, PR_DIMS(s->B, s->H, s->K, s->K), 1, 0, 0.1), leaf(ar, &r, PR_DIMS(s->B, s->H, 1, s->K), 1, 0, 0.1)};
    pr_tensor *dout[3] = {pr_randn(ar, PR_F32, PR_CUDA, PR_DIMS(s->B, s->T, s->H, s->K), &r),
                          pr_randn(ar, PR_F32, PR_CUDA, PR_DIMS(s->B, s->H, s->K, s->K), &r),
                          pr_randn(ar, PR_F32, PR_CUDA, PR_DIMS(s->B, s->H, 1, s->K), &r)};
    pr_tensor *in16[8], *dout16[3] = {bf16_copy(ar, dout[0]), dout[1], dout[2]};
    for (int i = 0; i < 8; i++) in16[i] = i <= 2 || i == 5 ? bf16_copy(ar, in[i]) : in[i];
    const double tokens = (double)s->B * s->T;
    struct { int mb; bool bf16, tf32; const char *form; } runs[4] = {
        {16, false, true, "mb16/tf32"}, {16, false, false, "mb16/fp32"}, {16, true, true, "mb16/bf16"},
        {1, false, false, "minibatch1"}};
    double t16 = 0;
    for (int k = 0; k < 4; k++) {
        ctx->matmul_tf32 = runs[k].tf32;
        ttt_run run = {runs[k].mb, runs[k].bf16 ? in16 : in};
        bench_times t;
        pr_bench_fused_ms(ctx, ttt_apply, &run, runs[k].bf16 ? dout16 : dout, warm, reps, &t.fwd, &t.fb);
        if (k == 0) t16 = t.fb;
        char xf[16] = "-";
        if (runs[k].mb == 16 && fla_ttt_ms(si) > 0) snprintf(xf, sizeof xf, "%.2f", t.fb / fla_ttt_ms(si));
        /* the least bytes: q, k, v read and o written forward; q, k, v, do read and dq, dk, dv written backward */
        const double tflops = 2 * ttt_macs(s, runs[k].mb) / (t.fb * 1e-3) / 1e12;
        const double bytes = 11.0 * tokens * (double)(s->H * s->K) * (runs[k].bf16 ? 2 : 4);
        printf("%-11s %-13s %9.3f %9.3f %10.2f %9.1f %6.1f%% %7.0f %6s %8s %9s\n", "ttt_linear", runs[k].form, t.fwd,
               t.fb, tokens / (t.fb * 1e-3) / 1e6, tflops, 100 * tflops / peak, bytes / (t.fb * 1e-3) / 1e9, xf,
               runs[k].mb == 1 ? "(ref)" : "-", "-");
        if (k == 0) {
            char plan[160];
            pr_ttt_linear_cuda_plan(s->B, s->T, s->H, 16, bench_ttt_bwd, plan, sizeof plan);
            printf("%-11s   plan: %s\n", "", plan);
        }
        if (runs[k].mb == 1) printf("%-11s   mb16/tf32 is %.1fx faster than token by token\n", "", t.fb / t16);
    }
    ctx->matmul_tf32 = 1;
}

/* the plan of a form at size s, printed under its row; false (printed) when the GPU cannot run it */
static bool print_plan(pr_rule r, int chunk, bool tf32, bool bf16, const bench_size *s)
{
    const pr_recurrence_opts opt = {.rule = r, .chunk = chunk, .tf32 = tf32, .bf16 = bf16, .force = bench_force};
    pr_rec_plan plan;
    char why[256], line[640];
    const bool ok = pr_recurrence_plan(&opt, PR_CUDA, s->B, s->T, s->H, s->K, s->V, s->L, &plan, why, sizeof why);
    if (ok) pr_rec_plan_format(&plan, line, sizeof line);
    printf("%-11s   plan: %s\n", ok ? "" : pr_rule_name(r), ok ? line : why);
    return ok;
}

/* one forward not recorded and one recorded: MB the step arena keeps after
 * it, and the device allocator's peak during it above what was live before */
static void print_memory(pr_ctx *ctx, pr_rule r, int chunk, pr_tensor *const *x)
{
    const pr_recurrence_opts opt = {.rule = r, .chunk = chunk, .force = bench_force};
    size_t kept[2], peak[2];
    for (int rec = 0; rec < 2; rec++) {
        const bool prev = pr_set_grad_enabled(ctx, rec);
        pr_cuda_alloc_stats s0, s1;
        pr_device_sync(PR_CUDA);
        pr_cuda_alloc_peak_reset();
        pr_cuda_alloc_stats_get(&s0);
        const size_t u0 = pr_arena_used(ctx->step);
        pr_recurrence(ctx, &opt, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], NULL, NULL);
        pr_device_sync(PR_CUDA);
        pr_cuda_alloc_stats_get(&s1);
        kept[rec] = pr_arena_used(ctx->step) - u0;
        peak[rec] = s1.peak - s0.current;
        pr_set_grad_enabled(ctx, prev);
        pr_step_reset(ctx);
    }
    printf("%-11s   forward step memory, MB kept / peak: no-grad %.1f / %.1f, recorded %.1f / %.1f\n", "",
           mb(kept[0]), mb(peak[0]), mb(kept[1]), mb(peak[1]));
}

/* flash-linear-attention's bf16 forward+backward in ms at size si (0 where
 * it has no such kernel) and issue 13's target at size 1 (0: none, or
 * relative to gdn as prism_core's) */
static double fla_ms(const pr_bench_rec_opts *o, pr_rule r, int si)
{
    static const double gdn[2] = {3.54, 3.53}, delta[2] = {2.62, 2.92}, ssd[2] = {2.61, 2.06};
    if (si > 1) return 0;   /* --shape */
    if (r == PR_RULE_GLA) return si < o->nfla_gla ? o->fla_gla[si] : 0;   /* only as measured in this run */
    return r == PR_RULE_GDN ? gdn[si] : r == PR_RULE_DELTA ? delta[si] : r == PR_RULE_SSD ? ssd[si] : 0;
}
static double target_ms(pr_rule r)
{
    return r == PR_RULE_GDN ? 3.0 : r == PR_RULE_DELTA ? 2.5 : r == PR_RULE_SSD ? 2.0 : r == PR_RULE_LINATTN ? 1.8 : 0;
}

/* the least bytes a forward+backward moves: each input read by the forward
 * and the backward and its grad written (3x), o written and do read (2x),
 * ht written and dht read; data (q, k, v, beta, kx, vx, o) es bytes an
 * element, g and the states 4 */
static double fb_bytes(pr_rule r, const bench_size *s, double es)
{
    const double tok = (double)s->B * s->T * s->H, L = pr_rule_has_extra(r) ? (double)s->L : 0;
    const double data = tok * (2.0 * s->K + s->V) + (pr_rule_has_beta(r) ? tok : 0) + tok * L * (s->K + s->V);
    const double g = pr_rule_has_g(r) ? tok * (pr_rule_g_per_key(r) ? (double)s->K : 1) : 0, state = (double)s->B * s->H * s->K * s->V;
    return es * (3 * data + 2 * tok * s->V) + 4 * (3 * g + 5 * state);
}

/* one row of the table; sp and er may be "-" */
static void print_row(pr_rule r, const char *form, bench_times t, double tokens, double tflops, double peak,
                      double bytes, double fla, const char *sp, const char *er)
{
    char xf[16] = "-", tf[16] = "-", pc[16] = "-";
    if (fla > 0) snprintf(xf, sizeof xf, "%.2f", t.fb / fla);
    if (tflops > 0) snprintf(tf, sizeof tf, "%.1f", tflops), snprintf(pc, sizeof pc, "%.1f%%", 100.0 * tflops / peak);
    printf("%-11s %-13s %9.3f %9.3f %10.2f %9s %7s %7.0f %6s %8s %9s\n", pr_rule_name(r), form, t.fwd, t.fb,
           tokens / (t.fb * 1e-3) / 1e6, tf, pc, bytes / (t.fb * 1e-3) / 1e9, xf, sp, er);
}

int pr_bench_recurrence_cuda(const pr_bench_rec_opts *o)
{
    const int reps = o->reps, warm = o->warm, nch = o->nch, token = !o->no_token;
    bench_force = o->force, bench_ttt_bwd = o->ttt_bwd;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_arena *ar = pr_arena_new("bench-recurrence", 0);
    ctx->matmul_tf32 = 1;
    const double peak = tf32_peak(ctx, ar, 8192);
    pr_arena_reset(ar);
    printf("cuBLAS TF32 GEMM 8192^3: %.1f TFLOP/s (the tensor-core rate of this run)\n", peak);
    const int64_t L = bench_extras(o);
    const bench_size all[3] = {{8, 2048, 16, 128, 128, L},
                               {2, 8192, 16, 128, 128, L},
                               {o->shape[0], o->shape[1], o->shape[2], o->shape[3], o->shape[4], L}};
    for (int si = 0; si < 3; si++) {
        if (!(o->sizes & (1 << si))) continue;
        const bench_size *s = &all[si];
        bench_inputs x = make_inputs(ar, s);
        const double tokens = (double)s->B * s->T;
        printf("\nB=%lld T=%lld H=%lld K=%lld V=%lld (prism_core: %lld extra write%s), median of %d\n", (long long)s->B,
               (long long)s->T, (long long)s->H, (long long)s->K, (long long)s->V, (long long)s->L,
               s->L == 1 ? "" : "s", reps);
        printf("%-11s %-13s %9s %9s %10s %9s %7s %7s %6s %8s %9s\n", "rule", "form", "fwd ms", "f+b ms", "Mtok/s f+b",
               "TFLOP/s", "%tf32", "GB/s", "x fla", "speedup", "err");
        double gdn_fb[2] = {0, 0};   /* gdn's f+b, f32 and bf16 data */
        for (int r = 0; r < PR_NRULES; r++) {
            pr_rule rule = (pr_rule)r;
            if (!(o->rules & 1u << r)) continue;
            pr_tensor *g = !pr_rule_has_g(rule) ? NULL : pr_rule_g_per_key(rule) ? x.gk : x.g;
            pr_tensor *in[8] = {x.q, x.k, x.v, g, pr_rule_has_beta(rule) ? x.beta : NULL,
                                pr_rule_has_extra(rule) ? x.kx : NULL, pr_rule_has_extra(rule) ? x.vx : NULL, x.h0};
            pr_tensor *in16[8] = {x.q16, x.k16, x.v16, in[3], in[4] ? x.beta16 : NULL, in[5] ? x.kx16 : NULL,
                                  in[6] ? x.vx16 : NULL, x.h0};
            bench_times tok = {0, 0};
            double *ref[10] = {0}, *got[10] = {0};
            int64_t nref[10], ngot[10];
            if (token && print_plan(rule, 0, false, false, s)) {
                ctx->matmul_tf32 = 0;
                tok = time_rule(ctx, rule, 0, in, x.dout, x.dht, warm, reps);
                run_host(ctx, rule, 0, in, x.dout, x.dht, ref, nref);
                print_row(rule, "per-token", tok, tokens, 0, peak, fb_bytes(rule, s, 4), 0, "1.00", "(ref)");
                print_memory(ctx, rule, 0, in);
            } else if (token) {
                continue;   /* the per-token form is the reference of the rows below */
            }
            const int nforms = nch ? nch : 1;
            for (int f = 0; f < nforms * (1 + o->fp32); f++) {
                const int C = nch ? (int)o->chunks[f % nch] : 64;
                if (!print_plan(rule, C, f < nforms, false, s)) continue;
                double mf, mb, tf32_fb = 0;   /* this form's f32-data f+b ms, for the bf16 rows */
                chunk_macs(rule, s, C, &mf, &mb);
                const double nck = tokens / C * (double)s->H, flops = 2.0 * (mf + mb) * nck;
                /* f32 data (TF32 or fp32 products), then under a TF32 row the same with bf16 data
                 * (bf 1), and with --bf16-staged again with every bf16 tensor staged (bf 2) */
                for (int bfk = 0; bfk < 2 + o->bf16_staged; bfk++) {
                    const int bf = bfk > 0;
                    if (!(o->gpu_dtypes & (1 << bf)) || (bf && f >= nforms)) continue;
                    pr_tensor *const *xin = bf ? in16 : in;
                    pr_tensor *dout = bf ? x.dout16 : x.dout;
                    ctx->matmul_tf32 = f < nforms;
                    const pr_rec_switch staged_was = bench_force.bf16_staged;
                    if (bfk == 2) bench_force.bf16_staged = PR_REC_ON;
                    if (bf) print_plan(rule, C, true, true, s);
                    bench_times ch = time_rule(ctx, rule, C, xin, dout, x.dht, warm, reps);
                    const double tflops = flops / (ch.fb * 1e-3) / 1e12;
                    char sp[16] = "-", er[16] = "-";
                    if (token) {   /* bf16 against the f32 per-token run: the inputs' rounding counts too */
                        snprintf(sp, sizeof sp, "%.1f", tok.fb / ch.fb);
                        run_host(ctx, rule, C, xin, dout, x.dht, got, ngot);
                        const double e = worst_rel_err(got, ref, nref);
                        snprintf(er, sizeof er, "%.1e%s", e, e <= (bf ? 3e-2 : f < nforms ? 1e-2 : 1e-4) ? "" : "!");
                    }
                    char form[24];
                    snprintf(form, sizeof form, "chunk%d/%s", C, bfk == 2 ? "bf16s" : bf ? "bf16" : f < nforms ? "tf32" : "fp32");
                    print_row(rule, form, ch, tokens, tflops, peak, fb_bytes(rule, s, bf ? 2 : 4), fla_ms(o, rule, si),
                              sp, er);
                    if (f == 0 && bf && si == 0 && rule == PR_RULE_GLA && fla_ms(o, rule, si) > 0)
                        printf("%-11s   target <= 1.00x fla (%.3f ms, this run): %.2fx, %s\n", "", fla_ms(o, rule, si),
                               ch.fb / fla_ms(o, rule, si), ch.fb <= fla_ms(o, rule, si) ? "met" : "missed");
                    if (f < nforms) print_memory(ctx, rule, C, xin);
                    if (f == 0 && bfk < 2 && rule == PR_RULE_GDN) gdn_fb[bf] = ch.fb;
                    if (!bf) tf32_fb = ch.fb;
                    else if (tf32_fb > 0) /* issue 44: bf16 data faster than f32 data with TF32 products */
                        printf("%-11s   bf16 / tf32 f+b = %.2f (target < 1.00)\n", "", ch.fb / tf32_fb);
                    if (f == 0 && si == 0 && target_ms(rule) > 0)
                        printf("%-11s   target <= %.2f ms: %s\n", "", target_ms(rule), ch.fb <= target_ms(rule) ? "met" : "missed");
                    if (f == 0 && bfk < 2 && rule == PR_RULE_PRISM_CORE && gdn_fb[bf] > 0)
                        printf("%-11s   prism_core / gdn = %.2f%s\n", "", ch.fb / gdn_fb[bf],
                               L == 1 ? " (target <= 1.30: the paper form at L = 2)" : "");
                    bench_force.bf16_staged = staged_was;
                }
            }
            for (int i = 0; i < 10; i++) free(ref[i]), free(got[i]);
        }
        if (o->rules & 1u << PR_NRULES) bench_ttt(ctx, ar, s, si, peak, warm, reps);
        pr_bench_ttt2(ctx, ar, s->B, s->T, s->H, warm, reps, o->rules & 2u << PR_NRULES, o->rules & 4u << PR_NRULES);
        pr_arena_reset(ar);
    }
    pr_arena_free(ar);
    pr_ctx_free(ctx);
    return 0;
}
#endif

