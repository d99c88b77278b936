/* train/train.c: the training loop, the run directory, the progress line,
 * the NaN/Inf trap and evaluation of a finished run.
 *
 * The trap costs nothing while values stay finite: each step checks its loss
 * and global grad norm; on the first non-finite one, the same step is run
 * again from the same state with the context's finite check on (every op's
 * outputs and grads are inspected), which names the first op that went bad
 * and the layer it belongs to. No checkpoint is written after that, so the
 * last good one stays. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "train/train.h"

typedef struct {
    pr_config cfg;
    pr_train_opts o;
    const char *dir;
    pr_model *m;
    pr_optim *opt;
    pr_task *task;
    pr_ctx *ctx;
    FILE *metrics;
    pr_schedule sched;
    int64_t step, last_ckpt;
    /* data-parallel runs (o.comm set): the buckets, ZeRO-1's owner of each
     * parameter (NULL without it) and whether this rank writes the run dir */
    pr_comm *comm;
    pr_ddp *ddp;
    int *owner;
    bool root;
} run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *path_in(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

/* ---- the run directory ---------------------------------------------------------- */
static void git_commit(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *p = popen("git rev-parse HEAD 2>/dev/null", "r");
    if (!p) return;
    char line[64] = "";
    if (fgets(line, sizeof line, p) && strlen(line) >= 40) snprintf(out, n, "%.40s", line);
    pclose(p);
}

/* DIR/name = text and a newline, atomically; frees text (a cJSON print) */
static int write_json_text(const run *r, const char *name, char *text, pr_err *err)
{
    char path[4200];
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    PR_CHECK(withnl, "%s: out of host memory", name);
    memcpy(withnl + n, "\n", 2);
    int rc = pr_write_file_atomic(path_in(path, sizeof path, r->dir, name), withnl, err);
    free(withnl);
    return rc;
}

static int write_manifest(const run *r, pr_device dev, pr_err *err)
{
    char commit[48], when[32];
    git_commit(commit, sizeof commit);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "git_commit", commit);
    cJSON_AddStringToObject(j, "device", pr_device_name(dev));
    cJSON *flags = cJSON_AddArrayToObject(j, "build_flags");
#ifdef PRISM_HAVE_CUDA
    cJSON_AddItemToArray(flags, cJSON_CreateString("PRISM_HAVE_CUDA"));
#endif
#ifdef PRISM_HAVE_BLAS
    cJSON_AddItemToArray(flags, cJSON_CreateString("PRISM_HAVE_BLAS"));
#endif
#ifdef PRISM_HAVE_OPENMP
    cJSON_AddItemToArray(flags, cJSON_CreateString("PRISM_HAVE_OPENMP"));
#endif
#ifdef __OPTIMIZE__
    cJSON_AddItemToArray(flags, cJSON_CreateString("optimized"));
#endif
    cJSON_AddStringToObject(j, "compiler", __VERSION__);
    cJSON_AddNumberToObject(j, "seed", (double)r->o.seed);
    cJSON_AddNumberToObject(j, "model_seed", r->cfg.seed);
    if (r->comm) {   /* data parallel: how many ranks, over what */
        cJSON_AddNumberToObject(j, "ranks", r->comm->world);
        cJSON_AddStringToObject(j, "comm", r->comm->backend);
        cJSON_AddNumberToObject(j, "zero", (double)r->o.zero);
    }
    cJSON_AddStringToObject(j, "start_time", when);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return write_json_text(r, "manifest.json", text, err);
}

static int write_config(const run *r, pr_err *err)
{
    return write_json_text(r, "config.json", pr_run_config_json(&r->cfg, &r->o), err);
}

/* ---- metrics.jsonl ------------------------------------------------------------------
 * Every line is flushed as it is written and every write checked: a full disk
 * or an I/O error stops the run with the reason, keeping the last checkpoint.
 * Non-finite numbers are written as null, so every line stays valid JSON. */
