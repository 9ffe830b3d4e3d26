// Expert-cache admission (moe/cache_admission.h, ExpertCache, HostExpertSlots): randomised routes
// against an independent list-based model of the replacement order, integrity after every admission (bijective map,
// stamps in range and monotone, slots used by the admission never evicted), the smallest legal
// cache (2 x experts per layer), fetch caps, and the host gather's slot contents.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <list>
#include <map>
#include <set>

#include "moe/expert_cache.h"
#include "moe/expert_slots.h"
#include "moe_test_util.h"
#include "util/error.h"

namespace ft::testing {
namespace {

/** The replacement order kept as a list of slots, least recent first: after an admission, the slots
 *  it used move to the back in slot order (equal recency, ties to the lower slot), and each slot
 *  remembers the admission that last used it. A victim is the front-most slot that is empty or was
 *  last used 2 * n_layers admissions ago or earlier; when there is none, the lowest slot of the
 *  latest admission that used any candidate (the most recent). Written without stamps. */
class ReplacementModel {
 public:
  ReplacementModel(int32_t n_expert, int32_t n_slots, int32_t n_layers)
      : E_(n_expert), window_(2 * n_layers), owner_(static_cast<size_t>(n_slots), -1),
        last_(static_cast<size_t>(n_slots), 0) {
    for (int32_t s = 0; s < n_slots; ++s) order_.push_back(s);
  }

  struct Result {
    std::vector<int32_t> slot_ids, cpu_ids;
    std::vector<CacheMiss> misses;
    int64_t hits = 0, cpu = 0;
  };

  Result admit(int32_t layer, const std::vector<int32_t>& ids, int32_t cap) {
    ++n_;
    Result r;
    std::vector<int32_t> distinct;
    for (int32_t e : ids)
      if (e >= 0 && e < E_ && std::find(distinct.begin(), distinct.end(), e) == distinct.end()) distinct.push_back(e);
    std::set<int32_t> used, cpu;
    for (int32_t e : distinct)
      if (auto it = map_.find(key(layer, e)); it != map_.end()) used.insert(it->second), ++r.hits;
    for (int32_t e : distinct) {
      if (map_.count(key(layer, e))) continue;
      if (cap >= 0 && static_cast<int32_t>(r.misses.size()) >= cap) {
        cpu.insert(e);
        continue;
      }
      auto v = std::find_if(order_.begin(), order_.end(), [&](int32_t s) {
        return !used.count(s) && (last_[static_cast<size_t>(s)] == 0 || last_[static_cast<size_t>(s)] <= n_ - window_);
      });
      int32_t slot = v == order_.end() ? -1 : *v;
      for (auto it = order_.rbegin(); slot < 0 && it != order_.rend(); ++it) {  // the latest admission's lowest slot
        if (used.count(*it)) continue;
        int32_t lowest = *it;
        for (int32_t s : order_)
          if (!used.count(s) && last_[static_cast<size_t>(s)] == last_[static_cast<size_t>(*it)]) lowest = std::min(lowest, s);
        slot = lowest;
      }
      EXPECT_GE(slot, 0);
      if (owner_[slot] >= 0) map_.erase(owner_[slot]);
      owner_[slot] = key(layer, e);
      map_[key(layer, e)] = slot;
      used.insert(slot);
      r.misses.push_back(CacheMiss{layer, e, slot});
    }
    for (int32_t s : used) order_.remove(s);
    for (int32_t s : used) order_.push_back(s), last_[static_cast<size_t>(s)] = n_;  // std::set: slot order
    for (int32_t e : ids) {
      const bool valid = e >= 0 && e < E_;
      r.slot_ids.push_back(valid && map_.count(key(layer, e)) && !cpu.count(e) ? map_[key(layer, e)] : -1);
      r.cpu_ids.push_back(valid && cpu.count(e) ? e : -1);
    }
    r.cpu = static_cast<int64_t>(cpu.size());
    return r;
  }

