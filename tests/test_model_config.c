/* tests/test_model_config.c: configs, the parameter registry and checkpoints.
 *
 * - config: defaults, presets, JSON (nested = dotted keys), key=value; unknown
 *   keys, bad values, wrong JSON types, malformed JSON and bad combinations are
 *   errors naming the key (and the allowed values);
 * - keyed init: a parameter's values depend on (seed, path, shape) only, not on
 *   the other parameters or their order; models with more parameters share
 *   the values of the common ones;
 * - checkpoints: save then load gives the same values; a missing tensor or a
 *   wrong shape names the file and the tensor.
 */
#include <unistd.h>

#include "tests/pr_test.h"
#include "models/models.h"
#include "train/train.h"

static void expect_error(int rc, const pr_err *err, const char *needle)
{
    assert_int_equal(rc, -1);
    if (!strstr(err->msg, needle)) fail_msg("error \"%s\" does not contain \"%s\"", err->msg, needle);
}

static void test_config_sources(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    assert_string_equal(c.mixer, "prism");
    assert_int_equal(c.prism_L, 2);
    assert_int_equal(pr_config_preset(&c, "probe", &err), 0);
    assert_int_equal(c.d_model, 16);
    assert_int_equal(c.n_layers, 2);
    assert_string_equal(c.mlp, "gelu");
    assert_int_equal(pr_config_apply_json(&c, "{\"prism\": {\"L\": 1, \"gelu\": false}, \"norm\": \"layernorm\"}",
                                          "test", &err), 0);
    assert_int_equal(c.prism_L, 1);
    assert_false(c.prism_gelu);
    assert_string_equal(c.norm, "layernorm");
    assert_int_equal(pr_config_set(&c, "prism.shortconv=off", &err), 0);
    assert_false(c.prism_shortconv);
    assert_int_equal(pr_config_set(&c, "norm_eps=1e-6", &err), 0);
    assert_true(c.norm_eps == 1e-6);
    pr_config a = pr_config_default();   /* the authors' probe models: 1 head, an untied head */
    assert_int_equal(pr_config_preset(&a, "probe-authors", &err), 0);
    assert_int_equal(a.n_heads, 1);
    assert_false(a.tie_embeddings);
    pr_config l = pr_config_default();
    assert_int_equal(pr_config_preset(&l, "lm-130m", &err), 0);
    assert_int_equal(l.d_model, 768);
    assert_int_equal(l.n_heads, 8);
    assert_int_equal(l.vocab, 32000);
    assert_int_equal(pr_config_preset(&l, "rec-small", &err), 0);
    assert_int_equal(l.task, PR_HEAD_REC);

    /* the JSON dump reads back to the same config */
    char *json = pr_config_to_json(&c);
    pr_config back = pr_config_default();
    assert_int_equal(pr_config_apply_json(&back, json, "dump", &err), 0);
    free(json);
    assert_memory_equal(&back, &c, sizeof c);
}

/* task and block are enums parsed once; their words in files and on the
 * command line stay "lm", "rec", "prenorm", "sasrec" */
static void test_head_and_block_words(void **state)
{
    (void)state;
    pr_err err;
    pr_config c = pr_config_default();
    assert_int_equal(c.task, PR_HEAD_LM);
    assert_int_equal(c.block, PR_BLOCK_PRENORM);
    const pr_head heads[] = {PR_HEAD_LM, PR_HEAD_REC};
    for (int i = 0; i < 2; i++) {
        char kv[32];
        snprintf(kv, sizeof kv, "task=%s", pr_head_name(heads[i]));
        assert_int_equal(pr_config_set(&c, kv, &err), 0);
        assert_int_equal(c.task, heads[i]);
    }
    assert_int_equal(pr_config_preset(&c, "sasrec", &err), 0);
    assert_int_equal(c.block, PR_BLOCK_SASREC);
    assert_string_equal(pr_block_name(c.block), "sasrec");
    assert_string_equal(pr_config_model_name(&c), "sasrec");
    char *json = pr_config_to_json(&c);
    assert_non_null(strstr(json, "\"task\":\"rec\""));
    assert_non_null(strstr(json, "\"block\":\"sasrec\""));
    free(json);
    expect_error(pr_config_set(&c, "task=probe", &err), &err, "'task' (not one of the choices; allowed: lm|rec)");
    assert_int_equal(pr_config_set(&c, "block=prenorm", &err), 0);
    assert_string_equal(pr_config_model_name(&c), "attn");
}