static const char *json_num(char buf[40], double v)
{
    if (!isfinite(v)) return "null";
    snprintf(buf, 40, "%.9g", v);
    return buf;
}

static int metrics_failed(const run *r, int e, pr_err *err)
{
    char kept[1200];
    if (r->last_ckpt >= 0)
        snprintf(kept, sizeof kept, "the last checkpoint, step %lld, is kept", (long long)r->last_ckpt);
    else snprintf(kept, sizeof kept, "no checkpoint was written before it");
    return pr_errf(err, "%s/metrics.jsonl: cannot write: %s; the run stops at step %lld (%s)", r->dir,
                   e ? strerror(e) : "write error", (long long)r->step, kept);
}

/* flushes what was written; -1 with err when any of it failed */
static int metrics_flush(run *r, pr_err *err)
{
    bool bad = ferror(r->metrics);
    errno = 0;
    if (fflush(r->metrics) == 0 && !bad) return 0;
    return metrics_failed(r, errno, err);
}

/* flushed and on the disk (before a checkpoint records its length) */
static int metrics_sync(run *r, pr_err *err)
{
    if (metrics_flush(r, err)) return -1;
    if (fsync(fileno(r->metrics)) == 0 || errno == EINVAL || errno == EROFS) return 0;  /* a device: nothing to sync */
    return metrics_failed(r, errno, err);
}

/* metrics.jsonl as the checkpoint left it: cut to the bytes it had written
 * and back to the end of its last whole line. A file shorter than that lost
 * lines (a crash before they reached the disk): said, and never padded. */
static int trim_metrics(const char *path, int64_t want, int64_t step, pr_err *err)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return pr_errf(err, "%s: cannot open: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) return close(fd), pr_errf(err, "%s: not a regular file", path);
    off_t end = (off_t)want;
    if (st.st_size < end) {
        fprintf(stderr, "prism train: %s has %lld bytes, but the checkpoint of step %lld had written %lld: the "
                        "lines after byte %lld are lost; resuming after its last whole line\n",
                path, (long long)st.st_size, (long long)step, (long long)want, (long long)st.st_size);
        end = st.st_size;
    }
    off_t cut = end;
    char buf[4096];
    while (cut > 0) {   /* back to just after the last newline before `end` */
        size_t n = cut < (off_t)sizeof buf ? (size_t)cut : sizeof buf;
        if (pread(fd, buf, n, cut - (off_t)n) != (ssize_t)n) {
            int e = errno;
            close(fd);
            return pr_errf(err, "%s: cannot read: %s", path, strerror(e));
        }
        size_t i = n;
        while (i > 0 && buf[i - 1] != '\n') i--;
        cut -= (off_t)(n - i);
        if (i > 0) break;
    }
    if (cut < end)
        fprintf(stderr, "prism train: %s: dropped a partial line (bytes %lld to %lld)\n", path, (long long)cut,
                (long long)end);
    int rc = ftruncate(fd, cut) == 0 ? 0 : pr_errf(err, "%s: cannot truncate: %s", path, strerror(errno));
    close(fd);
    return rc;
}

/* ---- setup and teardown ---------------------------------------------------------- */
static void run_free(run *r)
{
    if (r->metrics) fclose(r->metrics);
    if (r->m) pr_params_release_grads(r->m->params);
    pr_ddp_free(r->ddp);
    free(r->owner);
    pr_task_free(r->task);
    pr_optim_free(r->opt);
    pr_model_free(r->m);
    pr_ctx_free(r->ctx);
}

pr_optim_opts pr_train_optim_opts(const pr_train_opts *o)
{
    return (pr_optim_opts){.kind = strcmp(o->optim, "sgd") == 0 ? PR_OPTIM_SGD : PR_OPTIM_ADAMW,
                           .weight_decay = o->weight_decay, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                           .momentum = o->momentum, .decay_all = o->decay_all};
}

