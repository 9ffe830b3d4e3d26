#pragma once
// ExpertParallelExperts: expert parallelism (EP) behind the ExpertCompute interface. Each rank of a
// dist::Collective group holds only its owned block of every MoE layer's experts (dist::owned_experts:
// contiguous, n_expert / n_ranks each) in an inner ExpertCompute; compute() masks the routes to the
// owned experts (local ids, -1 for another rank's expert), runs the inner compute into `out` (this
// rank's partial [T, H] sum) and all_reduces `out` in place, so every rank ends with the full MoE
// output. Every rank must run the same step (same x, routes and weights): the all-gather + all-reduce
// form of EP, where no expert's weights leave its owner and the activations cross ranks instead. The
// all-to-all form (send each token only to the owners of its experts, combine back) moves fewer bytes at
// large batch and is a later step; both give the same sums up to float order. Launch shapes are fixed;
// the only sync is the collective itself.
#include <functional>
#include <memory>
#include <vector>

#include "dist/collective.h"
#include "dist/expert_parallel.h"
#include "moe/expert_compute.h"

namespace ft {

/** Experts [range.begin, range.end) of `bank` as a bank of range.end - range.begin experts (local id
 *  e - range.begin): views of the same gate/up/down tensors, the bias rows of the range, the GLU
 *  carried over. An empty bank gives an empty bank. Throws ft::Error(kInvalidArgument) when the range
 *  is not inside [0, bank.n_expert()) or is empty for a non-empty bank. */
ExpertBank slice_bank(const ExpertBank& bank, dist::ExpertRange range);

/** Rank `rank`'s share of every layer of `host` (dense layers stay empty): slice_bank of layer l with
 *  dist::owned_experts(rank, n_expert(l), n_ranks). `ranges`, when given, receives each layer's range
 *  ({0, 0} for a dense layer). Throws ft::Error(kInvalidArgument) naming the layer when its experts
 *  are not a positive multiple of n_ranks, or for a rank outside [0, n_ranks). */
HostExpertBanks slice_banks(const HostExpertBanks& host, int rank, int n_ranks,
                            std::vector<dist::ExpertRange>* ranges = nullptr);

class ExpertParallelExperts final : public ExpertCompute {
 public:
  /** Builds the inner compute over this rank's experts: make_inner(owned banks). The owned banks are
   *  kept by this object for its lifetime (the inner compute may hold views of them). */
  using InnerFactory = std::function<std::unique_ptr<ExpertCompute>(const HostExpertBanks& owned)>;

  /** Rank comm.rank() of comm.group_size() ranks, over every MoE layer of `host` (views into the
   *  model's checkpoint; they must outlive this object). Throws ft::Error(kInvalidArgument) (from
   *  slice_banks, before any collective) when a layer's experts are not a multiple of the ranks;
   *  what make_inner throws passes through. */
  ExpertParallelExperts(dist::Collective& comm, const HostExpertBanks& host, const InnerFactory& make_inner);
  /** Same, the inner compute a ResidentExperts on `ops`. */
  ExpertParallelExperts(dist::Collective& comm, Ops& ops, const HostExpertBanks& host);
  /** Over an inner compute already built on this rank's experts (the engine: the model kept only its
   *  block, Model::keep_owned_experts, and the MoE runtime built its strategy over it). `ranges[l]` is
   *  layer l's owned range ({0, 0} dense), `n_expert[l]` its full expert count (0 dense). Throws
   *  ft::Error(kInvalidArgument) for vectors of different lengths, a null inner compute, or a range that
   *  is not this rank's dist::owned_experts block. */
  ExpertParallelExperts(dist::Collective& comm, std::vector<dist::ExpertRange> ranges, std::vector<int32_t> n_expert,
                        std::unique_ptr<ExpertCompute> inner);
  /** The inner compute (this rank's strategy over its own experts; its counters are this rank's). */
  ExpertCompute& inner() { return *inner_; }

  /** See ExpertCompute::compute. ids must be host memory (the CPU backend; a device-side masking
   *  kernel is a later step) and out F32 or BF16 (the collective's dtypes). Throws
   *  ft::Error(kInvalidArgument) for a layer without experts, ids not [T, k] I32 in host memory, or an
   *  id outside [0, n_expert); the inner compute's and the collective's errors pass through (a
   *  collective error aborts the group for every rank). */
  void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
               const ActQ8* x_q8 = nullptr) override;
  void check() override { inner_->check(); }
  PrefetchTargets prefetch_targets(int64_t layer, int64_t n_tokens) const override {
    return inner_->prefetch_targets(layer, n_tokens);
  }
  /** Forwards the predicted routes masked to this rank's experts (host ids; others are ignored). */
  void prefetch(int64_t target, const Tensor& ids) override;

  /** This rank's experts of `layer` ({0, 0} for a dense layer or one out of range). */
  dist::ExpertRange owned(int64_t layer) const;

 private:
  /** `ids` of `layer` as this rank's local ids (another rank's expert: -1) written to `buf`, as a
   *  [T, k] view of it; `what` names the caller in errors. Throws as compute() does. */
  Tensor mask(int64_t layer, const Tensor& ids, std::vector<int32_t>& buf, const char* what) const;

  dist::Collective& comm_;
  std::vector<dist::ExpertRange> ranges_;
  std::vector<int32_t> n_expert_;
  HostExpertBanks owned_;
  std::unique_ptr<ExpertCompute> inner_;
  std::vector<int32_t> local_ids_, prefetch_ids_;
};

}  // namespace ft
