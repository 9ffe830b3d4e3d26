// Expert banks split between host and GPU memory (issue 36): split_banks moves whole layers, last
// first, until host memory holds the rest, and refuses a plan that fits neither side, naming the bytes
// of both; plan_moe charges the moved layers to the GPU before it sizes the expert cache.
#include <gtest/gtest.h>

#include "moe/moe_plan.h"
#include "plan_model.h"
#include "util/error.h"

namespace ft::testing {
namespace {

constexpr int64_t GiB = int64_t{1} << 30, MiB = int64_t{1} << 20;

std::string error_of(const std::function<void()>& f, ErrorCode code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(BankSplit, NothingMovesWhenHostHoldsEveryBank) {
  const std::vector<int64_t> bytes = {0, 10 * MiB, 10 * MiB, 10 * MiB};
  const std::vector<bool> movable = {false, true, true, true};
  for (int64_t limit : {int64_t{-1}, 30 * MiB, 100 * GiB}) {
    const BankSplit s = split_banks(bytes, movable, limit, 0, "");
    EXPECT_TRUE(s.gpu_layers.empty());
    EXPECT_EQ(s.host_bytes, 30 * MiB);
    EXPECT_EQ(s.gpu_bytes, 0);
  }
}

TEST(BankSplit, MovesTheFewestLastLayers) {
  const std::vector<int64_t> bytes = {0, 10 * MiB, 10 * MiB, 0, 10 * MiB, 10 * MiB};
  const std::vector<bool> movable = {false, true, true, false, true, true};
  // 40 MiB of banks: a limit one byte short moves one layer, 15 MiB moves three.
  BankSplit s = split_banks(bytes, movable, 40 * MiB - 1, 100 * MiB, "");
  EXPECT_EQ(s.gpu_layers, (std::vector<int64_t>{5}));
  EXPECT_EQ(s.host_bytes, 30 * MiB);
  EXPECT_EQ(s.gpu_bytes, 10 * MiB);
  s = split_banks(bytes, movable, 15 * MiB, 30 * MiB, "");
  EXPECT_EQ(s.gpu_layers, (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(s.host_bytes, 10 * MiB);
  EXPECT_EQ(s.gpu_bytes, 30 * MiB);
  s = split_banks(bytes, movable, 0, 40 * MiB, "");  // every layer resident
  EXPECT_EQ(s.gpu_layers, (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(s.host_bytes, 0);
  // Layers that may not move (CPU layers) stay: the one before them goes instead.
  s = split_banks(bytes, {false, true, true, false, false, false}, 30 * MiB, 100 * MiB, "");
  EXPECT_EQ(s.gpu_layers, (std::vector<int64_t>{2}));
}

TEST(BankSplit, NeitherSideFitsNamesBothSides) {
  const std::vector<int64_t> bytes = {GiB, GiB, GiB, GiB};
  const std::vector<bool> movable(4, true);
  // Host holds 1.5 GiB, so 3 GiB (layers 1-3) must go to a GPU with 2 GiB left.
  const std::string msg = error_of([&] { split_banks(bytes, movable, 3 * GiB / 2, 2 * GiB, "--host-memory-limit"); },
                                   ErrorCode::kOutOfMemory);
  for (const char* part : {"4.00 GiB of routed experts", "host memory holds 1.50 GiB (--host-memory-limit)",
                           "3.00 GiB of layers 1-3", "2.00 GiB left", "1.00 GiB missing"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  // CPU layers that must keep their banks and still do not fit.
  const std::string cpu = error_of([&] { split_banks(bytes, {true, true, false, false}, GiB, 100 * GiB, ""); },
                                   ErrorCode::kOutOfMemory);
  EXPECT_NE(cpu.find("2.00 GiB stay in host memory"), std::string::npos) << cpu;
  error_of([&] { split_banks(bytes, {true}, GiB, GiB, ""); }, ErrorCode::kInvalidArgument);
}

using plan_model::budget;  // moe_plan_test's model (plan_model.h)
using plan_model::kLayers;

TEST(BankSplit, PlanChargesMovedLayersBeforeTheCache) {
  MoeOptions o;
  o.strategy = MoeStrategy::kOffload;
  const MoePlan whole = plan_moe(o, kLayers, budget(300 * MiB));
  EXPECT_EQ(whole.count(MoeLayerMode::kResident), 0);
  EXPECT_EQ(whole.host_bank_bytes, 96 * MiB);

  o.host_bank_limit = 60 * MiB;  // 96 MiB of banks: layers 4, 6 and 7 (48 MiB) go resident
  o.host_limit_source = "--host-memory-limit";
  const MoePlan split = plan_moe(o, kLayers, budget(300 * MiB));
  EXPECT_EQ(split.strategy, MoeStrategy::kOffload);
  const std::vector<MoeLayerMode> want = {MoeLayerMode::kDense, MoeLayerMode::kCache, MoeLayerMode::kCache,
                                          MoeLayerMode::kCache, MoeLayerMode::kResident, MoeLayerMode::kDense,
                                          MoeLayerMode::kResident, MoeLayerMode::kResident};
  EXPECT_EQ(split.layers, want);
  EXPECT_EQ(split.gpu_bank_bytes, 48 * MiB);
  EXPECT_EQ(split.host_bank_bytes, 48 * MiB);
  EXPECT_EQ(split.cache_experts, 48);
  // The cache is sized from what the resident layers leave: 300 - 100 - 1 - 48 MiB, capped at its 48 experts.
  EXPECT_EQ(split.cache.n_slots, 48);
  EXPECT_NE(split.summary().find("3 of 6 MoE layers resident on the device (layers 4,6-7"), std::string::npos)
      << split.summary();
  // A tight GPU: 80 MiB left after the moved layers' 48 -> the cache gets what remains.
  const MoePlan tight = plan_moe(o, kLayers, budget(100 * MiB + MiB + 48 * MiB + 40 * MiB));
  EXPECT_EQ(tight.cache.n_slots, 40);

  // --moe-cpu-layers keep their banks; the moved layers come from the others.
  o.cpu_layers = "6-7";
  const MoePlan cpu = plan_moe(o, kLayers, budget(300 * MiB));
  EXPECT_EQ(cpu.layers[6], MoeLayerMode::kCpu);
  EXPECT_EQ(cpu.layers[7], MoeLayerMode::kCpu);
  EXPECT_EQ(cpu.count(MoeLayerMode::kResident), 3);  // layers 2-4
  EXPECT_EQ(cpu.layers[2], MoeLayerMode::kResident);

  // The cpu strategy's layers may move too (they then run as fused); everything moved is fused.
  MoeOptions c;
  c.strategy = MoeStrategy::kCpu;
  c.host_bank_limit = 0;
  const MoePlan all = plan_moe(c, kLayers, budget(300 * MiB));
  EXPECT_EQ(all.strategy, MoeStrategy::kFused);
  EXPECT_EQ(all.count(MoeLayerMode::kResident), 6);

  // Fused has no banks: the host bound does not apply.
  MoeOptions f;
  f.strategy = MoeStrategy::kFused;
  f.host_bank_limit = 0;
  EXPECT_EQ(plan_moe(f, kLayers, budget(300 * MiB)).count(MoeLayerMode::kResident), 6);
}

TEST(BankSplit, ImpossiblePlanFailsNamingBothSides) {
  MoeOptions o;
  o.strategy = MoeStrategy::kOffload;
  o.host_bank_limit = 16 * MiB;
  o.host_limit_source = "--host-memory-limit";
  // 80 MiB must move; the GPU leaves 150 - 100 - 1 = 49 MiB.
  const std::string msg = error_of([&] { plan_moe(o, kLayers, budget(150 * MiB)); }, ErrorCode::kOutOfMemory);
  for (const char* part : {"96.0 MiB of routed experts", "host memory holds 16.0 MiB (--host-memory-limit)",
                           "80.0 MiB of layers 2-4,6-7", "49.0 MiB left", "31.0 MiB missing"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  // Per-layer sizes given: they decide, not the expert counts.
  std::vector<int64_t> bytes = {0, 40 * MiB, 8 * MiB, 8 * MiB, 8 * MiB, 0, 8 * MiB, 24 * MiB};
  o.host_bank_limit = 60 * MiB;  // 96 MiB: layer 7 (24) and 6 (8) and 4 (8) -> 56 left
  const MoePlan p = plan_moe(o, kLayers, budget(300 * MiB), bytes);
  EXPECT_EQ(p.gpu_bank_bytes, 40 * MiB);
  EXPECT_EQ(p.count(MoeLayerMode::kResident), 3);
}

TEST(BankSplit, EveryLayerResidentSaysWhyAndWhichFlagsNoLongerApply) {
  // Host memory below one layer's banks (16 MiB): an explicit hybrid becomes fused; the plan says so.
  MoeOptions o;
  o.strategy = MoeStrategy::kHybrid;
  o.cache = {CacheSizeMode::kSlots, 40, 0.0};
  o.host_bank_limit = 10 * MiB;
  const MoePlan p = plan_moe(o, kLayers, budget(300 * MiB));
  EXPECT_EQ(p.strategy, MoeStrategy::kFused);
  EXPECT_EQ(p.count(MoeLayerMode::kResident), 6);
  EXPECT_EQ(p.unused_flags, "--moe-strategy hybrid and --moe-cache-slots 40");
  const std::string s = p.summary();
  for (const char* part : {"6 of 6 MoE layers resident on the device", "host memory holds 10.0 MiB of banks",
                           "every MoE layer runs fused", "(16.0 MiB: --host-memory-limit 0.0157 or more keeps one)",
                           "--moe-strategy hybrid and --moe-cache-slots 40 do not apply"})
    EXPECT_NE(s.find(part), std::string::npos) << part << " in: " << s;
  // Fused asked for: no banks, no such clause.
  o.strategy = MoeStrategy::kFused;
  o.cache = {};
  EXPECT_EQ(plan_moe(o, kLayers, budget(300 * MiB)).summary().find("resident on the device"), std::string::npos);
}

TEST(BankSplit, CacheRefusalNamesHostForcedLayersAndWhatFits) {
  // 48 MiB of host: layers 4, 6, 7 (48 MiB) go resident, leaving 150 - 100 - 1 - 48 = 1 MiB for a cache
  // whose minimum is 32 slots of 1 MiB. The least host memory that fits is 80 MiB (only layer 7, 16 MiB,
  // resident: 48 MiB of room for the 32 slots), not all 96 MiB; cpu needs just the 48 resident MiB.
  MoeOptions o;
  o.strategy = MoeStrategy::kOffload;
  o.host_bank_limit = 48 * MiB;
  o.host_limit_source = "--host-memory-limit";
  std::string msg = error_of([&] { plan_moe(o, kLayers, budget(150 * MiB)); }, ErrorCode::kOutOfMemory);
  for (const char* part : {"resident weights and buffers (48.0 MiB of them the routed experts of layers 4,6-7, resident "
                           "because host memory holds 48.0 MiB: --host-memory-limit) and",
                           "Raise --host-memory-limit to 0.0782 or more (80.0 MiB: fewer layers resident), or raise "
                           "--gpu-memory-limit",
                           "or run the routed experts on the CPU with --moe-strategy cpu"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  // --moe-cpu-layers 1-2 keep their banks, so layers 3-4 and 6-7 (64 MiB) would move: the split refuses.
  // The cpu strategy may move every layer and fits from 48 MiB of host memory: it says so.
  o.cpu_layers = "1-2";
  o.host_bank_limit = 40 * MiB;
  msg = error_of([&] { plan_moe(o, kLayers, budget(150 * MiB)); }, ErrorCode::kOutOfMemory);
  EXPECT_NE(msg.find("or --moe-strategy cpu with host memory of 48.0 MiB (--host-memory-limit 0.0469)"),
            std::string::npos) << msg;
  // The split itself refuses: 80 MiB would move to 49 MiB of room.
  o.cpu_layers.clear();
  o.host_bank_limit = 16 * MiB;
  msg = error_of([&] { plan_moe(o, kLayers, budget(150 * MiB)); }, ErrorCode::kOutOfMemory);
  EXPECT_NE(msg.find("of layers 2-4,6-7 must be resident on the device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("What would fit: host memory of 80.0 MiB (--host-memory-limit 0.0782) with this device budget, "
                     "or --moe-strategy cpu with host memory of 48.0 MiB (--host-memory-limit 0.0469), or 31.0 MiB "
                     "more device memory"), std::string::npos) << msg;
  // No host memory makes offload fit a device with room for less than the smallest cache.
  o.host_bank_limit = 0;
  msg = error_of([&] { plan_moe(o, kLayers, budget(130 * MiB)); }, ErrorCode::kOutOfMemory);
  EXPECT_NE(msg.find("no host memory makes offload fit this device budget"), std::string::npos) << msg;
}

TEST(BankSplit, LeastHostMemoryIsWhereSomeSplitFits) {
  // Two layers of 864 KiB, 1.6 MiB of room: one resident layer and 864 KiB of host fit (not the 1.7 MiB
  // of every bank); a single layer named as "layer", not "layers".
  const int64_t KiB = 1024, layer = 864 * KiB;
  std::string msg = error_of([&] { split_banks({layer, layer}, {true, true}, 105 * KiB, 1640 * KiB, ""); },
                             ErrorCode::kOutOfMemory);
  EXPECT_NE(msg.find("of layers 0-1 must be resident"), std::string::npos) << msg;
  EXPECT_NE(msg.find("host memory of 864.0 KiB (--host-memory-limit 0.000824)"), std::string::npos) << msg;
  msg = error_of([&] { split_banks({layer, layer, 0}, {true, true, false}, layer, 100 * KiB, ""); },
                 ErrorCode::kOutOfMemory);
  EXPECT_NE(msg.find("864.0 KiB of layer 1 must be resident"), std::string::npos) << msg;
  EXPECT_NE(msg.find("host memory of 1.7 MiB"), std::string::npos) << msg;  // nothing moved fits 100 KiB
  EXPECT_EQ(host_limit_gib(GiB / 2), "0.500");
  EXPECT_EQ(host_limit_gib(GiB / 2 + 1), "0.501");
  EXPECT_EQ(host_limit_gib(3 * GiB), "3.00");
}

}  // namespace
}  // namespace ft::testing
