/* ops/recurrence/plan.c: the recurrence's plan as data (host code, built
 * with or without CUDA): what pr_recurrence will run on a device, its text,
 * and the forcing fields read from text. The CUDA chunked plan itself is
 * made in ops/recurrence/cuda/plan.cu (it needs the device's shared memory);
 * everything here can be tested without a GPU.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/recurrence/recurrence.h"
#include "ops/recurrence/recurrence_cpu.h"

#ifdef PRISM_HAVE_CUDA
bool pr_recurrence_plan_cuda(const pr_recurrence_opts *opt, int64_t N, int64_t T, int64_t H, int64_t K, int64_t V,
                             int64_t L, pr_rec_plan *plan, char *why, size_t why_n);   /* cuda/recurrence.cu */
#endif

bool pr_rec_g_per_value_ok(const pr_recurrence_opts *opt, char *why, size_t why_n)
{
    if (!opt->g_per_value) return true;
    if (opt->rule == PR_RULE_GLA) return true;
    snprintf(why, why_n, "recurrence: a per-value decay (g_per_value) is a form of rule gla, not of %s",
             pr_rule_name(opt->rule));
    return false;
}


bool pr_recurrence_plan(const pr_recurrence_opts *opt, pr_device dev, int64_t N, int64_t T, int64_t H, int64_t K,
                        int64_t V, int64_t L, pr_rec_plan *plan, char *why, size_t why_n)
{
    PR_CHECK(opt && opt->rule >= 0 && opt->rule < PR_NRULES, "recurrence: unknown rule %d", opt ? (int)opt->rule : -1);
    memset(plan, 0, sizeof *plan);
    if (why_n) why[0] = 0;
    if (opt->chunk < 0) {
        snprintf(why, why_n, "recurrence: chunk must be >= 0 (0 = per-token form), got %d", opt->chunk);
        return false;
    }
    if (!pr_rec_g_per_value_ok(opt, why, why_n)) return false;
    plan->gla = pr_rule_g_per_key(opt->rule), plan->g_per_value = opt->g_per_value;
    plan->delta = pr_rule_has_beta(opt->rule), plan->has_g = pr_rule_has_g(opt->rule);
    plan->bf16 = opt->bf16;
    if (dev == PR_CUDA) {
#ifdef PRISM_HAVE_CUDA
        return pr_recurrence_plan_cuda(opt, N, T, H, K, V, L, plan, why, why_n);
#else
        (void)N, (void)T, (void)H, (void)K, (void)V, (void)L;
        snprintf(why, why_n, "recurrence: built without CUDA");
        return false;
#endif
    }
    plan->device = PR_CPU;
    plan->chunk = opt->chunk;
    return true;
}

/* ---- the text ------------------------------------------------------------------------- */

/* the CPU's functions */
static void cpu_text(const pr_rec_plan *p, char *buf, size_t n)
{
    if (p->g_per_value && p->chunk)
        snprintf(buf, n, "fwd pr_rec_gla_forward_chunked (per-value decay, factored by sub-chunks of 8; saves "
                         "chunk-start states when recorded); bwd pr_rec_gla_backward_chunked; f64, a (sequence, head) "
                         "per call");
    else if (p->g_per_value)
        snprintf(buf, n, "fwd pr_rec_forward_recurrent (per-value decay; saves states every %d tokens when recorded); "
                         "bwd pr_rec_backward (recomputes each block); f64, a (sequence, head) per call", PR_REC_CKPT);
    else if (p->chunk && p->gla)
        snprintf(buf, n, "fwd pr_rec_gla_forward_chunked (decays factored by sub-chunks of 8; saves chunk-start "
                         "states when recorded); bwd pr_rec_gla_backward_chunked; f64, a (sequence, head) per call");
    else if (p->chunk)
        snprintf(buf, n, "fwd pr_rec_forward_chunked (saves chunk-start states when recorded); bwd "
                         "pr_rec_backward_chunked; f64, a (sequence, head) per call");
    else
        snprintf(buf, n, "fwd pr_rec_forward_recurrent (saves states every %d tokens when recorded); bwd "
                         "pr_rec_backward (recomputes each block); f64, a (sequence, head) per call", PR_REC_CKPT);
}

static const char *wg(pr_rec_engine e) { return e == PR_REC_WGMMA ? ", wgmma" : ""; }

