/* tests/test_cuda_attention_bf16.c: the native bf16 attention kernels
 * (ops/attention_flash.cu) against the CPU's bf16 path.
 *
 * Each case draws q, k, v and the upstream grad in f64 and runs o and the
 * backward of sum(o * do) in bf16 on the CPU (staged: the same bf16-rounded
 * inputs, f64 math, every output and grad rounded once) and in bf16 on CUDA.
 * Error per tensor: max|got - ref| / max|ref|.
 *
 * Tolerance. bf16 keeps 8 significant bits, so each rounding moves a value
 * by at most 2^-8 = 3.9e-3 of it. The forward rounds twice where the CPU
 * rounds once: the probabilities P enter the P V product as bf16, and o is
 * stored as bf16 (the CPU rounds only o): at most 2 x 3.9e-3, so
 * TOL_FWD = 1e-2. The backward rounds P and dS = P (dP - Di) before their
 * products, reads o as stored (bf16) in Di = dO . o, and stores each grad
 * once: four roundings, TOL_BWD = 2e-2. The f32 accumulation and the base-2
 * exponentials add about 1e-5, far below either.
 *
 * Cases: T not a multiple of the 64-row tiles and odd (77, 130), T = 1, T a
 * multiple (128); Hkv = H, GQA 2:1 and 4:1; D = Dv = 32, 64, 96 and 128;
 * packed sequences of 1, 17, 64 and 130 tokens (cu_seqlens); two calls on
 * the same leaves (scales D^-1/2 and 0.3) summed, so the second backward adds
 * into bf16 grads that already hold the first's; scale 1 at D = 64 (sharp
 * rows, large rescales between key tiles, underflowing exponentials). Every
 * case runs against the CPU, and twice on CUDA: the two runs must give the
 * same bits. Every case must
 * run natively (the tape node not staged). A head dim without kernels
 * (D = 48) runs the f32 kernels on staged copies and still matches. The attn
 * LM at head dim 96 (lm-130m's: d_model 768, 8 heads) under bf16 autocast
 * must reach its attention natively: its q, k, v come from projections and
 * RoPE as bf16, contiguous and 16-byte aligned. Attention is causal only
 * (ops/attention.h), so every case is causal. Every test skips without a GPU.
 */
#include "models/models.h"
#include "tests/test_cuda_ops2_util.h"

#define TOL_FWD 1e-2
#define TOL_BWD 2e-2

static const char *const names[4] = {"o", "dq", "dk", "dv"};

static bool last_staged;

static void att_fn(pr_ctx *ctx, pr_tensor *const *in, pr_tensor *cu, pr_tensor **outs)
{
    outs[0] = pr_attention(ctx, in[0], in[1], in[2], 0, cu);
    last_staged = ctx->tape[ctx->n_tape - 1].staged != NULL;
}

/* scale 1 on D = 64 (scores of std 8): nearly one-hot rows whose running
 * max jumps between key tiles by many units, so the rescale factors are far
 * from 1 and most exponentials underflow to 0 */
static void att_sharp_fn(pr_ctx *ctx, pr_tensor *const *in, pr_tensor *cu, pr_tensor **outs)
{
    outs[0] = pr_attention(ctx, in[0], in[1], in[2], 1.0, cu);
    last_staged = ctx->tape[ctx->n_tape - 1].staged != NULL;
}

/* two attention nodes on the same leaves: each backward adds into the grads */
static void att_twice_fn(pr_ctx *ctx, pr_tensor *const *in, pr_tensor *cu, pr_tensor **outs)
{
    pr_tensor *a = pr_attention(ctx, in[0], in[1], in[2], 0, cu);
    pr_tensor *b = pr_attention(ctx, in[0], in[1], in[2], 0.3, cu);
    last_staged = ctx->tape[ctx->n_tape - 1].staged != NULL;
    outs[0] = pr_add(ctx, a, b);
}

/* the forward against TOL_FWD, the grads against TOL_BWD */
static void compare_bf16(const char *what, const host_run *got, const host_run *ref)
{
    assert_int_equal(got->n, ref->n);
    char line[256] = "";
    for (int i = 0; i < ref->n; i++) {
        assert_int_equal(got->len[i], ref->len[i]);
        const double e = rel_err(got->v[i], ref->v[i], ref->len[i]), tol = i == 0 ? TOL_FWD : TOL_BWD;
        snprintf(line + strlen(line), sizeof line - strlen(line), " %s %.1e", names[i], e);
        if (!(e <= tol)) fail_msg("%s: %s rel_err %.3g > %.1g", what, names[i], e, tol);
    }
    fprintf(stderr, "  %s:%s\n", what, line);
}

