// EngineService: the worker loop over the scheduler with a paged fake model. Concurrent requests give
// the same greedy tokens as solo runs, usage counts are exact, cancellation and stop requests end a
// request within a step and return its pages, errors are thrown at submit.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/fake_model.h"
#include "engine/service_testing.h"
#include "engine/service.h"
#include "util/error.h"

namespace ft {
namespace {

using namespace std::chrono_literals;
using testing::CollectSink;
using testing::FakeModel;
using testing::cfg;
using testing::greedy;
using testing::prompt_of;

TEST(EngineService, ConcurrentRequestsMatchSoloRunsWithExactUsage) {
  FakeModel model(40, 64, 16);
  PagePool pool(64, 16);
  EngineService svc(model, pool, cfg());
  std::vector<std::shared_ptr<CollectSink>> sinks;
  std::vector<std::thread> threads;
  std::mutex mu;
  for (int i = 0; i < 8; ++i) {
    auto sink = std::make_shared<CollectSink>();
    sinks.push_back(sink);
    threads.emplace_back([&, i, sink] { svc.submit(greedy(prompt_of(10 + 23 * i, i), 5 + 3 * i, sink)); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    FinishInfo f = sinks[static_cast<size_t>(i)]->wait();
    EXPECT_EQ(f.reason, FinishReason::kLength);
    EXPECT_EQ(f.prompt_tokens, 10 + 23 * i);
    EXPECT_EQ(f.completion_tokens, 5 + 3 * i);
    EXPECT_EQ(sinks[static_cast<size_t>(i)]->tokens, model.solo_greedy(prompt_of(10 + 23 * i, i), 5 + 3 * i));
    EXPECT_EQ(sinks[static_cast<size_t>(i)]->finishes, 1);
  }
  EngineStats s = svc.stats();
  EXPECT_EQ(s.requests_total, 8);
  EXPECT_EQ(s.requests_finished, 8);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.kv_pages_used, 0);
  EXPECT_EQ(s.generation_tokens_total, 8 * 5 + 3 * 28);
  EXPECT_GT(s.mean_ttft_s, 0.0);
}

TEST(EngineService, EndOfGenerationStopAndLength) {
  FakeModel model(40, 32, 16);
  PagePool pool(32, 16);
  EngineService svc(model, pool, cfg());
  const auto p = prompt_of(12, 3);
  const auto expect = model.solo_greedy(p, 6);
  // The 4th greedy token declared end-of-generation: the request stops there and counts it.
  auto sink = std::make_shared<CollectSink>();
  auto req = greedy(p, 20, sink);
  req.eog_ids = {expect[3]};
  svc.submit(req);
  FinishInfo f = sink->wait();
  size_t first = 0;
  while (expect[first] != expect[3]) ++first;  // the id may occur earlier
  EXPECT_EQ(f.reason, FinishReason::kStop);
  EXPECT_EQ(f.completion_tokens, static_cast<int32_t>(first + 1));
  EXPECT_TRUE(sink->last_eog);
  // ignore_eos keeps going to max_tokens.
  auto sink2 = std::make_shared<CollectSink>();
  req = greedy(p, 6, sink2);
  req.eog_ids = {expect[3]};
  req.ignore_eos = true;
  svc.submit(req);
  EXPECT_EQ(sink2->wait().reason, FinishReason::kLength);
  EXPECT_EQ(sink2->tokens, expect);
  // A stop id (vLLM's stop_token_ids) ends the request even with ignore_eos, and min_tokens holds it back.
  auto sink_s = std::make_shared<CollectSink>();
  req = greedy(p, 20, sink_s);
  req.stop_ids = {expect[3]};
  req.ignore_eos = true;
  svc.submit(req);
  f = sink_s->wait();
  EXPECT_EQ(f.reason, FinishReason::kStop);
  EXPECT_EQ(f.completion_tokens, static_cast<int32_t>(first + 1));
  EXPECT_TRUE(sink_s->last_eog);
  auto sink_m = std::make_shared<CollectSink>();
  req = greedy(p, static_cast<int32_t>(first) + 3, sink_m);
  req.stop_ids = {expect[3]};
  req.sampling.min_tokens = static_cast<int32_t>(first) + 3;
  svc.submit(req);
  EXPECT_EQ(sink_m->wait().reason, FinishReason::kLength);
  for (int32_t t : sink_m->tokens) EXPECT_NE(t, expect[3]);
  // An id outside the vocabulary is refused at submission.
  req = greedy(p, 5, std::make_shared<CollectSink>());
  req.stop_ids = {40};
  EXPECT_THROW(svc.submit(req), Error);
  // The sink asks to stop after 2 tokens (a stop string).
  auto sink3 = std::make_shared<CollectSink>(2);
  svc.submit(greedy(p, 6, sink3));
  f = sink3->wait();
  EXPECT_EQ(f.reason, FinishReason::kStop);
  EXPECT_EQ(f.completion_tokens, 2);
  EXPECT_EQ(f.cached_tokens, 0);  // 12-token prompt: no whole page of 16 below its last token
  // A 40-token prompt run twice: the second reuses 2 whole pages and yields the same tokens.
  auto s4 = std::make_shared<CollectSink>(), s5 = std::make_shared<CollectSink>();
  svc.submit(greedy(prompt_of(40, 9), 5, s4));
  EXPECT_EQ(s4->wait().cached_tokens, 0);
  svc.submit(greedy(prompt_of(40, 9), 5, s5));
  EXPECT_EQ(s5->wait().cached_tokens, 32);
  EXPECT_EQ(s5->tokens, s4->tokens);
  EXPECT_EQ(svc.stats().cached_tokens_total, 32);
}

TEST(EngineService, CancelEndsARunningRequestAndFreesItsPages) {
  FakeModel model(40, 32, 16);
  PagePool pool(32, 16);
  EngineService svc(model, pool, cfg());
  auto sink = std::make_shared<CollectSink>(-1, /*block_first=*/true);
  const uint64_t id = svc.submit(greedy(prompt_of(40, 1), 200, sink));
  sink->wait_tokens(1);  // the worker is now blocked inside on_token of the first token
  svc.cancel(id);
  EXPECT_GT(svc.stats().kv_pages_used, 0);
  sink->unblock();
  FinishInfo f = sink->wait();
  EXPECT_EQ(f.reason, FinishReason::kCancelled);
  EXPECT_LE(f.completion_tokens, 2);
  EngineStats s = svc.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.kv_pages_used, 0);
  EXPECT_EQ(s.requests_cancelled, 1);
  svc.cancel(id);  // unknown now: ignored
}

TEST(EngineService, SubmitErrors) {
  FakeModel model(40, 8, 16);
  PagePool pool(8, 16);  // 128 positions
  EngineService svc(model, pool, cfg());
  EXPECT_EQ(svc.context_limit(), 128);
  auto sink = std::make_shared<CollectSink>();
  auto expect_code = [&](GenerationRequest r, ErrorCode code) {
    try {
      svc.submit(std::move(r));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
    }
  };
  expect_code(greedy(prompt_of(100, 0), 29, sink), ErrorCode::kContextLength);
  expect_code(greedy({1, 2, 40}, 4, sink), ErrorCode::kInvalidArgument);  // id outside the vocabulary
  expect_code(greedy({}, 4, sink), ErrorCode::kInvalidArgument);
  auto bad = greedy({1}, 4, sink);
  bad.sampling.top_p = 2.0f;
  expect_code(bad, ErrorCode::kInvalidArgument);
  EXPECT_EQ(sink->finishes, 0);
  EXPECT_EQ(svc.stats().requests_rejected, 4);
  svc.shutdown(0ms);
  expect_code(greedy({1}, 4, sink), ErrorCode::kOverloaded);
}

TEST(EngineService, ShutdownCancelsWhatIsLeft) {
  FakeModel model(40, 32, 16);
  PagePool pool(32, 16);
  auto svc = std::make_unique<EngineService>(model, pool, cfg(1));
  auto a = std::make_shared<CollectSink>(-1, true);
  auto b = std::make_shared<CollectSink>();
  svc->submit(greedy(prompt_of(5, 1), 100, a));
  svc->submit(greedy(prompt_of(5, 2), 100, b));  // waits: max_running 1
  a->wait_tokens(1);
  std::thread t([&] { svc->shutdown(0ms); });
  std::this_thread::sleep_for(20ms);
  a->unblock();
  t.join();
  EXPECT_EQ(a->wait().reason, FinishReason::kCancelled);
  EXPECT_EQ(b->wait().reason, FinishReason::kCancelled);
  EXPECT_EQ(b->finish.completion_tokens, 0);
  EXPECT_EQ(svc->stats().kv_pages_used, 0);
  EXPECT_EQ(svc->stats().requests_cancelled, 2);
  svc.reset();
}

}  // namespace
}  // namespace ft
