// Scheduler with a sliding-window pool (KvPools::swa): sequences hold only their window's pages there,
// prefix hits reuse cached window pages or are shortened when those were evicted, and every output
// matches a page-free reference. The fake model writes each token's KV into both pools and hashes
// every full-pool entry of positions [0, p] plus the sliding-window entries of (p - window, p], so a
// window page released early, reused while still read, or missing on a hit changes the output (or
// throws on an unwritten slot).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <stdexcept>

#include "engine/fake_model.h"
#include "engine/request_log.h"
#include "engine/scheduler.h"

namespace ft {
namespace {

using testing::fake_kv;
using testing::fake_logits;
using testing::fake_mix;

constexpr uint64_t kUnwritten = ~0ull;

class FakeWindowModel {
 public:
  FakeWindowModel(int32_t vocab, int32_t n_pages, int32_t n_swa_pages, int32_t page_size, int32_t window)
      : vocab_(vocab), page_(page_size), window_(window),
        full_(static_cast<size_t>(n_pages) * page_size, kUnwritten),
        swa_(static_cast<size_t>(n_swa_pages) * page_size, kUnwritten) {}

  /** Writes the planned tokens' KV and returns each sequence's context hash (its last token's). */
  std::vector<uint64_t> forward(const StepPlan& plan) {
    std::vector<uint64_t> out;
    for (const ScheduledSeq& e : plan.seqs) {
      const Sequence& s = *e.seq;
      for (int32_t p = e.start; p < e.start + e.n_tokens; ++p) {
        const int32_t tok = s.tokens[static_cast<size_t>(p)];
        full_.at(slot(s.pages, p)) = fake_kv(tok, p);
        swa_.at(slot(s.swa_pages, p)) = fake_kv(tok, p) ^ 0x5a5a;
        // The window of every token of the chunk must still be held (a chunk writes before it reads).
        for (int32_t q = std::max(0, p - window_ + 1); q <= p; ++q)
          if (swa_.at(slot(s.swa_pages, q)) == kUnwritten) throw std::runtime_error("reads an unwritten window slot");
      }
      const int32_t last = e.start + e.n_tokens - 1;
      uint64_t h = 0;
      for (int32_t p = 0; p <= last; ++p) h = fake_mix(h, full_.at(slot(s.pages, p)));
      for (int32_t p = std::max(0, last - window_ + 1); p <= last; ++p) h = fake_mix(h, swa_.at(slot(s.swa_pages, p)));
      out.push_back(h);
    }
    return out;
  }

  /** Greedy continuation computed without pages. */
  std::vector<int32_t> solo_greedy(std::vector<int32_t> tokens, int32_t n) const {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < n; ++i) {
      const auto last = static_cast<int32_t>(tokens.size()) - 1;
      uint64_t h = 0;
      for (int32_t p = 0; p <= last; ++p) h = fake_mix(h, fake_kv(tokens[static_cast<size_t>(p)], p));
      for (int32_t p = std::max(0, last - window_ + 1); p <= last; ++p)
        h = fake_mix(h, fake_kv(tokens[static_cast<size_t>(p)], p) ^ 0x5a5a);
      out.push_back(argmax(h));
      tokens.push_back(out.back());
    }
    return out;
  }

  int32_t argmax(uint64_t h) const {
    std::vector<float> row(static_cast<size_t>(vocab_));
    fake_logits(h, vocab_, row.data());
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  }

 private:
  size_t slot(const std::vector<int32_t>& pages, int32_t pos) const {
    const auto j = static_cast<size_t>(pos / page_);
    if (j >= pages.size() || pages[j] < 0)
      throw std::runtime_error("position " + std::to_string(pos) + " has no page");
    return static_cast<size_t>(pages[j]) * page_ + static_cast<size_t>(pos % page_);
  }

  int32_t vocab_, page_, window_;
  std::vector<uint64_t> full_, swa_;
};

std::vector<int32_t> tokens_of(uint32_t seed, int32_t n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % 50u);
  return t;
}

struct SwaDriver : testing::RequestLog {
  SwaDriver(int32_t max_running, int32_t prefill, int32_t n_pages, int32_t n_swa, int32_t page, int32_t window,
            bool prefix = true)
      : model(50, n_pages, n_swa, page, window), pool(n_pages, page), swa(n_swa, page),
        sched(config(max_running, prefill, prefix), KvPools(pool, &swa, window)) {}

  static SchedulerConfig config(int32_t max_running, int32_t prefill, bool prefix) {
    SchedulerConfig c;
    c.max_running = max_running;
    c.max_prefill_tokens = prefill;
    c.max_seq_len = 4096;
    c.prefix_cache = prefix;
    return c;
  }

  void submit(uint64_t id, std::vector<int32_t> prompt, int32_t max_new) {
    RequestLog::submit(sched, id, std::move(prompt), max_new);
  }

