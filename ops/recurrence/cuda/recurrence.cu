/* ops/recurrence/cuda/recurrence.cu: the CUDA entry points of the recurrence op
 * (node layout in ops/recurrence/recurrence.c).
 *
 * The kernels keep f32 in memory. bf16 data (q, k, v, beta, kx, vx, o and
 * their grads; g, h0, ht stay f32) is staged: each bf16 tensor is converted
 * to an f32 scratch copy, the kernels run, and o and the grads of bf16 inputs
 * are rounded back to bf16 once (rec_stage); except kx, vx and their grads
 * where the wgmma extras run apart, which read and accumulate them as bf16
 * in place (rec_x16_allowed: they are the only kernels to touch them then, and
 * kx, vx are the largest inputs: L times q's size), and except what the
 * plan reads and writes in place (pl.io16_*: the output pass's q and o; the
 * forward's k and v and the backward's q, dO, k and v where the passes
 * reading them run their wgmma forms; dq, dk, dv accumulated by grad and wy;
 * with the extras apart q, k, v, dO and o, and dv, in their X16 kernels too;
 * gla's fast kernels all of q, k, v, dO, o, dq, dk, dv).
 * With TF32 on, bf16 data also
 * picks the chunked kernels' bf16 instance (rec_bf_products), whose products
 * are bf16 mma.sync with f32 accumulators. The f32 path does not touch any
 * of it.
 *
 * iarg[1] = 0 runs the per-token kernels (recurrent.cu); iarg[1] = C > 0 the
 * chunked ones (chunked.cu and its passes) with chunks of exactly C tokens,
 * C = 32 or 64; iarg[3] the forcing fields (pr_rec_force_of).
 * Any other C, or a C whose kernels need more shared memory than a block has,
 * is an error naming the limit (rec_decide; pr_recurrence_plan reports it
 * before anything runs): never a silent switch of form or chunk size. The
 * forward and backward decide from the same sizes. Matrix products inside
 * chunks use tensor cores when ctx->matmul_tf32 is set (TF32 on f32 data,
 * bf16 on bf16 data), plain fp32 otherwise.
 *
 * Saved (CUDA path): saved[0] the sequence table (int32, [3N + nchunks];
 * a 1-element placeholder without cu_seqlens); per-token form: saved[1] = r
 * (delta rules); chunked form: saved[1] = hs, and for the delta rules
 * saved[2..5] = R, T', W, R0 (see recurrence_cuda.cuh; gla's fast form: saved[2] = the
 * chunks' scores A [nchunks,H,C,C]), and when the plan
 * segments the serial passes saved[6] = the segment table and, for the delta
 * rules, saved[7] = the segments' transitions A (rec_segs; the backward uses
 * the forward's segments, from the saved table). Only saved[0] when
 * the node is not recorded (n->recording false). bf16 data in the per-token
 * form: saved[REC_SAVED_O32] = o in f32 (the backward reads o, and its bf16
 * rounding would cost accuracy).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <vector>

#include "ops/recurrence/cuda/recurrence_cuda.cuh"

enum { IN_Q, IN_K, IN_V, IN_G, IN_BETA, IN_KX, IN_VX, IN_H0, IN_CU, IN_N };
/* per-token form: 6 = o in f32 (bf16 data); chunked form with segments: 6 = the segment table, 7 = A */
enum { REC_SAVED_O32 = 6, REC_SAVED_SEG = 6, REC_SAVED_A = 7 };

/* device limits: a block's opt-in shared memory (0), an SM's (1), the SM count (2) */
static int rec_dev_attr(int which)
{
    static const cudaDeviceAttr attr[3] = {cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                           cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                           cudaDevAttrMultiProcessorCount};
    return pr_cuda_attr(attr[which]);
}

/* f32 views of bf16 tensors: scratch buffers from the caching allocator,
 * returned when the stage goes out of scope (stream order keeps a returned
 * buffer untouched until the kernels queued before have run) */
struct rec_stage {
    cudaStream_t s;
    float *buf[2 * IN_N + 2] = {};
    size_t len[2 * IN_N + 2] = {};
    int nbuf = 0;
    explicit rec_stage(cudaStream_t stream) : s(stream) {}
    rec_stage(const rec_stage &) = delete;
    rec_stage &operator=(const rec_stage &) = delete;
    ~rec_stage()
    {
        for (int i = 0; i < nbuf; i++) rec_scratch_free(buf[i], len[i]);
    }
    float *take(size_t n)
    {
        PR_ASSERT(nbuf < 2 * IN_N + 2);
        len[nbuf] = n;
        return buf[nbuf++] = rec_scratch(n);
    }
    /* t's data as f32: its own when f32; for bf16 a scratch copy of its values
     * (copy) or uninitialized scratch (an output the kernels write) */
    float *f32(const pr_tensor *t, const char *what, bool copy = true)
    {
        if (!t) return nullptr;
        if (t->dtype == PR_F32) return (float *)t->data;
        PR_CHECK(t->dtype == PR_BF16, "recurrence: the CUDA kernels take f32 or bf16; %s is %s (run f64 on the CPU)",
                 what, pr_dtype_name(t->dtype));
        float *f = take((size_t)t->numel);
        if (copy) pr_cuda_cast(s, f, PR_F32, t->data, PR_BF16, t->numel, false);
        return f;
    }
    /* t = f (rounded to t's dtype) when f is a scratch copy of t */
    void put(pr_tensor *t, const float *f)
    {
        if (t && f != t->data) pr_cuda_cast(s, t->data, t->dtype, f, PR_F32, t->numel, false);
    }
};

static bool al16(const void *p) { return !p || pr_aligned16(p); }

