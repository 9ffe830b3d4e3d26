#pragma once
// ExpertCompute: the step that evaluates a MoE layer's routed experts, addressed by (layer, expert
// index). Model files only call compute(); where the expert weights live (resident on the backend,
// in host banks behind a GPU expert cache, on CPU cores) is the implementation's business, so the
// expert cache and the CPU expert executor slot in here without touching model code.
#include <memory>
#include <vector>

#include "backend/ops.h"

namespace ft {

class ExpertCompute {
 public:
  virtual ~ExpertCompute() = default;

  /** out [T, H] = sum_j weights[t, j] * expert_{ids[t, j]}(x[t]) for MoE layer `layer` (SwiGLU experts).
   *  x, out activation dtype; ids I32 [T, k] (router output, expert index within the layer);
   *  weights F32 [T, k]. Throws ft::Error(kInvalidArgument) for a layer without experts. */
  virtual void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out) = 0;

  // compute() only queues backend work with fixed launch shapes and no host synchronisation, so a
  // step calling it can be recorded as a graph (Ops::capture) and replayed with new routes.

  /** Throws ft::Error when work that compute() queued out of line (the CPU share of an offloaded
   *  layer) failed; called after a step. The default has nothing to check. */
  virtual void check() {}

  /** The MoE layer whose routes the caller should predict (that layer's router applied to this
   *  layer's input x) and pass to prefetch() before compute(layer) on a step of n_tokens tokens, or
   *  -1 (the default: none). */
  virtual int64_t prefetch_target(int64_t /*layer*/, int64_t /*n_tokens*/) const { return -1; }
  /** Predicted routes ids I32 [T, k] for layer `target` = prefetch_target(layer) of the compute()
   *  that follows: their experts are fetched while that layer computes. A wrong guess costs
   *  bandwidth, never correctness. The default ignores them. */
  virtual void prefetch(int64_t /*target*/, const Tensor& /*ids*/) {}
};

/** Host views of every layer's routed experts (empty bank for a dense layer), as loaded from the
 *  checkpoint; the input from which an ExpertCompute is built. */
using HostExpertBanks = std::vector<ExpertBank>;

/** All experts resident on the backend of `ops` (CPU: the mapped file itself; CUDA: uploaded once),
 *  computed with Ops::moe_experts. */
class ResidentExperts final : public ExpertCompute {
 public:
  /** Makes every expert of `host` resident through ops.make_resident. */
  ResidentExperts(Ops& ops, const HostExpertBanks& host);
  void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out) override;

 private:
  Ops& ops_;
  std::vector<ExpertBank> banks_;
  std::vector<Buffer> storage_;
};

}  // namespace ft
