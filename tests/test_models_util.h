/* tests/test_models_util.h: what the model tests share: a small config for
 * every mixer (sizes that divide nothing evenly where the layer allows it),
 * one layer built on its own registry, random inputs. */
#ifndef PR_TEST_MODELS_UTIL_H
#define PR_TEST_MODELS_UTIL_H

#include "tests/pr_test.h"
#include "models/models.h"

/* every mixer the registry knows, with its test-size overrides; prism in both
 * forms (entry 0 is form augmented, the paper form's entries start at
 * TEST_PRISM_PAPER) */
static const struct {
    const char *name;
    const char *sets[6];
} test_mixers[] = {
    {"prism", {"prism.form=augmented", "prism.L=2"}},
    {"gdn", {NULL}},
    {"mamba2", {"mamba2.expand=2", "mamba2.head_dim=3", "mamba2.d_state=5", "mamba2.n_groups=2"}},
    {"deltanet", {"deltanet.gate=true"}},
    {"linattn", {NULL}},
    {"ttt_linear", {"ttt.mini_batch=4"}},
    {"ttt_mlp", {"ttt.mini_batch=4"}},
    {"titans", {"titans.chunk=3"}},
    {"attn", {"attn.kv_heads=1"}},
    {"mamba", {"mamba.expand=2", "mamba.d_state=3", "mamba.dt_rank=2"}},
    {"gdn", {"gdn.expand_v=2"}},
    {"prism", {"prism.form=augmented", "prism.L=1", "gdn.expand_v=2"}},
    {"prism", {"prism.form=paper", "prism.L=2"}},
    {"prism", {"prism.form=paper", "prism.L=1", "prism.knorm=off"}},
    {"prism", {"prism.form=paper", "prism.L=3", "prism.proj_rank=2", "prism.conv_width=2"}},
    {"mom", {"mom.memories=3"}},
    {"mom", {"mom.memories=4", "mom.topk=1", "mom.shared=false", "gdn.expand_v=2"}},
    {"mom", {"mom.memories=3", "mom.backend=gla", "gla.gate_normalizer=2"}},
    {"hstu", {"hstu.buckets=5"}},
    /* widths 3 D and 6 D split into 2 heads at D 6 and into 3 at D 20 (test_cuda_models) */
    {"gla", {"gla.expand_k=3", "gla.expand_v=3", "gla.gate_low_rank=3"}},
    {"gla", {"gla.expand_k=3", "gla.expand_v=6", "gla.gate=false", "gla.gate_normalizer=1"}},
    {"gsa", {"gsa.slots=5", "gsa.expand_k=3", "gsa.expand_v=3", "gsa.gate_normalizer=1"}},
    {"attn", {"attn.shortconv=3"}},         /* the authors' probe baselines' conv before the layer */
    {"mamba2", {"mamba2.expand=2", "mamba2.head_dim=3", "mamba2.d_state=5"}},  /* one group: the norm's weight fused */
    {"linattn", {"linattn.shortconv=5"}},
    {"atlas", {"atlas.window=3"}},
    {"atlas", {"atlas.window=2", "atlas.optimizer=muon", "atlas.ns_steps=3"}},
    {"atlas", {"atlas.window=1", "atlas.degree=1"}},
    {"atlas", {"atlas.window=2", "atlas.memory=mlp"}},
    {"atlas", {"atlas.memory=mlp", "atlas.optimizer=muon", "atlas.ns_steps=2", "atlas.degree=1"}},
};
#define TEST_PRISM_PAPER 12   /* the first paper-form entry */
#define N_TEST_MIXERS ((int)(sizeof test_mixers / sizeof test_mixers[0]))

/* the first entry of mixer name (fatal to the test when there is none) */
static inline int test_mixer_index(const char *name)
{
    for (int i = 0; i < N_TEST_MIXERS; i++)
        if (strcmp(test_mixers[i].name, name) == 0) return i;
    fail_msg("no test mixer '%s'", name);
    return -1;
}

/* a tiny config for mixer i: D 6, 2 heads of 4, conv 3, chunk 4, weights N(0, 0.5)
 * so that every path carries signal (0.02 would let gradients vanish) */
static inline pr_config test_config(int i, int d_model, int n_heads, int head_dim, int chunk)
{
    pr_config c = pr_config_default();
    pr_err err;
    char kv[64];
    snprintf(kv, sizeof kv, "mixer=%s", test_mixers[i].name);
    assert_int_equal(pr_config_set(&c, kv, &err), 0);
    c.d_model = d_model, c.n_heads = n_heads, c.head_dim = head_dim, c.conv_width = 3, c.chunk = chunk;
    c.init_std = 0.5, c.vocab = 11, c.seed = 7;
    for (int j = 0; j < 6 && test_mixers[i].sets[j]; j++) {
        int rc = pr_config_set(&c, test_mixers[i].sets[j], &err);
        if (rc) fprintf(stderr, "  %s\n", err.msg);
        assert_int_equal(rc, 0);
    }
    /* the paper form subtracts the anchor U [D] from v [H*V]: V = D / H, and one
     * head where H does not divide D */
    if (strcmp(c.mixer, "prism") == 0 && strcmp(c.prism_form, "paper") == 0) {
        c.head_dim = 0, c.gdn_expand_v = 1;
        if (c.d_model % c.n_heads) c.n_heads = 1;
    }
    return c;   /* checked where it is built: callers may change sizes first */
}

