/* train/train.c: the training loop, the progress line, the NaN/Inf trap and
 * evaluation (train/rundir.c and train/metrics_file.c write the run's files,
 * dist/zero.c is ZeRO-1). With train.cuda_graph, the steps after the second
 * run as train/step_graph.c's CUDA graph; a refused capture leaves the run
 * eager, saying why.
 *
 * The trap costs nothing while values stay finite: each step checks its loss
 * and global grad norm; on the first non-finite one, the same step is run
 * again from the same state with every op's outputs and grads inspected,
 * which names the first op that went bad and its layer. No checkpoint is
 * written after that, so the last good one stays. */
#include <math.h>
#include <string.h>
#include <unistd.h>

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
    /* data-parallel runs (o.comm set): the buckets, ZeRO-1 (NULL without it)
     * and whether this rank writes the run dir */
    pr_comm *comm;
    pr_ddp *ddp;
    pr_zero *zero;
    bool root;
    pr_train_graph graph;   /* CUDA graphs (train/step_graph.c) */
} run;

/* flushes metrics.jsonl (with sync: onto the disk, before a checkpoint records its length) */
static int flush_metrics(const run *r, bool sync, pr_err *err)
{
    return pr_metrics_flush(r->metrics, r->dir, r->step, r->last_ckpt, sync, err);
}

/* ---- setup and teardown ---------------------------------------------------------- */
static void run_free(run *r)
{
    pr_step_graph_free(r->graph.graph);
    if (r->metrics) fclose(r->metrics);
    if (r->m) pr_params_release_grads(r->m->params);
    pr_ddp_free(r->ddp);
    pr_zero_free(r->zero);
    pr_task_free(r->task);
    pr_optim_free(r->opt);
    pr_model_free(r->m);
    pr_ctx_free(r->ctx);
}

/* the task, then the config it completes (rec: the item count), checked */
static int open_task(run *r, pr_err *err)
{
    bool bad = pr_task_open(&r->task, &r->o, &r->cfg, err) || pr_task_fit_config(r->task, &r->cfg, err) ||
               pr_config_check(&r->cfg, err);
    return bad ? -1 : 0;
}

/* model, optimizer, context; from the latest checkpoint when resuming */
static int run_open(run *r, pr_device dev, bool resume, pr_err *err)
{
    r->m = pr_model_new(&r->cfg, PR_F32, dev);
    pr_model_init(r->m);
    pr_optim_opts oo = pr_train_optim_opts(&r->o);
    if (r->comm && r->o.zero) r->zero = pr_zero_new(r->comm, r->m->params);   /* state only for what this rank owns */
    r->opt = r->zero ? pr_zero_optim_new(r->zero, &oo) : pr_optim_new(r->m->params, &oo);
    if (r->comm) r->ddp = pr_ddp_new(r->comm, r->m->params, (size_t)(r->o.bucket_mb * 1e6));
    r->ctx = pr_ctx_new((uint64_t)r->o.seed);
    pr_ctx_set_precision(r->ctx, pr_train_precision(&r->o, dev));
    r->sched = (pr_schedule){.lr = r->o.lr, .min_lr = r->o.min_lr, .warmup = r->o.warmup, .total = r->o.steps,
                             .cosine = strcmp(r->o.schedule, "cosine") == 0};
    r->last_ckpt = -1;
    if (!resume) return pr_metrics_open(&r->metrics, r->dir, r->root, NULL, &r->o.hooks, err);
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
    return pr_metrics_open(&r->metrics, r->dir, r->root, &s, &r->o.hooks, err);
}

