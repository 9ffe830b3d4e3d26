#include "engine/model_runner.h"

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

std::span<const SampleResult> ModelRunner::forward_sample(const ForwardBatch& batch, std::span<const SampleRow> rows,
                                                          std::span<const LogitEdit> edits,
                                                          std::span<const uint32_t> masks) {
  const size_t S = rows.size(), V = static_cast<size_t>(vocab_size());
  op_checks::sample_edits("forward_sample", rows.data(), static_cast<int64_t>(S), edits.data(),
                          static_cast<int64_t>(edits.size()), static_cast<int64_t>(V));
  const auto words = static_cast<size_t>(sample_mask_words(static_cast<int64_t>(V)));
  if (masks.size() % words != 0)
    fail(ErrorCode::kInvalidArgument, "forward_sample: masks hold {} words, not a whole number of {}-word masks",
         masks.size(), words);
  op_checks::sample_mask_rows("forward_sample", rows.data(), static_cast<int64_t>(S),
                              static_cast<int64_t>(masks.size() / words));
  const std::span<const float> logits = forward(batch);
  if (logits.size() < S * V)
    fail(ErrorCode::kInternal, "forward returned {} logits for {} rows of {}", logits.size(), S, V);
  host_edits_.assign(edits.begin(), edits.end());
  host_results_.assign(S, SampleResult{});
  cpu::sample_rows(logits.data(), static_cast<int64_t>(V), rows.data(), static_cast<int64_t>(S), host_edits_.data(),
                   host_results_.data(), masks.empty() ? nullptr : masks.data());
  return host_results_;
}

}  // namespace ft
