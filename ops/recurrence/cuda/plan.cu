/* ops/recurrence/cuda/plan.cu: the chunked form's plan (host code only, no
 * kernels): the V and K tiles of every pass, which passes take their wgmma
 * forms, the segments of the serial passes and whether prism_core's extras
 * run apart, from the problem's sizes and the device's shared memory and
 * SM count. The passes' files give the shared memory each needs.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

/* A forced number v of field (0: not forced): false where not forced, else
 * *out = v, fatal unless ok(v) says the kernels take it, naming the field
 * and what it must be */
template <class OK> static bool forced_num(const char *field, int v, const char *must_be, OK ok, long *out)
{
    if (!v) return false;
    if (!ok(v)) pr_fatal("recurrence: force.%s must be %s, got %d", field, must_be, v);
    *out = v;
    return true;
}
/* a forced switch s of field: 0 (off), 1 (on), -1 where not forced */
static long switch_want(const char *field, pr_rec_switch s)
{
    if (s != PR_REC_PLANNED && s != PR_REC_OFF && s != PR_REC_ON)
        pr_fatal("recurrence: force.%s must be PR_REC_PLANNED, PR_REC_OFF or PR_REC_ON, got %d", field, (int)s);
    return s == PR_REC_PLANNED ? -1 : s == PR_REC_ON;
}

/* blocks of a kernel an SM holds: by shared memory, and at most 2 (their
 * 256 threads use up to 128 registers each) */
static int plan_per_sm(size_t bytes, int smem_sm)
{
    const int n = (int)((size_t)smem_sm / (bytes + 1024));
    return n < 1 ? 1 : n > 2 ? 2 : n;
}

/* chunks of a sequence (packed: of their mean length) */
static long long seq_chunks(const rec_prob &p)
{
    const long long len = p.packed ? p.T / (p.N > 0 ? p.N : 1) : p.T;
    return (len + p.C - 1) / p.C;
}
/* A serial pass's chunk step, in steps of mma.sync's form at a V tile of 32:
 * half of such a step is latency, half its 32 columns' products, so each 32
 * columns more add a half; the wgmma forms' steps take 0.6 of that. The
 * weights are fitted to the H200 shapes where segments and the whole wgmma
 * passes were both timed (ops/recurrence/NOTES.md keeps the table): a flat
 * weight picked the wrong side for few heads over long sequences. */
static double serial_step_weight(int bv, bool wgmma)
{
    return (1.0 + 0.5 * (bv / 32 - 1)) * (wgmma ? 0.6 : 1.0);
}
/* Segments per sequence for the serial passes (rec_segs), by their cost in
 * chunk steps: a pass of B blocks over sequences of n chunks takes
 * waves(B) x n steps; unsegmented, fwd + bwd is two passes (state, dstate).
 * With P segments each pass has P times the blocks and n/P steps: the
 * forward's pass from zero (E), for the delta rules the one from the
 * identity (A, K columns), then either a last pass from the chained starts
 * or the fix-up; the backward's carry (D) and dstate passes; plus the two
 * chains (~P steps). The fix-up runs every chunk at once; a block of it
 * does about what one chunk step does (the same loads, two products and
 * barriers) but three share an SM, so it costs a step per wave of three
 * blocks an SM. It needs the per-chunk transitions of the delta rules, so
 * it runs only where that scratch (K x K a chunk and head) is at most twice
 * the hs the forward keeps anyway: K <= 2V. The cheaper of fix-up and last
 * pass (ties: the fix-up, whose blocks wait on no serial chain) and the
 * cheapest P (ties: fewer) win, with segments of >= 4 chunks and none for
 * a sequence of < 8 chunks. So segments pay only where the unsegmented
 * passes leave SMs idle: at B=1 T=16384 H=8 K=V=96 (24 blocks, 264 slots)
 * P = 16, while B=8 T=2048 H=16 K=V=128 (128 blocks, 132 slots) stays at 1.
 * force.segments = P forces P (1: off; at most one segment per chunk),
 * for tests at small sizes and for comparisons; the fix-up is then chosen
 * the same way, and force.seg_fix forces it off / on (where it can run). Packed sequences: P from their mean length, each split into at most
 * P. A grid's z (sequences x segments) stays <= 65535. Returns the chosen
 * plan's cost with its steps weighed by their tiles (serial_step_weight),
 * -1 where P is 1 or force.segments forced it. */
