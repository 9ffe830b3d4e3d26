// Engine::resize_caches on the CUDA backend (POST /v1/admin/cache): the decode graphs recorded over the
// old KV pool, step buffers and expert slots are dropped and recorded again over the new ones, so
// after a resize of the KV cache (and, for MoE offload, of the expert cache) graphed decode still
// equals eager decode bit for bit, with the graphs replayed again.
#include "graph_decode.h"
#include "backend/cuda_factory.h"
#include "backend/op_harness.h"

namespace ft::testing {
namespace {

class CudaCacheResize : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible (set FT_REQUIRE_GPU=1 to make this a failure)";
    }
  }
};

TEST_P(CudaCacheResize, GraphsAreRecordedAgainOverTheNewBuffers) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 4;
  int64_t smallest = 0;  // offload with the smallest legal cache (2 x experts per layer), as cuda_graph_test
  {
    Engine probe(open_checkpoint(dir), make_cuda_ops(0), o);
    if (probe.moe_plan()) smallest = std::min<int64_t>(2 * probe.config().n_expert, probe.moe_budget()->total_experts);
  }
  if (smallest > 0) {
    o.moe.strategy = MoeStrategy::kOffload;
    o.moe.cache = {CacheSizeMode::kSlots, smallest, 0.0};
  }
  Engine graphed(open_checkpoint(dir), make_cuda_ops(0), o);
  o.cuda_graph_max_bs = 0;
  Engine eager(open_checkpoint(dir), make_cuda_ops(0), o);
  const auto reqs = graph_decode_requests(read_reference(dir));
  expect_graph_equals_eager(graphed, eager, reqs);
  CacheResize r;
  r.kv_tokens = 2048;
  if (smallest > 0 && smallest < graphed.moe_budget()->total_experts)
    r.expert_slots = std::min<int64_t>(smallest + graphed.config().n_expert, graphed.moe_budget()->total_experts);
  for (Engine* e : {&graphed, &eager}) e->resize_caches(r);
  EXPECT_EQ(graphed.memory_plan().kv_tokens, 2048);
  EXPECT_EQ(graphed.kv().pool().n_pages(), 128);
  if (r.expert_slots) {
    EXPECT_EQ(graphed.moe_plan()->cache.n_slots, *r.expert_slots);
  }
  expect_graph_equals_eager(graphed, eager, reqs);  // its replays count from the resize
}

INSTANTIATE_TEST_SUITE_P(Models, CudaCacheResize, ::testing::Values("qwen3", "qwen2_moe", "qwen3_next"));

}  // namespace
}  // namespace ft::testing
