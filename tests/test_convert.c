/* tests/test_convert.c: flash-linear-attention checkpoints in and out.
 *
 * - a GatedDeltaNet and a Transformer checkpoint written in fla's layout (names
 *   and [out, in] / [C, 1, W] shapes listed here by hand, bf16 values) convert
 *   in and back out to the same bytes for every tensor;
 * - every convertible mixer: a prism checkpoint exported and imported again is
 *   the same bytes, and the imported config builds the same model;
 * - fla options prism does not implement, and tensors with no place, are
 *   errors naming the key or the tensor.
 */
#include "tests/pr_test.h"
#include "models/models.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/prism_convert_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    const char *names[] = {"fla/config.json", "fla/model.safetensors", "back/config.json", "back/model.safetensors",
                           "prism.safetensors", "prism.json", "orig.safetensors", "orig.json", "fla", "back"};
    char p[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (remove(p) != 0 && i >= 8) rmdir(p);
    }
    return rmdir(dir);
}

static const char *path_in(const char *name)
{
    static char p[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_file(const char *file, const char *text)
{
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

typedef struct { const char *name; int ndim; int64_t shape[3]; } fla_tensor;

/* an fla checkpoint of tensors of one dtype with arbitrary bytes */
static void write_fla_as(const char *config_json, const fla_tensor *ts, int n, pr_dtype dt)
{
    mkdir(path_in("fla"), 0777);
    write_file(path_in("fla/config.json"), config_json);
    pr_arena *a = pr_arena_new("test-fla", 0);
    const char *names[64];
    const pr_tensor *tensors[64];
    uint64_t state = 5;
    for (int i = 0; i < n; i++) {
        pr_tensor *t = pr_empty(a, dt, PR_CPU, ts[i].ndim, ts[i].shape);
        unsigned char *b = t->data;
        for (size_t j = 0; j < pr_nbytes(t); j++) b[j] = (unsigned char)((state = state * 6364136223846793005u + 1442695040888963407u) >> 56);
        names[i] = ts[i].name, tensors[i] = t;
    }
    pr_err err;
    assert_int_equal(pr_safetensors_write(path_in("fla/model.safetensors"), n, names, tensors, 0, NULL, NULL, &err), 0);
    pr_arena_free(a);
}

static void write_fla(const char *config_json, const fla_tensor *ts, int n)
{
    write_fla_as(config_json, ts, n, PR_BF16);
}

/* the two files hold the same names, each with the same dtype, shape and bytes */
static void assert_same_tensors(const char *fa, const char *fb)
{
    pr_arena *a = pr_arena_new("test-cmp", 0);
    pr_safetensors x = {0}, y = {0};
    pr_err err;
    assert_int_equal(pr_safetensors_read(fa, a, &x, &err), 0);
    assert_int_equal(pr_safetensors_read(fb, a, &y, &err), 0);
    assert_int_equal(x.n, y.n);
    for (int i = 0; i < x.n; i++) {
        const pr_tensor *s = x.tensors[i], *t = pr_safetensors_get(&y, x.names[i]);
        if (!t) fail_msg("%s: no tensor '%s'", fb, x.names[i]);
        assert_int_equal(s->dtype, t->dtype);
        assert_true(pr_same_shape(s, t));
        assert_memory_equal(s->data, t->data, pr_nbytes(s));
    }
    pr_arena_free(a);
}

static void convert_in_and_out(void)
{
    pr_err err;
    int rc = pr_fla_import(path_in("fla"), path_in("prism.safetensors"), path_in("prism.json"), &err);
    if (rc) fail_msg("import: %s", err.msg);
    rc = pr_fla_export(path_in("prism.json"), path_in("prism.safetensors"), path_in("back"), &err);
    if (rc) fail_msg("export: %s", err.msg);
    assert_same_tensors(path_in("fla/model.safetensors"), path_in("back/model.safetensors"));
}

static void test_fla_gdn_round_trip(void **state)
{
    (void)state;
    /* D 8, 2 heads of K 3 (HK 6) and V 6 (expand_v 2, fla's default: HV 12), conv 3, vocab 11, MLP 16, untied */
    const fla_tensor ts[] = {
        {"model.embeddings.weight", 2, {11, 8}},
        {"model.layers.0.attn_norm.weight", 1, {8}},
        {"model.layers.0.attn.q_proj.weight", 2, {6, 8}},
        {"model.layers.0.attn.k_proj.weight", 2, {6, 8}},
        {"model.layers.0.attn.v_proj.weight", 2, {12, 8}},
        {"model.layers.0.attn.a_proj.weight", 2, {2, 8}},
        {"model.layers.0.attn.b_proj.weight", 2, {2, 8}},
        {"model.layers.0.attn.A_log", 1, {2}},
        {"model.layers.0.attn.dt_bias", 1, {2}},
        {"model.layers.0.attn.q_conv1d.weight", 3, {6, 1, 3}},
        {"model.layers.0.attn.k_conv1d.weight", 3, {6, 1, 3}},
        {"model.layers.0.attn.v_conv1d.weight", 3, {12, 1, 3}},
        {"model.layers.0.attn.g_proj.weight", 2, {12, 8}},
        {"model.layers.0.attn.o_norm.weight", 1, {6}},
        {"model.layers.0.attn.o_proj.weight", 2, {8, 12}},
        {"model.layers.0.mlp_norm.weight", 1, {8}},
        {"model.layers.0.mlp.gate_proj.weight", 2, {16, 8}},
        {"model.layers.0.mlp.up_proj.weight", 2, {16, 8}},
        {"model.layers.0.mlp.down_proj.weight", 2, {8, 16}},
        {"model.norm.weight", 1, {8}},
        {"lm_head.weight", 2, {11, 8}},
    };
    write_fla("{\"model_type\":\"gated_deltanet\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_heads\":2,"
              "\"head_dim\":3,\"expand_v\":2,\"conv_size\":3,\"vocab_size\":11,\"intermediate_size\":16,"
              "\"tie_word_embeddings\":false,\"norm_eps\":1e-6,\"use_gate\":true,\"fuse_norm\":true}",
              ts, (int)(sizeof ts / sizeof ts[0]));
    convert_in_and_out();
    /* prism's side: [in, out] linears and [C, W] convs under parameter paths */
    pr_arena *a = pr_arena_new("test-prism", 0);
    pr_safetensors p = {0};
    pr_err err;
    assert_int_equal(pr_safetensors_read(path_in("prism.safetensors"), a, &p, &err), 0);
    const pr_tensor *q = pr_safetensors_get(&p, "layers.0.mixer.q_proj");
    const pr_tensor *conv = pr_safetensors_get(&p, "layers.0.mixer.k_conv");
    assert_non_null(q);
    assert_non_null(conv);
    assert_true(q->ndim == 2 && q->shape[0] == 8 && q->shape[1] == 6);
    assert_true(conv->ndim == 2 && conv->shape[0] == 6 && conv->shape[1] == 3);
    pr_arena_free(a);
    pr_config c = pr_config_default();
    assert_int_equal(pr_config_load(&c, path_in("prism.json"), &err), 0);
    assert_string_equal(c.mixer, "gdn");
    assert_int_equal((int)llround(c.mlp_mult * c.d_model), 16);
    assert_int_equal(c.gdn_expand_v, 2);
}

static void test_fla_transformer_round_trip(void **state)
{
    (void)state;
    /* D 8, 2 heads of 4 reading 1 kv head, tied: no lm_head */
    const fla_tensor ts[] = {
        {"model.embeddings.weight", 2, {11, 8}},
        {"model.layers.0.attn_norm.weight", 1, {8}},
        {"model.layers.0.attn.q_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.k_proj.weight", 2, {4, 8}},
        {"model.layers.0.attn.v_proj.weight", 2, {4, 8}},
        {"model.layers.0.attn.o_proj.weight", 2, {8, 8}},
        {"model.layers.0.mlp_norm.weight", 1, {8}},
        {"model.layers.0.mlp.gate_proj.weight", 2, {12, 8}},
        {"model.layers.0.mlp.up_proj.weight", 2, {12, 8}},
        {"model.layers.0.mlp.down_proj.weight", 2, {8, 12}},
        {"model.norm.weight", 1, {8}},
    };
    write_fla("{\"model_type\":\"transformer\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_heads\":2,"
              "\"num_kv_heads\":1,\"vocab_size\":11,\"intermediate_size\":12,\"tie_word_embeddings\":true,"
              "\"rope_theta\":500.0,\"qk_norm\":false,\"window_size\":null}",
              ts, (int)(sizeof ts / sizeof ts[0]));
    convert_in_and_out();
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_load(&c, path_in("prism.json"), &err), 0);
    assert_string_equal(c.mixer, "attn");
    assert_int_equal(c.attn_kv_heads, 1);
    assert_true(c.attn_rope_theta == 500.0);
}

/* the LM's float64 logits of model (config, checkpoint) on a fixed token row, malloc'd */
static double *logits_of(const pr_config *c, const char *ckpt)
{
    pr_model *m = pr_model_new(c, PR_F64, PR_CPU);
    pr_err err;
    if (pr_params_load(m->params, ckpt, &err)) fail_msg("load %s: %s", ckpt, err.msg);
    pr_ctx *ctx = pr_ctx_new(1);
    const int n = 7;
    pr_tensor *ids = pr_empty(ctx->step, PR_I64, PR_CPU, PR_DIMS(1, n));
    for (int i = 0; i < n; i++) ((int64_t *)ids->data)[i] = (i * 5 + 2) % c->vocab;
    pr_tensor *logits = pr_lm_logits(ctx, m, ids, NULL);
    size_t bytes = sizeof(double) * (size_t)n * (size_t)c->vocab;
    double *out = malloc(bytes);
    memcpy(out, logits->data, bytes);
    pr_ctx_free(ctx);
    pr_model_free(m);
    return out;
}

/* prism -> fla -> prism for every convertible mixer: the same bytes, and the same logits */
static void test_prism_round_trip(void **state)
{
    (void)state;
    const char *mixers[] = {"gdn", "deltanet", "linattn", "mamba2", "attn", "gla", "gsa", "mom", "gla", "mom"};
    const char *extra[] = {"", "", "", "", "", "", "gsa.slots=3", "mom.topk=3", "gla.gate=false",
                           "mom.shared=false"};
    for (int i = 0; i < 10; i++) {
        pr_config c = pr_config_default();
        pr_err err;
        char kv[32];
        snprintf(kv, sizeof kv, "mixer=%s", mixers[i]);
        assert_int_equal(pr_config_set(&c, kv, &err), 0);
        if (*extra[i]) assert_int_equal(pr_config_set(&c, extra[i], &err), 0);
        c.d_model = 8, c.n_layers = 2, c.n_heads = 2, c.vocab = 13, c.conv_width = 3, c.tie_embeddings = i % 2;
        c.mamba2_head_dim = 4, c.mamba2_d_state = 5, c.mlp_mult = 1.5;
        pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
        pr_model_init(m);
        assert_int_equal(pr_params_save(m->params, path_in("orig.safetensors"), &err), 0);
        char *json = pr_config_to_json(&c);
        write_file(path_in("orig.json"), json);
        free(json);
        if (pr_fla_export(path_in("orig.json"), path_in("orig.safetensors"), path_in("fla"), &err))
            fail_msg("%s export: %s", mixers[i], err.msg);
        if (pr_fla_import(path_in("fla"), path_in("prism.safetensors"), path_in("prism.json"), &err))
            fail_msg("%s import: %s", mixers[i], err.msg);
        assert_same_tensors(path_in("orig.safetensors"), path_in("prism.safetensors"));
        pr_config back = pr_config_default();
        assert_int_equal(pr_config_load(&back, path_in("prism.json"), &err), 0);
        pr_model *m2 = pr_model_new(&back, PR_F32, PR_CPU);
        assert_int_equal(pr_params_load(m2->params, path_in("prism.safetensors"), &err), 0);
        assert_int_equal(pr_params_count(m2->params), pr_params_count(m->params));
        double *before = logits_of(&c, path_in("orig.safetensors")), *after = logits_of(&back, path_in("prism.safetensors"));
        for (int j = 0; j < 7 * c.vocab; j++)
            if (before[j] != after[j] || !isfinite(before[j]))
                fail_msg("%s %s: logit %d %.17g became %.17g", mixers[i], extra[i], j, before[j], after[j]);
        free(before);
        free(after);
        pr_model_free(m2);
        pr_model_free(m);
    }
}

/* an fla checkpoint of f32 tensors whose values name them: tensor i's element e is 1000 i + e */
static void write_fla_known(const char *config_json, const fla_tensor *ts, int n)
{
    mkdir(path_in("fla"), 0777);
    write_file(path_in("fla/config.json"), config_json);
    pr_arena *a = pr_arena_new("test-fla", 0);
    const char *names[64];
    const pr_tensor *tensors[64];
    for (int i = 0; i < n; i++) {
        pr_tensor *t = pr_empty(a, PR_F32, PR_CPU, ts[i].ndim, ts[i].shape);
        for (int64_t e = 0; e < t->numel; e++) ((float *)t->data)[e] = (float)(1000 * i + e);
        names[i] = ts[i].name, tensors[i] = t;
    }
    pr_err err;
    assert_int_equal(pr_safetensors_write(path_in("fla/model.safetensors"), n, names, tensors, 0, NULL, NULL, &err), 0);
    pr_arena_free(a);
}

/* prism's tensor `path` after import holds fla tensor number `index` (of shape [out, in] when
 * linear, so prism's [in, out] element (r, c) is fla's element c * rows + r; else the same order) */
static void expect_param(const pr_safetensors *p, const char *path, int index, bool linear)
{
    const pr_tensor *t = pr_safetensors_get(p, path);
    if (!t) fail_msg("no prism tensor '%s'", path);
    assert_int_equal(t->dtype, PR_F32);
    const float *v = t->data;
    int64_t rows = t->shape[0], cols = t->numel / rows;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t e = linear ? c * rows + r : r * cols + c;
            if (v[r * cols + c] != (float)(1000 * index + e))
                fail_msg("%s[%lld,%lld] = %g, want fla tensor %d element %lld", path, (long long)r, (long long)c,
                         v[r * cols + c], index, (long long)e);
        }
}

/* the MLP and block norms every fla LM block has, D 8, MLP 16 (appended at ts[n..n+6)) */
static int add_block_common(fla_tensor *ts, int n)
{
    const fla_tensor common[] = {
        {"model.embeddings.weight", 2, {11, 8}},       {"model.layers.0.attn_norm.weight", 1, {8}},
        {"model.layers.0.mlp_norm.weight", 1, {8}},    {"model.layers.0.mlp.gate_proj.weight", 2, {16, 8}},
        {"model.layers.0.mlp.up_proj.weight", 2, {16, 8}}, {"model.layers.0.mlp.down_proj.weight", 2, {8, 16}},
        {"model.norm.weight", 1, {8}},                 {"lm_head.weight", 2, {11, 8}},
    };
    for (int i = 0; i < 8; i++) ts[n + i] = common[i];
    return n + 8;
}

static void import_known(const char *config_json, fla_tensor *ts, int n, pr_arena *a, pr_safetensors *p)
{
    write_fla_known(config_json, ts, n);
    convert_in_and_out();
    pr_err err;
    assert_int_equal(pr_safetensors_read(path_in("prism.safetensors"), a, p, &err), 0);
    expect_param(p, "embed", n - 8, false);
    expect_param(p, "lm_head", n - 1, true);
    expect_param(p, "layers.0.mlp.w_down", n - 3, true);
}

static void test_fla_gla_known(void **state)
{
    (void)state;
    /* D 8, 2 heads, expand_k 0.5 (HK 4), expand_v 1 (HV 8, head V 4), fla's fixed gate rank 16 */
    fla_tensor ts[24] = {
        {"model.layers.0.attn.q_proj.weight", 2, {4, 8}},
        {"model.layers.0.attn.k_proj.weight", 2, {4, 8}},
        {"model.layers.0.attn.v_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.g_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.gk_proj.0.weight", 2, {16, 8}},
        {"model.layers.0.attn.gk_proj.1.weight", 2, {4, 16}},
        {"model.layers.0.attn.gk_proj.1.bias", 1, {4}},
        {"model.layers.0.attn.g_norm_swish_gate.weight", 1, {4}},
        {"model.layers.0.attn.o_proj.weight", 2, {8, 8}},
    };
    int n = add_block_common(ts, 9);
    pr_arena *a = pr_arena_new("test-gla", 0);
    pr_safetensors p = {0};
    import_known("{\"model_type\":\"gla\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_heads\":2,\"expand_k\":0.5,"
                 "\"expand_v\":1,\"vocab_size\":11,\"intermediate_size\":16,\"use_output_gate\":true,"
                 "\"attn_mode\":\"chunk\",\"fuse_norm\":true,\"feature_map\":null,\"use_gk\":true,\"use_gv\":false}",
                 ts, n, a, &p);
    expect_param(&p, "layers.0.mixer.q_proj", 0, true);
    expect_param(&p, "layers.0.mixer.gk_down", 4, true);
    expect_param(&p, "layers.0.mixer.gk_up", 5, true);
    expect_param(&p, "layers.0.mixer.gk_bias", 6, false);
    expect_param(&p, "layers.0.mixer.g_norm", 7, false);
    expect_param(&p, "layers.0.mixer.o_proj", 8, true);
    pr_arena_free(a);
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_load(&c, path_in("prism.json"), &err), 0);
    assert_string_equal(c.mixer, "gla");
    assert_true(c.gla_expand_k == 0.5 && c.gla_expand_v == 1 && c.gla_gate && c.gla_gate_low_rank == 16);
    assert_true(c.gla_gate_normalizer == 16);
}

