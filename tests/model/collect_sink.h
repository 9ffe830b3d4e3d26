#pragma once
// A TokenSink that collects one request's tokens and finish info, for tests that drive EngineService.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
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


/** Submits `prompt` to `svc` for `max_tokens` greedy tokens (EOS ignored) with 5 top log-probabilities
 *  each, and waits for the result. */
inline std::shared_ptr<Collect> run_greedy(EngineService& svc, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  auto sink = std::make_shared<Collect>();
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.sampling.top_logprobs = 5;
  r.sink = sink;
  svc.submit(r);
  sink->wait();
  return sink;
}

}  // namespace ft::testing
