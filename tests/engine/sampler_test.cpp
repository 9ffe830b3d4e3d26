#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "util/error.h"

namespace ft {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(Sampler, GreedyPicksArgmaxAndReportsLogprob) {
  Sampler s(greedy(), 4, {});
  const float logits[4] = {0.0f, 2.0f, 1.0f, -1.0f};
  SampledToken t = s.sample(logits);
  EXPECT_EQ(t.id, 1);
  const double z = std::exp(0.0) + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(t.logprob, 2.0 - std::log(z), 1e-6);
  EXPECT_EQ(s.generated(), 1);
}

TEST(Sampler, FullyMaskedRowIsDefined) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_logprobs = 2;
  Sampler s(p, 3, {});
  const float logits[3] = {-kInf, std::nanf(""), -kInf};
  SampledToken t = s.sample(logits);
  EXPECT_EQ(t.id, 0);
  EXPECT_FALSE(std::isnan(t.logprob));
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(i * 0.7f);
  Sampler a(p, 50, {}), b(p, 50, {});
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 40; ++i) {
    ta.push_back(a.sample(logits.data()).id);
    tb.push_back(b.sample(logits.data()).id);
  }
  EXPECT_EQ(ta, tb);
  // Not all the same token: the distribution is genuinely sampled.
  EXPECT_GT(std::set<int32_t>(ta.begin(), ta.end()).size(), 3u);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  p.seed = 7;
  Sampler s(p, 5, {});
  const float logits[5] = {0.1f, 0.3f, 0.2f, 0.25f, 0.0f};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits).id, 1);
}

TEST(Sampler, TopPAndMinPRestrictCandidates) {
  // probs ~ [0.6, 0.3, 0.1]: top_p 0.5 keeps only id 0; min_p 0.4 keeps ids 0 and 1.
  const float logits[3] = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingParams p;
  p.seed = 3;
  p.top_p = 0.5f;
  Sampler a(p, 3, {});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits).id, 0);
  p.top_p = 1.0f;
  p.min_p = 0.4f;
  Sampler b(p, 3, {});
  std::map<int32_t, int> counts;
  for (int i = 0; i < 400; ++i) ++counts[b.sample(logits).id];
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_GT(counts[0], 200);
  EXPECT_GT(counts[1], 60);
}

TEST(Sampler, SamplingFollowsTheDistribution) {
  const float logits[2] = {std::log(0.75f), std::log(0.25f)};
  SamplingParams p;
  p.seed = 11;
  Sampler s(p, 2, {});
  int zeros = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) zeros += s.sample(logits).id == 0;
  EXPECT_NEAR(zeros / double(n), 0.75, 0.03);
}

TEST(Sampler, MinTokensMasksEos) {
  SamplingParams p = greedy();
  p.min_tokens = 2;
  Sampler s(p, 3, {2});
  const float logits[3] = {0.0f, 1.0f, 5.0f};
  EXPECT_EQ(s.sample(logits).id, 1);
  EXPECT_EQ(s.sample(logits).id, 1);
  EXPECT_EQ(s.sample(logits).id, 2);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplingParams p = greedy();
  p.frequency_penalty = 0.6f;
  Sampler s(p, 2, {});
  const float logits[2] = {1.0f, 0.0f};
  EXPECT_EQ(s.sample(logits).id, 0);  // 1.0 vs 0.0
  EXPECT_EQ(s.sample(logits).id, 0);  // 0.4 vs 0.0
  EXPECT_EQ(s.sample(logits).id, 1);  // -0.2 vs 0.0
  SamplingParams q = greedy();
  q.presence_penalty = 1.5f;
  Sampler t(q, 2, {});
  EXPECT_EQ(t.sample(logits).id, 0);
  EXPECT_EQ(t.sample(logits).id, 1);  // -0.5 vs 0.0
}

