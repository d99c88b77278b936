/* models/fla.c: flash-linear-attention's Hugging Face checkpoints
 * (config.json + model.safetensors) to and from prism's (a config JSON and a
 * safetensors file named by parameter paths).
 *
 * One table maps every tensor name; models/README.md ("fla checkpoints")
 * documents it. Only layouts change: nn.Linear stores [out, in] where prism
 * stores [in, out] (a transpose), nn.Conv1d's depthwise weight is [C, 1, W]
 * where prism's is [C, W] (a reshape). Values keep their dtype and bytes, so
 * converting in and back out gives the same bytes for every tensor.
 * Config options of fla whose semantics prism's layers do not implement are
 * rejected, naming the key, rather than converted into a different model. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "models/models.h"

enum { GDN = 1, DELTANET = 2, LINATTN = 4, MAMBA2 = 8, ATTN = 16, GLA = 32, GSA = 64, MOM = 128,
       LM = GDN | DELTANET | LINATTN | ATTN | GLA | GSA | MOM };
typedef enum { SAME, LINEAR, CONV } layout;

/* A '#' in both names stands for a memory's index (MoM's per-memory maps). */
typedef struct {
    int archs;
    bool per_layer;       /* prism "layers.<i>.<name>"; fla "<stack>.layers.<i>.<name>" */
    const char *prism, *fla;
    layout lay;
} name_row;

static const name_row names[] = {
    {LM, false, "embed", "model.embeddings.weight", SAME},
    {MAMBA2, false, "embed", "backbone.embeddings.weight", SAME},
    {LM, false, "norm_f.w", "model.norm.weight", SAME},
    {MAMBA2, false, "norm_f.w", "backbone.norm_f.weight", SAME},
    {LM | MAMBA2, false, "lm_head", "lm_head.weight", LINEAR},
    {LM, true, "norm1.w", "attn_norm.weight", SAME},
    {MAMBA2, true, "norm1.w", "norm.weight", SAME},
    {LM, true, "norm2.w", "mlp_norm.weight", SAME},
    {LM, true, "mlp.w_gate", "mlp.gate_proj.weight", LINEAR},
    {LM, true, "mlp.w_up", "mlp.up_proj.weight", LINEAR},
    {LM, true, "mlp.w_down", "mlp.down_proj.weight", LINEAR},
    {LM, true, "mixer.q_proj", "attn.q_proj.weight", LINEAR},
    {LM, true, "mixer.k_proj", "attn.k_proj.weight", LINEAR},
    {LM, true, "mixer.v_proj", "attn.v_proj.weight", LINEAR},
    {LM, true, "mixer.o_proj", "attn.o_proj.weight", LINEAR},
    {GDN, true, "mixer.a_proj", "attn.a_proj.weight", LINEAR},
    {GDN | DELTANET, true, "mixer.b_proj", "attn.b_proj.weight", LINEAR},
    {GDN | DELTANET | GLA | MOM, true, "mixer.g_proj", "attn.g_proj.weight", LINEAR},
    {GDN | DELTANET | MOM, true, "mixer.q_conv", "attn.q_conv1d.weight", CONV},
    {GDN | DELTANET | MOM, true, "mixer.k_conv", "attn.k_conv1d.weight", CONV},
    {GDN | DELTANET | MOM, true, "mixer.v_conv", "attn.v_conv1d.weight", CONV},
    {GDN | MOM, true, "mixer.A_log", "attn.A_log", SAME},
    {GDN | MOM, true, "mixer.dt_bias", "attn.dt_bias", SAME},
    {GDN | DELTANET | MOM, true, "mixer.o_norm", "attn.o_norm.weight", SAME},
    {GLA, true, "mixer.gk_down", "attn.gk_proj.0.weight", LINEAR},
    {GLA, true, "mixer.gk_up", "attn.gk_proj.1.weight", LINEAR},
    {GLA, true, "mixer.gk_bias", "attn.gk_proj.1.bias", SAME},
    {GLA, true, "mixer.g_norm", "attn.g_norm_swish_gate.weight", SAME},   /* gla.gate off: attn.g_norm.weight */
    {GSA, true, "mixer.f_proj", "attn.f_proj.weight", LINEAR},
    {GSA, true, "mixer.g_norm", "attn.g_norm.weight", SAME},
    {MOM, true, "mixer.router", "attn.gate.weight", LINEAR},
    {MOM, true, "mixer.k_proj.#", "attn.k_proj.#.weight", LINEAR},
    {MOM, true, "mixer.v_proj.#", "attn.v_proj.#.weight", LINEAR},
    {MOM, true, "mixer.a_proj.#", "attn.a_proj.#.weight", LINEAR},
    {MOM, true, "mixer.b_proj.#", "attn.b_proj.#.weight", LINEAR},
    {MOM, true, "mixer.shared_k", "attn.shared_k.weight", LINEAR},
    {MOM, true, "mixer.shared_v", "attn.shared_v.weight", LINEAR},
    {MOM, true, "mixer.shared_a", "attn.shared_a.weight", LINEAR},
    {MOM, true, "mixer.shared_b", "attn.shared_b.weight", LINEAR},
    {LINATTN, true, "mixer.o_norm", "attn.norm.weight", SAME},
    {LINATTN, true, "mixer.feature_map_q.w1", "attn.feature_map_q.layer1.weight", LINEAR},
    {LINATTN, true, "mixer.feature_map_q.b1", "attn.feature_map_q.layer1.bias", SAME},
    {LINATTN, true, "mixer.feature_map_q.w2", "attn.feature_map_q.layer2.weight", LINEAR},
    {LINATTN, true, "mixer.feature_map_q.b2", "attn.feature_map_q.layer2.bias", SAME},
    {LINATTN, true, "mixer.feature_map_k.w1", "attn.feature_map_k.layer1.weight", LINEAR},
    {LINATTN, true, "mixer.feature_map_k.b1", "attn.feature_map_k.layer1.bias", SAME},
    {LINATTN, true, "mixer.feature_map_k.w2", "attn.feature_map_k.layer2.weight", LINEAR},
    {LINATTN, true, "mixer.feature_map_k.b2", "attn.feature_map_k.layer2.bias", SAME},
    {MAMBA2, true, "mixer.in_proj", "mixer.in_proj.weight", LINEAR},
    {MAMBA2, true, "mixer.conv_w", "mixer.conv1d.weight", CONV},
    {MAMBA2, true, "mixer.conv_b", "mixer.conv1d.bias", SAME},
    {MAMBA2, true, "mixer.A_log", "mixer.A_log", SAME},
    {MAMBA2, true, "mixer.dt_bias", "mixer.dt_bias", SAME},
    {MAMBA2, true, "mixer.D", "mixer.D", SAME},
    {MAMBA2, true, "mixer.norm", "mixer.norm.weight", SAME},
    {MAMBA2, true, "mixer.out_proj", "mixer.out_proj.weight", LINEAR},
};
#define N_NAMES ((int)(sizeof names / sizeof names[0]))

