#pragma once
// Expert-cache admission: the algorithm, on plain arrays, shared word for word by the CPU
// reference (admit_reference, below) and the device kernel (moe/cuda/moe_cache_admit.cu).
//
// State: a pool of n_slots slots shared by all layers; slot_of maps (layer, expert) -> slot,
// owner maps slot -> (layer, expert) (an exact inverse on mapped entries), stamp[s] is the tick of
// the last admission that used slot s (0: never), tick counts admissions (one per MoE layer per
// step, so "least recently used" follows the order in which layers touch experts).
//
// One admission for MoE layer l with routed ids [T, k] (fixed shape; ids < 0 mean "not routed
// here", ids >= n_expert are treated the same way, the device cannot throw):
//   1. tick += 1;
//   2. the distinct ids in order of first appearance (row-major over [T, k]);
//   3. hits: every distinct id already mapped gets stamp = tick;
//   4. misses, in first-appearance order (a planned policy: heaviest first, FetchPolicy below):
//      while fewer than the policy's cap were fetched (cap < 0: unlimited), take the victim slot with the smallest (victim_key(stamp), slot index) among
//      slots with stamp < tick (so never one this admission uses), unmap its owner, map the id to
//      it, stamp it and append {l, e, slot} to the miss list; a miss over the cap (or, impossible
//      when n_slots >= n_expert, with no victim left) is left to the CPU;
//   5. slot_ids[i] = slot of ids[i] (-1 for CPU-computed or absent ids) and cpu_ids[i] = ids[i]
//      for CPU-computed ids (-1 otherwise);
//   6. stats of layer l: hits, misses, cpu (distinct experts each), bytes = misses * record bytes.
// The gather then copies each miss's record from the host bank into its slot.
//
// Victim order (victim_key): empty slots first, then the least recently used among slots not used
// within the last 2 * n_layers ticks (a decode step makes at most that many admissions: one per
// layer and one prefetch per layer); when every slot was used that recently, the most recently used
// first. Layers touch experts in the same cyclic order every step, so once a step's distinct experts
// outnumber the slots, plain LRU evicts exactly the experts the next layers need and hits nothing
// (H200, qwen3-30b-a3b bf16 in 2,080 slots, --moe-prefetch off: 0% hits at batch 8 and 32, skew 0,
// and at batch 32, skew 1.0). Evicting the most recent keeps the other slots for the next step. A
// simulation of that model (48 layers, 128 experts, k 8, 2,080 slots) gives 34% hits at batch 8 and
// 33% at batch 32 (skew 0; 36% at batch 32, skew 1.0), and LRU's hits wherever a step fits (batch 1;
// batch 8 at skew 1.0). This is Belady's rule (evict what is used farthest in the future; Belady, "A
// study of replacement algorithms for a virtual-storage computer", 1966) applied to the cyclic order.
// Measured on the H200 (offload, prefetch on, same lease): batch 8 / 32 at skew 0 17.3 / 32.3 ->
// 25.6 / 45.9 tok/s, batch 32 at skew 1.0 58.0 -> 105.5; batch 1 and batch 8 at skew 1.0 unchanged.
//
// Sparing (AdmitArgs::spare = n): victims also need stamp < tick - n, so the slots of the n
// admissions before this one are never taken; an empty slot (stamp 0) always qualifies. The expert
// slots set n from their PrefetchLedger (moe/expert_slots.h): back to the oldest prefetch whose
// copies may still be filling its slots and whose layer has not been admitted yet.
//
// Prefetch (--moe-prefetch): an admission of *predicted* ids for a later layer, made while the
// layers before still compute from the slots they were given. It differs in three places:
//   4. it spares the prefetches still in flight before it (at depth 1, the next layer's prefetch
//      two admissions back: spare = 2). A prefetch that finds no victim simply fetches less;
//   5. no CPU outputs (cpu_ids is not written; a prediction over the cap is simply not fetched);
//   6. stats: only misses (as kCachePrefetched) and bytes; hits and cpu are not counted, so the
//      layer's hit rate stays that of its real admissions (which find prefetched experts as hits).
// The prefetch for layer l + d (depth d) is made just before layer l's own admission, so its copies
// run behind the previous prefetch's with no gap; layer l's admission therefore spares the
// prefetches made for later layers (depth 1: the one just before it, spare = 1; depth d: spare =
// 2d - 1).
// With n_slots >= 2 * d * n_expert it always finds victims.
//
// Streaming (prefill): a step with many tokens touches nearly every expert of a layer, so the
// whole layer is copied into a staging region of n_expert (the map width) consecutive slots
// instead (DESIGN.md: prefill streams whole expert layers through staging regions). claim_region
// for layer l and a region starting at slot `first`:
//   1. tick += 1;
//   2. every slot of the region is emptied (its owner unmapped, owner -1, stamp 0), but slot
//      first + e when it holds the layer's expert e already;
//   3. each expert e < n of the layer maps to slot first + e with stamp = tick (the copy puts its
//      record there), a slot it held elsewhere emptied the same way. With a src_slot array (the
//      stream copies cached records device to device), src_slot[e] = the slot it held, else -1;
//      an expert held in another slot below keep_below (the staging regions' first slot: slots
//      outside every region) keeps it (stamp = tick) and its copy in slot first + e is scratch for
//      this step (the slot stays empty in the map), so a prefill leaves the cache's experts where
//      they were; one held in another region moves into this one (that region is reclaimed next);
//      first + e: in place, nothing to copy. Without src_slot every record comes from the bank;
//      With a CPU share q (cpu_share_q16 > 0, in 1/65536; needs src_slot): an expert cached nowhere
//      whose pick stream_cpu_pick(layer, e) < q is left to the CPU instead (issue 37: a prefill's
//      uncached experts split between the copy path and the CPU): src_slot[e] = kStreamOnCpu, its
//      map entry stays -1 and slot first + e stays empty, nothing is copied for it;
//   4. stats of layer l: hits += the experts found outside the region (with src_slot), misses += the
//      others the stream copies from the banks, bytes += misses * record bytes (the CPU's share
//      counts in neither: the CPU executor counts what it computes);
//   5. tick += 2 * n_layers: the window of the victim order passes, so for the admissions after a
//      prefill every slot counts as old and victims go least recently used first (a prefill touches
//      every slot within a few ticks, which would otherwise look like a decode step outgrowing the
//      cache: its most recently streamed layers, needed by the next step, would go first).
// So the streamed layer stays cached afterwards, like a layer admitted in full, and the state keeps
// every invariant above.
// C++17-clean: included from CUDA sources.
#include <cstdint>

