/* models/config.c: the model config: one table of keys (type, default,
 * allowed values, meaning) drives the defaults, JSON files, `key=value`
 * overrides, presets, the --help text and the JSON dump. Nested JSON objects
 * name dotted keys: {"prism": {"L": 2}} sets `prism.L`. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/models.h"

/* KEY_CHOICE is kept as its text; KEY_ENUM as the index of its word in `allowed`
 * (the C enum lists the words in the same order) */
typedef enum { KEY_INT, KEY_FLOAT, KEY_BOOL, KEY_CHOICE, KEY_ENUM } key_type;

typedef struct {
    const char *key;
    key_type type;
    size_t offset, size;      /* size: the char buffer of a choice */
    const char *def;          /* default, as it would be written after '=' */
    const char *allowed;      /* choices "a|b|c"; for numbers "min..max" */
    const char *doc;
} key_info;

#define F(name) offsetof(pr_config, name), sizeof(((pr_config *)0)->name)
static const key_info keys[] = {
    {"mixer", KEY_CHOICE, F(mixer), "prism", "prism|gdn|mamba2|deltanet|linattn|sla|ttt_linear|ttt_mlp|titans|attn|mamba|mom|hstu|gla|gsa|atlas",
     "the sequence mixer of every block (sla, the PRISM paper's name, is stored as linattn)"},
    {"task", KEY_ENUM, F(task), "lm", "lm|rec", "causal LM over `vocab` tokens, or next-item recommendation"},
    {"d_model", KEY_INT, F(d_model), "64", "1..65536", "model width D"},
    {"n_layers", KEY_INT, F(n_layers), "2", "1..1024", "number of blocks"},
    {"n_heads", KEY_INT, F(n_heads), "4", "1..1024", "heads H of the mixer"},
    {"head_dim", KEY_INT, F(head_dim), "0", "0..65536", "key/value dim per head K = V; 0: d_model / n_heads"},
    {"conv_width", KEY_INT, F(conv_width), "4", "1..64", "width W of the causal depthwise ShortConv"},
    {"vocab", KEY_INT, F(vocab), "256", "2..16777216", "LM vocabulary size"},
    {"seq_len", KEY_INT, F(seq_len), "128", "1..16777216", "training sequence length"},
    {"chunk", KEY_INT, F(chunk), "64", "0..4096", "recurrence chunk size; 0: per-token form"},
    {"norm", KEY_CHOICE, F(norm), "rmsnorm", "rmsnorm|layernorm", "the blocks' and the final norm"},
    {"norm_eps", KEY_FLOAT, F(norm_eps), "1e-5", "0..1", "eps of every norm"},
    {"mlp", KEY_CHOICE, F(mlp), "auto", "swiglu|gelu|relu|none|auto",
     "the block's MLP; auto: swiglu, or none for mixers that carry none (mamba2, mamba)"},
    {"mlp_mult", KEY_FLOAT, F(mlp_mult), "4", "0.01..64", "MLP hidden width = round(mlp_mult * d_model)"},
    {"block", KEY_ENUM, F(block), "prenorm", "prenorm|sasrec",
     "prenorm: h + mixer(norm(h)), h + mlp(norm(h)); sasrec: SASRec's blocks (rec, attn, layernorm; see models/README.md)"},
    {"dropout", KEY_FLOAT, F(dropout), "0", "0..0.99", "dropout rate while training (sasrec blocks)"},
    {"match_attn", KEY_BOOL, F(match_attn), "false", "true|false",
     "size every block like attn's: blocks without an MLP (mamba2, mamba) come 2 * n_layers, any other mixer's "
     "MLP width takes up the difference between its layer's parameters and attn's (models/README.md)"},
    {"tie_embeddings", KEY_BOOL, F(tie_embeddings), "true", "true|false", "the LM head is the embedding's transpose"},
    {"fused_loss", KEY_CHOICE, F(fused_loss), "auto", "auto|true|false",
     "lm loss: the head's product fused with cross-entropy in row chunks (op linear_cross_entropy; never the whole "
     "[tokens, vocab] logits); false: the logits, then cross_entropy; auto: true on the CPU, false on CUDA "
     "(faster there; true holds less memory)"},
    {"ignore_index", KEY_INT, F(ignore_index), "-100", "-2147483647..2147483647", "target id left out of the loss"},
    {"seed", KEY_INT, F(seed), "1", "0..2147483647", "init seed (with each parameter's path)"},
    {"init_std", KEY_FLOAT, F(init_std), "0.02", "0..10", "std of weights and embeddings at init"},
    {"prism.form", KEY_CHOICE, F(prism_form), "paper", "paper|augmented",
     "PRISM layer: paper (Algorithm 1: every projection from the anchor U, write = first refinement) or "
     "augmented (Gated DeltaNet plus L extra refinement writes); docs/PRISM.md"},
    {"prism.L", KEY_INT, F(prism_L), "2", "0.." PR_STR(PR_PRISM_MAX_L), "PRISM refinement steps; 0 is Gated DeltaNet (both forms)"},
    {"prism.chunk", KEY_INT, F(prism_chunk), "32", "0..4096",
     "recurrence chunk size of PRISM with L >= 1 (L = 0 runs gdn with `chunk`); 0: per-token form"},
    {"prism.gelu", KEY_BOOL, F(prism_gelu), "true", "true|false", "GELU on each refinement (off: p * r)"},
    {"prism.shortconv", KEY_BOOL, F(prism_shortconv), "true", "true|false", "ShortConv on the anchor u"},
    {"prism.gain", KEY_BOOL, F(prism_gain), "true", "true|false", "gain predictor p (off: p = 1)"},
    {"prism.knorm", KEY_BOOL, F(prism_knorm), "true", "true|false",
     "L2-normalize each refinement key k_l (and q in form paper); off: the paper read literally"},
    {"prism.proj_rank", KEY_INT, F(prism_proj_rank), "0", "0..65536",
     "form paper: rank of the refinement projections W_k, W_p: 0 full, r > 0 factorised D -> r -> out"},
    {"prism.conv_width", KEY_INT, F(prism_conv_width), "0", "0..64", "width of the anchor's ShortConv; 0: conv_width"},
    {"prism.a_bias", KEY_FLOAT, F(prism_a_bias), "3", "-20..20",
     "form paper: init of the decay's bias b_a (a = sigmoid(b_a) at init: 0.95 for 3)"},
    {"prism.beta_bias", KEY_FLOAT, F(prism_beta_bias), "0", "-20..20",
     "init of each refinement strength's bias: strength sigmoid(b) at init"},
    {"gdn.gate", KEY_BOOL, F(gdn_gate), "true", "true|false", "gated output norm in gdn and prism"},
    {"gdn.expand_v", KEY_INT, F(gdn_expand_v), "1", "1..8",
     "value head dim V = expand_v * K in gdn, prism and mom (fla GatedDeltaNet's expand_v)"},
    {"deltanet.gate", KEY_BOOL, F(deltanet_gate), "false", "true|false", "gated output norm in deltanet"},
    {"mamba2.expand", KEY_INT, F(mamba2_expand), "2", "1..16", "inner width Di = expand * d_model"},
    {"mamba2.head_dim", KEY_INT, F(mamba2_head_dim), "64", "1..4096", "head dim P (heads = Di / P)"},
    {"mamba2.d_state", KEY_INT, F(mamba2_d_state), "128", "1..4096", "state size N"},
    {"mamba2.n_groups", KEY_INT, F(mamba2_n_groups), "1", "1..1024", "groups G sharing B and C"},
    {"linattn.feature_map", KEY_CHOICE, F(linattn_feature_map), "elementwise_product",
     "elementwise_product|elu|relu|identity", "feature map on q and k"},
    {"linattn.shortconv", KEY_INT, F(linattn_shortconv), "0", "0..64",
     "linattn: width of a depthwise causal conv on x before the layer (the authors' probes: 5); 0: none"},
    {"gla.expand_k", KEY_FLOAT, F(gla_expand_k), "0.5", "0.01..64",
     "gla: key dim of all heads = expand_k * d_model (fla GatedLinearAttention)"},
    {"gla.expand_v", KEY_FLOAT, F(gla_expand_v), "1", "0.01..64", "gla: value dim of all heads = expand_v * d_model"},
    {"gla.gate_low_rank", KEY_INT, F(gla_gate_low_rank), "16", "1..65536", "gla: rank of the decay gate's projection"},
    {"gla.gate_normalizer", KEY_FLOAT, F(gla_gate_normalizer), "16", "0.001..1e6",
     "gla: the log-decay is logsigmoid(.) / gate_normalizer"},
    {"gla.gate", KEY_BOOL, F(gla_gate), "true", "true|false", "gla: output gate rms(o) * silu(x Wg) (off: rms(o))"},
    {"gsa.slots", KEY_INT, F(gsa_slots), "64", "1..4096", "gsa: memory slots M per head"},
    {"gsa.expand_k", KEY_FLOAT, F(gsa_expand_k), "1", "0.01..64", "gsa: key dim of all heads = expand_k * d_model"},
    {"gsa.expand_v", KEY_FLOAT, F(gsa_expand_v), "1", "0.01..64", "gsa: value dim of all heads = expand_v * d_model"},
    {"gsa.gate_normalizer", KEY_FLOAT, F(gsa_gate_normalizer), "8", "0.001..1e6",
     "gsa: the slots' log-decay is logsigmoid(.) / gate_normalizer"},
    {"ttt.mini_batch", KEY_INT, F(ttt_mini_batch), "16", "1..4096", "TTT inner mini-batch b"},
    {"ttt.base_lr", KEY_FLOAT, F(ttt_base_lr), "1", "0..1000", "TTT inner base learning rate"},
    {"titans.chunk", KEY_INT, F(titans_chunk), "16", "1..4096", "Titans: tokens whose gradients share the chunk-start memory"},
    {"attn.kv_heads", KEY_INT, F(attn_kv_heads), "0", "0..1024",
     "attn: key/value heads (GQA; must divide n_heads); 0: n_heads"},
    {"attn.rope_theta", KEY_FLOAT, F(attn_rope_theta), "10000", "1..1e9", "attn: RoPE base"},
    {"attn.rope", KEY_BOOL, F(attn_rope), "true", "true|false", "attn: RoPE on q and k (off: no positions in the layer)"},
    {"attn.bias", KEY_BOOL, F(attn_bias), "false", "true|false", "attn: biases on the q, k, v and output projections"},
    {"attn.shortconv", KEY_INT, F(attn_shortconv), "0", "0..64",
     "attn: width of a depthwise causal conv on x before the layer (the authors' probes: 3); 0: none"},
    {"mamba.expand", KEY_INT, F(mamba_expand), "2", "1..16", "mamba: inner width Di = expand * d_model"},
    {"mamba.d_state", KEY_INT, F(mamba_d_state), "16", "1..4096", "mamba: state size N per channel"},
    {"mamba.dt_rank", KEY_INT, F(mamba_dt_rank), "0", "0..65536", "mamba: rank R of the Delta projection; 0: ceil(d_model / 16)"},
    {"rec.n_items", KEY_INT, F(rec_n_items), "1000", "1..16777216", "recommendation: items (id 0 pads)"},
    {"mom.memories", KEY_INT, F(mom_memories), "4", "1..64", "mom: routed memories E (fla num_memories)"},
    {"mom.topk", KEY_INT, F(mom_topk), "2", "1..64", "mom: memories each token is routed to (at most mom.memories)"},
    {"mom.shared", KEY_BOOL, F(mom_shared), "true", "true|false", "mom: a shared memory that sees every token (fla shared_mem)"},
    {"mom.backend", KEY_CHOICE, F(mom_backend), "gdn", "gdn|gla",
     "mom: the rule of each memory: gated delta rule, or GLA (a decay per key channel, gla.gate_normalizer)"},
    {"mom.route", KEY_CHOICE, F(mom_route), "auto", "auto|packed|padded",
     "mom: the routed tokens' layout: packed (each memory's tokens back to back, the top-k read on the host), "
     "padded (routed on the device, each memory's sequence padded to T: E/k times the rows, and fixed shapes, so "
     "CUDA graphs can capture the step; a forward that keeps state runs packed) or auto (padded on CUDA, packed "
     "on the CPU); the same model either way"},
    {"mom.aux_loss_scale", KEY_FLOAT, F(mom_aux_loss_scale), "0.01", "0..100",
     "mom: weight of the router's load-balancing loss added to the training loss (fla aux_loss_scale)"},
    {"hstu.buckets", KEY_INT, F(hstu_buckets), "32", "1..4096",
     "hstu: relative position buckets of the attention bias (logarithmic in the distance)"},
    {"atlas.window", KEY_INT, F(atlas_window), "4", "1..1024", "atlas: tokens c whose loss each step fits (the Omega rule's window)"},
    {"atlas.degree", KEY_INT, F(atlas_degree), "2", "1..2", "atlas: degree of the polynomial features of q and k"},
    {"atlas.memory", KEY_CHOICE, F(atlas_memory), "linear", "linear|mlp", "atlas: the memory: a matrix, or a 2-layer MLP silu(p W1) W2 (hidden K) from learned weights"},
    {"atlas.optimizer", KEY_CHOICE, F(atlas_optimizer), "gd", "gd|muon",
     "atlas: the memory's inner update: gradient step, or Muon (momentum, Newton-Schulz orthogonalised)"},
    {"atlas.ns_steps", KEY_INT, F(atlas_ns_steps), "5", "1..20", "atlas: Newton-Schulz steps of the muon update"},
};
#undef F
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