/* the problem of a node, without the sequence tables: its inputs as f32
 * (staged in st when bf16); o is where the kernels write o (alignment only) */
static rec_prob rec_prob_of(pr_ctx *ctx, const pr_node *n, rec_stage &st, const float *o)
{
    rec_prob p = {};
    const pr_tensor *q = n->in[IN_Q], *v = n->in[IN_V], *kx = n->in[IN_KX];
    /* bf16 q, k and v once the plan is known (rec_q_of, rec_kv_of): the forward's passes may read them in place */
    p.q = q->dtype == PR_BF16 ? nullptr : st.f32(q, "q");
    p.k = q->dtype == PR_BF16 ? nullptr : st.f32(n->in[IN_K], "k");
    p.v = q->dtype == PR_BF16 ? nullptr : st.f32(v, "v");
    p.g = st.f32(n->in[IN_G], "g"), p.beta = st.f32(n->in[IN_BETA], "beta");
    p.h0 = st.f32(n->in[IN_H0], "h0"); /* kx and vx once the plan is known: rec_extras_of */
    p.T = (int)q->shape[1], p.H = (int)q->shape[2], p.K = (int)q->shape[3], p.V = (int)v->shape[3];
    p.L = kx ? (int)kx->shape[3] : 0;
    p.N = n->in[IN_CU] ? (int)n->in[IN_CU]->numel - 1 : (int)q->shape[0];
    p.packed = n->in[IN_CU] != nullptr;
    p.Kp = (p.K + 31) / 32 * 32, p.Vp = (p.V + 31) / 32 * 32;
    p.has_g = p.g != nullptr, p.delta = p.beta != nullptr;
    p.gv = n->iarg[2] != 0;
    p.gk = pr_rule_g_per_key((pr_rule)n->iarg[0]) && !p.gv;
    p.tf32 = ctx->matmul_tf32 ? 1 : 0;
    p.bf16 = q->dtype == PR_BF16; /* pr_recurrence: then k, v, kx and vx are bf16 too */
    p.scale = (float)n->farg[0];
    /* bf16 kx and vx are either staged (aligned scratch) or read in place only when aligned */
    auto f32_al16 = [](const pr_tensor *t) { return !t || t->dtype != PR_F32 || al16(t->data); };
    p.vec = p.K % 4 == 0 && p.V % 4 == 0 && al16(p.q) && al16(p.k) && al16(p.v) && f32_al16(kx) &&
            f32_al16(n->in[IN_VX]) && al16(p.h0) && al16(o) && al16(n->out[1]->data);
    return p;
}

static bool al8(const void *p) { return ((uintptr_t)p & 7u) == 0; }

/* whether the output pass of this forward reads bf16 q and writes bf16 o in
 * place: the plan has it so (pl.io16_out, bf16 data) and both are 8-byte
 * aligned (its 4-column accesses); else both are staged as before. With the
 * extras apart their kernel reads q, k and v too (16-byte loads), in its X16
 * instance only (kx, vx in place: p.kx16 set), so all of q, k, v are then
 * read in place or none (rec_kv_of stages k and v together) */
static bool rec_io16_out(const pr_node *n, bool chunked, const rec_chunk_plan &pl, const rec_prob &p)
{
    const pr_tensor *q = n->in[IN_Q], *k = n->in[IN_K], *v = n->in[IN_V];
    const bool xa_ok = p.kx16 && pr_aligned16(q->data) && pr_aligned16(k->data) && pr_aligned16(v->data);
    return chunked && pl.io16_out && q->dtype == PR_BF16 && n->out[0]->dtype == PR_BF16 && al8(q->data) &&
           al8(n->out[0]->data) && (!pl.xa || xa_ok);
}
/* q into p: bf16 q in place (p->q16) or as f32 (staged when bf16) */
static void rec_q_of(const pr_node *n, rec_stage &st, bool in_place, rec_prob *p)
{
    const pr_tensor *q = n->in[IN_Q];
    if (q->dtype != PR_BF16) return; /* rec_prob_of set it */
    if (in_place) p->q16 = (const unsigned short *)q->data;
    else p->q = st.f32(q, "q");
}

/* k and v into p: bf16 in place (p->k16, p->v16) where the plan has the
 * forward's passes read them so (pl.io16_kv, with q in place) and both are
 * 8-byte aligned, else as f32 (staged when bf16) */
static void rec_kv_of(const pr_node *n, rec_stage &st, bool in_place, rec_prob *p)
{
    const pr_tensor *k = n->in[IN_K], *v = n->in[IN_V];
    if (k->dtype != PR_BF16) return; /* rec_prob_of set them */
    if (in_place && al8(k->data) && al8(v->data)) {
        p->k16 = (const unsigned short *)k->data, p->v16 = (const unsigned short *)v->data;
        return;
    }
    p->k = st.f32(k, "k"), p->v = st.f32(v, "v");
}

/* The backward's inputs q, k, v and dO into p: bf16 q, dO and k in place
 * (p->q16, p->dout16, p->k16), and without beta v too, where the plan has
 * the backward read them so (pl.io16_bwd) and every one of them is 8-byte
 * aligned; with beta no chunked backward pass reads v (grad reads R, wy
 * the saved R0, the extras apart V' never), so v is not staged then,
 * in place or not. Else as f32 (staged when bf16). */
