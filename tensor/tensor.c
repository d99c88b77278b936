/* tensor/tensor.c: errors, dtypes, creation, copies, views, printing. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/tensor.h"

/* ---- errors ---------------------------------------------------------------- */

/* per thread: a grid's worker threads each catch their own cell's failure
 * (lab/grid_run.c), and one thread's message never overwrites another's */
static _Thread_local pr_error_handler error_handler;
static _Thread_local char last_error[1024];

void pr_set_error_handler(pr_error_handler h) { error_handler = h; }
const char *pr_last_error(void) { return last_error; }

void pr_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
#ifdef PRISM_HAVE_CUDA
    pr_cuda_on_fatal();   /* a hold on the CUDA layer's driver gate is let go */
#endif
    if (error_handler) error_handler(last_error);
    fprintf(stderr, "prism: %s\n", last_error);
    fflush(stderr);
    exit(1);
}

int pr_errf(pr_err *err, const char *fmt, ...)
{
    if (!err) return -1;
    /* through a copy: callers prefix context with pr_errf(err, "%s: %s", what, err->msg) */
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(err->msg, msg, sizeof msg);
    return -1;
}

double pr_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- dtypes and shapes ---------------------------------------------------------- */

size_t pr_dtype_size(pr_dtype dt)
{
    static const size_t sizes[PR_NDTYPES] = {4, 8, 2, 4, 8};
    PR_CHECK((unsigned)dt < PR_NDTYPES, "unknown dtype %d", (int)dt);
    return sizes[dt];
}

const char *pr_dtype_name(pr_dtype dt)
{
    static const char *names[PR_NDTYPES] = {"f32", "f64", "bf16", "i32", "i64"};
    return (unsigned)dt < PR_NDTYPES ? names[dt] : "?";
}

const char *pr_device_name(pr_device dev) { return dev == PR_CUDA ? "cuda" : "cpu"; }
bool pr_dtype_is_float(pr_dtype dt) { return dt == PR_F32 || dt == PR_F64; }
bool pr_dtype_has_grad(pr_dtype dt) { return pr_dtype_is_float(dt) || dt == PR_BF16; }
size_t pr_nbytes(const pr_tensor *t) { return (size_t)t->numel * pr_dtype_size(t->dtype); }

