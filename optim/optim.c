/* optim/optim.c: AdamW and SGD updates, clipping, schedules, state files.
 *
 * AdamW (decoupled decay, bias-corrected moments), per element, with
 * g = grad * grad_scale and t the update count after this step:
 *   p -= lr * wd * p                      (decayed parameters only)
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * SGD with momentum mu (torch's form; coupled decay):
 *   g += wd * p;  m = mu m + g;  p -= lr * m
 * The CPU works in double and rounds once on store. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

/* the most updates a state file may claim (2^53: still exact as a double) */
#define PR_OPTIM_MAX_T ((int64_t)1 << 53)

pr_optim_opts pr_optim_adamw_defaults(void)
{
    return (pr_optim_opts){.kind = PR_OPTIM_ADAMW, .weight_decay = 0.01, .beta1 = 0.9, .beta2 = 0.999,
                           .eps = 1e-8};
}

pr_optim *pr_optim_new(const pr_params *params, const pr_optim_opts *opts)
{
    return pr_optim_new_owned(params, opts, NULL);
}

pr_optim *pr_optim_new_owned(const pr_params *params, const pr_optim_opts *opts, const bool *owned)
{
    pr_optim *o = calloc(1, sizeof *o);
    PR_CHECK(o, "optim: out of host memory");
    o->opts = *opts;
    o->params = params;
    o->arena = pr_arena_new("optim", 0);
    o->m = calloc((size_t)params->n + 1, sizeof *o->m);
    o->v = calloc((size_t)params->n + 1, sizeof *o->v);
    PR_CHECK(o->m && o->v, "optim: out of host memory");
    for (int i = 0; i < params->n; i++) {
        const pr_tensor *p = params->p[i].t;
        PR_CHECK(pr_dtype_is_float(p->dtype), "optim: parameter %s is %s, not a float", params->p[i].path,
                 pr_dtype_name(p->dtype));
        if (owned && !owned[i]) continue;
        o->m[i] = pr_zeros_like(o->arena, p);
        if (opts->kind == PR_OPTIM_ADAMW) o->v[i] = pr_zeros_like(o->arena, p);
    }
    return o;
}

void pr_optim_free(pr_optim *o)
{
    if (!o) return;
#ifdef PRISM_HAVE_CUDA
    pr_optim_multi_free(o->multi);
#endif
    free(o->multi_grads);
    pr_arena_free(o->arena);
    free(o->m);
    free(o->v);
    free(o);
}

bool pr_optim_decays(const pr_optim *o, int i)
{
    return o->opts.weight_decay != 0 && (o->opts.decay_all || o->params->p[i].decay);
}

static void update_cpu(pr_tensor *p, const pr_tensor *g, pr_tensor *m, pr_tensor *v,
                       const pr_optim_update_args *a)
{
    for (int64_t i = 0; i < p->numel; i++) {
        double w = pr_get(p, i), gi = pr_get(g, i) * a->grad_scale, mi = pr_get(m, i);
        if (a->kind == 0) {
            double vi = pr_get(v, i);
            w -= a->lr * a->wd * w;
            mi = a->beta1 * mi + (1 - a->beta1) * gi;
            vi = a->beta2 * vi + (1 - a->beta2) * gi * gi;
            w -= a->lr * (mi / a->c1) / (sqrt(vi / a->c2) + a->eps);
            pr_set(v, i, vi);
        } else {
            gi += a->wd * w;
            mi = a->momentum * mi + gi;
            w -= a->lr * mi;
        }
        pr_set(m, i, mi);
        pr_set(p, i, w);
    }
}

static pr_optim_update_args update_args(const pr_optim *o, double lr, double grad_scale)
{
    return (pr_optim_update_args){
        .kind = o->opts.kind == PR_OPTIM_ADAMW ? 0 : 1, .lr = lr, .beta1 = o->opts.beta1,
        .beta2 = o->opts.beta2, .eps = o->opts.eps, .momentum = o->opts.momentum, .grad_scale = grad_scale,
        .c1 = 1 - pow(o->opts.beta1, (double)o->t), .c2 = 1 - pow(o->opts.beta2, (double)o->t),
    };
}

