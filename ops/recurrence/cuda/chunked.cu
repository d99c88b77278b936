/* ops/recurrence/cuda/chunked.cu: the chunked form on CUDA, pass by pass
 * (docs/PRISM.md, "Chunked form with extra writes").
 *
 * Forward, in three passes:
 *   prep   (every chunk at once; delta rules only)  the chunk's WY form:
 *          B = strict(D o K K^T), T' = (I + B diag(beta))^-1,
 *          W = T' (e^G o K), R0 = T' (V - strict(D o K KX^T) VX)
 *   state  (serial over a sequence's chunks, parallel over heads and V tiles)
 *          the chunk-start states hs, the residuals R = R0 - W h and
 *          h <- e^{G_last} h + Ka^T (e^{G_last - G} o Ua)
 *   scores (every chunk at once)
 *          O = scale (e^G o (Q h) + incl(D o Q Ka^T) Ua)
 * with G the chunk-local cumulative log-decay, D_ti = e^{G_t - G_i}, the
 * chunk's augmented keys Ka = [K; KX_0; ...; KX_{L-1}] (extras l-major, so
 * row a is token a % C) and values Ua = [diag(beta) R (or V); VX_0; ...].
 * R is the unknown of the solve for the delta rules (u = beta R): with it
 * beta = 0 needs no division anywhere. Matrix products run on tensor cores
 * (TF32 in, f32 accumulate) when ctx->matmul_tf32, else in plain fp32.
 * (prep.cu, state.cu, scores.cu; segments.cu splits the serial pass.)
 *
 * Backward, the forward's passes in reverse (dlocal: scores.cu; dstate.cu,
 * grad.cu, wy.cu). Per chunk (dhn = dL/d(state at the chunk's end),
 * Kd = e^{G_last - G} o Ka, S = incl(D o Q Ka^T)):
 *   Ua enters O and the next state:  dUa = scale S^T dO + Kd dhn
 *   the chunk-start state h:          dh = e^{G_last} dhn + scale (e^G o Q)^T dO - W^T (beta o dU)
 * (dlocal computes scale S^T dO for every chunk at once, dstate then runs
 * serially over chunks, parallel over V tiles, adds Kd dhn and carries dh.)
 * grad, every chunk at once, K tiles in parallel, V tiles in a loop:
 *   dQ  = scale e^G o (dO h^T) + dS Ka,       dS = scale incl(D o dO Ua^T)
 *   dKa = e^{G_last - G} o (Ua dhn^T) + dS^T Q
 *   dW  = -(beta o dU) h^T,   dbeta += dU . R  (u = beta R, R = R0 - W h)
 * wy (delta rules), the WY form backward: with dR0 = beta o dU,
 *   dY1 = T'^T dR0 -> dV;  dY2 = T'^T dW;  dM = -(dY1 R0^T + dY2 W^T) (strict)
 *   M = B diag(beta): dB = dM diag(beta), dbeta_i += sum_t dM_ti B_ti
 *   B = strict(D o K K^T):  dK += dKK K + dKK^T K,  dKK = dB o D
 *   Y1 = V - Mx VX, Mx = strict(D o K KX^T): dMx = -dY1 VX^T, dVX -= Mx^T dY1,
 *     dK += dKKX KX, dKX += dKKX^T K,  dKKX = dMx o D
 *   Y2 = e^G o K: dK += e^G o dY2
 * dg: every factor e^{G_t - G_i} of a product X_ti = x_t . y_i gives
 * dG_t += dX_ti X_ti and dG_i -= dX_ti X_ti; summed over i that is
 * x_t . (dX y)_t, so dG_t = x_t . (its row gradient) - y_t . (its column
 * gradient), read off the products above; e^{G_t} and e^{G_last} factors add
 * q.dQ, k.dY2 and the chunk-end terms. dg is then the reverse cumulative sum
 * of dG within the chunk. Every sum has a fixed order: no atomics.
 */
#include "ops/recurrence/cuda/recurrence_cuda.cuh"

