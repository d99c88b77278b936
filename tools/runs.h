/* tools/runs.h: a run directory's metrics.jsonl read back as curves, for
 * `prism plot` and the report pages of ablate and compare.
 *
 * The trainer writes a line per logged step,
 *   {"step":10,"loss":0.69,"lr":0.001,"grad_norm":0.4,"tokens":5120,"tokens_per_s":812.5,"time_s":6.3}
 * and a line per evaluation, {"step":100,"eval":{"acc":0.51,"loss":0.69}}.
 * Each numeric key of a step line is a training curve (loss, lr, ...), each
 * key of an eval object an evaluation curve (acc, loss, bpb, ...); a null
 * (a non-finite value) is a NAN point, which breaks the line. tokens and
 * time_s are the x axes (pr_run_x), not curves. */
#ifndef PR_RUNS_H
#define PR_RUNS_H

#include <stdbool.h>

#include "tensor/tensor.h"

typedef struct {
    char name[48];
    bool eval;              /* from an "eval" object */
    int n, cap;
    double *step, *value;   /* n points in file order */
} pr_curve;

typedef enum { PR_X_STEP, PR_X_TOKENS, PR_X_TIME } pr_x_kind;

typedef struct {
    char dir[1024];
    int n_curves, cap;
    pr_curve *curves;
    /* the clock of the step lines: step -> tokens and seconds (a resumed
     * run's time_s starts again at 0: it is added to the time before) */
    int n_clock, clock_cap;
    double *clock_step, *clock_tokens, *clock_time;
} pr_run;

/* DIR/metrics.jsonl; -1 with err: "DIR: no metrics.jsonl (not a run
 * directory?)", or "DIR/metrics.jsonl:LINE: ..." for a line that is not a
 * JSON object with an integer "step". A last line without its newline (a
 * run being written) is left out. *r is zeroed first; pr_run_free it. */
int pr_run_read(pr_run *r, const char *dir, pr_err *err);
void pr_run_free(pr_run *r);

/* the curve named `name`, training (eval false) or evaluation; NULL if none */
const pr_curve *pr_run_curve(const pr_run *r, const char *name, bool eval);

/* "loss, lr, grad_norm, tokens_per_s, acc (eval), ..." appended to out: the
 * distinct curve names of n runs, for a message */
void pr_runs_list_metrics(const pr_run *runs, int n, char *out, size_t size);

/* the x of a step in the unit asked for: the step itself, tokens (from the
 * step lines' tokens, proportional to the step) or seconds (interpolated
 * between step lines). false when the run's lines do not carry it. */
bool pr_run_has_x(const pr_run *r, pr_x_kind kind);
double pr_run_x(const pr_run *r, double step, pr_x_kind kind);

/* trailing mean over `window` points of y[0..n) into out (window <= 1: a copy);
 * non-finite points are skipped and stay as they are */
void pr_smooth(const double *y, int n, int window, double *out);

#endif