/* a mixer's own checks and value-dim rule come from its pr_mixer_def: they
 * apply to that mixer and no other */
static void test_mixer_capabilities(void **state)
{
    (void)state;
    pr_err err;
    const char *const bad[][2] = {{"mamba2", "mamba2.head_dim=48"}, {"attn", "attn.kv_heads=3"},
                                  {"mom", "mom.topk=5"}};
    const char *const why[] = {"mamba2.head_dim 48 does not divide", "attn.kv_heads 3 does not divide n_heads 4",
                               "mom.topk 5 is more than mom.memories 4"};
    for (int i = 0; i < 3; i++) {
        pr_config c = pr_config_default();
        char mixer[32];
        snprintf(mixer, sizeof mixer, "mixer=%s", bad[i][0]);
        assert_int_equal(pr_config_set(&c, bad[i][1], &err), 0);
        assert_int_equal(pr_config_check(&c, &err), 0);   /* prism has no such check */
        assert_int_equal(pr_config_set(&c, mixer, &err), 0);
        expect_error(pr_config_check(&c, &err), &err, why[i]);
    }
    pr_config c = pr_config_default();
    assert_int_equal(pr_config_set(&c, "gdn.expand_v=2", &err), 0);
    const char *const expands[] = {"gdn", "prism", "mom"}, *const plain[] = {"linattn", "deltanet", "attn"};
    for (int i = 0; i < 3; i++) {
        snprintf(c.mixer, sizeof c.mixer, "%s", expands[i]);
        assert_int_equal(pr_config_value_dim(&c), 2 * pr_config_head_dim(&c));
        snprintf(c.mixer, sizeof c.mixer, "%s", plain[i]);
        assert_int_equal(pr_config_value_dim(&c), pr_config_head_dim(&c));
    }
}

/* Issue 45: one number grammar (JSON's) for the model keys and train.*, in a
 * JSON file and after --set alike; a JSON config with text after the object
 * is refused, naming the byte. */
static void test_number_grammar(void **state)
{
    (void)state;
    static const char *const good[] = {"0", "-0", "16", "1e3", "1E+3", "2.5", "-1.25e-2", "1000.0"};
    static const char *const bad[] = {"0x10", "1e999", "inf", "nan", "", " 1", "1 ", "+1", "01", "1.", ".5", "1e",
                                      "1e+", "--1", "1,0", "0x1p3"};
    double x;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!pr_config_number(good[i], &x)) fail_msg("'%s' refused", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (pr_config_number(bad[i], &x)) fail_msg("'%s' accepted", bad[i]);
    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    pr_err err;
    assert_int_equal(pr_config_set(&c, "d_model=1e3", &err), 0);
    assert_int_equal(c.d_model, 1000);
    assert_int_equal(pr_train_set(&o, "train.steps=1e3", &err), 0);
    assert_int_equal(o.steps, 1000);
    expect_error(pr_config_set(&c, "d_model=0x10", &err), &err, "'d_model' (not an integer");
    expect_error(pr_train_set(&o, "train.steps=0x10", &err), &err, "train.steps: '0x10'");
    expect_error(pr_train_set(&o, "train.lr=0x1p-3", &err), &err, "train.lr: '0x1p-3'");
    expect_error(pr_config_set(&c, "norm_eps=0x1p-3", &err), &err, "'norm_eps' (not a number");
    expect_error(pr_config_set(&c, "d_model=1e30", &err), &err, "'d_model' (out of range");
    expect_error(pr_train_set(&o, "train.steps=1e30", &err), &err, "train.steps: '1e30'");
    expect_error(pr_config_apply_json(&c, "{\"d_model\":16}garbage", "f.json", &err), &err,
                 "f.json: malformed JSON: text after the object at byte 14 ('garbage')");
    expect_error(pr_config_apply_json(&c, "{\"d_model\": 1e30}", "f.json", &err), &err, "'d_model' (out of range");
    expect_error(pr_run_config_apply(&c, &o, "{\"model\":{}} x", "run.json", &err), &err,
                 "run.json: malformed JSON: text after the object at byte 13");
    expect_error(pr_run_config_apply(&c, &o, "{\"train\":{\"steps\":1e30}}", "run.json", &err), &err,
                 "run.json: train.steps: '1e+30' is not an integer");
    assert_int_equal(pr_config_apply_json(&c, "{\"d_model\":16} \n", "f.json", &err), 0);
    assert_int_equal(c.d_model, 16);
}

