/* train/train.h: the trainer, the library module `prism train`, `prism eval`
 * and `prism generate` share.
 *
 * A run lives in a directory:
 *   config.json     the resolved config: {"model": {...}, "train": {...}}
 *   manifest.json   the binary's git commit (PR_BUILD_COMMIT), device, build flags, seed, the data generator's
 *                   version (pr_task_data_version), start time
 *   metrics.jsonl   one object per logged step and per evaluation
 *   ckpt-<step>.weights.safetensors   parameters by path
 *   ckpt-<step>.state.safetensors     optimizer moments; metadata: step, data
 *                                     position, RNG, metrics length
 *   latest          the step of the newest complete checkpoint
 * Every file is written to a temporary name, fsynced, renamed and the
 * directory fsynced; `latest` moves only after both checkpoint files are in
 * place, so a crash at any point leaves the previous checkpoint whole.
 *
 * In a data-parallel run (pr_train_opts.comm) rank 0 alone writes these
 * files; checkpoints always hold the whole optimizer state (with ZeRO-1 it is
 * gathered on rank 0 first), so a run resumes with any number of ranks.
 *
 * Training is a pure function of (config, seed, step): batch j is task
 * sample block j, the learning rate a function of the step, and the
 * optimizer state and RNG are restored exactly, so `--resume` reproduces an
 * uninterrupted run bit for bit on the same device and build.
 */
#ifndef PR_TRAIN_H
#define PR_TRAIN_H

#include "dist/dist.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a test makes happen inside a run, so that the library reads no
 * environment: a rank dying after a step, a crash in the middle of a
 * checkpoint, a full disk under metrics.jsonl. tools/train.c sets after_step
 * from PRISM_TEST_EXIT_AT for the command-line tests. */
typedef struct {
    void *user;
    /* on every rank after each step (rank 0 without a communicator) */
    void (*after_step)(void *user, int rank, int64_t step);
    /* while saving a checkpoint: after its weights, before its state file (state_path) */
    void (*mid_checkpoint)(void *user, const char *state_path, int64_t step);
    /* a fresh run's metrics.jsonl written here instead (NULL: the run's own) */
    const char *metrics_path;
} pr_train_hooks;

/* ---- training options (train/options.c): keys `train.<name>` ----------------- */
typedef struct {
    char task[32];          /* a probe (parity, mqar, ...), lm, or rec */
    char probe_style[8];    /* probes: paper | authors (tasks/tasks.h) */
    char data[1024];        /* lm: the text file */
    char rec_data[1024];    /* rec: synthetic | synthetic:full | amazon:FILE | yelp:FILE */
    int64_t rec_negatives;  /* rec: 0 softmax over every item, else sampled negatives */
    int64_t steps;          /* total optimizer steps */
    int batch;
    int64_t seed;           /* data order (the model's init seed is model.seed) */
    char optim[8];          /* adamw | sgd */
    double lr, min_lr, weight_decay, beta1, beta2, eps, momentum, clip;
    int64_t warmup;
    char schedule[12];      /* cosine | constant */
    bool decay_all;
    int64_t eval_every, eval_batches, ckpt_every, log_every;
    int64_t zero;           /* data-parallel: 1 shards the optimizer state over the ranks (ZeRO-1) */
    double bucket_mb;       /* data-parallel: gradient MB per all-reduce bucket */
    char precision[8];      /* auto | f32 | tf32 | bf16 (pr_train_precision resolves auto) */
    char cuda_graph[8];     /* auto | on | off (pr_train_graph_plan decides) */
    /* no key, not in config.json: the communicator of a data-parallel run
     * (NULL: one process). Each rank takes rows [r*b/N, (r+1)*b/N) of every
     * global batch of b rows; grads and the logged loss are averaged over
     * ranks; rank 0 alone writes the run directory. */
    pr_comm *comm;
    /* no key, not in config.json: when set, called after every step in place of
     * the trainer's progress line (prism ablate draws one line for a grid) */
    void (*on_step)(void *user, int64_t step, int64_t total);
    void *on_step_user;
    /* no key, not in config.json: a fresh run (resume false) may replace a
     * run already in its folder (pr_run_clear); without it pr_train refuses */
    bool overwrite;
    /* no key, not in config.json: test hooks (all off when zeroed) */
    pr_train_hooks hooks;
} pr_train_opts;
/* The precision a run trains in: train.precision, where `auto` means bf16
 * on CUDA (TF32 for the probe tasks) and f32 on the CPU. pr_train records
 * the resolved name in config.json and manifest.json, so a resume from
 * config.json keeps it. */
