/* train/options.c: the training options, their key table (`train.<key>`),
 * the run config file ({"model": ..., "train": ...}), the task presets and
 * whether a run fits the device's memory. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "tasks/rec.h"
#include "tasks/tasks.h"
#include "train/train.h"

typedef enum { OPT_INT, OPT_FLOAT, OPT_BOOL, OPT_TEXT } opt_type;
typedef struct {
    const char *key;
    opt_type type;
    size_t offset, size;     /* size: text capacity */
    double lo, hi;           /* numbers: allowed range */
    const char *allowed;     /* text: choices "a|b", or NULL for any */
    const char *doc;
} opt_info;

#define NUM(k, ty, field, lo, hi, doc) {k, ty, offsetof(pr_train_opts, field), 0, lo, hi, NULL, doc}
#define TEXT(k, field, allowed, doc) \
    {k, OPT_TEXT, offsetof(pr_train_opts, field), sizeof(((pr_train_opts *)0)->field), 0, 0, allowed, doc}
static const opt_info opts_table[] = {
    TEXT("task", task, NULL, "parity, mqar, poly_recall, var_tracking, local_xor, mod_add, palindrome, "
                             "silence_gate, mux, lm (needs data) or rec"),
    TEXT("probe.style", probe_style, "paper|authors",
         "probes: paper (Algorithm 2 as written) or authors (their released script, which made Table 4)"),
    TEXT("data", data, NULL, "lm: the text file to model"),
    TEXT("rec.data", rec_data, NULL, "rec: synthetic (1000 users and items), synthetic:full (sized like Amazon "
                                     "Electronics), amazon2014:FILE (CSV user,item,rating,timestamp), "
                                     "amazon2018:FILE (CSV item,user,rating,timestamp), amazon-json:FILE (5-core "
                                     "reviews: reviewerID, asin, unixReviewTime), yelp:FILE (review.json) or "
                                     "amazon:FILE (one of the Amazon three, detected from the content; refused "
                                     "when it cannot be told)"),
    NUM("rec.negatives", OPT_INT, rec_negatives, 0, 1 << 20,
        "rec: 0 softmax over all items at every position; N: BCE against N sampled items at the last"),
    NUM("steps", OPT_INT, steps, 0, 1e12, "total optimizer steps (a resumed run stops here too)"),
    NUM("batch", OPT_INT, batch, 1, 1 << 20, "sequences per step"),
    NUM("seed", OPT_INT, seed, 0, 2147483647, "data order and dropout seed"),
    TEXT("optim", optim, "adamw|sgd", "optimizer"),
    NUM("lr", OPT_FLOAT, lr, 0, 1e6, "peak learning rate"),
    NUM("min_lr", OPT_FLOAT, min_lr, 0, 1e6, "cosine schedule: the rate at the last step"),
    TEXT("schedule", schedule, "cosine|constant", "after the warmup"),
    NUM("warmup", OPT_INT, warmup, 0, 1e12, "linear warmup steps"),
    NUM("weight_decay", OPT_FLOAT, weight_decay, 0, 1e3, "AdamW decoupled / SGD coupled decay"),
    NUM("decay_all", OPT_BOOL, decay_all, 0, 1, "decay norms, biases and embeddings too"),
    NUM("beta1", OPT_FLOAT, beta1, 0, 1, "AdamW first-moment decay"),
    NUM("beta2", OPT_FLOAT, beta2, 0, 1, "AdamW second-moment decay"),
    NUM("eps", OPT_FLOAT, eps, 0, 1, "AdamW epsilon"),
    NUM("momentum", OPT_FLOAT, momentum, 0, 1, "SGD momentum"),
    NUM("clip", OPT_FLOAT, clip, 0, 1e12, "global grad-norm clip; 0: none"),
    NUM("eval_every", OPT_INT, eval_every, 0, 1e12, "steps between evaluations; 0: at the end only"),
    NUM("eval_batches", OPT_INT, eval_batches, 1, 1e9, "batches per evaluation"),
    NUM("ckpt_every", OPT_INT, ckpt_every, 0, 1e12, "steps between checkpoints; 0: at the end only"),
    NUM("log_every", OPT_INT, log_every, 1, 1e12, "steps between metrics lines"),
    NUM("zero", OPT_INT, zero, 0, 1, "data-parallel: 1 shards the optimizer state over the ranks (ZeRO-1)"),
    NUM("bucket_mb", OPT_FLOAT, bucket_mb, 0, 1e6, "data-parallel: gradient MB per all-reduce bucket"),
    TEXT("precision", precision, "auto|f32|tf32|bf16",
         "auto: bf16 on CUDA (TF32 for the probe tasks, whose small models bf16 does not speed), f32 on the CPU. "
         "bf16: mixed precision (products and the activations between them "
         "in bf16; the residual stream, softmax, losses and states in f32; f32 weights and optimizer state); "
         "tf32: f32 with CUDA products on TF32 tensor cores "
         "(the CPU computes it as f32)"),
    TEXT("cuda_graph", cuda_graph, "auto|on|off",
         "CUDA: capture the training step into a CUDA graph after two eager steps and replay it (the same bits); "
         "auto (= on): a run that cannot be captured goes on eagerly and says "
         "why in its header; the CPU never captures"),
};
#define NOPTS ((int)(sizeof opts_table / sizeof opts_table[0]))