/* the task, then the config it completes (rec: the item count), checked */
static int open_task(run *r, pr_err *err)
{
    return pr_task_open(&r->task, &r->o, &r->cfg, err) || pr_task_fit_config(r->task, &r->cfg, err) ||
                   pr_config_check(&r->cfg, err)
               ? -1
               : 0;
}

/* the optimizer: ZeRO-1 keeps state only for the parameters this rank owns */
static pr_optim *open_optim(run *r)
{
    pr_optim_opts oo = pr_train_optim_opts(&r->o);
    if (!r->comm || !r->o.zero) return pr_optim_new(r->m->params, &oo);
    const pr_params *p = r->m->params;
    r->owner = malloc(sizeof(int) * (size_t)(p->n + 1));
    bool *mine = malloc(sizeof(bool) * (size_t)(p->n + 1));
    PR_CHECK(r->owner && mine, "train: out of host memory");
    pr_zero_owners(p, r->comm->world, r->owner);
    for (int i = 0; i < p->n; i++) mine[i] = r->owner[i] == r->comm->rank;
    pr_optim *o = pr_optim_new_owned(p, &oo, mine);
    free(mine);
    return o;
}

/* model, optimizer, context; from the latest checkpoint when resuming */
static int run_open(run *r, pr_device dev, bool resume, pr_err *err)
{
    r->m = pr_model_new(&r->cfg, PR_F32, dev);
    pr_model_init(r->m);
    r->opt = open_optim(r);
    if (r->comm) r->ddp = pr_ddp_new(r->comm, r->m->params, (size_t)(r->o.bucket_mb * 1e6));
    r->ctx = pr_ctx_new((uint64_t)r->o.seed);
    r->sched = (pr_schedule){.lr = r->o.lr, .min_lr = r->o.min_lr, .warmup = r->o.warmup, .total = r->o.steps,
                             .cosine = strcmp(r->o.schedule, "cosine") == 0};
    r->last_ckpt = -1;
    char path[4200];
    path_in(path, sizeof path, r->dir, "metrics.jsonl");
    if (!r->root) snprintf(path, sizeof path, "/dev/null");   /* rank 0 alone writes the run directory */
    /* tests only: PRISM_TEST_METRICS_FILE=/dev/full shows what a full disk does */
    const char *test_file = getenv("PRISM_TEST_METRICS_FILE");
    if (r->root && !resume && test_file) snprintf(path, sizeof path, "%s", test_file);
    if (!resume) {
        r->metrics = fopen(path, "w");
        if (!r->metrics) return pr_errf(err, "%s: cannot create: %s", path, strerror(errno));
        return 0;
    }
    pr_train_state s;
    if (pr_checkpoint_latest(r->dir, &r->last_ckpt, err) ||
        pr_checkpoint_load(r->dir, r->last_ckpt, r->m->params, r->opt, &s, err))
        return -1;
    if (s.step > r->o.steps)
        return pr_errf(err, "%s: its checkpoint is at step %lld, past the run's %lld steps (train.steps); give a "
                            "larger total or another --out", r->dir, (long long)s.step, (long long)r->o.steps);
    r->step = s.step;
    r->ctx->rng = s.rng;
    /* lines logged after the checkpoint are logged again by the resumed steps */
    if (r->root && trim_metrics(path, s.metrics_bytes, s.step, err)) return -1;
    r->metrics = fopen(path, "a");
    if (!r->metrics) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
    return 0;
}

/* ZeRO-1: the whole optimizer state on rank 0 (NULL on the others), each
 * parameter's moments sent by its owner. Every rank takes part. */