static void test_fla_gsa_known(void **state)
{
    (void)state;
    /* D 8, 2 heads of K 4 and V 4, 3 slots per head, normalizer 4 */
    fla_tensor ts[24] = {
        {"model.layers.0.attn.q_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.k_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.v_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.f_proj.weight", 2, {6, 8}},
        {"model.layers.0.attn.g_norm.weight", 1, {8}},
        {"model.layers.0.attn.o_proj.weight", 2, {8, 8}},
    };
    int n = add_block_common(ts, 6);
    pr_arena *a = pr_arena_new("test-gsa", 0);
    pr_safetensors p = {0};
    import_known("{\"model_type\":\"gsa\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_heads\":2,\"expand_k\":1,"
                 "\"expand_v\":1,\"num_slots\":3,\"gate_logit_normalizer\":4,\"vocab_size\":11,"
                 "\"intermediate_size\":16,\"feature_map\":\"swish\",\"use_output_gate\":false,\"use_norm\":true}",
                 ts, n, a, &p);
    expect_param(&p, "layers.0.mixer.k_proj", 1, true);
    expect_param(&p, "layers.0.mixer.f_proj", 3, true);
    expect_param(&p, "layers.0.mixer.g_norm", 4, false);
    pr_arena_free(a);
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_load(&c, path_in("prism.json"), &err), 0);
    assert_string_equal(c.mixer, "gsa");
    assert_true(c.gsa_slots == 3 && c.gsa_gate_normalizer == 4 && c.gsa_expand_k == 1);
    /* num_slots null: fla gives each head as many slots as its key dim (4), so f_proj is [2 * 4, 8] */
    ts[3].shape[0] = 8;
    a = pr_arena_new("test-gsa", 0);
    import_known("{\"model_type\":\"gsa\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_heads\":2,"
                 "\"num_slots\":null,\"vocab_size\":11,\"intermediate_size\":16}", ts, n, a, &p);
    expect_param(&p, "layers.0.mixer.f_proj", 3, true);
    pr_arena_free(a);
    assert_int_equal(pr_config_load(&c, path_in("prism.json"), &err), 0);
    assert_true(c.gsa_slots == 4 && c.gsa_gate_normalizer == 8);
}

