// ThreadPool (moe/thread_pool.h): every task once, errors, sleeping and held workers.
#include "moe/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "util/error.h"

namespace ft::testing {
namespace {

class ThreadPoolTest : public ::testing::TestWithParam<int> {};  // the spin time in us

TEST_P(ThreadPoolTest, RunsEveryTaskOnceAndPropagatesErrors) {
  ThreadPool pool(3, GetParam());
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> bad_worker{0};
    pool.run(n, [&](int64_t t, int w) {
      hits[static_cast<size_t>(t)]++;
      if (w < 0 || w >= 3) bad_worker++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    EXPECT_EQ(bad_worker.load(), 0);
  }
  EXPECT_THROW(pool.run(50, [](int64_t t, int) {
    if (t == 17) fail(ErrorCode::kInternal, "task {}", t);
  }),
               Error);
  std::atomic<int> after{0};
  pool.run(10, [&](int64_t, int) { after++; });  // still usable
  EXPECT_EQ(after.load(), 10);
  EXPECT_GE(physical_core_count(), 1);
  EXPECT_THROW(ThreadPool(0), Error);
  EXPECT_THROW(ThreadPool(2, -1), Error);
}

TEST_P(ThreadPoolTest, JobsAfterAPauseLongerThanTheSpinStillRun) {
  // Workers that polled past their spin time sleep; the next job must wake them (no lost wake-up),
  // and a job whose last worker ends while the caller polls, or after it went to sleep, returns.
  ThreadPool pool(4, GetParam());
  for (int round = 0; round < 20; ++round) {
    if (round % 5 == 4) std::this_thread::sleep_for(std::chrono::microseconds(GetParam() + 3000));
    std::atomic<int64_t> sum{0};
    pool.run(64, [&](int64_t t, int) {
      if (t % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // a straggler task
      sum += t;
    });
    EXPECT_EQ(sum.load(), 64 * 63 / 2) << "round " << round;
  }
}

// A worker the OS does not run (here: held in a signal handler between jobs, as a descheduled one
// is held by the thread on its core) must not hold up a job whose tasks the others finish: the job
// ends when its tasks are done. The pool used to wait for every worker to check in, so this job
// waited for the handler's end.
std::atomic<bool> g_held{false}, g_release{false};
void hold_worker(int) {
  g_held.store(true);
  while (!g_release.load()) {
    timespec ts{0, 100000};
    nanosleep(&ts, nullptr);
  }
}

TEST_P(ThreadPoolTest, AJobEndsWithoutAWorkerTheOsDoesNotRun) {
  constexpr int kThreads = 3;
  ThreadPool pool(kThreads, GetParam());
  // Each worker records its thread: every task waits until all kThreads workers hold one.
  std::vector<pthread_t> threads(kThreads);
  std::atomic<int> arrived{0};
  pool.run(kThreads, [&](int64_t, int w) {
    threads[static_cast<size_t>(w)] = pthread_self();
    arrived++;
    while (arrived.load() < kThreads) std::this_thread::yield();
  });
  struct sigaction sa {}, old {};
  sa.sa_handler = hold_worker;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  g_held = false, g_release = false;
  ASSERT_EQ(pthread_kill(threads[2], SIGUSR1), 0);
  while (!g_held.load()) std::this_thread::yield();
  // Worker 2 is held: a job runs on the caller and worker 1.
  std::atomic<bool> ended{false};
  std::atomic<int64_t> sum{0};
  std::thread caller([&] {
    pool.run(100, [&](int64_t t, int) { sum += t; });
    ended = true;
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ended.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool ended_while_held = ended.load();
  g_release = true;  // the old pool's job ends only now
  caller.join();
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_TRUE(ended_while_held) << "the job waited for the held worker";
  EXPECT_EQ(sum.load(), 100 * 99 / 2);
  // The released worker joins the next jobs, and every task still runs once.
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> hits(37);
    pool.run(37, [&](int64_t t, int) { hits[static_cast<size_t>(t)]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
  }
}

TEST(ThreadPool, MoreTasksThanOneJobHoldsRunInOrderOfJobs) {
  ThreadPool pool(2);
  const int64_t n = ThreadPool::kMaxJobTasks + 5;
  std::vector<uint8_t> hits(static_cast<size_t>(n), 0);
  std::atomic<int64_t> late{0};  // a task of the second job run before the first job's tasks ended
  std::atomic<int64_t> done_first{0};
  pool.run(n, [&](int64_t t, int) {
    hits[static_cast<size_t>(t)]++;
    if (t < ThreadPool::kMaxJobTasks) done_first++;
    else if (done_first.load() != ThreadPool::kMaxJobTasks) late++;
  });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), uint8_t{1}), n);
  EXPECT_EQ(late.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Spin, ThreadPoolTest, ::testing::Values(0, 500));

}  // namespace
}  // namespace ft::testing