/* prism mixer <-> fla model_type and architecture class */
static const struct { int arch; const char *mixer, *model_type, *cls; } archs[] = {
    {GDN, "gdn", "gated_deltanet", "GatedDeltaNetForCausalLM"},
    {DELTANET, "deltanet", "delta_net", "DeltaNetForCausalLM"},
    {LINATTN, "linattn", "linear_attn", "LinearAttentionForCausalLM"},
    {MAMBA2, "mamba2", "mamba2", "Mamba2ForCausalLM"},
    {ATTN, "attn", "transformer", "TransformerForCausalLM"},
    {GLA, "gla", "gla", "GLAForCausalLM"},
    {GSA, "gsa", "gsa", "GSAForCausalLM"},
    {MOM, "mom", "mom", "MomForCausalLM"},
};
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

static int arch_of_mixer(const char *mixer)
{
    for (int i = 0; i < N_ARCHS; i++)
        if (strcmp(archs[i].mixer, mixer) == 0) return i;
    return -1;
}

/* path matches pattern, a '#' in which stands for a whole number (left in *index) */
static bool name_matches(const char *pattern, const char *path, int *index)
{
    const char *hash = strchr(pattern, '#');
    if (!hash) return strcmp(pattern, path) == 0;
    size_t pre = (size_t)(hash - pattern);
    int used = 0;
    if (strncmp(pattern, path, pre) != 0 || !(path[pre] >= '0' && path[pre] <= '9')) return false;
    if (sscanf(path + pre, "%d%n", index, &used) != 1) return false;
    return strcmp(hash + 1, path + pre + used) == 0;
}

/* fla's name with its '#' replaced by index */
static void fill_index(char *out, size_t n, const char *pattern, int index)
{
    const char *hash = strchr(pattern, '#');
    if (hash) snprintf(out, n, "%.*s%d%s", (int)(hash - pattern), pattern, index, hash + 1);
    else snprintf(out, n, "%s", pattern);
}

int pr_fla_name(const char *mixer, const char *path, char *out, size_t n)
{
    int a = arch_of_mixer(mixer);
    if (a < 0) return -1;
    int bit = archs[a].arch, layer = -1, used = 0;
    const char *rest = path;
    if (sscanf(path, "layers.%d.%n", &layer, &used) == 1 && used > 0) rest = path + used;
    for (int i = 0; i < N_NAMES; i++) {
        const name_row *r = &names[i];
        int index = 0;
        if (!(r->archs & bit) || r->per_layer != (layer >= 0) || !name_matches(r->prism, rest, &index)) continue;
        char leaf[128];
        fill_index(leaf, sizeof leaf, r->fla, index);
        if (layer < 0) snprintf(out, n, "%s", leaf);
        else snprintf(out, n, "%s.layers.%d.%s", bit == MAMBA2 ? "backbone" : "model", layer, leaf);
        return (int)r->lay;
    }
    return -1;
}

/* ---- layouts: the same bytes, moved ------------------------------------------------- */

