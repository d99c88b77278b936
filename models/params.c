/* models/params.c: the parameter registry: paths, keyed init, counts, grad
 * norms, copies and safetensors checkpoints.
 *
 * Init draws element i of the parameter at `path` from Philox with key = seed
 * and stream = FNV-1a(path), so its values depend on (seed, path, shape) and
 * never on which other parameters exist or in what order they were built. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"

pr_params *pr_params_new(pr_dtype dt, pr_device dev)
{
    pr_params *r = calloc(1, sizeof *r);
    PR_CHECK(r, "params: out of host memory");
    r->arena = pr_arena_new("params", 0);
    r->dtype = dt;
    r->device = dev;
    return r;
}

void pr_params_free(pr_params *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) free(r->p[i].path);
    free(r->p);
    pr_arena_free(r->arena);
    free(r);
}

void pr_params_push(pr_params *r, const char *fmt, ...)
{
    PR_CHECK(r->depth < 16, "params: path nested deeper than 16 at '%s'", r->prefix);
    size_t len = strlen(r->prefix);
    r->mark[r->depth++] = (int)len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->prefix + len, sizeof r->prefix - len, fmt, ap);
    va_end(ap);
    PR_CHECK(n > 0 && len + (size_t)n + 1 < sizeof r->prefix, "params: path too long at '%s'", r->prefix);
    strcat(r->prefix, ".");
}

void pr_params_pop(pr_params *r)
{
    PR_ASSERT(r->depth > 0);
    r->prefix[r->mark[--r->depth]] = '\0';
}

const pr_param *pr_params_find(const pr_params *r, const char *path)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->p[i].path, path) == 0) return &r->p[i];
    return NULL;
}

/* a parameter's header with no data (pr_model_shapes): its size without its bytes */
static pr_tensor *shape_only(pr_params *r, int ndim, const int64_t *shape)
{
    PR_CHECK(ndim >= 0 && ndim <= PR_MAX_DIMS, "params: %d dims", ndim);
    pr_tensor *t = pr_arena_alloc(r->arena, sizeof *t);
    *t = (pr_tensor){.dtype = r->dtype, .device = r->device, .ndim = ndim, .numel = 1, .tape_pos = -1,
                     .arena = r->arena};
    for (int i = 0; i < ndim; i++) {
        PR_CHECK(shape[i] >= 0 && (shape[i] == 0 || t->numel <= INT64_MAX / shape[i]), "params: a shape overflows");
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    return t;
}

pr_tensor *pr_param_new(pr_params *r, const char *name, pr_init init, bool decay, int ndim, const int64_t *shape)
{
    char full[320];
    int len = snprintf(full, sizeof full, "%s%s", r->prefix, name);
    PR_CHECK(len > 0 && (size_t)len < sizeof full, "params: path '%s%s' too long", r->prefix, name);
    PR_CHECK(!pr_params_find(r, full), "params: '%s' registered twice", full);
    char *path = strdup(full);
    PR_CHECK(path, "params: out of host memory");
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 32;
        r->p = realloc(r->p, sizeof *r->p * (size_t)r->cap);
        PR_CHECK(r->p, "params: out of host memory");
    }
    pr_tensor *t = r->shapes_only ? shape_only(r, ndim, shape) : pr_zeros(r->arena, r->dtype, r->device, ndim, shape);
    t->name = path;
    pr_requires_grad_(t, true);
    r->p[r->n++] = (pr_param){.path = path, .t = t, .init = init, .decay = decay};
    return t;
}

static uint32_t path_stream(const char *path)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *s = (const unsigned char *)path; *s; s++) h = (h ^ *s) * 16777619u;
    return h;
}

static double draw(const pr_init *in, uint64_t seed, uint32_t stream, int64_t i)
{
    switch (in->kind) {
    case PR_INIT_NORMAL: return in->a * pr_philox_normal(seed, stream, (uint64_t)i);
    case PR_INIT_UNIFORM: return in->a + (in->b - in->a) * pr_philox_uniform(seed, stream, (uint64_t)i);
    case PR_INIT_CONST: return in->a;
    case PR_INIT_LOG_UNIFORM: {
        /* 1 - u keeps the argument > 0 when a = 0 (u is in [0,1)) */
        double u = 1.0 - pr_philox_uniform(seed, stream, (uint64_t)i);
        return log(in->a + (in->b - in->a) * u);
    }
    case PR_INIT_DT_BIAS: {
        double u = pr_philox_uniform(seed, stream, (uint64_t)i);
        double dt = exp(log(in->a) + u * (log(in->b) - log(in->a)));
        if (dt < 1e-4) dt = 1e-4;
        return dt + log(-expm1(-dt));   /* softplus(result) == dt */
    }
    case PR_INIT_S4D_REAL: return log(1.0 + (double)(i % (int64_t)in->a));
    }
    pr_fatal("params: unknown init kind %d", (int)in->kind);
}

