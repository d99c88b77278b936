/* tools/golden_ops2.h: `prism golden-check` for the ops of ops2.safetensors
 * (attention, selective_scan, ttt_mlp, titans): one checker per op. A
 * checker runs its op forward and backward on the file's inputs (the
 * backward seeded with the file's d<output> tensors), compares every output
 * and input grad with the file's, puts the worst error (max|got - ref| /
 * max|ref|; inf on a fatal error, whose message goes to why) in *max_rel_err,
 * and returns 1 when it is within o->tol, else 0. */
#ifndef PR_GOLDEN_OPS2_H
#define PR_GOLDEN_OPS2_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/ops.h"

typedef struct {
    pr_device dev;
    pr_dtype dt;
    bool tf32;      /* CUDA: ctx->matmul_tf32 = 1 */
    bool verbose;   /* print every tensor's error */
    double tol;
} golden_ops2_opts;

typedef int (*golden_ops2_fn)(const pr_safetensors *st, const golden_ops2_opts *o, double *max_rel_err, char *why,
                              size_t why_n);

int golden_check_ttt_mlp(const pr_safetensors *st, const golden_ops2_opts *o, double *max_rel_err, char *why,
                         size_t why_n);
int golden_check_titans(const pr_safetensors *st, const golden_ops2_opts *o, double *max_rel_err, char *why,
                        size_t why_n);

/* every op of the table whose <op>.o tensor is in st: prints
 * '<op> ok|FAIL max_rel_err=<e>' and counts it */
void golden_check_ops2(const pr_safetensors *st, const golden_ops2_opts *o, int *passed, int *failed);

#endif
