#pragma once
// A greedy run under --kv-cache-dtype for the KV-dtype tests (tests/model/kv_dtype_test.cpp on the HF
// fixtures, tests/engine/kv_dtype_trained_test.cpp on stories260K): the tokens, every position's
// logits, and the KV bytes a token of the memory plan.
#include <string>
#include <vector>

#include "fixture_util.h"

namespace ft::testing {

struct KvRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [prompt + n - 1, vocab]: the logits at each position of prompt + tokens[0, n-1)
  int64_t vocab = 0, bytes_per_token = 0;
};

/** Greedy decode of `n` tokens after `prompt` with --kv-cache-dtype `dtype`; with `forced`, instead
 *  the logits of prompt + forced fed one token a forward (decode steps over the same tokens). */
inline KvRun run_greedy(const std::string& dir, const std::string& dtype, const std::vector<int32_t>& prompt, int32_t n,
                        const std::vector<int32_t>* forced = nullptr) {
  EngineOptions o = small_engine_options();
  o.kv_cache_dtype = kv_cache_dtype_from_name(dtype).value();
  auto engine = Engine::load(dir, o);
  KvRun out;
  out.vocab = engine->config().n_vocab;
  out.bytes_per_token = engine->memory_plan().kv_bytes_per_token;
  if (forced) {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), forced->begin(), forced->end() - 1);
    GenerateOptions one;
    one.max_prefill_tokens = 1;
    out.logits = std::move(generate(*engine, {greedy_request(all, 1)}, one)[0].prompt_logits);
    return out;
  }
  GenerateRequest r = greedy_request(prompt, n);
  r.step_logits = true;
  GenerateResult res = std::move(generate(*engine, {r})[0]);
  out.tokens = std::move(res.tokens);
  out.logits = std::move(res.prompt_logits);
  // Step 0 was sampled from the last prompt position's logits: the rows after it, one per position.
  out.logits.insert(out.logits.end(), res.step_logits.begin() + out.vocab, res.step_logits.end());
  return out;
}

}  // namespace ft::testing
