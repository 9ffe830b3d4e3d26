#pragma once
// The scheduler tests' shared driving: configs, random prompts, the greedy pick, and one engine-like step over
// the fake model (plan, forward, complete, sample, append/finish), used by the drivers of
// scheduler_test.cpp, scheduler_pools_test.cpp and scheduler_tiers_test.cpp.
#include <cstdint>
#include <random>
#include <vector>

#include "engine/fake_model.h"
#include "engine/request_log.h"
#include "engine/scheduler.h"
#include "engine/step_batch.h"

namespace ft::testing {

/** A scheduler config: `max_running` sequences, `prefill` tokens a step, `max_waiting` queued, a
 *  4096-token context, the prefix cache on or off. */
inline SchedulerConfig scheduler_config(int32_t max_running, int32_t prefill, int32_t max_waiting, bool prefix = true) {
  SchedulerConfig c;
  c.max_running = max_running;
  c.max_prefill_tokens = prefill;
  c.max_waiting = max_waiting;
  c.max_seq_len = 4096;
  c.prefix_cache = prefix;
  return c;
}

/** `n` tokens in [0, vocab), a fixed function of `seed`. */
inline std::vector<int32_t> tokens_of(uint32_t seed, int32_t n, int32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

/** The index of the largest of `row[0..n)` (the first on ties). */
inline int32_t argmax(const float* row, int32_t n) {
  int32_t best = 0;
  for (int32_t v = 1; v < n; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

/** Runs one step the way the engine does: plans it, runs `model` on the batch, completes it, samples
 *  greedily for every sequence that samples (recorded in `log`, which appends or finishes), then checks
 *  the scheduler's integrity. Returns the plan. */
inline StepPlan greedy_step(Scheduler& sched, FakeModel& model, RequestLog& log) {
  StepPlan plan = sched.schedule();
  StepBatch b;
  fill_step_batch(plan, b);
  std::vector<float> logits;
  if (!plan.empty()) model.forward_into(b, logits);
  sched.complete(plan);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    if (!plan.seqs[i].sample) continue;
    log.take(sched, plan.seqs[i].seq->id, argmax(logits.data() + i * model.vocab_size(), model.vocab_size()));
  }
  sched.check_integrity();
  return plan;
}

}  // namespace ft::testing
