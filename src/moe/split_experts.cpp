#include "moe/split_experts.h"

#include "util/error.h"

namespace ft {

SplitExperts::SplitExperts(Ops& ops, const HostExpertBanks& host, const MoePlan& plan,
                           const MoeRuntimeOptions& options) {
  if (plan.layers.size() != host.size())
    fail(ErrorCode::kInvalidArgument, "moe runtime: the plan has {} layers, the model {}", plan.layers.size(),
         host.size());
  HostExpertBanks resident(host.size()), banked = host;
  MoePlan banked_plan = plan;
  resident_.assign(host.size(), false);
  for (size_t l = 0; l < host.size(); ++l) {
    if (plan.layers[l] != MoeLayerMode::kResident) continue;
    resident_[l] = true;
    resident[l] = host[l];
    banked[l] = ExpertBank{};
    banked_plan.layers[l] = MoeLayerMode::kDense;
  }
  if (plan.count(MoeLayerMode::kResident) == 0 || banked_plan.count(MoeLayerMode::kDense) == static_cast<int64_t>(plan.layers.size()))
    fail(ErrorCode::kInvalidArgument, "moe runtime: a split plan needs resident and banked layers");
  gpu_ = std::make_unique<ResidentExperts>(ops, resident, options.progress);
  offloaded_ = std::make_unique<OffloadedExperts>(ops, banked, banked_plan, options);
}

void SplitExperts::compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
                           const ActQ8* x_q8) {
  if (resident_layer(layer))
    gpu_->compute(layer, x, ids, weights, out, x_q8);
  else
    offloaded_->compute(layer, x, ids, weights, out, x_q8);
}

}  // namespace ft