/* two CUDA runs of one case give the same bits: every grad has one writer */
static void assert_same_bits(const char *what, const host_run *a, const host_run *b)
{
    for (int i = 0; i < a->n && i < 4; i++) /* names has 4 */
        if (memcmp(a->v[i], b->v[i], sizeof(double) * (size_t)a->len[i]))
            fail_msg("%s: %s differs between two CUDA runs", what, names[i]);
}

static void bf16_case_fn(op_fn fn, int B, int T, int H, int Hkv, int D, const int64_t *cu, int n_cu, bool native)
{
    PR_SKIP_WITHOUT_CUDA();
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init((uint64_t)(T * 131 + D * 7 + H * 3 + Hkv), 0);
    pr_tensor *in[3] = {pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, H, D), &r),
                        pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, Hkv, D), &r),
                        pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, Hkv, D), &r)};
    pr_tensor *g[1] = {pr_randn(ctx->step, PR_F64, PR_CPU, PR_DIMS(B, T, H, D), &r)};
    char what[96];
    snprintf(what, sizeof what, "bf16 B=%d T=%d H=%d Hkv=%d D=%d%s%s", B, T, H, Hkv, D, cu ? " packed" : "",
             fn == att_twice_fn ? " twice" : fn == att_sharp_fn ? " scale 1" : "");
    host_run ref = run_on(ctx, fn, 3, in, cu, n_cu, 1, g, PR_BF16, PR_CPU, 0);
    host_run got = run_on(ctx, fn, 3, in, cu, n_cu, 1, g, PR_BF16, PR_CUDA, 0);
    if (last_staged == native) fail_msg("%s: expected the %s path", what, native ? "native" : "staged");
    host_run again = run_on(ctx, fn, 3, in, cu, n_cu, 1, g, PR_BF16, PR_CUDA, 0);
    compare_bf16(what, &got, &ref);
    assert_same_bits(what, &got, &again);
    host_run_free(&got), host_run_free(&again);
    host_run_free(&ref);
    pr_ctx_free(ctx);
}

static void bf16_case(int B, int T, int H, int Hkv, int D, const int64_t *cu, int n_cu, bool native)
{
    bf16_case_fn(att_fn, B, T, H, Hkv, D, cu, n_cu, native);
}

static void test_odd_t_gqa2_d64(void **s) { (void)s, bf16_case(2, 77, 4, 2, 64, NULL, 0, true); }
static void test_one_token_d128(void **s) { (void)s, bf16_case(3, 1, 2, 2, 128, NULL, 0, true); }
static void test_t130_gqa4_d128(void **s) { (void)s, bf16_case(1, 130, 8, 2, 128, NULL, 0, true); }
static void test_whole_tiles_d64(void **s) { (void)s, bf16_case(2, 128, 2, 2, 64, NULL, 0, true); }
static void test_odd_t_mha_d128(void **s) { (void)s, bf16_case(2, 33, 3, 3, 128, NULL, 0, true); }

static const int64_t packed_cu[5] = {0, 1, 18, 82, 212}; /* lengths 1, 17, 64, 130 */
static void test_packed_gqa4_d64(void **s) { (void)s, bf16_case(1, 212, 4, 1, 64, packed_cu, 5, true); }
static void test_packed_gqa2_d128(void **s) { (void)s, bf16_case(1, 212, 4, 2, 128, packed_cu, 5, true); }

static void test_grads_accumulate(void **s) { (void)s, bf16_case_fn(att_twice_fn, 2, 100, 4, 2, 64, NULL, 0, true); }
static void test_sharp_scores(void **s) { (void)s, bf16_case_fn(att_sharp_fn, 2, 150, 2, 1, 64, NULL, 0, true); }