/* the CUDA chunked form's passes, forward then backward */
static void cuda_chunked_text(const pr_rec_plan *p, char *buf, size_t n)
{
    const pr_rec_pass *ps = p->pass;
    /* extras apart: their kernels before the core's forward, after its backward */
    const char *xa = !p->extras_apart ? "" : p->extras == PR_REC_WGMMA ? "extras(apart, wgmma)" : "extras(apart)";
    size_t k = (size_t)snprintf(buf, n, "fwd %s%s", xa, p->extras_apart ? " " : "");
    const pr_rec_pass *pp = &ps[PR_REC_PASS_PREP];
    if (pp->runs && k < n) k += (size_t)snprintf(buf + k, n - k, "prep(bv %d%s) ", pp->bv, wg(pp->engine));
    /* segmented: the serial state passes the forward runs */
    char seg[40] = "", fwd_seg[80] = "", fix[24] = "";
    if (p->segments > 1) {
        const int passes = (p->delta ? 2 : 1) + (p->seg_fix ? 0 : 1);
        snprintf(seg, sizeof seg, ", segments %d", p->segments);
        snprintf(fwd_seg, sizeof fwd_seg, "%s, %d pass%s", seg, passes, passes > 1 ? "es" : "");
        if (p->seg_fix) snprintf(fix, sizeof fix, " segfix(bv %d)", p->bv_fix);
    }
    char gpass[24] = "";
    if (p->grad_passes > 1) snprintf(gpass, sizeof gpass, ", %d passes", p->grad_passes);
    const pr_rec_pass *g = &ps[PR_REC_PASS_GRAD];
    const bool gw = g->engine == PR_REC_WGMMA;
    if (k < n)
        k += (size_t)snprintf(buf + k, n - k,
                              "state(bv %d%s%s)%s scores(bv %d%s); bwd dlocal(bv %d%s) dstate(bv %d%s%s) "
                              "grad(bk %d, bv %d, %s%d %s%s) ",
                              ps[PR_REC_PASS_STATE].bv, wg(ps[PR_REC_PASS_STATE].engine), fwd_seg, fix,
                              ps[PR_REC_PASS_OUTPUT].bv, wg(ps[PR_REC_PASS_OUTPUT].engine), ps[PR_REC_PASS_DLOCAL].bv,
                              wg(ps[PR_REC_PASS_DLOCAL].engine), ps[PR_REC_PASS_DSTATE].bv,
                              wg(ps[PR_REC_PASS_DSTATE].engine), seg, g->bk, g->bv, gw ? "wgmma, " : "",
                              p->grad_blocks, gw ? "pieces a warpgroup" : "blocks a warp", gpass);
    if (k >= n) return;
    const pr_rec_pass *w = &ps[PR_REC_PASS_WY];
    if (p->delta)
        snprintf(buf + k, n - k, "wy(bk %d, bv %d%s%s)%s%s", w->bk, w->bv, p->wy_extras > 1 ? ", extras in 2s" : "",
                 wg(w->engine), p->extras_apart ? " " : "", xa);
    else snprintf(buf + k, n - k, "%s", p->has_g ? "dg" : "(no dg)");
}

/* bf16 data: which passes read their bf16 tensors in place (the rest read
 * f32 copies staged around the kernels) and the passes' products */
static void bf16_text(const pr_rec_plan *p, char *buf, size_t n)
{
    static const char *const names[PR_REC_NPASS] = {"prep", "state", "output", "dlocal", "dstate", "grad", "wy"};
    static const char *const prods[] = {"fp32", "tf32", "bf16"};
    size_t k = (size_t)snprintf(buf, n, "; bf16 data: in place");
    int in_place = 0;
    for (int i = 0; i < PR_REC_NPASS && k < n; i++)
        if (p->pass[i].runs && p->pass[i].bf16_in_place)
            k += (size_t)snprintf(buf + k, n - k, " %s", names[i]), in_place++;
    if (!in_place && k < n) k += (size_t)snprintf(buf + k, n - k, " none");
    if (k < n) k += (size_t)snprintf(buf + k, n - k, ", products");
    for (int i = 0; i < PR_REC_NPASS && k < n; i++)
        if (p->pass[i].runs) k += (size_t)snprintf(buf + k, n - k, " %s %s", names[i], prods[p->pass[i].prod]);
}