static int gather_optim(run *r, pr_optim **full, pr_err *err)
{
    const pr_params *p = r->m->params;
    pr_optim_opts oo = pr_train_optim_opts(&r->o);
    *full = r->root ? pr_optim_new(p, &oo) : NULL;
    pr_arena *scratch = pr_arena_new("zero-gather", 0);
    int rc = 0;
    for (int i = 0; i < p->n && !rc; i++)
        for (int s = 0; s < (oo.kind == PR_OPTIM_ADAMW ? 2 : 1) && !rc; s++) {
            pr_tensor *mine = s ? r->opt->v[i] : r->opt->m[i], *dst = NULL;
            if (*full) dst = s ? (*full)->v[i] : (*full)->m[i];
            if (r->owner[i] == 0) {   /* rank 0's own: no message */
                if (dst) pr_copy_(dst, mine);
                continue;
            }
            pr_tensor *buf = mine ? mine : dst ? dst : pr_empty_like(scratch, p->p[i].t);
            rc = r->comm->broadcast(r->comm, &buf, 1, r->owner[i], err) || r->comm->wait(r->comm, err) ? -1 : 0;
            pr_arena_reset(scratch);
        }
    pr_arena_free(scratch);
    if (*full) (*full)->t = r->opt->t;
    return rc;
}

static int save_checkpoint(run *r, pr_err *err)
{
    pr_optim *full = r->opt;
    if (r->owner && gather_optim(r, &full, err)) return -1;
    int rc = 0;
    if (r->root && metrics_sync(r, err)) rc = -1;
    if (r->root && !rc) {
        pr_train_state s = {.step = r->step, .data_pos = r->step, .metrics_bytes = ftell(r->metrics),
                            .rng = r->ctx->rng};
        rc = pr_checkpoint_save(r->dir, r->m->params, full, &s, err);
    }
    if (full != r->opt) pr_optim_free(full);
    if (!rc) r->last_ckpt = r->step;
    return rc;
}

/* ---- one step ------------------------------------------------------------------- */
typedef struct { double loss, grad_norm, lr; } step_stats;

/* the loss and grads of this step; with several ranks, the grads are
 * all-reduced during the backward and the loss averaged (-1 with err when a
 * collective fails) */
static int forward_backward(run *r, step_stats *st, pr_err *err)
{
    pr_params_zero_grads(r->m->params);
    pr_tensor *loss = r->task->loss(r->task, r->ctx, r->m, r->step);
    st->loss = pr_item(loss);
    if (r->ddp) pr_ddp_begin(r->ddp, r->ctx);
    pr_backward(r->ctx, loss);
    if (r->ddp && (pr_ddp_end(r->ddp, r->ctx, err) || r->comm->avg_host(r->comm, &st->loss, 1, err))) return -1;
    st->grad_norm = pr_params_grad_norm(r->m->params);
    return 0;
}

/* ZeRO-1: each owner sends the parameters it updated to every rank */
static int share_updates(run *r, pr_err *err)
{
    const pr_params *p = r->m->params;
    pr_tensor **ts = malloc(sizeof(pr_tensor *) * (size_t)(p->n + 1));
    PR_CHECK(ts, "train: out of host memory");
    int rc = 0;
    for (int owner = 0; owner < r->comm->world && !rc; owner++) {
        int n = 0;
        for (int i = 0; i < p->n; i++)
            if (r->owner[i] == owner) ts[n++] = p->p[i].t;
        if (n) rc = r->comm->broadcast(r->comm, ts, n, owner, err);
    }
    free(ts);
    return rc ? -1 : r->comm->wait(r->comm, err);
}

/* run the failing step again with every op checked; describes the first bad op */
static void locate_nonfinite(run *r, pr_rng rng_before, char *out, size_t n)
{
    pr_step_reset(r->ctx);
    r->ctx->rng = rng_before;
    r->ctx->check_finite = true;
    r->ctx->nonfinite[0] = '\0';
    step_stats st;
    pr_err ignored;   /* every rank reruns the step (the averaged loss told them all), so collectives match */
    forward_backward(r, &st, &ignored);
    r->ctx->check_finite = false;
    if (r->ctx->nonfinite[0]) snprintf(out, n, "%s", r->ctx->nonfinite);
    else snprintf(out, n, "the global grad norm (%g; every op's values were finite)", st.grad_norm);
    pr_step_reset(r->ctx);
}