typedef struct {
    pr_config cfg;
    const pr_mixer_def *def;
    pr_params *params;
    void *layer;
} test_layer;

/* the layer of cfg under the path prefix "mixer.", initialized from cfg.seed */
static inline test_layer test_layer_new(const pr_config *c, pr_dtype dt, pr_device dev)
{
    pr_err err;
    if (pr_config_check(c, &err)) fail_msg("%s", err.msg);
    test_layer t = {.cfg = *c, .def = pr_mixer_by_name(c->mixer), .params = pr_params_new(dt, dev)};
    assert_non_null(t.def);
    pr_params_push(t.params, "mixer");
    t.layer = t.def->build(t.params, c);
    pr_params_pop(t.params);
    pr_params_init(t.params, (uint64_t)c->seed);
    return t;
}

static inline void test_layer_free(test_layer *t) { pr_params_free(t->params); }

static inline pr_tensor *test_layer_forward(pr_ctx *ctx, const test_layer *t, pr_tensor *x, pr_layer_state *st)
{
    return t->def->forward(ctx, t->layer, &t->cfg, x, st);
}

/* x [B,T,D] ~ N(0,1) of dtype dt on the CPU in arena a, requiring grad */
static inline pr_tensor *test_input(pr_arena *a, pr_dtype dt, int64_t B, int64_t T, int64_t D, uint64_t seed)
{
    pr_rng r = pr_rng_init(seed, 1);
    pr_tensor *x = pr_randn(a, dt, PR_CPU, PR_DIMS(B, T, D), &r);
    pr_requires_grad_(x, true);
    return x;
}

/* float64 gradcheck of every parameter of r through ex0's apply, in groups
 * that fill a node after ex0's own inputs (e.g. a layer's x); the step is reset
 * between groups, so ex0's inputs must live in an arena of their own */
static inline void gradcheck_params(pr_ctx *ctx, const char *name, const pr_params *r, const pr_example *ex0,
                                    int64_t max_elems)
{
    pr_gradcheck_opts o = pr_gradcheck_defaults();
    o.max_elems = max_elems;
    for (int first = 0; first < r->n; first += PR_MAX_IN - ex0->n_in) {
        pr_example ex = *ex0;
        for (int i = first; i < r->n && ex.n_in < PR_MAX_IN; i++) ex.in[ex.n_in++] = r->p[i].t;
        char what[160];
        snprintf(what, sizeof what, "%s, params from %s", name, r->p[first].path);
        pr_gradcheck_result g = pr_gradcheck(ctx, what, &ex, &o);
        if (!g.ok) fprintf(stderr, "  %s\n", g.msg);
        assert_true(g.ok);
        pr_step_reset(ctx);
    }
}

/* every mixer's layer under bf16 autocast on dev: a prefix of 11, then one token
 * a call, against the whole sequence of 19 in the same precision, within a few
 * bf16 roundings (2e-2 of the output's scale + 1/32 relative); the count of mixers
 * that disagree */
static inline int test_decode_bf16_fails(pr_device dev)
{
    int fails = 0;
    for (int i = 0; i < N_TEST_MIXERS; i++) {
        pr_config c = test_config(i, 20, 3, 8, 32);
        c.init_std = 0.2;
        if (strcmp(c.mixer, "mamba2") == 0) c.mamba2_head_dim = 10, c.mamba2_d_state = 12;
        if (strcmp(c.mixer, "ttt_linear") == 0) c.ttt_mini_batch = 16;
        pr_ctx *ctx = pr_ctx_new(1);
        pr_ctx_set_precision(ctx, PR_PREC_BF16);
        test_layer l = test_layer_new(&c, PR_F32, dev);
        pr_tensor *x = pr_to(ctx->step, test_input(ctx->step, PR_F64, 2, 19, c.d_model, 21), PR_F32, dev);
        pr_tensor *whole = test_layer_forward(ctx, &l, x, NULL);
        pr_layer_state st = {0};
        pr_tensor *joined = test_layer_forward(ctx, &l, pr_slice(ctx, x, 1, 0, 11), &st);
        for (int64_t t = 11; t < 19; t++)
            joined = pr_concat(ctx, 2, (pr_tensor *[]){joined, test_layer_forward(ctx, &l, pr_slice(ctx, x, 1, t, 1), &st)}, 1);
        double *g = malloc(sizeof(double) * (size_t)whole->numel), *r = malloc(sizeof(double) * (size_t)whole->numel);
        pr_to_host_f64(joined, g);
        pr_to_host_f64(whole, r);
        double scale = 0;
        for (int64_t e = 0; e < whole->numel; e++) scale = fmax(scale, fabs(r[e]));
        char what[64];
        snprintf(what, sizeof what, "%s decode (bf16) vs whole", c.mixer);
        int bad = 0;
        pr_check_allclose(what, g, r, whole->numel, 2e-2 * scale, 1.0 / 32, &bad);
        fails += bad > 0;
        free(g);
        free(r);
        test_layer_free(&l);
        pr_ctx_free(ctx);
    }
    return fails;
}

#endif