/* the presets, in the same format a --config file uses */
static const struct { const char *name, *json; } presets[] = {
    /* EXPERIMENTS.md section 1: D 16, 2 blocks, 4x GELU MLP, seq 128, vocab 64;
     * heads are not stated there: 2 (ours) */
    {"probe", "{\"d_model\":16,\"n_layers\":2,\"n_heads\":2,\"mlp\":\"gelu\",\"mlp_mult\":4,"
              "\"seq_len\":128,\"vocab\":64,\"prism\":{\"L\":2},\"mamba2\":{\"head_dim\":8,\"d_state\":16}}"},
    /* EXPERIMENTS.md section 1, the authors' probe script: vocab 32, D 16 (128 for the
     * memory tasks: the probe-authors protocol of prism train sets it per task), 1 head,
     * LayerNorm pre-norm blocks with a 4x GELU MLP, seq_len 128 (64 for the memory tasks),
     * an output head of its own (not the embedding's transpose) */
    {"probe-authors", "{\"d_model\":16,\"n_layers\":2,\"n_heads\":1,\"norm\":\"layernorm\",\"mlp\":\"gelu\","
                      "\"tie_embeddings\":false,"
                      "\"mlp_mult\":4,\"seq_len\":128,\"vocab\":32,\"prism\":{\"L\":2},"
                      "\"mamba2\":{\"head_dim\":8,\"d_state\":16}}"},
    /* rec-small and lm-130m compare mixers at one size (match_attn); PRISM's W_k, W_p
     * factorised as the authors' code does: rank D/4 (their probe code) and 128 (their LM) */
    {"rec-small", "{\"task\":\"rec\",\"d_model\":64,\"n_layers\":2,\"n_heads\":2,\"seq_len\":50,"
                  "\"match_attn\":true,\"prism\":{\"proj_rank\":16},"
                  "\"rec\":{\"n_items\":1000},\"mamba2\":{\"head_dim\":32,\"d_state\":32}}"},
    /* BASELINES.md 6.2 (ML-1M): d 50, 2 blocks, 1 head, maxlen 200, dropout 0.2, W1, W2 [d,d], LN eps 1e-8 */
    {"sasrec", "{\"task\":\"rec\",\"mixer\":\"attn\",\"block\":\"sasrec\",\"d_model\":50,\"n_layers\":2,"
               "\"n_heads\":1,\"seq_len\":200,\"norm\":\"layernorm\",\"norm_eps\":1e-8,\"mlp\":\"relu\","
               "\"mlp_mult\":1,\"dropout\":0.2,\"attn\":{\"rope\":false,\"bias\":true}}"},
    {"lm-130m", "{\"d_model\":768,\"n_layers\":8,\"n_heads\":8,\"vocab\":32000,\"seq_len\":1024,"
                "\"mlp_mult\":2.6666666666666665,\"match_attn\":true,\"prism\":{\"proj_rank\":128}}"},
};
const char *const pr_config_presets[] = {"probe", "probe-authors", "rec-small", "sasrec", "lm-130m", NULL};

