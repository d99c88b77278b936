/* ops/recurrence/recurrence.c: pr_recurrence (shape checks, the tape node)
 * and its CPU forward/backward glue. The math lives in recurrent.c,
 * chunked.c and chunked_gla.c (gla's decays per key or per value), one
 * (sequence, head) pair per call; this file only splits the tensors into
 * those pairs (in parallel with OpenMP when the build has it).
 *
 * Node (the CUDA kernels rely on it): in[0..8] = q,k,v,g,beta,kx,vx,h0,
 * cu_seqlens (NULL when absent); out[0] = o, out[1] = ht; iarg[0] = rule,
 * iarg[1] = chunk (0: per-token form); iarg[2] = g_per_value (gla); iarg[3] =
 * the forcing fields (pr_rec_force_id); farg[0] = scale (resolved).
 * CPU saved[0] (only when the node is recorded): f64 states every `ck`
 * tokens of every (sequence, head)
 * (ck = chunk, or PR_REC_CKPT for the per-token form), pair (n, h) at
 * offset (ckoff[n] * H + h * nckpt(T_n)) * K * V.
 * f32 and bf16 are computed in double: inputs promoted on entry, results
 * (o, ht, the grads) rounded once to their dtypes.
 */
#include "ops/recurrence/recurrence.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef PRISM_HAVE_OPENMP
#include <omp.h>
#endif

#include "ops/cpu_kit.h"
#include "ops/ops.h"
#include "ops/recurrence/recurrence_cpu.h"

enum { IN_Q, IN_K, IN_V, IN_G, IN_BETA, IN_KX, IN_VX, IN_H0, IN_CU, IN_N };

/* the rule table; a row the kernels cannot run stops the build here */
#define PR_RULE(name, NAME, g, beta, extra, per_key)                                                        \
    _Static_assert(!(extra) || (beta), "rule " #name ": extra writes without the delta erase (has_extra "   \
                                       "without has_beta) are not supported: the CUDA chunked backward "   \
                                       "writes dkx and dvx only in the delta rules' wy kernel");          \
    _Static_assert(!(per_key) || ((g) && !(beta) && !(extra)), "rule " #name ": a per-key decay needs "    \
                                       "has_g and runs without the delta erase and extra writes");
#include PR_RULES_DEF
#undef PR_RULE

static const pr_rule_info rule_table[PR_NRULES] = {
#define PR_RULE(name, NAME, g, beta, extra, per_key) [PR_RULE_##NAME] = {#name, g, beta, extra, per_key},
#include PR_RULES_DEF
#undef PR_RULE
};

const pr_rule_info *pr_rule_info_of(pr_rule r)
{
    PR_CHECK(r >= 0 && r < PR_NRULES, "recurrence: unknown rule %d", (int)r);
    return &rule_table[r];
}

const char *pr_rule_name(pr_rule r) { return r >= 0 && r < PR_NRULES ? rule_table[r].name : "?"; }

int pr_rule_from_name(const char *name)
{
    for (int r = 0; r < PR_NRULES; r++)
        if (!strcmp(name, rule_table[r].name)) return r;
    return -1;
}

const char *pr_rec_input_name(pr_rec_input i)
{
    static const char *const names[PR_REC_NIN] = {"q", "k", "v", "g", "beta", "kx", "vx", "h0"};
    PR_CHECK(i >= 0 && i < PR_REC_NIN, "recurrence: unknown input %d", (int)i);
    return names[i];
}

bool pr_rule_takes(pr_rule r, pr_rec_input i)
{
    const pr_rule_info *info = pr_rule_info_of(r);
    switch (i) {
    case PR_REC_G: return info->has_g;
    case PR_REC_BETA: return info->has_beta;
    case PR_REC_KX:
    case PR_REC_VX: return info->has_extra;
    default: return pr_rec_input_name(i) != NULL;   /* q, k, v, h0; fatal when out of range */
    }
}

bool pr_rule_has_g(pr_rule r) { return pr_rule_info_of(r)->has_g; }
bool pr_rule_has_beta(pr_rule r) { return pr_rule_info_of(r)->has_beta; }
bool pr_rule_has_extra(pr_rule r) { return pr_rule_info_of(r)->has_extra; }
bool pr_rule_g_per_key(pr_rule r) { return pr_rule_info_of(r)->g_per_key; }