pr_train_opts pr_train_defaults(void)
{
    /* the paper's probe protocol: batch 32, AdamW lr 1e-3, wd 1e-4, clip 5 */
    pr_train_opts o = {.steps = 1000, .batch = 32, .seed = 1, .lr = 1e-3, .min_lr = 0, .weight_decay = 1e-4,
                       .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .momentum = 0.9, .clip = 5.0, .warmup = 0,
                       .eval_every = 0, .eval_batches = 8, .ckpt_every = 0, .log_every = 10,
                       .zero = 0, .bucket_mb = 25};
    snprintf(o.task, sizeof o.task, "parity");
    snprintf(o.probe_style, sizeof o.probe_style, "paper");
    snprintf(o.rec_data, sizeof o.rec_data, "synthetic");
    snprintf(o.optim, sizeof o.optim, "adamw");
    snprintf(o.schedule, sizeof o.schedule, "constant");
    snprintf(o.precision, sizeof o.precision, "auto");
    snprintf(o.cuda_graph, sizeof o.cuda_graph, "auto");
    return o;
}

pr_precision pr_train_precision(const pr_train_opts *o, pr_device dev)
{
    int p = pr_precision_from_name(o->precision);
    if (p >= 0) return (pr_precision)p;
    /* bf16 autocast on CUDA, as torch users run it; the CPU keeps f32 (its
     * bf16 is slow). The probes' models (D = 16 in the paper's protocol) are
     * launch-bound: bf16 there only adds casts, and TF32 ran their step in
     * 0.83-0.87 of bf16's time on an H100, so they take TF32 */
    if (dev != PR_CUDA) return PR_PREC_F32;
    return pr_task_family_of(o->task) == PR_TASK_PROBE ? PR_PREC_TF32 : PR_PREC_BF16;
}

bool pr_train_graph_plan(const pr_config *c, const pr_train_opts *o, pr_device dev, bool task_stages, char *note,
                         size_t n)
{
    const char *why = NULL;
    if (dev != PR_CUDA) why = "the CPU runs every step eagerly";
    else if (strcmp(o->cuda_graph, "off") == 0) why = "train.cuda_graph=off";
    else if (o->comm) why = "a data-parallel step all-reduces through NCCL during the backward";
    else if (!task_stages) why = "this task builds its batch inside the step";
    else if (c->dropout > 0) why = "dropout draws its masks from host seeds a graph would freeze";
    else if (strcmp(c->mixer, "mom") == 0 && !pr_mom_routes_padded(c, dev))
        why = "mom routes tokens with counts read on the host (mom.route=packed; padded routes on the device)";
    if (why) snprintf(n ? note : NULL, n, "off (%s)", why);
    else snprintf(n ? note : NULL, n, "on (captured after 2 eager steps, then replayed)");
    return why == NULL;
}

static const opt_info *find_opt(const char *key)
{
    if (strncmp(key, "train.", 6) == 0) key += 6;
    for (int i = 0; i < NOPTS; i++)
        if (strcmp(opts_table[i].key, key) == 0) return &opts_table[i];
    return NULL;
}