const char *pr_head_name(pr_head h) { return h == PR_HEAD_REC ? "rec" : "lm"; }
const char *pr_block_name(pr_block_form b) { return b == PR_BLOCK_SASREC ? "sasrec" : "prenorm"; }
const char *pr_config_model_name(const pr_config *c) { return c->block == PR_BLOCK_SASREC ? "sasrec" : c->mixer; }

static const key_info *find_key(const char *key)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].key, key) == 0) return &keys[i];
    return NULL;
}

/* the index of word v in "a|b|c", or -1 */
static int choice_index(const char *allowed, const char *v)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *s = allowed; s; i++) {
        const char *bar = strchr(s, '|');
        size_t len = bar ? (size_t)(bar - s) : strlen(s);
        if (len == n && strncmp(s, v, n) == 0) return i;
        s = bar ? bar + 1 : NULL;
    }
    return -1;
}

static bool choice_ok(const char *allowed, const char *v) { return choice_index(allowed, v) >= 0; }

/* word i of "a|b|c" into buf ("" past the last) */
static const char *choice_at(const char *allowed, int i, char *buf, size_t size)
{
    const char *s = allowed;
    for (; s && i > 0; i--) s = strchr(s, '|'), s = s ? s + 1 : NULL;
    const char *bar = s ? strchr(s, '|') : NULL;
    snprintf(buf, size, "%.*s", s ? (int)(bar ? (size_t)(bar - s) : strlen(s)) : 0, s ? s : "");
    return buf;
}

