#include "moe/expert_compute.h"

#include "util/error.h"

namespace ft {

ResidentExperts::ResidentExperts(Ops& ops, const HostExpertBanks& host) : ops_(ops) {
  for (const ExpertBank& hb : host) {
    ExpertBank b;
    for (auto [src, dst] : {std::pair{&hb.gate, &b.gate}, std::pair{&hb.up, &b.up}, std::pair{&hb.down, &b.down}}) {
      for (const Tensor& t : *src) {
        Buffer storage;
        dst->push_back(ops.make_resident(t, storage));
        if (!storage.empty()) storage_.push_back(std::move(storage));
      }
    }
    banks_.push_back(std::move(b));
  }
}

void ResidentExperts::compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out) {
  if (layer < 0 || layer >= static_cast<int64_t>(banks_.size()) || banks_[static_cast<size_t>(layer)].n_expert() == 0)
    fail(ErrorCode::kInvalidArgument, "expert compute: layer {} has no routed experts", layer);
  ops_.moe_experts({}, x, ids, weights, banks_[static_cast<size_t>(layer)], out);
}

}  // namespace ft
