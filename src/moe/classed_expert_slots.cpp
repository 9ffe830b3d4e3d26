#include "moe/classed_expert_slots.h"

#include <climits>

#include "util/error.h"

namespace ft {

ClassedExpertSlots::ClassedExpertSlots(Ops& ops, const ExpertBanks& banks, const std::vector<SlotClass>& classes,
                                       int32_t max_pairs) {
  if (classes.empty()) fail(ErrorCode::kInvalidArgument, "expert slots: no slot classes");
  class_of_.assign(static_cast<size_t>(banks.n_layers()), -1);
  bool all_stream = true;
  int64_t total = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    const SlotClass& sc = classes[c];
    for (int64_t l : sc.layers) {
      if (l < 0 || l >= banks.n_layers() || banks.n_expert(l) == 0)
        fail(ErrorCode::kInvalidArgument, "expert slots: slot class {} names layer {}, which has no routed experts", c, l);
      if (class_of_[static_cast<size_t>(l)] >= 0)
        fail(ErrorCode::kInvalidArgument, "expert slots: layer {} is in slot classes {} and {}", l,
             class_of_[static_cast<size_t>(l)], c);
      if (banks.layout(l).bytes > sc.record_bytes)
        fail(ErrorCode::kInvalidArgument, "expert slots: layer {}'s records of {} bytes exceed slot class {}'s {}", l,
             banks.layout(l).bytes, c, sc.record_bytes);
      class_of_[static_cast<size_t>(l)] = static_cast<int32_t>(c);
    }
    if (sc.n_slots < 1 || sc.n_slots > INT32_MAX)
      fail(ErrorCode::kInvalidArgument, "expert slots: slot class {} (layers {}) has {} slots", c, sc.layer_list(),
           sc.n_slots);
    Class k;
    k.view = banks.view(sc.layers);
    k.slots = make_expert_slots(ops, *k.view, static_cast<int32_t>(sc.n_slots), max_pairs);
    k.first_slot = static_cast<int32_t>(total);
    total += sc.n_slots;
    all_stream = all_stream && k.slots->n_regions() >= 2;
    classes_.push_back(std::move(k));
  }
  if (total > INT32_MAX) fail(ErrorCode::kInvalidArgument, "expert slots: {} slots", total);
  n_slots_ = static_cast<int32_t>(total);
  n_regions_ = all_stream ? 2 : 0;
  regions_.assign(static_cast<size_t>(n_regions_), Region{});
}

int ClassedExpertSlots::class_of(int32_t layer) const {
  return layer >= 0 && static_cast<size_t>(layer) < class_of_.size() ? class_of_[static_cast<size_t>(layer)] : -1;
}

ExpertSlots& ClassedExpertSlots::cache_of(int32_t layer) const {
  const int c = class_of(layer);
  if (c < 0) fail(ErrorCode::kInvalidArgument, "expert slots: layer {} goes through no slot class", layer);
  return *classes_[static_cast<size_t>(c)].slots;
}

void ClassedExpertSlots::admit_routes(int32_t layer, const Tensor& ids, FetchPolicy policy, Tensor slot_ids,
                                      Tensor cpu_ids) {
  cache_of(layer).admit_routes(layer, ids, policy, slot_ids, cpu_ids);
  last_admitted_ = last_routes_ = class_of(layer);
}

void ClassedExpertSlots::gather_misses() {
  if (last_routes_ >= 0) classes_[static_cast<size_t>(last_routes_)].slots->gather_misses();
}

void ClassedExpertSlots::prefetch(int32_t layer, const Tensor& ids, FetchPolicy policy) {
  cache_of(layer).prefetch(layer, ids, policy);
  last_admitted_ = class_of(layer);
}

void ClassedExpertSlots::finish_prefetches() {
  for (Class& k : classes_) k.slots->finish_prefetches();
}

