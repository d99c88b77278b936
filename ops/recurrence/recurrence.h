/* ops/recurrence/recurrence.h: the linear-recurrence family S_t = S_{t-1} A_t + B_t.
 *
 * Layouts (flash-linear-attention's): q, k [B,T,H,K]; v [B,T,H,V];
 * g, beta [B,T,H] (g [B,T,H,K] for gla, a decay per key channel); kx [B,T,H,L,K]; vx [B,T,H,L,V]; h0, ht [N,H,K,V] where
 * N = B, or the number of packed sequences when cu_seqlens is given (then
 * B = 1 and cu_seqlens [N+1] int64/int32 holds the sequence offsets along T).
 * g is a log-decay (decay = exp(g)). o [B,T,H,V] uses the state after the
 * token's update: o_t = h_t^T (scale q_t).
 *
 *   rule        forget A_t                  write B_t
 *   linattn     I                           k v^T
 *   ssd         exp(g) I                    k v^T
 *   delta       I - beta k k^T              beta k v^T
 *   gdn         exp(g)(I - beta k k^T)      beta k v^T
 *   prism_core  exp(g)(I - beta k k^T)      beta k v^T + sum_l kx_l vx_l^T
 *   gla         diag(exp(g))                k v^T              (g [B,T,H,K])
 *
 * gla with opts.g_per_value decays the state's columns instead of its rows
 * (fla's gv): h = h diag(exp(g_t)) + k v^T with g [B,T,H,V]. Gated slot
 * attention's first pass (keys written into slots that forget one by one)
 * is this form; both forms on both devices (CUDA chunked: gla_chunked.cu).
 */
#ifndef PR_RECURRENCE_H
#define PR_RECURRENCE_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the rule list: ops/recurrence/rules.def (PR_RULES_DEF lets the table test
 * compile recurrence.c against another list) */
#ifndef PR_RULES_DEF
#define PR_RULES_DEF "ops/recurrence/rules.def"
#endif
typedef enum {
#define PR_RULE(name, NAME, has_g, has_beta, has_extra, g_per_key) PR_RULE_##NAME,
#include PR_RULES_DEF
#undef PR_RULE
    PR_NRULES
} pr_rule;
typedef struct {
    const char *name;                  /* "linattn", ... */
    bool has_g, has_beta, has_extra;   /* the inputs it takes (rules.def) */
    bool g_per_key;                    /* g is [B,T,H,K], one log-decay per key channel */
} pr_rule_info;
const pr_rule_info *pr_rule_info_of(pr_rule r);   /* fatal for an unknown rule */
/* the inputs of pr_recurrence, in its argument order */
typedef enum { PR_REC_Q, PR_REC_K, PR_REC_V, PR_REC_G, PR_REC_BETA, PR_REC_KX, PR_REC_VX, PR_REC_H0, PR_REC_NIN } pr_rec_input;
const char *pr_rec_input_name(pr_rec_input i);    /* "q", "k", ... */
/* whether rule r takes input i: q, k, v and h0 (optional) every rule; g,
 * beta, kx/vx as its row of rules.def says */
bool pr_rule_takes(pr_rule r, pr_rec_input i);
const char *pr_rule_name(pr_rule r);          /* "linattn", ...; "?" if unknown */
int pr_rule_from_name(const char *name);      /* -1 if unknown */
bool pr_rule_has_g(pr_rule r);
bool pr_rule_has_beta(pr_rule r);
bool pr_rule_has_extra(pr_rule r);
bool pr_rule_g_per_key(pr_rule r);
/* input i's name in reference files: pr_rec_input_name, except that a
 * per-key decay is called "gk" (as flash-linear-attention names it) */
const char *pr_rule_input_name(pr_rule r, pr_rec_input i);

/* The CUDA chunked form's passes: forward prep (delta rules), state (serial
 * over chunks), output; backward dlocal, dstate (serial, in reverse), grad,
 * wy (delta rules; for the others the final sums of dg). */
typedef enum {
    PR_REC_PASS_PREP, PR_REC_PASS_STATE, PR_REC_PASS_OUTPUT, PR_REC_PASS_DLOCAL, PR_REC_PASS_DSTATE,
    PR_REC_PASS_GRAD, PR_REC_PASS_WY, PR_REC_NPASS
} pr_rec_pass_id;
/* how a pass's products run: mma.sync (TF32 or bf16 tensor cores, or fp32
 * FMAs with TF32 off) or wgmma (sm_90a, TF32 on); AUTO: the plan's choice */
typedef enum { PR_REC_AUTO = 0, PR_REC_MMA, PR_REC_WGMMA } pr_rec_engine;
/* a yes/no choice of the plan: PR_REC_PLANNED leaves it to the plan */
typedef enum { PR_REC_PLANNED = 0, PR_REC_OFF, PR_REC_ON } pr_rec_switch;

/* Forcing fields of the CUDA chunked plan, for tests, benchmarks and
 * comparisons (`prism bench recurrence --force`); all zero (the default):
 * the plan decides everything. A forced value the kernels cannot run at the
 * call's sizes is fatal, with a message naming the field. */
