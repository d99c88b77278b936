/* ops/selective_scan.c: the selective scan, CPU reference forward and
 * hand-derived backward, the public entry and the example.
 *
 * One tape node: in u, delta, A, Bm, Cm, Dskip, z, delta_bias, h0, cu_seqlens
 * (NULL where absent); out y, ht. The CPU computes in double and saves
 * nothing: the backward re-runs one channel's scan into a [len+1, N] buffer.
 *
 * Backward of one channel, walking t down with g = dL/ds_t (g starts at dht):
 *   a_t = exp(dt_t A), s_t = a_t s_{t-1} + dt_t u_t B_t, y_t = s_t.C_t + Dskip u_t
 *   out_t = y_t silu(z_t):  dy_t = dout_t silu(z_t), dz_t = dout_t y_t silu'(z_t)
 *   g += dy_t C_t;  dC_t += dy_t s_t;  dDskip += dy_t u_t;  du_t += dy_t Dskip
 *   da_t = g s_{t-1}:  dA += da_t a_t dt_t;  ddt_t = sum_n da_t a_t A + g.B_t u_t
 *   du_t += dt_t g.B_t;  dB_t += g dt_t u_t;  then g <- g a_t (dL/ds_{t-1})
 *   ddelta_t = ddt_t sigmoid(delta_t + delta_bias) (softplus' ; 1 above 20),
 *   ddelta_bias += ddelta_t; and dh0 = g at the start of the sequence.
 */
#include "ops/selective_scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu_kit.h"
#include "ops/seqlens.h"

enum { IN_U, IN_DELTA, IN_A, IN_B, IN_C, IN_DSKIP, IN_Z, IN_BIAS, IN_H0, IN_CU, IN_N };
static const char *const in_names[IN_N] = {"u", "delta", "A", "Bm", "Cm", "Dskip", "z", "delta_bias", "h0",
                                           "cu_seqlens"};

typedef struct {
    int64_t B, T, D, N, S;
    int64_t *seq;   /* [S+1] token row offsets over B*T */
} ss_dims;

static ss_dims ss_dims_of(const pr_node *n)
{
    ss_dims d = {n->in[IN_U]->shape[0], n->in[IN_U]->shape[1], n->in[IN_U]->shape[2], n->in[IN_A]->shape[1], 0, NULL};
    d.S = pr_seqlens_read("selective_scan", n->in[IN_CU], d.B, d.T, &d.seq);
    return d;
}

/* the float inputs as double (NULL stays NULL) */
typedef struct {
    double *p[IN_CU];
    bool own[IN_CU];
} ss_inputs;

static ss_inputs ss_inputs_of(const pr_node *n)
{
    ss_inputs in;
    kit_inputs_f64(n, IN_CU, in.p, in.own);
    return in;
}

static double dt_of(const ss_inputs *in, const ss_dims *d, int64_t r, int64_t c)
{
    return kit_softplus(in->p[IN_DELTA][r * d->D + c] + (in->p[IN_BIAS] ? in->p[IN_BIAS][c] : 0));
}

/* channel c of sequence s: the states s_t into st[(t+1)*N] (st[0..N) = h0)
 * and the ungated outputs y_t into yp[t] */
static void scan_channel(const ss_inputs *in, const ss_dims *d, int64_t s, int64_t c, double *st, double *yp)
{
    const int64_t N = d->N, r0 = d->seq[s], len = d->seq[s + 1] - r0;
    const double *A = in->p[IN_A] + c * N;
    for (int64_t n = 0; n < N; n++) st[n] = in->p[IN_H0] ? in->p[IN_H0][(s * d->D + c) * N + n] : 0;
    for (int64_t t = 0; t < len; t++) {
        const int64_t r = r0 + t;
        const double dt = dt_of(in, d, r, c), u = in->p[IN_U][r * d->D + c];
        const double *Bt = in->p[IN_B] + r * N, *Ct = in->p[IN_C] + r * N;
        double *prev = st + t * N, *cur = prev + N, y = 0;
        for (int64_t n = 0; n < N; n++) {
            cur[n] = exp(dt * A[n]) * prev[n] + dt * u * Bt[n];
            y += cur[n] * Ct[n];
        }
        yp[t] = y + (in->p[IN_DSKIP] ? in->p[IN_DSKIP][c] * u : 0);
    }
}

void pr_selective_scan_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    ss_dims d = ss_dims_of(n);
    ss_inputs in = ss_inputs_of(n);
    double *y = kit_zalloc(d.B * d.T * d.D), *ht = kit_zalloc(d.S * d.D * d.N);
    double *st = kit_zalloc((d.T + 1) * d.N), *yp = kit_zalloc(d.T);
    for (int64_t s = 0; s < d.S; s++)
        for (int64_t c = 0; c < d.D; c++) {
            const int64_t r0 = d.seq[s], len = d.seq[s + 1] - r0;
            scan_channel(&in, &d, s, c, st, yp);
            for (int64_t t = 0; t < len; t++) {
                const int64_t i = (r0 + t) * d.D + c;
                double zt = in.p[IN_Z] ? in.p[IN_Z][i] : 0;
                y[i] = in.p[IN_Z] ? yp[t] * zt * kit_sigmoid(zt) : yp[t];
            }
            memcpy(ht + (s * d.D + c) * d.N, st + len * d.N, (size_t)d.N * sizeof(double));
        }
    kit_store(n->out[0], y, false);
    kit_store(n->out[1], ht, false);
    free(y), free(ht), free(st), free(yp), free(d.seq);
    kit_free_owned(in.p, in.own, IN_CU);
}