bool pr_same_shape(const pr_tensor *a, const pr_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *pr_shape_str(const pr_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* ---- creation --------------------------------------------------------------------- */

static pr_tensor *new_header(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape)
{
    PR_CHECK(ndim >= 0 && ndim <= PR_MAX_DIMS, "tensor: %d dims (at most %d)", ndim, PR_MAX_DIMS);
    pr_tensor *t = pr_arena_alloc(a, sizeof *t);
    t->dtype = dt;
    t->device = dev;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        PR_CHECK(shape[i] >= 0, "tensor: negative size %lld in dim %d", (long long)shape[i], i);
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    t->tape_pos = -1;
    t->arena = a;
    pr_dtype_size(dt); /* validates dt */
    return t;
}

pr_tensor *pr_empty(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape)
{
    pr_tensor *t = new_header(a, dt, dev, ndim, shape);
    size_t bytes = pr_nbytes(t);
    t->data = dev == PR_CPU ? pr_arena_alloc_uninit(a, bytes) : pr_arena_alloc_device(a, dev, bytes);
    return t;
}

pr_tensor *pr_zeros(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape)
{
    pr_tensor *t = pr_empty(a, dt, dev, ndim, shape);
    if (dev == PR_CPU) memset(t->data, 0, pr_nbytes(t));
    else pr_device_memset0(dev, t->data, pr_nbytes(t));
    return t;
}

pr_tensor *pr_full(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape, double value)
{
    pr_tensor *t = pr_empty(a, dt, dev, ndim, shape);
    pr_fill_(t, value);
    return t;
}

pr_tensor *pr_ones(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape)
{
    return pr_full(a, dt, dev, ndim, shape, 1.0);
}

pr_tensor *pr_arange(pr_arena *a, pr_dtype dt, pr_device dev, int64_t n)
{
    pr_tensor *h = pr_empty(a, dt, PR_CPU, 1, &n);
    for (int64_t i = 0; i < n; i++) pr_set(h, i, (double)i);
    return dev == PR_CPU ? h : pr_to(a, h, dt, dev);
}

pr_tensor *pr_empty_like(pr_arena *a, const pr_tensor *t)
{
    return pr_empty(a, t->dtype, t->device, t->ndim, t->shape);
}

pr_tensor *pr_zeros_like(pr_arena *a, const pr_tensor *t)
{
    return pr_zeros(a, t->dtype, t->device, t->ndim, t->shape);
}

pr_tensor *pr_from_host(pr_arena *a, pr_dtype dt, pr_device dev, int ndim, const int64_t *shape,
                        const void *host_data)
{
    pr_tensor *t = pr_empty(a, dt, dev, ndim, shape);
    pr_device_memcpy(t->data, dev, host_data, PR_CPU, pr_nbytes(t));
    return t;
}

/* ---- element access (host) ----------------------------------------------------------- */

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                           /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* v rounded to bf16 once (round to nearest, ties to even), not through an
 * f32 rounding first: when (float)v lands exactly on a bf16 tie, the f64
 * value says which side it came from, and a one-ulp nudge toward that side
 * makes f32_to_bf16 break the tie the way v itself would. */
static uint16_t f64_to_bf16(double v)
{
    const float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    if (!nan && (u & 0xffffu) == 0x8000u && (double)f != v) {
        u += fabs(v) > fabs((double)f) ? 1u : (uint32_t)-1;
        float g;
        memcpy(&g, &u, 4);
        return f32_to_bf16(g);
    }
    return f32_to_bf16(f);
}

double pr_get(const pr_tensor *t, int64_t i)
{
    PR_CHECK(t->device == PR_CPU, "pr_get: tensor is on %s, not the CPU", pr_device_name(t->device));
    switch (t->dtype) {
    case PR_F32: return ((const float *)t->data)[i];
    case PR_F64: return ((const double *)t->data)[i];
    case PR_BF16: return bf16_to_f32(((const uint16_t *)t->data)[i]);
    case PR_I32: return ((const int32_t *)t->data)[i];
    case PR_I64: return (double)((const int64_t *)t->data)[i];
    default: pr_fatal("pr_get: unknown dtype");
    }
}

void pr_set(pr_tensor *t, int64_t i, double v)
{
    PR_CHECK(t->device == PR_CPU, "pr_set: tensor is on %s, not the CPU", pr_device_name(t->device));
    switch (t->dtype) {
    case PR_F32: ((float *)t->data)[i] = (float)v; break;
    case PR_F64: ((double *)t->data)[i] = v; break;
    case PR_BF16: ((uint16_t *)t->data)[i] = f64_to_bf16(v); break;
    case PR_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    case PR_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    default: pr_fatal("pr_set: unknown dtype");
    }
}

/* ---- copies ----------------------------------------------------------------------------- */

/* dtype conversion on the host; integers convert exactly through int64.
 * f32 <-> f64 (the CPU ops' promotions to double and back) in plain loops. */
static void convert_host(void *dst, pr_dtype ddt, const void *src, pr_dtype sdt, int64_t n)
{
    if (sdt == PR_F32 && ddt == PR_F64) {
        const float *s = src;
        double *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i];
        return;
    }
    if (sdt == PR_F64 && ddt == PR_F32) {
        const double *s = src;
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
        return;
    }
    pr_tensor d = {.dtype = ddt, .device = PR_CPU, .data = dst};
    pr_tensor s = {.dtype = sdt, .device = PR_CPU, .data = (void *)src};
    bool ints = (ddt == PR_I64 || ddt == PR_I32) && (sdt == PR_I64 || sdt == PR_I32);
    for (int64_t i = 0; i < n; i++) {
        if (ints && ddt == PR_I64) ((int64_t *)dst)[i] = sdt == PR_I64 ? ((const int64_t *)src)[i] : ((const int32_t *)src)[i];
        else pr_set(&d, i, pr_get(&s, i));
    }
}

void pr_copy_(pr_tensor *dst, const pr_tensor *src)
{
    PR_CHECK(dst->numel == src->numel, "copy: %lld elements into %lld", (long long)src->numel,
             (long long)dst->numel);
    if (dst->dtype == src->dtype) {
        pr_device_memcpy(dst->data, dst->device, src->data, src->device, pr_nbytes(src));
        return;
    }
    if (dst->device == PR_CPU && src->device == PR_CPU) {
        convert_host(dst->data, dst->dtype, src->data, src->dtype, src->numel);
        return;
    }
    /* dtype change across devices: through the host */
    size_t sbytes = pr_nbytes(src), dbytes = pr_nbytes(dst);
    void *s = malloc(sbytes ? sbytes : 1), *d = malloc(dbytes ? dbytes : 1);
    PR_CHECK(s && d, "copy: out of host memory");
    pr_device_memcpy(s, PR_CPU, src->data, src->device, sbytes);
    convert_host(d, dst->dtype, s, src->dtype, src->numel);
    pr_device_memcpy(dst->data, dst->device, d, PR_CPU, dbytes);
    free(s);
    free(d);
}

pr_tensor *pr_to(pr_arena *a, const pr_tensor *t, pr_dtype dt, pr_device dev)
{
    pr_tensor *out = pr_empty(a, dt, dev, t->ndim, t->shape);
    pr_copy_(out, t);
    out->name = t->name;
    return out;
}

pr_tensor *pr_clone(pr_arena *a, const pr_tensor *t) { return pr_to(a, t, t->dtype, t->device); }

void pr_fill_(pr_tensor *t, double value)
{
    if (t->device == PR_CPU) {
        for (int64_t i = 0; i < t->numel; i++) pr_set(t, i, value);
        return;
    }
    size_t bytes = pr_nbytes(t);
    pr_tensor h = *t;
    h.device = PR_CPU;
    h.data = malloc(bytes ? bytes : 1);
    PR_CHECK(h.data, "fill: out of host memory");
    for (int64_t i = 0; i < t->numel; i++) pr_set(&h, i, value);
    pr_device_memcpy(t->data, t->device, h.data, PR_CPU, bytes);
    free(h.data);
}

void pr_zero_(pr_tensor *t) { pr_device_memset0(t->device, t->data, pr_nbytes(t)); }

void pr_to_host_f64(const pr_tensor *t, double *out)
{
    if (t->device == PR_CPU) {
        if (t->dtype == PR_F64) memcpy(out, t->data, pr_nbytes(t));
        else convert_host(out, PR_F64, t->data, t->dtype, t->numel);
        return;
    }
    void *h = malloc(pr_nbytes(t) ? pr_nbytes(t) : 1);
    PR_CHECK(h, "copy: out of host memory");
    pr_device_memcpy(h, PR_CPU, t->data, t->device, pr_nbytes(t));
    convert_host(out, PR_F64, h, t->dtype, t->numel);
    free(h);
}

double pr_item(const pr_tensor *t)
{
    PR_CHECK(t->numel == 1, "item: tensor has %lld elements, not 1", (long long)t->numel);
    double v;
    pr_to_host_f64(t, &v);
    return v;
}

/* ---- views ------------------------------------------------------------------------------- */

pr_tensor *pr_view(pr_arena *a, pr_tensor *t, int ndim, const int64_t *shape)
{
    int64_t dims[PR_MAX_DIMS], known = 1;
    int infer = -1;
    PR_CHECK(ndim >= 0 && ndim <= PR_MAX_DIMS, "view: %d dims (at most %d)", ndim, PR_MAX_DIMS);
    for (int i = 0; i < ndim; i++) {
        dims[i] = shape[i];
        if (shape[i] == -1) {
            PR_CHECK(infer < 0, "view: more than one -1 in the shape");
            infer = i;
        } else {
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        PR_CHECK(known > 0 && t->numel % known == 0, "view: cannot infer -1 for %lld elements",
                 (long long)t->numel);
        dims[infer] = t->numel / known;
        known *= dims[infer];
    }
    char buf[64];
    PR_CHECK(known == t->numel, "view: %lld elements cannot be viewed as %lld (tensor %s)",
             (long long)t->numel, (long long)known, pr_shape_str(t, buf, sizeof buf));
    pr_tensor *v = new_header(a, t->dtype, t->device, ndim, dims);
    v->data = t->data;
    v->name = t->name;
    return v;
}

pr_tensor *pr_view_rows(pr_arena *a, pr_tensor *t, int64_t start, int64_t len)
{
    PR_CHECK(t->ndim >= 1 && start >= 0 && len >= 0 && start + len <= t->shape[0],
             "view_rows: rows [%lld, %lld) out of range for dim 0 of size %lld", (long long)start,
             (long long)(start + len), (long long)(t->ndim ? t->shape[0] : 0));
    int64_t dims[PR_MAX_DIMS];
    memcpy(dims, t->shape, sizeof dims);
    dims[0] = len;
    pr_tensor *v = new_header(a, t->dtype, t->device, t->ndim, dims);
    int64_t row = t->shape[0] ? t->numel / t->shape[0] : 0;
    v->data = (char *)t->data + (size_t)(start * row) * pr_dtype_size(t->dtype);
    return v;
}

/* ---- printing ------------------------------------------------------------------------------ */

void pr_print(FILE *f, const pr_tensor *t, const char *name, int max_elems)
{
    char buf[96];
    if (max_elems <= 0) max_elems = 8;
    fprintf(f, "%s: %s %s %s", name ? name : (t->name ? t->name : "tensor"),
            pr_shape_str(t, buf, sizeof buf), pr_dtype_name(t->dtype), pr_device_name(t->device));
    int64_t n = t->numel < max_elems ? t->numel : max_elems;
    double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
    PR_CHECK(v, "print: out of host memory");
    pr_to_host_f64(t, v);
    fprintf(f, " [");
    for (int64_t i = 0; i < n; i++) fprintf(f, i ? ", %.6g" : "%.6g", v[i]);
    fprintf(f, t->numel > n ? ", ...]\n" : "]\n");
    free(v);
}
