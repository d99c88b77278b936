/* ops/recurrence/recurrence_cpu.h: the CPU math of the recurrence family
 * (internal). Plain C on raw double arrays, one (sequence, head) pair per
 * call, so the tape glue in recurrence.c stays thin. Arguments: outputs, then
 * inputs, then sizes (in the pr_rec_seq). f32 tensors are promoted to double
 * by the glue: the CPU is the reference, so it always computes in float64.
 *
 * A token's step, for every rule (A, B of recurrence.h):
 *   h  = a h                  a = exp(g_t), or 1 without g; with a per-key
 *                             decay (gla) row i of h scales by exp(g_t[i]),
 *                             with a per-value one column j by exp(g_t[j])
 *   u  = beta (v - h^T k)     delta rules (beta given); u = v otherwise
 *   h += k u^T
 *   h += sum_l kx_l vx_l^T    prism_core only (L may be 0)
 *   o  = h^T (scale q)
 */
#ifndef PR_RECURRENCE_CPU_H
#define PR_RECURRENCE_CPU_H

#include <stdbool.h>
#include <stdint.h>

/* tokens between the states the forward saves for the backward of the
 * per-token form (the chunked form saves its chunk-start states) */
#define PR_REC_CKPT 64

/* One (sequence, head) problem. Each pointer is at the sequence's first
 * token for this head; token t of x lives at x + t * s<x>. q shares k's
 * stride, o and dv share v's, dq/dk/... share their input's. NULL pointers
 * are absent inputs (g: no decay; beta: no delta erase, u = v; kx/vx: L = 0;
 * h0: zero initial state). */
typedef struct {
    int64_t T;                 /* tokens of this sequence (may be 0) */
    int K, V, L;
    double scale;
    const double *q, *k, *v;   /* [T][K], [T][K], [T][V] (strided) */
    const double *g, *beta;    /* [T] (strided) or NULL; g [T][K] when g_per_key */
    const double *kx, *vx;     /* [T][L][K], [T][L][V] (strided) or NULL */
    const double *h0;          /* [K][V] or NULL */
    int64_t sk, sv, sg, skx, svx;   /* sg: g's and beta's token stride (H*K for a per-key g, no beta then) */
    bool g_per_key;                 /* gla: g holds K log-decays a token */
    bool g_per_value;               /* gla with opts.g_per_value: g holds V log-decays a token (sg = H*V),
                                       column j of the state scales by exp(g[j]) */
} pr_rec_seq;

/* Gradient destinations, same layouts and strides as the inputs; each is
 * ACCUMULATED into (+=), NULL when not needed. */
typedef struct {
    double *dq, *dk, *dv, *dg, *dbeta, *dkx, *dvx, *dh0;
} pr_rec_grads;

/* small vector helpers shared by both forms */
static inline double pr_rec_dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
/* w = h^T x: w[j] = sum_i h[i][j] x[i]; h [K][V] */
static inline void pr_rec_mtv(double *w, const double *h, const double *x, int K, int V)
{
    for (int j = 0; j < V; j++) w[j] = 0;
    for (int i = 0; i < K; i++) {
        const double xi = x[i], *hi = h + (int64_t)i * V;
        for (int j = 0; j < V; j++) w[j] += hi[j] * xi;
    }
}
/* h += c a b^T; h [K][V], a [K], b [V] */
static inline void pr_rec_outer(double *h, double c, const double *a, const double *b, int K, int V)
{
    for (int i = 0; i < K; i++) {
        const double ai = c * a[i];
        double *hi = h + (int64_t)i * V;
        for (int j = 0; j < V; j++) hi[j] += ai * b[j];
    }
}

/* a . b in eight interleaved partial sums (the chunked forms): independent
 * chains the compiler can vectorize, where one running sum waits on every add */
static inline double pr_rec_dot8(const double *a, const double *b, int64_t n)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* C[M][N] = op(A) op(B) + beta C on row-major doubles (A [M][K], [K][M]
 * when ta; B [K][N], [N][K] when tb; rows lda, ldb, ldc apart; beta 0 or 1):
 * the chunked forms' products */
void pr_rec_gemm(bool ta, bool tb, int M, int N, int K, const double *A, int64_t lda, const double *B, int64_t ldb,
                 double *C, int64_t ldc, double beta);

/* a matrix in memory, row r at p + r * ld, and pr_rec_gemm on such */
typedef struct { const double *p; int64_t ld; } pr_rec_mat;

static inline void pr_rec_mm(bool ta, bool tb, int M, int N, int K, pr_rec_mat A, pr_rec_mat B, double *C, int64_t ldc,
                             double beta)
{
    pr_rec_gemm(ta, tb, M, N, K, A.p, A.ld, B.p, B.ld, C, ldc, beta);
}

/* number of saved states of a T-token sequence with interval c */
static inline int64_t pr_rec_nckpt(int64_t T, int64_t c) { return (T + c - 1) / c; }

/* Per-token form. o: token stride s->sv; ht [K][V]; ckpt [nckpt][K][V]
 * receives the state before tokens 0, c, 2c, ... (c = ckpt_every), or is
 * NULL (nothing saved: the forward is not recorded); likewise in the chunked form.
 * work: K*V doubles. */
void pr_rec_forward_recurrent(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int ckpt_every,
                              double *work);

/* Chunked form of docs/PRISM.md with chunks of C tokens; same results as the
 * per-token form. The forward saves the chunk-start states in ckpt; the
 * backward walks the chunks in reverse from them.
 * work (either): pr_rec_chunk_work(C, K, V, L) doubles. */
int64_t pr_rec_chunk_work(int C, int K, int V, int L);
void pr_rec_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work);
void pr_rec_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                             const pr_rec_seq *s, int C, double *work);

/* Backward of the per-token form: reverse time, block by block, recomputing
 * the states inside each block of c tokens from the saved ckpt.
 * dout: o's gradient (token stride s->sv); dht [K][V] or NULL.
 * work: pr_rec_backward_work(c, K, V, L) doubles. */
int64_t pr_rec_backward_work(int c, int K, int V, int L);
void pr_rec_backward(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                     const pr_rec_seq *s, int ckpt_every, double *work);

/* The chunked form of gla (chunked_gla.c), its decay per key or, with
 * s->g_per_value, per value channel; no delta erase, no extra writes. Decays inside a chunk are products of factors
 * exp(G_later - G_earlier) <= 1 (running products of exp(g)), factored by
 * sub-chunks of 8 tokens much as fla's chunk_gla does (16 there), so none
 * overflows however strong the decay.
 * work: pr_rec_gla_chunk_work(C, K, V) doubles. */
int64_t pr_rec_gla_chunk_work(int C, int K, int V);
void pr_rec_gla_forward_chunked(double *o, double *ht, double *ckpt, const pr_rec_seq *s, int C, double *work);
void pr_rec_gla_backward_chunked(const pr_rec_grads *d, const double *dout, const double *dht, const double *ckpt,
                                 const pr_rec_seq *s, int C, double *work);

#endif