const char *pr_rule_input_name(pr_rule r, pr_rec_input i)
{
    return i == PR_REC_G && pr_rule_g_per_key(r) ? "gk" : pr_rec_input_name(i);
}

/* ---- sizes and sequences ---------------------------------------------------- */

typedef struct {
    int64_t B, T, H, K, V, L, N;
    int ck;            /* tokens between saved states */
    int chunk;         /* 0: per-token form */
    bool g_per_key;    /* gla: g [B,T,H,K] */
    bool g_per_value;  /* gla with opts.g_per_value: g [B,T,H,V] */
    double scale;
    int64_t *seq;      /* [N+1] flat token offsets (over B*T) of the sequences */
    int64_t *ckoff;    /* [N+1] offsets of the sequences' saved states, in units of H*K*V */
} rec_dims;

/* cu_seqlens as int64 on the host, validated against T: starts at 0, strictly
 * increasing, ends at T. Returns N (the number of sequences); *out is malloc'd. */
static int64_t read_cu_seqlens(const pr_tensor *cu, int64_t T, int64_t **out)
{
    PR_CHECK(cu->dtype == PR_I32 || cu->dtype == PR_I64, "recurrence: cu_seqlens must be int32 or int64, got %s",
             pr_dtype_name(cu->dtype));
    PR_CHECK(cu->ndim == 1 && cu->numel >= 2, "recurrence: cu_seqlens must be 1-D with N+1 >= 2 offsets");
    const int64_t n = cu->numel;
    double *h = malloc((size_t)n * sizeof *h);
    int64_t *s = malloc((size_t)n * sizeof *s);
    PR_CHECK(h && s, "recurrence: out of host memory");
    pr_to_host_f64(cu, h);
    for (int64_t i = 0; i < n; i++) s[i] = (int64_t)h[i];
    free(h);
    const int64_t first = s[0], last = s[n - 1];
    for (int64_t i = 0; i + 1 < n; i++)
        if (s[i + 1] <= s[i]) {
            const long long a = (long long)s[i], b = (long long)s[i + 1];
            free(s);
            pr_fatal("recurrence: cu_seqlens must be strictly increasing (cu_seqlens[%lld]=%lld, "
                     "cu_seqlens[%lld]=%lld)", (long long)i, a, (long long)i + 1, b);
        }
    if (first != 0 || last != T) {
        free(s);
        pr_fatal("recurrence: cu_seqlens must start at 0 and end at T=%lld (got %lld ... %lld)", (long long)T,
                 (long long)first, (long long)last);
    }
    *out = s;
    return n - 1;
}

static rec_dims dims_of(const pr_node *n)
{
    rec_dims d;
    const pr_tensor *q = n->in[IN_Q], *kx = n->in[IN_KX];
    d.B = q->shape[0], d.T = q->shape[1], d.H = q->shape[2], d.K = q->shape[3];
    d.V = n->in[IN_V]->shape[3];
    d.L = kx ? kx->shape[3] : 0;
    d.chunk = (int)n->iarg[1];
    d.ck = d.chunk ? d.chunk : PR_REC_CKPT;
    d.g_per_value = n->iarg[2] != 0;
    d.g_per_key = pr_rule_g_per_key((pr_rule)n->iarg[0]) && !d.g_per_value;
    d.scale = n->farg[0];
    if (n->in[IN_CU]) {
        d.N = read_cu_seqlens(n->in[IN_CU], d.T, &d.seq);
    } else {
        d.N = d.B;
        d.seq = malloc((size_t)(d.N + 1) * sizeof *d.seq);
        PR_CHECK(d.seq, "recurrence: out of host memory");
        for (int64_t b = 0; b <= d.B; b++) d.seq[b] = b * d.T;
    }
    d.ckoff = malloc((size_t)(d.N + 1) * sizeof *d.ckoff);
    PR_CHECK(d.ckoff, "recurrence: out of host memory");
    d.ckoff[0] = 0;
    for (int64_t s = 0; s < d.N; s++) d.ckoff[s + 1] = d.ckoff[s] + pr_rec_nckpt(d.seq[s + 1] - d.seq[s], d.ck);
    return d;
}