static double plan_segments(const rec_prob &p, const pr_rec_force &f, int smem_sm, int n_sm, rec_chunk_plan *pl)
{
    const long long ncs = seq_chunks(p), zmax = 65535 / (p.N > 0 ? p.N : 1);
    /* waves of a pass over `segs` pieces per sequence, V tile bv, values width
     * wide, per_sm blocks an SM at most */
    auto waves = [&](size_t smem, int bv, int width, long long segs, int per_sm = 2) {
        const long long blocks = (long long)p.N * p.H * ((width + bv - 1) / bv) * segs;
        const int by_smem = smem_sm / (int)(smem + 1024);
        const long long slots = (long long)n_sm * (by_smem < 1 ? 1 : by_smem < per_sm ? by_smem : per_sm);
        return (blocks + slots - 1) / slots;
    };
    const size_t ss = pr_rec_smem_state(p, pl->bv_state), sd = pr_rec_smem_dstate(p, pl->bv_dstate);
    bool fix_ok = pl->bv_fix > 0 && (!p.delta || p.K <= 2 * p.V);
    const long long fix_steps =
        fix_ok ? waves(pr_rec_smem_segfix(p, pl->bv_fix), pl->bv_fix, p.V, ncs, SEG_FIX_PER_SM) : 0;
    /* force.seg_fix OFF forces the last pass, ON the fix-up where it can run */
    const long fix_force = switch_want("seg_fix", f.seg_fix);
    if (fix_force >= 0) fix_ok = fix_ok && fix_force;
    /* the segmented cost at q segments, the state and dstate passes' steps
     * weighing ws and wd (1: the plain count); *fix: the fix-up beats the
     * last pass */
    auto seg_cost = [&](long long q, int *fix, double ws = 1, double wd = 1) {
        const long long steps = (ncs + q - 1) / q, last = waves(ss, pl->bv_state, p.V, q) * steps;
        const long long st = waves(ss, pl->bv_state, p.V, q) + (p.delta ? waves(ss, pl->bv_state, p.K, q) : 0);
        *fix = fix_ok && (fix_force == 1 || fix_steps <= last);
        return ws * (double)(st * steps) + wd * (double)(2 * waves(sd, pl->bv_dstate, p.V, q) * steps) +
               (double)(2 * q) + (*fix ? (double)fix_steps : ws * (double)last);
    };
    long long P = 1;
    long forced;
    const bool forced_p =
        forced_num("segments", f.segments, "a whole number >= 1 (1: off)", [](long v) { return v >= 1; }, &forced);
    if (forced_p) {
        P = forced;
    } else if (ncs >= 8) {
        double best = (double)((waves(ss, pl->bv_state, p.V, 1) + waves(sd, pl->bv_dstate, p.V, 1)) * ncs);
        for (long long q = 2; q <= ncs / 4 && q <= zmax; q++) {
            int fix;
            const double cost = seg_cost(q, &fix);
            if (cost < best) best = cost, P = q;
        }
    }
    if (!p.packed && P > ncs) P = ncs;
    if (P > zmax) P = zmax;
    pl->segments = P < 1 ? 1 : (int)P;
    pl->seg_fix = 0;
    if (pl->segments == 1) return -1;
    const double weighed = seg_cost(pl->segments, &pl->seg_fix, serial_step_weight(pl->bv_state, false),
                                    serial_step_weight(pl->bv_dstate, false));
    return forced_p ? -1 : weighed;
}

/* force.bv_state / force.bv_dstate = b (v, 0: not forced): the serial
 * passes' V tile, for comparisons (a multiple of 32 whose shared memory fits) */
static bool forced_tile(const char *name, int v, const rec_prob &p, size_t mx,
                        size_t (*bytes)(const rec_prob &, int), int *out)
{
    char must_be[64];
    snprintf(must_be, sizeof must_be, "a multiple of 32 up to %d whose shared memory fits", p.Vp);
    long b;
    if (!forced_num(name, v, must_be,
                    [&](long x) { return x >= 32 && x % 32 == 0 && x <= p.Vp && bytes(p, (int)x) <= mx; }, &b))
        return false;
    *out = (int)b;
    return true;
}

/* a segmented pass's V tile: the widest that still lets as many blocks share
 * an SM as the tile picked for the unsegmented pass. Its blocks are few and
 * latency-bound, so a wider tile does more work per barrier, and fewer tiles
 * leave room for more segments (shorter chains of chunk steps); measured
 * faster than tiles of 32 on a long single sequence. Wider tiles only add
 * room, so the segments planned again still pay. */
static void widen_tile(const rec_prob &p, int smem_sm, size_t mx, size_t (*bytes)(const rec_prob &, int), int *bv)
{
    const int per_sm = plan_per_sm(bytes(p, *bv), smem_sm);
    for (int b = p.Vp; b > *bv; b -= 32)
        if (bytes(p, b) <= mx && plan_per_sm(bytes(p, b), smem_sm) >= per_sm) {
            *bv = b;
            return;
        }
}

/* waves of a serial pass's blocks (one per sequence, head and V tile of
 * b) at smem bytes a block */
static long long serial_waves(const rec_prob &p, int b, size_t smem, int smem_sm, int n_sm)
{
    const long long blocks = (long long)p.N * p.H * ((p.V + b - 1) / b);
    const long long slots = (long long)n_sm * plan_per_sm(smem, smem_sm);
    return (blocks + slots - 1) / slots;
}
/* the SMs a serial pass keeps at work in its first wave */
static long long serial_sms(const rec_prob &p, int b, size_t smem, int smem_sm, int n_sm)
{
    const long long blocks = (long long)p.N * p.H * ((p.V + b - 1) / b), per_sm = plan_per_sm(smem, smem_sm);
    const long long sms = (blocks + per_sm - 1) / per_sm;
    return sms < n_sm ? sms : n_sm;
}
/* the fewest waves at the V tiles bytes(b) allows (b = 32, 64, ... up to
 * Vp), then the narrowest tile (more blocks at work) */
