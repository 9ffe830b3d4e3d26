#pragma once
// The generation request the synthetic-model tests compare runs with.
#include <vector>

#include "engine/generate.h"

namespace ft::testing {

/** Greedy decoding of `n` tokens after `prompt`, past EOS, with every step's logits. */
inline GenerateRequest greedy_with_logits(std::vector<int32_t> prompt, int64_t n) {
  GenerateRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = static_cast<int32_t>(n);
  req.sampling.temperature = 0;
  req.stop_at_eos = false;
  req.step_logits = true;
  return req;
}

}  // namespace ft::testing
