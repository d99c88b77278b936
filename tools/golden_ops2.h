/* tools/golden_ops2.h: golden-check's per-op checkers for the fused ops of
 * ops2.safetensors (attention, selective_scan, ...). golden_check.c runs
 * every entry of pr_golden_ops whose tensors are in the file. */
#ifndef PR_GOLDEN_OPS2_H
#define PR_GOLDEN_OPS2_H

#include <stdbool.h>
#include <stddef.h>

#include "autograd/autograd.h"

/* one op's check: reads "<op>.<name>" tensors, keeps the worst relative error */
typedef struct {
    const pr_safetensors *st;
    const char *op;
    pr_ctx *ctx;
    pr_device dev;
    pr_dtype dt;
    bool verbose;
    double worst;
} pr_golden_run;

typedef struct {
    const char *name;
    void (*fn)(pr_golden_run *g);   /* forward, backward, compare */
} pr_golden_op;

extern const pr_golden_op pr_golden_ops[];
extern const int pr_golden_n_ops;

/* true when the file holds a tensor named "<name>.*" */
bool pr_golden_present(const pr_safetensors *st, const char *name);
/* run one checker; returns its worst error (inf after a fatal error, whose
 * message goes to why) */
double pr_golden_run_op(const pr_golden_op *op, const pr_safetensors *st, pr_ctx *ctx, pr_device dev, pr_dtype dt,
                        bool verbose, char *why, size_t why_n);

#endif
