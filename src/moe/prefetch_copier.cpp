#include "moe/prefetch_copier.h"

#include <exception>

#include <fmt/format.h>

#include "moe/thread_pool.h"
#include "util/error.h"

namespace ft {
namespace {

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
  RequestPoller poller(spin_us_);
  while (!stop_.load(std::memory_order_acquire)) {
    if (!fresh()) {
      poller.wait(mu_, cv_, fresh, [&] { return stop_.load(std::memory_order_acquire); });
      continue;
    }
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
    poller.served();
  }
}

}  // namespace ft
