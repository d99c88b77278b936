/* lab/grid.c: experiment grids (lab/lab.h): the built-in grids, written
 * in the grid file format and read by the same parser as a user's file; the
 * checks that name the key that is wrong; mean and standard deviation over
 * seeds; the results as Markdown, CSV and JSON. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "models/models.h"
#include "lab/lab.h"
#include "train/train.h"

#define ALL_MIXERS "\"prism\",\"gdn\",\"mamba2\",\"deltanet\",\"linattn\",\"ttt_linear\",\"ttt_mlp\",\"titans\"," \
                   "\"attn\",\"mamba\",\"mom\",\"hstu\",\"gla\",\"gsa\",\"atlas\""
#define ALL_PROBES "\"mqar\",\"poly_recall\",\"var_tracking\",\"local_xor\",\"parity\",\"mod_add\",\"palindrome\"," \
                   "\"silence_gate\",\"mux\""

/* the paper's ablations (its Table 3), all in form paper, named by the switch
 * that makes them; L=0 (the Gated DeltaNet layer) and form augmented beside */
#define PRISM_VARIANT(name, ref, sets) \
    "{\"name\":\"" name "\",\"ref\":\"" ref "\",\"set\":{\"mixer\":\"prism\"" sets "}}"
#define PRISM_ABLATIONS                                                                            \
    PRISM_VARIANT("prism", "full", ",\"prism.form\":\"paper\"") ","                                  \
    PRISM_VARIANT("prism L=1", "no refinement", ",\"prism.form\":\"paper\",\"prism.L\":1") ","       \
    PRISM_VARIANT("prism gelu=off", "no GELU", ",\"prism.form\":\"paper\",\"prism.gelu\":false") ","   \
    PRISM_VARIANT("prism shortconv=off", "no ShortConv", ",\"prism.form\":\"paper\",\"prism.shortconv\":false") "," \
    PRISM_VARIANT("prism gain=off", "no gain", ",\"prism.form\":\"paper\",\"prism.gain\":false") ","  \
    PRISM_VARIANT("prism L=0", "", ",\"prism.form\":\"paper\",\"prism.L\":0") ","                    \
    PRISM_VARIANT("prism form=augmented", "", ",\"prism.form\":\"augmented\"")

/* the paper's Table 3 (Amazon Electronics): Hit@200, Hit@500 and AUC a row */
#define T3_ROW(row, h200, h500, auc) \
    {row, "rec", h200, "test_hit@200"}, {row, "rec", h500, "test_hit@500"}, {row, "rec", auc, "test_auc"}
static const pr_grid_ref table3_values[] = {
    T3_ROW("full", .1409, .2613, .7134),         T3_ROW("no refinement", .1155, .2374, .6805),
    T3_ROW("no GELU", .1316, .2477, .7047),      T3_ROW("no ShortConv", .1406, .2584, .7076),
    T3_ROW("no gain", .1383, .2406, .7098),
};
static const pr_grid_refs table3_refs = {"paper", "the paper's Table 3 (arXiv 2602.10796 v2), on Amazon Electronics, "
                                                  "not our synthetic set: compare orderings, not values",
                                         "test_hit@200", (int)(sizeof table3_values / sizeof table3_values[0]),
                                         table3_values};

/* The paper's Table 4 protocol in both probe styles: each model twice, with
 * the `probe` preset (the paper's Algorithm 2) and `probe-authors` (the
 * authors' script, which produced the table; there every baseline has a
 * depthwise causal conv before its mixer: width 3 for the Transformer, 5
 * for the others, so attn and linattn run with theirs, and PRISM's anchor
 * conv, the same layer in their PRISM, is 5 wide: with 4 it misses a of
 * palindrome's [a, b, c, d, VAL]). A model is one
 * line: T4_MODEL(name, its row of the paper's table or "", its model keys
 * under the paper's style, under the authors'). */
#define T4_VARIANT(label, style, preset, ref, sets) \
    "{\"name\":\"" label " " style "\",\"preset\":\"" preset "\",\"ref\":\"" ref "\",\"set\":{" sets "}}"
#define T4_MODEL(label, ref, paper_sets, authors_sets) \
    T4_VARIANT(label, "paper-style", "probe", ref, paper_sets) "," \
    T4_VARIANT(label, "authors-style", "probe-authors", ref, authors_sets)
