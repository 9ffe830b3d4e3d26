// Expert banks split between host and GPU memory through Engine::load (issue 36): with
// --host-memory-limit below the banks' size the last MoE layers go resident (the CPU backend's
// "device" is host memory too, so only the plan and the code path change) and greedy decoding keeps
// every token and logit of the unsplit run; a plan that fits neither side fails at load naming both.
// Host memory that shrinks while the banks fill (a planted EngineOptions::host_memory_probe) moves
// the layers still to copy to the device, or fails naming the numbers.
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>

#include "../log_capture.h"
#include "../model/fixture_util.h"
#include "engine/memory_plan.h"
#include "moe/host_memory.h"
#include "tools/synthetic_checkpoint.h"
#include "util/format.h"

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

/** Runs `load`, which must throw ft::Error(kOutOfMemory) whose message holds every one of `parts`. */
void expect_out_of_memory(const std::function<void()>& load, const std::vector<std::string>& parts) {
  try {
    load();
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    const std::string msg = e.what();
    for (const std::string& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  }
}

/** Same greedy tokens, and prompt and step logits equal bit for bit. */
void expect_same_output(const SplitRun& a, const SplitRun& b) {
  EXPECT_EQ(a.result.tokens, b.result.tokens);
  ASSERT_EQ(a.result.prompt_logits.size(), b.result.prompt_logits.size());
  EXPECT_EQ(std::memcmp(a.result.prompt_logits.data(), b.result.prompt_logits.data(),
                        b.result.prompt_logits.size() * sizeof(float)),
            0);
  ASSERT_EQ(a.result.step_logits.size(), b.result.step_logits.size());
  EXPECT_EQ(std::memcmp(a.result.step_logits.data(), b.result.step_logits.data(),
                        b.result.step_logits.size() * sizeof(float)),
            0);
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
  expect_same_output(split, whole);

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
  expect_out_of_memory([&] { Engine::load(dir, o); },
                       {"expert banks do not fit host or device memory", "host memory holds 1 B (--host-memory-limit)",
                        "must be resident on the device, which has", "missing"});
}

TEST(HostMemorySplit, HostHoldingNoBankMakesEveryLayerResidentAndSaysWhichFlagsNoLongerApply) {
  // An explicit hybrid with a cache size, and host memory for none of the banks: every layer goes
  // resident (fused), and a warning names the flags that then do not apply and the limit that keeps one.
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  EngineOptions o = split_options(1);
  o.moe.strategy = MoeStrategy::kHybrid;
  o.moe.cache = {CacheSizeMode::kSlots, 200, 0.0};
  LogCapture log(spdlog::level::info);
  auto engine = Engine::load(dir, o);
  const MoePlan& p = *engine->moe_plan();
  EXPECT_EQ(p.strategy, MoeStrategy::kFused);
  EXPECT_EQ(p.count(MoeLayerMode::kResident), 4);
  EXPECT_EQ(p.unused_flags, "--moe-strategy hybrid and --moe-cache-slots 200");
  bool warned = false;
  for (const std::string& l : log.lines())
    warned = warned || (l.rfind("warning", 0) == 0 &&
                        l.find("--moe-strategy hybrid and --moe-cache-slots 200 do not apply: host memory (1 B, "
                               "--host-memory-limit) holds less than one MoE layer's expert banks") != std::string::npos &&
                        l.find("every MoE layer is resident on the device (fused)") != std::string::npos);
  EXPECT_TRUE(warned) << ::testing::PrintToString(log.lines());
}

TEST(HostMemorySplit, CpuMovesTheTokenTableWhenHostForcedLayersFitOnlyWithoutIt) {
  // --moe-strategy cpu keeps the token table on the device, but when host memory forces layers
  // resident that fit only without the table, auto moves it as offload does: the expert-cache
  // refusal's advice (--moe-strategy cpu) then holds.
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  EngineOptions o = split_options(int64_t{1} << 40);
  o.moe.strategy = MoeStrategy::kCpu;
  o.embed_weights = EmbedPlacement::kDevice;
  GpuMemoryBudget b;
  int64_t banks = 0, table = 0;
  {
    auto e = Engine::load(dir, o);
    b = *e->memory_plan().budget;
    banks = e->moe_plan()->host_bank_bytes;
    table = e->config().n_vocab * e->config().n_embd * 2;  // bf16
  }
  const int64_t layer = banks / 4;
  o.host_memory_limit = banks - 2 * layer;  // layers 2-3 go resident
  o.gpu_memory_limit = b.resident_bytes + b.kv_bytes_per_token * b.kv_reserve_tokens + 2 * layer - table / 2;
  EXPECT_THROW(Engine::load(dir, o), Error);  // the table kept on the device: does not fit
  o.embed_weights = EmbedPlacement::kAuto;
  auto e = Engine::load(dir, o);
  EXPECT_EQ(e->moe_plan()->strategy, MoeStrategy::kCpu);
  EXPECT_EQ(e->moe_plan()->count(MoeLayerMode::kResident), 2);
  EXPECT_GT(e->memory_plan().host_mapped_bytes, 0);
}

TEST(HostMemorySplit, GivenLimitIsLoggedBesideTheMeasuredMemory) {
  // --host-memory-limit above what is there: the measured figure is logged beside it, with a warning.
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  EngineOptions o = split_options(int64_t{500} << 30);
  o.host_memory_probe = [] { return int64_t{8} << 30; };  // 7 GiB usable after the 1 GiB margin
  std::vector<std::string> lines;
  {
    LogCapture log(spdlog::level::info);
    Engine::load(dir, o);
    lines = log.lines();
  }
  bool info = false, warn = false;
  for (const std::string& l : lines) {
    info = info || (l.find("host memory: --host-memory-limit 500.00 GiB for expert banks; measured: usable for expert "
                           "banks 7.00 GiB") != std::string::npos);
    warn = warn || (l.rfind("warning", 0) == 0 && l.find("--host-memory-limit 500.00 GiB is more than the 7.00 GiB of "
                                                          "host memory measured usable") != std::string::npos);
  }
  EXPECT_TRUE(info && warn) << ::testing::PrintToString(lines);
  // A limit below it: logged, no warning.
  o.host_memory_limit = int64_t{1} << 30;
  LogCapture log(spdlog::level::info);
  Engine::load(dir, o);
  for (const std::string& l : log.lines()) EXPECT_EQ(l.find("is more than the"), std::string::npos) << l;
}

/** A host-memory probe that answers `before` for its first `shrink_at` calls, then `at_shrink` once,
 *  then `after`; counts its calls. Shared, since EngineOptions copies the function. */
struct ShrinkingHost {
  int shrink_at = 1 << 30;
  int64_t before = int64_t{1} << 40, at_shrink = 0, after = 0;
  std::atomic<int> calls{0};
  std::function<int64_t()> probe() {
    return [this] {
      const int i = calls++;
      return i < shrink_at ? before : i == shrink_at ? at_shrink : after;
    };
  }
};

TEST(HostMemorySplit, MemoryShrinkingMidFillMovesTheRestToTheDevice) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_FALSE(cases.empty());
  // A stable probe changes nothing: the plan and the output of a run measuring the real host.
  const SplitRun whole = run(dir, split_options(0), cases[0]);
  ShrinkingHost stable;
  EngineOptions o = split_options(0);
  o.host_memory_probe = stable.probe();
  const SplitRun same = run(dir, o, cases[0]);
  EXPECT_EQ(same.plan.layers, whole.plan.layers);
  EXPECT_EQ(same.plan.count(MoeLayerMode::kResident), 0);
  EXPECT_EQ(same.plan.host_bank_limit, stable.before - kHostMemoryMargin);  // the probe's figure at start
  expect_same_output(same, whole);
  // The start's measurement, the check before the fill, then one before each MoE layer but the first.
  const int calls = stable.calls.load();
  ASSERT_GE(calls, 5);
  const int64_t banks = whole.plan.host_bank_bytes, layer = banks / 4;

  // Before MoE layer 2 another process takes all but nothing; measured again, room for two and a
  // half layers (and the margin) is left: layers 2 and 3 go resident and the output stays the same.
  ShrinkingHost host;
  host.shrink_at = calls - 2;
  host.after = kHostMemoryMargin + banks - layer - layer / 2;
  o.host_memory_probe = host.probe();
  const SplitRun moved = run(dir, o, cases[0]);
  EXPECT_EQ(moved.plan.strategy, MoeStrategy::kOffload);
  EXPECT_EQ(moved.plan.count(MoeLayerMode::kResident), 2);
  EXPECT_EQ(moved.plan.layers[2], MoeLayerMode::kResident);
  EXPECT_EQ(moved.plan.layers[3], MoeLayerMode::kResident);
  EXPECT_EQ(moved.plan.host_bank_limit, banks - layer - layer / 2);
  EXPECT_EQ(moved.plan.gpu_bank_bytes, 2 * layer);
  const MemoryRow* experts = row(moved.rows, "routed experts");
  ASSERT_NE(experts, nullptr);
  EXPECT_EQ(experts->device, 2 * layer);
  expect_same_output(moved, whole);

  // Nothing left at all: every layer moves (fused), the same output again.
  ShrinkingHost gone;
  gone.shrink_at = calls - 2;
  o.host_memory_probe = gone.probe();
  const SplitRun fused = run(dir, o, cases[0]);
  EXPECT_EQ(fused.plan.strategy, MoeStrategy::kFused);
  expect_same_output(fused, whole);
}

