#include "moe/cache_admission.h"

#include <algorithm>

#include "util/error.h"

namespace ft {

void reset_cache_state(const CacheStateRefs& s) {
  std::fill(s.slot_of, s.slot_of + static_cast<int64_t>(s.n_layers) * s.n_expert, -1);
  std::fill(s.owner, s.owner + s.n_slots, -1);
  std::fill(s.stamp, s.stamp + s.n_slots, int64_t{0});
  *s.tick = 0;
  std::fill(s.stats, s.stats + static_cast<int64_t>(s.n_layers) * kCacheStatCount, int64_t{0});
}

int32_t admit_reference(const CacheStateRefs& s, const AdmitArgs& a, int32_t* scratch) {
  if (a.layer < 0 || a.layer >= s.n_layers)
    fail(ErrorCode::kInvalidArgument, "expert cache: layer {} outside [0, {})", a.layer, s.n_layers);
  if (a.n_pairs < 0) fail(ErrorCode::kInvalidArgument, "expert cache: {} routed pairs", a.n_pairs);
  const int32_t E = s.n_expert;
  int32_t* seen = scratch;          // [E]: state and pairs (seen_state, seen_pairs)
  int32_t* distinct = scratch + E;  // [E]: distinct ids in first-appearance order
  int32_t* misses = scratch + 2 * E;  // [E]: the misses in fetch order
  std::fill(seen, seen + E, 0);
  const int64_t tick = ++*s.tick;
  int32_t n_distinct = 0;
  for (int32_t i = 0; i < a.n_pairs; ++i) {  // 2. distinct ids
    const int32_t e = a.ids[i];
    if (e < 0 || e >= E) continue;
    if (seen[e] == 0) distinct[n_distinct++] = e;
    seen[e] = (seen[e] | 1) + 4;
  }
  int32_t* map = s.slot_of + static_cast<int64_t>(a.layer) * E;
  int64_t hits = 0, cpu = 0;
  int32_t m = 0;
  for (int32_t d = 0; d < n_distinct; ++d) {  // 3. hits; the misses in first-appearance order
    const int32_t slot = map[distinct[d]];
    if (slot >= 0)
      s.stamp[slot] = tick, ++hits;
    else
      misses[m++] = distinct[d];
  }
  const int32_t* order = misses;
  if (a.policy.planned()) {  // heaviest first (distinct is free now)
    for (int32_t i = 0; i < m; ++i) distinct[planned_rank(misses, m, i, seen)] = misses[i];
    order = distinct;
  }
  const int32_t cap = planned_fetches(a.policy, order, m, seen);
  int32_t n_miss = 0;
  for (int32_t d = 0; d < m; ++d) {  // 4. misses
    const int32_t e = order[d];
    int32_t victim = -1;
    // Victims' stamps stay below this; an empty slot (stamp 0) always qualifies.
    const int64_t newest = std::max<int64_t>(tick - std::max<int32_t>(a.spare, 0), 1);
    int64_t best = 0;
    if (n_miss < cap)
      for (int32_t slot = 0; slot < s.n_slots; ++slot) {
        if (s.stamp[slot] >= newest) continue;
        const int64_t key = victim_key(s.stamp[slot], tick, s.n_layers);
        if (victim < 0 || key < best) victim = slot, best = key;
      }
    if (victim < 0) {
      seen[e] = (seen[e] & ~3) | 2;
      ++cpu;
      continue;
    }
    if (s.owner[victim] >= 0) s.slot_of[s.owner[victim]] = -1;
    s.owner[victim] = a.layer * E + e;
    map[e] = victim;
    s.stamp[victim] = tick;
    a.misses[n_miss++] = CacheMiss{a.layer, e, victim};
  }
  for (int32_t i = 0; i < a.n_pairs; ++i) {  // 5. per-pair outputs
    const int32_t e = a.ids[i];
    const bool valid = e >= 0 && e < E;
    a.slot_ids[i] = valid ? map[e] : -1;  // -1 for CPU-computed ids (never mapped above)
    if (a.cpu_ids && !a.prefetch) a.cpu_ids[i] = valid && seen_state(seen[e]) == 2 ? e : -1;
  }
  int64_t* st = s.stats + static_cast<int64_t>(a.layer) * kCacheStatCount;  // 6. stats
  if (a.prefetch) {
    st[kCachePrefetched] += n_miss;
  } else {
    st[kCacheHits] += hits;
    st[kCacheMisses] += n_miss;
    st[kCacheCpu] += cpu;
  }
  st[kCacheBytes] += n_miss * a.record_bytes;
  *a.n_misses = n_miss;
  return n_miss;
}

void claim_region_reference(const CacheStateRefs& s, int32_t layer, int32_t first, int32_t n, int64_t record_bytes,
                            int32_t* src_slot, int32_t keep_below, int32_t cpu_share_q16) {
  const int32_t E = s.n_expert;
  if (layer < 0 || layer >= s.n_layers)
    fail(ErrorCode::kInvalidArgument, "expert cache: layer {} outside [0, {})", layer, s.n_layers);
  if (n < 0 || n > E || first < 0 || first > s.n_slots - E)
    fail(ErrorCode::kInvalidArgument, "expert cache: region of {} experts at slot {} outside {} slots ({} per region)",
         n, first, s.n_slots, E);
  if (cpu_share_q16 < 0 || cpu_share_q16 > 65536 || (cpu_share_q16 > 0 && !src_slot))
    fail(ErrorCode::kInvalidArgument, "expert cache: a streamed layer's CPU share {} / 65536 (needs src_slot)",
         cpu_share_q16);
  const int64_t tick = ++*s.tick;
  auto empty = [&](int32_t slot) {
    if (s.owner[slot] >= 0) s.slot_of[s.owner[slot]] = -1;
    s.owner[slot] = -1;
    s.stamp[slot] = 0;
  };
  int32_t* map = s.slot_of + static_cast<int64_t>(layer) * E;
  for (int32_t slot = first; slot < first + E; ++slot)
    if (slot - first >= n || map[slot - first] != slot) empty(slot);  // an expert already in place stays
  int32_t kept = 0, on_cpu = 0;
  for (int32_t e = 0; e < n; ++e) {
    const int32_t old = map[e];
    if (old < 0 && stream_cpu_pick(layer, e) < cpu_share_q16) {  // the CPU's share: not copied, not mapped
      src_slot[e] = kStreamOnCpu;
      ++on_cpu;
      continue;
    }
    if (src_slot) src_slot[e] = old, kept += old >= 0;
    if (old >= 0 && old != first + e) {
      if (src_slot && old < keep_below) {  // copied into the region as scratch: the cache keeps it where it is
        s.stamp[old] = tick;
        continue;
      }
      empty(old);
    }
    map[e] = first + e;
    s.owner[first + e] = layer * E + e;
    s.stamp[first + e] = tick;
  }
  int64_t* st = s.stats + static_cast<int64_t>(layer) * kCacheStatCount;
  st[kCacheHits] += kept;
  st[kCacheMisses] += n - kept - on_cpu;
  st[kCacheBytes] += static_cast<int64_t>(n - kept - on_cpu) * record_bytes;
  *s.tick += 2 * static_cast<int64_t>(s.n_layers);  // 5. the victim order's window passes
}

}  // namespace ft
