#include "model/model.h"

#include "moe/expert_parallel_experts.h"

namespace ft {

std::vector<dist::ExpertRange> Model::keep_owned_experts(int rank, int n_ranks, std::vector<int32_t>& n_expert) {
  if (experts_owned_) fail(ErrorCode::kInvalidArgument, "expert parallelism: the model's experts were split already");
  std::vector<dist::ExpertRange> ranges;
  HostExpertBanks owned = slice_banks(host_experts_, rank, n_ranks, &ranges);
  n_expert.clear();
  for (const ExpertBank& b : host_experts_) n_expert.push_back(static_cast<int32_t>(b.n_expert()));
  host_experts_ = std::move(owned);
  experts_owned_ = true;
  return ranges;
}

}  // namespace ft