static void dims_free(rec_dims *d)
{
    free(d->seq);
    free(d->ckoff);
}

/* ---- double views of tensors -------------------------------------------------- */

/* t's data as double: t's own for f64, else a promoted malloc'd copy
 * (*owned set); zeroed: a zero buffer of t's size instead of its values */
static double *as_f64(const pr_tensor *t, bool zeroed, bool *owned)
{
    *owned = false;
    if (!t) return NULL;
    if (t->dtype == PR_F64) return (double *)t->data;
    size_t n = (size_t)(t->numel ? t->numel : 1);
    double *p = zeroed ? calloc(n, sizeof *p) : malloc(n * sizeof *p);
    PR_CHECK(p, "recurrence: out of host memory");
    if (!zeroed) pr_to_host_f64(t, p);
    *owned = true;
    return p;
}

/* element offsets of pair (sequence s, head h) in each tensor */
typedef struct { int64_t qk, v, g, kx, vx, h0, ckpt; } pair_off;

static pair_off pair_off_of(const rec_dims *d, int64_t s, int64_t h)
{
    const int64_t tok = d->seq[s] * d->H + h, KV = d->K * d->V;
    return (pair_off){
        .qk = tok * d->K, .v = tok * d->V, .g = tok, .kx = tok * d->L * d->K, .vx = tok * d->L * d->V,
        .h0 = (s * d->H + h) * KV,
        .ckpt = (d->ckoff[s] * d->H + h * (d->ckoff[s + 1] - d->ckoff[s])) * KV,
    };
}

/* where g of the pair starts: one log-decay a token, or one per key or value channel */
static int64_t g_off(const rec_dims *d, const pair_off *o) { return d->g_per_key ? o->qk : d->g_per_value ? o->v : o->g; }

/* p + off, NULL stays NULL */
static double *at(double *p, int64_t off) { return p ? p + off : NULL; }

/* the problem of pair (s, h) over the double inputs x[] */
static pr_rec_seq seq_of(const rec_dims *d, double *const *x, int64_t s, int64_t h)
{
    const pair_off o = pair_off_of(d, s, h);
    const int64_t H = d->H, K = d->K, V = d->V, L = x[IN_KX] ? d->L : 0;
    const bool pk = d->g_per_key, pv = d->g_per_value;
    return (pr_rec_seq){
        .T = d->seq[s + 1] - d->seq[s], .K = (int)K, .V = (int)V, .L = (int)L, .scale = d->scale,
        .q = x[IN_Q] + o.qk, .k = x[IN_K] + o.qk, .v = x[IN_V] + o.v,
        .g = at(x[IN_G], g_off(d, &o)), .beta = at(x[IN_BETA], o.g), .kx = at(x[IN_KX], o.kx), .vx = at(x[IN_VX], o.vx),
        .h0 = at(x[IN_H0], o.h0),
        .sk = H * K, .sv = H * V, .sg = pk ? H * K : pv ? H * V : H, .skx = H * L * K, .svx = H * L * V,
        .g_per_key = pk, .g_per_value = pv,
    };
}

/* Whether the loop over (sequence, head) pairs runs on a thread team: small
 * problems (tests, gradcheck) run faster on one thread. While it does, the
 * chunked forms' gemms run on one thread each (pr_blas_serial_enter), or
 * OpenBLAS would start its threads inside every team thread. */
static bool pairs_threaded(const rec_dims *d)
{
#ifdef PRISM_HAVE_OPENMP
    return omp_get_max_threads() > 1 && d->N * d->H > 1 && d->B * d->T * d->H * d->K * d->V >= (1 << 16);
#else
    (void)d;
    return false;
#endif
}

/* ---- forward ----------------------------------------------------------------------- */

