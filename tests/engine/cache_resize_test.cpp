// Engine::resize_caches on the CPU backend: after the KV cache and the expert cache are resized the
// engine generates the same greedy tokens and logits as before (offload equals fused bit for bit at any
// cache size); the plan shows the new sizes; check_resize refuses sizes it cannot take (no expert
// cache, a KV pool below the longest request, nothing asked) and a refused resize keeps the old sizes.
#include <gtest/gtest.h>

#include "graph_decode.h"
#include "util/error.h"

namespace ft::testing {
namespace {

std::vector<GenerateResult> run(Engine& e, const std::vector<GenerateRequest>& reqs) { return generate(e, reqs); }

void expect_same(const std::vector<GenerateResult>& a, const std::vector<GenerateResult>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_TRUE(same_bits(a[i].step_logits, b[i].step_logits)) << "request " << i;
  }
}

ErrorCode code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kInternal;  // not thrown: no code of a refusal
}

TEST(CacheResize, OffloadGeneratesTheSameAfterBothCachesResize) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe";
  EngineOptions o = small_engine_options();
  o.device = DeviceChoice::kCpu;
  o.moe.strategy = MoeStrategy::kOffload;
  int64_t smallest = 0, total = 0, n_expert = 0;
  {
    auto probe = Engine::load(dir, o);
    n_expert = probe->config().n_expert;
    total = probe->moe_budget()->total_experts;
    smallest = std::min<int64_t>(2 * n_expert, total);
  }
  o.moe.cache = {CacheSizeMode::kSlots, smallest, 0.0};
  auto e = Engine::load(dir, o);
  const auto reqs = graph_decode_requests(read_reference(dir));
  const auto before = run(*e, reqs);
  CacheResize r;
  r.kv_tokens = 300;  // whole pages: 304
  r.expert_slots = std::min<int64_t>(smallest + n_expert, total);
  e->resize_caches(r);
  EXPECT_EQ(e->memory_plan().kv_tokens, 304);
  EXPECT_EQ(e->kv().pool().n_pages(), 19);
  EXPECT_EQ(e->moe_plan()->cache.n_slots, *r.expert_slots);
  ASSERT_TRUE(e->moe_report().has_value());
  EXPECT_EQ(e->moe_report()->cache_slots, *r.expert_slots);
  expect_same(run(*e, reqs), before);
  // Too few slots: refused by the planner, the sizes stay and it still generates the same.
  EXPECT_EQ(code_of([&] { e->resize_caches(CacheResize{1, std::nullopt}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e->moe_plan()->cache.n_slots, *r.expert_slots);
  EXPECT_EQ(e->memory_plan().kv_tokens, 304);
  expect_same(run(*e, reqs), before);
}

TEST(CacheResize, DenseModelsResizeTheirKvOnly) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3";
  EngineOptions o = small_engine_options();
  o.device = DeviceChoice::kCpu;
  auto e = Engine::load(dir, o);
  const auto reqs = graph_decode_requests(read_reference(dir));
  const auto before = run(*e, reqs);
  EXPECT_EQ(code_of([&] { e->check_resize(CacheResize{64, std::nullopt}, 0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { e->check_resize(CacheResize{}, 0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { e->check_resize(CacheResize{std::nullopt, 100}, 120); }), ErrorCode::kInvalidArgument);
  e->check_resize(CacheResize{std::nullopt, 100}, 112);  // 7 whole pages hold 112
  e->resize_caches(CacheResize{std::nullopt, 4096});
  EXPECT_EQ(e->memory_plan().kv_tokens, 4096);
  expect_same(run(*e, reqs), before);
}

}  // namespace
}  // namespace ft::testing
