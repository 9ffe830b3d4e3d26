// RankGroup on CUDA (engine/rank_group.h): tensor parallelism over 2 GPUs, rank r on device r, over
// NCCL (loaded at run time). On the qwen3 and qwen3_moe fixtures the group's logits (the prompt's
// every row, then greedy decode steps replayed from CUDA graphs that capture the forward's NCCL
// all-reduces) equal one CUDA engine's within 2e-2 relative L2 (NCCL's sums and each rank's partial
// matmuls are not one GPU's bit for bit), and its greedy tokens through the serving loop (batched, graph
// decode) are one CUDA engine's. More ranks than GPUs are refused (every build). Needs 2 CUDA devices and libnccl.so.2: skipped otherwise (with no
// device at all FT_REQUIRE_GPU=1 makes that a failure; with NCCL absent too).
#include <gtest/gtest.h>

#include <algorithm>

#include "../model/fixture_util.h"
#include "backend/cuda_factory.h"
#include "backend/device.h"
#include "backend/op_harness.h"
#include "dist/nccl_factory.h"
#include "engine/engine_runner.h"
#include "engine/rank_group.h"
#include "engine/service.h"
#include "engine/service_testing.h"

namespace ft::testing {
namespace {

/** Small options on CUDA, decode graphs up to 4 sequences. */
EngineOptions cuda_options() {
  EngineOptions o = small_engine_options();
  o.device = DeviceChoice::kCuda;
  o.cuda_graph_max_bs = 4;
  return o;
}

class CudaRankGroup : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const int n = cuda_device_count();
    if (n == 0 && gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
    if (n < 2) GTEST_SKIP() << "needs 2 CUDA devices, " << n << " visible";
    if (!dist::nccl_available()) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but NCCL is not available: " << dist::nccl_unavailable_reason();
      GTEST_SKIP() << dist::nccl_unavailable_reason();
    }
    dir_ = shared_dir() + "/fixtures/hf/" + GetParam();
  }

  /** One CUDA engine on device 0 (Engine::load's backend: F32 activations). */
  std::unique_ptr<Engine> one() const {
    return std::make_unique<Engine>(open_checkpoint(dir_), make_cuda_ops(0, DType::F32), cuda_options());
  }
  std::unique_ptr<RankGroup> group() const {
    EngineOptions o = cuda_options();
    o.tensor_parallel = 2;
    return RankGroup::load(open_checkpoint(dir_), dir_, o);
  }

  std::string dir_;
};

TEST_P(CudaRankGroup, Tp2StepsEqualOneGpu) {
  const std::vector<RefCase> refs = read_reference(dir_);
  ASSERT_FALSE(refs.empty()) << dir_;
  auto single = one();
  auto grp = group();
  ASSERT_EQ(grp->size(), 2);
  EXPECT_EQ(grp->leader().graph_batch_sizes(), (std::vector<int32_t>{1, 2, 4}));
  EngineRunner one_runner(*single);
  const int64_t V = single->config().n_vocab;
  ASSERT_EQ(grp->runner().vocab_size(), V);
  for (const RefCase& ref : refs) {
    std::vector<int32_t> seq = ref.input_ids;
    BlockTable t1, tg;
    const int64_t total = static_cast<int64_t>(seq.size() + ref.greedy.size());
    ASSERT_TRUE(t1.reserve(single->kv().pool(), total));
    ASSERT_TRUE(tg.reserve(grp->leader().kv().pool(), total));
    const auto n = static_cast<int64_t>(seq.size());
    const std::span<const float> a = one_runner.forward(StepBatch{{{&t1.pages(), 0, seq.data(), n, n}}});
    const std::vector<float> single_logits(a.begin(), a.end());
    const std::span<const float> b = grp->runner().forward(StepBatch{{{&tg.pages(), 0, seq.data(), n, n}}});
    const std::vector<float> grouped(b.begin(), b.end());
    EXPECT_LE(max_row_rel_l2(grouped, single_logits, V), 2e-2) << GetParam() << " " << ref.name << " prompt";
    // Decode steps of one sequence: the first records batch size 1's graph (after an eager run), the
    // rest replay it, NCCL all-reduces included.
    for (size_t k = 0; k + 1 < ref.greedy.size(); ++k) {
      seq.push_back(ref.greedy[k]);
      const int64_t pos = static_cast<int64_t>(seq.size()) - 1;
      const std::span<const float> x = one_runner.forward(StepBatch{{{&t1.pages(), pos, &seq[pos], 1, 1}}});
      const std::vector<float> xs(x.begin(), x.end());
      const std::span<const float> y = grp->runner().forward(StepBatch{{{&tg.pages(), pos, &seq[pos], 1, 1}}});
      EXPECT_LE(row_rel_l2(y.data(), xs.data(), V), 2e-2) << GetParam() << " " << ref.name << " decode step " << k;
    }
    t1.release(single->kv().pool());
    tg.release(grp->leader().kv().pool());
  }
  EXPECT_GT(grp->leader().graph_replays(), 0) << "no decode step was replayed from a CUDA graph";
  EXPECT_EQ(grp->failure(), "");
}

/** Each reference prompt's greedy tokens, the prompts served together through `runner`. */
std::vector<std::vector<int32_t>> served_greedy(ModelRunner& runner, Engine& leader, const std::vector<RefCase>& refs) {
  ServiceConfig sc;
  sc.scheduler.max_running = 4;
  sc.check_integrity = true;
  EngineService svc(runner, leader.kv().pools(), sc);
  std::vector<std::shared_ptr<CollectSink>> sinks;
  for (const RefCase& ref : refs) {
    sinks.push_back(std::make_shared<CollectSink>());
    svc.submit(greedy(ref.input_ids, static_cast<int32_t>(ref.greedy.size()), sinks.back()));
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& s : sinks) {
    EXPECT_EQ(s->wait().reason, FinishReason::kLength);
    out.push_back(s->tokens);
  }
  svc.shutdown(std::chrono::milliseconds(0));
  return out;
}

TEST_P(CudaRankGroup, Tp2ServedGreedyTokensEqualOneGpu) {
  const std::vector<RefCase> refs = read_reference(dir_);
  ASSERT_FALSE(refs.empty()) << dir_;
  std::vector<std::vector<int32_t>> want;
  {
    auto single = one();
    EngineRunner r(*single);
    want = served_greedy(r, *single, refs);
  }
  auto grp = group();
  const std::vector<std::vector<int32_t>> got = served_greedy(grp->runner(), grp->leader(), refs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(got[i], want[i]) << GetParam() << " " << refs[i].name;
  EXPECT_EQ(grp->failure(), "");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaRankGroup, ::testing::Values("qwen3", "qwen3_moe"),
                         [](const auto& info) { return info.param; });

TEST(CudaRankGroupRefusals, MoreRanksThanGpusAreRefused) {  // any build, any machine: needs no GPU
  // (a build without CUDA says so instead)
  const int n = cuda_device_count(), ranks = std::max(2, n + 1);
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3";
  EngineOptions o = cuda_options();
  o.tensor_parallel = ranks;
  try {
    RankGroup::load(open_checkpoint(dir), dir, o);
    ADD_FAILURE() << "a group of " << ranks << " ranks on " << n << " GPUs loaded";
  } catch (const Error& e) {
    if (!cuda_built()) {  // the build's reason first, not "0 visible" (a fresh user's trial)
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("this build of FreeToken has no CUDA backend"), std::string::npos) << e.what();
      return;
    }
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(fmt::format("--tensor-parallel-size {} needs {} GPUs, {} visible", ranks,
                                                     ranks, n)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ft::testing