/* the authors' LA: elu+1 on q and k where fla's LinearAttention (ours) multiplies two
 * linear maps, a quadratic feature that lets one seed in three learn parity at the
 * protocol (docs/results/table4-h100.md) */
#define LINATTN_AUTHORS "\"mixer\":\"linattn\",\"linattn.shortconv\":5,\"linattn.feature_map\":\"elu\""
#define PRISM_FORM(form) "\"mixer\":\"prism\",\"prism.form\":\"" form "\""
#define PRISM_AUTHORS(form) PRISM_FORM(form) ",\"prism.conv_width\":5"
#define TABLE4_MODELS                                                                                    \
    T4_MODEL("attn", "Transformer", "\"mixer\":\"attn\"", "\"mixer\":\"attn\",\"attn.shortconv\":3") ","        \
    T4_MODEL("linattn", "LA", "\"mixer\":\"linattn\"", LINATTN_AUTHORS) ","                                 \
    T4_MODEL("mom", "MoM", "\"mixer\":\"mom\"", "\"mixer\":\"mom\"") ","                                   \
    T4_MODEL("prism", "PRISM", PRISM_FORM("paper"), PRISM_AUTHORS("paper")) ","                        \
    T4_MODEL("gdn", "", "\"mixer\":\"gdn\"", "\"mixer\":\"gdn\"") ","                                      \
    T4_MODEL("prism-augmented", "", PRISM_FORM("augmented"), PRISM_AUTHORS("augmented"))

/* the paper's Table 4 (arXiv 2602.10796 v2), a row per model, in ALL_PROBES' order */
#define T4_ROW(row, mqar, poly, var, xor, parity, mod_add, pal, gate, mux)                                   \
    {row, "mqar", mqar, NULL}, {row, "poly_recall", poly, NULL}, {row, "var_tracking", var, NULL},             \
    {row, "local_xor", xor, NULL}, {row, "parity", parity, NULL}, {row, "mod_add", mod_add, NULL},             \
    {row, "palindrome", pal, NULL}, {row, "silence_gate", gate, NULL}, {row, "mux", mux, NULL}
static const pr_grid_ref table4_values[] = {
    T4_ROW("Transformer", .98, 1.00, .40, 1.00, 1.00, .23, .49, .82, .98),
    T4_ROW("LA", .98, 1.00, .34, .50, .49, .07, .49, .51, .98),
    T4_ROW("MoM", .98, 1.00, .35, .49, .50, .06, .50, .50, .97),
    T4_ROW("PRISM", .98, 1.00, .37, 1.00, 1.00, .50, .99, .66, .98),
};
static const pr_grid_refs table4_refs = {"paper", "the paper's Table 4 (arXiv 2602.10796 v2), made by the authors' "
                                                  "probe script", "acc",
                                         (int)(sizeof table4_values / sizeof table4_values[0]), table4_values};

/* a built-in grid: its axes in the grid file format, a line for --help on
 * what it is for (the axes themselves are described from the parsed grid),
 * and its reference figures (NULL: none) */
typedef struct {
    const char *name, *json, *purpose;
    const pr_grid_refs *refs;
} builtin_grid;

/* the paper's tables at the probe protocol of `prism train`; `quick` is sized
 * to finish in minutes on two CPU cores */
