/* tests/test_atlas.c: the ATLAS layer against its formula, written out in
 * plain loops: features, gates, the Omega rule's windowed gradient, the gd
 * and Muon (momentum + Newton-Schulz) updates, the gated output norm.
 * (Gradcheck, whole == decoding and training run for atlas in test_models.c.) */
#include "tests/test_models_util.h"

enum { B = 2, T = 6, D = 5, H = 2, K = 3, HK = 6, FMAX = K + K * K };

static double sigm(double z) { return 1 / (1 + exp(-z)); }
static double silu(double z) { return z * sigm(z); }

static const double *param(const test_layer *t, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "mixer.%s", name);
    const pr_param *p = pr_params_find(t->params, path);
    if (!p) fail_msg("no %s", path);
    return p->t->data;
}

/* x row [D] through W [D, n] (+ b) */
static void linear(const double *x, const double *w, const double *b, int n, double *out)
{
    for (int o = 0; o < n; o++) {
        out[o] = b ? b[o] : 0;
        for (int d = 0; d < D; d++) out[o] += x[d] * w[d * n + o];
    }
}

/* phi of one head's l2-normalised silu(z) [K] */
static int phi(const double *z, int degree, double *f)
{
    double u[K], n = 0;
    for (int e = 0; e < K; e++) u[e] = silu(z[e]), n += u[e] * u[e];
    for (int e = 0; e < K; e++) u[e] /= sqrt(n + 1e-6);
    if (degree == 1) {
        memcpy(f, u, sizeof u);
        return K;
    }
    for (int e = 0; e < K; e++) f[e] = u[e] * sqrt(0.5);
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) f[K + i * K + j] = u[i] * u[j] * sqrt(0.5);
    return FMAX;
}

/* Muon's quintic Newton-Schulz on s [F][K] (over the K x K Gram when F > K) */
static void newton_schulz(double s[FMAX][K], int F, int steps, double out[FMAX][K])
{
    double n = 1e-14;
    for (int i = 0; i < F; i++)
        for (int j = 0; j < K; j++) n += s[i][j] * s[i][j];
    static double x[K][FMAX], g[K][K], p[K][K], y[K][FMAX];   /* x = s^T / |s| (F >= K here) */
    for (int i = 0; i < F; i++)
        for (int j = 0; j < K; j++) x[j][i] = s[i][j] / sqrt(n);
    for (int it = 0; it < steps; it++) {
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) {
                g[i][j] = 0;
                for (int f = 0; f < F; f++) g[i][j] += x[i][f] * x[j][f];
            }
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) {
                double gg = 0;
                for (int m = 0; m < K; m++) gg += g[i][m] * g[m][j];
                p[i][j] = -4.7750 * g[i][j] + 2.0315 * gg;
            }
        for (int i = 0; i < K; i++)
            for (int f = 0; f < F; f++) {
                y[i][f] = 3.4445 * x[i][f];
                for (int m = 0; m < K; m++) y[i][f] += p[i][m] * x[m][f];
            }
        memcpy(x, y, sizeof x);
    }
    for (int i = 0; i < F; i++)
        for (int j = 0; j < K; j++) out[i][j] = x[j][i];
}

/* the MLP memory's read silu(p W1) W2 at features p [F], into out [K]; act [K] keeps silu(p W1), z [K] p W1 */
static void mlp_read(const double w1[FMAX][K], const double w2[K][K], const double *p, int F, double *z, double *act,
                     double *out)
{
    for (int j = 0; j < K; j++) {
        z[j] = 0;
        for (int f = 0; f < F; f++) z[j] += p[f] * w1[f][j];
        act[j] = silu(z[j]);
    }
    for (int e = 0; e < K; e++) {
        out[e] = 0;
        for (int j = 0; j < K; j++) out[e] += act[j] * w2[j][e];
    }
}

