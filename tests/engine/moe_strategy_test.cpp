// The MoE strategies through Engine::load + generate on the MoE fixtures: offload with the smallest
// legal cache (2 x experts per layer) and cpu give prompt and decode logits bit-identical to fused,
// hybrid stays within 1e-4 of the reference; the counters add up (misses fill the cache, bytes =
// misses x slot size, evictions on qwen3_moe_64e whose smallest cache holds half its experts);
// auto picks fused exactly when everything fits the memory limit; bad flags fail at load.
#include <fmt/format.h>

#include <cstring>

#include "../model/fixture_util.h"
#include "backend/cpu/cpu_ops.h"
#include "formats/checkpoint.h"
#include "util/format.h"

namespace ft::testing {
namespace {

struct StrategyRun {
  GenerateResult result;
  std::optional<MoeReport> report;
  MoePlan plan;
  int64_t top_k = 0;
};

EngineOptions moe_options(MoeStrategy s, int64_t slots = 0, int32_t fetch_cap = -1) {
  EngineOptions o = small_engine_options();
  o.moe.strategy = s;
  if (slots > 0) o.moe.cache = {CacheSizeMode::kSlots, slots, 0.0};
  o.moe.fetch_cap = fetch_cap;
  o.moe.cpu_int8 = false;  // the executor's fp32 path: bit for bit the CPU backend (the fixtures are BF16 anyway)
  o.moe.preload = false;   // the counters below start from an empty cache (the preloaded case is its own)
  return o;
}

StrategyRun run_strategy(const std::string& dir, const EngineOptions& o, const RefCase& c, int32_t n_new) {
  auto engine = Engine::load(dir, o);
  GenerateRequest req = greedy_request(c.input_ids, n_new);
  req.step_logits = true;
  StrategyRun r;
  r.result = generate(*engine, {req})[0];
  r.report = engine->moe_report();
  r.plan = *engine->moe_plan();
  r.top_k = engine->config().n_expert_used;
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class MoeStrategies : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeStrategies, SameFunctionAsFused) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_FALSE(cases.empty());
  const RefCase& c = cases[0];
  const int32_t n_new = 6;
  const StrategyRun fused = run_strategy(dir, moe_options(MoeStrategy::kFused), c, n_new);
  const int64_t V = static_cast<int64_t>(fused.result.prompt_logits.size() / c.input_ids.size());
  ASSERT_EQ(fused.plan.strategy, MoeStrategy::kFused);
  EXPECT_FALSE(fused.report.has_value());
  ASSERT_LE(max_row_rel_l2(fused.result.prompt_logits, c.logits, V), 1e-4);
  ASSERT_EQ(fused.result.step_logits.size(), static_cast<size_t>(n_new * V));

  int32_t E = 0;
  int64_t total = 0, n_moe = 0;
  for (MoeLayerMode m : fused.plan.layers) n_moe += m == MoeLayerMode::kResident;
  {
    auto e = Engine::load(dir, moe_options(MoeStrategy::kFused));
    E = static_cast<int32_t>(e->config().n_expert);
    total = e->moe_budget()->total_experts;
  }
  ASSERT_EQ(total, E * n_moe);
  const int64_t smallest = std::min<int64_t>(2 * E, total);

