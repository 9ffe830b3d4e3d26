#include "moe/prefetch_copier.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include <fmt/format.h>

#include "moe/thread_pool.h"
#include "util/error.h"

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMinSleepUs = 50, kMaxSleepUs = 200;  // the idle thread's waits

/** A ring field the device writes over PCIe, read as a system-wide atomic. */
template <typename T>
T load_acquire(T& field) {
  return std::atomic_ref<T>(field).load(std::memory_order_acquire);
}

}  // namespace

PrefetchCopier::PrefetchCopier(const CopyRing& ring, Copy copy, Signal signal, int spin_us,
                               const std::function<void()>& on_start)
    : ring_(ring), copy_(std::move(copy)), signal_(std::move(signal)), spin_us_(spin_us) {
  if (!ring.seq || !ring.n || !ring.misses || ring.max_misses < 1)
    fail(ErrorCode::kInvalidArgument, "prefetch copier: a ring without storage ({} misses per entry)", ring.max_misses);
  if (spin_us < 0) fail(ErrorCode::kInvalidArgument, "prefetch copier: spin of {} us", spin_us);
  if (!copy_ || !signal_) fail(ErrorCode::kInvalidArgument, "prefetch copier: no copy or signal function");
  thread_ = std::thread([this, on_start] { loop(on_start); });
}

PrefetchCopier::~PrefetchCopier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  thread_.join();
}

std::string PrefetchCopier::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void PrefetchCopier::record(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = what;
  }
  failures_.fetch_add(1, std::memory_order_acq_rel);
}

void PrefetchCopier::loop(std::function<void()> on_start) {
  if (on_start) {
    try {
      on_start();
    } catch (const std::exception& e) {
      record(fmt::format("prefetch copier: start: {}", e.what()));
    }
  }
  uint32_t next = 1;
  auto fresh = [&] { return load_acquire(ring_.seq[next % kCopyRingEntries]) == next; };
  auto idle_since = Clock::now();
  int64_t sleep_us = kMinSleepUs;
  while (!stop_.load(std::memory_order_acquire)) {
    if (!fresh()) {
      if (Clock::now() - idle_since < std::chrono::microseconds(spin_us_)) {
        for (int i = 0; i < 64 && !fresh(); ++i) cpu_relax();
      } else {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::microseconds(sleep_us),
                     [&] { return fresh() || stop_.load(std::memory_order_acquire); });
        sleep_us = std::min<int64_t>(2 * sleep_us, kMaxSleepUs);
      }
      continue;
    }
    sleep_us = kMinSleepUs;
    const int e = static_cast<int>(next % kCopyRingEntries);
    const int32_t n = load_acquire(ring_.n[e]);
    if (n < 0 || n > ring_.max_misses) {
      record(fmt::format("prefetch copier: request {} lists {} misses (at most {})", next, n, ring_.max_misses));
    } else {
      const CacheMiss* misses = ring_.misses + static_cast<int64_t>(e) * ring_.max_misses;
      try {
        for (int32_t i = 0; i < n; ++i) copy_(misses[i]);
      } catch (const std::exception& ex) {
        record(fmt::format("prefetch copier: request {}: {}", next, ex.what()));
      }
    }
    try {
      signal_(next);
    } catch (const std::exception& ex) {
      record(fmt::format("prefetch copier: signalling request {}: {}", next, ex.what()));
    }
    served_.fetch_add(1, std::memory_order_acq_rel);
    ++next;
    idle_since = Clock::now();
  }
}

}  // namespace ft
