/* autograd/profile.h: where a step's time goes, op by op.
 *
 * With ctx->profile set, pr_op_apply and pr_backward wait for the device
 * before and after every op and add the wall time to an entry keyed by the
 * op's name, the part of the model that ran it (the scope without its layer
 * number: "layers.3.mixer" counts as "mixer") and the pass. The waits
 * serialise the GPU, so a profiled step is slower than a timed one; the
 * shares are what it is for. pr_profile_time adds anything else (the
 * optimizer) under a name of its own. */
#ifndef PR_PROFILE_H
#define PR_PROFILE_H

#include <stdio.h>

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PR_PROFILE_MAX 256

typedef struct {
    char op[40], where[40];
    int backward;
    double seconds;
    long calls;
} pr_profile_entry;

struct pr_profile {
    pr_profile_entry e[PR_PROFILE_MAX];
    int n, steps;        /* steps: how many steps were added (the table shows per-step ms) */
};

double pr_profile_clock(pr_device dev);   /* device idle, then seconds on a monotonic clock */
void pr_profile_time(pr_profile *p, const char *op, const char *scope, int backward, double seconds);
/* the table, heaviest first: ms per step and share of `step_s`, the wall
 * time of one profiled step (0: shares of the ops' total) */
void pr_profile_print(const pr_profile *p, double step_s, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
