// plan_moe and its flag parsers: strategy resolution (auto -> fused / offload / hybrid), per-layer
// modes, --moe-cpu-layers forms, fetch caps, and errors for contradictory flags or memory.
#include <gtest/gtest.h>

#include "moe/moe_plan.h"
#include "plan_model.h"
#include "util/error.h"

namespace ft::testing {
namespace {

using namespace plan_model;  // kLayers, budget(), GiB, MiB (plan_model.h)

TEST(MoePlan, ParsesStrategies) {
  EXPECT_EQ(parse_moe_strategy("hybrid"), MoeStrategy::kHybrid);
  EXPECT_EQ(parse_moe_strategy("auto"), MoeStrategy::kAuto);
  EXPECT_STREQ(moe_strategy_name(MoeStrategy::kOffload), "offload");
  try {
    parse_moe_strategy("gpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--moe-strategy gpu"), std::string::npos);
  }
}

TEST(MoePlan, CpuLayerForms) {
  const std::vector<int64_t> moe = {1, 2, 3, 4, 6, 7};
  EXPECT_EQ(parse_moe_cpu_layers("", moe), (std::vector<int64_t>{}));
  EXPECT_EQ(parse_moe_cpu_layers("2", moe), (std::vector<int64_t>{1, 2}));        // first N
  EXPECT_EQ(parse_moe_cpu_layers("0", moe), (std::vector<int64_t>{}));
  EXPECT_EQ(parse_moe_cpu_layers("6", moe), moe);
  EXPECT_EQ(parse_moe_cpu_layers("0.5", moe), (std::vector<int64_t>{1, 2, 3}));  // round(0.5 * 6)
  EXPECT_EQ(parse_moe_cpu_layers("1.0", moe), moe);
  EXPECT_EQ(parse_moe_cpu_layers("7,1,3-4", moe), (std::vector<int64_t>{1, 3, 4, 7}));
  EXPECT_EQ(parse_moe_cpu_layers("6,", moe), (std::vector<int64_t>{6}));          // one id needs a comma
  EXPECT_EQ(parse_moe_cpu_layers("2-3,3", moe), (std::vector<int64_t>{2, 3}));
  for (const char* bad : {"7", "1.5", "-1", "0,5", "a", "3-2", ",3", "1,,2", "0.5x"}) {
    try {
      parse_moe_cpu_layers(bad, moe);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(std::string("--moe-cpu-layers ") + bad), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("''"), std::string::npos) << e.what();  // "-1" named '' once
    }
  }
  for (const char* bad : {"-1", "2-", "1-2-3"}) {
    try {
      parse_moe_cpu_layers(bad, moe);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not a layer number or a range A-B"), std::string::npos) << e.what();
    }
  }
}

TEST(MoePlan, AutoPicksFusedWhenEverythingFits) {
  const MoePlan p = plan_moe({}, kLayers, budget(GiB));
  EXPECT_EQ(p.strategy, MoeStrategy::kFused);
  EXPECT_EQ(p.count(MoeLayerMode::kResident), 6);
  EXPECT_EQ(p.count(MoeLayerMode::kDense), 2);
  EXPECT_EQ(p.cache.n_slots, 0);
  EXPECT_NE(p.summary().find("strategy fused"), std::string::npos);
  // A flag only an expert cache honours makes auto offload even when everything fits.
  MoeOptions sized;
  sized.cache = {CacheSizeMode::kSlots, 40, 0.0};
  EXPECT_EQ(plan_moe(sized, kLayers, budget(GiB)).strategy, MoeStrategy::kOffload);
  EXPECT_EQ(plan_moe(sized, kLayers, budget(GiB)).cache.n_slots, 40);
  MoeOptions prefetch;
  prefetch.prefetch = MoeOptions::Prefetch::kOn;
  EXPECT_EQ(plan_moe(prefetch, kLayers, budget(GiB)).strategy, MoeStrategy::kOffload);
  prefetch.prefetch = MoeOptions::Prefetch::kOff;
  EXPECT_EQ(plan_moe(prefetch, kLayers, budget(GiB)).strategy, MoeStrategy::kFused);
  MoeOptions depth;  // --moe-prefetch-depth asks for a cache too (auto ran fused and ignored it)
  depth.prefetch_depth = 2, depth.prefetch_depth_given = true;
  EXPECT_EQ(plan_moe(depth, kLayers, budget(GiB)).strategy, MoeStrategy::kOffload);
}