void pr_recurrence_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    rec_dims d = dims_of(n);
    double *x[IN_N] = {0};
    bool own[IN_N] = {0}, own_o, own_ht;
    for (int i = 0; i < IN_CU; i++) x[i] = as_f64(n->in[i], false, &own[i]);
    double *o = as_f64(n->out[0], true, &own_o), *ht = as_f64(n->out[1], true, &own_ht);
    const int64_t KV = d.K * d.V, nck = d.ckoff[d.N] * d.H;
    /* the saved states are for the backward only: none when not recorded */
    pr_tensor *ckpt = n->recording ? pr_empty(ctx->step, PR_F64, PR_CPU, PR_DIMS(nck ? nck : 1, d.K, d.V)) : NULL;
    n->saved[0] = ckpt;
    n->n_saved = ckpt ? 1 : 0;
    const int64_t work_n = !d.chunk ? 2 * d.V
                           : d.g_per_key || d.g_per_value ? pr_rec_gla_chunk_work(d.chunk, (int)d.K, (int)d.V)
                                         : pr_rec_chunk_work(d.chunk, (int)d.K, (int)d.V, (int)d.L);

    const bool threaded = pairs_threaded(&d);
    if (threaded) pr_blas_serial_enter();
#ifdef PRISM_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic) if (threaded)
#endif
    for (int64_t p = 0; p < d.N * d.H; p++) {
        const int64_t s = p / d.H, h = p % d.H;
        pr_rec_seq sq = seq_of(&d, x, s, h);
        double *work = malloc((size_t)work_n * sizeof *work);
        PR_CHECK(work, "recurrence: out of host memory");
        const pair_off off = pair_off_of(&d, s, h);
        double *ck = ckpt ? (double *)ckpt->data + off.ckpt : NULL, *o_p = o + off.v;
        if (d.chunk && (d.g_per_key || d.g_per_value))
            pr_rec_gla_forward_chunked(o_p, ht + p * KV, ck, &sq, d.chunk, work);
        else if (d.chunk) pr_rec_forward_chunked(o_p, ht + p * KV, ck, &sq, d.chunk, work);
        else pr_rec_forward_recurrent(o_p, ht + p * KV, ck, &sq, d.ck, work);
        free(work);
    }
    if (threaded) pr_blas_serial_leave();

    if (own_o) kit_store(n->out[0], o, false), free(o);
    if (own_ht) kit_store(n->out[1], ht, false), free(ht);
    for (int i = 0; i < IN_CU; i++)
        if (own[i]) free(x[i]);
    dims_free(&d);
}

/* ---- backward ---------------------------------------------------------------------
 * Reverse time, per pair, from the forward's saved states: recurrent.c for the
 * per-token form (block by block), chunked.c for the chunked form (chunk by
 * chunk). Each has its derivation beside it. */

void pr_recurrence_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    PR_CHECK(n->n_saved == 1, "recurrence: CPU backward without the forward's saved states");
    rec_dims d = dims_of(n);
    double *x[IN_N] = {0}, *dx[IN_N] = {0};
    bool own[IN_N] = {0}, down[IN_N] = {0}, own_do, own_dht;
    for (int i = 0; i < IN_CU; i++) {
        x[i] = as_f64(n->in[i], false, &own[i]);
        pr_tensor *gi = pr_in_grad(n, i);
        dx[i] = as_f64(gi, true, &down[i]);
    }
    double *dout = as_f64(n->out[0]->grad, false, &own_do), *dht = as_f64(n->out[1]->grad, false, &own_dht);
    const int64_t KV = d.K * d.V;
    const int64_t work_n = !d.chunk ? pr_rec_backward_work(d.ck, (int)d.K, (int)d.V, (int)d.L)
                           : d.g_per_key || d.g_per_value ? pr_rec_gla_chunk_work(d.chunk, (int)d.K, (int)d.V)
                                         : pr_rec_chunk_work(d.chunk, (int)d.K, (int)d.V, (int)d.L);
    const double *ckpt = (const double *)n->saved[0]->data;

    const bool threaded = pairs_threaded(&d);
    if (threaded) pr_blas_serial_enter();