void ClassedExpertSlots::stream_layer(int32_t layer, int32_t region, int32_t cpu_share_q16) {
  if (region < 0 || region >= n_regions_)
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} outside [0, {}) ({} slots)", region, n_regions_,
         n_slots_);
  ExpertSlots& s = cache_of(layer);
  Class& k = classes_[static_cast<size_t>(class_of(layer))];
  const int32_t r = k.cursor;
  k.cursor = (k.cursor + 1) % s.n_regions();
  s.stream_layer(layer, r, cpu_share_q16);
  regions_[static_cast<size_t>(region)] = {class_of(layer), r};
}

void ClassedExpertSlots::split_streamed(int32_t region, const Tensor& ids, Tensor gpu_ids, Tensor cpu_ids) {
  if (region < 0 || region >= n_regions_)
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} outside [0, {})", region, n_regions_);
  const Region& g = regions_[static_cast<size_t>(region)];
  if (g.cls < 0) fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} streamed no layer yet", region);
  classes_[static_cast<size_t>(g.cls)].slots->split_streamed(g.region, ids, gpu_ids, cpu_ids);
}

void ClassedExpertSlots::wait_region(int32_t region) {
  if (region < 0 || region >= n_regions_)
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} outside [0, {})", region, n_regions_);
  const Region& g = regions_[static_cast<size_t>(region)];
  if (g.cls >= 0) classes_[static_cast<size_t>(g.cls)].slots->wait_region(g.region);
}

const ExpertBank& ClassedExpertSlots::region_bank(int32_t layer, int32_t region) const {
  if (region < 0 || region >= n_regions_)
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} outside [0, {})", region, n_regions_);
  const Region& g = regions_[static_cast<size_t>(region)];
  if (g.cls < 0 || g.cls != class_of(layer))
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} holds no layer of layer {}'s slot class", region,
         layer);
  return classes_[static_cast<size_t>(g.cls)].slots->region_bank(layer, g.region);
}

void ClassedExpertSlots::check() {
  for (Class& k : classes_) k.slots->check();
}

std::vector<CacheLayerStats> ClassedExpertSlots::stats() {
  std::vector<CacheLayerStats> out(class_of_.size());
  for (size_t c = 0; c < classes_.size(); ++c) {
    const std::vector<CacheLayerStats> st = classes_[c].slots->stats();
    for (size_t l = 0; l < out.size() && l < st.size(); ++l)
      if (class_of_[l] == static_cast<int32_t>(c)) out[l] = st[l];
  }
  return out;
}

void ClassedExpertSlots::copy_state_to(ExpertCache&) {
  fail(ErrorCode::kUnsupported, "expert slots: {} slot classes keep one admission state each (inspect slot_class(c))",
       classes_.size());
}

std::vector<CacheMiss> ClassedExpertSlots::last_misses() {
  if (last_admitted_ < 0) return {};
  const Class& k = classes_[static_cast<size_t>(last_admitted_)];
  std::vector<CacheMiss> m = k.slots->last_misses();
  for (CacheMiss& x : m) x.slot += k.first_slot;
  return m;
}

std::unique_ptr<ExpertSlots> make_classed_expert_slots(Ops& ops, const ExpertBanks& banks,
                                                       const std::vector<SlotClass>& classes, int32_t max_pairs) {
  if (classes.empty()) fail(ErrorCode::kInvalidArgument, "expert slots: no slot classes");
  const SlotClass& c = classes.front();
  const bool whole = classes.size() == 1 && c.record_bytes == banks.slot_bytes() &&
                     static_cast<int64_t>(c.layers.size()) == banks.n_moe_layers();
  if (whole) {
    if (c.n_slots < 1 || c.n_slots > INT32_MAX)
      fail(ErrorCode::kInvalidArgument, "expert slots: {} slots", c.n_slots);
    return make_expert_slots(ops, banks, static_cast<int32_t>(c.n_slots), max_pairs);
  }
  return std::make_unique<ClassedExpertSlots>(ops, banks, classes, max_pairs);
}

}  // namespace ft