pr_precision pr_train_precision(const pr_train_opts *o, pr_device dev);
/* Whether a run captures its training step into a CUDA graph once and
 * replays it (train.cuda_graph): never on the CPU; `off` never; `auto` and
 * `on` capture unless the run cannot be captured
 * faithfully: data-parallel (NCCL in the backward), a task that builds its
 * batch inside the step (task_stages false: rec), dropout (host seeds a
 * graph would freeze), mom (routing counts read on the host). note says
 * what was decided and why, for the run header. The capture itself also
 * refuses what it finds (a host read of device values, a synchronization,
 * a random draw inside the step): the run then goes on eagerly and says so. */
bool pr_train_graph_plan(const pr_config *c, const pr_train_opts *o, pr_device dev, bool task_stages, char *note,
                         size_t n);
/* A training step as a CUDA graph (train/step_graph.c says what it holds):
 * captured at the first call into *g, replayed at every call. The caller
 * copies the step's inputs into device tensors that outlive the step first;
 * loss_fn records the loss from them. 0 with the step's loss and grad norm;
 * -1 with why when the capture was refused (nothing ran, *g stays NULL: run
 * the step eagerly). Free with pr_step_graph_free (NULL ok). */
typedef pr_tensor *(*pr_record_fn)(void *user, pr_ctx *ctx);   /* records a tensor on ctx (a loss, logits) */
int pr_step_graph_run(pr_cuda_graph **g, pr_ctx *ctx, const pr_params *params, pr_optim *opt, pr_record_fn loss_fn,
                      void *user, double lr, double max_norm, double *loss, double *norm, char *why, size_t n);
void pr_step_graph_free(pr_cuda_graph *g);
/* A forward as a CUDA graph, for evaluation: captured at the first call
 * into *g, replayed at every call. fn records an output from inputs the
 * caller staged into device tensors that outlive the capture; the graph
 * ends by copying it into *out, allocated in keep at the capture: read it
 * after each call. 0, or -1 with why when the capture was refused (nothing
 * ran, *g stays NULL: run fn eagerly). Free *g (pr_step_graph_free) before keep. */
int pr_forward_graph_run(pr_cuda_graph **g, pr_ctx *ctx, pr_record_fn fn, void *user, pr_arena *keep, pr_tensor **out,
                         char *why, size_t n);
/* the optimizer options of a run (so a tool can rebuild the optimizer it trained with) */
pr_optim_opts pr_train_optim_opts(const pr_train_opts *o);

pr_train_opts pr_train_defaults(void);
/* whether a `key=value` of a --set or grid names a training option rather
 * than a model key: train.<key>, and rec.data, rec.negatives and probe.style
 * without the prefix */
bool pr_train_is_key(const char *key_value);
/* `train.key=value` (the `train.` prefix optional); -1 with err naming the key */
int pr_train_set(pr_train_opts *o, const char *key_value, pr_err *err);
/* apply a JSON object of train keys; -1 with err naming the key */
int pr_train_apply_json_obj(pr_train_opts *o, const void *cjson_obj, const char *what, pr_err *err);
void pr_train_print_help(FILE *f);
/* {"model": config, "train": opts} (caller frees) */
char *pr_run_config_json(const pr_config *c, const pr_train_opts *o);
/* a config file: {"model": {...}, "train": {...}} or a flat model config with an
 * optional "train" object; fills both */
int pr_run_config_apply(pr_config *c, pr_train_opts *o, const char *json, const char *what, pr_err *err);
int pr_run_config_load(pr_config *c, pr_train_opts *o, const char *path, pr_err *err);
/* the defaults a task brings to the model config and the training options
 * (probes: the `probe` preset sized for a quick CPU run; lm: vocab 256); -1
 * with err naming the allowed tasks when the name is unknown */
int pr_task_preset(pr_config *c, pr_train_opts *o, const char *task, pr_err *err);
/* the model a command names: a mixer (mixer=NAME), or sasrec (the sasrec
 * preset at the task's seq_len; rec only); -1 with err */
int pr_train_set_model(pr_config *c, const char *task, const char *model, pr_err *err);
/* a named preset for a task, in place of pr_task_preset's defaults (NULL:
 * those defaults): the model preset (prism model --help lists them), and for
 * the probe protocols `probe` (the paper's) and `probe-authors` (the
 * authors' script) the training options of the protocol, the probe style and
 * the task's own sizes (probe-authors: D 128 at seq_len 64 for mqar,
 * poly_recall and var_tracking). -1 with err for an unknown preset or task,
 * or a probe protocol asked of a task that is not a probe */
int pr_task_preset_as(pr_config *c, pr_train_opts *o, const char *task, const char *preset, pr_err *err);
/* whether a task name is known */
bool pr_task_known(const char *task);
/* The family of a task name: one of the probes (parity, mqar, ...), the
 * byte-level lm, or rec; PR_TASK_UNKNOWN for any other name. The one place
 * task names are compared. */
