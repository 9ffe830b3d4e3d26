// Scheduler with lower KV tiers (issue 39): pages the prefix cache evicts go to a host tier and come
// back on a later hit; pages it caches are written through to a second tier. Driven with the fake
// model, which reads the paged KV, so a page restored with the wrong contents changes the output.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/scheduler.h"
#include "engine/scheduler_driver.h"
#include "kv/host_page_store.h"
#include "util/error.h"

namespace ft {
namespace {

using testing::FakeModel;
using testing::tokens_of;

/** Copies the fake model's KV slots of a page to and from bytes. */
struct FakePageIo : PageIo {
  explicit FakePageIo(FakeModel& m) : model(&m) {}
  std::shared_ptr<PageContents> save(int32_t page, int32_t, int32_t) override {
    auto c = std::make_shared<PageContents>();
    std::span<uint64_t> p = model->page(page);
    c->kv.resize(p.size_bytes());
    std::memcpy(c->kv.data(), p.data(), p.size_bytes());
    ++saves;
    return c;
  }
  void load(const PageContents& c, int32_t page, int32_t, int32_t) override {
    std::span<uint64_t> p = model->page(page);
    ASSERT_EQ(c.kv.size(), p.size_bytes());
    std::memcpy(p.data(), c.kv.data(), p.size_bytes());
    ++loads;
  }
  FakeModel* model;
  int64_t saves = 0, loads = 0;
};

/** A second in-memory tier standing in for the disk tier that records the pages asked to be read ahead. */
struct RecordingStore : HostPageStore {
  using HostPageStore::HostPageStore;
  void prefetch(std::span<const PageRef> pages) override {
    for (const PageRef& p : pages) prefetched.emplace_back(p.hash, std::vector<int32_t>(p.path.begin(), p.path.end()));
  }
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> prefetched;
};

struct TierDriver : testing::RequestLog {
  TierDriver(SchedulerConfig cfg, int32_t n_pages, int32_t page_size, int64_t host_bytes, int64_t disk_bytes,
             int32_t vocab = 30)
      : model(vocab, n_pages, page_size), pool(n_pages, page_size), io(model),
        host(host_bytes > 0 ? std::make_unique<HostPageStore>(host_bytes, page_size) : nullptr),
        disk(disk_bytes > 0 ? std::make_unique<RecordingStore>(disk_bytes, page_size) : nullptr),
        sched(cfg, pool, LowerTiers{&io, host.get(), disk.get()}) {}

  void submit(uint64_t id, std::vector<int32_t> prompt, int32_t max_new) {
    RequestLog::submit(sched, id, std::move(prompt), max_new, 0);
  }
  void step() { testing::greedy_step(sched, model, *this); }
  void run_until_idle() {
    for (int i = 0; i < 100000 && !sched.idle(); ++i) step();
    ASSERT_TRUE(sched.idle());
  }
  void expect_outputs_match_solo() {
    for (uint64_t id : done)
      EXPECT_EQ(generated[id], model.solo_greedy(prompts[id], max_new_tokens[id])) << "request " << id;
  }