#ifdef PRISM_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic) if (threaded)
#endif
    for (int64_t p = 0; p < d.N * d.H; p++) {
        const int64_t s = p / d.H, h = p % d.H;
        pr_rec_seq sq = seq_of(&d, x, s, h);
        const pair_off off = pair_off_of(&d, s, h);
        const pr_rec_grads gr = {
            .dq = at(dx[IN_Q], off.qk), .dk = at(dx[IN_K], off.qk), .dv = at(dx[IN_V], off.v),
            .dg = at(dx[IN_G], g_off(&d, &off)), .dbeta = at(dx[IN_BETA], off.g), .dkx = at(dx[IN_KX], off.kx),
            .dvx = at(dx[IN_VX], off.vx), .dh0 = at(dx[IN_H0], off.h0),
        };
        double *work = malloc((size_t)work_n * sizeof *work);
        PR_CHECK(work, "recurrence: out of host memory");
        if (d.chunk && (d.g_per_key || d.g_per_value))
            pr_rec_gla_backward_chunked(&gr, dout + off.v, at(dht, p * KV), ckpt + off.ckpt, &sq, d.chunk, work);
        else if (d.chunk)
            pr_rec_backward_chunked(&gr, dout + off.v, at(dht, p * KV), ckpt + off.ckpt, &sq, d.chunk, work);
        else pr_rec_backward(&gr, dout + off.v, at(dht, p * KV), ckpt + off.ckpt, &sq, d.ck, work);
        free(work);
    }
    if (threaded) pr_blas_serial_leave();

    for (int i = 0; i < IN_CU; i++) {
        if (down[i]) kit_store(pr_in_grad(n, i), dx[i], true), free(dx[i]);
        if (own[i]) free(x[i]);
    }
    if (own_do) free(dout);
    if (own_dht) free(dht);
    dims_free(&d);
}

/* ---- the public function ------------------------------------------------------------ */

static void check_dims(const char *what, const pr_tensor *t, int ndim, const int64_t *want)
{
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char got[96], exp[96] = "[";
        for (int i = 0; i < ndim; i++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%lld%s", (long long)want[i], i + 1 < ndim ? "," : "]");
        pr_fatal("recurrence: %s has shape %s, expected %s", what, pr_shape_str(t, got, sizeof got), exp);
    }
}

/* the dtype of g, h0 and ht: q's, except that bf16 data keeps them in f32 */
static pr_dtype state_dtype(pr_dtype data) { return data == PR_BF16 ? PR_F32 : data; }

/* t is NULL when unused; else on q's device in dtype want */
static void check_input(const char *rule, const char *what, const pr_tensor *t, bool used, const pr_tensor *q,
                        pr_dtype want)
{
    if (!used) {
        PR_CHECK(!t, "recurrence: rule %s does not use %s; pass NULL", rule, what);
        return;
    }
    PR_CHECK(t, "recurrence: rule %s needs %s", rule, what);
    PR_CHECK(t->dtype == want, "recurrence: dtype mismatch: %s is %s, expected %s (q is %s%s)", what, pr_dtype_name(t->dtype),
             pr_dtype_name(want), pr_dtype_name(q->dtype), q->dtype == PR_BF16 ? ": g and h0 stay f32" : "");
    PR_CHECK(t->device == q->device, "recurrence: %s is on %s, q on %s", what, pr_device_name(t->device),
             pr_device_name(q->device));
}