typedef enum { PR_TASK_UNKNOWN = -1, PR_TASK_PROBE, PR_TASK_LM, PR_TASK_REC } pr_task_family;
pr_task_family pr_task_family_of(const char *task);

/* ---- tasks as the trainer sees them (train/task.c) -----------------------------
 * A task makes training losses and evaluation metrics for a model. Probes and
 * lm are token tasks (ids and labels [B,T] into the LM loss); rec
 * (train/task_rec.c) has the rec model's loss and ranking metrics. */
#define PR_MAX_METRICS 16
typedef struct { int n; char name[PR_MAX_METRICS][24]; double value[PR_MAX_METRICS]; } pr_metrics;
void pr_metrics_add(pr_metrics *m, const char *name, double value);

typedef struct pr_task pr_task;
struct pr_task {
    const char *name;
    int64_t tokens_per_batch;
    int n_items;            /* rec: the dataset's items (model.rec.n_items); 0 otherwise */
    /* the loss of training batch `index`, recorded on ctx's tape */
    pr_tensor *(*loss)(pr_task *t, pr_ctx *ctx, const pr_model *m, int64_t index);
    /* optional, for a step captured into a CUDA graph (NULL where the batch
     * is built inside the loss, as rec's): stage copies training batch
     * `index` into device tensors that outlive the step, before the captured
     * part; staged_loss records the loss of the staged batch with no copy
     * between host and device. stage then staged_loss gives loss's bits. */
    void (*stage)(pr_task *t, pr_ctx *ctx, const pr_model *m, int64_t index);
    pr_tensor *(*staged_loss)(pr_task *t, pr_ctx *ctx, const pr_model *m);
    /* metrics over the evaluation split (grad mode is off). eval_graph (the
     * trainer's graph plan) lets a token task capture its forward as a CUDA
     * graph at the first batch and replay it for the others; eval_graph_ran
     * says whether the last evaluation did */
    void (*evaluate)(pr_task *t, pr_ctx *ctx, const pr_model *m, pr_metrics *out);
    bool eval_graph, eval_graph_ran;
    void (*free)(pr_task *t);
    void *data;
};
/* the task named by o->task for a model of config c; -1 with err */
int pr_task_open(pr_task **out, const pr_train_opts *o, const pr_config *c, pr_err *err);
void pr_task_free(pr_task *t);
int pr_task_open_rec(pr_task **out, const pr_train_opts *o, const pr_config *c, pr_err *err);
/* rec: model.rec.n_items from the data when unset (0, as the task preset
 * leaves it); -1 with err when it was set to another count */
int pr_task_fit_config(const pr_task *t, pr_config *c, pr_err *err);

/* the trainer's side (train/step_graph.c): wanted from the plan, the graph
 * after the first capture, the steps run eagerly so far (the capture comes
 * after 2), and the note of the result (said on stderr too when a capture
 * is refused, by the rank that talks) */
typedef struct {
    bool wanted, talk;
    int64_t eager_steps;
    pr_cuda_graph *graph;
    char *note;
    size_t note_n;
} pr_train_graph;
/* step `index` of task by the graph: 0 with its loss, norm and lr; 1 when
 * this step is to run eagerly (not wanted, still warming up, or the capture
 * was just refused: then never again) */
int pr_train_graph_step(pr_train_graph *tg, pr_task *task, pr_ctx *ctx, const pr_model *m, pr_optim *opt,
                        int64_t index, const pr_schedule *sched, double clip, double *loss, double *norm, double *lr);

/* ---- checkpoints (train/checkpoint.c) ------------------------------------------ */
typedef struct {
    int64_t step, data_pos, metrics_bytes;
    pr_rng rng;
} pr_train_state;
/* writes weights and state, then moves `latest`, then removes older checkpoint files */
int pr_checkpoint_save(const char *dir, const pr_params *p, const pr_optim *o, const pr_train_state *s,
                       const pr_train_hooks *hooks, pr_err *err);   /* hooks: NULL for none */
/* the step in dir/latest; -1 with err when there is none */
int pr_checkpoint_latest(const char *dir, int64_t *step, pr_err *err);
/* weights into p; optimizer and state too when o and s are not NULL */
int pr_checkpoint_load(const char *dir, int64_t step, pr_params *p, pr_optim *o, pr_train_state *s, pr_err *err);
/* text written atomically (temp, fsync, rename, fsync the directory) */
int pr_write_file_atomic(const char *path, const char *text, pr_err *err);

/* ---- run directories (train/rundir.c) ------------------------------------------
 * One writer per folder: pr_dir_lock takes an flock on DIR/name and writes
 * its pid there; a second process is refused (-1, err naming the folder, the
 * holder `holder` ("prism train") and its pid); a lock file left by a dead
 * pid is taken over with a note on stderr. The lock lasts until
 * pr_dir_unlock (which removes the file) or until every process holding fd
 * ends. */