static void rec_bwd_inputs_of(const pr_node *n, rec_stage &st, bool chunked, const rec_chunk_plan &pl, rec_prob *p)
{
    const pr_tensor *q = n->in[IN_Q], *k = n->in[IN_K], *v = n->in[IN_V], *dout = n->out[0]->grad;
    /* with the extras apart their X16 instance (kx, vx in place) reads q, k, dO too, by 16-byte loads */
    const bool xa_ok = p->kx16 && pr_aligned16(q->data) && pr_aligned16(k->data) && dout && pr_aligned16(dout->data);
    const bool in_place = chunked && pl.io16_bwd && q->dtype == PR_BF16 && dout && dout->dtype == PR_BF16 &&
                          al8(q->data) && al8(dout->data) && al8(k->data) && (p->delta || al8(v->data)) &&
                          (!pl.xa || xa_ok);
    if (!in_place) {
        rec_q_of(n, st, false, p);
        if (chunked && p->delta && k->dtype == PR_BF16) p->k = st.f32(k, "k"); /* v: no chunked pass reads it */
        else rec_kv_of(n, st, false, p);
        p->dout = st.f32(dout, "do");
        return;
    }
    p->q16 = (const unsigned short *)q->data, p->dout16 = (const unsigned short *)dout->data;
    p->k16 = (const unsigned short *)k->data;
    if (!p->delta) p->v16 = (const unsigned short *)v->data;
}

/* bf16 data that the wgmma extras read (kx, vx) or accumulate (their grads)
 * in place, unstaged: where the plan runs the extras apart in that form,
 * the only kernels that touch them then, and the rows allow 16-byte
 * accesses (K, V multiples of 8, aligned). kx and vx go together (the
 * kernels' X16 instance), each grad on its own. */
/* whether the wgmma extras of this call may read and accumulate bf16 kx, vx,
 * dkx, dvx in place (decided once a call; rec_bf16_in_place then asks each tensor) */
static bool rec_x16_allowed(const rec_prob &p, bool chunked, const rec_chunk_plan &pl, const pr_rec_force &f)
{
    /* force.x16 OFF stages them too (for comparisons: the same bits either way) */
    if (f.x16 != PR_REC_PLANNED && f.x16 != PR_REC_OFF && f.x16 != PR_REC_ON)
        pr_fatal("recurrence: force.x16 must be PR_REC_PLANNED, PR_REC_OFF or PR_REC_ON, got %d", (int)f.x16);
    const bool want = f.x16 != PR_REC_OFF;
    return want && chunked && pl.xa && pl.wg_xa && p.K % 8 == 0 && p.V % 8 == 0;
}
static bool rec_bf16_in_place(const pr_tensor *t, bool x16)
{
    return x16 && t && t->dtype == PR_BF16 && pr_aligned16(t->data);
}
/* kx and vx into p: in place (p->kx16, p->vx16) or as f32 (staged when bf16) */
static void rec_extras_of(const pr_node *n, rec_stage &st, bool x16, rec_prob *p)
{
    const pr_tensor *kx = n->in[IN_KX], *vx = n->in[IN_VX];
    if (rec_bf16_in_place(kx, x16) && rec_bf16_in_place(vx, x16)) {
        p->kx16 = (const unsigned short *)kx->data, p->vx16 = (const unsigned short *)vx->data;
        return;
    }
    p->kx = st.f32(kx, "kx"), p->vx = st.f32(vx, "vx");
}

/* The form a node runs with, the same in forward and backward: *chunked and
 * the tiles in *pl (p->C set) for chunk > 0. false, with why naming the
 * limit, when the kernels cannot run what was asked. Empty problems take the
 * per-token path, whose launchers return early. */
static bool rec_decide(rec_prob *p, int chunk, const pr_rec_force &f, bool *chunked, rec_chunk_plan *pl, char *why,
                       size_t why_n)
{
    *chunked = false;
    p->C = 0;
    if (p->K > 256) {
        snprintf(why, why_n, "recurrence: the CUDA kernels support K <= 256, got K = %d", p->K);
        return false;
    }
    /* gla_token.cu: registers and 8 KB of shared memory at K <= 256 */
    if ((p->gv || p->gk) && chunk <= 0) return true;
    if (chunk <= 0) {
        const size_t need = pr_rec_token_smem_min(*p);
        if (need <= (size_t)rec_dev_attr(0)) return true;
        snprintf(why, why_n, "recurrence: the CUDA per-token kernels at K = %d, L = %d need %zu bytes of shared "
                             "memory, more than a block's %d", p->K, p->L, need, rec_dev_attr(0));
        return false;
    }
    if (chunk != 32 && chunk != 64) {
        snprintf(why, why_n, "recurrence: the CUDA chunked kernels run chunks of 32 or 64 tokens, not chunk = %d "
                             "(chunk 0 runs the per-token form)", chunk);
        return false;
    }
    if (p->T == 0 || p->N == 0 || p->H == 0 || p->V == 0) return true;
    p->C = chunk;
    if (f.gla_fast != PR_REC_PLANNED && f.gla_fast != PR_REC_OFF && f.gla_fast != PR_REC_ON)
        pr_fatal("recurrence: force.gla_fast must be PR_REC_PLANNED, PR_REC_OFF or PR_REC_ON, got %d", (int)f.gla_fast);
    if (f.gla_fast == PR_REC_ON && !p->gk)
        pr_fatal("recurrence: force.gla_fast = on runs the fast form of rule gla's per-key decay; this call is %s",
                 p->gv ? "gla with a per-value decay (g_per_value)" : "another rule");
    if (p->gk || p->gv) { /* gla_chunked.cu (both decay axes) */
        *pl = rec_chunk_plan{};
        pl->C = chunk;
        /* per-key decays run the fast kernels unless forced off, or where their
         * shared memory does not fit and on was not insisted on (the plain ones
         * then, which need less at K <= 32). On an H100 (2026-12-05) the fast
         * form's f+b was 5.8 ms against the plain 9.3 at B=8 T=2048 H=16
         * K=V=128, with every CUDA test and golden file passing in both */
        pl->gla_fast = p->gk && f.gla_fast != PR_REC_OFF;
        if (pl->gla_fast && f.gla_fast != PR_REC_ON && pr_rec_gla_chunk_smem(*p, true) > (size_t)rec_dev_attr(0))
            pl->gla_fast = 0;
        /* bf16 data in place in the fast kernels (gla_ld_in: 4-column copies), as
         * the core rules' passes: q, k, v and dO read, o written, dq, dk, dv
         * accumulated, unstaged (force.bf16_staged on stages them) */
        const int io16 = pl->gla_fast && pr_rec_bf16_unstaged(*p, f);
        pl->io16_out = pl->io16_kv = pl->io16_bwd = pl->io16_dq = pl->io16_dk = pl->io16_dv = io16;
        const size_t need = pr_rec_gla_chunk_smem(*p, pl->gla_fast != 0);
        if (need <= (size_t)rec_dev_attr(0)) return *chunked = true;
        snprintf(why, why_n, "recurrence: gla's CUDA chunks of %d tokens at K = %d need %zu bytes of shared memory, "
                             "more than a block's %d; %s", chunk, p->K, need, rec_dev_attr(0),
                 chunk == 64 ? "chunk = 32 needs less" : "chunk = 0 runs the per-token form");
        p->C = 0;
        return false;
    }
    if (pr_rec_chunk_plan(*p, f, rec_dev_attr(0), rec_dev_attr(1), rec_dev_attr(2), pl)) return *chunked = true;
    snprintf(why, why_n, "recurrence: CUDA chunks of %d tokens at K = %d, V = %d, L = %d need more than a block's "
                         "%d bytes of shared memory; %s", chunk, p->K, p->V, p->L, rec_dev_attr(0),
             chunk == 64 ? "chunk = 32 needs less" : "chunk = 0 runs the per-token form");
    p->C = 0;
    return false;
}