#ifdef PRISM_HAVE_CUDA
/* whether the parameters live on CUDA (a registry lives on one device) */
static bool on_cuda(const pr_optim *o)
{
    return o->params->n > 0 && o->params->p[0].t->device == PR_CUDA;
}

/* the multi-tensor tables for the grads the parameters hold now: built again
 * only when that set changed (the first step, or a parameter a step's loss
 * did not reach), so a steady loop uploads nothing */
static pr_optim_multi *multi_tables(pr_optim *o)
{
    int n = o->params->n;
    bool same = o->multi && o->n_multi_grads == n;
    for (int i = 0; same && i < n; i++) {
        const pr_tensor *g = o->params->p[i].t->grad;
        same = o->multi_grads[i] == (g ? g->data : NULL);
    }
    if (same) return o->multi;
    PR_CHECK(!o->multi_captured, "optim: the parameters holding grads changed after the step was captured as a CUDA "
             "graph (its replays read the old tables); run with train.cuda_graph=off");
    pr_optim_multi_free(o->multi);
    free(o->multi_grads);
    o->multi_grads = calloc((size_t)n + 1, sizeof *o->multi_grads);
    pr_optim_slice *up = calloc((size_t)n + 1, sizeof *up);
    const float **grads = calloc((size_t)n + 1, sizeof *grads);
    int64_t *sizes = calloc((size_t)n + 1, sizeof *sizes);
    PR_CHECK(o->multi_grads && up && grads && sizes, "optim: out of host memory");
    int n_up = 0, n_norm = 0;
    for (int i = 0; i < n; i++) {
        pr_tensor *p = o->params->p[i].t;
        if (!p->grad) continue;
        PR_CHECK(p->dtype == PR_F32 && p->grad->dtype == PR_F32 && p->device == PR_CUDA,
                 "optim: CUDA parameters and grads must be f32 on CUDA (%s is %s, its grad %s)",
                 o->params->p[i].path, pr_dtype_name(p->dtype), pr_dtype_name(p->grad->dtype));
        o->multi_grads[i] = p->grad->data;
        grads[n_norm] = p->grad->data, sizes[n_norm++] = p->numel;
        if (!o->m[i]) continue;   /* another rank's to update (ZeRO-1) */
        up[n_up++] = (pr_optim_slice){.p = p->data, .g = p->grad->data, .m = o->m[i]->data,
                                      .v = o->v[i] ? o->v[i]->data : NULL, .n = p->numel,
                                      .wd = pr_optim_decays(o, i) ? o->opts.weight_decay : 0.0};
    }
    o->n_multi_grads = n;
    o->multi = pr_optim_multi_new(up, n_up, grads, sizes, n_norm);
    free(up);
    free(grads);
    free(sizes);
    return o->multi;
}

static void step_multi(pr_ctx *ctx, pr_optim *o, const pr_optim_update_args *a)
{
    pr_optim_multi *mt = multi_tables(o);
    pr_optim_step_scalars s = {.lr = a->lr, .c1 = a->c1, .c2 = a->c2, .grad_scale = a->grad_scale};
    pr_optim_multi_set_scalars(mt, &s);
    pr_optim_multi_update(ctx, mt, a);
}
#endif

static void step_per_param(pr_ctx *ctx, pr_optim *o, pr_optim_update_args a)
{
    for (int i = 0; i < o->params->n; i++) {
        pr_tensor *p = o->params->p[i].t;
        if (!p->grad) continue;  /* not reached by this step's loss: left alone, as torch does */
        if (!o->m[i]) continue;  /* another rank's to update (ZeRO-1) */
        a.wd = pr_optim_decays(o, i) ? o->opts.weight_decay : 0.0;
        if (p->device == PR_CPU) {
            update_cpu(p, p->grad, o->m[i], o->v[i], &a);
            continue;
        }
        PR_CHECK(p->dtype == PR_F32, "optim: CUDA parameters must be f32 (%s is %s)", o->params->p[i].path,
                 pr_dtype_name(p->dtype));
#ifdef PRISM_HAVE_CUDA
        pr_optim_update_cuda(ctx, p->data, p->grad->data, o->m[i]->data, o->v[i] ? o->v[i]->data : NULL,
                             p->numel, &a);
#else
        (void)ctx;
        pr_fatal("optim: %s is on CUDA in a build without CUDA", o->params->p[i].path);
#endif
    }
}