template <class F> static bool pick_serial(const rec_prob &p, size_t mx, int smem_sm, int n_sm, F bytes, int *out)
{
    long long best = -1;
    for (int b = 32; b <= p.Vp; b *= 2) {
        if (bytes(b) > mx) continue;
        const long long waves = serial_waves(p, b, bytes(b), smem_sm, n_sm);
        if (best < 0 || waves < best) best = waves, *out = b;
    }
    return best >= 0;
}

/* a forced engine e of pass field: 0 (the mma.sync form), 1 (wgmma), -1 where not forced */
static long engine_want(const char *field, pr_rec_engine e)
{
    if (e != PR_REC_AUTO && e != PR_REC_MMA && e != PR_REC_WGMMA)
        pr_fatal("recurrence: force.%s must be PR_REC_AUTO, PR_REC_MMA or PR_REC_WGMMA, got %d", field, (int)e);
    return e == PR_REC_AUTO ? -1 : e == PR_REC_WGMMA;
}

/* A serial pass's wgmma tile, 0 where mma.sync's form runs: the tile
 * forced (forced: bv_mma is force.bv_*'s) where it fits, else
 * pick_serial's by the form's shared memory bytes(p, b); unless insisted on
 * (want 1) or forced, not where it makes more waves than mma.sync's tile
 * bv_mma (smem_mma bytes), nor, with sms, where it keeps fewer SMs at work */
static int serial_wg_tile(const rec_prob &p, int smem_sm, int n_sm, size_t mx, bool forced, long want, int bv_mma,
                          size_t smem_mma, size_t (*bytes)(const rec_prob &, int), bool sms)
{
    const auto b_of = [&](int b) { return bytes(p, b); };
    int bv = 0;
    if (forced) bv = b_of(bv_mma) <= mx ? bv_mma : 0;
    else pick_serial(p, mx, smem_sm, n_sm, b_of, &bv); /* bv stays 0 where none fits */
    if (bv && !forced && want != 1 &&
        (serial_waves(p, bv, b_of(bv), smem_sm, n_sm) > serial_waves(p, bv_mma, smem_mma, smem_sm, n_sm) ||
         (sms && serial_sms(p, bv, b_of(bv), smem_sm, n_sm) < serial_sms(p, bv_mma, smem_mma, smem_sm, n_sm))))
        bv = 0;
    return bv;
}

/* The state pass's wgmma form where it runs: TF32 on, a
 * build for sm_90a on an sm_90 GPU, K <= 128, no extra writes and no
 * segments (the segmented passes keep mma.sync), and no more waves than
 * mma.sync's. Its tile: the same rule as the other form's, by its own
 * shared memory; a forced force.bv_state (forced) stays where the
 * form takes it (32 or 64), else mma.sync runs it.
 * force.state MMA keeps mma.sync, WGMMA insists on wgmma (tests, A/Bs). */
static void plan_state_wg(const rec_prob &p, const pr_rec_force &f, int smem_sm, int n_sm, size_t mx, bool forced,
                          rec_chunk_plan *pl)
{
    pl->wg_state = 0;
    const long want = engine_want("state", f.state);
    const bool able = rec_wgmma_runs() && p.tf32 && p.Kp <= 128 && pl->segments == 1;
    int bv = 0;
    /* not with extras (prism_core) unless asked for: it loads their rows where they are used, unhidden */
    if (able && want != 0 && (p.L == 0 || forced || want == 1))
        bv = serial_wg_tile(p, smem_sm, n_sm, mx, forced, want, pl->bv_state, pr_rec_smem_state(p, pl->bv_state),
                            pr_rec_smem_state_wg, false);
    if (want == 1 && !bv)
        pr_fatal("recurrence: force.state = wgmma forces the state pass's wgmma form, which needs TF32 products (matmul_tf32 "
                 "on), a build for sm_90a on an sm_90 GPU, K <= 128, no segments and a V tile of 32 or 64 "
                 "whose shared memory fits (K = %d, V = %d here)", p.K, p.V);
    if (bv) pl->wg_state = 1, pl->bv_state = bv;
}

/* The dstate pass's wgmma form where it runs: as the
 * state pass's above, with its tile (32, 64 or 128) by the same rule, at L
 * = 0 only, and with no fewer SMs at work than mma.sync keeps (where its
 * blocks fit one an SM and mma.sync's two). force.dstate MMA keeps
 * mma.sync, WGMMA insists on wgmma (tests, A/Bs). */