/* -1 with bad set: a non-finite value; -1 with bad empty: err (a collective failed) */
static int train_step(run *r, step_stats *st, char *bad, size_t nbad, pr_err *err)
{
    pr_rng rng_before = r->ctx->rng;
    bad[0] = '\0';
    if (forward_backward(r, st, err)) return -1;
    if (!isfinite(st->loss) || !isfinite(st->grad_norm)) {
        locate_nonfinite(r, rng_before, bad, nbad);
        return -1;
    }
    st->lr = pr_schedule_lr(&r->sched, r->step);
    pr_optim_step(r->ctx, r->opt, st->lr, pr_clip_scale(st->grad_norm, r->o.clip));
    pr_step_reset(r->ctx);
    return r->owner ? share_updates(r, err) : 0;
}

/* tests only: PRISM_TEST_EXIT_AT=R:S makes rank R exit (status 3) after step S */
static void test_exit_hook(const run *r)
{
    const char *at = getenv("PRISM_TEST_EXIT_AT");
    int rank, step;
    if (!at || !r->comm || sscanf(at, "%d:%d", &rank, &step) != 2) return;
    if (rank == r->comm->rank && step == r->step) {
        fprintf(stderr, "rank %d: PRISM_TEST_EXIT_AT: exiting after step %d\n", rank, step);
        _exit(3);
    }
}

static void evaluate(run *r, pr_metrics *out)
{
    bool grad = pr_set_grad_enabled(r->ctx, false), training = r->ctx->training;
    r->ctx->training = false;
    memset(out, 0, sizeof *out);
    r->task->evaluate(r->task, r->ctx, r->m, out);
    r->ctx->training = training;
    pr_set_grad_enabled(r->ctx, grad);
}

static int log_eval(run *r, const pr_metrics *m, pr_err *err)
{
    char num[40];
    fprintf(r->metrics, "{\"step\":%lld,\"eval\":{", (long long)r->step);
    for (int i = 0; i < m->n; i++)
        fprintf(r->metrics, "%s\"%s\":%s", i ? "," : "", m->name[i], json_num(num, m->value[i]));
    fprintf(r->metrics, "}}\n");
    return metrics_flush(r, err);
}

/* ---- the progress line ------------------------------------------------------------ */
static void progress(const run *r, const step_stats *st, double tok_s, double eta, bool tty, bool last)
{
    char line[200];
    snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  lr %.3g  grad %.3g  %.0f tok/s  ETA %.0fs",
             (long long)r->step, (long long)r->o.steps, st->loss, st->lr, st->grad_norm, tok_s, eta);
    if (tty) fprintf(stderr, "\r%-90s%s", line, last ? "\n" : "");
    else fprintf(stderr, "%s\n", line);
}

