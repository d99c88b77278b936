/* tests/test_mom.c: the MoM layer's routing and its load-balancing loss.
 *
 * - each memory sees only its own tokens: with top-1 routing and no shared
 *   memory, MoM's output at a token equals a gdn layer (memory e's weights)
 *   run on the sub-sequence of row b's tokens routed to e;
 * - the LM loss adds fla's balance loss, scale * E * sum_e f_e P_e over every
 *   layer's tokens, checked against the router's probabilities by hand;
 * - float64 gradcheck of the LM loss with the balance term, every parameter;
 * - mom.route=padded (routed on the device, each memory's sequence padded to
 *   T) gives the packed layout's loss and gradients, and its routing puts
 *   each pick in its memory's sequence in time order;
 * - bad configs are refused with the key named.
 * (Whole sequence == decoding, the layer gradcheck and training run for mom
 * with every mixer in test_models.c.)
 */
#include "tests/test_models_util.h"
#include "ops/route.h"

static int mom_index(void)
{
    for (int i = 0; i < N_TEST_MIXERS; i++)
        if (strcmp(test_mixers[i].name, "mom") == 0) return i;
    fail_msg("no mom in test_mixers");
    return -1;
}

static pr_config mom_config(const char *const *sets)
{
    pr_config c = test_config(mom_index(), 6, 2, 4, 4);
    pr_err err;
    for (int i = 0; sets[i]; i++) {
        int rc = pr_config_set(&c, sets[i], &err);
        if (rc) fprintf(stderr, "  %s\n", err.msg);
        assert_int_equal(rc, 0);
    }
    return c;
}

static void copy_param(const pr_params *to, const char *to_path, const pr_params *from, const char *from_path)
{
    const pr_param *a = pr_params_find(to, to_path), *b = pr_params_find(from, from_path);
    if (!a || !b) fail_msg("no parameter %s / %s", to_path, from_path);
    assert_int_equal(a->t->numel, b->t->numel);
    memcpy(a->t->data, b->t->data, pr_nbytes(a->t));
}

/* the memory (top-1) of each token: argmax of x W_router, on the host */
static void top1(const pr_tensor *x, const pr_tensor *router, int64_t *pick)
{
    int64_t BT = x->shape[0] * x->shape[1], D = x->shape[2], E = router->shape[1];
    const double *xv = x->data, *w = router->data;
    for (int64_t i = 0; i < BT; i++) {
        double best = -INFINITY;
        for (int64_t e = 0; e < E; e++) {
            double z = 0;
            for (int64_t d = 0; d < D; d++) z += xv[i * D + d] * w[d * E + e];
            if (z > best) best = z, pick[i] = e;
        }
    }
}

static void test_memory_sees_its_tokens(void **state)
{
    (void)state;
    pr_config c = mom_config((const char *[]){"mom.memories=3", "mom.topk=1", "mom.shared=false", NULL});
    pr_config cg = c;
    snprintf(cg.mixer, sizeof cg.mixer, "gdn");
    test_layer mom = test_layer_new(&c, PR_F64, PR_CPU), gdn = test_layer_new(&cg, PR_F64, PR_CPU);
    pr_ctx *ctx = pr_ctx_new(1);
    const int64_t B = 2, T = 13, D = c.d_model, E = c.mom_memories;
    pr_tensor *x = test_input(ctx->step, PR_F64, B, T, D, 17);
    pr_tensor *y = test_layer_forward(ctx, &mom, x, NULL);
    int64_t pick[2 * 13], used[3] = {0};
    top1(x, pr_params_find(mom.params, "mixer.router")->t, pick);
    const char *shared[] = {"q_proj", "q_conv", "k_conv", "v_conv", "A_log", "dt_bias", "g_proj", "o_norm", "o_proj"};
    for (int i = 0; i < 9; i++) {
        char p[64];
        snprintf(p, sizeof p, "mixer.%s", shared[i]);
        copy_param(gdn.params, p, mom.params, p);
    }
    for (int64_t e = 0; e < E; e++) {
        const char *own[] = {"k_proj", "v_proj", "a_proj", "b_proj"};
        for (int i = 0; i < 4; i++) {
            char to[64], from[64];
            snprintf(to, sizeof to, "mixer.%s", own[i]);
            snprintf(from, sizeof from, "mixer.%s.%d", own[i], (int)e);
            copy_param(gdn.params, to, mom.params, from);
        }
        for (int64_t b = 0; b < B; b++) {
            int64_t tok[13], n = 0;
            for (int64_t t = 0; t < T; t++)
                if (pick[b * T + t] == e) tok[n++] = t;
            if (!n) continue;
            used[e]++;
            pr_tensor *xs = pr_empty(ctx->step, PR_F64, PR_CPU, PR_DIMS(1, n, D));
            for (int64_t i = 0; i < n; i++)
                memcpy((double *)xs->data + i * D, (double *)x->data + (b * T + tok[i]) * D, sizeof(double) * (size_t)D);
            pr_tensor *ys = test_layer_forward(ctx, &gdn, xs, NULL);
            for (int64_t i = 0; i < n; i++) {
                char what[48];
                snprintf(what, sizeof what, "memory %d row %d token %d", (int)e, (int)b, (int)tok[i]);
                pr_assert_allclose(what, (double *)y->data + (b * T + tok[i]) * D, (double *)ys->data + i * D, D,
                                   1e-12, 1e-10);
            }
        }
    }
    int64_t live = 0;
    for (int64_t e = 0; e < E; e++) live += used[e] > 0;
    assert_true(live >= 2);   /* the check means something only if the routing splits the tokens */
    pr_ctx_free(ctx);
    test_layer_free(&mom);
    test_layer_free(&gdn);
}