  void step() {
    StepPlan plan = sched.schedule();
    max_swa_in_use = std::max(max_swa_in_use, sched.swa_pages_in_use());  // the step's pages are reserved
    const std::vector<uint64_t> hashes = model.forward(plan);
    sched.complete(plan);
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      if (!plan.seqs[i].sample) continue;
      take(sched, plan.seqs[i].seq->id, model.argmax(hashes[i]));
    }
    sched.check_integrity();
  }

  void run_until_idle() {
    for (int i = 0; i < 100000 && !sched.idle(); ++i) step();
    ASSERT_TRUE(sched.idle());
    for (const auto& [id, out] : generated)
      EXPECT_EQ(out, model.solo_greedy(prompts[id], max_new_tokens[id])) << "request " << id;
  }

  FakeWindowModel model;
  PagePool pool, swa;
  Scheduler sched;
  int32_t max_swa_in_use = 0;
};

TEST(SchedulerSlidingWindow, ALongSequenceHoldsOnlyItsWindow) {
  for (bool prefix : {false, true}) {
    SCOPED_TRACE(prefix ? "prefix cache" : "no prefix cache");
    // Window 8, pages of 4, chunks of 16: at most ceil((8 - 1 + 16) / 4) + 1 = 7 window pages at once,
    // for a 300-token sequence (75 pages in the full pool).
    SwaDriver d(1, 16, 80, 8, 4, 8, prefix);
    d.submit(1, tokens_of(1, 200), 100);
    d.run_until_idle();
    EXPECT_LE(d.max_swa_in_use, 7);
    EXPECT_EQ(d.sched.swa_pages_in_use(), 0);
    if (!prefix) {
      EXPECT_EQ(d.swa.n_free(), d.swa.n_pages());
    }
  }
}

TEST(SchedulerSlidingWindow, ConcurrentRequestsWithSharedPrefixesMatchSoloRuns) {
  SwaDriver d(4, 24, 120, 24, 4, 6);
  std::mt19937 rng(7);
  const std::vector<int32_t> stem = tokens_of(99, 40);
  for (uint64_t id = 1; id <= 24; ++id) {
    std::vector<int32_t> p(stem.begin(), stem.begin() + static_cast<std::ptrdiff_t>(rng() % 40));
    const std::vector<int32_t> tail = tokens_of(static_cast<uint32_t>(id), 1 + static_cast<int32_t>(rng() % 30));
    p.insert(p.end(), tail.begin(), tail.end());
    d.submit(id, p, 1 + static_cast<int32_t>(rng() % 20));
    if (id % 3 == 0) d.step();
  }
  d.run_until_idle();
  int32_t hits = 0;
  for (const auto& [id, n] : d.cached) hits += n > 0;
  EXPECT_GT(hits, 0);
}

TEST(SchedulerSlidingWindow, APrefixHitNeedsTheWindowPagesBeforeIt) {
  const std::vector<int32_t> prompt = tokens_of(3, 41);  // 10 whole pages of 4
  std::vector<int32_t> longer = prompt;
  longer.push_back(7);
  {  // the window pages of the cached prompt are still there: the whole prompt is a hit
    SwaDriver d(1, 64, 64, 16, 4, 6);
    d.submit(1, prompt, 3);
    d.run_until_idle();
    d.submit(2, longer, 3);
    d.run_until_idle();
    EXPECT_EQ(d.cached[2], 40);
  }
  {  // another request needed every window page since: the hit shrinks to nothing
    SwaDriver d(1, 64, 64, 16, 4, 6);
    d.submit(1, prompt, 3);
    d.run_until_idle();
    d.submit(2, tokens_of(4, 60), 2);  // a 60-token chunk takes all 16 window pages
    d.run_until_idle();
    d.submit(3, longer, 3);
    d.run_until_idle();
    EXPECT_EQ(d.cached[3], 0);
  }
}

TEST(SchedulerSlidingWindow, OtherTrafficEvictsPassedWindowsBeforeAConversationsEnd) {
  // A finished conversation's last window pages outlive the pages another request released as its
  // window moved on, so the next turn of the conversation still hits (the window pool holds 8 pages,
  // request 2 streams 25 pages of its own through it).
  const std::vector<int32_t> prompt = tokens_of(3, 41);
  std::vector<int32_t> next_turn = prompt;
  next_turn.push_back(7);
  SwaDriver d(1, 8, 128, 8, 4, 6);
  d.submit(1, prompt, 3);
  d.run_until_idle();
  d.submit(2, tokens_of(4, 100), 2);
  d.run_until_idle();
  d.submit(3, next_turn, 3);
  d.run_until_idle();
  EXPECT_EQ(d.cached[3], 40);
}

}  // namespace
}  // namespace ft