/* a config file is text of at most 16 MiB: a device is not read forever,
 * and a NUL byte (which would hide what follows it from the parser) is refused */
static void test_config_file_bounds(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    expect_error(pr_config_load(&c, "/dev/zero", &err), &err, "/dev/zero: cannot read: larger than 16 MiB");
    char path[64];
    snprintf(path, sizeof path, "/tmp/prism_cfg_nul_%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("{\"d_model\":16}\0{\"d_model\":8}", 1, 29, f);
    fclose(f);
    expect_error(pr_config_load(&c, path, &err), &err, "a NUL byte at byte 14: not a text file");
    unlink(path);
}

static void test_config_errors(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    expect_error(pr_config_set(&c, "prism.LL=2", &err), &err, "unknown key 'prism.LL'");
    expect_error(pr_config_set(&c, "norm=batchnorm", &err), &err, "'norm' (not one of the choices; allowed: rmsnorm|layernorm)");
    expect_error(pr_config_set(&c, "mixer=rwkv", &err), &err, "allowed: prism|gdn|");
    expect_error(pr_config_set(&c, "d_model=12x", &err), &err, "'d_model' (not an integer");
    expect_error(pr_config_set(&c, "prism.L=9", &err), &err, "'prism.L' (out of range; allowed: 0..8)");
    char at_bound[32], past_bound[32];   /* the range is PR_PRISM_MAX_L, the bound of prism.c's arrays */
    snprintf(at_bound, sizeof at_bound, "prism.L=%d", PR_PRISM_MAX_L);
    snprintf(past_bound, sizeof past_bound, "prism.L=%d", PR_PRISM_MAX_L + 1);
    assert_int_equal(pr_config_set(&c, at_bound, &err), 0);
    expect_error(pr_config_set(&c, past_bound, &err), &err, "'prism.L' (out of range");
    assert_int_equal(pr_config_set(&c, "prism.L=2", &err), 0);
    expect_error(pr_config_set(&c, "prism.gain=maybe", &err), &err, "'prism.gain' (not a boolean; allowed: true|false)");
    expect_error(pr_config_set(&c, "norm_eps=nan", &err), &err, "'norm_eps'");
    expect_error(pr_config_set(&c, "d_model", &err), &err, "not key=value");
    expect_error(pr_config_apply_json(&c, "{\"prism\": {\"K\": 1}}", "f.json", &err), &err, "f.json: unknown key 'prism.K'");
    expect_error(pr_config_apply_json(&c, "{\"d_model\": \"big\"}", "f.json", &err), &err, "'d_model' must be a number");
    expect_error(pr_config_apply_json(&c, "{\"prism\": {\"gelu\": 1}}", "f.json", &err), &err, "'prism.gelu' must be true or false");
    expect_error(pr_config_apply_json(&c, "{\"d_model\": 2.5}", "f.json", &err), &err, "'d_model' (not an integer");
    expect_error(pr_config_apply_json(&c, "{\"d_model\": 16,", "f.json", &err), &err, "f.json: malformed JSON");
    expect_error(pr_config_apply_json(&c, "[1]", "f.json", &err), &err, "must be a JSON object");
    expect_error(pr_config_preset(&c, "huge", &err), &err, "unknown preset 'huge' (allowed: probe|probe-authors|rec-small");
    expect_error(pr_config_load(&c, "/nonexistent/model.json", &err), &err, "/nonexistent/model.json: cannot open");
    /* nothing above changed the config */
    pr_config d = pr_config_default();
    assert_memory_equal(&c, &d, sizeof c);

    c.d_model = 10, c.n_heads = 4;
    expect_error(pr_config_check(&c, &err), &err, "d_model 10 is not a multiple of n_heads 4");
    c = d;
    assert_int_equal(pr_config_set(&c, "mixer=mamba2", &err), 0);
    assert_int_equal(pr_config_set(&c, "mamba2.head_dim=48", &err), 0);
    expect_error(pr_config_check(&c, &err), &err, "mamba2.head_dim 48");
    c = d;
    c.ignore_index = 3;
    expect_error(pr_config_check(&c, &err), &err, "ignore_index 3");
}

static void test_config_file(void **state)
{
    (void)state;
    char path[] = "/tmp/prism-test-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "{\"mixer\": \"gdn\", \"d_model\": 32, \"gdn\": {\"gate\": false}}";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_load(&c, path, &err), 0);
    unlink(path);
    assert_string_equal(c.mixer, "gdn");
    assert_int_equal(c.d_model, 32);
    assert_false(c.gdn_gate);
}

/* ---- keyed init ---------------------------------------------------------------------- */
static void test_keyed_init_independence(void **state)
{
    (void)state;
    pr_init n = {PR_INIT_NORMAL, 1, 0};
    pr_params *a = pr_params_new(PR_F32, PR_CPU), *b = pr_params_new(PR_F64, PR_CPU);
    pr_param_new(a, "x", n, true, PR_DIMS(3, 5));
    pr_params_push(a, "layers.%d", 0);
    pr_param_new(a, "w", n, true, PR_DIMS(4, 4));
    pr_params_pop(a);
    /* b: another order, an extra parameter before, one of a's missing */
    pr_param_new(b, "extra", n, true, PR_DIMS(7));
    pr_params_push(b, "layers");
    pr_params_push(b, "0");
    pr_tensor *bw = pr_param_new(b, "w", n, true, PR_DIMS(4, 4));
    pr_params_pop(b);
    pr_params_pop(b);
    pr_params_init(a, 5);
    pr_params_init(b, 5);
    const pr_param *aw = pr_params_find(a, "layers.0.w");
    assert_non_null(aw);
    assert_ptr_equal(pr_params_find(b, "layers.0.w")->t, bw);
    pr_assert_tensors_close("same path", aw->t, bw, 1e-7, 0);   /* f32 vs f64 of the same draws */
    assert_int_equal(pr_params_count(a), 15 + 16);

    /* another seed or another path draws other values */
    double v0 = pr_get(bw, 0);
    pr_param_init_one(pr_params_find(b, "layers.0.w"), 6);
    assert_true(pr_get(bw, 0) != v0);
    pr_params_init(b, 5);
    assert_true(pr_get(pr_params_find(b, "extra")->t, 0) != pr_get(pr_params_find(a, "x")->t, 0));
    PR_EXPECT_FATAL(pr_param_new(b, "extra", n, true, PR_DIMS(1)), "'extra' registered twice");
    pr_params_free(a);
    pr_params_free(b);
}

/* a prism model with L = 2 and one with L = 1 share the base parameters' values */
static void test_keyed_init_models(void **state)
{
    (void)state;
    pr_config c2 = pr_config_default(), c1;
    pr_err err;
    assert_int_equal(pr_config_preset(&c2, "probe", &err), 0);
    assert_int_equal(pr_config_set(&c2, "prism.form=augmented", &err), 0);
    c1 = c2;
    c1.prism_L = 1;
    pr_model *m2 = pr_model_new(&c2, PR_F32, PR_CPU), *m1 = pr_model_new(&c1, PR_F32, PR_CPU);
    pr_model_init(m2);
    pr_model_init(m1);
    assert_true(m1->params->n < m2->params->n);
    for (int i = 0; i < m1->params->n; i++) {
        const pr_param *p = &m1->params->p[i], *q = pr_params_find(m2->params, p->path);
        assert_non_null(q);
        assert_memory_equal(p->t->data, q->t->data, pr_nbytes(p->t));
    }
    /* the init kinds: norms 1, A_log in [0, ln 16], softplus(dt_bias) in [1e-3, 0.1] */
    assert_true(pr_get(pr_params_find(m2->params, "layers.1.norm1.w")->t, 3) == 1.0);
    const pr_tensor *A = pr_params_find(m2->params, "layers.0.mixer.A_log")->t;
    const pr_tensor *dt = pr_params_find(m2->params, "layers.0.mixer.dt_bias")->t;
    for (int64_t i = 0; i < A->numel; i++) {
        assert_true(pr_get(A, i) <= log(16.0) + 1e-6);
        double s = log1p(exp(pr_get(dt, i)));
        assert_true(s >= 1e-3 * 0.999 && s <= 0.1 * 1.001);
    }
    /* the refinement strengths' bias: 0 by default, prism.beta_bias when set */
    assert_true(pr_get(pr_params_find(m2->params, "layers.0.mixer.b_beta.1")->t, 0) == 0.0);
    pr_config c3 = c2;
    assert_int_equal(pr_config_set(&c3, "prism.beta_bias=-4", &err), 0);
    pr_model *m3 = pr_model_new(&c3, PR_F32, PR_CPU);
    pr_model_init(m3);
    for (int l = 0; l < 2; l++) {
        char path[64];
        snprintf(path, sizeof path, "layers.%d.mixer.b_beta.%d", l, l);
        const pr_tensor *b = pr_params_find(m3->params, path)->t;
        for (int64_t i = 0; i < b->numel; i++) assert_true(pr_get(b, i) == -4.0);
    }
    pr_model_free(m3);
    pr_model_free(m1);
    pr_model_free(m2);
}

/* form paper: the decay's bias is prism.a_bias, the gains' bias 1, the anchor's conv
 * U(-1/sqrt(W), 1/sqrt(W)) with W = prism.conv_width; factorised W_k, W_p with proj_rank */
static void test_paper_form_init(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "probe", &err), 0);
    assert_string_equal(c.prism_form, "paper");
    assert_int_equal(pr_config_set(&c, "prism.a_bias=2.5", &err), 0);
    assert_int_equal(pr_config_set(&c, "prism.conv_width=5", &err), 0);
    assert_int_equal(pr_config_set(&c, "prism.proj_rank=3", &err), 0);
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    pr_model_init(m);
    const pr_tensor *a = pr_params_find(m->params, "layers.0.mixer.a_bias")->t;
    for (int64_t i = 0; i < a->numel; i++) assert_true(pr_get(a, i) == 2.5);
    const pr_tensor *bp = pr_params_find(m->params, "layers.1.mixer.b_p.1")->t;
    for (int64_t i = 0; i < bp->numel; i++) assert_true(pr_get(bp, i) == 1.0);
    const pr_tensor *u = pr_params_find(m->params, "layers.0.mixer.u_conv")->t;
    assert_int_equal(u->shape[0], 16);
    assert_int_equal(u->shape[1], 5);
    for (int64_t i = 0; i < u->numel; i++) assert_true(fabs(pr_get(u, i)) <= 1 / sqrt(5.0));
    assert_int_equal(pr_params_find(m->params, "layers.0.mixer.w_k.1.down")->t->shape[1], 3);
    assert_int_equal(pr_params_find(m->params, "layers.0.mixer.w_p.0.up")->t->shape[0], 3);
    assert_null(pr_params_find(m->params, "layers.0.mixer.w_k.0"));
    assert_null(pr_params_find(m->params, "layers.0.mixer.k_proj"));   /* no gdn path in form paper */
    pr_model_free(m);

    /* the residual v - U needs n_heads * V = d_model */
    c = pr_config_default();
    assert_int_equal(pr_config_set(&c, "head_dim=8", &err), 0);
    assert_int_equal(pr_config_check(&c, &err), -1);
    assert_non_null(strstr(err.msg, "prism.form=paper needs n_heads * V = d_model"));
    assert_int_equal(pr_config_set(&c, "prism.form=augmented", &err), 0);
    assert_int_equal(pr_config_check(&c, &err), 0);
    assert_int_equal(pr_config_set(&c, "prism.form=paper", &err), 0);
    assert_int_equal(pr_config_set(&c, "prism.L=0", &err), 0);   /* L = 0 is gdn: any sizes */
    assert_int_equal(pr_config_check(&c, &err), 0);
    expect_error(pr_config_set(&c, "prism.form=Paper", &err), &err, "'prism.form' (not one of the choices; allowed: paper|augmented)");
}