void pr_param_init_one(const pr_param *p, uint64_t seed)
{
    pr_arena *tmp = pr_arena_new("params-init", 0);
    pr_tensor *h = pr_empty(tmp, PR_F64, PR_CPU, p->t->ndim, p->t->shape);
    double *v = h->data;
    uint32_t stream = path_stream(p->path);
    for (int64_t i = 0; i < h->numel; i++) v[i] = draw(&p->init, seed, stream, i);
    pr_copy_(p->t, h);
    pr_arena_free(tmp);
}

void pr_params_init(pr_params *r, uint64_t seed)
{
    for (int i = 0; i < r->n; i++) pr_param_init_one(&r->p[i], seed);
}

int64_t pr_params_count(const pr_params *r)
{
    int64_t n = 0;
    for (int i = 0; i < r->n; i++) n += r->p[i].t->numel;
    return n;
}

double pr_params_grad_norm(const pr_params *r)
{
    double s = 0;
    for (int i = 0; i < r->n; i++)
        if (r->p[i].t->grad) {
            double g = pr_norm2(r->p[i].t->grad);
            s += g * g;
        }
    return sqrt(s);
}

void pr_params_zero_grads(const pr_params *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->p[i].t->grad) pr_zero_(r->p[i].t->grad);
}

void pr_params_release_grads(const pr_params *r)
{
    for (int i = 0; i < r->n; i++) r->p[i].t->grad = NULL;
}

pr_params *pr_params_copy(const pr_params *r, pr_dtype dt, pr_device dev)
{
    pr_params *c = pr_params_new(dt, dev);
    for (int i = 0; i < r->n; i++) {
        const pr_param *p = &r->p[i];
        pr_tensor *t = pr_param_new(c, p->path, p->init, p->decay, p->t->ndim, p->t->shape);
        pr_copy_(t, p->t);
    }
    return c;
}

int pr_params_save(const pr_params *r, const char *file, pr_err *err)
{
    const char **names = malloc(sizeof *names * (size_t)(r->n + 1));
    const pr_tensor **ts = malloc(sizeof *ts * (size_t)(r->n + 1));
    PR_CHECK(names && ts, "params: out of host memory");
    for (int i = 0; i < r->n; i++) names[i] = r->p[i].path, ts[i] = r->p[i].t;
    int rc = pr_safetensors_write(file, r->n, names, ts, 0, NULL, NULL, err);
    free(names);
    free(ts);
    return rc;
}

/* a file holding more than the model (another depth, an untied head): the
 * first tensor no parameter takes is named, so a checkpoint never half loads */
static int name_unused(const pr_params *r, const pr_safetensors *st, const char *file, pr_err *err)
{
    for (int k = 0; k < st->n; k++) {
        int i = 0;
        while (i < r->n && strcmp(r->p[i].path, st->names[k]) != 0) i++;
        if (i == r->n)
            return pr_errf(err, "%s: tensor '%s' is not a parameter of this model (%d tensors in the file, %d "
                                "parameters): a checkpoint of another config", file, st->names[k], st->n, r->n);
    }
    return pr_errf(err, "%s: %d tensors for %d parameters (a name repeated)", file, st->n, r->n);
}

int pr_params_load(pr_params *r, const char *file, pr_err *err)
{
    pr_arena *tmp = pr_arena_new("params-load", 0);
    pr_safetensors st = {0};
    int rc = pr_safetensors_read(file, tmp, &st, err);
    for (int i = 0; rc == 0 && i < r->n; i++) {
        const pr_param *p = &r->p[i];
        pr_tensor *t = pr_safetensors_get(&st, p->path);
        char want[64], got[64];
        if (!t) rc = pr_errf(err, "%s: no tensor '%s'", file, p->path);
        else if (!pr_same_shape(t, p->t))
            rc = pr_errf(err, "%s: tensor '%s' is %s, the model needs %s", file, p->path,
                         pr_shape_str(t, got, sizeof got), pr_shape_str(p->t, want, sizeof want));
        else if (!pr_dtype_is_float(t->dtype) && t->dtype != PR_BF16)
            rc = pr_errf(err, "%s: tensor '%s' has dtype %s, not a float", file, p->path, pr_dtype_name(t->dtype));
        else pr_copy_(p->t, t);
    }
    if (rc == 0 && st.n != r->n) rc = name_unused(r, &st, file, err);
    pr_arena_free(tmp);
    return rc;
}
