// The service's logits sink (GenerationRequest::prompt_logits / step_logits, TokenSink::on_logits) on
// stories260K through the server's path (a worker thread, EngineRunner): every prompt position's logits
// match transformers, each sampled step's row is the one its greedy token is the argmax of, and all of
// them equal one forward of the whole sequence on the engine directly; a request next to it that asks
// for no logits gets none and the same tokens as alone.
#include <mutex>

#include "../model/fixture_util.h"
#include "engine/engine_runner.h"
#include "engine/service.h"
#include "engine/service_testing.h"

namespace ft::testing {
namespace {

/** Records every row on_logits hands over, by position, and the tokens. */
class LogitsSink : public CollectSink {
 public:
  void on_logits(int64_t position, std::span<const float> logits) override {
    std::lock_guard<std::mutex> lk(mu_);
    positions.push_back(position);
    rows.insert(rows.end(), logits.begin(), logits.end());
  }
  std::vector<int64_t> positions;
  std::vector<float> rows;

 private:
  std::mutex mu_;
};

int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int32_t v = 1; v < n; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

TEST(ServiceLogits, PromptAndStepLogitsReachTheSink) {
  auto engine = Engine::load(shared_dir() + "/data/models/stories260K.gguf", small_engine_options());
  const int64_t V = engine->config().n_vocab;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const std::vector<float> want = read_f32(shared_dir() + "/fixtures/stories260K/logits_prompt.f32");
  const int32_t n_gen = 4;
  std::vector<int32_t> alone;
  {
    EngineRunner runner(*engine);
    ServiceConfig sc;
    sc.scheduler.max_running = 2;
    sc.scheduler.max_prefill_tokens = 3;  // two chunks: rows of both reach the sink
    sc.scheduler.max_logit_rows = 8;
    sc.check_integrity = true;
    EngineService svc(runner, engine->kv().pools(), sc);
    auto sink = std::make_shared<LogitsSink>();
    GenerationRequest r = greedy(prompt, n_gen, sink);
    r.prompt_logits = r.step_logits = true;
    auto plain = std::make_shared<LogitsSink>();
    svc.submit(r);
    svc.submit(greedy({1, 403, 407}, n_gen, plain));
    EXPECT_EQ(sink->wait().reason, FinishReason::kLength);
    EXPECT_EQ(plain->wait().reason, FinishReason::kLength);
    // Positions 0..4 (prompt; 4 is also the first token's), then one a generated token but the last.
    const std::vector<int64_t> positions = {0, 1, 2, 3, 4, 5, 6, 7};
    ASSERT_EQ(sink->positions, positions);
    const std::vector<float> prompt_rows(sink->rows.begin(), sink->rows.begin() + 5 * V);
    EXPECT_LE(max_row_rel_l2(prompt_rows, want, V), 1e-4);
    for (int32_t k = 0; k < n_gen; ++k)
      EXPECT_EQ(sink->tokens[static_cast<size_t>(k)], argmax(sink->rows.data() + (4 + k) * V, V)) << k;
    EXPECT_TRUE(plain->positions.empty());
    alone = plain->tokens;
    // The engine directly: one forward of the prompt and the generated tokens but the last, a row each.
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), sink->tokens.begin(), sink->tokens.end() - 1);
    svc.shutdown(std::chrono::milliseconds(0));
    BlockTable t;
    ASSERT_TRUE(t.reserve(engine->kv().pool(), static_cast<int64_t>(all.size())));
    const auto n = static_cast<int64_t>(all.size());
    const std::span<const float> direct = engine->step(StepBatch{{{&t.pages(), 0, all.data(), n, n}}});
    EXPECT_LE(max_row_rel_l2(sink->rows, std::vector<float>(direct.begin(), direct.end()), V), 1e-5);
    t.release(engine->kv().pool());
  }
  GenerateRequest g = greedy_request({1, 403, 407}, n_gen);
  EXPECT_EQ(generate(*engine, {g})[0].tokens, alone);
  EXPECT_EQ(engine->kv().pool().n_free(), engine->kv().pool().n_pages());
}

}  // namespace
}  // namespace ft::testing
