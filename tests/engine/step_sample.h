#pragma once
// Engine::step_sample against the host sampler on the same step's logits, for the CPU backend's test
// (step_sample_test.cpp) and the CUDA backend's (tests/backend/cuda_sample_test.cpp).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "kv/page_pool.h"

namespace ft::testing {

/** One sequence a params entry, all from `prompt`, for `steps` steps; each step runs twice: Engine::step
 *  with each row's logits through Sampler::sample, then Engine::step_sample with twin samplers. Expects
 *  the same ids and top_logprobs ids, and logprobs within `tol`. Returns how many tokens of the other
 *  sequences differed from the first one's at the same step. */
inline int expect_step_sample_equals_host(Engine& engine, const std::vector<int32_t>& prompt,
                                          const std::vector<SamplingParams>& params, int steps, float tol) {
  const auto V = static_cast<int32_t>(engine.config().n_vocab);
  const size_t S = params.size();
  std::vector<std::unique_ptr<Sampler>> host, dev;
  for (const SamplingParams& p : params) {
    host.push_back(std::make_unique<Sampler>(p, V, std::vector<int32_t>{2}, prompt));
    dev.push_back(std::make_unique<Sampler>(p, V, std::vector<int32_t>{2}, prompt));
  }
  PagePool& pool = engine.kv().pool();
  std::vector<BlockTable> tables(S);
  std::vector<std::vector<int32_t>> tokens(S, prompt);
  for (BlockTable& t : tables) EXPECT_TRUE(t.reserve(pool, static_cast<int64_t>(prompt.size()) + steps + 1));
  StepBatch batch;
  std::vector<StepItem>& items = batch.items;
  for (size_t s = 0; s < S; ++s)
    items.push_back({&tables[s].pages(), 0, tokens[s].data(), static_cast<int64_t>(prompt.size()), 1});
  int differing = 0;
  for (int step = 0; step < steps; ++step) {
    const std::span<const float> logits = engine.step(batch);
    const std::vector<float> copy(logits.begin(), logits.end());
    std::vector<SampledToken> want;
    for (size_t s = 0; s < S; ++s) want.push_back(host[s]->sample(copy.data() + s * V));
    std::vector<SampleRow> rows(S);
    std::vector<LogitEdit> edits;
    for (size_t s = 0; s < S; ++s) dev[s]->prepare(rows[s], edits);
    const std::span<const SampleResult> got = engine.step_sample(batch, rows, edits);  // the same step again
    EXPECT_EQ(got.size(), S);
    if (got.size() != S) break;
    for (size_t s = 0; s < S; ++s) {
      SCOPED_TRACE(::testing::Message() << "step " << step << " sequence " << s);
      const SampledToken t = dev[s]->take(got[s]);
      EXPECT_EQ(t.id, want[s].id);
      EXPECT_NEAR(t.logprob, want[s].logprob, tol);
      EXPECT_EQ(t.top.size(), want[s].top.size());
      for (size_t j = 0; j < std::min(t.top.size(), want[s].top.size()); ++j) {
        EXPECT_EQ(t.top[j].first, want[s].top[j].first);
        EXPECT_NEAR(t.top[j].second, want[s].top[j].second, tol);
      }
      differing += s > 0 && t.id != tokens[0].back();
      tokens[s].push_back(t.id);
      items[s] = {&tables[s].pages(), static_cast<int64_t>(tokens[s].size()) - 1, &tokens[s].back(), 1, 1};
    }
  }
  for (BlockTable& t : tables) t.release(pool);
  return differing;
}

}  // namespace ft::testing
