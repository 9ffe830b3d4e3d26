// Scheduler::release_all_kv and set_pools (POST /v1/admin/cache's KV resize): the running sequences go
// back to the queue's front in admission order and the prefix cache empties, so every page of the old
// pool is free; on the new pool they recompute and finish with the outputs they have alone; new pools
// are refused while pages are held.
#include <gtest/gtest.h>

#include "engine/scheduler.h"
#include "engine/scheduler_driver.h"
#include "util/error.h"

namespace ft {
namespace {

using testing::FakeModel;
using testing::tokens_of;

struct Driver : testing::RequestLog {
  Driver(SchedulerConfig cfg, int32_t n_pages, int32_t page_size) : model(50, n_pages, page_size), pool(n_pages, page_size), sched(cfg, pool) {}
  void step() { testing::greedy_step(sched, model, *this); }
  FakeModel model;
  PagePool pool;
  Scheduler sched;
};

TEST(SchedulerPools, ReleaseAllKvThenNewPoolsRecomputeToTheSoloOutputs) {
  Driver d(testing::scheduler_config(4, 64, SchedulerConfig{}.max_waiting), 64, 16);
  const std::vector<int32_t> shared = tokens_of(7, 40, 50);
  for (uint64_t id = 1; id <= 3; ++id) {
    std::vector<int32_t> p = shared;
    p.push_back(static_cast<int32_t>(id));
    d.submit(d.sched, id, p, 30);
  }
  d.submit(d.sched, 4, tokens_of(9, 12, 50), 20);
  for (int i = 0; i < 6; ++i) d.step();
  ASSERT_GT(d.sched.pages_in_use(), 0);
  ASSERT_GT(d.sched.pages_cached(), 0);
  const int32_t running = d.sched.n_running();
  ASSERT_GT(running, 1);

  const std::vector<uint64_t> moved = d.sched.release_all_kv();
  EXPECT_EQ(moved.size(), static_cast<size_t>(running));
  for (size_t i = 1; i < moved.size(); ++i) EXPECT_LT(moved[i - 1], moved[i]) << "admission order";
  EXPECT_EQ(d.sched.n_running(), 0);
  EXPECT_EQ(d.sched.n_waiting(), 4);
  EXPECT_EQ(d.sched.pages_cached(), 0);
  EXPECT_EQ(d.pool.n_free(), d.pool.n_pages());
  d.sched.check_integrity();

  PagePool smaller(12, 16);  // 192 positions: enough for one request at a time
  d.sched.set_pools(smaller);
  EXPECT_EQ(d.sched.context_limit(), 192);
  d.step();
  EXPECT_THROW(d.sched.set_pools(d.pool), Error) << "pages are held";
  for (int i = 0; i < 10000 && !d.sched.idle(); ++i) d.step();
  ASSERT_TRUE(d.sched.idle());
  EXPECT_EQ(d.done.size(), 4u);
  for (uint64_t id : d.done)
    EXPECT_EQ(d.generated[id], d.model.solo_greedy(d.prompts[id], d.max_new_tokens[id])) << "request " << id;
  EXPECT_EQ(smaller.n_free() + d.sched.pages_cached(), smaller.n_pages());
}

}  // namespace
}  // namespace ft
