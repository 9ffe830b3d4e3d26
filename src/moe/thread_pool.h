#pragma once
// ThreadPool: persistent worker threads for the CPU expert executor. The caller is worker 0 and
// n - 1 threads wait on a condition variable between jobs, so a job costs a wake-up, never a thread
// creation. With a spin time, workers first poll for the next job and the caller polls for the
// job's end, for that long, before sleeping: a futex wake-up costs tens of microseconds per job
// (development machine, 2 threads: 68-76 us per job sleeping, 0.7-0.8 us polling), which the short
// gaps between MoE layers would pay once per layer. One job at a time; tasks are handed out
// dynamically from an atomic word holding the job's number, its task count and the next task, and
// a job ends when its tasks are done, not when every worker has looked at it: a worker the OS has
// descheduled (a core shared with the engine's or the server's threads) delays only the task it
// holds, never a job it has not started (which used to wait a whole time slice for it).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ft {

/** A spin-wait hint to the core (x86 PAUSE, Arm YIELD); nothing elsewhere. */
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/** How a thread waits for requests another device posts into memory it polls (the GPU cannot
 *  wake it): it polls, pausing, for spin_us after the last request (a step's layers come in quick
 *  succession), then sleeps in waits that grow from 50 to 200 us, cut short through a condition
 *  variable (a host-side poster, or stop), so an idle server does not wake 20,000 times a second.
 *  The first request after a pause waits at most one such sleep. The exchange dispatcher and the
 *  prefetch copier wait this way. */
class RequestPoller {
 public:
  explicit RequestPoller(int spin_us) : spin_us_(spin_us), idle_since_(std::chrono::steady_clock::now()) {}

  /** One round of waiting for fresh() or stop(): a few polls, or one sleep on `cv` (under `mu`). */
  template <typename Fresh, typename Stop>
  void wait(std::mutex& mu, std::condition_variable& cv, Fresh&& fresh, Stop&& stop) {
    if (std::chrono::steady_clock::now() - idle_since_ < std::chrono::microseconds(spin_us_)) {
      for (int i = 0; i < 64 && !fresh(); ++i) cpu_relax();
      return;
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::microseconds(sleep_us_), [&] { return fresh() || stop(); });
    sleep_us_ = std::min<int64_t>(2 * sleep_us_, kMaxSleepUs);
  }
  /** A request was just served: poll again, then sleep short first. */
  void served() {
    sleep_us_ = kMinSleepUs;
    idle_since_ = std::chrono::steady_clock::now();
  }

 private:
  static constexpr int64_t kMinSleepUs = 50, kMaxSleepUs = 200;
  int spin_us_;
  int64_t sleep_us_ = kMinSleepUs;
  std::chrono::steady_clock::time_point idle_since_;
};

class ThreadPool {
 public:
  /** `n_threads` workers in all (>= 1; the caller counts as one). `spin_us`: microseconds a worker
   *  polls for the next job, and the caller for the end of its job, before sleeping: 0 where other
   *  work needs the cores between jobs, ~the gap between jobs when the pool owns its cores.
   *  Throws ft::Error(kInvalidArgument) for n_threads < 1 or spin_us < 0. */
  explicit ThreadPool(int n_threads, int spin_us = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  /** Calls fn(task, worker) for every task in [0, n_tasks) across the workers (worker in
   *  [0, size()); no two calls with one worker index at a time) and returns when all are done,
   *  whether or not every worker took part. Tasks are started in index order. The first exception
   *  a task throws is rethrown here (tasks not yet started are skipped). Not reentrant: one caller
   *  at a time. More than kMaxJobTasks tasks run as consecutive jobs of that many. */
  template <typename F>
  void run(int64_t n_tasks, F&& fn) {
    run_erased(n_tasks, [](void* ctx, int64_t task, int worker) { (*static_cast<F*>(ctx))(task, worker); },
               static_cast<void*>(&fn));
  }

  /** Tasks one job holds (the claim word's 20-bit count). */
  static constexpr int64_t kMaxJobTasks = (int64_t{1} << 20) - 1;

 private:
  using Call = void (*)(void*, int64_t, int);
  void run_erased(int64_t n_tasks, Call call, void* ctx);
  /** One job of n_tasks <= kMaxJobTasks tasks. */
  void run_job(int64_t n_tasks, Call call, void* ctx);
  /** Takes and runs tasks of job `job` (the low 24 bits of its generation) until none is left. */
  void work(int worker, uint64_t job);
  void loop(int worker);
  /** Counts `n` tasks of the current job done (or skipped); the one that completes it wakes the caller. */
  void finish(int64_t n);

  /** Polls `done` (a pause each) for up to spin_us_ microseconds; true when it held. */
  template <typename Done>
  bool poll(Done done) const;

  // The claim word: job number (24 bits), task count (20 bits), next task (20 bits). A worker takes
  // task t of job j by a compare-and-swap from (j, n, t) to (j, n, t + 1) with t < n, so one that
  // read a finished job's word never takes a task of the next job; the job cannot end while a task
  // of it is taken and unfinished, so call_ and ctx_ read after the swap are that job's.
  static constexpr int kTaskBits = 20, kJobBits = 24;
  static uint64_t pack(uint64_t job, int64_t n, int64_t next) {
    return (job << (2 * kTaskBits)) | (static_cast<uint64_t>(n) << kTaskBits) | static_cast<uint64_t>(next);
  }

  int n_threads_, spin_us_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  // The current job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};  // tasks of the current job finished or skipped
  int64_t n_tasks_ = 0;           // the caller's copy of the job's task count
  std::atomic<Call> call_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::exception_ptr error_;  // under mu_
};

/** Physical cores this process may use: online CPUs (affinity mask) divided by the hardware
 *  threads per core of cpu0 (sysfs); at least 1. */
int physical_core_count();

}  // namespace ft