static bool choice_ok(const char *allowed, const char *v)
{
    size_t n = strlen(v);
    for (const char *s = allowed; s; s = strchr(s, '|') ? strchr(s, '|') + 1 : NULL)
        if (strncmp(s, v, n) == 0 && (s[n] == '|' || s[n] == '\0')) return true;
    return false;
}

static bool rec_data_ok(const char *v)
{
    pr_rec_format fmt;
    const char *file;
    return strcmp(v, "synthetic") == 0 || strcmp(v, "synthetic:full") == 0 || pr_rec_format_of(v, &fmt, &file) == 0;
}

static int set_value(pr_train_opts *o, const opt_info *k, const char *v, pr_err *err)
{
    char *field = (char *)o + k->offset;
    if (k->type == OPT_TEXT) {
        if (k->allowed && !choice_ok(k->allowed, v))
            return pr_errf(err, "train.%s: '%s' is not allowed (allowed: %s)", k->key, v, k->allowed);
        if (strlen(v) >= k->size) return pr_errf(err, "train.%s: '%s' is too long", k->key, v);
        if (k->offset == offsetof(pr_train_opts, rec_data) && !rec_data_ok(v))
            return pr_errf(err, "train.rec.data: '%s' is not %s", v, PR_REC_DATA_CHOICES);
        snprintf(field, k->size, "%s", v);
        return 0;
    }
    if (k->type == OPT_BOOL) {
        bool on = strcmp(v, "true") == 0 || strcmp(v, "on") == 0 || strcmp(v, "1") == 0;
        if (!on && strcmp(v, "false") && strcmp(v, "off") && strcmp(v, "0"))
            return pr_errf(err, "train.%s: '%s' is not a boolean (allowed: true, false)", k->key, v);
        *(bool *)field = on;
        return 0;
    }
    double d;   /* range-checked before any cast */
    if (!pr_config_number(v, &d) || d < k->lo || d > k->hi || (k->type == OPT_INT && d != floor(d)))
        return pr_errf(err, "train.%s: '%s' is not %s in [%g, %g]", k->key, v,
                       k->type == OPT_INT ? "an integer" : "a number", k->lo, k->hi);
    if (k->type == OPT_FLOAT) *(double *)field = d;
    else if (k->offset == offsetof(pr_train_opts, batch)) *(int *)field = (int)d;
    else *(int64_t *)field = (int64_t)d;
    return 0;
}

bool pr_train_is_key(const char *kv)
{
    return strncmp(kv, "train.", 6) == 0 || strncmp(kv, "rec.data=", 9) == 0 || strncmp(kv, "rec.negatives=", 14) == 0 ||
           strncmp(kv, "probe.style=", 12) == 0;
}

int pr_train_set(pr_train_opts *o, const char *key_value, pr_err *err)
{
    const char *eq = strchr(key_value, '=');
    if (!eq) return pr_errf(err, "'%s' is not key=value", key_value);
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)(eq - key_value < 63 ? eq - key_value : 63), key_value);
    const opt_info *k = find_opt(key);
    if (!k) return pr_errf(err, "unknown training key '%s' (prism train --help lists them)", key);
    return set_value(o, k, eq + 1, err);
}

int pr_train_apply_json_obj(pr_train_opts *o, const void *obj, const char *what, pr_err *err)
{
    for (const cJSON *it = ((const cJSON *)obj)->child; it; it = it->next) {
        const opt_info *k = find_opt(it->string);
        if (!k) return pr_errf(err, "%s: unknown training key 'train.%s'", what, it->string);
        char text[1100];
        if (cJSON_IsBool(it)) snprintf(text, sizeof text, "%s", cJSON_IsTrue(it) ? "true" : "false");
        else if (cJSON_IsString(it) && k->type == OPT_TEXT) snprintf(text, sizeof text, "%s", it->valuestring);
        else if (cJSON_IsNumber(it) && k->type != OPT_TEXT) snprintf(text, sizeof text, "%.17g", it->valuedouble);
        else return pr_errf(err, "%s: 'train.%s' has the wrong JSON type", what, it->string);
        if (set_value(o, k, text, err)) {
            char inner[sizeof err->msg];   /* err->msg is also the output: copy it first */
            snprintf(inner, sizeof inner, "%s", err->msg);
            return pr_errf(err, "%s: %s", what, inner);
        }
    }
    return 0;
}