TEST(MoePlan, AutoPicksOffloadOrHybridWhenExpertsDoNotFit) {
  // 160 MiB: 100 resident + 1 KV leaves 59 slots of 1 MiB (96 needed for fused).
  MoeOptions o;
  MoePlan p = plan_moe(o, kLayers, budget(160 * MiB));
  EXPECT_EQ(p.strategy, MoeStrategy::kOffload);
  EXPECT_EQ(p.cache.n_slots, 59);
  EXPECT_EQ(p.count(MoeLayerMode::kCache), 6);
  for (size_t l = 0; l < kLayers.size(); ++l) EXPECT_EQ(p.fetch_cap[l], -1);
  EXPECT_NE(p.summary().find("expert cache 59 slots (59.0 MiB)"), std::string::npos) << p.summary();
  EXPECT_FALSE(p.offload_candidate);
  o.auto_planner = true;  // beside a GPU: the planner, whose calibration also times offload
  p = plan_moe(o, kLayers, budget(160 * MiB));
  EXPECT_EQ(p.strategy, MoeStrategy::kHybrid);
  EXPECT_TRUE(p.calibrate_fetch_cap);
  EXPECT_TRUE(p.offload_candidate);
  EXPECT_NE(p.summary().find("misses split between PCIe and the CPU: calibrating (offload one of the candidates)"),
            std::string::npos) << p.summary();
  EXPECT_EQ(plan_moe(o, kLayers, budget(GiB)).strategy, MoeStrategy::kFused);  // everything fits: still fused
  o.fetch_cap = 2;
  p = plan_moe(o, kLayers, budget(160 * MiB));
  EXPECT_EQ(p.strategy, MoeStrategy::kHybrid);
  EXPECT_FALSE(p.calibrate_fetch_cap);
  EXPECT_FALSE(p.offload_candidate);  // a cap was given: hybrid as asked
  EXPECT_EQ(p.fetch_cap[1], 2);
  EXPECT_EQ(p.fetch_cap[0], -1);  // dense
  EXPECT_NE(p.summary().find("fetch cap 2 per layer"), std::string::npos) << p.summary();
  p.fetch_cap_provisional = true;  // set by the runtime until its calibration: said with the cap
  EXPECT_NE(p.summary().find("fetch cap 2 per layer until the start-up calibration picks the split"),
            std::string::npos) << p.summary();
  o.fetch_cap = -1;  // --moe-cpu-cost: a planned split with given costs, no calibration
  o.cpu_cost = 2 * kFetchCostUnit, o.cpu_token_cost = kFetchCostUnit / 4;
  p = plan_moe(o, kLayers, budget(160 * MiB));
  EXPECT_FALSE(p.calibrate_fetch_cap);
  EXPECT_EQ(p.fetch_policy(1).cpu_cost, 2 * kFetchCostUnit);
  EXPECT_EQ(p.fetch_policy(1).cpu_token_cost, kFetchCostUnit / 4);
  EXPECT_EQ(p.fetch_policy(1).cap, -1);
  EXPECT_NE(p.summary().find("by cost (an expert on the CPU 2 fetches, +0.25 a further token)"), std::string::npos)
      << p.summary();
}

TEST(MoePlan, ExplicitStrategies) {
  MoeOptions o;
  o.strategy = MoeStrategy::kHybrid;
  MoePlan p = plan_moe(o, kLayers, budget(GiB));
  EXPECT_TRUE(p.calibrate_fetch_cap);
  EXPECT_EQ(p.cache.n_slots, 96);  // auto sizing stops at all experts
  o.strategy = MoeStrategy::kCpu;
  p = plan_moe(o, kLayers, budget(110 * MiB));  // no room for a cache: cpu needs none
  EXPECT_EQ(p.count(MoeLayerMode::kCpu), 6);
  EXPECT_EQ(p.cache.n_slots, 0);
  o.strategy = MoeStrategy::kOffload;
  o.cpu_layers = "1,2";
  o.cache = {CacheSizeMode::kSlots, 32, 0};
  p = plan_moe(o, kLayers, budget(GiB));
  EXPECT_EQ(p.layers[1], MoeLayerMode::kCpu);
  EXPECT_EQ(p.layers[3], MoeLayerMode::kCache);
  EXPECT_EQ(p.cache.n_slots, 32);
  // which layers, too: "1" (the first layer) and "1," (layer 1) print the same count
  EXPECT_NE(p.summary().find("2 of 6 MoE layers on the CPU (layers 1-2)"), std::string::npos) << p.summary();
  o.cpu_layers = "1,4";
  EXPECT_NE(plan_moe(o, kLayers, budget(GiB)).summary().find("(layers 1,4)"), std::string::npos);
  o.cpu_layers = "6";  // every MoE layer on the CPU: no cache needed
  p = plan_moe(o, kLayers, budget(110 * MiB));
  EXPECT_EQ(p.cache.n_slots, 0);
  o.strategy = MoeStrategy::kHybrid;  // ... nor a fetch cap to print (it said "fetch cap -1")
  o.fetch_cap = 2;
  p = plan_moe(o, kLayers, budget(110 * MiB));
  EXPECT_EQ(p.summary().find("fetch cap"), std::string::npos) << p.summary();
  EXPECT_EQ(p.summary().find("prefetch"), std::string::npos) << p.summary();
  p.prefetch = true;  // set by the runtime
  EXPECT_NE(p.summary().find(", next-layer prefetch"), std::string::npos) << p.summary();
  p.prefetch_note = "--moe-prefetch-depth 2 needs 32 slots";  // the runtime's reason for a lower depth
  EXPECT_NE(p.summary().find(", next-layer prefetch (--moe-prefetch-depth 2 needs 32 slots)"), std::string::npos)
      << p.summary();
  p.prefetch_depth = 2, p.prefetch_note.clear();
  EXPECT_NE(p.summary().find(", prefetch 2 cache layers ahead"), std::string::npos) << p.summary();
  EXPECT_EQ(p.summary().find("int8"), std::string::npos) << p.summary();
  p.cpu_int8 = true;  // set by the runtime (--moe-cpu-int8 where the kernels run), so ft bench's moe_plan records it
  EXPECT_NE(p.summary().find(", CPU int8 activations for Q4_K/Q6_K/MXFP4"), std::string::npos) << p.summary();
  o.strategy = MoeStrategy::kOffload;
  o.fetch_cap = -1;
  // auto with CPU layers means offload.
  o.strategy = MoeStrategy::kAuto;
  o.cpu_layers = "1";
  EXPECT_EQ(plan_moe(o, kLayers, budget(GiB)).strategy, MoeStrategy::kOffload);
}