/* ---- the balance loss ---------------------------------------------------------------- */
static const int64_t ids_host[2 * 7] = {1, 4, 6, 0, 2, 3, 9, 3, 5, 1, 0, 8, 10, 7};

static pr_model *mom_model(double scale, int n_layers)
{
    char s[48];
    snprintf(s, sizeof s, "mom.aux_loss_scale=%g", scale);
    pr_config c = mom_config((const char *[]){"mom.memories=3", s, NULL});
    c.n_layers = n_layers;
    pr_model *m = pr_model_new(&c, PR_F64, PR_CPU);
    pr_model_init(m);
    return m;
}

/* E * sum_e f_e P_e over the tokens of every layer, from the routers' inputs by hand */
static double balance_by_hand(pr_ctx *ctx, const pr_model *m, pr_tensor *ids)
{
    const int64_t E = m->cfg.mom_memories, k = m->cfg.mom_topk;
    double count[8] = {0}, prob[8] = {0}, tokens = 0;
    pr_tensor *h = pr_embedding(ctx, m->embed, ids);
    for (int i = 0; i < m->cfg.n_layers; i++) {
        char path[64];
        snprintf(path, sizeof path, "layers.%d.mixer.router", i);
        pr_tensor *x = pr_model_norm(ctx, m, &m->blocks[i].norm1, h);
        pr_tensor *p = pr_softmax(ctx, pr_matmul(ctx, x, pr_params_find(m->params, path)->t, false, false));
        const double *pv = p->data;
        for (int64_t t = 0; t < p->numel / E; t++, tokens++) {
            bool taken[8] = {false};
            for (int64_t j = 0; j < k; j++) {
                int64_t best = -1;
                for (int64_t e = 0; e < E; e++)
                    if (!taken[e] && (best < 0 || pv[t * E + e] > pv[t * E + best])) best = e;
                taken[best] = true;
                count[best]++;
            }
            for (int64_t e = 0; e < E; e++) prob[e] += pv[t * E + e];
        }
        h = pr_block_forward(ctx, m, i, h, NULL);
    }
    double sum = 0;
    for (int64_t e = 0; e < E; e++) sum += (count[e] / tokens) * (prob[e] / tokens);
    return (double)E * sum;
}

static void test_balance_loss(void **state)
{
    (void)state;
    const double scale = 0.7;
    pr_model *m = mom_model(scale, 2);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_tensor *ids = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(2, 7), ids_host);
    int64_t tg_host[14];
    for (int i = 0; i < 14; i++) tg_host[i] = (ids_host[i] + 3) % m->cfg.vocab;
    pr_tensor *tg = pr_from_host(ctx->step, PR_I64, PR_CPU, PR_DIMS(2, 7), tg_host);
    double ce = pr_item(pr_cross_entropy(ctx, pr_lm_logits(ctx, m, ids, NULL), tg, m->cfg.ignore_index));
    double got = pr_item(pr_lm_loss(ctx, m, ids, tg)), aux = balance_by_hand(ctx, m, ids);
    double want = ce + scale * aux;
    pr_assert_allclose("lm loss with balance", &got, &want, 1, 1e-12, 1e-10);
    assert_null(ctx->loss_aux);   /* the loss leaves the context as it found it */
    pr_ctx_free(ctx);
    pr_model_free(m);
}