TEST(Sampler, RepetitionPenaltyCoversPromptAndSign) {
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;
  // id 0 (positive, in prompt) 1.0 -> 0.5; id 1 (negative, in prompt) -0.2 -> -0.4; id 2 untouched 0.6.
  Sampler s(p, 3, {}, {0, 1});
  const float logits[3] = {1.0f, -0.2f, 0.6f};
  EXPECT_EQ(s.sample(logits).id, 2);
}

TEST(Sampler, TopLogprobsAreSortedAndNormalised) {
  SamplingParams p = greedy();
  p.top_logprobs = 3;
  Sampler s(p, 4, {});
  const float logits[4] = {0.5f, 2.0f, 1.0f, 1.0f};
  SampledToken t = s.sample(logits);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 2);  // tie broken by lower id
  EXPECT_EQ(t.top[2].first, 3);
  EXPECT_FLOAT_EQ(t.top[0].second, t.logprob);
  double mass = 0;
  for (float l : logits) mass += std::exp(l - 2.0f + t.top[0].second);
  EXPECT_NEAR(mass, 1.0, 1e-5);
}

TEST(Sampler, RejectsBadParams) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler(p, 4, {}), Error);
  p = SamplingParams{};
  p.temperature = -1.0f;
  EXPECT_THROW(Sampler(p, 4, {}), Error);
  p = SamplingParams{};
  p.top_logprobs = 21;
  EXPECT_THROW(Sampler(p, 4, {}), Error);
  EXPECT_THROW(Sampler(SamplingParams{}, 0, {}), Error);
}

TEST(Sampler, LogitBiasForcesAndBansTokens) {
  const float logits[4] = {0.0f, 2.0f, 1.0f, -1.0f};
  // Greedy: +100 on the least likely token makes it the output; -100 on the argmax hands it to the next.
  SamplingParams p = greedy();
  p.logit_bias = {{3, 100.0f}};
  Sampler forced(p, 4, {});
  SampledToken t = forced.sample(logits);
  EXPECT_EQ(t.id, 3);
  // The reported log-probability stays the model's own (raw logits), as for the other processors.
  const double z = std::exp(0.0) + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(t.logprob, -1.0 - std::log(z), 1e-6);
  p.logit_bias = {{1, -100.0f}};
  Sampler banned(p, 4, {});
  EXPECT_EQ(banned.sample(logits).id, 2);
  // Sampled: a +100 bias leaves the others e^-97 or less of the mass.
  SamplingParams q;
  q.temperature = 1.0f;
  q.seed = 5;
  q.logit_bias = {{0, 100.0f}};
  Sampler s(q, 4, {});
  for (int i = 0; i < 200; ++i) ASSERT_EQ(s.sample(logits).id, 0);
}

TEST(Sampler, LogitBiasIsValidated) {
  SamplingParams p = greedy();
  p.logit_bias = {{4, 1.0f}};  // vocab is 4: ids 0..3
  EXPECT_THROW(Sampler(p, 4, {}), Error);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(Sampler(p, 4, {}), Error);
  p.logit_bias = {{0, 100.5f}};
  EXPECT_THROW(Sampler(p, 4, {}), Error);
  p.logit_bias = {{0, std::nanf("")}};
  EXPECT_THROW(Sampler(p, 4, {}), Error);
  p.logit_bias = {{0, -100.0f}, {3, 100.0f}};
  EXPECT_NO_THROW(Sampler(p, 4, {}));
  p.logit_bias = {{0, std::numeric_limits<float>::infinity()}};
  EXPECT_THROW(Sampler(p, 4, {}), Error);
  // -inf bans (llama.cpp's false): the best logit is skipped, greedy or sampled.
  p.logit_bias = {{1, -std::numeric_limits<float>::infinity()}};
  const float logits[4] = {0.0f, 50.0f, 1.0f, -1.0f};
  EXPECT_EQ(Sampler(p, 4, {}).sample(logits).id, 2);
  p.temperature = 1.0f;
  p.seed = 3;
  Sampler s(p, 4, {});
  for (int i = 0; i < 50; ++i) EXPECT_NE(s.sample(logits).id, 1);
}

}  // namespace
}  // namespace ft
