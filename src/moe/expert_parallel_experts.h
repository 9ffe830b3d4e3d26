#pragma once
// ExpertParallelExperts: expert parallelism (EP) behind the ExpertCompute interface. Each rank of a
// dist::Collective group holds only its owned block of every MoE layer's experts (dist::owned_experts:
// contiguous, n_expert / n_ranks each) in an inner ExpertCompute; compute() masks the routes to the
// owned experts on the backend (Ops::moe_local_ids: local ids, -1 for another rank's expert, into a
// buffer of its own on the backend's device), runs the inner compute into `out` (this
// rank's partial [T, H] sum) and all_reduces `out` in place, so every rank ends with the full MoE
// output. Every rank must run the same step (same x, routes and weights): the all-gather + all-reduce
// form of EP, where no expert's weights leave its owner and the activations cross ranks instead. The
// all-to-all form (send each token only to the owners of its experts, combine back) moves fewer bytes at
// large batch and is a later step; both give the same sums up to float order. Launch shapes are fixed;
// the only sync is the collective itself, so a step can be recorded as a graph (the masking kernel
// reads each replay's routes; its buffers only grow, and a grown one keeps the old one alive for the
// graphs recorded over it).
#include <array>
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
   *  model's checkpoint; they must outlive this object); the routes are masked on `ops` (the backend
   *  the inner compute and the routes are on). Throws ft::Error(kInvalidArgument) (from slice_banks,
   *  before any collective) when a layer's experts are not a multiple of the ranks; what make_inner
   *  throws passes through. */
  ExpertParallelExperts(dist::Collective& comm, Ops& ops, const HostExpertBanks& host, const InnerFactory& make_inner);
  /** Same, the inner compute a ResidentExperts on `ops`. */
  ExpertParallelExperts(dist::Collective& comm, Ops& ops, const HostExpertBanks& host);
  /** Over an inner compute already built on this rank's experts (the engine: the model kept only its
   *  block, Model::keep_owned_experts, and the MoE runtime built its strategy over it). `ranges[l]` is
   *  layer l's owned range ({0, 0} dense), `n_expert[l]` its full expert count (0 dense). Throws
   *  ft::Error(kInvalidArgument) for vectors of different lengths, a null inner compute, or a range that
   *  is not this rank's dist::owned_experts block. `max_ids` (tokens x k of the largest step; 0:
   *  none) allocates the masked-route buffers up front on `ops`, so a step never allocates. */
  ExpertParallelExperts(dist::Collective& comm, Ops& ops, std::vector<dist::ExpertRange> ranges,
                        std::vector<int32_t> n_expert, std::unique_ptr<ExpertCompute> inner, int64_t max_ids = 0);
  /** The inner compute (this rank's strategy over its own experts; its counters are this rank's). */
  ExpertCompute& inner() { return *inner_; }

  /** See ExpertCompute::compute. ids on the backend's device (the routes masked there by
   *  Ops::moe_local_ids), out F32 or BF16 on the memory the collective takes (in-process: host; NCCL:
   *  the GPU). Throws ft::Error(kInvalidArgument) for a layer without experts, ids not [T, k] I32 on
   *  the backend's device, or (CPU backend: the op reads the ids) an id >= n_expert, "expert
   *  parallelism compute: layer L: moe_local_ids: entry i routes to expert e of E"; on CUDA such an
   *  id routes nowhere (the router never writes one). The inner compute's and the collective's errors
   *  pass through (a collective error aborts the group for every rank). */
  void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
               const ActQ8* x_q8 = nullptr) override;
  void check() override { inner_->check(); }
  PrefetchTargets prefetch_targets(int64_t layer, int64_t n_tokens) const override {
    return inner_->prefetch_targets(layer, n_tokens);
  }
  /** Forwards the predicted routes masked to this rank's experts (ids as compute() takes them; the
   *  inner compute reads them at the next compute(), so each of the up to PrefetchTargets::kMax
   *  predictions before it has a buffer of its own). Throws as compute() does. */
  void prefetch(int64_t target, const Tensor& ids) override;

  /** This rank's experts of `layer` ({0, 0} for a dense layer or one out of range). */
  dist::ExpertRange owned(int64_t layer) const;

 private:
  /** Backend memory for masked routes: grown on demand, never shrunk; a replaced block moves to
   *  retired_ (graphs recorded over it still write and read it). */
  struct IdsBuffer {
    Buffer storage;
    int64_t capacity = 0;  // I32 entries
  };
  /** `buf` holding at least n entries. */
  void reserve(IdsBuffer& buf, int64_t n);
  /** `ids` of `layer` as this rank's local ids (another rank's expert: -1) written by
   *  Ops::moe_local_ids to `buf`, as a [T, k] view of it; `what` names the caller in errors. Throws as
   *  compute() does. */
  Tensor mask(int64_t layer, const Tensor& ids, IdsBuffer& buf, const char* what);

  dist::Collective& comm_;
  Ops& ops_;
  std::vector<dist::ExpertRange> ranges_;
  std::vector<int32_t> n_expert_;
  HostExpertBanks owned_;
  std::unique_ptr<ExpertCompute> inner_;
  IdsBuffer local_ids_;
  std::array<IdsBuffer, PrefetchTargets::kMax> prefetch_ids_;
  int n_prefetched_ = 0;  // predictions since the last compute()
  std::vector<Buffer> retired_;
};

}  // namespace ft
