#pragma once
// Expert-cache slot classes: a model whose MoE layers store their experts in different types (the
// "UD" mixes of unsloth's GGUF files: Q2_K experts in most layers, Q4_K or Q6_K in a few) has
// records of several sizes. One pool of slots of the largest record wastes the difference in every
// slot of a smaller layer; instead the cache layers are grouped by record size into classes, each
// with its own pool of slots of its size (moe/classed_expert_slots.h), and the cache's slots are
// split between the classes in proportion to their experts, so each class caches the same fraction
// of its experts. Pure functions: the memory plan (cache_sizing) and the runtime
// (OffloadedExperts) make the same classes from the same layers.
// C++17-clean: included from CUDA sources.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft {

struct ExpertBank;

/** One cache layer as its slots see it. */
struct SlotLayerShape {
  int64_t layer = 0;         // the model's layer index
  int64_t record_bytes = 0;  // one expert in the slot layout (ExpertLayout::bytes)
  int32_t n_expert = 0;
  /** Bias rows a slot of this layer has (moe/expert_slots.h SlotBiases): (bias kind 0 gate, 1 up,
   *  2 down; width in floats). Empty without biases. */
  std::vector<std::pair<int, int64_t>> bias_rows;
};

/** Layers whose experts share one pool of slots. */
struct SlotClass {
  std::vector<int64_t> layers;  // ascending
  int64_t record_bytes = 0;     // the largest record of its layers: the slot size in the pool
  int64_t bias_bytes = 0;       // a slot's bias rows (4 bytes a float, each distinct row of its layers once)
  int32_t max_experts = 0;      // largest n_expert of its layers
  int64_t total_experts = 0;    // routed experts of its layers
  int64_t n_slots = 0;          // slots it gets (split_slots; 0 until a cache is sized)

  /** Device bytes a slot costs: its record and its bias rows. */
  int64_t slot_bytes() const { return record_bytes + bias_bytes; }
  /** The fewest slots it may have: two staging regions of max_experts (prefill streams two layers),
   *  or all of its experts when that is fewer. */
  int64_t min_slots() const;
  /** Its layers as "0-3, 7" (plan lines, /v1/stats). */
  std::string layer_list() const;
};

/** At most this many classes: each is its own cache (admission state, prefetch copies). */
constexpr int kMaxSlotClasses = 4;

/** The shapes of every layer of `host` with routed experts whose index is in `layers` (empty: all):
 *  record bytes as expert_layout gives them, the biases' rows. Throws what expert_layout throws. */
std::vector<SlotLayerShape> slot_layer_shapes(const std::vector<ExpertBank>& host, const std::vector<int64_t>& layers = {});

/** Groups `layers` (cache layers, any order) into classes, largest records first:
 *  - layers of equal record bytes share a class;
 *  - a class whose records are at least 7/8 of the next larger class's joins it (its slots would
 *    waste under 1/8: not worth another cache);
 *  - a class with fewer experts than two staging regions (total < 2 x max_experts: one layer) joins
 *    its larger neighbour (the smaller one when it is the largest), so every class can stream;
 *  - then, while there are more than kMaxSlotClasses, the neighbouring pair whose merge wastes the
 *    fewest bytes (the smaller class's records x the size difference) merges.
 *  Our heuristic, not from a reference. n_slots is 0. Empty for no layers. Throws
 *  ft::Error(kInvalidArgument) for a layer without experts or records. */
std::vector<SlotClass> slot_classes(const std::vector<SlotLayerShape>& layers);

/** Splits `n_slots` slots between `classes` in proportion to their total_experts (largest
 *  remainders), each within [min_slots(), total_experts]. Returns the count per class. Throws
 *  ft::Error(kInvalidArgument) when n_slots is outside [sum of min_slots, sum of total_experts]. */
std::vector<int64_t> split_slots(const std::vector<SlotClass>& classes, int64_t n_slots);

/** Device bytes of `counts[c]` slots of each class c. */
int64_t slot_pool_bytes(const std::vector<SlotClass>& classes, const std::vector<int64_t>& counts);

}  // namespace ft