/* gradients, in double, of every float input */
typedef struct {
    double *g[IN_CU];
} ss_grads;

static void back_channel(const ss_inputs *in, const ss_dims *d, int64_t s, int64_t c, const double *dy_out,
                         const double *dht, const double *st, const double *yp, double *g, ss_grads *gr)
{
    const int64_t N = d->N, r0 = d->seq[s], len = d->seq[s + 1] - r0;
    const double *A = in->p[IN_A] + c * N, *z = in->p[IN_Z];
    const double Dk = in->p[IN_DSKIP] ? in->p[IN_DSKIP][c] : 0;
    for (int64_t n = 0; n < N; n++) g[n] = dht ? dht[(s * d->D + c) * N + n] : 0;
    for (int64_t t = len - 1; t >= 0; t--) {
        const int64_t r = r0 + t, i = r * d->D + c;
        const double x = in->p[IN_DELTA][i] + (in->p[IN_BIAS] ? in->p[IN_BIAS][c] : 0);
        const double dt = kit_softplus(x), u = in->p[IN_U][i];
        const double *Bt = in->p[IN_B] + r * N, *Ct = in->p[IN_C] + r * N, *prev = st + t * N, *cur = prev + N;
        double dy = dy_out ? dy_out[i] : 0;
        if (z) {
            const double sg = kit_sigmoid(z[i]);
            gr->g[IN_Z][i] += dy * yp[t] * sg * (1 + z[i] * (1 - sg));
            dy *= z[i] * sg;
        }
        gr->g[IN_DSKIP][c] += dy * u;
        double du = dy * Dk, ddt = 0, gB = 0;
        for (int64_t n = 0; n < N; n++) {
            g[n] += dy * Ct[n];
            gr->g[IN_C][r * N + n] += dy * cur[n];
            const double a = exp(dt * A[n]), da = g[n] * prev[n] * a;
            gr->g[IN_A][c * N + n] += da * dt;
            ddt += da * A[n];
            gB += g[n] * Bt[n];
            gr->g[IN_B][r * N + n] += g[n] * dt * u;
            g[n] *= a;
        }
        ddt += gB * u;
        du += dt * gB;
        gr->g[IN_U][i] += du;
        const double dx = ddt * kit_softplus_grad(x);
        gr->g[IN_DELTA][i] += dx;
        gr->g[IN_BIAS][c] += dx;
    }
    for (int64_t n = 0; n < N; n++) gr->g[IN_H0][(s * d->D + c) * N + n] += g[n];
}

void pr_selective_scan_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    ss_dims d = ss_dims_of(n);
    ss_inputs in = ss_inputs_of(n);
    bool own_dy, own_dht;
    double *dy = kit_as_f64(n->out[0]->grad, &own_dy), *dht = kit_as_f64(n->out[1]->grad, &own_dht);
    ss_grads gr;
    const int64_t sizes[IN_CU] = {d.B * d.T * d.D, d.B * d.T * d.D, d.D * d.N, d.B * d.T * d.N, d.B * d.T * d.N,
                                  d.D, d.B * d.T * d.D, d.D, d.S * d.D * d.N};
    for (int i = 0; i < IN_CU; i++) gr.g[i] = kit_zalloc(sizes[i]);
    double *st = kit_zalloc((d.T + 1) * d.N), *yp = kit_zalloc(d.T), *g = kit_zalloc(d.N);
    for (int64_t s = 0; s < d.S; s++)
        for (int64_t c = 0; c < d.D; c++) {
            scan_channel(&in, &d, s, c, st, yp);
            back_channel(&in, &d, s, c, dy, dht, st, yp, g, &gr);
        }
    kit_add_grads(n, gr.g, IN_CU);
    free(st), free(yp), free(g), free(d.seq);
    if (own_dy) free(dy);
    if (own_dht) free(dht);
    kit_free_owned(in.p, in.own, IN_CU);
}

/* ---- the public entry --------------------------------------------------------------- */