static const builtin_grid builtins[] = {
    {"probe", "{\"models\":[" ALL_MIXERS "],\"tasks\":[" ALL_PROBES "],\"seeds\":3}",
     "the paper's Table 4, extended to every mixer", NULL},
    {"prism-ablation", "{\"variants\":[" PRISM_ABLATIONS "],\"tasks\":[\"parity\",\"local_xor\",\"rec\"],\"seeds\":3}",
     "the paper's ablations (Table 3) in form paper: full (L=2), L=1 (w/o iterative refinement), gelu=off "
     "(w/o non-linearity), shortconv=off (w/o ShortConv anchor), gain=off (w/o gain predictor); L=0 (Gated "
     "DeltaNet) and form=augmented beside them", NULL},
    {"table3", "{\"variants\":[" PRISM_ABLATIONS "],\"tasks\":[\"rec\"],\"seeds\":3}",
     "the paper's Table 3 (rec): the prism-ablation variants on the rec task; tabulate test_hit@200, "
     "test_hit@500 and test_auc with --metric (the paper's figures beside them)", &table3_refs},
    /* every mixer in the rec model, and SASRec (the `sasrec` preset, at the task's length) */
    {"rec", "{\"models\":[" ALL_MIXERS "],\"variants\":[{\"name\":\"sasrec\",\"set\":{\"mixer\":\"attn\","
            "\"block\":\"sasrec\",\"d_model\":50,\"n_layers\":2,\"n_heads\":1,\"norm\":\"layernorm\","
            "\"norm_eps\":1e-8,\"mlp\":\"relu\",\"mlp_mult\":1,\"dropout\":0.2,\"attn.rope\":false,"
            "\"attn.bias\":true}}],\"tasks\":[\"rec\"],\"seeds\":3}",
     "the paper's Table 2 columns that apply", NULL},
    /* the paper's claim in one table: rank-1 linear attention stays at chance on
     * parity, PRISM solves it (the probe defaults of `prism train`: 64 tokens, at
     * which a bag of tokens cannot count the bits; 1000 steps) */
    {"quick", "{\"models\":[\"prism\",\"linattn\"],\"tasks\":[\"parity\"],\"seeds\":2,\"steps\":1000}",
     "the paper's claim in one table, in minutes on two CPU cores", NULL},
    {"table4", "{\"variants\":[" TABLE4_MODELS "],\"tasks\":[" ALL_PROBES "],\"seeds\":3}",
     "the paper's Table 4 at its protocol (10k steps, 8000 test samples) in both probe styles (paper: "
     "Algorithm 2; authors: their script, baselines with a conv before the mixer, LA with elu+1), the paper's "
     "numbers beside",
     &table4_refs},
};
#define N_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))
const char *const pr_grid_builtins[] = {"probe", "prism-ablation", "table3", "rec", "quick", "table4", NULL};

/* a JSON scalar as the text `key=value` wants */
static int scalar_text(const cJSON *it, char *out, size_t n)
{
    if (cJSON_IsBool(it)) snprintf(out, n, "%s", cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsNumber(it)) snprintf(out, n, "%.17g", it->valuedouble);
    else if (cJSON_IsString(it)) snprintf(out, n, "%s", it->valuestring);
    else return -1;
    return 0;
}

const char *pr_grid_quality_metric(const char *task)
{
    pr_task_family family = pr_task_family_of(task);
    return family == PR_TASK_LM ? "bpb" : family == PR_TASK_REC ? "test_ndcg@10" : "acc";
}

int pr_grid_set(pr_config *c, pr_train_opts *o, const char *kv, pr_err *err)
{
    /* as prism train reads them: rec.data, rec.negatives and probe.style are training keys */
    return pr_train_is_key(kv) ? pr_train_set(o, kv, err) : pr_config_set(c, kv, err);
}

/* one key=value on a scratch config and options: a bad key fails at parse time */
static int check_set(const char *kv, pr_err *err)
{
    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    return pr_grid_set(&c, &o, kv, err);
}

/* a `set` object into v; `where` names it in messages ("variants[2].set") */
static int parse_sets(pr_grid_variant *v, const cJSON *set, const char *what, const char *where, pr_err *err)
{
    if (!cJSON_IsObject(set)) return pr_errf(err, "%s: '%s' must be an object of key: value", what, where);
    for (const cJSON *it = set->child; it; it = it->next) {
        char value[64];
        if (v->n_sets == PR_GRID_MAX_SETS)
            return pr_errf(err, "%s: '%s' has more than %d keys", what, where, PR_GRID_MAX_SETS);
        if (scalar_text(it, value, sizeof value))
            return pr_errf(err, "%s: '%s.%s' must be a number, a string or a boolean", what, where, it->string);
        char *kv = v->set[v->n_sets++];
        if (snprintf(kv, sizeof v->set[0], "%s=%s", it->string, value) >= (int)sizeof v->set[0])
            return pr_errf(err, "%s: '%s.%s' is too long", what, where, it->string);
        if (check_set(kv, err)) return pr_errf(err, "%s: '%s': %s", what, where, err->msg);
    }
    return 0;
}

