/* ops/recurrence/recurrence.cu: the CUDA entry points of the recurrence op
 * (node layout in ops/recurrence/recurrence.c), f32 only.
 *
 * iarg[1] = 0 runs the per-token kernels (recurrent.cu); iarg[1] = C > 0 the
 * chunked ones (chunked_*.cu) with chunks of exactly C tokens, C = 32 or 64.
 * Any other C, or a C whose kernels need more shared memory than a block has,
 * is an error naming the limit (rec_decide; pr_recurrence_plan reports it
 * before anything runs): never a silent switch of form or chunk size. The
 * forward and backward decide from the same sizes. Matrix products inside
 * chunks use TF32 tensor cores when ctx->matmul_tf32 is set, plain fp32
 * otherwise.
 *
 * Saved (CUDA path): saved[0] the sequence table (int32, [3N + nchunks];
 * a 1-element placeholder without cu_seqlens); per-token form: saved[1] = r
 * (delta rules); chunked form: saved[1] = hs, and for the delta rules
 * saved[2..5] = R, T', W, R0 (see recurrence_cuda.cuh). Only saved[0] when
 * the node is not recorded (n->recording false).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops/recurrence/recurrence_cuda.cuh"

enum { IN_Q, IN_K, IN_V, IN_G, IN_BETA, IN_KX, IN_VX, IN_H0, IN_CU, IN_N };

/* device limits: a block's opt-in shared memory (0), an SM's (1), the SM count (2) */
static int rec_dev_attr(int which)
{
    static int v[3] = {0, 0, 0};
    static const cudaDeviceAttr attr[3] = {cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                           cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                           cudaDevAttrMultiProcessorCount};
    if (!v[which]) {
        int dev;
        PR_CUDA_CHECK(cudaGetDevice(&dev));
        PR_CUDA_CHECK(cudaDeviceGetAttribute(&v[which], attr[which], dev));
    }
    return v[which];
}

static const float *f32_data(const pr_tensor *t, const char *what)
{
    if (!t) return nullptr;
    PR_CHECK(t->dtype == PR_F32, "recurrence: the CUDA kernels compute in f32; %s is %s (convert it, or run on the CPU)",
             what, pr_dtype_name(t->dtype));
    return (const float *)t->data;
}

static bool al16(const void *p) { return !p || pr_aligned16(p); }

/* the problem of a node, without the sequence tables */
static rec_prob rec_prob_of(pr_ctx *ctx, const pr_node *n)
{
    rec_prob p = {};
    const pr_tensor *q = n->in[IN_Q], *v = n->in[IN_V], *kx = n->in[IN_KX];
    p.q = f32_data(q, "q"), p.k = f32_data(n->in[IN_K], "k"), p.v = f32_data(v, "v");
    p.g = f32_data(n->in[IN_G], "g"), p.beta = f32_data(n->in[IN_BETA], "beta");
    p.kx = f32_data(kx, "kx"), p.vx = f32_data(n->in[IN_VX], "vx"), p.h0 = f32_data(n->in[IN_H0], "h0");
    p.T = (int)q->shape[1], p.H = (int)q->shape[2], p.K = (int)q->shape[3], p.V = (int)v->shape[3];
    p.L = kx ? (int)kx->shape[3] : 0;
    p.N = n->in[IN_CU] ? (int)n->in[IN_CU]->numel - 1 : (int)q->shape[0];
    p.Kp = (p.K + 31) / 32 * 32, p.Vp = (p.V + 31) / 32 * 32;
    p.has_g = p.g != nullptr, p.delta = p.beta != nullptr;
    p.tf32 = ctx->matmul_tf32 ? 1 : 0;
    p.scale = (float)n->farg[0];
    p.vec = p.K % 4 == 0 && p.V % 4 == 0 && al16(p.q) && al16(p.k) && al16(p.v) && al16(p.kx) && al16(p.vx) &&
            al16(p.h0) && al16(n->out[0]->data) && al16(n->out[1]->data);
    return p;
}