static int save_checkpoint(run *r, pr_err *err)
{
    pr_optim *full = r->opt;
    if (r->zero && pr_zero_gather_optim(r->zero, r->opt, &full, err)) return -1;
    int rc = 0;
    if (r->root && flush_metrics(r, true, err)) rc = -1;
    if (r->root && !rc) {
        pr_train_state s = {.step = r->step, .data_pos = r->step, .metrics_bytes = ftell(r->metrics),
                            .rng = r->ctx->rng};
        rc = pr_checkpoint_save(r->dir, r->m->params, full, &s, &r->o.hooks, err);
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
    st->grad_norm = pr_optim_grad_norm(r->ctx, r->opt);
    return 0;
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
    /* by the CUDA graph (which leaves weights and state alone on a non-finite loss or norm), or eagerly */
    bool eager = pr_train_graph_step(&r->graph, r->task, r->ctx, r->m, r->opt, r->step, &r->sched, r->o.clip,
                                     &st->loss, &st->grad_norm, &st->lr) != 0;
    if (eager && forward_backward(r, st, err)) return -1;
    if (!isfinite(st->loss) || !isfinite(st->grad_norm)) {
        locate_nonfinite(r, rng_before, bad, nbad);
        return -1;
    }
    if (!eager) return 0;
    st->lr = pr_schedule_lr(&r->sched, r->step);
    pr_optim_step(r->ctx, r->opt, st->lr, pr_clip_scale(st->grad_norm, r->o.clip));
    pr_step_reset(r->ctx);
    return r->zero ? pr_zero_share_updates(r->zero, err) : 0;
}

/* the metrics of the evaluation split; returns the seconds it took */
static double evaluate(run *r, pr_metrics *out)
{
    double t0 = pr_now_s();
    bool grad = pr_set_grad_enabled(r->ctx, false), training = r->ctx->training;
    r->ctx->training = false;
    memset(out, 0, sizeof *out);
    r->task->eval_graph = r->graph.wanted;   /* what the training step may capture, its forward may too */
    r->task->evaluate(r->task, r->ctx, r->m, out);
    r->ctx->training = training;
    pr_set_grad_enabled(r->ctx, grad);
    return pr_now_s() - t0;
}

static int log_eval(run *r, const pr_metrics *m, double seconds, pr_err *err)
{
    pr_metrics_write_eval(r->metrics, r->step, m, seconds);
    return flush_metrics(r, false, err);
}

static void progress(const run *r, const step_stats *st, double tok_s, double eta, bool tty, bool last)
{
    char line[200];
    snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  lr %.3g  grad %.3g  %.0f tok/s  ETA %.0fs",
             (long long)r->step, (long long)r->o.steps, st->loss, st->lr, st->grad_norm, tok_s, eta);
    fprintf(stderr, tty ? "\r%-90s%s" : "%s\n%s", line, tty && last ? "\n" : "");   /* a tty redraws one line */
}

static int train_loop(run *r, pr_train_result *res, pr_err *err)
{
    bool tty = isatty(STDERR_FILENO);
    double t0 = pr_now_s(), last_draw = 0;
    int64_t first = r->step;
    step_stats st = {0};
    while (r->step < r->o.steps) {
        char bad[256];
        if (train_step(r, &st, bad, sizeof bad, err)) {
            if (!bad[0]) return -1;
            if (tty) fputc('\n', stderr);
            fprintf(r->metrics, "{\"step\":%lld,\"nonfinite\":\"%s\"}\n", (long long)r->step + 1, bad);
            if (flush_metrics(r, false, err)) return -1;
            /* steps count from 1 in messages, as in the progress line */
            snprintf(res->nonfinite, sizeof res->nonfinite, "step %lld: %s", (long long)r->step + 1, bad);
            if (r->last_ckpt >= 0)
                return pr_errf(err, "non-finite value at step %lld: %s; the last good checkpoint is step %lld in %s",
                               (long long)r->step + 1, bad, (long long)r->last_ckpt, r->dir);
            return pr_errf(err, "non-finite value at step %lld: %s; no checkpoint was written before it",
                           (long long)r->step + 1, bad);
        }
        r->step++;
        if (r->o.hooks.after_step) r->o.hooks.after_step(r->o.hooks.user, r->comm ? r->comm->rank : 0, r->step);
        double el = pr_now_s() - t0, per = el / (double)(r->step - first);
        res->tokens_per_s = (double)r->task->tokens_per_batch / per;
        res->train_s = el;
        bool log = r->step % r->o.log_every == 0 || r->step == r->o.steps;
        pr_step_log line = {.step = r->step, .loss = st.loss, .lr = st.lr, .grad_norm = st.grad_norm, .time_s = el,
                            .tokens = r->step * r->task->tokens_per_batch, .tokens_per_s = res->tokens_per_s};
        if (log) pr_metrics_write_step(r->metrics, &line);
        if (log && flush_metrics(r, false, err)) return -1;  /* a reader (or a crash) sees every logged step */
        if (r->root && r->o.on_step) {   /* the progress line is rank 0's */
            r->o.on_step(r->o.on_step_user, r->step, r->o.steps);
        } else if (r->root && (tty ? el - last_draw > 0.2 || r->step == r->o.steps : log)) {
            progress(r, &st, res->tokens_per_s, per * (double)(r->o.steps - r->step), tty, r->step == r->o.steps);
            last_draw = el;
        }
        if (r->o.eval_every && r->step % r->o.eval_every == 0 && r->step < r->o.steps) {
            pr_metrics m;
            if (log_eval(r, &m, evaluate(r, &m), err)) return -1;   /* evaluate runs before log_eval reads m */
        }
        if (r->o.ckpt_every && r->step % r->o.ckpt_every == 0 && r->step < r->o.steps && save_checkpoint(r, err))
            return -1;
    }
    return 0;
}

