#pragma once
// ClassedExpertSlots: an expert cache whose layers' records come in several sizes (moe/slot_classes.h),
// kept as one ExpertSlots per slot class, each over a view of the banks with that class's layers
// (ExpertBanks::view), so every pool's slots have its own class's size. A layer's admission, gather,
// prefetch, slot bank and streaming go to its class's cache; slot ids are that cache's (the slot bank
// of the layer is that cache's too, so Ops::moe_experts pairs them as for one pool). Admissions in
// one class never evict another's experts, so each cache's PrefetchLedger counts its own admissions.
//
// Prefill streaming: two staging regions when every class has two of its own; stream_layer(l, r)
// takes the next region of l's class in turn (a per-class cursor) and remembers it as region r, so
// two layers streamed one after the other never share a region (same class: different regions;
// different classes: different pools), wait_region and region_bank follow that record.
// C++17-clean: included from CUDA sources.
#include <cstdint>
#include <memory>
#include <vector>

#include "moe/expert_slots.h"
#include "moe/slot_classes.h"

namespace ft {

class ClassedExpertSlots final : public ExpertSlots {
 public:
  /** One cache per class of `classes` (their layers with experts in `banks`, n_slots each >=
   *  min_slots()), made by make_expert_slots over a view of `banks`. Throws kInvalidArgument for a
   *  layer in two classes or without experts, a record larger than its class's, a class without
   *  slots; what make_expert_slots throws. */
  ClassedExpertSlots(Ops& ops, const ExpertBanks& banks, const std::vector<SlotClass>& classes, int32_t max_pairs);

  int32_t n_slots() const override { return n_slots_; }
  Device device() const override { return classes_.front().slots->device(); }
  void admit_routes(int32_t layer, const Tensor& ids, FetchPolicy policy, Tensor slot_ids, Tensor cpu_ids) override;
  void gather_misses() override;
  void prefetch(int32_t layer, const Tensor& ids, FetchPolicy policy) override;
  void finish_prefetches() override;
  const ExpertBank& slot_bank(int32_t layer) const override { return cache_of(layer).slot_bank(layer); }
  int32_t n_regions() const override { return n_regions_; }
  void stream_layer(int32_t layer, int32_t region, int32_t cpu_share_q16 = 0) override;
  void split_streamed(int32_t region, const Tensor& ids, Tensor gpu_ids, Tensor cpu_ids) override;
  void wait_region(int32_t region) override;
  const ExpertBank& region_bank(int32_t layer, int32_t region) const override;
  void check() override;
  /** Layer l's counters from its class's cache. */
  std::vector<CacheLayerStats> stats() override;
  /** Throws ft::Error(kUnsupported): each class has its own admission state (see slot_class()). */
  void copy_state_to(ExpertCache& dst) override;
  /** The last admission's misses (in its class's cache), their slots numbered over all classes
   *  (class c's slots after those of the classes before it). */
  std::vector<CacheMiss> last_misses() override;

  int n_classes() const { return static_cast<int>(classes_.size()); }
  /** Class c's cache (inspection, tests). */
  ExpertSlots& slot_class(int c) { return *classes_.at(static_cast<size_t>(c)).slots; }
  /** The class of `layer` (-1: not a cache layer). */
  int class_of(int32_t layer) const;

 private:
  struct Class {
    std::unique_ptr<ExpertBanks> view;
    std::unique_ptr<ExpertSlots> slots;
    int32_t first_slot = 0;  // numbering for last_misses
    int32_t cursor = 0;      // its next staging region
  };
  ExpertSlots& cache_of(int32_t layer) const;

  std::vector<Class> classes_;
  std::vector<int32_t> class_of_;  // [n_layers] (-1 none)
  int32_t n_slots_ = 0;
  int32_t n_regions_ = 0;
  int last_admitted_ = -1;  // class of the last admit_routes or prefetch (last_misses)
  int last_routes_ = -1;    // class of the last admit_routes (gather_misses)
  struct Region {
    int cls = -1;
    int32_t region = -1;
  };
  std::vector<Region> regions_;  // [n_regions_]: where stream_layer put region r
};

/** The expert cache for `classes` of `banks`: one class over all of banks' layers with records of its
 *  size (the common case) is make_expert_slots(ops, banks, n_slots, max_pairs); otherwise a
 *  ClassedExpertSlots. Throws what those throw, kInvalidArgument for no classes. */
std::unique_ptr<ExpertSlots> make_classed_expert_slots(Ops& ops, const ExpertBanks& banks,
                                                       const std::vector<SlotClass>& classes, int32_t max_pairs);

}  // namespace ft