/* the recurrence's chunk: `chunk` for every rule but PRISM's, which takes prism.chunk */
static void test_recurrence_chunk(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_recurrence(&c, PR_RULE_GDN, 100, 0).chunk, 64);
    assert_int_equal(pr_config_recurrence(&c, PR_RULE_PRISM_CORE, 100, 0).chunk, 32);
    assert_int_equal(pr_config_set(&c, "chunk=16", &err), 0);
    assert_int_equal(pr_config_set(&c, "prism.chunk=0", &err), 0);
    assert_int_equal(pr_config_recurrence(&c, PR_RULE_GDN, 100, 0).chunk, 16);
    assert_int_equal(pr_config_recurrence(&c, PR_RULE_PRISM_CORE, 100, 0).chunk, 0);
    /* one token runs the per-token form whatever the chunk */
    assert_int_equal(pr_config_recurrence(&c, PR_RULE_GDN, 1, 0).chunk, 0);
}

/* ---- the memory estimate ---------------------------------------------------------------- */
/* the registry with shapes only counts exactly what the model allocates, for every mixer */
static void test_shapes_count_what_the_model_allocates(void **state)
{
    (void)state;
    pr_err err;
    for (int i = 0; pr_mixers[i]; i++) {
        pr_config c = pr_config_default();
        assert_int_equal(pr_config_preset(&c, "probe", &err), 0);
        snprintf(c.mixer, sizeof c.mixer, "%s", pr_mixers[i]->name);
        pr_model *m = pr_model_new(&c, PR_F32, PR_CPU), *s = pr_model_shapes(&c);
        assert_int_equal(pr_params_count(s->params), pr_params_count(m->params));
        assert_int_equal(s->params->n, m->params->n);
        pr_model_estimate e;
        pr_model_estimate_step(&c, 8, 0, 2, &e);
        assert_int_equal(e.params, pr_params_count(m->params));
        assert_true(e.optim_bytes == 2 * e.param_bytes && e.activation_bytes > 0);
        pr_model_free(m);
        pr_model_free(s);
    }
    /* a config far past any host: counted in a moment, nothing allocated */
    pr_config big = pr_config_default();
    big.d_model = 65536;
    pr_model_estimate e;
    pr_model_estimate_step(&big, 32, 0, 2, &e);
    assert_true(e.total_bytes > 1e12 && e.total_bytes > pr_device_free_bytes(PR_CPU));
}