  FakeModel model;
  PagePool pool;
  FakePageIo io;
  std::unique_ptr<HostPageStore> host;
  std::unique_ptr<RecordingStore> disk;
  Scheduler sched;
};

SchedulerConfig config(int32_t max_running, int32_t prefill) { return testing::scheduler_config(max_running, prefill, 1000); }

TEST(SchedulerTiers, EvictedPrefixComesBackFromTheHostTier) {
  // 8 pages of 4: prompt A (6 pages) is cached, prompt B (6 pages) evicts it to the host tier, A again
  // takes its pages back from there.
  TierDriver d(config(1, 64), 8, 4, 1 << 20, 0);
  const std::vector<int32_t> a = tokens_of(1, 25, 30), b = tokens_of(2, 25, 30);
  d.submit(1, a, 2);
  d.run_until_idle();
  d.submit(2, b, 2);
  d.run_until_idle();
  EXPECT_GT(d.host->stats().entries, 0);
  d.submit(3, a, 2);
  d.run_until_idle();
  d.expect_outputs_match_solo();
  EXPECT_EQ(d.cached[3], 24);  // every whole page of the prompt but the last token's
  // B's 7 pages evicted 5 of A's (deepest first): 1 hit on the device, 5 from the host tier.
  EXPECT_EQ(d.sched.tier_hits().device, 1);
  EXPECT_EQ(d.sched.tier_hits().host, 5);
  EXPECT_GT(d.io.loads, 0);
}

TEST(SchedulerTiers, AQueuedRequestAsksTheDiskTierForThePagesItWillLoad) {
  // As above without a host tier: A's 5 evicted pages are only on the disk tier, and submitting A
  // asks for exactly those (in order, with their path hashes), which admission then takes from it.
  TierDriver d(config(1, 64), 8, 4, 0, 1 << 20);
  const std::vector<int32_t> a = tokens_of(1, 25, 30), b = tokens_of(2, 25, 30);
  d.submit(1, a, 2);
  d.run_until_idle();
  d.submit(2, b, 2);
  d.run_until_idle();
  d.disk->prefetched.clear();
  d.submit(3, a, 2);
  ASSERT_EQ(d.disk->prefetched.size(), 5u);
  for (size_t j = 0; j < 5; ++j) {
    const std::vector<int32_t> want(a.begin(), a.begin() + static_cast<std::ptrdiff_t>((j + 2) * 4));
    EXPECT_EQ(d.disk->prefetched[j].second, want) << j;
    EXPECT_EQ(d.disk->prefetched[j].first, path_hash(want, 4)) << j;
  }
  d.run_until_idle();
  d.expect_outputs_match_solo();
  EXPECT_EQ(d.cached[3], 24);
  EXPECT_EQ(d.sched.tier_hits().device, 1);
  EXPECT_EQ(d.sched.tier_hits().disk, 5);

  // With a host tier holding them, or the device, nothing is asked of the disk tier.
  TierDriver h(config(1, 64), 8, 4, 1 << 20, 1 << 20);
  h.submit(1, a, 2);
  h.run_until_idle();
  h.submit(2, b, 2);
  h.run_until_idle();
  h.disk->prefetched.clear();
  h.submit(3, a, 2);
  h.submit(4, b, 2);
  EXPECT_TRUE(h.disk->prefetched.empty());
  h.run_until_idle();
  EXPECT_EQ(h.sched.tier_hits().host, 10);  // A's 5, then B's 5 that A's restore pushed out
  EXPECT_EQ(h.sched.tier_hits().disk, 0);
}

TEST(SchedulerTiers, RandomisedWorkloadKeepsIntegrityAndSoloOutputs) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937 rng(seed);
    // The host tier holds ~10 pages of 4 tokens (32 bytes of KV and up to ~160 bytes of path each):
    // its LRU bound is hit too.
    TierDriver d(config(1 + static_cast<int32_t>(rng() % 4), 1 + static_cast<int32_t>(rng() % 40)), 16, 4,
                 seed % 2 ? 2000 : 1 << 20, seed >= 3 ? 4000 : 0);
    std::vector<std::vector<int32_t>> bases;
    for (int i = 0; i < 4; ++i) bases.push_back(tokens_of(seed * 10 + static_cast<uint32_t>(i), 40, 30));
    uint64_t next = 1;
    for (int it = 0; it < 500; ++it) {
      if (rng() % 3 == 0 && next < 80) {
        auto p = bases[rng() % bases.size()];
        p.resize(1 + rng() % 40);
        if (rng() % 2) p.push_back(static_cast<int32_t>(rng() % 30));
        d.submit(next++, p, 1 + static_cast<int32_t>(rng() % 12));
      }
      if (rng() % 25 == 0) {
        const uint64_t victim = 1 + rng() % next;
        if (d.sched.find(victim)) d.sched.finish(victim);
        d.sched.check_integrity();
      }
      d.step();
    }
    d.run_until_idle();
    d.expect_outputs_match_solo();
    EXPECT_GT(d.sched.tier_hits().host, 0) << "seed " << seed;
    if (d.disk) EXPECT_GT(d.disk->stats().entries, 0);
    EXPECT_EQ(d.sched.pages_in_use(), 0);
    EXPECT_EQ(d.pool.n_free() + d.sched.pages_cached(), d.pool.n_pages());
  }
}

TEST(SchedulerTiers, TierIntegrityCatchesAWrongHash) {
  HostPageStore s(1 << 20, 4);
  const std::vector<int32_t> path = tokens_of(5, 8, 30);
  auto c = std::make_shared<PageContents>();
  c->kv.assign(16, 7);
  s.put(path_hash(path, 4), path, c);
  s.check_integrity();
  EXPECT_NE(s.get(path_hash(path, 4), path), nullptr);
  std::vector<int32_t> other = path;
  other[0] ^= 1;
  EXPECT_EQ(s.get(path_hash(path, 4), other), nullptr);  // same hash, other tokens: no hit
  s.put(12345, other, c);                                // a hash that is not the path's
  EXPECT_THROW(s.check_integrity(), Error);
}

}  // namespace
}  // namespace ft