static pr_tensor *relayout(pr_arena *a, const pr_tensor *t, layout lay, bool to_fla)
{
    if (lay == CONV) {
        int64_t shape[3] = {t->shape[0], 1, t->shape[t->ndim - 1]};
        pr_tensor *o = to_fla ? pr_empty(a, t->dtype, PR_CPU, 3, shape) : pr_empty(a, t->dtype, PR_CPU, PR_DIMS(shape[0], shape[2]));
        memcpy(o->data, t->data, pr_nbytes(t));
        return o;
    }
    if (lay == SAME) {
        pr_tensor *o = pr_empty_like(a, t);
        memcpy(o->data, t->data, pr_nbytes(t));
        return o;
    }
    int64_t R = t->shape[0], C = t->shape[1];
    size_t es = pr_dtype_size(t->dtype);
    pr_tensor *o = pr_empty(a, t->dtype, PR_CPU, PR_DIMS(C, R));
    const char *src = t->data;
    char *dst = o->data;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) memcpy(dst + (size_t)(c * R + r) * es, src + (size_t)(r * C + c) * es, es);
    return o;
}

/* the shape a prism tensor has in fla's layout */
static void fla_shape(const pr_tensor *t, layout lay, int *ndim, int64_t *shape)
{
    *ndim = t->ndim;
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    if (lay == LINEAR) shape[0] = t->shape[1], shape[1] = t->shape[0];
    if (lay == CONV) *ndim = 3, shape[1] = 1, shape[2] = t->shape[1];
}

static bool shape_is(const pr_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return false;
    return true;
}

/* ---- config.json <-> pr_config ------------------------------------------------------- */

typedef struct { const cJSON *root; const char *file; pr_err *err; int rc; } json_in;

static const cJSON *item(json_in *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j->root, key);
    return cJSON_IsNull(v) ? NULL : v;
}

