// Engine::step_sample (the backend's sampler, staged rows and edits) against Sampler::sample on the
// logits Engine::step returns for the same step, on stories260K: three sequences in one batch with
// greedy, top-p + top_logprobs and top-k + min-p + penalties + logit_bias, over 12 decode steps.
#include "../model/fixture_util.h"
#include "engine/engine_runner.h"
#include "kv/page_pool.h"

namespace ft::testing {
namespace {

std::vector<SamplingParams> three_params() {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.top_logprobs = 3;
  SamplingParams top_p;
  top_p.temperature = 0.9f;
  top_p.top_p = 0.9f;
  top_p.top_logprobs = 5;
  top_p.seed = 42;
  SamplingParams mixed;
  mixed.temperature = 1.3f;
  mixed.top_k = 20;
  mixed.min_p = 0.02f;
  mixed.repetition_penalty = 1.3f;
  mixed.presence_penalty = 0.5f;
  mixed.frequency_penalty = 0.3f;
  mixed.min_tokens = 4;
  mixed.logit_bias = {{13, 2.0f}, {100, -100.0f}};
  mixed.seed = 7;
  return {greedy, top_p, mixed};
}

TEST(StepSample, EqualsTheHostSamplerOnTheStepsLogits) {
  auto engine = Engine::load(shared_dir() + "/data/models/stories260K.gguf", small_engine_options());
  const auto V = static_cast<int32_t>(engine->config().n_vocab);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const std::vector<SamplingParams> params = three_params();
  const size_t S = params.size();
  std::vector<std::unique_ptr<Sampler>> host, dev;
  for (const SamplingParams& p : params) {
    host.push_back(std::make_unique<Sampler>(p, V, std::vector<int32_t>{2}, prompt));
    dev.push_back(std::make_unique<Sampler>(p, V, std::vector<int32_t>{2}, prompt));
  }
  PagePool& pool = engine->kv().pool();
  std::vector<BlockTable> tables(S);
  std::vector<std::vector<int32_t>> tokens(S, prompt);
  for (BlockTable& t : tables) ASSERT_TRUE(t.reserve(pool, 64));
  std::vector<StepItem> items;
  for (size_t s = 0; s < S; ++s)
    items.push_back({&tables[s].pages(), 0, tokens[s].data(), static_cast<int64_t>(prompt.size()), 1});
  int differing = 0;
  for (int step = 0; step < 12; ++step) {
    const std::span<const float> logits = engine->step(items);
    std::vector<float> copy(logits.begin(), logits.end());
    std::vector<SampledToken> want;
    for (size_t s = 0; s < S; ++s) want.push_back(host[s]->sample(copy.data() + s * V));
    std::vector<SampleRow> rows(S);
    std::vector<LogitEdit> edits;
    for (size_t s = 0; s < S; ++s) dev[s]->prepare(rows[s], edits);
    const std::span<const SampleResult> got = engine->step_sample(items, rows, edits);  // the same step again
    ASSERT_EQ(got.size(), S);
    for (size_t s = 0; s < S; ++s) {
      SCOPED_TRACE(::testing::Message() << "step " << step << " sequence " << s);
      const SampledToken t = dev[s]->take(got[s]);
      EXPECT_EQ(t.id, want[s].id);
      EXPECT_NEAR(t.logprob, want[s].logprob, 1e-5);
      ASSERT_EQ(t.top.size(), want[s].top.size());
      for (size_t j = 0; j < t.top.size(); ++j) {
        EXPECT_EQ(t.top[j].first, want[s].top[j].first);
        EXPECT_NEAR(t.top[j].second, want[s].top[j].second, 1e-5);
      }
      differing += s > 0 && t.id != tokens[0].back();
      tokens[s].push_back(t.id);
      items[s] = {&tables[s].pages(), static_cast<int64_t>(tokens[s].size()) - 1, &tokens[s].back(), 1, 1};
    }
  }
  EXPECT_GT(differing, 0);  // the sampled sequences left the greedy one
  for (BlockTable& t : tables) t.release(pool);
}

TEST(StepSample, RefusesRowsThatDoNotMatchTheStep) {
  auto engine = Engine::load(shared_dir() + "/data/models/stories260K.gguf", small_engine_options());
  PagePool& pool = engine->kv().pool();
  BlockTable t;
  ASSERT_TRUE(t.reserve(pool, 16));
  const std::vector<int32_t> ids = {1, 403};
  const std::vector<StepItem> items = {{&t.pages(), 0, ids.data(), 2, 1}};
  std::vector<SampleRow> two(2);
  EXPECT_THROW(engine->step_sample(items, two, {}), Error);
  std::vector<SampleRow> one(1);
  one[0].edit_end = 1;
  EXPECT_THROW(engine->step_sample(items, one, {}), Error);
  const std::vector<LogitEdit> bad = {{100000, 1.0f, 0, 0, 0.0f}};
  EXPECT_THROW(engine->step_sample(items, one, bad), Error);
  one[0].edit_end = 0;
  EXPECT_EQ(engine->step_sample(items, one, {}).size(), 1u);
  t.release(pool);
}

}  // namespace
}  // namespace ft::testing
