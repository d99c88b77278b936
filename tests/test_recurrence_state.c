/* tests/test_recurrence_state.c: the recurrences' state contract.
 *
 * - packing: sequences packed along T with cu_seqlens (B = 1) give what each
 *   sequence gives alone from its own initial state (outputs, final states,
 *   every gradient), in both forms; bad offsets are fatal with a clear message;
 * - pieces: a sequence run whole, or split in pieces with each piece's final
 *   state passed (on the tape) as the next one's initial state, or token by
 *   token, gives the same outputs and gradients.
 */
#include "tests/test_recurrence_util.h"

/* a leaf copy of x[:, t0:t0+len] for x [B,T,...], requiring grad */
static pr_tensor *slice_t(pr_ctx *ctx, const pr_tensor *x, int64_t t0, int64_t len)
{
    const int64_t B = x->shape[0], T = x->shape[1], row = x->numel / (B * T);
    const size_t es = pr_dtype_size(x->dtype);
    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[1] = len;
    pr_tensor *y = pr_empty(ctx->step, x->dtype, PR_CPU, x->ndim, shape);
    for (int64_t b = 0; b < B; b++)
        memcpy((char *)y->data + (size_t)(b * len * row) * es, (const char *)x->data + (size_t)((b * T + t0) * row) * es,
               (size_t)(len * row) * es);
    pr_requires_grad_(y, true);
    return y;
}

/* host [B,len,row] into full [B,T,row] at t0 (the inverse of slice_t) */
static void unslice_t(double *full, const double *piece, int64_t B, int64_t T, int64_t t0, int64_t len, int64_t row)
{
    for (int64_t b = 0; b < B; b++) memcpy(full + (b * T + t0) * row, piece + b * len * row, sizeof(double) * (size_t)(len * row));
}

/* host copy of x[:, t0:t0+len] for a host array of shape [B,T,row] */
static double *slice_host(const double *x, int64_t B, int64_t T, int64_t t0, int64_t len, int64_t row)
{
    double *y = malloc(sizeof(double) * (size_t)(B * len * row + 1));
    for (int64_t b = 0; b < B; b++) memcpy(y + b * len * row, x + (b * T + t0) * row, sizeof(double) * (size_t)(len * row));
    return y;
}

/* elements per token of input i (0 for h0) */
static int64_t row_of(const pr_tensor *x) { return x->numel / (x->shape[0] * x->shape[1]); }

/* ---- packing ---------------------------------------------------------------------------- */

static pr_tensor *cu_tensor(pr_ctx *ctx, pr_dtype dt, const int64_t *cu, int64_t n)
{
    pr_tensor *t = pr_zeros(ctx->step, dt, PR_CPU, 1, &n);
    for (int64_t i = 0; i < n; i++) pr_set(t, i, (double)cu[i]);
    return t;
}

static void packed_case(pr_rule rule, int chunk, pr_dtype cu_dt)
{
    const int64_t lens[] = {5, 1, 12, 3}, N = 4, H = 2, K = 4, V = 3, L = pr_rule_has_extra(rule) ? 2 : 0;
    int64_t cu[5] = {0};
    for (int n = 0; n < N; n++) cu[n + 1] = cu[n] + lens[n];
    const int64_t T = cu[N];
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(5, (uint32_t)rule);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, rule, 1, T, H, K, V, L, false);
    ri.h0 = pr_recurrence_random(ctx, &rng, PR_F64, rule, N, 1, H, K, V, L, true).h0;   /* [N,H,K,V] */
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(1, T * H * V), *dht = rec_randn(2, N * H * K * V);
    rec_out packed = rec_run(ctx, rule, chunk, in, cu_tensor(ctx, cu_dt, cu, N + 1), dout, dht);
    assert_int_equal(packed.n_ht, N * H * K * V);

    for (int64_t n = 0; n < N; n++) {
        pr_tensor *sin[REC_NIN] = {0};
        for (int i = 0; i < REC_NIN - 1; i++)
            if (in[i]) sin[i] = slice_t(ctx, in[i], cu[n], lens[n]);
        sin[7] = pr_clone(ctx->step, pr_view_rows(ctx->step, in[7], n, 1));
        pr_requires_grad_(sin[7], true);
        double *sdo = slice_host(dout, 1, T, cu[n], lens[n], H * V);
        rec_out one = rec_run(ctx, rule, chunk, sin, NULL, sdo, dht + n * H * K * V);
        /* the packed run's part for sequence n */
        rec_out part = {.n_o = one.n_o, .n_ht = one.n_ht};
        part.o = slice_host(packed.o, 1, T, cu[n], lens[n], H * V);
        part.ht = slice_host(packed.ht, 1, N, n, 1, H * K * V);
        for (int i = 0; i < REC_NIN; i++) {
            if (!in[i]) continue;
            part.n[i] = one.n[i];
            part.d[i] = i == 7 ? slice_host(packed.d[i], 1, N, n, 1, H * K * V)
                               : slice_host(packed.d[i], 1, T, cu[n], lens[n], row_of(in[i]));
        }
        char what[96];
        snprintf(what, sizeof what, "packed %s chunk %d, sequence %lld", pr_rule_name(rule), chunk, (long long)n);
        rec_assert_same(what, &part, &one, 1e-14);
        rec_out_free(&one);
        rec_out_free(&part);
        free(sdo);
    }
    rec_out_free(&packed);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

