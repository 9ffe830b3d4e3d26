#pragma once
// ExpertCache: the host-side owner of an expert cache's state (slot map, owners, stamps, tick,
// per-layer stats) and of one admission's outputs, running admit_reference (moe/cache_admission.h).
// It is the CPU reference the device kernel is tested against, and the admission of the CPU
// build's offload path. Fixed shapes, no allocation per step. C++17-clean.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "moe/cache_admission.h"

namespace ft {

/** Per-layer cache counters; distinct experts per admission, bytes copied host -> slot. */
struct CacheLayerStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t cpu = 0;    // experts left to the CPU (over the fetch cap)
  int64_t bytes = 0;  // bytes fetched (admissions and prefetches)
  int64_t prefetched = 0;  // experts fetched by prefetch admissions
};

class ExpertCache {
 public:
  /** `n_slots` slots for `n_layers` layers of up to `n_expert` experts; one admission takes up to
   *  `max_pairs` (= T * k) routed ids. Throws ft::Error(kInvalidArgument) unless n_layers,
   *  n_expert, max_pairs >= 1 and n_slots >= n_expert (one layer's experts must all fit, so an
   *  admission without a fetch cap never runs out of victims). */
  ExpertCache(int32_t n_layers, int32_t n_expert, int32_t n_slots, int32_t max_pairs);

  int32_t n_layers() const { return n_layers_; }
  int32_t n_expert() const { return n_expert_; }
  int32_t n_slots() const { return n_slots_; }
  int32_t max_pairs() const { return max_pairs_; }

  /** One admission (see cache_admission.h) for `layer`: ids [n_pairs] (I32, row-major [T, k]) ->
   *  slot_ids [n_pairs], cpu_ids [n_pairs] (may be null); the miss list is in misses(). Returns
   *  the number of misses. policy: which misses are fetched (a plain cap converts; < 0: all). record_bytes: bytes one miss copies (stats).
   *  prefetch: a prefetch admission of predicted ids (cpu_ids is not written). spare: victims
   *  also spare the slots of this many admissions before it (AdmitArgs::spare).
   *  Throws kInvalidArgument for a layer out of range or n_pairs outside [0, max_pairs]. */
  int32_t admit(int32_t layer, const int32_t* ids, int32_t n_pairs, FetchPolicy policy, int64_t record_bytes,
                int32_t* slot_ids, int32_t* cpu_ids, bool prefetch = false, int32_t spare = 0);

  /** Maps `layer`'s n experts to the region of n_expert slots at `first` for a streamed layer (see
   *  claim_region in cache_admission.h); src_slot [n] (may be null): each expert's cached slot, or
   *  -1 (kStreamOnCpu: the CPU's share cpu_share_q16 / 65536 of the uncached experts); experts cached
   *  below slot keep_below stay there. Throws kInvalidArgument for arguments out of range. */
  void claim_region(int32_t layer, int32_t first, int32_t n, int64_t record_bytes, int32_t* src_slot = nullptr,
                    int32_t keep_below = INT32_MAX, int32_t cpu_share_q16 = 0) {
    claim_region_reference(refs(), layer, first, n, record_bytes, src_slot, keep_below, cpu_share_q16);
  }

  /** The last admission's misses, in fetch order. */
  const CacheMiss* misses() const { return misses_.data(); }
  int32_t n_misses() const { return n_misses_; }

  /** Slot holding (layer, expert), or -1. */
  int32_t slot_of(int32_t layer, int32_t expert) const;
  /** layer * n_expert + expert held by `slot`, or -1. */
  int32_t owner(int32_t slot) const { return owner_[static_cast<size_t>(slot)]; }
  int64_t stamp(int32_t slot) const { return stamp_[static_cast<size_t>(slot)]; }
  int64_t tick() const { return tick_; }
  CacheLayerStats stats(int32_t layer) const;

  /** Empties every slot and zeroes tick and stats. */
  void reset();
  /** Throws ft::Error(kInternal) describing the first broken invariant: slot_of and owner are
   *  inverse maps on occupied slots (a bijection), entries in range, stamp in [1, tick] for an
   *  occupied slot and 0 for an empty one. */
  void check_integrity() const;

  /** The state arrays (for copying to or comparing with a device cache). */
  CacheStateRefs refs();
  /** Throws ft::Error(kInvalidArgument) unless `o` has the same layers, map width and slots. */
  void check_same_geometry(const ExpertCache& o) const;

 private:
  int32_t n_layers_, n_expert_, n_slots_, max_pairs_;
  std::vector<int32_t> slot_of_, owner_, scratch_;
  std::vector<int64_t> stamp_, stats_;
  int64_t tick_ = 0;
  std::vector<CacheMiss> misses_;
  int32_t n_misses_ = 0;
};

}  // namespace ft
