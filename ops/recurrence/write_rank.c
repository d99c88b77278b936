/* ops/recurrence/write_rank.c: the numerical rank of each token's write B_t
 * of a recorded recurrence (the injection S_t = S_{t-1} A_t + B_t adds; the
 * forget path A_t is left out), which measures the PRISM paper's Rank-L
 * claim on real inputs: B_t = beta k v^T (rank 1) for the delta rules,
 * k v^T for linattn/ssd, beta k v^T + sum_l kx_l vx_l^T for prism_core (up
 * to 1 + its extras: L in PRISM's form paper, L + 1 in form augmented).
 *
 * Singular values come from one-sided (Hestenes) Jacobi in f64: plane
 * rotations orthogonalize the columns pairwise until every pair is
 * orthogonal to working precision; the column norms are then the singular
 * values. It is slow for big matrices (O(n^3) a sweep) but simple, accurate
 * to relative 1e-15 for small singular values too, and K, V <= 256 here. */
#include "ops/recurrence/recurrence.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SWEEPS = 60 };

/* rotate columns p and q of w (c columns of length r, column-major) until
 * orthogonal; returns whether they were not already */
static bool orthogonalize_pair(double *w, int r, int p, int q)
{
    double *a = w + (size_t)p * r, *b = w + (size_t)q * r;
    double aa = 0, bb = 0, ab = 0;
    for (int i = 0; i < r; i++) aa += a[i] * a[i], bb += b[i] * b[i], ab += a[i] * b[i];
    if (fabs(ab) <= 1e-15 * sqrt(aa * bb) || ab == 0) return false;
    double zeta = (bb - aa) / (2 * ab);
    double t = (zeta >= 0 ? 1 : -1) / (fabs(zeta) + sqrt(1 + zeta * zeta));
    double c = 1 / sqrt(1 + t * t), s = c * t;
    for (int i = 0; i < r; i++) {
        double x = a[i], y = b[i];
        a[i] = c * x - s * y;
        b[i] = s * x + c * y;
    }
    return true;
}

static int descending(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a < b) - (a > b);
}

void pr_singular_values(const double *a, int m, int n, double *s)
{
    /* work on the shorter side's vectors as columns: c = min(m, n) columns of length r = max(m, n) */
    int c = m < n ? m : n, r = m < n ? n : m;
    double *w = malloc(sizeof(double) * (size_t)m * n);
    PR_CHECK(w, "singular_values: out of memory for a %d x %d matrix", m, n);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            /* column j of a when n <= m, else row i of a (a's transpose) */
            if (n <= m) w[(size_t)j * r + i] = a[(size_t)i * n + j];
            else w[(size_t)i * r + j] = a[(size_t)i * n + j];
        }
    for (int sweep = 0; sweep < MAX_SWEEPS; sweep++) {
        bool rotated = false;
        for (int p = 0; p < c; p++)
            for (int q = p + 1; q < c; q++) rotated |= orthogonalize_pair(w, r, p, q);
        if (!rotated) break;
    }
    for (int j = 0; j < c; j++) {
        double ss = 0;
        for (int i = 0; i < r; i++) ss += w[(size_t)j * r + i] * w[(size_t)j * r + i];
        s[j] = sqrt(ss);
    }
    free(w);
    qsort(s, (size_t)c, sizeof *s, descending);
}

int pr_matrix_rank(const double *a, int m, int n, double rel_tol)
{
    int c = m < n ? m : n, rank = 0;
    double *s = malloc(sizeof(double) * (size_t)c);
    PR_CHECK(s, "matrix_rank: out of memory");
    pr_singular_values(a, m, n, s);
    for (int j = 0; j < c; j++) rank += s[0] > 0 && s[j] > rel_tol * s[0];
    free(s);
    return rank;
}

static double *host_f64(const pr_tensor *t)
{
    if (!t) return NULL;
    double *x = malloc(sizeof(double) * (size_t)t->numel);
    PR_CHECK(x, "recurrence_write_ranks: out of memory");
    pr_to_host_f64(t, x);
    return x;
}

int pr_recurrence_write_ranks(const pr_node *n, double rel_tol, int *ranks)
{
    PR_CHECK(strcmp(n->op->name, "recurrence") == 0, "recurrence_write_ranks: node is '%s', not a recurrence",
             n->op->name);
    const pr_tensor *k = n->in[PR_REC_K], *v = n->in[PR_REC_V];
    int64_t BT = k->shape[0] * k->shape[1], H = k->shape[2], K = k->shape[3], V = v->shape[3];
    int64_t L = n->in[PR_REC_KX] ? n->in[PR_REC_KX]->shape[3] : 0;
    double *kd = host_f64(k), *vd = host_f64(v), *beta = host_f64(n->in[PR_REC_BETA]);
    double *kx = host_f64(n->in[PR_REC_KX]), *vx = host_f64(n->in[PR_REC_VX]);
    double *b = malloc(sizeof(double) * (size_t)(K * V));
    PR_CHECK(b, "recurrence_write_ranks: out of memory");
    for (int64_t th = 0; th < BT * H; th++) {   /* (token, head) pairs, row-major */
        const double *kt = kd + th * K, *vt = vd + th * V;
        double bt = beta ? beta[th] : 1;
        for (int64_t i = 0; i < K; i++)
            for (int64_t j = 0; j < V; j++) {
                double x = bt * kt[i] * vt[j];
                for (int64_t l = 0; l < L; l++) x += kx[(th * L + l) * K + i] * vx[(th * L + l) * V + j];
                b[i * V + j] = x;
            }
        ranks[th] = pr_matrix_rank(b, (int)K, (int)V, rel_tol);
    }
    free(b), free(kd), free(vd), free(beta), free(kx), free(vx);
    return (int)(L + 1 < K && L + 1 < V ? L + 1 : K < V ? K : V);
}
