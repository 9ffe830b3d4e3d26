#include "engine/model_runner.h"

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

std::span<const SampleResult> ModelRunner::forward_sample(const StepBatch& batch, std::span<const SampleRow> rows,
                                                          std::span<const LogitEdit> edits,
                                                          std::span<const uint32_t> masks) {
  check_sample_args(rows, edits, masks);  // before the forward, as a backend's step_sample checks
  return sample_on_host(forward(batch), rows, edits, masks);
}

void ModelRunner::check_sample_args(std::span<const SampleRow> rows, std::span<const LogitEdit> edits,
                                    std::span<const uint32_t> masks) const {
  const size_t S = rows.size(), V = static_cast<size_t>(vocab_size());
  op_checks::sample_edits("forward_sample", rows.data(), static_cast<int64_t>(S), edits.data(),
                          static_cast<int64_t>(edits.size()), static_cast<int64_t>(V));
  const auto words = static_cast<size_t>(sample_mask_words(static_cast<int64_t>(V)));
  if (masks.size() % words != 0)
    fail(ErrorCode::kInvalidArgument, "forward_sample: masks hold {} words, not a whole number of {}-word masks",
         masks.size(), words);
  op_checks::sample_mask_rows("forward_sample", rows.data(), static_cast<int64_t>(S),
                              static_cast<int64_t>(masks.size() / words));
}

std::span<const SampleResult> ModelRunner::sample_on_host(std::span<const float> logits,
                                                          std::span<const SampleRow> rows,
                                                          std::span<const LogitEdit> edits,
                                                          std::span<const uint32_t> masks) {
  check_sample_args(rows, edits, masks);
  const size_t S = rows.size(), V = static_cast<size_t>(vocab_size());
  if (logits.size() < S * V)
    fail(ErrorCode::kInternal, "sample_on_host: {} logits for {} rows of {}", logits.size(), S, V);
  host_edits_.assign(edits.begin(), edits.end());
  host_results_.assign(S, SampleResult{});
  cpu::sample_rows(logits.data(), static_cast<int64_t>(V), rows.data(), static_cast<int64_t>(S), host_edits_.data(),
                   host_results_.data(), masks.empty() ? nullptr : masks.data());
  return host_results_;
}

}  // namespace ft