static const pr_model *gc_model;
static pr_tensor *gc_ids, *gc_tg;

static pr_tensor *apply_loss(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)in, (void)ex;
    return pr_lm_loss(ctx, gc_model, gc_ids, gc_tg);
}

static void test_gradcheck_lm_loss(void **state)
{
    (void)state;
    pr_model *m = mom_model(0.5, 1);
    pr_arena *a = pr_arena_new("test-ids", 0);
    int64_t tg_host[14];
    for (int i = 0; i < 14; i++) tg_host[i] = (ids_host[i] * 2 + 1) % m->cfg.vocab;
    gc_ids = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2, 7), ids_host);
    gc_tg = pr_from_host(a, PR_I64, PR_CPU, PR_DIMS(2, 7), tg_host);
    gc_model = m;
    pr_ctx *ctx = pr_ctx_new(1);
    gradcheck_params(ctx, "mom lm loss", m->params, &(pr_example){.apply = apply_loss}, 10);
    pr_ctx_free(ctx);
    pr_arena_free(a);
    pr_model_free(m);
}

/* ---- padded routing (mom.route=padded) --------------------------------------------- */
/* the LM loss (balance term included) and every parameter's gradient, routed
 * packed and padded, the same weights: equal to rounding (f64) */
static void padded_matches_packed(const char *backend, const char *topk)
{
    pr_config c = mom_config((const char *[]){"mom.memories=3", backend, topk, "mom.aux_loss_scale=0.5", NULL});
    c.n_layers = 2;
    pr_config cp = c;
    pr_err err;
    assert_int_equal(pr_config_set(&cp, "mom.route=padded", &err), 0);
    pr_model *m[2] = {pr_model_new(&c, PR_F64, PR_CPU), pr_model_new(&cp, PR_F64, PR_CPU)};
    pr_model_init(m[0]);
    for (int i = 0; i < m[0]->params->n; i++)
        copy_param(m[1]->params, m[0]->params->p[i].path, m[0]->params, m[0]->params->p[i].path);
    int64_t tg_host[14];
    for (int i = 0; i < 14; i++) tg_host[i] = (ids_host[i] * 3 + 2) % c.vocab;
    double loss[2];
    pr_ctx *ctx[2];
    for (int r = 0; r < 2; r++) {
        ctx[r] = pr_ctx_new(1);
        pr_tensor *ids = pr_from_host(ctx[r]->step, PR_I64, PR_CPU, PR_DIMS(2, 7), ids_host);
        pr_tensor *tg = pr_from_host(ctx[r]->step, PR_I64, PR_CPU, PR_DIMS(2, 7), tg_host);
        pr_params_zero_grads(m[r]->params);
        pr_tensor *l = pr_lm_loss(ctx[r], m[r], ids, tg);
        loss[r] = pr_item(l);
        pr_backward(ctx[r], l);
    }
    char what[96];
    snprintf(what, sizeof what, "lm loss, padded against packed (%s, %s)", backend, topk);
    pr_assert_allclose(what, &loss[1], &loss[0], 1, 1e-12, 1e-10);
    for (int i = 0; i < m[0]->params->n; i++) {
        const pr_param *a = &m[0]->params->p[i], *b = pr_params_find(m[1]->params, a->path);
        assert_non_null(a->t->grad);
        snprintf(what, sizeof what, "grad %s (%s, %s)", a->path, backend, topk);
        pr_assert_allclose(what, b->t->grad->data, a->t->grad->data, a->t->numel, 1e-12, 1e-9);
    }
    for (int r = 0; r < 2; r++) pr_ctx_free(ctx[r]), pr_model_free(m[r]);
}

static void test_padded_matches_packed(void **state)
{
    (void)state;
    padded_matches_packed("mom.backend=gdn", "mom.topk=2");
    padded_matches_packed("mom.backend=gdn", "mom.topk=1");
    padded_matches_packed("mom.backend=gla", "mom.topk=2");
}

/* the routing itself: each memory's picks of a row fill its sequence's first
 * slots in time order, no slot taken twice, the counts add up, and f32
 * probabilities route as f64 ones */
