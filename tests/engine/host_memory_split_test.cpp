// Expert banks split between host and GPU memory through Engine::load (issue 36): with
// --host-memory-limit below the banks' size the last MoE layers go resident (the CPU backend's
// "device" is host memory too, so only the plan and the code path change) and greedy decoding keeps
// every token and logit of the unsplit run; a plan that fits neither side fails at load naming both.
#include <cstring>

#include "../model/fixture_util.h"
#include "engine/memory_plan.h"

namespace ft::testing {
namespace {

struct SplitRun {
  GenerateResult result;
  MoePlan plan;
  std::vector<MemoryRow> rows;
};

EngineOptions split_options(int64_t host_limit) {
  EngineOptions o = small_engine_options();
  o.moe.strategy = MoeStrategy::kOffload;
  o.moe.cpu_int8 = false;
  o.host_memory_limit = host_limit;
  return o;
}

SplitRun run(const std::string& dir, const EngineOptions& o, const RefCase& c) {
  auto engine = Engine::load(dir, o);
  GenerateRequest req = greedy_request(c.input_ids, 6);
  req.step_logits = true;
  SplitRun r;
  r.result = generate(*engine, {req})[0];
  r.plan = *engine->moe_plan();
  r.rows = memory_rows(engine->memory_plan());
  return r;
}

const MemoryRow* row(const std::vector<MemoryRow>& rows, const std::string& name) {
  for (const MemoryRow& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

TEST(HostMemorySplit, LayersMoveToTheDeviceAndOutputStaysTheSame) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_FALSE(cases.empty());
  const SplitRun whole = run(dir, split_options(int64_t{1} << 40), cases[0]);
  ASSERT_EQ(whole.plan.count(MoeLayerMode::kResident), 0);
  const int64_t n_moe = whole.plan.count(MoeLayerMode::kCache);
  ASSERT_EQ(n_moe, 4);
  const int64_t banks = whole.plan.host_bank_bytes, layer = banks / n_moe;  // the fixture's layers are alike
  ASSERT_GT(layer, 0);

  // Room for a layer and a half: the last two MoE layers go resident.
  const SplitRun split = run(dir, split_options(banks - layer - layer / 2), cases[0]);
  EXPECT_EQ(split.plan.strategy, MoeStrategy::kOffload);
  EXPECT_EQ(split.plan.count(MoeLayerMode::kResident), 2);
  EXPECT_EQ(split.plan.layers[2], MoeLayerMode::kResident);
  EXPECT_EQ(split.plan.layers[3], MoeLayerMode::kResident);
  EXPECT_EQ(split.plan.gpu_bank_bytes, 2 * layer);
  EXPECT_EQ(split.plan.host_bank_bytes, banks - 2 * layer);
  const MemoryRow* experts = row(split.rows, "routed experts");
  ASSERT_NE(experts, nullptr);
  EXPECT_EQ(experts->device, 2 * layer);
  EXPECT_EQ(experts->host, banks - 2 * layer);
  EXPECT_NE(experts->detail.find("2 of 4 MoE layers resident"), std::string::npos) << experts->detail;

  // Offload computes with the fused kernel: the split run is the unsplit one bit for bit.
  EXPECT_EQ(split.result.tokens, whole.result.tokens);
  ASSERT_EQ(split.result.prompt_logits.size(), whole.result.prompt_logits.size());
  EXPECT_EQ(std::memcmp(split.result.prompt_logits.data(), whole.result.prompt_logits.data(),
                        whole.result.prompt_logits.size() * sizeof(float)),
            0);
  ASSERT_EQ(split.result.step_logits.size(), whole.result.step_logits.size());
  EXPECT_EQ(std::memcmp(split.result.step_logits.data(), whole.result.step_logits.data(),
                        whole.result.step_logits.size() * sizeof(float)),
            0);

  // Every layer moved: fused, and the same output again.
  const SplitRun all = run(dir, split_options(1), cases[0]);
  EXPECT_EQ(all.plan.strategy, MoeStrategy::kFused);
  EXPECT_EQ(all.result.tokens, whole.result.tokens);
}

TEST(HostMemorySplit, NeitherSideFitsFailsAtLoadNamingBoth) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  EngineOptions o = split_options(int64_t{1} << 40);
  GpuMemoryBudget b;
  int64_t layer = 0;
  {
    auto e = Engine::load(dir, o);
    b = *e->memory_plan().budget;
    layer = e->moe_plan()->host_bank_bytes / 4;
  }
  // Room for one layer beside the resident weights and the KV reserve; host memory for none.
  o.host_memory_limit = 1;
  o.gpu_memory_limit = b.resident_bytes + b.kv_bytes_per_token * b.kv_reserve_tokens + layer;
  try {
    Engine::load(dir, o);
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    const std::string msg = e.what();
    for (const char* part : {"expert banks do not fit host or GPU memory", "host memory holds 1 B (--host-memory-limit)",
                             "must be resident on the GPU, which has", "missing"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  }
}

}  // namespace
}  // namespace ft::testing