static int train_loop(run *r, pr_train_result *res, pr_err *err)
{
    bool tty = isatty(STDERR_FILENO);
    double t0 = now_s(), last_draw = 0;
    int64_t first = r->step;
    step_stats st = {0};
    while (r->step < r->o.steps) {
        char bad[256];
        if (train_step(r, &st, bad, sizeof bad, err)) {
            if (!bad[0]) return -1;
            if (tty) fputc('\n', stderr);
            fprintf(r->metrics, "{\"step\":%lld,\"nonfinite\":\"%s\"}\n", (long long)r->step + 1, bad);
            if (metrics_flush(r, err)) return -1;
            /* steps count from 1 in messages, as in the progress line */
            snprintf(res->nonfinite, sizeof res->nonfinite, "step %lld: %s", (long long)r->step + 1, bad);
            if (r->last_ckpt >= 0)
                return pr_errf(err, "non-finite value at step %lld: %s; the last good checkpoint is step %lld in %s",
                               (long long)r->step + 1, bad, (long long)r->last_ckpt, r->dir);
            return pr_errf(err, "non-finite value at step %lld: %s; no checkpoint was written before it",
                           (long long)r->step + 1, bad);
        }
        r->step++;
        test_exit_hook(r);
        double el = now_s() - t0, per = el / (double)(r->step - first);
        res->tokens_per_s = (double)r->task->tokens_per_batch / per;
        bool log = r->step % r->o.log_every == 0 || r->step == r->o.steps;
        char n1[40], n2[40], n3[40];
        /* tokens and seconds so far, for curves against them (prism plot --x); time_s
         * counts from this process's start, so a resumed run starts it again */
        if (log) fprintf(r->metrics, "{\"step\":%lld,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,\"tokens\":%lld,"
                                     "\"tokens_per_s\":%.1f,\"time_s\":%.3f}\n",
                         (long long)r->step, json_num(n1, st.loss), json_num(n2, st.lr), json_num(n3, st.grad_norm),
                         (long long)(r->step * r->task->tokens_per_batch), res->tokens_per_s, el);
        if (log && metrics_flush(r, err)) return -1;  /* a reader (or a crash) sees every logged step */
        if (!r->root) {
            /* the progress line is rank 0's */
        } else if (r->o.on_step) {
            r->o.on_step(r->o.on_step_user, r->step, r->o.steps);
        } else if (tty ? el - last_draw > 0.2 || r->step == r->o.steps : log) {
            progress(r, &st, res->tokens_per_s, per * (double)(r->o.steps - r->step), tty, r->step == r->o.steps);
            last_draw = el;
        }
        if (r->o.eval_every && r->step % r->o.eval_every == 0 && r->step < r->o.steps) {
            pr_metrics m;
            evaluate(r, &m);
            if (log_eval(r, &m, err)) return -1;
        }
        if (r->o.ckpt_every && r->step % r->o.ckpt_every == 0 && r->step < r->o.steps && save_checkpoint(r, err))
            return -1;
    }
    return 0;
}

int pr_make_dirs(const char *dir, pr_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return pr_errf(err, "%s: the folder's path is too long", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return pr_errf(err, "%s: cannot create its parent %s: %s", dir, path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0755) == 0 || errno == EEXIST) return 0;
    return pr_errf(err, "%s: cannot create the folder: %s", dir, strerror(errno));
}

