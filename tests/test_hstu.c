/* tests/test_hstu.c: the HSTU layer against its formula, written out in
 * plain loops (projection, SiLU, causal pointwise attention with the bucketed
 * relative bias over N = seq_len, weightless LayerNorm, gate, output map).
 * (Gradcheck, whole == decoding and training run for hstu in test_models.c.) */
#include "tests/test_models_util.h"

static double silu(double z) { return z / (1 + exp(-z)); }

static void test_formula(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_set(&c, "mixer=hstu", &err), 0);
    c.d_model = 5, c.n_heads = 2, c.head_dim = 3, c.seq_len = 9, c.hstu_buckets = 4, c.init_std = 0.5, c.seed = 3;
    test_layer t = test_layer_new(&c, PR_F64, PR_CPU);
    pr_ctx *ctx = pr_ctx_new(1);
    enum { B = 2, T = 7, D = 5, H = 2, K = 3, HK = 6 };
    pr_tensor *x = test_input(ctx->step, PR_F64, B, T, D, 5);
    pr_tensor *y = test_layer_forward(ctx, &t, x, NULL);
    const double *W = pr_params_find(t.params, "mixer.uvqk")->t->data, *bw = pr_params_find(t.params, "mixer.uvqk_bias")->t->data;
    const double *rab = pr_params_find(t.params, "mixer.rab")->t->data, *Wo = pr_params_find(t.params, "mixer.o_proj")->t->data;
    const double *bo = pr_params_find(t.params, "mixer.o_bias")->t->data, *xv = x->data;
    static double h[B][T][4 * HK], want[B * T * D];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            for (int o = 0; o < 4 * HK; o++) {
                double z = bw[o];
                for (int d = 0; d < D; d++) z += xv[(b * T + i) * D + d] * W[d * 4 * HK + o];
                h[b][i][o] = silu(z);
            }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            double av[HK] = {0}, mean = 0, var = 0;
            for (int hd = 0; hd < H; hd++)
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int e = 0; e < K; e++) s += h[b][i][2 * HK + hd * K + e] * h[b][j][3 * HK + hd * K + e];
                    int bucket = i - j <= 1 ? 0 : (int)floor(log((double)(i - j)) / 0.301);
                    s += rab[bucket < 3 ? bucket : 3];
                    for (int e = 0; e < K; e++) av[hd * K + e] += silu(s) / c.seq_len * h[b][j][HK + hd * K + e];
                }
            for (int e = 0; e < HK; e++) mean += av[e] / HK;
            for (int e = 0; e < HK; e++) var += (av[e] - mean) * (av[e] - mean) / HK;
            for (int d = 0; d < D; d++) {
                double out = bo[d];
                for (int e = 0; e < HK; e++)
                    out += (av[e] - mean) / sqrt(var + c.norm_eps) * h[b][i][e] * Wo[e * D + d];
                want[(b * T + i) * D + d] = out;
            }
        }
    pr_assert_allclose("hstu y", y->data, want, B * T * D, 1e-12, 1e-10);
    pr_ctx_free(ctx);
    test_layer_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