/* Plans made so far, by problem. A plan depends only on the sizes and flags
 * of its key, the forcing fields and the device (one a process), so each is
 * made once: pr_recurrence's check, the forward and the backward of a call
 * look it up (each by itself: a plan dropped between them is made again,
 * the same). Plans the kernels cannot run are not kept (they stop the call). */
struct rec_plan_key {
    int N, T, H, K, V, L, chunk, has_g, delta, tf32, gk, gv, packed, bf16, vec;
    pr_rec_force force;
};
struct rec_plan_memo {
    rec_plan_key key;
    bool chunked;
    int C;
    rec_chunk_plan pl;
};
static std::vector<rec_plan_memo> rec_plans;
static std::mutex rec_plans_lock;   /* a grid's worker threads plan at once; planning itself runs unlocked */

static bool rec_decide_cached(rec_prob *p, int chunk, const pr_rec_force &f, bool *chunked, rec_chunk_plan *pl,
                              char *why, size_t why_n)
{
    const rec_plan_key key = {p->N,     p->T,     p->H,  p->K,  p->V,      p->L,    chunk, p->has_g, p->delta,
                              p->tf32,  p->gk,    p->gv, p->packed, p->bf16, p->vec, f};
    {
        std::lock_guard<std::mutex> g(rec_plans_lock);
        for (const rec_plan_memo &m : rec_plans)
            if (!memcmp(&m.key, &key, sizeof key)) {
                p->C = m.C, *chunked = m.chunked, *pl = m.pl;
                return true;
            }
    }
    *pl = rec_chunk_plan{};
    if (!rec_decide(p, chunk, f, chunked, pl, why, why_n)) return false;
    std::lock_guard<std::mutex> g(rec_plans_lock);
    if (rec_plans.size() >= 256) rec_plans.clear(); /* many shapes (packed lengths): plan them again */
    rec_plans.push_back({key, *chunked, p->C, *pl});
    return true;
}

static bool rec_decide_or_die(rec_prob *p, int chunk, const pr_rec_force &f, rec_chunk_plan *pl)
{
    char why[256];
    bool chunked;
    if (!rec_decide_cached(p, chunk, f, &chunked, pl, why, sizeof why)) pr_fatal("%s", why);
    return chunked;
}

/* force.bf16_mma on: why no pass takes bf16 wgmma (NULL where one does).
 * It needs the passes' wgmma forms reading bf16 data in place: bf16 data,
 * TF32 on (the wgmma forms' switch), the chunked form of the core rules
 * (not gla), no extra writes, no segments, the scores kernels' wgmma form,
 * nothing staged by force.bf16_staged */
static const char *rec_bf16_mma_refused(const rec_prob &p, bool chunked, const rec_chunk_plan &pl)
{
    if (pl.bf_out || pl.bf_dloc || pl.bf_prep) return nullptr;
    if (!p.bf16) return "f32 data (bf16 data only)";
    if (!chunked) return "the per-token form";
    if (p.gk || p.gv) return "gla (its own kernels)";
    if (!p.tf32) return "TF32 off (the wgmma forms need it)";
    if (p.L > 0) return "extra writes (prism_core's extras)";
    if (pl.segments > 1) return "segments (their passes are mma.sync)";
    if (!pl.wg_scores) return "the scores kernels' mma.sync form";
    if (!pl.io16_out) return "bf16 inputs staged (force.bf16_staged, or K, V not multiples of 4)";
    return "the forward's or backward's inputs staged (a pass in its mma.sync form)";
}

