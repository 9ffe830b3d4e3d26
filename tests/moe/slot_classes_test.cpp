// Expert-cache slot classes (mixed-type files, issue 36): layers grouped by record size, slots split
// between the classes, the cache sized by the classes' bytes, and an offload / hybrid / streamed
// runtime over one pool per class that computes fused's function and keeps each class's slots at
// its own size.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "moe/classed_expert_slots.h"
#include "moe/offloaded_experts.h"
#include "moe/slot_classes.h"
#include "model_run.h"
#include "moe_test_util.h"
#include "util/error.h"

namespace ft::testing {
namespace {

SlotLayerShape shape(int64_t layer, int64_t bytes, int32_t E, std::vector<std::pair<int, int64_t>> bias = {}) {
  SlotLayerShape s;
  s.layer = layer, s.record_bytes = bytes, s.n_expert = E, s.bias_rows = std::move(bias);
  return s;
}

TEST(SlotClasses, GroupsByRecordSizeLargestFirst) {
  // 1000 and 950 bytes are within 1/8: one class; 500 its own.
  const std::vector<SlotLayerShape> layers = {shape(0, 500, 4), shape(1, 1000, 4), shape(2, 950, 4),
                                              shape(3, 500, 4), shape(5, 1000, 4)};
  const std::vector<SlotClass> c = slot_classes(layers);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].record_bytes, 1000);
  EXPECT_EQ(c[0].layers, (std::vector<int64_t>{1, 2, 5}));
  EXPECT_EQ(c[0].total_experts, 12);
  EXPECT_EQ(c[0].min_slots(), 8);
  EXPECT_EQ(c[0].layer_list(), "1-2, 5");
  EXPECT_EQ(c[1].record_bytes, 500);
  EXPECT_EQ(c[1].layers, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(c[1].layer_list(), "0, 3");
  EXPECT_EQ(c[1].slot_bytes(), 500);
}

TEST(SlotClasses, OneLayerClassesJoinANeighbour) {
  // A single smaller layer cannot hold two staging regions: it joins the larger class.
  std::vector<SlotClass> c = slot_classes({shape(0, 1000, 4), shape(1, 1000, 4), shape(2, 300, 4)});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].record_bytes, 1000);
  EXPECT_EQ(c[0].total_experts, 12);
  // The largest alone takes the next smaller one; the smallest keeps its own class.
  c = slot_classes({shape(0, 4000, 4), shape(1, 1000, 4), shape(2, 1000, 4), shape(3, 200, 4), shape(4, 200, 4)});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].layers, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(c[0].record_bytes, 4000);
  EXPECT_EQ(c[1].layers, (std::vector<int64_t>{3, 4}));
  // Every layer alone and of another size: one class.
  EXPECT_EQ(slot_classes({shape(0, 4000, 4)}).size(), 1u);
  EXPECT_TRUE(slot_classes({}).empty());
  EXPECT_THROW(slot_classes({shape(0, 0, 4)}), Error);
}

TEST(SlotClasses, AtMostFourMergingTheLeastWaste) {
  // Six sizes of two layers each, halving: the merges that waste least go first (2000 into 4000,
  // then of two equal wastes the larger pair, 8000 into 16000).
  std::vector<SlotLayerShape> layers;
  int64_t bytes = 64000;
  for (int64_t i = 0; i < 6; ++i, bytes /= 2) {
    layers.push_back(shape(2 * i, bytes, 8));
    layers.push_back(shape(2 * i + 1, bytes, 8));
  }
  const std::vector<SlotClass> c = slot_classes(layers);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].record_bytes, 64000);
  EXPECT_EQ(c[1].record_bytes, 32000);
  EXPECT_EQ(c[2].record_bytes, 16000);
  EXPECT_EQ(c[2].layers, (std::vector<int64_t>{4, 5, 6, 7}));  // 16000 and 8000: 8000 x 16 wasted
  EXPECT_EQ(c[3].record_bytes, 4000);  // 4000 and 2000 first (2000 x 16 wasted)
  EXPECT_EQ(c[3].layers, (std::vector<int64_t>{8, 9, 10, 11}));
  EXPECT_EQ(c[3].total_experts, 32);
}

