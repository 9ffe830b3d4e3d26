// The load's progress as Engine reports it (EngineOptions::progress): a "weights" phase whose estimate
// is what the loader reads, then "experts" (fused) or "expert banks" (offload, hybrid, cpu) for the
// routed experts; every stored byte of the fixtures counted exactly once, on the CPU backend.
#include <map>
#include <mutex>

#include "../model/fixture_util.h"
#include "formats/checkpoint.h"
#include "util/progress.h"

namespace ft::testing {
namespace {

struct Phase {
  std::string name;
  int64_t total = 0;
  int64_t added = 0;
  bool completed = false;
};

/** Records each phase: its name, total, the bytes added and how it ended. */
class RecordingSink : public ProgressSink {
 public:
  void begin(const std::string& phase, int64_t total_bytes) override {
    std::lock_guard<std::mutex> lk(mu_);
    phases.push_back({phase, total_bytes, 0, false});
  }
  void add(int64_t bytes) override {
    std::lock_guard<std::mutex> lk(mu_);
    phases.back().added += bytes;
  }
  void finish(bool completed) override {
    std::lock_guard<std::mutex> lk(mu_);
    phases.back().completed = completed;
  }
  std::vector<Phase> phases;

 private:
  std::mutex mu_;
};

int64_t stored_bytes(const std::string& path) {
  int64_t n = 0;
  for (const TensorInfo& t : open_checkpoint(path)->tensors()) n += t.bytes;
  return n;
}

struct Case {
  std::string path;
  MoeStrategy strategy;
  bool converted = false;  // routed experts converted while loading (read again by their phase)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.path << " " << moe_strategy_name(c.strategy); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.path.substr(info.param.path.rfind("fixtures/") + 9);
  s += std::string("_") + moe_strategy_name(info.param.strategy);
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class LoadProgress : public ::testing::TestWithParam<Case> {};

TEST_P(LoadProgress, EveryStoredByteOnceInItsPhase) {
  const Case& c = GetParam();
  RecordingSink sink;
  EngineOptions o = small_engine_options();
  o.moe.strategy = c.strategy;
  o.progress = &sink;
  auto engine = Engine::load(c.path, o);
  EXPECT_EQ(engine->options().progress, nullptr);  // forgotten after the construction
  ASSERT_FALSE(sink.phases.empty());
  const Phase& w = sink.phases[0];
  EXPECT_EQ(w.name, "weights");
  EXPECT_TRUE(w.completed);
  EXPECT_GT(w.added, 0);
  EXPECT_EQ(w.added, w.total) << "the estimate is what the loader reads";
  int64_t sum = w.added;
  if (engine->moe_plan()) {
    ASSERT_EQ(sink.phases.size(), 2u);
    const Phase& e = sink.phases[1];
    EXPECT_EQ(e.name, c.strategy == MoeStrategy::kFused ? "experts" : "expert banks");
    EXPECT_TRUE(e.completed);
    EXPECT_EQ(e.added, e.total);
    sum += e.added;
  } else {
    EXPECT_EQ(sink.phases.size(), 1u);
  }
  if (c.converted)  // the weights phase read every tensor; the experts' phase reads the copies
    EXPECT_EQ(w.added, stored_bytes(c.path));
  else
    EXPECT_EQ(sum, stored_bytes(c.path));
}

std::vector<Case> cases() {
  const std::string hf = shared_dir() + "/fixtures/hf/", gguf = shared_dir() + "/fixtures/gguf/";
  const std::string repo = source_dir() + "/tests/model/fixtures/";
  std::vector<Case> v = {{hf + "qwen3", MoeStrategy::kAuto}, {gguf + "llama/llama-q8_0.gguf", MoeStrategy::kAuto}};
  // Routed experts as GGUF stacks, HF per-expert tensors, gemma4's fused views and DeepSeek's (with
  // MLA); converted: gpt-oss's fused experts (BF16 and MXFP4), FP8 repacked per expert.
  for (const std::string& p : {gguf + "qwen3_moe/qwen3_moe-q8_0.gguf", hf + "qwen3_moe", repo + "gemma4_moe",
                               hf + "deepseek_v3", hf + "gpt_oss", repo + "gpt_oss_mxfp4", repo + "qwen3_moe_fp8"})
    for (MoeStrategy s : {MoeStrategy::kFused, MoeStrategy::kCpu})
      v.push_back({p, s, p.find("gpt_oss") != std::string::npos || p.find("fp8") != std::string::npos});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LoadProgress, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace ft::testing