/* the plan's data (pr_rec_plan, recurrence.h) of a decided plan */
static void rec_plan_fill(const rec_prob &p, bool chunked, const rec_chunk_plan &pl, const pr_rec_force &f,
                          pr_rec_plan *out)
{
    out->device = PR_CUDA;
    out->chunk = chunked ? p.C : 0;
    out->g_per_value = p.gv != 0;
    out->gla_fast = chunked && pl.gla_fast;
    out->gla_in_place = chunked && pl.gla_fast && pl.io16_out;
    out->bf16_mma_refused = f.bf16_mma == PR_REC_ON ? rec_bf16_mma_refused(p, chunked, pl) : nullptr;
    if (!chunked || p.gk || p.gv) return; /* gla's chunked kernels (gla_chunked.cu) have no passes to plan */
    const auto eng = [](int wg) { return wg ? PR_REC_WGMMA : PR_REC_MMA; };
    pr_rec_pass *ps = out->pass;
    ps[PR_REC_PASS_PREP] = {(bool)p.delta, eng(pl.wg_prep), pl.bv_prep, 0, PR_REC_PROD_F32, false};
    ps[PR_REC_PASS_STATE] = {true, eng(pl.wg_state), pl.bv_state, 0, PR_REC_PROD_F32, false};
    ps[PR_REC_PASS_OUTPUT] = {true, eng(pl.wg_scores), pl.bv_out, 0, PR_REC_PROD_F32, false};
    ps[PR_REC_PASS_DLOCAL] = {true, eng(pl.wg_scores), pl.bv_dloc, 0, PR_REC_PROD_F32, false};
    ps[PR_REC_PASS_DSTATE] = {true, eng(pl.wg_dstate), pl.bv_dstate, 0, PR_REC_PROD_F32, false};
    ps[PR_REC_PASS_GRAD] = {true, eng(pl.wg_grad), pl.bv_grad, pl.bk_grad, PR_REC_PROD_F32, false};
    ps[PR_REC_PASS_WY] = {(bool)p.delta, eng(pl.wg_wy), pl.bv_wy, pl.bk_wy, PR_REC_PROD_F32, false};
    out->segments = pl.segments, out->seg_fix = pl.seg_fix != 0, out->bv_fix = pl.bv_fix;
    out->grad_blocks = pl.bpw_grad, out->grad_passes = pl.passes_grad, out->wy_extras = pl.xg_wy;
    out->extras_apart = pl.xa != 0, out->extras = pl.xa ? eng(pl.wg_xa) : PR_REC_AUTO;
    /* products: fp32 with TF32 off; wgmma forms TF32 (grad's wgmma form:
     * its V loop; its other products are those of its mma.sync form);
     * mma.sync forms bf16 on bf16 data (rec_bf_products), else TF32 */
    for (int i = 0; i < PR_REC_NPASS; i++)
        ps[i].prod = !p.tf32 ? PR_REC_PROD_F32
                     : ps[i].engine == PR_REC_MMA && rec_bf_products(p) ? PR_REC_PROD_BF16 : PR_REC_PROD_TF32;
    /* force.bf16_mma: bf16 wgmma where the plan took it */
    if (pl.bf_out) ps[PR_REC_PASS_OUTPUT].prod = PR_REC_PROD_BF16;
    if (pl.bf_dloc) ps[PR_REC_PASS_DLOCAL].prod = PR_REC_PROD_BF16;
    if (pl.bf_prep) ps[PR_REC_PASS_PREP].prod = PR_REC_PROD_BF16;
    ps[PR_REC_PASS_OUTPUT].bf16_in_place = pl.io16_out != 0; /* q and o (and k, v with io16_kv) */
    ps[PR_REC_PASS_PREP].bf16_in_place = ps[PR_REC_PASS_STATE].bf16_in_place = pl.io16_kv != 0; /* k, v */
    /* q, dO, k (and dv without beta) */
    ps[PR_REC_PASS_DLOCAL].bf16_in_place = ps[PR_REC_PASS_DSTATE].bf16_in_place = pl.io16_bwd != 0;
    ps[PR_REC_PASS_GRAD].bf16_in_place = pl.io16_dq || pl.io16_dk || pl.io16_bwd;             /* dq, dk; q, dO, k, v */
    /* dv, dk; k (wy runs for the delta rules only: without them io16_dv is dlocal's and dstate's) */
    ps[PR_REC_PASS_WY].bf16_in_place = p.delta && (pl.io16_dv || pl.io16_dk || pl.io16_bwd);
}

extern "C" bool pr_recurrence_plan_cuda(const pr_recurrence_opts *opt, int64_t N, int64_t T, int64_t H, int64_t K,
                                        int64_t V, int64_t L, pr_rec_plan *plan, char *why, size_t why_n)
{
    if (!pr_cuda_available()) {
        snprintf(why, why_n, "recurrence: no CUDA device to plan for");
        return false;
    }
    rec_prob p = {};
    p.N = (int)N, p.T = (int)T, p.H = (int)H, p.K = (int)K, p.V = (int)V;
    p.L = pr_rule_has_extra(opt->rule) ? (int)L : 0;
    p.Kp = (p.K + 31) / 32 * 32, p.Vp = (p.V + 31) / 32 * 32;
    p.has_g = pr_rule_has_g(opt->rule), p.delta = pr_rule_has_beta(opt->rule);
    p.gv = opt->g_per_value ? 1 : 0;
    p.gk = pr_rule_g_per_key(opt->rule) && !p.gv;
    p.tf32 = opt->tf32 ? 1 : 0;
    p.bf16 = opt->bf16 ? 1 : 0;
    rec_chunk_plan pl = {};
    bool chunked;
    if (!rec_decide_cached(&p, opt->chunk, opt->force, &chunked, &pl, why, why_n)) return false;
    rec_plan_fill(p, chunked, pl, opt->force, plan);
    return true;
}