static pr_grid_variant *new_variant(pr_grid *g, const char *name, const char *what, pr_err *err)
{
    if (g->n_variants == PR_GRID_MAX_VARIANTS) {
        pr_errf(err, "%s: more than %d models and variants", what, PR_GRID_MAX_VARIANTS);
        return NULL;
    }
    for (int i = 0; i < g->n_variants; i++)
        if (strcmp(g->variant[i].name, name) == 0) {
            pr_errf(err, "%s: the variant name '%s' is used twice", what, name);
            return NULL;
        }
    pr_grid_variant *v = &g->variant[g->n_variants++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    return v;
}

static int parse_models(pr_grid *g, const cJSON *models, const char *what, pr_err *err)
{
    if (!cJSON_IsArray(models)) return pr_errf(err, "%s: 'models' must be an array of mixer names", what);
    int i = 0;
    for (const cJSON *it = models->child; it; it = it->next, i++) {
        if (!cJSON_IsString(it) || !pr_mixer_by_name(it->valuestring))
            return pr_errf(err, "%s: 'models[%d]' is not a mixer (prism model --help lists them)", what, i);
        pr_grid_variant *v = new_variant(g, it->valuestring, what, err);
        if (!v) return -1;
        snprintf(v->set[v->n_sets++], sizeof v->set[0], "mixer=%s", it->valuestring);
    }
    return 0;
}

/* a variant's preset: a model preset's name, checked on a scratch config */
static int parse_preset(pr_grid_variant *v, const cJSON *preset, const char *what, const char *where, pr_err *err)
{
    if (!preset) return 0;
    pr_config c = pr_config_default();
    if (!cJSON_IsString(preset) || strlen(preset->valuestring) >= sizeof v->preset ||
        pr_config_preset(&c, preset->valuestring, err))
        return pr_errf(err, "%s: '%s.preset' must name a preset (prism model --help lists them)", what, where);
    snprintf(v->preset, sizeof v->preset, "%s", preset->valuestring);
    return 0;
}

static int parse_variants(pr_grid *g, const cJSON *variants, const char *what, pr_err *err)
{
    if (!cJSON_IsArray(variants)) return pr_errf(err, "%s: 'variants' must be an array of {name, set}", what);
    int i = 0;
    for (const cJSON *it = variants->child; it; it = it->next, i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *set = cJSON_GetObjectItemCaseSensitive(it, "set");
        char where[48];
        snprintf(where, sizeof where, "variants[%d]", i);
        if (!cJSON_IsObject(it) || !cJSON_IsString(name) || !name->valuestring[0] ||
            strlen(name->valuestring) >= sizeof g->variant[0].name)
            return pr_errf(err, "%s: '%s.name' must be a string of 1 to 47 characters", what, where);
        for (const cJSON *k = it->child; k; k = k->next)
            if (strcmp(k->string, "name") && strcmp(k->string, "set") && strcmp(k->string, "preset") &&
                strcmp(k->string, "ref"))
                return pr_errf(err, "%s: unknown key '%s.%s' (a variant has name, preset, ref and set)", what,
                               where, k->string);
        pr_grid_variant *v = new_variant(g, name->valuestring, what, err);
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(it, "ref");
        if (v && ref && (!cJSON_IsString(ref) || strlen(ref->valuestring) >= sizeof v->ref))
            return pr_errf(err, "%s: '%s.ref' must be a string of at most 23 characters", what, where);
        if (v && ref) snprintf(v->ref, sizeof v->ref, "%s", ref->valuestring);
        if (v && parse_preset(v, cJSON_GetObjectItemCaseSensitive(it, "preset"), what, where, err)) return -1;
        snprintf(where + strlen(where), sizeof where - strlen(where), ".set");
        if (!v || (set && parse_sets(v, set, what, where, err))) return -1;
    }
    return 0;
}

static int parse_tasks(pr_grid *g, const cJSON *tasks, const char *what, pr_err *err)
{
    if (!cJSON_IsArray(tasks)) return pr_errf(err, "%s: 'tasks' must be an array of task names", what);
    for (const cJSON *it = tasks->child; it; it = it->next) {
        int i = g->n_tasks;
        if (i == PR_GRID_MAX_TASKS) return pr_errf(err, "%s: more than %d tasks", what, PR_GRID_MAX_TASKS);
        if (!cJSON_IsString(it) || !pr_task_known(it->valuestring))
            return pr_errf(err, "%s: 'tasks[%d]' is not a task (prism train --help lists them)", what, i);
        snprintf(g->task[g->n_tasks++], sizeof g->task[0], "%s", it->valuestring);
    }
    return 0;
}

/* an integer key in [lo, hi] */
static int parse_count(const cJSON *it, const char *key, double lo, double hi, const char *what, int64_t *out,
                       pr_err *err)
{
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < lo ||
        it->valuedouble > hi)
        return pr_errf(err, "%s: '%s' must be an integer from %g to %g", what, key, lo, hi);
    *out = (int64_t)it->valuedouble;
    return 0;
}