  {
    SCOPED_TRACE("offload, smallest cache");
    const StrategyRun off = run_strategy(dir, moe_options(MoeStrategy::kOffload, smallest), c, n_new);
    EXPECT_EQ(off.plan.cache.n_slots, smallest);
    EXPECT_TRUE(same_bits(off.result.prompt_logits, fused.result.prompt_logits));
    EXPECT_TRUE(same_bits(off.result.step_logits, fused.result.step_logits));
    EXPECT_EQ(off.result.tokens, fused.result.tokens);
    ASSERT_TRUE(off.report.has_value());
    const MoeReport& r = *off.report;
    EXPECT_EQ(r.strategy, MoeStrategy::kOffload);
    EXPECT_EQ(r.cache_slots, smallest);
    ASSERT_EQ(static_cast<int64_t>(r.layers.size()), n_moe);
    // The first step fills at least a layer's worth (at the layer or ahead of it).
    EXPECT_GE(r.total.misses + r.total.prefetched, std::min<int64_t>(smallest, E));
    EXPECT_GT(r.total.hits, 0);                                   // decode steps reuse experts
    // One layout: every record is a slot; offload prefetches the next layer's guess by default.
    EXPECT_EQ(r.total.bytes, (r.total.misses + r.total.prefetched) * r.slot_bytes);
    EXPECT_GT(r.total.prefetched, 0);
    EXPECT_EQ(r.total.cpu_experts, 0);
    if (smallest < total) {
      EXPECT_GT(r.total.misses + r.total.prefetched, smallest);  // fetches beyond the slots: evictions
    }
  }
  {
    SCOPED_TRACE("cpu");
    const StrategyRun cpu = run_strategy(dir, moe_options(MoeStrategy::kCpu), c, n_new);
    EXPECT_TRUE(same_bits(cpu.result.prompt_logits, fused.result.prompt_logits));
    EXPECT_TRUE(same_bits(cpu.result.step_logits, fused.result.step_logits));
    ASSERT_TRUE(cpu.report.has_value());
    EXPECT_EQ(cpu.report->cache_slots, 0);
    EXPECT_EQ(cpu.report->total.hits + cpu.report->total.misses, 0);
    EXPECT_GT(cpu.report->total.cpu_experts, 0);
    for (const MoeLayerReport& l : cpu.report->layers) EXPECT_EQ(l.mode, MoeLayerMode::kCpu);
  }
  for (int32_t cap : {1, -1}) {  // -1: the engine's default cap
    SCOPED_TRACE("hybrid, cap " + std::to_string(cap));
    const StrategyRun hy = run_strategy(dir, moe_options(MoeStrategy::kHybrid, smallest, cap), c, n_new);
    EXPECT_LE(max_row_rel_l2(hy.result.prompt_logits, c.logits, V), 1e-4);
    EXPECT_LE(max_row_rel_l2(hy.result.step_logits, fused.result.step_logits, V), 1e-4);
    EXPECT_EQ(hy.result.tokens, fused.result.tokens);
    ASSERT_TRUE(hy.report.has_value());
    if (cap >= 0) {  // the calibrated cap may be anything from 1 to top-k
      EXPECT_GT(hy.report->total.cpu_experts, 0);  // misses over the cap went to the CPU
      EXPECT_GT(hy.report->total.misses, 0);
    }
    // Only this run's lookups are counted (the start-up calibration's steps are not): the prompt
    // touches at most every expert of a layer, each decode step at most top-k.
    const MoeLayerStats& t = hy.report->total;
    EXPECT_LE(t.hits + t.misses + t.cpu_experts, n_moe * (E + int64_t{n_new} * hy.top_k));
    for (size_t l = 0; l < hy.plan.layers.size(); ++l)
      if (hy.plan.layers[l] == MoeLayerMode::kCache) {
        // Given a cap, it holds; calibrated, a planned split (never a plain cap of 0, which
        // freezes the cache, nor fetching everything, which is offload and not hybrid's choice).
        if (cap >= 0) EXPECT_EQ(hy.plan.fetch_cap[l], cap);
        if (cap < 0) EXPECT_GT(hy.plan.cpu_cost, 0);
      }
    if (cap < 0) EXPECT_EQ(hy.plan.strategy, MoeStrategy::kHybrid);
  }
  {
    // auto beside a GPU (the planner): hybrid's calibration with offload among its candidates; either
    // way the same function as fused.
    SCOPED_TRACE("auto, the planner, smallest cache");
    EngineOptions o = moe_options(MoeStrategy::kAuto, smallest);
    o.moe.auto_planner = true;
    const StrategyRun pl = run_strategy(dir, o, c, n_new);
    EXPECT_LE(max_row_rel_l2(pl.result.step_logits, fused.result.step_logits, V), 1e-4);
    EXPECT_EQ(pl.result.tokens, fused.result.tokens);
    EXPECT_TRUE(pl.plan.strategy == MoeStrategy::kHybrid || pl.plan.strategy == MoeStrategy::kOffload);
    EXPECT_EQ(pl.plan.strategy == MoeStrategy::kHybrid, pl.plan.cpu_cost > 0);  // offload: every miss fetched
    EXPECT_FALSE(pl.plan.fetch_cap_provisional);
  }
  {
    // --moe-preload (the CLI's default): the slots outside the two staging regions start filled,
    // counted as prefetched (none in the smallest cache, which is the two regions); every expert
    // in the cache here.
    SCOPED_TRACE("offload, every expert, preloaded");
    EngineOptions o = moe_options(MoeStrategy::kOffload, total);
    o.moe.preload = true;
    const StrategyRun pre = run_strategy(dir, o, c, n_new);
    EXPECT_TRUE(same_bits(pre.result.prompt_logits, fused.result.prompt_logits));
    EXPECT_TRUE(same_bits(pre.result.step_logits, fused.result.step_logits));
    ASSERT_TRUE(pre.report.has_value());
    EXPECT_GE(pre.report->total.prefetched, total - 2 * E);  // the preload, then the decode's own prefetches
    EXPECT_GT(pre.report->total.hits, 0);
    EXPECT_EQ(pre.report->total.bytes, (pre.report->total.misses + pre.report->total.prefetched) * pre.report->slot_bytes);
  }
  {
    SCOPED_TRACE("offload + first MoE layer on the CPU");
    const StrategyRun mixed = run_strategy(dir, [&] {
      EngineOptions o = moe_options(MoeStrategy::kOffload, smallest);
      o.moe.cpu_layers = "1";
      return o;
    }(), c, n_new);
    EXPECT_TRUE(same_bits(mixed.result.step_logits, fused.result.step_logits));
    ASSERT_TRUE(mixed.report.has_value());
    EXPECT_EQ(mixed.report->layers[0].mode, MoeLayerMode::kCpu);
    EXPECT_GT(mixed.report->layers[0].stats.cpu_experts, 0);
    EXPECT_EQ(mixed.report->layers[0].stats.misses, 0);
    EXPECT_GT(mixed.report->layers.back().stats.misses, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeStrategies,
                         ::testing::Values("qwen3_moe", "qwen3_moe_64e", "mixtral", "olmoe", "qwen2_moe", "glm4_moe",
                                           "minimax_m2", "deepseek_v3", "qwen3_next", "qwen3_5_moe"));

// The calibration keeps the first candidate within 3% of the fastest, so timings within noise of
// each other pick the same policy on every start (caps picked 7, 1 and 4 on three runs of the 64e
// model when caps were timed), and the earlier candidates fetch less.
TEST(MoeCalibration, FirstCandidateWithinNoiseOfTheFastest) {
  EXPECT_EQ(MoeRuntime::choose_fetch_candidate({1.010, 1.000, 1.005, 1.020}), 0u);
  EXPECT_EQ(MoeRuntime::choose_fetch_candidate({1.040, 1.000, 1.005, 1.020}), 1u);
  // H200 calibration logs (ms per step; RESULTS, sessions 11 and 4): clear winners stay
  EXPECT_EQ(MoeRuntime::choose_fetch_candidate({11.84, 13.00, 13.91}), 0u);
  EXPECT_EQ(MoeRuntime::choose_fetch_candidate({51.0, 41.6, 36.7, 41.3}), 2u);
  EXPECT_EQ(MoeRuntime::choose_fetch_candidate({2.0}), 0u);
  EXPECT_THROW(MoeRuntime::choose_fetch_candidate({}), Error);
}

// Without --kv-reserve-tokens the expert cache keeps exactly the KV cache the engine allocated free:
// KV beyond it could never be used (a server run with a small --kv-tokens gives the rest to experts).
TEST(MoeAuto, KvReserveDefaultsToTheKvCacheAllocated) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  EngineOptions o = small_engine_options();
  ASSERT_LT(o.kv_reserve_tokens, 0);
  for (int64_t kv_tokens : {int64_t{256}, int64_t{1024}}) {
    o.kv_tokens = kv_tokens;
    auto e = Engine::load(dir, o);
    const int64_t placed = int64_t{e->kv().pool().n_pages()} * e->kv().pool().page_size();
    EXPECT_GE(placed, kv_tokens);
    EXPECT_EQ(e->moe_budget()->kv_reserve_tokens, placed) << kv_tokens;
  }
  o.kv_reserve_tokens = 8192;  // given: kept as given
  EXPECT_EQ(Engine::load(dir, o)->moe_budget()->kv_reserve_tokens, 8192);
}

/** Expects Engine::load(dir, o) to fail with kOutOfMemory, its message holding each of `says`. */
void expect_out_of_memory(const std::string& dir, const EngineOptions& o, std::initializer_list<const char*> says) {
  try {
    Engine::load(dir, o);
    ADD_FAILURE() << dir << " loaded under --gpu-memory-limit " << o.gpu_memory_limit;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
    for (const char* s : says) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << s << " in " << e.what();
  }
}

/** qwen3_moe_64e's options for the limit tests: 1024 reserved KV tokens, and the table kept on the
 *  device (under auto, a limit one byte short would move it to the host, and then all fits:
 *  tests/engine/embed_weights_test.cpp). */
EngineOptions budget_options() {
  EngineOptions o = small_engine_options();
  o.kv_reserve_tokens = 1024;
  o.embed_weights = EmbedPlacement::kDevice;
  return o;
}

/** The memory budget of a load of `dir` without a limit (CPU backend: everything fits, so fused). */
GpuMemoryBudget budget_without_limit(const std::string& dir, const EngineOptions& o) {
  auto e = Engine::load(dir, o);
  EXPECT_EQ(e->moe_plan()->strategy, MoeStrategy::kFused);
  return *e->moe_budget();
}

/** The limit that holds the resident weights, the reserved KV and every routed expert. */
int64_t bytes_for_everything(const GpuMemoryBudget& b) {
  return b.resident_bytes + b.kv_bytes_per_token * b.kv_reserve_tokens + b.expert_bytes;
}

TEST(MoeAuto, FusedExactlyWhenEverythingFits) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  EngineOptions o = budget_options();
  const GpuMemoryBudget b = budget_without_limit(dir, o);
  EXPECT_EQ(b.kv_reserve_tokens, 1024);
  EXPECT_GT(b.resident_bytes, 0);
  EXPECT_GT(b.expert_bytes, b.total_experts * b.slot_bytes / 2);
  const int64_t need = bytes_for_everything(b);
  o.gpu_memory_limit = need;
  EXPECT_EQ(Engine::load(dir, o)->moe_plan()->strategy, MoeStrategy::kFused);
  // One byte short: offload, with every slot that fits (the cache-auto default).
  o.gpu_memory_limit = need - 1;
  auto e = Engine::load(dir, o);
  EXPECT_EQ(e->moe_plan()->strategy, MoeStrategy::kOffload);
  const int64_t fit = (need - 1 - b.resident_bytes - b.kv_bytes_per_token * b.kv_reserve_tokens) / b.slot_bytes;
  EXPECT_EQ(e->moe_plan()->cache.n_slots, std::min(fit, b.total_experts));
  // Fused demanded under that limit: out of memory, naming the fix.
  o.moe.strategy = MoeStrategy::kFused;
  expect_out_of_memory(dir, o, {"--moe-strategy offload"});
}

// -c (--kv-tokens) above --kv-reserve-tokens: the KV beyond the reserve is the context's, and a limit
// it does not fit names --kv-tokens with its bytes and the largest value that fits, not the weights.
TEST(MoeAuto, KvBeyondTheReserveIsBlamedOnKvTokens) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  EngineOptions o = budget_options();  // --kv-reserve-tokens 1024, -c 1024
  const GpuMemoryBudget b = budget_without_limit(dir, o);
  // Room for the reserve, the smallest cache (2 x experts per layer) and 100 tokens beyond them.
  const int64_t min_cache = 2 * b.experts_per_layer * b.slot_bytes;
  o.gpu_memory_limit = b.resident_bytes + b.kv_bytes_per_token * (b.kv_reserve_tokens + 100) + min_cache;
  o.moe.strategy = MoeStrategy::kOffload;
  EXPECT_NO_THROW(Engine::load(dir, o));
  o.kv_tokens = 16384;  // 15360 tokens beyond the reserve: about 15260 more than fit
  try {
    Engine::load(dir, o);
    ADD_FAILURE() << "-c 16384 loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << what;
    EXPECT_EQ(what.find("resident weights alone"), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("--kv-tokens 16384 needs {} of KV", format_bytes(16384 * b.kv_bytes_per_token))),
              std::string::npos) << what;
    // Whole pages of 16 tokens: 1024 + 96 beyond the reserve (the block tables of the smaller pool counted).
    const size_t at = what.find(" tokens fits (pages of 16 tokens)");
    const std::string lower = "Lower --kv-tokens: a KV cache of ";
    const size_t from = what.rfind(lower, at);
    ASSERT_TRUE(at != std::string::npos && from != std::string::npos) << what;
    const int64_t advised = std::stoll(what.substr(from + lower.size(), at - from - lower.size()));
    EXPECT_EQ(advised, 1120) << what;
    o.kv_tokens = advised;
    EXPECT_NO_THROW(Engine::load(dir, o)) << advised;
  }
  // ft run sizes the KV cache from -n: the refusal names that.
  o.kv_tokens = 16384;
  o.kv_tokens_flag = "-n/--max-tokens";
  expect_out_of_memory(dir, o, {"a KV cache of 16384 tokens (from -n/--max-tokens) needs",
                                "Lower -n/--max-tokens: a KV cache of 1120 tokens fits"});
  o.kv_tokens_flag = "--kv-tokens";
  o.kv_tokens = 1120;
  EXPECT_GE(Engine::load(dir, o)->moe_plan()->cache.n_slots, 2 * b.experts_per_layer);
  o.kv_tokens = 1136;  // one page more
  EXPECT_THROW(Engine::load(dir, o), Error);
  // Not even the reserve fits: the weights' refusal, without the extra KV in their bytes, and what
  // --kv-tokens adds.
  o.kv_tokens = 16384;
  o.gpu_memory_limit = b.resident_bytes / 2;
  expect_out_of_memory(dir, o, {"the resident weights alone do not fit",
                                fmt::format("and --kv-tokens 16384 adds {} of KV for the 15360 tokens beyond "
                                            "--kv-reserve-tokens 1024", format_bytes(15360 * b.kv_bytes_per_token))
                                    .c_str()});
}

