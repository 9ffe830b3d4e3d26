#pragma once
// The MoE feed-forward block: router -> top-k routed experts (through ExpertCompute) -> optional
// shared expert (optionally scaled by a sigmoid gate, Qwen2-MoE), summed.
#include "backend/ops.h"
#include "dist/collective.h"
#include "moe/expert_compute.h"

namespace ft {

/** One MoE layer's dense weights (routed experts live behind ExpertCompute). */
struct MoeWeights {
  Tensor gate_inp;       // [n_expert, H] router
  Tensor gate_inp_b;     // [n_expert] router bias added to its logits (gpt-oss; empty: none)
  Tensor exp_probs_b;    // F32 [n_expert] selection bias (e_score_correction_bias; empty: none)
  Tensor shexp_gate;     // [F_sh, H] shared expert (empty: none)
  Tensor shexp_up;       // [F_sh, H]
  Tensor shexp_down;     // [H, F_sh]
  Tensor shexp_gate_inp;  // [1, H] sigmoid gate of the shared expert (empty: ungated)
};

/** Per-step scratch, each with at least T rows. */
struct MoeScratch {
  Tensor router_logits;  // [T, n_expert] activation dtype
  Tensor ids;            // I32 [T, k]
  Tensor weights;        // F32 [T, k]
  Tensor prefetch_ids[PrefetchTargets::kMax];      // I32 [T, k]: predicted routes of later layers (--moe-prefetch)
  Tensor prefetch_weights[PrefetchTargets::kMax];  // F32 [T, k]
  Tensor sh_gate;        // [T, F_sh]
  Tensor sh_up;          // [T, F_sh]
  Tensor sh_out;         // [T, H]
  Tensor sh_score;       // [T, 1]
};

/** Layers whose routes moe_ffn predicts for experts.prefetch: targets (from
 *  experts.prefetch_targets(layer, T), those the model has routers for) and their routers
 *  ([n_expert, H] each). */
struct MoePrefetch {
  PrefetchTargets targets;
  Tensor routers[PrefetchTargets::kMax];
  Tensor biases[PrefetchTargets::kMax];  // their selection biases (empty: none)
  Tensor router_biases[PrefetchTargets::kMax];  // their routers' logit biases (empty: none)
};

/** out [T, H] = routed(x) (+ sigmoid(x . shexp_gate_inp) * shared(x)). x [T, H]; out must not alias x.
 *  The router runs with `router` and w.exp_probs_b as its bias.
 *  Scratch views are sliced to T rows here. `n_valid` (BatchInfo::n_valid, may be empty): rows from
 *  n_valid[0] on are graph padding and route to no expert (no cache traffic, no counters).
 *  Each of prefetch.targets: that layer's routes on x are predicted with its router and passed to
 *  experts.prefetch first, in order. x_q8 (optional, in and out): x's int8 form (ActQ8, backend/ops.h)
 *  from x's producer, or empty; the router may write it (Ops::moe_router), then the routed and shared
 *  experts read it. tp (optional): the tensor-parallel group when w's shared expert is this rank's
 *  slice (gate/up rows, down input columns): its partial output is all-reduced over tp before it is
 *  gated and added (the routed experts' output is whole on every rank). */
void moe_ffn(Ops& ops, ExpertCompute& experts, int64_t layer, const RouterParams& router, const MoeWeights& w,
             const Tensor& x, MoeScratch& scratch, Tensor out, const Tensor& n_valid = Tensor(),
             const MoePrefetch& prefetch = MoePrefetch(), ActQ8* x_q8 = nullptr, dist::Collective* tp = nullptr);

}  // namespace ft