static int parse_key(pr_grid *g, const cJSON *it, const char *what, pr_err *err)
{
    const char *k = it->string;
    int64_t n = 0;   /* set by parse_count on success (gcc 13 cannot see it) */
    if (strcmp(k, "name") == 0) {
        if (!cJSON_IsString(it) || strlen(it->valuestring) >= sizeof g->name)
            return pr_errf(err, "%s: 'name' must be a string of at most 47 characters", what);
        snprintf(g->name, sizeof g->name, "%s", it->valuestring);
        return 0;
    }
    if (strcmp(k, "models") == 0) return parse_models(g, it, what, err);
    if (strcmp(k, "variants") == 0) return parse_variants(g, it, what, err);
    if (strcmp(k, "tasks") == 0) return parse_tasks(g, it, what, err);
    if (strcmp(k, "set") == 0) return parse_sets(&g->common, it, what, "set", err);
    if (strcmp(k, "seeds") == 0) {
        if (parse_count(it, k, 1, PR_GRID_MAX_SEEDS, what, &n, err)) return -1;
        g->seeds = (int)n;
        return 0;
    }
    if (strcmp(k, "steps") == 0) return parse_count(it, k, 0, 2e9, what, &g->steps, err);
    return pr_errf(err, "%s: unknown key '%s' (a grid has name, models, variants, tasks, seeds, steps, set)", what, k);
}

void pr_grid_folder(char *out, size_t n, const char *variant)
{
    snprintf(out, n, "%s", variant);
    for (char *p = out; *p; p++)
        if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') && !(*p >= '0' && *p <= '9') && *p != '_' &&
            *p != '-')
            *p = '-';
}

/* two variants whose folders differ only in case are refused too: they
 * would share a run directory on a case-insensitive file system */
static int check_folders(const pr_grid *g, const char *what, pr_err *err)
{
    for (int i = 0; i < g->n_variants; i++)
        for (int j = 0; j < i; j++) {
            char a[sizeof g->variant[0].name], b[sizeof a];
            pr_grid_folder(a, sizeof a, g->variant[j].name);
            pr_grid_folder(b, sizeof b, g->variant[i].name);
            if (strcasecmp(a, b) == 0)
                return pr_errf(err, "%s: the variants '%s' and '%s' would share the run folder '%s' (rename one)",
                               what, g->variant[j].name, g->variant[i].name, a);
        }
    return 0;
}

int pr_grid_parse(pr_grid *g, const char *json, const char *what, pr_err *err)
{
    memset(g, 0, sizeof *g);
    g->seeds = 1;
    cJSON *root = cJSON_Parse(json);
    if (!root) return pr_errf(err, "%s: malformed JSON", what);
    int rc = cJSON_IsObject(root) ? 0 : pr_errf(err, "%s: a grid must be a JSON object", what);
    for (const cJSON *it = root->child; it && !rc; it = it->next) rc = parse_key(g, it, what, err);
    cJSON_Delete(root);
    if (rc) return -1;
    if (!g->n_variants) return pr_errf(err, "%s: the grid names no 'models' and no 'variants'", what);
    if (!g->n_tasks) return pr_errf(err, "%s: the grid names no 'tasks'", what);
    return check_folders(g, what, err);
}