typedef struct {
    int segments;             /* P >= 1 segments a sequence for the serial passes (1: none) */
    pr_rec_switch seg_fix;    /* the segmented forward's fix-up (OFF: a last serial pass) */
    int bv_state, bv_dstate;  /* the serial passes' V tile: a multiple of 32 whose shared memory fits */
    int bk_grad, bk_wy;       /* grad's and wy's K tile: a multiple of 32 (wy's divides K rounded up to 32) */
    int grad_bpw;             /* grad's mma.sync form with 3, 4 or 8 warp blocks a warp */
    int grad_pieces;          /* grad's wgmma form with 2, 3 or 4 64 x 32 pieces a warpgroup */
    pr_rec_engine prep, state, scores, dstate, wy; /* scores: the output and dlocal together */
    pr_rec_switch extras_apart; /* prism_core's extra writes in kernels of their own */
    pr_rec_switch x16;        /* OFF: bf16 kx, vx staged as f32 where the wgmma extras could read them in place */
    pr_rec_switch bf16_staged; /* ON: every bf16 tensor staged through f32 copies, as before the in-place passes */
    pr_rec_switch gla_fast;   /* gla's per-key chunked form: ON and the default, its fast kernels (gla_fast.cu;
                                 the default falls back to the plain ones where they do not fit); OFF: the plain ones */
    pr_rec_switch bf16_mma;   /* ON and the default: bf16 data's wgmma passes multiply bf16 tiles with bf16 wgmma
                                 where they read their inputs in place (so far prep, the output and dlocal); ON
                                 where it cannot apply: the plan says why (pr_rec_plan.bf16_mma_refused). OFF: TF32 */
} pr_rec_force;
/* Reads "name=value,..." (names as the fields above; values: numbers,
 * mma|wgmma for the engines, on|off for the switches) into *f, over what
 * *f holds. false, with err naming the bad item, on anything else. */
bool pr_rec_force_parse(const char *text, pr_rec_force *f, char *err, size_t err_n);

/* chunk means the same on both devices: 0 runs the per-token form, C > 0 the
 * chunked form with chunks of exactly C tokens. The CPU takes any C; the CUDA
 * kernels take C = 32 or 64 (and shared memory bounds C, K, V and L), and any
 * other request stops with an error naming the limit: no silent change of
 * form or chunk size. pr_recurrence_plan says beforehand what will run. */
typedef struct {
    pr_rule rule;
    double scale;   /* 0: K^-1/2 */
    int chunk;      /* 0: per-token recurrent form; C > 0: chunked form with chunks of C tokens */
    int tf32;       /* pr_recurrence_plan only: plan for TF32 products (pr_recurrence reads ctx->matmul_tf32) */
    bool bf16;      /* pr_recurrence_plan only: plan for bf16 data (pr_recurrence reads q's dtype) */
    bool g_per_value;   /* gla only: g [B,T,H,V] decays the state's columns (fla's gv) */
    pr_rec_force force; /* CUDA chunked form: fields the plan must take (zero: none) */
} pr_recurrence_opts;

/* what a pass's products multiply: fp32 FMAs (TF32 off), TF32 or bf16
 * operands on tensor cores; the sums are f32 in every kind */
typedef enum { PR_REC_PROD_F32 = 0, PR_REC_PROD_TF32, PR_REC_PROD_BF16 } pr_rec_prod;

/* one pass of a CUDA chunked plan */
typedef struct {
    bool runs;             /* prep and wy run for the delta rules only */
    pr_rec_engine engine;  /* PR_REC_MMA or PR_REC_WGMMA */
    int bv, bk;            /* its V tile and K tile (0: the pass has none) */
    pr_rec_prod prod;      /* its products' operands */
    bool bf16_in_place;    /* bf16 data: the pass reads or writes bf16 tensors in place, unstaged (output: q and
                              o, and with prep and state k, v; dlocal, dstate: q, dO, k, and without beta dv; grad:
                              dq, dk, and q, dO, k, and without beta v; wy: dv, dk and k); every other bf16 tensor
                              is staged through an f32 copy */
} pr_rec_pass;

/* How a call runs: the form, the chunk size, and for the CUDA chunked form
 * each pass's engine and tiles. pr_rec_plan_format writes it as text. */
