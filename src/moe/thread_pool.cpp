#include "moe/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "util/error.h"

namespace ft {
ThreadPool::ThreadPool(int n_threads, int spin_us) : n_threads_(n_threads), spin_us_(spin_us) {
  if (n_threads < 1) fail(ErrorCode::kInvalidArgument, "thread pool: {} threads", n_threads);
  if (spin_us < 0) fail(ErrorCode::kInvalidArgument, "thread pool: spin of {} us", spin_us);
  for (int w = 1; w < n_threads; ++w) threads_.emplace_back([this, w] { loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::finish(int64_t n) {
  const int64_t total = n_tasks_;  // read before the count: once it completes, the next job may start
  if (done_.fetch_add(n, std::memory_order_acq_rel) + n == total) {
    // Under mu_: a caller that saw the job unfinished under the lock is already waiting, so this wakes it.
    std::lock_guard<std::mutex> lock(mu_);
    done_cv_.notify_one();
  }
}

void ThreadPool::work(int worker, uint64_t job) {
  constexpr uint64_t kMask = (uint64_t{1} << kTaskBits) - 1;
  job &= (uint64_t{1} << kJobBits) - 1;
  for (;;) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    int64_t t = 0, n = 0;
    for (;;) {
      if ((c >> (2 * kTaskBits)) != job) return;  // a later job: the loop's next wait picks it up
      n = static_cast<int64_t>((c >> kTaskBits) & kMask);
      t = static_cast<int64_t>(c & kMask);
      if (t >= n) return;
      if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    }
    try {
      call_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), t, worker);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      // Skip the tasks nobody has taken: the word jumps to the end, and they count as done.
      uint64_t s = claim_.load(std::memory_order_acquire);
      while ((s >> (2 * kTaskBits)) == job && static_cast<int64_t>(s & kMask) < n &&
             !claim_.compare_exchange_weak(s, pack(job, n, n), std::memory_order_acq_rel, std::memory_order_acquire)) {
      }
      if ((s >> (2 * kTaskBits)) == job && static_cast<int64_t>(s & kMask) < n) finish(n - static_cast<int64_t>(s & kMask));
    }
    finish(1);
  }
}

template <typename Done>
bool ThreadPool::poll(Done done) const {
  if (spin_us_ <= 0) return done();
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
  for (;;) {
    for (int i = 0; i < 64; ++i) {  // the clock is read once per 64 pauses
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= end) return done();
  }
}

void ThreadPool::loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    poll([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_) return;
    }
    work(worker, seen);
  }
}

void ThreadPool::run_erased(int64_t n_tasks, Call call, void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) call(ctx, t, 0);
    return;
  }
  // Consecutive jobs of at most kMaxJobTasks: tasks still start in index order, each job's after
  // the previous job's have ended.
  for (int64_t first = 0; first < n_tasks; first += kMaxJobTasks) {
    const int64_t n = std::min(kMaxJobTasks, n_tasks - first);
    if (first == 0) {
      run_job(n, call, ctx);
      continue;
    }
    struct Offset {
      Call call;
      void* ctx;
      int64_t first;
    } off{call, ctx, first};
    run_job(
        n, [](void* c, int64_t t, int w) { auto* o = static_cast<Offset*>(c); o->call(o->ctx, o->first + t, w); },
        &off);
  }
}

void ThreadPool::run_job(int64_t n_tasks, Call call, void* ctx) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    call_.store(call, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    n_tasks_ = n_tasks, error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
    // The job number is the generation's low 24 bits: never the previous job's, so a worker late for
    // that job finds the word changed.
    claim_.store(pack(gen & ((uint64_t{1} << kJobBits) - 1), n_tasks, 0), std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
  }
  start_cv_.notify_all();
  work(0, generation_.load(std::memory_order_relaxed));
  poll([&] { return done_.load(std::memory_order_acquire) == n_tasks; });
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire) == n_tasks; });
  if (error_) std::rethrow_exception(error_);
}

namespace {

/** Number of CPUs in a sysfs list such as "0,64", "0-1" or "3". */
int count_cpu_list(const std::string& list) {
  int n = 0;
  size_t i = 0;
  while (i < list.size()) {
    const size_t j = list.find(',', i);
    const std::string part = list.substr(i, j == std::string::npos ? std::string::npos : j - i);
    const size_t dash = part.find('-');
    n += dash == std::string::npos ? 1 : std::stoi(part.substr(dash + 1)) - std::stoi(part.substr(0, dash)) + 1;
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return n;
}

}  // namespace

int physical_core_count() {
  cpu_set_t set;
  int cpus = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus < 1) cpus = static_cast<int>(std::thread::hardware_concurrency());
  int per_core = 1;
  std::ifstream f("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list");
  std::string list;
  try {
    if (f >> list) per_core = std::max(1, count_cpu_list(list));
  } catch (const std::exception&) {
    per_core = 1;  // unreadable topology: assume no SMT
  }
  return std::max(1, cpus / per_core);
}

}  // namespace ft