/* The form a node runs with, the same in forward and backward: *chunked and
 * the tiles in *pl (p->C set) for chunk > 0. false, with why naming the
 * limit, when the kernels cannot run what was asked. Empty problems take the
 * per-token path, whose launchers return early. */
static bool rec_decide(rec_prob *p, int chunk, bool *chunked, rec_chunk_plan *pl, char *why, size_t why_n)
{
    *chunked = false;
    p->C = 0;
    if (p->K > 256) {
        snprintf(why, why_n, "recurrence: the CUDA kernels support K <= 256, got K = %d", p->K);
        return false;
    }
    if (chunk <= 0) {
        const size_t need = pr_rec_token_smem_min(*p);
        if (need <= (size_t)rec_dev_attr(0)) return true;
        snprintf(why, why_n, "recurrence: the CUDA per-token kernels at K = %d, L = %d need %zu bytes of shared "
                             "memory, more than a block's %d", p->K, p->L, need, rec_dev_attr(0));
        return false;
    }
    if (chunk != 32 && chunk != 64) {
        snprintf(why, why_n, "recurrence: the CUDA chunked kernels run chunks of 32 or 64 tokens, not chunk = %d "
                             "(chunk 0 runs the per-token form)", chunk);
        return false;
    }
    if (p->T == 0 || p->N == 0 || p->H == 0 || p->V == 0) return true;
    p->C = chunk;
    if (pr_rec_chunk_plan(*p, rec_dev_attr(0), rec_dev_attr(1), rec_dev_attr(2), pl)) return *chunked = true;
    snprintf(why, why_n, "recurrence: CUDA chunks of %d tokens at K = %d, V = %d, L = %d need more than a block's "
                         "%d bytes of shared memory; %s", chunk, p->K, p->V, p->L, rec_dev_attr(0),
             chunk == 64 ? "chunk = 32 needs less" : "chunk = 0 runs the per-token form");
    p->C = 0;
    return false;
}

static bool rec_decide_or_die(rec_prob *p, int chunk, rec_chunk_plan *pl)
{
    char why[256];
    bool chunked;
    if (!rec_decide(p, chunk, &chunked, pl, why, sizeof why)) pr_fatal("%s", why);
    return chunked;
}

/* "fwd ...; bwd ..." of a decided plan */
static void rec_plan_text(const rec_prob &p, bool chunked, const rec_chunk_plan &pl, char *buf, size_t n)
{
    if (!chunked) {
        snprintf(buf, n, "fwd tok_fwd; bwd tok_rev%s, tok_sum_slices", p.delta ? ", tok_dq" : " (tok_dq for dq)");
        return;
    }
    int k = snprintf(buf, n, "fwd ");
    if (p.delta) k += snprintf(buf + k, n - k, "prep(bv %d) ", pl.bv_prep);
    k += snprintf(buf + k, n - k, "state(bv %d) scores(bv %d); bwd dlocal(bv %d) dstate(bv %d) grad(bk %d, bv %d) ",
                  pl.bv_state, pl.bv_out, pl.bv_dloc, pl.bv_dstate, pl.bk_grad, pl.bv_grad);
    if (p.delta) snprintf(buf + k, n - k, "wy(bv %d)", pl.bv_wy);
    else snprintf(buf + k, n - k, "%s", p.has_g ? "dg" : "(no dg)");
}

