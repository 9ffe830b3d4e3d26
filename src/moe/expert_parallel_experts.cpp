#include "moe/expert_parallel_experts.h"

#include <algorithm>

#include <fmt/format.h>

#include "util/error.h"

namespace ft {

ExpertBank slice_bank(const ExpertBank& bank, dist::ExpertRange range) {
  ExpertBank b;
  b.glu = bank.glu, b.glu_alpha = bank.glu_alpha, b.glu_limit = bank.glu_limit;
  if (bank.n_expert() == 0) return b;
  if (range.begin < 0 || range.end > bank.n_expert() || range.begin >= range.end)
    fail(ErrorCode::kInvalidArgument, "slice_bank: experts [{}, {}) are not a non-empty range inside [0, {})",
         range.begin, range.end, bank.n_expert());
  const auto first = static_cast<size_t>(range.begin), last = static_cast<size_t>(range.end);
  for (auto [src, dst] : {std::pair{&bank.gate, &b.gate}, std::pair{&bank.up, &b.up}, std::pair{&bank.down, &b.down}})
    dst->assign(src->begin() + static_cast<std::ptrdiff_t>(first), src->begin() + static_cast<std::ptrdiff_t>(last));
  const int64_t n = range.end - range.begin;
  for (auto [src, dst] : {std::pair{&bank.gate_bias, &b.gate_bias}, std::pair{&bank.up_bias, &b.up_bias},
                          std::pair{&bank.down_bias, &b.down_bias}})
    if (!src->empty()) *dst = src->slice(range.begin, n);
  return b;
}

HostExpertBanks slice_banks(const HostExpertBanks& host, int rank, int n_ranks,
                            std::vector<dist::ExpertRange>* ranges) {
  HostExpertBanks out;
  if (ranges) ranges->clear();
  for (size_t l = 0; l < host.size(); ++l) {
    const ExpertBank& bank = host[l];
    dist::ExpertRange r;
    if (bank.n_expert() > 0) {
      if (n_ranks < 1 || bank.n_expert() % n_ranks != 0)
        fail(ErrorCode::kInvalidArgument,
             "expert parallelism over {} ranks: MoE layer {} has {} experts, not a positive multiple of {}", n_ranks,
             l, bank.n_expert(), n_ranks);
      r = dist::owned_experts(rank, bank.n_expert(), n_ranks);
    }
    out.push_back(slice_bank(bank, r));
    if (ranges) ranges->push_back(r);
  }
  return out;
}

ExpertParallelExperts::ExpertParallelExperts(dist::Collective& comm, Ops& ops, const HostExpertBanks& host,
                                             const InnerFactory& make_inner)
    : comm_(comm), ops_(ops), owned_(slice_banks(host, comm.rank(), comm.group_size(), &ranges_)) {
  for (const ExpertBank& b : host) n_expert_.push_back(b.n_expert());
  inner_ = make_inner(owned_);
  if (!inner_) fail(ErrorCode::kInvalidArgument, "expert parallelism: the inner expert compute factory gave none");
}

ExpertParallelExperts::ExpertParallelExperts(dist::Collective& comm, Ops& ops, const HostExpertBanks& host)
    : ExpertParallelExperts(comm, ops, host, [&ops](const HostExpertBanks& owned) {
        return std::make_unique<ResidentExperts>(ops, owned);
      }) {}

ExpertParallelExperts::ExpertParallelExperts(dist::Collective& comm, Ops& ops, std::vector<dist::ExpertRange> ranges,
                                             std::vector<int32_t> n_expert, std::unique_ptr<ExpertCompute> inner,
                                             int64_t max_ids)
    : comm_(comm), ops_(ops), ranges_(std::move(ranges)), n_expert_(std::move(n_expert)), inner_(std::move(inner)) {
  if (!inner_) fail(ErrorCode::kInvalidArgument, "expert parallelism: no inner expert compute");
  if (ranges_.size() != n_expert_.size())
    fail(ErrorCode::kInvalidArgument, "expert parallelism: {} layer ranges for {} layers", ranges_.size(),
         n_expert_.size());
  for (size_t l = 0; l < ranges_.size(); ++l) {
    if (n_expert_[l] == 0) continue;
    const dist::ExpertRange want = dist::owned_experts(comm.rank(), n_expert_[l], comm.group_size());
    if (ranges_[l].begin != want.begin || ranges_[l].end != want.end)
      fail(ErrorCode::kInvalidArgument, "expert parallelism: layer {} holds experts [{}, {}), not rank {}'s [{}, {})", l,
           ranges_[l].begin, ranges_[l].end, comm.rank(), want.begin, want.end);
  }
  if (max_ids > 0) {
    reserve(local_ids_, max_ids);
    for (IdsBuffer& b : prefetch_ids_) reserve(b, max_ids);
  }
}

dist::ExpertRange ExpertParallelExperts::owned(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(ranges_.size())) return {};
  return ranges_[static_cast<size_t>(layer)];
}

void ExpertParallelExperts::reserve(IdsBuffer& buf, int64_t n) {
  if (n <= buf.capacity) return;
  if (buf.capacity > 0) retired_.push_back(std::move(buf.storage));
  buf.storage = ops_.alloc(n * static_cast<int64_t>(sizeof(int32_t)));
  buf.capacity = n;
}

Tensor ExpertParallelExperts::mask(int64_t layer, const Tensor& ids, IdsBuffer& buf, const char* what) {
  if (layer < 0 || layer >= static_cast<int64_t>(ranges_.size()) || n_expert_[static_cast<size_t>(layer)] == 0)
    fail(ErrorCode::kInvalidArgument, "expert parallelism {}: layer {} has no routed experts", what, layer);
  if (ids.dtype != DType::I32 || ids.ndim != 2 || (ids.numel() > 0 && ids.device != ops_.device()))
    fail(ErrorCode::kInvalidArgument,
         "expert parallelism {}: ids must be [tokens, k] I32 on the {} backend's device, not {} on {}", what,
         ops_.name(), ids.str(), device_name(ids.device));
  const dist::ExpertRange r = ranges_[static_cast<size_t>(layer)];
  reserve(buf, std::max<int64_t>(ids.numel(), 1));
  const Tensor local(buf.storage.data(), DType::I32, {ids.dim(0), ids.dim(1)}, ops_.device());
  try {
    ops_.moe_local_ids(ids, r.begin, r.end, n_expert_[static_cast<size_t>(layer)], local);
  } catch (const Error& e) {  // the CPU backend's id check: say which layer
    throw e.with_context(fmt::format("expert parallelism {}: layer {}", what, layer));
  }
  return local;
}

void ExpertParallelExperts::compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                    Tensor out, const ActQ8* x_q8) {
  n_prefetched_ = 0;  // the predictions made so far are read by this compute
  const Tensor local = mask(layer, ids, local_ids_, "compute");
  inner_->compute(layer, x, local, weights, out, x_q8);  // this rank's partial sum
  comm_.all_reduce(out, out);
}

void ExpertParallelExperts::prefetch(int64_t target, const Tensor& ids) {
  if (n_prefetched_ == PrefetchTargets::kMax)
    fail(ErrorCode::kInvalidArgument, "expert parallelism prefetch: more than {} predictions before one compute()",
         PrefetchTargets::kMax);
  IdsBuffer& buf = prefetch_ids_[static_cast<size_t>(n_prefetched_)];
  const Tensor local = mask(target, ids, buf, "prefetch");
  ++n_prefetched_;
  inner_->prefetch(target, local);
}

}  // namespace ft