/* hstu's [B,H,T,T] scores: its step memory grows as T^2 (linear in B, in the
 * heads and in the blocks as built), beside the estimate's part linear in T,
 * and the benchmarks' check names them; other mixers have none */
static void test_hstu_scores_estimate(void **state)
{
    (void)state;
    pr_err err;
    pr_config c = pr_config_default();
    assert_int_equal(pr_config_preset(&c, "lm-130m", &err), 0);
    assert_int_equal(pr_config_set(&c, "mixer=hstu", &err), 0);
    const double b = pr_hstu_step_bytes(&c, 16, 1024);
    const pr_config built = pr_config_resolve(&c);
    assert_true(b == 48.0 * 16 * built.n_heads * 1024.0 * 1024.0 * built.n_layers);
    assert_true(pr_hstu_step_bytes(&c, 16, 2048) == 4 * b && pr_hstu_step_bytes(&c, 32, 1024) == 2 * b);
    const char *why = NULL;
    assert_true(pr_mixer_big_step_bytes(&c, 16, 1024, &why) == b);
    assert_non_null(strstr(why, "T x T scores"));
    pr_model_estimate short_seq, long_seq;
    c.seq_len = 1024;
    pr_model_estimate_step(&c, 16, 0, 2, &short_seq);
    c.seq_len = 2048;
    pr_model_estimate_step(&c, 16, 0, 2, &long_seq);   /* twice the tokens: more than twice the activations */
    assert_true(long_seq.activation_bytes > 2.5 * short_seq.activation_bytes);
    /* at lm-130m, 16 sequences of 1K: past an 80 GB card, as an H100 found (out of memory, 2026-12-05) */
    assert_true(b > 80e9);
    assert_int_equal(pr_config_set(&c, "mixer=gdn", &err), 0);
    assert_true(pr_hstu_step_bytes(&c, 16, 1024) == 0 && pr_mixer_big_step_bytes(&c, 16, 1024, &why) == 0);
    assert_int_equal(pr_config_set(&c, "mixer=atlas", &err), 0);
    assert_true(pr_mixer_big_step_bytes(&c, 16, 1024, &why) == pr_atlas_step_bytes(&c, 16, 1024));
    assert_non_null(strstr(why, "per-token form"));
}

