/* ops/cpu_kit.h: the double-precision host helpers that the CPU reference
 * paths of the fused ops (attention, selective_scan, the TTT family through
 * ops/ttt_kit.h) share: inputs promoted to double, results stored back in
 * the tensor's dtype (grads added), zeroed scratch, a dot product and the
 * input and shape checks.
 * Everything is static inline: a header of helpers, not an API.
 */
#ifndef PR_CPU_KIT_H
#define PR_CPU_KIT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

/* t's data as double: the tensor itself for f64, else a promoted copy (owned
 * flag set); NULL stays NULL */
static inline double *kit_as_f64(const pr_tensor *t, bool *owned)
{
    *owned = false;
    if (!t) return NULL;
    if (t->dtype == PR_F64) return (double *)t->data;
    double *p = malloc((size_t)t->numel * sizeof(double));
    PR_CHECK(p, "out of host memory (%lld doubles)", (long long)t->numel);
    pr_to_host_f64(t, p);
    *owned = true;
    return p;
}

/* dst (f32, f64 or bf16, host) op= src; acc: += else =; bf16 rounds the sum once */
static inline void kit_store(pr_tensor *dst, const double *src, bool acc)
{
    if (dst->dtype == PR_BF16) {
        for (int64_t i = 0; i < dst->numel; i++) pr_set(dst, i, (acc ? pr_get(dst, i) : 0.0) + src[i]);
        return;
    }
    PR_FLOAT_SWITCH(dst->dtype, F, {
        F *p = (F *)dst->data;
        for (int64_t i = 0; i < dst->numel; i++) p[i] = (F)((acc ? (double)p[i] : 0.0) + src[i]);
    });
}

static inline double *kit_zalloc(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    PR_CHECK(p, "out of host memory (%lld doubles)", (long long)n);
    return p;
}

/* the logistic function without overflow on either side */
static inline double kit_sigmoid(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }
/* log(1 + e^x), and x itself past 20 (where the two agree to double precision) */
static inline double kit_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
/* its derivative, sigmoid(x), and 1 past 20 as the function is x there */
static inline double kit_softplus_grad(double x) { return x > 20 ? 1 : kit_sigmoid(x); }

static inline double kit_dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

/* bufs[i] = the node's input i as double (NULL where absent), for i < count;
 * own[i] says whether bufs[i] is a copy that kit_free_owned frees */
static inline void kit_inputs_f64(const pr_node *n, int count, double **bufs, bool *own)
{
    for (int i = 0; i < count; i++) bufs[i] = kit_as_f64(n->in[i], &own[i]);
}

/* the same for the grads of the node's first count outputs */
static inline void kit_out_grads_f64(const pr_node *n, int count, double **bufs, bool *own)
{
    for (int i = 0; i < count; i++) bufs[i] = kit_as_f64(n->out[i]->grad, &own[i]);
}

static inline void kit_free_owned(double **bufs, const bool *own, int count)
{
    for (int i = 0; i < count; i++)
        if (own[i]) free(bufs[i]);
}

/* adds grads[i] to the grad of input i where it has one, for i < count, and
 * frees grads[i] */
static inline void kit_add_grads(pr_node *n, double **grads, int count)
{
    for (int i = 0; i < count; i++) {
        pr_tensor *gi = pr_in_grad(n, i);
        if (gi) kit_store(gi, grads[i], true);
        free(grads[i]);
    }
}

/* every input is float, of in[0]'s dtype and device; in[i] may be NULL only
 * where bit i of optional is set */
static inline void kit_check_inputs(const char *op, pr_tensor *const *in, const char *const *names, int count,
                                    unsigned optional)
{
    for (int i = 0; i < count; i++) {
        if (!in[i] && (optional >> i & 1u)) continue;
        PR_CHECK(in[i], "%s: %s is NULL", op, names[i]);
        pr_check_float(op, in[i], names[i]);
        pr_check_same_kind(op, in[0], in[i]);
    }
}

/* the inputs of an op that takes bf16 data: in[0] (q) is f32, f64 or bf16;
 * the inputs whose bit is set in data have its dtype, the others (states and
 * parameters) too, except f32 when q is bf16; all on q's device. in[i] may
 * be NULL only where bit i of optional is set. */
static inline void kit_check_inputs_bf16(const char *op, pr_tensor *const *in, const char *const *names, int count,
                                         unsigned optional, unsigned data, const char *f32_ones)
{
    PR_CHECK(in[0], "%s: %s is NULL", op, names[0]);
    const pr_dtype dt = in[0]->dtype, st = dt == PR_BF16 ? PR_F32 : dt;
    PR_CHECK(pr_dtype_has_grad(dt), "%s: %s has dtype %s; expected f32, f64 or bf16", op, names[0], pr_dtype_name(dt));
    for (int i = 1; i < count; i++) {
        if (!in[i] && (optional >> i & 1u)) continue;
        PR_CHECK(in[i], "%s: %s is NULL", op, names[i]);
        const pr_dtype want = data >> i & 1u ? dt : st;
        PR_CHECK(in[i]->dtype == want, "%s: dtype mismatch: %s is %s, expected %s (%s is %s%s%s%s)", op, names[i],
                 pr_dtype_name(in[i]->dtype), pr_dtype_name(want), names[0], pr_dtype_name(dt),
                 dt == PR_BF16 ? ": " : "", dt == PR_BF16 ? f32_ones : "", dt == PR_BF16 ? " stay f32" : "");
        PR_CHECK(in[i]->device == in[0]->device, "%s: %s is on %s, %s on %s", op, names[i],
                 pr_device_name(in[i]->device), names[0], pr_device_name(in[0]->device));
    }
}

/* fatal unless t has the given shape (a negative size matches any), naming op and argument */
static inline void kit_check_shape(const char *op, const pr_tensor *t, const char *arg, int ndim,
                                   const int64_t *shape)
{
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || t->shape[i] == shape[i];
    if (!ok) {
        char got[96], want[96] = "[";
        for (int i = 0; i < ndim; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), shape[i] < 0 ? "%sany" : "%s%lld", i ? "," : "",
                     (long long)shape[i]);
        strncat(want, "]", sizeof want - strlen(want) - 1);
        pr_fatal("%s: %s has shape %s; expected %s", op, arg, pr_shape_str(t, got, sizeof got), want);
    }
}

#endif