/* "fwd ...; bwd ..." */
static void kernels_text(const pr_rec_plan *p, char *buf, size_t n)
{
    if (p->device == PR_CPU) cpu_text(p, buf, n);
    else if (p->gla && p->chunk && p->g_per_value)
        snprintf(buf, n, "fwd gv_state(bv %d) gv_out; bwd gv_dstate(bv %d) gv_dv gv_dqk (per-value decay, "
                         "sub-chunks of 16)", 32, 32);
    else if (p->gla && p->chunk && p->gla_fast)
        snprintf(buf, n, "fwd gla_cumsum gla_state(bk %d, bv %d) gla_out(bk %d, A saved); bwd gla_cumsum "
                         "gla_dstate(bk %d, bv %d) gla_dv(A read) gla_dqk(bk %d, bv %d) (per-key decay, sub-chunks of "
                         "16; fast: decays summed once, dg summed in shared memory%s)", 64, 32, 64, 64, 32, 64, 16,
                 p->gla_in_place ? "; bf16 in place" : "");
    else if (p->gla && p->chunk)
        snprintf(buf, n, "fwd gla_state(bv %d) gla_out; bwd gla_dstate(bv %d) gla_dv gla_dqk (per-key decay, "
                         "sub-chunks of 16)", 32, 32);
    else if (p->gla)
        snprintf(buf, n, "fwd gla_fwd; bwd gla_fwd (dq), gla_rev, gla_dg (per-%s decay, per-token form)",
                 p->g_per_value ? "value" : "key");
    else if (!p->chunk)
        snprintf(buf, n, "fwd tok_fwd; bwd tok_rev%s, tok_sum_slices", p->delta ? ", tok_dq" : " (tok_dq for dq)");
    else {
        cuda_chunked_text(p, buf, n);
        const size_t k = strlen(buf);
        if (p->bf16 && k < n) bf16_text(p, buf + k, n - k);
    }
}

void pr_rec_plan_format(const pr_rec_plan *plan, char *buf, size_t n)
{
    char kernels[512];
    kernels_text(plan, kernels, sizeof kernels);
    /* force.bf16_mma asked for what no pass could take: the plan says why */
    const char *refused = plan->bf16_mma_refused, *sep = refused ? "; bf16_mma refused: " : "";
    if (plan->chunk)
        snprintf(buf, n, "%s chunked C=%d: %s%s%s", pr_device_name(plan->device), plan->chunk, kernels, sep,
                 refused ? refused : "");
    else snprintf(buf, n, "%s per-token: %s%s%s", pr_device_name(plan->device), kernels, sep, refused ? refused : "");
}

/* ---- the forcing fields from text ----------------------------------------------------- */

typedef enum { FORCE_INT, FORCE_ENGINE, FORCE_SWITCH } force_kind;
typedef struct {
    const char *name;
    force_kind kind;
    size_t off;
} force_field;
#define F(name, kind) {#name, kind, offsetof(pr_rec_force, name)}
static const force_field force_fields[] = {
    F(segments, FORCE_INT),     F(seg_fix, FORCE_SWITCH),   F(bv_state, FORCE_INT),
    F(bv_dstate, FORCE_INT),    F(bk_grad, FORCE_INT),      F(bk_wy, FORCE_INT),
    F(grad_bpw, FORCE_INT),     F(grad_pieces, FORCE_INT),  F(prep, FORCE_ENGINE),
    F(state, FORCE_ENGINE),     F(scores, FORCE_ENGINE),    F(dstate, FORCE_ENGINE),
    F(wy, FORCE_ENGINE),        F(extras_apart, FORCE_SWITCH), F(x16, FORCE_SWITCH),
    F(bf16_staged, FORCE_SWITCH), F(gla_fast, FORCE_SWITCH),
    F(bf16_mma, FORCE_SWITCH),
};
#undef F

/* value text v of field f into *out; false where it is not one */
static bool force_value(const force_field *f, const char *v, int *out)
{
    static const char *const engines[] = {"mma", "wgmma"}, *const switches[] = {"off", "on"};
    if (f->kind == FORCE_INT) {
        char *end;
        const long x = strtol(v, &end, 10);
        if (!*v || *end || x < 1 || x > 1 << 20) return false;
        *out = (int)x;
        return true;
    }
    const char *const *names = f->kind == FORCE_ENGINE ? engines : switches;
    for (int i = 0; i < 2; i++)
        if (!strcmp(v, names[i])) return *out = i + 1, true; /* PR_REC_MMA / PR_REC_OFF = 1 */
    return false;
}