/* the sequence table [bos[N], len[N], cbase[N], cseq[nchunks]] from cu_seqlens,
 * or nullptr without it; fills p.seq, p.cseq, p.ncs, p.nchunks. off_out: the
 * host offsets (N + 1, malloc'd) when packed and not saved, else NULL. */
static pr_tensor *rec_tables(pr_ctx *ctx, const pr_node *n, rec_prob *p, const pr_tensor *saved,
                             double **off_out = nullptr)
{
    if (off_out) *off_out = nullptr;
    const int C = p->C > 0 ? p->C : 1;
    const pr_tensor *cu = n->in[IN_CU];
    if (!cu) {
        p->ncs = (p->T + C - 1) / C;
        p->nchunks = p->N * p->ncs;
        return nullptr;
    }
    const int N = p->N;
    double *off = (double *)malloc(sizeof(double) * (size_t)(N + 1));
    PR_CHECK(off, "recurrence: out of host memory");
    pr_to_host_f64(cu, off);
    int nchunks = 0;
    for (int s = 0; s < N; s++) nchunks += ((int)(off[s + 1] - off[s]) + C - 1) / C;
    pr_tensor *tab = (pr_tensor *)saved;
    if (!tab) {
        int *h = (int *)malloc(sizeof(int) * (size_t)(3 * N + nchunks + 1));
        PR_CHECK(h, "recurrence: out of host memory");
        for (int s = 0, c = 0; s < N; s++) {
            const int bos = (int)off[s], len = (int)(off[s + 1] - off[s]);
            h[s] = bos, h[N + s] = len, h[2 * N + s] = c;
            for (int i = 0; i < (len + C - 1) / C; i++) h[3 * N + c++] = s;
        }
        const int64_t shp[1] = {3 * N + nchunks + 1};
        tab = pr_op_output(ctx, PR_I32, PR_CUDA, 1, shp);
        pr_device_memcpy(tab->data, PR_CUDA, h, PR_CPU, sizeof(int) * (size_t)(3 * N + nchunks + 1));
        free(h);
    }
    if (off_out && !saved) *off_out = off;
    else free(off);
    p->seq = (const int *)tab->data;
    p->cseq = p->seq + 3 * N;
    p->nchunks = nchunks;
    return tab;
}

/* The segment table (recurrence_cuda.cuh, rec_segs) of P segments per
 * sequence (fewer for one of fewer chunks; a sequence of no tokens keeps one
 * empty segment): a sequence of nck chunks splits at chunks j*nck/P, so
 * every segment is whole chunks of the sequence and chunk numbering is the
 * unsegmented one. off: the packed offsets (N + 1), or NULL for N rows of T.
 * Uploaded as int32 [3 nseg + N + 1]; *nseg set. */
static pr_tensor *rec_seg_table(pr_ctx *ctx, const rec_prob &p, int P, const double *off, int *nseg)
{
    const int N = p.N, C = p.C;
    int total = 0;
    for (int s = 0; s < N; s++) {
        const int len = off ? (int)(off[s + 1] - off[s]) : p.T, nck = (len + C - 1) / C;
        total += nck < 1 ? 1 : nck < P ? nck : P;
    }
    int *h = (int *)malloc(sizeof(int) * (size_t)(3 * total + N + 1));
    PR_CHECK(h, "recurrence: out of host memory");
    int *bos = h, *len = h + total, *cbase = h + 2 * total, *first = h + 3 * total;
    for (int s = 0, j = 0, cb = 0; s < N; s++) {
        const int b = off ? (int)off[s] : s * p.T, l = off ? (int)(off[s + 1] - off[s]) : p.T;
        const int nck = (l + C - 1) / C, ps = nck < 1 ? 1 : nck < P ? nck : P;
        first[s] = j;
        for (int i = 0; i < ps; i++, j++) {
            const int c0 = (int)((long long)i * nck / ps), c1 = (int)((long long)(i + 1) * nck / ps);
            bos[j] = b + c0 * C;
            len[j] = (c1 * C < l ? c1 * C : l) - c0 * C;
            cbase[j] = cb + c0;
        }
        cb += nck;
        first[s + 1] = j;
    }
    const int64_t shp[1] = {3 * total + N + 1};
    pr_tensor *tab = pr_op_output(ctx, PR_I32, PR_CUDA, 1, shp);
    pr_device_memcpy(tab->data, PR_CUDA, h, PR_CPU, sizeof(int) * (size_t)shp[0]);
    free(h);
    *nseg = total;
    return tab;
}

/* where the kernels write o: o itself when f32; for bf16 the f32 o that a
 * recorded per-token forward saves for its backward, else scratch */
static float *rec_o32(pr_ctx *ctx, pr_node *n, rec_stage &st, bool chunked)
{
    pr_tensor *o = n->out[0];
    if (o->dtype == PR_F32) return (float *)o->data;
    if (chunked || !n->recording) return st.f32(o, "o", false);
    n->saved[REC_SAVED_O32] = pr_op_output(ctx, PR_F32, PR_CUDA, o->ndim, o->shape);
    return (float *)n->saved[REC_SAVED_O32]->data;
}

