// Scheduler: continuous batching, chunked prefill under a budget, the running cap and FIFO queue,
// overload and context errors, cancellation, prefix sharing, preemption; driven with a fake model that
// really reads the paged KV, so every output is checked against a page-free reference.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "engine/scheduler.h"
#include "engine/scheduler_driver.h"
#include "util/error.h"

namespace ft {
namespace {

using testing::FakeModel;
using testing::tokens_of;

/** Runs the scheduler the way the engine does: plan, forward, complete, sample greedily, append/finish. */
struct Driver : testing::RequestLog {
  Driver(SchedulerConfig cfg, int32_t n_pages, int32_t page_size, int32_t vocab = 50)
      : model(vocab, n_pages, page_size), pool(n_pages, page_size), sched(cfg, pool) {}

  void submit(uint64_t id, std::vector<int32_t> prompt, int32_t max_new, uint64_t after = 0) {
    RequestLog::submit(sched, id, std::move(prompt), max_new, after);
  }

  StepPlan step() { return testing::greedy_step(sched, model, *this); }

  void run_until_idle(int max_steps = 100000) {
    for (int i = 0; i < max_steps && !sched.idle(); ++i) step();
    ASSERT_TRUE(sched.idle());
  }

  void expect_outputs_match_solo() {
    for (uint64_t id : done)
      EXPECT_EQ(generated[id], model.solo_greedy(prompts[id], max_new_tokens[id])) << "request " << id;
  }

  FakeModel model;
  PagePool pool;
  Scheduler sched;
};

SchedulerConfig config(int32_t max_running, int32_t prefill, int32_t max_waiting = 100, bool prefix = true) {
  return testing::scheduler_config(max_running, prefill, max_waiting, prefix);
}

TEST(Scheduler, ChunkedPrefillDoesNotStallRunningDecodes) {
  Driver d(config(4, 64), 64, 16);
  d.submit(1, tokens_of(1, 10, 50), 40);
  d.step();  // request 1 prefilled in one chunk, first token sampled
  d.submit(2, tokens_of(2, 600, 50), 5);
  int steps_with_prefill = 0;
  while (d.generated[2].empty()) {
    StepPlan p = d.step();
    ASSERT_LE(p.n_prefill_tokens, 64);
    ASSERT_EQ(p.n_decode, 1) << "request 1 must decode in every step while 2 prefills";
    ++steps_with_prefill;
  }
  EXPECT_EQ(steps_with_prefill, (600 + 63) / 64);
  d.run_until_idle();
  d.expect_outputs_match_solo();
  EXPECT_EQ(d.sched.pages_in_use(), 0);
}

TEST(Scheduler, RunningCapAndFifoOrder) {
  Driver d(config(2, 1000), 64, 16);
  for (uint64_t id = 1; id <= 5; ++id) d.submit(id, tokens_of(static_cast<uint32_t>(id), 5, 50), 3 + static_cast<int32_t>(id));
  StepPlan p = d.step();
  EXPECT_EQ(d.sched.n_running(), 2);
  EXPECT_EQ(d.sched.n_waiting(), 3);
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].seq->id, 1u);
  EXPECT_EQ(p.seqs[1].seq->id, 2u);
  d.run_until_idle();
  EXPECT_EQ(d.done, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  d.expect_outputs_match_solo();
}

TEST(Scheduler, OverloadAndContextLengthAreRefused) {
  Driver d(config(1, 100, 2), 8, 16);  // 128 positions of KV
  EXPECT_EQ(d.sched.context_limit(), 128);
  try {
    d.submit(9, tokens_of(9, 100, 50), 29);
    FAIL() << "expected kContextLength";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kContextLength);
    EXPECT_NE(std::string(e.what()).find("129"), std::string::npos) << e.what();
  }
  d.submit(1, tokens_of(1, 4, 50), 4);  // takes the free running slot
  d.submit(2, tokens_of(2, 4, 50), 4);
  d.submit(3, tokens_of(3, 4, 50), 4);
  try {
    d.submit(4, tokens_of(4, 4, 50), 4);
    FAIL() << "expected kOverloaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOverloaded);
  }
  EXPECT_THROW(d.sched.submit(5, {}, 4), Error);
  EXPECT_THROW(d.sched.submit(1, {1}, 4), Error);  // duplicate id
  d.run_until_idle();
  d.expect_outputs_match_solo();
}

