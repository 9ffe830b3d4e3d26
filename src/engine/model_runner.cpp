#include "engine/model_runner.h"

#include "util/error.h"

namespace ft {

std::span<const SampleResult> ModelRunner::forward_sample(const ForwardBatch& batch, std::span<const SampleRow> rows,
                                                          std::span<const LogitEdit> edits) {
  const std::span<const float> logits = forward(batch);
  const size_t S = rows.size(), V = static_cast<size_t>(vocab_size());
  if (logits.size() < S * V)
    fail(ErrorCode::kInternal, "forward returned {} logits for {} rows of {}", logits.size(), S, V);
  host_edits_.assign(edits.begin(), edits.end());
  for (const LogitEdit& e : host_edits_)
    if (e.id < 0 || static_cast<size_t>(e.id) >= V)
      fail(ErrorCode::kInvalidArgument, "forward_sample: an edit names token {} outside the vocabulary [0, {})", e.id, V);
  host_results_.assign(S, SampleResult{});
  for (size_t s = 0; s < S; ++s) {
    const SampleRow& row = rows[s];
    if (row.skip) continue;
    if (row.edit_begin < 0 || row.edit_end < row.edit_begin || row.edit_end > static_cast<int32_t>(host_edits_.size()))
      fail(ErrorCode::kInvalidArgument, "forward_sample: row {} names edits [{}, {}) of {}", s, row.edit_begin,
           row.edit_end, host_edits_.size());
    cpu::sample_row(logits.data() + s * V, static_cast<int64_t>(V), row, host_edits_.data(), host_results_[s],
                    host_scratch_);
  }
  return host_results_;
}

}  // namespace ft
