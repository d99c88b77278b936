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

/* prism -> fla -> prism for every convertible mixer */
static void test_prism_round_trip(void **state)
{
    (void)state;
    const char *mixers[] = {"gdn", "deltanet", "linattn", "mamba2", "attn"};
    for (int i = 0; i < 5; i++) {
        pr_config c = pr_config_default();
        pr_err err;
        char kv[32];
        snprintf(kv, sizeof kv, "mixer=%s", mixers[i]);
        assert_int_equal(pr_config_set(&c, kv, &err), 0);
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
        pr_model_free(m2);
        pr_model_free(m);
    }
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
    static const char *const types[] = {"delta_net", "linear_attn", "gated_deltanet", "transformer"};
    char cfg[256];
    for (int i = 0; i < 4; i++) {
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
        cmocka_unit_test(test_import_errors),
        cmocka_unit_test(test_import_bad_sizes),
        cmocka_unit_test(test_import_integer_weights),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