/* "lo..hi" (strtod alone would read "1." as the number) */
static void range_of(const char *allowed, double *lo, double *hi)
{
    const char *dots = strstr(allowed, "..");
    char first[32];
    snprintf(first, sizeof first, "%.*s", (int)(dots - allowed), allowed);
    *lo = strtod(first, NULL);
    *hi = strtod(dots + 2, NULL);
}

bool pr_config_number(const char *s, double *out)
{
    const char *p = s + (*s == '-');
    if (!isdigit((unsigned char)*p) || (p[0] == '0' && isdigit((unsigned char)p[1]))) return false;
    while (isdigit((unsigned char)*p)) p++;
    if (*p == '.' && !isdigit((unsigned char)*++p)) return false;
    while (isdigit((unsigned char)*p)) p++;
    if (*p == 'e' || *p == 'E') {
        p += p[1] == '+' || p[1] == '-' ? 2 : 1;
        if (!isdigit((unsigned char)*p)) return false;
        while (isdigit((unsigned char)*p)) p++;
    }
    if (*p) return false;
    errno = 0;
    double x = strtod(s, NULL);
    if (errno == ERANGE || !isfinite(x)) return false;   /* 1e999; underflow to 0 is refused too */
    *out = x;
    return true;
}

static int bad_value(const key_info *k, const char *v, const char *why, pr_err *err)
{
    return pr_errf(err, "config: bad value '%s' for '%s' (%s; allowed: %s)", v, k->key, why, k->allowed);
}

