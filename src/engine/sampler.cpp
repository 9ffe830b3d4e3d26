#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "util/error.h"

namespace ft {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float clean(float x) { return std::isnan(x) ? kNegInf : x; }

}  // namespace

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
    if (!(bias >= -100.0f && bias <= 100.0f))
      fail(ErrorCode::kInvalidArgument, "logit_bias: the bias of token {} must be in [-100, 100], got {}", id, bias);
  }
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size, std::vector<int32_t> eos_ids,
                 const std::vector<int32_t>& prompt)
    : params_(params), vocab_(vocab_size), eos_ids_(std::move(eos_ids)) {
  params_.validate();
  if (vocab_ <= 0) fail(ErrorCode::kInvalidArgument, "sampler: vocab size must be positive, got {}", vocab_);
  for (const auto& [id, bias] : params_.logit_bias)
    if (id >= vocab_)
      fail(ErrorCode::kInvalidArgument, "logit_bias: token id {} is outside the vocabulary [0, {})", id, vocab_);
  rng_.seed(params_.seed ? *params_.seed : std::random_device{}());
  work_.resize(static_cast<size_t>(vocab_));
  scratch_.resize(static_cast<size_t>(vocab_));
  order_.resize(static_cast<size_t>(vocab_));
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    counts_.assign(static_cast<size_t>(vocab_), 0);
  if (params_.repetition_penalty != 1.0f) {
    seen_.assign(static_cast<size_t>(vocab_), 0);
    for (int32_t id : prompt)
      if (id >= 0 && id < vocab_) seen_[static_cast<size_t>(id)] = 1;
  }
}

void Sampler::accept(int32_t id) {
  ++n_generated_;
  if (!counts_.empty() && id >= 0 && id < vocab_) ++counts_[static_cast<size_t>(id)];
  if (!seen_.empty() && id >= 0 && id < vocab_) seen_[static_cast<size_t>(id)] = 1;
}

void Sampler::apply_penalties(std::vector<float>& z) const {
  for (const auto& [id, bias] : params_.logit_bias) z[static_cast<size_t>(id)] += bias;
  if (!seen_.empty()) {
    const float p = params_.repetition_penalty;
    for (int32_t i = 0; i < vocab_; ++i)
      if (seen_[static_cast<size_t>(i)]) z[i] = z[i] > 0 ? z[i] / p : z[i] * p;
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (int32_t i = 0; i < vocab_; ++i)
      if (const int32_t count = counts_[static_cast<size_t>(i)])
        z[i] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
  }
  if (n_generated_ < params_.min_tokens)
    for (int32_t id : eos_ids_)
      if (id >= 0 && id < vocab_) z[id] = kNegInf;
}

int32_t Sampler::sample_from(std::vector<float>& z) {
  // Greedy, or nothing finite left: lowest index among the maxima.
  auto best = std::max_element(z.begin(), z.end());
  const int32_t argmax = static_cast<int32_t>(best - z.begin());
  if (params_.temperature <= 0.0f || *best == kNegInf) return argmax;

  // Candidates sorted by logit, best first (only the top_k when set, via partial sort).
  int32_t n = 0;
  for (int32_t i = 0; i < vocab_; ++i)
    if (z[i] != kNegInf) order_[n++] = i;
  auto by_logit = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  if (params_.top_k > 0 && params_.top_k < n) {
    std::partial_sort(order_.begin(), order_.begin() + params_.top_k, order_.begin() + n, by_logit);
    n = params_.top_k;
  } else {
    std::sort(order_.begin(), order_.begin() + n, by_logit);
  }
  // Softmax at temperature over the candidates (max-subtracted: the first is the max).
  const float inv_t = 1.0f / params_.temperature, zmax = z[order_[0]];
  double total = 0.0;
  for (int32_t j = 0; j < n; ++j) total += (scratch_[j] = std::exp((z[order_[j]] - zmax) * inv_t));
  // top-p: smallest prefix whose mass reaches top_p (always at least one token).
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    int32_t keep = 0;
    while (keep < n) {
      cum += scratch_[keep++];
      if (cum >= params_.top_p * total) break;
    }
    n = keep;
  }
  // min-p: drop tokens whose probability is below min_p times the best one's.
  if (params_.min_p > 0.0f) {
    int32_t keep = 1;
    while (keep < n && scratch_[keep] >= params_.min_p * scratch_[0]) ++keep;
    n = keep;
  }
  double mass = 0.0;
  for (int32_t j = 0; j < n; ++j) mass += scratch_[j];
  const double r = std::uniform_real_distribution<double>(0.0, mass)(rng_);
  double cum = 0.0;
  for (int32_t j = 0; j < n; ++j) {
    cum += scratch_[j];
    if (r < cum) return order_[j];
  }
  return order_[n - 1];
}

void Sampler::fill_logprobs(const float* logits, SampledToken& out) {
  float zmax = kNegInf;
  for (int32_t i = 0; i < vocab_; ++i) zmax = std::max(zmax, clean(logits[i]));
  if (zmax == kNegInf) {
    out.logprob = kNegInf;
    return;
  }
  double sum = 0.0;
  for (int32_t i = 0; i < vocab_; ++i) sum += std::exp(static_cast<double>(clean(logits[i]) - zmax));
  const float log_z = zmax + static_cast<float>(std::log(sum));
  out.logprob = clean(logits[out.id]) - log_z;
  if (params_.top_logprobs > 0) {
    const int32_t k = std::min(params_.top_logprobs, vocab_);
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int32_t a, int32_t b) {
      float la = clean(logits[a]), lb = clean(logits[b]);
      return la > lb || (la == lb && a < b);
    });
    out.top.clear();
    for (int32_t j = 0; j < k; ++j) out.top.emplace_back(order_[j], clean(logits[order_[j]]) - log_z);
  }
}

SampledToken Sampler::sample(const float* logits) {
  for (int32_t i = 0; i < vocab_; ++i) work_[i] = clean(logits[i]);
  apply_penalties(work_);
  SampledToken out;
  out.id = sample_from(work_);
  fill_logprobs(logits, out);
  accept(out.id);
  return out;
}

}  // namespace ft
