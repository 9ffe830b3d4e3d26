#include "moe/expert_cache.h"

#include <algorithm>

#include "util/error.h"

namespace ft {

ExpertCache::ExpertCache(int32_t n_layers, int32_t n_expert, int32_t n_slots, int32_t max_pairs)
    : n_layers_(n_layers), n_expert_(n_expert), n_slots_(n_slots), max_pairs_(max_pairs) {
  if (n_layers < 1 || n_expert < 1 || max_pairs < 1)
    fail(ErrorCode::kInvalidArgument, "expert cache: {} layers, {} experts per layer, {} pairs per admission",
         n_layers, n_expert, max_pairs);
  if (n_slots < n_expert)
    fail(ErrorCode::kInvalidArgument, "expert cache: {} slots cannot hold one layer's {} experts", n_slots, n_expert);
  slot_of_.resize(static_cast<size_t>(n_layers) * static_cast<size_t>(n_expert));
  owner_.resize(static_cast<size_t>(n_slots));
  stamp_.resize(static_cast<size_t>(n_slots));
  stats_.resize(static_cast<size_t>(n_layers) * kCacheStatCount);
  scratch_.resize(3 * static_cast<size_t>(n_expert));
  misses_.resize(static_cast<size_t>(std::min(max_pairs, n_expert)));
  reset();
}

CacheStateRefs ExpertCache::refs() {
  CacheStateRefs r;
  r.n_layers = n_layers_, r.n_expert = n_expert_, r.n_slots = n_slots_;
  r.slot_of = slot_of_.data(), r.owner = owner_.data(), r.stamp = stamp_.data(), r.tick = &tick_;
  r.stats = stats_.data();
  return r;
}

void ExpertCache::check_same_geometry(const ExpertCache& o) const {
  if (o.n_layers_ != n_layers_ || o.n_expert_ != n_expert_ || o.n_slots_ != n_slots_)
    fail(ErrorCode::kInvalidArgument, "expert cache: geometry {} layers x {} experts, {} slots differs from {} x {}, {}",
         o.n_layers_, o.n_expert_, o.n_slots_, n_layers_, n_expert_, n_slots_);
}

void ExpertCache::reset() {
  reset_cache_state(refs());
  n_misses_ = 0;
}

int32_t ExpertCache::admit(int32_t layer, const int32_t* ids, int32_t n_pairs, FetchPolicy policy,
                           int64_t record_bytes, int32_t* slot_ids, int32_t* cpu_ids, bool prefetch,
                           int32_t spare) {
  if (n_pairs < 0 || n_pairs > max_pairs_)
    fail(ErrorCode::kInvalidArgument, "expert cache: {} routed pairs, at most {} per admission", n_pairs, max_pairs_);
  AdmitArgs a;
  a.layer = layer, a.n_pairs = n_pairs, a.policy = policy, a.record_bytes = record_bytes, a.prefetch = prefetch;
  a.spare = spare;
  a.ids = ids, a.slot_ids = slot_ids, a.cpu_ids = cpu_ids, a.misses = misses_.data(), a.n_misses = &n_misses_;
  return admit_reference(refs(), a, scratch_.data());
}

int32_t ExpertCache::slot_of(int32_t layer, int32_t expert) const {
  if (layer < 0 || layer >= n_layers_ || expert < 0 || expert >= n_expert_)
    fail(ErrorCode::kInvalidArgument, "expert cache: (layer {}, expert {}) outside {} x {}", layer, expert, n_layers_,
         n_expert_);
  return slot_of_[static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(expert)];
}

CacheLayerStats ExpertCache::stats(int32_t layer) const {
  if (layer < 0 || layer >= n_layers_)
    fail(ErrorCode::kInvalidArgument, "expert cache: layer {} outside [0, {})", layer, n_layers_);
  const int64_t* s = stats_.data() + static_cast<size_t>(layer) * kCacheStatCount;
  return CacheLayerStats{s[kCacheHits], s[kCacheMisses], s[kCacheCpu], s[kCacheBytes], s[kCachePrefetched]};
}

void ExpertCache::check_integrity() const {
  const int64_t n_keys = static_cast<int64_t>(n_layers_) * n_expert_;
  int64_t mapped = 0;
  for (int64_t key = 0; key < n_keys; ++key) {
    const int32_t s = slot_of_[static_cast<size_t>(key)];
    if (s < -1 || s >= n_slots_)
      fail(ErrorCode::kInternal, "expert cache: (layer {}, expert {}) maps to slot {} of {}", key / n_expert_,
           key % n_expert_, s, n_slots_);
    if (s >= 0 && owner_[static_cast<size_t>(s)] != key)
      fail(ErrorCode::kInternal, "expert cache: (layer {}, expert {}) maps to slot {}, owned by key {}",
           key / n_expert_, key % n_expert_, s, owner_[static_cast<size_t>(s)]);
    mapped += s >= 0;
  }
  int64_t occupied = 0;
  for (int32_t s = 0; s < n_slots_; ++s) {
    const int32_t key = owner_[static_cast<size_t>(s)];
    const int64_t st = stamp_[static_cast<size_t>(s)];
    if (key < -1 || key >= n_keys) fail(ErrorCode::kInternal, "expert cache: slot {} has owner key {}", s, key);
    if (key >= 0 && slot_of_[static_cast<size_t>(key)] != s)
      fail(ErrorCode::kInternal, "expert cache: slot {} owned by (layer {}, expert {}), which maps to slot {}", s,
           key / n_expert_, key % n_expert_, slot_of_[static_cast<size_t>(key)]);
    if (key >= 0 ? (st < 1 || st > tick_) : st != 0)
      fail(ErrorCode::kInternal, "expert cache: slot {} (owner {}) has stamp {} at tick {}", s, key, st, tick_);
    occupied += key >= 0;
  }
  if (mapped != occupied)
    fail(ErrorCode::kInternal, "expert cache: {} mapped experts but {} occupied slots", mapped, occupied);
}

}  // namespace ft