void pr_optim_step(pr_ctx *ctx, pr_optim *o, double lr, double grad_scale)
{
    o->t++;
    pr_autocast_forget(ctx);   /* bf16 copies of the parameters are stale from here on */
    pr_optim_update_args a = update_args(o, lr, grad_scale);
#ifdef PRISM_HAVE_CUDA
    if (on_cuda(o) && !o->per_param_cuda) {
        step_multi(ctx, o, &a);
        return;
    }
#endif
    step_per_param(ctx, o, a);
}

#ifdef PRISM_HAVE_CUDA
void pr_optim_graph_prepare(pr_optim *o, double lr, double max_norm)
{
    PR_CHECK(on_cuda(o) && !o->per_param_cuda, "optim: a captured step needs the multi-tensor CUDA update");
    o->t++;   /* the scalars of the update this step makes */
    pr_optim_update_args a = update_args(o, lr, 1.0);
    o->t--;   /* counted by pr_optim_graph_result once the replay says it ran */
    pr_optim_step_scalars s = {.lr = a.lr, .c1 = a.c1, .c2 = a.c2, .grad_scale = 1.0, .max_norm = max_norm,
                               .clip_on_device = 1};
    pr_optim_multi_set_scalars(multi_tables(o), &s);
}

void pr_optim_graph_record(pr_ctx *ctx, pr_optim *o, const pr_tensor *loss)
{
    PR_CHECK(loss->device == PR_CUDA && (loss->dtype == PR_F32 || loss->dtype == PR_BF16) && loss->numel == 1,
             "optim: a captured step's loss must be one f32 or bf16 value on CUDA");
    pr_autocast_forget(ctx);
    pr_optim_multi *before = o->multi;
    pr_optim_multi *mt = multi_tables(o);
    /* pr_optim_graph_prepare built the tables before the capture and wrote this step's
     * scalars into them; tables built inside the capture would be re-uploaded by every
     * replay with the capture's scalars */
    PR_CHECK(mt == before, "optim: the parameters holding grads changed while the step was being captured");
    o->multi_captured = true;
    pr_optim_multi_keep_loss(ctx, mt, loss->data, loss->dtype == PR_BF16);
    pr_optim_multi_grad_norm(ctx, mt);
    pr_optim_update_args a = update_args(o, 0, 1.0);   /* the constants; the per-step values are on the device */
    pr_optim_multi_update(ctx, mt, &a);
}

void pr_optim_graph_result(pr_optim *o, double *loss, double *norm)
{
    pr_optim_multi_read(o->multi, loss, norm);
    if (isfinite(*loss) && isfinite(*norm)) o->t++;
}
#else
void pr_optim_graph_prepare(pr_optim *o, double lr, double max_norm)
{
    (void)o, (void)lr, (void)max_norm;
    pr_fatal("optim: a captured step needs CUDA (this prism was built without it)");
}
void pr_optim_graph_record(pr_ctx *ctx, pr_optim *o, const pr_tensor *loss) { (void)ctx, (void)o, (void)loss; }
void pr_optim_graph_result(pr_optim *o, double *loss, double *norm) { (void)o, *loss = *norm = NAN; }
#endif

double pr_optim_grad_norm(pr_ctx *ctx, pr_optim *o)
{
#ifdef PRISM_HAVE_CUDA
    if (on_cuda(o)) {
        pr_optim_multi *mt = multi_tables(o);
        pr_optim_multi_grad_norm(ctx, mt);
        return pr_optim_multi_read_norm(mt);
    }
#endif
    (void)ctx;
    return pr_params_grad_norm(o->params);
}

/* ---- state files ------------------------------------------------------------ */
static const char *state_suffix(const pr_optim *o, int which)
{
    if (o->opts.kind == PR_OPTIM_SGD) return ".momentum";
    return which == 0 ? ".exp_avg" : ".exp_avg_sq";
}