static void test_fla_mom_known(void **state)
{
    (void)state;
    /* D 8, 2 heads of K 3, expand_v 2 (V 6, HV 12), 2 memories, top 1, conv 2, shared memory */
    fla_tensor ts[40] = {
        {"model.layers.0.attn.q_proj.weight", 2, {6, 8}},
        {"model.layers.0.attn.gate.weight", 2, {2, 8}},
        {"model.layers.0.attn.k_proj.0.weight", 2, {6, 8}},
        {"model.layers.0.attn.k_proj.1.weight", 2, {6, 8}},
        {"model.layers.0.attn.v_proj.0.weight", 2, {12, 8}},
        {"model.layers.0.attn.v_proj.1.weight", 2, {12, 8}},
        {"model.layers.0.attn.b_proj.0.weight", 2, {2, 8}},
        {"model.layers.0.attn.b_proj.1.weight", 2, {2, 8}},
        {"model.layers.0.attn.a_proj.0.weight", 2, {2, 8}},
        {"model.layers.0.attn.a_proj.1.weight", 2, {2, 8}},
        {"model.layers.0.attn.shared_k.weight", 2, {6, 8}},
        {"model.layers.0.attn.shared_v.weight", 2, {12, 8}},
        {"model.layers.0.attn.shared_b.weight", 2, {2, 8}},
        {"model.layers.0.attn.shared_a.weight", 2, {2, 8}},
        {"model.layers.0.attn.A_log", 1, {2}},
        {"model.layers.0.attn.dt_bias", 1, {2}},
        {"model.layers.0.attn.q_conv1d.weight", 3, {6, 1, 2}},
        {"model.layers.0.attn.k_conv1d.weight", 3, {6, 1, 2}},
        {"model.layers.0.attn.v_conv1d.weight", 3, {12, 1, 2}},
        {"model.layers.0.attn.g_proj.weight", 2, {12, 8}},
        {"model.layers.0.attn.o_norm.weight", 1, {6}},
        {"model.layers.0.attn.o_proj.weight", 2, {8, 12}},
    };
    int n = add_block_common(ts, 22);
    pr_arena *a = pr_arena_new("test-mom", 0);
    pr_safetensors p = {0};
    import_known("{\"model_type\":\"mom\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_heads\":2,\"head_dim\":3,"
                 "\"expand_v\":2,\"conv_size\":2,\"num_memories\":2,\"topk\":1,\"shared_mem\":true,"
                 "\"single_kv_proj\":false,\"mom_backend\":\"gated_deltanet\",\"aux_loss_scale\":0.05,"
                 "\"capacity\":1.0,\"vocab_size\":11,\"intermediate_size\":16,\"use_output_gate\":true}",
                 ts, n, a, &p);
    expect_param(&p, "layers.0.mixer.router", 1, true);
    expect_param(&p, "layers.0.mixer.k_proj.1", 3, true);
    expect_param(&p, "layers.0.mixer.v_proj.0", 4, true);
    expect_param(&p, "layers.0.mixer.a_proj.1", 9, true);
    expect_param(&p, "layers.0.mixer.shared_b", 12, true);
    expect_param(&p, "layers.0.mixer.dt_bias", 15, false);
    expect_param(&p, "layers.0.mixer.v_conv", 18, false);
    pr_arena_free(a);
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_load(&c, path_in("prism.json"), &err), 0);
    assert_string_equal(c.mixer, "mom");
    assert_string_equal(c.mom_backend, "gdn");
    assert_true(c.mom_memories == 2 && c.mom_topk == 1 && c.mom_shared && c.gdn_expand_v == 2 && c.head_dim == 3);
    assert_true(c.mom_aux_loss_scale == 0.05 && c.conv_width == 2);
}