static double num(json_in *j, const char *key, double def)
{
    const cJSON *v = item(j, key);
    if (!v) return def;
    if (!cJSON_IsNumber(v) && !j->rc) j->rc = pr_errf(j->err, "%s: '%s' must be a number", j->file, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* A whole number in [lo, hi], checked before the cast; on an error, lo (the
 * caller goes on with a value that divides safely, and j->rc reports). */
static int whole(json_in *j, const char *key, double def, int lo, int hi)
{
    double x = num(j, key, def);
    if (x == floor(x) && x >= lo && x <= hi) return (int)x;
    if (!j->rc) j->rc = pr_errf(j->err, "%s: '%s' must be an integer from %d to %d, got %g", j->file, key, lo, hi, x);
    return lo;
}

/* a number in [lo, hi] (prism's range for the key it becomes), named by fla's key */
static double real(json_in *j, const char *key, double def, double lo, double hi)
{
    double x = num(j, key, def);
    if (x >= lo && x <= hi) return x;
    if (!j->rc) j->rc = pr_errf(j->err, "%s: '%s' must be a number from %g to %g, got %g", j->file, key, lo, hi, x);
    return lo;
}

/* fla's expand_k: the key width d_model * expand_k, split evenly over the heads */
static int key_head_dim(json_in *j, const pr_config *c, double ek)
{
    double width = c->d_model * ek;
    if (!(ek > 0) || width != floor(width) || width > 65536 || (int)width % c->n_heads) {
        if (!j->rc)
            j->rc = pr_errf(j->err, "%s: 'expand_k' %g times 'hidden_size' %d must be a whole width up to 65536 "
                                    "that 'num_heads' %d divides", j->file, ek, c->d_model, c->n_heads);
        return 1;
    }
    return (int)width / c->n_heads;
}

/* an fla expansion ratio e of key `key`: hidden_size * e must be a whole width
 * that the heads divide (fla truncates it with int(); prism needs it exact) */
static double expansion(json_in *j, const pr_config *c, const char *key, double def)
{
    double e = num(j, key, def), width = c->d_model * e;
    if (e >= 0.01 && e <= 64 && width == floor(width) && (int)width % c->n_heads == 0) return e;
    if (!j->rc)
        j->rc = pr_errf(j->err, "%s: '%s' %g times 'hidden_size' %d must be a whole width that 'num_heads' %d divides "
                                "('%s' from 0.01 to 64)", j->file, key, e, c->d_model, c->n_heads, key);
    return 1;
}

static bool flag(json_in *j, const char *key, bool def)
{
    const cJSON *v = item(j, key);
    if (!v) return def;
    if (!cJSON_IsBool(v) && !j->rc) j->rc = pr_errf(j->err, "%s: '%s' must be true or false", j->file, key);
    return cJSON_IsTrue(v);
}

static const char *text(json_in *j, const char *key, const char *def)
{
    const cJSON *v = item(j, key);
    if (!v) return def;
    if (!cJSON_IsString(v) && !j->rc) j->rc = pr_errf(j->err, "%s: '%s' must be a string", j->file, key);
    return cJSON_IsString(v) ? v->valuestring : def;
}

/* an fla option prism's layer does not implement: only its neutral value converts */
static void require(json_in *j, bool ok, const char *key, const char *what)
{
    if (!ok && !j->rc)
        j->rc = pr_errf(j->err, "%s: '%s' is not supported: prism's layer implements %s only", j->file, key, what);
}

static void set_choice(char *field, size_t n, const char *v) { snprintf(field, n, "%s", v); }

/* the SwiGLU width: intermediate_size, or fla's rule from hidden_ratio */
static void read_mlp(json_in *j, pr_config *c)
{
    const char *act = text(j, "hidden_act", "swish");
    require(j, strcmp(act, "swish") == 0 || strcmp(act, "silu") == 0, "hidden_act", "swish (SwiGLU)");
    int I = whole(j, "intermediate_size", 0, 0, 1 << 22);
    if (!I) {
        int ratio = whole(j, "hidden_ratio", 4, 1, 64);
        I = (int)((double)c->d_model * ratio * 2 / 3);
        I = 256 * ((I + 255) / 256);
    }
    set_choice(c->mlp, sizeof c->mlp, "swiglu");
    c->mlp_mult = (double)I / c->d_model;
}

static void read_arch(json_in *j, int arch, pr_config *c)
{
    switch (arch) {
    case GDN:
        c->n_heads = whole(j, "num_heads", 6, 1, 1024);
        c->head_dim = whole(j, "head_dim", 256, 1, 65536);
        c->conv_width = whole(j, "conv_size", 4, 1, 64);
        c->gdn_gate = flag(j, "use_gate", true);
        c->gdn_expand_v = whole(j, "expand_v", 2, 1, 8);
        require(j, whole(j, "num_v_heads", c->n_heads, 1, 1024) == c->n_heads, "num_v_heads", "num_v_heads = num_heads");
        require(j, flag(j, "use_short_conv", true), "use_short_conv", "the ShortConv (true)");
        require(j, !flag(j, "allow_neg_eigval", false), "allow_neg_eigval", "beta in (0, 1) (false)");
        break;
    case DELTANET: {
        c->n_heads = whole(j, "num_heads", 16, 1, 1024);
        double ek = num(j, "expand_k", 1);
        c->head_dim = key_head_dim(j, c, ek);
        c->conv_width = whole(j, "conv_size", 4, 1, 64);
        c->deltanet_gate = flag(j, "use_gate", false);
        require(j, num(j, "expand_v", 1) == ek, "expand_v", "expand_v = expand_k (V = K)");
        require(j, flag(j, "use_short_conv", true), "use_short_conv", "the ShortConv (true)");
        require(j, flag(j, "use_beta", true), "use_beta", "a learned beta (true)");
        require(j, flag(j, "use_output_norm", true), "use_output_norm", "the output norm (true)");
        require(j, strcmp(text(j, "qk_norm", "l2"), "l2") == 0, "qk_norm", "l2");
        require(j, strcmp(text(j, "qk_activation", "silu"), "silu") == 0, "qk_activation", "silu");
        require(j, !flag(j, "allow_neg_eigval", false), "allow_neg_eigval", "beta in (0, 1) (false)");
        break;
    }
    case LINATTN: {
        c->n_heads = whole(j, "num_heads", 4, 1, 1024);
        double ek = num(j, "expand_k", 1);
        c->head_dim = key_head_dim(j, c, ek);
        set_choice(c->linattn_feature_map, sizeof c->linattn_feature_map,
                   text(j, "feature_map", "elementwise_product"));
        require(j, num(j, "expand_v", 1) == ek, "expand_v", "expand_v = expand_k (V = K)");
        require(j, whole(j, "num_kv_heads", c->n_heads, 1, 1024) == c->n_heads, "num_kv_heads", "num_kv_heads = num_heads");
        require(j, !flag(j, "tie_feature_map_qk", false), "tie_feature_map_qk", "separate q and k maps (false)");
        require(j, !flag(j, "norm_q", false) && !flag(j, "norm_k", false), "norm_q/norm_k", "false");
        require(j, !flag(j, "norm_feature_map", false), "norm_feature_map", "false");
        require(j, flag(j, "elementwise_affine", true), "elementwise_affine", "true");
        break;
    }
    case ATTN:
        c->n_heads = whole(j, "num_heads", 32, 1, 1024);
        c->attn_kv_heads = whole(j, "num_kv_heads", 0, 0, 1024);
        c->attn_rope_theta = real(j, "rope_theta", 10000, 1, 1e9);
        require(j, !flag(j, "qkv_bias", false), "qkv_bias", "q, k, v without biases (false)");
        require(j, !flag(j, "qk_norm", false), "qk_norm", "no q/k norm (false)");
        require(j, !item(j, "window_size"), "window_size", "full causal attention (null)");
        break;
    case GLA:
        c->n_heads = whole(j, "num_heads", 4, 1, 1024);
        c->gla_expand_k = expansion(j, c, "expand_k", 0.5);
        c->gla_expand_v = expansion(j, c, "expand_v", 1);
        c->gla_gate = flag(j, "use_output_gate", true);
        c->gla_gate_low_rank = 16, c->gla_gate_normalizer = 16;   /* fla's GLA model passes neither: the layer's defaults */
        require(j, whole(j, "num_kv_heads", c->n_heads, 1, 1024) == c->n_heads, "num_kv_heads", "num_kv_heads = num_heads");
        require(j, !item(j, "feature_map"), "feature_map", "no feature map on q and k (null)");
        require(j, !flag(j, "use_short_conv", false), "use_short_conv", "no ShortConv (false)");
        require(j, !item(j, "clamp_min"), "clamp_min", "an unclamped log-decay (null)");
        require(j, flag(j, "elementwise_affine", true), "elementwise_affine", "a norm weight (true)");
        require(j, !c->gla_gate || flag(j, "fuse_norm", true), "fuse_norm",
                "the fused norm-and-gate weight g_norm_swish_gate (true) when use_output_gate is on");
        break;
    case GSA: {
        c->n_heads = whole(j, "num_heads", 4, 1, 1024);
        c->gsa_expand_k = expansion(j, c, "expand_k", 1);
        c->gsa_expand_v = expansion(j, c, "expand_v", 1);
        int slots_def = j->rc ? 1 : (int)llround(c->d_model * c->gsa_expand_k) / c->n_heads;   /* null: the key dim */
        c->gsa_slots = whole(j, "num_slots", slots_def, 1, 4096);
        c->gsa_gate_normalizer = real(j, "gate_logit_normalizer", 8, 0.001, 1e6);
        require(j, c->gsa_expand_v == 1, "expand_v", "expand_v = 1 (fla's output norm spans hidden_size)");
        require(j, whole(j, "num_kv_heads", c->n_heads, 1, 1024) == c->n_heads, "num_kv_heads", "num_kv_heads = num_heads");
        require(j, strcmp(text(j, "feature_map", "swish"), "swish") == 0, "feature_map", "swish");
        require(j, !flag(j, "use_short_conv", false), "use_short_conv", "no ShortConv (false)");
        require(j, !flag(j, "use_output_gate", false), "use_output_gate", "no output gate (false)");
        require(j, flag(j, "use_norm", true), "use_norm", "the output norm (true)");
        require(j, flag(j, "elementwise_affine", true), "elementwise_affine", "a norm weight (true)");
        break;
    }
    case MOM:
        c->n_heads = whole(j, "num_heads", 4, 1, 1024);
        c->head_dim = whole(j, "head_dim", 256, 1, 65536);
        c->gdn_expand_v = whole(j, "expand_v", 1, 1, 8);
        c->conv_width = whole(j, "conv_size", 4, 1, 64);
        c->gdn_gate = flag(j, "use_output_gate", true);
        c->mom_memories = whole(j, "num_memories", 4, 1, 64);
        c->mom_topk = whole(j, "topk", 2, 1, c->mom_memories);
        c->mom_shared = flag(j, "shared_mem", true);
        c->mom_aux_loss_scale = real(j, "aux_loss_scale", 0.01, 0, 100);
        set_choice(c->mom_backend, sizeof c->mom_backend, "gdn");
        require(j, strcmp(text(j, "mom_backend", "gated_deltanet"), "gated_deltanet") == 0, "mom_backend",
                "gated_deltanet memories");
        require(j, !flag(j, "single_kv_proj", false), "single_kv_proj", "a k, v, a, b map per memory (false)");
        require(j, flag(j, "use_short_conv", true), "use_short_conv", "the ShortConv (true)");
        break;
    case MAMBA2:
        c->mamba2_head_dim = whole(j, "head_dim", 64, 1, 4096);
        c->mamba2_d_state = whole(j, "state_size", 128, 1, 4096);
        c->mamba2_expand = whole(j, "expand", 2, 1, 16);
        c->mamba2_n_groups = whole(j, "n_groups", 1, 1, 1024);
        c->conv_width = whole(j, "conv_kernel", 4, 1, 64);
        set_choice(c->mlp, sizeof c->mlp, "none");
        require(j, !flag(j, "use_bias", false), "use_bias", "projections without biases (false)");
        require(j, flag(j, "use_conv_bias", true), "use_conv_bias", "a conv bias (true)");
        require(j, flag(j, "rmsnorm", true), "rmsnorm", "the gated RMSNorm (true)");
        require(j, !flag(j, "norm_before_gate", false), "norm_before_gate", "gate, then norm (false)");
        require(j, !flag(j, "D_has_hdim", false), "D_has_hdim", "D per head (false)");
        break;
    }
}

static int read_fla_config(const char *file, pr_config *c, int *arch_index, pr_err *err)
{
    char *txt = pr_read_text(file, err);
    if (!txt) return -1;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pr_errf(err, "%s: not a JSON object", file);
    }
    json_in j = {root, file, err, 0};
    const char *type = text(&j, "model_type", "");
    int a = -1;
    for (int i = 0; i < N_ARCHS; i++)
        if (strcmp(archs[i].model_type, type) == 0) a = i;
    if (a < 0 && !j.rc)
        j.rc = pr_errf(err, "%s: model_type '%s' is not one prism converts (allowed: gated_deltanet|delta_net|"
                            "linear_attn|mamba2|transformer|gla|gsa|mom)", file, type);
    if (!j.rc) {
        *c = pr_config_default();
        set_choice(c->mixer, sizeof c->mixer, archs[a].mixer);
        set_choice(c->norm, sizeof c->norm, "rmsnorm");
        c->d_model = whole(&j, "hidden_size", 2048, 1, 65536);
        c->n_layers = whole(&j, "num_hidden_layers", 24, 1, 1024);
        c->vocab = whole(&j, "vocab_size", 32000, 2, 16777216);
        c->norm_eps = real(&j, "norm_eps", 1e-6, 0, 1);
        c->tie_embeddings = flag(&j, "tie_word_embeddings", false);
        c->init_std = real(&j, "initializer_range", 0.02, 0, 10);
        if (archs[a].arch != MAMBA2) read_mlp(&j, c);
        read_arch(&j, archs[a].arch, c);
        require(&j, !item(&j, "attn"), "attn", "one mixer in every layer (no hybrid attention layers)");
        require(&j, !item(&j, "attnres_block_size"), "attnres_block_size", "plain residuals (null)");
        *arch_index = a;
    }
    cJSON_Delete(root);
    if (j.rc) return -1;
    /* through prism's own key table, so every value is range-checked by name */
    char *json = pr_config_to_json(c), what[1100];
    snprintf(what, sizeof what, "%s (as prism's config)", file);
    pr_config checked = pr_config_default();
    int rc = pr_config_apply_json(&checked, json, what, err);
    free(json);
    return rc ? rc : pr_config_check(c, err);
}

static void write_arch(cJSON *o, const pr_config *c, int arch)
{
    switch (arch) {
    case GDN:
        cJSON_AddNumberToObject(o, "num_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "head_dim", (double)pr_config_head_dim(c));
        cJSON_AddNumberToObject(o, "expand_v", c->gdn_expand_v);
        cJSON_AddNumberToObject(o, "conv_size", c->conv_width);
        cJSON_AddBoolToObject(o, "use_gate", c->gdn_gate);
        cJSON_AddBoolToObject(o, "use_short_conv", true);
        break;
    case DELTANET:
    case LINATTN: {
        double ek = (double)(pr_config_head_dim(c) * c->n_heads) / c->d_model;
        cJSON_AddNumberToObject(o, "num_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "expand_k", ek);
        cJSON_AddNumberToObject(o, "expand_v", ek);
        if (arch == DELTANET) {
            cJSON_AddNumberToObject(o, "conv_size", c->conv_width);
            cJSON_AddBoolToObject(o, "use_gate", c->deltanet_gate);
            cJSON_AddBoolToObject(o, "use_short_conv", true);
        } else {
            cJSON_AddStringToObject(o, "feature_map", c->linattn_feature_map);
        }
        break;
    }
    case ATTN:
        cJSON_AddNumberToObject(o, "num_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "num_kv_heads", c->attn_kv_heads ? c->attn_kv_heads : c->n_heads);
        cJSON_AddNumberToObject(o, "rope_theta", c->attn_rope_theta);
        break;
    case GLA:
        cJSON_AddNumberToObject(o, "num_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "expand_k", c->gla_expand_k);
        cJSON_AddNumberToObject(o, "expand_v", c->gla_expand_v);
        cJSON_AddBoolToObject(o, "use_output_gate", c->gla_gate);
        cJSON_AddBoolToObject(o, "use_short_conv", false);
        cJSON_AddBoolToObject(o, "fuse_norm", true);
        break;
    case GSA:
        cJSON_AddNumberToObject(o, "num_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "expand_k", c->gsa_expand_k);
        cJSON_AddNumberToObject(o, "expand_v", c->gsa_expand_v);
        cJSON_AddNumberToObject(o, "num_slots", c->gsa_slots);
        cJSON_AddNumberToObject(o, "gate_logit_normalizer", c->gsa_gate_normalizer);
        cJSON_AddStringToObject(o, "feature_map", "swish");
        cJSON_AddBoolToObject(o, "use_short_conv", false);
        break;
    case MOM:
        cJSON_AddNumberToObject(o, "num_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "head_dim", (double)pr_config_head_dim(c));
        cJSON_AddNumberToObject(o, "expand_v", c->gdn_expand_v);
        cJSON_AddNumberToObject(o, "conv_size", c->conv_width);
        cJSON_AddBoolToObject(o, "use_output_gate", c->gdn_gate);
        cJSON_AddBoolToObject(o, "use_short_conv", true);
        cJSON_AddNumberToObject(o, "num_memories", c->mom_memories);
        cJSON_AddNumberToObject(o, "topk", c->mom_topk);
        cJSON_AddBoolToObject(o, "shared_mem", c->mom_shared);
        cJSON_AddBoolToObject(o, "single_kv_proj", false);
        cJSON_AddNumberToObject(o, "aux_loss_scale", c->mom_aux_loss_scale);
        cJSON_AddStringToObject(o, "mom_backend", "gated_deltanet");
        break;
    case MAMBA2:
        cJSON_AddNumberToObject(o, "head_dim", c->mamba2_head_dim);
        cJSON_AddNumberToObject(o, "state_size", c->mamba2_d_state);
        cJSON_AddNumberToObject(o, "expand", c->mamba2_expand);
        cJSON_AddNumberToObject(o, "n_groups", c->mamba2_n_groups);
        cJSON_AddNumberToObject(o, "conv_kernel", c->conv_width);
        break;
    }
}

/* what of a prism config fla's model of that mixer cannot express */
static int check_exportable(const pr_config *c, int a, pr_err *err)
{
    if (a < 0)
        return pr_errf(err, "fla export: mixer '%s' has no fla model here (allowed: gdn|deltanet|linattn|mamba2|attn|gla|gsa|mom)",
                       c->mixer);
    if (c->task != PR_HEAD_LM)
        return pr_errf(err, "fla export: task '%s': fla's models are causal LMs", pr_head_name(c->task));
    if (strcmp(c->norm, "rmsnorm") != 0) return pr_errf(err, "fla export: norm '%s': fla uses rmsnorm", c->norm);
    bool mamba2 = archs[a].arch == MAMBA2;
    const char *want = mamba2 ? "none" : "swiglu";
    bool ok = strcmp(c->mlp, want) == 0 || (strcmp(c->mlp, "auto") == 0);
    if (!ok) return pr_errf(err, "fla export: mlp '%s': fla's %s uses %s", c->mlp, archs[a].cls, want);
    if (archs[a].arch == ATTN && (!c->attn_rope || c->attn_bias))
        return pr_errf(err, "fla export: attn.rope=%s attn.bias=%s: fla's attention has RoPE and no biases",
                       c->attn_rope ? "true" : "false", c->attn_bias ? "true" : "false");
    if ((archs[a].arch == ATTN && c->attn_shortconv) || (archs[a].arch == LINATTN && c->linattn_shortconv))
        return pr_errf(err, "fla export: %s.shortconv=%d: fla's %s has no conv before the layer", c->mixer,
                       archs[a].arch == ATTN ? c->attn_shortconv : c->linattn_shortconv, archs[a].cls);
    if (archs[a].arch == GLA && (c->gla_gate_low_rank != 16 || c->gla_gate_normalizer != 16))
        return pr_errf(err, "fla export: gla.gate_low_rank=%d gla.gate_normalizer=%g: fla's GLA model fixes both at 16",
                       c->gla_gate_low_rank, c->gla_gate_normalizer);
    if (archs[a].arch == GSA && c->gsa_expand_v != 1)
        return pr_errf(err, "fla export: gsa.expand_v=%g: fla's GSA normalises its output over hidden_size (expand_v 1)",
                       c->gsa_expand_v);
    if (archs[a].arch == MOM && strcmp(c->mom_backend, "gdn") != 0)
        return pr_errf(err, "fla export: mom.backend=%s: fla's MoM has gated_deltanet memories only", c->mom_backend);
    if (archs[a].arch == ATTN && pr_config_head_dim(c) * c->n_heads != c->d_model)
        return pr_errf(err, "fla export: head_dim %lld: fla's attention uses d_model / n_heads",
                       (long long)pr_config_head_dim(c));
    return 0;
}

static char *fla_config_json(const pr_config *c, int a)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_type", archs[a].model_type);
    cJSON_AddItemToObject(o, "architectures", cJSON_CreateStringArray((const char *[]){archs[a].cls}, 1));
    cJSON_AddNumberToObject(o, "hidden_size", c->d_model);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(o, "norm_eps", c->norm_eps);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
    cJSON_AddNumberToObject(o, "initializer_range", c->init_std);
    if (archs[a].arch != MAMBA2) {
        cJSON_AddNumberToObject(o, "intermediate_size", (double)llround(c->mlp_mult * c->d_model));
        cJSON_AddStringToObject(o, "hidden_act", "swish");
    }
    write_arch(o, c, archs[a].arch);
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

static int write_text(const char *file, const char *s, pr_err *err)
{
    FILE *f = fopen(file, "w");
    if (!f) return pr_errf(err, "%s: cannot write: %s", file, strerror(errno));
    bool ok = fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    if (fclose(f) != 0 || !ok) return pr_errf(err, "%s: write failed", file);
    return 0;
}

/* ---- the two directions ----------------------------------------------------------------- */

typedef struct { int n; const char **names; const pr_tensor **ts; } tensor_list;

/* fla names GLA's norm weight for the output gate it is fused with; without the gate it is plain g_norm */
static void ungated_gla_norm(const pr_config *c, char *fla, size_t n)
{
    const char *fused = "g_norm_swish_gate.weight";
    size_t len = strlen(fla), flen = strlen(fused);
    if (strcmp(c->mixer, "gla") != 0 || c->gla_gate || len < flen || strcmp(fla + len - flen, fused) != 0) return;
    snprintf(fla + len - flen, n - (len - flen), "g_norm.weight");
}

/* move every parameter of model m between the two layouts: src holds the
 * tensors by their names on one side, the list gets them by the other's */
static int map_tensors(const pr_model *m, const pr_safetensors *src, const char *file, bool to_fla, pr_arena *a,
                       tensor_list *out, pr_err *err)
{
    const pr_params *r = m->params;
    out->names = pr_arena_alloc(a, sizeof *out->names * (size_t)r->n);
    out->ts = pr_arena_alloc(a, sizeof *out->ts * (size_t)r->n);
    const char **from_names = pr_arena_alloc(a, sizeof *from_names * (size_t)r->n);
    out->n = 0;
    for (int i = 0; i < r->n; i++) {
        const pr_tensor *p = r->p[i].t;
        char *fla = pr_arena_alloc(a, 256);
        int lay = pr_fla_name(m->cfg.mixer, r->p[i].path, fla, 256);
        ungated_gla_norm(&m->cfg, fla, 256);
        if (lay < 0) return pr_errf(err, "fla: no fla name for parameter '%s' of mixer %s", r->p[i].path, m->cfg.mixer);
        const char *from = to_fla ? r->p[i].path : fla;
        const pr_tensor *t = pr_safetensors_get(src, from);
        if (!t) return pr_errf(err, "%s: no tensor '%s'", file, from);
        if (t->dtype != PR_F32 && t->dtype != PR_F64 && t->dtype != PR_BF16)   /* `model` would refuse it later */
            return pr_errf(err, "%s: tensor '%s' is %s: weights must be f32, f64 or bf16", file, from,
                           pr_dtype_name(t->dtype));
        int64_t want[PR_MAX_DIMS];
        int nd;
        if (to_fla) nd = p->ndim, memcpy(want, p->shape, sizeof(int64_t) * (size_t)nd);
        else fla_shape(p, (layout)lay, &nd, want);
        if (!shape_is(t, nd, want)) {
            char got[64];
            return pr_errf(err, "%s: tensor '%s' is %s, the config implies %d dims [%lld, ...]", file, from,
                           pr_shape_str(t, got, sizeof got), nd, (long long)want[0]);
        }
        from_names[out->n] = from;
        out->names[out->n] = to_fla ? fla : r->p[i].path;
        out->ts[out->n++] = relayout(a, t, (layout)lay, to_fla);
    }
    for (int i = 0; i < src->n; i++) {
        bool known = false;
        for (int k = 0; k < out->n && !known; k++) known = strcmp(src->names[i], from_names[k]) == 0;
        bool tied_head = !to_fla && m->cfg.tie_embeddings && strcmp(src->names[i], "lm_head.weight") == 0;
        if (!known && !tied_head)
            return pr_errf(err, "%s: tensor '%s' has no place in prism's %s model", file, src->names[i], m->cfg.mixer);
    }
    return 0;
}

int pr_fla_import(const char *dir, const char *out_ckpt, const char *out_config, pr_err *err)
{
    char cfg_file[1024], st_file[1024];
    snprintf(cfg_file, sizeof cfg_file, "%s/config.json", dir);
    snprintf(st_file, sizeof st_file, "%s/model.safetensors", dir);
    pr_config c;
    int a;
    if (read_fla_config(cfg_file, &c, &a, err)) return -1;
    pr_arena *arena = pr_arena_new("fla-import", 0);
    pr_safetensors st = {0};
    pr_model *m = NULL;
    tensor_list l;
    int rc = pr_safetensors_read(st_file, arena, &st, err);
    if (!rc) m = pr_model_new(&c, PR_F32, PR_CPU);
    if (!rc) rc = map_tensors(m, &st, st_file, false, arena, &l, err);
    if (!rc) rc = pr_safetensors_write(out_ckpt, l.n, l.names, l.ts, 0, NULL, NULL, err);
    if (!rc) {
        char *json = pr_config_to_json(&c);
        rc = write_text(out_config, json, err);
        free(json);
    }
    pr_model_free(m);
    pr_arena_free(arena);
    return rc;
}

int pr_fla_export(const char *config_file, const char *ckpt, const char *dir, pr_err *err)
{
    pr_config c = pr_config_default();
    if (pr_config_load(&c, config_file, err) || pr_config_check(&c, err)) return -1;
    int a = arch_of_mixer(c.mixer);
    if (check_exportable(&c, a, err)) return -1;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return pr_errf(err, "%s: cannot create: %s", dir, strerror(errno));
    char cfg_file[1024], st_file[1024];
    snprintf(cfg_file, sizeof cfg_file, "%s/config.json", dir);
    snprintf(st_file, sizeof st_file, "%s/model.safetensors", dir);
    pr_arena *arena = pr_arena_new("fla-export", 0);
    pr_safetensors st = {0};
    pr_model *m = NULL;
    tensor_list l;
    int rc = pr_safetensors_read(ckpt, arena, &st, err);
    if (!rc) m = pr_model_new(&c, PR_F32, PR_CPU);
    if (!rc) rc = map_tensors(m, &st, ckpt, true, arena, &l, err);
    const char *fmt_key = "format", *fmt_val = "pt";   /* what transformers expects to find */
    if (!rc) rc = pr_safetensors_write(st_file, l.n, l.names, l.ts, 1, &fmt_key, &fmt_val, err);
    if (!rc) {
        char *json = fla_config_json(&c, a);
        rc = write_text(cfg_file, json, err);
        free(json);
    }
    pr_model_free(m);
    pr_arena_free(arena);
    return rc;
}