int pr_grid_load(pr_grid *g, const char *name_or_path, pr_err *err)
{
    if (!strpbrk(name_or_path, "/.")) {
        for (int i = 0; i < N_BUILTINS; i++) {
            if (strcmp(builtins[i].name, name_or_path) != 0) continue;
            if (pr_grid_parse(g, builtins[i].json, builtins[i].name, err)) return -1;
            snprintf(g->name, sizeof g->name, "%s", builtins[i].name);
            if (builtins[i].refs) g->refs = *builtins[i].refs;
            return 0;
        }
        char names[128] = "";
        for (int i = 0; i < N_BUILTINS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", builtins[i].name);
        return pr_errf(err, "unknown grid '%s' (built-in: %s; or a grid file)", name_or_path, names);
    }
    char *text = pr_read_text(name_or_path, err);
    if (!text) return -1;
    int rc = pr_grid_parse(g, text, name_or_path, err);
    free(text);
    if (!rc && !g->name[0]) {  /* a file's grid is named after the file: runs/ablate-<name> */
        const char *base = strrchr(name_or_path, '/') ? strrchr(name_or_path, '/') + 1 : name_or_path;
        snprintf(g->name, sizeof g->name, "%.*s", (int)strcspn(base, "."), base);
    }
    return rc;
}

const char *pr_grid_purpose(const char *name)
{
    for (int i = 0; i < N_BUILTINS; i++)
        if (strcmp(builtins[i].name, name) == 0) return builtins[i].purpose;
    return NULL;
}

/* "a, b, c" appended to out; more than six names become the first three and a count */
static void list_names(char *out, size_t n, int count, const char *(*name)(const pr_grid *, int), const pr_grid *g)
{
    const int shown = count > 6 ? 3 : count;
    for (int i = 0; i < shown; i++) {
        size_t at = strlen(out);
        snprintf(out + at, n - at, "%s%s", i ? ", " : "", name(g, i));
    }
    size_t at = strlen(out);
    if (shown < count) snprintf(out + at, n - at, ", ... (%d in all)", count);
}

static const char *variant_name(const pr_grid *g, int i) { return g->variant[i].name; }
static const char *task_name(const pr_grid *g, int i) { return g->task[i]; }

void pr_grid_describe(const pr_grid *g, char *out, size_t n)
{
    snprintf(out, n, "models: ");
    list_names(out, n, g->n_variants, variant_name, g);
    size_t at = strlen(out);
    snprintf(out + at, n - at, "; tasks: ");
    list_names(out, n, g->n_tasks, task_name, g);
    at = strlen(out);
    const char *plural = g->seeds > 1 ? "s" : "";
    if (g->steps) snprintf(out + at, n - at, "; %d seed%s, %lld steps", g->seeds, plural, (long long)g->steps);
    else if (g->n_variants && g->variant[0].preset[0])
        snprintf(out + at, n - at, "; %d seed%s, the steps of each variant's preset", g->seeds, plural);
    else snprintf(out + at, n - at, "; %d seed%s, each task's default steps", g->seeds, plural);
}

/* ---- slices: --only and --tasks ---------------------------------------------------- */
/* keep[i]: whether the comma-separated `list` names entry i of the grid, by
 * its whole name or, where no entry has that name, as the first word of it
 * ("gdn" for table4's "gdn paper-style" and "gdn authors-style"); -1 with err
 * naming `option`, the first name that matches nothing and the grid's names */
static int mark_listed(const char *list, const char *option, const char *noun, int count,
                       const char *(*name)(const pr_grid *, int), const pr_grid *g, bool *keep, pr_err *err)
{
    for (int i = 0; i < count; i++) keep[i] = false;
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        int exact = -1, words = 0;
        for (int i = 0; i < count && exact < 0; i++)
            if (strncmp(name(g, i), p, len) == 0 && !name(g, i)[len]) exact = i;
        if (exact >= 0) keep[exact] = true;
        for (int i = 0; exact < 0 && i < count; i++)
            if (strncmp(name(g, i), p, len) == 0 && name(g, i)[len] == ' ') keep[i] = true, words++;
        if (exact < 0 && !words) {
            char names[600] = "";
            for (int i = 0; i < count; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "", name(g, i));
            return pr_errf(err, "%s: '%.*s' is not a %s of grid %s (it has %s)", option, (int)len, p, noun, g->name,
                           names);
        }
        p += len;
        if (!*p) return 0;
    }
}

int pr_grid_keep(pr_grid *g, const char *variants, const char *tasks, pr_err *err)
{
    bool keep[PR_GRID_MAX_VARIANTS + PR_GRID_MAX_TASKS];
    int kept = 0;
    if (variants) {
        if (mark_listed(variants, "--only", "model or variant", g->n_variants, variant_name, g, keep, err)) return -1;
        for (int v = 0; v < g->n_variants; v++)
            if (keep[v]) g->variant[kept++] = g->variant[v];
        g->n_variants = kept;
    }
    if (tasks) {
        if (mark_listed(tasks, "--tasks", "task", g->n_tasks, task_name, g, keep, err)) return -1;
        kept = 0;
        for (int t = 0; t < g->n_tasks; t++)
            if (keep[t]) memmove(g->task[kept++], g->task[t], sizeof g->task[0]);
        g->n_tasks = kept;
    }
    return 0;
}

