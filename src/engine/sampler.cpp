#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || temperature > 100.0f)
    fail(ErrorCode::kInvalidArgument, "temperature must be in [0, 100], got {}", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail(ErrorCode::kInvalidArgument, "top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail(ErrorCode::kInvalidArgument, "min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f) || repetition_penalty > 100.0f)
    fail(ErrorCode::kInvalidArgument, "repetition_penalty must be in (0, 100], got {}", repetition_penalty);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    fail(ErrorCode::kInvalidArgument, "presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    fail(ErrorCode::kInvalidArgument, "frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (min_tokens < 0) fail(ErrorCode::kInvalidArgument, "min_tokens must be >= 0, got {}", min_tokens);
  if (top_logprobs < 0 || top_logprobs > 20)
    fail(ErrorCode::kInvalidArgument, "top_logprobs must be in [0, 20], got {}", top_logprobs);
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) fail(ErrorCode::kInvalidArgument, "logit_bias: token id {} must be >= 0", id);
    if (!(bias >= -100.0f && bias <= 100.0f) && bias != -std::numeric_limits<float>::infinity())
      fail(ErrorCode::kInvalidArgument, "logit_bias: the bias of token {} must be in [-100, 100] or -inf (a ban), got {}", id, bias);
  }
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size, std::vector<int32_t> eos_ids,
                 const std::vector<int32_t>& prompt)
    : params_(params), vocab_(vocab_size) {
  params_.validate();
  if (vocab_ <= 0) fail(ErrorCode::kInvalidArgument, "sampler: vocab size must be positive, got {}", vocab_);
  for (const auto& [id, bias] : params_.logit_bias)
    if (id >= vocab_)
      fail(ErrorCode::kInvalidArgument, "logit_bias: token id {} is outside the vocabulary [0, {})", id, vocab_);
  if (params_.seed) {
    seed_ = *params_.seed;
  } else {
    std::random_device rd;
    seed_ = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  for (const auto& [id, bias] : params_.logit_bias) edit(id).bias += bias;
  if (params_.repetition_penalty != 1.0f)
    for (int32_t id : prompt)
      if (id >= 0 && id < vocab_) edit(id).flags |= kEditSeen;
  if (params_.min_tokens > 0)
    for (int32_t id : eos_ids)
      if (id >= 0 && id < vocab_) edit(id).flags |= kEditEos;
}

LogitEdit& Sampler::edit(int32_t id) {
  auto [it, added] = edit_of_.try_emplace(id, static_cast<int32_t>(edits_.size()));
  if (added) edits_.push_back(LogitEdit{id, 0.0f, 0, 0, 0.0f});
  return edits_[static_cast<size_t>(it->second)];
}

void Sampler::accept(int32_t id) {
  ++n_generated_;
  if (id < 0 || id >= vocab_) return;
  if (params_.repetition_penalty != 1.0f) edit(id).flags |= kEditSeen;
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) ++edit(id).count;
}

void Sampler::prepare(SampleRow& row, std::vector<LogitEdit>& edits) const {
  row.temperature = params_.temperature;
  row.top_k = params_.top_k;
  row.top_p = params_.top_p;
  row.min_p = params_.min_p;
  row.repetition_penalty = params_.repetition_penalty;
  row.presence_penalty = params_.presence_penalty;
  row.frequency_penalty = params_.frequency_penalty;
  row.top_logprobs = params_.top_logprobs;
  row.seed_lo = static_cast<uint32_t>(seed_);
  row.seed_hi = static_cast<uint32_t>(seed_ >> 32);
  const auto counter = static_cast<uint64_t>(n_generated_);
  row.counter_lo = static_cast<uint32_t>(counter);
  row.counter_hi = static_cast<uint32_t>(counter >> 32);
  row.edit_begin = static_cast<int32_t>(edits.size());
  edits.insert(edits.end(), edits_.begin(), edits_.end());
  row.edit_end = static_cast<int32_t>(edits.size());
  row.mask_eos = n_generated_ < params_.min_tokens ? 1 : 0;
  row.skip = 0;
}

SampledToken Sampler::take(const SampleResult& result) {
  SampledToken out;
  out.id = result.id;
  out.logprob = result.logprob;
  const int n = std::min({result.n_top, params_.top_logprobs, kMaxTopLogprobs});
  for (int j = 0; j < n; ++j) out.top.emplace_back(result.top_ids[j], result.top_logprobs[j]);
  accept(out.id);
  return out;
}

SampledToken Sampler::sample(const float* logits) {
  SampleRow row;
  host_edits_.clear();
  prepare(row, host_edits_);
  SampleResult result;
  cpu::sample_rows(logits, vocab_, &row, 1, host_edits_.data(), &result);
  return take(result);
}

}  // namespace ft
