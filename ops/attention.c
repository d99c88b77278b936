/* ops/attention.c: causal softmax attention, CPU reference forward and
 * hand-derived backward, the public entries and the example.
 *
 * One tape node: in q, k, v, cu_seqlens (NULL when absent); out o;
 * farg[0] = scale. On CUDA saved[0] = the row log-sum-exp [B*T, H] the
 * backward recomputes the probabilities from (the CPU recomputes them from
 * scratch). Both dtypes compute in double on the CPU.
 *
 * Backward of one query row i (s_j = scale q_i.k_j, p = softmax(s) over the
 * visible j, o_i = sum_j p_j v_j), given dO_i:
 *   dv_j += p_j dO_i;  dp_j = dO_i . v_j;
 *   ds_j = p_j (dp_j - sum_l p_l dp_l) = p_j (dp_j - dO_i . o_i)
 * (the softmax Jacobian diag(p) - p p^T applied to dp; sum_l p_l dp_l is
 * dO_i . o_i), then dq_i += scale sum_j ds_j k_j and dk_j += scale ds_j q_i.
 */
#include "ops/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu_kit.h"
#include "ops/seqlens.h"

#ifdef PRISM_HAVE_CUDA
void pr_attention_decode_cuda(pr_ctx *ctx, const pr_tensor *q, const pr_tensor *k, const pr_tensor *v,
                              const int64_t *n_valid, double scale, pr_tensor *out);
#endif

typedef struct {
    int64_t B, T, H, Hkv, D, Dv, group;
    double scale;
} att_dims;

static att_dims att_dims_of(const pr_tensor *q, const pr_tensor *k, const pr_tensor *v, double scale)
{
    att_dims d = {q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3], v->shape[3], 0, scale};
    d.group = d.H / d.Hkv;
    return d;
}

/* One query row against n keys: kr, vr point at key 0's row of its kv head
 * (row strides ks, vs); p[n] receives the probabilities, o[Dv] the output. */
static void attend_row(const att_dims *d, const double *qi, const double *kr, int64_t ks, const double *vr, int64_t vs,
                       int64_t n, double *p, double *o)
{
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) {
        p[j] = d->scale * kit_dot(qi, kr + j * ks, d->D);
        if (p[j] > mx) mx = p[j];   /* fmax's result, NaN skipped, without its libm call */
    }
    for (int64_t j = 0; j < n; j++) sum += (p[j] = exp(p[j] - mx));
    memset(o, 0, (size_t)d->Dv * sizeof(double));
    for (int64_t j = 0; j < n; j++) {
        p[j] /= sum;
        for (int64_t c = 0; c < d->Dv; c++) o[c] += p[j] * vr[j * vs + c];
    }
}

/* row offsets: token row r (over B*T) of head h / kv head hk */
#define QOFF(d, r, h) (((r) * (d)->H + (h)) * (d)->D)
#define KOFF(d, r, hk) (((r) * (d)->Hkv + (hk)) * (d)->D)
#define VOFF(d, r, hk) (((r) * (d)->Hkv + (hk)) * (d)->Dv)
#define OOFF(d, r, h) (((r) * (d)->H + (h)) * (d)->Dv)

void pr_attention_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    att_dims d = att_dims_of(n->in[0], n->in[1], n->in[2], n->farg[0]);
    int64_t *seq, N = pr_seqlens_read("attention", n->in[3], d.B, d.T, &seq);
    bool own[3];
    double *in[3];
    kit_inputs_f64(n, 3, in, own);
    const double *q = in[0], *k = in[1], *v = in[2];
    double *o = kit_zalloc(d.B * d.T * d.H * d.Dv), *p = kit_zalloc(d.T);
    for (int64_t s = 0; s < N; s++)
        for (int64_t r = seq[s]; r < seq[s + 1]; r++)
            for (int64_t h = 0; h < d.H; h++) {
                int64_t hk = h / d.group;
                attend_row(&d, q + QOFF(&d, r, h), k + KOFF(&d, seq[s], hk), d.Hkv * d.D, v + VOFF(&d, seq[s], hk),
                           d.Hkv * d.Dv, r - seq[s] + 1, p, o + OOFF(&d, r, h));
            }
    kit_store(n->out[0], o, false);
    free(o), free(p), free(seq);
    kit_free_owned(in, own, 3);
}

/* the backward of one query row (see the top of the file); p[n] and o[Dv]
 * come from attend_row, g is dO_i, dp[n] scratch */
static void attend_row_back(const att_dims *d, const double *qi, const double *kr, const double *vr, int64_t n,
                            const double *p, const double *o, const double *g, double *dp, double *dqi, double *dkr,
                            double *dvr)
{
    const int64_t ks = d->Hkv * d->D, vs = d->Hkv * d->Dv;
    double Di = kit_dot(g, o, d->Dv);
    for (int64_t j = 0; j < n; j++) {
        dp[j] = kit_dot(g, vr + j * vs, d->Dv);
        for (int64_t c = 0; c < d->Dv; c++) dvr[j * vs + c] += p[j] * g[c];
        double ds = d->scale * p[j] * (dp[j] - Di);
        for (int64_t c = 0; c < d->D; c++) {
            dqi[c] += ds * kr[j * ks + c];
            dkr[j * ks + c] += ds * qi[c];
        }
    }
}