void pr_train_print_help(FILE *f)
{
    pr_train_opts d = pr_train_defaults();
    for (int i = 0; i < NOPTS; i++) {
        const opt_info *k = &opts_table[i];
        const char *field = (const char *)&d + k->offset;
        char def[64];
        if (k->type == OPT_TEXT) snprintf(def, sizeof def, "%s", *field ? field : "-");
        else if (k->type == OPT_BOOL) snprintf(def, sizeof def, "%s", *(const bool *)field ? "true" : "false");
        else if (k->type == OPT_FLOAT) snprintf(def, sizeof def, "%g", *(const double *)field);
        else if (k->offset == offsetof(pr_train_opts, batch)) snprintf(def, sizeof def, "%d", *(const int *)field);
        else snprintf(def, sizeof def, "%lld", (long long)*(const int64_t *)field);
        fprintf(f, "  train.%-14s %-10s %s%s%s%s\n", k->key, def, k->doc, k->allowed ? " (" : "",
                k->allowed ? k->allowed : "", k->allowed ? ")" : "");
    }
}

static cJSON *train_json(const pr_train_opts *o)
{
    cJSON *t = cJSON_CreateObject();
    for (int i = 0; i < NOPTS; i++) {
        const opt_info *k = &opts_table[i];
        const char *field = (const char *)o + k->offset;
        if (k->type == OPT_TEXT) cJSON_AddStringToObject(t, k->key, field);
        else if (k->type == OPT_BOOL) cJSON_AddBoolToObject(t, k->key, *(const bool *)field);
        else if (k->type == OPT_FLOAT) cJSON_AddNumberToObject(t, k->key, *(const double *)field);
        else if (k->offset == offsetof(pr_train_opts, batch)) cJSON_AddNumberToObject(t, k->key, *(const int *)field);
        else cJSON_AddNumberToObject(t, k->key, (double)*(const int64_t *)field);
    }
    return t;
}

char *pr_run_config_json(const pr_config *c, const pr_train_opts *o)
{
    char *model = pr_config_to_json(c);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "model", cJSON_Parse(model));
    cJSON_AddItemToObject(root, "train", train_json(o));
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    free(model);
    return s;
}

int pr_run_config_apply(pr_config *c, pr_train_opts *o, const char *json, const char *what, pr_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, false);
    if (!root) return pr_errf(err, "%s: malformed JSON at byte %lld", what, end ? (long long)(end - json) : -1LL);
    int rc = 0;
    end += strspn(end, " \t\r\n");
    if (*end) rc = pr_errf(err, "%s: malformed JSON: text after the object at byte %lld ('%.20s')", what,
                           (long long)(end - json), end);
    else if (!cJSON_IsObject(root)) rc = pr_errf(err, "%s: the config must be a JSON object", what);
    cJSON *train = rc ? NULL : cJSON_DetachItemFromObject(root, "train");
    cJSON *model = rc ? NULL : cJSON_DetachItemFromObject(root, "model");
    if (train && !cJSON_IsObject(train)) rc = pr_errf(err, "%s: 'train' must be an object", what);
    if (model && !cJSON_IsObject(model)) rc = pr_errf(err, "%s: 'model' must be an object", what);
    if (!rc && train) rc = pr_train_apply_json_obj(o, train, what, err);
    cJSON *parts[2] = {model, root};   /* the "model" object, then any flat keys left beside it */
    for (int i = 0; i < 2 && !rc; i++) {
        if (!parts[i]) continue;
        char *text = cJSON_PrintUnformatted(parts[i]);
        rc = pr_config_apply_json(c, text, what, err);
        free(text);
    }
    cJSON_Delete(train);
    cJSON_Delete(model);
    cJSON_Delete(root);
    return rc;
}

int pr_run_config_load(pr_config *c, pr_train_opts *o, const char *path, pr_err *err)
{
    char *buf = pr_read_text(path, err);
    if (!buf) return -1;
    int rc = pr_run_config_apply(c, o, buf, path, err);
    free(buf);
    return rc;
}

