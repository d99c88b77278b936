/* tests/test_selective_scan.c: Mamba-1's selective scan on the CPU.
 *
 * - the ops2 golden vectors (B=2 T=50 D=12 N=6, every optional input): y, ht
 *   and every input grad of sum(y*dy) + sum(ht*dht), f64 to 1e-10 and f32 to
 *   1e-5 relative to the max-abs;
 * - float64 gradcheck with packed sequences and no z, Dskip or delta_bias;
 * - packing: a packed run (one h0 per sequence) equals the separate runs;
 * - splitting: a run equals two runs over halves of T passing ht on as h0;
 * - misuse is fatal with a message naming the op and the input.
 */
#include "tests/test_ops2_util.h"

enum { NIN = 9 };
static const char *const names[NIN] = {"u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0"};

static pr_tensor *run(pr_ctx *ctx, pr_tensor *const *in, pr_tensor *cu, pr_tensor **ht)
{
    return pr_selective_scan(ctx, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], cu, ht);
}

static void golden_apply(pr_ctx *ctx, const pr_safetensors *st, pr_tensor *const *in, pr_tensor **out)
{
    (void)st;
    out[0] = run(ctx, in, NULL, &out[1]);
}

static void golden_case(pr_dtype dt)
{
    static const char *const outs[2] = {"y", "ht"};
    ops2_golden_case("selective_scan", names, NIN, outs, 2, golden_apply, dt);
}
static void test_golden_f64(void **s) { (void)s, golden_case(PR_F64); }
static void test_golden_f32(void **s) { (void)s, golden_case(PR_F32); }

/* random inputs: B batch rows (or S sequences' h0 when packed) of T tokens */
static void random_inputs(pr_ctx *ctx, pr_rng *r, int64_t B, int64_t T, int64_t D, int64_t N, int64_t S,
                          pr_tensor **in)
{
    const double lo[NIN] = {-1, -1.5, -1.5, -1, -1, -1, -1.5, -0.5, -0.5}, hi[NIN] = {1, 0.5, -0.2, 1, 1, 1, 1.5, 0.5, 0.5};
    const int64_t sh[NIN][3] = {{B, T, D}, {B, T, D}, {D, N}, {B, T, N}, {B, T, N}, {D}, {B, T, D}, {D}, {S, D, N}};
    const int nd[NIN] = {3, 3, 2, 3, 3, 1, 3, 1, 3};
    for (int i = 0; i < NIN; i++) in[i] = pr_example_input(ctx, r, PR_F64, nd[i], sh[i], lo[i], hi[i]);
}

static pr_tensor *packed_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    pr_tensor *ht, *y = pr_selective_scan(ctx, in[0], in[1], in[2], in[3], in[4], NULL, NULL, NULL, in[5], in[6], &ht);
    pr_tensor *flat[2] = {pr_reshape(ctx, y, PR_DIMS(-1)), pr_reshape(ctx, ht, PR_DIMS(-1))};
    return pr_concat(ctx, 2, flat, 0);
}

static void test_gradcheck_packed(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(3, 0);
    pr_tensor *in[NIN];
    random_inputs(ctx, &r, 1, 8, 3, 5, 3, in);
    pr_example ex = {.n_in = 7, .apply = packed_apply};
    for (int i = 0; i < 5; i++) ex.in[i] = in[i];
    ex.in[5] = in[8];
    ex.in[6] = cu_tensor(ctx, (const int64_t[]){0, 1, 5, 8}, 4, PR_CPU);
    pr_test_gradcheck_ok(ctx, "selective_scan packed", &ex);
    pr_ctx_free(ctx);
}

/* in[i] rows [t0, t0+len) along T (for the token-major inputs) as new leaves */
static void slice_inputs(pr_ctx *ctx, pr_tensor *const *in, int64_t t0, int64_t len, pr_tensor *h0, pr_tensor **out)
{
    static const bool along_t[NIN] = {1, 1, 0, 1, 1, 0, 1, 0, 0};
    for (int i = 0; i < NIN; i++) {
        out[i] = along_t[i] ? pr_clone(ctx->step, pr_slice(ctx, in[i], 1, t0, len)) : in[i];
        if (along_t[i]) pr_requires_grad_(out[i], true);
    }
    out[8] = h0;
}

