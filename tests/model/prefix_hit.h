#pragma once
// The prefix-cache check several fixture tests share: one prompt twice through one EngineService.
#include <gtest/gtest.h>

#include "collect_sink.h"
#include "engine/engine_runner.h"
#include "fixture_util.h"

namespace ft::testing {

/** Runs the fixture's "long" case (130 tokens) through `engine` twice, one request after the other,
 *  with the scheduler chunking prefill at 64 tokens and the page integrity check on: the first run is
 *  cold, the second takes 128 tokens (8 whole pages of 16) from the prefix cache and must give the
 *  first's greedy tokens and top-5 log-probabilities (ids equal, values within 1e-5). With
 *  `check_reference` the cold run's tokens must also be the reference's greedy tokens. */
inline void expect_prefix_hit_gives_cold_logprobs(Engine& engine, const RefCase& ref, bool check_reference) {
  EngineRunner runner(engine);
  ServiceConfig sc;
  sc.scheduler.max_running = 2;
  sc.scheduler.max_prefill_tokens = 64;
  sc.scheduler.max_seq_len = 512;
  sc.check_integrity = true;
  EngineService svc(runner, engine.kv().pools(), sc);
  const auto n = static_cast<int32_t>(ref.greedy.size());
  auto cold = run_greedy(svc, ref.input_ids, n), hit = run_greedy(svc, ref.input_ids, n);
  EXPECT_EQ(cold->info.cached_tokens, 0);
  EXPECT_EQ(hit->info.cached_tokens, 128);
  ASSERT_EQ(cold->tokens.size(), ref.greedy.size());
  ASSERT_EQ(hit->tokens.size(), ref.greedy.size());
  for (size_t i = 0; i < ref.greedy.size(); ++i) {
    if (check_reference) EXPECT_EQ(cold->tokens[i].id, ref.greedy[i]) << i;
    EXPECT_EQ(hit->tokens[i].id, cold->tokens[i].id) << i;
    ASSERT_EQ(hit->tokens[i].top.size(), cold->tokens[i].top.size());
    for (size_t j = 0; j < cold->tokens[i].top.size(); ++j) {
      EXPECT_EQ(hit->tokens[i].top[j].first, cold->tokens[i].top[j].first) << i << "/" << j;
      EXPECT_NEAR(hit->tokens[i].top[j].second, cold->tokens[i].top[j].second, 1e-5) << i << "/" << j;
    }
  }
}

}  // namespace ft::testing