static void plan_dstate_wg(const rec_prob &p, const pr_rec_force &f, int smem_sm, int n_sm, size_t mx, bool forced,
                           rec_chunk_plan *pl)
{
    pl->wg_dstate = 0;
    const long want = engine_want("dstate", f.dstate);
    const bool able = rec_wgmma_runs() && p.tf32 && p.Kp <= 128 && p.L == 0 && pl->segments == 1;
    int bv = 0;
    if (able && want != 0)
        bv = serial_wg_tile(p, smem_sm, n_sm, mx, forced, want, pl->bv_dstate, pr_rec_smem_dstate(p, pl->bv_dstate),
                            pr_rec_smem_dstate_wg, true);
    if (want == 1 && !bv)
        pr_fatal("recurrence: force.dstate = wgmma forces the dstate pass's wgmma form, which needs TF32 products (matmul_tf32 "
                 "on), a build for sm_90a on an sm_90 GPU, K <= 128, no extra writes (L = %d here), no segments and "
                 "a V tile of 32, 64 or 128 whose shared memory fits (K = %d, V = %d here)",
                 p.L, p.K, p.V);
    if (bv) pl->wg_dstate = 1, pl->bv_dstate = bv;
}

/* wy's wgmma form where it runs: TF32, no extras, K <= 128;
 * force.wy MMA keeps mma.sync, WGMMA insists. A K tile forced by
 * force.bk_wy is mma.sync's (the wgmma form's tiles are 64). */
static void plan_wy_wg(const rec_prob &p, const pr_rec_force &f, size_t mx, bool bk_forced, rec_chunk_plan *pl)
{
    pl->wg_wy = 0;
    const long want = engine_want("wy", f.wy);
    if (!p.delta) return;
    if (want == 1 && bk_forced)
        pr_fatal("recurrence: force.wy = wgmma (wy's wgmma form, K tiles of 64) and force.bk_wy (mma.sync's K tile) force "
                 "different forms of wy: set one of them");
    const bool on = rec_wgmma_runs() && p.tf32 && p.L == 0 && p.K <= 128 && pr_rec_smem_wy_wg((p.K + 63) / 64) <= mx &&
                    want != 0 && !bk_forced;
    if (want == 1 && !on)
        pr_fatal("recurrence: force.wy = wgmma forces wy's wgmma form, which needs TF32 products (matmul_tf32 on), a build for "
                 "sm_90a on an sm_90 GPU, K <= 128 and no extra writes (K = %d, L = %d here)",
                 p.K, p.L);
    if (on) pl->wg_wy = 1, pl->bk_wy = 64, pl->bv_wy = 64;
}

/* prep's wgmma form where it runs: TF32, no extras, K and V
 * <= 128; force.prep MMA keeps mma.sync, WGMMA insists */
static void plan_prep_wg(const rec_prob &p, const pr_rec_force &f, size_t mx, rec_chunk_plan *pl)
{
    pl->wg_prep = 0;
    const long want = engine_want("prep", f.prep);
    if (!p.delta) return;
    const bool on = rec_wgmma_runs() && p.tf32 && p.L == 0 && p.K <= 128 && p.V <= 128 &&
                    pr_rec_smem_prep_wg(p) <= mx && want != 0;
    if (want == 1 && !on)
        pr_fatal("recurrence: force.prep = wgmma forces prep's wgmma form, which needs TF32 products (matmul_tf32 on), a build "
                 "for sm_90a on an sm_90 GPU, K and V <= 128 and no extra writes (K = %d, V = %d, L = %d here)",
                 p.K, p.V, p.L);
    if (on) pl->wg_prep = 1, pl->bv_prep = 128;
}

/* The scores kernels' wgmma form (scores.cu) where it
 * runs: TF32 on, a build for sm_90a on an sm_90 GPU, K <= 128 and no extra
 * writes; it has its own V tiles (64 for the output, 128 for dlocal).
 * force.scores MMA keeps mma.sync, WGMMA insists on wgmma (tests, A/Bs). */
static void plan_scores_wg(const rec_prob &p, const pr_rec_force &f, size_t mx, rec_chunk_plan *pl)
{
    pl->wg_scores = 0;
    const long want = engine_want("scores", f.scores);
    const bool on = rec_wgmma_runs() && p.tf32 && p.L == 0 && pr_rec_smem_scores_wg(p, 0) <= mx &&
                    pr_rec_smem_scores_wg(p, 1) <= mx && want != 0;
    if (want == 1 && !on)
        pr_fatal("recurrence: force.scores = wgmma forces the scores kernels' wgmma form, which needs TF32 products (matmul_tf32 "
                 "on), a build for sm_90a on an sm_90 GPU, K <= 128 and no extra writes (K = %d, L = %d here)",
                 p.K, p.L);
    if (on) pl->wg_scores = 1, pl->bv_out = 64, pl->bv_dloc = 128;
}