static void test_packed_equals_separate(void **s)
{
    (void)s;
    for (int r = 0; r < PR_NRULES; r++) {
        packed_case((pr_rule)r, 0, PR_I64);
        packed_case((pr_rule)r, 4, PR_I64);
    }
    packed_case(PR_RULE_PRISM_CORE, 0, PR_I32);
    packed_case(PR_RULE_PRISM_CORE, 64, PR_I32);
}

static void test_cu_seqlens_checks(void **s)
{
    (void)s;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(1, 0);
    pr_recurrence_inputs a = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GDN, 1, 8, 2, 3, 2, 0, false);
    pr_recurrence_inputs b2 = pr_recurrence_random(ctx, &rng, PR_F64, PR_RULE_GDN, 2, 4, 2, 3, 2, 0, true);
    const pr_recurrence_opts o = {.rule = PR_RULE_GDN};
#define RUN(x, cu, h0) pr_recurrence(ctx, &o, x.q, x.k, x.v, x.g, x.beta, NULL, NULL, h0, cu, NULL)
    PR_EXPECT_FATAL(RUN(a, cu_tensor(ctx, PR_I64, (int64_t[]){1, 3, 8}, 3), NULL), "must start at 0 and end at T=8");
    PR_EXPECT_FATAL(RUN(a, cu_tensor(ctx, PR_I64, (int64_t[]){0, 3, 7}, 3), NULL), "must start at 0 and end at T=8");
    PR_EXPECT_FATAL(RUN(a, cu_tensor(ctx, PR_I64, (int64_t[]){0, 5, 3, 8}, 4), NULL),
                    "cu_seqlens must be strictly increasing (cu_seqlens[1]=5, cu_seqlens[2]=3)");
    PR_EXPECT_FATAL(RUN(a, cu_tensor(ctx, PR_I32, (int64_t[]){0, 3, 3, 8}, 4), NULL), "strictly increasing");
    PR_EXPECT_FATAL(RUN(a, cu_tensor(ctx, PR_I64, (int64_t[]){0}, 1), NULL), "N+1 >= 2 offsets");
    PR_EXPECT_FATAL(RUN(a, cu_tensor(ctx, PR_F64, (int64_t[]){0, 8}, 2), NULL), "must be int32 or int64");
    PR_EXPECT_FATAL(RUN(b2, cu_tensor(ctx, PR_I64, (int64_t[]){0, 4}, 2), NULL), "cu_seqlens needs B = 1");
    /* h0 must have one state per packed sequence */
    PR_EXPECT_FATAL(RUN(a, cu_tensor(ctx, PR_I64, (int64_t[]){0, 3, 8}, 3), pr_view_rows(ctx->step, b2.h0, 0, 1)),
                    "h0 has shape [1,2,3,2], expected [2,2,3,2]");
    pr_tensor *ht;
    pr_recurrence(ctx, &o, a.q, a.k, a.v, a.g, a.beta, NULL, NULL, b2.h0, cu_tensor(ctx, PR_I64, (int64_t[]){0, 3, 8}, 3), &ht);
    assert_int_equal(ht->shape[0], 2);
#undef RUN
    pr_ctx_free(ctx);
}

/* ---- pieces -------------------------------------------------------------------------------- */

/* run in pieces of the given lengths, chaining each final state into the next
 * initial state on the tape; results reassembled like a whole run's */