static int n_slots(const pr_optim *o) { return o->opts.kind == PR_OPTIM_ADAMW ? 2 : 1; }

int pr_optim_save(const pr_optim *o, const char *file, int n_meta, const char *const *keys,
                  const char *const *values, pr_err *err)
{
    int n = o->params->n * n_slots(o), k = 0;
    for (int i = 0; i < o->params->n; i++)
        PR_CHECK(o->m[i], "optim save: %s has no state here (a ZeRO-1 shard: gather it first)", o->params->p[i].path);
    char **names = calloc((size_t)n + 1, sizeof *names);
    const pr_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    const char **mk = calloc((size_t)n_meta + 1, sizeof *mk), **mv = calloc((size_t)n_meta + 1, sizeof *mv);
    PR_CHECK(names && ts && mk && mv, "optim: out of host memory");
    for (int i = 0; i < o->params->n; i++)
        for (int s = 0; s < n_slots(o); s++) {
            size_t len = strlen(o->params->p[i].path) + 16;
            names[k] = malloc(len);
            PR_CHECK(names[k], "optim: out of host memory");
            snprintf(names[k], len, "%s%s", o->params->p[i].path, state_suffix(o, s));
            ts[k++] = s == 0 ? o->m[i] : o->v[i];
        }
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)o->t);
    mk[0] = "optim.t";
    mv[0] = t;
    for (int i = 0; i < n_meta; i++) mk[i + 1] = keys[i], mv[i + 1] = values[i];
    int rc = pr_safetensors_write(file, n, (const char *const *)names, ts, n_meta + 1, mk, mv, err);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(ts);
    free(mk);
    free(mv);
    return rc;
}

int pr_optim_restore(pr_optim *o, const pr_safetensors *st, const char *file, pr_err *err)
{
    const char *t = pr_safetensors_meta(st, "optim.t");
    if (!t) return pr_errf(err, "%s: no optim.t in the metadata (not an optimizer state file)", file);
    /* the bias corrections take t + 1 steps on: a count far below INT64_MAX */
    char *end;
    errno = 0;
    long long step = strtoll(t, &end, 10);
    if (t[0] < '0' || t[0] > '9' || *end || errno || step > PR_OPTIM_MAX_T)
        return pr_errf(err, "%s: optim.t '%s' is not an update count from 0 to %lld", file, t,
                       (long long)PR_OPTIM_MAX_T);
    for (int i = 0; i < o->params->n; i++)
        for (int s = 0; s < n_slots(o) && o->m[i]; s++) {   /* a ZeRO-1 shard takes its own part */
            char name[600];
            snprintf(name, sizeof name, "%s%s", o->params->p[i].path, state_suffix(o, s));
            const pr_tensor *src = pr_safetensors_get(st, name);
            pr_tensor *dst = s == 0 ? o->m[i] : o->v[i];
            if (!src) return pr_errf(err, "%s: tensor %s missing (another optimizer or model?)", file, name);
            if (src->numel != dst->numel || src->dtype != dst->dtype)
                return pr_errf(err, "%s: tensor %s has %lld %s elements, the model wants %lld %s", file, name,
                               (long long)src->numel, pr_dtype_name(src->dtype), (long long)dst->numel,
                               pr_dtype_name(dst->dtype));
            pr_copy_(dst, src);
        }
    o->t = step;
    return 0;
}

/* ---- clipping and schedules -------------------------------------------------- */
double pr_clip_scale(double grad_norm, double max_norm)
{
    if (max_norm <= 0 || grad_norm <= max_norm) return 1.0;
    return max_norm / (grad_norm + 1e-6);
}

double pr_schedule_lr(const pr_schedule *s, int64_t step)
{
    if (step < s->warmup) return s->lr * (double)(step + 1) / (double)s->warmup;
    if (!s->cosine || s->total <= s->warmup) return s->lr;
    double progress = (double)(step - s->warmup) / (double)(s->total - s->warmup);
    if (progress > 1) progress = 1;
    return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1 + cos(M_PI * progress));
}
