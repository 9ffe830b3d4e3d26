// EngineOptions' typed fields and validate(): the names the flags spell, and the checks that need no
// model, each naming its flag (the engine calls validate() first; `ft` after parsing).
#include <gtest/gtest.h>

#include <functional>

#include "engine/engine_options.h"
#include "util/error.h"

namespace ft {
namespace {

TEST(EngineOptions, NamesRoundTripAndOthersAreNone) {
  for (DeviceChoice d : {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda})
    EXPECT_EQ(device_choice_from_name(device_choice_name(d)), d);
  for (KvCacheDtype t : {KvCacheDtype::kAuto, KvCacheDtype::kF32, KvCacheDtype::kBf16, KvCacheDtype::kFp8,
                         KvCacheDtype::kQ8_0})
    EXPECT_EQ(kv_cache_dtype_from_name(kv_cache_dtype_name(t)), t);
  for (EmbedPlacement p : {EmbedPlacement::kAuto, EmbedPlacement::kDevice, EmbedPlacement::kHost})
    EXPECT_EQ(embed_placement_from_name(embed_placement_name(p)), p);
  EXPECT_STREQ(kv_cache_dtype_name(KvCacheDtype::kQ8_0), "q8_0");
  EXPECT_EQ(device_choice_from_name("gpu"), std::nullopt);
  EXPECT_EQ(kv_cache_dtype_from_name("f16"), std::nullopt);  // -ctk f16 is translated to bf16 by `ft`
  EXPECT_EQ(kv_cache_dtype_from_name("fp4"), std::nullopt);
  EXPECT_EQ(embed_placement_from_name("pinned"), std::nullopt);
}

/** validate()'s message for `o` changed by `edit` ("" when it passes). */
std::string refusal(const std::function<void(EngineOptions&)>& edit) {
  EngineOptions o;
  edit(o);
  try {
    o.validate();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(EngineOptions, ValidateNamesTheFlag) {
  EXPECT_EQ(refusal([](EngineOptions&) {}), "");
  EXPECT_EQ(refusal([](EngineOptions& o) { o.gpu_memory_limit = -5; }), "--gpu-memory-limit must be > 0 (got -5 bytes)");
  EXPECT_EQ(refusal([](EngineOptions& o) { o.host_memory_limit = -5; }), "--host-memory-limit must be > 0 (got -5 bytes)");
  EXPECT_EQ(refusal([](EngineOptions& o) { o.state_snapshots = kMaxStateSnapshots + 1; }),
            "--state-snapshots must be in [0, 4096] (got 4097)");
  EXPECT_EQ(refusal([](EngineOptions& o) { o.swa_kv_tokens = -1; }), "--swa-kv-tokens must be >= 0 (got -1)");
  EXPECT_EQ(refusal([](EngineOptions& o) { o.decode_log_interval = -2; }), "--decode-log-interval -2 must be >= 0");
  EXPECT_EQ(refusal([](EngineOptions& o) { o.cuda_graph_max_bs = -1; }), "engine: --cuda-graph-max-bs -1 must be >= 0");
  EXPECT_EQ(refusal([](EngineOptions& o) { o.max_seqs = 0; }),
            "engine: max_step_tokens 8192, max_logit_rows 256, max_seqs 0 must be >= 1");
  EXPECT_EQ(refusal([](EngineOptions& o) { o.kv_host_gib = -1; }),
            "--kv-host-gib must be between 0 (off) and 1e6 GiB (got -1)");
  EXPECT_NE(refusal([](EngineOptions& o) { o.prompt_cache_gib = 0; }).find("--prompt-cache-gib must be > 0"),
            std::string::npos);
  EXPECT_EQ(refusal([](EngineOptions& o) { o.kv_reserve_tokens = -1; }), "");  // -1: the KV cache allocated
}

TEST(EngineOptions, ValidateRefusesMoeCombinations) {
  auto moe = [](MoeStrategy s, const std::function<void(MoeOptions&)>& edit) {
    return refusal([&](EngineOptions& o) {
      o.moe.strategy = s;
      edit(o.moe);
    });
  };
  EXPECT_EQ(moe(MoeStrategy::kFused, [](MoeOptions& m) { m.cache = {CacheSizeMode::kSlots, 128, 0.0}; }),
            "--moe-cache-slots needs --moe-strategy auto, offload or hybrid (fused has no expert cache)");
  EXPECT_EQ(moe(MoeStrategy::kAuto, [](MoeOptions& m) { m.cache = {CacheSizeMode::kRate, 0, 1.5}; }),
            "--moe-cache-rate 1.5 must be in (0, 1]");
  EXPECT_EQ(moe(MoeStrategy::kOffload, [](MoeOptions& m) { m.fetch_cap = 1; }),
            "--moe-fetch-cap needs --moe-strategy hybrid (not offload)");
  EXPECT_EQ(moe(MoeStrategy::kHybrid, [](MoeOptions& m) { m.fetch_cap = 1; }), "");
  EXPECT_EQ(moe(MoeStrategy::kHybrid,
                [](MoeOptions& m) {
                  m.cpu_cost = 1024;
                  m.recalibrate = true;
                }),
            "--moe-calibrate with --moe-cpu-cost: that flag sets the split the calibration would time; give one");
  EXPECT_EQ(moe(MoeStrategy::kOffload,
                [](MoeOptions& m) {
                  m.prefetch_depth = 2;
                  m.prefetch_depth_given = true;
                  m.prefetch = MoeOptions::Prefetch::kOff;
                }),
            "--moe-prefetch-depth with --moe-prefetch off: there is no prefetch to deepen");
  EXPECT_EQ(moe(MoeStrategy::kOffload, [](MoeOptions& m) { m.prefetch_depth = 5; }),
            "--moe-prefetch-depth 5 must be 1 to 4");
  EXPECT_NE(moe(MoeStrategy::kFused, [](MoeOptions& m) { m.bank_format = BankFormat::kEc12; })
                .find("--moe-bank-format ec12 needs expert banks"),
            std::string::npos);
}

}  // namespace
}  // namespace ft