pr_tensor *pr_recurrence(pr_ctx *ctx, const pr_recurrence_opts *opt, pr_tensor *q, pr_tensor *k, pr_tensor *v,
                         pr_tensor *g, pr_tensor *beta, pr_tensor *kx, pr_tensor *vx, pr_tensor *h0,
                         pr_tensor *cu_seqlens, pr_tensor **ht)
{
    PR_CHECK(opt && opt->rule >= 0 && opt->rule < PR_NRULES, "recurrence: unknown rule %d", opt ? (int)opt->rule : -1);
    PR_CHECK(opt->chunk >= 0, "recurrence: chunk must be >= 0 (0 = per-token form), got %d", opt->chunk);
    char why_pv[160];
    if (!pr_rec_g_per_value_ok(opt, why_pv, sizeof why_pv)) pr_fatal("%s", why_pv);
    const pr_rule r = opt->rule;
    const char *rn = pr_rule_name(r);
    PR_CHECK(q && k && v, "recurrence: q, k and v are required");
    /* autocast: the data in bf16, the log-decays and the state in f32 (what the op takes) */
    q = pr_autocast(ctx, q, PR_BF16), k = pr_autocast(ctx, k, PR_BF16), v = pr_autocast(ctx, v, PR_BF16);
    beta = pr_autocast(ctx, beta, PR_BF16), kx = pr_autocast(ctx, kx, PR_BF16), vx = pr_autocast(ctx, vx, PR_BF16);
    g = pr_autocast(ctx, g, PR_F32), h0 = pr_autocast(ctx, h0, PR_F32);
    PR_CHECK(pr_dtype_has_grad(q->dtype), "recurrence: q has dtype %s; expected f32, f64 or bf16",
             pr_dtype_name(q->dtype));
    const pr_dtype dt = q->dtype, st = state_dtype(dt);
    PR_CHECK(q->ndim == 4, "recurrence: q must be [B,T,H,K], got %d dims", q->ndim);
    const int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3];
    check_input(rn, "k", k, true, q, dt);
    check_input(rn, "v", v, true, q, dt);
    check_dims("k", k, 4, (int64_t[]){B, T, H, K});
    PR_CHECK(v->ndim == 4, "recurrence: v must be [B,T,H,V], got %d dims", v->ndim);
    const int64_t V = v->shape[3];
    check_dims("v", v, 4, (int64_t[]){B, T, H, V});
    check_input(rn, "g", g, pr_rule_has_g(r), q, st);
    if (g && opt->g_per_value) check_dims("g (a log-decay per value channel)", g, 4, (int64_t[]){B, T, H, V});
    else if (g && pr_rule_g_per_key(r)) check_dims("g (a log-decay per key channel)", g, 4, (int64_t[]){B, T, H, K});
    else if (g) check_dims("g", g, 3, (int64_t[]){B, T, H});
    check_input(rn, "beta", beta, pr_rule_has_beta(r), q, dt);
    if (beta) check_dims("beta", beta, 3, (int64_t[]){B, T, H});
    /* prism_core: kx and vx together, or neither (L = 0) */
    PR_CHECK(!kx == !vx, "recurrence: kx and vx go together (both NULL means L = 0)");
    check_input(rn, "kx", kx, pr_rule_has_extra(r) && kx, q, dt);
    check_input(rn, "vx", vx, pr_rule_has_extra(r) && vx, q, dt);
    if (kx) {
        PR_CHECK(kx->ndim == 5, "recurrence: kx must be [B,T,H,L,K], got %d dims", kx->ndim);
        const int64_t L = kx->shape[3];
        check_dims("kx", kx, 5, (int64_t[]){B, T, H, L, K});
        check_dims("vx", vx, 5, (int64_t[]){B, T, H, L, V});
    }
    int64_t N = B;
    if (cu_seqlens) {
        PR_CHECK(B == 1, "recurrence: cu_seqlens needs B = 1 (sequences packed along T), got B = %lld", (long long)B);
        int64_t *seq;
        N = read_cu_seqlens(cu_seqlens, T, &seq);
        free(seq);
        PR_CHECK(cu_seqlens->device == q->device, "recurrence: cu_seqlens is on %s, q on %s",
                 pr_device_name(cu_seqlens->device), pr_device_name(q->device));
    }
    if (h0) {
        check_input(rn, "h0", h0, true, q, st);
        check_dims("h0", h0, 4, (int64_t[]){N, H, K, V});
    }

    if (q->device == PR_CUDA) {   /* what the device cannot run stops here, naming the limit */
        pr_rec_plan plan;
        char why[256];
        pr_recurrence_opts po = *opt;
        po.tf32 = ctx->matmul_tf32;
        po.bf16 = q->dtype == PR_BF16;
        if (!pr_recurrence_plan(&po, PR_CUDA, N, T, H, K, V, kx ? kx->shape[3] : 0, &plan, why, sizeof why))
            pr_fatal("%s", why);
    }
    pr_tensor *in[IN_N] = {q, k, v, g, beta, kx, vx, h0, cu_seqlens};
    pr_node n = pr_node_init(PR_OP_recurrence, IN_N, in);
    n.out[0] = pr_op_output(ctx, q->dtype, q->device, PR_DIMS(B, T, H, V));
    n.out[1] = pr_op_output(ctx, st, q->device, PR_DIMS(N, H, K, V));
    n.n_out = 2;
    n.iarg[0] = r;
    n.iarg[1] = opt->chunk;
    n.iarg[2] = opt->g_per_value;
    n.iarg[3] = pr_rec_force_id(&opt->force);
    n.farg[0] = opt->scale != 0 ? opt->scale : 1.0 / sqrt((double)K);
    pr_tensor *o = pr_op_apply(ctx, &n);
    if (ht) *ht = n.out[1];
    return o;
}