static rec_out run_pieces(pr_ctx *ctx, pr_rule rule, int chunk, pr_tensor *const *in, const int64_t *lens, int np,
                          const double *dout, const double *dht)
{
    const int64_t B = in[0]->shape[0], T = in[0]->shape[1], H = in[0]->shape[2], V = in[2]->shape[3];
    pr_tensor *pin[64][REC_NIN], *o[64], *ht = NULL, *loss = NULL;
    PR_ASSERT(np <= 64);
    int64_t t0 = 0;
    for (int p = 0; p < np; p++) {
        for (int i = 0; i < REC_NIN - 1; i++) pin[p][i] = in[i] ? slice_t(ctx, in[i], t0, lens[p]) : NULL;
        pin[p][7] = p == 0 ? pr_clone(ctx->step, in[7]) : ht;
        if (p == 0) pr_requires_grad_(pin[0][7], true);
        pr_recurrence_opts opt = {.rule = rule, .chunk = chunk};
        pr_tensor **x = pin[p];
        o[p] = pr_recurrence(ctx, &opt, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], NULL, &ht);
        double *sdo = slice_host(dout, B, T, t0, lens[p], H * V);
        pr_tensor *l = rec_dot_loss(ctx, o[p], sdo);
        free(sdo);
        loss = loss ? pr_add(ctx, loss, l) : l;
        t0 += lens[p];
    }
    pr_backward(ctx, pr_add(ctx, loss, rec_dot_loss(ctx, ht, dht)));

    rec_out r = {0};
    r.n_o = B * T * H * V;
    r.o = malloc(sizeof(double) * (size_t)r.n_o);
    r.ht = rec_host(ht, &r.n_ht);
    for (int i = 0; i < REC_NIN - 1; i++)
        if (in[i]) r.n[i] = in[i]->numel, r.d[i] = malloc(sizeof(double) * (size_t)(in[i]->numel + 1));
    r.d[7] = rec_host(pin[0][7]->grad, &r.n[7]);
    t0 = 0;
    for (int p = 0; p < np; p++) {
        double *h = rec_host(o[p], NULL);
        unslice_t(r.o, h, B, T, t0, lens[p], H * V);
        free(h);
        for (int i = 0; i < REC_NIN - 1; i++) {
            if (!in[i]) continue;
            h = rec_host(pin[p][i]->grad, NULL);
            unslice_t(r.d[i], h, B, T, t0, lens[p], row_of(in[i]));
            free(h);
        }
        t0 += lens[p];
    }
    return r;
}

static void pieces_case(pr_rule rule, int chunk)
{
    const int64_t B = 2, T = 13, H = 2, K = 4, V = 3, L = pr_rule_has_extra(rule) ? 3 : 0;
    pr_ctx *ctx = pr_ctx_new(0);
    pr_rng rng = pr_rng_init(17, (uint32_t)rule);
    pr_recurrence_inputs ri = pr_recurrence_random(ctx, &rng, PR_F64, rule, B, T, H, K, V, L, true);
    pr_tensor *in[REC_NIN];
    rec_in_array(&ri, in);
    double *dout = rec_randn(1, B * T * H * V), *dht = rec_randn(2, B * H * K * V);
    rec_out whole = rec_run(ctx, rule, 0, in, NULL, dout, dht);
    const int64_t split[] = {5, 1, 7}, ones[13] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    rec_out a = run_pieces(ctx, rule, chunk, in, split, 3, dout, dht);
    rec_out b = run_pieces(ctx, rule, chunk, in, ones, 13, dout, dht);
    char what[96];
    snprintf(what, sizeof what, "%s chunk %d, pieces 5+1+7 vs whole", pr_rule_name(rule), chunk);
    rec_assert_same(what, &a, &whole, 1e-12);
    snprintf(what, sizeof what, "%s chunk %d, token by token vs whole", pr_rule_name(rule), chunk);
    rec_assert_same(what, &b, &whole, 1e-12);
    rec_out_free(&whole);
    rec_out_free(&a);
    rec_out_free(&b);
    free(dout);
    free(dht);
    pr_ctx_free(ctx);
}

static void test_pieces_equal_whole(void **s)
{
    (void)s;
    for (int r = 0; r < PR_NRULES; r++) {
        pieces_case((pr_rule)r, 0);
        pieces_case((pr_rule)r, 4);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_equals_separate),
        cmocka_unit_test(test_cu_seqlens_checks),
        cmocka_unit_test(test_pieces_equal_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
