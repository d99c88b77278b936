/* models/models.h: layers, blocks and models built from ops, their configs
 * and the parameter registry.
 *
 * A layer is a plain struct of parameter tensors plus a forward made of ops,
 * so the tape differentiates it; no layer owns a hand-written backward.
 * Every parameter is registered under a path (`layers.3.mixer.w_k.0`) in one
 * registry per model, which serves initialization (a Philox stream keyed by
 * (seed, path)), checkpoints, gradient norms and parameter counts.
 * models/README.md writes down the math of each layer as implemented.
 */
#ifndef PR_MODELS_H
#define PR_MODELS_H

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most PRISM refinement steps a layer takes: the layer keeps fixed arrays
 * of this size, and the config's `prism.L` range is written from it. */
#define PR_PRISM_MAX_L 8
#define PR_STR_(x) #x
#define PR_STR(x) PR_STR_(x)   /* a macro's value as a string literal */

/* The model's head and loss (config key `task`, written "lm" or "rec"):
 * next-token logits over `vocab`, or next-item scores over the item table. */
typedef enum { PR_HEAD_LM, PR_HEAD_REC } pr_head;
/* The blocks' form (config key `block`, written "prenorm" or "sasrec"). */
typedef enum { PR_BLOCK_PRENORM, PR_BLOCK_SASREC } pr_block_form;

/* ---- config (models/config.c) ------------------------------------------------
 * One flat struct; its keys are dotted paths (`prism.L`). The table in
 * config.c gives every key's type, default, allowed values and meaning; the
 * --help text and models/README.md's table come from it. */
typedef struct pr_config {
    char mixer[24];
    pr_head task;
    int d_model, n_layers, n_heads, head_dim, conv_width, vocab, seq_len, chunk;
    char norm[16];
    double norm_eps;
    char mlp[16];
    double mlp_mult;
    bool tie_embeddings;
    char fused_loss[8];   /* auto|true|false: pr_lm_loss through linear_cross_entropy (models/model.c) */
    int ignore_index;
    int seed;
    double init_std;
    int prism_L, prism_chunk;   /* prism_L in 0..PR_PRISM_MAX_L; prism_chunk: prism_core's chunk (L >= 1) */
    char prism_form[16];        /* "paper" (Algorithm 1) or "augmented" (gdn plus refinement writes) */
    bool prism_gelu, prism_shortconv, prism_gain, prism_knorm;
    int prism_proj_rank;        /* 0: full W_k, W_p; r > 0: factorised through r */
    int prism_conv_width;       /* the anchor's ShortConv width; 0: conv_width */
    double prism_beta_bias;     /* init of b_beta (the refinement strengths' bias) */
    double prism_a_bias;        /* form paper: init of the decay's bias b_a (a = sigmoid(b_a) at init) */
    bool gdn_gate, deltanet_gate;
    int gdn_expand_v;
    int mamba2_expand, mamba2_head_dim, mamba2_d_state, mamba2_n_groups;
    char linattn_feature_map[24];
    double gla_expand_k, gla_expand_v, gla_gate_normalizer;
    int gla_gate_low_rank;
    bool gla_gate;
    int gsa_slots;
    double gsa_expand_k, gsa_expand_v, gsa_gate_normalizer;
    int ttt_mini_batch;
    double ttt_base_lr;
    int titans_chunk;
    int attn_kv_heads;
    double attn_rope_theta;
    bool attn_rope, attn_bias;
    int attn_shortconv, linattn_shortconv;   /* width of the conv before the layer; 0: none */
    pr_block_form block;
    double dropout;
    bool match_attn;            /* size every block like attn's (pr_config_resolve) */
    int mamba_expand, mamba_d_state, mamba_dt_rank;
    int rec_n_items;
    int mom_memories, mom_topk;
    bool mom_shared;
    char mom_backend[8];
    char mom_route[8];          /* auto | packed | padded (models/mom.c) */
    double mom_aux_loss_scale;
    int hstu_buckets;
    int atlas_window, atlas_degree, atlas_ns_steps;
    char atlas_memory[8], atlas_optimizer[8];
} pr_config;