/* ---- statistics and tables --------------------------------------------------------- */
int pr_grid_stats(const double *x, int n, double *mean, double *std)
{
    int k = 0;
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) s += x[i], k++;
    *mean = k ? s / k : NAN;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) ss += (x[i] - *mean) * (x[i] - *mean);
    *std = k > 1 ? sqrt(ss / (k - 1)) : k ? 0 : NAN;
    return k;
}

void pr_grid_cell_text(const double *x, int seeds, char *buf, size_t size)
{
    double mean, std;
    int n = pr_grid_stats(x, seeds, &mean, &std);
    int len = !n ? snprintf(buf, size, "-")
                 : n == 1 ? snprintf(buf, size, "%.3f", mean) : snprintf(buf, size, "%.3f ± %.3f", mean, std);
    if (n && n < seeds && len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len, " (%d of %d seeds)", n, seeds);
}

/* the value of row `ref`, task t and metric m (NULL values' metric: the table's) */
static double ref_lookup(const pr_grid *g, const char *ref, int t, const char *m)
{
    for (int i = 0; g->refs.label && m && ref[0] && i < g->refs.n; i++) {
        const pr_grid_ref *x = &g->refs.values[i];
        if (strcmp(x->row, ref) == 0 && strcmp(x->task, g->task[t]) == 0 &&
            strcmp(x->metric ? x->metric : g->refs.metric, m) == 0)
            return x->value;
    }
    return NAN;
}

double pr_grid_ref_value(const pr_grid *g, int v, int t)
{
    return ref_lookup(g, g->variant[v].ref, t, g->refs.metric);
}

/* the reference of cell (v, t) when the results tabulate the reference table's metric, else NAN */
static double cell_ref(const pr_grid_results *r, int v, int t)
{
    return ref_lookup(r->g, r->g->variant[v].ref, t, r->metric[t]);
}

/* whether any cell of the results has a reference beside it */
static bool has_refs(const pr_grid_results *r)
{
    for (int v = 0; v < r->g->n_variants; v++)
        for (int t = 0; t < r->g->n_tasks; t++)
            if (isfinite(cell_ref(r, v, t))) return true;
    return false;
}

static const double *cell_values(const pr_grid_results *r, int v, int t)
{
    return r->value + ((int64_t)v * r->g->n_tasks + t) * r->g->seeds;
}

bool pr_grid_any_stale(const pr_grid_results *r)
{
    for (int v = 0; v < r->g->n_variants; v++)
        for (int t = 0; t < r->g->n_tasks; t++)
            if (r->stale[v][t]) return true;
    return false;
}

void pr_grid_write_markdown(const pr_grid_results *r, FILE *f)
{
    const pr_grid *g = r->g;
    fprintf(f, "| model |");
    for (int t = 0; t < g->n_tasks; t++) fprintf(f, " %s (%s) |", g->task[t], r->metric[t]);
    fprintf(f, "\n|---|");
    for (int t = 0; t < g->n_tasks; t++) fprintf(f, "---|");
    fprintf(f, "\n");
    for (int v = 0; v < g->n_variants; v++) {
        fprintf(f, "| %s |", g->variant[v].name);
        for (int t = 0; t < g->n_tasks; t++) {
            double ref = cell_ref(r, v, t);
            char cell[64];
            pr_grid_cell_text(cell_values(r, v, t), g->seeds, cell, sizeof cell);
            fprintf(f, " %s%s", cell, r->stale[v][t] ? " " PR_GRID_STALE_MARK : "");
            if (isfinite(ref)) fprintf(f, " (%s %.2f)", g->refs.label, ref);
            fprintf(f, " |");
        }
        fprintf(f, "\n");
    }
    if (has_refs(r)) fprintf(f, "\n(%s x.xx): %s.\n", g->refs.label, g->refs.source);
    if (pr_grid_any_stale(r)) fprintf(f, "\n%s\n", PR_GRID_STALE_NOTE);
    char prec[160];
    pr_grid_precision_text(r, prec, sizeof prec);
    if (prec[0]) fprintf(f, "\nPrecision: %s.\n", prec);
}