/* set key k from its text form */
static int set_text(pr_config *c, const key_info *k, const char *v, pr_err *err)
{
    char *field = (char *)c + k->offset;
    double lo = 0, hi = 0;
    if (k->type == KEY_INT || k->type == KEY_FLOAT) range_of(k->allowed, &lo, &hi);
    switch (k->type) {
    case KEY_INT: {
        double x;   /* range-checked before the cast */
        if (!pr_config_number(v, &x) || x != floor(x)) return bad_value(k, v, "not an integer", err);
        if (x < lo || x > hi) return bad_value(k, v, "out of range", err);
        *(int *)field = (int)x;
        return 0;
    }
    case KEY_FLOAT: {
        double x;
        if (!pr_config_number(v, &x)) return bad_value(k, v, "not a number", err);
        if (x < lo || x > hi) return bad_value(k, v, "out of range", err);
        *(double *)field = x;
        return 0;
    }
    case KEY_BOOL:
        if (strcmp(v, "true") == 0 || strcmp(v, "on") == 0 || strcmp(v, "1") == 0) *(bool *)field = true;
        else if (strcmp(v, "false") == 0 || strcmp(v, "off") == 0 || strcmp(v, "0") == 0) *(bool *)field = false;
        else return bad_value(k, v, "not a boolean", err);
        return 0;
    case KEY_CHOICE:
        if (!choice_ok(k->allowed, v)) return bad_value(k, v, "not one of the choices", err);
        if (k->offset == offsetof(pr_config, mixer) && strcmp(v, "sla") == 0) v = "linattn";   /* an alias */
        snprintf(field, k->size, "%s", v);
        return 0;
    case KEY_ENUM:
        if (!choice_ok(k->allowed, v)) return bad_value(k, v, "not one of the choices", err);
        *(int *)field = choice_index(k->allowed, v);
        return 0;
    }
    return pr_errf(err, "config: key '%s' has no type", k->key);
}

