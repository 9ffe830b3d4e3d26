#pragma once
// A TokenSink that collects one request's tokens and finish info, for tests that drive EngineService.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "engine/service.h"

namespace ft::testing {

class Collect : public TokenSink {
 public:
  bool on_token(const SampledToken& t, bool) override {
    std::lock_guard<std::mutex> lk(mu_);
    tokens.push_back(t);
    return true;
  }
  void on_finish(const FinishInfo& i) override {
    std::lock_guard<std::mutex> lk(mu_);
    info = i;
    done = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    ASSERT_TRUE(cv_.wait_for(lk, std::chrono::seconds(60), [&] { return done; }));
  }
  std::vector<SampledToken> tokens;
  FinishInfo info;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done = false;
};


}  // namespace ft::testing