/* ---- random inputs and the gradcheck example ------------------------------------ */

/* a leaf of dtype dt: normal (mean a, std b) or uniform [a, b); rows of
 * norm_len elements l2-normalized when norm_len > 0 */
static pr_tensor *rand_leaf(pr_ctx *ctx, pr_rng *r, pr_dtype dt, int ndim, const int64_t *shape, bool normal,
                            double a, double b, int64_t norm_len)
{
    pr_tensor *t = pr_empty(ctx->step, PR_F64, PR_CPU, ndim, shape);
    if (normal) pr_rand_normal_(t, r, a, b);
    else pr_rand_uniform_(t, r, a, b);
    double *x = t->data;
    for (int64_t i = 0; norm_len && i < t->numel; i += norm_len) {
        const double nrm = sqrt(pr_rec_dot(x + i, x + i, norm_len)) + 1e-12;
        for (int64_t j = 0; j < norm_len; j++) x[i + j] /= nrm;
    }
    if (dt != PR_F64) t = pr_to(ctx->step, t, dt, PR_CPU);
    pr_requires_grad_(t, true);
    return t;
}

pr_recurrence_inputs pr_recurrence_random(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_rule rule, int64_t B, int64_t T,
                                          int64_t H, int64_t K, int64_t V, int64_t L, bool with_h0)
{
    pr_recurrence_inputs in = {0};
    const pr_dtype st = state_dtype(dt);
    in.q = rand_leaf(ctx, r, dt, PR_DIMS(B, T, H, K), true, 0, 1, K);
    in.k = rand_leaf(ctx, r, dt, PR_DIMS(B, T, H, K), true, 0, 1, K);
    in.v = rand_leaf(ctx, r, dt, PR_DIMS(B, T, H, V), true, 0, 1, 0);
    if (pr_rule_g_per_key(rule)) in.g = rand_leaf(ctx, r, st, PR_DIMS(B, T, H, K), false, -0.3, -0.01, 0);
    else if (pr_rule_has_g(rule)) in.g = rand_leaf(ctx, r, st, PR_DIMS(B, T, H), false, -0.3, -0.01, 0);
    if (pr_rule_has_beta(rule)) in.beta = rand_leaf(ctx, r, dt, PR_DIMS(B, T, H), false, 0.1, 0.9, 0);
    if (pr_rule_has_extra(rule)) {
        in.kx = rand_leaf(ctx, r, dt, PR_DIMS(B, T, H, L, K), true, 0, 1, K);
        in.vx = rand_leaf(ctx, r, dt, PR_DIMS(B, T, H, L, V), true, 0, 0.5, 0);
    }
    if (with_h0) in.h0 = rand_leaf(ctx, r, st, PR_DIMS(B, H, K, V), true, 0, 0.5, 0);
    return in;
}

/* o and the final state side by side, so every check of the example covers both */
static pr_tensor *example_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    pr_recurrence_opts o = {.rule = (pr_rule)ex->iarg[0], .chunk = (int)ex->iarg[1], .scale = ex->farg[0]};
    pr_tensor *ht, *out = pr_recurrence(ctx, &o, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], NULL, &ht);
    pr_tensor *flat[2] = {pr_reshape(ctx, out, PR_DIMS(-1)), pr_reshape(ctx, ht, PR_DIMS(-1))};
    return pr_concat(ctx, 2, flat, 0);
}

/* prism_core with h0, L = 2, K != V: small, so central differences are fast */
void pr_recurrence_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    pr_recurrence_inputs in = pr_recurrence_random(ctx, r, dt, PR_RULE_PRISM_CORE, 2, 7, 2, 5, 3, 2, true);
    memset(ex, 0, sizeof *ex);
    ex->n_in = 8;
    pr_tensor *list[8] = {in.q, in.k, in.v, in.g, in.beta, in.kx, in.vx, in.h0};
    memcpy(ex->in, list, sizeof list);
    ex->iarg[0] = PR_RULE_PRISM_CORE;
    ex->iarg[1] = 0;
    ex->farg[0] = 0;
    ex->apply = example_apply;
}
