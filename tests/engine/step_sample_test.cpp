// Engine::step_sample (the backend's sampler, staged rows and edits) against Sampler::sample on the
// logits Engine::step returns for the same step, on stories260K: three sequences in one batch with
// greedy, top-p + top_logprobs and top-k + min-p + penalties + logit_bias, over 12 decode steps.
#include "../model/fixture_util.h"
#include "kv/page_pool.h"
#include "step_sample.h"

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
  const int differing = expect_step_sample_equals_host(*engine, {1, 403, 407, 261, 378}, three_params(), 12, 1e-5f);
  EXPECT_GT(differing, 0);  // the sampled sequences left the greedy one
}

TEST(StepSample, RefusesRowsThatDoNotMatchTheStep) {
  auto engine = Engine::load(shared_dir() + "/data/models/stories260K.gguf", small_engine_options());
  PagePool& pool = engine->kv().pool();
  BlockTable t;
  ASSERT_TRUE(t.reserve(pool, 16));
  const std::vector<int32_t> ids = {1, 403};
  const StepBatch items{{{&t.pages(), 0, ids.data(), 2, 1}}};
  std::vector<SampleRow> two(2);
  EXPECT_THROW(engine->step_sample(items, two, {}), Error);
  std::vector<SampleRow> one(1);
  one[0].edit_end = 1;
  EXPECT_THROW(engine->step_sample(items, one, {}), Error);
  const std::vector<LogitEdit> bad = {{100000, 1.0f, 0, 0, 0.0f}};
  EXPECT_THROW(engine->step_sample(items, one, bad), Error);
  const std::vector<LogitEdit> twice = {{5, 1.0f, 0, 0, 0.0f}, {5, 2.0f, 0, 0, 0.0f}};  // id 5 twice in a row
  one[0].edit_end = 2;
  EXPECT_THROW(engine->step_sample(items, one, twice), Error);
  one[0].edit_end = 0;
  EXPECT_EQ(engine->step_sample(items, one, {}).size(), 1u);
  // Two rows sharing an edit (the device would race on it), and more rows than planned.
  BlockTable u;
  ASSERT_TRUE(u.reserve(pool, 16));
  const StepBatch both{{{&t.pages(), 2, ids.data(), 1, 1}, {&u.pages(), 0, ids.data(), 1, 1}}};
  std::vector<SampleRow> shared(2);
  shared[0].edit_end = shared[1].edit_end = 1;
  const std::vector<LogitEdit> e1 = {{5, 1.0f, 0, 0, 0.0f}};
  EXPECT_THROW(engine->step_sample(both, shared, e1), Error);
  EngineOptions o = small_engine_options();
  o.max_logit_rows = 1;
  auto narrow = Engine::load(shared_dir() + "/data/models/stories260K.gguf", o);
  BlockTable a, b;
  ASSERT_TRUE(a.reserve(narrow->kv().pool(), 16));
  ASSERT_TRUE(b.reserve(narrow->kv().pool(), 16));
  const StepBatch two_items{{{&a.pages(), 0, ids.data(), 1, 1}, {&b.pages(), 0, ids.data(), 1, 1}}};
  EXPECT_THROW(narrow->step_sample(two_items, two, {}), Error);
  a.release(narrow->kv().pool());
  b.release(narrow->kv().pool());
  u.release(pool);
  t.release(pool);
}

}  // namespace
}  // namespace ft::testing
