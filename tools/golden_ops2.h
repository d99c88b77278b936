/* tools/golden_ops2.h: what golden-check's checks share (loading a file's
 * inputs, comparing with its references, seeding the backward, catching a
 * check's fatal errors) and the per-op checkers of the fused ops of
 * ops2.safetensors (attention, selective_scan, ...). golden_check.c runs the
 * recurrences with these helpers, then every entry of pr_golden_ops whose
 * tensors are in the file. */
#ifndef PR_GOLDEN_OPS2_H
#define PR_GOLDEN_OPS2_H

#include <stdbool.h>
#include <stddef.h>

#include "autograd/autograd.h"

/* one check: reads "<op>.<name>" tensors, keeps the worst relative error */
typedef struct {
    const pr_safetensors *st;
    const char *op;
    pr_ctx *ctx;
    pr_device dev;
    pr_dtype dt;
    bool verbose;
    const char *form;   /* the form run, for --verbose; NULL for an op of one form */
    int forms, chunk;   /* the recurrences: bit 0 per-token, bit 1 chunked form; its chunk */
    double worst;
    int64_t compared;   /* reference elements compared: a check of none has checked nothing */
} pr_golden_run;

typedef struct {
    const char *name;
    void (*fn)(pr_golden_run *g);   /* forward, backward, compare */
} pr_golden_op;

extern const pr_golden_op pr_golden_ops[];
extern const int pr_golden_n_ops;

/* true when the file holds a tensor named "<name>.*" */
bool pr_golden_present(const pr_safetensors *st, const char *name);
/* the file's "<op>.<name>"; NULL if absent */
pr_tensor *pr_golden_ref(const pr_golden_run *g, const char *name);
/* in[i] = the file's names[i] on the run's device and dtype, requiring
 * grad (NULL if absent), for i < n */
void pr_golden_inputs(const pr_golden_run *g, const char *const *names, int n, pr_tensor **in);
/* compares every out[i] with the file's outs[i] (error max|got - ref| /
 * max|ref|, the worst kept in g->worst; a missing reference is fatal), runs the backward of
 * sum_i(out[i] * the file's d<outs[i]>), then compares the grad of every
 * input present with the file's d<ins[i]> */
void pr_golden_compare_all(pr_golden_run *g, pr_tensor *const *out, const char *const *outs, int n_out,
                           pr_tensor *const *in, const char *const *ins, int n_in);
/* run check(g) on g->op; returns its worst error (inf after a fatal error,
 * whose message goes to why) */
double pr_golden_try(pr_golden_run *g, void (*check)(pr_golden_run *g), char *why, size_t why_n);

#endif