static void expect_import_error(const char *config_json, const fla_tensor *ts, int n, const char *needle)
{
    write_fla(config_json, ts, n);
    pr_err err;
    assert_int_equal(pr_fla_import(path_in("fla"), path_in("prism.safetensors"), path_in("prism.json"), &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' does not name '%s'", err.msg, needle);
}

static void test_import_errors(void **state)
{
    (void)state;
    const fla_tensor ts[] = {{"model.embeddings.weight", 2, {11, 8}}};
    expect_import_error("{\"model_type\":\"gated_deltanet\",\"hidden_size\":8,\"num_heads\":2,\"head_dim\":4,"
                        "\"num_v_heads\":4}", ts, 1, "'num_v_heads'");
    expect_import_error("{\"model_type\":\"transformer\",\"hidden_size\":8,\"num_heads\":2,\"qk_norm\":true}", ts, 1,
                        "'qk_norm'");
    expect_import_error("{\"model_type\":\"rwkv7\"}", ts, 1, "model_type 'rwkv7'");
    /* a Transformer missing its layers, and one with a stray tensor */
    const char *cfg = "{\"model_type\":\"transformer\",\"hidden_size\":8,\"num_hidden_layers\":0,\"num_heads\":2,"
                      "\"vocab_size\":11,\"intermediate_size\":12,\"tie_word_embeddings\":true}";
    expect_import_error(cfg, ts, 1, "'num_hidden_layers' must be an integer from 1 to 1024, got 0");
    const char *cfg1 = "{\"model_type\":\"transformer\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_heads\":2,"
                       "\"vocab_size\":11,\"intermediate_size\":12,\"tie_word_embeddings\":true}";
    expect_import_error(cfg1, ts, 1, "no tensor 'model.layers.0.attn_norm.weight'");
}

/* Issue 45: "num_heads": 0 divided by zero (SIGFPE) in deltanet and linear
 * attention; every size fla's config gives is range-checked before use, the
 * message naming fla's key. */
static void test_import_bad_sizes(void **state)
{
    (void)state;
    const fla_tensor ts[] = {{"model.embeddings.weight", 2, {11, 8}}};
    static const char *const types[] = {"delta_net", "linear_attn", "gated_deltanet", "transformer", "gla", "gsa", "mom"};
    char cfg[256];
    for (int i = 0; i < 7; i++) {
        snprintf(cfg, sizeof cfg, "{\"model_type\":\"%s\",\"hidden_size\":8,\"num_heads\":0}", types[i]);
        expect_import_error(cfg, ts, 1, "'num_heads' must be an integer from 1 to 1024, got 0");
        snprintf(cfg, sizeof cfg, "{\"model_type\":\"%s\",\"hidden_size\":8,\"num_heads\":-3}", types[i]);
        expect_import_error(cfg, ts, 1, "'num_heads'");
        snprintf(cfg, sizeof cfg, "{\"model_type\":\"%s\",\"hidden_size\":1e30,\"num_heads\":2}", types[i]);
        expect_import_error(cfg, ts, 1, "'hidden_size' must be an integer from 1 to 65536, got 1e+30");
    }
    expect_import_error("{\"model_type\":\"delta_net\",\"hidden_size\":8,\"num_heads\":3}", ts, 1,
                        "'num_heads' 3 divides");
    expect_import_error("{\"model_type\":\"linear_attn\",\"hidden_size\":8,\"num_heads\":2,\"expand_k\":0.3,"
                        "\"expand_v\":0.3}", ts, 1, "'expand_k' 0.3");
    expect_import_error("{\"model_type\":\"delta_net\",\"hidden_size\":8,\"num_heads\":2,\"expand_k\":-1,"
                        "\"expand_v\":-1}", ts, 1, "'expand_k' -1");
    expect_import_error("{\"model_type\":\"mamba2\",\"hidden_size\":8,\"head_dim\":0}", ts, 1, "'head_dim'");
    expect_import_error("{\"model_type\":\"mamba2\",\"hidden_size\":8,\"n_groups\":2.5}", ts, 1, "'n_groups'");
    expect_import_error("{\"model_type\":\"gated_deltanet\",\"hidden_size\":8,\"num_heads\":2,"
                        "\"intermediate_size\":-5}", ts, 1, "'intermediate_size'");
    expect_import_error("{\"model_type\":\"transformer\",\"hidden_size\":8,\"num_heads\":2,\"vocab_size\":1}",
                        ts, 1, "'vocab_size'");
    expect_import_error("{\"model_type\":\"transformer\",\"hidden_size\":8,\"num_heads\":2,\"rope_theta\":0}",
                        ts, 1, "'rope_theta' must be a number from 1 to 1e+09, got 0");
    expect_import_error("{\"model_type\":\"gated_deltanet\",\"hidden_size\":8,\"num_heads\":2,\"norm_eps\":-1}",
                        ts, 1, "'norm_eps' must be a number from 0 to 1, got -1");
    expect_import_error("{\"model_type\":\"mamba2\",\"hidden_size\":8,\"initializer_range\":1e300}", ts, 1,
                        "'initializer_range'");
}

/* issue 43: GLA, GSA and MoM sizes out of range, and fla options their layers do not implement */
static void test_import_gla_gsa_mom_errors(void **state)
{
    (void)state;
    const fla_tensor ts[] = {{"model.embeddings.weight", 2, {11, 8}}};
    static const struct { const char *json, *needle; } cases[] = {
        {"\"gla\",\"expand_k\":0.3", "'expand_k' 0.3 times 'hidden_size' 8"},
        {"\"gla\",\"expand_v\":0", "'expand_v' 0 times"},
        {"\"gla\",\"num_kv_heads\":1", "'num_kv_heads' is not supported"},
        {"\"gla\",\"num_kv_heads\":0", "'num_kv_heads' must be an integer from 1 to 1024, got 0"},
        {"\"gla\",\"feature_map\":\"relu\"", "'feature_map' is not supported"},
        {"\"gla\",\"use_short_conv\":true", "'use_short_conv' is not supported"},
        {"\"gla\",\"clamp_min\":-2", "'clamp_min' is not supported"},
        {"\"gla\",\"fuse_norm\":false", "'fuse_norm' is not supported"},
        {"\"gla\",\"hidden_act\":\"gelu\"", "'hidden_act' is not supported"},
        {"\"gsa\",\"num_slots\":0", "'num_slots' must be an integer from 1 to 4096, got 0"},
        {"\"gsa\",\"gate_logit_normalizer\":0", "'gate_logit_normalizer' must be a number from 0.001"},
        {"\"gsa\",\"expand_v\":2", "'expand_v' is not supported"},
        {"\"gsa\",\"expand_k\":0.1", "'expand_k' 0.1"},
        {"\"gsa\",\"feature_map\":\"t2r\"", "'feature_map' is not supported"},
        {"\"gsa\",\"use_output_gate\":true", "'use_output_gate' is not supported"},
        {"\"mom\",\"head_dim\":0", "'head_dim' must be an integer from 1 to 65536, got 0"},
        {"\"mom\",\"expand_v\":1.5", "'expand_v' must be an integer from 1 to 8, got 1.5"},
        {"\"mom\",\"num_memories\":0", "'num_memories' must be an integer from 1 to 64, got 0"},
        {"\"mom\",\"num_memories\":65", "'num_memories' must be an integer from 1 to 64, got 65"},
        {"\"mom\",\"num_memories\":2,\"topk\":3", "'topk' must be an integer from 1 to 2, got 3"},
        {"\"mom\",\"topk\":0", "'topk' must be an integer from 1 to 4, got 0"},
        {"\"mom\",\"conv_size\":0", "'conv_size' must be an integer from 1 to 64, got 0"},
        {"\"mom\",\"aux_loss_scale\":-1", "'aux_loss_scale' must be a number from 0 to 100, got -1"},
        {"\"mom\",\"mom_backend\":\"gla\"", "'mom_backend' is not supported"},
        {"\"mom\",\"single_kv_proj\":true", "'single_kv_proj' is not supported"},
        {"\"mom\",\"use_short_conv\":false", "'use_short_conv' is not supported"},
    };
    char cfg[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cfg, sizeof cfg, "{\"hidden_size\":8,\"num_heads\":2,\"model_type\":%s}",
                 cases[i].json);
        expect_import_error(cfg, ts, 1, cases[i].needle);
    }
}

/* prism configs fla's GLA, GSA and MoM models cannot express are refused on export, naming the key */
static void test_export_gla_gsa_mom_errors(void **state)
{
    (void)state;
    static const struct { const char *mixer, *kv, *needle; } cases[] = {
        {"gla", "gla.gate_low_rank=8", "gla.gate_low_rank=8"},
        {"gla", "gla.gate_normalizer=4", "gla.gate_normalizer=4"},
        {"gsa", "gsa.expand_v=2", "gsa.expand_v=2"},
        {"mom", "mom.backend=gla", "mom.backend=gla"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pr_config c = pr_config_default();
        pr_err err;
        char kv[32];
        snprintf(kv, sizeof kv, "mixer=%s", cases[i].mixer);
        assert_int_equal(pr_config_set(&c, kv, &err), 0);
        assert_int_equal(pr_config_set(&c, cases[i].kv, &err), 0);
        c.d_model = 8, c.n_layers = 1, c.n_heads = 2, c.vocab = 13, c.gsa_slots = 2;
        char *json = pr_config_to_json(&c);
        write_file(path_in("orig.json"), json);
        free(json);
        assert_int_equal(pr_fla_export(path_in("orig.json"), path_in("orig.safetensors"), path_in("fla"), &err), -1);
        if (!strstr(err.msg, cases[i].needle)) fail_msg("error '%s' does not name '%s'", err.msg, cases[i].needle);
    }
}

/* Issue 45: an I32 weight converted into a checkpoint `model` then refused */
static void test_import_integer_weights(void **state)
{
    (void)state;
    const fla_tensor ts[] = {
        {"model.embeddings.weight", 2, {11, 8}},
        {"model.layers.0.attn_norm.weight", 1, {8}},
        {"model.layers.0.attn.q_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.k_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.v_proj.weight", 2, {8, 8}},
        {"model.layers.0.attn.o_proj.weight", 2, {8, 8}},
        {"model.layers.0.mlp_norm.weight", 1, {8}},
        {"model.layers.0.mlp.gate_proj.weight", 2, {12, 8}},
        {"model.layers.0.mlp.up_proj.weight", 2, {12, 8}},
        {"model.layers.0.mlp.down_proj.weight", 2, {8, 12}},
        {"model.norm.weight", 1, {8}},
    };
    const char *cfg = "{\"model_type\":\"transformer\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_heads\":2,"
                      "\"vocab_size\":11,\"intermediate_size\":12,\"tie_word_embeddings\":true}";
    write_fla_as(cfg, ts, (int)(sizeof ts / sizeof ts[0]), PR_I32);
    pr_err err;
    assert_int_equal(pr_fla_import(path_in("fla"), path_in("prism.safetensors"), path_in("prism.json"), &err), -1);
    if (!strstr(err.msg, "tensor 'model.embeddings.weight' is i32: weights must be f32, f64 or bf16"))
        fail_msg("error '%s' does not name the integer tensor", err.msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fla_gdn_round_trip),
        cmocka_unit_test(test_fla_transformer_round_trip),
        cmocka_unit_test(test_prism_round_trip),
        cmocka_unit_test(test_fla_gla_known),
        cmocka_unit_test(test_fla_gsa_known),
        cmocka_unit_test(test_fla_mom_known),
        cmocka_unit_test(test_import_errors),
        cmocka_unit_test(test_import_bad_sizes),
        cmocka_unit_test(test_import_integer_weights),
        cmocka_unit_test(test_import_gla_gsa_mom_errors),
        cmocka_unit_test(test_export_gla_gsa_mom_errors),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