/** The CPU backend with a device-like scratch estimate, as CudaOps reports it. */
class CpuOpsWithWorkspace : public CpuOps {
 public:
  CpuOpsWithWorkspace(int threads, int64_t bytes) : CpuOps(threads), bytes_(bytes) {}
  int64_t workspace_bytes(const WorkspaceShape& s) const override {
    shape = s;
    return bytes_;
  }
  mutable WorkspaceShape shape;

 private:
  int64_t bytes_;
};

TEST(MoeAuto, BackendWorkspaceCountsAgainstTheLimit) {
  // The backend's step scratch is not allocated when the cache is sized, so the plan must leave room
  // for it: the same limit gives the cache workspace / slot_bytes fewer slots.
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  EngineOptions o = budget_options();
  const GpuMemoryBudget b = budget_without_limit(dir, o);
  o.gpu_memory_limit = bytes_for_everything(b) - 20 * b.slot_bytes;
  const int64_t slots = Engine::load(dir, o)->moe_plan()->cache.n_slots;
  const int64_t workspace = 5 * b.slot_bytes;
  auto ops = std::make_unique<CpuOpsWithWorkspace>(1, workspace);
  CpuOpsWithWorkspace* raw = ops.get();
  Engine e(open_checkpoint(dir), std::move(ops), o);
  EXPECT_EQ(e.moe_plan()->cache.n_slots, slots - 5);
  EXPECT_EQ(e.moe_budget()->resident_bytes, b.resident_bytes + workspace);
  // The shape it was asked for: this engine's step limits and the model's widths.
  EXPECT_EQ(raw->shape.tokens, o.max_step_tokens);
  EXPECT_EQ(raw->shape.max_seqs, o.max_seqs);
  EXPECT_EQ(raw->shape.moe_top_k, e.config().n_expert_used);
  EXPECT_EQ(raw->shape.moe_n_expert, e.config().n_expert);
  EXPECT_EQ(raw->shape.moe_ffn, e.config().n_ff_exp);
  EXPECT_EQ(raw->shape.hidden, e.config().n_embd);
  EXPECT_GE(raw->shape.max_matmul_k, e.config().n_embd);
}