void pr_attention_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    att_dims d = att_dims_of(n->in[0], n->in[1], n->in[2], n->farg[0]);
    int64_t *seq, N = pr_seqlens_read("attention", n->in[3], d.B, d.T, &seq);
    bool own[4];
    double *in[4];
    kit_inputs_f64(n, 3, in, own);
    kit_out_grads_f64(n, 1, in + 3, own + 3);
    const double *q = in[0], *k = in[1], *v = in[2], *g = in[3];
    double *dq = kit_zalloc(n->in[0]->numel), *dk = kit_zalloc(n->in[1]->numel), *dv = kit_zalloc(n->in[2]->numel);
    double *p = kit_zalloc(d.T), *dp = kit_zalloc(d.T), *o = kit_zalloc(d.Dv);
    for (int64_t s = 0; s < N; s++)
        for (int64_t r = seq[s]; r < seq[s + 1]; r++)
            for (int64_t h = 0; h < d.H; h++) {
                int64_t hk = h / d.group, nk = r - seq[s] + 1;
                const double *kr = k + KOFF(&d, seq[s], hk), *vr = v + VOFF(&d, seq[s], hk);
                attend_row(&d, q + QOFF(&d, r, h), kr, d.Hkv * d.D, vr, d.Hkv * d.Dv, nk, p, o);
                attend_row_back(&d, q + QOFF(&d, r, h), kr, vr, nk, p, o, g + OOFF(&d, r, h), dp,
                                dq + QOFF(&d, r, h), dk + KOFF(&d, seq[s], hk), dv + VOFF(&d, seq[s], hk));
            }
    kit_add_grads(n, (double *[3]){dq, dk, dv}, 3);
    free(p), free(dp), free(o), free(seq);
    kit_free_owned(in, own, 4);
}

/* ---- the public entries --------------------------------------------------------- */

/* q, k, v: float, one dtype and device, 4-D, matching B, D and Hkv; T of k, v
 * given by kv_T (-1: any); returns the dims */
static att_dims att_check(const char *op, pr_tensor *q, pr_tensor *k, pr_tensor *v, double scale, int64_t kv_T)
{
    kit_check_inputs(op, (pr_tensor *[3]){q, k, v}, (const char *[3]){"q", "k", "v"}, 3, 0);
    PR_CHECK(q->ndim == 4, "%s: q must be [B,T,H,D], got %d dims", op, q->ndim);
    PR_CHECK(k->ndim == 4, "%s: k must be [B,T,Hkv,D], got %d dims", op, k->ndim);
    PR_CHECK(v->ndim == 4, "%s: v must be [B,T,Hkv,Dv], got %d dims", op, v->ndim);
    const int64_t B = q->shape[0], H = q->shape[2], D = q->shape[3], Hkv = k->shape[2];
    PR_CHECK(B > 0 && q->shape[1] > 0 && H > 0 && D > 0, "%s: q has an empty dim", op);
    PR_CHECK(Hkv > 0 && H % Hkv == 0, "%s: H=%lld must be a multiple of k's Hkv=%lld", op, (long long)H,
             (long long)Hkv);
    kit_check_shape(op, k, "k", 4, (const int64_t[]){B, kv_T, Hkv, D});
    kit_check_shape(op, v, "v", 4, (const int64_t[]){B, k->shape[1], Hkv, -1});
    PR_CHECK(v->shape[3] > 0 && k->shape[1] > 0, "%s: k or v has an empty dim", op);
    PR_CHECK(scale >= 0 && isfinite(scale), "%s: scale must be finite and >= 0 (0: D^-1/2), got %g", op, scale);
    return att_dims_of(q, k, v, scale != 0 ? scale : 1 / sqrt((double)D));
}

