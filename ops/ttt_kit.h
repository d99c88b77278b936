/* ops/ttt_kit.h: the double-precision row helpers that the CPU paths of the
 * test-time-training family (ops/ttt_linear.c, ttt_mlp.c, titans.c) share
 * on top of ops/cpu_kit.h: LayerNorm rows and the inner LayerNorm+L2
 * gradient with its backward, small vector-matrix products, gelu_tanh and
 * its first two derivatives, and row gather/scatter. Everything is static
 * inline: a header of helpers, not an API.
 */
#ifndef PR_TTT_KIT_H
#define PR_TTT_KIT_H

#include <math.h>
#include <string.h>

#include "ops/cpu_kit.h"

/* xh = (x - mean) / s with s = sqrt(var_biased + eps); returns s */
static inline double kit_ln(const double *x, int64_t K, double eps, double *xh)
{
    double mu = 0, var = 0;
    for (int64_t c = 0; c < K; c++) mu += x[c];
    mu /= (double)K;
    for (int64_t c = 0; c < K; c++) var += (x[c] - mu) * (x[c] - mu);
    double s = sqrt(var / (double)K + eps);
    for (int64_t c = 0; c < K; c++) xh[c] = (x[c] - mu) / s;
    return s;
}

/* LayerNorm backward without the affine part: dx = (g - mean(g) - xh
 * mean(g xh)) / s for g = dL/dxh. The same map turns the residual
 * G = w (LN(z) - target) into the inner gradient dl/dz. */
static inline void kit_ln_back(const double *xh, double s, const double *g, int64_t K, double *dx)
{
    double sg = 0, sgx = 0;
    for (int64_t c = 0; c < K; c++) sg += g[c], sgx += g[c] * xh[c];
    sg /= (double)K, sgx /= (double)K;
    for (int64_t c = 0; c < K; c++) dx[c] = (g[c] - sg - xh[c] * sgx) / s;
}

/* Backward of one output row o = z + w xh + b, xh = LN-normalized z (scale
 * s), given dout: dz = dout + kit_ln_back(xh, s, w dout), dw += dout xh,
 * db += dout. g [K] is scratch (left holding w dout). */
static inline void kit_ln_out_back(const double *xh, double s, const double *w, const double *dout, int64_t K,
                                   double *g, double *dz, double *dw, double *db)
{
    for (int64_t c = 0; c < K; c++) {
        g[c] = w[c] * dout[c];
        dw[c] += dout[c] * xh[c], db[c] += dout[c];
    }
    kit_ln_back(xh, s, g, K, dz);
    for (int64_t c = 0; c < K; c++) dz[c] += dout[c];
}

/* out[c] (+)= sum_a x[a] M[a,c], M [R,C] */
static inline void kit_vec_mat(const double *x, const double *M, int64_t R, int64_t C, double *out, bool acc)
{
    if (!acc) memset(out, 0, (size_t)C * sizeof(double));
    for (int64_t a = 0; a < R; a++) {
        double xa = x[a];
        if (xa == 0) continue;
        for (int64_t c = 0; c < C; c++) out[c] += xa * M[a * C + c];
    }
}

/* out[a] += alpha sum_c M[a,c] y[c], M [R,C] (y times M transposed) */
static inline void kit_mat_vec(const double *M, const double *y, int64_t R, int64_t C, double alpha, double *out)
{
    for (int64_t a = 0; a < R; a++) out[a] += alpha * kit_dot(M + a * C, y, C);
}

/* M[a,c] += alpha x[a] y[c], M [R,C] */
static inline void kit_outer(double *M, const double *x, const double *y, int64_t R, int64_t C, double alpha)
{
    for (int64_t a = 0; a < R; a++) {
        double xa = alpha * x[a];
        for (int64_t c = 0; c < C; c++) M[a * C + c] += xa * y[c];
    }
}

/* The inner gradient of || w xz + b - (v - k) ||^2 / 2 with xz = LN-normalized
 * z (scale sz): G = w (w xz + b - v + k), gz = kit_ln_back(xz, sz, G). */