TEST(MoeAuto, DenseLimitCountsTheWorkspace) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3";
  EngineOptions o = small_engine_options();
  int64_t need = 0;
  {
    auto e = Engine::load(dir, o);
    need = e->placed_memory().weights + e->placed_memory().kv + e->placed_memory().buffers;
  }
  o.gpu_memory_limit = need + (1 << 20);
  Engine::load(dir, o);  // fits with the CPU backend's zero workspace
  try {
    Engine e(open_checkpoint(dir), std::make_unique<CpuOpsWithWorkspace>(1, 2 << 20), o);
    ADD_FAILURE() << "a 2 MiB workspace fit in 1 MiB of room";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("workspaces for steps of"), std::string::npos) << e.what();
  }
}

TEST(MoeAuto, PlanSaysInt8OnlyWhereAnExpertTakesIt) {
  // --moe-cpu-int8 on (the default) with bf16 experts: nothing runs int8, and the plan's summary (the
  // log line, ft bench's moe_plan) must not say it does.
  EngineOptions o = small_engine_options();
  o.moe.strategy = MoeStrategy::kCpu;
  auto e = Engine::load(shared_dir() + "/fixtures/hf/qwen3_moe_64e", o);
  EXPECT_FALSE(e->moe_plan()->cpu_int8);
  EXPECT_EQ(e->moe_plan()->summary().find("int8"), std::string::npos) << e->moe_plan()->summary();
}

