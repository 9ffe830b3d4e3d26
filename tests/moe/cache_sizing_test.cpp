// plan_cache_size: --moe-cache-auto / -slots / -rate within a GPU memory budget, the 2 x experts
// per layer minimum, and errors that say how much memory is missing and which flags help.
#include <gtest/gtest.h>

#include "moe/cache_sizing.h"
#include "util/error.h"
#include "util/format.h"

namespace ft::testing {
namespace {

constexpr int64_t GiB = int64_t{1} << 30, MiB = int64_t{1} << 20;

/** qwen3-30b-a3b in bf16: 48 MoE layers x 128 experts of 3 x 768 x 2048 bf16 (9 MiB); KV of
 *  48 layers x 4 KV heads x 128 dims x (K + V) in bf16 per token. */
GpuMemoryBudget qwen3_30b(int64_t limit) {
  GpuMemoryBudget b;
  b.gpu_memory_limit = limit;
  b.resident_bytes = 2 * GiB;
  b.kv_bytes_per_token = 48 * 4 * 128 * 2 * 2;
  b.kv_reserve_tokens = 8192;
  b.slot_bytes = 9 * MiB;
  b.experts_per_layer = 128;
  b.total_experts = 48 * 128;
  b.expert_bytes = b.total_experts * b.slot_bytes;
  return b;
}

std::string error_of(const GpuMemoryBudget& b, const CacheSizeRequest& r, ErrorCode* code = nullptr) {
  try {
    plan_cache_size(b, r);
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

TEST(CacheSizing, AutoGivesEverythingThatFits) {
  const GpuMemoryBudget b = qwen3_30b(24 * GiB);
  const CacheSize s = plan_cache_size(b, {});
  const int64_t kv = 768 * MiB, avail = 24 * GiB - 2 * GiB - kv;
  EXPECT_EQ(s.kv_bytes, kv);
  EXPECT_EQ(s.n_slots, avail / (9 * MiB));  // 2417
  EXPECT_EQ(s.n_slots, 2417);
  EXPECT_EQ(s.pool_bytes, s.n_slots * 9 * MiB);
  EXPECT_GE(s.free_bytes, 0);
  EXPECT_LT(s.free_bytes, 9 * MiB);
  EXPECT_FALSE(s.experts_fit);
  EXPECT_TRUE(s.note.empty());
  // A big GPU: every expert fits; slots stop at the number of experts.
  const CacheSize all = plan_cache_size(qwen3_30b(80 * GiB), {});
  EXPECT_EQ(all.n_slots, 48 * 128);
  EXPECT_TRUE(all.experts_fit);
}

TEST(CacheSizing, ExplicitSlotsAndRate) {
  const GpuMemoryBudget b = qwen3_30b(24 * GiB);
  EXPECT_EQ(plan_cache_size(b, {CacheSizeMode::kSlots, 256, 0}).n_slots, 256);  // exactly 2 x 128
  EXPECT_EQ(plan_cache_size(b, {CacheSizeMode::kSlots, 2417, 0}).n_slots, 2417);
  const CacheSize big = plan_cache_size(qwen3_30b(80 * GiB), {CacheSizeMode::kSlots, 100000, 0});
  EXPECT_EQ(big.n_slots, 6144);
  EXPECT_NE(big.note.find("6144"), std::string::npos);
  EXPECT_EQ(plan_cache_size(b, {CacheSizeMode::kRate, 0, 0.25}).n_slots, 1536);
  EXPECT_EQ(plan_cache_size(b, {CacheSizeMode::kRate, 0, 0.1}).n_slots, 615);  // ceil(614.4)
  const CacheSize tiny = plan_cache_size(b, {CacheSizeMode::kRate, 0, 0.01});  // 62 < 256
  EXPECT_EQ(tiny.n_slots, 256);
  EXPECT_NE(tiny.note.find("raised to the minimum of 256 = 2 x experts per layer"), std::string::npos) << tiny.note;
  ErrorCode code{};
  EXPECT_NE(error_of(b, {CacheSizeMode::kSlots, 255, 0}, &code).find("--moe-cache-slots 255 is below the minimum of 256"),
            std::string::npos);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(error_of(b, {CacheSizeMode::kRate, 0, 0.0}).find("--moe-cache-rate 0 must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_of(b, {CacheSizeMode::kRate, 0, 1.5}).find("(0, 1]"), std::string::npos);
  // Requested more than fits: the missing amount and the flags.
  const std::string e = error_of(b, {CacheSizeMode::kSlots, 2500, 0}, &code);
  EXPECT_EQ(code, ErrorCode::kOutOfMemory);
  const int64_t missing = 2500 * 9 * MiB - (24 * GiB - 2 * GiB - 768 * MiB);
  EXPECT_NE(e.find(format_bytes(missing) + " missing"), std::string::npos) << e;
  EXPECT_NE(e.find("request fewer slots"), std::string::npos) << e;
  EXPECT_NE(e.find("--kv-reserve-tokens"), std::string::npos) << e;
}

TEST(CacheSizing, NotEvenTheSmallestCacheFits) {
  GpuMemoryBudget b = qwen3_30b(5 * GiB);  // 5 GiB - 0.75 GiB of KV - resident below
  b.resident_bytes = 3 * GiB;             // 1.25 GiB left, the minimum needs 2.25 GiB
  ErrorCode code{};
  const std::string e = error_of(b, {}, &code);
  EXPECT_EQ(code, ErrorCode::kOutOfMemory);
  EXPECT_NE(e.find("the smallest legal cache (256 slots of 9.0 MiB) needs 2.25 GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("leaves 1.25 GiB"), std::string::npos) << e;
  // The reserve is more than weights: activations and workspaces grow with the batch.
  EXPECT_NE(e.find("3.00 GiB of resident weights and buffers"), std::string::npos) << e;
  EXPECT_NE(e.find("1.00 GiB missing"), std::string::npos) << e;
  EXPECT_NE(e.find("--gpu-memory-limit"), std::string::npos);
  EXPECT_NE(e.find("--moe-strategy cpu"), std::string::npos);
  EXPECT_EQ(e.find("--kv-reserve-tokens to"), std::string::npos) << e;  // all the KV would not free 1 GiB
  // When dropping KV would be enough, the error says to how many tokens.
  b.resident_bytes = 2 * GiB + 512 * MiB;  // 1.75 GiB left: 512 MiB missing = 5462 tokens of 96 KiB
  const std::string e2 = error_of(b, {});
  EXPECT_NE(e2.find("lower --kv-reserve-tokens to 2730 or less"), std::string::npos) << e2;
  // Under ft serve the reserve is the KV pool (-c): the advice names -c and whole pages, since the pool
  // rounds -c up to pages (2730 would become 2736 and be refused again).
  b.kv_reserve_flag = "-c/--kv-tokens";
  b.kv_page_tokens = 16;
  const std::string e3 = error_of(b, {});
  EXPECT_NE(e3.find("lower -c/--kv-tokens to 2720 or less"), std::string::npos) << e3;
  EXPECT_NE(e3.find("of KV for -c/--kv-tokens 8192"), std::string::npos) << e3;
  // A model with a single MoE layer needs only its own experts.
  GpuMemoryBudget one = qwen3_30b(24 * GiB);
  one.total_experts = 128;
  EXPECT_EQ(plan_cache_size(one, {CacheSizeMode::kSlots, 128, 0}).n_slots, 128);
}

TEST(CacheSizing, RejectsBadBudgets) {
  GpuMemoryBudget b = qwen3_30b(24 * GiB);
  b.slot_bytes = 0;
  EXPECT_THROW(plan_cache_size(b, {}), Error);
  b = qwen3_30b(0);
  EXPECT_THROW(plan_cache_size(b, {}), Error);
  b = qwen3_30b(24 * GiB);
  b.kv_reserve_tokens = -1;
  EXPECT_NE(error_of(b, {}).find("--kv-reserve-tokens -1"), std::string::npos);
  b = qwen3_30b(24 * GiB);
  b.total_experts = 10;
  EXPECT_THROW(plan_cache_size(b, {}), Error);
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 * MiB / 2), "1.5 MiB");
}

}  // namespace
}  // namespace ft::testing
