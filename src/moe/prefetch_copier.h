#pragma once
// PrefetchCopier: the host side of the expert cache's copy-engine prefetch. A prefetch admission
// (cache_admission.h) chooses slots for a layer's predicted experts on the device; instead of a
// gather kernel reading the banks over UVA (~51 GB/s on the H200, and its blocks sit beside the
// layer's kernels), the device publishes the miss list and a host thread turns each miss into one
// host -> device copy for the DMA engines (~54 GB/s per 9 MiB expert there, DESIGN.md), then
// signals the request's sequence number back in stream order after those copies.
//
// Protocol (a CopyRing in pinned, mapped host memory; the device writes it, this thread reads it):
//   device, publish: the request counter (device memory) + 1 = s; entry e = s % kCopyRingEntries
//     gets n[e] and misses[e * max_misses, + n[e]), then, after a system-scope fence, seq[e] = s
//     (release);
//   host, this thread: waits for seq[next % kCopyRingEntries] == next (next = 1, 2, ...: requests
//     are served in order), reads the entry, calls copy(miss) for each miss and then signal(next);
//     the CUDA engine's copy is a cudaMemcpyAsync on a copy stream and its signal a stream write of
//     `next` into device memory, so the value lands only after the copies;
//   device, wait: before the layer's experts are read, waits until the signalled value reaches the
//     prefetch's s (bounded by a time limit; moe/cuda/moe_cache_copy.cu).
// An entry is rewritten only by request s + kCopyRingEntries, which the device publishes after it
// waited for request s (the expert slots keep at most kCopyRingEntries prefetches in flight), so
// the thread never reads an entry being rewritten. A copy or signal that throws is recorded
// (last_error) and the thread goes on, signalling every request so the device never waits for one
// that failed; the step's results are then wrong and check() on the slots reports it.
// Idle: the thread waits like the exchange dispatcher (RequestPoller, moe/thread_pool.h): it polls
// for spin_us after the last request, then sleeps in short waits.
// C++17-clean: included from CUDA sources.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "moe/cache_admission.h"

namespace ft {

/** Entries of the ring: at least the prefetches in flight at once (PrefetchLedger::kMaxInFlight),
 *  and a power of two, so that s % kCopyRingEntries keeps cycling when the 32-bit request number
 *  wraps. */
constexpr int kCopyRingEntries = 8;

/** The ring's host view. seq and n: [kCopyRingEntries]; misses: [kCopyRingEntries * max_misses]. */
struct CopyRing {
  uint32_t* seq = nullptr;
  int32_t* n = nullptr;
  CacheMiss* misses = nullptr;
  int32_t max_misses = 0;
};

class PrefetchCopier {
 public:
  using Copy = std::function<void(const CacheMiss&)>;
  using Signal = std::function<void(uint32_t seq)>;
  /** Starts the thread on `ring` (which must outlive this object); the device's first request is 1.
   *  `on_start` runs first on the thread (CUDA: makes the backend's device current). Throws
   *  ft::Error(kInvalidArgument) for a ring without storage or spin_us < 0. */
  PrefetchCopier(const CopyRing& ring, Copy copy, Signal signal, int spin_us,
                 const std::function<void()>& on_start = {});
  /** Stops and joins the thread (a request being served is finished first). */
  ~PrefetchCopier();
  PrefetchCopier(const PrefetchCopier&) = delete;
  PrefetchCopier& operator=(const PrefetchCopier&) = delete;

  /** Requests served (signalled) so far. */
  int64_t served() const { return served_.load(std::memory_order_acquire); }
  /** The message of the last failed copy or signal, "" if none. */
  std::string last_error() const;
  /** Failures so far (copies or signals that threw, malformed requests). */
  int64_t failures() const { return failures_.load(std::memory_order_acquire); }

 private:
  void loop(std::function<void()> on_start);
  void record(const std::string& what);

  CopyRing ring_;
  Copy copy_;
  Signal signal_;
  int spin_us_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> served_{0}, failures_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string error_;
  std::thread thread_;  // last: started after everything it uses
};

}  // namespace ft
