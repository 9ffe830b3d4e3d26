#pragma once
// Batched generation over an Engine, synchronously: the server's loop (engine/service.h EngineService,
// its Scheduler's step plans through EngineRunner) run on the calling thread until every request is
// done, so `ft run` and the model tests exercise the loop that serves. All requests run together:
// chunked prefill (at most max_prefill_tokens prompt tokens per forward, chunks of several prompts
// packed together, decodes of the requests already past their prompts in the same forward), sampling
// through ft::Sampler (temperature <= 0: greedy). No prefix cache: every prompt position is computed.
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"

namespace ft {

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids (BOS included by the caller if wanted)
  int32_t max_tokens = 16;      // tokens to generate
  SamplingParams sampling;
  bool stop_at_eos = true;      // stop after sampling an EOS id of the model config
  bool prompt_logits = false;   // keep the logits of every prompt position
  bool step_logits = false;     // keep the logits each generated token was sampled from
  std::function<void(int32_t)> on_token;  // called with each generated id as it is sampled (streaming)
};

struct GenerateResult {
  std::vector<int32_t> tokens;        // generated ids (EOS included when it stopped there)
  std::vector<float> prompt_logits;   // [prompt, n_vocab] if requested
  std::vector<float> step_logits;     // [tokens, n_vocab] if requested
};

struct GenerateOptions {
  int64_t max_prefill_tokens = 8192;  // prompt tokens per forward (--max-prefill-tokens)
};

struct GenerateStats {
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0;
  int64_t decode_tokens = 0;   // tokens produced by decode steps (the first token comes from prefill)
  double decode_seconds = 0;
};

/** Runs every request to completion together (one batch: the scheduler runs them all at once). Pages
 *  for prompt + max(max_tokens, 1) of every request are reserved up front: throws ft::Error(kOutOfMemory)
 *  naming the need when the KV pool is too small, kInvalidArgument for an empty prompt, a token id
 *  outside the vocabulary or more requests than the engine's max_seqs (or its max_step_tokens /
 *  max_logit_rows); what a step throws, as it threw it; kInternal when a request's logits had no
 *  finite value to sample. */
std::vector<GenerateResult> generate(Engine& engine, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& options = {}, GenerateStats* stats = nullptr);
/** Same, the steps run through `runner` (a rank group's: RankGroup::runner, whose rank 0 is `engine`). */
std::vector<GenerateResult> generate(Engine& engine, ModelRunner& runner, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& options = {}, GenerateStats* stats = nullptr);

}  // namespace ft