int pr_train(const pr_config *c, const pr_train_opts *o, const char *run_dir, bool resume, pr_device dev,
             pr_train_result *res, pr_err *err)
{
    memset(res, 0, sizeof *res);
    run r = {.cfg = *c, .o = *o, .dir = run_dir, .comm = o->comm, .root = !o->comm || o->comm->rank == 0};
    int lock = -1;
    if (r.root && pr_run_claim(run_dir, resume, o->overwrite, &lock, err)) return -1;
    /* the precision as resolved, so config.json records it and a resume keeps it */
    snprintf(r.o.precision, sizeof r.o.precision, "%s", pr_precision_name(pr_train_precision(o, dev)));
    int rc = open_task(&r, err);
    if (!rc) rc = pr_train_fits(&r.cfg, &r.o, dev, err);   /* before the model is allocated */
    /* a resumed run keeps its manifest; its config records the new total of steps */
    if (!rc && r.root) rc = pr_run_write_start(run_dir, &r.cfg, &r.o, dev, !resume, err);
    r.graph = (pr_train_graph){.talk = r.root, .note = res->graph_note, .note_n = sizeof res->graph_note};
    r.graph.wanted = !rc && pr_train_graph_plan(&r.cfg, &r.o, dev, r.task->stage != NULL, r.graph.note, r.graph.note_n);
    if (!rc) rc = run_open(&r, dev, resume, err);
    if (!rc) rc = train_loop(&r, res, err);
    if (!rc && r.last_ckpt != r.step) rc = save_checkpoint(&r, err);
    if (!rc) {
        res->eval_s = evaluate(&r, &res->metrics);
        res->eval_graph = r.task->eval_graph_ran;
        rc = log_eval(&r, &res->metrics, res->eval_s, err);
    }
    res->steps = r.step;
    res->params = r.m ? pr_params_count(r.m->params) : 0;
    res->step_peak_bytes = r.ctx ? pr_arena_peak(r.ctx->step) : 0;
    run_free(&r);
    pr_run_unlock(lock, run_dir);
    return rc;
}

int pr_eval_run(const char *run_dir, pr_device dev, pr_config *c, pr_train_opts *o, pr_train_result *res,
                pr_err *err)
{
    memset(res, 0, sizeof *res);
    char path[4200];
    *c = pr_config_default();
    *o = pr_train_defaults();
    snprintf(path, sizeof path, "%s/config.json", run_dir);
    if (pr_run_config_load(c, o, path, err)) return -1;
    run r = {.cfg = *c, .o = *o, .dir = run_dir};
    int rc = open_task(&r, err);
    *c = r.cfg;
    int64_t step = 0;
    if (!rc) rc = pr_checkpoint_latest(run_dir, &step, err);
    if (!rc) {
        r.m = pr_model_new(c, PR_F32, dev);
        r.ctx = pr_ctx_new((uint64_t)o->seed);
        pr_ctx_set_precision(r.ctx, pr_train_precision(o, dev));   /* as the run trained */
        r.graph.wanted = pr_train_graph_plan(c, o, dev, r.task->stage != NULL, NULL, 0);   /* the forward's graph */
        rc = pr_checkpoint_load(run_dir, step, r.m->params, NULL, NULL, err);
    }
    if (!rc) {
        res->eval_s = evaluate(&r, &res->metrics);
        res->tokens_per_s = (double)r.task->tokens_per_batch * (double)o->eval_batches / res->eval_s;
    }
    res->steps = step;
    res->params = r.m ? pr_params_count(r.m->params) : 0;
    run_free(&r);
    return rc;
}