static void test_route_padded(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    const int64_t B = 3, T = 11, E = 5, k = 2;
    pr_tensor *probs = pr_softmax(ctx, test_input(ctx->step, PR_F64, B, T, E, 5));
    pr_routing r = pr_route_padded(ctx, probs, k);
    const int64_t *at = r.at->data, *slot = r.slot->data;
    const double *pv = probs->data, *count = r.count->data;
    int64_t seen[5] = {0}, next[5][3] = {{0}};
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t j = 0; j < k; j++) {
            int64_t e = at[bt * k + j] - bt * E, s = slot[bt * k + j], b = bt / T;
            assert_true(e >= 0 && e < E);
            assert_int_equal(s, (e * B + b) * T + next[e][b]++);   /* sequence (e, b)'s next slot */
            if (j) assert_true(pv[bt * E + e] <= pv[at[bt * k + j - 1]]);   /* descending */
            seen[e]++;
        }
    for (int64_t e = 0; e < E; e++) assert_true(count[e] == (double)seen[e]);
    pr_routing r32 = pr_route_padded(ctx, pr_to(ctx->step, probs, PR_F32, PR_CPU), k);
    assert_memory_equal(r32.slot->data, r.slot->data, sizeof(int64_t) * (size_t)(B * T * k));
    assert_memory_equal(r32.at->data, r.at->data, sizeof(int64_t) * (size_t)(B * T * k));
    pr_ctx_free(ctx);
}

/* the ops that move rows: scatter puts each row in its k slots and zeros the
 * pads, gather reads them back, and slots taken twice or out of range are fatal */
static void test_route_moves(void **state)
{
    (void)state;
    pr_ctx *ctx = pr_ctx_new(1);
    const int64_t B = 2, T = 4, E = 3, k = 2, D = 3, S = E * B * T;
    pr_routing r = pr_route_padded(ctx, pr_softmax(ctx, test_input(ctx->step, PR_F64, B, T, E, 7)), k);
    pr_tensor *x = pr_reshape(ctx, test_input(ctx->step, PR_F64, 1, B * T, D, 3), PR_DIMS(B * T, D));
    pr_tensor *xs = pr_route_scatter(ctx, x, r.slot, S);
    const int64_t *slot = r.slot->data;
    const double *xv = x->data, *sv = xs->data;
    int64_t nonzero_rows = 0;
    for (int64_t s = 0; s < S; s++) nonzero_rows += sv[s * D] != 0 || sv[s * D + 1] != 0 || sv[s * D + 2] != 0;
    assert_int_equal(nonzero_rows, B * T * k);
    for (int64_t i = 0; i < B * T * k; i++) assert_memory_equal(sv + slot[i] * D, xv + (i / k) * D, sizeof(double) * D);
    pr_tensor *back = pr_route_gather(ctx, xs, r.slot);
    for (int64_t i = 0; i < B * T * k; i++)
        assert_memory_equal((double *)back->data + i * D, xv + (i / k) * D, sizeof(double) * D);
    pr_tensor *twice = pr_clone(ctx->step, r.slot);
    ((int64_t *)twice->data)[1] = ((int64_t *)twice->data)[0];
    PR_EXPECT_FATAL(pr_route_gather(ctx, xs, twice), "taken twice");
    ((int64_t *)twice->data)[1] = S;
    PR_EXPECT_FATAL(pr_route_scatter(ctx, x, twice, S), "outside [0, S)");
    pr_ctx_free(ctx);
}

static void test_bad_configs(void **state)
{
    (void)state;
    pr_err err;
    pr_config c = mom_config((const char *[]){"mom.memories=2", "mom.topk=3", NULL});
    assert_int_equal(pr_config_check(&c, &err), -1);
    assert_non_null(strstr(err.msg, "mom.topk"));
    c = mom_config((const char *[]){"mom.backend=gla", NULL});
    assert_int_equal(pr_config_check(&c, &err), 0);   /* GLA memories: built on the gla rule */
    assert_int_equal(pr_config_set(&c, "mom.backend=delta", &err), -1);
    assert_non_null(strstr(err.msg, "mom.backend"));
    assert_int_equal(pr_config_set(&c, "mom.memories=65", &err), -1);
    assert_non_null(strstr(err.msg, "mom.memories"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_sees_its_tokens),
        cmocka_unit_test(test_balance_loss),
        cmocka_unit_test(test_gradcheck_lm_loss),
        cmocka_unit_test(test_padded_matches_packed),
        cmocka_unit_test(test_route_padded),
        cmocka_unit_test(test_route_moves),
        cmocka_unit_test(test_bad_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