/* D = 96 (lm-130m's head dim) and D = 32: the same cases as at 64 and 128 */
static void test_odd_t_gqa2_d96(void **s) { (void)s, bf16_case(2, 77, 4, 2, 96, NULL, 0, true); }
static void test_t130_mha_d96(void **s) { (void)s, bf16_case(1, 130, 8, 8, 96, NULL, 0, true); }
static void test_whole_tiles_gqa4_d96(void **s) { (void)s, bf16_case(2, 128, 4, 1, 96, NULL, 0, true); }
static void test_packed_gqa2_d96(void **s) { (void)s, bf16_case(1, 212, 4, 2, 96, packed_cu, 5, true); }
static void test_grads_accumulate_d96(void **s)
{
    (void)s, bf16_case_fn(att_twice_fn, 1, 100, 2, 1, 96, NULL, 0, true);
}
static void test_odd_t_gqa2_d32(void **s) { (void)s, bf16_case(2, 77, 4, 2, 32, NULL, 0, true); }
static void test_packed_mha_d32(void **s) { (void)s, bf16_case(1, 212, 2, 2, 32, packed_cu, 5, true); }

/* no kernels for D = 48: the f32 kernels on staged copies */
static void test_staged_d48(void **s) { (void)s, bf16_case(2, 70, 4, 2, 48, NULL, 0, false); }

/* the attn LM at head dim 96 (d_model 192, 2 heads) under bf16 autocast: its
 * one attention node takes bf16 q, k, v and runs the flash kernels, not the
 * staged f32 path; the loss and its backward come out finite */
static void test_lm_head_dim96_native(void **s)
{
    (void)s;
    PR_SKIP_WITHOUT_CUDA();
    pr_config c = pr_config_default();
    pr_err err;
    static const char *const sets[] = {"mixer=attn", "d_model=192", "n_heads=2", "n_layers=1", "vocab=64"};
    for (int i = 0; i < 5; i++)
        if (pr_config_set(&c, sets[i], &err)) fail_msg("%s", err.msg);
    pr_model *m = pr_model_new(&c, PR_F32, PR_CUDA);
    pr_model_init(m);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_ctx_set_precision(ctx, PR_PREC_BF16);
    int32_t ids[2 * 70], tg[2 * 70];
    for (int j = 0; j < 2 * 70; j++) ids[j] = (j * 13 + 5) % 64, tg[j] = (j * 7 + 1) % 64;
    pr_tensor *loss = pr_lm_loss(ctx, m, pr_from_host(ctx->step, PR_I32, PR_CUDA, PR_DIMS(2, 70), ids),
                                 pr_from_host(ctx->step, PR_I32, PR_CUDA, PR_DIMS(2, 70), tg));
    int n_att = 0;
    for (int i = 0; i < ctx->n_tape; i++) {
        const pr_node *n = &ctx->tape[i];
        if (n->op != pr_op(PR_OP_attention)) continue;
        n_att++;
        for (int k = 0; k < 3; k++)
            if (n->in[k]->dtype != PR_BF16 || n->in[k]->shape[3] != 96)
                fail_msg("attention input %d: %s, head dim %lld (want bf16, 96)", k, pr_dtype_name(n->in[k]->dtype),
                         (long long)n->in[k]->shape[3]);
        if (n->staged) fail_msg("the attn LM's attention at head dim 96 ran staged, not the flash kernels");
    }
    assert_int_equal(n_att, 1);
    pr_backward(ctx, loss);
    const double l = pr_item(loss), gn = pr_params_grad_norm(m->params);
    fprintf(stderr, "  attn LM d_model 192, 2 heads (D = 96), bf16: loss %.4f, grad norm %.4f\n", l, gn);
    assert_true(isfinite(l) && isfinite(gn) && gn > 0);
    pr_params_release_grads(m->params);
    pr_ctx_free(ctx);
    pr_model_free(m);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_t_gqa2_d64),  cmocka_unit_test(test_one_token_d128),
        cmocka_unit_test(test_t130_gqa4_d128),  cmocka_unit_test(test_whole_tiles_d64),
        cmocka_unit_test(test_odd_t_mha_d128),  cmocka_unit_test(test_packed_gqa4_d64),
        cmocka_unit_test(test_packed_gqa2_d128), cmocka_unit_test(test_grads_accumulate),
        cmocka_unit_test(test_sharp_scores),     cmocka_unit_test(test_odd_t_gqa2_d96),
        cmocka_unit_test(test_t130_mha_d96),     cmocka_unit_test(test_whole_tiles_gqa4_d96),
        cmocka_unit_test(test_packed_gqa2_d96),  cmocka_unit_test(test_grads_accumulate_d96),
        cmocka_unit_test(test_odd_t_gqa2_d32),   cmocka_unit_test(test_packed_mha_d32),
        cmocka_unit_test(test_staged_d48),       cmocka_unit_test(test_lm_head_dim96_native),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