TEST(Scheduler, CancellationReturnsPagesAtOnce) {
  Driver d(config(4, 32), 32, 8);
  d.submit(1, tokens_of(1, 100, 50), 50);
  d.submit(2, tokens_of(2, 20, 50), 50);
  d.step();
  d.step();
  EXPECT_GT(d.sched.pages_in_use(), 0);
  const int32_t free_before = d.pool.n_free() + d.sched.pages_cached_idle();
  EXPECT_TRUE(d.sched.finish(1));
  EXPECT_TRUE(d.sched.finish(2));
  EXPECT_FALSE(d.sched.finish(2));
  EXPECT_EQ(d.sched.pages_in_use(), 0);
  EXPECT_GT(d.pool.n_free() + d.sched.pages_cached_idle(), free_before);
  EXPECT_EQ(d.pool.n_free() + d.sched.pages_cached(), d.pool.n_pages());
  d.sched.check_integrity();
  EXPECT_TRUE(d.sched.idle());
}

TEST(Scheduler, SharedPrefixIsReusedAndOutputUnchanged) {
  Driver d(config(4, 512), 64, 64);
  auto prefix = tokens_of(7, 200, 50);
  auto a = prefix, b = prefix;
  auto ta = tokens_of(8, 30, 50), tb = tokens_of(9, 17, 50);
  a.insert(a.end(), ta.begin(), ta.end());
  b.insert(b.end(), tb.begin(), tb.end());
  d.submit(1, a, 10);
  d.run_until_idle();
  const int64_t steps_before = d.model.steps;
  d.submit(2, b, 10);
  StepPlan p = d.step();
  EXPECT_EQ(p.n_prefill_tokens, static_cast<int32_t>(b.size()) - 192);  // 3 pages of 64 came from the cache
  d.run_until_idle();
  EXPECT_EQ(d.cached[1], 0);
  EXPECT_EQ(d.cached[2], 192);
  EXPECT_GT(d.model.steps, steps_before);
  d.expect_outputs_match_solo();
  // A prompt that is entirely cached still computes its last token.
  d.submit(3, std::vector<int32_t>(a.begin(), a.begin() + 192), 3);
  p = d.step();
  EXPECT_EQ(p.n_prefill_tokens, 64);  // the last page is recomputed so the last token yields logits
  d.run_until_idle();
  EXPECT_EQ(d.cached[3], 128);
  d.expect_outputs_match_solo();
}

TEST(Scheduler, ConcurrentEqualPromptsEndUpSharingPages) {
  Driver d(config(4, 512), 64, 16);
  auto p = tokens_of(3, 70, 50);
  d.submit(1, p, 20);
  d.submit(2, p, 20);
  d.step();  // both prefilled in the same step, each on private pages
  // After the step the second one's full pages were swapped for the first one's cached pages.
  const Sequence* s1 = d.sched.find(1);
  const Sequence* s2 = d.sched.find(2);
  ASSERT_TRUE(s1 && s2);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(s1->pages[static_cast<size_t>(j)], s2->pages[static_cast<size_t>(j)]);
  EXPECT_NE(s1->pages[4], s2->pages[4]);  // the partial page stays private
  d.run_until_idle();
  d.expect_outputs_match_solo();
}

