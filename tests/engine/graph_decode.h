#pragma once
// Shared by the CPU (tests/engine) and CUDA (cuda_graph_test.cpp) graph-decode tests: three greedy requests of
// different prompt and output lengths generated together, so decode steps run with 3, 2 and 1
// sequences (padded to the recorded sizes 4, 2, 1), once with graphs and once eagerly.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/generate.h"
#include "formats/checkpoint.h"
#include "model/fixture_util.h"

namespace ft::testing {

/** The three requests for a fixture's reference cases (the first case twice, truncated once). */
inline std::vector<GenerateRequest> graph_decode_requests(const std::vector<RefCase>& cases) {
  std::vector<GenerateRequest> reqs;
  const int32_t lens[3] = {12, 7, 3};
  for (size_t i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt = cases[i % cases.size()].input_ids;
    if (i == 2) prompt.resize(std::max<size_t>(prompt.size() / 2, 1));
    reqs.push_back(greedy_request(prompt, lens[i]));
    reqs.back().prompt_logits = false;
    reqs.back().step_logits = true;
  }
  return reqs;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/** Generates `reqs` on `graphed` and on `eager` and expects identical tokens and bit-identical
 *  decode logits, with decode steps replayed from graphs on `graphed` only. */
inline void expect_graph_equals_eager(Engine& graphed, Engine& eager, const std::vector<GenerateRequest>& reqs) {
  ASSERT_FALSE(graphed.graph_batch_sizes().empty());
  ASSERT_TRUE(eager.graph_batch_sizes().empty());
  const auto g = generate(graphed, reqs);
  const auto e = generate(eager, reqs);
  ASSERT_EQ(g.size(), e.size());
  for (size_t i = 0; i < g.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(g[i].tokens, e[i].tokens);
    ASSERT_EQ(g[i].step_logits.size(), reqs[i].max_tokens * static_cast<size_t>(graphed.config().n_vocab));
    EXPECT_TRUE(same_bits(g[i].step_logits, e[i].step_logits));
  }
  // 11 decode steps (the longest request's 12 tokens, the first from prefill); the first step of
  // each batch size (4, 2, 1) records its graph, the other 8 replay.
  EXPECT_EQ(graphed.graph_replays(), 8);
  EXPECT_EQ(eager.graph_replays(), 0);
}

}  // namespace ft::testing