/* the defaults of every key */
pr_config pr_config_default(void);
/* apply a preset by name ("probe", "rec-small", "lm-130m"); -1 with err if unknown */
int pr_config_preset(pr_config *c, const char *name, pr_err *err);
/* apply a JSON text / file (nested objects give dotted keys); -1 with err on
 * malformed JSON, an unknown key or a bad value */
int pr_config_apply_json(pr_config *c, const char *json, const char *what, pr_err *err);
int pr_config_load(pr_config *c, const char *path, pr_err *err);
/* a whole text file (caller frees); NULL with err naming the file */
char *pr_read_text(const char *path, pr_err *err);
/* apply one `key=value`; -1 with err naming the key and the allowed values */
int pr_config_set(pr_config *c, const char *key_value, pr_err *err);
/* the one number grammar of every config and training key, in JSON files and
 * key=value alike: JSON's (-?digits[.digits][e[+-]digits], no hex, no inf or
 * nan, no spaces), finite; true with *out set */
bool pr_config_number(const char *s, double *out);
/* cross-field checks (divisibility, ranges); -1 with err naming the key */
int pr_config_check(const pr_config *c, pr_err *err);
/* the sizes a model is built with: with match_attn, blocks without an MLP come
 * 2 * n_layers, and any other mixer's MLP hidden width (mlp_mult) takes up the
 * difference between its layer's parameters and attn's (models/README.md); the
 * result has match_attn off, so resolving twice changes nothing */
pr_config pr_config_resolve(const pr_config *c);
/* the parameters of one mixer layer of config c (built on the CPU and dropped) */
int64_t pr_config_mixer_params(const pr_config *c);
/* the table of keys: `key  type  default  allowed  meaning`, one a line */
void pr_config_print_help(FILE *f);
/* the same table in Markdown (models/README.md holds a copy; a test compares) */
void pr_config_print_markdown(FILE *f);
/* the config as one JSON object (caller frees) */
char *pr_config_to_json(const pr_config *c);
/* names of the presets, NULL-terminated */
extern const char *const pr_config_presets[];
/* the config file's words for a head and a block form ("lm", "sasrec") */
const char *pr_head_name(pr_head h);
const char *pr_block_name(pr_block_form b);
/* the model a run is named by: "sasrec" for SASRec's blocks, else the mixer */
const char *pr_config_model_name(const pr_config *c);

/* ---- parameter registry (models/params.c) ------------------------------------ */
typedef enum {
    PR_INIT_NORMAL,       /* N(0, a) */
    PR_INIT_UNIFORM,      /* U(a, b) */
    PR_INIT_CONST,        /* a */
    PR_INIT_LOG_UNIFORM,  /* ln U(a, b)          (A_log) */
    PR_INIT_DT_BIAS,      /* softplus^-1 of dt = exp(U(ln a, ln b)), dt >= 1e-4 */
    PR_INIT_S4D_REAL,     /* ln(1 + (i mod a)): Mamba-1's A_log [Di, N] with a = N */
} pr_init_kind;
typedef struct { pr_init_kind kind; double a, b; } pr_init;

typedef struct {
    char *path;
    pr_tensor *t;         /* requires grad; t->name == path */
    pr_init init;
    bool decay;           /* weight decay applies (false: norms, biases, embeddings, A_log, dt_bias, D) */
} pr_param;

typedef struct pr_params {
    pr_arena *arena;      /* the parameters' data and the layer structs */
    pr_dtype dtype;
    pr_device device;
    int n, cap;
    pr_param *p;
    char prefix[256];     /* the current path prefix, "layers.3.mixer." */
    int depth, mark[16];
    bool shapes_only;     /* headers without data (pr_model_shapes): counts, no bytes */
} pr_params;