pr_tensor *pr_attention(pr_ctx *ctx, pr_tensor *q, pr_tensor *k, pr_tensor *v, double scale, pr_tensor *cu_seqlens)
{
    PR_CHECK(q && k && v, "attention: q, k and v are required");
    q = pr_autocast(ctx, q, PR_BF16), k = pr_autocast(ctx, k, PR_BF16), v = pr_autocast(ctx, v, PR_BF16);
    att_dims d = att_check("attention", q, k, v, scale, q->shape[1]);
    if (cu_seqlens) {
        int64_t *seq;
        pr_seqlens_read("attention", cu_seqlens, d.B, d.T, &seq);
        free(seq);
        PR_CHECK(cu_seqlens->device == q->device, "attention: cu_seqlens is on %s, q on %s",
                 pr_device_name(cu_seqlens->device), pr_device_name(q->device));
    }
    pr_tensor *in[4] = {q, k, v, cu_seqlens};
    pr_node n = pr_node_init(PR_OP_attention, 4, in);
    n.farg[0] = d.scale;
    n.n_out = 1;
    n.out[0] = pr_op_output(ctx, q->dtype, q->device, PR_DIMS(d.B, d.T, d.H, d.Dv));
    bool record = false;
    for (int i = 0; i < 3; i++) record |= ctx->grad_enabled && in[i]->requires_grad;
    if (record && q->device != PR_CPU) {
        n.n_saved = 1;
        n.saved[0] = pr_empty(ctx->step, PR_F32, q->device, PR_DIMS(d.B * d.T, d.H));
    }
    return pr_op_apply(ctx, &n);
}

static void decode_cpu(const att_dims *d, const pr_tensor *qt, const pr_tensor *kt, const pr_tensor *vt,
                       const int64_t *nv, pr_tensor *out)
{
    bool own[3];
    double *in[3] = {kit_as_f64(qt, &own[0]), kit_as_f64(kt, &own[1]), kit_as_f64(vt, &own[2])};
    const double *q = in[0], *k = in[1], *v = in[2];
    const int64_t Tc = kt->shape[1];
    double *o = kit_zalloc(out->numel), *p = kit_zalloc(Tc);
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++) {
            int64_t hk = h / d->group;
            attend_row(d, q + QOFF(d, b, h), k + KOFF(d, b * Tc, hk), d->Hkv * d->D, v + VOFF(d, b * Tc, hk),
                       d->Hkv * d->Dv, nv ? nv[b] : Tc, p, o + OOFF(d, b, h));
        }
    kit_store(out, o, false);
    free(o), free(p);
    kit_free_owned(in, own, 3);
}

pr_tensor *pr_attention_decode(pr_ctx *ctx, pr_tensor *q, pr_tensor *k_cache, pr_tensor *v_cache,
                               const int64_t *n_valid, double scale)
{
    PR_CHECK(q && k_cache && v_cache, "attention_decode: q, k_cache and v_cache are required");
    att_dims d = att_check("attention_decode", q, k_cache, v_cache, scale, -1);
    PR_CHECK(d.T == 1, "attention_decode: q must be [B,1,H,D] (one new token), got T=%lld", (long long)d.T);
    const int64_t Tc = k_cache->shape[1];
    for (int64_t b = 0; n_valid && b < d.B; b++)
        PR_CHECK(n_valid[b] >= 1 && n_valid[b] <= Tc, "attention_decode: n_valid[%lld]=%lld must be in [1, Tc=%lld]",
                 (long long)b, (long long)n_valid[b], (long long)Tc);
    if (q->device == PR_CPU) {
        pr_tensor *out = pr_op_output(ctx, q->dtype, q->device, PR_DIMS(d.B, 1, d.H, d.Dv));
        decode_cpu(&d, q, k_cache, v_cache, n_valid, out);
        return out;
    }
#ifdef PRISM_HAVE_CUDA
    PR_CHECK(d.D <= 128 && d.Dv <= 128, "attention_decode: CUDA supports D, Dv <= 128 (got %lld, %lld)",
             (long long)d.D, (long long)d.Dv);
    if (q->dtype != PR_F32) {   /* bf16 (autocast's caches): the CUDA kernels are f32; decoding is not on the tape */
        pr_tensor *o32 = pr_op_output(ctx, PR_F32, q->device, PR_DIMS(d.B, 1, d.H, d.Dv));
        pr_attention_decode_cuda(ctx, pr_to(ctx->step, q, PR_F32, q->device), pr_to(ctx->step, k_cache, PR_F32, q->device),
                                 pr_to(ctx->step, v_cache, PR_F32, q->device), n_valid, d.scale, o32);
        return pr_to(ctx->step, o32, q->dtype, q->device);
    }
    pr_tensor *out = pr_op_output(ctx, q->dtype, q->device, PR_DIMS(d.B, 1, d.H, d.Dv));
    pr_attention_decode_cuda(ctx, q, k_cache, v_cache, n_valid, d.scale, out);
    return out;
#else
    pr_fatal("attention_decode: built without CUDA");
#endif
}

/* ---- example: B=2, T=7, H=4 reading Hkv=2, D=5, Dv=3 (odd, not a tile) ------------ */

static pr_tensor *att_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_attention(ctx, in[0], in[1], in[2], ex->farg[0], NULL);
}

void pr_attention_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    static const char *names[3] = {"q", "k", "v"};
    ex->n_in = 3;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(2, 7, 4, 5), -1, 1);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(2, 7, 2, 5), -1, 1);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(2, 7, 2, 3), -1, 1);
    for (int i = 0; i < 3; i++) ex->in[i]->name = names[i];
    ex->farg[0] = 0.7;
    ex->apply = att_apply;
}