 private:
  int32_t key(int32_t layer, int32_t e) const { return layer * E_ + e; }
  int32_t E_;
  int64_t window_, n_ = 0;  // n_: admissions so far
  std::list<int32_t> order_;
  std::map<int32_t, int32_t> map_;
  std::vector<int32_t> owner_;
  std::vector<int64_t> last_;  // admission that last used each slot, 0 never
};

struct Scenario {
  int32_t n_layers, E, k, n_slots, max_T, cap;
  double skew;
};

void run_scenario(const Scenario& sc, uint32_t seed, int steps) {
  SCOPED_TRACE(::testing::Message() << "layers " << sc.n_layers << " E " << sc.E << " k " << sc.k << " slots "
                                    << sc.n_slots << " cap " << sc.cap << " skew " << sc.skew << " seed " << seed);
  std::mt19937 rng(seed);
  ExpertCache cache(sc.n_layers, sc.E, sc.n_slots, sc.max_T * sc.k);
  ReplacementModel model(sc.E, sc.n_slots, sc.n_layers);
  std::vector<CacheLayerStats> want_stats(static_cast<size_t>(sc.n_layers));
  std::vector<int64_t> prev_stamp(static_cast<size_t>(sc.n_slots), 0);
  for (int step = 0; step < steps; ++step) {
    for (int32_t layer = 0; layer < sc.n_layers; ++layer) {
      const int64_t T = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(sc.max_T));
      std::vector<int32_t> ids = random_routes(T, sc.k, sc.E, sc.skew, rng);
      if (rng() % 4 == 0) ids[rng() % ids.size()] = -1;  // a pair another executor owns
      std::vector<int32_t> before(static_cast<size_t>(sc.E));
      for (int32_t e = 0; e < sc.E; ++e) before[static_cast<size_t>(e)] = cache.slot_of(layer, e);
      std::vector<int32_t> slots(ids.size(), -7), cpu(ids.size(), -7);
      const int32_t n = cache.admit(layer, ids.data(), static_cast<int32_t>(ids.size()), sc.cap, 100, slots.data(),
                                    cpu.data());
      const ReplacementModel::Result want = model.admit(layer, ids, sc.cap);
      ASSERT_EQ(slots, want.slot_ids) << "step " << step << " layer " << layer;
      ASSERT_EQ(cpu, want.cpu_ids);
      ASSERT_EQ(n, static_cast<int32_t>(want.misses.size()));
      for (int32_t i = 0; i < n; ++i) {
        EXPECT_EQ(cache.misses()[i].layer, want.misses[i].layer);
        EXPECT_EQ(cache.misses()[i].expert, want.misses[i].expert);
        EXPECT_EQ(cache.misses()[i].slot, want.misses[i].slot);
      }
      CacheLayerStats& ws = want_stats[static_cast<size_t>(layer)];
      ws.hits += want.hits, ws.misses += n, ws.cpu += want.cpu, ws.bytes += 100 * n;
      cache.check_integrity();
      // Everything this admission routes to a slot is there; hits kept their slot.
      for (size_t i = 0; i < ids.size(); ++i) {
        if (slots[i] < 0) continue;
        EXPECT_EQ(cache.owner(slots[i]), layer * sc.E + ids[i]);
        EXPECT_EQ(cache.stamp(slots[i]), cache.tick());
        if (before[static_cast<size_t>(ids[i])] >= 0) {
          EXPECT_EQ(slots[i], before[static_cast<size_t>(ids[i])]);
        }
      }
      for (int32_t s = 0; s < sc.n_slots; ++s) {
        EXPECT_GE(cache.stamp(s), prev_stamp[static_cast<size_t>(s)]);
        prev_stamp[static_cast<size_t>(s)] = cache.stamp(s);
      }
    }
  }
  for (int32_t l = 0; l < sc.n_layers; ++l) {
    const CacheLayerStats got = cache.stats(l), want = want_stats[static_cast<size_t>(l)];
    EXPECT_EQ(got.hits, want.hits) << "layer " << l;
    EXPECT_EQ(got.misses, want.misses);
    EXPECT_EQ(got.cpu, want.cpu);
    EXPECT_EQ(got.bytes, want.bytes);
  }
}

TEST(ExpertCache, MatchesAnIndependentReplacementModel) {
  const Scenario scenarios[] = {
      {4, 16, 2, 32, 1, -1, 0.0},    // smallest legal cache (2E), decode, uniform
      {4, 16, 2, 32, 6, -1, 1.0},    // 2E, small batches, skewed
      {3, 8, 8, 8, 3, -1, 0.0},      // n_slots = E, k = E: every admission needs every expert
      {6, 64, 8, 200, 4, -1, 1.0},   // qwen3_moe_64e-like
      {5, 32, 4, 70, 2, 2, 0.0},     // hybrid: at most 2 fetches per layer
      {5, 32, 4, 96, 5, 0, 0.5},     // cap 0: only hits served from slots
      {2, 8, 2, 16, 1, -1, 0.0},     // every expert fits: misses only while warming up
      {4, 32, 8, 64, 4, -1, 0.0},    // a step's experts outnumber the slots: the most recent go first
  };
  uint32_t seed = 1;
  for (const Scenario& sc : scenarios) run_scenario(sc, seed++, 40);
}

// The planner's split (FetchPolicy, issue 37): f minimises max(copy path, CPU path), ties to more.
TEST(FetchPolicy, PlannedFetchesBalanceTheCopyPathAgainstTheCpu) {
  const int32_t misses[4] = {0, 1, 2, 3};
  int32_t seen[4] = {1 | 4, 1 | 4, 1 | 4, 1 | 4};  // one pair each
  auto planned = [](int32_t cpu, int32_t token, int32_t cap = -1) {
    FetchPolicy p(cap);
    p.cpu_cost = cpu, p.cpu_token_cost = token;
    return p;
  };
  EXPECT_EQ(planned_fetches(planned(kFetchCostUnit, 0), misses, 4, seen), 2);      // equal costs: half
  EXPECT_EQ(planned_fetches(planned(4 * kFetchCostUnit, 0), misses, 4, seen), 4);  // dear CPU: all (tie at 3)
  EXPECT_EQ(planned_fetches(planned(kFetchCostUnit / 4, 0), misses, 4, seen), 1);  // cheap CPU: one
  EXPECT_EQ(planned_fetches(planned(4 * kFetchCostUnit, 0, 2), misses, 4, seen), 2);  // the cap bounds it
  EXPECT_EQ(planned_fetches(planned(kFetchCostUnit, 0), misses, 0, seen), 0);
  EXPECT_EQ(planned_fetches(FetchPolicy(3), misses, 4, seen), 3);  // a plain cap
  EXPECT_EQ(planned_fetches(FetchPolicy(-1), misses, 4, seen), 4);
  seen[2] = 1 | (9 << 2);  // nine pairs: the CPU's share of it costs 1 + 8 * 1/2 fetches
  EXPECT_EQ(planned_rank(misses, 4, 2, seen), 0);
  EXPECT_EQ(planned_rank(misses, 4, 0, seen), 1);
  EXPECT_EQ(planned_rank(misses, 4, 3, seen), 3);
  const int32_t heavy_first[4] = {2, 0, 1, 3};
  // CPU path with none fetched: 5 + 3 = 8 fetches; fetching the heavy one leaves 3, then 2 against 2
  EXPECT_EQ(planned_fetches(planned(kFetchCostUnit, kFetchCostUnit / 2), heavy_first, 4, seen), 2);
}

TEST(ExpertCache, PlannedAdmissionFetchesTheHeaviestMissesFirst) {
  const int32_t E = 8, k = 2, T = 4;
  // Expert 5 is routed by every token, 1..4 by one each: first appearance 1, 5, 2, 3, 4.
  const std::vector<int32_t> ids = {1, 5, 2, 5, 3, 5, 4, 5};
  std::vector<int32_t> sid(ids.size()), cid(ids.size());
  FetchPolicy planned;
  planned.cpu_cost = kFetchCostUnit, planned.cpu_token_cost = kFetchCostUnit;
  // CPU costs 5: 4, the others 1 each (8 in all); fetching 5 leaves 4, then 1 leaves 3 against 2
  // fetches, then 2 leaves 2 against 3: f = 3 (max 3 at both 2 and 3 fetches; ties fetch more).
  ExpertCache cache(1, E, 2 * E, T * k);
  EXPECT_EQ(cache.admit(0, ids.data(), T * k, planned, 100, sid.data(), cid.data()), 3);
  std::vector<int32_t> fetched;
  for (int32_t i = 0; i < cache.n_misses(); ++i) fetched.push_back(cache.misses()[i].expert);
  EXPECT_EQ(fetched, (std::vector<int32_t>{5, 1, 2}));
  EXPECT_EQ(cid, (std::vector<int32_t>{-1, -1, -1, -1, 3, -1, 4, -1}));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(sid[i] >= 0, cid[i] < 0) << i;
  EXPECT_EQ(cache.stats(0).cpu, 2);
  EXPECT_EQ(cache.stats(0).misses, 3);
  // A plain cap of 3 takes them in first-appearance order instead.
  ExpertCache capped(1, E, 2 * E, T * k);
  capped.admit(0, ids.data(), T * k, FetchPolicy(3), 100, sid.data(), cid.data());
  fetched.clear();
  for (int32_t i = 0; i < capped.n_misses(); ++i) fetched.push_back(capped.misses()[i].expert);
  EXPECT_EQ(fetched, (std::vector<int32_t>{1, 5, 2}));
  // Hits do not count: with 5, 1 and 2 cached the misses 3 and 4 split one and one; then, with 3
  // cached too, the misses 6, 4, 7, 0 split two and two.
  EXPECT_EQ(cache.admit(0, ids.data(), T * k, planned, 100, sid.data(), cid.data()), 1);
  EXPECT_EQ(cache.misses()[0].expert, 3);
  const std::vector<int32_t> ids2 = {1, 5, 3, 6, 4, 7, 0, 5};
  EXPECT_EQ(cache.admit(0, ids2.data(), T * k, planned, 100, sid.data(), cid.data()), 2);
  cache.check_integrity();
}

TEST(ExpertCache, SmallestLegalCacheHoldsTwoFullLayers) {
  const int32_t E = 16, L = 3;
  ExpertCache cache(L, E, 2 * E, E);
  std::vector<int32_t> all(E), slots(E);
  for (int32_t e = 0; e < E; ++e) all[static_cast<size_t>(e)] = E - 1 - e;  // prefill-like: every expert
  EXPECT_EQ(cache.admit(0, all.data(), E, -1, 1, slots.data(), nullptr), E);
  EXPECT_EQ(cache.admit(1, all.data(), E, -1, 1, slots.data(), nullptr), E);
  EXPECT_EQ(cache.admit(0, all.data(), E, -1, 1, slots.data(), nullptr), 0);  // both layers resident
  // Every slot was used within the last 2 x 3 admissions: the most recent (layer 0's) go first.
  EXPECT_EQ(cache.admit(2, all.data(), E, -1, 1, slots.data(), nullptr), E);
  for (int32_t e = 0; e < E; ++e) {
    EXPECT_EQ(cache.slot_of(0, e), -1);
    EXPECT_GE(cache.slot_of(1, e), 0);
    EXPECT_GE(cache.slot_of(2, e), 0);
  }
  cache.check_integrity();
  EXPECT_THROW(ExpertCache(L, E, E - 1, 8), Error);  // cannot hold one layer
  EXPECT_THROW(cache.admit(3, all.data(), E, -1, 1, slots.data(), nullptr), Error);
  EXPECT_THROW(cache.admit(0, all.data(), E + 1, -1, 1, slots.data(), nullptr), Error);
}

TEST(ExpertCache, VictimsAreLeastRecentlyUsedNeverInUse) {
  // A hand-checked trace: 2 layers of 2 experts, 2 slots.
  ExpertCache cache(2, 2, 2, 4);
  int32_t slots[2], cpu[2];
  const int32_t a[2] = {0, 1};
  EXPECT_EQ(cache.admit(0, a, 2, -1, 1, slots, cpu), 2);  // slots 0, 1 (empty, lowest first)
  EXPECT_EQ(slots[0], 0);
  EXPECT_EQ(slots[1], 1);
  const int32_t b[2] = {1, -1};
  EXPECT_EQ(cache.admit(1, b, 2, -1, 1, slots, cpu), 1);  // (1,1) evicts slot 0 (ties to lower slot)
  EXPECT_EQ(slots[0], 0);
  EXPECT_EQ(slots[1], -1);
  EXPECT_EQ(cpu[1], -1);
  EXPECT_EQ(cache.slot_of(0, 0), -1);
  const int32_t c[2] = {0, 1};
  EXPECT_EQ(cache.admit(0, c, 2, -1, 1, slots, cpu), 1);  // (0,1) hit in slot 1; (0,0) must evict slot 0
  EXPECT_EQ(slots[0], 0);
  EXPECT_EQ(slots[1], 1);
  EXPECT_EQ(cache.admit(0, c, 2, 0, 1, slots, cpu), 0);   // all hits, cap irrelevant
  const int32_t d[2] = {0, 1};
  EXPECT_EQ(cache.admit(1, d, 2, 1, 1, slots, cpu), 1);   // cap 1: (1,0) fetched, (1,1) to the CPU
  EXPECT_EQ(cpu[0], -1);
  EXPECT_EQ(cpu[1], 1);
  EXPECT_EQ(slots[1], -1);
  const CacheLayerStats s1 = cache.stats(1);
  EXPECT_EQ(s1.misses, 2);
  EXPECT_EQ(s1.cpu, 1);
  EXPECT_EQ(s1.hits, 0);
  EXPECT_EQ(cache.stats(0).hits, 3);
  cache.check_integrity();
}

// Three layers of 4 experts cycled through 8 slots, every expert of each: plain LRU would evict the
// layer needed next and miss all 12 experts of every step; evicting the most recent misses every
// other layer, which is Belady's optimum for this cycle (each eviction takes the layer used last).
TEST(ExpertCache, AStepLargerThanTheCacheEvictsTheMostRecentFirst) {
  const int32_t E = 4, L = 3;
  ExpertCache cache(L, E, 2 * E, E);
  const int32_t all[E] = {0, 1, 2, 3};
  int32_t slots[E];
  EXPECT_EQ(cache.admit(0, all, E, -1, 1, slots, nullptr), E);  // slots 0-3
  EXPECT_EQ(slots[0], 0);
  EXPECT_EQ(cache.admit(1, all, E, -1, 1, slots, nullptr), E);  // slots 4-7
  EXPECT_EQ(slots[0], 4);
  EXPECT_EQ(cache.admit(2, all, E, -1, 1, slots, nullptr), E);  // evicts layer 1 (the most recent), not 0
  EXPECT_EQ(slots[0], 4);
  EXPECT_EQ(cache.slot_of(1, 0), -1);
  int64_t misses = 0;
  for (int step = 0; step < 4; ++step)
    for (int32_t l = 0; l < L; ++l) misses += cache.admit(l, all, E, -1, 1, slots, nullptr);
  EXPECT_EQ(misses, 6 * E);  // 6 of the 12 layer admissions
  EXPECT_EQ(cache.stats(0).hits + cache.stats(1).hits + cache.stats(2).hits, 6 * E);
  cache.check_integrity();
  // Slots last used 2 x 3 admissions ago or earlier go first, least recent first, before any newer one.
  ExpertCache old(L, E, 6, E);
  const int32_t e0[1] = {0}, e1[1] = {1};
  EXPECT_EQ(old.admit(0, e0, 1, -1, 1, slots, nullptr), 1);  // tick 1: slot 0
  EXPECT_EQ(old.admit(0, e1, 1, -1, 1, slots, nullptr), 1);  // tick 2: slot 1
  EXPECT_EQ(old.admit(1, all, E, -1, 1, slots, nullptr), E);  // tick 3: slots 2-5
  for (int i = 0; i < 5; ++i) EXPECT_EQ(old.admit(1, all, E, -1, 1, slots, nullptr), 0);  // ticks 4-8
  EXPECT_EQ(old.admit(2, e0, 1, -1, 1, slots, nullptr), 1);  // tick 9: slots 0 and 1 are old; 0 is older
  EXPECT_EQ(slots[0], 0);
  EXPECT_EQ(old.admit(2, e1, 1, -1, 1, slots, nullptr), 1);  // tick 10: slot 1 (old) before 2-5 (recent)
  EXPECT_EQ(slots[0], 1);
  EXPECT_EQ(old.slot_of(0, 0), -1);
  EXPECT_EQ(old.slot_of(1, 3), 5);
  old.check_integrity();
}

TEST(ExpertCache, ClaimRegionMapsAStreamedLayer) {
  const int32_t E = 4;
  ExpertCache cache(3, E, 3 * E, 8);
  const int32_t all[4] = {0, 1, 2, 3}, two[2] = {2, 3};
  int32_t slots[4];
  cache.admit(0, all, 4, -1, 10, slots, nullptr);  // layer 0 -> slots 0..3
  cache.admit(1, two, 2, -1, 10, slots, nullptr);  // (1,2), (1,3) -> slots 4, 5
  const int64_t tick = cache.tick();
  cache.claim_region(1, 0, E, 10);  // layer 1 streamed into region 0 (slots 0..3)
  cache.check_integrity();
  EXPECT_EQ(cache.tick(), tick + 1 + 2 * 3);  // the claim's tick, then the window passes
  for (int32_t e = 0; e < E; ++e) {
    EXPECT_EQ(cache.slot_of(0, e), -1);  // the region's previous owners left
    EXPECT_EQ(cache.slot_of(1, e), e);
    EXPECT_EQ(cache.stamp(e), tick + 1);
  }
  EXPECT_EQ(cache.owner(4), -1);  // (1,2) and (1,3) moved into the region; their old slots are empty
  EXPECT_EQ(cache.owner(5), -1);
  EXPECT_EQ(cache.stamp(4), 0);
  EXPECT_EQ(cache.stats(1).misses, 2 + E);  // admitted two, streamed four
  EXPECT_EQ(cache.stats(1).bytes, (2 + E) * 10);
  EXPECT_EQ(cache.admit(1, all, 4, -1, 10, slots, nullptr), 0);  // the streamed layer is cached
  EXPECT_EQ(cache.admit(2, all, 1, -1, 10, slots, nullptr), 1);   // an emptied slot is the first victim
  EXPECT_EQ(slots[0], 4);
  cache.claim_region(2, 2 * E, 3, 10);  // a layer of fewer experts than the map width
  cache.check_integrity();
  EXPECT_EQ(cache.owner(3 * E - 1), -1);
  EXPECT_EQ(cache.slot_of(2, 0), 2 * E);
  EXPECT_THROW(cache.claim_region(3, 0, E, 1), Error);
  EXPECT_THROW(cache.claim_region(0, 2 * E + 1, E, 1), Error);
  EXPECT_THROW(cache.claim_region(0, 0, E + 1, 1), Error);
}

TEST(ExpertCache, ClaimRegionNamesTheSlotsOfExpertsCachedElsewhere) {
  const int32_t E = 4;
  ExpertCache cache(2, E, 3 * E, 8);
  const int32_t all[4] = {0, 1, 2, 3}, some[3] = {1, 3, 0};
  int32_t slots[4];
  cache.admit(0, all, 4, -1, 10, slots, nullptr);   // layer 0 -> slots 0..3
  cache.admit(1, some, 3, -1, 10, slots, nullptr);  // (1,1), (1,3), (1,0) -> slots 4, 5, 6
  int32_t src[4] = {9, 9, 9, 9};
  cache.claim_region(1, 2 * E, E, 10, src);  // layer 1 into region 2 (slots 8..11)
  cache.check_integrity();
  EXPECT_EQ(src[0], 6);  // read from its slot, device to device, and still cached there
  EXPECT_EQ(src[1], 4);
  EXPECT_EQ(src[2], -1);  // from the bank: cached in the region from now on
  EXPECT_EQ(src[3], 5);
  EXPECT_EQ(cache.slot_of(1, 0), 6);
  EXPECT_EQ(cache.slot_of(1, 1), 4);
  EXPECT_EQ(cache.slot_of(1, 2), 2 * E + 2);
  EXPECT_EQ(cache.slot_of(1, 3), 5);
  EXPECT_EQ(cache.owner(2 * E), -1);  // the region's copies of (1,0), (1,1), (1,3): scratch, empty in the map
  EXPECT_EQ(cache.stamp(4), cache.tick() - 2 * 2);  // used by the claim (its tick, then the window passed)
  for (int32_t e = 0; e < E; ++e) EXPECT_EQ(cache.slot_of(0, e), e);  // the rest of the cache is untouched
  EXPECT_EQ(cache.stats(1).hits, 3);
  EXPECT_EQ(cache.stats(1).misses, 3 + 1);  // admitted three, streamed one from the bank
  EXPECT_EQ(cache.stats(1).bytes, (3 + 1) * 10);
  // Layer 0's experts sit in region 0 at their own places (slot e): they stay, nothing is copied.
  cache.claim_region(0, 0, E, 10, src);
  cache.check_integrity();
  for (int32_t e = 0; e < E; ++e) EXPECT_EQ(src[e], e);
  EXPECT_EQ(cache.stats(0).hits, E);
  EXPECT_EQ(cache.stats(0).misses, E);  // the first admission's
  // Layer 1 into region 1 (slots 4..7): the region is emptied first, so (1,1) and (1,3), which it
  // held at other places, come from the bank; (1,0) in slot 6 too; (1,2) is copied from slot 10.
  cache.claim_region(1, E, E, 10, src);
  cache.check_integrity();
  EXPECT_EQ(src[0], -1);
  EXPECT_EQ(src[1], -1);
  EXPECT_EQ(src[2], 2 * E + 2);
  EXPECT_EQ(src[3], -1);
  EXPECT_EQ(cache.slot_of(1, 1), E + 1);
  EXPECT_EQ(cache.slot_of(1, 2), 2 * E + 2);
}

// Issue 37's prefill split: a share of the uncached experts is left to the CPU (not copied, not
// cached); experts cached anywhere never are, and the stats count only the stream's copies.
TEST(ExpertCache, ClaimRegionLeavesACpuShareOfTheUncachedExperts) {
  const int32_t E = 64;
  ExpertCache cache(2, E, 4 * E, 16);
  std::vector<int32_t> some(16), slots(16);
  for (int32_t i = 0; i < 16; ++i) some[static_cast<size_t>(i)] = 4 * i;  // (1, 0), (1, 4), ... cached
  cache.admit(1, some.data(), 16, -1, 10, slots.data(), nullptr);
  std::vector<int32_t> src(E, 9);
  cache.claim_region(1, 2 * E, E, 10, src.data(), 2 * E, 32768);  // half of the 48 uncached ones
  cache.check_integrity();
  int32_t on_cpu = 0;
  for (int32_t e = 0; e < E; ++e) {
    const int32_t s = src[static_cast<size_t>(e)];
    if (e % 4 == 0) {
      EXPECT_GE(s, 0) << e;  // cached: copied from its slot, never the CPU's
      continue;
    }
    EXPECT_EQ(s == kStreamOnCpu, stream_cpu_pick(1, e) < 32768) << e;
    if (s == kStreamOnCpu) {
      ++on_cpu;
      EXPECT_EQ(cache.slot_of(1, e), -1) << e;  // not cached, its region slot empty
      EXPECT_EQ(cache.owner(2 * E + e), -1) << e;
    } else {
      EXPECT_EQ(s, -1) << e;
      EXPECT_EQ(cache.slot_of(1, e), 2 * E + e) << e;
    }
  }
  EXPECT_GE(on_cpu, 20);  // the golden-ratio picks spread: ~24 of 48
  EXPECT_LE(on_cpu, 28);
  EXPECT_EQ(cache.stats(1).hits, 16);
  EXPECT_EQ(cache.stats(1).misses, 16 + (48 - on_cpu));  // admitted 16, streamed the GPU's share
  EXPECT_EQ(cache.stats(1).bytes, (16 + 48 - on_cpu) * 10);
  // Share 65536: every uncached expert; 0: none. A share needs src_slot and stays in [0, 65536].
  cache.claim_region(0, 0, E, 10, src.data(), 2 * E, 65536);
  for (int32_t e = 0; e < E; ++e) EXPECT_EQ(src[static_cast<size_t>(e)], kStreamOnCpu) << e;
  EXPECT_EQ(cache.stats(0).misses, 0);
  cache.claim_region(0, 0, E, 10, src.data(), 2 * E, 0);
  for (int32_t e = 0; e < E; ++e) EXPECT_EQ(src[static_cast<size_t>(e)], -1) << e;
  EXPECT_THROW(cache.claim_region(0, 0, E, 10, nullptr, 2 * E, 100), Error);
  EXPECT_THROW(cache.claim_region(0, 0, E, 10, src.data(), 2 * E, 65537), Error);
  EXPECT_THROW(cache.claim_region(0, 0, E, 10, src.data(), 2 * E, -1), Error);
}

TEST(ExpertCache, PrefetchSparesThePreviousAdmissionAndCountsApart) {
  ExpertCache cache(2, 2, 3, 4);
  int32_t slots[2], cpu[2] = {7, 7};
  const int32_t both[2] = {0, 1};
  EXPECT_EQ(cache.admit(0, both, 2, -1, 5, slots, nullptr), 2);  // layer 0 -> slots 0, 1 (in use)
  // Predicted routes of layer 1: only slot 2 is free to take; the second prediction is dropped.
  EXPECT_EQ(cache.admit(1, both, 2, -1, 5, slots, cpu, true, 2), 1);
  EXPECT_EQ(slots[0], 2);
  EXPECT_EQ(slots[1], -1);
  EXPECT_EQ(cpu[0], 7);  // a prefetch never hands work to the CPU
  EXPECT_EQ(cpu[1], 7);
  EXPECT_EQ(cache.slot_of(0, 0), 0);
  EXPECT_EQ(cache.slot_of(0, 1), 1);
  CacheLayerStats s1 = cache.stats(1);
  EXPECT_EQ(s1.prefetched, 1);
  EXPECT_EQ(s1.hits + s1.misses + s1.cpu, 0);
  EXPECT_EQ(s1.bytes, 5);
  // The real admission of layer 1 finds the prefetched expert and fetches the other.
  EXPECT_EQ(cache.admit(1, both, 2, -1, 5, slots, nullptr), 1);
  EXPECT_EQ(slots[0], 2);
  EXPECT_EQ(slots[1], 0);
  s1 = cache.stats(1);
  EXPECT_EQ(s1.hits, 1);
  EXPECT_EQ(s1.misses, 1);
  EXPECT_EQ(s1.bytes, 10);
  cache.check_integrity();
}

// The prefetch for the next layer comes just before a layer's own admission, whose victims then
// spare the prefetch's slots (its side gather may still fill them); and a prefetch can be the first
// admission of all, taking empty slots.
TEST(ExpertCache, AdmissionAfterAPrefetchSparesItsSlots) {
  for (bool spare : {false, true}) {
    SCOPED_TRACE(spare ? "spare 1" : "plain LRU");
    ExpertCache cache(2, 4, 4, 4);
    int32_t slots[4], cpu[4];
    const int32_t guess[1] = {0}, first[3] = {0, 1, 2}, all[4] = {0, 1, 2, 3};
    EXPECT_EQ(cache.admit(1, guess, 1, -1, 5, slots, nullptr, true, 2), 1);  // tick 1: an empty slot
    EXPECT_EQ(slots[0], 0);
    EXPECT_EQ(cache.admit(0, first, 3, -1, 5, slots, cpu, false, spare ? 1 : 0), 3);  // slots 1, 2, 3
    EXPECT_EQ(cache.admit(1, guess, 1, -1, 5, slots, nullptr, true, 2), 0);     // (1, 0) still cached
    // Layer 0 hits slots 1-3; its fourth expert's only candidate is slot 0, the prefetch's.
    EXPECT_EQ(cache.admit(0, all, 4, -1, 5, slots, cpu, false, spare ? 1 : 0), spare ? 0 : 1);
    EXPECT_EQ(cache.slot_of(1, 0), spare ? 0 : -1);
    EXPECT_EQ(slots[3], spare ? -1 : 0);
    EXPECT_EQ(cpu[3], spare ? 3 : -1);  // with no victim left, the miss goes to the CPU
    EXPECT_EQ(cache.stats(0).cpu, spare ? 1 : 0);
    cache.check_integrity();
  }
}

// With prefetches ahead of the admissions, the prefetch for layer l + 1 must not take the slots the
// prefetch for layer l just filled (layer l is about to use them): it spares the last two ticks.
TEST(ExpertCache, PrefetchSparesThePreviousPrefetch) {
  ExpertCache cache(3, 1, 2, 1);
  int32_t slot = -1;
  const int32_t e0[1] = {0};
  EXPECT_EQ(cache.admit(1, e0, 1, -1, 5, &slot, nullptr, true, 2), 1);  // P(1), tick 1: slot 0
  EXPECT_EQ(cache.admit(0, e0, 1, -1, 5, &slot, nullptr, false, 1), 1);  // layer 0, tick 2: slot 1
  EXPECT_EQ(cache.admit(2, e0, 1, -1, 5, &slot, nullptr, true, 2), 0);   // P(2), tick 3: nothing free
  EXPECT_EQ(slot, -1);
  EXPECT_EQ(cache.slot_of(1, 0), 0);
  EXPECT_EQ(cache.admit(1, e0, 1, -1, 5, &slot, nullptr, false, 1), 0);  // layer 1 finds its expert
  EXPECT_EQ(slot, 0);
  cache.check_integrity();
}

TEST(ExpertCache, IntegrityCheckCatchesCorruption) {
  ExpertCache cache(2, 4, 8, 4);
  const int32_t ids[2] = {1, 2};
  int32_t slots[2];
  cache.admit(0, ids, 2, -1, 1, slots, nullptr);
  cache.check_integrity();
  CacheStateRefs r = cache.refs();
  std::swap(r.owner[slots[0]], r.owner[slots[1]]);
  EXPECT_THROW(cache.check_integrity(), Error);
  std::swap(r.owner[slots[0]], r.owner[slots[1]]);
  r.stamp[7] = 3;  // an empty slot with a stamp
  EXPECT_THROW(cache.check_integrity(), Error);
  r.stamp[7] = 0;
  r.slot_of[4 + 3] = slots[0];  // two keys on one slot
  EXPECT_THROW(cache.check_integrity(), Error);
}

TEST(HostExpertSlots, GatherCopiesRecordsAndSlotBanksViewThem) {
  SyntheticExperts s;
  s.add_layer(6, 32, 64, DType::BF16, DType::BF16, 1);
  s.add_dense_layer();
  s.add_layer(6, 32, 256, DType::Q4_K, DType::Q8_0, 2);
  auto alloc = make_host_allocator();
  ExpertBanks banks(s.banks, *alloc, 2);
  HostExpertSlots slots(banks, 12, 8);
  EXPECT_EQ(slots.n_slots(), 12);
  std::mt19937 rng(3);
  std::vector<int32_t> sid(8), cid(8);
  for (int step = 0; step < 30; ++step) {
    for (int32_t layer : {0, 2}) {
      std::vector<int32_t> ids = random_routes(4, 2, 6, 0.5, rng);
      slots.admit(layer, Tensor(ids.data(), DType::I32, {4, 2}), -1, Tensor(sid.data(), DType::I32, {4, 2}),
                  Tensor(cid.data(), DType::I32, {4, 2}));
      const ExpertBank& sb = slots.slot_bank(layer);
      ASSERT_EQ(sb.n_expert(), 12);
      const ExpertLayout& lay = banks.layout(layer);
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_GE(sid[i], 0);
        EXPECT_EQ(cid[i], -1);
        EXPECT_EQ(std::memcmp(slots.slot_data(sid[i]), banks.record(layer, ids[i]), static_cast<size_t>(lay.bytes)), 0);
        EXPECT_EQ(sb.gate[sid[i]].data, slots.slot_data(sid[i]) + lay.gate_offset);
        EXPECT_EQ(sb.down[sid[i]].dtype, lay.down_type);
      }
      slots.cache().check_integrity();
    }
  }
  const std::vector<CacheLayerStats> st = slots.stats();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[1].hits + st[1].misses, 0);
  EXPECT_EQ(st[0].bytes, st[0].misses * banks.layout(0).bytes);
  EXPECT_GT(st[2].hits, 0);
  std::vector<int32_t> ids(10, 0);
  EXPECT_THROW(slots.admit(1, Tensor(ids.data(), DType::I32, {4, 2}), -1, Tensor(sid.data(), DType::I32, {4, 2}),
                           Tensor()),
               Error);  // dense layer
  EXPECT_THROW(slots.admit(0, Tensor(ids.data(), DType::I32, {5, 2}), -1, Tensor(sid.data(), DType::I32, {5, 2}),
                           Tensor()),
               Error);  // more pairs than planned
  EXPECT_THROW(HostExpertSlots(banks, 5, 8), Error);  // fewer slots than one layer's experts
}