void pr_grid_precision_text(const pr_grid_results *r, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    for (int p = 0; p <= PR_PREC_BF16 && at < size; p++) {
        int n = r->precision_cells[p];
        if (n) at += (size_t)snprintf(buf + at, size - at, "%s%s (%d cell%s)", at ? ", " : "",
                                      pr_precision_name((pr_precision)p), n, n == 1 ? "" : "s");
    }
}

/* a field quoted for CSV when it holds a comma or a quote */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void pr_grid_write_csv(const pr_grid_results *r, FILE *f)
{
    const pr_grid *g = r->g;
    bool refs = has_refs(r), stale = pr_grid_any_stale(r);
    fprintf(f, "model,task,metric,mean,std,n");
    for (int s = 0; s < g->seeds; s++) fprintf(f, ",seed%d", s + 1);
    if (refs) fprintf(f, ",%s", g->refs.label);
    if (stale) fprintf(f, ",stale_runs"); /* only then: a current table keeps its columns */
    fprintf(f, "\n");
    for (int v = 0; v < g->n_variants; v++)
        for (int t = 0; t < g->n_tasks; t++) {
            const double *x = cell_values(r, v, t);
            double mean, std;
            int n = pr_grid_stats(x, g->seeds, &mean, &std);
            csv_field(f, g->variant[v].name);
            fprintf(f, ",%s,%s,", g->task[t], r->metric[t]);
            if (n) fprintf(f, "%.9g,%.9g,%d", mean, std, n);
            else fprintf(f, ",,0");
            for (int s = 0; s < g->seeds; s++) isfinite(x[s]) ? fprintf(f, ",%.9g", x[s]) : fprintf(f, ",");
            double ref = cell_ref(r, v, t);
            if (refs) isfinite(ref) ? fprintf(f, ",%.9g", ref) : fprintf(f, ",");
            if (stale) fprintf(f, ",%d", r->stale[v][t]);
            fprintf(f, "\n");
        }
}

void pr_grid_write_json(const pr_grid_results *r, FILE *f)
{
    const pr_grid *g = r->g;
    cJSON *root = cJSON_CreateObject(), *cells = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "grid", g->name);
    cJSON_AddNumberToObject(root, "seeds", g->seeds);
    bool refs = has_refs(r);
    if (refs) {
        cJSON *about = cJSON_AddObjectToObject(root, "reference");
        cJSON_AddStringToObject(about, "label", g->refs.label);
        cJSON_AddStringToObject(about, "source", g->refs.source);
        cJSON_AddStringToObject(about, "metric", g->refs.metric);
    }
    cJSON *prec = cJSON_AddObjectToObject(root, "precision_cells");
    for (int p = 0; p <= PR_PREC_BF16; p++)
        if (r->precision_cells[p]) cJSON_AddNumberToObject(prec, pr_precision_name((pr_precision)p), r->precision_cells[p]);
    cJSON_AddItemToObject(root, "cells", cells);
    for (int v = 0; v < g->n_variants; v++)
        for (int t = 0; t < g->n_tasks; t++) {
            const double *x = cell_values(r, v, t);
            double mean, std;
            int n = pr_grid_stats(x, g->seeds, &mean, &std);
            cJSON *c = cJSON_CreateObject(), *vals = cJSON_CreateArray();
            cJSON_AddStringToObject(c, "model", g->variant[v].name);
            cJSON_AddStringToObject(c, "task", g->task[t]);
            cJSON_AddStringToObject(c, "metric", r->metric[t]);
            cJSON_AddNumberToObject(c, "n", n);
            cJSON_AddItemToObject(c, "mean", n ? cJSON_CreateNumber(mean) : cJSON_CreateNull());
            cJSON_AddItemToObject(c, "std", n ? cJSON_CreateNumber(std) : cJSON_CreateNull());
            for (int s = 0; s < g->seeds; s++)
                cJSON_AddItemToArray(vals, isfinite(x[s]) ? cJSON_CreateNumber(x[s]) : cJSON_CreateNull());
            cJSON_AddItemToObject(c, "values", vals);
            double ref = cell_ref(r, v, t);
            if (refs) cJSON_AddItemToObject(c, "reference", isfinite(ref) ? cJSON_CreateNumber(ref) : cJSON_CreateNull());
            if (r->stale[v][t]) cJSON_AddNumberToObject(c, "stale_runs", r->stale[v][t]); /* kept by --stale keep */
            cJSON_AddItemToArray(cells, c);
        }
    char *s = cJSON_Print(root);
    fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(root);
}