pr_config pr_config_default(void)
{
    pr_config c;
    memset(&c, 0, sizeof c);
    pr_err err;
    for (int i = 0; i < NKEYS; i++)
        if (set_text(&c, &keys[i], keys[i].def, &err)) pr_fatal("%s", err.msg);  /* a bad table entry */
    return c;
}

int pr_config_set(pr_config *c, const char *key_value, pr_err *err)
{
    const char *eq = strchr(key_value, '=');
    if (!eq) return pr_errf(err, "config: '%s' is not key=value", key_value);
    char key[64];
    size_t n = (size_t)(eq - key_value);
    if (n >= sizeof key) n = sizeof key - 1;
    memcpy(key, key_value, n);
    key[n] = '\0';
    const key_info *k = find_key(key);
    if (!k) return pr_errf(err, "config: unknown key '%s' (prism model --help lists the keys)", key);
    return set_text(c, k, eq + 1, err);
}

/* one JSON member: objects recurse with a longer prefix, scalars set a key */
static int apply_item(pr_config *c, const cJSON *it, const char *prefix, const char *what, pr_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%.63s%.63s", prefix, it->string ? it->string : "");
    if (cJSON_IsObject(it)) {
        char sub[130];
        snprintf(sub, sizeof sub, "%s.", key);
        for (const cJSON *ch = it->child; ch; ch = ch->next)
            if (apply_item(c, ch, sub, what, err)) return -1;
        return 0;
    }
    const key_info *k = find_key(key);
    if (!k) return pr_errf(err, "%s: unknown key '%s' (prism model --help lists the keys)", what, key);
    char text[64];
    if (cJSON_IsBool(it)) snprintf(text, sizeof text, "%s", cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsString(it)) snprintf(text, sizeof text, "%s", it->valuestring);
    else if (cJSON_IsNumber(it)) snprintf(text, sizeof text, k->type == KEY_INT && it->valuedouble == floor(it->valuedouble)
                                          ? "%.0f" : "%.17g", it->valuedouble);
    else return pr_errf(err, "%s: '%s' must be a number, string or boolean (allowed: %s)", what, key, k->allowed);
    if (k->type == KEY_BOOL && !cJSON_IsBool(it))
        return pr_errf(err, "%s: '%s' must be true or false", what, key);
    if ((k->type == KEY_INT || k->type == KEY_FLOAT) && !cJSON_IsNumber(it))
        return pr_errf(err, "%s: '%s' must be a number (allowed: %s)", what, key, k->allowed);
    if (set_text(c, k, text, err)) {
        char inner[sizeof err->msg];   /* err->msg is also the output: copy it first */
        snprintf(inner, sizeof inner, "%s", err->msg);
        return pr_errf(err, "%s: %s", what, inner);
    }
    return 0;
}

int pr_config_apply_json(pr_config *c, const char *json, const char *what, pr_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, false);
    if (!root)
        return pr_errf(err, "%s: malformed JSON at byte %lld near '%.20s'", what, end ? (long long)(end - json) : -1LL,
                       end ? end : "");
    int rc = 0;
    end += strspn(end, " \t\r\n");
    if (*end) rc = pr_errf(err, "%s: malformed JSON: text after the object at byte %lld ('%.20s')", what,
                           (long long)(end - json), end);
    else if (!cJSON_IsObject(root)) rc = pr_errf(err, "%s: the config must be a JSON object", what);
    for (const cJSON *it = root->child; rc == 0 && it; it = it->next) rc = apply_item(c, it, "", what, err);
    cJSON_Delete(root);
    return rc;
}

/* configs, grids and fla's config.json are small: a larger "text" is a
 * mistake (a device, a data file), refused rather than read into memory */
#define PR_TEXT_FILE_MAX ((size_t)16 << 20)