static void test_packed_equals_separate(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(4, 0);
    const int64_t cu[4] = {0, 2, 9, 14};
    pr_tensor *in[NIN], *ht;
    random_inputs(ctx, &r, 1, 14, 4, 3, 3, in);
    pr_tensor *y = run(ctx, in, cu_tensor(ctx, cu, 4, PR_CPU), &ht);
    for (int sq = 0; sq < 3; sq++) {
        pr_tensor *sin[NIN], *hts;
        slice_inputs(ctx, in, cu[sq], cu[sq + 1] - cu[sq], pr_slice(ctx, in[8], 0, sq, 1), sin);
        pr_tensor *ys = run(ctx, sin, NULL, &hts);
        assert_rel("packed y", pr_slice(ctx, y, 1, cu[sq], cu[sq + 1] - cu[sq]), ys, 1e-14);
        assert_rel("packed ht", pr_slice(ctx, ht, 0, sq, 1), hts, 1e-14);
    }
    pr_ctx_free(ctx);
}

static void test_split_equals_whole(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(6, 0);
    pr_tensor *in[NIN], *ht;
    random_inputs(ctx, &r, 2, 11, 3, 4, 2, in);
    pr_tensor *y = run(ctx, in, NULL, &ht);
    pr_tensor *a[NIN], *b[NIN], *hta, *htb;
    slice_inputs(ctx, in, 0, 6, in[8], a);
    pr_tensor *ya = run(ctx, a, NULL, &hta);
    slice_inputs(ctx, in, 6, 5, hta, b);
    pr_tensor *yb = run(ctx, b, NULL, &htb);
    assert_rel("split y[:6]", pr_slice(ctx, y, 1, 0, 6), ya, 1e-14);
    assert_rel("split y[6:]", pr_slice(ctx, y, 1, 6, 5), yb, 1e-14);
    assert_rel("split ht", ht, htb, 1e-14);
    pr_ctx_free(ctx);
}

static void test_errors(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng r = pr_rng_init(1, 0);
    pr_tensor *in[NIN];
    random_inputs(ctx, &r, 2, 5, 3, 4, 2, in);
    pr_tensor *bad = pr_zeros(ctx->step, PR_F64, PR_CPU, PR_DIMS(2, 5, 3));
    PR_EXPECT_FATAL(pr_selective_scan(ctx, in[0], in[1], in[2], bad, in[4], NULL, NULL, NULL, NULL, NULL, NULL),
                    "selective_scan: Bm has shape [2,5,3]; expected [2,5,4]");
    PR_EXPECT_FATAL(pr_selective_scan(ctx, in[0], in[1], in[2], in[3], in[4], NULL, NULL, NULL, bad, NULL, NULL),
                    "selective_scan: h0 has shape [2,5,3]; expected [2,3,4]");
    PR_EXPECT_FATAL(pr_selective_scan(ctx, in[0], in[1], in[2], in[3], in[4], NULL, NULL, NULL, NULL,
                                      cu_tensor(ctx, (const int64_t[]){0, 5}, 2, PR_CPU), NULL),
                    "selective_scan: cu_seqlens needs B = 1");
    PR_EXPECT_FATAL(pr_selective_scan(ctx, in[0], in[1], pr_to(ctx->step, in[2], PR_F32, PR_CPU), in[3], in[4], NULL,
                                      NULL, NULL, NULL, NULL, NULL),
                    "selective_scan: dtype mismatch");
    pr_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_f64),       cmocka_unit_test(test_golden_f32),
        cmocka_unit_test(test_gradcheck_packed), cmocka_unit_test(test_packed_equals_separate),
        cmocka_unit_test(test_split_equals_whole), cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