extern "C" bool pr_recurrence_plan_cuda(const pr_recurrence_opts *opt, int64_t N, int64_t T, int64_t H, int64_t K,
                                        int64_t V, int64_t L, pr_rec_plan *plan, char *why, size_t why_n)
{
    if (!pr_cuda_available()) {
        snprintf(why, why_n, "recurrence: no CUDA device to plan for");
        return false;
    }
    rec_prob p = {};
    p.N = (int)N, p.T = (int)T, p.H = (int)H, p.K = (int)K, p.V = (int)V;
    p.L = pr_rule_has_extra(opt->rule) ? (int)L : 0;
    p.Kp = (p.K + 31) / 32 * 32, p.Vp = (p.V + 31) / 32 * 32;
    p.has_g = pr_rule_has_g(opt->rule), p.delta = pr_rule_has_beta(opt->rule);
    rec_chunk_plan pl = {};
    bool chunked;
    if (!rec_decide(&p, opt->chunk, &chunked, &pl, why, why_n)) return false;
    plan->device = PR_CUDA;
    plan->chunk = chunked ? p.C : 0;
    rec_plan_text(p, chunked, pl, plan->kernels, sizeof plan->kernels);
    return true;
}

/* the sequence table [bos[N], len[N], cbase[N], cseq[nchunks]] from cu_seqlens,
 * or nullptr without it; fills p.seq, p.cseq, p.ncs, p.nchunks */
static pr_tensor *rec_tables(pr_ctx *ctx, const pr_node *n, rec_prob *p, const pr_tensor *saved)
{
    const int C = p->C > 0 ? p->C : 1;
    const pr_tensor *cu = n->in[IN_CU];
    if (!cu) {
        p->ncs = (p->T + C - 1) / C;
        p->nchunks = p->N * p->ncs;
        return nullptr;
    }
    const int N = p->N;
    double *off = (double *)malloc(sizeof(double) * (size_t)(N + 1));
    PR_CHECK(off, "recurrence: out of host memory");
    pr_to_host_f64(cu, off);
    int nchunks = 0;
    for (int s = 0; s < N; s++) nchunks += ((int)(off[s + 1] - off[s]) + C - 1) / C;
    pr_tensor *tab = (pr_tensor *)saved;
    if (!tab) {
        int *h = (int *)malloc(sizeof(int) * (size_t)(3 * N + nchunks + 1));
        PR_CHECK(h, "recurrence: out of host memory");
        for (int s = 0, c = 0; s < N; s++) {
            const int bos = (int)off[s], len = (int)(off[s + 1] - off[s]);
            h[s] = bos, h[N + s] = len, h[2 * N + s] = c;
            for (int i = 0; i < (len + C - 1) / C; i++) h[3 * N + c++] = s;
        }
        const int64_t shp[1] = {3 * N + nchunks + 1};
        tab = pr_op_output(ctx, PR_I32, PR_CUDA, 1, shp);
        pr_device_memcpy(tab->data, PR_CUDA, h, PR_CPU, sizeof(int) * (size_t)(3 * N + nchunks + 1));
        free(h);
    }
    free(off);
    p->seq = (const int *)tab->data;
    p->cseq = p->seq + 3 * N;
    p->nchunks = nchunks;
    return tab;
}

