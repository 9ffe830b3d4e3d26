#include "model/model.h"

#include "moe/expert_parallel_experts.h"

namespace ft {

std::vector<dist::ExpertRange> Model::keep_owned_experts(int rank, int n_ranks, std::vector<int32_t>& n_expert) {
  if (experts_owned_) fail(ErrorCode::kInvalidArgument, "expert parallelism: the model's experts were split already");
  std::vector<dist::ExpertRange> ranges;
  HostExpertBanks owned = slice_banks(host_experts_, rank, n_ranks, &ranges);
  n_expert.clear();
  for (const ExpertBank& b : host_experts_) n_expert.push_back(static_cast<int32_t>(b.n_expert()));
  const auto bank_bytes = [](const HostExpertBanks& banks) {
    int64_t n = 0;
    for (const ExpertBank& b : banks)
      for (const std::vector<Tensor>* v : {&b.gate, &b.up, &b.down})
        for (const Tensor& t : *v) n += t.bytes();
    return n;
  };
  unloaded_weight_bytes_ += bank_bytes(host_experts_) - bank_bytes(owned);  // the other ranks' experts
  host_experts_ = std::move(owned);
  experts_owned_ = true;
  return ranges;
}

}  // namespace ft