pr_tensor *pr_selective_scan(pr_ctx *ctx, pr_tensor *u, pr_tensor *delta, pr_tensor *A, pr_tensor *Bm, pr_tensor *Cm,
                             pr_tensor *Dskip, pr_tensor *z, pr_tensor *delta_bias, pr_tensor *h0,
                             pr_tensor *cu_seqlens, pr_tensor **ht)
{
    pr_tensor *in[IN_N] = {u, delta, A, Bm, Cm, Dskip, z, delta_bias, h0, cu_seqlens};
    /* autocast: every float input in bf16 (the kernels take one dtype) */
    pr_autocast_all(ctx, IN_CU, in, PR_BF16);
    u = in[IN_U], delta = in[IN_DELTA], A = in[IN_A], Bm = in[IN_B], Cm = in[IN_C];
    Dskip = in[IN_DSKIP], z = in[IN_Z], delta_bias = in[IN_BIAS], h0 = in[IN_H0];
    kit_check_inputs("selective_scan", in, in_names, IN_CU, ~0u << IN_DSKIP);
    PR_CHECK(u->ndim == 3, "selective_scan: u must be [B,T,D], got %d dims", u->ndim);
    PR_CHECK(A->ndim == 2, "selective_scan: A must be [D,N], got %d dims", A->ndim);
    const int64_t B = u->shape[0], T = u->shape[1], D = u->shape[2], N = A->shape[1];
    PR_CHECK(B > 0 && T > 0 && D > 0 && N > 0, "selective_scan: u or A has an empty dim");
    const int64_t btd[3] = {B, T, D}, btn[3] = {B, T, N}, dn[2] = {D, N}, d1[1] = {D};
    kit_check_shape("selective_scan", delta, in_names[IN_DELTA], 3, btd);
    kit_check_shape("selective_scan", A, in_names[IN_A], 2, dn);
    kit_check_shape("selective_scan", Bm, in_names[IN_B], 3, btn);
    kit_check_shape("selective_scan", Cm, in_names[IN_C], 3, btn);
    if (Dskip) kit_check_shape("selective_scan", Dskip, in_names[IN_DSKIP], 1, d1);
    if (z) kit_check_shape("selective_scan", z, in_names[IN_Z], 3, btd);
    if (delta_bias) kit_check_shape("selective_scan", delta_bias, in_names[IN_BIAS], 1, d1);
    int64_t *seq, S = pr_seqlens_read("selective_scan", cu_seqlens, B, T, &seq), nchunks = 0;
    for (int64_t s = 0; s < S; s++) nchunks += (seq[s + 1] - seq[s] + PR_SS_CHUNK - 1) / PR_SS_CHUNK;
    free(seq);
    if (cu_seqlens)
        PR_CHECK(cu_seqlens->device == u->device, "selective_scan: cu_seqlens is on %s, u on %s",
                 pr_device_name(cu_seqlens->device), pr_device_name(u->device));
    if (h0) kit_check_shape("selective_scan", h0, in_names[IN_H0], 3, (const int64_t[]){S, D, N});

    pr_node n = pr_node_init(PR_OP_selective_scan, IN_N, in);
    n.n_out = 2;
    n.out[0] = pr_op_output(ctx, u->dtype, u->device, 3, btd);
    n.out[1] = pr_op_output(ctx, u->dtype, u->device, PR_DIMS(S, D, N));
    /* CUDA: the state at every chunk start, for the backward (pr_op_apply
     * records the node under this same condition) */
    bool record = false;
    for (int i = 0; i < IN_CU; i++) record |= ctx->grad_enabled && in[i] && in[i]->requires_grad;
    if (record && u->device != PR_CPU) {
        n.n_saved = 1;
        n.saved[0] = pr_empty(ctx->step, PR_F32, u->device, PR_DIMS(nchunks, D, N));
    }
    pr_tensor *y = pr_op_apply(ctx, &n);
    if (ht) *ht = n.out[1];
    return y;
}

/* ---- example: B=2, T=9, D=3, N=4, every optional input; returns y and ht
 * flattened side by side so every check covers the final state too ---------- */

static pr_tensor *ss_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    pr_tensor *ht, *y = pr_selective_scan(ctx, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], NULL, &ht);
    pr_tensor *flat[2] = {pr_reshape(ctx, y, PR_DIMS(-1)), pr_reshape(ctx, ht, PR_DIMS(-1))};
    return pr_concat(ctx, 2, flat, 0);
}

void pr_selective_scan_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    const int64_t B = 2, T = 9, D = 3, N = 4;
    ex->n_in = 9;
    ex->in[IN_U] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, D), -1, 1);
    ex->in[IN_DELTA] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, D), -1.5, 0.5);
    ex->in[IN_A] = pr_example_input(ctx, r, dt, PR_DIMS(D, N), -1.5, -0.2);
    ex->in[IN_B] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, N), -1, 1);
    ex->in[IN_C] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, N), -1, 1);
    ex->in[IN_DSKIP] = pr_example_input(ctx, r, dt, PR_DIMS(D), -1, 1);
    ex->in[IN_Z] = pr_example_input(ctx, r, dt, PR_DIMS(B, T, D), -1.5, 1.5);
    ex->in[IN_BIAS] = pr_example_input(ctx, r, dt, PR_DIMS(D), -0.5, 0.5);
    ex->in[IN_H0] = pr_example_input(ctx, r, dt, PR_DIMS(B, D, N), -0.5, 0.5);
    for (int i = 0; i < 9; i++) ex->in[i]->name = in_names[i];
    ex->apply = ss_apply;
}
