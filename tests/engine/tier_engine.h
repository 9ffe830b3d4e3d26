#pragma once
// The KV-tier tests' engine driver (tests/engine/kv_tiers_test.cpp on the CPU backend,
// tests/engine/cuda_kv_tiers_test.cpp on CUDA): one engine, its host / disk tiers and a scheduler.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_runner.h"
#include "engine/kv_tiers.h"
#include "engine/scheduler.h"

namespace ft::testing {

/** An engine (any backend), its KV tiers and a scheduler over them, running one greedy request at a
 *  time through EngineRunner as the service does; `tokens` and `cached` are the last run's. */
struct TierEngine {
  explicit TierEngine(std::unique_ptr<Engine> e)
      : engine(std::move(e)), runner(*engine), tiers(*engine), sched(config(), engine->kv().pools(), tiers.view()) {}

  static SchedulerConfig config() {
    SchedulerConfig c;
    c.max_running = 1;
    c.max_prefill_tokens = 256;
    c.max_seq_len = 4096;
    return c;
  }

  /** Runs `prompt` for `n` greedy tokens; returns each sampled row's logits, concatenated. */
  std::vector<float> run(const std::vector<int32_t>& prompt, int32_t n) {
    const uint64_t id = next_id++;
    sched.submit(id, prompt, n);
    const int64_t V = engine->config().n_vocab;
    std::vector<float> rows;
    int32_t generated = 0;
    tokens.clear();
    while (sched.find(id)) {
      StepPlan plan = sched.schedule();
      EXPECT_FALSE(plan.empty());
      if (plan.empty()) break;
      StepBatch b;
      fill_step_batch(plan, b);
      std::span<const float> logits = runner.forward(b);
      sched.complete(plan);
      cached = sched.find(id)->n_cached;
      if (plan.seqs[0].sample) {
        const float* row = logits.data();
        rows.insert(rows.end(), row, row + V);
        const int32_t tok = static_cast<int32_t>(std::max_element(row, row + V) - row);
        tokens.push_back(tok);
        if (++generated == n) sched.finish(id);
        else sched.append(id, tok);
      }
      sched.check_integrity();
    }
    return rows;
  }

  std::unique_ptr<Engine> engine;
  EngineRunner runner;
  KvTiers tiers;
  Scheduler sched;
  uint64_t next_id = 1;
  int32_t cached = 0;
  std::vector<int32_t> tokens;
};


/** The tier tests' engine options: KV pages of 16 tokens, kv_tokens of device KV, host_gib of host tier
 *  (0: none), a prompt cache in cache_dir (empty: none; 0.01 GiB), one CPU thread, steps of 256 tokens. */
inline EngineOptions tier_options(int64_t kv_tokens, double host_gib, const std::string& cache_dir = "") {
  EngineOptions o;
  o.threads = 1;
  o.kv_tokens = kv_tokens;
  o.max_step_tokens = 256;
  o.max_logit_rows = 64;
  o.page_size = 16;
  o.kv_host_gib = host_gib;
  o.prompt_cache_dir = cache_dir;
  o.prompt_cache_gib = 0.01;
  return o;
}
/** `n` token ids below min(vocab, 1000) drawn from `seed`. */
inline std::vector<int32_t> prompt_of(uint32_t seed, int32_t n, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min<int64_t>(vocab, 1000)));
  return t;
}

}  // namespace ft::testing