pr_params *pr_params_new(pr_dtype dt, pr_device dev);
void pr_params_free(pr_params *r);
/* enter / leave a path component: push("layers.%d", 3) then push("mixer") */
void pr_params_push(pr_params *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pr_params_pop(pr_params *r);
/* a new parameter at prefix + name; duplicate paths are fatal */
pr_tensor *pr_param_new(pr_params *r, const char *name, pr_init init, bool decay, int ndim,
                        const int64_t *shape);
/* fill every parameter from its own stream: stream = hash(path), so a
 * parameter's values depend on (seed, path, shape) only */
void pr_params_init(pr_params *r, uint64_t seed);
void pr_param_init_one(const pr_param *p, uint64_t seed);
const pr_param *pr_params_find(const pr_params *r, const char *path); /* NULL if absent */
int64_t pr_params_count(const pr_params *r);
/* sqrt of the sum of every parameter's squared grad (missing grads count 0) */
double pr_params_grad_norm(const pr_params *r);
void pr_params_zero_grads(const pr_params *r);
/* parameter grads live in the grads arena of the context that made them:
 * drop the registry's pointers to them before freeing that context, when the
 * parameters will meet another one */
void pr_params_release_grads(const pr_params *r);
/* every parameter into `to` (another dtype/device), same paths */
pr_params *pr_params_copy(const pr_params *r, pr_dtype dt, pr_device dev);
/* checkpoints: safetensors, tensor names = paths; load needs every path, of the same shape */
int pr_params_save(const pr_params *r, const char *file, pr_err *err);
int pr_params_load(pr_params *r, const char *file, pr_err *err);

/* ---- layers (models/<mixer>.c) --------------------------------------------------
 * A mixer maps x [B,T,D] (the block's normalized input) to y [B,T,D]. With a
 * state, it starts from the carried state (NULL slots: a fresh sequence) and
 * leaves the state after its last token there, so a sequence can run whole,
 * or as a prefix and then one token at a time. Slots hold the ShortConv
 * windows (the last W-1 inputs) and the recurrent state. */
#define PR_STATE_SLOTS 8
typedef struct { pr_tensor *slot[PR_STATE_SLOTS]; } pr_layer_state;

typedef struct {
    const char *name;
    const char *summary;
    bool mlp;             /* whether its blocks carry an MLP by default (Mamba-2: no) */
    bool expands_v;       /* value dim V = head dim * gdn.expand_v (else V = head dim) */
    /* the mixer's own config checks (sizes that must divide, ...); NULL: none.
     * -1 with err naming the key and value */
    int (*check)(const pr_config *c, pr_err *err);
    /* register the parameters under r's current prefix; the layer struct lives in r->arena */
    void *(*build)(pr_params *r, const pr_config *c);
    pr_tensor *(*forward)(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *x, pr_layer_state *st);
} pr_mixer_def;

extern const pr_mixer_def pr_mixer_prism, pr_mixer_gdn, pr_mixer_mamba2, pr_mixer_deltanet,
    pr_mixer_linattn, pr_mixer_ttt_linear, pr_mixer_attn, pr_mixer_mamba, pr_mixer_ttt_mlp, pr_mixer_titans,
    pr_mixer_mom, pr_mixer_hstu, pr_mixer_gla, pr_mixer_gsa,
    pr_mixer_atlas;
/* NULL if unknown; "sla" (the PRISM paper's name for un-gated linear attention) is linattn */
const pr_mixer_def *pr_mixer_by_name(const char *name);
extern const pr_mixer_def *const pr_mixers[];             /* NULL-terminated */

/* ---- shared pieces (models/common.c) ------------------------------------------ */
/* x [..., in] @ w [in, out] (+ b [out]). Under bf16 autocast b is part of
 * the product, as torch's linear takes it: lowered to the product's bf16, so
 * y stays bf16. A bias that must stay f32 (a log-decay's, as fla adds
 * dt_bias in f32) is added after it with pr_add, which promotes. */
pr_tensor *pr_linear(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *b);
/* silu of the causal depthwise conv over time of x [B,T,C] with w [C,W] (+ bias)
 * (every model's short conv; one op, pr_conv1d_silu), starting from the window
 * *win [B,W-1,C] (NULL: zeros) and, when win != NULL, leaving the last W-1
 * inputs there */
pr_tensor *pr_shortconv_silu(pr_ctx *ctx, pr_tensor *x, pr_tensor *w, pr_tensor *bias, pr_tensor **win);
/* the depthwise causal conv some baselines run before their mixer (the
 * authors' probe script): silu(conv(x) + b), weights w [D,W] and bias b [D]
 * ~ U(+-1/sqrt(W)), the range of PyTorch's Conv1d default, which keeps x's
 * scale at init (N(0, init_std) would shrink it fifty-fold) */
typedef struct { pr_tensor *w, *b; } pr_pre_conv_params;
/* none (both NULL) for width 0 */
pr_pre_conv_params pr_pre_conv_build(pr_params *r, const pr_config *c, int width);
/* x through that conv (none: x itself), its window in *win as pr_shortconv_silu keeps it */
pr_tensor *pr_pre_conv(pr_ctx *ctx, pr_tensor *x, const pr_pre_conv_params *p, pr_tensor **win);
/* [B,T,H*E] <-> [B,T,H,E] */
pr_tensor *pr_split_heads(pr_ctx *ctx, pr_tensor *x, int64_t H);
pr_tensor *pr_merge_heads(pr_ctx *ctx, pr_tensor *x);
/* x with its dim `dim` (size 1) repeated n times (broadcast against ones) */
pr_tensor *pr_repeat_dim(pr_ctx *ctx, pr_tensor *x, int dim, int64_t n);
/* the recurrence options of a config (chunk size; per-token when T == 1) */
pr_recurrence_opts pr_config_recurrence(const pr_config *c, pr_rule rule, int64_t T, double scale);
/* the head sizes of the attention-like mixers: K = head_dim or d_model / n_heads */
int64_t pr_config_head_dim(const pr_config *c);
/* the value size per head V: gdn.expand_v * K for gdn and prism, else K */
int64_t pr_config_value_dim(const pr_config *c);
/* the attn mixer's layer with queries from xq, keys and values from xkv, causal,
 * no carried state (SASRec's blocks) */
pr_tensor *pr_attn_query_kv(pr_ctx *ctx, const void *layer, const pr_config *c, pr_tensor *xq, pr_tensor *xkv);
/* RoPE-half on x [B,T,H,K]: pairs (i, i + K/2) rotated by (start + t) * theta^(-2i/K) */
pr_tensor *pr_rope_half(pr_ctx *ctx, pr_tensor *x, int64_t start, double theta);
/* the four input projections q, k, v, g [D,HK] and the output projection
 * o [HK,D] of the test-time-training mixers (ttt_*, titans), registered
 * under those names in that order */
typedef struct { pr_tensor *q_proj, *k_proj, *v_proj, *g_proj, *o_proj; } pr_qkvgo;
void pr_qkvgo_build(pr_params *r, const pr_config *c, pr_qkvgo *p);
/* an init of N(0, init_std) */
pr_init pr_init_std(const pr_config *c);

/* ---- Gated DeltaNet base path, shared by gdn.c and prism.c ---------------------- */
typedef struct {
    pr_tensor *q_proj, *k_proj, *v_proj, *a_proj, *b_proj;  /* [D,HK] [D,HK] [D,HV] [D,H] [D,H]; V = value_dim */
    pr_tensor *q_conv, *k_conv, *v_conv;                     /* [HK,W] [HK,W] [HV,W] */
    pr_tensor *A_log, *dt_bias;                              /* [H] */
    pr_tensor *g_proj, *o_norm, *o_proj;                     /* [D,HV] or NULL, [V], [HV,D] */
} pr_gdn_base;
typedef struct { pr_tensor *q, *k, *v, *g, *beta; } pr_gdn_inputs;  /* q,k [B,T,H,K]; v [B,T,H,V]; g,beta [B,T,H] */
void pr_gdn_base_build(pr_params *r, const pr_config *c, pr_gdn_base *l, bool decay, bool gate);
/* slots 0..2 of st: the q, k, v conv windows */
pr_gdn_inputs pr_gdn_base_inputs(pr_ctx *ctx, const pr_gdn_base *l, const pr_config *c, pr_tensor *x,
                                 pr_layer_state *st);
/* y = concat_heads(norm(o) [* silu(x W_g)]) W_o */
pr_tensor *pr_gdn_base_output(pr_ctx *ctx, const pr_gdn_base *l, const pr_config *c, pr_tensor *x, pr_tensor *o);

/* ---- ATLAS's cost (models/atlas.c) ----------------------------------------------
 * Bytes (f32) the atlas layers of config c keep for the backward of one step on
 * B x T tokens: the per-token form stores a [B,H,F,V] memory (and Muon's
 * matrices) for every token, F = K + K^2 at degree 2. 0 for other mixers.
 * The benchmarks skip a size this puts far beyond a GPU's memory. */
double pr_atlas_step_bytes(const pr_config *c, int64_t B, int64_t T);
/* ---- HSTU's cost (models/hstu.c) -------------------------------------------------
 * Bytes (f32) the hstu layers of config c keep for the backward of one step on
 * B x T tokens through their [B,H,T,T] scores (the blocks as built: match_attn);
 * 0 for other mixers. */
double pr_hstu_step_bytes(const pr_config *c, int64_t B, int64_t T);
/* The larger of the two above for c's mixer (0 for the others): memory a step
 * keeps beyond what d_model says, known before anything is allocated. *why (may
 * be NULL): what keeps it and what to try, static text for a message such as
 * "skipped: ~N GiB for the backward, %s" */
double pr_mixer_big_step_bytes(const pr_config *c, int64_t B, int64_t T, const char **why);

/* ---- MoM's router balance (models/mom.c) ----------------------------------------
 * The model's loss functions point ctx->loss_aux at one of these while they run
 * the model; every MoM layer adds its router's probabilities and picks. As fla
 * (Switch Transformer's loss over every layer's tokens at once):
 *   aux = mom.aux_loss_scale * E * sum_e f_e P_e,  f_e = picks of memory e / tokens,
 *   P_e = mean router probability of e; only P carries gradient. */
typedef struct {
    int E;
    pr_tensor *prob_sum;    /* [E] sum of the router probabilities over every layer's tokens; NULL: no MoM layer ran */
    pr_tensor *count_sum;   /* [E] picks of each memory over every layer (no gradient; on the device with padded routing) */
    double tokens;          /* tokens routed, over every layer */
    double scale;           /* mom.aux_loss_scale */
} pr_router_stats;
pr_tensor *pr_router_aux_loss(pr_ctx *ctx, const pr_router_stats *rs);
/* whether MoM routes padded on dev (mom.route: auto takes padded on CUDA, packed on the CPU) */
bool pr_mom_routes_padded(const pr_config *c, pr_device dev);

/* ---- blocks and models (models/model.c) ---------------------------------------- */
typedef struct { pr_tensor *w, *b; } pr_norm_params;
typedef struct {
    pr_norm_params norm1, norm2;
    void *mixer;
    pr_tensor *w_up, *b_up, *w_gate, *w_down, *b_down;  /* MLP (SwiGLU: no biases; GELU: no gate) */
} pr_block;

typedef struct pr_model {
    pr_config cfg;
    const pr_mixer_def *mixer;
    pr_params *params;
    pr_block *blocks;
    pr_tensor *embed;       /* [vocab, D] (rec: [n_items+1, D], row 0 padding) */
    pr_norm_params norm_f;
    pr_tensor *lm_head;     /* [D, vocab], NULL when tied */
    pr_tensor *pos_embed;   /* [seq_len, D], block = sasrec only */
} pr_model;

typedef struct { int n; pr_layer_state *layer; } pr_model_state;

/* builds and registers every parameter (values: zeros; call pr_model_init) */
pr_model *pr_model_new(const pr_config *c, pr_dtype dt, pr_device dev);
/* the same registry with shapes and no data: what a config would allocate,
 * known before allocating it (pr_model_estimate). Not for running. */
pr_model *pr_model_shapes(const pr_config *c);

/* memory a training step of config c would hold, in bytes, estimated before
 * anything is allocated: f32 parameters, their grads, the optimizer's state
 * (optim_slots tensors per parameter: AdamW 2, SGD 1) and the activations,
 * saved tensors and logits of one step of `batch` sequences of seq_len, each
 * position scoring `scored` output rows (0: every row, vocab or rec items) */
typedef struct {
    int64_t params;              /* the count */
    double param_bytes, grad_bytes, optim_bytes, activation_bytes, data_bytes, total_bytes;
} pr_model_estimate;
void pr_model_estimate_step(const pr_config *c, int64_t batch, int64_t scored, int optim_slots,
                            pr_model_estimate *out);
/* bytes free for a run on dev: the host's MemAvailable, or the GPU's free memory */
double pr_device_free_bytes(pr_device dev);
/* "37.4 KB", "2.75 TB": bytes in decimal units, 3 digits; returns buf */
const char *pr_bytes_text(char *buf, size_t n, double bytes);
void pr_model_free(pr_model *m);
void pr_model_init(pr_model *m);                /* pr_params_init with cfg.seed */
pr_tensor *pr_model_norm(pr_ctx *ctx, const pr_model *m, const pr_norm_params *n, pr_tensor *x);
/* h + mixer(norm1(h)), then + mlp(norm2(.)) */
pr_tensor *pr_block_forward(pr_ctx *ctx, const pr_model *m, int i, pr_tensor *h, pr_layer_state *st);
/* ids [B,T] int32/int64 -> final-normed hidden [B,T,D]; st NULL or from pr_model_state_new */
pr_tensor *pr_model_hidden(pr_ctx *ctx, const pr_model *m, pr_tensor *ids, pr_model_state *st);
/* LM: logits [B,T,vocab]; loss: mean cross-entropy over targets != ignore_index */
pr_tensor *pr_lm_logits(pr_ctx *ctx, const pr_model *m, pr_tensor *ids, pr_model_state *st);
pr_tensor *pr_lm_loss(pr_ctx *ctx, const pr_model *m, pr_tensor *ids, pr_tensor *targets);
/* recommendation: scores of the last position against every item [B, n_items+1];
 * loss: cross-entropy against the next item `target` [B] */
pr_tensor *pr_rec_scores(pr_ctx *ctx, const pr_model *m, pr_tensor *items);
pr_tensor *pr_rec_loss(pr_ctx *ctx, const pr_model *m, pr_tensor *items, pr_tensor *target);
/* the same against sampled negatives [B, N] (item ids): mean BCE of the next
 * item's score against 1 plus mean BCE of the negatives' scores against 0 */
pr_tensor *pr_rec_loss_sampled(pr_ctx *ctx, const pr_model *m, pr_tensor *items, pr_tensor *target,
                               pr_tensor *negatives);
pr_model_state *pr_model_state_new(const pr_model *m);
/* copy every carried state tensor into arena a, so the step arena can be reset */
void pr_model_state_keep(pr_model_state *s, pr_arena *a);
void pr_model_state_free(pr_model_state *s);

/* ---- flash-linear-attention checkpoints (models/fla.c) ------------------------------
 * fla's Hugging Face layout (DIR/config.json + DIR/model.safetensors) for the
 * mixers gdn, deltanet, linattn, mamba2, attn. Tensors keep their dtype and
 * bytes (only layouts move), so import then export is the identity. */
/* DIR -> a prism checkpoint (names = paths) and config JSON; -1 with err naming
 * the file, key or tensor that does not fit */
int pr_fla_import(const char *dir, const char *out_ckpt, const char *out_config, pr_err *err);
/* a prism config JSON + checkpoint -> DIR (created if missing) */
int pr_fla_export(const char *config_file, const char *ckpt, const char *dir, pr_err *err);
/* the fla name of parameter `path` of `mixer` into out; returns the layout
 * (0 same, 1 linear transpose, 2 conv [C,W] <-> [C,1,W]) or -1 if it has none */
int pr_fla_name(const char *mixer, const char *path, char *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
