#pragma once
// What the EngineService tests share: a sink that records tokens and the finish, prompts, configs and
// greedy requests over the fake model (fake_model.h).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/service.h"

namespace ft::testing {

using namespace std::chrono_literals;

class CollectSink : public TokenSink {
 public:
  explicit CollectSink(int stop_after = -1, bool block_first = false) : stop_after_(stop_after), block_(block_first) {}
  bool on_token(const SampledToken& t, bool eog) override {
    std::unique_lock<std::mutex> lk(mu_);
    tokens.push_back(t.id);
    last_eog = eog;
    cv_.notify_all();
    if (block_) cv_.wait(lk, [&] { return !block_; });
    return stop_after_ < 0 || static_cast<int>(tokens.size()) < stop_after_;
  }
  void on_finish(const FinishInfo& info) override {
    std::lock_guard<std::mutex> lk(mu_);
    finish = info;
    ++finishes;
    cv_.notify_all();
  }
  FinishInfo wait() {
    std::unique_lock<std::mutex> lk(mu_);
    EXPECT_TRUE(cv_.wait_for(lk, 20s, [&] { return finishes > 0; }));
    return finish;
  }
  void wait_tokens(size_t n) {
    std::unique_lock<std::mutex> lk(mu_);
    EXPECT_TRUE(cv_.wait_for(lk, 20s, [&] { return tokens.size() >= n; }));
  }
  void unblock() {
    std::lock_guard<std::mutex> lk(mu_);
    block_ = false;
    cv_.notify_all();
  }
  std::vector<int32_t> tokens;
  bool last_eog = false;
  FinishInfo finish;
  int finishes = 0;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int stop_after_;
  bool block_;
};

inline std::vector<int32_t> prompt_of(int32_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back((i * 7 + salt * 13) % 40);
  return p;
}

inline ServiceConfig cfg(int32_t max_running = 8, int32_t prefill = 48) {
  ServiceConfig c;
  c.scheduler.max_running = max_running;
  c.scheduler.max_prefill_tokens = prefill;
  c.scheduler.max_waiting = 64;
  c.scheduler.max_seq_len = 512;
  c.check_integrity = true;
  return c;
}

inline GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens, std::shared_ptr<TokenSink> sink) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.sink = std::move(sink);
  return r;
}

}  // namespace ft::testing