TEST(HostMemorySplit, MemoryShrinkingMidFillFailsNamingTheNumbersWhenTheDeviceCannotTakeIt) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  ShrinkingHost stable;
  EngineOptions o = split_options(0);
  o.host_memory_probe = stable.probe();
  GpuMemoryBudget b;
  int64_t layer = 0;
  {
    auto e = Engine::load(dir, o);
    b = *e->memory_plan().budget;
    layer = e->moe_plan()->host_bank_bytes / 4;
  }
  // The device holds three layers' worth beside the resident weights and the KV reserve: enough for
  // the start's expert cache, not for four resident layers once host memory is gone.
  o.gpu_memory_limit = b.resident_bytes + b.kv_bytes_per_token * b.kv_reserve_tokens + 3 * layer;
  ShrinkingHost counted;  // the start may measure twice under a limit (the embedding table's placement)
  o.host_memory_probe = counted.probe();
  Engine::load(dir, o);
  ShrinkingHost host;
  host.shrink_at = counted.calls.load() - 2;
  o.host_memory_probe = host.probe();
  expect_out_of_memory([&] { Engine::load(dir, o); },
                       {"host memory shrank while they were filled: before layer 2",
                        "host memory holds 0 B (host memory measured again while the banks filled",
                        "0 B is usable now (" + format_bytes(host.before) + " when the fill started",
                        "--host-memory-limit", "does not fit either", "expert banks do not fit host or device memory",
                        "missing"});
}

// A synthetic checkpoint gives each copied layer's memory back: the fill cannot be redone, so a
// shrink fails naming the numbers (the layers in flight) instead of planning again.
TEST(HostMemorySplit, MemoryShrinkingMidFillOfAReleasingCheckpointFails) {
  SyntheticSpec spec;
  spec.preset = "tiny-moe";  // 2 MoE layers of 8 experts
  spec.threads = 1;
  auto ckpt = std::make_unique<SyntheticCheckpoint>(spec);
  ASSERT_TRUE(ckpt->releases_memory());
  ShrinkingHost host;
  host.shrink_at = 1;  // the check before the fill passes, the one before layer 1 does not
  EngineOptions o = small_engine_options();
  o.moe.strategy = MoeStrategy::kOffload;
  o.host_memory_probe = host.probe();
  expect_out_of_memory([&] { Engine::load(std::move(ckpt), o); },
                       {"before layer 1", "for the layers copied at once", "0 B is usable now",
                        "not planned again: the layers already copied gave their checkpoint memory back"});
  EXPECT_EQ(host.calls.load(), 2);
}

}  // namespace
}  // namespace ft::testing