void pr_rec_chunk_forward(cudaStream_t st, const rec_prob &px, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                          float *o, float *ht)
{
    /* extras apart: their terms first (V', their output, each chunk's E),
     * then the core (L = 0) on V' */
    rec_prob p = px;
    float *vp = nullptr, *elast = nullptr;
    const size_t n_v = (size_t)(px.seq ? px.T : (long long)px.N * px.T) * px.H * px.V;
    const size_t n_e = (size_t)px.N * px.H * px.K * px.V;
    if (pl.xa) {
        PR_ASSERT(px.L > 0 && pl.wg_state && pl.wg_scores && !sv.sg.n);
        vp = rec_scratch(n_v), elast = rec_scratch(n_e);
        pr_rec_chunk_xfwd(st, px, pl.wg_xa, vp, o, sv.hs, elast);
        p = rec_core_prob(px);
        p.v = vp, p.v16 = nullptr; /* the core's values: V', f32 */
    }
    if (p.delta) pr_rec_chunk_prep(st, p, pl, sv);
    if (!sv.sg.n) {
        const rec_state_io io = {sv.hs, sv.R, ht, sv.W, sv.R0, p.h0, 0, elast};
        pr_rec_chunk_state(st, p, pl.bv_state, io, pl.wg_state);
    } else {
        pr_rec_chunk_state_segmented(st, p, pl, sv, ht);
    }
    pr_rec_chunk_output(st, p, pl, sv, o);
    if (vp) rec_scratch_free(vp, n_v), rec_scratch_free(elast, n_e);
}

void pr_rec_chunk_backward(cudaStream_t st, const rec_prob &px, const rec_chunk_plan &pl, const rec_chunk_saved &sv,
                           const rec_grads &dx)
{
    /* extras apart: the core (L = 0) with its dv into dvp (dV'), then the extras' backward */
    const rec_prob p = pl.xa ? rec_core_prob(px) : px;
    rec_grads d = dx;
    float *dvp = nullptr;
    const long long rows = p.seq ? (long long)p.T : (long long)p.N * p.T, rowsH = rows * p.H;
    const int nkt = (p.K + pl.bk_grad - 1) / pl.bk_grad;
    const size_t n_v = (size_t)(rowsH * p.V), n_vx = n_v * p.L, n_k = (size_t)(rowsH * p.K), n_kx = n_k * p.L;
    const size_t n_h = (size_t)p.nchunks * p.H * p.K * p.V;
    float *dU = rec_scratch(n_v), *dVX = p.L ? rec_scratch(n_vx) : nullptr, *dhs = rec_scratch(n_h);
    float *dkxa = p.L ? rec_scratch(n_kx) : nullptr; /* grad adds its part of dk into d.dk, wy the rest */
    float *dW = p.delta ? rec_scratch(n_k) : nullptr, *dbA = p.delta ? rec_scratch((size_t)rowsH) : nullptr;
    float *dGp = p.has_g ? rec_scratch((size_t)(nkt * rowsH)) : nullptr;
    if (pl.xa) {
        PR_ASSERT(px.L > 0 && p.delta && !sv.sg.n);
        dvp = rec_scratch(n_v);
        PR_CUDA_CHECK(cudaMemsetAsync(dvp, 0, n_v * sizeof(float), st));
        d.dv = dvp, d.dv16 = nullptr, d.dkx = d.dvx = nullptr, d.dkx16 = d.dvx16 = nullptr; /* dv: the extras' */
    }

    /* without beta dlocal adds dv's old value (dv0, or in place dv16) and dstate stores dv */
    unsigned short *dv16 = p.delta ? nullptr : d.dv16;
    pr_rec_chunk_dlocal(st, p, pl.bv_dloc, dU, dVX, p.delta ? nullptr : d.dv, pl.wg_scores, dv16,
                        pl.bf_dloc && p.dout16); /* bf16 products where q, dO, k are read in place */
    {
        const rec_dstate_io io = {sv.W, p.dht, dhs, dU, dVX, d.dv, d.dh0, 1, dv16};
        if (sv.sg.n) pr_rec_chunk_dstate_segmented(st, p, pl.bv_dstate, sv.sg, io);
        else pr_rec_chunk_dstate(st, p, pl.bv_dstate, io, pl.wg_dstate);
    }
    const wy_scratch x = {dU, dVX, dkxa, dW, dGp, dbA, nkt, rowsH};
    pr_rec_chunk_grad(st, p, pl, sv, dhs, x, d);
    pr_rec_chunk_wy(st, p, pl, sv, x, d);
    if (pl.xa) {
        pr_rec_chunk_xbwd(st, px, pl.wg_xa, dhs, dvp, dx);
        rec_scratch_free(dvp, n_v);
    }
    rec_scratch_free(dU, n_v);
    if (dVX) rec_scratch_free(dVX, n_vx);
    rec_scratch_free(dhs, n_h);
    if (p.delta) rec_scratch_free(dW, n_k), rec_scratch_free(dbA, (size_t)rowsH);
    if (dkxa) rec_scratch_free(dkxa, n_kx);
    if (dGp) rec_scratch_free(dGp, (size_t)(nkt * rowsH));
}