TEST(MoePlan, CacheIsSizedForTheLayersThatUseIt) {
  // --moe-cpu-layers' layers take no slots: with 2 of the 6 MoE layers on the CPU, the cache of
  // every expert that goes through it is 4 x 16 = 64 slots, not 96 (it was sized, and capped, for all).
  MoeOptions o;
  o.strategy = MoeStrategy::kOffload;
  o.cpu_layers = "1,2";
  MoePlan p = plan_moe(o, kLayers, budget(GiB));
  EXPECT_EQ(p.cache_experts, 64);
  EXPECT_EQ(p.cache.n_slots, 64);  // --moe-cache-auto with room for every expert
  o.cache = {CacheSizeMode::kSlots, 90, 0};
  p = plan_moe(o, kLayers, budget(GiB));
  EXPECT_EQ(p.cache.n_slots, 64);
  EXPECT_NE(p.cache.note.find("--moe-cache-slots 90 reduced to 64, every routed expert that goes through the cache"),
            std::string::npos) << p.cache.note;
  o.cache = {CacheSizeMode::kRate, 0, 0.75};  // a fraction of those 64
  EXPECT_EQ(plan_moe(o, kLayers, budget(GiB)).cache.n_slots, 48);
  o.cpu_layers = "";
  EXPECT_EQ(plan_moe(o, kLayers, budget(GiB)).cache.n_slots, 72);  // of all 96
  EXPECT_EQ(plan_moe(o, kLayers, budget(GiB)).cache_experts, 96);
  o.cpu_layers = "1,";  // one CPU layer is named as one
  EXPECT_NE(plan_moe(o, kLayers, budget(GiB)).summary().find("1 of 6 MoE layers on the CPU (layer 1)"), std::string::npos);
}

TEST(MoePlan, Errors) {
  MoeOptions o;
  o.strategy = MoeStrategy::kFused;
  ErrorCode code{};
  try {
    plan_moe(o, kLayers, budget(160 * MiB));
  } catch (const Error& e) {
    code = e.code();
    EXPECT_NE(std::string(e.what()).find("--moe-strategy offload"), std::string::npos) << e.what();
  }
  EXPECT_EQ(code, ErrorCode::kOutOfMemory);
  o.cpu_layers = "1";
  EXPECT_THROW(plan_moe(o, kLayers, budget(GiB)), Error);  // cpu layers with fused
  o = {};
  o.strategy = MoeStrategy::kCpu;
  EXPECT_THROW(plan_moe(o, kLayers, budget(100 * MiB)), Error);  // dense weights + KV do not fit
  try {  // 100.5 MiB: 512 KiB beside the resident weights, 512 tokens of 1 KiB; the reserve wants 1024
    plan_moe(o, kLayers, budget(100 * MiB + 512 * 1024));
    ADD_FAILURE() << "planned without room for the KV reserve";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("about 512 KV tokens fit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_moe(o, {0, 0}, budget(GiB)), Error);          // no MoE layers
  EXPECT_EQ(plan_moe({}, {0, 0}, budget(GiB)).count(MoeLayerMode::kDense), 2);
  {  // a dense model refuses the flags that only an expert cache uses, as it refuses the strategies
    MoeOptions d;
    d.cache = {CacheSizeMode::kSlots, 4, 0.0};
    try {
      plan_moe(d, {0, 0}, budget(GiB));
      ADD_FAILURE() << "--moe-cache-slots accepted on a dense model";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--moe-cache-slots: the model has no routed experts"), std::string::npos)
          << e.what();
    }
    d = {};
    d.cpu_layers = "1";
    EXPECT_THROW(plan_moe(d, {0, 0}, budget(GiB)), Error);
    d = {};
    d.prefetch = MoeOptions::Prefetch::kOn;
    EXPECT_THROW(plan_moe(d, {0, 0}, budget(GiB)), Error);
    d = {};
    d.prefetch_depth_given = true;  // it was accepted silently
    EXPECT_THROW(plan_moe(d, {0, 0}, budget(GiB)), Error);
  }
  o.strategy = MoeStrategy::kOffload;  // smallest legal cache = 32 slots > 16 that fit
  EXPECT_THROW(plan_moe(o, kLayers, budget(117 * MiB)), Error);
}

}  // namespace
}  // namespace ft::testing