/* Extras apart (extras.cu) where it runs: extra
 * writes (L > 0) beside a core (L = 0) whose state pass and output kernel
 * take their wgmma forms (TF32 on, a build for sm_90a on an sm_90 GPU, K <=
 * 128, no segments), with the extras kernels' shared memory fitting. Then
 * *pl is the core's plan. By default apart wherever the extras take their
 * wgmma forms too (C = 64, C L <= 128, K, V <= 128: there they beat the
 * extras in the core kernels by far); force.extras_apart ON insists on
 * apart (the mma.sync extras where the wgmma ones do not fit), OFF keeps the
 * extras in the core kernels. */
static bool plan_xa(const rec_prob &p, const pr_rec_force &f, int smem_max, int smem_sm, int n_sm, rec_chunk_plan *pl)
{
    const long want = switch_want("extras_apart", f.extras_apart);
    const bool wg = pr_rec_xa_wg_fits(p);
    if (want == 0 || (want == -1 && !wg)) return false;
    const size_t mx = (size_t)smem_max;
    const bool on = p.delta && pr_rec_smem_xfwd(p, wg) <= mx && pr_rec_smem_xbwd(p, wg) <= mx &&
                    pr_rec_chunk_plan(rec_core_prob(p), f, smem_max, smem_sm, n_sm, pl) && pl->wg_state &&
                    pl->wg_scores && pl->segments == 1;
    if (want == 1 && !on)
        pr_fatal("recurrence: force.extras_apart = on runs the extra writes apart, which needs a core whose state pass and output take "
                 "their wgmma forms (TF32 products on, a build for sm_90a on an sm_90 GPU, K <= 128, no segments) and "
                 "%zu + %zu bytes of shared memory a block for the extras' kernels (K = %d, V = %d, L = %d, C = %d here)",
                 pr_rec_smem_xfwd(p, wg), pr_rec_smem_xbwd(p, wg), p.K, p.V, p.L, p.C);
    if (!on) *pl = rec_chunk_plan{}; /* the native plan starts from nothing */
    pl->xa = on, pl->wg_xa = on && wg;
    return on;
}

/* The segmented passes keep mma.sync's form. Where the plan segments, the
 * whole sequence is planned too (whole: segments 1, the unwidened tiles),
 * with the state and dstate passes' wgmma forms as plan_state_wg and
 * plan_dstate_wg pick them; where both take it and its steps, weighed by
 * serial_step_weight, cost less than the segments (seg_cost, weighed the
 * same way), the whole plan wins. */
static bool whole_wins(const rec_prob &p, const pr_rec_force &f, int smem_sm, int n_sm, size_t mx, double seg_cost,
                       rec_chunk_plan *whole)
{
    if (seg_cost < 0) return false;
    plan_state_wg(p, f, smem_sm, n_sm, mx, false, whole);
    plan_dstate_wg(p, f, smem_sm, n_sm, mx, false, whole);
    if (!whole->wg_state || !whole->wg_dstate) return false;
    const int bs = whole->bv_state, bd = whole->bv_dstate;
    const double steps =
        (double)serial_waves(p, bs, pr_rec_smem_state_wg(p, bs), smem_sm, n_sm) * serial_step_weight(bs, true) +
        (double)serial_waves(p, bd, pr_rec_smem_dstate_wg(p, bd), smem_sm, n_sm) * serial_step_weight(bd, true);
    return steps * (double)seq_chunks(p) < seg_cost;
}