extern "C" void pr_recurrence_forward_cuda(pr_ctx *ctx, pr_node *n)
{
    const cudaStream_t s = pr_cuda_stream(ctx);
    rec_stage st(s);
    const pr_tensor *out0 = n->out[0];
    rec_prob p = rec_prob_of(ctx, n, st, out0->dtype == PR_F32 ? (const float *)out0->data : nullptr);
    rec_chunk_plan pl;
    const pr_rec_force &force = *pr_rec_force_of(n->iarg[3]);
    const bool chunked = rec_decide_or_die(&p, (int)n->iarg[1], force, &pl);
    rec_extras_of(n, st, rec_x16_allowed(p, chunked, pl, force), &p);
    const bool io16 = rec_io16_out(n, chunked, pl, p);
    rec_q_of(n, st, io16, &p);
    rec_kv_of(n, st, io16 && pl.io16_kv, &p);
    double *off = nullptr;
    pr_tensor *tab = rec_tables(ctx, n, &p, nullptr, &off);
    const int64_t one[1] = {1};
    n->saved[0] = tab ? tab : n->recording ? pr_op_output(ctx, PR_I32, PR_CUDA, 1, one) : nullptr;
    n->n_saved = n->saved[0] ? 1 : 0;
    if (p.N == 0 || p.H == 0 || p.V == 0 || p.K == 0) {
        free(off);
        if (p.N && p.H && n->out[0]->numel) pr_zero_(n->out[0]);
        return;
    }
    /* o in place: the output pass writes it (with the extras apart their share
     * first goes to f32 scratch, which it adds) */
    float *o = !io16 ? rec_o32(ctx, n, st, chunked) : pl.xa ? st.take((size_t)n->out[0]->numel) : nullptr;
    float *ht = (float *)n->out[1]->data;
    if (io16) p.o16 = (unsigned short *)n->out[0]->data;
    p.vec = p.vec && al16(o);
    const long long rows = n->in[IN_CU] ? (long long)p.T : (long long)p.N * p.T;
    /* Recorded: the residuals live in the step arena for the backward. Not
     * recorded: the per-token form saves nothing, and the chunked form's
     * intermediates (its own kernels read them) are scratch, returned to the
     * cache once the launches are queued (later users queue behind them). */
    float *scratch[PR_MAX_SAVED] = {};
    size_t scratch_n[PR_MAX_SAVED] = {};
    auto saved = [&](int i, long long a, long long b, long long c) {
        if (!n->recording) {
            scratch_n[i] = (size_t)(a * b * c);
            return scratch[i] = rec_scratch(scratch_n[i]);
        }
        const int64_t shp[3] = {a, b, c};
        n->saved[i] = pr_op_output(ctx, PR_F32, PR_CUDA, 3, shp);
        n->n_saved = i + 1;
        return (float *)n->saved[i]->data;
    };
    if (!chunked) {
        free(off);
        float *r = p.delta && n->recording ? saved(1, rows, p.H, p.V) : nullptr;
        if (p.gk || p.gv) pr_rec_gla_token_forward(s, p, o, ht);
        else pr_rec_token_forward(s, p, o, ht, r);
        if (n->saved[REC_SAVED_O32]) n->n_saved = REC_SAVED_O32 + 1;
        st.put(n->out[0], o);
        return;
    }
    rec_chunk_saved sv = {};
    sv.hs = saved(1, (long long)p.nchunks * p.H, p.K, p.V);
    if (p.gk || p.gv) {
        free(off);
        /* the fast form, recorded: the chunks' scores A for the backward's gla_dv (saved[2]) */
        float *A = pl.gla_fast && p.gk && n->recording ? saved(2, (long long)p.nchunks * p.H, p.C, p.C) : nullptr;
        pr_rec_gla_chunk_forward(s, p, sv.hs, o, ht, pl.gla_fast != 0, A);
        if (!io16) st.put(n->out[0], o);
        if (scratch[1]) rec_scratch_free(scratch[1], scratch_n[1]);
        return;
    }
    if (p.delta) {
        sv.R = saved(2, rows, p.H, p.V);
        if (n->recording) sv.Tinv = saved(3, (long long)p.nchunks * p.H, p.C, p.C); /* only the backward reads T' */
        sv.W = saved(4, rows, p.H, p.K);
        sv.R0 = saved(5, rows, p.H, p.V);
    }
    if (pl.segments > 1) {
        pr_tensor *seg = rec_seg_table(ctx, p, pl.segments, off, &sv.sg.n);
        sv.sg.seg = (const int *)seg->data;
        if (n->recording) n->saved[REC_SAVED_SEG] = seg, n->n_saved = REC_SAVED_SEG + 1;
        if (p.delta) sv.sg.A = saved(REC_SAVED_A, (long long)sv.sg.n * p.H, p.K, p.K);
    }
    free(off);
    pr_rec_chunk_forward(s, p, pl, sv, o, ht);
    if (!io16) st.put(n->out[0], o);
    for (int i = 0; i < PR_MAX_SAVED; i++)
        if (scratch[i]) rec_scratch_free(scratch[i], scratch_n[i]);
}

/* the grad of input i as f32 (for bf16: a scratch copy holding its current
 * value, since the kernels accumulate), or nullptr when it needs none */
static float *grad_of(const pr_node *n, int i, rec_stage &st)
{
    static const char *const names[IN_CU] = {"dq", "dk", "dv", "dg", "dbeta", "dkx", "dvx", "dh0"};
    return st.f32(pr_in_grad(n, i), names[i]);
}