static inline void kit_inner_grad(const double *xz, double sz, const double *w, const double *b, const double *v,
                                  const double *k, int64_t K, double *G, double *gz)
{
    for (int64_t c = 0; c < K; c++) G[c] = w[c] * (w[c] * xz[c] + b[c] - v[c] + k[c]);
    kit_ln_back(xz, sz, G, K, gz);
}

/* Backward of kit_inner_grad, given dgz = dL/dgz (G as it left, scratch dG,
 * dxh of K each). With gz = LNback(xz, sz, G):
 *   dG = LNback(xz, sz, dgz)   (the map is self-adjoint in its G argument)
 *   dxh = w^2 dG - (dgz mean(G xz) + G mean(dgz xz)) / sz,  dsz = -dgz.gz / sz
 *   dz = LNback(xz, sz, dxh) + dsz xz / K    (ds/dz = xz / K)
 * and through G = w (w xz + b - v + k): dw += dG (2 w xz + b - v + k),
 * db += w dG, dv = -w dG (stored), dk += w dG. Writes dz. */
static inline void kit_inner_grad_back(const double *xz, double sz, const double *G, const double *gz,
                                       const double *dgz, const double *w, const double *b, const double *v,
                                       const double *k, int64_t K, double *dG, double *dxh, double *dz, double *dw,
                                       double *db, double *dv, double *dk)
{
    double mgx = kit_dot(G, xz, K) / (double)K, mdx = kit_dot(dgz, xz, K) / (double)K;
    kit_ln_back(xz, sz, dgz, K, dG);
    for (int64_t c = 0; c < K; c++) dxh[c] = w[c] * w[c] * dG[c] - (dgz[c] * mgx + G[c] * mdx) / sz;
    double dsz = -kit_dot(dgz, gz, K) / sz;
    kit_ln_back(xz, sz, dxh, K, dz);
    for (int64_t c = 0; c < K; c++) {
        dz[c] += dsz * xz[c] / (double)K;
        dw[c] += dG[c] * (2 * w[c] * xz[c] + b[c] - v[c] + k[c]);
        db[c] += w[c] * dG[c];
        dv[c] = -w[c] * dG[c];
        dk[c] += w[c] * dG[c];
    }
}

/* gelu_tanh(x) = x (1 + tanh(u)) / 2, u = c (x + 0.044715 x^3), c = sqrt(2/pi);
 * kit_gelu returns it and puts its first and second derivatives in d1, d2
 * (either may be NULL):
 *   g'  = (1 + t) / 2 + x (1 - t^2) u' / 2
 *   g'' = (1 - t^2) (u' + x (u'' - 2 t u'^2) / 2),  u' = c (1 + 3a x^2), u'' = 6 c a x */
static inline double kit_gelu(double x, double *d1, double *d2)
{
    const double c = 0.7978845608028654, a = 0.044715;
    double t = tanh(c * (x + a * x * x * x)), du = c * (1 + 3 * a * x * x), ddu = 6 * c * a * x;
    if (d1) *d1 = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
    if (d2) *d2 = (1 - t * t) * (du + 0.5 * x * (ddu - 2 * t * du * du));
    return 0.5 * x * (1 + t);
}

/* the rows of one (b, h) and token range [t0, t0+m) of a [B,T,H,X] tensor */
typedef struct {
    int64_t T, H, b, h, t0, m;
} kit_rows;

static inline int64_t kit_row(const kit_rows *r, int64_t i) { return (r->b * r->T + r->t0 + i) * r->H + r->h; }

/* dst[i, :X] = alpha src[row i] */
static inline void kit_gather(const kit_rows *r, const double *src, int64_t X, double alpha, double *dst)
{
    for (int64_t i = 0; i < r->m; i++)
        for (int64_t c = 0; c < X; c++) dst[i * X + c] = alpha * src[kit_row(r, i) * X + c];
}

/* dst[row i] += alpha src[i, :X] */
static inline void kit_scatter(const kit_rows *r, const double *src, int64_t X, double alpha, double *dst)
{
    for (int64_t i = 0; i < r->m; i++)
        for (int64_t c = 0; c < X; c++) dst[kit_row(r, i) * X + c] += alpha * src[i * X + c];
}

#endif