namespace ft {

#if defined(__CUDACC__)
#define FT_ADMIT_HD __host__ __device__
#else
#define FT_ADMIT_HD
#endif

/** claim_region's src_slot for an expert the CPU computes this step (not copied, not mapped). */
inline constexpr int32_t kStreamOnCpu = -2;

/** claim_region's CPU pick of (layer, expert) in [0, 65536): a golden-ratio sequence over the
 *  experts (offset per layer), so any share q takes ~q / 65536 of any run of uncached experts. */
FT_ADMIT_HD inline int32_t stream_cpu_pick(int32_t layer, int32_t expert) {
  return static_cast<int32_t>((static_cast<uint32_t>(expert) * 40503u + static_cast<uint32_t>(layer) * 25033u) & 0xffffu);
}

/** Cost unit of FetchPolicy: the copy of one expert's record over PCIe is kFetchCostUnit. */
inline constexpr int32_t kFetchCostUnit = 1024;

/** How many of an admission's misses it fetches; the others are left to the CPU (cpu_ids).
 *  A plain cap (the hybrid strategy's --moe-fetch-cap, offload's unlimited -1): misses in first-
 *  appearance order, at most `cap` fetched (cap < 0: all).
 *  Planned (cpu_cost > 0; issue 37's planner): the split that makes the layer's two paths, which
 *  run at the same time, end soonest. Misses are taken heaviest first (most routed pairs, then
 *  first appearance: an expert with many tokens costs the CPU most and the GPU no more), and the
 *  first f are fetched, f in [0, m] minimising max(f * kFetchCostUnit, sum over the other misses
 *  of cpu_cost + cpu_token_cost * (pairs - 1)) -- the copy path's time against the CPU path's, in
 *  kFetchCostUnit per fetched expert; ties go to more fetches (they warm the cache). cap >= 0
 *  bounds f. Integer costs, so the device kernel and the CPU reference choose the same f. */
struct FetchPolicy {
  int32_t cap = -1;
  int32_t cpu_cost = 0;        // CPU time of a missed expert with one routed pair, kFetchCostUnit = one fetch
  int32_t cpu_token_cost = 0;  // CPU time of each further pair of that expert, same unit
  FT_ADMIT_HD FetchPolicy(int32_t fetch_cap = -1) : cap(fetch_cap) {}  // NOLINT: a plain cap converts
  FT_ADMIT_HD bool planned() const { return cpu_cost > 0; }
  /** Every miss is fetched (offload): no cap, not planned. */
  FT_ADMIT_HD bool fetches_all() const { return cap < 0 && !planned(); }
};

/** One fetch: copy the host record of (layer, expert) into `slot`. */
struct CacheMiss {
  int32_t layer = 0;
  int32_t expert = 0;
  int32_t slot = 0;
};

/** Per-layer counters, stored as int64 [n_layers][kCacheStatCount] in this order. */
enum CacheStat : int {
  kCacheHits = 0,
  kCacheMisses = 1,
  kCacheCpu = 2,
  kCacheBytes = 3,
  kCachePrefetched = 4,  // experts fetched by prefetch admissions (also in kCacheBytes)
  kCacheStatCount = 5
};

/** The cache's state arrays (host memory for the reference, device memory for the kernel). */
struct CacheStateRefs {
  int32_t n_layers = 0;
  int32_t n_expert = 0;       // map width: (l, e) -> l * n_expert + e
  int32_t n_slots = 0;
  int32_t* slot_of = nullptr;  // [n_layers * n_expert]: slot or -1
  int32_t* owner = nullptr;    // [n_slots]: l * n_expert + e, or -1 when empty
  int64_t* stamp = nullptr;    // [n_slots]: tick of last use, 0 = never
  int64_t* tick = nullptr;     // [1]: last tick issued (starts at 0)
  int64_t* stats = nullptr;    // [n_layers * kCacheStatCount]
};

/** One admission's inputs and outputs. */
struct AdmitArgs {
  int32_t layer = 0;
  int32_t n_pairs = 0;          // T * k
  FetchPolicy policy;           // which misses are fetched (the rest go to cpu_ids)
  bool prefetch = false;        // a prefetch admission (see above)
  int32_t spare = 0;            // victims spare the slots of this many admissions before it (see above)
  int64_t record_bytes = 0;     // bytes one miss copies (stats)
  const int32_t* ids = nullptr;  // [n_pairs] expert ids
  int32_t* slot_ids = nullptr;   // [n_pairs] out
  int32_t* cpu_ids = nullptr;    // [n_pairs] out, may be null
  CacheMiss* misses = nullptr;   // out, capacity >= min(n_pairs, n_expert)
  int32_t* n_misses = nullptr;   // [1] out
};

/** Victim order of a slot last used at `stamp` (0: empty) for an admission at `tick` in a cache of
 *  n_layers layers: smaller goes first (see "Victim order" above). Empty slots and slots not used
 *  within the last 2 * n_layers ticks map to their stamp; more recent ones to tick + (tick - stamp),
 *  above every older slot and smaller the more recent. */
FT_ADMIT_HD inline int64_t victim_key(int64_t stamp, int64_t tick, int32_t n_layers) {
  return stamp == 0 || stamp <= tick - 2 * static_cast<int64_t>(n_layers) ? stamp : tick + (tick - stamp);
}

// The admission's per-expert scratch word (`seen` in both implementations): bits 0-1 the state
// (0 unseen, 1 listed, 2 left to the CPU), the rest the number of routed pairs naming the expert.
FT_ADMIT_HD inline int32_t seen_state(int32_t w) { return w & 3; }
FT_ADMIT_HD inline int32_t seen_pairs(int32_t w) { return w >> 2; }

/** Position of misses[i] in the planned fetch order of misses[0, m): heaviest (most pairs in
 *  `seen`) first, ties in list order. A permutation of [0, m) over i. */
FT_ADMIT_HD inline int32_t planned_rank(const int32_t* misses, int32_t m, int32_t i, const int32_t* seen) {
  const int32_t pi = seen_pairs(seen[misses[i]]);
  int32_t r = 0;
  for (int32_t j = 0; j < m; ++j) {
    const int32_t pj = seen_pairs(seen[misses[j]]);
    r += pj > pi || (pj == pi && j < i);
  }
  return r;
}

/** The fetch count of FetchPolicy for misses[0, m) in fetch order (pairs in `seen`): for a plain
 *  policy its cap (m when unlimited), for a planned one the split described there. */
FT_ADMIT_HD inline int32_t planned_fetches(const FetchPolicy& p, const int32_t* misses, int32_t m, const int32_t* seen) {
  int32_t f = m;
  if (p.planned()) {
    auto cpu = [&](int32_t i) {
      return static_cast<int64_t>(p.cpu_cost) + static_cast<int64_t>(p.cpu_token_cost) * (seen_pairs(seen[misses[i]]) - 1);
    };
    int64_t rest = 0;  // the CPU path with nothing fetched
    for (int32_t i = 0; i < m; ++i) rest += cpu(i);
    int64_t best = rest;
    f = 0;
    for (int32_t i = 0; i < m; ++i) {
      rest -= cpu(i);
      const int64_t copy = static_cast<int64_t>(i + 1) * kFetchCostUnit;
      const int64_t t = copy > rest ? copy : rest;
      if (t <= best) best = t, f = i + 1;
    }
  }
  return p.cap >= 0 && p.cap < f ? p.cap : f;
}

/** Sets the state to empty: every map entry and owner -1, stamps, tick and stats 0. */
void reset_cache_state(const CacheStateRefs& s);

/** The admission above on host arrays. `scratch` holds 3 * n_expert int32 (reused, no allocation).
 *  Returns the number of misses. Throws ft::Error(kInvalidArgument) for a layer outside
 *  [0, n_layers) or n_pairs < 0 (the arrays themselves are trusted: the caller owns them). */
int32_t admit_reference(const CacheStateRefs& s, const AdmitArgs& a, int32_t* scratch);

/** claim_region above on host arrays: the region is slots [first, first + n_expert), n (<= n_expert)
 *  the layer's expert count; src_slot [n] (may be null) receives each expert's cached slot outside
 *  the region, -1, or kStreamOnCpu for the CPU's share `cpu_share_q16` (0..65536, 1/65536 of the
 *  uncached experts). Throws ft::Error(kInvalidArgument) for a layer outside [0, n_layers), n outside
 *  [0, n_expert], a region outside [0, n_slots), or a CPU share outside [0, 65536] or without src_slot. */
void claim_region_reference(const CacheStateRefs& s, int32_t layer, int32_t first, int32_t n, int64_t record_bytes,
                            int32_t* src_slot = nullptr, int32_t keep_below = INT32_MAX, int32_t cpu_share_q16 = 0);

}  // namespace ft
