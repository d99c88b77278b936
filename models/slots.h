/* models/slots.h: which slot of a pr_layer_state holds what, per mixer, in
 * one place. A layer's state is PR_STATE_SLOTS tensors; each mixer gives them
 * its own meaning (the shapes are in each mixer's file). Mixers that share a
 * layer's code (gdn, deltanet and prism share the gdn base) share its slots. */
#ifndef PR_MODELS_SLOTS_H
#define PR_MODELS_SLOTS_H

#include "models/models.h"

/* gdn base (gdn, deltanet, prism): the q, k, v ShortConv windows, then the state */
enum { PR_SLOT_GDN_Q_CONV, PR_SLOT_GDN_K_CONV, PR_SLOT_GDN_V_CONV, PR_SLOT_GDN_H };
/* prism: the gdn base's slots, then the anchor U's ShortConv window */
enum { PR_SLOT_PRISM_H = PR_SLOT_GDN_H, PR_SLOT_PRISM_U };
/* linattn: the state, then the pre-conv's window */
enum { PR_SLOT_LINATTN_H, PR_SLOT_LINATTN_CONV };
/* gla: the state; gsa: pass 1's and pass 2's states */
enum { PR_SLOT_GLA_H = 0, PR_SLOT_GSA_KEYS = 0, PR_SLOT_GSA_VALUES = 1 };
/* mamba2 and mamba: the conv window, then the scan state */
enum { PR_SLOT_MAMBA_CONV, PR_SLOT_MAMBA_H };
/* attn: the KV cache and the pre-conv's window; hstu: the KV cache */
enum { PR_SLOT_ATTN_K, PR_SLOT_ATTN_V, PR_SLOT_ATTN_CONV };
enum { PR_SLOT_HSTU_K, PR_SLOT_HSTU_V };
/* ttt_linear, ttt_mlp: the inner weights at the open mini-batch's start (up to
 * 4), then that mini-batch's q, k, v, eta */
enum { PR_SLOT_TTT_INNER = 0, PR_SLOT_TTT_Q = 4, PR_SLOT_TTT_K, PR_SLOT_TTT_V, PR_SLOT_TTT_ETA };
/* titans: memory and momentum at the open chunk's start, then its 6 inputs
 * (q, k, v, theta, alpha, eta) */
enum { PR_SLOT_TITANS_M, PR_SLOT_TITANS_S, PR_SLOT_TITANS_IN, PR_TITANS_N_IN = 6 };
/* atlas: memory M (mlp: W1) and its muon S, the window's phi(k), v, gamma,
 * then W2 and its S (mlp) */
enum { PR_SLOT_ATLAS_M, PR_SLOT_ATLAS_S, PR_SLOT_ATLAS_WPHI, PR_SLOT_ATLAS_WV, PR_SLOT_ATLAS_WGAMMA,
       PR_SLOT_ATLAS_M2, PR_SLOT_ATLAS_S2 };
/* mom: the routed q, k, v conv windows and states, then the shared memory's */
enum { PR_SLOT_MOM_WIN = 0, PR_SLOT_MOM_H = 3, PR_SLOT_MOM_SHARED_WIN = 4, PR_SLOT_MOM_SHARED_H = 7 };

_Static_assert(PR_SLOT_PRISM_U < PR_STATE_SLOTS, "prism's slots fit a layer state");
_Static_assert(PR_SLOT_TTT_ETA < PR_STATE_SLOTS, "ttt's slots fit a layer state");
_Static_assert(PR_SLOT_TITANS_IN + PR_TITANS_N_IN <= PR_STATE_SLOTS, "titans' slots fit a layer state");
_Static_assert(PR_SLOT_ATLAS_S2 < PR_STATE_SLOTS, "atlas' slots fit a layer state");
_Static_assert(PR_SLOT_MOM_SHARED_H < PR_STATE_SLOTS, "mom's slots fit a layer state");

#endif