static bool plan_passes(const rec_prob &p, const pr_rec_force &f, int smem_max, int smem_sm, int n_sm,
                        rec_chunk_plan *pl)
{
    if (p.L > 0 && plan_xa(p, f, smem_max, smem_sm, n_sm, pl)) return true;
    const size_t mx = (size_t)smem_max, two = (size_t)(smem_sm / 2 - 1024);
    const int bvs[2] = {p.Vp >= 64 ? 64 : 32, 32};
    /* the chunk-parallel kernels: the widest V tile that lets two blocks share
     * an SM, else the widest that fits */
    auto pick = [&](auto bytes, int *out) {
        for (size_t lim : {two, mx})
            for (int b : bvs)
                if (bytes(b) <= lim) return *out = b, true;
        return false;
    };
    /* the serial state passes (one block per sequence, head and V tile) */
    pl->C = p.C;
    bool ok = true;
    if (p.delta) ok &= pick([&](int b) { return pr_rec_smem_prep(p, b); }, &pl->bv_prep);
    ok &= pick_serial(p, mx, smem_sm, n_sm, [&](int b) { return pr_rec_smem_state(p, b); }, &pl->bv_state);
    ok &= pick([&](int b) { return pr_rec_smem_scores(p, 0, b); }, &pl->bv_out);
    ok &= pick([&](int b) { return pr_rec_smem_scores(p, 1, b); }, &pl->bv_dloc);
    ok &= pick_serial(p, mx, smem_sm, n_sm, [&](int b) { return pr_rec_smem_dstate(p, b); }, &pl->bv_dstate);
    /* the segmented forward's fix-up: none when it does not fit (the last pass runs instead) */
    /* V tiles of 32: no padding of V beyond the 32 every tile has, so the
     * least product work (the reloads of P_c per tile cost less), and the
     * most blocks an SM */
    pl->bv_fix = pr_rec_smem_segfix(p, 32) <= mx ? 32 : 0;
    pl->segments = 1, pl->seg_fix = 0, pl->wg_state = 0, pl->wg_dstate = 0, pl->wg_scores = 0, pl->wg_wy = 0;
    pl->wg_prep = 0, pl->xa = 0, pl->wg_xa = 0;
    if (ok) {
        const bool fs = forced_tile("bv_state", f.bv_state, p, mx, pr_rec_smem_state, &pl->bv_state);
        const bool fd = forced_tile("bv_dstate", f.bv_dstate, p, mx, pr_rec_smem_dstate, &pl->bv_dstate);
        rec_chunk_plan whole = *pl; /* segments 1, the tiles before widening */
        double seg_cost = plan_segments(p, f, smem_sm, n_sm, pl);
        if (pl->segments > 1 && !(fs && fd)) {
            if (!fs) widen_tile(p, smem_sm, mx, pr_rec_smem_state, &pl->bv_state);
            if (!fd) widen_tile(p, smem_sm, mx, pr_rec_smem_dstate, &pl->bv_dstate);
            seg_cost = plan_segments(p, f, smem_sm, n_sm, pl);
        }
        if (pl->segments > 1 && !fs && !fd && whole_wins(p, f, smem_sm, n_sm, mx, seg_cost, &whole)) *pl = whole;
        plan_state_wg(p, f, smem_sm, n_sm, mx, fs, pl);
        plan_dstate_wg(p, f, smem_sm, n_sm, mx, fd, pl);
        plan_scores_wg(p, f, mx, pl);
        plan_prep_wg(p, f, mx, pl);
    }
    /* grad: wgmma where its TF32 products apply (TF32 on, a build for sm_90a
     * on an sm_90 GPU), else mma.sync or fp32. force.grad_bpw forces
     * the mma.sync form, force.grad_pieces the wgmma one (tests, A/Bs). */
    const bool set_bpw = f.grad_bpw != 0, set_pcs = f.grad_pieces != 0, wg_able = rec_wgmma_runs() && p.tf32;
    if (set_bpw && set_pcs)
        pr_fatal("recurrence: force.grad_bpw (mma.sync) and force.grad_pieces (wgmma) force different forms of grad: "
                 "set one of them");
    if (set_pcs && !wg_able)
        pr_fatal("recurrence: force.grad_pieces forces grad's wgmma form, which needs TF32 products (matmul_tf32 on), a "
                 "build for sm_90a (CMAKE_CUDA_ARCHITECTURES=90a) and an sm_90 GPU");
    bool wg = set_pcs || (wg_able && !set_bpw);
    /* the widest K tile that lets two blocks share an SM (a narrower one
     * redoes the K-independent loads and dO Ua^T, but one block alone leaves
     * its loads and barriers unhidden, which costs more), else the widest
     * that fits; wgmma's V
     * tiles have 32 columns (its swizzled rows of 128 bytes) */
    const int bks[3] = {p.Kp <= 128 ? p.Kp : 128, p.Kp >= 64 ? 64 : 32, 32};
    const auto pick_tiles = [&](bool w) {
        for (size_t lim : {two, mx})
            for (int bk : bks)
                for (int bv : {w ? 32 : bvs[0], 32})
                    if (pr_rec_smem_grad(p, bk, bv, 0, w) <= lim) return pl->bk_grad = bk, pl->bv_grad = bv, true;
        return false;
    };
    bool g = pick_tiles(wg);
    /* where wgmma's form needs more shared memory than a block has (its
     * sums take room of their own once they need more than one pass, where
     * mma.sync's eight blocks a warp may still take one), mma.sync's runs */
    if (!g && wg && !set_pcs) wg = false, g = pick_tiles(false);
    const int bvs_g[2] = {wg ? 32 : bvs[0], 32};
    /* force.bk_grad = 32, 64, ... forces grad's K tile, with the widest V
     * tile that fits (tests: several K tiles at small K; A/Bs of tiles) */
    char must_be[96];
    long bk_force;
    snprintf(must_be, sizeof must_be, "a multiple of 32 up to %d whose shared memory fits", p.Kp);
    /* the widest V tile whose shared memory fits at K tile bk and r blocks a warp (0: none) */
    const auto bv_for = [&](int bk, int r) {
        for (int bv : bvs_g)
            if (pr_rec_smem_grad(p, bk, bv, r, wg) <= mx) return bv;
        return 0;
    };
    if (g && forced_num("bk_grad", f.bk_grad, must_be,
                          [&](long v) { return v >= 32 && v % 32 == 0 && v <= p.Kp && bv_for((int)v, 0); },
                          &bk_force))
        pl->bk_grad = (int)bk_force, pl->bv_grad = bv_for(pl->bk_grad, 0);
    pl->wg_grad = wg;
    pl->bpw_grad = g ? pr_rec_grad_blocks_per_warp(p, pl->bk_grad, wg) : 4;
    /* force.grad_bpw = 3, 4 or 8 (warp blocks) or force.grad_pieces = 2,
     * 3 or 4 (wgmma pieces) forces what a pass holds, keeping the V tile
     * where it still fits, else the widest that does (tests: fewer makes
     * several passes, and the sums then need room of their own) */
    long bpw;
    const bool forced =
        g && (wg ? forced_num("grad_pieces", f.grad_pieces, "2, 3 or 4, with shared memory that fits",
                                [&](long v) { return v >= 2 && v <= 4 && bv_for(pl->bk_grad, (int)v); }, &bpw)
                 : forced_num("grad_bpw", f.grad_bpw, "3, 4 or 8, with shared memory that fits",
                                [&](long v) { return (v == 3 || v == 4 || v == 8) && bv_for(pl->bk_grad, (int)v); },
                                &bpw));
    if (forced) {
        pl->bpw_grad = (int)bpw;
        if (pr_rec_smem_grad(p, pl->bk_grad, pl->bv_grad, pl->bpw_grad, wg) > mx)
            pl->bv_grad = bv_for(pl->bk_grad, pl->bpw_grad);
    }
    pl->passes_grad = g ? pr_rec_grad_passes(p, pl->bk_grad, pl->bpw_grad, wg) : 1;
    /* wy: likewise the widest K tile (of those that divide Kp) that lets two
     * blocks share an SM (at C = 64, K = 128 a K tile of 64 does: 104 KB
     * where the whole K took 171), else the widest that fits */
    bool w = !p.delta;
    for (size_t lim : {two, mx})
        for (int bk : bks)
            for (int bv : bvs)
                if (!w && p.Kp % bk == 0 && pr_rec_smem_wy(p, bk, bv) <= lim)
                    pl->bk_wy = bk, pl->bv_wy = bv, w = true;
    /* force.bk_wy = 32, 64, ... forces the K tile (tests: several tiles at small K) */
    snprintf(must_be, sizeof must_be, "a multiple of 32 that divides %d and whose shared memory fits", p.Kp);
    const bool bk_wy_forced =
        w && p.delta &&
        forced_num("bk_wy", f.bk_wy, must_be,
                     [&](long v) {
                         return v >= 32 && v % 32 == 0 && v <= p.Kp && p.Kp % v == 0 &&
                                pr_rec_smem_wy(p, (int)v, pl->bv_wy) <= mx;
                     },
                     &bk_force);
    if (bk_wy_forced) pl->bk_wy = (int)bk_force;
    /* two extras a product where that keeps as many blocks an SM as one */
    pl->xg_wy = 1;
    plan_wy_wg(p, f, mx, bk_wy_forced, pl);
    if (w && p.delta && p.L >= 2) {
        const size_t one = pr_rec_smem_wy(p, pl->bk_wy, pl->bv_wy), two_x = pr_rec_smem_wy_xg(p, pl->bk_wy, pl->bv_wy, 2);
        if (two_x <= mx && plan_per_sm(two_x, smem_sm) >= plan_per_sm(one, smem_sm)) pl->xg_wy = 2;
    }
    return ok && g && w;
}