TEST(SlotClasses, BiasRowsCountOncePerClass) {
  // gpt-oss-like: gate/up rows of width 32 and down rows of 64 in both layers: 32 + 32 + 64 floats.
  const std::vector<std::pair<int, int64_t>> rows = {{0, 32}, {1, 32}, {2, 64}};
  const std::vector<SlotClass> c = slot_classes({shape(0, 1024, 4, rows), shape(1, 1024, 4, rows)});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].bias_bytes, (32 + 32 + 64) * 4);
  EXPECT_EQ(c[0].slot_bytes(), 1024 + 512);
}

TEST(SlotClasses, SplitIsProportionalWithinBounds) {
  std::vector<SlotClass> c = slot_classes({shape(0, 1000, 8), shape(1, 1000, 8), shape(2, 1000, 8),
                                           shape(3, 100, 8), shape(4, 100, 8), shape(5, 100, 8)});
  ASSERT_EQ(c.size(), 2u);  // 24 experts each, at least 16 slots each
  EXPECT_EQ(split_slots(c, 32), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(split_slots(c, 41), (std::vector<int64_t>{21, 20}));  // ties: the first
  EXPECT_EQ(split_slots(c, 48), (std::vector<int64_t>{24, 24}));
  EXPECT_EQ(slot_pool_bytes(c, {21, 20}), 21 * 1000 + 20 * 100);
  EXPECT_THROW(split_slots(c, 31), Error);
  EXPECT_THROW(split_slots(c, 49), Error);
  // Unequal classes: 8 experts vs 40; the small class keeps its minimum.
  c = slot_classes({shape(0, 1000, 4), shape(1, 1000, 4), shape(2, 100, 8), shape(3, 100, 8), shape(4, 100, 8),
                    shape(5, 100, 8), shape(6, 100, 8)});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(split_slots(c, 30), (std::vector<int64_t>{8, 22}));
  const std::vector<int64_t> s = split_slots(c, 40);
  EXPECT_EQ(s[0] + s[1], 40);
  EXPECT_EQ(s, (std::vector<int64_t>{8, 32}));  // 40 x 8/48 = 6.7 < its minimum of 8
}

constexpr int64_t MiB = int64_t{1} << 20;

/** Two classes of 4 layers x 128 experts: layers 0-3 of 9 MiB records, 4-7 of 3 MiB. */
GpuMemoryBudget two_class_budget(int64_t slot_room) {
  GpuMemoryBudget b;
  b.gpu_memory_limit = 100 * MiB + slot_room;
  b.resident_bytes = 100 * MiB;
  b.kv_bytes_per_token = 0;
  b.slot_bytes = 9 * MiB;
  b.experts_per_layer = 128;
  b.total_experts = 8 * 128;
  b.expert_bytes = 4 * 128 * 9 * MiB + 4 * 128 * 3 * MiB;
  std::vector<SlotLayerShape> layers;
  for (int64_t l = 0; l < 8; ++l) layers.push_back(shape(l, l < 4 ? 9 * MiB : 3 * MiB, 128));
  b.slot_classes = slot_classes(layers);
  return b;
}

TEST(SlotClasses, CacheSizedByEachClassesBytes) {
  const CacheSize all = plan_cache_size(two_class_budget(6144 * MiB), {});  // 512 x 9 + 512 x 3 MiB
  ASSERT_EQ(all.classes.size(), 2u);
  EXPECT_EQ(all.n_slots, 1024);
  EXPECT_EQ(all.classes[0].n_slots, 512);
  EXPECT_EQ(all.pool_bytes, 6144 * MiB);
  EXPECT_EQ(all.free_bytes, 0);
  // 4 GiB: one pool of 9 MiB slots would hold 455; by class, 682 split 341 + 341 (4092 MiB).
  const CacheSize c = plan_cache_size(two_class_budget(4096 * MiB), {});
  EXPECT_EQ(c.n_slots, 682);
  EXPECT_EQ(c.classes[0].n_slots, 341);
  EXPECT_EQ(c.classes[1].n_slots, 341);
  EXPECT_EQ(c.pool_bytes, 341 * 12 * MiB);
  EXPECT_EQ(c.free_bytes, 4096 * MiB - 341 * 12 * MiB);
  // The most that fit: one more slot does not.
  EXPECT_THROW(plan_cache_size(two_class_budget(4096 * MiB), {CacheSizeMode::kSlots, c.n_slots + 1, 0}), Error);
  EXPECT_EQ(plan_cache_size(two_class_budget(4096 * MiB), {CacheSizeMode::kSlots, c.n_slots, 0}).n_slots, 682);
}

TEST(SlotClasses, CacheRequestsCountAllClasses) {
  const GpuMemoryBudget b = two_class_budget(4096 * MiB);
  try {
    plan_cache_size(b, {CacheSizeMode::kSlots, 300, 0});
    FAIL() << "expected the minimum";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("below the minimum of 512"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in each of the 2 slot sizes"), std::string::npos) << e.what();
  }
  try {
    plan_cache_size(b, {CacheSizeMode::kSlots, 1024, 0});
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("(1024 slots: 512 of 9.0 MiB, 512 of 3.0 MiB) needs 6.00 GiB"),
              std::string::npos) << e.what();
  }
  const CacheSize c = plan_cache_size(two_class_budget(8192 * MiB), {CacheSizeMode::kRate, 0, 0.75});
  EXPECT_EQ(describe_cache_slots(c), "768 slots: 384 of 9.0 MiB (layers 0-3), 384 of 3.0 MiB (layers 4-7)");
}

struct ClassVariant {
  const char* name;
  MoeStrategy strategy;
  int64_t slots;
  int32_t cap;
  const char* cpu_layers;
  int n_classes;
  bool exact;
  int64_t stream_min = 0;
  bool prefetch = false;
  int depth = 1;
};

// Layers 0, 2, 4, 6, 8: BF16 experts (records of 12 KiB); 3, 5, 7, 9, 10: Q8_0 (6.75 KiB); 1 dense.
TEST(SlotClasses, OffloadOverClassesComputesFusedsFunction) {
  SyntheticExperts s;
  const int32_t E = 4, k = 3;
  const int64_t H = 64, F = 32;
  std::vector<int64_t> moe_layers;
  for (int64_t l = 0; l < 11; ++l) {
    if (l == 1) {
      s.add_dense_layer();
      continue;
    }
    const DType t = l % 2 == 0 && l < 10 ? DType::BF16 : DType::Q8_0;
    s.add_layer(E, F, H, t, t, static_cast<uint32_t>(20 + l));
    moe_layers.push_back(l);
  }
  const ClassVariant variants[] = {
      {"offload, smallest cache", MoeStrategy::kOffload, 16, -1, "", 2, true},
      {"offload, streamed steps", MoeStrategy::kOffload, 16, -1, "", 2, true, 4},
      {"hybrid, cap 1", MoeStrategy::kHybrid, 16, 1, "", 2, false},
      {"offload, prefetch depth 2", MoeStrategy::kOffload, 32, -1, "", 2, true, 0, true, 2},
      {"offload, prefetch depth 2 on a cache too small for it", MoeStrategy::kOffload, 16, -1, "", 2, true, 0, true, 2},
      // BF16 layers but 2 on the CPU: layer 2 alone cannot stream in a class of its own, so one class
      // of the larger records over the cache layers (a view of the banks without the CPU's layers).
      {"offload + cpu layers", MoeStrategy::kOffload, 8, -1, "0,4,6,8", 1, true, 4},
  };
  CpuOps ops(1);
  ResidentExperts fused(ops, s.banks);
  for (const ClassVariant& v : variants) {
    SCOPED_TRACE(v.name);
    MoeRuntimeOptions ro;
    ro.max_tokens = 16, ro.n_expert_used = k, ro.cpu_threads = 2, ro.bank_format = BankFormat::kStored;
    if (v.stream_min > 0) ro.stream_min_tokens = v.stream_min;
    ro.prefetch = v.prefetch, ro.prefetch_depth = v.depth;
    const MoePlan plan = make_class_plan(s.banks, v.strategy, v.slots, v.cap, v.cpu_layers);
    ASSERT_EQ(static_cast<int>(plan.cache.classes.size()), v.n_classes);
    OffloadedExperts off(ops, s.banks, plan, ro);
    auto* cs = dynamic_cast<ClassedExpertSlots*>(off.slots());
    ASSERT_NE(cs, nullptr);
    ASSERT_EQ(cs->n_classes(), v.n_classes);
    EXPECT_EQ(cs->n_slots(), v.slots);
    // Each pool's slots are its class's records: 12 KiB apart, and 6.75 KiB for the Q8_0 layers.
    for (int c = 0; c < cs->n_classes(); ++c) {
      auto* hs = dynamic_cast<HostExpertSlots*>(&cs->slot_class(c));
      ASSERT_NE(hs, nullptr);
      EXPECT_EQ(hs->slot_data(1) - hs->slot_data(0), plan.cache.classes[static_cast<size_t>(c)].record_bytes);
      EXPECT_EQ(hs->n_slots(), plan.cache.classes[static_cast<size_t>(c)].n_slots);
    }
    EXPECT_EQ(plan.cache.classes[0].record_bytes, 12288);
    if (v.n_classes == 2) {
      EXPECT_EQ(plan.cache.classes[1].record_bytes, 6912);
      EXPECT_EQ(plan.cache.pool_bytes, v.slots / 2 * (12288 + 6912));  // one pool: v.slots x 12288
    }
    EXPECT_EQ(off.prefetch_depth(), !v.prefetch ? 0 : v.slots == 32 ? 2 : 1);
    std::mt19937 rng(5);
    for (int step = 0; step < 15; ++step) {
      const int64_t T = step % 5 == 4 ? 16 : 1 + step % 3;
      for (int64_t layer : moe_layers) {
        std::vector<int32_t> ids = random_routes(T, k, E, 0.8, rng);
        std::vector<float> x(T * H), w(T * k), want(T * H), got(T * H);
        std::uniform_real_distribution<float> d(-1, 1);
        for (float& f : x) f = d(rng);
        for (float& f : w) f = 0.5f + 0.5f * d(rng);
        Tensor tx(x.data(), DType::F32, {T, H}), ti(ids.data(), DType::I32, {T, k}), tw(w.data(), DType::F32, {T, k});
        const PrefetchTargets targets = off.prefetch_targets(layer, T);
        std::vector<int32_t> guess[PrefetchTargets::kMax];
        for (int i = 0; i < targets.n; ++i) {
          guess[i] = random_routes(T, k, E, 0.8, rng);
          off.prefetch(targets.layer[i], Tensor(guess[i].data(), DType::I32, {T, k}));
        }
        fused.compute(layer, tx, ti, tw, Tensor(want.data(), DType::F32, {T, H}));
        off.compute(layer, tx, ti, tw, Tensor(got.data(), DType::F32, {T, H}));
        if (v.exact)
          ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "step " << step << " layer " << layer;
        else
          ASSERT_LT(rel_l2(got, want), 1e-6) << "step " << step << " layer " << layer;
      }
      for (int c = 0; c < cs->n_classes(); ++c)
        dynamic_cast<HostExpertSlots&>(cs->slot_class(c)).cache().check_integrity();
      if (v.stream_min > 0 && T >= v.stream_min) {
        // Each class streamed its layers through its own two regions and keeps its last two: with two
        // classes, four layers stay cached where one pool of the larger records would keep two.
        for (int c = 0; c < cs->n_classes(); ++c) {
          const std::vector<int64_t>& ls = plan.cache.classes[static_cast<size_t>(c)].layers;
          const ExpertCache& cache = dynamic_cast<HostExpertSlots&>(cs->slot_class(c)).cache();
          for (size_t i = ls.size() - 2; i < ls.size(); ++i)
            for (int32_t e = 0; e < E; ++e)
              EXPECT_EQ(cache.slot_of(static_cast<int32_t>(ls[i]), e) % E, e) << "layer " << ls[i];
        }
      }
    }
    const std::vector<MoeLayerStats> st = off.stats();
    for (int64_t l : moe_layers) {
      const MoeLayerStats& x = st[static_cast<size_t>(l)];
      if (cs->class_of(static_cast<int32_t>(l)) < 0) {  // a CPU layer
        EXPECT_EQ(x.misses + x.hits, 0) << l;
        continue;
      }
      EXPECT_GT(x.hits + x.misses, 0) << l;
      EXPECT_EQ(x.bytes, (x.misses + x.prefetched) * off.banks().record_bytes(l)) << l;
    }
    ExpertCache other(11, E, v.slots, 48);
    EXPECT_THROW(cs->copy_state_to(other), Error);
  }
}

// The plan's note on a prefetch depth below the one asked names the slots that depth needs: the
// least cache whose split (split_slots, in proportion to the classes' experts) gives every class
// 2d x its layer's experts or all of them, so --moe-cache-slots with that count runs it and one
// fewer does not (trial: a Q4_K/Q6_K file of 16 layers said "depth 3 needs 96 slots, 2 needs 64",
// the sum of 2d x 8 over its two classes, and ran next-layer prefetch up to 126 slots). Layers 0-2
// BF16 (12 experts), 3-11 Q8_0 (36): at N slots the BF16 class gets ~N/4, and holds its 12 experts
// only from 46 slots (shares 11.5 and 34.5: the tie's slot goes to the first class), while the Q8_0 class has 2 x 3 x 4 = 24 from 32.
TEST(SlotClasses, PrefetchDepthNoteNamesTheSlotsThatRunIt) {
  SyntheticExperts s;
  const int32_t E = 4;
  for (int64_t l = 0; l < 12; ++l) {
    const DType t = l < 3 ? DType::BF16 : DType::Q8_0;
    s.add_layer(E, 32, 64, t, t, static_cast<uint32_t>(40 + l));
  }
  CpuOps ops(1);
  MoeRuntimeOptions ro;
  ro.max_tokens = 4, ro.n_expert_used = 2, ro.cpu_threads = 1, ro.bank_format = BankFormat::kStored;
  ro.prefetch = true, ro.prefetch_depth = 3;
  auto run = [&](int64_t slots) {
    const MoePlan plan = make_class_plan(s.banks, MoeStrategy::kOffload, slots);
    EXPECT_EQ(plan.cache.classes.size(), 2u);
    OffloadedExperts off(ops, s.banks, plan, ro);
    return std::make_pair(off.prefetch_depth(), off.prefetch_depth_note());
  };
  int first[4] = {0, 0, 0, 0};  // the fewest slots that run each depth
  for (int64_t n = 16; n <= 48; ++n) {
    const int d = run(n).first;
    for (int i = 1; i <= d; ++i)
      if (first[i] == 0) first[i] = static_cast<int>(n);
  }
  EXPECT_EQ(first[1], 16);
  EXPECT_EQ(first[2], 46);
  EXPECT_EQ(first[3], 46);
  // Below it, the note names that count; depth 2 needs the same, so it is not named again.
  EXPECT_EQ(run(32).second, "--moe-prefetch-depth 3 needs 46 slots");
  EXPECT_EQ(run(45).second, "--moe-prefetch-depth 3 needs 46 slots");
  EXPECT_EQ(run(46).second, "");
}

TEST(SlotClasses, BankViewsCountTheirLayersOnly) {
  SyntheticExperts s;
  s.add_layer(4, 32, 64, DType::BF16, DType::BF16, 1);
  s.add_dense_layer();
  s.add_layer(4, 32, 64, DType::Q8_0, DType::Q8_0, 2);
  auto alloc = make_host_allocator();
  ExpertBanks banks(s.banks, *alloc, 1);
  const std::unique_ptr<ExpertBanks> v = banks.view({2});
  EXPECT_EQ(v->n_layers(), 3);
  EXPECT_EQ(v->n_moe_layers(), 1);
  EXPECT_EQ(v->n_expert(0), 0);
  EXPECT_EQ(v->n_expert(2), 4);
  EXPECT_EQ(v->slot_bytes(), 6912);
  EXPECT_EQ(banks.slot_bytes(), 12288);
  EXPECT_EQ(v->record(2, 3), banks.record(2, 3));
  EXPECT_EQ(v->total_bytes(), 4 * 6912);
  EXPECT_THROW(banks.view({1}), Error);
  EXPECT_THROW(banks.view({}), Error);
}

}  // namespace
}  // namespace ft::testing
