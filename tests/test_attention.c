/* tests/test_attention.c: causal GQA attention on the CPU.
 *
 * - the ops2 golden vectors (B=2 T=50 H=4 Hkv=2 D=16 Dv=8): o and dq, dk, dv
 *   of sum(o*do), f64 to 1e-10 and f32 to 1e-5 relative to the max-abs;
 * - float64 gradcheck with packed sequences (cu_seqlens), H=3 reading one kv
 *   head, odd D and Dv;
 * - packing: a packed run equals the separate runs of its sequences, forward
 *   and backward;
 * - decoding: pr_attention_decode equals the last row of the full op over the
 *   first n_valid tokens, per batch row;
 * - misuse is fatal with a message naming the op and the problem.
 */
#include "tests/test_ops2_util.h"

static void golden_apply(pr_ctx *ctx, const pr_safetensors *st, pr_tensor *const *in, pr_tensor **out)
{
    out[0] = pr_attention(ctx, in[0], in[1], in[2], pr_item(ops2_ref(st, "attention", "scale")), NULL);
}

static void golden_case(pr_dtype dt)
{
    static const char *const ins[3] = {"q", "k", "v"}, *const outs[1] = {"o"};
    ops2_golden_case("attention", ins, 3, outs, 1, golden_apply, dt);
}
static void test_golden_f64(void **s) { (void)s, golden_case(PR_F64); }
static void test_golden_f32(void **s) { (void)s, golden_case(PR_F32); }

/* ---- gradcheck with packed sequences ----------------------------------------------- */

static pr_tensor *packed_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_attention(ctx, in[0], in[1], in[2], ex->farg[0], in[3]);
}

static void test_gradcheck_packed(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(5, 0);
    pr_example ex = {.n_in = 4, .apply = packed_apply, .farg = {0}};
    ex.in[0] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(1, 10, 3, 3), -1, 1);
    ex.in[1] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(1, 10, 1, 3), -1, 1);
    ex.in[2] = pr_example_input(ctx, &r, PR_F64, PR_DIMS(1, 10, 1, 5), -1, 1);
    ex.in[3] = cu_tensor(ctx, (const int64_t[]){0, 1, 6, 10}, 4, PR_CPU);
    pr_test_gradcheck_ok(ctx, "attention packed", &ex);
    pr_ctx_free(ctx);
}

/* ---- packing ---------------------------------------------------------------------------- */

static void test_packed_equals_separate(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(9, 0);
    const int64_t cu[4] = {0, 3, 11, 17}, T = 17, H = 4, Hkv = 2, D = 6, Dv = 5;
    pr_tensor *q = pr_example_input(ctx, &r, PR_F64, PR_DIMS(1, T, H, D), -1, 1);
    pr_tensor *k = pr_example_input(ctx, &r, PR_F64, PR_DIMS(1, T, Hkv, D), -1, 1);
    pr_tensor *v = pr_example_input(ctx, &r, PR_F64, PR_DIMS(1, T, Hkv, Dv), -1, 1);
    pr_tensor *g = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(1, T, H, Dv), &r);
    pr_tensor *o = pr_attention(ctx, q, k, v, 0, cu_tensor(ctx, cu, 4, PR_CPU));
    pr_backward_with(ctx, o, g);
    for (int sq = 0; sq < 3; sq++) {
        const int64_t t0 = cu[sq], len = cu[sq + 1] - cu[sq];
        pr_tensor *in[3] = {pr_slice(ctx, q, 1, t0, len), pr_slice(ctx, k, 1, t0, len), pr_slice(ctx, v, 1, t0, len)};
        for (int i = 0; i < 3; i++) {
            in[i] = pr_clone(ctx->step, in[i]);
            pr_requires_grad_(in[i], true);
        }
        pr_tensor *os = pr_attention(ctx, in[0], in[1], in[2], 0, NULL);
        pr_backward_with(ctx, os, pr_slice(ctx, g, 1, t0, len));
        pr_set_grad_enabled(ctx, false);
        pr_tensor *full[4] = {pr_slice(ctx, o, 1, t0, len), pr_slice(ctx, q->grad, 1, t0, len),
                              pr_slice(ctx, k->grad, 1, t0, len), pr_slice(ctx, v->grad, 1, t0, len)};
        pr_tensor *sep[4] = {os, in[0]->grad, in[1]->grad, in[2]->grad};
        pr_set_grad_enabled(ctx, true);
        for (int i = 0; i < 4; i++) assert_rel("packed vs separate", full[i], sep[i], 1e-13);
    }
    pr_ctx_free(ctx);
}

