#pragma once
// Token sampler: logit bias, penalties, temperature, top-k, top-p, min-p, seeded per request. The
// algorithm is backend/sampling.h's (thresholds on the logits, one Philox draw), which the CUDA backend
// runs on the device.
// OpenAI's logit_bias is added to the raw logits first (as vLLM applies it, before any penalty); the
// rest follows Hugging Face transformers' LogitsProcessor chain (repetition penalty -> OpenAI
// presence/frequency penalties -> min_tokens EOS mask -> temperature -> top-k -> top-p -> min-p) so
// results are predictable for users of either. Greedy (temperature 0) sees the biased, penalised logits.
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/sampling.h"

namespace ft {

struct SamplingParams {
  float temperature = 1.0f;         // <= 0: greedy (argmax)
  int top_k = 0;                    // <= 0: disabled
  float top_p = 1.0f;               // (0, 1]; 1: disabled
  float min_p = 0.0f;               // [0, 1]; 0: disabled
  float repetition_penalty = 1.0f;  // CTRL-style, over prompt + generated tokens; 1: disabled
  float presence_penalty = 0.0f;    // OpenAI: minus this once per token id already generated
  float frequency_penalty = 0.0f;   // OpenAI: minus this times the count of the id among generated tokens
  std::optional<uint64_t> seed;     // same seed + same logits -> same tokens; none: a random seed
  int min_tokens = 0;               // EOS ids are masked until this many tokens were generated
  int top_logprobs = 0;             // how many alternatives sample() reports (0..20)
  /** OpenAI logit_bias: (token id, bias) pairs, bias in [-100, 100] added to that id's logit before
   *  anything else (-100 effectively bans the token, +100 effectively forces it), or -inf (a ban:
   *  llama.cpp's false). Ids must be inside the
   *  vocabulary (checked by Sampler, which knows its size). */
  std::vector<std::pair<int32_t, float>> logit_bias;

  /** Throws ft::Error(kInvalidArgument) naming the field when a value is out of range (logit_bias: a
   *  negative id or a bias outside [-100, 100]). */
  void validate() const;
};

/** One sampled token, with its log-probability under the model's distribution (log-softmax of the raw
 *  logits, before penalties and temperature, as vLLM reports) and the top alternatives when asked. */
struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), best first; top_logprobs entries
};

/** Per-request sampler state: its seed, how many tokens it generated and the logit edits its params
 *  imply (logit_bias, the ids its penalties cover, the EOS ids min_tokens masks). The sampling itself
 *  is backend/sampling.h's, run by a backend over a step's rows (Ops::sample, Engine::step_sample) or
 *  on the host (sample()); both draw with Philox keyed by the seed and counted by the tokens generated,
 *  so a request samples the same tokens whether it runs alone or batched with others. */
class Sampler {
 public:
  /** `eos_ids`: token ids masked while fewer than min_tokens were generated.
   *  `prompt`: the prompt ids (repetition_penalty applies to them too). Throws ft::Error(kInvalidArgument)
   *  on bad params, including a logit_bias id >= vocab_size. */
  Sampler(const SamplingParams& params, int32_t vocab_size, std::vector<int32_t> eos_ids,
          const std::vector<int32_t>& prompt = {});

  /** This request's row for the next token: parameters into `row`, its edits appended to `edits` (row's
   *  edit range indexes that vector). */
  void prepare(SampleRow& row, std::vector<LogitEdit>& edits) const;
  /** Takes a backend's result for the row prepare() described: records the token as generated and
   *  returns it with its logprob and top_logprobs entries. */
  SampledToken take(const SampleResult& result);

  /** Chooses the next token from `logits` (float32 [vocab_size]; not modified) on the host and records it
   *  as generated: prepare, the CPU backend's sample_rows, take. NaN logits count as -inf. A row with no
   *  finite logit after the edits (fully masked) yields id 0, with its raw logit's logprob (-inf when no
   *  raw logit is finite either): a defined result, never NaN. */
  SampledToken sample(const float* logits);

  /** Records a token as generated without sampling it (e.g. forced or teacher-forced tokens). */
  void accept(int32_t id);

  int generated() const { return n_generated_; }
  const SamplingParams& params() const { return params_; }

 private:
  /** The edit of `id`, made on first use. */
  LogitEdit& edit(int32_t id);

  SamplingParams params_;
  int32_t vocab_;
  uint64_t seed_ = 0;
  int n_generated_ = 0;
  std::vector<LogitEdit> edits_;                  // one an id, in first-use order
  std::unordered_map<int32_t, int32_t> edit_of_;  // id -> index in edits_
  // Host sampling (sample()).
  std::vector<LogitEdit> host_edits_;
};

}  // namespace ft
