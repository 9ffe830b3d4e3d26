// The CPU build's offload, hybrid and cpu strategies compute the same function as fused:
// OffloadedExperts vs ResidentExperts on synthetic MoE layers (offload and cpu bit-identical,
// hybrid within float rounding), and end to end on the MoE fixtures (teacher-forced prefill +
// decode steps through the model), including the smallest legal cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "backend/cpu/cpu_ops.h"
#include "formats/checkpoint.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weights.h"
#include "moe/offloaded_experts.h"
#include "model_run.h"
#include "moe_test_util.h"
#include "test_util.h"
#include "util/error.h"

namespace ft::testing {
namespace {

struct Variant {
  const char* name;
  MoeStrategy strategy;
  int64_t slots;  // 0: the smallest cache (2 x E); -1: every expert; kFourE: 4 x E
  int32_t cap;
  const char* cpu_layers;
  bool exact;     // bit-identical to fused
  int64_t stream_min = 0;  // MoeRuntimeOptions::stream_min_tokens (0: the default)
  bool prefetch = false;   // MoeRuntimeOptions::prefetch
  int depth = 1;           // MoeRuntimeOptions::prefetch_depth
  bool preload = false;    // MoeRuntimeOptions::preload
  double prefill_cpu = -1;  // MoeRuntimeOptions::prefill_cpu_share (< 0: from the plan's costs)
  int32_t cpu_cost = 0;     // the plan's FetchPolicy cost (0: none; a planned split otherwise)
};

constexpr int64_t kFourE = -4;  // Variant::slots: the smallest cache prefetch depth 2 runs in

const Variant kVariants[] = {
    {"offload, smallest cache", MoeStrategy::kOffload, 0, -1, "", true},
    {"offload, all experts", MoeStrategy::kOffload, -1, -1, "", true},
    {"offload + cpu layers", MoeStrategy::kOffload, 0, -1, "1", true},
    {"cpu", MoeStrategy::kCpu, 0, -1, "", true},
    {"hybrid, cap 1", MoeStrategy::kHybrid, 0, 1, "", false},
    {"hybrid, cap 0", MoeStrategy::kHybrid, 0, 0, "", false},
    {"offload, streamed steps", MoeStrategy::kOffload, 0, -1, "", true, 4},
    {"offload + cpu layers, streamed steps", MoeStrategy::kOffload, 0, -1, "1", true, 4},
    {"hybrid, cap 1, streamed steps", MoeStrategy::kHybrid, 0, 1, "", false, 4},
    // Slots beyond the two staging regions: streamed steps copy the experts cached there.
    {"offload, streamed steps past cached experts", MoeStrategy::kOffload, kFourE, -1, "", true, 4},
    {"offload, preloaded, streamed steps", MoeStrategy::kOffload, kFourE, -1, "", true, 4, false, 1, true},
    // The CPU computes a share of a streamed layer's uncached experts (issue 37's prefill split):
    // given, and from the planner's costs (1 fetch an expert: half of them).
    {"hybrid, cap 1, streamed steps, CPU share 0.5", MoeStrategy::kHybrid, 0, 1, "", false, 4, false, 1, false, 0.5},
    {"hybrid, planned split, streamed steps past cached experts, CPU share by cost", MoeStrategy::kHybrid, kFourE, -1,
     "", false, 4, false, 1, true, -1, kFetchCostUnit},
    {"hybrid, cap 1, preloaded, prefetch", MoeStrategy::kHybrid, 0, 1, "", false, 0, true, 1, true},
    {"offload, smallest cache, prefetch", MoeStrategy::kOffload, 0, -1, "", true, 0, true},
    {"hybrid, cap 1, prefetch", MoeStrategy::kHybrid, 0, 1, "", false, 0, true},
    // Depth 2 needs 4 x E slots: the first cache layer predicts the next two, the others none here.
    {"offload, prefetch depth 2", MoeStrategy::kOffload, kFourE, -1, "", true, 0, true, 2},
    {"offload, prefetch depth 2 on a cache too small for it", MoeStrategy::kOffload, 0, -1, "", true, 0, true, 2},
};

MoeRuntimeOptions variant_options(const Variant& v, MoeRuntimeOptions ro) {
  if (v.stream_min > 0) ro.stream_min_tokens = v.stream_min;
  ro.prefetch = v.prefetch;
  ro.prefetch_depth = v.depth;
  ro.preload = v.preload;
  ro.prefill_cpu_share = v.prefill_cpu;
  return ro;
}

MoePlan variant_plan(const Variant& v, const HostExpertBanks& host, int32_t E) {
  const int64_t slots = v.slots == 0 ? 2 * E : v.slots == kFourE ? 4 * E : v.slots;  // -1: auto (every expert)
  MoePlan p = make_plan(host, v.strategy, slots < 0 ? 0 : slots, v.cap, v.cpu_layers);
  p.cpu_cost = v.cpu_cost;
  return p;
}

/** Whether streamed steps of `v` leave a share of the uncached experts to the CPU. */
bool streams_cpu_share(const Variant& v) { return v.stream_min > 0 && (v.prefill_cpu > 0 || v.cpu_cost > 0); }

/** Every variant on `s` (MoE layers 0, 2 and 3 of E experts, [*, H] inputs; layer 1 dense) against
 *  fused, the banks in `format` (unset: the default choice; want_format: the one expected). */
void expect_variants_equal_fused(const HostExpertBanks& banks, int32_t E, int64_t H, std::optional<BankFormat> format,
                                 BankFormat want_format) {
  const int32_t k = 3;
  CpuOps ops(1);
  ResidentExperts fused(ops, banks);
  MoeRuntimeOptions ro;
  ro.max_tokens = 16, ro.n_expert_used = k, ro.cpu_threads = 2, ro.bank_format = format;
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    OffloadedExperts off(ops, banks, variant_plan(v, banks, E), variant_options(v, ro));
    EXPECT_EQ(off.banks().format(), want_format);
    std::mt19937 rng(7);
    int64_t kept_total = 0, on_cpu_total = 0;
    for (int step = 0; step < 25; ++step) {
      const int64_t T = step % 5 == 4 ? 16 : 1 + step % 3;
      const bool streamed = v.stream_min > 0 && T >= v.stream_min;
      const int64_t misses_before = off.stats()[2].misses, hits_before = off.stats()[2].hits,
                    cpu_before = off.stats()[2].cpu_experts;
      // Layer 2's experts cached before the step: a streamed step copies those still cached when
      // layer 2 streams (not in a region the step emptied) from their slots, not from the banks.
      int64_t cached_before = 0;
      if (auto* hs = dynamic_cast<HostExpertSlots*>(off.slots()))
        for (int32_t e = 0; e < E; ++e) cached_before += hs->cache().slot_of(2, e) >= 0;
      for (int64_t layer : {0, 2, 3}) {
        std::vector<int32_t> ids = random_routes(T, k, E, 0.8, rng);
        std::vector<float> x(T * H), w(T * k), want(T * H), got(T * H);
        std::uniform_real_distribution<float> d(-1, 1);
        for (float& f : x) f = d(rng);
        for (float& f : w) f = 0.5f + 0.5f * d(rng);
        Tensor tx(x.data(), DType::F32, {T, H}), ti(ids.data(), DType::I32, {T, k}), tw(w.data(), DType::F32, {T, k});
        const PrefetchTargets targets = off.prefetch_targets(layer, T);
        const bool deep = v.depth == 2 && v.slots == kFourE;
        EXPECT_EQ(targets.n, !v.prefetch || layer == 3 ? 0 : !deep ? 1 : layer == 0 ? 2 : 0) << layer;
        EXPECT_EQ(off.prefetch_depth(), !v.prefetch ? 0 : deep ? 2 : 1);
        EXPECT_EQ(off.prefetch_target(layer, 64), -1);  // a step that streams never predicts
        std::vector<int32_t> guess[PrefetchTargets::kMax];
        for (int i = 0; i < targets.n; ++i) {  // predictions, right or wrong
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
      if (off.slots()) {  // streamed and admitted steps leave a consistent cache
        auto* hs = dynamic_cast<HostExpertSlots*>(off.slots());
        ASSERT_NE(hs, nullptr);
        hs->cache().check_integrity();
        if (streamed) {  // every layer went through a region (the pool's last 2 x E slots): the last
                         // two streamed layers (2 and 3) are cached afterwards, in their regions or
                         // in the slots outside them that held them before; layer 0's region went
                         // to layer 3, so only what it held outside the regions stays
          ASSERT_EQ(hs->n_regions(), 2);
          const int32_t r0 = hs->region_first(0);
          ASSERT_EQ(r0, hs->n_slots() - 2 * E);
          // ... but the experts the CPU computed instead (a CPU share), which are not cached.
          int64_t on_cpu = 0;
          for (int32_t e = 0; e < E; ++e) {
            EXPECT_LT(hs->cache().slot_of(0, e), r0);
            for (int32_t l : {2, 3}) {
              const int32_t slot = hs->cache().slot_of(l, e);
              if (l == 2 && slot < 0) ++on_cpu;
              if (!streams_cpu_share(v)) ASSERT_GE(slot, 0) << l << " " << e;
              if (slot >= r0) EXPECT_EQ((slot - r0) % E, e);
            }
            if (hs->cache().slot_of(2, e) >= 0) EXPECT_NE(hs->cache().slot_of(2, e), hs->cache().slot_of(3, e));
          }
          const int64_t kept = off.stats()[2].hits - hits_before;
          EXPECT_LE(kept, cached_before);
          EXPECT_EQ(off.stats()[2].misses - misses_before, E - kept - on_cpu);
          // The CPU computed the routed ones of its share (random routes at 16 tokens x 3: most).
          EXPECT_LE(off.stats()[2].cpu_experts - cpu_before, on_cpu);
          if (streams_cpu_share(v)) EXPECT_GT(off.stats()[2].cpu_experts - cpu_before, 0);
          kept_total += kept;
          on_cpu_total += on_cpu;
        }
      }
    }
    if (v.stream_min > 0 && (v.slots == kFourE || v.preload)) {
      EXPECT_GT(kept_total, 0);  // the case the variant exists for
    }
    if (streams_cpu_share(v)) {  // about half of the uncached experts went to the CPU
      EXPECT_GT(on_cpu_total, 0);
    } else {
      EXPECT_EQ(on_cpu_total, 0);
    }
    const std::vector<MoeLayerStats> st = off.stats();
    ASSERT_EQ(st.size(), 4u);
    EXPECT_EQ(st[1].hits + st[1].misses + st[1].cpu_experts, 0);  // dense
    if (v.strategy == MoeStrategy::kCpu) {
      EXPECT_EQ(st[0].misses, 0);
      EXPECT_GT(st[0].cpu_experts, 0);
    } else if (v.cap == 0) {  // nothing is ever fetched: every expert runs on the CPU
      EXPECT_EQ(st[2].misses + st[2].hits, 0);
      EXPECT_GT(st[2].cpu_experts, 0);
    } else {
      // Hybrid with prefetch: layer 2 is always prefetched, so its own misses go to the CPU.
      EXPECT_EQ(st[2].misses > 0, !(v.prefetch && v.cap >= 0));
      EXPECT_GT(st[2].hits, 0);
      EXPECT_EQ(st[2].bytes, (st[2].misses + st[2].prefetched) * off.banks().record_bytes(2));
      EXPECT_EQ(st[2].cpu_experts > 0, v.cap > 0 || v.cpu_cost > 0 || streams_cpu_share(v));
    }
    // The preload fills the slots outside the two staging regions, when there are any.
    const bool preloaded = v.preload && off.slots() && off.slots()->n_slots() > 2 * E;
    EXPECT_EQ(st[2].prefetched > 0, v.prefetch || preloaded);
    if (std::string(v.cpu_layers) == "1") {
      EXPECT_EQ(st[0].misses, 0);
      EXPECT_GT(st[0].cpu_experts, 0);
    }
    // A CPU layer's experts are not cache lookups; a cache layer's CPU experts (hybrid, over the
    // fetch cap) are lookups that missed, so the hit rate counts them: as many as the cache itself
    // left to the CPU.
    auto* hs = dynamic_cast<HostExpertSlots*>(off.slots());
    for (size_t l = 0; l < st.size(); ++l) {
      const bool cache_layer = v.strategy != MoeStrategy::kCpu && l != 1 &&
                               !(std::string(v.cpu_layers) == "1" && l == 0);
      EXPECT_EQ(st[l].cpu_misses, cache_layer ? st[l].cpu_experts : 0) << "layer " << l;
      if (hs && !streams_cpu_share(v)) {  // a streamed share is the CPU's without an admission
        EXPECT_EQ(st[l].cpu_misses, hs->cache().stats(static_cast<int32_t>(l)).cpu) << "layer " << l;
      }
    }
  }
}

// The CPU's share of a streamed layer's uncached experts (issue 37's prefill split), from the
// planner's costs: half at a cost of one fetch, more where the measured curve makes further tokens
// cheap, none for a long step (many tokens per expert, a large output to send back) or without costs.
TEST(OffloadedExperts, StreamCpuShareFollowsThePlannersCosts) {
  const int32_t E = 64;
  const int64_t H = 256;
  SyntheticExperts s;
  s.add_layer(E, 128, H, DType::BF16, DType::BF16, 4);
  s.add_dense_layer();
  s.add_layer(E, 128, H, DType::BF16, DType::BF16, 5);
  s.add_layer(E, 128, H, DType::BF16, DType::BF16, 6);
  CpuOps ops(1);
  MoeRuntimeOptions ro;
  ro.max_tokens = 64, ro.n_expert_used = 4, ro.cpu_threads = 1;
  auto share = [&](MoePlan plan, int64_t T, double given = -1.0) {
    ro.prefill_cpu_share = given;
    OffloadedExperts off(ops, s.banks, plan, ro);
    return off.stream_cpu_share(2, T, H) / 65536.0;
  };
  MoePlan offload = make_plan(s.banks, MoeStrategy::kOffload, 4 * E);
  EXPECT_EQ(share(offload, 16), 0.0);  // no exchange: nothing can go to the CPU
  EXPECT_EQ(share(offload, 16, 0.5), 0.0);
  MoePlan capped = make_plan(s.banks, MoeStrategy::kHybrid, 4 * E, 1);
  EXPECT_EQ(share(capped, 16), 0.0);  // a plain cap has no costs to split by
  EXPECT_NEAR(share(capped, 16, 0.3), 0.3, 1e-4);
  MoePlan planned = capped;
  planned.fetch_cap.assign(planned.fetch_cap.size(), -1);
  planned.cpu_cost = kFetchCostUnit;  // a CPU expert with one token costs one fetch
  const double half = share(planned, 16);  // 1 token per expert: half, a little more for the output
  EXPECT_GE(half, 0.5);
  EXPECT_LT(half, 0.6);
  planned.cpu_token_cost = kFetchCostUnit / 4;  // 16 tokens per expert: c = 4.75
  const double linear = share(planned, 256);
  EXPECT_GT(linear, 0.15);
  EXPECT_LT(linear, 0.25);
  {
    ro.prefill_cpu_share = -1.0;
    OffloadedExperts off(ops, s.banks, planned, ro);
    off.set_cpu_time_curve({{1, 1e-4}, {16, 1.5e-4}, {64, 2e-4}});  // AMX-like: 16 tokens cost 1.5 tokens' time
    EXPECT_GT(off.stream_cpu_share(2, 256, H), 65536.0 * 0.35);
    EXPECT_EQ(off.stream_cpu_share(2, 64 * 64, H), 0);  // 64 x 64 tokens: the CPU would end last
    EXPECT_THROW(off.set_cpu_time_curve({{2, 1e-4}}), Error);
    EXPECT_THROW(off.set_cpu_time_curve({{1, 1e-4}, {1, 2e-4}}), Error);
  }
}

/** MoE layers 0, 2 and 3 of E BF16 experts ([H] in, H / 2 wide), layer 1 dense: EC12-bankable. */
SyntheticExperts bf16_layers(int32_t E, int64_t H) {
  SyntheticExperts s;
  s.add_layer(E, H / 2, H, DType::BF16, DType::BF16, 4);
  s.add_dense_layer();
  s.add_layer(E, H / 2, H, DType::BF16, DType::BF16, 5);
  s.add_layer(E, H / 2, H, DType::BF16, DType::BF16, 6);
  return s;
}

TEST(OffloadedExperts, SameFunctionAsFusedOnSyntheticLayers) {
  SyntheticExperts s;
  const int32_t E = 8;
  const int64_t H = 64, F = 32;
  s.add_layer(E, F, H, DType::BF16, DType::BF16, 1);
  s.add_dense_layer();
  s.add_layer(E, F, H, DType::Q8_0, DType::BF16, 2);
  s.add_layer(E, F, H, DType::BF16, DType::F16, 3);
  expect_variants_equal_fused(s.banks, E, H, std::nullopt, BankFormat::kStored);  // not all BF16: stored
}

// --moe-preload: the cache starts full, each cache layer holding its share of the slots (experts
// 0, 1, ...), counted as prefetched (the variants above check the function with it).
TEST(OffloadedExperts, PreloadFillsTheCacheAcrossItsLayers) {
  const int32_t E = 16;
  const int64_t H = 128;
  SyntheticExperts s = bf16_layers(E, H);
  CpuOps ops(1);
  MoeRuntimeOptions ro;
  ro.max_tokens = 2, ro.n_expert_used = 2, ro.preload = true;  // 4 ids a prefetch: layers take several
  OffloadedExperts off(ops, s.banks, make_plan(s.banks, MoeStrategy::kOffload, 2 * E + 15, -1, ""), ro);
  auto* hs = dynamic_cast<HostExpertSlots*>(off.slots());
  ASSERT_NE(hs, nullptr);
  hs->cache().check_integrity();
  ASSERT_EQ(hs->n_slots(), 2 * E + 15);
  const int32_t want[4] = {5, 0, 5, 5};  // 47 slots less the two regions' 32 over 3 cache layers
  for (int32_t l : {0, 2, 3}) {
    for (int32_t e = 0; e < E; ++e) {
      EXPECT_EQ(hs->cache().slot_of(l, e) >= 0, e < want[l]) << l << " " << e;
      EXPECT_LT(hs->cache().slot_of(l, e), hs->region_first(0));  // the staging regions stay empty
    }
    const CacheLayerStats st = hs->cache().stats(l);
    EXPECT_EQ(st.prefetched, want[l]);
    EXPECT_EQ(st.misses + st.hits, 0);
  }
}

// BF16 experts in whole 64-value groups: the banks default to EC12, decoded into the slots (the
// gather's and the streaming copy's CPU twins) and by the CPU executor; still fused's function,
// bit for bit where fused's kernels run. And the same model with stored banks.
TEST(OffloadedExperts, Ec12BanksComputeTheSameFunction) {
  const int32_t E = 8;
  const int64_t H = 128;
  SyntheticExperts s = bf16_layers(E, H);
  for (size_t l : {0, 2, 3}) s.add_ec12_exceptions(l, 6, static_cast<uint32_t>(l));
  expect_variants_equal_fused(s.banks, E, H, std::nullopt, BankFormat::kEc12);
  expect_variants_equal_fused(s.banks, E, H, BankFormat::kStored, BankFormat::kStored);
}

// Prefetch depths 2 to 4 under eviction: twelve MoE layers of 4 experts in 2d x E slots (the
// smallest cache depth d runs in: 16, 24 and 32 of 48 experts), so admissions evict while d prefetches
// are in flight; predictions right about half the time. Offload stays bit-identical to fused and
// the cache consistent.
class PrefetchDepth : public ::testing::TestWithParam<int> {};

TEST_P(PrefetchDepth, UnderEvictionEqualsFused) {
  const int depth = GetParam();
  SyntheticExperts s;
  const int32_t E = 4, k = 2, kLayers = 12;
  const int64_t H = 32, F = 16;
  for (int32_t l = 0; l < kLayers; ++l) s.add_layer(E, F, H, DType::BF16, DType::BF16, 10 + l);
  CpuOps ops(1);
  ResidentExperts fused(ops, s.banks);
  MoeRuntimeOptions ro;
  ro.max_tokens = 4, ro.n_expert_used = k, ro.cpu_threads = 1, ro.prefetch = true, ro.prefetch_depth = depth;
  OffloadedExperts off(ops, s.banks, make_plan(s.banks, MoeStrategy::kOffload, 2 * depth * E), ro);
  ASSERT_EQ(off.prefetch_depth(), depth);
  std::mt19937 rng(11);
  int64_t predicted = 0;
  for (int step = 0; step < 40; ++step) {
    const int64_t T = 1 + step % 3;
    std::vector<std::vector<int32_t>> ids(kLayers), guess(kLayers);
    for (int32_t l = 0; l < kLayers; ++l) {
      ids[l] = random_routes(T, k, E, 0.0, rng);
      guess[l] = rng() % 2 ? ids[l] : random_routes(T, k, E, 0.0, rng);
    }
    for (int32_t l = 0; l < kLayers; ++l) {
      const PrefetchTargets t = off.prefetch_targets(l, T);
      ASSERT_EQ(t.n, l == 0 ? depth : l + depth < kLayers ? 1 : 0) << l;
      for (int i = 0; i < t.n; ++i) {
        ASSERT_EQ(t.layer[i], l == 0 ? 1 + i : l + depth);
        off.prefetch(t.layer[i], Tensor(guess[t.layer[i]].data(), DType::I32, {T, k}));
        ++predicted;
      }
      std::vector<float> x(T * H), w(T * k), want(T * H), got(T * H);
      std::uniform_real_distribution<float> d(-1, 1);
      for (float& f : x) f = d(rng);
      for (float& f : w) f = 0.5f + 0.5f * d(rng);
      Tensor tx(x.data(), DType::F32, {T, H}), ti(ids[l].data(), DType::I32, {T, k}), tw(w.data(), DType::F32, {T, k});
      fused.compute(l, tx, ti, tw, Tensor(want.data(), DType::F32, {T, H}));
      off.compute(l, tx, ti, tw, Tensor(got.data(), DType::F32, {T, H}));
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "step " << step << " layer " << l;
    }
    dynamic_cast<HostExpertSlots*>(off.slots())->cache().check_integrity();
  }
  const MoeLayerStats total = total_moe_stats(off.stats());
  EXPECT_GT(total.prefetched, 0);
  EXPECT_GT(total.misses, 0);  // evictions: 48 experts over 16, 24 or 32 slots
  EXPECT_GT(total.hits, 0);
  EXPECT_EQ(predicted, 40 * (kLayers - 1));  // every layer but the first is predicted once a step
}

INSTANTIATE_TEST_SUITE_P(OffloadedExperts, PrefetchDepth, ::testing::Values(2, 3, 4));

// The prefetch depth in use counts only the cache layers: --moe-cpu-layers' experts take no slots
// (a cache of every expert that goes through it never evicts, so any depth is safe), and n cache
// layers predict at most n - 1 ahead. Four MoE layers of 4 experts, depth 3 asked.
TEST(OffloadedExperts, PrefetchDepthFollowsTheCacheLayers) {
  SyntheticExperts s;
  for (int32_t l = 0; l < 4; ++l) s.add_layer(4, 16, 32, DType::BF16, DType::BF16, 30 + l);
  CpuOps ops(1);
  MoeRuntimeOptions ro;
  ro.max_tokens = 4, ro.n_expert_used = 2, ro.cpu_threads = 1, ro.prefetch = true, ro.prefetch_depth = 3;
  struct Case {
    const char* cpu_layers;
    int64_t slots;
    int depth;
    const char* note;
  };
  for (const Case& c : {Case{"2", 8, 1, "--moe-prefetch-depth 3: 2 cache layers predict at most 1 ahead"},
                        Case{"1", 12, 2, "--moe-prefetch-depth 3: 3 cache layers predict at most 2 ahead"},
                        Case{"", 10, 1, "--moe-prefetch-depth 3 needs 16 slots"},  // every expert, as the next case runs
                        Case{"", 16, 3, ""}}) {
    OffloadedExperts off(ops, s.banks, make_plan(s.banks, MoeStrategy::kOffload, c.slots, -1, c.cpu_layers), ro);
    EXPECT_EQ(off.prefetch_depth(), c.depth) << c.cpu_layers << " " << c.slots;
    EXPECT_EQ(off.prefetch_depth_note(), c.note) << c.cpu_layers << " " << c.slots;
  }
}

TEST(OffloadedExperts, RejectsBadUse) {
  SyntheticExperts s;
  s.add_layer(4, 32, 64, DType::BF16, DType::BF16, 1);
  s.add_dense_layer();
  CpuOps ops(1);
  MoeRuntimeOptions ro;
  ro.max_tokens = 4, ro.n_expert_used = 2, ro.cpu_threads = 1;
  OffloadedExperts off(ops, s.banks, make_plan(s.banks, MoeStrategy::kOffload, 8), ro);
  EXPECT_NE(off.slots(), nullptr);
  std::vector<float> x(5 * 64), out(5 * 64), w(10, 1.0f);
  std::vector<int32_t> ids(10, 0);
  EXPECT_THROW(off.compute(1, Tensor(x.data(), DType::F32, {1, 64}), Tensor(ids.data(), DType::I32, {1, 2}),
                           Tensor(w.data(), DType::F32, {1, 2}), Tensor(out.data(), DType::F32, {1, 64})),
               Error);  // dense layer
  EXPECT_THROW(off.compute(0, Tensor(x.data(), DType::F32, {5, 64}), Tensor(ids.data(), DType::I32, {5, 2}),
                           Tensor(w.data(), DType::F32, {5, 2}), Tensor(out.data(), DType::F32, {5, 64})),
               Error);  // more tokens than planned
  EXPECT_THROW(off.compute(0, Tensor(x.data(), DType::F32, {1, 64}), Tensor(ids.data(), DType::I32, {1, 1}),
                           Tensor(w.data(), DType::F32, {1, 1}), Tensor(out.data(), DType::F32, {1, 64})),
               Error);  // k differs
  MoePlan wrong = make_plan(s.banks, MoeStrategy::kOffload, 8);
  wrong.layers.pop_back();
  EXPECT_THROW(OffloadedExperts(ops, s.banks, wrong, ro), Error);
  EXPECT_NE(dynamic_cast<ResidentExperts*>(make_expert_compute(ops, s.banks, make_plan(s.banks, MoeStrategy::kFused, 0), ro).get()),
            nullptr);
  EXPECT_NE(dynamic_cast<OffloadedExperts*>(make_expert_compute(ops, s.banks, make_plan(s.banks, MoeStrategy::kCpu, 0), ro).get()),
            nullptr);
}

TEST(OffloadedExperts, StatsLine) {
  std::vector<MoeLayerStats> before(2), now(2);
  now[0] = {100, 20, 22 * 9 * (int64_t{1} << 20), 3, 2, 3, 2'000'000};  // hybrid cache layer: 3 misses on the CPU
  now[1] = {40, 0, 0, 1, 0, 0, 2'500'000};                              // a CPU layer: no lookups
  before[0] = {30, 4, 4 * 9 * (int64_t{1} << 20), 0, 0, 0};
  EXPECT_EQ(total_moe_stats(now).hits, 140);
  EXPECT_EQ(total_moe_stats(now).prefetched, 2);
  EXPECT_EQ(total_moe_stats(now).cpu_ns, 4'500'000);
  const MoeLayerStats d = now[0] - before[0];  // every counter, field by field
  EXPECT_EQ(d.hits, 70);
  EXPECT_EQ(d.misses, 16);
  EXPECT_EQ(d.bytes, 18 * 9 * (int64_t{1} << 20));
  EXPECT_EQ(d.cpu_experts, 3);
  EXPECT_EQ(d.prefetched, 2);
  EXPECT_EQ(d.cpu_misses, 3);
  EXPECT_EQ(d.cpu_ns, 2'000'000);
  EXPECT_EQ(format_moe_stats(now, before, 9),
            "moe: 9 steps, hit rate 85.3% (110 hits, 16 misses fetched, 3 misses on the CPU, 2 prefetched, 162.0 MiB "
            "fetched, 18.0 MiB/step), 4 CPU experts (0.50 ms/step on the CPU)");  // 110 / (110 + 16 + 3)
  EXPECT_EQ(total_moe_stats(now).lookups(), 140 + 20 + 3);
  EXPECT_THROW(format_moe_stats(now, {}, 1), Error);
  // every layer on the CPU (--moe-strategy cpu): no lookups, so no hit rate (/v1/stats: null)
  const std::vector<MoeLayerStats> cpu_only = {{0, 0, 0, 8, 0, 0, 1'250'000}}, none(1);
  EXPECT_EQ(format_moe_stats(cpu_only, none, 1),
            "moe: 1 steps, hit rate - (0 hits, 0 misses fetched, 0 misses on the CPU, 0 prefetched, 0 B fetched, 0 "
            "B/step), 8 CPU experts (1.25 ms/step on the CPU)");
}

// ---- end to end on the fixtures --------------------------------------------------------------

TEST(OffloadedExperts, SameLogitsAsFusedOnMoeFixtures) {
  for (const char* name :
       {"qwen3_moe", "qwen3_moe_64e", "mixtral", "olmoe", "qwen2_moe", "glm4_moe", "minimax_m2", "deepseek_v3"}) {
    SCOPED_TRACE(name);
    const std::string dir = shared_dir() + "/fixtures/hf/" + name;
    const nlohmann::json ref = nlohmann::json::parse(read_file(dir + "/reference.json"));
    const auto& cs = ref.at("cases")[0];
    const std::vector<int32_t> tokens = cs.at("input_ids").get<std::vector<int32_t>>();
    const std::vector<float> want_ref = read_f32(dir + "/" + cs.at("logits_file").get<std::string>());
    CpuOps ops(1);
    auto ckpt = open_checkpoint(dir);
    auto model = load_model(*ckpt, ops);
    WeightLoader ld(*ckpt, ops);
    model->place_deferred(ld, ops);  // the token table, which no memory plan places here
    const ModelConfig& c = model->config();
    const int64_t prefill = static_cast<int64_t>(tokens.size()) - 6;  // then 6 decode steps
    ResidentExperts fused(ops, model->host_experts());
    const std::vector<float> want = run_model(*model, ops, fused, tokens, prefill);
    ASSERT_EQ(want.size(), want_ref.size());
    EXPECT_LT(rel_l2(want, want_ref), 1e-4);
    MoeRuntimeOptions ro;
    ro.max_tokens = prefill, ro.n_expert_used = static_cast<int32_t>(c.n_expert_used), ro.cpu_threads = 2;
    for (const Variant& v : kVariants) {
      SCOPED_TRACE(v.name);
      OffloadedExperts off(ops, model->host_experts(), variant_plan(v, model->host_experts(),
                                                                   static_cast<int32_t>(c.n_expert)),
                           variant_options(v, ro));
      const std::vector<float> got = run_model(*model, ops, off, tokens, prefill);
      ASSERT_EQ(got.size(), want.size());
      if (v.exact)
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << rel_l2(got, want);
      else
        EXPECT_LT(rel_l2(got, want_ref), 1e-4);
      int64_t fetched = 0, prefetched = 0, hits = 0;
      for (const MoeLayerStats& st : off.stats())
        fetched += st.misses + st.cpu_experts, prefetched += st.prefetched, hits += st.hits;
      // The preload fills the slots outside the two staging regions, when there are any.
      const bool preloaded = v.preload && off.slots() && off.slots()->n_slots() > 2 * static_cast<int32_t>(c.n_expert);
      EXPECT_GT(preloaded ? hits : fetched, 0);  // preloaded: the prompt finds experts cached
      // The decoder passed the next layer's predicted routes, or the cache was preloaded.
      EXPECT_EQ(prefetched > 0, v.prefetch || preloaded);
    }
  }
}

}  // namespace
}  // namespace ft::testing
