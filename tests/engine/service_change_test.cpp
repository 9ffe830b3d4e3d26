// EngineService::change (POST /v1/admin/cache's way into the serving loop): applied between two steps
// with no page held when it replaces the KV pools; the running and queued requests go on over the new
// pools and finish with their solo outputs; a refused change (its check throws) releases nothing; a
// change after shutdown is refused.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/fake_model.h"
#include "engine/service.h"
#include "engine/service_testing.h"
#include "util/error.h"

namespace ft {
namespace {

using namespace ft::testing;
using testing::FakeModel;

TEST(ServiceChange, NewPoolsBetweenStepsKeepEveryRequest) {
  FakeModel model(40, 64, 16);
  PagePool pool(64, 16), smaller(20, 16);
  EngineService svc(model, pool, cfg(4, 48));
  auto held = std::make_shared<CollectSink>(-1, /*block_first=*/true);  // the loop waits in its first token
  auto other = std::make_shared<CollectSink>();
  auto queued = std::make_shared<CollectSink>();
  svc.submit(greedy(prompt_of(40, 1), 30, held));
  svc.submit(greedy(prompt_of(70, 2), 25, other));
  held->wait_tokens(1);
  svc.submit(greedy(prompt_of(33, 3), 20, queued));
  std::atomic<int64_t> longest{0};
  std::atomic<bool> pages_free{false};
  ServiceChange c;
  c.check = [&](int64_t n) { longest = n; };
  c.apply = [&] { pages_free = pool.n_free() == pool.n_pages(); };
  c.pools = [&] { return KvPools(smaller); };
  std::thread changing([&] { svc.change(c); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  held->unblock();
  changing.join();
  EXPECT_EQ(longest, 70 + 25);
  EXPECT_TRUE(pages_free) << "the running requests' pages and the prefix cache were released first";
  for (const auto& [sink, n, salt, max] : {std::tuple{held, 40, 1, 30}, {other, 70, 2, 25}, {queued, 33, 3, 20}}) {
    const FinishInfo f = sink->wait();
    EXPECT_EQ(f.reason, FinishReason::kLength);
    EXPECT_EQ(sink->tokens, model.solo_greedy(prompt_of(n, salt), max)) << "prompt " << n;
  }
  const EngineStats s = svc.stats();
  EXPECT_EQ(s.kv_pages_total, 20);
  EXPECT_EQ(s.context_limit, 320);
  EXPECT_EQ(svc.context_limit(), 320);
  EXPECT_EQ(s.requests_cancelled, 0);
}

TEST(ServiceChange, ARefusedChangeReleasesNothingAndShutdownRefusesOne) {
  FakeModel model(40, 64, 16);
  PagePool pool(64, 16);
  EngineService svc(model, pool, cfg(4, 48));
  auto sink = std::make_shared<CollectSink>();
  svc.submit(greedy(prompt_of(20, 1), 5, sink));
  sink->wait();
  const int32_t cached = svc.stats().kv_pages_cached;
  ASSERT_GT(cached, 0);
  bool applied = false;
  ServiceChange c;
  c.check = [](int64_t) { fail(ErrorCode::kInvalidArgument, "refused by its check"); };
  c.apply = [&] { applied = true; };
  c.pools = [&] { return KvPools(pool); };
  EXPECT_THROW(svc.change(c), Error);
  EXPECT_FALSE(applied);
  EXPECT_EQ(svc.stats().kv_pages_cached, cached) << "the prefix cache stays";
  svc.shutdown(std::chrono::milliseconds(0));
  c.check = nullptr;
  try {
    svc.change(c);
    ADD_FAILURE() << "a change after shutdown was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOverloaded);
  }
  EXPECT_FALSE(applied);
}

}  // namespace
}  // namespace ft