// The choices of one request (OpenAI's `n`): the followers wait for the leader's prompt and take its
// whole pages from the cache, computing only the partial last page; without the prefix cache (nothing to
// share) and after a leader that ended early they start at once.
TEST(Scheduler, ChoicesOfOnePromptComputeItOnce) {
  Driver d(config(4, 512), 64, 16);
  auto p = tokens_of(3, 70, 50);
  d.submit(1, p, 20);
  d.submit(2, p, 20, 1);
  d.submit(3, p, 20, 1);
  StepPlan s1 = d.step();
  EXPECT_EQ(s1.n_prefill_tokens, 70);  // the leader alone
  ASSERT_EQ(s1.seqs.size(), 1u);
  StepPlan s2 = d.step();
  EXPECT_EQ(s2.n_decode, 1);
  EXPECT_EQ(s2.n_prefill_tokens, 2 * 6);  // each follower: 64 positions from the cache, 6 computed
  d.run_until_idle();
  EXPECT_EQ(d.cached[2], 64);
  EXPECT_EQ(d.cached[3], 64);
  d.expect_outputs_match_solo();

  Driver off(config(4, 512, 100, /*prefix=*/false), 64, 16);
  off.submit(1, p, 5);
  off.submit(2, p, 5, 1);
  EXPECT_EQ(off.step().n_prefill_tokens, 140);
  off.run_until_idle();
  off.expect_outputs_match_solo();

  Driver gone(config(4, 32), 64, 16);  // the leader's prefill takes 3 steps; it is cancelled in the first
  gone.submit(1, p, 5);
  gone.submit(2, p, 5, 1);
  EXPECT_EQ(gone.step().n_prefill_tokens, 32);
  ASSERT_TRUE(gone.sched.finish(1));
  EXPECT_EQ(gone.step().n_prefill_tokens, 32);  // the follower starts: 2 pages cached, a 32-token chunk
  gone.run_until_idle();
  EXPECT_EQ(gone.cached[2], 32);
  gone.expect_outputs_match_solo();
}

TEST(Scheduler, PreemptsWhenThePoolIsShortAndStillProducesSoloOutputs) {
  Driver d(config(8, 64), 12, 8);  // 96 positions for up to 8 requests
  for (uint64_t id = 1; id <= 6; ++id) d.submit(id, tokens_of(static_cast<uint32_t>(id) + 20, 20, 50), 30);
  int preemptions = 0;
  for (int i = 0; i < 10000 && !d.sched.idle(); ++i) preemptions += static_cast<int>(d.step().preempted.size());
  ASSERT_TRUE(d.sched.idle());
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(d.done.size(), 6u);
  d.expect_outputs_match_solo();
}

TEST(Scheduler, RandomisedWorkloadKeepsIntegrityAndSoloOutputs) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    Driver d(config(1 + static_cast<int32_t>(rng() % 6), 1 + static_cast<int32_t>(rng() % 80), 1000), 24, 4, 30);
    std::vector<std::vector<int32_t>> bases;
    for (int i = 0; i < 3; ++i) bases.push_back(tokens_of(seed * 10 + static_cast<uint32_t>(i), 40, 30));
    uint64_t next = 1;
    std::vector<uint64_t> cancelled;
    for (int it = 0; it < 600; ++it) {
      if (rng() % 3 == 0 && next < 80) {
        auto p = bases[rng() % bases.size()];
        p.resize(1 + rng() % 40);
        if (rng() % 2) p.push_back(static_cast<int32_t>(rng() % 30));
        d.submit(next++, p, 1 + static_cast<int32_t>(rng() % 20));
      }
      if (rng() % 25 == 0) {
        const uint64_t victim = 1 + rng() % next;
        if (d.sched.find(victim)) {
          d.sched.finish(victim);
          cancelled.push_back(victim);
        }
        d.sched.check_integrity();
      }
      d.step();
    }
    d.run_until_idle();
    d.expect_outputs_match_solo();
    EXPECT_GT(d.done.size() + cancelled.size(), 20u);
    EXPECT_EQ(d.sched.pages_in_use(), 0);
    EXPECT_EQ(d.pool.n_free() + d.sched.pages_cached(), d.pool.n_pages());
  }
}

}  // namespace
}  // namespace ft