/* ---- checkpoints ------------------------------------------------------------------------ */
/* sla is the PRISM paper's name for linattn; gla and gsa check that their widths split into heads */
static void test_aliases_and_widths(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_set(&c, "mixer=sla", &err), 0);
    assert_string_equal(c.mixer, "linattn");
    assert_ptr_equal(pr_mixer_by_name("sla"), &pr_mixer_linattn);
    assert_int_equal(pr_config_set(&c, "mixer=gla", &err), 0);
    assert_int_equal(pr_config_check(&c, &err), 0);   /* D 64, H 4: K 8, V 16 */
    assert_int_equal(pr_config_set(&c, "gla.expand_k=0.3", &err), 0);
    assert_int_equal(pr_config_check(&c, &err), -1);
    assert_non_null(strstr(err.msg, "gla.expand_k 0.3 times d_model 64"));
    assert_int_equal(pr_config_set(&c, "mixer=gsa", &err), 0);
    assert_int_equal(pr_config_check(&c, &err), 0);   /* gla's keys do not bind gsa */
    assert_int_equal(pr_config_set(&c, "gsa.expand_v=0.03125", &err), 0);   /* 2 channels for 4 heads */
    assert_int_equal(pr_config_check(&c, &err), -1);
    assert_non_null(strstr(err.msg, "not a positive multiple of n_heads 4"));
}