typedef struct {
    pr_device device;
    int chunk;             /* 0: per-token form; C: chunked form, chunks of C tokens */
    bool gla;              /* rule gla: its own kernels (CUDA: gla_token.cu, gla_chunked.cu) */
    bool g_per_value;      /* gla's decay per value channel (opts.g_per_value) */
    bool gla_fast;         /* gla's per-key chunked form in its fast kernels (force.gla_fast) */
    bool gla_in_place;     /* and bf16 data read and written in place there, unstaged (q, k, v, dO, o, dq, dk, dv) */
    bool delta, has_g;     /* the rule's erase (beta) and decay (g) */
    bool bf16;             /* planned for bf16 data */
    /* the CUDA chunked form: */
    pr_rec_pass pass[PR_REC_NPASS];
    int segments;          /* of a sequence in the serial passes (1: none) */
    bool seg_fix;          /* the segmented forward ends with the fix-up, V tile bv_fix */
    int bv_fix;
    int grad_blocks;       /* grad: warp blocks a warp (mma.sync) or pieces a warpgroup (wgmma) */
    int grad_passes;       /* grad's passes over V tiles for its sums */
    int wy_extras;         /* wy: extras a product, 1 or 2 */
    bool extras_apart;     /* prism_core's extras in kernels of their own (the passes are then the core's) */
    pr_rec_engine extras;  /* their engine, where apart */
    /* force.bf16_mma on where no pass takes it: why (static text), else NULL. The passes that do take it
       have engine PR_REC_WGMMA and prod PR_REC_PROD_BF16 */
    const char *bf16_mma_refused;
} pr_rec_plan;
/* The plan of pr_recurrence for opt on dev with N sequences of T tokens and
 * sizes H, K, V, L (L: prism_core's extra writes). Returns false, with why
 * naming the limit, when dev cannot run it (pr_recurrence then stops with
 * that message). A CUDA plan needs a GPU: it depends on its shared memory. */
bool pr_recurrence_plan(const pr_recurrence_opts *opt, pr_device dev, int64_t N, int64_t T, int64_t H, int64_t K,
                        int64_t V, int64_t L, pr_rec_plan *plan, char *why, size_t why_n);
/* one line: "<device> <form> [C=<chunk>]: fwd ...; bwd ..." */
void pr_rec_plan_format(const pr_rec_plan *plan, char *buf, size_t n);

/* Inputs the rule does not use must be NULL; g, beta, kx, vx are required by
 * the rules that use them; h0 and cu_seqlens are optional. Returns o; *ht
 * (if ht != NULL) receives the final state [N,H,K,V]. Both are differentiable.
 * Dtypes: q, k, v, beta, kx, vx and o share one, f32, f64 or bf16; g, h0 and
 * ht have q's, except with bf16 data, where they stay f32 (as
 * flash-linear-attention keeps them). bf16 is computed in f32 on CUDA (double
 * on the CPU), and o and the grads of bf16 inputs are rounded to bf16 once. */
pr_tensor *pr_recurrence(pr_ctx *ctx, const pr_recurrence_opts *opt, pr_tensor *q, pr_tensor *k,
                         pr_tensor *v, pr_tensor *g, pr_tensor *beta, pr_tensor *kx, pr_tensor *vx,
                         pr_tensor *h0, pr_tensor *cu_seqlens, pr_tensor **ht);

/* ---- inspection: the rank of each token's write (ops/recurrence/write_rank.c) ----
 * Singular values of the m x n row-major matrix a, descending, into s
 * [min(m,n)] (one-sided Jacobi in f64); the numerical rank counts those above
 * rel_tol times the largest (0 for a zero matrix). */
void pr_singular_values(const double *a, int m, int n, double *s);
int pr_matrix_rank(const double *a, int m, int n, double rel_tol);
/* For a recorded recurrence node (on the tape, any device): the rank of each
 * token's write B_t (beta k v^T [+ sum_l kx_l vx_l^T]; the forget path left
 * out) into ranks [B*T*H], (b, t, h) row-major. Returns the most B_t can
 * have: min(L+1, K, V), L = 0 without extra writes. */
int pr_recurrence_write_ranks(const pr_node *n, double rel_tol, int *ranks);

/* ---- internal: the forcing fields of a recorded node -------------------------------
 * A node keeps its call's forcing fields as a small id (iarg[3]): equal
 * fields get the same id, all-zero fields id 0. */
int64_t pr_rec_force_id(const pr_rec_force *f);
/* false, with why, where opt asks a per-value decay of a rule other than gla */
bool pr_rec_g_per_value_ok(const pr_recurrence_opts *opt, char *why, size_t why_n);
const pr_rec_force *pr_rec_force_of(int64_t id); /* fatal for an id never handed out */

/* ---- internal: for tests, the gradcheck example and benchmarks ---------------
 * The CPU forward computes f32 and bf16 in double (inputs promoted, results
 * rounded once). cu_seqlens must be strictly increasing from 0 to T (fatal otherwise). */
typedef struct {
    pr_tensor *q, *k, *v, *g, *beta, *kx, *vx, *h0;   /* NULL where the rule has none */
} pr_recurrence_inputs;
/* Random leaves (requiring grad) of dtype dt on the CPU (g and h0 in f32 when
 * dt is bf16), in a well-conditioned
 * range: q, k, kx rows l2-normalized, g in [-0.3, -0.01) ([B,T,H,K] for a
 * per-key decay), beta in [0.1, 0.9),
 * v, vx, h0 normal. kx, vx have L (maybe 0) rows for prism_core; h0 only when
 * with_h0. Deterministic in r. */
pr_recurrence_inputs pr_recurrence_random(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_rule rule, int64_t B, int64_t T,
                                          int64_t H, int64_t K, int64_t V, int64_t L, bool with_h0);

#ifdef __cplusplus
}
#endif
#endif