/* one "name=value" item */
static bool force_item(const char *item, pr_rec_force *fo, char *err, size_t err_n)
{
    const char *eq = strchr(item, '=');
    const size_t len = eq ? (size_t)(eq - item) : strlen(item);
    for (size_t i = 0; i < sizeof force_fields / sizeof force_fields[0]; i++) {
        const force_field *f = &force_fields[i];
        if (strlen(f->name) != len || strncmp(f->name, item, len)) continue;
        int v;
        if (eq && force_value(f, eq + 1, &v)) {
            memcpy((char *)fo + f->off, &v, sizeof v);
            return true;
        }
        snprintf(err, err_n, "force: %s needs =%s, got '%s'", f->name,
                 f->kind == FORCE_INT ? "a whole number >= 1" : f->kind == FORCE_ENGINE ? "mma or wgmma" : "on or off",
                 item);
        return false;
    }
    snprintf(err, err_n, "force: unknown field in '%s' (segments, seg_fix, bv_state, bv_dstate, bk_grad, bk_wy, "
                         "grad_bpw, grad_pieces, prep, state, scores, dstate, wy, extras_apart, x16, bf16_staged, "
                         "gla_fast, bf16_mma)",
             item);
    return false;
}

bool pr_rec_force_parse(const char *text, pr_rec_force *f, char *err, size_t err_n)
{
    if (err_n) err[0] = 0;
    char buf[256];
    if (strlen(text) >= sizeof buf) {
        snprintf(err, err_n, "force: '%s' is too long", text);
        return false;
    }
    strcpy(buf, text);
    pr_rec_force out = *f;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save))
        if (!force_item(item, &out, err, err_n)) return false;
    *f = out;
    return true;
}

/* ---- the forcing fields of recorded nodes ------------------------------------------- */

/* every distinct set of forcing fields seen, id = index; [0] all zero. Kept
 * for the process: nodes of any step may refer to them, and they are few.
 * Shared by every thread that records recurrences (a grid's worker threads),
 * hence the lock; each set is its own allocation, so a pointer handed out
 * stays valid while another thread grows the table. */
static pthread_mutex_t forces_lock = PTHREAD_MUTEX_INITIALIZER;
static pr_rec_force **forces;
static int64_t n_forces, cap_forces;

/* the id of f, added when new; -1 when out of host memory (said by the caller,
 * outside the lock: pr_fatal may longjmp) */
static int64_t force_id_locked(const pr_rec_force *f)
{
    for (int64_t i = 1; i < n_forces; i++)
        if (!memcmp(forces[i], f, sizeof *f)) return i;
    if (n_forces == 0) n_forces = 1; /* [0]: none, never looked at */
    if (n_forces >= cap_forces) {
        int64_t cap = cap_forces ? 2 * cap_forces : 8;
        pr_rec_force **grown = realloc(forces, (size_t)cap * sizeof *forces);
        if (!grown) return -1;
        forces = grown, cap_forces = cap;
        forces[0] = NULL;
    }
    pr_rec_force *copy = malloc(sizeof *copy);
    if (!copy) return -1;
    *copy = *f;
    forces[n_forces] = copy;
    return n_forces++;
}

int64_t pr_rec_force_id(const pr_rec_force *f)
{
    static const pr_rec_force none;
    if (!memcmp(f, &none, sizeof none)) return 0;
    pthread_mutex_lock(&forces_lock);
    int64_t id = force_id_locked(f);
    pthread_mutex_unlock(&forces_lock);
    PR_CHECK(id > 0, "recurrence: out of host memory");
    return id;
}

const pr_rec_force *pr_rec_force_of(int64_t id)
{
    static const pr_rec_force none;
    if (id == 0) return &none;
    pthread_mutex_lock(&forces_lock);
    const pr_rec_force *f = id > 0 && id < n_forces ? forces[id] : NULL;
    pthread_mutex_unlock(&forces_lock);
    PR_CHECK(f, "recurrence: no forcing fields with id %lld", (long long)id);
    return f;
}
