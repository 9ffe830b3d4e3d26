// The host side of the copy-engine prefetch (moe/prefetch_copier.h) against a device twin on the
// test's thread that publishes requests exactly as moe/cuda/moe_cache_copy.cu's publish kernel
// does (entry s % kCopyRingEntries, misses and count first, then seq with release) and waits for a
// request's signal before rewriting its entry, as the expert slots do. The copies are memcpys from
// a fake bank into a fake slot pool; the signal is a store the twin polls.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "moe/prefetch_copier.h"

namespace ft::testing {
namespace {

constexpr int32_t kMaxMisses = 8, kExperts = 16, kSlots = 12;
constexpr size_t kRecord = 64;  // bytes per expert record

class CopierRig {
 public:
  CopierRig() : seq_(kCopyRingEntries, 0), n_(kCopyRingEntries, 0), misses_(kCopyRingEntries * kMaxMisses) {
    ring.seq = seq_.data(), ring.n = n_.data(), ring.misses = misses_.data(), ring.max_misses = kMaxMisses;
    bank.resize(kExperts * kRecord);
    for (size_t i = 0; i < bank.size(); ++i) bank[i] = static_cast<uint8_t>(i * 7 + 3);
    pool.assign(kSlots * kRecord, 0);
  }

  /** The publish kernel's steps for the next request; returns its number. */
  uint32_t publish(const std::vector<CacheMiss>& list, int32_t n_claimed = -1) {
    const uint32_t s = ++counter_;
    const int e = static_cast<int>(s % kCopyRingEntries);
    for (size_t i = 0; i < list.size(); ++i) misses_[static_cast<size_t>(e) * kMaxMisses + i] = list[i];
    std::atomic_ref<int32_t>(n_[static_cast<size_t>(e)])
        .store(n_claimed >= 0 ? n_claimed : static_cast<int32_t>(list.size()), std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(seq_[static_cast<size_t>(e)]).store(s, std::memory_order_release);
    return s;
  }
  /** The wait kernel: until the signalled value reaches s (false after `limit`). */
  bool wait(uint32_t s, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (static_cast<int32_t>(done.load(std::memory_order_acquire) - s) < 0)
      if (std::chrono::steady_clock::now() > until) return false;
    return true;
  }

  PrefetchCopier::Copy copy_fn() {
    return [this](const CacheMiss& m) {
      if (m.expert == poison) throw std::runtime_error("poisoned expert");
      std::memcpy(pool.data() + static_cast<size_t>(m.slot) * kRecord, bank.data() + static_cast<size_t>(m.expert) * kRecord,
                  kRecord);
      copies.fetch_add(1, std::memory_order_relaxed);
    };
  }
  PrefetchCopier::Signal signal_fn() {
    return [this](uint32_t s) {
      // In order, one after another: the CUDA signal is a stream write after the request's copies.
      EXPECT_EQ(s, done.load(std::memory_order_relaxed) + 1);
      done.store(s, std::memory_order_release);
    };
  }

  CopyRing ring;
  std::vector<uint8_t> bank, pool;
  std::atomic<uint32_t> done{0};
  std::atomic<int> copies{0};
  int32_t poison = -1;

 private:
  std::vector<uint32_t> seq_;
  std::vector<int32_t> n_;
  std::vector<CacheMiss> misses_;
  uint32_t counter_ = 0;
};

bool slot_holds(const CopierRig& r, int32_t slot, int32_t expert) {
  return std::memcmp(r.pool.data() + static_cast<size_t>(slot) * kRecord,
                     r.bank.data() + static_cast<size_t>(expert) * kRecord, kRecord) == 0;
}

TEST(PrefetchCopier, CopiesEveryMissBeforeSignallingItsRequestInOrder) {
  CopierRig rig;
  PrefetchCopier copier(rig.ring, rig.copy_fn(), rig.signal_fn(), 2000);
  std::mt19937 rng(7);
  std::vector<uint32_t> pending;
  int expected_copies = 0;
  for (int r = 0; r < 300; ++r) {
    // At most kCopyRingEntries in flight: the slots wait for the oldest before the next publish.
    if (pending.size() == kCopyRingEntries) {
      ASSERT_TRUE(rig.wait(pending.front()));
      pending.erase(pending.begin());
    }
    std::vector<CacheMiss> list;
    const int n = static_cast<int>(rng() % (kMaxMisses + 1));  // 0 misses too: still signalled
    for (int i = 0; i < n; ++i)
      list.push_back({0, static_cast<int32_t>(rng() % kExperts), static_cast<int32_t>((r * kMaxMisses + i) % kSlots)});
    expected_copies += n;
    const uint32_t s = rig.publish(list);
    pending.push_back(s);
    if (r % 17 == 0) {  // a request checked right after its signal: every miss already copied
      ASSERT_TRUE(rig.wait(s));
      pending.clear();
      for (const CacheMiss& m : list) EXPECT_TRUE(slot_holds(rig, m.slot, m.expert)) << "request " << s;
    }
  }
  ASSERT_TRUE(rig.wait(300));
  EXPECT_EQ(rig.done.load(), 300u);
  EXPECT_EQ(copier.served(), 300);
  EXPECT_EQ(rig.copies.load(), expected_copies);
  EXPECT_EQ(copier.failures(), 0);
  EXPECT_EQ(copier.last_error(), "");
}

TEST(PrefetchCopier, AFailedCopyIsRecordedAndItsRequestStillSignalled) {
  CopierRig rig;
  rig.poison = 5;
  PrefetchCopier copier(rig.ring, rig.copy_fn(), rig.signal_fn(), 2000);
  ASSERT_TRUE(rig.wait(rig.publish({{0, 1, 0}, {0, 5, 1}, {0, 2, 2}})));
  EXPECT_EQ(copier.failures(), 1);
  EXPECT_NE(copier.last_error().find("poisoned expert"), std::string::npos) << copier.last_error();
  EXPECT_NE(copier.last_error().find("request 1"), std::string::npos) << copier.last_error();
  EXPECT_TRUE(slot_holds(rig, 0, 1));
  // A malformed count (more than the ring holds) copies nothing and is recorded; later requests work.
  ASSERT_TRUE(rig.wait(rig.publish({}, kMaxMisses + 1)));
  EXPECT_EQ(copier.failures(), 2);
  EXPECT_NE(copier.last_error().find("lists 9 misses"), std::string::npos) << copier.last_error();
  ASSERT_TRUE(rig.wait(rig.publish({{0, 3, 4}})));
  EXPECT_TRUE(slot_holds(rig, 4, 3));
  EXPECT_EQ(copier.failures(), 2);
}

TEST(PrefetchCopier, ARequestAfterAnIdlePauseIsServedFromSleep) {
  CopierRig rig;
  PrefetchCopier copier(rig.ring, rig.copy_fn(), rig.signal_fn(), 0);  // sleeps at once
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(rig.wait(rig.publish({{0, 9, 3}}), std::chrono::milliseconds(2000)));
  EXPECT_TRUE(slot_holds(rig, 3, 9));
}

TEST(PrefetchCopier, RejectsARingWithoutStorage) {
  CopyRing empty;
  EXPECT_THROW(PrefetchCopier(empty, [](const CacheMiss&) {}, [](uint32_t) {}, 0), std::exception);
  CopierRig rig;
  EXPECT_THROW(PrefetchCopier(rig.ring, [](const CacheMiss&) {}, [](uint32_t) {}, -1), std::exception);
}

}  // namespace
}  // namespace ft::testing
