// EngineService with a TokenConstraint (constrained decoding): every token is one the constraint
// allowed, end-of-generation only once it is complete, a complete constraint with nothing left ends the
// request with stop, a dead end with an error, and unconstrained requests of the same steps are
// unchanged.
#include <gtest/gtest.h>

#include <set>

#include "engine/fake_model.h"
#include "engine/service.h"
#include "engine/service_testing.h"

namespace ft {
namespace {

using testing::CollectSink;
using testing::FakeModel;
using testing::cfg;
using testing::greedy;
using testing::prompt_of;

/** Allows the ids of steps[k] at the k-th token; complete after the last step (nothing allowed then). */
class StepsConstraint : public TokenConstraint {
 public:
  explicit StepsConstraint(std::vector<std::set<int32_t>> steps) : steps_(std::move(steps)) {}
  int64_t allowed(std::span<uint32_t> bits, int64_t budget) override {
    budgets.push_back(budget);
    if (k_ >= steps_.size()) return 0;
    for (int32_t id : steps_[k_]) bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    return static_cast<int64_t>(steps_[k_].size());
  }
  bool accept(int32_t id) override {
    if (k_ >= steps_.size() || !steps_[k_].count(id)) return false;
    ++k_;
    return true;
  }
  bool complete() const override { return k_ >= steps_.size(); }
  std::vector<int64_t> budgets;

 private:
  std::vector<std::set<int32_t>> steps_;
  size_t k_ = 0;
};

TEST(EngineServiceConstraint, TokensStayInTheAllowedSetsAndACompleteValueEndsTheRequest) {
  FakeModel model(40, 32, 16);
  PagePool pool(32, 16);
  EngineService svc(model, pool, cfg());
  const std::vector<std::set<int32_t>> steps = {{3, 5, 7}, {11}, {0, 1, 2, 38, 39}, {20, 21}};
  auto c = std::make_shared<StepsConstraint>(steps);
  auto sink = std::make_shared<CollectSink>();
  auto req = greedy(prompt_of(9, 1), 10, sink);
  req.constraint = c;
  svc.submit(req);
  const FinishInfo f = sink->wait();
  EXPECT_EQ(f.reason, FinishReason::kStop);
  ASSERT_EQ(sink->tokens.size(), steps.size());
  for (size_t k = 0; k < steps.size(); ++k) EXPECT_TRUE(steps[k].count(sink->tokens[k])) << k;
  // Greedy under the mask: the allowed id with the largest logit of the context so far.
  std::vector<int32_t> ctx = prompt_of(9, 1);
  for (size_t k = 0; k < steps.size(); ++k) {
    uint64_t h = 0;
    for (size_t p = 0; p < ctx.size(); ++p) h = testing::fake_mix(h, testing::fake_kv(ctx[p], static_cast<int32_t>(p)));
    std::vector<float> row(40);
    testing::fake_logits(h, 40, row.data());
    int32_t best = -1;
    for (int32_t id : steps[k])
      if (best < 0 || row[static_cast<size_t>(id)] > row[static_cast<size_t>(best)]) best = id;
    EXPECT_EQ(sink->tokens[k], best) << k;
    ctx.push_back(sink->tokens[k]);
  }
  // The budget counts down from max_tokens.
  ASSERT_GE(c->budgets.size(), 4u);
  EXPECT_EQ(c->budgets[0], 10);
  EXPECT_EQ(c->budgets[1], 9);
  EXPECT_EQ(svc.stats().kv_pages_used, 0);
}

TEST(EngineServiceConstraint, EndOfGenerationOnlyOnceComplete) {
  FakeModel model(40, 32, 16);
  PagePool pool(32, 16);
  EngineService svc(model, pool, cfg());
  const auto p = prompt_of(12, 3);
  // The unconstrained first greedy token is declared EOG: it may not come first under the constraint.
  const int32_t eog = model.solo_greedy(p, 1)[0];
  std::set<int32_t> first;
  for (int32_t id = 0; id < 40; ++id)
    if (id != eog) first.insert(id);
  auto sink = std::make_shared<CollectSink>();
  auto req = greedy(p, 10, sink);
  req.eog_ids = {eog};
  req.constraint = std::make_shared<StepsConstraint>(std::vector<std::set<int32_t>>{first, {eog == 4 ? 5 : 4}});
  svc.submit(req);
  const FinishInfo f = sink->wait();
  EXPECT_EQ(f.reason, FinishReason::kStop);
  // Two constrained tokens, then the only allowed one: EOG.
  ASSERT_EQ(sink->tokens.size(), 3u);
  EXPECT_NE(sink->tokens[0], eog);
  EXPECT_EQ(sink->tokens[1], eog == 4 ? 5 : 4);
  EXPECT_EQ(sink->tokens[2], eog);
  EXPECT_TRUE(sink->last_eog);
  EXPECT_EQ(f.completion_tokens, 3);
}

TEST(EngineServiceConstraint, ADeadEndIsAnErrorOfThatRequestOnly) {
  FakeModel model(40, 64, 16);
  PagePool pool(64, 16);
  EngineService svc(model, pool, cfg());
  auto bad_sink = std::make_shared<CollectSink>();
  auto bad = greedy(prompt_of(10, 2), 8, bad_sink);
  // Incomplete with nothing allowed after the first token.
  bad.constraint = std::make_shared<StepsConstraint>(std::vector<std::set<int32_t>>{{6}, {}, {7}});
  auto good_sink = std::make_shared<CollectSink>();
  const auto gp = prompt_of(14, 5);
  svc.submit(bad);
  svc.submit(greedy(gp, 6, good_sink));
  const FinishInfo fb = bad_sink->wait();
  EXPECT_EQ(fb.reason, FinishReason::kError);
  EXPECT_NE(fb.error.find("constrained decoding"), std::string::npos) << fb.error;
  EXPECT_EQ(bad_sink->tokens, std::vector<int32_t>{6});
  const FinishInfo fg = good_sink->wait();
  EXPECT_EQ(fg.reason, FinishReason::kLength);
  EXPECT_EQ(good_sink->tokens, model.solo_greedy(gp, 6));
  EXPECT_EQ(svc.stats().kv_pages_used, 0);
}

TEST(EngineServiceConstraint, MaxTokensStillEndsAConstrainedRequest) {
  FakeModel model(40, 32, 16);
  PagePool pool(32, 16);
  EngineService svc(model, pool, cfg());
  std::vector<std::set<int32_t>> steps(20, std::set<int32_t>{1, 2, 3});
  auto sink = std::make_shared<CollectSink>();
  auto req = greedy(prompt_of(8, 4), 5, sink);
  req.constraint = std::make_shared<StepsConstraint>(steps);
  svc.submit(req);
  const FinishInfo f = sink->wait();
  EXPECT_EQ(f.reason, FinishReason::kLength);
  EXPECT_EQ(sink->tokens.size(), 5u);
  for (int32_t t : sink->tokens) EXPECT_TRUE(t >= 1 && t <= 3) << t;
}

}  // namespace
}  // namespace ft