extern "C" void pr_recurrence_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    rec_prob p = rec_prob_of(ctx, n);
    rec_chunk_plan pl;
    const bool chunked = rec_decide_or_die(&p, (int)n->iarg[1], &pl);
    pr_tensor *tab = rec_tables(ctx, n, &p, nullptr);
    const int64_t one[1] = {1};
    n->saved[0] = tab ? tab : n->recording ? pr_op_output(ctx, PR_I32, PR_CUDA, 1, one) : nullptr;
    n->n_saved = n->saved[0] ? 1 : 0;
    float *o = (float *)n->out[0]->data, *ht = (float *)n->out[1]->data;
    if (p.N == 0 || p.H == 0) return;
    if (p.V == 0 || p.K == 0) {
        if (n->out[0]->numel) pr_zero_(n->out[0]);
        return;
    }
    const long long rows = n->in[IN_CU] ? (long long)p.T : (long long)p.N * p.T;
    const cudaStream_t s = pr_cuda_stream(ctx);
    /* Recorded: the residuals live in the step arena for the backward. Not
     * recorded: the per-token form saves nothing, and the chunked form's
     * intermediates (its own kernels read them) are scratch, returned to the
     * cache once the launches are queued (later users queue behind them). */
    float *scratch[PR_MAX_SAVED] = {};
    size_t scratch_n[PR_MAX_SAVED] = {};
    auto saved = [&](int i, long long a, long long b, long long c) {
        if (!n->recording) {
            scratch_n[i] = (size_t)(a * b * c);
            return scratch[i] = rec_scratch(scratch_n[i]);
        }
        const int64_t shp[3] = {a, b, c};
        n->saved[i] = pr_op_output(ctx, PR_F32, PR_CUDA, 3, shp);
        n->n_saved = i + 1;
        return (float *)n->saved[i]->data;
    };
    if (!chunked) {
        float *r = p.delta && n->recording ? saved(1, rows, p.H, p.V) : nullptr;
        pr_rec_token_forward(s, p, o, ht, r);
        return;
    }
    rec_chunk_saved sv = {};
    sv.hs = saved(1, (long long)p.nchunks * p.H, p.K, p.V);
    if (p.delta) {
        sv.R = saved(2, rows, p.H, p.V);
        if (n->recording) sv.Tinv = saved(3, (long long)p.nchunks * p.H, p.C, p.C); /* only the backward reads T' */
        sv.W = saved(4, rows, p.H, p.K);
        sv.R0 = saved(5, rows, p.H, p.V);
    }
    pr_rec_chunk_forward(s, p, pl, sv, o, ht);
    for (int i = 0; i < PR_MAX_SAVED; i++)
        if (scratch[i]) rec_scratch_free(scratch[i], scratch_n[i]);
}

static float *grad_of(const pr_node *n, int i)
{
    pr_tensor *g = pr_in_grad(n, i);
    return g ? (float *)g->data : nullptr;
}

extern "C" void pr_recurrence_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    rec_prob p = rec_prob_of(ctx, n);
    rec_chunk_plan pl;
    const bool chunked = rec_decide_or_die(&p, (int)n->iarg[1], &pl);
    PR_CHECK(n->n_saved >= 1, "recurrence: CUDA backward without the forward's saved tensors");
    rec_tables(ctx, n, &p, n->in[IN_CU] ? n->saved[0] : nullptr);
    if (p.N == 0 || p.H == 0 || p.V == 0 || p.K == 0) return;
    p.dout = f32_data(n->out[0]->grad, "do");
    p.dht = f32_data(n->out[1]->grad, "dht");
    p.vec = p.vec && al16(p.dout) && al16(p.dht);
    rec_grads d = {grad_of(n, IN_Q),  grad_of(n, IN_K),  grad_of(n, IN_V),  grad_of(n, IN_G),
                   grad_of(n, IN_BETA), grad_of(n, IN_KX), grad_of(n, IN_VX), grad_of(n, IN_H0)};
    for (int i = 0; i < IN_CU; i++) {
        const pr_tensor *g = pr_in_grad(n, i);
        p.vec = p.vec && (!g || al16(g->data));
    }
    const cudaStream_t s = pr_cuda_stream(ctx);
    auto sv_ = [&](int i) { return i < n->n_saved ? (float *)n->saved[i]->data : nullptr; };
    if (!chunked) {
        PR_CHECK(!p.delta || n->n_saved >= 2, "recurrence: CUDA backward: the per-token forward saved no residuals");
        pr_rec_token_backward(s, p, d, (const float *)n->out[0]->data, (const float *)n->out[1]->data, sv_(1));
        return;
    }
    PR_CHECK(n->n_saved >= (p.delta ? 6 : 2), "recurrence: CUDA backward: the chunked forward's saved tensors are missing");
    const rec_chunk_saved sv = {sv_(1), sv_(2), sv_(3), sv_(4), sv_(5)};
    pr_rec_chunk_backward(s, p, pl, sv, d);
}
