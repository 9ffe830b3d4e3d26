// The built-in demo model: deterministic bytes, loads through the normal GGUF path with its byte-level
// vocabulary and template, and the engine runs it (greedy tokens equal through EngineRunner in one batch
// of two sequences and one at a time).
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "tools/demo_model.h"
#include "engine/engine.h"
#include "engine/engine_runner.h"
#include "engine/service.h"
#include "formats/checkpoint.h"
#include "util/error.h"

namespace ft {
namespace {

TEST(DemoModel, DeterministicAndValidated) {
  DemoModelSpec small;
  small.n_layer = 2;
  small.n_embd = 32;
  small.head_dim = 8;
  small.n_ff_exp = 16;
  EXPECT_EQ(demo_model_gguf(small), demo_model_gguf(small));
  DemoModelSpec other = small;
  other.seed = 7;
  EXPECT_NE(demo_model_gguf(small), demo_model_gguf(other));
  DemoModelSpec bad = small;
  bad.n_expert_used = 9;
  EXPECT_THROW(demo_model_gguf(bad), Error);
}

class Collect : public TokenSink {
 public:
  bool on_token(const SampledToken& t, bool) override {
    std::lock_guard<std::mutex> lk(mu);
    tokens.push_back(t.id);
    return true;
  }
  void on_finish(const FinishInfo& f) override {
    std::lock_guard<std::mutex> lk(mu);
    info = f;
    done = true;
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done; });
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::vector<int32_t> tokens;
  FinishInfo info;
};

TEST(DemoModel, LoadsAndGeneratesTheSameTokensBatchedOrAlone) {
  const std::string path = write_demo_model();
  EngineOptions eo;
  eo.threads = 1;
  eo.page_size = 16;
  eo.kv_tokens = 1024;
  auto engine = Engine::load(path, eo);
  std::filesystem::remove(path);  // mapped: stays readable
  const ModelConfig& c = engine->config();
  EXPECT_EQ(c.arch, "qwen3_moe");
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.n_vocab, kDemoVocab);
  EXPECT_EQ(c.n_ctx_train, 4096);
  const auto& md = engine->checkpoint().metadata();
  EXPECT_EQ(md["tokenizer.ggml.tokens"].size(), static_cast<size_t>(kDemoVocab));
  EXPECT_TRUE(md["tokenizer.chat_template"].is_string());

  EngineRunner runner(*engine);
  ServiceConfig sc;
  sc.scheduler.max_running = 4;
  sc.scheduler.max_prefill_tokens = 24;  // the long prompt is prefilled in chunks next to the short one's decodes
  sc.scheduler.max_seq_len = 512;
  sc.check_integrity = true;
  EngineService svc(runner, engine->kv().pool(), sc);
  const std::vector<std::vector<int32_t>> prompts = {{72, 105, 33}, std::vector<int32_t>(70, 97)};
  auto submit = [&](const std::vector<int32_t>& p) {
    auto sink = std::make_shared<Collect>();
    GenerationRequest r;
    r.prompt = p;
    r.max_tokens = 12;
    r.sampling.temperature = 0;
    r.sink = sink;
    svc.submit(r);
    return sink;
  };
  auto a = submit(prompts[0]), b = submit(prompts[1]);
  a->wait();
  b->wait();
  auto a1 = submit(prompts[0]);
  a1->wait();
  auto b1 = submit(prompts[1]);
  b1->wait();
  EXPECT_EQ(a->tokens.size(), 12u);
  EXPECT_EQ(a->tokens, a1->tokens);
  EXPECT_EQ(b->tokens, b1->tokens);
  EXPECT_EQ(b1->info.cached_tokens, 64);  // the second run of the long prompt reused 4 pages of 16
  for (int32_t t : a->tokens) EXPECT_TRUE((t >= 32 && t < 127) || t == 10 || t == kDemoImEnd) << t;  // readable noise
}

}  // namespace
}  // namespace ft