// The ledger's spare counts: at depth 1 the fixed rule it replaced (2 for a prefetch, 1 for the
// admission right after it); at depth 2 (the first layer predicting the next two) 4 and 3; a
// prefetch spares at least 2; a prefetch is due once its layer is admitted, and a forgotten one
// after kMaxAge admissions.
TEST(PrefetchLedger, SpareCountsFollowThePrefetchesInFlight) {
  PrefetchLedger d1;
  EXPECT_EQ(d1.prefetch_spare(), 2);  // P(1): nothing in flight, the minimum
  d1.add_prefetch(1, 0);
  EXPECT_EQ(d1.admit(0), 1);  // spares P(1)
  EXPECT_TRUE(d1.take_due().empty());
  for (int32_t l = 1; l < 4; ++l) {
    EXPECT_EQ(d1.prefetch_spare(), 2) << l;  // P(l + 1) spares P(l), made two admissions back
    d1.add_prefetch(l + 1, l % 2);
    EXPECT_EQ(d1.admit(l), 1) << l;
    const PrefetchLedger::Entries due = d1.take_due();
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0].layer, l);
    EXPECT_EQ(d1.in_flight(), 1);
  }
  EXPECT_EQ(d1.admit(4), 0);  // the last layer: nothing later in flight
  EXPECT_EQ(d1.take_due().size(), 1u);

  PrefetchLedger d2;
  EXPECT_EQ(d2.prefetch_spare(), 2);  // P(1)
  d2.add_prefetch(1, 0);
  EXPECT_EQ(d2.prefetch_spare(), 2);  // P(2) spares P(1) (and the minimum)
  d2.add_prefetch(2, 1);
  EXPECT_EQ(d2.admit(0), 2);
  EXPECT_TRUE(d2.take_due().empty());
  EXPECT_EQ(d2.prefetch_spare(), 3);  // P(3): back to P(1)
  d2.add_prefetch(3, 2);
  EXPECT_EQ(d2.in_flight(), 3);
  EXPECT_TRUE(d2.uses(0) && d2.uses(1) && d2.uses(2));
  EXPECT_EQ(d2.admit(1), 3);  // spares P(2) and P(3), not its own P(1)
  PrefetchLedger::Entries due = d2.take_due();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].tag, 0);
  EXPECT_FALSE(d2.uses(0));
  EXPECT_EQ(d2.prefetch_spare(), 4);  // P(4): back to P(2)
  d2.add_prefetch(4, 0);
  EXPECT_EQ(d2.admit(2), 3);
  due = d2.take_due();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].layer, 2);
  EXPECT_EQ(d2.admit(3), 2);  // the next-to-last layer makes no prefetch: P(4) is still spared
  EXPECT_EQ(d2.admit(4), 0);
  EXPECT_EQ(d2.take_due().size(), 2u);
  EXPECT_EQ(d2.in_flight(), 0);

  // Depths 3 and 4: the first layer predicts the next d; then each layer's admission spares the
  // admissions back to the oldest prefetch for a later layer: d + l at layer l (the first layer's d
  // came in a row), at most 2d - 1 (5 and 7), and d + 1 prefetches are in flight at most.
  for (int d : {3, 4}) {
    PrefetchLedger led;
    for (int32_t t = 1; t <= d; ++t) led.add_prefetch(t, t - 1);
    EXPECT_EQ(led.admit(0), d);
    EXPECT_TRUE(led.take_due().empty());
    for (int32_t l = 1; l < 8; ++l) {
      led.add_prefetch(l + d, (l + d - 1) % PrefetchLedger::kMaxInFlight);
      EXPECT_EQ(led.in_flight(), d + 1) << d << " " << l;
      EXPECT_EQ(led.admit(l), std::min(d + l, 2 * d - 1)) << d << " " << l;
      const PrefetchLedger::Entries due = led.take_due();  // only the admitted layer's, none by age
      ASSERT_EQ(due.size(), 1u) << d << " " << l;
      EXPECT_EQ(due[0].layer, l);
    }
  }

  PrefetchLedger stale;  // a prefetch whose layer never came (a step that ended early)
  stale.add_prefetch(7, 0);
  for (int64_t i = 0; i < PrefetchLedger::kMaxAge - 1; ++i) {
    stale.admit(0);
    EXPECT_TRUE(stale.take_due().empty()) << i;
  }
  stale.admit(0);
  EXPECT_EQ(stale.take_due().size(), 1u);
  stale.add_prefetch(1, 2);
  EXPECT_EQ(stale.take_oldest().tag, 2);
  EXPECT_THROW(stale.take_oldest(), Error);
}

}  // namespace
}  // namespace ft::testing