int pr_train_fits(const pr_config *c, const pr_train_opts *o, pr_device dev, pr_err *err)
{
    pr_model_estimate e;
    int slots = strcmp(o->optim, "sgd") == 0 ? (o->momentum != 0) : 2;
    /* rec with sampled negatives scores 1 + negatives items a position, not every item */
    int64_t scored = strcmp(o->task, "rec") == 0 && o->rec_negatives > 0 ? o->rec_negatives + 1 : 0;
    pr_model_estimate_step(c, o->batch, scored, slots, &e);
    struct stat st;
    if (strcmp(o->task, "lm") == 0 && o->data[0] && stat(o->data, &st) == 0 && S_ISREG(st.st_mode))
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

#define RUN_LOCK ".train.lock"

/* the folder, locked for this run; a fresh run refuses one that holds a run
 * unless told to replace it */
static int claim_run_dir(const char *dir, bool resume, bool overwrite, int *lock, pr_err *err)
{
    if (pr_make_dirs(dir, err) || pr_dir_lock(dir, RUN_LOCK, "prism train", lock, err)) return -1;
    int rc = 0;
    if (!resume && pr_run_exists(dir)) {
        rc = overwrite ? pr_run_clear(dir, err)
                       : pr_errf(err, "%s holds a run: give --resume to continue it, --overwrite to replace it, or "
                                      "another --out", dir);
    }
    if (rc) pr_dir_unlock(*lock, dir, RUN_LOCK), *lock = -1;
    return rc;
}

int pr_train(const pr_config *c, const pr_train_opts *o, const char *run_dir, bool resume, pr_device dev,
             pr_train_result *res, pr_err *err)
{
    memset(res, 0, sizeof *res);
    run r = {.cfg = *c, .o = *o, .dir = run_dir, .comm = o->comm, .root = !o->comm || o->comm->rank == 0};
    int lock = -1;
    if (r.root && claim_run_dir(run_dir, resume, o->overwrite, &lock, err)) return -1;
    int rc = open_task(&r, err);
    if (!rc) rc = pr_train_fits(&r.cfg, &r.o, dev, err);   /* before the model is allocated */
    /* a resumed run keeps its manifest; its config records the new total of steps */
    if (!rc && r.root) rc = write_config(&r, err) || (!resume && write_manifest(&r, dev, err)) ? -1 : 0;
    if (!rc) rc = run_open(&r, dev, resume, err);
    if (!rc) rc = train_loop(&r, res, err);
    if (!rc && r.last_ckpt != r.step) rc = save_checkpoint(&r, err);
    if (!rc) {
        evaluate(&r, &res->metrics);
        rc = log_eval(&r, &res->metrics, err);
    }
    res->steps = r.step;
    res->params = r.m ? pr_params_count(r.m->params) : 0;
    res->step_peak_bytes = r.ctx ? pr_arena_peak(r.ctx->step) : 0;
    run_free(&r);
    pr_dir_unlock(lock, run_dir, RUN_LOCK);
    return rc;
}

int pr_eval_run(const char *run_dir, pr_device dev, pr_config *c, pr_train_opts *o, pr_train_result *res,
                pr_err *err)
{
    memset(res, 0, sizeof *res);
    char path[4200];
    *c = pr_config_default();
    *o = pr_train_defaults();
    if (pr_run_config_load(c, o, path_in(path, sizeof path, run_dir, "config.json"), err)) return -1;
    run r = {.cfg = *c, .o = *o, .dir = run_dir};
    int rc = open_task(&r, err);
    *c = r.cfg;
    int64_t step = 0;
    if (!rc) rc = pr_checkpoint_latest(run_dir, &step, err);
    if (!rc) {
        r.m = pr_model_new(c, PR_F32, dev);
        r.ctx = pr_ctx_new((uint64_t)o->seed);
        rc = pr_checkpoint_load(run_dir, step, r.m->params, NULL, NULL, err);
    }
    double t0 = now_s();
    if (!rc) {
        evaluate(&r, &res->metrics);
        res->tokens_per_s = (double)r.task->tokens_per_batch * (double)o->eval_batches / (now_s() - t0);
    }
    res->steps = step;
    res->params = r.m ? pr_params_count(r.m->params) : 0;
    run_free(&r);
    return rc;
}

void pr_print_summary(FILE *f, const pr_config *c, const pr_train_opts *o, const pr_train_result *r,
                      const char *run_dir)
{
    cJSON *j = cJSON_CreateObject();
    /* SASRec is attention mixers in SASRec's blocks: the model is named by its blocks */
    cJSON_AddStringToObject(j, "model", strcmp(c->block, "sasrec") == 0 ? "sasrec" : c->mixer);
    cJSON_AddStringToObject(j, "task", o->task);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddNumberToObject(j, "steps", (double)r->steps);
    cJSON *m = cJSON_AddObjectToObject(j, "metrics");
    for (int i = 0; i < r->metrics.n; i++) cJSON_AddNumberToObject(m, r->metrics.name[i], r->metrics.value[i]);
    cJSON_AddNumberToObject(j, "tokens_per_s", round(r->tokens_per_s));
    cJSON_AddNumberToObject(j, "params", (double)r->params);
    cJSON_AddStringToObject(j, "run_dir", run_dir);
    if (r->nonfinite[0]) cJSON_AddStringToObject(j, "nonfinite", r->nonfinite);
    char *s = cJSON_PrintUnformatted(j);
    fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(j);
}