int pr_dir_lock(const char *dir, const char *name, const char *holder, int *fd, pr_err *err);
void pr_dir_unlock(int fd, const char *dir, const char *name);
/* whether dir holds a run (config.json, latest or metrics.jsonl) */
bool pr_run_exists(const char *dir);
/* removes a run's files from dir: latest first, then metrics, result,
 * config, manifest and checkpoints; other files stay */
int pr_run_clear(const char *dir, pr_err *err);
/* base, or base-2, base-3, ... : the first that holds no run; -1 when none is free */
int pr_run_free_name(char *out, size_t n, const char *base);
/* dir and any missing parents (mkdir -p); -1 with err naming the one that failed */
int pr_make_dirs(const char *dir, pr_err *err);
/* dir made and locked (pr_dir_lock) for one training run; a fresh run (resume
 * false) refuses a folder that holds a run unless overwrite, which clears it.
 * Release with pr_run_unlock. */
int pr_run_claim(const char *dir, bool resume, bool overwrite, int *lock, pr_err *err);
void pr_run_unlock(int lock, const char *dir);
/* config.json (c and o), and for a fresh run manifest.json (git commit,
 * device, build flags, compiler, seeds, ranks, data version, start time) */
int pr_run_write_start(const char *dir, const pr_config *c, const pr_train_opts *o, pr_device dev, bool fresh,
                       pr_err *err);

/* ---- metrics.jsonl (train/metrics_file.c) ----------------------------------------
 * One object a line; non-finite numbers as null. A writer that is not rank 0
 * writes to /dev/null. */
/* a fresh file (resumed NULL), or the file cut back to the bytes the resumed
 * checkpoint had written and to its last whole line (lost lines are said on
 * stderr, never padded), opened to append */
int pr_metrics_open(FILE **f, const char *dir, bool writer, const pr_train_state *resumed,
                    const pr_train_hooks *hooks, pr_err *err);   /* hooks: NULL for none */
/* flushes f (and with sync, fsyncs it); -1 with err when any write failed,
 * naming the file, the step the run stops at and the checkpoint kept
 * (last_ckpt, -1 for none) */
int pr_metrics_flush(FILE *f, const char *dir, int64_t step, int64_t last_ckpt, bool sync, pr_err *err);
/* a logged step; tokens and seconds so far, for curves against them (prism
 * plot --x): time_s counts from this process's start, so a resumed run
 * starts it again */
typedef struct { int64_t step, tokens; double loss, lr, grad_norm, tokens_per_s, time_s; } pr_step_log;
/* {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "time_s"} */
void pr_metrics_write_step(FILE *f, const pr_step_log *s);
/* {"step", "eval": {name: value, ...}, "eval_s": the seconds it took} */
void pr_metrics_write_eval(FILE *f, int64_t step, const pr_metrics *m, double seconds);

/* ---- the loop (train/train.c) --------------------------------------------------- */
typedef struct {
    pr_metrics metrics;     /* the final evaluation */
    int64_t steps;          /* the step reached */
    double tokens_per_s;
    int64_t params;
    size_t step_peak_bytes; /* the step arena's peak: activations, saved tensors, tape */
    char nonfinite[320];    /* set when the NaN trap stopped the run */
    char graph_note[320];   /* CUDA graphs: on, or off and why (pr_train_graph_plan, or the capture's refusal) */
    bool eval_graph;        /* the final evaluation replayed a captured forward */
    double train_s, eval_s; /* wall seconds of this call's training loop and of its final evaluation */
} pr_train_result;

/* train in run_dir (created; with resume, continued from its latest
 * checkpoint). Returns 0, or -1 with err (a file, a bad config, the NaN trap) */
int pr_train(const pr_config *c, const pr_train_opts *o, const char *run_dir, bool resume, pr_device dev,
             pr_train_result *res, pr_err *err);
/* (train/options.c) 0 when a training step of (c, o) fits in what dev has free (parameters,
 * grads, optimizer state, activations, lm's text); else -1 with err giving
 * the estimate, its parts and the limit. Allocates nothing. */
int pr_train_fits(const pr_config *c, const pr_train_opts *o, pr_device dev, pr_err *err);
/* evaluate the latest checkpoint of a run */
int pr_eval_run(const char *run_dir, pr_device dev, pr_config *c, pr_train_opts *o, pr_train_result *res,
                pr_err *err);
/* (train/rundir.c) the summary line: {"model", "task", "seed", "steps",
 * "metrics", "tokens_per_s", "params", "run_dir"} */
void pr_print_summary(FILE *f, const pr_config *c, const pr_train_opts *o, const pr_train_result *r,
                      const char *run_dir);

#ifdef __cplusplus
}
#endif
#endif