static void formula_case(const char *optimizer, int window, int degree, bool mlp)
{
    pr_config c = pr_config_default();
    pr_err err;
    char kv[3][48];
    snprintf(kv[0], sizeof kv[0], "atlas.optimizer=%s", optimizer);
    snprintf(kv[1], sizeof kv[1], "atlas.window=%d", window);
    snprintf(kv[2], sizeof kv[2], "atlas.degree=%d", degree);
    assert_int_equal(pr_config_set(&c, "mixer=atlas", &err), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(pr_config_set(&c, kv[i], &err), 0);
    if (mlp) assert_int_equal(pr_config_set(&c, "atlas.memory=mlp", &err), 0);
    c.d_model = D, c.n_heads = H, c.head_dim = K, c.init_std = 0.6, c.seed = 4, c.atlas_ns_steps = 4;
    test_layer t = test_layer_new(&c, PR_F64, PR_CPU);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *x = test_input(ctx->step, PR_F64, B, T, D, 9);
    pr_tensor *y = test_layer_forward(ctx, &t, x, NULL);
    const double *xv = x->data;
    static double fk[B][T][H][FMAX], fq[B][T][H][FMAX], v[B][T][HK], gates[B][T][4 * H], o[B][T][HK];
    int F = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            const double *xr = xv + (b * T + i) * D;
            double zq[HK], zk[HK];
            linear(xr, param(&t, "q_proj"), NULL, HK, zq);
            linear(xr, param(&t, "k_proj"), NULL, HK, zk);
            linear(xr, param(&t, "v_proj"), NULL, HK, v[b][i]);
            for (int e = 0; e < HK; e++) v[b][i][e] = silu(v[b][i][e]);
            linear(xr, param(&t, "gates"), param(&t, "gates_bias"), 4 * H, gates[b][i]);
            for (int e = 0; e < 4 * H; e++) gates[b][i][e] = sigm(gates[b][i][e] + (e < H ? 4 : 0));
            for (int h = 0; h < H; h++) F = phi(zq + h * K, degree, fq[b][i][h]), phi(zk + h * K, degree, fk[b][i][h]);
        }
    bool muon = strcmp(optimizer, "muon") == 0;
    const double *w1p = mlp ? param(&t, "mem_w1") : NULL, *w2p = mlp ? param(&t, "mem_w2") : NULL;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            /* linear: m [F][K]; mlp: m = W1 [F][K] and m2 = W2 [K][K]; s, s2 their momenta */
            static double m[FMAX][K], s[FMAX][K], g[FMAX][K], u[FMAX][K], m2[FMAX][K], s2[FMAX][K], g2[FMAX][K];
            memset(m, 0, sizeof m), memset(s, 0, sizeof s), memset(m2, 0, sizeof m2), memset(s2, 0, sizeof s2);
            if (mlp) {
                for (int f = 0; f < F; f++)
                    for (int e = 0; e < K; e++) m[f][e] = w1p[(h * F + f) * K + e];
                for (int j = 0; j < K; j++)
                    for (int e = 0; e < K; e++) m2[j][e] = w2p[(h * K + j) * K + e];
            }
            for (int i = 0; i < T; i++) {
                memset(g, 0, sizeof g), memset(g2, 0, sizeof g2);
                for (int j = i - window + 1 < 0 ? 0 : i - window + 1; j <= i; j++) {
                    double gam = gates[b][j][2 * H + h], *p = fk[b][j][h];
                    if (!mlp) {
                        for (int e = 0; e < K; e++) {
                            double r = -v[b][j][h * K + e];
                            for (int f = 0; f < F; f++) r += m[f][e] * p[f];
                            for (int f = 0; f < F; f++) g[f][e] += gam * r * p[f];
                        }
                        continue;
                    }
                    double z[K], act[K], pred[K], r[K], dz[K];
                    mlp_read((const double (*)[K])m, (const double (*)[K])m2, p, F, z, act, pred);
                    for (int e = 0; e < K; e++) r[e] = gam * (pred[e] - v[b][j][h * K + e]);
                    for (int q = 0; q < K; q++) {
                        double da = 0, sg = sigm(z[q]);
                        for (int e = 0; e < K; e++) g2[q][e] += act[q] * r[e], da += r[e] * m2[q][e];
                        dz[q] = da * (sg + z[q] * sg * (1 - sg));
                    }
                    for (int f = 0; f < F; f++)
                        for (int q = 0; q < K; q++) g[f][q] += p[f] * dz[q];
                }
                double a = gates[b][i][h], eta = gates[b][i][H + h] / window, th = gates[b][i][3 * H + h];
                for (int pass = 0; pass < (mlp ? 2 : 1); pass++) {
                    double (*mm)[K] = pass ? m2 : m, (*ss)[K] = pass ? s2 : s, (*gg)[K] = pass ? g2 : g;
                    int rows = pass ? K : F;
                    if (muon) {
                        for (int f = 0; f < rows; f++)
                            for (int e = 0; e < K; e++) ss[f][e] = th * ss[f][e] + gg[f][e];
                        newton_schulz(ss, rows, c.atlas_ns_steps, u);
                        for (int f = 0; f < rows; f++)
                            for (int e = 0; e < K; e++) gg[f][e] = u[f][e];
                    }
                    for (int f = 0; f < rows; f++)
                        for (int e = 0; e < K; e++) mm[f][e] = a * mm[f][e] - eta * gg[f][e];
                }
                double *out = &o[b][i][h * K];
                if (mlp) {
                    double z[K], act[K];
                    mlp_read((const double (*)[K])m, (const double (*)[K])m2, fq[b][i][h], F, z, act, out);
                } else {
                    for (int e = 0; e < K; e++) {
                        out[e] = 0;
                        for (int f = 0; f < F; f++) out[e] += m[f][e] * fq[b][i][h][f];
                    }
                }
            }
        }
    static double want[B * T * D];
    const double *w_norm = param(&t, "o_norm"), *w_o = param(&t, "o_proj");
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            double z[HK], n[HK];
            linear(xv + (b * T + i) * D, param(&t, "g_proj"), NULL, HK, z);
            for (int h = 0; h < H; h++) {
                double ms = 0;
                for (int e = 0; e < K; e++) ms += o[b][i][h * K + e] * o[b][i][h * K + e] / K;
                for (int e = 0; e < K; e++)
                    n[h * K + e] = o[b][i][h * K + e] / sqrt(ms + c.norm_eps) * w_norm[e] * silu(z[h * K + e]);
            }
            for (int d = 0; d < D; d++) {
                want[(b * T + i) * D + d] = 0;
                for (int e = 0; e < HK; e++) want[(b * T + i) * D + d] += n[e] * w_o[e * D + d];
            }
        }
    char what[64];
    snprintf(what, sizeof what, "atlas %s c=%d degree %d%s", optimizer, window, degree, mlp ? " mlp" : "");
    pr_assert_allclose(what, y->data, want, B * T * D, 1e-11, 1e-9);
    pr_ctx_free(ctx);
    test_layer_free(&t);
}

static void test_formula(void **state)
{
    (void)state;
    formula_case("gd", 3, 2, false);
    formula_case("gd", 1, 1, false);
    formula_case("muon", 2, 2, false);
    formula_case("muon", 4, 1, false);
    formula_case("gd", 3, 2, true);
    formula_case("muon", 2, 1, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