static void test_checkpoint_roundtrip(void **state)
{
    (void)state;
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "probe", &err), 0);
    pr_model *a = pr_model_new(&c, PR_F32, PR_CPU);
    pr_model_init(a);
    char path[] = "/tmp/prism-test-ckpt-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(pr_params_save(a->params, path, &err), 0);
    c.seed = 99;
    pr_model *b = pr_model_new(&c, PR_F32, PR_CPU);
    pr_model_init(b);
    assert_int_equal(pr_params_load(b->params, path, &err), 0);
    for (int i = 0; i < a->params->n; i++)
        assert_memory_equal(a->params->p[i].t->data, b->params->p[i].t->data, pr_nbytes(a->params->p[i].t));
    /* another model's checkpoint: the first missing tensor is named */
    pr_config g = c;
    snprintf(g.mixer, sizeof g.mixer, "gdn");
    pr_model *m = pr_model_new(&g, PR_F32, PR_CPU);
    assert_int_equal(pr_params_save(m->params, path, &err), 0);
    expect_error(pr_params_load(b->params, path, &err), &err, "no tensor 'layers.0.mixer.u_conv'");
    pr_config w = c;
    w.d_model = 32;
    pr_model *wide = pr_model_new(&w, PR_F32, PR_CPU);
    expect_error(pr_params_load(wide->params, path, &err), &err, "tensor 'embed' is [64,16], the model needs [64,32]");
    /* a deeper model's checkpoint into a shallower one: the first tensor it leaves unused is named */
    pr_config deep = c;
    deep.n_layers = c.n_layers + 1;
    pr_model *d = pr_model_new(&deep, PR_F32, PR_CPU);
    assert_int_equal(pr_params_save(d->params, path, &err), 0);
    char extra[64];
    snprintf(extra, sizeof extra, "tensor 'layers.%d.", c.n_layers);
    expect_error(pr_params_load(b->params, path, &err), &err, extra);
    expect_error(pr_params_load(b->params, path, &err), &err, "is not a parameter of this model");
    pr_model_free(d);
    /* an untied head into a model that ties it */
    pr_config untied = c;
    untied.tie_embeddings = false;
    pr_model *u = pr_model_new(&untied, PR_F32, PR_CPU);
    assert_int_equal(pr_params_save(u->params, path, &err), 0);
    expect_error(pr_params_load(b->params, path, &err), &err, "tensor 'lm_head' is not a parameter of this model");
    pr_model_free(u);
    unlink(path);
    pr_model_free(a);
    pr_model_free(b);
    pr_model_free(m);
    pr_model_free(wide);
}