pr_task_family pr_task_family_of(const char *task)
{
    if (strcmp(task, "lm") == 0) return PR_TASK_LM;
    if (strcmp(task, "rec") == 0) return PR_TASK_REC;
    return pr_probe_by_name(task) >= 0 ? PR_TASK_PROBE : PR_TASK_UNKNOWN;
}

bool pr_task_known(const char *task) { return pr_task_family_of(task) != PR_TASK_UNKNOWN; }

/* Probes: the `probe` preset (the paper's protocol: D 16, 2 blocks, GELU MLP)
 * with what makes a run finish in minutes on two CPU cores: sequences of 64
 * tokens rather than 128 (the memory tasks' length in the protocol, where
 * they are 128 wide) and PROBE_STEPS steps rather than 10k, at lr 3e-3. The
 * 16-wide models start from N(0, 0.2): from 0.02, the products a parity has
 * to form are so small at init that training sat at chance for thousands of
 * steps. At 64 tokens PRISM learns parity and linear attention does not; at
 * 16 or 32 both do. The protocol's sizes are one --set away. */
enum { PROBE_SEQ_LEN = 64, PROBE_STEPS = 1500 };
/* rec: the rec-small preset on the small synthetic set; about 20 epochs of its users */
enum { REC_STEPS = 600 };

int pr_task_preset(pr_config *c, pr_train_opts *o, const char *task, pr_err *err)
{
    if (!pr_task_known(task))
        return pr_errf(err, "unknown task '%s' (allowed: %s, %s, %s, %s, %s, %s, %s, %s, %s, lm, rec)", task,
                       pr_probe_names[0], pr_probe_names[1], pr_probe_names[2], pr_probe_names[3], pr_probe_names[4],
                       pr_probe_names[5], pr_probe_names[6], pr_probe_names[7], pr_probe_names[8]);
    pr_task_family family = pr_task_family_of(task);
    if (family == PR_TASK_LM) return pr_config_apply_json(c, "{\"vocab\": 256}", "task lm", err);
    if (family == PR_TASK_REC) {
        if (pr_config_preset(c, "rec-small", err)) return -1;
        c->rec_n_items = 0;   /* from the data (pr_task_fit_config) unless set */
        o->steps = REC_STEPS;
        return 0;
    }
    bool memory = pr_probe_by_name(task) <= PR_PROBE_VAR_TRACKING;
    char quick[96];
    if (memory) snprintf(quick, sizeof quick, "{\"seq_len\": %d, \"d_model\": 128}", PROBE_SEQ_LEN);
    else snprintf(quick, sizeof quick, "{\"seq_len\": %d, \"init_std\": 0.2}", PROBE_SEQ_LEN);
    if (pr_config_preset(c, "probe", err) || pr_config_apply_json(c, quick, task, err)) return -1;
    o->steps = PROBE_STEPS;
    o->lr = 3e-3;
    return 0;
}

int pr_train_set_model(pr_config *c, const char *task, const char *model, pr_err *err)
{
    if (strcmp(model, "sasrec")) {
        char kv[96];
        snprintf(kv, sizeof kv, "mixer=%s", model);
        return pr_config_set(c, kv, err);
    }
    int seq_len = c->seq_len;   /* the task's length, not the preset's 200 */
    if (pr_task_family_of(task) != PR_TASK_REC) return pr_errf(err, "--model sasrec: a rec model; give --task rec");
    if (pr_config_preset(c, "sasrec", err)) return -1;
    c->seq_len = seq_len;
    return 0;
}

/* The two probe protocols of the paper's Table 4 (docs/TUTORIAL.md compares
 * them): 10k steps of AdamW at lr 1e-3, wd 1e-4, clip 5, batch
 * 32, scored on 8000 fresh samples (250 batches of 32). `probe`: the
 * paper's Algorithm 2 at its sizes. `probe-authors`: the authors' script,
 * whose memory tasks (mqar, poly_recall, var_tracking) run at seq_len 64
 * and D 128 and the others at 128 and D 16. At D 16 the weights start from
 * N(0, 0.2), as in the quick preset above; at D 128 from the default 0.02. */
enum { PROTOCOL_STEPS = 10000, PROTOCOL_EVAL_SAMPLES = 8000, PROTOCOL_BATCH = 32 };

