// Expert parallelism over the offload, hybrid and cpu strategies on the CPU build: each rank builds
// its own OffloadedExperts (make_expert_compute) over only the experts it owns (slice_banks), with
// its own small expert cache (the host twins of the device cache) and CPU expert pool, behind
// ExpertParallelExperts, as each rank of a group runs it. EP2 and EP4 give one rank's fused logits
// within float order, bit-identical across ranks.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "dist/in_process_collective.h"
#include "moe/expert_parallel_experts.h"
#include "moe/offloaded_experts.h"
#include "model_run.h"
#include "moe_test_util.h"
#include "test_util.h"

namespace ft::testing {
namespace {

struct EpVariant {
  const char* name;
  MoeStrategy strategy;
  int32_t cap;             // fetch cap (hybrid), -1: none
  int64_t stream_min = 0;  // MoeRuntimeOptions::stream_min_tokens (0: the default, no step streams)
  bool prefetch = false;   // MoeRuntimeOptions::prefetch
  const char* cpu_layers = "";  // --moe-cpu-layers
};

const EpVariant kEpVariants[] = {
    {"offload, smallest cache", MoeStrategy::kOffload, -1},
    {"offload, streamed prefill", MoeStrategy::kOffload, -1, 4},
    {"offload, prefetch", MoeStrategy::kOffload, -1, 0, true},
    {"hybrid, cap 1", MoeStrategy::kHybrid, 1},
    {"hybrid, cap 1, prefetch", MoeStrategy::kHybrid, 1, 0, true},
    {"cpu", MoeStrategy::kCpu, -1},
    {"offload + cpu layer 1", MoeStrategy::kOffload, -1, 0, false, "1"},
};

/** The rank's strategy over its owned banks: the smallest legal cache (2 x its experts a layer). */
std::unique_ptr<ExpertCompute> make_rank_strategy(Ops& ops, const HostExpertBanks& owned, const EpVariant& v,
                                                  int64_t max_tokens, int32_t k) {
  int64_t n_local = 0;
  for (const ExpertBank& b : owned) n_local = std::max<int64_t>(n_local, b.n_expert());
  MoeRuntimeOptions ro;
  ro.max_tokens = max_tokens, ro.n_expert_used = k, ro.cpu_threads = 1, ro.prefetch = v.prefetch;
  if (v.stream_min > 0) ro.stream_min_tokens = v.stream_min;
  return make_expert_compute(ops, owned, make_plan(owned, v.strategy, 2 * n_local, v.cap, v.cpu_layers), ro);
}

TEST(ExpertParallelExperts, OverOffloadSameLogitsAsOneRankFused) {
  // gpt_oss: expert biases; qwen3_moe_64e: k = 8; gemma4_moe: GEGLU experts; gpt_oss_mxfp4: MXFP4 banks.
  const std::string hf = shared_dir() + "/fixtures/hf/", own = source_dir() + "/tests/model/fixtures/";
  for (const std::string& dir : {hf + "qwen3_moe", hf + "gpt_oss", hf + "qwen3_moe_64e", own + "gemma4_moe",
                                 own + "gpt_oss_mxfp4"}) {
    SCOPED_TRACE(dir);
    const bool gemma4 = dir.ends_with("gemma4_moe");
    const std::vector<int32_t> tokens = fixture_tokens(dir);
    const int64_t prefill = static_cast<int64_t>(tokens.size()) - 4;  // then 4 decode steps
    CpuOps ops(1);
    LoadedModel one = load_for_run(dir, ops);
    ResidentExperts fused(ops, one.model->host_experts());
    const std::vector<float> want = run_model(*one.model, ops, fused, tokens, prefill);
    const auto k = static_cast<int32_t>(one.model->config().n_expert_used);
    for (const EpVariant& v : kEpVariants)
      for (int n : {2, 4}) {
        SCOPED_TRACE(std::string(v.name) + ", ranks " + std::to_string(n));
        const auto group = dist::make_in_process_group(n);
        std::vector<std::vector<float>> got(static_cast<size_t>(n));
        std::vector<MoeLayerStats> stats(static_cast<size_t>(n));
        dist::run_ranks(group, [&](dist::Collective& comm) {
          CpuOps rank_ops(1);
          LoadedModel m = load_for_run(dir, rank_ops);  // each rank its own model, KV, cache and CPU pool
          ExpertParallelExperts ep(comm, rank_ops, m.model->host_experts(), [&](const HostExpertBanks& owned) {
            return make_rank_strategy(rank_ops, owned, v, prefill, k);
          });
          got[static_cast<size_t>(comm.rank())] = run_model(*m.model, rank_ops, ep, tokens, prefill);
          ep.check();
          auto* off = dynamic_cast<OffloadedExperts*>(&ep.inner());
          ASSERT_NE(off, nullptr);
          stats[static_cast<size_t>(comm.rank())] = total_moe_stats(off->stats());
        });
        for (int r = 0; r < n; ++r) {
          const auto& g = got[static_cast<size_t>(r)];
          const MoeLayerStats& st = stats[static_cast<size_t>(r)];
          ASSERT_EQ(g.size(), want.size()) << "rank " << r;
          EXPECT_LT(rel_l2(g, want), 1e-5) << "rank " << r;
          EXPECT_EQ(std::memcmp(g.data(), got[0].data(), g.size() * 4), 0) << "rank " << r;
          EXPECT_GT(st.misses + st.cpu_experts, 0) << "rank " << r;  // its own cache / CPU pool did the work
          EXPECT_EQ(st.cpu_experts > 0, v.strategy != MoeStrategy::kOffload || *v.cpu_layers) << "rank " << r;
          // Gemma 4's MoE block predicts no later layer's routes (no prefetch targets).
          EXPECT_EQ(st.prefetched > 0, v.prefetch && !gemma4) << "rank " << r;
        }
      }
  }
}

}  // namespace
}  // namespace ft::testing