/* ---- decoding ---------------------------------------------------------------------------- */

static void test_decode_equals_last_row(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(12, 0);
    const int64_t B = 2, Tc = 9, H = 6, Hkv = 3, D = 7, Dv = 4, nv[2] = {5, 9};
    pr_tensor *q = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, Tc, H, D), &r);
    pr_tensor *k = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, Tc, Hkv, D), &r);
    pr_tensor *v = pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, Tc, Hkv, Dv), &r);
    pr_tensor *full = pr_attention(ctx, q, k, v, 0.3, NULL);
    for (int64_t b = 0; b < B; b++) {
        pr_tensor *qb = pr_slice(ctx, pr_slice(ctx, q, 0, b, 1), 1, nv[b] - 1, 1);
        pr_tensor *want = pr_slice(ctx, pr_slice(ctx, full, 0, b, 1), 1, nv[b] - 1, 1);
        pr_tensor *got = pr_attention_decode(ctx, qb, pr_slice(ctx, k, 0, b, 1), pr_slice(ctx, v, 0, b, 1), &nv[b], 0.3);
        assert_rel("decode vs last row", got, want, 1e-14);
    }
    /* both rows at once, f32 */
    pr_tensor *q32 = pr_to(ctx->step, q, PR_F32, PR_CPU);
    pr_tensor *qlast[2] = {pr_slice(ctx, pr_slice(ctx, q32, 0, 0, 1), 1, nv[0] - 1, 1),
                           pr_slice(ctx, pr_slice(ctx, q32, 0, 1, 1), 1, nv[1] - 1, 1)};
    pr_tensor *got = pr_attention_decode(ctx, pr_concat(ctx, 2, qlast, 0), pr_to(ctx->step, k, PR_F32, PR_CPU),
                                         pr_to(ctx->step, v, PR_F32, PR_CPU), nv, 0.3);
    pr_tensor *wl[2] = {pr_slice(ctx, pr_slice(ctx, full, 0, 0, 1), 1, nv[0] - 1, 1),
                        pr_slice(ctx, pr_slice(ctx, full, 0, 1, 1), 1, nv[1] - 1, 1)};
    assert_rel("decode f32, two rows", got, pr_concat(ctx, 2, wl, 0), 1e-6);
    pr_ctx_free(ctx);
}

/* ---- misuse ------------------------------------------------------------------------------ */

static void test_errors(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_tensor *q = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 4, 3, 8));
    pr_tensor *k = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 4, 2, 8));
    pr_tensor *k1 = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 4, 1, 7));
    pr_tensor *v1 = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 4, 1, 5));
    PR_EXPECT_FATAL(pr_attention(ctx, q, k, k, 0, NULL), "attention: H=3 must be a multiple of k's Hkv=2");
    PR_EXPECT_FATAL(pr_attention(ctx, q, k1, v1, 0, NULL), "attention: k has shape [2,4,1,7]");
    PR_EXPECT_FATAL(pr_attention(ctx, q, pr_zeros(ctx->step, PR_F32, PR_CPU, PR_DIMS(2, 4, 1, 8)), v1, 0, NULL),
                    "attention: dtype mismatch");
    pr_tensor *k8 = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 4, 1, 8));
    PR_EXPECT_FATAL(pr_attention(ctx, q, k8, v1, 0, cu_tensor(ctx, (const int64_t[]){0, 4}, 2, PR_CPU)),
                    "attention: cu_seqlens needs B = 1");
    PR_EXPECT_FATAL(pr_attention(ctx, q, k8, v1, -1, NULL), "attention: scale must be finite and >= 0");
    const int64_t bad[2] = {3, 0};
    PR_EXPECT_FATAL(pr_attention_decode(ctx, pr_slice(ctx, q, 1, 0, 1), k8, v1, bad, 0),
                    "attention_decode: n_valid[1]=0 must be in [1, Tc=4]");
    PR_EXPECT_FATAL(pr_attention_decode(ctx, q, k8, v1, NULL, 0), "attention_decode: q must be [B,1,H,D]");
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_f64),        cmocka_unit_test(test_golden_f32),
        cmocka_unit_test(test_gradcheck_packed),  cmocka_unit_test(test_packed_equals_separate),
        cmocka_unit_test(test_decode_equals_last_row), cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
