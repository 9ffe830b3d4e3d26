#pragma once
// ExpertCompute: the step that evaluates a MoE layer's routed experts, addressed by (layer, expert
// index). Model files only call compute(); where the expert weights live (resident on the backend,
// in host banks behind a GPU expert cache, on CPU cores) is the implementation's business, so the
// expert cache and the CPU expert executor slot in here without touching model code.
#include <memory>
#include <vector>

#include "backend/ops.h"

namespace ft {

class ProgressSink;

/** Up to kMax MoE layers whose routes a caller predicts before a compute() (prefetch_targets). */
struct PrefetchTargets {
  static constexpr int kMax = 4;  // --moe-prefetch-depth's largest
  int64_t layer[kMax] = {-1, -1, -1, -1};
  int n = 0;
  void add(int64_t l) { layer[n++] = l; }
};

class ExpertCompute {
 public:
  virtual ~ExpertCompute() = default;

  /** out [T, H] = sum_j weights[t, j] * expert_{ids[t, j]}(x[t]) for MoE layer `layer` (SwiGLU experts).
   *  x, out activation dtype; ids I32 [T, k] (router output, expert index within the layer);
   *  weights F32 [T, k]. x_q8 (optional): x's int8 form for Ops::moe_experts (ActQ8, backend/ops.h).
   *  Throws ft::Error(kInvalidArgument) for a layer without experts. */
  virtual void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
                       const ActQ8* x_q8 = nullptr) = 0;

  // compute() only queues backend work with fixed launch shapes and no host synchronisation, so a
  // step calling it can be recorded as a graph (Ops::capture) and replayed with new routes.

  /** Throws ft::Error when work that compute() queued out of line (the CPU share of an offloaded
   *  layer) failed; called after a step. The default has nothing to check. */
  virtual void check() {}

  /** The MoE layers whose routes the caller should predict (each one's router applied to this
   *  layer's input x) and pass to prefetch(), in this order, before compute(layer) on a step of
   *  n_tokens tokens. The default: none. */
  virtual PrefetchTargets prefetch_targets(int64_t /*layer*/, int64_t /*n_tokens*/) const { return {}; }
  /** The first of prefetch_targets, or -1. */
  int64_t prefetch_target(int64_t layer, int64_t n_tokens) const {
    const PrefetchTargets t = prefetch_targets(layer, n_tokens);
    return t.n > 0 ? t.layer[0] : -1;
  }
  /** Predicted routes ids I32 [T, k] for layer `target` (one of prefetch_targets(layer)) of the
   *  compute() that follows: their experts are fetched while the layers before it compute. A wrong
   *  guess costs bandwidth, never correctness. The default ignores them. */
  virtual void prefetch(int64_t /*target*/, const Tensor& /*ids*/) {}
};

/** Host views of every layer's routed experts (empty bank for a dense layer), as loaded from the
 *  checkpoint; the input from which an ExpertCompute is built. */
using HostExpertBanks = std::vector<ExpertBank>;

/** All experts resident on the backend of `ops` (CPU: the mapped file itself; CUDA: uploaded once),
 *  computed with Ops::moe_experts. */
class ResidentExperts final : public ExpertCompute {
 public:
  /** Makes every expert of `host` resident through ops.make_resident, with its biases (the bank's
   *  GLU carried over). `progress`, when set, sees a phase "experts" of their bytes. */
  ResidentExperts(Ops& ops, const HostExpertBanks& host, ProgressSink* progress = nullptr);
  void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
               const ActQ8* x_q8 = nullptr) override;

 private:
  Ops& ops_;
  std::vector<ExpertBank> banks_;
  std::vector<Buffer> storage_;
};

}  // namespace ft