extern "C" void pr_recurrence_backward_cuda(pr_ctx *ctx, pr_node *n)
{
    const cudaStream_t s = pr_cuda_stream(ctx);
    rec_stage st(s);
    const bool bf16_o = n->out[0]->dtype == PR_BF16;
    rec_prob p = rec_prob_of(ctx, n, st, bf16_o ? nullptr : (const float *)n->out[0]->data);
    rec_chunk_plan pl;
    const pr_rec_force &force = *pr_rec_force_of(n->iarg[3]);
    const bool chunked = rec_decide_or_die(&p, (int)n->iarg[1], force, &pl);
    const bool x16 = rec_x16_allowed(p, chunked, pl, force);
    rec_extras_of(n, st, x16, &p);
    rec_bwd_inputs_of(n, st, chunked, pl, &p); /* q, k, v and dO (after kx, vx: rec_bwd_inputs_of asks) */
    PR_CHECK(n->n_saved >= 1, "recurrence: CUDA backward without the forward's saved tensors");
    rec_tables(ctx, n, &p, n->in[IN_CU] ? n->saved[0] : nullptr);
    if (p.N == 0 || p.H == 0 || p.V == 0 || p.K == 0) return;
    p.dht = st.f32(n->out[1]->grad, "dht");
    p.vec = p.vec && al16(p.dout) && al16(p.dht);
    pr_tensor *gkx = pr_in_grad(n, IN_KX), *gvx = pr_in_grad(n, IN_VX);
    const bool kx16 = rec_bf16_in_place(gkx, x16), vx16 = rec_bf16_in_place(gvx, x16);
    /* bf16 dq accumulated in place by grad, dv by wy (pl.io16_dq, io16_dv;
     * 8-byte aligned), else staged */
    pr_tensor *gq = pr_in_grad(n, IN_Q), *gv = pr_in_grad(n, IN_V);
    const bool dq16 = chunked && pl.io16_dq && gq && gq->dtype == PR_BF16 && al8(gq->data);
    /* without beta only with the backward's inputs in place (dlocal's and dstate's bf16 instances); with
     * the extras apart in their wgmma form its last kernel adds dV' into dv, its only writer */
    const bool xa_dv16 = pl.xa && pl.wg_xa && pl.io16_bwd && p.dout16;
    const bool dv16 = chunked && (pl.io16_dv || xa_dv16) && gv && gv->dtype == PR_BF16 && al8(gv->data) &&
                      (p.delta || p.dout16);
    pr_tensor *gk = pr_in_grad(n, IN_K);
    const bool dk16 = chunked && pl.io16_dk && gk && gk->dtype == PR_BF16 && al8(gk->data);
    /* with beta grad leaves old + its part of dk in f32 scratch (every element) for wy */
    float *dk_mid = dk16 && p.delta ? st.take((size_t)gk->numel) : nullptr;
    rec_grads d = {dq16 ? nullptr : grad_of(n, IN_Q, st), dk16 ? dk_mid : grad_of(n, IN_K, st),
                   dv16 ? nullptr : grad_of(n, IN_V, st), grad_of(n, IN_G, st),
                   grad_of(n, IN_BETA, st), kx16 ? nullptr : grad_of(n, IN_KX, st),
                   vx16 ? nullptr : grad_of(n, IN_VX, st), grad_of(n, IN_H0, st),
                   kx16 ? (unsigned short *)gkx->data : nullptr, vx16 ? (unsigned short *)gvx->data : nullptr,
                   dq16 ? (unsigned short *)gq->data : nullptr, dv16 ? (unsigned short *)gv->data : nullptr,
                   dk16 ? (unsigned short *)gk->data : nullptr};
    /* the f32 copies to round back into the bf16 grads (not dk's scratch: wy rounds it) */
    float *const dptr[IN_CU] = {d.dq, dk16 ? nullptr : d.dk, d.dv, d.dg, d.dbeta, d.dkx, d.dvx, d.dh0};
    for (int i = 0; i < IN_CU; i++) p.vec = p.vec && al16(dptr[i]);
    auto sv_ = [&](int i) { return i < n->n_saved && n->saved[i] ? (float *)n->saved[i]->data : nullptr; };
    if ((p.gk || p.gv) && chunked) {
        PR_CHECK(sv_(1), "recurrence: CUDA backward: the chunked forward saved no chunk states");
        PR_CHECK(!pl.gla_fast || sv_(2), "recurrence: CUDA backward: gla's fast forward saved no scores A");
        pr_rec_gla_chunk_backward(s, p, sv_(1), (const float *)n->out[1]->data, d, pl.gla_fast != 0, sv_(2));
    } else if (p.gk || p.gv) {
        const float *o = bf16_o ? sv_(REC_SAVED_O32) : (const float *)n->out[0]->data;
        PR_CHECK(o || !p.gv, "recurrence: CUDA backward: the per-token forward saved no f32 o for its bf16 output");
        pr_rec_gla_token_backward(s, p, d, o, (const float *)n->out[1]->data);
    } else if (!chunked) {
        PR_CHECK(!p.delta || sv_(1), "recurrence: CUDA backward: the per-token forward saved no residuals");
        const float *o = bf16_o ? sv_(REC_SAVED_O32) : (const float *)n->out[0]->data;
        PR_CHECK(o, "recurrence: CUDA backward: the per-token forward saved no f32 o for its bf16 output");
        p.vec = p.vec && al16(o);
        pr_rec_token_backward(s, p, d, o, (const float *)n->out[1]->data, sv_(1));
    } else {
        PR_CHECK(n->n_saved >= (p.delta ? 6 : 2), "recurrence: CUDA backward: the chunked forward's saved tensors are missing");
        rec_chunk_saved sv = {sv_(1), sv_(2), sv_(3), sv_(4), sv_(5), {}};
        /* the forward's segments, whatever the plan says now */
        if (REC_SAVED_SEG < n->n_saved && n->saved[REC_SAVED_SEG]) {
            sv.sg.n = (int)((n->saved[REC_SAVED_SEG]->numel - p.N - 1) / 3);
            sv.sg.seg = (const int *)n->saved[REC_SAVED_SEG]->data;
            sv.sg.A = sv_(REC_SAVED_A);
        }
        pr_rec_chunk_backward(s, p, pl, sv, d);
    }
    for (int i = 0; i < IN_CU; i++)
        if (dptr[i]) st.put(pr_in_grad(n, i), dptr[i]); /* none for the grads accumulated in place */
}