char *pr_read_text(const char *path, pr_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap + 1);
    PR_CHECK(buf, "config: out of host memory");
    while (n <= PR_TEXT_FILE_MAX && (got = fread(buf + n, 1, cap - n, f)) > 0)   /* pipes and devices too */
        if ((n += got) == cap) {
            buf = realloc(buf, (cap *= 2) + 1);
            PR_CHECK(buf, "config: out of host memory");
        }
    const char *why = ferror(f) ? strerror(errno) : n > PR_TEXT_FILE_MAX ? "larger than 16 MiB: not a config" : NULL;
    fclose(f);
    const char *nul = why ? NULL : memchr(buf, 0, n);
    if (why || nul) {
        if (why) pr_errf(err, "%s: cannot read: %s", path, why);
        else pr_errf(err, "%s: a NUL byte at byte %zu: not a text file", path, (size_t)(nul - buf));
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

int pr_config_load(pr_config *c, const char *path, pr_err *err)
{
    char *buf = pr_read_text(path, err);
    if (!buf) return -1;
    int rc = pr_config_apply_json(c, buf, path, err);
    free(buf);
    return rc;
}

int pr_config_preset(pr_config *c, const char *name, pr_err *err)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) return pr_config_apply_json(c, presets[i].json, name, err);
    char names[160] = "";
    for (int i = 0; pr_config_presets[i]; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "|" : "", pr_config_presets[i]);
    return pr_errf(err, "config: unknown preset '%s' (allowed: %s)", name, names);
}

int pr_config_check(const pr_config *c, pr_err *err)
{
    if (!pr_mixer_by_name(c->mixer)) return pr_errf(err, "config: mixer '%s' is not built yet", c->mixer);
    if (!c->head_dim && c->d_model % c->n_heads)
        return pr_errf(err, "config: d_model %d is not a multiple of n_heads %d (or set head_dim)", c->d_model,
                       c->n_heads);
    const pr_mixer_def *def = pr_mixer_by_name(c->mixer);
    if (def->check && def->check(c, err)) return -1;
    if (c->block == PR_BLOCK_SASREC && c->attn_shortconv)
        return pr_errf(err, "config: block sasrec has no attn.shortconv (got %d; set 0)", c->attn_shortconv);
    if (c->block == PR_BLOCK_SASREC &&
        (c->task != PR_HEAD_REC || strcmp(c->mixer, "attn") || strcmp(c->norm, "layernorm")))
        return pr_errf(err, "config: block sasrec needs task rec, mixer attn and norm layernorm (got %s, %s, %s)",
                       pr_head_name(c->task), c->mixer, c->norm);
    if (c->task == PR_HEAD_LM && c->ignore_index >= 0 && c->ignore_index < c->vocab)
        return pr_errf(err, "config: ignore_index %d is a token id (vocab %d)", c->ignore_index, c->vocab);
    return 0;
}

void pr_config_print_help(FILE *f)
{
    fprintf(f, "  %-22s %-6s %-20s %s\n", "key", "type", "default", "meaning (allowed)");
    static const char *const type_names[] = {"int", "float", "bool", "choice", "choice"};
    for (int i = 0; i < NKEYS; i++)
        fprintf(f, "  %-22s %-6s %-20s %s (%s)\n", keys[i].key, type_names[keys[i].type], keys[i].def, keys[i].doc,
                keys[i].allowed);
}

void pr_config_print_markdown(FILE *f)
{
    static const char *const type_names[] = {"int", "float", "bool", "choice", "choice"};
    fprintf(f, "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n");
    for (int i = 0; i < NKEYS; i++) {
        fprintf(f, "| `%s` | %s | `%s` | ", keys[i].key, type_names[keys[i].type], keys[i].def);
        for (const char *a = keys[i].allowed; *a; a++) fputs(*a == '|' ? ", " : (char[]){*a, 0}, f);
        fprintf(f, " | %s |\n", keys[i].doc);
    }
}

char *pr_config_to_json(const pr_config *c)
{
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < NKEYS; i++) {
        const key_info *k = &keys[i];
        cJSON *parent = root;
        char name[64];
        snprintf(name, sizeof name, "%s", k->key);
        char *dot = strchr(name, '.'), *leaf = name;
        if (dot) {
            *dot = '\0';
            leaf = dot + 1;
            parent = cJSON_GetObjectItemCaseSensitive(root, name);
            if (!parent) parent = cJSON_AddObjectToObject(root, name);
        }
        const char *field = (const char *)c + k->offset;
        char word[32];
        switch (k->type) {
        case KEY_INT: cJSON_AddNumberToObject(parent, leaf, *(const int *)field); break;
        case KEY_FLOAT: cJSON_AddNumberToObject(parent, leaf, *(const double *)field); break;
        case KEY_BOOL: cJSON_AddBoolToObject(parent, leaf, *(const bool *)field); break;
        case KEY_CHOICE: cJSON_AddStringToObject(parent, leaf, field); break;
        case KEY_ENUM: cJSON_AddStringToObject(parent, leaf, choice_at(k->allowed, *(const int *)field, word, sizeof word)); break;
        }
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}
