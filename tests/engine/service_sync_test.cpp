// EngineService without a worker thread (engine/generate.h's driver): run_until_idle() runs the loop on
// the calling thread, all requests of one call together as one batch, and a forward that throws ends
// its requests and is rethrown with every page returned; run_step() runs one step; fed tokens
// (GenerationRequest::feed_tokens, ft bench) replace the sampled ones in the sequence.
#include <gtest/gtest.h>

#include "engine/fake_model.h"
#include "engine/service_testing.h"
#include "engine/service.h"
#include "util/error.h"

namespace ft {
namespace {

using testing::CollectSink;
using testing::FakeModel;
using testing::cfg;
using testing::greedy;
using testing::prompt_of;

ServiceConfig sync_cfg(int32_t max_running, int32_t prefill) {
  ServiceConfig c = cfg(max_running, prefill);
  c.worker_thread = false;
  return c;
}

TEST(EngineServiceSync, RunUntilIdleRunsTheRequestsAsOneBatch) {
  FakeModel model(40, 64, 16);
  PagePool pool(64, 16);
  EngineService svc(model, pool, sync_cfg(6, 64));
  std::vector<std::shared_ptr<CollectSink>> sinks;
  for (int i = 0; i < 6; ++i) {
    sinks.push_back(std::make_shared<CollectSink>());
    svc.submit(greedy(prompt_of(10, i), 5, sinks.back()));
  }
  EXPECT_EQ(model.steps, 0);  // nothing runs before the caller drives the loop
  svc.run_until_idle();
  // One step prefills every prompt (60 tokens) and samples each first token; four steps decode all six.
  EXPECT_EQ(model.steps, 5);
  EXPECT_EQ(model.max_batch_tokens, 60);
  for (int i = 0; i < 6; ++i) {
    const CollectSink& s = *sinks[static_cast<size_t>(i)];
    EXPECT_EQ(s.finishes, 1);
    EXPECT_EQ(s.finish.reason, FinishReason::kLength);
    EXPECT_EQ(s.tokens, model.solo_greedy(prompt_of(10, i), 5));
  }
  EXPECT_EQ(svc.stats().kv_pages_used, 0);
  // The service takes more requests after a run.
  auto again = std::make_shared<CollectSink>();
  svc.submit(greedy(prompt_of(30, 7), 3, again));
  svc.run_until_idle();
  EXPECT_EQ(again->tokens, model.solo_greedy(prompt_of(30, 7), 3));
}

/** A fake model whose forward throws at step `fail_at` (counting from 0). */
class FailingModel : public FakeModel {
 public:
  FailingModel(int64_t fail_at) : FakeModel(40, 64, 16), fail_at_(fail_at) {}
  std::span<const float> forward(const StepBatch& b) override {
    if (steps == fail_at_) fail(ErrorCode::kInvalidArgument, "fake model: step {} refused", fail_at_);
    return FakeModel::forward(b);
  }

 private:
  int64_t fail_at_;
};

TEST(EngineServiceSync, AForwardErrorEndsItsRequestsAndIsRethrown) {
  FailingModel model(2);
  PagePool pool(64, 16);
  EngineService svc(model, pool, sync_cfg(4, 64));
  auto a = std::make_shared<CollectSink>(), b = std::make_shared<CollectSink>();
  svc.submit(greedy(prompt_of(12, 1), 6, a));
  svc.submit(greedy(prompt_of(12, 2), 6, b));
  try {
    svc.run_until_idle();
    FAIL() << "expected the forward's error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("step 2 refused"), std::string::npos) << e.what();
  }
  for (const auto& s : {a, b}) {
    EXPECT_EQ(s->finishes, 1);
    EXPECT_EQ(s->finish.reason, FinishReason::kError);
    EXPECT_EQ(s->tokens.size(), 2u);  // the prefill's token and one decode's
  }
  EXPECT_EQ(svc.stats().running + svc.stats().waiting, 0);
  EXPECT_EQ(svc.stats().kv_pages_used, 0);
}

TEST(EngineServiceSync, RunUntilIdleIsRefusedWithAWorkerThread) {
  FakeModel model(40, 16, 16);
  PagePool pool(16, 16);
  EngineService svc(model, pool, cfg());
  EXPECT_THROW(svc.run_until_idle(), Error);
}

TEST(EngineServiceSync, RunStepRunsOneStepAndFedTokensReplaceTheSampledOnes) {
  FakeModel model(40, 64, 16);
  PagePool pool(64, 16);
  EngineService svc(model, pool, sync_cfg(2, 64));
  auto sink = std::make_shared<CollectSink>();
  GenerationRequest g = greedy(prompt_of(10, 1), 4, sink);
  g.feed_tokens = {3, 5, 7};
  const std::vector<int32_t> prompt = g.prompt;
  svc.submit(std::move(g));
  EXPECT_TRUE(svc.run_step());  // the prefill, with its first token
  EXPECT_EQ(model.steps, 1);
  EXPECT_EQ(sink->tokens.size(), 1u);
  EXPECT_TRUE(svc.run_step());
  EXPECT_EQ(sink->tokens.size(), 2u);
  svc.run_until_idle();
  EXPECT_FALSE(svc.run_step());  // nothing left
  ASSERT_EQ(sink->tokens.size(), 4u);
  // Token i is the greedy one after the prompt and fed tokens [0, i), not after the sampled ones.
  std::vector<int32_t> context = prompt;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(sink->tokens[i], model.solo_greedy(context, 1)[0]) << i;
    if (i < 3) context.push_back(std::vector<int32_t>{3, 5, 7}[i]);
  }
  EXPECT_NE(sink->tokens, model.solo_greedy(prompt, 4));  // feeding changed the continuation
  auto bad = std::make_shared<CollectSink>();
  GenerationRequest b = greedy(prompt_of(10, 2), 4, bad);
  b.feed_tokens = {40};  // outside the vocabulary
  EXPECT_THROW(svc.submit(std::move(b)), Error);
}

}  // namespace
}  // namespace ft