static int probe_protocol(pr_config *c, pr_train_opts *o, const char *task, bool authors, pr_err *err)
{
    o->steps = PROTOCOL_STEPS;
    o->batch = PROTOCOL_BATCH;
    o->eval_batches = PROTOCOL_EVAL_SAMPLES / PROTOCOL_BATCH;
    o->lr = 1e-3, o->weight_decay = 1e-4, o->clip = 5, o->warmup = 0;
    snprintf(o->optim, sizeof o->optim, "adamw");
    snprintf(o->schedule, sizeof o->schedule, "constant");
    snprintf(o->probe_style, sizeof o->probe_style, "%s", authors ? "authors" : "paper");
    bool memory = pr_probe_by_name(task) <= PR_PROBE_VAR_TRACKING;
    const char *sizes = authors && memory ? "{\"d_model\": 128, \"seq_len\": 64, \"init_std\": 0.02}"
                                          : "{\"init_std\": 0.2}";
    return pr_config_apply_json(c, sizes, task, err);
}

int pr_task_preset_as(pr_config *c, pr_train_opts *o, const char *task, const char *preset, pr_err *err)
{
    if (!preset || !pr_task_known(task)) return pr_task_preset(c, o, task, err);   /* its message names the tasks */
    bool probe_task = pr_task_family_of(task) == PR_TASK_PROBE;
    bool protocol = strcmp(preset, "probe") == 0 || strcmp(preset, "probe-authors") == 0;
    if (protocol && !probe_task)
        return pr_errf(err, "preset %s: the probes' protocol; task %s is not a probe", preset, task);
    if (!probe_task && pr_task_preset(c, o, task, err)) return -1;   /* lm, rec: their data's needs first */
    if (pr_config_preset(c, preset, err)) return -1;
    return protocol ? probe_protocol(c, o, task, strcmp(preset, "probe-authors") == 0, err) : 0;
}

int pr_train_fits(const pr_config *c, const pr_train_opts *o, pr_device dev, pr_err *err)
{
    pr_model_estimate e;
    int slots = strcmp(o->optim, "sgd") == 0 ? (o->momentum != 0) : 2;
    /* rec with sampled negatives scores 1 + negatives items a position, not every item */
    int64_t scored = pr_task_family_of(o->task) == PR_TASK_REC && o->rec_negatives > 0 ? o->rec_negatives + 1 : 0;
    pr_model_estimate_step(c, o->batch, scored, slots, &e);
    struct stat st;
    if (pr_task_family_of(o->task) == PR_TASK_LM && o->data[0] && stat(o->data, &st) == 0 && S_ISREG(st.st_mode))
        e.data_bytes = (double)st.st_size, e.total_bytes += e.data_bytes;   /* the text is read whole */
    double have = pr_device_free_bytes(dev);
    if (e.total_bytes <= have) return 0;
    char t[32], h[32], p[32], g[32], s[32], a[32], d[32];
    return pr_errf(err, "this config needs about %s for a training step, more than the %s %s: %lld parameters %s, "
                        "their grads %s, optimizer state %s, activations %s (train.batch %d x seq_len %d), data %s; "
                        "make d_model, n_layers, seq_len or train.batch smaller",
                   pr_bytes_text(t, sizeof t, e.total_bytes), pr_bytes_text(h, sizeof h, have),
                   dev == PR_CUDA ? "free on the GPU" : "the host has available", (long long)e.params,
                   pr_bytes_text(p, sizeof p, e.param_bytes), pr_bytes_text(g, sizeof g, e.grad_bytes),
                   pr_bytes_text(s, sizeof s, e.optim_bytes), pr_bytes_text(a, sizeof a, e.activation_bytes),
                   o->batch, c->seq_len, pr_bytes_text(d, sizeof d, e.data_bytes));
}

pr_optim_opts pr_train_optim_opts(const pr_train_opts *o)
{
    return (pr_optim_opts){.kind = strcmp(o->optim, "sgd") == 0 ? PR_OPTIM_SGD : PR_OPTIM_ADAMW,
                           .weight_decay = o->weight_decay, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                           .momentum = o->momentum, .decay_all = o->decay_all};
}