/* lm-130m and rec-small size every mixer like attn (match_attn): within 10% of its count */
static void test_presets_match_attn(void **state)
{
    (void)state;
    const char *presets[] = {"lm-130m", "rec-small"};
    for (int p = 0; p < 2; p++) {
        int64_t counts[16], attn = 0;
        for (int i = 0; pr_mixers[i]; i++) {
            pr_config c = pr_config_default();
            pr_err err;
            char kv[64];
            snprintf(kv, sizeof kv, "mixer=%s", pr_mixers[i]->name);
            assert_int_equal(pr_config_preset(&c, presets[p], &err), 0);
            assert_int_equal(pr_config_set(&c, kv, &err), 0);
            pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);   /* not initialized: only the shapes count */
            counts[i] = pr_params_count(m->params);
            pr_model_free(m);
            if (strcmp(pr_mixers[i]->name, "attn") == 0) attn = counts[i];
        }
        assert_true(attn > 0);
        for (int i = 0; pr_mixers[i]; i++) {
            double ratio = (double)counts[i] / (double)attn;
            fprintf(stderr, "  %-9s %-10s %10lld params, %.3f x attn\n", presets[p], pr_mixers[i]->name,
                    (long long)counts[i], ratio);
            assert_true(ratio >= 0.9 && ratio <= 1.1);
        }
    }
    /* resolving twice changes nothing; without match_attn mamba2 keeps n_layers */
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "lm-130m", &err), 0);
    assert_int_equal(pr_config_set(&c, "mixer=mamba2", &err), 0);
    pr_config r = pr_config_resolve(&c), rr = pr_config_resolve(&r);
    assert_int_equal(r.n_layers, 16);
    assert_int_equal(rr.n_layers, 16);
    assert_int_equal(pr_config_set(&c, "match_attn=false", &err), 0);
    assert_int_equal(pr_config_resolve(&c).n_layers, 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_sources),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_head_and_block_words),
        cmocka_unit_test(test_mixer_capabilities),
        cmocka_unit_test(test_number_grammar),
        cmocka_unit_test(test_config_file_bounds),
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_keyed_init_independence),
        cmocka_unit_test(test_keyed_init_models),
        cmocka_unit_test(test_paper_form_init),
        cmocka_unit_test(test_presets_match_attn),
        cmocka_unit_test(test_recurrence_chunk),
        cmocka_unit_test(test_checkpoint_roundtrip),
        cmocka_unit_test(test_aliases_and_widths),
        cmocka_unit_test(test_shapes_count_what_the_model_allocates),
        cmocka_unit_test(test_hstu_scores_estimate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
