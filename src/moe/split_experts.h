#pragma once
// SplitExperts: the ExpertCompute of a plan that mixes resident layers with banked ones (issue 36:
// host memory holds only some layers' expert banks, so whole layers go resident on the GPU). The
// resident layers are computed as fused does (ResidentExperts over those layers only), the others
// by OffloadedExperts over the rest (cache, hybrid or CPU layers), each seeing the other's layers
// as dense.
#include <memory>

#include "moe/expert_compute.h"
#include "moe/offloaded_experts.h"

namespace ft {

class SplitExperts final : public ExpertCompute {
 public:
  /** Builds ResidentExperts for plan's kResident layers and OffloadedExperts for its kCache and kCpu
   *  layers. Throws kInvalidArgument for a plan without both kinds or not for these banks; what the
   *  parts throw. */
  SplitExperts(Ops& ops, const HostExpertBanks& host, const MoePlan& plan, const MoeRuntimeOptions& options);

  void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
               const ActQ8* x_q8 = nullptr) override;
  void check() override { offloaded_->check(); }
  PrefetchTargets prefetch_targets(int64_t layer, int64_t n_tokens) const override {
    return resident_layer(layer) ? PrefetchTargets{} : offloaded_->prefetch_targets(layer, n_tokens);
  }
  void prefetch(int64_t target, const Tensor& ids) override { offloaded_->prefetch(target, ids); }

  /** The part that holds the banked layers (its plan has the resident layers as dense). */
  OffloadedExperts& offloaded() { return *offloaded_; }

 private:
  bool resident_layer(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(resident_.size()) && resident_[static_cast<size_t>(layer)];
  }
  std::vector<bool> resident_;  // per model layer
  std::unique_ptr<ResidentExperts> gpu_;
  std::unique_ptr<OffloadedExperts> offloaded_;
};

}  // namespace ft