/* bf16 data: the output pass reads q and writes o in place (both its forms),
 * unless force.bf16_staged asks for the f32 copies of every tensor; rows of
 * a multiple of 4 elements, so each 4 columns are one 8-byte access
 * (recurrence.cu checks the tensors' alignment and stages what is not).
 * Where the extras run apart only in their wgmma form reading kx and vx in
 * place (force.x16 not off; recurrence.cu also needs kx16, vx16 set and
 * 16-byte rows): its X16 instance reads q, k and v as bf16 too (xw_bf16,
 * 8 columns a load: K, V multiples of 8), writes its share of o in f32
 * scratch, and the output pass adds that before the one rounding */
static bool plan_io16_out(const rec_prob &p, const pr_rec_force &f, const rec_chunk_plan &pl)
{
    const bool xa_ok = pl.wg_xa && f.x16 != PR_REC_OFF && p.K % 8 == 0 && p.V % 8 == 0;
    return pr_rec_bf16_unstaged(p, f) && (!pl.xa || xa_ok);
}
/* bf16 data that may be read in place at all (the core rules' passes and gla's fast kernels) */
bool pr_rec_bf16_unstaged(const rec_prob &p, const pr_rec_force &f)
{
    if (f.bf16_staged != PR_REC_PLANNED && f.bf16_staged != PR_REC_OFF && f.bf16_staged != PR_REC_ON)
        pr_fatal("recurrence: force.bf16_staged must be PR_REC_PLANNED, PR_REC_OFF or PR_REC_ON, got %d",
                 (int)f.bf16_staged);
    return p.bf16 && f.bf16_staged != PR_REC_ON && p.K % 4 == 0 && p.V % 4 == 0;
}
/* and grad accumulates bf16 dq in place where its bf16 instances run (TF32
 * on: rec_bf_products), the only pass that writes dq without the extras
 * apart (with them their backward adds its share: dq stays staged, one
 * rounding of the whole sum) */
