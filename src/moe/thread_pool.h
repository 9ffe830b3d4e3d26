#pragma once
// ThreadPool: persistent worker threads for the CPU expert executor. The caller is worker 0 and
// n - 1 threads wait on a condition variable between jobs (optionally spinning first, for the
// short gaps between MoE layers), so a job costs a wake-up, never a thread creation. One job at a
// time; tasks are handed out dynamically from an atomic counter.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ft {

class ThreadPool {
 public:
  /** `n_threads` workers in all (>= 1; the caller counts as one). `spin` iterations (a pause each)
   *  a worker polls for the next job before sleeping: 0 on shared machines, thousands when the
   *  pool owns its cores. Throws ft::Error(kInvalidArgument) for n_threads < 1. */
  explicit ThreadPool(int n_threads, int spin = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  /** Calls fn(task, worker) for every task in [0, n_tasks) across the workers (worker in
   *  [0, size())) and returns when all are done. The first exception a task throws is rethrown
   *  here (remaining tasks are skipped). Not reentrant: one caller at a time. */
  template <typename F>
  void run(int64_t n_tasks, F&& fn) {
    run_erased(n_tasks, [](void* ctx, int64_t task, int worker) { (*static_cast<F*>(ctx))(task, worker); },
               static_cast<void*>(&fn));
  }

 private:
  using Call = void (*)(void*, int64_t, int);
  void run_erased(int64_t n_tasks, Call call, void* ctx);
  void work(int worker);
  void loop(int worker);

  int n_threads_, spin_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  int busy_ = 0;  // workers still in the current job (guarded by mu_)
  // The current job.
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
};

/** Physical cores this process may use: online CPUs (affinity mask) divided by the hardware
 *  threads per core of cpu0 (sysfs); at least 1. */
int physical_core_count();

}  // namespace ft
