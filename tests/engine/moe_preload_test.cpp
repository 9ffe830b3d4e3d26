// --moe-preload's fill, as the engine counts it (moe_report: /v1/stats, /metrics, the log windows),
// on the qwen3_moe_64e fixture (4 MoE layers of 64 experts) with a cache of 224 slots: the 96 outside
// the two staging regions of prefill (2 x 64), each layer's share, 24 experts, fetched at start and
// counted as prefetched. Hybrid's start-up calibration runs
// decode steps of its own after the fill; the counters leave out those steps only (trial: hybrid
// without --moe-fetch-cap reported 0 prefetched after a preload of 160, offload 160).
#include "../model/fixture_util.h"

namespace ft::testing {
namespace {

std::optional<MoeReport> report_at_start(MoeStrategy s, bool preload) {
  EngineOptions o = small_engine_options();
  o.moe.strategy = s;
  o.moe.cache = {CacheSizeMode::kSlots, 224, 0.0};
  o.moe.preload = preload;
  o.moe.bank_format = BankFormat::kStored;  // bytes: one slot a record
  auto engine = Engine::load(shared_dir() + "/fixtures/hf/qwen3_moe_64e", o);
  return engine->moe_report();
}

TEST(MoePreload, TheFillIsCountedAsPrefetchedAfterHybridsCalibration) {
  for (MoeStrategy s : {MoeStrategy::kOffload, MoeStrategy::kHybrid}) {
    SCOPED_TRACE(s == MoeStrategy::kHybrid ? "hybrid (calibrated at load)" : "offload");
    const std::optional<MoeReport> on = report_at_start(s, true);
    ASSERT_TRUE(on.has_value());
    EXPECT_EQ(on->calibration.has_value(), s == MoeStrategy::kHybrid);
    ASSERT_EQ(on->layers.size(), 4u);
    for (const MoeLayerReport& l : on->layers) {
      EXPECT_EQ(l.stats.prefetched, 24) << "layer " << l.layer;
      EXPECT_EQ(l.stats.hits + l.stats.misses + l.stats.cpu_experts, 0) << "layer " << l.layer;
      EXPECT_EQ(l.stats.bytes, 24 * on->slot_bytes) << "layer " << l.layer;  // BF16 stored: a record a slot
    }
    EXPECT_EQ(on->total.prefetched, 96);

    // No preload: nothing counted, the calibration's own fetches included.
    const std::optional<MoeReport> off = report_at_start(s, false);
    ASSERT_TRUE(off.has_value());
    EXPECT_EQ(off->total.prefetched, 0);
    EXPECT_EQ(off->total.bytes, 0);
    EXPECT_EQ(off->total.lookups(), 0);
  }
}

}  // namespace
}  // namespace ft::testing