static bool plan_io16_dq(const rec_prob &p, const pr_rec_force &f, const rec_chunk_plan &pl)
{
    return plan_io16_out(p, f, pl) && p.tf32 && !pl.xa;
}
/* likewise wy accumulates bf16 dv in place for the delta rules, where it is
 * dv's only writer (dlocal and dstate write dU for them), in both its forms;
 * without beta dlocal reads dv's old value and dstate writes the sum, in
 * place where the backward reads its inputs in place (io16_bwd, their
 * wgmma forms) */
static bool plan_io16_bwd(const rec_prob &p, const pr_rec_force &f, const rec_chunk_plan &pl);
static bool plan_io16_dv(const rec_prob &p, const pr_rec_force &f, const rec_chunk_plan &pl)
{
    return plan_io16_dq(p, f, pl) && (p.delta || plan_io16_bwd(p, f, pl));
}

/* and the forward's passes read bf16 k and v in place too where each of
 * them runs its wgmma form (prep for the delta rules, state, output),
 * which copy them by cp.async into their f32 tiles and widen them there;
 * the mma.sync forms and the segmented passes read staged copies. With the
 * extras apart the core's passes read k so and V' (the extras' f32 output)
 * as values */
static bool plan_io16_kv(const rec_prob &p, const pr_rec_force &f, const rec_chunk_plan &pl)
{
    return plan_io16_out(p, f, pl) && (p.L == 0 || pl.xa) && pl.wg_state && pl.wg_scores &&
           (!p.delta || pl.wg_prep) && pl.segments == 1;
}

/* and the backward's passes read bf16 q, dO and k (and without beta v;
 * with beta no backward pass reads v) in place where dlocal, dstate, grad
 * and (with beta) wy run their wgmma forms (grad's bf16 instances: TF32
 * on); with the extras apart their backward too (its X16 instance; dq, dk
 * and dv stay staged there: plan_io16_dq) */
static bool plan_io16_bwd(const rec_prob &p, const pr_rec_force &f, const rec_chunk_plan &pl)
{
    return plan_io16_out(p, f, pl) && p.tf32 && (p.L == 0 || pl.xa) && pl.wg_scores && pl.wg_dstate && pl.wg_grad &&
           pl.segments == 1 && (!p.delta || pl.wg_wy);
}

/* force.bf16_mma (on unless OFF: on the H200 it made the four rules'
 * bf16 f+b 7-10% faster at B=8 T=2048 H=16 K=V=128, and test_bf16_mma's
 * numerics passed on an H100, 2026-12-05): the
 * passes whose wgmma forms read bf16 inputs in place multiply bf16 tiles
 * with bf16 wgmma: so far the output (where the forward reads k, v in
 * place: io16_kv) and dlocal (the backward's q, dO, k: io16_bwd), both
 * scores.cu, and prep (delta rules, with io16_kv); each bf16 form needs
 * less shared memory than its TF32 one.
 * Elsewhere the passes keep TF32 (recurrence.cu's rec_bf16_mma_refused says why) */
static void plan_bf16_mma(const rec_prob &p, const pr_rec_force &f, rec_chunk_plan *pl)
{
    pl->bf_out = pl->bf_dloc = pl->bf_prep = 0;
    if (switch_want("bf16_mma", f.bf16_mma) == 0 || pl->xa) return; /* the extras apart: TF32 forms (so far) */
    const bool fits = pl->wg_scores && pr_rec_smem_scores_bf(p, 0) <= pr_rec_smem_scores_wg(p, 0) &&
                      pr_rec_smem_scores_bf(p, 1) <= pr_rec_smem_scores_wg(p, 1);
    pl->bf_out = fits && pl->io16_kv;
    pl->bf_dloc = fits && pl->io16_bwd;
    /* prep (delta rules): its bf16 form needs less shared memory than its TF32 one */
    pl->bf_prep = p.delta && pl->wg_prep && pl->io16_kv && pr_rec_smem_prep_bf(p) <= pr_rec_smem_prep_wg(p);
}

bool pr_rec_chunk_plan(const rec_prob &p, const pr_rec_force &f, int smem_max, int smem_sm, int n_sm,
                       rec_chunk_plan *pl)
{
    const bool ok = plan_passes(p, f, smem_max, smem_sm, n_sm, pl);
    pl->io16_out = plan_io16_out(p, f, *pl);
    pl->io16_dq = plan_io16_dq(p, f, *pl);
    pl->io16_dv = plan_io16_dv(p, f, *pl);
    /* dk: grad's and (delta rules) wy's bf16 instances, the same conditions as dq */
    pl->io16_dk = pl->io16_dq;
    pl->io16_kv = plan_io16_kv(p, f, *pl);
    pl->io16_bwd = plan_io16_bwd(p, f, *pl);
    plan_bf16_mma(p, f, pl);
    return ok;
}