TEST(MoeAuto, BadFlagsFailAtLoad) {
  const std::string moe = shared_dir() + "/fixtures/hf/qwen3_moe", dense = shared_dir() + "/fixtures/hf/qwen3";
  auto code_of = [](const std::string& dir, const EngineOptions& o) {
    try {
      Engine::load(dir, o);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;  // loaded: not what any case below wants
  };
  EXPECT_EQ(code_of(dense, moe_options(MoeStrategy::kOffload)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(moe, moe_options(MoeStrategy::kOffload, 3)), ErrorCode::kInvalidArgument);  // < 2 x experts
  EngineOptions o = moe_options(MoeStrategy::kCpu);
  o.moe.cpu_layers = "1";
  EXPECT_EQ(code_of(moe, o), ErrorCode::kInvalidArgument);
  o = moe_options(MoeStrategy::kOffload);
  o.moe.cpu_layers = "7,";  // no such layer
  EXPECT_EQ(code_of(moe, o), ErrorCode::kInvalidArgument);
  o = moe_options(MoeStrategy::kOffload);
  o.gpu_memory_limit = 1 << 20;  // not even the dense weights + KV
  EXPECT_EQ(code_of(moe, o), ErrorCode::kOutOfMemory);
  EXPECT_EQ(code_of(dense, small_engine_options()), ErrorCode::kInternal);  // auto on a dense model loads
}

TEST(MoeAuto, CacheSizeWithEveryMoeLayerOnTheCpuIsRefused) {
  // --moe-cpu-layers covering both MoE layers of qwen3_moe leaves no expert cache: a cache size given
  // with it would be ignored, so the load refuses it naming both flags.
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe";
  EngineOptions o = moe_options(MoeStrategy::kOffload, 64);
  o.moe.cpu_layers = "0,1";
  try {
    Engine::load(dir, o);
    ADD_FAILURE() << "--moe-cache-slots 64 with every MoE layer on the CPU loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const char* s : {"--moe-cache-slots 64", "--moe-cpu-layers 0,1", "every MoE layer (2)"})
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << s << " in " << e.what();
  }
  o.moe.cache = {CacheSizeMode::kRate, 0, 0.5};
  EXPECT_THROW(Engine::load(dir, o), Error);
  o.moe.cache = {};  // the default (auto) sizes nothing here: loads
  EXPECT_EQ(Engine::load(dir, o)->moe_plan()->count(MoeLayerMode::kCpu), 2);
  o.moe.cpu_layers = "1";  // one cache layer left: the size applies
  o.moe.cache = {CacheSizeMode::kSlots, 64, 0.0};
  EXPECT_EQ(Engine::load(dir, o)->moe_plan()->count(MoeLayerMode::kCache), 1);
}

TEST(GpuMemoryLimit, DenseModelsAreHeldToIt) {
  // A model without experts gets the same check as a MoE plan: weights + KV + buffers within the
  // limit, or an error naming the sizes and how many KV tokens would fit.
  const std::string dense = shared_dir() + "/fixtures/hf/qwen3";
  EngineOptions o = small_engine_options();
  // Below the weights (~250 KiB), then above them but below weights + step buffers (~2.5 MiB).
  for (const auto& [limit, says] : {std::pair<int64_t, const char*>{100 << 10, "the weights alone do not fit"},
                                    std::pair<int64_t, const char*>{1 << 20, "leave no room for one KV page"}}) {
    o.gpu_memory_limit = limit;
    expect_out_of_memory(dense, o, {"--gpu-memory-limit", says});
  }
  o.gpu_memory_limit = int64_t{1} << 30;  // plenty for the tiny model
  EXPECT_NO_THROW(Engine::load(dense, o));
  // Enough for the weights and buffers, not for a large KV cache: the error says how many tokens fit.
  o.kv_tokens = 65536;
  int64_t kv = 0, weights = 0;
  {
    o.gpu_memory_limit = 0;
    auto e = Engine::load(dense, o);
    kv = e->kv().bytes();
    for (const TensorInfo& t : open_checkpoint(dense)->tensors()) weights += t.bytes;
  }
  ASSERT_GT(kv, int64_t{8} << 20);  // so that half of it is far more than the step buffers
  o.gpu_memory_limit = weights + kv / 2;  // a KV cache twice what the limit leaves
  expect_out_of_memory(dense, o, {"lower --kv-tokens (about"});
}

}  // namespace
}  // namespace ft::testing
